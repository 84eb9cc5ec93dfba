/*
 * matvec.cu - y = W x for one token, reading the weights in their device layout (every
 * type of wtypes.cuh), with the neighbouring ops folded in (enum cuda_matvec_mode):
 * RMSNorm of the input, residual add, SwiGLU or GeGLU of gate and up, the argmax of the
 * head.
 *
 * The layer matrices of a small model are 2-7 MB: a few microseconds of HBM time, less
 * than the latency of a kernel that first waits for its input and then reads its
 * weights. So each block of k_matvec owns a slice of rows small enough for shared
 * memory (about one block per multiprocessor), and
 *   1. copies its weight rows to shared memory asynchronously (cp.async) as soon as it
 *      is resident: they do not depend on the previous kernel;
 *   2. waits for the previous kernel (programmatic dependent launch), then lets the next
 *      kernel launch: where registers leave room, that one becomes resident beside this
 *      one and copies its own weights while this one computes (an attention block beside
 *      a qkv block; not a second k_matvec block in f32: 512 threads of 59-95 registers
 *      take more than half the register file, and capping them at 64 measured slower,
 *      twice: docs/perf-log.md 2026-11-29, and Qwen3-0.6B decode 1,670 against 1,603
 *      tok/s (Q8_0) and 1,980 against 1,783 (Q4_0), fifteenth session; blocks of 256
 *      threads, two a multiprocessor, 1,700 against 1,557 (Q8_0) and 1,996 against 1,572
 *      (Q4_0), seventeenth session: qkv and gate|up gained, wo and down lost more);
 *   3. stages the input vector (normalized; the types of cuda_wtype_int8_dot quantize
 *      it to int8, below, and take 40-58 registers) and does the dot products out of
 *      shared memory.
 * The step's critical path is then mostly the chain of small dependent pieces (wait,
 * stage, reduce, store). Letting the next kernel launch before the wait, so that
 * several kernels' copies are in flight, measured slower (710 against 677 us per
 * Qwen3-0.6B step): their traffic delays the loads on the critical path.
 *
 * The output head (151,936 rows for Qwen3) is too large for that: k_head streams it
 * with every warp of a resident grid walking rows, folding in the argmax. So do the
 * layer matrices too large for one slice per multiprocessor (MV_STREAM_MIN_BYTES; for
 * the types on the int8 input, one slice of MV_SLICE_WEIGHTS_INT8 weights: none of
 * Qwen3-0.6B's, 1.7B's gate|up, 4B's gate|up and down, all of 8B's; and the gate|up of
 * F16/F32 models from 0.6B on, whose speed there is not measured yet): k_matvec_stream.
 * With slices, their many waves of blocks each staged the input again (at Qwen3-8B
 * 1,756 blocks of gate|up each read and normalized the 16 KB input: half as many bytes
 * again as the weights, through L2) and each waited for all its copies before computing;
 * the 8B step's matvecs ran at 0.7-1.0 TB/s. Each lane of it loads its first chunks into
 * registers before it waits (stream_chunks); the next bytes of its first pass go to L2
 * after the wait, while the input is staged (stream_l2).
 *
 * Data that earlier kernels of the step wrote is read with __ldcg (L2, not L1): a
 * block that became resident early shares its multiprocessor's L1 with kernels that
 * ran before the data was written, and may find their stale lines there.
 *
 * The input vector sits in shared memory swizzled (xs_slot): each lane reads the 16
 * weight bytes of one chunk and the 4-32 floats they multiply; unswizzled, the 8 lanes
 * of a quarter-warp would read float4s 64 or 128 bytes apart, on the same banks.
 *
 * Q4_0 and Q8_0 weights (cuda_wtype_int8_dot), in every decode matvec
 * (cuda_matvec_takes_int8 has the measurements), multiply the input quantized to int8
 * per block of 32, as the batch GEMM quantizes it (quant8_f32), with dp4a (chunk_isum),
 * as llama.cpp's MMVQ: in f32, a Q4_0 chunk of 32 weights took ~125 instructions (nibbles
 * to floats, FFMAs, 8 LDS.128 of inputs), and at Qwen3-8B the Q4_0 kernels were bound by
 * them at ~2 TB/s (docs/perf-log.md, "where an 8B step goes"); in int8 its 32 products
 * are 8 dp4a on 2 LDS.128 of quants, and a Q8_0 chunk's 16 are 4 dp4a on one (wtypes.cuh
 * gives Q8_0's figures). So do Q4_K, Q5_K and Q6_K, the types of the _K_M files
 * (chunk_qsum: a chunk is one input block, its sub-block scale and offset applied to
 * the integer sums; their f32 dot decoded every element to a float, as Q4_0's did).
 * Unless EDGERUNNER_CUDA_MV_INT8=0 (then f32, as every other type; the K types alone
 * with EDGERUNNER_CUDA_MV_INT8_K=0: the switch is a template argument, I8, of each
 * kernel). The block
 * quantizes the input as it loads it (stage_quant): x times the norm
 * weights, the RMSNorm's 1 / rms left out of the quants and multiplied into each row's
 * sum, so that the block reduction runs beside the quantization; into xq, swizzled as
 * xs: a Q4_0 chunk's 32 quants are 2 16-byte units (xq_slot), a Q8_0 chunk's 16 one.
 */

#include "backend/cuda/common.cuh"

#define MV_THREADS 512
#define MV_WARPS 16
#define MV_SLICE_BYTES (64 * 1024) /* weight bytes per block; beyond, more blocks */
/* ... with the int8 input, a block's slice up to this many weights (Q8_0 127.5 KB, Q4_0
 * 67.5 KB; slice_bytes_int8 says why) */
#define MV_SLICE_WEIGHTS_INT8 (120 * 1024)
/* k_head: blocks of 256 threads; rows per warp and pass (HEAD_ROWS, per type in
 * wtypes.cuh): enough 16-byte loads in flight per lane to stream the weights (a Q4_0 row
 * of 1024 is one chunk per lane), with registers few enough (64) for 4 blocks, 32 warps,
 * per multiprocessor. Measured on the H200 (docs/perf-log.md), the Qwen3-0.6B Q4_0 step:
 * blocks of 512 threads with 4 rows (106 registers, 16 warps per multiprocessor) 527 us,
 * 256 threads with 2 rows 520, with 3 rows 517. */
#define HEAD_THREADS 256
#define HEAD_WARPS (HEAD_THREADS / 32)
/* groups of 8 input elements a thread stages at once (stage_quant) in k_head and
 * k_matvec_stream: the input's loads are L2 round trips on the critical path, so as few
 * rounds of them as registers allow. One group where a norm's weights come too (two:
 * k_head 70-72 registers instead of 64, 3 blocks a multiprocessor instead of 4;
 * k_matvec_stream 112-118 instead of 94-104): one round up to 2,048 elements (k_head) or
 * 4,096 (the stream: every Qwen3's qkv and gate|up); the stream's others two (Qwen3-8B's
 * down, 12,288, in two rounds). */
#ifndef HEAD_GROUPS
#define HEAD_GROUPS 1
#endif
#define STREAM_GROUPS(norm) ((norm) ? 1 : 2)
/* k_matvec_stream: matrices of more bytes than this take it (one slice per
 * multiprocessor would pass MV_SLICE_BYTES); STREAM_CHUNKS chunks of each of its rows per
 * lane in flight at once */
static size_t stream_min_bytes; /* 0: the rule of streams() (cuda_matvec_set_stream_min) */
#ifndef MV_STREAM_MIN_BYTES
#define MV_STREAM_MIN_BYTES ((size_t)multiprocessors() * MV_SLICE_BYTES)
#endif
#ifndef STREAM_CHUNKS
#define STREAM_CHUNKS 4
#endif
/* 16 warps per block (one block per multiprocessor, <= 128 registers): measured on the H200
 * against 8 (docs/perf-log.md, 2026-12-02 second session), Qwen3-8B decode Q8_0 318 -> 340
 * tok/s, Q4_0 336 -> 374, 4B Q8_0 405 -> 423, 1.7B 783 -> 834; twice the loads in flight
 * per multiprocessor, and twice the warps to hide the dot products' latency. 8 warps with
 * 8 chunks per lane in flight (STREAM_CHUNKS 8) gave 324 / 330: not the loads alone. */
#ifndef STREAM_THREADS
#define STREAM_THREADS 512
#endif
#define STREAM_WARPS (STREAM_THREADS / 32)
/* k_matvec_stream sends its first pass's rows towards L2 before it waits for the previous
 * kernel only where that pass is at most this many bytes: a large prefetch takes the
 * bandwidth that the previous kernel's tail still needs. Measured on the H200
 * (gpu_matvec_bench, docs/perf-log.md 2026-12-03, eleventh session), Qwen3-8B's layer,
 * prefetch always / never / this rule: Q4_0 45.4 / 43.8 / 43.0 us (qkv and wo, 8.4-8.7 MB,
 * gain by it; down, its whole 25 MB, lost 3 us), Q8_0 (every first pass 17-50 MB) 72.4 /
 * 68.0 / 68.1; 4B and 1.7B equal or better than both. */
/* chunks of each of its first two rows a lane of k_matvec_stream loads before its wait
 * (stream_chunks, which says why 2) */
#define STREAM_PRE_CHUNKS 2
#ifndef STREAM_PREFETCH_MAX
#define STREAM_PREFETCH_MAX ((size_t)10 << 20)
#endif

