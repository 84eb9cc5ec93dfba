/*
 * common.cuh - helpers shared by the kernel files: warp and block reductions, quant
 * bytes to floats, F16/BF16 pairs to floats, chunk dot products, one element of a weight
 * row, cp.async copies, the fixed-point residual accumulator, and on the host side the
 * launch configuration for programmatic dependent launch and the shared-memory
 * attributes of a kernel.
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

static __device__ __forceinline__ float dot4(float4 a, float b0, float b1, float b2, float b3) {
    return fmaf(a.x, b0, fmaf(a.y, b1, fmaf(a.z, b2, a.w * b3)));
}

static __device__ __forceinline__ float dot4_q8(uint32_t u, float4 x) {
    return dot4(x, q8_byte(u, 0), q8_byte(u, 1), q8_byte(u, 2), q8_byte(u, 3));
}

/* low nibbles of u times lo, high nibbles times hi */
static __device__ __forceinline__ float dot8_q4(uint32_t u, float4 lo, float4 hi) {
    const uint32_t l = u & 0x0f0f0f0fu, h = (u >> 4) & 0x0f0f0f0fu;
    return dot4(lo, q4_byte(l, 0), q4_byte(l, 1), q4_byte(l, 2), q4_byte(l, 3)) +
           dot4(hi, q4_byte(h, 0), q4_byte(h, 1), q4_byte(h, 2), q4_byte(h, 3));
}

/* Dot of one 16-byte chunk v of a row in the device layout (scale d) with the
 * CHUNK_ELEMS(WT) inputs it multiplies, in order, as float4s xv. */
template <int WT>
static __device__ __forceinline__ float chunk_dot(uint4 v, float d, const float4 *xv) {
    if (WT == CUDA_W_Q8_0) {
        return d * (dot4_q8(v.x, xv[0]) + dot4_q8(v.y, xv[1]) + dot4_q8(v.z, xv[2]) + dot4_q8(v.w, xv[3]));
    } else if (WT == CUDA_W_Q4_0) {
        /* byte j: element j (low nibble) and j + 16 (high nibble) */
        return d * (dot8_q4(v.x, xv[0], xv[4]) + dot8_q4(v.y, xv[1], xv[5]) + dot8_q4(v.z, xv[2], xv[6]) +
                    dot8_q4(v.w, xv[3], xv[7]));
    } else if (WT == CUDA_W_F32) {
        return dot4(xv[0], __uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z), __uint_as_float(v.w));
    } else {
        const float2 p0 = pair_f32(v.x, WT), p1 = pair_f32(v.y, WT), p2 = pair_f32(v.z, WT), p3 = pair_f32(v.w, WT);
        return dot4(xv[0], p0.x, p0.y, p1.x, p1.y) + dot4(xv[1], p2.x, p2.y, p3.x, p3.y);
    }
}

/* Scale of chunk c of a row (1 for the float types); d_row from the row's first element. */
template <int WT>
static __device__ __forceinline__ float chunk_scale(const __half *d_row, int c) {
    return WT == CUDA_W_Q8_0 ? __half2float(d_row[c >> 1]) : WT == CUDA_W_Q4_0 ? __half2float(d_row[c]) : 1.0f;
}

/* 16 bytes global -> shared, asynchronously (cp.async, through L2 only); of those,
 * src_bytes are read and the rest filled with zeros. */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(src_bytes)
                 : "memory");
}
/* 4 bytes global -> shared, asynchronously (through L1: cp.async.cg takes only 16). */
static __device__ __forceinline__ void cp_async4(void *dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src)
                 : "memory");
}
static __device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
/* Waits for this thread's copies but the last `pending` committed groups. */
template <int pending>
static __device__ __forceinline__ void cp_async_wait(void) { asm volatile("cp.async.wait_group %0;" ::"n"(pending) : "memory"); }
static __device__ __forceinline__ void cp_async_wait_all(void) { cp_async_wait<0>(); }

/* The fused decode attention adds its output projection into the residual stream
 * through atomics; to keep the step deterministic (float atomics would sum the heads in
 * whatever order they arrive) they are integer adds of fixed-point values with 32
 * fraction bits: exact, so the order does not matter. Magnitudes up to 2^31. */
static __device__ __forceinline__ unsigned long long to_fixed(float v) {
    return (unsigned long long)__float2ll_rn(v * 4294967296.0f);
}
static __device__ __forceinline__ float from_fixed(unsigned long long a) {
    return __ll2float_rn((long long)a) * 2.3283064365386963e-10f; /* 2^-32 */
}

/* A launch that may overlap the previous kernel's tail (programmatic dependent launch:
 * the kernel pdl_waits for it); attr is the storage of its one attribute. */
static inline cudaLaunchConfig_t pdl_config(dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                            cudaLaunchAttribute *attr) {
    cudaLaunchConfig_t cfg = {};
    attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr->val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}

/* Shared memory beyond the default 48 KB, and the largest carveout for it: blocks of the
 * next kernels can only become resident beside this one if the multiprocessor's
 * shared memory is configured large enough for all of them. */
template <typename K>
static cudaError_t allow_smem(K kernel, size_t smem) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         (int)cudaSharedmemCarveoutMaxShared);
    if (e != cudaSuccess || smem <= 48 * 1024)
        return e;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
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
