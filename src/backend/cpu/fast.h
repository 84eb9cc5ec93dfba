/*
 * fast.h - the CPU fast path of the forward pass (er_context_params.reference = 0): the
 * same operations as ops.h, on a thread pool, with the kernel table of kernels.h.
 *
 * Numerics against the reference (ops.h): F32/F16/BF16 weights keep f32 activations (only
 * the summation order differs, ~1e-6 relative); quantized weights take activations rounded
 * to 8 bits per block (Q8_0/Q8_1/Q8_K, as llama.cpp), ~1e-2 relative on the logits. Every
 * token's result is computed by the same code whatever the batch size and thread count,
 * so prefill and token-by-token decode give bit-identical logits on this path too.
 */
#ifndef ER_BACKEND_CPU_FAST_H
#define ER_BACKEND_CPU_FAST_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/threadpool.h"
#include "model/model.h"

/* Bytes of scratch cpu_fast_matmul needs for n_tokens rows of n_in elements on a pool of
 * n_threads: the activations in the dot product's format, or the f32 prefill's panels. */
size_t cpu_fast_act_size(int64_t n_tokens, int64_t n_in, int n_threads);

/* y (n_tokens, y_stride)[:, 0..n_out) = x (n_tokens, n_in) @ W^T. act: scratch of
 * cpu_fast_act_size(n_tokens, n_in, threads of pool) bytes, 64-byte aligned. Quantized weights with a
 * tiled kernel (Q8_0) run as a matrix-matrix product: tiles of 4 rows x 2 tokens, each
 * weight block loaded once per tile, rows of one chunk reused from cache across tokens. */
void cpu_fast_matmul(cpu_pool *pool, const er_weight *w, const float *x, int64_t n_tokens, float *y,
                     int64_t y_stride, void *act);

/* Attention of n_tokens queries at positions pos0.. over cache rows 0..pos0 + t:
 * out (n_tokens, n_head * head_dim_v), q (n_tokens, n_head * head_dim), scores scratch
 * (pool size, n_ctx). Fewer than CPU_SGEMM_MIN_TOKENS queries: (token, head) pairs spread
 * over the threads. More: blocks of tokens of one head as two matrix products (scores
 * = Q K^T, out = P V) in the f32 prefill's tile, in block_scratch (64-byte aligned,
 * pool size x cpu_fast_attn_scratch_floats). */
void cpu_fast_attention(cpu_pool *pool, float *out, const float *q, const float *k_cache, const float *v_cache,
                        int64_t pos0, int64_t n_tokens, const model_config *c, float *scores, int64_t n_ctx,
                        float *block_scratch);
/* Floats of one thread's block_scratch for a context of n_ctx tokens. */
size_t cpu_fast_attn_scratch_floats(int64_t n_ctx, int64_t head_dim);

/* gate[i] = silu(gate[i]) * up[i], the same per-element arithmetic as cpu_swiglu */
void cpu_fast_swiglu(cpu_pool *pool, float *gate, const float *up, int64_t n);

/* ---- kernels (fast_avx2.c), exposed for the unit tests ---- */

/* y[t * y_stride + r] = dot(weight row r, activation row t) for r < n_rows, t < n_tok;
 * w rows `w_stride` bytes apart, x rows `x_stride` bytes apart, n elements each.
 * Each (r, t) is computed exactly as the table's vec_dot computes it. */
typedef void (*cpu_gemm_fn)(const uint8_t *w, size_t w_stride, int64_t n_rows, const uint8_t *x, size_t x_stride,
                            int64_t n_tok, float *y, int64_t y_stride, int64_t n);

/* The tiled kernel for weight type `type` on this CPU, or NULL (then vec_dot per pair). */
cpu_gemm_fn cpu_gemm_get(uint32_t type);

/* Batches of at least this many tokens multiply in f32 on dequantized weights (as the
 * reference computes); smaller ones quantize their activations for the integer dots. */
#define CPU_SGEMM_MIN_TOKENS 32

/* Prefill in f32 on dequantized weights:
 * pack: panel (n, 16), 32-byte aligned = rows (16, n) transposed (k-major)
 * tile: y (mt <= 6 tokens, y_stride apart; nr <= 16 outputs) = x rows xr[0..6) (rows
 *       past mt repeat an earlier one; their results are dropped) times the panel */
typedef struct cpu_sgemm_ops {
    void (*pack)(const float *rows, int64_t n, float *panel);
    void (*tile)(const float *const *xr, const float *panel, int64_t n, float *y, int64_t y_stride, int mt, int nr);
} cpu_sgemm_ops;
const cpu_sgemm_ops *cpu_sgemm_get(void);
/* The fastest dequantization of a type on this CPU (bit-identical to traits->to_f32). */
er_to_f32_fn cpu_fast_to_f32(uint32_t type, const er_type_traits *traits);

/* f32 helpers of attention: AVX2 when the CPU has it, else plain C.
 * dots: s[j] = q . k[j * k_stride ..][0..d) for j < n_rows (one query against n keys)
 * wsum: out[0..d) = sum_j p[j] * v[j * v_stride ..][0..d) (the softmax-weighted values) */
typedef struct cpu_vec_ops {
    void (*dots)(float *s, const float *q, const float *k, int64_t k_stride, int64_t n_rows, int64_t d);
    void (*wsum)(float *out, const float *p, const float *v, int64_t v_stride, int64_t n_rows, int64_t d);
} cpu_vec_ops;
const cpu_vec_ops *cpu_vec_ops_get(void);

#endif
