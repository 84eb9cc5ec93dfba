/*
 * mix.c - per-tensor type choice of the quantize targets (see mix.h).
 *
 * The mix rules are llama.cpp's (src/llama-quant.cpp, llama_tensor_get_type) restricted to
 * dense models (no experts) and to the file types we write; tests/quant/test_quant.py checks
 * them against llama.cpp's own quantizer, tensor by tensor.
 */
#define _POSIX_C_SOURCE 200809L

#include "quant/mix.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "quant/types.h"

enum recipe { PURE = 0, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M };

/* llama_ftype values (llama.h) */
static const quant_mix mixes[] = {
    {"F32", 0, ER_TYPE_F32, PURE},        {"F16", 1, ER_TYPE_F16, PURE},       {"BF16", 32, ER_TYPE_BF16, PURE},
    {"Q8_0", 7, ER_TYPE_Q8_0, PURE},      {"Q4_0", 2, ER_TYPE_Q4_0, PURE},     {"Q4_1", 3, ER_TYPE_Q4_1, PURE},
    {"Q5_0", 8, ER_TYPE_Q5_0, PURE},      {"Q5_1", 9, ER_TYPE_Q5_1, PURE},     {"Q2_K", 10, ER_TYPE_Q2_K, PURE},
    {"Q3_K", 12, ER_TYPE_Q3_K, PURE},     {"Q4_K", 15, ER_TYPE_Q4_K, PURE},    {"Q5_K", 17, ER_TYPE_Q5_K, PURE},
    {"Q6_K", 18, ER_TYPE_Q6_K, PURE},     {"Q4_K_S", 14, ER_TYPE_Q4_K, Q4_K_S}, {"Q4_K_M", 15, ER_TYPE_Q4_K, Q4_K_M},
    {"Q5_K_S", 16, ER_TYPE_Q5_K, Q5_K_S}, {"Q5_K_M", 17, ER_TYPE_Q5_K, Q5_K_M},
};

const quant_mix *quant_mix_find(const char *name) {
    for (size_t i = 0; name && i < sizeof mixes / sizeof mixes[0]; i++)
        if (!strcasecmp(name, mixes[i].name))
            return &mixes[i];
    return NULL;
}

const char *quant_mix_names(void) {
    return "F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K Q4_K_S Q4_K_M Q5_K_S Q5_K_M";
}

static int ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

int quant_mix_is_weight(const char *name, int n_dims) {
    static const char *const keep[] = {
        "_norm.weight",  "ffn_gate_inp.weight", "altup", "laurel", "per_layer_model_proj", "ssm_conv1d",
        "attn_rel_b.weight", "position_embd", "token_types",
    };
    if (n_dims < 2 || !ends_with(name, "weight"))
        return 0;
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        if (strstr(name, keep[i]))
            return 0;
    return 1;
}

/* llama.cpp: more bits in the first and last eighth of the layers and every third between */
static int use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static int64_t layer_of(const char *name) {
    int layer = -1;
    return sscanf(name, "blk.%d.", &layer) == 1 ? layer : -1;
}

static uint32_t recipe_type(const quant_mix *mix, const quant_model_desc *m, const char *name, const int64_t *ne) {
    uint32_t t = mix->base;
    const int is_output = !strcmp(name, "output.weight");
    const int is_embd = !strcmp(name, "token_embd.weight");
    if (is_output || (m->tied && is_embd)) /* the output head: Q6_K (Q8_0 when 256 does not divide the row) */
        return ne[0] % er_type_get(t)->block_size != 0 ? ER_TYPE_Q8_0 : ER_TYPE_Q6_K;
    if (is_embd)
        return t;
    const int64_t layer = layer_of(name);
    if (strstr(name, "attn_v.weight")) {
        if ((mix->recipe == Q4_K_M || mix->recipe == Q5_K_M) && use_more_bits(layer, m->n_attn_v))
            t = ER_TYPE_Q6_K;
        else if (mix->recipe == Q4_K_S && layer < 4)
            t = ER_TYPE_Q5_K;
        if (m->llama_70b && (t == ER_TYPE_Q3_K || t == ER_TYPE_Q4_K))
            t = ER_TYPE_Q5_K;
    } else if (strstr(name, "ffn_down")) {
        if ((mix->recipe == Q4_K_M || mix->recipe == Q5_K_M) && use_more_bits(layer, m->n_layer))
            t = ER_TYPE_Q6_K;
        else if (mix->recipe == Q4_K_S && layer < m->n_layer / 8)
            t = ER_TYPE_Q5_K;
    } else if (strstr(name, "attn_qkv.weight")) {
        if (mix->recipe == Q4_K_M)
            t = ER_TYPE_Q5_K;
        else if (mix->recipe == Q5_K_M)
            t = ER_TYPE_Q6_K;
    }
    return t;
}

uint32_t quant_mix_tensor_type(const quant_mix *mix, const quant_model_desc *model, const char *name, int n_dims,
                               const int64_t *ne, uint32_t cur, int *fell_back) {
    if (fell_back)
        *fell_back = 0;
    if (!quant_mix_is_weight(name, n_dims))
        return cur;
    uint32_t t = mix->recipe == PURE ? mix->base : recipe_type(mix, model, name, ne);
    if (ne[0] % er_type_get(t)->block_size == 0)
        return t;
    if (fell_back)
        *fell_back = 1;
    switch (t) {
    case ER_TYPE_Q2_K:
    case ER_TYPE_Q3_K: t = ER_TYPE_Q4_0; break;
    case ER_TYPE_Q4_K: t = ER_TYPE_Q5_0; break;
    case ER_TYPE_Q5_K: t = ER_TYPE_Q5_1; break;
    case ER_TYPE_Q6_K: t = ER_TYPE_Q8_0; break;
    default: t = ER_TYPE_F16; break;
    }
    return ne[0] % er_type_get(t)->block_size == 0 ? t : ER_TYPE_F16;
}
