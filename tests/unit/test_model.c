/*
 * test_model.c - the model and context API on the real stories260K.gguf: loading,
 * batched prefill against token-by-token decode, batch sizes, rewind, the context
 * limit, and misuse of the API. (Correctness against independent references is in
 * tests/oracle/.)
 */
#define _GNU_SOURCE /* sched_setaffinity */

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cpus.h"
#include "edgerunner.h"
#include "io/gguf_write.h"
#include "model/model.h"
#include "test.h"

#define STORIES TEST_DATA "stories260K.gguf"

static const int32_t prompt[] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376}; /* BOS "Once upon a time..." */
enum { N_PROMPT = sizeof prompt / sizeof prompt[0] };

static er_context *new_context(er_model *m, int64_t n_ctx, int64_t n_batch) {
    er_context_params cp = er_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    er_context *ctx = NULL;
    er_status st = er_context_create(m, &cp, &ctx);
    CHECK(st == ER_OK, "context: %s", er_last_error());
    return ctx;
}

static void test_load(er_model *m) {
    const model_config *c = &m->view.config;
    CHECK(!strcmp(er_model_arch(m), "llama"), "arch %s", er_model_arch(m));
    CHECK(c->n_layer == 5 && c->n_embd == 64 && c->n_head == 8 && c->n_head_kv == 4 && c->n_ff == 172 &&
              c->n_vocab == 512 && c->head_dim == 8,
          "config %lld layers, %lld embd, %lld/%lld heads, ff %lld, vocab %lld", (long long)c->n_layer,
          (long long)c->n_embd, (long long)c->n_head, (long long)c->n_head_kv, (long long)c->n_ff, (long long)c->n_vocab);
    CHECK(er_model_bos(m) == 1 && er_model_eos(m) == 2, "bos %d eos %d", er_model_bos(m), er_model_eos(m));
    char piece[16];
    int64_t n = er_token_to_piece(m, 403, piece, sizeof piece);
    CHECK(n == 5 && !memcmp(piece, " Once", 5), "piece of 403 is ' Once'");
    CHECK(er_token_to_piece(m, 512, piece, sizeof piece) == -1, "piece of an id out of range");
    CHECK(er_token_to_piece(m, 403, piece, -5) == -1 && er_token_to_piece(m, 403, NULL, -1) == -1,
          "a negative size is refused with -1, not returned as a length");
}

/* Prefill of the whole prompt, in batches of any size, and one token at a time all
 * give bit-identical logits. */
static void test_prefill_equals_decode(er_model *m) {
    const int64_t n_vocab = er_model_n_vocab(m);
    float *all = malloc((size_t)(N_PROMPT * n_vocab) * sizeof *all);
    er_context *ctx = new_context(m, 64, 0);
    CHECK(er_context_decode(ctx, prompt, N_PROMPT, all) == ER_OK, "prefill: %s", er_last_error());
    CHECK(!memcmp(er_context_logits(ctx), all + (N_PROMPT - 1) * n_vocab, (size_t)n_vocab * sizeof(float)),
          "last logits kept");
    int finite = 1;
    for (int64_t i = 0; i < N_PROMPT * n_vocab; i++)
        finite &= isfinite(all[i]) != 0;
    CHECK(finite, "logits are finite");

    er_context *one = new_context(m, 64, 0);
    er_context *batched = new_context(m, 64, 3);
    float *row = malloc((size_t)(N_PROMPT * n_vocab) * sizeof *row);
    int same_one = 1;
    for (int i = 0; i < N_PROMPT; i++) {
        er_context_decode(one, &prompt[i], 1, NULL);
        same_one &= !memcmp(er_context_logits(one), all + i * n_vocab, (size_t)n_vocab * sizeof(float));
    }
    CHECK(same_one, "token-by-token decode gives the prefill's logits");
    CHECK(er_context_decode(batched, prompt, N_PROMPT, row) == ER_OK && !memcmp(row, all, (size_t)(N_PROMPT * n_vocab) * sizeof(float)),
          "n_batch = 3 gives the same logits");

    /* rewind to 4 and decode the rest again */
    CHECK(er_context_rewind(ctx, 4) == ER_OK && er_context_n_past(ctx) == 4, "rewind");
    CHECK(er_context_logits(ctx) == NULL, "no logits right after a rewind");
    CHECK(er_context_decode(ctx, prompt + 4, N_PROMPT - 4, NULL) == ER_OK &&
              !memcmp(er_context_logits(ctx), all + (N_PROMPT - 1) * n_vocab, (size_t)n_vocab * sizeof(float)),
          "decode after rewind reproduces the logits");
    er_context_free(ctx);
    er_context_free(one);
    er_context_free(batched);
    free(all);
    free(row);
}

