/*
 * cpu.c - the CPU backend's contexts and its two ops tables (cpu.h): the KV cache and
 * the scratch of one batch, allocated once at creation; decode in batches of n_batch.
 */
#define _POSIX_C_SOURCE 200809L

#include "backend/cpu/cpu.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/packed.h"

#include <stdlib.h>
#include <string.h>

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
    free(cc->spans);
    free(cc->run_n);
    free(cc->run_big);
    free(cc->attn_seqs);
    free(cc->one_seq);
    free(cc->one_pos);
    free(cc->one_logits);
    cpu_pool_free(cc->pool);
    if (!cc->reference)
        cpu_packed_put(cc->m);
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
    cc->n_seq = p->n_seq > 0 ? p->n_seq : 1;
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
    cc->k_cache = alloc_elems(c->n_layer * cc->n_seq, p->n_ctx, kv_dim, cc->k_ops->elem_size);
    cc->v_cache = alloc_elems(c->n_layer * cc->n_seq, p->n_ctx, v_dim, cc->v_ops->elem_size);
    cc->k_cur = alloc_floats(p->n_batch, kv_dim, 1);
    cc->v_cur = alloc_floats(p->n_batch, v_dim, 1);
    cc->x = alloc_floats(p->n_batch, c->n_embd, 1);
    cc->xn = alloc_floats(p->n_batch, c->n_embd, 1);
    cc->q = alloc_floats(p->n_batch, c->n_head, c->head_dim);
    cc->attn = alloc_floats(p->n_batch, c->n_head, c->head_dim_v);
    cc->gate = alloc_floats(p->n_batch, c->n_ff, 1);
    cc->up = alloc_floats(p->n_batch, c->n_ff, 1);
    cc->scores = alloc_floats(p->n_threads, reference ? cpu_attention_scratch(c, p->n_ctx) : p->n_ctx, 1);
    cc->row = alloc_floats(cpu_matmul_scratch(max_in, (int)p->n_threads), 1, 1);
    cc->spans = alloc_elems(p->n_batch, 1, 1, sizeof(cpu_span));
    cc->run_n = alloc_elems(p->n_batch, 1, 1, sizeof(int64_t));
    cc->run_big = alloc_elems(p->n_batch, 1, 1, sizeof(int8_t));
    cc->attn_seqs = alloc_elems(p->n_batch, 1, 1, sizeof(cpu_attn_seq));
    cc->one_seq = alloc_elems(p->n_batch, 1, 1, sizeof(int32_t));
    cc->one_pos = alloc_elems(p->n_batch, 1, 1, sizeof(int64_t));
    cc->one_logits = alloc_elems(p->n_batch, 1, 1, sizeof(int8_t));
    if (!cc->spans || !cc->run_n || !cc->run_big || !cc->attn_seqs || !cc->one_seq || !cc->one_pos || !cc->one_logits || !cc->k_cache || !cc->v_cache || !cc->k_cur || !cc->v_cur || !cc->x || !cc->xn || !cc->q || !cc->attn ||
        !cc->gate || !cc->up || !cc->scores || !cc->row) {
        st = er_fail(ER_ERR_NO_MEMORY, "er_context_create: cannot allocate a KV cache of %d x %lld tokens and scratch "
                     "for %s", cc->n_seq, (long long)p->n_ctx, m->path);
        goto fail;
    }
    if ((st = cpu_pool_create(p->n_threads, &cc->pool)) != ER_OK)
        goto fail;
    if (!reference) {
        if ((st = cpu_packed_get(m, &cc->m)) != ER_OK) /* cc->m stays m */
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

/* Sequence 0 alone, in batches of n_batch: the logits of every token, or of the last one
 * only (the head is the largest matmul). */
static er_status decode(void *ctx, const int32_t *tokens, int64_t n, int64_t n_past, float *logits_all,
                        float *logits_last) {
    cpu_context *cc = ctx;
    const int64_t n_vocab = cc->m->config.n_vocab;
    for (int64_t i = 0; i < n; i += cc->n_batch) {
        const int64_t n_i = n - i < cc->n_batch ? n - i : cc->n_batch;
        const int last = i + n_i == n;
        for (int64_t t = 0; t < n_i; t++) {
            cc->one_pos[t] = n_past + i + t;
            cc->one_logits[t] = logits_all || (last && t == n_i - 1);
        }
        const backend_batch b = {n_i, tokens + i, cc->one_seq, cc->one_pos, cc->one_logits};
        cpu_forward(cc, &b, logits_all ? logits_all + i * n_vocab : last ? logits_last : NULL);
    }
    if (logits_all)
        memcpy(logits_last, logits_all + (n - 1) * n_vocab, (size_t)n_vocab * sizeof(float));
    return ER_OK;
}

static er_status decode_batch(void *ctx, const backend_batch *b, float *logits) {
    cpu_forward(ctx, b, logits);
    return ER_OK;
}

static er_status seq_copy(void *ctx, int src, int dst, int64_t n) {
    cpu_context *cc = ctx;
    const model_config *c = &cc->m->config;
    const size_t k_row = (size_t)(c->n_head_kv * c->head_dim) * cc->k_ops->elem_size;
    const size_t v_row = (size_t)(c->n_head_kv * c->head_dim_v) * cc->v_ops->elem_size;
    for (int64_t il = 0; il < c->n_layer; il++) {
        uint8_t *k = (uint8_t *)cc->k_cache + (size_t)(il * cc->n_seq) * (size_t)cc->n_ctx * k_row;
        uint8_t *v = (uint8_t *)cc->v_cache + (size_t)(il * cc->n_seq) * (size_t)cc->n_ctx * v_row;
        memcpy(k + (size_t)dst * (size_t)cc->n_ctx * k_row, k + (size_t)src * (size_t)cc->n_ctx * k_row, (size_t)n * k_row);
        memcpy(v + (size_t)dst * (size_t)cc->n_ctx * v_row, v + (size_t)src * (size_t)cc->n_ctx * v_row, (size_t)n * v_row);
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
    .decode_batch = decode_batch,
    .seq_copy = seq_copy,
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
    .decode_batch = decode_batch,
    .seq_copy = seq_copy,
};
