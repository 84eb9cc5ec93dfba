/*
 * types.h - the tensor type table: one row per GGML type id.
 *
 * Every type the GGUF format defines that we know the size of has a row (name, block
 * size in elements, bytes per block), so that any valid file can be parsed and
 * described by `info`. Types we compute with also carry kernels; a NULL kernel means
 * "known, not supported yet", which the model loader reports by tensor name.
 * Adding a quant type: its block layout in quant/blocks.h, a row here, its reference
 * kernels (quants.h), then its CPU fast path in backend/cpu/kernels.c.
 */
#ifndef ER_QUANT_TYPES_H
#define ER_QUANT_TYPES_H

#include <stddef.h>
#include <stdint.h>

/* GGML type ids, as stored in GGUF tensor infos (ggml.h, enum ggml_type). */
enum er_type {
    ER_TYPE_F32 = 0,
    ER_TYPE_F16 = 1,
    ER_TYPE_Q4_0 = 2,
    ER_TYPE_Q4_1 = 3,
    ER_TYPE_Q5_0 = 6,
    ER_TYPE_Q5_1 = 7,
    ER_TYPE_Q8_0 = 8,
    ER_TYPE_Q8_1 = 9,
    ER_TYPE_Q2_K = 10,
    ER_TYPE_Q3_K = 11,
    ER_TYPE_Q4_K = 12,
    ER_TYPE_Q5_K = 13,
    ER_TYPE_Q6_K = 14,
    ER_TYPE_Q8_K = 15,
    ER_TYPE_I8 = 24,
    ER_TYPE_I16 = 25,
    ER_TYPE_I32 = 26,
    ER_TYPE_I64 = 27,
    ER_TYPE_F64 = 28,
    ER_TYPE_BF16 = 30,
    ER_TYPE_COUNT = 40, /* table size: ids at or above are unknown */
};

/* dst[0..n) = the values of n elements starting at a block boundary; n % block_size == 0 */
typedef void (*er_to_f32_fn)(const void *src, float *dst, int64_t n);
/* dot product of n weight elements (block-aligned) with n f32 activations */
typedef float (*er_dot_f32_fn)(const void *w, const float *x, int64_t n);
/* dst = n values (n % block_size == 0) quantized to the type: the reference quantizer */
typedef void (*er_from_f32_fn)(const float *src, void *dst, int64_t n);

typedef struct er_type_traits {
    const char *name;     /* NULL: unknown id */
    int64_t block_size;   /* elements per block */
    size_t type_size;     /* bytes per block */
    er_to_f32_fn to_f32;  /* NULL: we cannot compute with this type yet */
    er_dot_f32_fn dot_f32; /* the numerics of the reference forward pass: equal, bit for
                              bit, to to_f32 followed by a dot product in element order */
    er_from_f32_fn from_f32; /* NULL: we cannot write this type */
} er_type_traits;

/* The row for `type`, or NULL when the id is unknown. */
const er_type_traits *er_type_get(uint32_t type);

/* Bytes of a row of n elements, or 0 when n is not a whole number of blocks. */
size_t er_type_row_size(const er_type_traits *traits, int64_t n);

#endif