/* Orders floats as unsigned integers: a > b iff key(a) > key(b) (NaN aside). */
static __device__ __forceinline__ unsigned int ordered_bits(float f) {
    const unsigned int u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

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

/* Shared memory of one k_matvec block of `rows` logical rows: staged input, norm
 * weights (f32 only: with i8 they go to registers), then per part (gate and up for
 * SwiGLU) the rows and their scales. */
static __host__ __device__ __forceinline__ size_t matvec_smem(int wt, int mode, bool i8, int n_in, int rows) {
    const int parts = gated(mode) ? 2 : 1;
    size_t bytes = staged_x_bytes(wt, i8, n_in) + (i8 ? 0 : staged_bytes((size_t)n_in * sizeof(float)));
    bytes += ((size_t)rows * sizeof(float) + 15) / 16 * 16; /* the residual's rows (MV_ADD) */
    bytes += parts * staged_bytes((size_t)rows * cuda_row_bytes(wt, n_in));
    if (HAS_SCALES(wt))
        bytes += parts * staged_bytes((size_t)rows * scale_row_bytes(wt, n_in));
    return bytes;
}

/* Stages x normalized by RMSNorm with norm_w when `norm`, into xs, swizzled, zero-padded
 * to whole chunks.
 * norm_w may be staged by cp.async in the first-but-last group. */
template <int WT>
static __device__ __forceinline__ void stage_input(const float *__restrict__ x, const float *norm_w, bool norm,
                                                   float eps, int n_in, float *xs, float *red, bool by4) {
    const int n_xs = xs_floats(WT, n_in);
    float ss = 0.0f;
    /* by4 (the streaming kernel): four floats a load where whole aligned float4s allow
     * (every model's rows), for Qwen3-8B's down stages 12,288 of them. In k_matvec and
     * k_head it made the Qwen3-0.6B Q4_0 step slower (549 against 513 us on the H200,
     * each kernel alone faster: not understood), so they stage one float a load. */
    by4 = by4 && n_in % 4 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)norm_w & 15) == 0;
    if (by4) { /* four consecutive elements share a swizzled float4 slot (xs_slot) */
#pragma unroll 4
        for (int i = 4 * threadIdx.x; i < n_xs; i += 4 * blockDim.x) {
            const float4 v =
                i < n_in ? __ldcg(reinterpret_cast<const float4 *>(x + i)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
            *reinterpret_cast<float4 *>(xs + xs_index<WT>(i)) = v;
        }
    } else {
#pragma unroll 4
        for (int i = threadIdx.x; i < n_xs; i += blockDim.x) {
            const float v = i < n_in ? __ldcg(x + i) : 0.0f;
            ss += v * v;
            xs[xs_index<WT>(i)] = v;
        }
    }
    if (norm) {
        cp_async_wait<1>(); /* the norm weights; block_sum's barrier shows them to all threads */
        const float scale = 1.0f / sqrtf(block_sum(ss, red) / (float)n_in + eps);
        if (by4) {
            for (int i = 4 * threadIdx.x; i < n_in; i += 4 * blockDim.x) {
                float4 *xv = reinterpret_cast<float4 *>(xs + xs_index<WT>(i));
                const float4 w = *reinterpret_cast<const float4 *>(norm_w + i);
                float4 v = *xv;
                v.x *= scale * w.x;
                v.y *= scale * w.y;
                v.z *= scale * w.z;
                v.w *= scale * w.w;
                *xv = v;
            }
        } else {
            for (int i = threadIdx.x; i < n_in; i += blockDim.x)
                xs[xs_index<WT>(i)] *= scale * norm_w[i];
        }
    }
}

/* The 1 (at least one block per multiprocessor) matters: without it ptxas gave some
 * instances 32 registers instead of 56-69, and the Qwen3-0.6B Q4_0 step ran at 1,664
 * against 1,990 tok/s (H200, fifteenth session). */
template <int WT, int MODE, bool I8>
__global__ void __launch_bounds__(MV_THREADS, 1)
k_matvec(const uint8_t *__restrict__ w, const __half *__restrict__ d, int n_in, int n_out, int rows_per_block,
         const float *__restrict__ x, const float *__restrict__ norm_w, float eps, float *__restrict__ y) {
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ float red[32];

    const bool norm = MODE == MV_NORM_STORE || gated(MODE);
    const int parts = gated(MODE) ? 2 : 1;
    const int n_logical = n_out / parts; /* SwiGLU, GeGLU: gate rows, then as many up rows */
    const int r0 = blockIdx.x * rows_per_block;
    const int nr = min(rows_per_block, n_logical - r0);
    const size_t rb = cuda_row_bytes(WT, n_in), sb = scale_row_bytes(WT, n_in);

    /* I8: the norm weights of stage_quant's first round. gate|up's go to registers before
     * its copies below, behind which they would return; qkv's measured slower so
     * (docs/perf-log.md, fortieth session), and keep their place after them. */
    constexpr bool W0_FIRST = gated(MODE);
    float4 w0[2];
    if constexpr (I8 && W0_FIRST)
        stage_norm_weights<MV_THREADS, 1>((const float *)norm_w, norm, n_in, (int)threadIdx.x, w0);
    /* the weights do not depend on the previous kernel: start their copies */
    const staged_x sx = staged_at<WT, I8>(smem, n_in); /* the input, swizzled, or quantized */
    uint8_t *p = smem + staged_x_bytes(WT, I8, n_in);
    const float *nw = /* f32: the norm weights, in shared memory (I8: w0) */
        norm && !I8 ? reinterpret_cast<const float *>(stage_async(p, norm_w, (size_t)n_in * sizeof(float))) : nullptr;
    if (!I8)
        p += staged_bytes((size_t)n_in * sizeof(float));
    float *y_old = reinterpret_cast<float *>(p); /* (nr) MV_ADD: y before the add */
    p += ((size_t)rows_per_block * sizeof(float) + 15) / 16 * 16;
    cp_async_commit();
    const uint8_t *ws[2];      /* (nr, rb) rows of each part */
    const __half *ds[2] = {};  /* (nr, sb / 2) their scales */
    for (int k = 0; k < parts; k++) {
        const size_t row = (size_t)k * n_logical + r0;
        ws[k] = stage_async(p, w + row * rb, nr * rb);
        p += staged_bytes((size_t)rows_per_block * rb);
        if (HAS_SCALES(WT)) {
            ds[k] = reinterpret_cast<const __half *>(stage_async(p, d + row * (sb / 2), nr * sb));
            p += staged_bytes((size_t)rows_per_block * sb);
        }
    }
    cp_async_commit(); /* group 2: the weights (group 1: the norm weights, f32 only) */
    if constexpr (I8 && !W0_FIRST)
        stage_norm_weights<MV_THREADS, 1>((const float *)norm_w, norm, n_in, (int)threadIdx.x, w0);

    pdl_wait();
    pdl_launch_next();
    if (MODE == MV_ADD && (int)threadIdx.x < nr) /* in flight with the input's loads */
        y_old[threadIdx.x] = __ldcg(y + r0 + threadIdx.x);
    float scale = 1.0f; /* I8: the RMSNorm's 1 / rms, left out of the quants */
    if constexpr (I8)
        scale = stage_quant<WT, MV_THREADS, 1>((const float *)x, (const float *)norm_w, norm, eps, n_in, sx.xq, sx.xb,
                                               red, w0);
    else
        stage_input<WT>(x, nw, norm, eps, n_in, sx.xs, red, false);
    cp_async_wait_all();
    __syncthreads();

    /* each warp two rows at a time: gate and up row r for SwiGLU and GeGLU, else rows r and r + 1
     * (the second clamped to the first, and dropped, past the slice) */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const bool chunked = rb % 16 == 0;
    const int step = gated(MODE) ? 1 : 2;
    for (int r = warp * step; r < nr; r += MV_WARPS * step) {
        const int k1 = gated(MODE) ? 1 : 0;
        const int r1 = gated(MODE) ? r : min(r + 1, nr - 1);
        const uint8_t *rows[2] = {ws[0] + r * rb, ws[k1] + r1 * rb};
        const __half *scales[2] = {ds[0] + r * (sb / 2), ds[k1] + r1 * (sb / 2)};
        float a[2];
        rows_dot<WT, I8, 2>(rows, scales, n_in, chunked, sx, lane, a);
        a[0] *= scale;
        a[1] *= scale;
        if (lane == 0) {
            if (MODE == MV_NORM_SWIGLU) {
                y[r0 + r] = silu(a[0]) * a[1];
            } else if (MODE == MV_NORM_GEGLU) {
                y[r0 + r] = gelu_tanh(a[0]) * a[1];
            } else if (MODE == MV_ADD) {
                y[r0 + r] = y_old[r] + a[0];
                if (r + 1 < nr)
                    y[r0 + r + 1] = y_old[r + 1] + a[1];
            } else {
                y[r0 + r] = a[0];
                if (r + 1 < nr)
                    y[r0 + r + 1] = a[1];
            }
        }
    }
}

/* The output head: y = W rmsnorm(x) over all rows, argmax into state->argmax_key. A
 * resident grid; warp g of G takes rows g, g + G, ... HEAD_ROWS(WT) at a time, so that
 * each lane has several 16-byte loads in flight. */
