/*
 * cpu.c - the CPU backend's contexts and its two ops tables (cpu.h): the KV cache and
 * the scratch of one batch, allocated once at creation; decode in batches of n_batch.
 */
#define _POSIX_C_SOURCE 200809L

#include "backend/cpu/cpu.h"

#include <stdlib.h>

#include "core/status.h"

/* calloc of a * b * c elements of `size` bytes, NULL on overflow or exhaustion */
static void *alloc_elems(int64_t a, int64_t b, int64_t c, size_t size) {
    size_t n;
    if (a <= 0 || b <= 0 || c <= 0 || __builtin_mul_overflow((size_t)a, (size_t)b, &n) ||
        __builtin_mul_overflow(n, (size_t)c, &n) || __builtin_mul_overflow(n, size, &n))
        return NULL;
    return calloc(n / size, size);
}

static float *alloc_floats(int64_t a, int64_t b, int64_t c) { return alloc_elems(a, b, c, sizeof(float)); }

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static void context_free(void *ctx) {
    cpu_context *cc = ctx;
    if (!cc)
        return;
    free(cc->k_cache);
    free(cc->v_cache);
    free(cc->k_cur);
    free(cc->v_cur);
    free(cc->x);
    free(cc->xn);
    free(cc->q);
    free(cc->attn);
    free(cc->gate);
    free(cc->up);
    free(cc->scores);
    free(cc->row);
    free(cc->round_row);
    cpu_pool_free(cc->pool);
    free(cc->act);
    free(cc->attn_scratch);
    free(cc);
}

static er_status context_create(const model_view *m, int reference, const backend_ctx_params *p, void **out) {
    er_status st = ER_OK;
    const model_config *c = &m->config;
    cpu_context *cc = calloc(1, sizeof *cc);
    *out = NULL;
    if (!cc)
        return er_fail(ER_ERR_NO_MEMORY, "er_context_create: out of memory");
    cc->m = m;
    cc->n_ctx = p->n_ctx;
    cc->n_batch = p->n_batch;
    cc->n_threads = p->n_threads;
    cc->reference = reference;
    cc->rope_cs[0] = p->rope_cs[0];
    cc->rope_cs[1] = p->rope_cs[1] ? p->rope_cs[1] : p->rope_cs[0];
    const int64_t kv_dim = c->n_head_kv * c->head_dim;
    const int64_t v_dim = c->n_head_kv * c->head_dim_v;
    if (reference) { /* F32 rows, rounded through the types asked for (cpu.h) */
        cc->k_round = p->type_k != ER_TYPE_F32 ? er_type_get(p->type_k) : NULL;
        cc->v_round = p->type_v != ER_TYPE_F32 ? er_type_get(p->type_v) : NULL;
        const size_t k_bytes = cc->k_round ? er_type_row_size(cc->k_round, kv_dim) : 1;
        const size_t v_bytes = cc->v_round ? er_type_row_size(cc->v_round, v_dim) : 1;
        if (k_bytes == 0 || v_bytes == 0) {
            st = er_fail(ER_ERR_UNSUPPORTED, "er_context_create: %s: K and V rows of %lld and %lld elements are not whole "
                         "blocks of the KV cache type asked for", m->path, (long long)kv_dim, (long long)v_dim);
            goto fail;
        }
        if ((cc->k_round || cc->v_round) && !(cc->round_row = malloc(k_bytes > v_bytes ? k_bytes : v_bytes))) {
            st = er_fail(ER_ERR_NO_MEMORY, "er_context_create: out of memory");
            goto fail;
        }
    }
    cc->k_ops = cpu_kv_ops_get(reference ? ER_TYPE_F32 : p->type_k);
    cc->v_ops = cpu_kv_ops_get(reference ? ER_TYPE_F32 : p->type_v);
    const int64_t max_in = max64(max64(c->n_embd, c->n_ff), c->n_head * c->head_dim_v);
    cc->k_cache = alloc_elems(c->n_layer, p->n_ctx, kv_dim, cc->k_ops->elem_size);
    cc->v_cache = alloc_elems(c->n_layer, p->n_ctx, v_dim, cc->v_ops->elem_size);
    cc->k_cur = alloc_floats(p->n_batch, kv_dim, 1);
    cc->v_cur = alloc_floats(p->n_batch, v_dim, 1);
    cc->x = alloc_floats(p->n_batch, c->n_embd, 1);
    cc->xn = alloc_floats(p->n_batch, c->n_embd, 1);
    cc->q = alloc_floats(p->n_batch, c->n_head, c->head_dim);
    cc->attn = alloc_floats(p->n_batch, c->n_head, c->head_dim_v);
    cc->gate = alloc_floats(p->n_batch, c->n_ff, 1);
    cc->up = alloc_floats(p->n_batch, c->n_ff, 1);
    cc->scores = alloc_floats(p->n_threads, p->n_ctx, 1);
    cc->row = alloc_floats(p->n_threads, max_in, 1);
    if (!cc->k_cache || !cc->v_cache || !cc->k_cur || !cc->v_cur || !cc->x || !cc->xn || !cc->q || !cc->attn ||
        !cc->gate || !cc->up || !cc->scores || !cc->row) {
        st = er_fail(ER_ERR_NO_MEMORY, "er_context_create: cannot allocate a %lld-token KV cache and scratch for %s",
                     (long long)p->n_ctx, m->path);
        goto fail;
    }
    if (!reference) {
        if ((st = cpu_pool_create(p->n_threads, &cc->pool)) != ER_OK)
            goto fail;
        const size_t act_size = (cpu_fast_act_size(p->n_batch, max_in, cpu_pool_size(cc->pool)) + 63) / 64 * 64;
        const size_t attn_bytes = (size_t)cpu_pool_size(cc->pool) * cpu_fast_attn_scratch_floats(p->n_ctx, c->head_dim) *
                                  sizeof(float);
        if (!(cc->attn_scratch = aligned_alloc(64, attn_bytes)) || !(cc->act = aligned_alloc(64, act_size))) {
            st = er_fail(ER_ERR_NO_MEMORY, "er_context_create: cannot allocate activation scratch for %s", m->path);
            goto fail;
        }
    }
    *out = cc;
    return ER_OK;
fail:
    context_free(cc);
    return st;
}

