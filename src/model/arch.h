/*
 * arch.h - the architecture table: per architecture (general.architecture) its metadata
 * prefix, the features it needs (backend.h), its RoPE pairing and sliding-window
 * pattern; and the per-layer tensors with the feature each belongs to. The loader reads
 * only these tables, so an architecture is one row here, and a feature (its tensors,
 * its metadata) a few rows plus its code in each backend's forward pass.
 */
#ifndef ER_MODEL_ARCH_H
#define ER_MODEL_ARCH_H

#include <stddef.h>

#include "backend/backend.h"
#include "edgerunner.h"

/* How an architecture's files store the layer's matrices (arch_desc.layout). A fused
 * tensor is bound as one matrix and handed to the backends as views of its row ranges
 * (rows are contiguous), so no backend knows the difference. */
enum arch_layout {
    ARCH_FUSED_QKV = 1u << 0,     /* attn_qkv: wq, wk, wv stacked (Phi-3) */
    ARCH_FUSED_GATE_UP = 1u << 1, /* ffn_up of 2 n_ff rows: w_gate, w_up stacked (Phi-3) */
};

typedef struct arch_desc {
    const char *name;  /* general.architecture, and the prefix of its metadata keys */
    unsigned features; /* enum er_feature every file of it needs */
    unsigned layout;   /* enum arch_layout */
    int rope_neox;     /* llama.cpp's LLAMA_ROPE_TYPE_NEOX: pairs (i, i + n_rot / 2) */
    /* Sliding windows ("<arch>.attention.sliding_window"). swa_period > 0: the key is
     * required and every swa_period-th layer (the last of each period) is global, the
     * others slide with RoPE base rope_base_swa (Gemma-3). swa_period 0: where the file
     * has the key and it is not 0, every layer slides, with the model's RoPE base
     * (Mistral, Phi-3). */
    int swa_period;
    float rope_base_swa;
    /* Checks what the common metadata cannot say (NULL: none); c is read already. */
    er_status (*check)(const model_config *c, const char *path);
} arch_desc;

/* The row of general.architecture `name` (len bytes), or NULL. */
const arch_desc *arch_find(const char *name, size_t len);
/* "llama, qwen2, ...": the names of every row, for messages, into buf (cap > 0). */
void arch_names(char *buf, size_t cap);

/* The sizes a tensor's shape is made of. */
enum arch_dim { DIM_NONE, DIM_EMBD, DIM_Q, DIM_KV, DIM_V, DIM_O, DIM_FF, DIM_HEAD };

/* A tensor of every layer, "blk.N.<name>". */
typedef struct layer_tensor {
    const char *name;
    int is_matrix; /* an er_weight (n_out rows of n_in), else an F32 vector of n_in */
    enum arch_dim n_in;
    /* a matrix's rows: n_out[0], or for a fused tensor the rows of each part, stacked, which
     * go to consecutive er_weight fields from offset on (DIM_NONE ends the list) */
    enum arch_dim n_out[3];
    unsigned feature;     /* bound only for models with this feature; 0: every model */
    unsigned layout_on;   /* bound only for architectures with all these arch_layout bits */
    unsigned layout_off;  /* ... and none of these */
    size_t offset;        /* of its (first) er_weight or const float * in layer_weights */
} layer_tensor;

extern const layer_tensor arch_layer_tensors[];
extern const size_t arch_n_layer_tensors;

/* The size `dim` stands for in config c. */
int64_t arch_dim_size(const model_config *c, enum arch_dim dim);

#endif
