/*
 * internal.h - what the host files of the CUDA backend share (not seen outside it):
 * the model's weights on the device, a context, and the error and allocation helpers.
 *
 *   upload.c    the weights to the device, once per model (cuda_model)
 *   context.c   KV cache, scratch, stream, RoPE table (cuda_context)
 *   step.c      the forward pass: the captured decode step and the prefill; decode
 *   generate.c  the greedy loop on the device
 *   profile.c   kernel-by-kernel timing, development only (profile.h)
 *   cuda.c      the ops table (backend.h)
 */
#ifndef ER_BACKEND_CUDA_INTERNAL_H
#define ER_BACKEND_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cuda/kernels.h"
#include "core/status.h"

/* Sets st to a message naming the call, file and line, and jumps to fail. */
#define CUDA_TRY(call)                                                                                      \
    do {                                                                                                    \
        cudaError_t e_ = (call);                                                                            \
        if (e_ != cudaSuccess) {                                                                            \
            st = er_fail(ER_ERR_DEVICE, "CUDA: %s: %s (%s:%d)", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
            goto fail;                                                                                      \
        }                                                                                                   \
    } while (0)

typedef struct cuda_layer {
    cuda_weight qkv;     /* (q_dim + 2 kv_dim, n_embd): wq, wk, wv stacked */
    cuda_weight qkv_more[2]; /* qkv's later parts where wq, wk, wv differ in type (qkv.next) */
    cuda_weight wo;      /* (n_embd, q_dim) */
    cuda_weight gate_up; /* (2 n_ff, n_embd): w_gate, w_up stacked */
    cuda_weight down;    /* (n_embd, n_ff) */
    float *attn_norm;    /* (n_embd) */
    float *ffn_norm;     /* (n_embd) */
    float *q_norm;       /* (head_dim) or NULL */
    float *k_norm;       /* (head_dim) or NULL */
    float *qkv_bias;     /* (q_dim + 2 kv_dim) bq|bk|bv stacked as qkv's rows, or NULL (ER_FEAT_QKV_BIAS) */
    float *post_attn_norm; /* (n_embd) or NULL (ER_FEAT_POST_NORMS) */
    float *post_ffn_norm;  /* (n_embd) or NULL */
} cuda_layer;

typedef struct cuda_model {
    const model_view *m;
    cuda_weight token_embd; /* (n_vocab, n_embd) */
    cuda_weight output;     /* (n_vocab, n_embd); shares token_embd's memory when tied */
    float *output_norm;     /* (n_embd) */
    cuda_layer *layers;     /* (n_layer) */
    uint8_t *arena;         /* every weight above, in one allocation (see arena_take) */
    size_t arena_used;
    size_t weight_bytes;
} cuda_model;

/* Decode steps of a batch (one token of each of n sequences, every one asking for its
 * logits) replay a CUDA graph captured per n; this many are kept (the oldest replaced). */
enum { CUDA_BATCH_GRAPHS = 8 };

typedef struct cuda_context {
    const cuda_model *cm;
    int64_t n_ctx, n_batch;
    cudaStream_t stream;
    int kv_type;             /* enum cuda_kv_type of both caches */
    int n_seq;               /* sequences, each with n_ctx positions (decode_batch) */
    size_t kv_layer_bytes;   /* one sequence's rows of one layer's K (or V) cache: cuda_kv_layer_bytes */
    size_t kv_layer_stride;  /* one layer's K (or V) cache, every sequence: n_seq * kv_layer_bytes */
    uint8_t *k_cache;        /* (n_layer, n_seq, kv_layer_bytes): (n_ctx, kv_dim) elements of kv_type per layer
                              * and sequence; sequence 0's rows are those of decode */
    uint8_t *v_cache;        /* (n_layer, n_seq, kv_layer_bytes) */
    float *x;                /* (n_batch, n_embd) residual stream */
    float *qkv;              /* (n_batch, q_dim + 2 kv_dim) */
    float *attn;             /* (q_dim) decode: attention output, wo's input */
    float *attn_part;        /* (n_head, n_split, head_dim + 2) decode over a long context: each share's state */
    float *h;                /* (n_ff) decode: SwiGLU/GeGLU output */
    float *post;             /* (n_batch, n_embd) the attention's or the FFN's output before its post-norm */
    float *gu;               /* (n_batch, 2 n_ff) prefill: gate | up */
    uint16_t *xh;            /* (n_batch, max(n_embd, q_dim, n_ff)) f16 prefill: the input of the next GEMM */
    float *logits;           /* (n_seq, n_vocab) decode: row 0, the last token's; decode_batch: a chunk of
                              * the output head's rows */
    cuda_gemm_scratch gemm;  /* decode_batch: cuda_gemm_batch's K shares and quantized inputs, allocated at
                              * the first batch (a one-sequence decode never needs them) */
    cuda_attn_scratch att;   /* decode_batch: cuda_attention_batch's share states and tickets, allocated at
                              * the first batch */
    int fuse_epilogues;      /* decode_batch: RMSNorm and GLU in the GEMMs' epilogues (cuda_gemm_batch_epi),
                              * where the model has no post-norms and k_split_norm takes its rows;
                              * EDGERUNNER_CUDA_FUSE=0: apart, for comparison */
    size_t att_part_floats;  /* of att.part: cuda_attention_batch_part_floats, 0 where it takes none (or
                              * EDGERUNNER_CUDA_BATCH_ATTN=0: the block-per-query kernel, for comparison) */
    int32_t *batch;          /* (4, n_batch) decode_batch: each token's id, sequence and position, then the
                              * tokens whose logits are asked */
    int32_t *batch_host;     /* (4, n_batch) pinned: what is copied into batch */
    float *batch_logits;     /* (batch_logits_rows, n_vocab) pinned: logits_buffer */
    int64_t batch_logits_rows;
    struct {
        int n;                /* tokens of the batch, each asking for its logits */
        cudaGraphExec_t exec; /* its forward pass and output head, captured at first use */
    } batch_graphs[CUDA_BATCH_GRAPHS];
    int next_batch_graph;    /* the slot the next capture replaces */
    float *logits_host;      /* (n_vocab) pinned: a copy from pageable memory takes much longer */
    float *rope_cs;          /* (n_ctx, n_rot / 2, 2) cos, sin of every RoPE angle (the model layer's table) */
    float *rope_cs_swa;      /* the same for sliding-window layers with a RoPE base of their own, else rope_cs */
    uint8_t *arena;          /* every buffer above but the caches, in one allocation */
    int32_t *tokens;         /* (n_batch) */
    int32_t *out_ids;        /* (n_ctx + 1) generated ids */
    cuda_step_state *state;  /* (1) */
    cudaGraphExec_t step;    /* the decode step, captured at first use */
    cudaGraphExec_t step_long; /* the same with the split attention (positions >= split_min) */
    int n_split;             /* blocks per head of the split attention (cuda_attention_split_count) */
    int64_t split_min;       /* the first position whose step splits its attention over the context */
} cuda_context;

/* Prompts of at most this many tokens go through the decode graph one token at a time:
 * cheaper than dequantizing every matrix for a GEMM. */
enum { CUDA_SMALL_PROMPT = 4 };

/* Decode steps at this position or later split their attention over the context
 * (cuda_attention_decode_split); before it one cluster per head is faster. Measured on
 * the H200 (docs/perf-log.md, 2026-12-05; bench/gpu_depth.sh, decode tok/s over the 256
 * steps from the depth), cluster against split:
 *   Qwen3-0.6B Q8_0 1,741 / 1,669 at 256, 1,630 / 1,609 at 512, 1,464 / 1,611 at 768;
 *   Qwen3-1.7B Q4_0 1,283 / 1,286 at 256, 1,183 / 1,295 at 512, 1,090 / 1,276 at 768;
 *   Qwen3-4B Q4_0 695 / 645 at 384, 653 / 638 at 640;
 *   Qwen3-8B Q4_0 563 / 533 at 256, 535 / 532 at 512, 523 / 535 at 640, 488 / 531 at 1,024.
 * The crossover moves with the model (1.7B's near 256, 4B's past 640); 512 takes most of
 * what splitting gains (+9-17% from 768 at 0.6B and 1.7B) for a few percent at 4B.
 * Checked on an H100 after a6aee5e's merge (forty-fourth session): split against
 * cluster, 256 steps from 256 keys, 8B Q8_0 298 / 303, 4B Q8_0 463 / 476, 0.6B level;
 * from 768 split wins in all four files measured. The environment variable
 * EDGERUNNER_CUDA_SPLIT_MIN overrides it (0: always split), for tests and measurements. */
enum { CUDA_SPLIT_MIN = 512 };

/* upload.c */
er_status cuda_model_upload(const model_view *m, void **out);
void cuda_model_free(void *dev);
size_t cuda_model_bytes(const void *dev);
/* A slice of `bytes` at *used of arena (256-byte aligned), or NULL when arena is NULL:
 * allocations are carved twice, first only adding up the sizes. */
void *cuda_arena_take(uint8_t *arena, size_t *used, size_t bytes);
/* cudaMalloc with a message naming `what` */
er_status cuda_alloc(void **p, size_t bytes, const char *what);

/* context.c */
er_status cuda_context_create(const model_view *m, void *dev, const backend_ctx_params *p, void **out);
void cuda_context_free(void *ctx);
/* The attention parameters of layer il. */
cuda_attn_params cuda_layer_attn(const cuda_context *cc, int64_t il);

/* step.c */
/* The kernels of one decode step, on cc->stream (the step graph captures them); split:
 * the attention split over the context (cuda_attention_decode_split) instead of one
 * cluster per head. */
er_status cuda_enqueue_step(cuda_context *cc, int split);
/* The step graph for a token at position pos, captured at its first use. */
er_status cuda_step_graph(cuda_context *cc, int64_t pos, cudaGraphExec_t *graph);
/* The kernels of a prefill of T tokens (already in cc->tokens) at pos0, on cc->stream,
 * without waiting; logits_all: device (T, n_vocab) or NULL. */
er_status cuda_enqueue_prefill(cuda_context *cc, int64_t T, int64_t pos0, float *logits_all);
er_status cuda_decode(void *ctx, const int32_t *tokens, int64_t n, int64_t n_past, float *logits_all,
                      float *logits_last);
/* backend_ops.decode_batch: every token through the same kernels whatever the batch
 * holds (GEMMs split over K by the weight's shape, a block per query's attention), so
 * that a sequence's logits do not depend on the others in its batch. */
er_status cuda_decode_batch(void *ctx, const backend_batch *b, float *logits);
/* backend_ops.seq_copy */
er_status cuda_seq_copy(void *ctx, int src, int dst, int64_t n);
/* backend_ops.logits_buffer: page-locked rows, grown to fit */
float *cuda_logits_buffer(void *ctx, int64_t n_rows);
/* dst (host, n_vocab) = the last step's logits; waits. */
er_status cuda_copy_logits(cuda_context *cc, float *dst);

/* generate.c */
er_status cuda_generate_greedy(void *ctx, int64_t n_past, const backend_greedy *g, er_token_callback on_token,
                               void *user, int64_t *n_generated, int64_t *n_past_after, float *logits_last);

#endif
