/*
 * test_sampler.c - the sampler's stages against an independent reference, the RNG's
 * pinned stream, the text facade, API misuse, and two threads on one model.
 *
 * Statistics: for fixed logits, 200k draws per case are compared with the distribution
 * a naive reference (full sort, softmax in double, then each truncation, renormalized)
 * predicts; Pearson's chi-square, bins with expected count < 5 pooled, must have p > 0.001,
 * and no token of probability 0 may ever be drawn. ER_SAMPLER_STATS=1 prints each case's
 * statistic.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "edgerunner.h"
#include "sampler/rng.h"
#include "test.h"

enum { N_DRAWS = 200000, MAX_V = 64 };

/* ---- reference distribution ------------------------------------------------------------ */

static void reference(const er_sampler_params *p, const float *logits, int n, double *q) {
    int idx[MAX_V], m = 0;
    for (int i = 0; i < n; i++) {
        q[i] = 0;
        if (logits[i] > -INFINITY)
            idx[m++] = i;
    }
    for (int i = 0; i < m; i++) /* selection sort: logit descending, id ascending */
        for (int j = i + 1; j < m; j++)
            if (logits[idx[j]] > logits[idx[i]] || (logits[idx[j]] == logits[idx[i]] && idx[j] < idx[i])) {
                int t = idx[i];
                idx[i] = idx[j];
                idx[j] = t;
            }
    if (p->top_k > 0 && p->top_k < m)
        m = p->top_k;
    double w[MAX_V], sum = 0;
    for (int i = 0; i < m; i++)
        sum += w[i] = exp(((double)logits[idx[i]] - logits[idx[0]]) / p->temperature);
    for (int i = 0; i < m; i++)
        w[i] /= sum;
    if (p->top_p < 1) {
        double cum = 0;
        for (int i = 0; i < m; i++)
            if ((cum += w[i]) >= p->top_p) {
                m = i + 1;
                break;
            }
    }
    for (int i = 0; i < m; i++)
        if (w[i] >= p->min_p * w[0])
            q[idx[i]] = w[i];
    sum = 0;
    for (int i = 0; i < n; i++)
        sum += q[i];
    for (int i = 0; i < n; i++)
        q[i] /= sum;
}

/* regularized upper incomplete gamma Q(a, x): the chi-square p-value is Q(df/2, chi2/2) */
static double gamma_q(double a, double x) {
    if (x <= 0)
        return 1;
    const double lg = lgamma(a);
    if (x < a + 1) { /* series for P */
        double term = 1 / a, sum = term;
        for (int n = 1; n < 1000 && fabs(term) > 1e-15 * fabs(sum); n++)
            sum += term *= x / (a + n);
        return 1 - sum * exp(-x + a * log(x) - lg);
    }
    double b = x + 1 - a, c = 1e300, d = 1 / b, h = d; /* continued fraction for Q */
    for (int i = 1; i < 1000; i++) {
        const double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        d = fabs(d) < 1e-300 ? 1e-300 : d;
        c = b + an / c;
        c = fabs(c) < 1e-300 ? 1e-300 : c;
        d = 1 / d;
        const double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15)
            break;
    }
    return exp(-x + a * log(x) - lg) * h;
}

