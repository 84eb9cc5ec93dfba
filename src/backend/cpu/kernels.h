/*
 * kernels.h - the CPU fast path's table: for every weight type, the activation format its
 * dot product consumes, the function that converts an f32 activation row to that format,
 * and the dot product of one weight row with one converted activation row.
 *
 * A matrix-vector product with this table, per weight type (chosen once, at load):
 *     const cpu_kernels *k = cpu_kernels_get(type);
 *     k->quantize_row(x, xq, n);                   xq: cpu_act_row_size(k, n) bytes
 *     for each row r: y[r] = k->vec_dot(w + r * row_size, xq, n);
 * Activation formats (as llama.cpp's CPU backend):
 *   F32, F16, BF16 weights   f32 activations as they are (quantize_row copies them)
 *   Q4_0, Q5_0, Q8_0         Q8_0 blocks: f16 d, 32 int8 (max |x| -> 127)
 *   Q4_1, Q5_1               Q8_1 blocks: Q8_0 plus s = d * sum(q) (for the offset m)
 *   Q2_K .. Q6_K             Q8_K blocks: f32 d, 256 int8, 16 int16 sums of 16
 * so the integer products are exact and only the per-block scales are float. Rounding the
 * activations to 8 bits costs accuracy against the f32 reference forward pass (traits->
 * dot_f32); tests/unit/test_quant.c bounds it per type.
 *
 * Each row of the table has a scalar version (cpu_kernels_ref: plain C, the oracle of the
 * SIMD code, same activation format) and, on x86-64, an AVX2 version compiled with
 * target attributes (no global -mavx2): cpu_kernels_get() picks AVX2 when the CPU has
 * AVX2, FMA and F16C. The two produce the same activation bytes (those of llama.cpp's CPU
 * backend on x86, bit for bit: kernels.c says which of ggml's quantizers that is) and the
 * same integer sums; only the order of the float accumulation differs.
 */
#ifndef ER_BACKEND_CPU_KERNELS_H
#define ER_BACKEND_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* y = x (n f32 values, n a multiple of the format's block size) in the activation format */
typedef void (*cpu_quantize_row_fn)(const float *x, void *y, int64_t n);
/* dot product of n weight elements (block-aligned) with n activations in vec_dot_type */
typedef float (*cpu_vec_dot_fn)(const void *w, const void *y, int64_t n);

typedef struct cpu_kernels {
    const char *impl;            /* "avx2" or "scalar" */
    uint32_t vec_dot_type;       /* enum er_type of the activations: F32, Q8_0, Q8_1 or Q8_K */
    cpu_quantize_row_fn quantize_row;
    cpu_vec_dot_fn vec_dot;
} cpu_kernels;

/* The fastest kernels for weight type `type` on this CPU, or NULL when it has none. */
const cpu_kernels *cpu_kernels_get(uint32_t type);

/* The scalar reference kernels, or NULL. */
const cpu_kernels *cpu_kernels_ref(uint32_t type);

/* The AVX2 kernels, or NULL when the type has none or this CPU/build cannot run them. */
const cpu_kernels *cpu_kernels_avx2(uint32_t type);

/* Bytes of one activation row of n elements in k's format (0 if n is not block-aligned). */
size_t cpu_act_row_size(const cpu_kernels *k, int64_t n);

#endif