static er_status context_create_reference(const model_view *m, void *dev, const backend_ctx_params *p, void **out) {
    (void)dev;
    return context_create(m, 1, p, out);
}

static er_status context_create_fast(const model_view *m, void *dev, const backend_ctx_params *p, void **out) {
    (void)dev;
    return context_create(m, 0, p, out);
}

static er_status decode(void *ctx, const int32_t *tokens, int64_t n, int64_t n_past, float *logits_all,
                        float *logits_last) {
    cpu_context *cc = ctx;
    const int64_t n_vocab = cc->m->config.n_vocab;
    for (int64_t i = 0; i < n; i += cc->n_batch) {
        const int64_t n_i = n - i < cc->n_batch ? n - i : cc->n_batch;
        cpu_forward(cc, tokens + i, n_i, n_past + i, logits_all ? logits_all + i * n_vocab : NULL, logits_last);
    }
    return ER_OK;
}

static int always(void) { return 1; }

enum { ALL_FEATURES = (1u << ER_FEAT_COUNT) - 1 };

const backend_ops cpu_reference_ops = {
    .name = "CPU reference",
    .features = ALL_FEATURES,
    /* F32 by default: the exact oracle; F16 and Q8_0 round K and V through the type and
     * keep them in F32 (cpu.h), the oracle of the other backends' caches of that type */
    .kv_types = 1u << ER_TYPE_F32 | 1u << ER_TYPE_F16 | 1u << ER_TYPE_Q8_0,
    .kv_default = ER_TYPE_F32,
    .available = always,
    .context_create = context_create_reference,
    .context_free = context_free,
    .decode = decode,
};

const backend_ops cpu_fast_ops = {
    .name = "CPU",
    .features = ALL_FEATURES,
    .kv_types = 1u << ER_TYPE_F32 | 1u << ER_TYPE_F16,
    .kv_default = ER_TYPE_F16, /* as llama.cpp */
    .available = always,
    .context_create = context_create_fast,
    .context_free = context_free,
    .decode = decode,
};