template <int WT, bool I8>
__global__ void __launch_bounds__(HEAD_THREADS)
k_head(const uint8_t *__restrict__ w, const __half *__restrict__ d, int n_in, int n_out, const float *__restrict__ x,
       const float *__restrict__ norm_w, float eps, float *__restrict__ y, cuda_step_state *state) {
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ float red[32];
    __shared__ unsigned long long best;
    pdl_launch_next();
    const staged_x sx = staged_at<WT, I8>(smem, n_in);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n_warps = gridDim.x * HEAD_WARPS, gw = blockIdx.x * HEAD_WARPS + warp;
    const size_t rb = cuda_row_bytes(WT, n_in), sb = scale_row_bytes(WT, n_in);
    const bool chunked = rb % 16 == 0;
    if (threadIdx.x == 0)
        best = 0;
    float4 w0[2 * HEAD_GROUPS]; /* I8: the norm weights of stage_quant's first round */
    if constexpr (I8)
        stage_norm_weights<HEAD_THREADS, HEAD_GROUPS>((const float *)norm_w, true, n_in, (int)threadIdx.x, w0);
    pdl_wait();
    float scale = 1.0f; /* I8: the RMSNorm's 1 / rms, left out of the quants */
    if constexpr (I8)
        scale = stage_quant<WT, HEAD_THREADS, HEAD_GROUPS>((const float *)x, (const float *)norm_w, true, eps, n_in,
                                                           sx.xq, sx.xb, red, w0);
    else
        stage_input<WT>(x, norm_w, true, eps, n_in, sx.xs, red, false);
    __syncthreads();

    unsigned long long mine = 0;
    constexpr int R = HEAD_ROWS(WT);
    for (int r = gw; r < n_out; r += R * n_warps) {
        const uint8_t *rows[R];
        const __half *scales[R];
#pragma unroll
        for (int k = 0; k < R; k++) { /* rows past the end repeat row r, and are dropped */
            const int rk = r + k * n_warps < n_out ? r + k * n_warps : r;
            rows[k] = w + (size_t)rk * rb;
            scales[k] = d + (size_t)rk * (sb / 2);
        }
        float a[R];
        rows_dot<WT, I8, R>(rows, scales, n_in, chunked, sx, lane, a);
#pragma unroll
        for (int k = 0; k < R; k++) {
            const int row = r + k * n_warps;
            if (lane == 0 && row < n_out) {
                a[k] *= scale;
                y[row] = a[k];
                const unsigned long long key =
                    ((unsigned long long)ordered_bits(a[k]) << 32) | (0xffffffffu - (unsigned int)row);
                mine = key > mine ? key : mine;
            }
        }
    }
    if (lane == 0)
        atomicMax(&best, mine);
    __syncthreads();
    if (threadIdx.x == 0)
        atomicMax(&state->argmax_key, best);
}

/* Loads 16 weight bytes that no kernel of the step writes, each read once: through the
 * read-only path, without allocating a line in L1 (ld.global.nc.L1::no_allocate).
 * Measured on the H200 against the plain load (docs/perf-log.md, fifteenth session),
 * Qwen3-8B's layer matvecs (gpu_matvec_bench): Q8_0 64.8 against 66.9 us, Q4_0 41.8
 * against 42.3; decode Q8_0 375.4 against 366.3 tok/s, Q4_0 584.2 against 572.2. __ldg
 * (ld.global.nc, allocating in L1) gave 66.3 us and 368.2 tok/s: the gain is in leaving
 * L1 alone more than in the read-only path (why that costs is not established). k_head's
 * rows loaded so measured the same (8B Q8_0 376.8 against 375.2 tok/s, 0.6B within the
 * noise): it keeps the plain load. Chunk c of a row. */
static __device__ __forceinline__ uint4 stream_load(const uint8_t *row, int c) {
    const uint4 *p = reinterpret_cast<const uint4 *>(row) + c;
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

/* Sends bytes [p, p + n) towards L2 (one instruction; p and n multiples of 16). */
static __device__ __forceinline__ void l2_prefetch_bulk(const uint8_t *p, unsigned int n) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n) : "memory");
}

/* U 16-byte chunks of R rows for each lane, and their scales (stream_chunks; Q8_0 and
 * Q4_0: one scale a chunk) */
template <int R, int U>
struct stream_batch {
    uint4 v[U][R];
    float d[U][R];
};

/* Loads chunks c, c + 32, ..., c + 32 (U - 1) of R rows and their scales. With c the
 * lane, its first chunks of rows_dot_stream's first pass: the weights do not depend on
 * the previous kernel, so a streaming block has them in flight while it waits for it
 * and stages the input. Measured on the H200 (docs/perf-log.md, 2026-12-03, fourteenth
 * session), Qwen3-8B's layer matvecs (gpu_matvec_bench) without / loaded before the wait
 * / after it: Q8_0 70.1 / 67.4 / 70.3 us, Q4_0 42.9 / 42.6 / 44.3; decode Q8_0 350.4 /
 * 363.8 / 349.3 tok/s, Q4_0 566 / 570 / 552. Two chunks a row: the whole first iteration
 * (STREAM_PRE_CHUNKS 4) was slower (fifteenth session: layer Q8_0 68.2 against 66.9 us,
 * Q4_0 44.0 against 42.3; decode 360.1 against 365.9 and 556.4 against 574.8 tok/s). */
template <int WT, int R, int U>
static __device__ __forceinline__ void stream_chunks(const uint8_t *const *row, const __half *const *d, int c,
                                                     stream_batch<R, U> &b) {
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
        for (int k = 0; k < R; k++) {
            b.v[u][k] = stream_load(row[k], c + 32 * u);
            if constexpr (cuda_wtype_int8_one_scale(WT)) /* (Q4_K, Q5_K: their scales after the wait) */
                b.d[u][k] = chunk_scale<WT>(d[k], c + 32 * u).d[0];
        }
}

/* Dots of R rows (global memory, whole 16-byte chunks) with the staged input, streamed:
 * each lane has U chunks of each row in flight before it uses the first (rows_dot has
 * one), which a matrix too large for shared memory needs to keep HBM busy. Sums in chunk
 * order per lane, as rows_dot's. With have_first, the first STREAM_PRE_CHUNKS chunks of
 * each row and their scales are those stream_chunks loaded (the same sums). Loading the
 * next U chunks while these are summed measured slower on the H200 (docs/perf-log.md,
 * 2026-12-03, seventeenth session): Qwen3-8B's layer Q8_0 67.9 against 64.5 us, Q4_0
 * 44.9 against 42.0, slower at 4B and 1.7B too: the extra registers and addresses cost more
 * than the overlap gains. */
template <int WT, bool I8, int R, int U>
static __device__ __forceinline__ void rows_dot_stream(const uint8_t *const *row, const __half *const *d, int n_in,
                                                       const staged_x &x, int lane, float a[R],
                                                       const stream_batch<R, STREAM_PRE_CHUNKS> &first,
                                                       bool have_first) {
#pragma unroll
    for (int k = 0; k < R; k++)
        a[k] = 0.0f;
    const int n_chunks = n_in / CHUNK_ELEMS(WT);
    int c = lane;
    bool pre = have_first; /* the first pass's first chunks: in `first` (rows of >= 32 U chunks) */
#pragma unroll 1
    for (; c + 32 * (U - 1) < n_chunks; c += 32 * U) {
        uint4 v[U][R];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int k = 0; k < R; k++)
                v[u][k] = u < STREAM_PRE_CHUNKS && pre ? first.v[u < STREAM_PRE_CHUNKS ? u : 0][k]
                                                       : stream_load(row[k], c + 32 * u);
#pragma unroll
        for (int u = 0; u < U; u++) {
            chunk_sc sc[R];
#pragma unroll
            for (int k = 0; k < R; k++) {
                if (u < STREAM_PRE_CHUNKS && pre && cuda_wtype_int8_one_scale(WT)) {
                    sc[k] = {};
                    sc[k].d[0] = first.d[u < STREAM_PRE_CHUNKS ? u : 0][k];
                } else {
                    sc[k] = chunk_scale<WT>(d[k], c + 32 * u);
                }
            }
            chunk_dots_sc<WT, I8, R>(v[u], sc, x, c + 32 * u, a);
        }
        pre = false;
    }
#pragma unroll 1
    for (; c < n_chunks; c += 32) { /* the rest: fewer than 32 U chunks */
        uint4 v[R];
#pragma unroll
        for (int k = 0; k < R; k++)
            v[k] = __ldcs(reinterpret_cast<const uint4 *>(row[k]) + c);
        chunk_dots<WT, I8, R>(v, d, x, c, a);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int k = 0; k < R; k++)
            a[k] += __shfl_xor_sync(0xffffffffu, a[k], o);
}

/* Row k of warp pass r of k_matvec_stream: SwiGLU/GeGLU (R 2) gate row r and up row r
 * (n_logical + r); else r + k G, which may be past the matrix. */
template <int MODE>
static __device__ __forceinline__ int pass_row(int r, int k, int n_logical, int n_warps) {
    return gated(MODE) ? (k ? n_logical + r : r) : r + k * n_warps;
}

/* The R rows warp pass r of k_matvec_stream takes (pass_row; past the end: r again,
 * dropped), and their scales. */
template <int MODE, int R>
static __device__ __forceinline__ void pass_rows(const uint8_t *w, const __half *d, size_t rb, size_t sb, int r,
                                                 int n_logical, int n_warps, const uint8_t *rows[R],
                                                 const __half *scales[R]) {
#pragma unroll
    for (int k = 0; k < R; k++) {
        int rk = pass_row<MODE>(r, k, n_logical, n_warps);
        rk = gated(MODE) || rk < n_logical ? rk : r;
        rows[k] = w + (size_t)rk * rb;
        scales[k] = d + (size_t)rk * (sb / 2);
    }
}

/* The outputs of warp pass r of k_matvec_stream or k_matvec_ring, from its rows' sums a
 * (every lane has them; one lane stores): SwiGLU/GeGLU of gate and up, or each row that
 * is in the matrix, times the RMSNorm's 1 / rms, added to the residual for MV_ADD. */
