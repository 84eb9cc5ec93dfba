/*
 * model.h - a loaded model (config from metadata, weights bound as views into the
 * mapping) and a context (KV cache and scratch, sized once at creation).
 *
 * Invariants after er_model_load succeeds: every weight exists with the shape the
 * config implies and a type we can compute with; every 1-D norm is copied to F32;
 * nothing in the token loop allocates or re-checks.
 */
#ifndef ER_MODEL_MODEL_H
#define ER_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "edgerunner.h"
#include "io/gguf.h"
#include "quant/types.h"
#include "tokenizer/vocab.h"

enum er_arch { ER_ARCH_LLAMA, ER_ARCH_QWEN3, ER_ARCH_QWEN2, ER_ARCH_GEMMA3 };

typedef struct model_config {
    enum er_arch arch;
    int64_t n_vocab;
    int64_t n_embd;
    int64_t n_layer;
    int64_t n_head;
    int64_t n_head_kv;
    int64_t head_dim;   /* per-head size of Q and K (attention.key_length) */
    int64_t head_dim_v; /* per-head size of V (attention.value_length) */
    int64_t n_ff;
    int64_t n_ctx_train;
    int64_t n_rot;     /* rotated dimensions per head (rope.dimension_count), <= head_dim */
    float norm_eps;
    float rope_base;
    float rope_pos_scale; /* positions are multiplied by this (1 / linear scaling factor) */
    int rope_neox;        /* 1: rotate pairs (i, i + n_rot/2); 0: pairs (2i, 2i+1) */
    int has_qk_norm;      /* Qwen3, Gemma-3: RMSNorm over each Q and K head before RoPE */
    int has_qkv_bias;     /* Qwen2: Q, K and V projections have biases */
    int has_post_norms;   /* Gemma-3: RMSNorm of the attention and FFN outputs before the residual add */
    int ffn_gelu;         /* Gemma-3: GeGLU, gelu(gate) * up (tanh approximation); else SwiGLU */
    float embd_scale;     /* Gemma-3: embeddings multiplied by sqrt(n_embd); 0: none */
    int64_t n_swa;        /* Gemma-3: sliding-window layers attend to the last n_swa positions; 0: none */
    float rope_base_swa;  /* Gemma-3: RoPE base of the sliding-window layers (10000) */
    int32_t bos;          /* -1: none */
    int32_t eos;          /* -1: none */
} model_config;

/* A 2-D weight matrix in GGML layout: n_out rows of n_in contiguous elements. */
typedef struct er_weight {
    const uint8_t *data; /* (n_out, row_size) into the mapping */
    uint32_t type;       /* enum er_type */
    const er_type_traits *traits;
    int64_t n_in;
    int64_t n_out;
    size_t row_size; /* bytes per row */
} er_weight;

typedef struct layer_weights {
    const float *attn_norm; /* (n_embd) */
    const float *q_norm;    /* (head_dim), Qwen3 only, else NULL */
    const float *k_norm;    /* (head_dim), Qwen3 only, else NULL */
    const float *bq;        /* (n_head * head_dim), Qwen2 only, else NULL */
    const float *bk;        /* (n_head_kv * head_dim), Qwen2 only, else NULL */
    const float *bv;        /* (n_head_kv * head_dim_v), Qwen2 only, else NULL */
    const float *post_attn_norm; /* (n_embd), Gemma-3 only, else NULL */
    const float *post_ffn_norm;  /* (n_embd), Gemma-3 only, else NULL */
    int swa;                /* Gemma-3: a sliding-window layer (window n_swa, RoPE base rope_base_swa) */
    er_weight wq;           /* (n_head * head_dim, n_embd) */
    er_weight wk;           /* (n_head_kv * head_dim, n_embd) */
    er_weight wv;           /* (n_head_kv * head_dim_v, n_embd) */
    er_weight wo;           /* (n_embd, n_head * head_dim_v) */
    const float *ffn_norm;  /* (n_embd) */
    er_weight w_gate;       /* (n_ff, n_embd) */
    er_weight w_up;         /* (n_ff, n_embd) */
    er_weight w_down;       /* (n_embd, n_ff) */
} layer_weights;

struct cuda_model;
struct cuda_context;
struct cpu_pool;

struct er_model {
    char *path;
    er_backend backend;
    struct cuda_model *cuda; /* the weights on the GPU (ER_BACKEND_CUDA), else NULL */
    gguf_file *file; /* owns the read-only mapping the weights point into */
    model_config config;
    er_weight token_embd;     /* (n_vocab, n_embd) */
    er_weight output;         /* (n_vocab, n_embd); token_embd's view when tied */
    const float *output_norm; /* (n_embd) */
    const float *rope_freqs;  /* (n_rot / 2) frequency divisors (Llama 3.1), or NULL */
    layer_weights *layers;    /* (n_layer) */
    float *f32_arena;         /* owns every norm vector above, converted to F32 */
    vocab vocab;
};

struct er_context {
    er_model *model;
    struct cuda_context *cuda; /* KV cache and scratch on the GPU (ER_BACKEND_CUDA), else NULL */
    int64_t n_ctx;
    int64_t n_batch;
    int64_t n_past;
    int n_threads;
    int reference; /* CPU: use the plain-C reference kernels only */
    int has_logits;
    /* the KV cache's element types (enum er_type): F32, or F16 on the CPU fast path only (the
     * reference keeps F32 so that it stays exact; so does CUDA, which has its own cache) */
    uint32_t type_k, type_v;
    /* CPU backend only (NULL with CUDA) */
    void *k_cache; /* (n_layer, n_ctx, n_head_kv * head_dim) in type_k */
    void *v_cache; /* (n_layer, n_ctx, n_head_kv * head_dim_v) in type_v */
    /* scratch for one batch of up to n_batch tokens */
    float *k_cur;  /* (n_batch, n_head_kv * head_dim) the batch's K, f32 until RoPE is done and it is stored */
    float *v_cur;  /* (n_batch, n_head_kv * head_dim_v) the batch's V, likewise */
    float *x;      /* (n_batch, n_embd) residual stream */
    float *xn;     /* (n_batch, max(n_embd, n_ff)) normed input to the next matmul */
    float *q;      /* (n_batch, n_head * head_dim) */
    float *attn;   /* (n_batch, n_head * head_dim_v) attention output */
    float *gate;   /* (n_batch, n_ff) */
    float *up;     /* (n_batch, n_ff) */
    float *scores; /* (n_threads, n_ctx) attention weights of one head per thread */
    float *row;    /* (n_threads, max row length) one dequantized weight row per thread */
    float *logits; /* (n_vocab) of the last token decoded */
    /* CPU fast path only (reference == 0), NULL otherwise */
    struct cpu_pool *pool; /* n_threads workers, created with the context */
    float *attn_scratch;   /* (n_threads, cpu_fast_attn_scratch_floats) blocked prompt attention, 64-byte aligned */
    void *act;             /* (n_batch, max(n_embd, n_ff, n_head * head_dim_v)) activations in the
                              weight type's dot format (cpu_fast_act_size bytes), 64-byte aligned */
};

/* Runs n_tokens (<= n_batch, fitting in the cache) through the model at positions
 * n_past.., appends their K/V to the cache, and writes logits: of every token into
 * logits_all (n_tokens, n_vocab) when not NULL, and of the last one into ctx->logits. */
void model_forward(er_context *ctx, const int32_t *tokens, int64_t n_tokens, float *logits_all);

#endif
