/*
 * backend.h - the one interface between the model layer and its backends.
 *
 * The model layer (src/model/) reads a file, fills the view below (shape, features,
 * weights as views into the mapping) from its architecture table, builds the RoPE
 * tables, and picks a backend once, when a context is created: the CPU reference, the
 * CPU fast path or CUDA (registry.c). A backend sees only this header and the layers
 * beneath it (core, quant); it never includes src/model/.
 *
 *   model layer                          backend (backend_ops)
 *   er_model_load ---- model_view -----> model_upload   (CUDA: weights to the device)
 *   er_context_create - rope tables ---> context_create (KV cache, scratch)
 *   er_context_decode -- token ids ----> decode         (the forward pass, logits back)
 *   er_generate_greedy ----------------> generate_greedy (CUDA: the loop on the device)
 *
 * Features: what a model needs beyond the plain Llama layer (biases, extra norms, ...).
 * The architecture table sets them per architecture; each backend declares the ones it
 * implements, and a model that needs one a backend lacks is refused by naming it
 * (backend_check in the model layer), so no backend keeps an allowlist of
 * architectures.
 */
#ifndef ER_BACKEND_BACKEND_H
#define ER_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "edgerunner.h"
#include "quant/types.h"

enum er_feature {
    ER_FEAT_QKV_BIAS = 1u << 0,       /* Qwen2: Q, K and V projections have biases */
    ER_FEAT_QK_NORM = 1u << 1,        /* Qwen3, Gemma-3: RMSNorm over each Q and K head before RoPE */
    ER_FEAT_POST_NORMS = 1u << 2,     /* Gemma-3: RMSNorm of the attention and FFN outputs before the residual add */
    ER_FEAT_GEGLU = 1u << 3,          /* Gemma-3: gelu(gate) * up (tanh approximation) instead of SwiGLU */
    ER_FEAT_SLIDING_WINDOW = 1u << 4, /* Gemma-3, Mistral, Phi-3: layers that attend to the last n_swa
                                         positions (Gemma-3's with their own RoPE base) */
    ER_FEAT_EMBD_SCALE = 1u << 5,     /* Gemma-3: embeddings multiplied by embd_scale */
    ER_FEAT_TIED_OUTPUT = 1u << 6,    /* the output head is token_embd (the file has no output.weight) */
    ER_FEAT_COUNT = 7
};

/* A short phrase for one feature bit ("QKV biases"), for messages. */
const char *er_feature_name(unsigned feature);

/* The layer and attention shape, read once from the file's metadata. */
typedef struct model_config {
    int64_t n_vocab;
    int64_t n_embd;
    int64_t n_layer;
    int64_t n_head;
    int64_t n_head_kv;
    int64_t head_dim;   /* per-head size of Q and K (attention.key_length) */
    int64_t head_dim_v; /* per-head size of V (attention.value_length) */
    int64_t n_ff;
    int64_t n_ctx_train;
    int64_t n_rot;        /* rotated dimensions per head (rope.dimension_count), <= head_dim */
    unsigned features;    /* enum er_feature */
    float norm_eps;
    float rope_base;
    float rope_pos_scale; /* positions are multiplied by this (1 / linear scaling factor) */
    float rope_attn_factor; /* cos and sin are multiplied by this (rope.scaling.attn_factor; 1: none) */
    int64_t n_ctx_orig;   /* longrope: contexts longer than this take the long factors */
    int rope_neox;        /* 1: rotate pairs (i, i + n_rot/2); 0: pairs (2i, 2i+1) */
    float embd_scale;     /* ER_FEAT_EMBD_SCALE: the embeddings' factor */
    int64_t n_swa;        /* ER_FEAT_SLIDING_WINDOW: window of the sliding-window layers (the
                             last n_swa positions, the token's own included) */
    float rope_base_swa;  /* ER_FEAT_SLIDING_WINDOW: their RoPE base */
    float rope_pos_scale_swa; /* ... and position scale (Gemma-3: 1, the linear scaling is the global layers') */
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
    /* the CPU fast path's copy with rows interleaved by 8 (backend/cpu/packed.h), or NULL:
     * set only in the view the fast CPU contexts share */
    const uint8_t *packed;
} er_weight;

