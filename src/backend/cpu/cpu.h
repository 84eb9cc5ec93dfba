/*
 * cpu.h - the CPU backend: its two ops tables (backend.h) and its context.
 *
 * Both tables run the same forward pass (forward.c); the context picks its matrix
 * product, attention and SwiGLU once, when it is created:
 *   cpu_reference_ops  the plain-C reference (ops.h): F32 activations and KV cache, one
 *                      summation order whatever the thread count (matmul rows and
 *                      attention heads split over the pool); the oracle of every
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

/* The tokens of one sequence in a batch: consecutive, at consecutive positions. */
typedef struct cpu_span {
    int64_t t0, n;    /* batch rows [t0, t0 + n) */
    int64_t pos0;     /* the first one's position */
    int32_t seq;
    int64_t n_logits; /* how many of them ask for logits */
} cpu_span;

typedef struct cpu_context {
    const model_view *m;
    int64_t n_ctx, n_batch;
    int n_seq;      /* sequences, each with its own n_ctx rows of cache */
    int n_threads;
    int reference; /* the plain-C reference ops, else the fast path's */
    const cpu_kv_ops *k_ops, *v_ops; /* the cache's element types */
    const er_type_traits *k_round, *v_round; /* reference: the types K and V are rounded through before they
                                                are stored (F16, Q8_0), or NULL */
    void *round_row; /* reference with k_round or v_round: one row of K or V in that type */
    const float *rope_cs[2]; /* (n_ctx, n_rot / 2, 2) for every layer, sliding-window layers (backend.h) */
    /* One region of n_ctx rows per sequence, rather than pages: a sequence's keys stay
     * contiguous, so every attention kernel (per token, blocked prompt) reads them as it
     * reads a one-sequence cache, and a sequence can only ever see its own rows. The
     * price is n_seq * n_ctx rows reserved up front and a prefix shared by copying it
     * (seq_copy: a memcpy per layer, far cheaper than recomputing it). */
    void *k_cache; /* (n_layer, n_seq, n_ctx, n_head_kv * head_dim) in k_ops->type */
    void *v_cache; /* (n_layer, n_seq, n_ctx, n_head_kv * head_dim_v) in v_ops->type */
    /* scratch for one batch of up to n_batch tokens */
    float *k_cur;  /* (n_batch, n_head_kv * head_dim) the batch's K, f32 until RoPE is done and it is stored */
    float *v_cur;  /* (n_batch, n_head_kv * head_dim_v) the batch's V, likewise */
    float *x;      /* (n_batch, n_embd) residual stream */
    float *xn;     /* (n_batch, n_embd) normed input to the next matmul */
    float *q;      /* (n_batch, n_head * head_dim) */
    float *attn;   /* (n_batch, n_head * head_dim_v) attention output */
    float *gate;   /* (n_batch, n_ff) */
    float *up;     /* (n_batch, n_ff) */
    float *scores; /* (n_threads, n_ctx) attention weights of one head per thread; the reference's
                      (n_threads, cpu_attention_scratch(config, n_ctx)), a tile's */
    float *row;    /* (cpu_matmul_scratch(max row length, n_threads)) reference: cpu_matmul's scratch */
    cpu_span *spans;      /* (n_batch) the current batch's sequences */
    int64_t *run_n;       /* (n_batch) rows of each run of a matmul (forward.c) */
    int8_t *run_big;      /* (n_batch) whether each run takes the f32 path */
    cpu_attn_seq *attn_seqs; /* (n_batch) the short sequences' attention, one pool run */
    int32_t *one_seq;     /* (n_batch) zeros: decode's batch is all sequence 0 */
    int64_t *one_pos;     /* (n_batch) decode's positions */
    int8_t *one_logits;   /* (n_batch) decode's logits flags */
    cpu_pool *pool;      /* n_threads workers, created with the context (both paths) */
    /* fast path only, NULL on the reference */
    float *attn_scratch; /* (n_threads, cpu_fast_attn_scratch_floats) blocked prompt attention, 64-byte aligned */
    void *act;           /* (n_batch, max(n_embd, n_ff, n_head * head_dim_v)) activations in the weight
                            type's dot format (cpu_fast_act_size bytes), 64-byte aligned */
} cpu_context;

/* Runs a batch (backend_batch: at most n_batch tokens, each sequence's consecutive and at
 * its next positions) through the model, stores every token's K/V in its sequence's
 * rows, and writes the logits of the tokens that ask into logits ((number asking,
 * n_vocab), batch order). */
void cpu_forward(cpu_context *cc, const backend_batch *b, float *logits);

#endif