template <int MODE, int R>
static __device__ __forceinline__ void store_pass(float *__restrict__ y, int r, const float a[R], float scale,
                                                  int n_logical, int n_warps) {
    if (MODE == MV_NORM_SWIGLU) {
        y[r] = silu(a[0] * scale) * (a[1] * scale);
    } else if (MODE == MV_NORM_GEGLU) {
        y[r] = gelu_tanh(a[0] * scale) * (a[1] * scale);
    } else {
#pragma unroll
        for (int k = 0; k < R; k++) {
            const int rk = pass_row<MODE>(r, k, n_logical, n_warps);
            if (rk >= n_logical)
                break;
            float v = a[k] * scale;
            if (MODE == MV_ADD || MODE == MV_ADD_Q8)
                v += __ldcg(y + rk);
            y[rk] = v;
        }
    }
}

/* A matrix too large for one slice per multiprocessor (MV_STREAM_MIN_BYTES), every mode
 * but the head's: a resident grid stages the input once per block, then warp g of G
 * takes logical rows g, g + G, ...: R at a time, or the gate and up rows of one (SwiGLU,
 * GeGLU; R 2), streamed from global memory (rows_dot_stream). MV_ADD reads the residual row
 * where it writes it. Rows of whole 16-byte chunks only. R 3 where it makes two passes
 * one (launch_stream says why). */
template <int WT, int MODE, bool I8, int R>
__global__ void __launch_bounds__(STREAM_THREADS, 1)
k_matvec_stream(const uint8_t *__restrict__ w, const __half *__restrict__ d, int n_in, int n_out,
                const float *__restrict__ x, const float *__restrict__ norm_w, float eps, float *__restrict__ y,
                int pre, int l2) {
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ float red[32];
    const bool norm = MODE == MV_NORM_STORE || gated(MODE);
    const int parts = gated(MODE) ? 2 : 1;
    const int n_logical = n_out / parts;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n_warps = gridDim.x * STREAM_WARPS, gw = blockIdx.x * STREAM_WARPS + warp;
    const size_t rb = cuda_row_bytes(WT, n_in), sb = scale_row_bytes(WT, n_in);
    /* I8: the norm weights of stage_quant's first round: gate|up's first, as k_matvec's.
     * Issued after the L2 prefetch and the first chunks (until bf2468a and bb8340c), they
     * were placed by ptxas after griddepcontrol.wait in most normed instances (cuobjdump:
     * all but Q8_0's of two rows); in this order, before it in all. qkv's issued first
     * measured slower (docs/perf-log.md, fortieth session). */
    constexpr int G = STREAM_GROUPS(norm);
    constexpr bool W0_FIRST = gated(MODE);
    float4 w0[2 * G];
    if constexpr (I8 && W0_FIRST)
        stage_norm_weights<STREAM_THREADS, G>((const float *)norm_w, norm, n_in, (int)threadIdx.x, w0);
    const staged_x sx = staged_at<WT, I8>(smem, n_in); /* the input, swizzled, or quantized */
    const float *nw = /* f32: the norm weights, in shared memory (I8: w0) */
        norm && !I8 ? reinterpret_cast<const float *>(stage_async(smem + staged_x_bytes(WT, I8, n_in), norm_w,
                                                                  (size_t)n_in * sizeof(float)))
                    : nullptr;
    cp_async_commit();
    cp_async_commit(); /* (empty) stage_input waits for all groups but the last */
    static_assert(R == 2 || (R == 3 && !gated(MODE)), "rows per warp and pass");
    /* the types of cuda_wtype_stream_pre (unless pre is 0): the first chunks of the first
     * two rows in registers before the wait, so that the first dot products need not wait
     * for HBM after the input is staged (stream_chunks) */
    constexpr bool CAN_PRE = cuda_wtype_stream_pre(WT, I8);
    stream_batch<R, STREAM_PRE_CHUNKS> first;
    const bool have_first = CAN_PRE && pre && gw < n_logical && n_in / CHUNK_ELEMS(WT) >= 32 * STREAM_CHUNKS;
    if (have_first) {
        const uint8_t *rows[R];
        const __half *scales[R];
        pass_rows<MODE, R>(w, d, rb, sb, gw, n_logical, n_warps, rows, scales);
        stream_chunks<WT, R, STREAM_PRE_CHUNKS>(rows, scales, lane, first);
    }
    if constexpr (I8 && !W0_FIRST)
        stage_norm_weights<STREAM_THREADS, G>((const float *)norm_w, norm, n_in, (int)threadIdx.x, w0);
    /* l2 < 0: the first pass's rows, which do not depend on the previous kernel, on their
     * way to L2 while this block waits for it and stages the input (stream_l2); after the
     * loads into registers above, which would return behind them */
    if (l2 < 0 && gw < n_logical) {
        for (int k = 0; k < R; k++) {
            const int rk = pass_row<MODE>(gw, k, n_logical, n_warps);
            if (rk >= n_logical * parts)
                break;
            const uint8_t *row = w + (size_t)rk * rb;
            for (size_t o = (size_t)lane * 128; o < rb; o += 32 * 128)
                asm volatile("prefetch.global.L2 [%0];" ::"l"(row + o));
        }
    }
    pdl_wait();
    pdl_launch_next();
    /* l2 > 0: up to that many bytes of each first-pass row (past the chunks in `first`),
     * and its scales, on their way to L2 while the input is staged (stream_l2) */
    if constexpr (CAN_PRE)
        if (l2 > 0 && gw < n_logical && lane < R) {
            const int rk = pass_row<MODE>(gw, lane, n_logical, n_warps);
            const size_t from = have_first ? (size_t)STREAM_PRE_CHUNKS * 32 * 16 : 0;
            if (rk < n_logical * parts && from < rb) {
                const size_t n = rb - from < (size_t)l2 ? rb - from : (size_t)l2;
                l2_prefetch_bulk(w + (size_t)rk * rb + from, (unsigned int)n);
                if (sb % 16 == 0) /* (n_in a multiple of 256; else the scales stay as they are) */
                    l2_prefetch_bulk(reinterpret_cast<const uint8_t *>(d) + (size_t)rk * sb, (unsigned int)sb);
            }
        }
    float scale = 1.0f; /* I8: the RMSNorm's 1 / rms, left out of the quants */
    if constexpr (I8)
        scale = stage_quant<WT, STREAM_THREADS, G>((const float *)x, (const float *)norm_w, norm, eps, n_in, sx.xq,
                                                   sx.xb, red, w0);
    else
        stage_input<WT>(x, nw, norm, eps, n_in, sx.xs, red, true);
    cp_async_wait_all();
    __syncthreads();

    constexpr int STEP = gated(MODE) ? 1 : R; /* logical rows per warp and pass */
    for (int r = gw; r < n_logical; r += STEP * n_warps) {
        const uint8_t *rows[R];
        const __half *scales[R];
        pass_rows<MODE, R>(w, d, rb, sb, r, n_logical, n_warps, rows, scales);
        float a[R];
        rows_dot_stream<WT, I8, R, STREAM_CHUNKS>(rows, scales, n_in, sx, lane, a, first, have_first && r == gw);
        if (lane == 0)
            store_pass<MODE, R>(y, r, a, scale, n_logical, n_warps);
    }
}

/* k_matvec_ring: steps (U units of 32 chunks of each of a pass's rows, U chunks a lane)
 * each warp keeps in flight in its own ring of shared memory, RING_UNITS_IN_FLIGHT / U of
 * them (8 units at 3 rows of Q8_0: 16 rings of 12.75 KB). 6 or 4, so that two ring
 * blocks share a multiprocessor, were slower on an H100: random Qwen3-1.7B Q4_0 decode
 * 1,524 -> 1,365 / 1,415 tok/s, 8B Q8_0's layer 80.0 -> 88.9 / 93.6 us (docs/perf-log.md,
 * fifty-eighth session). */
#define RING_UNITS_IN_FLIGHT 8
#define RING_STEPS(U) (RING_UNITS_IN_FLIGHT / (U))
/* bytes of one ring slot: R rows' 512 U quant bytes and their scales (Q8_0 32 U, Q4_0 64 U) */
#define RING_SCALE_BYTES(WT) (2 * CHUNK_ELEMS(WT))
#define RING_SLOT_BYTES(WT, R, U) ((R) * (U) * (512 + RING_SCALE_BYTES(WT)))

/* k_matvec_ring's first pass row of warp gw (warp `warp` of block b), and the one after
 * r: every n_warps-th logical row; with MV_NORM_SWIGLU_Q8 the block's 16 warps take
 * blocks of 32 rows b, b + gridDim.x, ..., the first 16 rows of one in a pass and the
 * other 16 in the next, so that the block holds all 32 outputs of a block of down's input
 * (store_q8_pass). */
static_assert(STREAM_WARPS == 16, "MV_NORM_SWIGLU_Q8: a block's warps take 16 rows of 32 a pass");
template <int MODE>
static __device__ __forceinline__ int ring_first_row(int gw, int b) {
    return MODE == MV_NORM_SWIGLU_Q8 ? gw + 16 * b : gw;
}
template <int MODE, int R>
static __device__ __forceinline__ int ring_next_row(int r, int n_warps) {
    if (MODE == MV_NORM_SWIGLU_Q8)
        return r & 16 ? r + 16 + 32 * ((int)gridDim.x - 1) : r + 16;
    return r + (gated(MODE) ? 1 : R) * n_warps;
}

