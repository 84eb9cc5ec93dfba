/*
 * kernels_impl.h - what kernels.c and kernels_avx2.c share (internal to src/backend/cpu).
 */
#ifndef ER_BACKEND_CPU_KERNELS_IMPL_H
#define ER_BACKEND_CPU_KERNELS_IMPL_H

#include <stdint.h>

#include "backend/cpu/kernels.h"
#include "quant/blocks.h"

void quantize_row_f32_ref(const float *x, void *y, int64_t n);
void quantize_row_q8_0_ref(const float *x, void *y, int64_t n);
void quantize_row_q8_1_ref(const float *x, void *y, int64_t n);
void quantize_row_q8_K_ref(const float *x, void *y, int64_t n);

/* bsums[k] = sum of qs[16k .. 16k + 15] */
void q8_K_bsums(block_q8_K *b);

/* The AVX2 row for `type` (NULL when none), without checking the CPU: kernels_avx2.c. */
const cpu_kernels *cpu_kernels_avx2_row(uint32_t type);

#endif
