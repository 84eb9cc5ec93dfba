/*
 * sampler.c - logits -> next token: penalties, temperature, top-k, top-p, min-p, and a
 * seeded draw, in that order (edgerunner.h documents each stage).
 *
 * Determinism: candidates are ordered by (logit descending, id ascending), a total order,
 * so sorting gives one result everywhere; probabilities are computed in double; the draw
 * uses the integer RNG of rng.c. Cost per token: O(n_vocab) for the copy and the
 * penalties, O(n_vocab log k) for top-k, a full O(n log n) sort only when top-p runs
 * without top-k.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "sampler/sampler.h"

er_sampler_params er_sampler_default_params(void) {
    er_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 1.0f;
    p.top_k = 40;
    p.top_p = 0.9f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    p.frequency_penalty = 0.0f;
    p.presence_penalty = 0.0f;
    p.seed = 0;
    return p;
}

er_sampler_params er_sampler_greedy_params(void) {
    er_sampler_params p = er_sampler_default_params();
    p.temperature = 0.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    return p;
}

static int penalties_on(const er_sampler_params *p) {
    return p->repeat_last_n > 0 && (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
}

int er_sampler_is_greedy(const er_sampler *s) { return s && s->params.temperature == 0.0f && !penalties_on(&s->params); }

er_status er_sampler_create(const er_sampler_params *params, int64_t n_vocab, er_sampler **out) {
    if (!out)
        return er_fail(ER_ERR_INVALID_ARG, "er_sampler_create: NULL out");
    *out = NULL;
    const er_sampler_params p = params ? *params : er_sampler_default_params();
    if (n_vocab <= 0 || n_vocab > INT32_MAX)
        return er_fail(ER_ERR_INVALID_ARG, "er_sampler_create: n_vocab %lld is not in [1, 2^31)", (long long)n_vocab);
    if (!isfinite(p.temperature) || p.temperature < 0)
        return er_fail(ER_ERR_INVALID_ARG, "er_sampler_create: temperature %g is not a finite number >= 0", p.temperature);
    if (!isfinite(p.repeat_penalty) || p.repeat_penalty <= 0)
        return er_fail(ER_ERR_INVALID_ARG, "er_sampler_create: repeat_penalty %g is not a finite number > 0", p.repeat_penalty);
    if (p.repeat_last_n < 0)
        return er_fail(ER_ERR_INVALID_ARG, "er_sampler_create: negative repeat_last_n %d", p.repeat_last_n);
    if (isnan(p.top_p) || isnan(p.min_p) || !isfinite(p.frequency_penalty) || !isfinite(p.presence_penalty))
        return er_fail(ER_ERR_INVALID_ARG, "er_sampler_create: top_p, min_p or a penalty is NaN or infinite");
    er_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return er_fail(ER_ERR_NO_MEMORY, "er_sampler_create: out of memory");
    s->params = p;
    s->n_vocab = n_vocab;
    s->hist = calloc(p.repeat_last_n > 0 ? (size_t)p.repeat_last_n : 1, sizeof *s->hist);
    s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    if (!s->hist || !s->counts || !s->cand) {
        er_sampler_free(s);
        return er_fail(ER_ERR_NO_MEMORY, "er_sampler_create: out of memory for %lld tokens", (long long)n_vocab);
    }
    rng_seed(&s->rng, p.seed);
    *out = s;
    return ER_OK;
}

void er_sampler_free(er_sampler *s) {
    if (!s)
        return;
    free(s->hist);
    free(s->counts);
    free(s->cand);
    free(s);
}

void er_sampler_reset(er_sampler *s) {
    if (!s)
        return;
    s->n_hist = s->hist_next = 0;
    rng_seed(&s->rng, s->params.seed);
}

er_status er_sampler_accept(er_sampler *s, int32_t token) {
    if (!s || token < 0 || token >= s->n_vocab)
        return er_fail(ER_ERR_INVALID_ARG, "er_sampler_accept: %s", s ? "token outside the vocabulary" : "NULL sampler");
    const int64_t cap = s->params.repeat_last_n;
    if (cap == 0)
        return ER_OK;
    s->hist[s->hist_next] = token;
    s->hist_next = (s->hist_next + 1) % cap;
    if (s->n_hist < cap)
        s->n_hist++;
    return ER_OK;
}

/* llama.cpp's penalties sampler, in float arithmetic as there, on one logit */
static float penalized(const er_sampler_params *p, float l, int count) {
    l = l <= 0 ? l * p->repeat_penalty : l / p->repeat_penalty;
    return l - ((float)count * p->frequency_penalty + (float)(count > 0) * p->presence_penalty);
}

/* Penalizes each distinct token of the window once: logits[t] when `logits`, else
 * cand[t].logit (cand[] is still in id order). */
static void penalize(er_sampler *s, float *logits, sampler_cand *cand) {
    const er_sampler_params *p = &s->params;
    if (!penalties_on(p))
        return;
    for (int64_t i = 0; i < s->n_hist; i++)
        s->counts[s->hist[i]]++;
    for (int64_t i = 0; i < s->n_hist; i++) {
        const int32_t t = s->hist[i];
        if (s->counts[t] == 0)
            continue; /* done already */
        if (logits)
            logits[t] = penalized(p, logits[t], s->counts[t]);
        else
            cand[t].logit = penalized(p, cand[t].logit, s->counts[t]);
        s->counts[t] = 0;
    }
}

