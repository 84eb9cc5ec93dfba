/*
 * fast.h - the CPU fast path of the forward pass (er_context_params.reference = 0): the
 * same operations as ops.h, on a thread pool, with the kernel table of kernels.h.
 *
 * Numerics against the reference (ops.h): F32/F16/BF16 weights keep f32 activations (only
 * the summation order differs, ~1e-6 relative); quantized weights take activations rounded
 * to 8 bits per block (Q8_0/Q8_1/Q8_K, as llama.cpp), ~1e-2 relative on the logits. Every
 * token's result is computed by the same code whatever the batch size and thread count,
 * so prefill and token-by-token decode give bit-identical logits on this path too.
 * The KV cache is F16 by default here (er_context_params.type_k/type_v, as llama.cpp):
 * K and V rounded to 11 significant bits, ~5e-4 relative per element (cpu_kv_ops).
 */
#ifndef ER_BACKEND_CPU_FAST_H
#define ER_BACKEND_CPU_FAST_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/threadpool.h"
#include "backend/backend.h"

/* Bytes of scratch cpu_fast_matmul needs for n_tokens rows of n_in elements on a pool of
 * n_threads: the activations in the dot product's format, or the f32 prefill's panels. */
size_t cpu_fast_act_size(int64_t n_tokens, int64_t n_in, int n_threads);

/* y (n_tokens, y_stride)[:, 0..n_out) = x (n_tokens, n_in) @ W^T. act: scratch of
 * cpu_fast_act_size(n_tokens, n_in, threads of pool) bytes, 64-byte aligned. Quantized
 * weights with a tiled kernel run as a matrix-matrix product: Q8_0 and Q4_1 in tiles of 4
 * rows x 2 tokens (AVX2), Q4_K 16 rows x 8 tokens; packed (w->packed, AVX-512 VNNI:
 * packed.h; Q4_0, Q4_1, Q8_0, Q2_K..Q6_K), 16 rows x 8 tokens for every token count; each
 * weight block loaded once per tile, rows of one chunk reused from cache across tokens. */
void cpu_fast_matmul(cpu_pool *pool, const er_weight *w, const float *x, int64_t n_tokens, float *y,
                     int64_t y_stride, void *act);

/* One product of cpu_fast_matmuls: y (n_tokens, y_stride)[:, 0..w->n_out) = x @ W^T. */
typedef struct cpu_mm_out {
    const er_weight *w;
    float *y;
    int64_t y_stride;
} cpu_mm_out;
enum { CPU_MM_MAX_OUTS = 3 };

/* Several products of the same activations x (n_tokens, n_in) in one pool run (Q, K, V;
 * gate, up): the activations are converted once, and the threads meet once instead of
 * once per weight. Every output is computed as cpu_fast_matmul computes it alone.
 * swiglu: outs = {gate, up}, of one shape; each chunk of the gate's rows is followed by
 * the up's same rows and gate = silu(gate) * up on them (cpu_fast_swiglu_get), so the
 * elementwise pass needs no run of its own. Weights that differ in n_in or in the
 * activations' format run one after the other (then the SwiGLU after both). */
void cpu_fast_matmuls(cpu_pool *pool, const cpu_mm_out *outs, int n_outs, const float *x, int64_t n_tokens,
                      void *act, int swiglu);

/* The work on either side of a layer's products that would otherwise run on one thread
 * between pool runs, while the others wait (an 8-sequence SmolLM2 step: ~4% of its
 * samples in serial RMSNorm, residual adds and their waits). */
typedef struct cpu_mm_fuse {
    /* norm_w: the products' input is xn (n_tokens, n_in) = rmsnorm(x) * norm_w, written
     * by the task, a row per token as cpu_rmsnorm computes it */
    const float *norm_w;
    float eps;
    float *xn;
    /* residual: one product; residual (n_tokens, y_stride)[:, 0..n_out) += its y, a chunk
     * of rows at a time once they are final (the same float adds as after the run) */
    float *residual;
} cpu_mm_fuse;