typedef struct collected {
    int32_t ids[64];
    int n;
} collected;

static int collect(int32_t token, void *user) {
    collected *c = user;
    c->ids[c->n++] = token;
    return c->n == 5; /* stop after 5 through the callback */
}

static void test_generation(er_model *m) {
    er_context *ctx = new_context(m, 8, 0);
    collected got = {{0}, 0};
    er_generate_params gp = {64, 1};
    int64_t n_gen = -1;
    CHECK(er_generate_greedy(ctx, prompt, 1, &gp, collect, &got, &n_gen) == ER_OK && n_gen == 5 && got.n == 5,
          "callback stops generation (%lld)", (long long)n_gen);
    er_context_rewind(ctx, 0);
    n_gen = -1;
    CHECK(er_generate_greedy(ctx, prompt, 3, &gp, NULL, NULL, &n_gen) == ER_OK && n_gen == 6,
          "a full context stops generation without error (%lld of 8 - 3 + 1)", (long long)n_gen);
    er_context_free(ctx);
}

/* The cache types each path resolves to, and the bytes they take. */
static void test_kv_types(er_model *m) {
    static const struct {
        int reference;
        er_kv_type k, v;
        uint32_t want_k, want_v;
    } cases[] = {{0, ER_KV_DEFAULT, ER_KV_DEFAULT, ER_TYPE_F16, ER_TYPE_F16},
                 {0, ER_KV_F32, ER_KV_F16, ER_TYPE_F32, ER_TYPE_F16},
                 {1, ER_KV_DEFAULT, ER_KV_DEFAULT, ER_TYPE_F32, ER_TYPE_F32},
                 {1, ER_KV_F32, ER_KV_F32, ER_TYPE_F32, ER_TYPE_F32},
                 {1, ER_KV_Q8_0, ER_KV_F16, ER_TYPE_Q8_0, ER_TYPE_F16}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        er_context_params cp = er_context_default_params();
        cp.n_ctx = 16;
        cp.reference = cases[i].reference;
        cp.type_k = cases[i].k;
        cp.type_v = cases[i].v;
        er_context *ctx = NULL;
        CHECK(er_context_create(m, &cp, &ctx) == ER_OK && ctx->type_k == cases[i].want_k &&
                  ctx->type_v == cases[i].want_v,
              "case %zu: cache types %u/%u, expected %u/%u", i, ctx ? ctx->type_k : 99, ctx ? ctx->type_v : 99,
              cases[i].want_k, cases[i].want_v);
        er_context_free(ctx);
    }
}

/* A backend refuses a model that needs a feature it lacks, by the feature's name; every
 * architecture's row is found by its name and needs only features the CPU implements. */
static void test_backend_features(er_model *m) {
    static const char *const archs[] = {"llama", "qwen2", "qwen3", "gemma3"};
    const backend_ops *cpu = backend_get(BACKEND_CPU), *ref = backend_get(BACKEND_CPU_REFERENCE);
    backend_ops lacking = *cpu;
    lacking.name = "test";
    lacking.features = ER_FEAT_QK_NORM;
    er_model needs = *m; /* a shallow copy: only its config and arch are read */
    needs.view.config.features = ER_FEAT_QK_NORM | ER_FEAT_POST_NORMS | ER_FEAT_GEGLU;
    needs.arch = arch_find("gemma3", 6);
    CHECK(model_check_backend(&needs, &lacking) == ER_ERR_UNSUPPORTED &&
              strstr(er_last_error(), "gemma3 model needs post-attention and post-FFN norms, which the test backend"),
          "refused by the first missing feature: %s", er_last_error());
    CHECK(model_check_backend(&needs, cpu) == ER_OK && model_check_backend(m, ref) == ER_OK, "the CPU runs it");
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        const arch_desc *a = arch_find(archs[i], strlen(archs[i]));
        CHECK(a && !strcmp(a->name, archs[i]) && (a->features & ~cpu->features) == 0, "architecture %s", archs[i]);
    }
    CHECK(!arch_find("llama2", 6) && !arch_find("llam", 4), "no row for other names");
}

/* Threads: the default and any larger request are the CPUs this thread may use (what
 * `taskset -c 0` sets; a cgroup's CPU quota is taken the same way), and cpu.max lines. */
