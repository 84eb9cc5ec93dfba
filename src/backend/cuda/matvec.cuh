/*
 * matvec.cuh - the decode matvec's pieces that another kernel file uses too (the
 * attention kernel that computes its own q, k and v rows, attention.cu): the input staged
 * in shared memory (swizzled floats, or int8 quants and their blocks), a warp's dot
 * products of rows with it, and the asynchronous copies of rows to shared memory.
 * matvec.cu says how and why they are so.
 */
#ifndef ER_BACKEND_CUDA_MATVEC_CUH
#define ER_BACKEND_CUDA_MATVEC_CUH

#include "backend/cuda/common.cuh"

/* float4 q of chunk c of the staged input */
template <int WT>
static __device__ __forceinline__ int xs_slot(int c, int q) {
    return unit_slot<CHUNK_ELEMS(WT) / 4>(c, q);
}

/* Float index of element i of the staged input. */
template <int WT>
static __device__ __forceinline__ int xs_index(int i) {
    constexpr int CE = CHUNK_ELEMS(WT);
    const int e = i % CE;
    return xs_slot<WT>(i / CE, e >> 2) * 4 + (e & 3);
}

/* The float4s of the staged input that chunk c multiplies. */
template <int WT>
static __device__ __forceinline__ void load_x(const float4 *xs4, int c, float4 *xv) {
#pragma unroll
    for (int q = 0; q < CHUNK_ELEMS(WT) / 4; q++)
        xv[q] = xs4[xs_slot<WT>(c, q)];
}

/* The input in shared memory (staged_x_bytes from the start of it): in f32, xs (xs_floats)
 * swizzled; with int8 dot products (I8) xq, its quants, (n_in / 16) 16-byte units at
 * xq_slot, and xb (n_in / 32) their blocks (stage_quant). */
typedef struct staged_x {
    float *xs;
    int4 *xq;
    xq_block *xb;
} staged_x;

/* a[k] += the dot of chunk c of row k (its 16 bytes v[k], its scales sc[k]) with the
 * staged input, for R rows sharing the input's loads: in f32 (chunk_dot), or with I8
 * the exact integer of chunk_isum times the weight's and the input's block scales. */
template <int WT, bool I8, int R>
static __device__ __forceinline__ void chunk_dots_sc(const uint4 *v, const chunk_sc *sc, const staged_x &x, int c,
                                                     float a[R]) {
    if constexpr (I8) {
        int4 xq[CHUNK_ELEMS(WT) / 16];
#pragma unroll
        for (int q = 0; q < CHUNK_ELEMS(WT) / 16; q++)
            xq[q] = x.xq[xq_slot<WT>(c, q)];
        const xq_block xb = x.xb[c * CHUNK_ELEMS(WT) / 32];
#pragma unroll
        for (int k = 0; k < R; k++) {
            if constexpr (cuda_wtype_int8_one_scale(WT))
                a[k] += (float)chunk_isum<WT>(v[k], xq, xb.sum) * (sc[k].d[0] * xb.d);
            else
                a[k] += chunk_qsum<WT>(v[k], sc[k], xq, xb.sum) * xb.d;
        }
    } else {
        float4 xv[CHUNK_ELEMS(WT) / 4];
        load_x<WT>(reinterpret_cast<const float4 *>(x.xs), c, xv);
#pragma unroll
        for (int k = 0; k < R; k++)
            a[k] += chunk_dot<WT>(v[k], sc[k], xv);
    }
}
/* chunk_dots_sc with the scales read from d[k] */
template <int WT, bool I8, int R>
static __device__ __forceinline__ void chunk_dots(const uint4 *v, const __half *const *d, const staged_x &x, int c,
                                                  float a[R]) {
    chunk_sc sc[R];
#pragma unroll
    for (int k = 0; k < R; k++)
        sc[k] = chunk_scale<WT>(d[k], c);
    chunk_dots_sc<WT, I8, R>(v, sc, x, c, a);
}

/* Dots of R rows (in global or shared memory) with the staged input, by one warp,
 * sharing the input loads and interleaving the R sums; every lane gets all of them in
 * a[]. Rows of whole 16-byte chunks go chunk by chunk, others (F16/BF16/F32 rows of odd
 * lengths) element by element. */
