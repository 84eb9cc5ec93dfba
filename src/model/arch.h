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

typedef struct arch_desc {
    const char *name;  /* general.architecture, and the prefix of its metadata keys */
    unsigned features; /* enum er_feature every file of it needs */
    int rope_neox;     /* llama.cpp's LLAMA_ROPE_TYPE_NEOX: pairs (i, i + n_rot / 2) */
    /* ER_FEAT_SLIDING_WINDOW: every swa_period-th layer (the last of each period) is
     * global, the others slide (window from "<arch>.attention.sliding_window") with RoPE
     * base rope_base_swa */
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
enum arch_dim { DIM_EMBD, DIM_Q, DIM_KV, DIM_V, DIM_O, DIM_FF, DIM_HEAD };

/* A tensor of every layer, "blk.N.<name>". */
typedef struct layer_tensor {
    const char *name;
    int is_matrix;      /* an er_weight (n_out rows of n_in), else an F32 vector of n_in */
    enum arch_dim n_in, n_out;
    unsigned feature;   /* bound only for models with this feature; 0: every model */
    size_t offset;      /* of its er_weight or const float * in layer_weights */
} layer_tensor;

extern const layer_tensor arch_layer_tensors[];
extern const size_t arch_n_layer_tensors;

/* The size `dim` stands for in config c. */
int64_t arch_dim_size(const model_config *c, enum arch_dim dim);

#endif
