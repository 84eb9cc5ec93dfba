/*
 * arch.c - the architecture table (arch.h), following llama.cpp's conventions for each
 * architecture's GGUF files (llama-arch.cpp, llama-model.cpp).
 *
 * Adding an architecture: a row in `archs` (its features, RoPE pairing, any check);
 * a new feature: its bit in backend.h, its tensors in `arch_layer_tensors`, what it
 * reads from the metadata in load.c's read_config, and its code in each backend that
 * implements it (a backend without it refuses such models by the feature's name).
 */
#include "model/arch.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/status.h"

/* Gemma-3 27B scales attention by 1/sqrt(n_embd / n_head), not 1/sqrt(head_dim);
 * llama.cpp recognizes it by its 62 layers. */
static er_status check_gemma3(const model_config *c, const char *path) {
    if (c->n_layer == 62)
        return er_fail(ER_ERR_UNSUPPORTED, "%s: Gemma-3 27B (its attention scale) is not supported yet", path);
    return ER_OK;
}

static const arch_desc archs[] = {
    {"llama", 0, 0, 0, 0.0f, NULL},
    {"qwen2", ER_FEAT_QKV_BIAS, 1, 0, 0.0f, NULL},
    {"qwen3", ER_FEAT_QK_NORM, 1, 0, 0.0f, NULL},
    /* llama.cpp's gemma3: embeddings scaled by sqrt(n_embd), GeGLU, post-norms, every
     * sixth layer global (5, 11, ...), the others sliding with RoPE base 10000; the
     * attention scale stays 1/sqrt(head_dim) (query_pre_attn_scalar = head_dim in every
     * size but 27B, refused by check_gemma3) */
    {"gemma3", ER_FEAT_QK_NORM | ER_FEAT_POST_NORMS | ER_FEAT_GEGLU | ER_FEAT_SLIDING_WINDOW | ER_FEAT_EMBD_SCALE, 1,
     6, 10000.0f, check_gemma3},
};

const arch_desc *arch_find(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strlen(archs[i].name) == len && !memcmp(archs[i].name, name, len))
            return &archs[i];
    return NULL;
}

void arch_names(char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0] && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", archs[i].name);
}

#define MAT(name, in, out, feat, field) {name, 1, in, out, feat, offsetof(layer_weights, field)}
#define VEC(name, n, feat, field) {name, 0, n, n, feat, offsetof(layer_weights, field)}

/* In the order the loader binds them (and reports the first missing one). */
const layer_tensor arch_layer_tensors[] = {
    VEC("attn_norm.weight", DIM_EMBD, 0, attn_norm),
    VEC("ffn_norm.weight", DIM_EMBD, 0, ffn_norm),
    MAT("attn_q.weight", DIM_EMBD, DIM_Q, 0, wq),
    MAT("attn_k.weight", DIM_EMBD, DIM_KV, 0, wk),
    MAT("attn_v.weight", DIM_EMBD, DIM_V, 0, wv),
    MAT("attn_output.weight", DIM_O, DIM_EMBD, 0, wo),
    MAT("ffn_gate.weight", DIM_EMBD, DIM_FF, 0, w_gate),
    MAT("ffn_up.weight", DIM_EMBD, DIM_FF, 0, w_up),
    MAT("ffn_down.weight", DIM_FF, DIM_EMBD, 0, w_down),
    VEC("attn_q_norm.weight", DIM_HEAD, ER_FEAT_QK_NORM, q_norm),
    VEC("attn_k_norm.weight", DIM_HEAD, ER_FEAT_QK_NORM, k_norm),
    VEC("attn_q.bias", DIM_Q, ER_FEAT_QKV_BIAS, bq),
    VEC("attn_k.bias", DIM_KV, ER_FEAT_QKV_BIAS, bk),
    VEC("attn_v.bias", DIM_V, ER_FEAT_QKV_BIAS, bv),
    VEC("post_attention_norm.weight", DIM_EMBD, ER_FEAT_POST_NORMS, post_attn_norm),
    VEC("post_ffw_norm.weight", DIM_EMBD, ER_FEAT_POST_NORMS, post_ffn_norm),
};
const size_t arch_n_layer_tensors = sizeof arch_layer_tensors / sizeof arch_layer_tensors[0];

int64_t arch_dim_size(const model_config *c, enum arch_dim dim) {
    switch (dim) {
    case DIM_EMBD: return c->n_embd;
    case DIM_Q: return c->n_head * c->head_dim;
    case DIM_KV: return c->n_head_kv * c->head_dim;
    case DIM_V: return c->n_head_kv * c->head_dim_v;
    case DIM_O: return c->n_head * c->head_dim_v;
    case DIM_FF: return c->n_ff;
    case DIM_HEAD: return c->head_dim;
    }
    return 0;
}
