/*
 * ops.h - CPU operations of the forward pass, reference versions (plain C).
 *
 * These define the numbers every faster backend is checked against: float arithmetic in
 * a fixed order, no fast-math. Activations are row-major (n_tokens, width). matmul and
 * attention take the context's thread pool (NULL: the calling thread alone) and split
 * their outputs over it; every output is computed as on one thread, so the results do
 * not depend on the thread count.
 */
#ifndef ER_BACKEND_CPU_OPS_H
#define ER_BACKEND_CPU_OPS_H

#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/threadpool.h"

/* y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, for n_rows rows of n elements */
void cpu_rmsnorm(float *y, const float *x, const float *weight, int64_t n_rows, int64_t n, float eps);

/* y (n_tokens, y_stride)[:, 0..n_out) = x (n_tokens, n_in) @ W^T, ranges of output rows
 * shared out over the pool's threads; scratch: cpu_matmul_scratch(n_in, pool size)
 * floats. Each output is the f32 dot product of the dequantized row and the token, its
 * products added in order: the result for a token depends neither on n_tokens nor on
 * the thread count, so prefill and decode give bit-identical logits. */
void cpu_matmul(cpu_pool *pool, const er_weight *w, const float *x, int64_t n_tokens, float *y, int64_t y_stride,
                float *scratch);

/* floats of cpu_matmul's scratch for rows of n_in on n_threads threads */
int64_t cpu_matmul_scratch(int64_t n_in, int n_threads);

/* y[i] = embedding row tokens[i] (n_embd floats each) */
void cpu_get_rows(const er_weight *embd, const int32_t *tokens, int64_t n_tokens, float *y);

/* Rotates n_heads heads of head_dim (their first n_rot dims) by the angles of one
 * position, cs (n_rot / 2, 2) cos and sin (a row of the model layer's RoPE table).
 * neox: pairs (i, i + n_rot / 2), else the original Llama's (2i, 2i + 1). */
void cpu_rope(float *x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int neox, const float *cs);

/* Causal grouped-query attention of one token at position pos over cache rows 0..pos:
 * out (n_head * head_dim_v) from q (n_head * head_dim), scores scratch (pos + 1). */
void cpu_attention(float *out, const float *q, const float *k_cache, const float *v_cache,
                   int64_t pos, const model_config *c, float *scores);

/* The same over cache rows max(0, pos - window + 1)..pos only (window 0: all of them):
 * the sliding-window layers of Gemma-3. */
void cpu_attention_window(float *out, const float *q, const float *k_cache, const float *v_cache,
                          int64_t pos, const model_config *c, float *scores, int64_t window);

/* cpu_attention_window of n_tokens queries at positions pos0.. (q (n_tokens, n_head *
 * head_dim), out (n_tokens, n_head * head_dim_v)), each computed exactly as
 * cpu_attention_window computes it: CPU_ATTENTION_TILE tokens of a head at a time, their
 * (tile, head) pairs dealt over the pool's threads; scratch (pool size,
 * cpu_attention_scratch(c, n_ctx)), n_ctx > pos0 + n_tokens - 1. */
void cpu_attention_tokens(cpu_pool *pool, float *out, const float *q, const float *k_cache, const float *v_cache,
                          int64_t pos0, int64_t n_tokens, const model_config *c, float *scratch, int64_t n_ctx,
                          int64_t window);

enum { CPU_ATTENTION_TILE = 16 };

/* floats of a thread's cpu_attention_tokens scratch */
int64_t cpu_attention_scratch(const model_config *c, int64_t n_ctx);

/* gate[i] = silu(gate[i]) * up[i] */
void cpu_swiglu(float *gate, const float *up, int64_t n);

/* gate[i] = gelu(gate[i]) * up[i], GELU's tanh approximation (ggml_gelu, Gemma's
 * gelu_pytorch_tanh) */
void cpu_geglu(float *gate, const float *up, int64_t n);

/* x[t] += bias, for n_rows rows of n elements */
void cpu_add_bias(float *x, const float *bias, int64_t n_rows, int64_t n);

/* x[i] *= s */
void cpu_scale(float *x, float s, int64_t n);

#endif