/* A warp's cursor over the steps of its passes: pass row r, step s of n_steps, and the
 * pass's R rows and scales (pass_rows). */
template <int MODE, int R>
struct ring_cursor {
    const uint8_t *rows[R];
    const __half *scales[R];
    int r, s;
};

/* Starts copying the cursor's step into ring slot `slot` (every lane its U units of 16
 * bytes of each row, lanes 0..R SL-1 a 16-byte piece of the scales), commits it as one
 * group (an empty one past the warp's passes, so that each consumed step waits on the
 * same count), and moves the cursor on. */
template <int WT, int MODE, int R, int U>
static __device__ __forceinline__ void ring_issue(ring_cursor<MODE, R> &cur, uint8_t *slot, const uint8_t *w,
                                                  const __half *d, size_t rb, size_t sb, int n_logical, int n_warps,
                                                  int n_steps, int lane) {
    constexpr int SCB = RING_SCALE_BYTES(WT), SL = U * SCB / 16;
    if (cur.r < n_logical) {
#pragma unroll
        for (int k = 0; k < R; k++)
#pragma unroll
            for (int u = 0; u < U; u++)
                cp_async16(slot + (k * U + u) * 512 + 16 * lane,
                           cur.rows[k] + ((size_t)cur.s * U + u) * 512 + 16 * lane, 16);
        if (lane < R * SL) { /* (the row picked without indexing: cur stays in registers) */
            const int kl = lane / SL, piece = lane % SL;
            const __half *scales = cur.scales[0];
#pragma unroll
            for (int k = 1; k < R; k++)
                scales = k == kl ? cur.scales[k] : scales;
            cp_async16(slot + R * U * 512 + kl * U * SCB + 16 * piece,
                       reinterpret_cast<const uint8_t *>(scales) + (size_t)cur.s * U * SCB + 16 * piece, 16);
        }
        if (++cur.s == n_steps) {
            cur.s = 0;
            cur.r = ring_next_row<MODE, R>(cur.r, n_warps);
            if (cur.r < n_logical)
                pass_rows<MODE, R>(w, d, rb, sb, cur.r, n_logical, n_warps, cur.rows, cur.scales);
        }
    }
    cp_async_commit();
}

/* Blocks of 32 outputs a MV_NORM_SWIGLU_Q8 block may own (cuda_matvec_q8_handoff) */
#define Q8_GROUPS_MAX 8

/* MV_NORM_SWIGLU_Q8's output of a warp's pass (row r, h its SwiGLU, on every lane):
 * into the block's 32 of the row's block of down's input (hq, Q8_GROUPS_MAX of them);
 * the warp that brings the 32nd (arrived[], counted in shared memory) quantizes them as
 * stage_quant would (quant8_store: lanes 0..3, 8 each) into y, the int8 input of down's
 * matvec, so that down copies it instead of quantizing the f32 vector. */
template <int WT>
static __device__ __forceinline__ void store_q8_pass(float h, int r, int n_logical, float (*hq)[32], int *arrived,
                                                     float *__restrict__ y, int lane) {
    const int g = ((r >> 5) - (int)blockIdx.x) / (int)gridDim.x; /* the block's g-th (ring_next_row) */
    int n = 0;
    if (lane == 0) {
        hq[g][r & 31] = h;
        __threadfence_block(); /* the value before the count */
        n = atomicAdd(&arrived[g], 1);
    }
    if (__shfl_sync(0xffffffffu, n, 0) != 31)
        return;
    __threadfence_block();
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; e++)
        v[e] = lane < 4 ? hq[g][8 * lane + e] : 0.0f;
    const int first = (r >> 5) * 4; /* the row block's first group of 8 */
    quant8_store<WT>(v, first + lane, first + 4, reinterpret_cast<int4 *>(y),
                     reinterpret_cast<xq_block *>(reinterpret_cast<uint8_t *>(y) + n_logical));
}

/* k_matvec_stream's work (Q8_0 and Q4_0 on the int8 input, rows of whole steps of 32 U
 * chunks), with each warp's loads in flight in shared memory rather than registers:
 * RING_STEPS(U) steps of its rows (8 x 512 R bytes and their scales) issued by cp.async
 * ahead of the step it sums, across its passes, all of the first ones before the wait
 * for the previous kernel. k_matvec_stream holds 4 chunks of 2 rows a lane in
 * registers (4 KB a warp) and waits for each batch before it sums it. Measured on the H200
 * (docs/perf-log.md, forty-ninth session; gpu_matvec_bench, us a layer, stream / ring):
 * Qwen3-8B Q8_0 60.4 / 58.4, Q4_0 38.7 / 37.6, 4B Q8_0 40.3 / 36.4, 14B Q8_0 106.0 / 93.8;
 * with 2 of the 8 steps before the wait it was level on the H200 and slower on an H100
 * (8B Q8_0 76.1 / 78.7, forty-eighth session). Decode (bench -n 32, guarded), stream /
 * ring: the H200 8B Q8_0 405.5 / 412.2 tok/s (forty-ninth); an H100 (fiftieth) 8B Q8_0
 * 324.7 / 319.7, 8B Q4_0 526.3 / 531.1 (its qkv streamed: ring_takes), and 14B Q8_0's
 * layer 130.4 / 124.7 us. On for both cards: the H200 is the one this is tuned for, and
 * only 8B Q8_0 on an H100 loses. Blocks of 8 warps, so that the next kernel's block fits
 * beside one, were slower on an H100 at every Qwen3 size (8B Q8_0 layer 76.3 -> 83.0 us;
 * branch try/ring-half, fiftieth session).
 * U = 2 halves the bookkeeping a byte (the wait, the syncs, the addresses and the commit
 * of a step; SASS step loop a 1,024 bytes of 2 rows, U 1 / 2: Q4_0 gate|up 161 / 114
 * instructions, Q8_0 117 / 77), for where the H200 reads Q4_0 below the copy rate. Q4_0's
 * instances are held to 64 registers (2 blocks' worth; ptxas took 69-76 at U = 2, 64-71 at
 * U = 1 with chunk_isum's high nibbles in place, 96 in MV_ADD_Q8; no spills held): at 76,
 * random Qwen3-1.7B Q4_0 decode fell 1,517 -> 1,341 tok/s on an H100 (held, 1,525); we
 * take it that a neighbouring kernel's block, which PDL overlaps, no longer fits. On an
 * H100, which reads these at ~92% of its copy rate, U = 2 is level: 8B Q4_0 decode 536.8
 * -> 538.7 tok/s, layer 48.15 -> 47.88 us (docs/perf-log.md, fifty-seventh session).
 * Q8_0's instances are not held: held, 8B Q8_0's layer took 79.9 us, against 79.2 unheld
 * (fifty-eighth). */
template <int WT, int MODE, int R, int U>
__global__ void __launch_bounds__(STREAM_THREADS, WT == CUDA_W_Q4_0 ? 2 : 1)
k_matvec_ring(const uint8_t *__restrict__ w, const __half *__restrict__ d, int n_in, int n_out,
              const float *__restrict__ x, const float *__restrict__ norm_w, float eps, float *__restrict__ y) {
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ float red[32];
    constexpr bool norm = MODE == MV_NORM_STORE || gated(MODE);
    constexpr bool q8_out = MODE == MV_NORM_SWIGLU_Q8, q8_in = MODE == MV_ADD_Q8;
    __shared__ float hq[q8_out ? Q8_GROUPS_MAX : 1][32]; /* (store_q8_pass) */
    __shared__ int arrived[q8_out ? Q8_GROUPS_MAX : 1];
    constexpr int parts = gated(MODE) ? 2 : 1, SCB = RING_SCALE_BYTES(WT);
    const int n_logical = n_out / parts;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n_warps = gridDim.x * STREAM_WARPS, gw = blockIdx.x * STREAM_WARPS + warp;
    const size_t rb = cuda_row_bytes(WT, n_in), sb = scale_row_bytes(WT, n_in);
    constexpr int STEPS = RING_STEPS(U), SLOT = RING_SLOT_BYTES(WT, R, U);
    const int n_steps = n_in / CHUNK_ELEMS(WT) / 32 / U;
    const staged_x sx = staged_at<WT, true>(smem, n_in);
    uint8_t *ring = smem + staged_x_bytes(WT, true, n_in) + (size_t)warp * STEPS * SLOT;
    const int r0 = ring_first_row<MODE>(gw, blockIdx.x);
    ring_cursor<MODE, R> cur;
    cur.r = r0;
    cur.s = 0;
    if (r0 < n_logical)
        pass_rows<MODE, R>(w, d, rb, sb, r0, n_logical, n_warps, cur.rows, cur.scales);
    for (int i = 0; i < STEPS; i++) /* the weights do not depend on the previous kernel */
        ring_issue<WT, MODE, R, U>(cur, ring + i * SLOT, w, d, rb, sb, n_logical, n_warps, n_steps, lane);
    constexpr int G = STREAM_GROUPS(norm);
    float4 w0[2 * G];
    stage_norm_weights<STREAM_THREADS, G>((const float *)norm_w, norm, n_in, (int)threadIdx.x, w0);
    if (q8_out && threadIdx.x < Q8_GROUPS_MAX)
        arrived[threadIdx.x] = 0; /* (the barrier below orders it before any arrival) */
    pdl_wait();
    pdl_launch_next();
    float scale = 1.0f;
    if constexpr (q8_in) { /* already quantized, in this layout: a copy (not stage_async,
                            * whose wait would also wait for the ring's copies) */
        const int n16 = (int)(staged_x_bytes(WT, true, n_in) / 16);
        for (int i = (int)threadIdx.x; i < n16; i += STREAM_THREADS)
            reinterpret_cast<int4 *>(smem)[i] = __ldcg(reinterpret_cast<const int4 *>(x) + i);
    } else {
        scale = stage_quant<WT, STREAM_THREADS, G>((const float *)x, (const float *)norm_w, norm, eps, n_in, sx.xq,
                                                   sx.xb, red, w0);
    }
    __syncthreads();

    int slot = 0;
    for (int r = r0; r < n_logical; r = ring_next_row<MODE, R>(r, n_warps)) {
        float a[R];
#pragma unroll
        for (int k = 0; k < R; k++)
            a[k] = 0.0f;
#pragma unroll 1
        for (int s = 0; s < n_steps; s++) {
            uint8_t *at = ring + slot * SLOT;
            cp_async_wait<STEPS - 1>(); /* this lane's copies of the step */
            __syncwarp();               /* and the other lanes' scale pieces */
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = 32 * (U * s + u) + lane;
                uint4 v[R];
                chunk_sc sc[R];
#pragma unroll
                for (int k = 0; k < R; k++) {
                    v[k] = *reinterpret_cast<const uint4 *>(at + (k * U + u) * 512 + 16 * lane);
                    sc[k] = {};
                    const __half *scales =
                        reinterpret_cast<const __half *>(at + R * U * 512 + (k * U + u) * SCB);
                    sc[k].d[0] = __half2float(scales[lane * CHUNK_ELEMS(WT) / 32]);
                }
                chunk_dots_sc<WT, true, R>(v, sc, sx, c, a);
            }
            __syncwarp(); /* the slot read by every lane before its scales are overwritten */
            ring_issue<WT, MODE, R, U>(cur, at, w, d, rb, sb, n_logical, n_warps, n_steps, lane);
            slot = slot + 1 == STEPS ? 0 : slot + 1;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int k = 0; k < R; k++)
                a[k] += __shfl_xor_sync(0xffffffffu, a[k], o);
        if constexpr (q8_out)
            store_q8_pass<WT>(silu(a[0] * scale) * (a[1] * scale), r, n_logical, hq, arrived, y, lane);
        else if (lane == 0)
            store_pass<MODE, R>(y, r, a, scale, n_logical, n_warps);
    }
    cp_async_wait_all();
}