static void check_distribution(const char *name, const er_sampler_params *p, const float *logits, int n) {
    double q[MAX_V];
    long count[MAX_V] = {0};
    reference(p, logits, n, q);
    er_sampler *s = NULL;
    CHECK(er_sampler_create(p, n, &s) == ER_OK, "%s: create: %s", name, er_last_error());
    if (!s)
        return;
    int bad = 0;
    for (int d = 0; d < N_DRAWS; d++) {
        int32_t t = -1;
        if (er_sampler_sample(s, logits, &t) != ER_OK || t < 0 || t >= n) {
            bad++;
            continue;
        }
        count[t]++;
    }
    er_sampler_free(s);
    double chi2 = 0, pooled_e = 0, pooled_o = 0;
    int bins = 0, impossible = 0;
    for (int i = 0; i < n; i++) {
        const double e = q[i] * N_DRAWS;
        if (q[i] == 0) {
            impossible += count[i] != 0;
        } else if (e < 5) {
            pooled_e += e;
            pooled_o += (double)count[i];
        } else {
            chi2 += (count[i] - e) * (count[i] - e) / e;
            bins++;
        }
    }
    if (pooled_e > 0) {
        chi2 += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
        bins++;
    }
    const int df = bins - 1;
    const double pv = df > 0 ? gamma_q(df / 2.0, chi2 / 2) : 1.0;
    if (getenv("ER_SAMPLER_STATS"))
        printf("  sampler %-34s chi2 = %8.2f  df = %2d  p = %.4f\n", name, chi2, df, pv);
    CHECK(!bad && !impossible, "%s: %d failed draws, %d draws of probability-0 tokens", name, bad, impossible);
    CHECK(pv > 0.001, "%s: chi2 %.2f with %d degrees of freedom, p = %.2g", name, chi2, df, pv);
    if (df == 0) /* one possible token: every draw is it */
        for (int i = 0; i < n; i++)
            CHECK(q[i] == 0 || count[i] == N_DRAWS, "%s: token %d drawn %ld times of %d", name, i, count[i], N_DRAWS);
}

static er_sampler_params sampling(float temp, int32_t k, float top_p, float min_p) {
    er_sampler_params p = er_sampler_default_params();
    p.temperature = temp;
    p.top_k = k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = 12345;
    return p;
}