static void test_threads(er_model *m) {
    CHECK(er_cpus_of_quota("max 100000\n") == 0 && er_cpus_of_quota("150000 100000\n") == 2 &&
              er_cpus_of_quota("100000 100000") == 1 && er_cpus_of_quota("1 100000") == 1 &&
              er_cpus_of_quota("-1 100000") == 0 && er_cpus_of_quota("") == 0 && er_cpus_of_quota("50000 0") == 0 &&
              er_cpus_of_quota("50000") == 0 && er_cpus_of_quota("5x 100") == 0 && er_cpus_of_quota(NULL) == 0,
          "cpu.max lines");
    cpu_set_t all, one;
    if (sched_getaffinity(0, sizeof all, &all) != 0) {
        CHECK(0, "sched_getaffinity");
        return;
    }
    const int n = er_usable_cpus();
    CHECK(n >= 1 && n <= CPU_COUNT(&all), "%d usable of %d in the affinity mask", n, CPU_COUNT(&all));
    CPU_ZERO(&one);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &all)) {
            CPU_SET(cpu, &one);
            break;
        }
    CHECK(sched_setaffinity(0, sizeof one, &one) == 0 && er_usable_cpus() == 1, "one CPU in the mask: %d usable",
          er_usable_cpus());
    static const int asked[3] = {0, 1, 1024};
    for (int i = 0; i < 3; i++) {
        er_context_params cp = er_context_default_params();
        er_context *ctx = NULL;
        cp.n_ctx = 16;
        cp.n_threads = asked[i];
        CHECK(er_context_create(m, &cp, &ctx) == ER_OK && er_context_n_threads(ctx) == 1,
              "on one CPU, %d threads asked: %d used", asked[i], er_context_n_threads(ctx));
        er_context_free(ctx);
    }
    sched_setaffinity(0, sizeof all, &all);
    CHECK(er_context_n_threads(NULL) == 0, "NULL context");
}

/* One change to stories260K: a metadata value set (key), one float of a tensor's data
 * replaced (tensor, at, x), or rope_freqs.weight added (freqs: n_rot / 2 = 4 floats). */
typedef struct variant {
    const char *key;
    gguf_value value;
    const char *tensor;
    int64_t at;
    float x;
    const float *freqs;
} variant;

/* Writes the variant to path (through our GGUF writer); 0 on failure. */
static int write_variant(const char *path, const variant *v) {
    gguf_file *f = NULL;
    gguf_writer *w = NULL;
    uint8_t *patched = NULL;
    int ok = gguf_open(STORIES, &f) == ER_OK && gguf_writer_create(&w) == ER_OK;
    for (uint64_t i = 0; ok && i < f->n_kv; i++)
        ok = gguf_writer_set(w, f->kv[i].key, &f->kv[i].value) == ER_OK;
    if (ok && v->key)
        ok = gguf_writer_set(w, (gguf_string){v->key, strlen(v->key)}, &v->value) == ER_OK;
    for (uint64_t i = 0; ok && i < f->n_tensors; i++)
        ok = gguf_writer_add_tensor(w, f->tensors[i].name, f->tensors[i].n_dims, f->tensors[i].ne, f->tensors[i].type) == ER_OK;
    const int64_t n_freqs = 4;
    if (ok && v->freqs)
        ok = gguf_writer_add_tensor(w, (gguf_string){"rope_freqs.weight", 17}, 1, &n_freqs, ER_TYPE_F32) == ER_OK;
    ok = ok && gguf_writer_begin(w, path) == ER_OK;
    for (uint64_t i = 0; ok && i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        const void *data = t->data;
        if (v->tensor && gguf_string_eq(t->name, v->tensor)) {
            if (!(patched = malloc(t->size)))
                ok = 0;
            else {
                memcpy(patched, t->data, t->size);
                memcpy(patched + v->at * (int64_t)sizeof(float), &v->x, sizeof(float));
                data = patched;
            }
        }
        ok = ok && gguf_writer_write_tensor(w, data, t->size) == ER_OK;
    }
    if (ok && v->freqs)
        ok = gguf_writer_write_tensor(w, v->freqs, (size_t)n_freqs * sizeof(float)) == ER_OK;
    ok = ok && gguf_writer_finish(w) == ER_OK;
    CHECK(ok, "writing a variant of %s: %s", STORIES, er_last_error());
    free(patched);
    gguf_writer_free(w);
    gguf_close(f);
    return ok;
}

static int count_token(int32_t token, void *user) {
    (void)token;
    ++*(int *)user;
    return 0;
}

/* Values that make every logit NaN (or every activation 0) are refused at load; a NaN in
 * a matrix, which the load does not scan, is refused by generation, greedy or sampled. */
