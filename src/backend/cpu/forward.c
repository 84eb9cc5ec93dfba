/*
 * forward.c - the CPU backend's transformer forward pass, for every architecture: the
 * plain Llama layer, with the features of backend.h switched on by flags read once at
 * load (the blocks marked with the feature they belong to):
 *
 *   x = embed(tokens)                                   [EMBD_SCALE: * embd_scale]
 *   per layer:  h = rmsnorm(x) ; q, k, v = h Wq, h Wk, h Wv   [QKV_BIAS: + bq, bk, bv]
 *               [QK_NORM: rmsnorm over each q and k head] ; rope(q, k) ; k, v -> cache
 *               a = attention(q, cache) Wo     [SLIDING_WINDOW: the last n_swa rows only]
 *               x += a                                   [POST_NORMS: x += rmsnorm(a)]
 *               h = rmsnorm(x) ; f = (silu(h Wgate) * (h Wup)) Wdown  [GEGLU: gelu]
 *               x += f                                   [POST_NORMS: x += rmsnorm(f)]
 *   logits = rmsnorm(x) Wout
 *
 * The batch is processed layer by layer (every weight row is read once per batch); K and
 * V are computed in f32 and then stored into the cache rows of their positions, in the
 * cache's type (F32, or F16 on the fast path; the reference rounds them through F16 or
 * Q8_0 when asked, cpu.h). RoPE reads the model layer's table of
 * angles (backend.h), the same floats every backend rotates by.
 */
#include <assert.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/ops.h"

/* The reference ops or the fast path on the context's thread pool. */
static void matmul(cpu_context *cc, const er_weight *w, const float *x, int64_t n_tokens, float *y, int64_t y_stride) {
    if (cc->reference)
        cpu_matmul(w, x, n_tokens, y, y_stride, cc->row, cc->n_threads);
    else
        cpu_fast_matmul(cc->pool, w, x, n_tokens, y, y_stride, cc->act);
}

static void attention(cpu_context *cc, const cpu_kv_view *kv, int64_t n_past, int64_t n_tokens, int64_t window) {
    const model_config *c = &cc->m->config;
    if (!cc->reference) {
        cpu_fast_attention(cc->pool, cc->attn, cc->q, kv, n_past, n_tokens, c, cc->scores, cc->n_ctx,
                           cc->attn_scratch, window);
        return;
    }
    assert(kv->k_ops->type == ER_TYPE_F32 && kv->v_ops->type == ER_TYPE_F32); /* cpu_reference_ops.kv_types */
    for (int64_t t = 0; t < n_tokens; t++)
        cpu_attention_window(cc->attn + t * c->n_head * c->head_dim_v, cc->q + t * c->n_head * c->head_dim, kv->k,
                             kv->v, n_past + t, c, cc->scores, window);
}

/* rows (n_rows, n) = their values in `type` (quantized and back), row by row; row: scratch
 * of one row in that type */
static void round_rows(const er_type_traits *type, float *rows, int64_t n_rows, int64_t n, void *row) {
    for (int64_t r = 0; r < n_rows; r++) {
        type->from_f32(rows + r * n, row, n);
        type->to_f32(row, rows + r * n, n);
    }
}