static void test_distributions(void) {
    float l[24], eq[16], neg[16];
    er_rng r;
    rng_seed(&r, 7);
    for (int i = 0; i < 24; i++)
        l[i] = (float)(4 * rng_uniform(&r) - 2);
    for (int i = 0; i < 16; i++) {
        eq[i] = 0.5f;
        neg[i] = i % 3 == 0 ? -INFINITY : (float)(i % 5) - 2;
    }
    er_sampler_params p;
    check_distribution("softmax T=1", (p = sampling(1, 0, 1, 0), &p), l, 24);
    check_distribution("softmax T=0.5", (p = sampling(0.5f, 0, 1, 0), &p), l, 24);
    check_distribution("softmax T=2.5", (p = sampling(2.5f, 0, 1, 0), &p), l, 24);
    check_distribution("top-k 5", (p = sampling(1, 5, 1, 0), &p), l, 24);
    check_distribution("top-k 1", (p = sampling(1, 1, 1, 0), &p), l, 24);
    check_distribution("top-k 1000 > vocab", (p = sampling(1, 1000, 1, 0), &p), l, 24);
    check_distribution("top-p 0.7", (p = sampling(1, 0, 0.7f, 0), &p), l, 24);
    check_distribution("top-p 1 (off)", (p = sampling(1, 0, 1.0f, 0), &p), l, 24);
    check_distribution("top-p 0 (one token)", (p = sampling(1, 0, 0.0f, 0), &p), l, 24);
    check_distribution("min-p 0.2", (p = sampling(1, 0, 1, 0.2f), &p), l, 24);
    check_distribution("T=0.8 top-k 10 top-p 0.9 min-p 0.05", (p = sampling(0.8f, 10, 0.9f, 0.05f), &p), l, 24);
    check_distribution("defaults (T=1 k=40 p=0.9)", (p = sampling(1, 40, 0.9f, 0), &p), l, 24);
    check_distribution("all logits equal", (p = sampling(1, 0, 1, 0), &p), eq, 16);
    check_distribution("all equal, top-k 3 (ids 0-2)", (p = sampling(1, 3, 1, 0), &p), eq, 16);
    check_distribution("all equal, top-p 0.5", (p = sampling(1, 0, 0.5f, 0), &p), eq, 16);
    check_distribution("-inf logits", (p = sampling(1, 0, 1, 0), &p), neg, 16);
    check_distribution("-inf logits, top-k 20 > finite", (p = sampling(1.3f, 20, 0.95f, 0.01f), &p), neg, 16);

    /* penalties then sampling: the reference on logits penalized by hand */
    er_sampler_params pp = sampling(1, 0, 1, 0);
    pp.repeat_penalty = 1.5f;
    pp.frequency_penalty = 0.25f;
    pp.presence_penalty = 0.5f;
    pp.repeat_last_n = 4;
    const int32_t hist[6] = {9, 3, 5, 5, 2, 5}; /* window of 4: 5, 5, 2, 5 */
    float want[24];
    memcpy(want, l, sizeof want);
    want[5] = (want[5] <= 0 ? want[5] * 1.5f : want[5] / 1.5f) - (3 * 0.25f + 0.5f);
    want[2] = (want[2] <= 0 ? want[2] * 1.5f : want[2] / 1.5f) - (1 * 0.25f + 0.5f);
    er_sampler *s = NULL;
    CHECK(er_sampler_create(&pp, 24, &s) == ER_OK, "create: %s", er_last_error());
    for (int i = 0; s && i < 6; i++)
        er_sampler_accept(s, hist[i]);
    float got[24];
    memcpy(got, l, sizeof got);
    CHECK(s && er_sampler_apply_penalties(s, got) == ER_OK && !memcmp(got, want, sizeof got),
          "penalties: token 5 %g (want %g), token 2 %g (want %g)", got[5], want[5], got[2], want[2]);
    double q[24];
    reference(&pp, want, 24, q);
    long count[24] = {0};
    for (int d = 0; s && d < N_DRAWS; d++) {
        int32_t t = 0;
        er_sampler_sample(s, l, &t);
        count[t]++;
    }
    double chi2 = 0;
    for (int i = 0; i < 24; i++)
        chi2 += (count[i] - q[i] * N_DRAWS) * (count[i] - q[i] * N_DRAWS) / (q[i] * N_DRAWS);
    const double pv = gamma_q(23 / 2.0, chi2 / 2);
    if (getenv("ER_SAMPLER_STATS"))
        printf("  sampler %-34s chi2 = %8.2f  df = %2d  p = %.4f\n", "penalties + softmax", chi2, 23, pv);
    CHECK(pv > 0.001, "penalties + softmax: chi2 %.2f, p = %.2g", chi2, pv);
    er_sampler_free(s);

    /* greedy: the argmax of the penalized logits, first on ties; no RNG */
    er_sampler_params g = er_sampler_greedy_params();
    CHECK(er_sampler_create(&g, 16, &s) == ER_OK && er_sampler_is_greedy(s), "greedy sampler");
    int32_t t = -1;
    CHECK(er_sampler_sample(s, eq, &t) == ER_OK && t == 0, "greedy on equal logits gave %d", t);
    CHECK(er_sampler_sample(s, neg, &t) == ER_OK && t == 4, "greedy with -inf gave %d", t);
    er_sampler_free(s);
    g.repeat_penalty = 10;
    CHECK(er_sampler_create(&g, 16, &s) == ER_OK && !er_sampler_is_greedy(s), "greedy + penalty");
    er_sampler_accept(s, 4);
    CHECK(er_sampler_sample(s, neg, &t) == ER_OK && t == 14, "greedy after penalizing 4 gave %d", t);
    er_sampler_free(s);
}