static void test_non_finite(void) {
    char path[] = "/tmp/er-test-nan-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) {
        CHECK(0, "mkstemp");
        return;
    }
    close(fd);
    const float zeros[4] = {0, 0, 0, 0};
    const float nan = NAN, inf = INFINITY;
    gguf_value f64 = {.type = GGUF_TYPE_FLOAT64};
    static const struct {
        const char *what, *key;
        double f64;
        const char *tensor;
        int64_t at;
        int nan, zero_freqs;
        const char *error;
    } bad[] = {
        {"RoPE scale 1e-300", "llama.rope.scale_linear", 1e-300, NULL, 0, 0, 0, "RoPE scaling factor 1e-300"},
        {"RoPE scale 1e300", "llama.rope.scale_linear", 1e300, NULL, 0, 0, 0, "RoPE scaling factor 1e+300"},
        {"norm epsilon 1e300", "llama.attention.layer_norm_rms_epsilon", 1e300, NULL, 0, 0, 0, "epsilon is 1e+300"},
        {"RoPE base 1e300", "llama.rope.freq_base", 1e300, NULL, 0, 0, 0, "freq_base is 1e+300"},
        {"all-zero rope_freqs", NULL, 0, NULL, 0, 0, 1, "'rope_freqs.weight' element 0 is 0"},
        {"NaN in a norm", NULL, 0, "blk.2.ffn_norm.weight", 3, 1, 0, "'blk.2.ffn_norm.weight' element 3 is nan"},
        {"inf in the output norm", NULL, 0, "output_norm.weight", 63, 0, 0, "'output_norm.weight' element 63 is inf"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        variant v = {bad[i].key, f64, bad[i].tensor, bad[i].at, bad[i].nan ? nan : inf, bad[i].zero_freqs ? zeros : NULL};
        v.value.f64 = bad[i].f64;
        er_model *m = NULL;
        if (!write_variant(path, &v))
            continue;
        CHECK(er_model_load(path, NULL, &m) == ER_ERR_FORMAT && !m && strstr(er_last_error(), path) &&
                  strstr(er_last_error(), bad[i].error),
              "%s refused at load: %s", bad[i].what, er_last_error());
        er_model_free(m);
    }

    /* one NaN weight of the output head: the logit of token 5 */
    const variant v = {NULL, f64, "output.weight", 5 * 64 + 7, nan, NULL};
    er_model *m = NULL;
    if (write_variant(path, &v) && er_model_load(path, NULL, &m) == ER_OK) {
        er_context *ctx = new_context(m, 16, 0);
        er_sampler *s = NULL;
        er_generate_params gp = {4, 0};
        int64_t n_gen = -1;
        int n_called = 0;
        const er_sampler_params sp = er_sampler_default_params();
        CHECK(er_generate_greedy(ctx, prompt, 2, &gp, count_token, &n_called, &n_gen) == ER_ERR_FORMAT &&
                  strstr(er_last_error(), "the logits of position 1 are not finite (token 5: nan)") && n_gen == 0 &&
                  n_called == 0,
              "greedy generation refuses NaN logits: %s", er_last_error());
        CHECK(er_context_rewind(ctx, 0) == ER_OK && er_sampler_create(&sp, er_model_n_vocab(m), &s) == ER_OK &&
                  er_generate(ctx, prompt, 1, &gp, s, count_token, &n_called, &n_gen) == ER_ERR_FORMAT &&
                  strstr(er_last_error(), "the logits of position 0 are not finite") && n_gen == 0 && n_called == 0,
              "sampled generation too: %s", er_last_error());
        er_sampler_free(s);
        er_context_free(ctx);
    } else {
        CHECK(0, "a NaN in output.weight loads (matrices are not scanned): %s", er_last_error());
    }
    er_model_free(m);
    remove(path);
}

