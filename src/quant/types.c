/*
 * types.c - the type table, and the scalar reference kernels of F32, F16 and BF16 (the
 * quantized types' are in legacy.c and kquants.c).
 *
 * The reference kernels are plain C, no fast-math, accumulating in float in element
 * order; they define what every faster path must reproduce (within a per-type bound).
 */
#include "quant/types.h"

#include <string.h>

#include "core/fp16.h"
#include "quant/quants.h"

static void f32_to_f32_ref(const void *restrict src, float *restrict dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void bf16_to_f32_ref(const void *restrict src, float *restrict dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = er_bf16_to_f32(h);
    }
}

static float dot_f32_f32_ref(const void *w, const float *x, int64_t n) {
    const float *wf = w;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++)
        sum += wf[i] * x[i];
    return sum;
}

static float dot_f16_f32_ref(const void *w, const float *x, int64_t n) {
    const uint8_t *p = w;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        sum += er_f16_to_f32(h) * x[i];
    }
    return sum;
}

static float dot_bf16_f32_ref(const void *w, const float *x, int64_t n) {
    const uint8_t *p = w;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        sum += er_bf16_to_f32(h) * x[i];
    }
    return sum;
}

static void f32_from_f32_ref(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void bf16_from_f32_ref(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        const uint16_t h = er_f32_to_bf16(src[i]);
        memcpy(p + 2 * i, &h, 2);
    }
}

float quant_dot_by_blocks(void (*to_f32)(const void *, float *, int64_t), size_t type_size, int64_t block_size,
                          const void *w, const float *x, int64_t n) {
    const uint8_t *p = w;
    float buf[QK_K]; /* one dequantized block */
    float sum = 0.0f;
    for (int64_t b = 0; b < n / block_size; b++) {
        to_f32(p + (size_t)b * type_size, buf, block_size);
        for (int64_t j = 0; j < block_size; j++)
            sum += buf[j] * x[b * block_size + j];
    }
    return sum;
}

/* Sizes of the types without kernels follow ggml.c's type_traits. */
#define QROW(T, t, QK) {#T, QK, sizeof(block_##t), to_f32_##t##_ref, dot_##t##_f32_ref, from_f32_##t##_ref}

/* Sizes of the types without kernels follow ggml.c's type_traits. */
static const er_type_traits type_table[ER_TYPE_COUNT] = {
    [ER_TYPE_F32] = {"F32", 1, 4, f32_to_f32_ref, dot_f32_f32_ref, f32_from_f32_ref},
    [ER_TYPE_F16] = {"F16", 1, 2, er_f16_row_to_f32, dot_f16_f32_ref, er_f32_row_to_f16},
    [ER_TYPE_Q4_0] = QROW(Q4_0, q4_0, QK4_0),
    [ER_TYPE_Q4_1] = QROW(Q4_1, q4_1, QK4_1),
    [ER_TYPE_Q5_0] = QROW(Q5_0, q5_0, QK5_0),
    [ER_TYPE_Q5_1] = QROW(Q5_1, q5_1, QK5_1),
    [ER_TYPE_Q8_0] = QROW(Q8_0, q8_0, QK8_0),
    [ER_TYPE_Q8_1] = {"Q8_1", QK8_1, sizeof(block_q8_1), NULL, NULL, NULL}, /* activations only */
    [ER_TYPE_Q2_K] = QROW(Q2_K, q2_K, QK_K),
    [ER_TYPE_Q3_K] = QROW(Q3_K, q3_K, QK_K),
    [ER_TYPE_Q4_K] = QROW(Q4_K, q4_K, QK_K),
    [ER_TYPE_Q5_K] = QROW(Q5_K, q5_K, QK_K),
    [ER_TYPE_Q6_K] = QROW(Q6_K, q6_K, QK_K),
    [ER_TYPE_Q8_K] = {"Q8_K", QK_K, sizeof(block_q8_K), NULL, NULL, NULL}, /* activations only */
    [ER_TYPE_I8] = {"I8", 1, 1, NULL, NULL, NULL},
    [ER_TYPE_I16] = {"I16", 1, 2, NULL, NULL, NULL},
    [ER_TYPE_I32] = {"I32", 1, 4, NULL, NULL, NULL},
    [ER_TYPE_I64] = {"I64", 1, 8, NULL, NULL, NULL},
    [ER_TYPE_F64] = {"F64", 1, 8, NULL, NULL, NULL},
    [ER_TYPE_BF16] = {"BF16", 1, 2, bf16_to_f32_ref, dot_bf16_f32_ref, bf16_from_f32_ref},
};

const er_type_traits *er_type_get(uint32_t type) {
    if (type >= ER_TYPE_COUNT || type_table[type].name == NULL)
        return NULL;
    return &type_table[type];
}

size_t er_type_row_size(const er_type_traits *traits, int64_t n) {
    if (n <= 0 || n % traits->block_size != 0)
        return 0;
    return (size_t)(n / traits->block_size) * traits->type_size;
}