/* cpu_fast_matmuls with the fused work of f (NULL: none). */
void cpu_fast_matmuls_fused(cpu_pool *pool, const cpu_mm_out *outs, int n_outs, const float *x, int64_t n_tokens,
                            void *act, int swiglu, const cpu_mm_fuse *f);

/* The KV cache's element types (F32, F16) and what attention does with their rows; one
 * table per type, as kernels.h has per weight type. F16 rows are converted to f32 as they
 * are read (F16C on AVX2: 8 per vcvtph2ps), so every sum is still an f32 sum; storing
 * rounds to nearest even, 2^-11 relative (F16C's vcvtps2ph, or er_f32_to_f16 in C).
 * Strides count elements, not bytes. */
typedef struct cpu_kv_ops {
    uint32_t type;    /* enum er_type: ER_TYPE_F32 or ER_TYPE_F16 */
    size_t elem_size; /* bytes per element */
    /* dst[0..n) = src in this type */
    void (*store)(const float *src, void *dst, int64_t n);
    /* dst[0..n) = src as f32 */
    void (*to_f32)(const void *src, float *dst, int64_t n);
    /* s[j] = q . k[j * k_stride ..][0..d) for j < n_rows (one query against n keys) */
    void (*dots)(float *s, const float *q, const void *k, int64_t k_stride, int64_t n_rows, int64_t d);
    /* out[0..d) = sum_j p[j] * v[j * v_stride ..][0..d) (the softmax-weighted values) */
    void (*wsum)(float *out, const float *p, const void *v, int64_t v_stride, int64_t n_rows, int64_t d);
    /* panel (n_rows, 16) = columns [0, nc) of rows v[j * v_stride ..], zero past nc: the
     * k-major panel of the f32 tile (cpu_sgemm_ops) built straight from cache rows */
    void (*panel)(float *panel, const void *v, int64_t v_stride, int64_t n_rows, int nc);
} cpu_kv_ops;

/* The fastest table for cache type `type` on this CPU, or NULL when it is not a cache type. */
const cpu_kv_ops *cpu_kv_ops_get(uint32_t type);

/* One layer's cache as attention reads it. */
typedef struct cpu_kv_view {
    const void *k; /* (n_ctx, n_head_kv * head_dim) in k_ops->type */
    const void *v; /* (n_ctx, n_head_kv * head_dim_v) in v_ops->type */
    const cpu_kv_ops *k_ops, *v_ops;
} cpu_kv_view;

/* Attention of n_tokens queries at positions pos0.. over cache rows 0..pos0 + t (window >
 * 0: only the last `window` of them, Gemma-3's sliding-window layers):
 * out (n_tokens, n_head * head_dim_v), q (n_tokens, n_head * head_dim), scores scratch
 * (pool size, n_ctx). Fewer than CPU_SGEMM_MIN_TOKENS queries, or a window that cuts
 * off rows: (token, head) pairs spread over the threads. Otherwise: blocks of tokens of
 * one head as two matrix products (scores = Q K^T, out = P V) in the f32 prefill's tile,
 * in block_scratch (64-byte aligned, pool size x cpu_fast_attn_scratch_floats). */
void cpu_fast_attention(cpu_pool *pool, float *out, const float *q, const cpu_kv_view *kv, int64_t pos0,
                        int64_t n_tokens, const model_config *c, float *scores, int64_t n_ctx, float *block_scratch,
                        int64_t window);
/* The queries of one sequence in cpu_fast_attention_seqs: rows [t0, t0 + n) of q and out,
 * at positions pos0.., over its own cache. */
typedef struct cpu_attn_seq {
    int64_t t0, n, pos0;
    cpu_kv_view kv;
} cpu_attn_seq;

/* The per-token path of cpu_fast_attention for several sequences in one pool run (a
 * decode step of many sequences: one synchronisation per layer, not one per sequence);
 * each (token, head) is computed exactly as cpu_fast_attention's per-token path does. */