void cpu_forward(cpu_context *cc, const int32_t *tokens, int64_t n_tokens, int64_t n_past, float *logits_all,
                 float *logits_last) {
    const model_view *m = cc->m;
    const model_config *c = &m->config;
    const unsigned feat = c->features;
    const int64_t n_embd = c->n_embd;
    const int64_t q_dim = c->n_head * c->head_dim;
    const int64_t kv_dim = c->n_head_kv * c->head_dim;
    const int64_t v_dim = c->n_head_kv * c->head_dim_v;
    const int64_t half = c->n_rot / 2;
    float *x = cc->x, *xn = cc->xn;
    float *k_new = cc->k_cur, *v_new = cc->v_cur; /* (n_tokens, kv_dim), (n_tokens, v_dim) */
    const cpu_kv_ops *k_ops = cc->k_ops, *v_ops = cc->v_ops;
    const size_t k_row = (size_t)kv_dim * k_ops->elem_size, v_row = (size_t)v_dim * v_ops->elem_size; /* bytes */

    cpu_get_rows(&m->token_embd, tokens, n_tokens, x);
    if (feat & ER_FEAT_EMBD_SCALE)
        cpu_scale(x, c->embd_scale, n_tokens * n_embd);
    for (int64_t il = 0; il < c->n_layer; il++) {
        const layer_weights *l = &m->layers[il];
        uint8_t *k_cache = (uint8_t *)cc->k_cache + (size_t)il * (size_t)cc->n_ctx * k_row; /* (n_ctx, kv_dim) */
        uint8_t *v_cache = (uint8_t *)cc->v_cache + (size_t)il * (size_t)cc->n_ctx * v_row; /* (n_ctx, v_dim) */
        const float *rope_cs = cc->rope_cs[l->swa]; /* (n_ctx, half, 2) */

        cpu_rmsnorm(xn, x, l->attn_norm, n_tokens, n_embd, c->norm_eps);
        matmul(cc, &l->wq, xn, n_tokens, cc->q, q_dim);
        matmul(cc, &l->wk, xn, n_tokens, k_new, kv_dim);
        matmul(cc, &l->wv, xn, n_tokens, v_new, v_dim);
        if (feat & ER_FEAT_QKV_BIAS) {
            cpu_add_bias(cc->q, l->bq, n_tokens, q_dim);
            cpu_add_bias(k_new, l->bk, n_tokens, kv_dim);
            cpu_add_bias(v_new, l->bv, n_tokens, v_dim);
        }
        for (int64_t t = 0; t < n_tokens; t++) {
            float *qt = cc->q + t * q_dim, *kt = k_new + t * kv_dim;
            const float *cs = rope_cs + (n_past + t) * half * 2;
            if (feat & ER_FEAT_QK_NORM) {
                cpu_rmsnorm(qt, qt, l->q_norm, c->n_head, c->head_dim, c->norm_eps);
                cpu_rmsnorm(kt, kt, l->k_norm, c->n_head_kv, c->head_dim, c->norm_eps);
            }
            cpu_rope(qt, c->n_head, c->head_dim, c->n_rot, c->rope_neox, cs);
            cpu_rope(kt, c->n_head_kv, c->head_dim, c->n_rot, c->rope_neox, cs);
        }
        if (cc->k_round)
            round_rows(cc->k_round, k_new, n_tokens, kv_dim, cc->round_row);
        if (cc->v_round)
            round_rows(cc->v_round, v_new, n_tokens, v_dim, cc->round_row);
        k_ops->store(k_new, k_cache + (size_t)n_past * k_row, n_tokens * kv_dim);
        v_ops->store(v_new, v_cache + (size_t)n_past * v_row, n_tokens * v_dim);
        const cpu_kv_view kv = {k_cache, v_cache, k_ops, v_ops};
        attention(cc, &kv, n_past, n_tokens, l->swa ? c->n_swa : 0);
        matmul(cc, &l->wo, cc->attn, n_tokens, xn, n_embd);
        if (feat & ER_FEAT_POST_NORMS)
            cpu_rmsnorm(xn, xn, l->post_attn_norm, n_tokens, n_embd, c->norm_eps);
        for (int64_t i = 0; i < n_tokens * n_embd; i++)
            x[i] += xn[i];

        cpu_rmsnorm(xn, x, l->ffn_norm, n_tokens, n_embd, c->norm_eps);
        matmul(cc, &l->w_gate, xn, n_tokens, cc->gate, c->n_ff);
        matmul(cc, &l->w_up, xn, n_tokens, cc->up, c->n_ff);
        if (feat & ER_FEAT_GEGLU)
            cpu_geglu(cc->gate, cc->up, n_tokens * c->n_ff);
        else if (cc->reference)
            cpu_swiglu(cc->gate, cc->up, n_tokens * c->n_ff);
        else
            cpu_fast_swiglu(cc->pool, cc->gate, cc->up, n_tokens * c->n_ff);
        matmul(cc, &l->w_down, cc->gate, n_tokens, xn, n_embd);
        if (feat & ER_FEAT_POST_NORMS)
            cpu_rmsnorm(xn, xn, l->post_ffn_norm, n_tokens, n_embd, c->norm_eps);
        for (int64_t i = 0; i < n_tokens * n_embd; i++)
            x[i] += xn[i];
    }

    /* the output head is the largest matmul: run it only for the rows asked for */
    if (logits_all) {
        cpu_rmsnorm(xn, x, m->output_norm, n_tokens, n_embd, c->norm_eps);
        matmul(cc, &m->output, xn, n_tokens, logits_all, c->n_vocab);
        memcpy(logits_last, logits_all + (n_tokens - 1) * c->n_vocab, (size_t)c->n_vocab * sizeof(float));
    } else {
        const float *x_last = x + (n_tokens - 1) * n_embd;
        cpu_rmsnorm(xn, x_last, m->output_norm, 1, n_embd, c->norm_eps);
        matmul(cc, &m->output, xn, 1, logits_last, c->n_vocab);
    }
}