template <int WT, bool I8, int R>
static __device__ __forceinline__ void rows_dot(const uint8_t *const *row, const __half *const *d, int n_in,
                                                bool chunked, const staged_x &x, int lane, float a[R]) {
#pragma unroll
    for (int k = 0; k < R; k++)
        a[k] = 0.0f;
    if (chunked) {
        const int n_chunks = n_in / CHUNK_ELEMS(WT);
        /* not unrolled: a lane has 1-6 chunks of a layer row. Unrolled by 2, the Qwen3-0.6B
         * step took 557 us (Q4_0) and 589 us (Q8_0) against 527 and 582 (the cause is not
         * established: the kernels' code size, or the remainder path a 2x unroll adds) */
#pragma unroll 1
        for (int c = lane; c < n_chunks; c += 32) {
            uint4 v[R]; /* all R loads in flight before the first use */
#pragma unroll
            for (int k = 0; k < R; k++)
                v[k] = reinterpret_cast<const uint4 *>(row[k])[c];
            chunk_dots<WT, I8, R>(v, d, x, c, a);
        }
    } else {
        for (int i = lane; i < n_in; i += 32) {
            const float xi = x.xs[xs_index<WT>(i)];
#pragma unroll
            for (int k = 0; k < R; k++)
                a[k] += elem<WT>(row[k], d[k], i) * xi;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int k = 0; k < R; k++)
            a[k] += __shfl_xor_sync(0xffffffffu, a[k], o);
}

/* Bytes of shared memory that stage_async needs for n bytes at any alignment. */
static __host__ __device__ __forceinline__ size_t staged_bytes(size_t n) { return (n + 15) / 16 * 16 + 16; }

/* Starts copying global bytes [src, src + n) to shared memory at dst (16-byte aligned)
 * with 16-byte cp.async over the enclosing aligned range (the allocations are padded so
 * that it stays inside them). Returns where the bytes begin in dst. */
static __device__ __forceinline__ const uint8_t *stage_async(uint8_t *dst, const void *src, size_t n) {
    const uintptr_t a = (uintptr_t)src & ~(uintptr_t)15;
    const size_t off = (uintptr_t)src - a, n16 = (off + n + 15) / 16;
    for (size_t i = threadIdx.x; i < n16; i += blockDim.x) {
        cp_async16(dst + 16 * i, (const void *)(a + 16 * i), 16);
    }
    return dst + off;
}

/* Floats of the staged input: whole chunks. */
static __host__ __device__ __forceinline__ int xs_floats(int wt, int n_in) {
    const int ce = CHUNK_ELEMS(wt);
    return (n_in + ce - 1) / ce * ce;
}

/* Bytes of the staged input: xs, or with I8 xq and xb (n_in is whole blocks of 32). */
static __host__ __device__ __forceinline__ size_t staged_x_bytes(int wt, bool i8, int n_in) {
    return i8 ? n_in + (n_in / 32 * sizeof(xq_block) + 15) / 16 * 16 : (size_t)xs_floats(wt, n_in) * sizeof(float);
}

template <int WT, bool I8>
static __device__ __forceinline__ staged_x staged_at(uint8_t *smem, int n_in) {
    if (I8)
        return {nullptr, reinterpret_cast<int4 *>(smem), reinterpret_cast<xq_block *>(smem + n_in)};
    return {reinterpret_cast<float *>(smem), nullptr, nullptr};
}

/* Scale bytes of a row: cuda_scale_row_bytes, but in int. In this form the kernels
 * compile to the code that was measured (checked on the SASS); the 64-bit division of
 * cuda_scale_row_bytes, or no test of HAS_SCALES, changes the Q8_0 / Q4_0 kernels. */
static __host__ __device__ __forceinline__ size_t scale_row_bytes(int wt, int n_in) {
    return HAS_SCALES(wt) ? (size_t)(n_in / cuda_wtype_scale_elems(wt)) * cuda_wtype_scale_bytes(wt) : 0;
}

#endif
