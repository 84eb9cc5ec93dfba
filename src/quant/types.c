/*
 * types.c - the type table and the scalar reference kernels for F32, F16, BF16, Q8_0.
 *
 * The reference kernels are plain C, no fast-math, accumulating in float in element
 * order; they define what every faster path must reproduce (within a per-type bound).
 */
#include "quant/types.h"

#include <string.h>

#include "core/fp16.h"
#include "quant/blocks.h"

static void f32_to_f32_ref(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void f16_to_f32_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src; /* file data need not be 2-byte aligned for us: memcpy */
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = er_f16_to_f32(h);
    }
}

static void bf16_to_f32_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = er_bf16_to_f32(h);
    }
}

static void q8_0_to_f32_ref(const void *src, float *dst, int64_t n) {
    const block_q8_0 *blocks = src;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        const float d = er_f16_to_f32(blocks[b].d);
        for (int j = 0; j < QK8_0; j++)
            dst[b * QK8_0 + j] = d * (float)blocks[b].qs[j];
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

/* Same value as dequantize-then-dot: each weight is d * q rounded to float first. */
static float dot_q8_0_f32_ref(const void *w, const float *x, int64_t n) {
    const block_q8_0 *blocks = w;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        const float d = er_f16_to_f32(blocks[b].d);
        for (int j = 0; j < QK8_0; j++)
            sum += (d * (float)blocks[b].qs[j]) * x[b * QK8_0 + j];
    }
    return sum;
}

/* Sizes of the types without kernels follow ggml.c's type_traits. */
static const er_type_traits type_table[ER_TYPE_COUNT] = {
    [ER_TYPE_F32] = {"F32", 1, 4, f32_to_f32_ref, dot_f32_f32_ref},
    [ER_TYPE_F16] = {"F16", 1, 2, f16_to_f32_ref, dot_f16_f32_ref},
    [ER_TYPE_Q4_0] = {"Q4_0", 32, 18, NULL, NULL},
    [ER_TYPE_Q4_1] = {"Q4_1", 32, 20, NULL, NULL},
    [ER_TYPE_Q5_0] = {"Q5_0", 32, 22, NULL, NULL},
    [ER_TYPE_Q5_1] = {"Q5_1", 32, 24, NULL, NULL},
    [ER_TYPE_Q8_0] = {"Q8_0", QK8_0, sizeof(block_q8_0), q8_0_to_f32_ref, dot_q8_0_f32_ref},
    [ER_TYPE_Q8_1] = {"Q8_1", 32, 36, NULL, NULL},
    [ER_TYPE_Q2_K] = {"Q2_K", 256, 84, NULL, NULL},
    [ER_TYPE_Q3_K] = {"Q3_K", 256, 110, NULL, NULL},
    [ER_TYPE_Q4_K] = {"Q4_K", 256, 144, NULL, NULL},
    [ER_TYPE_Q5_K] = {"Q5_K", 256, 176, NULL, NULL},
    [ER_TYPE_Q6_K] = {"Q6_K", 256, 210, NULL, NULL},
    [ER_TYPE_Q8_K] = {"Q8_K", 256, 292, NULL, NULL},
    [ER_TYPE_I8] = {"I8", 1, 1, NULL, NULL},
    [ER_TYPE_I16] = {"I16", 1, 2, NULL, NULL},
    [ER_TYPE_I32] = {"I32", 1, 4, NULL, NULL},
    [ER_TYPE_I64] = {"I64", 1, 8, NULL, NULL},
    [ER_TYPE_F64] = {"F64", 1, 8, NULL, NULL},
    [ER_TYPE_BF16] = {"BF16", 1, 2, bf16_to_f32_ref, dot_bf16_f32_ref},
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