static void test_misuse(er_model *m) {
    er_model *none = (er_model *)1;
    er_context *ctx = new_context(m, 4, 0);
    int32_t bad_token = 512;
    CHECK(er_model_load(NULL, NULL, &none) == ER_ERR_INVALID_ARG, "NULL path");
    CHECK(er_model_load(STORIES, NULL, NULL) == ER_ERR_INVALID_ARG, "NULL out");
    CHECK(er_model_load("tests/data/no-such-file.gguf", NULL, &none) == ER_ERR_IO && none == NULL &&
              strstr(er_last_error(), "no-such-file.gguf"),
          "missing file names the path: %s", er_last_error());
    CHECK(er_context_create(NULL, NULL, &ctx) == ER_ERR_INVALID_ARG, "NULL model");
    CHECK(er_context_decode(ctx, prompt, 0, NULL) == ER_ERR_INVALID_ARG, "no tokens");
    CHECK(er_context_decode(ctx, NULL, 1, NULL) == ER_ERR_INVALID_ARG, "NULL tokens");
    CHECK(er_context_decode(ctx, &bad_token, 1, NULL) == ER_ERR_INVALID_ARG && strstr(er_last_error(), "512"),
          "token outside the vocabulary: %s", er_last_error());
    CHECK(er_context_decode(ctx, prompt, 5, NULL) == ER_ERR_CONTEXT_FULL && er_context_n_past(ctx) == 0,
          "a prompt longer than the context fails and changes nothing");
    CHECK(er_context_rewind(ctx, 1) == ER_ERR_INVALID_ARG, "rewind past n_past");
    er_context_params bad = er_context_default_params();
    er_context *c2 = NULL;
    bad.n_ctx = -1;
    CHECK(er_context_create(m, &bad, &c2) == ER_ERR_INVALID_ARG && c2 == NULL, "negative n_ctx");
    bad = er_context_default_params();
    bad.type_v = (er_kv_type)7;
    CHECK(er_context_create(m, &bad, &c2) == ER_ERR_INVALID_ARG && c2 == NULL && strstr(er_last_error(), "type_v 7"),
          "a cache type that is not an er_kv_type: %s", er_last_error());
    bad = er_context_default_params();
    bad.type_k = ER_KV_Q8_0;
    CHECK(er_context_create(m, &bad, &c2) == ER_ERR_UNSUPPORTED && c2 == NULL && strstr(er_last_error(), "CPU backend"),
          "the fast path refuses a Q8_0 cache: %s", er_last_error());
    er_context_free(ctx);
    er_context_free(NULL);
    er_model_free(NULL);
}

/* model_view.release, which a backend holding its own copy of the weights calls as it
 * uploads them (CUDA): the released weights' pages leave the process's resident set, and
 * reading them again (a CPU decode here) faults the same bytes back in from the file. */
static void test_release(void) {
    static const int32_t ids[] = {1, 403, 407};
    er_model *m = NULL;
    er_context *ctx = NULL;
    float before[3 * 512], after[3 * 512]; /* every token's logits */
    if (er_model_load(STORIES, NULL, &m) != ER_OK || er_context_create(m, NULL, &ctx) != ER_OK ||
        er_model_n_vocab(m) != 512 || er_context_decode(ctx, ids, 3, before) != ER_OK) {
        CHECK(0, "load and decode: %s", er_last_error());
        er_context_free(ctx);
        er_model_free(m);
        return;
    }
    const long kb_read = test_resident_kb("/stories260K.gguf");
    const model_view *v = &m->view;
    size_t released = (size_t)v->token_embd.n_out * v->token_embd.row_size;
    CHECK(v->release != NULL, "the model layer gives its backends a release");
    if (!v->release)
        goto done;
    v->release(v->release_owner, v->token_embd.data, released);
    for (int64_t il = 0; il < v->config.n_layer; il++) {
        const layer_weights *l = &v->layers[il];
        const er_weight *w[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
            v->release(v->release_owner, w[i]->data, (size_t)w[i]->n_out * w[i]->row_size);
            released += (size_t)w[i]->n_out * w[i]->row_size;
        }
    }
    const long kb_released = test_resident_kb("/stories260K.gguf");
    /* only whole pages inside each tensor go: at most two partial pages per tensor stay */
    const long kb_kept_at_most = kb_read - (long)(released / 1024) + (1 + 7 * 5) * 2 * 4;
    CHECK(kb_read * 1024 >= (long)released && kb_released <= kb_kept_at_most,
          "after a decode %ld kB of the file resident; the %zu kB of weights released: %ld kB (at most %ld)", kb_read,
          released / 1024, kb_released, kb_kept_at_most);
    er_context_rewind(ctx, 0);
    CHECK(er_context_decode(ctx, ids, 3, after) == ER_OK && !memcmp(before, after, sizeof before),
          "released weights read again give the same logits");
done:
    er_context_free(ctx);
    er_model_free(m);
}

void test_model(void) {
    er_model *m = NULL;
    er_status st = er_model_load(STORIES, NULL, &m);
    CHECK(st == ER_OK, "load %s: %s", STORIES, er_last_error());
    if (st != ER_OK)
        return;
    test_load(m);
    test_prefill_equals_decode(m);
    test_generation(m);
    test_kv_types(m);
    test_backend_features(m);
    test_threads(m);
    test_non_finite();
    test_misuse(m);
    er_model_free(m);
    test_release();
}
