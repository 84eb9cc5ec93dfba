/*
 * forward.c - the transformer forward pass shared by llama, qwen2, qwen3 and gemma3
 * (picked by flags in model_config, read once at load; the per-architecture pieces are
 * the small blocks marked Qwen2 / Gemma-3):
 *
 *   x = embed(tokens)
 *   per layer:  h = rmsnorm(x) ; q, k, v = h Wq, h Wk, h Wv
 *               [qwen3: rmsnorm over each q and k head] ; rope(q, k) ; k, v -> cache
 *               x += attention(q, cache) Wo
 *               h = rmsnorm(x) ; x += (silu(h Wgate) * (h Wup)) Wdown
 *   logits = rmsnorm(x) Wout
 *
 * The batch is processed layer by layer (every weight row is read once per batch); K and
 * V are computed in f32 and then stored into the cache rows of their positions, in the
 * cache's type (F32, or F16 on the fast path).
 */
#include <assert.h>
#include <string.h>

#include "backend/cpu/fast.h"
#include "backend/cpu/ops.h"
#include "model/model.h"

/* The reference ops (ctx->reference) or the fast path on the context's thread pool. */
static void matmul(er_context *ctx, const er_weight *w, const float *x, int64_t n_tokens, float *y, int64_t y_stride) {
    if (ctx->reference)
        cpu_matmul(w, x, n_tokens, y, y_stride, ctx->row, ctx->n_threads);
    else
        cpu_fast_matmul(ctx->pool, w, x, n_tokens, y, y_stride, ctx->act);
}

static void attention(er_context *ctx, const cpu_kv_view *kv, int64_t n_tokens, int64_t window) {
    const model_config *c = &ctx->model->config;
    if (!ctx->reference) {
        cpu_fast_attention(ctx->pool, ctx->attn, ctx->q, kv, ctx->n_past, n_tokens, c, ctx->scores, ctx->n_ctx,
                           ctx->attn_scratch, window);
        return;
    }
    assert(kv->k_ops->type == ER_TYPE_F32 && kv->v_ops->type == ER_TYPE_F32); /* er_context_create */
    for (int64_t t = 0; t < n_tokens; t++)
        cpu_attention_window(ctx->attn + t * c->n_head * c->head_dim_v, ctx->q + t * c->n_head * c->head_dim, kv->k,
                             kv->v, ctx->n_past + t, c, ctx->scores, window);
}