template <int WT, bool I8>
static cudaError_t launch_head(const cuda_weight *w, const float *x, const float *norm_w, float eps, float *y,
                               cuda_step_state *state, cudaStream_t stream) {
    const int n_out = (int)w->n_out, n_in = (int)w->n_in;
    const size_t smem = staged_x_bytes(WT, I8, n_in);
    int per_sm = 0;
    cudaError_t e = allow_smem(k_head<WT, I8>, smem);
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_head<WT, I8>, HEAD_THREADS, smem);
    if (e != cudaSuccess)
        return e;
    const int wanted = (n_out + HEAD_WARPS * HEAD_ROWS(WT) - 1) / (HEAD_WARPS * HEAD_ROWS(WT));
    int n_blocks = multiprocessors() * (per_sm > 0 ? per_sm : 1);
    n_blocks = n_blocks < wanted ? n_blocks : wanted;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(dim3(n_blocks), dim3(HEAD_THREADS), smem, stream, &attr);
    return cudaLaunchKernelEx(&cfg, k_head<WT, I8>, (const uint8_t *)w->w, (const __half *)w->d, n_in, n_out, x,
                              norm_w, eps, y, state);
}

/* k_matvec_stream's pre: on, unless EDGERUNNER_CUDA_STREAM_PRE=0 (read once; for comparison) */
static int stream_pre(void) {
    static const int pre = env_switch("EDGERUNNER_CUDA_STREAM_PRE", 1);
    return pre;
}

/* k_matvec_stream's l2 for a first pass of first_rows rows of rb bytes: -1 (the whole pass
 * to L2 before the wait) where it is at most STREAM_PREFETCH_MAX, else the bytes of each
 * row (a multiple of 16) that go to L2 after the wait, while the input is staged: the
 * rows' share of STREAM_POST_MB megabytes (EDGERUNNER_CUDA_STREAM_POST_MB, read once, for
 * comparison; 0: none). HBM has little else to do then, and the previous kernel's tail
 * is over (before the wait, bytes beyond the pass's first chunks slowed that tail:
 * eleventh and thirteenth sessions). Measured on an H100 (docs/perf-log.md,
 * thirty-second session), Qwen3-8B Q4_0 decode 495.3-495.5 -> 500.4-501.3 tok/s with 4 MB
 * (qkv 672 bytes a row, down 1,024), 32B Q4_0 129.4 -> 129.7; 8 MB and more were slower
 * (16: qkv 6.60 -> 7.04 us, down 13.82 -> 14.17); 1 KB a row of down alone, in another
 * call: 494.6-495.1 -> 495.8-496.4. */
#ifndef STREAM_POST_MB
#define STREAM_POST_MB 4.0
#endif
static int stream_l2(int first_rows, size_t rb) {
    static double mb = -1.0;
    if (mb < 0.0) {
        const char *env = getenv("EDGERUNNER_CUDA_STREAM_POST_MB");
        mb = env && *env ? atof(env) : STREAM_POST_MB;
        mb = mb > 0.0 && mb < 4096.0 ? mb : 0.0;
    }
    if ((size_t)first_rows * rb <= STREAM_PREFETCH_MAX)
        return -1;
    const double per_row = mb * (1 << 20) / first_rows;
    return per_row < (double)rb ? (int)per_row & ~15 : (int)rb;
}

/* Rows per warp and pass of an ungated k_matvec_stream: 3 where two passes of 2 would not
 * cover the matrix and one pass of 3 does (Qwen3-4B's and 8B's qkv, 6,144 rows on the
 * H200's 2,112 warps), unless EDGERUNNER_CUDA_STREAM_R3=0 (read once; for comparison). A
 * pass costs a warp about one round trip of its loads, whether it holds a whole row or
 * part of one (docs/perf-log.md, nineteenth session): two passes of two rows, on a third
 * of the warps, cost a second round trip that a third row in flight does not. */
static int stream_r3 = -1; /* cuda_matvec_set_stream_rows; -1: from the environment */
static int stream_rows(int n_logical, int n_warps) {
    const int r3 = read_switch(&stream_r3, "EDGERUNNER_CUDA_STREAM_R3");
    return r3 == 3 || (r3 && n_logical > 2 * n_warps && n_logical <= 3 * n_warps) ? 3 : 2;
}

extern "C" void cuda_matvec_set_stream_rows(int mode) { stream_r3 = mode; }

/* Rows a warp takes in a pass of w's streamed matvec in this mode: stream_rows' where
 * ungated, 2 where gated (the gate and up rows of one) */
static int stream_pass_rows(const cuda_weight *w, int mode) {
    return !gated(mode) && stream_rows((int)w->n_out, multiprocessors() * STREAM_WARPS) == 3 ? 3 : 2;
}

/* Whether p is at a 16-byte boundary (NULL is) */
static bool quad_aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Blocks of a streamed matvec (k_matvec_stream, k_matvec_ring) of n_out rows in this mode
 * at R rows a warp and pass: `resident` (as many as are resident at once), at most one
 * warp per pass of rows */
static int stream_blocks(int n_out, int mode, int R, int resident) {
    const int rows_per_pass = gated(mode) ? 1 : R, n_logical = n_out / (gated(mode) ? 2 : 1);
    const int wanted = (n_logical + STREAM_WARPS * rows_per_pass - 1) / (STREAM_WARPS * rows_per_pass);
    return resident < wanted ? resident : wanted;
}

/* k_matvec_stream's grid: as many blocks as are resident at once, at most one warp per
 * pass of rows */
template <int WT, int MODE, bool I8, int R>
static cudaError_t launch_stream_r(const cuda_weight *w, const float *x, const float *norm_w, float eps, float *y,
                                   cudaStream_t stream) {
    const int n_out = (int)w->n_out, n_in = (int)w->n_in;
    const bool norm = MODE == MV_NORM_STORE || gated(MODE);
    const size_t smem =
        staged_x_bytes(WT, I8, n_in) + (norm && !I8 ? staged_bytes((size_t)n_in * sizeof(float)) : 0);
    int per_sm = 0;
    cudaError_t e = allow_smem(k_matvec_stream<WT, MODE, I8, R>, smem);
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_matvec_stream<WT, MODE, I8, R>, STREAM_THREADS,
                                                          smem);
    if (e != cudaSuccess)
        return e;
    const int rows_per_pass = gated(MODE) ? 1 : R, n_logical = n_out / (gated(MODE) ? 2 : 1);
    const int n_blocks = stream_blocks(n_out, MODE, R, multiprocessors() * (per_sm > 0 ? per_sm : 1));
    /* the first pass's rows, as the kernel counts them (its L2 prefetch before the wait) */
    const int first_rows = min(n_logical, rows_per_pass * n_blocks * STREAM_WARPS) * (gated(MODE) ? 2 : 1);
    const int l2 = stream_l2(first_rows, cuda_row_bytes(WT, n_in));
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(dim3(n_blocks), dim3(STREAM_THREADS), smem, stream, &attr);
    return cudaLaunchKernelEx(&cfg, k_matvec_stream<WT, MODE, I8, R>, (const uint8_t *)w->w, (const __half *)w->d,
                              n_in, n_out, x, norm_w, eps, y, stream_pre(), l2);
}

/* k_matvec_ring instead of k_matvec_stream where it takes the matrix, unless
 * EDGERUNNER_CUDA_RING=0 (read once; to compare) */