static void test_rng(void) {
    static const uint64_t want0[3] = {0x99ec5f36cb75f2b4ull, 0xbf6e1f784956452aull, 0x1a5f849d4933e6e0ull};
    static const uint64_t want42[3] = {0x15780b2e0c2ec716ull, 0x6104d9866d113a7eull, 0xae17533239e499a1ull};
    er_rng a, b;
    rng_seed(&a, 0);
    rng_seed(&b, 42);
    for (int i = 0; i < 3; i++) {
        const uint64_t x = rng_next(&a), y = rng_next(&b);
        CHECK(x == want0[i] && y == want42[i], "xoshiro256** output %d: %llx, %llx", i, (unsigned long long)x,
              (unsigned long long)y);
    }
    rng_seed(&a, 5);
    for (int i = 0; i < 1000; i++) {
        const double u = rng_uniform(&a);
        if (!(u >= 0 && u < 1)) {
            CHECK(0, "uniform draw %g outside [0, 1)", u);
            break;
        }
    }
    /* the same seed, the same draws; reset restarts them */
    float l[8] = {1, 2, 3, 4, 4, 3, 2, 1};
    er_sampler_params p = sampling(1, 0, 1, 0);
    er_sampler *s1 = NULL, *s2 = NULL;
    er_sampler_create(&p, 8, &s1);
    er_sampler_create(&p, 8, &s2);
    int32_t first[64], same = 1;
    for (int i = 0; s1 && s2 && i < 64; i++) {
        int32_t x, y;
        er_sampler_sample(s1, l, &x);
        er_sampler_sample(s2, l, &y);
        first[i] = x;
        same &= x == y;
    }
    er_sampler_reset(s1);
    for (int i = 0; s1 && i < 64; i++) {
        int32_t x;
        er_sampler_sample(s1, l, &x);
        same &= x == first[i];
    }
    CHECK(s1 && s2 && same, "two samplers of one seed, or a reset one, drew differently");
    er_sampler_free(s1);
    er_sampler_free(s2);
}

static void test_misuse(void) {
    er_sampler *s = NULL;
    er_sampler_params p = er_sampler_default_params();
    float l[4] = {-INFINITY, -INFINITY, NAN, -INFINITY};
    int32_t t;
    CHECK(er_sampler_create(&p, 0, &s) == ER_ERR_INVALID_ARG && !s, "n_vocab 0");
    CHECK(er_sampler_create(&p, 4, NULL) == ER_ERR_INVALID_ARG, "NULL out");
    p.temperature = -1;
    CHECK(er_sampler_create(&p, 4, &s) == ER_ERR_INVALID_ARG, "negative temperature");
    p = er_sampler_default_params();
    p.repeat_penalty = 0;
    CHECK(er_sampler_create(&p, 4, &s) == ER_ERR_INVALID_ARG, "repeat_penalty 0");
    p = er_sampler_default_params();
    p.repeat_last_n = -2;
    CHECK(er_sampler_create(&p, 4, &s) == ER_ERR_INVALID_ARG, "negative repeat_last_n");
    p.repeat_last_n = 3;
    CHECK(er_sampler_create(&p, 4, &s) == ER_OK, "create");
    CHECK(er_sampler_sample(s, l, &t) == ER_ERR_INVALID_ARG, "no finite logit");
    CHECK(er_sampler_sample(NULL, l, &t) == ER_ERR_INVALID_ARG && er_sampler_sample(s, NULL, &t) == ER_ERR_INVALID_ARG &&
              er_sampler_sample(s, l, NULL) == ER_ERR_INVALID_ARG,
          "NULL sample arguments");
    CHECK(er_sampler_accept(s, 4) == ER_ERR_INVALID_ARG && er_sampler_accept(s, -1) == ER_ERR_INVALID_ARG &&
              er_sampler_accept(NULL, 0) == ER_ERR_INVALID_ARG,
          "accept out of range");
    CHECK(er_sampler_apply_penalties(s, NULL) == ER_ERR_INVALID_ARG, "NULL logits");
    er_sampler_free(s);
    er_sampler_free(NULL);
    er_sampler_reset(NULL);
}

/* ---- generation on a model -------------------------------------------------------------- */

