/*
 * common.cuh - device helpers shared by the kernel files: warp reductions and the
 * conversion of each weight type's 16-byte chunk to floats.
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

/* 4 low nibbles of u with x[0..3], 4 high nibbles with x[16..19] */
static __device__ __forceinline__ float dot8_q4(uint32_t u, const float *x) {
    const uint32_t lo = u & 0x0f0f0f0fu, hi = (u >> 4) & 0x0f0f0f0fu;
    float s = q4_byte(lo, 0) * x[0];
    s = fmaf(q4_byte(lo, 1), x[1], s);
    s = fmaf(q4_byte(lo, 2), x[2], s);
    s = fmaf(q4_byte(lo, 3), x[3], s);
    s = fmaf(q4_byte(hi, 0), x[16], s);
    s = fmaf(q4_byte(hi, 1), x[17], s);
    s = fmaf(q4_byte(hi, 2), x[18], s);
    return fmaf(q4_byte(hi, 3), x[19], s);
}

static __device__ __forceinline__ float dot4_q8(uint32_t u, const float *x) {
    float s = q8_byte(u, 0) * x[0];
    s = fmaf(q8_byte(u, 1), x[1], s);
    s = fmaf(q8_byte(u, 2), x[2], s);
    return fmaf(q8_byte(u, 3), x[3], s);
}

/* Programmatic dependent launch (sm_90): a kernel launched with the PDL attribute may
 * start while the previous kernel still runs; it must wait before reading anything that
 * kernel writes, and lets the next kernel start early in turn. Work that depends only
 * on read-only data (weight loads) goes before the wait. */
static __device__ __forceinline__ void pdl_wait(void) { asm volatile("griddepcontrol.wait;" ::: "memory"); }
static __device__ __forceinline__ void pdl_launch_next(void) { asm volatile("griddepcontrol.launch_dependents;"); }

/* Dot of a loaded 16-byte chunk v (chunk c of its row; Q8_0 scale d) with x = xs + c * CHUNK_ELEMS. */
template <int WT>
static __device__ __forceinline__ float chunk_fma(const uint4 v, float d, const float *x) {
    if (WT == CUDA_W_Q8_0) {
        float s = dot4_q8(v.x, x) + dot4_q8(v.y, x + 4) + dot4_q8(v.z, x + 8) + dot4_q8(v.w, x + 12);
        return s * d;
    } else if (WT == CUDA_W_Q4_0) {
        float s = dot8_q4(v.x, x) + dot8_q4(v.y, x + 4) + dot8_q4(v.z, x + 8) + dot8_q4(v.w, x + 12);
        return s * d;
    } else if (WT == CUDA_W_F32) {
        const float4 f = *reinterpret_cast<const float4 *>(&v);
        return fmaf(f.x, x[0], fmaf(f.y, x[1], fmaf(f.z, x[2], f.w * x[3])));
    } else {
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float lo, hi;
            if (WT == CUDA_W_BF16) {
                lo = __uint_as_float(u[i] << 16);
                hi = __uint_as_float(u[i] & 0xffff0000u);
            } else {
                const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&u[i]));
                lo = f.x;
                hi = f.y;
            }
            s = fmaf(lo, x[2 * i], s);
            s = fmaf(hi, x[2 * i + 1], s);
        }
        return s;
    }
}

/* Dot of chunk c of `row` (16 bytes) with xs[c * CHUNK_ELEMS ..]. */
template <int WT>
static __device__ __forceinline__ float chunk_dot(const uint8_t *w_row, const __half *d_row, int c, const float *xs) {
    const uint4 v = __ldg(reinterpret_cast<const uint4 *>(w_row) + c);
    const float d = WT == CUDA_W_Q8_0 ? __half2float(d_row[c >> 1]) : WT == CUDA_W_Q4_0 ? __half2float(d_row[c]) : 1.0f;
    return chunk_fma<WT>(v, d, xs + c * CHUNK_ELEMS(WT));
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