void model_forward(er_context *ctx, const int32_t *tokens, int64_t n_tokens, float *logits_all) {
    const er_model *m = ctx->model;
    const model_config *c = &m->config;
    const int64_t n_embd = c->n_embd;
    const int64_t q_dim = c->n_head * c->head_dim;
    const int64_t kv_dim = c->n_head_kv * c->head_dim;
    const int64_t v_dim = c->n_head_kv * c->head_dim_v;
    float *x = ctx->x, *xn = ctx->xn;
    float *k_new = ctx->k_cur, *v_new = ctx->v_cur; /* (n_tokens, kv_dim), (n_tokens, v_dim) */
    const cpu_kv_ops *k_ops = cpu_kv_ops_get(ctx->type_k), *v_ops = cpu_kv_ops_get(ctx->type_v);
    const size_t k_row = (size_t)kv_dim * k_ops->elem_size, v_row = (size_t)v_dim * v_ops->elem_size; /* bytes */

    cpu_get_rows(&m->token_embd, tokens, n_tokens, x);
    if (c->embd_scale != 0.0f) /* Gemma-3 */
        cpu_scale(x, c->embd_scale, n_tokens * n_embd);
    for (int64_t il = 0; il < c->n_layer; il++) {
        const layer_weights *l = &m->layers[il];
        uint8_t *k_cache = (uint8_t *)ctx->k_cache + (size_t)il * (size_t)ctx->n_ctx * k_row; /* (n_ctx, kv_dim) */
        uint8_t *v_cache = (uint8_t *)ctx->v_cache + (size_t)il * (size_t)ctx->n_ctx * v_row; /* (n_ctx, v_dim) */

        cpu_rmsnorm(xn, x, l->attn_norm, n_tokens, n_embd, c->norm_eps);
        matmul(ctx, &l->wq, xn, n_tokens, ctx->q, q_dim);
        matmul(ctx, &l->wk, xn, n_tokens, k_new, kv_dim);
        matmul(ctx, &l->wv, xn, n_tokens, v_new, v_dim);
        if (c->has_qkv_bias) { /* Qwen2 */
            cpu_add_bias(ctx->q, l->bq, n_tokens, q_dim);
            cpu_add_bias(k_new, l->bk, n_tokens, kv_dim);
            cpu_add_bias(v_new, l->bv, n_tokens, v_dim);
        }
        model_config c_swa = *c; /* Gemma-3 sliding-window layers have their own RoPE base */
        if (l->swa)
            c_swa.rope_base = c->rope_base_swa;
        for (int64_t t = 0; t < n_tokens; t++) {
            float *qt = ctx->q + t * q_dim, *kt = k_new + t * kv_dim;
            if (c->has_qk_norm) {
                cpu_rmsnorm(qt, qt, l->q_norm, c->n_head, c->head_dim, c->norm_eps);
                cpu_rmsnorm(kt, kt, l->k_norm, c->n_head_kv, c->head_dim, c->norm_eps);
            }
            cpu_rope(qt, c->n_head, c->head_dim, c->n_rot, ctx->n_past + t, &c_swa, m->rope_freqs);
            cpu_rope(kt, c->n_head_kv, c->head_dim, c->n_rot, ctx->n_past + t, &c_swa, m->rope_freqs);
        }
        k_ops->store(k_new, k_cache + (size_t)ctx->n_past * k_row, n_tokens * kv_dim);
        v_ops->store(v_new, v_cache + (size_t)ctx->n_past * v_row, n_tokens * v_dim);
        const cpu_kv_view kv = {k_cache, v_cache, k_ops, v_ops};
        attention(ctx, &kv, n_tokens, l->swa ? c->n_swa : 0);
        matmul(ctx, &l->wo, ctx->attn, n_tokens, xn, n_embd);
        if (l->post_attn_norm) /* Gemma-3 */
            cpu_rmsnorm(xn, xn, l->post_attn_norm, n_tokens, n_embd, c->norm_eps);
        for (int64_t i = 0; i < n_tokens * n_embd; i++)
            x[i] += xn[i];

        cpu_rmsnorm(xn, x, l->ffn_norm, n_tokens, n_embd, c->norm_eps);
        matmul(ctx, &l->w_gate, xn, n_tokens, ctx->gate, c->n_ff);
        matmul(ctx, &l->w_up, xn, n_tokens, ctx->up, c->n_ff);
        if (c->ffn_gelu) /* Gemma-3 */
            cpu_geglu(ctx->gate, ctx->up, n_tokens * c->n_ff);
        else if (ctx->reference)
            cpu_swiglu(ctx->gate, ctx->up, n_tokens * c->n_ff);
        else
            cpu_fast_swiglu(ctx->pool, ctx->gate, ctx->up, n_tokens * c->n_ff);
        matmul(ctx, &l->w_down, ctx->gate, n_tokens, xn, n_embd);
        if (l->post_ffn_norm) /* Gemma-3 */
            cpu_rmsnorm(xn, xn, l->post_ffn_norm, n_tokens, n_embd, c->norm_eps);
        for (int64_t i = 0; i < n_tokens * n_embd; i++)
            x[i] += xn[i];
    }

    /* the output head is the largest matmul: run it only for the rows asked for */
    if (logits_all) {
        cpu_rmsnorm(xn, x, m->output_norm, n_tokens, n_embd, c->norm_eps);
        matmul(ctx, &m->output, xn, n_tokens, logits_all, c->n_vocab);
        memcpy(ctx->logits, logits_all + (n_tokens - 1) * c->n_vocab, (size_t)c->n_vocab * sizeof(float));
    } else {
        const float *x_last = x + (n_tokens - 1) * n_embd;
        cpu_rmsnorm(xn, x_last, m->output_norm, 1, n_embd, c->norm_eps);
        matmul(ctx, &m->output, xn, 1, ctx->logits, c->n_vocab);
    }
}