er_status er_sampler_apply_penalties(er_sampler *s, float *logits) {
    if (!s || !logits)
        return er_fail(ER_ERR_INVALID_ARG, "er_sampler_apply_penalties: NULL %s", s ? "logits" : "sampler");
    penalize(s, logits, NULL);
    return ER_OK;
}

/* a comes before b: larger logit, then smaller id */
static int better(const sampler_cand *a, const sampler_cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_cand(const void *a, const void *b) {
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

/* min-heap on `better` (the root is the worst of the k kept) */
static void sift_down(sampler_cand *h, int64_t k, int64_t i) {
    for (;;) {
        int64_t w = i, l = 2 * i + 1, r = l + 1;
        if (l < k && better(&h[w], &h[l]))
            w = l;
        if (r < k && better(&h[w], &h[r]))
            w = r;
        if (w == i)
            return;
        sampler_cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* Leaves the k best of c[0..n) in c[0..k), sorted best first. */
static void top_k(sampler_cand *c, int64_t n, int64_t k) {
    for (int64_t i = k / 2 - 1; i >= 0; i--)
        sift_down(c, k, i);
    for (int64_t i = k; i < n; i++)
        if (better(&c[i], &c[0])) {
            c[0] = c[i];
            sift_down(c, k, 0);
        }
    qsort(c, (size_t)k, sizeof *c, cmp_cand);
}

er_status er_sampler_sample(er_sampler *s, const float *logits, int32_t *token) {
    if (!s || !logits || !token)
        return er_fail(ER_ERR_INVALID_ARG, "er_sampler_sample: NULL %s", !s ? "sampler" : !logits ? "logits" : "token");
    const er_sampler_params *p = &s->params;
    sampler_cand *c = s->cand;
    if (p->temperature == 0.0f && !penalties_on(p)) {
        /* greedy on the logits as they are: the same choice as below (the first largest,
         * NaN never winning; er_argmax), without copying the whole vocabulary into the
         * candidates (786 KB for a 49k vocabulary, per sequence per step: 1.7% of an 8-way
         * server's samples) */
        const int32_t best = er_argmax(logits, s->n_vocab);
        if (!(logits[best] > -INFINITY))
            return er_fail(ER_ERR_INVALID_ARG, "er_sampler_sample: no logit is larger than -inf");
        *token = best;
        return ER_OK;
    }
    for (int64_t i = 0; i < s->n_vocab; i++) {
        c[i].logit = logits[i];
        c[i].id = (int32_t)i;
    }
    penalize(s, NULL, c);
    if (p->temperature == 0.0f) {
        int64_t best = 0;
        for (int64_t i = 1; i < s->n_vocab; i++)
            if (c[i].logit > c[best].logit)
                best = i;
        if (!(c[best].logit > -INFINITY))
            return er_fail(ER_ERR_INVALID_ARG, "er_sampler_sample: no logit is larger than -inf");
        *token = (int32_t)best;
        return ER_OK;
    }
    int64_t n = 0; /* keep the candidates with probability > 0 (NaN fails the test too) */
    for (int64_t i = 0; i < s->n_vocab; i++)
        if (c[i].logit > -INFINITY)
            c[n++] = c[i];
    if (n == 0)
        return er_fail(ER_ERR_INVALID_ARG, "er_sampler_sample: no logit is larger than -inf");
    int sorted = 0;
    if (p->top_k > 0 && p->top_k < n) {
        top_k(c, n, p->top_k);
        n = p->top_k;
        sorted = 1;
    }
    if (p->top_p < 1.0f && !sorted) {
        qsort(c, (size_t)n, sizeof *c, cmp_cand);
        sorted = 1;
    }
    /* softmax(logit / T), unnormalized; +inf logits share all the mass */
    double lmax = c[0].logit;
    for (int64_t i = 1; i < n; i++)
        lmax = c[i].logit > lmax ? c[i].logit : lmax;
    double total = 0;
    for (int64_t i = 0; i < n; i++) {
        c[i].p = isinf(lmax) ? (c[i].logit == lmax) : exp(((double)c[i].logit - lmax) / p->temperature);
        total += c[i].p;
    }
    if (p->top_p < 1.0f) {
        double cum = 0;
        const double want = (double)p->top_p * total;
        for (int64_t i = 0; i < n; i++) {
            cum += c[i].p;
            if (cum >= want) {
                n = i + 1;
                break;
            }
        }
        total = cum;
    }
    if (p->min_p > 0.0f) {
        double pmax = 0;
        for (int64_t i = 0; i < n; i++)
            pmax = c[i].p > pmax ? c[i].p : pmax;
        const double threshold = (double)p->min_p * pmax;
        int64_t m = 0;
        total = 0;
        for (int64_t i = 0; i < n; i++)
            if (c[i].p >= threshold) {
                c[m++] = c[i];
                total += c[i].p;
            }
        n = m;
    }
    const double u = rng_uniform(&s->rng) * total;
    double cum = 0;
    for (int64_t i = 0; i < n; i++) {
        cum += c[i].p;
        if (u < cum) {
            *token = c[i].id;
            return ER_OK;
        }
    }
    *token = c[n - 1].id; /* rounding: u within an ulp of total */
    return ER_OK;
}