typedef struct job {
    er_model *model;
    const char *prompt;
    uint64_t seed;
    char *text;
    er_status st;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    er_context_params cp = er_context_default_params();
    cp.n_threads = 2; /* each context's own workers too */
    er_context *ctx = NULL;
    er_text_params tp = er_text_default_params();
    tp.max_tokens = 64;
    tp.sampling.seed = j->seed;
    tp.sampling.repeat_penalty = 1.1f;
    j->st = er_context_create(j->model, &cp, &ctx);
    if (j->st == ER_OK)
        j->st = er_generate_text(ctx, j->prompt, &tp, &j->text, NULL);
    er_context_free(ctx);
    return NULL;
}

typedef struct pieces {
    char buf[4096];
    size_t len;
    int n, stop_after;
} pieces;

static int collect_piece(const char *text, int64_t len, void *user) {
    pieces *p = user;
    if (p->len + (size_t)len < sizeof p->buf) {
        memcpy(p->buf + p->len, text, (size_t)len);
        p->len += (size_t)len;
        p->buf[p->len] = 0;
    }
    return ++p->n == p->stop_after;
}

typedef struct ids {
    int32_t v[256];
    int n;
} ids;

static int collect_id(int32_t t, void *user) {
    ids *x = user;
    if (x->n < 256)
        x->v[x->n++] = t;
    return 0;
}