/* One layer's weights; a vector a feature brings is NULL where the model lacks it. */
typedef struct layer_weights {
    const float *attn_norm;      /* (n_embd) */
    const float *q_norm;         /* (head_dim), ER_FEAT_QK_NORM */
    const float *k_norm;         /* (head_dim), ER_FEAT_QK_NORM */
    const float *bq;             /* (n_head * head_dim), ER_FEAT_QKV_BIAS */
    const float *bk;             /* (n_head_kv * head_dim), ER_FEAT_QKV_BIAS */
    const float *bv;             /* (n_head_kv * head_dim_v), ER_FEAT_QKV_BIAS */
    const float *post_attn_norm; /* (n_embd), ER_FEAT_POST_NORMS */
    const float *post_ffn_norm;  /* (n_embd), ER_FEAT_POST_NORMS */
    int swa;                     /* a sliding-window layer (window n_swa, RoPE table 1) */
    er_weight wq;                /* (n_head * head_dim, n_embd) */
    er_weight wk;                /* (n_head_kv * head_dim, n_embd) */
    er_weight wv;                /* (n_head_kv * head_dim_v, n_embd) */
    er_weight wo;                /* (n_embd, n_head * head_dim_v) */
    const float *ffn_norm;       /* (n_embd) */
    er_weight w_gate;            /* (n_ff, n_embd) */
    er_weight w_up;              /* (n_ff, n_embd) */
    er_weight w_down;            /* (n_embd, n_ff) */
} layer_weights;

/* What a backend sees of a loaded model. Every weight has the shape the config implies
 * and a type the CPU can compute with; every 1-D tensor is already F32. */
typedef struct model_view {
    const char *path; /* for messages */
    model_config config;
    er_weight token_embd;     /* (n_vocab, n_embd) */
    er_weight output;         /* (n_vocab, n_embd); token_embd's view when tied */
    const float *output_norm; /* (n_embd) */
    layer_weights *layers;    /* (n_layer) */
    /* For a backend that keeps its own copy of the weights (model_upload): it calls
     * release(release_owner, p, n) once the bytes [p, p + n) of a weight's data are on the
     * device and will not be read on the host again, so that the model layer drops the
     * file's pages as the upload goes (whole pages inside the range only; they stay mapped
     * and fault back in if read): the host holds a chunk of the file at a time, not all of
     * it. NULL: nothing to release. */
    void (*release)(void *release_owner, const uint8_t *p, size_t n);
    void *release_owner;
} model_view;

/* What a context is created with. */
typedef struct backend_ctx_params {
    int64_t n_ctx;   /* KV cache length in tokens */
    int64_t n_batch; /* most tokens in one forward pass */
    int n_threads;
    uint32_t type_k, type_v; /* enum er_type of the cache rows, one of the backend's kv_types */
    /* (n_ctx, n_rot / 2, 2) cos and sin of every RoPE angle at every position, built by
     * the model layer: [0] for every layer, [1] for sliding-window layers where their RoPE
     * base differs (Gemma-3; NULL otherwise: they use [0]);
     * owned by the caller and alive as long as the context */
    const float *rope_cs[2];
    int n_seq; /* sequences, each with n_ctx positions of its own (1 unless decode_batch is set) */
} backend_ctx_params;

/* Tokens of several sequences in one forward pass (decode_batch), checked by the model
 * layer: n_tokens <= n_batch; each sequence's tokens are consecutive in the batch, at its
 * next positions in order (pos[i] = what its cache holds, then +1 each), within n_ctx. */
typedef struct backend_batch {
    int64_t n_tokens;
    const int32_t *tokens;  /* (n_tokens) ids within the vocabulary */
    const int32_t *seq_ids; /* (n_tokens) in [0, n_seq) */
    const int64_t *pos;     /* (n_tokens) */
    const int8_t *logits;   /* (n_tokens) non-zero: this token's logits are wanted */
} backend_batch;

/* How a greedy generation goes on (generate_greedy). */
typedef struct backend_greedy {
    int64_t n_predict; /* most tokens to generate */
    int32_t eos;       /* -1: none */
    int ignore_eos;
} backend_greedy;

/* A backend. The model and context it makes are its own (void *: opaque to the model
 * layer). Every call that can fail returns an er_status with its message set. */
