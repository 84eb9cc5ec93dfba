/*
 * quants.h - the reference kernels of the quantized types (internal to src/quant and the
 * tests): dequantize (to_f32), dot with f32 activations (dot_f32), and quantize (from_f32),
 * one triple per type, plus the scale-fitting helpers the quantizers share.
 *
 * Conventions, every type:
 *   to_f32   computes each value with the exact float operations (and order) of the
 *            format's definition, so that it is bit-identical to GGML's dequantization.
 *   dot_f32  is dequantize-then-dot, accumulating in one float in element order: it gives
 *            the same bits as to_f32 followed by a plain dot product.
 *   from_f32 is round-to-nearest with a scale search that minimizes the squared error of
 *            each block (see fit.c); it never produces inf or NaN from finite input.
 * n is a multiple of the block size in every call.
 */
#ifndef ER_QUANT_QUANTS_H
#define ER_QUANT_QUANTS_H

#include <stddef.h>
#include <stdint.h>

#include "quant/blocks.h"

#define ER_DECLARE_QUANT(t)                                                  \
    void to_f32_##t##_ref(const void *src, float *dst, int64_t n);           \
    float dot_##t##_f32_ref(const void *w, const float *x, int64_t n);       \
    void from_f32_##t##_ref(const float *src, void *dst, int64_t n);

ER_DECLARE_QUANT(q4_0)
ER_DECLARE_QUANT(q4_1)
ER_DECLARE_QUANT(q5_0)
ER_DECLARE_QUANT(q5_1)
ER_DECLARE_QUANT(q8_0)
ER_DECLARE_QUANT(q2_K)
ER_DECLARE_QUANT(q3_K)
ER_DECLARE_QUANT(q4_K)
ER_DECLARE_QUANT(q5_K)
ER_DECLARE_QUANT(q6_K)

/* Q8_K is an activation format only: dequantization, for tests and tools. */
void to_f32_q8_K_ref(const void *src, float *dst, int64_t n);

/* ---- fitting helpers (fit.c) ------------------------------------------------------- */

/* Round to nearest (ties to even) and clamp to [lo, hi]; NaN gives lo. */
static inline int quant_nearest(float v, int lo, int hi) {
    if (!(v > (float)lo))
        return lo;
    if (!(v < (float)hi))
        return hi;
    /* |v| < 2^22 here: adding 1.5 * 2^23 leaves the rounded integer in the low mantissa
     * bits (the FPU rounds to nearest even) */
    union {
        float f;
        uint32_t u;
    } t = {v + 12582912.0f};
    return (int32_t)(t.u & 0x007fffffu) - 0x00400000;
}

/* Symmetric fit of n values (n <= 32): the scale s that minimizes sum (x - s*q)^2 over
 * codes q in [qmin, qmax] (qmin < 0 < qmax), by a grid over the code that the largest
 * value gets (either end of the range) followed by least-squares refinement. Writes the
 * codes to L and returns s (0 when every x is 0). */
float quant_fit_sym(const float *x, int n, int qmin, int qmax, int8_t *L);

/* Affine fit of n values (n <= 32): a >= 0 and o minimizing sum (x - (a*q + o))^2 over
 * codes q in [0, nmax]; with nonpos_offset, o is constrained to o <= 0 (the K types
 * store the offset as -dmin * m with m >= 0). Writes the codes to L. */
void quant_fit_affine(const float *x, int n, int nmax, int nonpos_offset, uint8_t *L, float *a, float *o);

/* Least-squares a > 0 and o (o <= 0 with nonpos_offset) for fixed codes L; returns the
 * squared error of (a, o) rounded to float, or -1 when no such fit exists. */
double quant_affine_ls(const float *x, int n, const uint8_t *L, int nonpos_offset, float *a, float *o);

/* An f16 scale from a float, saturated to +-65504 so that it never becomes inf. */
uint16_t quant_f16_sat(float s);

/* dot_f32 of any block type through its to_f32: dequantize a block into a buffer (at most
 * QK_K values), then multiply-add in element order. */
float quant_dot_by_blocks(void (*to_f32)(const void *, float *, int64_t), size_t type_size, int64_t block_size,
                          const void *w, const float *x, int64_t n);

#endif
