/*
 * arch.c - the architecture table (arch.h), following llama.cpp's conventions for each
 * architecture's GGUF files (llama-arch.cpp, llama-model.cpp).
 *
 * Adding an architecture: a row in `archs` (its features, layout, RoPE pairing, sliding
 * windows, any check); a new way of storing the layer's matrices: a layout bit and its
 * tensor rows here (the backends see the same views); a new feature: its bit in
 * backend.h, its tensors in `arch_layer_tensors`, what it reads from the metadata in
 * load.c's read_config, and its code in each backend that implements it (a backend
 * without it refuses such models by the feature's name).
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
    /* llama: Llama 1-3, SmolLM, TinyStories, and Mistral (with its sliding window where the
     * file carries one) */
    {"llama", 0, 0, 0, 0, 0.0f, NULL},
    {"qwen2", ER_FEAT_QKV_BIAS, 0, 1, 0, 0.0f, NULL},
    {"qwen3", ER_FEAT_QK_NORM, 0, 1, 0, 0.0f, NULL},
    /* Phi-3 and Phi-4: the Llama layer with fused Q/K/V and gate/up matrices, NeoX pairing;
     * partial rotary and longrope come from the metadata and rope factor tensors */
    {"phi3", 0, ARCH_FUSED_QKV | ARCH_FUSED_GATE_UP, 1, 0, 0.0f, NULL},
    /* llama.cpp's gemma3: embeddings scaled by sqrt(n_embd), GeGLU, post-norms, every
     * sixth layer global (5, 11, ...), the others sliding with RoPE base 10000; the
     * attention scale stays 1/sqrt(head_dim) (query_pre_attn_scalar = head_dim in every
     * size but 27B, refused by check_gemma3) */
    {"gemma3", ER_FEAT_QK_NORM | ER_FEAT_POST_NORMS | ER_FEAT_GEGLU | ER_FEAT_SLIDING_WINDOW | ER_FEAT_EMBD_SCALE, 0,
     1, 6, 10000.0f, check_gemma3},
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

#define MAT(name, in, out, feat, field) {name, 1, in, {out, DIM_NONE, DIM_NONE}, feat, 0, 0, offsetof(layer_weights, field)}
#define VEC(name, n, feat, field) {name, 0, n, {n, DIM_NONE, DIM_NONE}, feat, 0, 0, offsetof(layer_weights, field)}
/* a matrix of separate files, replaced by a fused tensor in the architectures with `fused` */
#define MAT_UNLESS(name, in, out, fused, field) {name, 1, in, {out, DIM_NONE, DIM_NONE}, 0, 0, fused, offsetof(layer_weights, field)}

/* In the order the loader binds them (and reports the first missing one). */
const layer_tensor arch_layer_tensors[] = {
    VEC("attn_norm.weight", DIM_EMBD, 0, attn_norm),
    VEC("ffn_norm.weight", DIM_EMBD, 0, ffn_norm),
    MAT_UNLESS("attn_q.weight", DIM_EMBD, DIM_Q, ARCH_FUSED_QKV, wq),
    MAT_UNLESS("attn_k.weight", DIM_EMBD, DIM_KV, ARCH_FUSED_QKV, wk),
    MAT_UNLESS("attn_v.weight", DIM_EMBD, DIM_V, ARCH_FUSED_QKV, wv),
    {"attn_qkv.weight", 1, DIM_EMBD, {DIM_Q, DIM_KV, DIM_V}, 0, ARCH_FUSED_QKV, 0, offsetof(layer_weights, wq)},
    MAT("attn_output.weight", DIM_O, DIM_EMBD, 0, wo),
    MAT_UNLESS("ffn_gate.weight", DIM_EMBD, DIM_FF, ARCH_FUSED_GATE_UP, w_gate),
    MAT_UNLESS("ffn_up.weight", DIM_EMBD, DIM_FF, ARCH_FUSED_GATE_UP, w_up),
    {"ffn_up.weight", 1, DIM_EMBD, {DIM_FF, DIM_FF, DIM_NONE}, 0, ARCH_FUSED_GATE_UP, 0, offsetof(layer_weights, w_gate)},
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
    case DIM_NONE: return 0;
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