static int ring_mode = -1; /* cuda_matvec_set_ring; -1: from the environment */
static int ring_on(void) { return read_switch(&ring_mode, "EDGERUNNER_CUDA_RING"); }

extern "C" void cuda_matvec_set_ring(int on) { ring_mode = set_switch(on); }

/* Dynamic shared memory of a k_matvec_ring block: the staged input and 16 warps' rings
 * (the same at every U) */
static size_t ring_smem(int wt, int n_in, int rows) {
    return staged_x_bytes(wt, true, n_in) + (size_t)STREAM_WARPS * RING_STEPS(1) * RING_SLOT_BYTES(wt, rows, 1);
}

/* k_matvec_ring's units a step: 2 where w's rows are whole steps of 2 (Qwen3's matrices
 * in Q8_0 but 4B's; in Q4_0 1.7B's, 8B's and 32B's wo, not 14B's or 32B's others, whose
 * rows of 5,120, 17,408 and 25,600 are odd numbers of steps of 1,024), else 1; always 1
 * with EDGERUNNER_CUDA_RING_WIDE=0 (read once; to compare) or cuda_matvec_set_ring_wide(0). */
static int ring_wide_mode = -1;
extern "C" void cuda_matvec_set_ring_wide(int on) { ring_wide_mode = set_switch(on); }
static int ring_units(const cuda_weight *w) {
    const int wide = read_switch(&ring_wide_mode, "EDGERUNNER_CUDA_RING_WIDE");
    return wide && w->n_in % (64 * CHUNK_ELEMS(w->type)) == 0 ? 2 : 1;
}

/* Whether k_matvec_ring takes w at R rows a pass: Q8_0 and Q4_0 rows of whole steps,
 * scales 16-byte aligned, and its shared memory within the card's (not Qwen3-32B's down,
 * n_in 25,600). Not Q4_0 at 3 rows (8B's qkv: 4 steps a row, one pass a warp), which the
 * ring made slower on both cards (gpu_matvec_bench, us, stream / ring: the H200 5.65 /
 * 6.61, forty-ninth session; an H100 6.65 / 7.54, fiftieth, where 8B Q4_0 decode went
 * 521.0 -> 531.0-531.8 tok/s without it, the stream alone 526.1-526.3). 32B's wo (3 rows
 * of 8 steps) loses 0.36 us of its 107 us layer by the rule (the H100: 10.84 / 11.20):
 * kept simple. */
static bool ring_takes(const cuda_weight *w, int rows) {
    return ring_on() && cuda_wtype_int8_one_scale(w->type) && !(w->type == CUDA_W_Q4_0 && rows == 3) &&
           w->n_in % (32 * CHUNK_ELEMS(w->type)) == 0 &&
           quad_aligned(w->w) && quad_aligned(w->d) &&
           ring_smem(w->type, (int)w->n_in, rows) + 32 * sizeof(float) <= SMEM_BLOCK_MAX; /* (red[32]) */
}

template <int WT, int MODE, int R, int U>
static cudaError_t launch_ring_u(const cuda_weight *w, const float *x, const float *norm_w, float eps, float *y,
                                 cudaStream_t stream) {
    const int n_out = (int)w->n_out, n_in = (int)w->n_in;
    const size_t smem = ring_smem(WT, n_in, R);
    cudaError_t e = allow_smem(k_matvec_ring<WT, MODE, R, U>, smem);
    if (e != cudaSuccess)
        return e;
    const int n_blocks = stream_blocks(n_out, MODE, R, multiprocessors()); /* one a multiprocessor */
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(dim3(n_blocks), dim3(STREAM_THREADS), smem, stream, &attr);
    return cudaLaunchKernelEx(&cfg, k_matvec_ring<WT, MODE, R, U>, (const uint8_t *)w->w, (const __half *)w->d, n_in,
                              n_out, x, norm_w, eps, y);
}

template <int WT, int MODE, int R>
static cudaError_t launch_ring_r(const cuda_weight *w, const float *x, const float *norm_w, float eps, float *y,
                                 cudaStream_t stream) {
    return ring_units(w) == 2 ? launch_ring_u<WT, MODE, R, 2>(w, x, norm_w, eps, y, stream)
                              : launch_ring_u<WT, MODE, R, 1>(w, x, norm_w, eps, y, stream);
}

/* k_matvec_ring at `rows` (stream_pass_rows, where ring_takes) rows a warp and pass; Q8_0
 * and Q4_0 only */
template <int WT, int MODE>
static cudaError_t launch_ring(const cuda_weight *w, int rows, const float *x, const float *norm_w, float eps,
                               float *y, cudaStream_t stream) {
    constexpr int R3 = gated(MODE) || WT == CUDA_W_Q4_0 ? 2 : 3; /* (ring_takes: not Q4_0 at 3) */
    return rows == 3 ? launch_ring_r<WT, MODE, R3>(w, x, norm_w, eps, y, stream)
                     : launch_ring_r<WT, MODE, 2>(w, x, norm_w, eps, y, stream);
}

/* R 3 only for the types of int8 input (the matrices of 8B and the like; fewer instances) */
template <int WT, int MODE, bool I8>
static cudaError_t launch_stream(const cuda_weight *w, const float *x, const float *norm_w, float eps, float *y,
                                 cudaStream_t stream) {
    const int rows = stream_pass_rows(w, MODE);
    if constexpr (I8 && cuda_wtype_int8_one_scale(WT))
        if (ring_takes(w, rows))
            return launch_ring<WT, MODE>(w, rows, x, norm_w, eps, y, stream);
    if constexpr (I8 && !gated(MODE))
        if (rows == 3)
            return launch_stream_r<WT, MODE, I8, 3>(w, x, norm_w, eps, y, stream);
    return launch_stream_r<WT, MODE, I8, 2>(w, x, norm_w, eps, y, stream);
}

/* The weight bytes of a k_matvec slice on the int8 input, MV_SLICE_WEIGHTS_INT8 weights
 * of type wt; the types of int8 input (cuda_wtype_int8_dot) stream from one such slice a
 * multiprocessor (17.2 MB of Q8_0, 9.1 MB of Q4_0 at the H200's 132). Until the
 * twenty-fourth session they streamed from 32 KB a multiprocessor (seventeenth session:
 * then k_matvec staged its input in f32 with 74-95 registers). On the int8 input (40-56
 * registers), measured on the H200 (docs/perf-log.md, twenty-fourth session; edgerunner
 * bench -n 128, alternated), decode went Qwen3-0.6B Q8_0 (qkv and gate|up now in slices)
 * 1,827 -> 1,903-1,918 tok/s, 1.7B Q4_0 (qkv and down) 1,398 -> 1,478-1,482, 1.7B Q8_0
 * (qkv, wo and down, slices of up to 104 KB) 1,145 -> 1,245-1,247. A slice's dot products
 * run once all of it has arrived, with nothing in the step to overlap them: Q4_0 slices of
 * 108 KB (192K weights) were faster alone (gpu_matvec_bench: 1.7B gate|up 7.70 -> 5.40 us,
 * 8B qkv 6.53 -> 5.15) but slower in the step (1.7B Q4_0 1,480 -> 1,456 tok/s; 8B Q4_0's
 * qkv and wo 604 -> 593), hence a cap in weights rather than bytes. */
static size_t slice_bytes_int8(int wt) {
    return cuda_row_bytes(wt, MV_SLICE_WEIGHTS_INT8) + scale_row_bytes(wt, MV_SLICE_WEIGHTS_INT8);
}

/* Whether matrices of this type take the int8 input where their kernel allows:
 * cuda_matvec_int8 and the type (cuda_wtype_int8_dot); the K types unless
 * EDGERUNNER_CUDA_MV_INT8_K=0 (read once; for comparison: then in f32, as before). */
static bool int8_type(int type) {
    static const int k_on = env_switch("EDGERUNNER_CUDA_MV_INT8_K", 1);
    return cuda_matvec_int8() && cuda_wtype_int8_dot(type) && (k_on || cuda_wtype_int8_one_scale(type));
}

/* Whether w's matvec in this mode takes k_matvec_stream (else k_matvec) */
static bool streams(const cuda_weight *w, int mode) {
    const int parts = gated(mode) ? 2 : 1;
    const size_t row_bytes = parts * (cuda_row_bytes(w->type, w->n_in) + scale_row_bytes(w->type, (int)w->n_in));
    size_t min_bytes = stream_min_bytes;
    if (!min_bytes)
        min_bytes = int8_type(w->type) ? (size_t)multiprocessors() * slice_bytes_int8(w->type)
                        : MV_STREAM_MIN_BYTES;
    return cuda_row_bytes(w->type, w->n_in) % 16 == 0 && (size_t)(w->n_out / parts) * row_bytes > min_bytes;
}