void cpu_fast_attention_seqs(cpu_pool *pool, float *out, const float *q, const cpu_attn_seq *seqs, int64_t n_seqs,
                             const model_config *c, float *scores, int64_t n_ctx, int64_t window);
/* What every token of a step needs done before any attends (RoPE, its K and V into the
 * cache): fn(arg, t) for each of the n_tokens tokens. */
typedef struct cpu_attn_prep {
    void (*fn)(void *arg, int64_t t);
    void *arg;
} cpu_attn_prep;
/* cpu_fast_attention_seqs with prep's tokens shared out first, in the same pool run: every
 * thread waits until all are done, then takes attention items (one meeting of the threads
 * instead of two, and no thread idle while one prepares them all). */
void cpu_fast_attention_seqs_prep(cpu_pool *pool, float *out, const float *q, const cpu_attn_seq *seqs,
                                  int64_t n_seqs, const model_config *c, float *scores, int64_t n_ctx, int64_t window,
                                  const cpu_attn_prep *prep);
/* Floats of one thread's block_scratch for a context of n_ctx tokens. */
size_t cpu_fast_attn_scratch_floats(int64_t n_ctx, int64_t head_dim);

/* ---- kernels (fast_avx2.c), exposed for the unit tests ---- */

/* y[t * y_stride + r] = dot(weight row r, activation row t) for r < n_rows, t < n_tok;
 * w rows `w_stride` bytes apart, x rows `x_stride` bytes apart, n elements each.
 * Each (r, t) is computed exactly as the table's vec_dot computes it. */
typedef void (*cpu_gemm_fn)(const uint8_t *w, size_t w_stride, int64_t n_rows, const uint8_t *x, size_t x_stride,
                            int64_t n_tok, float *y, int64_t y_stride, int64_t n);

/* The tiled kernel for weight type `type` on this CPU, or NULL (then vec_dot per pair):
 * the AVX-512 VNNI one where the CPU has it, else the AVX2 one. */
cpu_gemm_fn cpu_gemm_get(uint32_t type);
/* The AVX2 resp. VNNI (Q8_0, Q4_1) tiled kernel, or NULL when the type has none or this
 * CPU/build cannot run it (the tests compare them). */
cpu_gemm_fn cpu_gemm_avx2(uint32_t type);
cpu_gemm_fn cpu_gemm_vnni(uint32_t type);

/* gate[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i] for i < n. */
typedef void (*cpu_swiglu_fn)(float *gate, const float *up, int64_t n);
/* The fast path's: exp in AVX2 vectors (within a few ulp of cpu_swiglu, which calls libm's
 * expf per element), else cpu_swiglu. Each element's value depends on nothing but its
 * two inputs (not on n or on where a range starts). */
cpu_swiglu_fn cpu_fast_swiglu_get(void);

/* dst[i] += src[i] for i < n: one rounding per element, whatever the instruction set. */
typedef void (*cpu_add_fn)(float *dst, const float *src, int64_t n);
/* AVX2 where the CPU has it, else a plain loop (the same bits). */
cpu_add_fn cpu_fast_add_get(void);

/* row[0..n) = softmax(scale * row), in place. */
typedef void (*cpu_softmax_fn)(float *row, int64_t n, float scale);
/* The fast path's: exp in AVX2 vectors (within a few ulp of libm's expf), else
 * cpu_softmax_scaled. A row's values depend on the row and n only. */
cpu_softmax_fn cpu_fast_softmax_get(void);
/* The plain-C one: expf per element. */
void cpu_softmax_scaled(float *row, int64_t n, float scale);

/* Batches of at least this many tokens multiply in f32 on dequantized weights (as the
 * reference computes); smaller ones quantize their activations for the integer dots.
 * Packed weights (packed.h) take their int8 kernel at every count. */
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
/* The fastest dequantization of a type on this CPU (bit-identical to traits->to_f32, but
 * for F16's signaling NaNs, which F16C returns quieted). */
er_to_f32_fn cpu_fast_to_f32(uint32_t type, const er_type_traits *traits);

#endif
