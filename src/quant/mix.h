/*
 * mix.h - which type each tensor gets when a model is quantized.
 *
 * Two kinds of target, by name:
 *   a single type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K):
 *     every weight in that type, as llama.cpp's `llama-quantize --pure TYPE`;
 *   a mix (Q4_K_M, Q4_K_S, Q5_K_M, Q5_K_S): llama.cpp's recipe for that file type: the
 *     output head (and a tied token embedding) in Q6_K, attn_v and ffn_down in Q6_K in the
 *     layers llama.cpp's use_more_bits() picks (_M) or Q5_K in the first ones (_S),
 *     everything else in the base type.
 * Weights are tensors of 2 or more dimensions whose name ends in "weight", except norms
 * (and a few small kinds llama.cpp also leaves alone); everything else keeps its type.
 * A weight whose row length is not a multiple of its type's block size falls back as in
 * llama.cpp: Q2_K, Q3_K -> Q4_0; Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K -> Q8_0, then F16 when
 * even 32 does not divide the row (llama.cpp refuses such rows for the 32-element types;
 * we write F16).
 */
#ifndef ER_QUANT_MIX_H
#define ER_QUANT_MIX_H

#include <stdint.h>

typedef struct quant_mix {
    const char *name;   /* "Q4_K_M" */
    uint32_t file_type; /* general.file_type: llama.cpp's llama_ftype */
    uint32_t base;      /* enum er_type of the weights the recipe does not single out */
    int recipe;         /* 0: every weight in base (pure); else one of llama.cpp's mixes */
} quant_mix;

/* The target named `name` (case-insensitive), or NULL. */
const quant_mix *quant_mix_find(const char *name);

/* All target names, space-separated (for usage messages). */
const char *quant_mix_names(void);

/* What a recipe needs to know about the whole model. */
typedef struct quant_model_desc {
    int64_t n_layer;  /* {arch}.block_count */
    int64_t n_attn_v; /* number of attn_v weights (llama.cpp counts these separately) */
    int tied;         /* no output.weight: the token embedding is also the output head */
    int llama_70b;    /* llama with 80 layers and grouped-query attention (llama.cpp's 70B rule) */
} quant_model_desc;

/* Whether a tensor is a weight that a target may change the type of. */
int quant_mix_is_weight(const char *name, int n_dims);

/* The type tensor `name` (n_dims dimensions ne, now of type cur) gets under mix. Sets
 * *fell_back (may be NULL) when the row length forced a fallback type. */
uint32_t quant_mix_tensor_type(const quant_mix *mix, const quant_model_desc *model, const char *name, int n_dims,
                               const int64_t *ne, uint32_t cur, int *fell_back);

#endif
