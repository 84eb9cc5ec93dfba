/*
 * common.cuh - device helpers shared by the kernel files: warp and block reductions,
 * quant bytes to floats, F16/BF16 pairs to floats, one element of a weight row,
 * programmatic dependent launch.
 */
#ifndef ER_BACKEND_CUDA_COMMON_CUH
#define ER_BACKEND_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "backend/cuda/kernels.h"

#define ER_CUDA_LAUNCH_CHECK() cudaGetLastError()

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
 * `red` is 32 floats of shared memory. */
static __device__ __forceinline__ float block_sum(float v, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* red may still be read from a previous call */
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = lane < n_warps ? red[lane] : 0.0f;
    return warp_sum(v);
}

/* Elements of one 16-byte chunk of a row, per weight type. */
#define CHUNK_ELEMS(WT) ((WT) == CUDA_W_Q4_0 ? 32 : (WT) == CUDA_W_Q8_0 ? 16 : (WT) == CUDA_W_F32 ? 4 : 8)
#define HAS_SCALES(WT) ((WT) == CUDA_W_Q8_0 || (WT) == CUDA_W_Q4_0)

/* Biased quant byte k of word u as a float in [-128, 127], exactly: the byte goes into
 * the mantissa of 2^23 (one PRMT), then one FADD removes 2^23 + 128. */
static __device__ __forceinline__ float q8_byte(uint32_t u, int k) {
    return __int_as_float((int)__byte_perm(u, 0x4B000000u, 0x7540u | (uint32_t)k)) - 8388736.0f;
}

/* Nibble byte k of a masked word u (values 0..15) as a float in [-8, 7], exactly. */
static __device__ __forceinline__ float q4_byte(uint32_t u, int k) {
    return __int_as_float((int)__byte_perm(u, 0x4B000000u, 0x7540u | (uint32_t)k)) - 8388616.0f;
}

/* The two F16 or BF16 elements of a 32-bit word (the lower one first) as floats. */
static __device__ __forceinline__ float2 pair_f32(uint32_t u, int wt) {
    if (wt == CUDA_W_BF16)
        return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
    return __half22float2(*reinterpret_cast<const __half2 *>(&u));
}

/* Programmatic dependent launch (sm_90): a kernel launched with the PDL attribute may
 * start once every block of the previous kernel has called pdl_launch_next (or ended);
 * it must pdl_wait before reading or writing anything earlier kernels write, and the
 * wait returns when the previous kernel has completed, which itself waited for its own
 * predecessor. A kernel's work on read-only data (weight loads) goes before its wait;
 * see matvec.cu for where the decode kernels let the next one launch. */
static __device__ __forceinline__ void pdl_wait(void) { asm volatile("griddepcontrol.wait;" ::: "memory"); }
static __device__ __forceinline__ void pdl_launch_next(void) { asm volatile("griddepcontrol.launch_dependents;"); }

/* Tensor cores, mma.sync m16n8k16 (F16 inputs, F32 sums). Fragment layouts (PTX ISA),
 * g = lane / 4, c = lane % 4:
 *   A (16 x 16, row): a0 (g, 2c..2c+1), a1 (g + 8, 2c..), a2 (g, 2c + 8..), a3 (g + 8, 2c + 8..)
 *   B (16 x 8, col):  b0 (k 2c..2c+1, n g), b1 (k 2c + 8.., n g)
 *   C (16 x 8):       c0, c1 (g, 2c..2c+1), c2, c3 (g + 8, 2c..2c+1) */
static __device__ __forceinline__ void mma_16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats as an F16 pair, lo in the low half (the lower column of a fragment). */
static __device__ __forceinline__ uint32_t half2_bits(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
}

/* One element of a row, for rows whose length is not a whole number of chunks. */
template <int WT>
static __device__ __forceinline__ float elem(const uint8_t *w_row, const __half *d_row, int i) {
    if (WT == CUDA_W_Q8_0)
        return (float)((int)w_row[i] - 128) * __half2float(d_row[i >> 5]);
    if (WT == CUDA_W_Q4_0) {
        const uint8_t b = w_row[(i >> 5) * 16 + (i & 15)];
        return (float)((int)((i & 16) ? b >> 4 : b & 15) - 8) * __half2float(d_row[i >> 5]);
    }
    if (WT == CUDA_W_F32)
        return reinterpret_cast<const float *>(w_row)[i];
    const uint16_t h = reinterpret_cast<const uint16_t *>(w_row)[i];
    if (WT == CUDA_W_BF16)
        return __uint_as_float((uint32_t)h << 16);
    return __half2float(__ushort_as_half(h));
}


#endif