typedef struct backend_ops {
    const char *name;  /* "CPU reference", "CPU", "CUDA": in messages */
    unsigned features; /* enum er_feature: those it implements */
    uint32_t kv_types; /* bit (1 << er_type) per KV cache element type it stores */
    uint32_t kv_default; /* enum er_type of ER_KV_DEFAULT */

    /* Whether it can run here (a device is present). */
    int (*available)(void);
    /* The weights to the device, once per model; *dev is passed to context_create.
     * NULL: the backend reads the weights in the mapping (dev stays NULL). */
    er_status (*model_upload)(const model_view *m, void **dev);
    void (*model_free)(void *dev); /* NULL-safe */
    size_t (*model_bytes)(const void *dev); /* device bytes of the uploaded weights */
    /* Whether its decode of the uploaded weights rounds activations to 8 bits (CUDA: the
     * int8 matvecs of Q4_0 weights), so that its greedy ids may leave the
     * reference's at a near tie (bench checks them teacher-forced). NULL: never. */
    int (*rounds_activations)(const void *dev);

    er_status (*context_create)(const model_view *m, void *dev, const backend_ctx_params *p, void **ctx);
    void (*context_free)(void *ctx); /* NULL-safe */

    /* Feeds n tokens (within the vocabulary and the cache) at positions n_past..: their K
     * and V go into the cache; the logits of every token into logits_all (host,
     * (n, n_vocab)) when not NULL, of the last one into logits_last (host, n_vocab). */
    er_status (*decode)(void *ctx, const int32_t *tokens, int64_t n, int64_t n_past, float *logits_all,
                        float *logits_last);

    /* Several sequences in one pass: every token's K and V into its sequence's cache rows,
     * the logits of the tokens that ask into `logits` (host, (number asking, n_vocab), in
     * batch order). A sequence's results do not depend on the other sequences in the
     * batch. NULL: the backend runs one sequence per context (the model layer then
     * refuses n_seq > 1 and sends a one-sequence batch through decode). */
    er_status (*decode_batch)(void *ctx, const backend_batch *b, float *logits);
    /* Sequence dst's first n positions become a copy of src's (prefix reuse); NULL where
     * decode_batch is. */
    er_status (*seq_copy)(void *ctx, int src, int dst, int64_t n);
    /* Host memory of n_rows logits rows the backend copies into fastest (CUDA: page-locked),
     * owned by the context, valid until the next call; NULL with a message when it cannot
     * be had. NULL op: the model layer uses its own. */
    float *(*logits_buffer)(void *ctx, int64_t n_rows);

    /* The greedy loop without the host, straight after a decode (its last token at n_past
     * - 1): tokens are generated until n_predict, EOS (not reported) or a full context,
     * each passed to on_token (non-zero: stop). *n_generated counts them, *n_past_after is
     * what the cache then holds (every token fed: the prompt and all generated tokens but
     * the last, or all of them at EOS), logits_last (host, n_vocab) gets the logits of
     * the last step computed. NULL: the model layer runs the loop on decode. */
    er_status (*generate_greedy)(void *ctx, int64_t n_past, const backend_greedy *g, er_token_callback on_token,
                                 void *user, int64_t *n_generated, int64_t *n_past_after, float *logits_last);

    /* Device memory in use now (bytes), or 0. */
    size_t (*device_bytes_in_use)(void);
    /* The device's memory bandwidth as a copy within it reaches it, measured now (bytes
     * read + written per second, as CUDA's bandwidthTest counts a copy; it allocates and
     * frees a few hundred MB), or 0 on failure. NULL where there is none (the CPU). */
    double (*copy_bandwidth)(void);

    /* Development only (`bench --profile`), NULL where there is none: times one decode
     * step at position pos and, when n_tokens > 0, a prefill of tokens at position 0
     * (which overwrites the cache), kernel by kernel; writes a text table into report. */
    er_status (*profile)(void *ctx, int64_t pos, const int32_t *tokens, int64_t n_tokens, char *report, size_t cap);
} backend_ops;

/* The registry (registry.c, the one place that knows which backends this build has). */
enum backend_kind { BACKEND_CPU_REFERENCE, BACKEND_CPU, BACKEND_CUDA };

/* The backend of that kind, or NULL when this build has none. */
const backend_ops *backend_get(enum backend_kind kind);

#endif