/* k_matvec_stream with I8 where streams(), else k_matvec (in f32) */
template <int WT, int MODE, bool I8>
static cudaError_t launch(const cuda_weight *w, const float *x, const float *norm_w, float eps, float *y,
                          cudaStream_t stream) {
    const int n_out = (int)w->n_out, n_in = (int)w->n_in;
    const int parts = gated(MODE) ? 2 : 1;
    const int n_logical = n_out / parts;
    const size_t row_bytes = parts * (cuda_row_bytes(WT, n_in) + scale_row_bytes(WT, n_in));
    if (streams(w, MODE))
        return launch_stream<WT, MODE, I8>(w, x, norm_w, eps, y, stream);
    /* rows per block: one block per multiprocessor, fewer rows when the slice would pass
     * MV_SLICE_BYTES (slice_bytes_int8 on the int8 input) */
    const size_t slice_bytes = I8 ? slice_bytes_int8(WT) : MV_SLICE_BYTES;
    int rows = (n_logical + multiprocessors() - 1) / multiprocessors();
    if ((size_t)rows * row_bytes > slice_bytes)
        rows = (int)(slice_bytes / row_bytes) > 0 ? (int)(slice_bytes / row_bytes) : 1;
    const int n_blocks = (n_logical + rows - 1) / rows;
    const size_t smem = matvec_smem(WT, MODE, I8, n_in, rows);
    cudaError_t e = allow_smem(k_matvec<WT, MODE, I8>, smem);
    if (e != cudaSuccess)
        return e;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(dim3(n_blocks), dim3(MV_THREADS), smem, stream, &attr);
    return cudaLaunchKernelEx(&cfg, k_matvec<WT, MODE, I8>, (const uint8_t *)w->w, (const __half *)w->d, n_in, n_out,
                              rows, x, norm_w, eps, y);
}

/* MV_NORM_SWIGLU_Q8 and MV_ADD_Q8: k_matvec_ring only (cuda_matvec_q8_handoff says where) */
template <int WT, int MODE, bool I8>
static cudaError_t launch_q8(const cuda_weight *w, const float *x, const float *norm_w, float eps, float *y,
                             cudaStream_t stream) {
    if constexpr (I8 && cuda_wtype_int8_one_scale(WT)) {
        const int rows = stream_pass_rows(w, MODE);
        if (streams(w, MODE) && ring_takes(w, rows) && w->n_out % (gated(MODE) ? 64 : 1) == 0)
            return launch_ring<WT, MODE>(w, rows, x, norm_w, eps, y, stream);
    }
    return cudaErrorInvalidValue;
}

template <int WT, bool I8>
static cudaError_t launch_mode(const cuda_weight *w, int mode, const float *x, const float *norm_w, float eps,
                               float *y, cuda_step_state *state, cudaStream_t stream) {
    switch (mode) {
    case MV_STORE: return launch<WT, MV_STORE, I8>(w, x, norm_w, eps, y, stream);
    case MV_ADD: return launch<WT, MV_ADD, I8>(w, x, norm_w, eps, y, stream);
    case MV_NORM_STORE: return launch<WT, MV_NORM_STORE, I8>(w, x, norm_w, eps, y, stream);
    case MV_NORM_SWIGLU: return launch<WT, MV_NORM_SWIGLU, I8>(w, x, norm_w, eps, y, stream);
    case MV_NORM_GEGLU: return launch<WT, MV_NORM_GEGLU, I8>(w, x, norm_w, eps, y, stream);
    case MV_NORM_ARGMAX: return launch_head<WT, I8>(w, x, norm_w, eps, y, state, stream);
    case MV_NORM_SWIGLU_Q8: return launch_q8<WT, MV_NORM_SWIGLU_Q8, I8>(w, x, norm_w, eps, y, stream);
    case MV_ADD_Q8: return launch_q8<WT, MV_ADD_Q8, I8>(w, x, norm_w, eps, y, stream);
    }
    return cudaErrorInvalidValue;
}

/* Whether the types of cuda_wtype_int8_dot take int8 dot products: yes, unless
 * EDGERUNNER_CUDA_MV_INT8=0 (read once) or cuda_matvec_set_int8 says otherwise. */
static int int8_mode = -1;

extern "C" void cuda_matvec_set_int8(int on) { int8_mode = set_switch(on); }

extern "C" int cuda_matvec_int8(void) { return read_switch(&int8_mode, "EDGERUNNER_CUDA_MV_INT8"); }

/* Every decode matvec of these types takes the int8 input. Measured on the H200
 * (docs/perf-log.md): the head and the streaming matvecs first (ninth and tenth
 * sessions: Qwen3-1.7B decode 1,164 -> 1,245 tok/s; wo and down, then quantized in a
 * pass of their own, 8B Q4_0 528.9 -> 535.1). Not k_matvec at first: staged in f32 and
 * then quantized in a pass of its own, Qwen3-0.6B Q4_0 decode took 1,909 against 1,958
 * tok/s. Quantized as it is loaded (stage_quant), k_matvec takes 40-56 registers instead
 * of 74-95, and Qwen3-0.6B's layer matvecs (gpu_matvec_bench) went Q4_0 13.56 -> 10.43
 * us, Q8_0 (wo and down) 14.76 -> 13.62; decode (edgerunner bench -n 128, alternated
 * twice) Q4_0 1,998 / 1,993 -> 2,067 / 2,059 tok/s, Q8_0 1,726 / 1,721 -> 1,819 / 1,820
 * (twenty-third session). k_matvec in f32 again where EDGERUNNER_CUDA_MV_INT8_SLICE=0
 * (read once; for comparison). */
static int slice_int8(void) {
    static const int on = env_switch("EDGERUNNER_CUDA_MV_INT8_SLICE", 1);
    return on;
}

extern "C" int cuda_matvec_takes_int8(const cuda_weight *w, int mode) {
    if (!int8_type(w->type))
        return 0;
    return mode == MV_NORM_ARGMAX || streams(w, mode) || slice_int8();
}

extern "C" int cuda_matvec_takes_ring(const cuda_weight *w, int mode) {
    return cuda_matvec_takes_int8(w, mode) && streams(w, mode) && ring_takes(w, stream_pass_rows(w, mode));
}

extern "C" size_t cuda_q8_handoff_bytes(int64_t n) { return staged_x_bytes(CUDA_W_Q8_0, true, (int)n); }

/* The quantized handoff: on unless EDGERUNNER_CUDA_Q8_HANDOFF=0 (read once) or
 * cuda_matvec_set_q8_handoff says otherwise. Measured on an H100 (docs/perf-log.md,
 * fifty-fourth session; edgerunner bench -n 32, alternated), random Qwen3-8B decode
 * off / on: Q4_0 530.8, 532.2 / 539.0, 537.1 tok/s; Q8_0 319.9 / 320.2. */
static int q8_handoff_mode = -1;

extern "C" void cuda_matvec_set_q8_handoff(int on) { q8_handoff_mode = set_switch(on); }

/* MV_NORM_SWIGLU_Q8's blocks own blocks of 32 rows (ring_first_row): where that takes
 * no more passes than every n_warps-th row would (Qwen3-8B's 12,288 rows on 132
 * multiprocessors: 6 either way; not 4B's 9,728: 6 against 5), and Q8_GROUPS_MAX such
 * blocks at most. */
extern "C" int cuda_matvec_q8_handoff(const cuda_weight *gate_up, const cuda_weight *down) {
    if (!read_switch(&q8_handoff_mode, "EDGERUNNER_CUDA_Q8_HANDOFF") || gate_up->type != down->type ||
        gate_up->next || down->next || gate_up->n_out != 2 * down->n_in || down->n_in % 32 != 0 ||
        !cuda_matvec_takes_ring(gate_up, MV_NORM_SWIGLU) || !cuda_matvec_takes_ring(down, MV_ADD))
        return 0;
    const int n_logical = (int)down->n_in, n_blocks = stream_blocks((int)gate_up->n_out, MV_NORM_SWIGLU, 2,
                                                                      multiprocessors());
    const int n_warps = n_blocks * STREAM_WARPS, groups = (n_logical / 32 + n_blocks - 1) / n_blocks;
    const size_t extra = Q8_GROUPS_MAX * (32 + 1) * sizeof(float); /* hq, arrived */
    return groups <= Q8_GROUPS_MAX && 2 * groups <= (n_logical + n_warps - 1) / n_warps &&
           ring_smem(gate_up->type, (int)gate_up->n_in, 2) + 32 * sizeof(float) + extra <= SMEM_BLOCK_MAX;
}

static cudaError_t matvec_part(const cuda_weight *w, int mode, const float *x, const float *norm_w, float eps,
                               float *y, cuda_step_state *state, cudaStream_t stream) {
    /* stage_quant loads the input by 16 bytes: misaligned inputs (never the step's
     * buffers) take the f32 path */
    const bool i8 = cuda_matvec_takes_int8(w, mode) && quad_aligned(x) && quad_aligned(norm_w);
    /* I8 is a template argument only for the types that have it: one instance for the others */
#define CALL(WT)                                                                                   \
    return i8 && cuda_wtype_int8_dot(WT)                                                           \
               ? launch_mode<WT, cuda_wtype_int8_dot(WT)>(w, mode, x, norm_w, eps, y, state, stream) \
               : launch_mode<WT, false>(w, mode, x, norm_w, eps, y, state, stream)
    CUDA_WTYPE_SWITCH(w->type, CALL);
#undef CALL
    return cudaErrorInvalidValue;
}

extern "C" void cuda_matvec_set_stream_min(size_t bytes) { stream_min_bytes = bytes; }

extern "C" cudaError_t cuda_matvec(const cuda_weight *w, int mode, const float *x, const float *norm_w, float eps,
                                   float *y, cuda_step_state *state, cudaStream_t stream) {
    if (!w->next)
        return matvec_part(w, mode, x, norm_w, eps, y, state, stream);
    if (mode != MV_STORE && mode != MV_ADD && mode != MV_NORM_STORE)
        return cudaErrorInvalidValue;
    /* each part after the previous one has finished (programmatic dependent launch
     * orders them as any two kernels) */
    for (int64_t row0 = 0; w; row0 += w->n_out, w = w->next) {
        const cudaError_t e = matvec_part(w, mode, x, norm_w, eps, y + row0, state, stream);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}
