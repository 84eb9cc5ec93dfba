/*
 * cpu.h - the CPU backend: its two ops tables (backend.h) and its context.
 *
 * Both tables run the same forward pass (forward.c); the context picks its matrix
 * product, attention and SwiGLU once, when it is created:
 *   cpu_reference_ops  the plain-C reference (ops.h): F32 activations and KV cache, one
 *                      summation order, one thread per row range; the oracle of every
 *                      faster path. Asked for an F16 or Q8_0 cache, it rounds K and V
 *                      through that type and keeps the values in F32: the numbers such
 *                      a cache holds, so it stays the oracle of those caches too
 *   cpu_fast_ops       the fast path (fast.h): a thread pool, AVX2 kernels, activations
 *                      in the weight type's dot format, an F16 KV cache by default
 */
#ifndef ER_BACKEND_CPU_CPU_H
#define ER_BACKEND_CPU_CPU_H

#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/fast.h"
#include "backend/cpu/threadpool.h"

extern const backend_ops cpu_reference_ops;
extern const backend_ops cpu_fast_ops;

typedef struct cpu_context {
    const model_view *m;
    int64_t n_ctx, n_batch;
    int n_threads;
    int reference; /* the plain-C reference ops, else the fast path's */
    const cpu_kv_ops *k_ops, *v_ops; /* the cache's element types */
    const er_type_traits *k_round, *v_round; /* reference: the types K and V are rounded through before they
                                                are stored (F16, Q8_0), or NULL */
    void *round_row; /* reference with k_round or v_round: one row of K or V in that type */
    const float *rope_cs[2]; /* (n_ctx, n_rot / 2, 2) for every layer, sliding-window layers (backend.h) */
    void *k_cache; /* (n_layer, n_ctx, n_head_kv * head_dim) in k_ops->type */
    void *v_cache; /* (n_layer, n_ctx, n_head_kv * head_dim_v) in v_ops->type */
    /* scratch for one batch of up to n_batch tokens */
    float *k_cur;  /* (n_batch, n_head_kv * head_dim) the batch's K, f32 until RoPE is done and it is stored */
    float *v_cur;  /* (n_batch, n_head_kv * head_dim_v) the batch's V, likewise */
    float *x;      /* (n_batch, n_embd) residual stream */
    float *xn;     /* (n_batch, n_embd) normed input to the next matmul */
    float *q;      /* (n_batch, n_head * head_dim) */
    float *attn;   /* (n_batch, n_head * head_dim_v) attention output */
    float *gate;   /* (n_batch, n_ff) */
    float *up;     /* (n_batch, n_ff) */
    float *scores; /* (n_threads, n_ctx) attention weights of one head per thread */
    float *row;    /* (n_threads, max row length) reference: one dequantized weight row per thread */
    /* fast path only, NULL on the reference */
    cpu_pool *pool;      /* n_threads workers, created with the context */
    float *attn_scratch; /* (n_threads, cpu_fast_attn_scratch_floats) blocked prompt attention, 64-byte aligned */
    void *act;           /* (n_batch, max(n_embd, n_ff, n_head * head_dim_v)) activations in the weight
                            type's dot format (cpu_fast_act_size bytes), 64-byte aligned */
} cpu_context;

/* Runs n_tokens (<= n_batch, fitting in the cache) through the model at positions
 * n_past.., appends their K/V to the cache, and writes logits: of every token into
 * logits_all (n_tokens, n_vocab) when not NULL, and of the last one into logits_last. */
void cpu_forward(cpu_context *cc, const int32_t *tokens, int64_t n_tokens, int64_t n_past, float *logits_all,
                 float *logits_last);

#endif
