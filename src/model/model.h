/*
 * model.h - a loaded model (config from metadata, weights bound as views into the
 * mapping, through the architecture table) and a context (a backend's KV cache and
 * scratch, sized once at creation, behind the ops table of backend.h).
 *
 * Invariants after er_model_load succeeds: every weight exists with the shape the
 * config implies and a type we can compute with; every 1-D tensor is copied to F32;
 * nothing in the token loop allocates or re-checks.
 */
#ifndef ER_MODEL_MODEL_H
#define ER_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "edgerunner.h"
#include "io/gguf.h"
#include "model/arch.h"
#include "tokenizer/vocab.h"

struct er_model {
    model_view view; /* path, config, weights: what the backends see */
    const arch_desc *arch;
    char *path;
    er_backend backend;
    const backend_ops *device; /* the backend holding the weights (model_upload), or NULL */
    void *dev;                 /* its copy of the weights */
    gguf_file *file;           /* owns the read-only mapping the weights point into */
    const float *rope_freqs;   /* (n_rot / 2) frequency divisors (Llama 3.1), or NULL */
    const float *rope_long;    /* (n_rot / 2) longrope divisors beyond n_ctx_orig (Phi-3), or NULL */
    const float *rope_short;   /* (n_rot / 2) longrope divisors within it, or NULL */
    float *f32_arena;          /* owns every 1-D tensor, converted to F32 */
    uint8_t *quant_arena;      /* owns the weights converted to er_model_params.type, or NULL */
    vocab vocab;
};

struct er_context {
    er_model *model;
    const backend_ops *ops; /* chosen once, at creation */
    void *bctx;             /* the backend's context */
    int64_t n_ctx;
    int64_t n_batch;
    int n_seq;      /* sequences, each with n_ctx positions of its own */
    int64_t *n_pos; /* (n_seq) positions each sequence's cache holds; [0] is er_context_decode's */
    int64_t *next_pos; /* (n_seq) scratch of er_context_decode_batch's checks */
    int8_t *no_logits; /* (n_batch) zeros: the flags of a batch that asks for no logits */
    int n_threads;
    uint32_t type_k, type_v; /* the KV cache's element types (enum er_type) */
    int has_logits;
    float *logits;  /* (n_vocab) of the last token decoded */
    float *batch_logits;     /* (n_batch_logits, n_vocab) of the last batch decoded with logits NULL: the
                              * backend's (logits_buffer) or own_batch_logits */
    int64_t n_batch_logits;
    float *own_batch_logits; /* (own_batch_rows, n_vocab) where the backend has no logits_buffer */
    int64_t own_batch_rows;
    float *rope_cs; /* (1 or 2, n_ctx, n_rot / 2, 2) the RoPE tables handed to the backend */
};

/* Refuses a model a backend cannot run, naming the first feature it lacks. */
er_status model_check_backend(const er_model *m, const backend_ops *ops);

/* The RoPE table of config c at RoPE base `base`: cs (n_ctx, n_rot / 2, 2) cos and sin
 * of position * pos_scale * base^(-2i / n_rot) / freq_divisors[i], times
 * rope_attn_factor, computed in double and rounded once: every backend rotates by these
 * same floats. */
void model_rope_table(const model_config *c, float base, float pos_scale, const float *freq_divisors, int64_t n_ctx,
                      float *cs);

/* One line naming the model's architecture, shape and features (`edgerunner info`). */
void model_describe(const er_model *m, char *buf, size_t cap);

/* Development only (`bench --profile`): the backend's kernel-by-kernel timing of one
 * decode step at position pos and of a prefill of tokens; ER_ERR_UNSUPPORTED where the
 * backend has none. */
er_status context_profile(er_context *ctx, int64_t pos, const int32_t *tokens, int64_t n_tokens, char *report,
                          size_t cap);

#endif