static void test_generation(void) {
    er_model *model = NULL;
    er_context *ctx = NULL;
    CHECK(er_model_open(NULL, &model) == ER_ERR_INVALID_ARG, "er_model_open(NULL)");
    CHECK(er_model_open(TEST_DATA "stories260K.gguf", &model) == ER_OK, "open: %s", er_last_error());
    if (!model)
        return;
    er_context_params cp = er_context_default_params();
    cp.n_threads = 1;
    CHECK(er_context_create(model, &cp, &ctx) == ER_OK, "context: %s", er_last_error());
    int64_t tl = -1;
    (void)er_model_chat_template(model, &tl);
    CHECK(tl >= 0 && er_model_chat_template(NULL, NULL) == NULL, "chat template accessor");

    /* er_generate with a greedy sampler, or top-k 1, gives er_generate_greedy's tokens */
    const int32_t prompt[3] = {1, 403, 407};
    er_generate_params gp = {40, 0};
    ids a = {{0}, 0}, b = {{0}, 0}, c = {{0}, 0};
    er_sampler_params sp = er_sampler_greedy_params();
    er_sampler *s = NULL;
    er_generate_greedy(ctx, prompt, 3, &gp, collect_id, &a, NULL);
    er_context_rewind(ctx, 0);
    er_sampler_create(&sp, er_model_n_vocab(model), &s);
    CHECK(er_generate(ctx, prompt, 3, &gp, s, collect_id, &b, NULL) == ER_OK, "er_generate greedy");
    er_sampler_free(s);
    er_context_rewind(ctx, 0);
    sp = sampling(1, 1, 1, 0);
    er_sampler_create(&sp, er_model_n_vocab(model), &s);
    CHECK(er_generate(ctx, prompt, 3, &gp, s, collect_id, &c, NULL) == ER_OK, "er_generate top-k 1");
    er_sampler_free(s);
    CHECK(a.n > 0 && a.n == b.n && a.n == c.n && !memcmp(a.v, b.v, sizeof a.v[0] * (size_t)a.n) &&
              !memcmp(a.v, c.v, sizeof a.v[0] * (size_t)a.n),
          "greedy %d tokens, er_generate %d, top-k 1 %d", a.n, b.n, c.n);

    /* text: generate == the streamed pieces; stop strings cut exactly there */
    er_text_params tp = er_text_default_params();
    tp.max_tokens = 80;
    tp.sampling.seed = 2024;
    char *text = NULL;
    int64_t len = 0;
    er_context_rewind(ctx, 0);
    CHECK(er_generate_text(ctx, "Once upon a time", &tp, &text, &len) == ER_OK && text && (int64_t)strlen(text) == len,
          "generate_text: %s", er_last_error());
    pieces pc = {{0}, 0, 0, 0};
    er_context_rewind(ctx, 0);
    CHECK(er_stream_text(ctx, "Once upon a time", &tp, collect_piece, &pc, NULL) == ER_OK, "stream_text");
    CHECK(text && pc.n > 1 && !strcmp(pc.buf, text), "streamed '%s' but generated '%s'", pc.buf, text);
    if (text && len > 24) {
        char stop[5];
        memcpy(stop, text + 20, 4);
        stop[4] = 0;
        const char *stops[2] = {"zzzzqqq", stop};
        const size_t cut = (size_t)(strstr(text, stop) - text);
        er_text_params ts = tp;
        ts.stop = stops;
        ts.n_stop = 2;
        pieces ps = {{0}, 0, 0, 0};
        er_context_rewind(ctx, 0);
        CHECK(er_stream_text(ctx, "Once upon a time", &ts, collect_piece, &ps, NULL) == ER_OK && ps.len == cut &&
                  !memcmp(ps.buf, text, cut),
              "stop '%s': got '%s', want the first %zu bytes of '%s'", stop, ps.buf, cut, text);
    }
    er_free(text);
    pieces one = {{0}, 0, 0, 1};
    int64_t n_gen = 0;
    er_context_rewind(ctx, 0);
    CHECK(er_stream_text(ctx, "Once upon a time", &tp, collect_piece, &one, &n_gen) == ER_OK && one.n == 1 && n_gen < 5,
          "the callback stops generation: %d pieces, %lld tokens", one.n, (long long)n_gen);

    /* misuse: errors, never a crash */
    er_context_rewind(ctx, 0);
    CHECK(er_stream_text(NULL, "x", NULL, NULL, NULL, NULL) == ER_ERR_INVALID_ARG, "NULL context");
    CHECK(er_stream_text(ctx, NULL, NULL, NULL, NULL, NULL) == ER_ERR_INVALID_ARG, "NULL prompt");
    CHECK(er_generate_text(ctx, "x", NULL, NULL, NULL) == ER_ERR_INVALID_ARG, "NULL text");
    er_text_params bad = tp;
    bad.n_stop = 1;
    CHECK(er_stream_text(ctx, "x", &bad, NULL, NULL, NULL) == ER_ERR_INVALID_ARG, "n_stop 1, stop NULL");
    const char *empty[1] = {""};
    bad.stop = empty;
    CHECK(er_stream_text(ctx, "x", &bad, NULL, NULL, NULL) == ER_ERR_INVALID_ARG, "empty stop string");
    bad = tp;
    bad.sampling.temperature = -1;
    CHECK(er_stream_text(ctx, "x", &bad, NULL, NULL, NULL) == ER_ERR_INVALID_ARG, "bad sampling");
    CHECK(er_generate(ctx, prompt, 3, NULL, NULL, NULL, NULL, NULL) == ER_ERR_INVALID_ARG, "NULL params");
    CHECK(er_generate(ctx, NULL, 3, &gp, NULL, NULL, NULL, NULL) == ER_ERR_INVALID_ARG, "NULL prompt ids");
    CHECK(er_generate(ctx, prompt, 0, &gp, NULL, NULL, NULL, NULL) == ER_ERR_INVALID_ARG, "no prompt, no logits");
    er_sampler_create(NULL, 7, &s);
    CHECK(er_generate(ctx, prompt, 3, &gp, s, NULL, NULL, NULL) == ER_ERR_INVALID_ARG, "sampler of another vocab size");
    er_sampler_free(s);
    er_context *small = NULL;
    cp.n_ctx = 8;
    CHECK(er_context_create(model, &cp, &small) == ER_OK, "small context");
    char *t2 = NULL;
    CHECK(er_generate_text(small, "Once upon a time there was a little girl named Lily", &tp, &t2, NULL) ==
                  ER_ERR_CONTEXT_FULL &&
              !t2 && er_context_n_past(small) == 0,
          "a prompt longer than the context");
    /* generation stops, without error, when the context fills */
    CHECK(er_generate_text(small, "Once", &tp, &t2, NULL) == ER_OK && er_context_n_past(small) <= 8, "full context");
    er_free(t2);
    er_context_free(small);
    er_context_free(ctx);

    /* two threads, two contexts, one model == one after the other */
    job seq[2] = {{model, "Once upon a time", 11, NULL, ER_OK}, {model, "The little dog", 22, NULL, ER_OK}};
    job par[2] = {seq[0], seq[1]};
    run_job(&seq[0]);
    run_job(&seq[1]);
    pthread_t th[2];
    int started[2];
    for (int i = 0; i < 2; i++)
        started[i] = pthread_create(&th[i], NULL, run_job, &par[i]) == 0;
    for (int i = 0; i < 2; i++)
        if (started[i])
            pthread_join(th[i], NULL);
        else
            run_job(&par[i]);
    for (int i = 0; i < 2; i++)
        CHECK(seq[i].st == ER_OK && par[i].st == ER_OK && seq[i].text && par[i].text && strlen(seq[i].text) > 20 &&
                  !strcmp(seq[i].text, par[i].text),
              "thread %d: '%s' alone, '%s' beside another", i, seq[i].text, par[i].text);
    CHECK(seq[0].text && seq[1].text && strcmp(seq[0].text, seq[1].text), "two prompts gave one text");
    for (int i = 0; i < 2; i++) {
        er_free(seq[i].text);
        er_free(par[i].text);
    }
    er_model_free(model);
}

/* er_stream_ids's token hook: each token is the argmax of the logits it comes with
 * (greedy), and stop_after > 0 ends generation after that many tokens. */
typedef struct hooked {
    int n, not_argmax, stop_after;
} hooked;

static int check_hook(int32_t token, const float *logits, int64_t n_vocab, void *user) {
    hooked *h = user;
    h->not_argmax += !logits || er_argmax(logits, n_vocab) != token;
    return ++h->n == h->stop_after;
}

/* er_tokenize_prompt and er_stream_ids: the counts and the stop reason a server reports. */
static void test_stream_ids(void) {
    er_model *model = NULL;
    er_context *ctx = NULL, *small = NULL;
    CHECK(er_model_open(TEST_DATA "stories260K.gguf", &model) == ER_OK, "open: %s", er_last_error());
    if (!model)
        return;
    er_context_params cp = er_context_default_params();
    cp.n_threads = 1;
    CHECK(er_context_create(model, &cp, &ctx) == ER_OK, "context: %s", er_last_error());
    cp.n_ctx = 12;
    CHECK(er_context_create(model, &cp, &small) == ER_OK, "small context: %s", er_last_error());
    const er_vocab *voc = er_model_vocab(model);
    int32_t *p1 = NULL, *p2 = NULL;
    int64_t n1 = 0, n2 = 0;
    /* "<s>" is stories260K's BOS: a text that begins with it gets no second one */
    CHECK(er_tokenize_prompt(voc, "Once upon a time", 16, ER_TOKENIZE_ADD_SPECIAL, &p1, &n1) == ER_OK && n1 > 2 &&
              p1[0] == er_vocab_bos(voc),
          "tokenize_prompt: %s", er_last_error());
    CHECK(er_tokenize_prompt(voc, "<s>Once upon a time", 19, ER_TOKENIZE_ADD_SPECIAL | ER_TOKENIZE_PARSE_SPECIAL, &p2,
                             &n2) == ER_OK &&
              n2 == n1 && p1 && p2 && !memcmp(p1, p2, (size_t)n1 * sizeof *p1),
          "a text that begins with BOS: %lld ids, want %lld", (long long)n2, (long long)n1);
    CHECK(er_tokenize_prompt(voc, "x", 1, 0, NULL, &n2) == ER_ERR_INVALID_ARG, "NULL ids");
    er_text_params tp = er_text_default_params();
    tp.sampling = er_sampler_greedy_params();
    tp.max_tokens = 20;
    tp.ignore_eos = 1;
    er_text_result r;
    pieces plain = {{0}, 0, 0, 0}, hooked_text = {{0}, 0, 0, 0};
    CHECK(ctx && er_stream_ids(ctx, p1, n1, &tp, collect_piece, &plain, &r) == ER_OK && r.n_prompt == n1 &&
              r.n_generated == 20 && r.stop == ER_STOP_LENGTH,
          "max_tokens: %lld tokens, stop %d: %s", (long long)r.n_generated, (int)r.stop, er_last_error());
    hooked h = {0, 0, 0};
    tp.on_token = check_hook;
    tp.on_token_user = &h;
    er_context_rewind(ctx, 0);
    CHECK(ctx && er_stream_ids(ctx, p1, n1, &tp, collect_piece, &hooked_text, &r) == ER_OK && h.n == 20 &&
              !h.not_argmax && !strcmp(plain.buf, hooked_text.buf),
          "the hook saw %d tokens, %d not the argmax of their logits; '%s' vs '%s'", h.n, h.not_argmax,
          hooked_text.buf, plain.buf);
    hooked stop3 = {0, 0, 3};
    tp.on_token_user = &stop3;
    er_context_rewind(ctx, 0);
    CHECK(ctx && er_stream_ids(ctx, p1, n1, &tp, NULL, NULL, &r) == ER_OK && r.n_generated == 3 &&
              r.stop == ER_STOP_CALLBACK,
          "the hook stops: %lld tokens, stop %d", (long long)r.n_generated, (int)r.stop);
    tp.on_token = NULL;
    if (plain.len > 12) {
        char stop[4] = {plain.buf[8], plain.buf[9], plain.buf[10], 0};
        const char *stops[1] = {stop};
        tp.stop = stops;
        tp.n_stop = 1;
        pieces cut = {{0}, 0, 0, 0};
        er_context_rewind(ctx, 0);
        CHECK(ctx && er_stream_ids(ctx, p1, n1, &tp, collect_piece, &cut, &r) == ER_OK && r.stop == ER_STOP_STRING &&
                  r.stop_index == 0 && !strstr(cut.buf, stop) && r.n_generated < 20,
              "stop string '%s': '%s', stop %d", stop, cut.buf, (int)r.stop);
        tp.n_stop = 0;
    }
    tp.max_tokens = 0;
    CHECK(small && er_stream_ids(small, p1, n1, &tp, NULL, NULL, &r) == ER_OK && r.stop == ER_STOP_CONTEXT &&
              r.n_prompt + r.n_generated == 12 + 1, /* the last token is chosen, never fed */
          "a full context: %lld + %lld tokens, stop %d", (long long)r.n_prompt, (long long)r.n_generated, (int)r.stop);
    er_context_rewind(small, 0);
    int32_t long_prompt[13] = {1};
    CHECK(small && er_stream_ids(small, long_prompt, 13, &tp, NULL, NULL, &r) == ER_ERR_CONTEXT_FULL &&
              strstr(er_last_error(), "13") && strstr(er_last_error(), "12") && er_context_n_past(small) == 0 &&
              r.stop == ER_STOP_NONE,
          "a prompt longer than the context: %s", er_last_error());
    CHECK(er_stream_ids(NULL, p1, n1, &tp, NULL, NULL, &r) == ER_ERR_INVALID_ARG, "NULL context");
    er_free(p1);
    er_free(p2);
    er_context_free(small);
    er_context_free(ctx);
    er_model_free(model);
}

void test_sampler(void) {
    test_rng();
    test_misuse();
    test_distributions();
    test_generation();
    test_stream_ids();
}
