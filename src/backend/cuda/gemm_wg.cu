/*
 * gemm_wg.cu - the prefill's large matrix products on Hopper's warpgroup tensor cores
 * (wgmma, sm_90a):  Y (T, ldy) f32 (+)= X (T, K) f16 . W (N, K)^T  for Q8_0, Q4_0 and
 * the K types of the _K_M files (Q4_K, Q5_K, Q6_K: wg_plane), K a multiple of 64 and N
 * of 128 (every Qwen3 matrix), many tokens.
 *
 * gemm.cu's tiles (mma.sync, 4 warps, 128 x 64) reach ~160 TFLOP/s at Qwen3-8B's shapes
 * and 512 tokens, where the prefill is ~95% GEMM. Here a block of two warpgroups takes
 * 128 weight rows x BN tokens (128 or 256), each warpgroup 64 rows as wgmma m64nBNk16
 * with both operands read by the tensor cores from shared memory, so that no warp spends
 * issue slots on fragment loads. K goes in stages of 64 (one 128-byte row of F16):
 *   X (tokens, 64) arrives by cp.async into a ring of R stages;
 *   W's raw quants and scales arrive by cp.async into a ring of R stages, each thread
 *     its own 32 elements (a quant block), which it converts to F16 one stage ahead
 *     into one of two W tiles, as gemm.cu rounds them (gemm_half: the same F16 values);
 *   both tiles are in the 128-byte swizzle (the 16-byte chunk c of row r at chunk
 *     c ^ (r % 8)), the layout the wgmma descriptors name, free of bank conflicts.
 * The mma of stage s runs while stage s + 1 is converted and stage s + R - 1 loads.
 * The tokens are the fastest grid dimension: the blocks of one W tile run together and
 * share its bytes through L2. Each product is summed over K in steps of 16 in order, as
 * gemm.cu's mma.sync chain sums it: on the H200 the unit tests found 200 tokens here
 * bit-identical to each token alone on gemm.cu's tiles.
 */
#include <stdlib.h>

#include "backend/cuda/common.cuh"

#ifdef ER_CUDA_WGMMA /* a build for sm_90a (Makefile) */

#define WG_BM 128 /* weight rows a block, 64 a warpgroup */
#define WG_BK 64  /* K a stage: 128 bytes of F16 a row */
#define WG_THREADS 256

/* The shared memory of a block, 1024-byte aligned (the swizzle's period). */
template <int BN, int R>
struct wg_smem {
    __half x[R][BN * WG_BK]; /* (stage, token, k), swizzled */
    __half w[2][WG_BM * WG_BK]; /* (tile, row, k), swizzled */
    uint4 raw[R][WG_THREADS][2]; /* (stage, thread): its quant block's bytes (Q8_0 32, Q4_0 16) */
    uint32_t scale[R][WG_THREADS]; /* (stage, thread): its row's two scales of the stage */
};

/* The descriptor of a K-major F16 tile in the 128-byte swizzle at p: rows of 128 bytes,
 * 8-row groups 1024 bytes apart (the stride field); the leading-offset field is unused
 * by this layout. Advancing p by 32 bytes moves the tile 16 along K. */
static __device__ __forceinline__ uint64_t wg_desc(const void *p) {
    return (uint64_t)((smem_addr(p) & 0x3ffff) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 |
           (uint64_t)1 << 62;
}

static __device__ __forceinline__ void wg_fence(void) { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
static __device__ __forceinline__ void wg_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
static __device__ __forceinline__ void wg_wait(void) { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
/* Generic-proxy writes to shared memory (stores, cp.async) made visible to the tensor
 * cores' reads (the async proxy). */
static __device__ __forceinline__ void fence_async_smem(void) { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
/* Keeps the compiler from moving the accumulators' reads above a wait. */
static __device__ __forceinline__ void wg_pin(float &v) { asm volatile("" : "+f"(v)::"memory"); }

/* d (the m64nN F32 fragment, N / 2 a thread) += A (64 x 16) . B (N x 16)^T, both F16,
 * K-major in shared memory (desc_a, desc_b), for N = 256 and 128. The operands are written
 * out: the instruction names each accumulator register. */
static __device__ __forceinline__ void wgmma_m64n256k16(float d[128], uint64_t desc_a, uint64_t desc_b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
                   "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
                   "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
                   "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
                   "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                   "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
                   "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(desc_a), "l"(desc_b), "r"(1));
}
static __device__ __forceinline__ void wgmma_m64n128k16(float d[64], uint64_t desc_a, uint64_t desc_b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(desc_a), "l"(desc_b), "r"(1));
}
template <int BN>
static __device__ __forceinline__ void wgmma_k16(float d[BN / 2], uint64_t desc_a, uint64_t desc_b) {
    if constexpr (BN == 256)
        wgmma_m64n256k16(d, desc_a, desc_b);
    else
        wgmma_m64n128k16(d, desc_a, desc_b);
}

/* Element offset of the 16-byte chunk c of row r in a swizzled tile. */
static __device__ __forceinline__ int swz(int r, int c) { return r * WG_BK + ((c ^ (r & 7)) << 3); }

/* The types of 4-bit planes with a K super-block (wtypes.cuh): a quant block of 32 is one
 * 16-byte chunk, as Q4_0's, whose scales (chunk_scale: a sub-block's scale and minimum,
 * Q5_K's and Q6_K's high bits) come from the row's super-block header. Its thread reads
 * them from global memory (L2) a stage before it converts the chunk: they would not fit
 * the ring's one word (Q6_K's 84 bytes a super-block are not 16-byte units). */
#define WG_PLANE(WT) ((WT) == CUDA_W_Q4_K || (WT) == CUDA_W_Q5_K || (WT) == CUDA_W_Q6_K)

/* Stage s's quants and scales of this thread's block (row at wq, its scales at wd) into
 * the ring (WG_PLANE: the quants alone). */
template <int WT, int BN, int R>
static __device__ __forceinline__ void wg_load_w(wg_smem<BN, R> &sm, const uint8_t *wq, const __half *wd, int w_blk, int s) {
    const int slot = s % R, tid = threadIdx.x;
    if (WG_PLANE(WT)) {
        cp_async16(&sm.raw[slot][tid][0], wq + s * (WG_BK / 2) + 16 * w_blk, 16);
        return;
    }
    if (WT == CUDA_W_Q8_0) {
        cp_async16(&sm.raw[slot][tid][0], wq + s * WG_BK + 32 * w_blk, 16);
        cp_async16(&sm.raw[slot][tid][1], wq + s * WG_BK + 32 * w_blk + 16, 16);
    } else {
        cp_async16(&sm.raw[slot][tid][0], wq + s * (WG_BK / 2) + 16 * w_blk, 16);
    }
    cp_async4(&sm.scale[slot][tid], wd + s * 2);
}

/* Stage s of X's tokens t0 + x_row + 32 j (zeros past T), chunk x_chunk, into the ring. */
template <int BN, int R>
static __device__ __forceinline__ void wg_load_x(wg_smem<BN, R> &sm, const __half *X, int T, int K, int64_t t0, int x_row,
                                                 int x_chunk, int s) {
#pragma unroll
    for (int j = 0; j < BN / 32; j++) {
        const int r = x_row + 32 * j;
        const int64_t t = t0 + r;
        cp_async16(&sm.x[s % R][swz(r, x_chunk)], X + (t < T ? t : 0) * (int64_t)K + s * WG_BK + 8 * x_chunk,
                   t < T ? 16 : 0);
    }
}

/* This thread's quant block of stage s (row w_row, block w_blk) as F16 into W tile s % 2,
 * four 16-byte chunks, rounded as gemm.cu rounds it (gemm_half); WG_PLANE: with the
 * chunk's scales pc (wg_plane_scales), its groups of 16 as gemm.cu's parts. */
template <int WT, int BN, int R>
static __device__ __forceinline__ void wg_convert(wg_smem<BN, R> &sm, int w_row, int w_blk, int s,
                                                  const chunk_sc &pc) {
    const int slot = s % R, tid = threadIdx.x;
    w_regs r;
    uint32_t h[16];
    r.raw[0] = sm.raw[slot][tid][0];
    if constexpr (WG_PLANE(WT)) {
        r.h0 = pc.h[0];
        r.h1 = pc.h[1];
#pragma unroll
        for (int g = 0; g < 2; g++) {
            r.g = g;
            r.sd = pc.d[g];
            r.sm = pc.m[g];
            gemm_half<WT>(r, g, h + 8 * g);
        }
    } else {
        const uint32_t sc = sm.scale[slot][tid];
        r.d = __ushort_as_half((unsigned short)(w_blk ? sc >> 16 : sc & 0xffff));
        gemm_half<WT>(r, 0, h);
        if (WT == CUDA_W_Q8_0)
            r.raw[0] = sm.raw[slot][tid][1];
        gemm_half<WT>(r, WT == CUDA_W_Q8_0 ? 0 : 1, h + 8);
    }
    __half *tile = sm.w[s & 1];
#pragma unroll
    for (int c = 0; c < 4; c++)
        *reinterpret_cast<uint4 *>(&tile[swz(w_row, 4 * w_blk + c)]) =
            make_uint4(h[4 * c], h[4 * c + 1], h[4 * c + 2], h[4 * c + 3]);
}

/* WG_PLANE: the scales of this thread's chunk of stage s (chunk 2 s + w_blk of its row,
 * whose scales start at wd); others: none. */
template <int WT>
static __device__ __forceinline__ chunk_sc wg_plane_scales(const __half *wd, int w_blk, int s) {
    if constexpr (WG_PLANE(WT))
        return chunk_scale<WT>(wd, 2 * s + w_blk);
    return chunk_sc{};
}

/* grid (ceil(T / BN), N / WG_BM), WG_THREADS threads, dynamic shared memory
 * wg_smem_bytes<BN, R>(); BN tokens a block (128 or 256). Thread i loads and converts
 * quant block i % 2 of row i / 2 of each stage (warpgroup g's threads the rows its mma
 * reads), and X's 16-byte chunk i % 8 of tokens i / 8 + 32 j. */
template <int WT, int BN, int R>
__global__ void __launch_bounds__(WG_THREADS, 1) /* one block an SM (the rings fill it) */
k_gemm_wg(const cuda_weight w, const __half *__restrict__ X, int T, float *__restrict__ Y, int64_t ldy,
          int accumulate) {
    extern __shared__ uint8_t smem_bytes[];
    wg_smem<BN, R> &sm = *reinterpret_cast<wg_smem<BN, R> *>(smem_bytes + ((1024 - (smem_addr(smem_bytes) & 1023)) & 1023));
    const int K = (int)w.n_in, n_steps = K / WG_BK, tid = threadIdx.x, wg = tid >> 7;
    const int64_t t0 = (int64_t)blockIdx.x * BN, n0 = (int64_t)blockIdx.y * WG_BM;
    /* W: row w_row of the tile, quant block w_blk of each stage */
    const int w_row = tid >> 1, w_blk = tid & 1;
    const uint8_t *wq = (const uint8_t *)w.w + (size_t)(n0 + w_row) * cuda_row_bytes(WT, K);
    const __half *wd = (const __half *)w.d + (size_t)(n0 + w_row) * SCALE_HALVES(WT, K);
    /* X: chunk x_chunk of tokens x_row + 32 j */
    const int x_chunk = tid & 7, x_row = tid >> 3;

    /* the first R - 1 stages: the weights (read-only) while the previous kernel ends,
     * X (which it writes) after the wait; then stage 0 converted */
    for (int s = 0; s < R - 1; s++)
        if (s < n_steps)
            wg_load_w<WT, BN, R>(sm, wq, wd, w_blk, s);
    pdl_wait();
    pdl_launch_next();
    for (int s = 0; s < R - 1; s++) {
        if (s < n_steps)
            wg_load_x<BN, R>(sm, X, T, K, t0, x_row, x_chunk, s);
        cp_async_commit();
    }
    chunk_sc pc = wg_plane_scales<WT>(wd, w_blk, 0); /* WG_PLANE: the next stage's scales */
    cp_async_wait<R - 2>();
    wg_convert<WT, BN, R>(sm, w_row, w_blk, 0, pc);
    if (n_steps > 1)
        pc = wg_plane_scales<WT>(wd, w_blk, 1);
    fence_async_smem();
    __syncthreads();

    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++)
        d[i] = 0.0f;
    for (int s = 0; s < n_steps; s++) {
        /* the mma of stage s, four steps of 16 along K */
        wg_fence();
        const __half *a = sm.w[s & 1] + wg * 64 * WG_BK, *b = sm.x[s % R];
#pragma unroll
        for (int kk = 0; kk < WG_BK / 16; kk++)
            wgmma_k16<BN>(d, wg_desc(a + 16 * kk), wg_desc(b + 16 * kk));
        wg_commit();
        /* stage s - 1's mma is done: its W tile takes stage s + 1 */
        wg_wait<1>();
        if (s + 1 < n_steps) {
            cp_async_wait<R - 3>(); /* this thread's copies of stage s + 1 */
            wg_convert<WT, BN, R>(sm, w_row, w_blk, s + 1, pc);
            if (s + 2 < n_steps) /* a stage of mma to arrive in */
                pc = wg_plane_scales<WT>(wd, w_blk, s + 2);
        }
        fence_async_smem();
        __syncthreads(); /* stage s + 1 complete; every warpgroup past stage s - 1 */
        if (s + R - 1 < n_steps) {
            wg_load_w<WT, BN, R>(sm, wq, wd, w_blk, s + R - 1);
            wg_load_x<BN, R>(sm, X, T, K, t0, x_row, x_chunk, s + R - 1);
        }
        cp_async_commit();
    }
    wg_wait<0>();
#pragma unroll
    for (int i = 0; i < BN / 2; i++)
        wg_pin(d[i]);

    /* the fragment: d[4 j + 2 h + c] is row 16 warp + lane / 4 + 8 h of the warpgroup's
     * 64, token 8 j + 2 (lane % 4) + c */
    const int lane = tid & 31, warp = (tid >> 5) & 3;
    const int64_t row = n0 + wg * 64 + warp * 16 + (lane >> 2);
#pragma unroll
    for (int i = 0; i < BN / 2; i++) {
        const int64_t t = t0 + 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
        if (t < T) {
            float *dst = Y + t * ldy + row + 8 * ((i >> 1) & 1);
            *dst = accumulate ? *dst + d[i] : d[i];
        }
    }
}

/* A block's shared memory: its struct and the alignment's slack. */
template <int BN, int R>
static constexpr size_t wg_smem_bytes() {
    return sizeof(wg_smem<BN, R>) + 1024;
}

/* Stages in the rings: 4 (128 tokens a block: 133 KiB, 256: 196 KiB; one block an SM).
 * Measured at Qwen3-8B's Q8_0 layer, 512 tokens (gpu_matvec_bench, us for qkv / wo /
 * gate_up / down): 128 tokens and 3 stages, two blocks an SM, 105 / 79 / 312 / 221; 4
 * stages, one an SM, 112 / 72 / 337 / 185; 256 tokens, 3 stages, 86 / 105 / 273 / 288; 4
 * stages 75 / 72 / 224 / 186. The deeper ring serves the long K of down; 256 tokens halve
 * the W tiles' conversion and the operand reads of the shared memory per product, where
 * the blocks still fill the SMs (cuda_gemm_wg_tokens). End to end (H200, docs/perf-log.md),
 * Qwen3-8B pp512 with 3 / 4 stages at 256 tokens: Q8_0 19,066-19,149 / 20,304 tok/s, Q4_0
 * 20,104-20,124 / 21,101. (The 3-stage kernels, kept for that comparison, are gone.) */
#define WG_STAGES 4

template <int WT, int BN, int R>
static cudaError_t launch_wg(const cuda_weight *w, const __half *X, int T, float *y, int64_t ldy, int accumulate,
                             cudaStream_t stream) {
    constexpr size_t smem = wg_smem_bytes<BN, R>();
    void (*kernel)(cuda_weight, const __half *, int, float *, int64_t, int) = k_gemm_wg<WT, BN, R>;
    cudaError_t e = allow_smem(kernel, smem);
    if (e != cudaSuccess)
        return e;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(dim3((unsigned)((T + BN - 1) / BN), (unsigned)(w->n_out / WG_BM)),
                                              dim3(WG_THREADS), smem, stream, &attr);
    return cudaLaunchKernelEx(&cfg, kernel, *w, X, T, y, ldy, accumulate);
}

template <int WT>
static cudaError_t launch_wg_bn(const cuda_weight *w, const __half *X, int T, float *y, int64_t ldy, int accumulate,
                                int bn, cudaStream_t stream) {
    return bn == 256 ? launch_wg<WT, 256, WG_STAGES>(w, X, T, y, ldy, accumulate, stream)
                     : launch_wg<WT, 128, WG_STAGES>(w, X, T, y, ldy, accumulate, stream);
}

#endif /* ER_CUDA_WGMMA */

extern "C" int cuda_gemm_wg_fits(const cuda_weight *w, int n_tokens) {
#ifdef ER_CUDA_WGMMA
    return (w->type == CUDA_W_Q8_0 || w->type == CUDA_W_Q4_0 || WG_PLANE(w->type)) && w->n_in % WG_BK == 0 &&
           w->n_in % cuda_wtype_block(w->type) == 0 && w->n_out % WG_BM == 0 &&
           n_tokens >= 1 && (n_tokens + 127) / 128 <= 65535 && w->n_out / WG_BM <= 65535;
#else
    (void)w;
    (void)n_tokens;
    return 0;
#endif
}

/* One block an SM: a launch takes ceil(blocks / SMs) waves, each as long as a block's
 * tokens. 256 tokens a block unless 128 take fewer such rounds (Qwen3-8B at 512 tokens:
 * 256 for qkv and gate|up, 128 for wo and down, whose 32 row tiles would leave half the
 * SMs idle). Even where few blocks leave most SMs idle (Qwen3-0.6B's wo and down at 512
 * tokens: 32 blocks of 128 tokens), the warpgroup GEMM beats gemm.cu's smaller, more
 * numerous tiles: on the H200 (docs/perf-log.md, 2026-12-03 thirteenth session) 0.6B
 * pp512 with every matrix at 128 tokens a block, Q8_0 74,012 -> 86,844 tok/s, Q4_0
 * 81,155 -> 88,962 (gemm.cu's wo and down took 3.1 of the pass's 6.7 ms). */
extern "C" int cuda_gemm_wg_tokens(const cuda_weight *w, int n_tokens) {
    if (n_tokens < CUDA_GEMM_WG_MIN_TOKENS || !cuda_gemm_wg_fits(w, n_tokens))
        return 0;
    const int64_t row_tiles = w->n_out / WG_BM, n_sm = multiprocessors();
    const int64_t blocks128 = row_tiles * ((n_tokens + 127) / 128), blocks256 = row_tiles * ((n_tokens + 255) / 256);
    return (blocks256 + n_sm - 1) / n_sm * 256 <= (blocks128 + n_sm - 1) / n_sm * 128 ? 256 : 128;
}

extern "C" cudaError_t cuda_gemm_wg(const cuda_weight *w, const uint16_t *x, int n_tokens, float *y, int64_t ldy,
                                    int accumulate, int block_tokens, cudaStream_t stream) {
    if (!cuda_gemm_wg_fits(w, n_tokens) || (block_tokens != 128 && block_tokens != 256))
        return cudaErrorInvalidValue;
#ifdef ER_CUDA_WGMMA
    const __half *X = reinterpret_cast<const __half *>(x);
    switch (w->type) {
    case CUDA_W_Q8_0: return launch_wg_bn<CUDA_W_Q8_0>(w, X, n_tokens, y, ldy, accumulate, block_tokens, stream);
    case CUDA_W_Q4_0: return launch_wg_bn<CUDA_W_Q4_0>(w, X, n_tokens, y, ldy, accumulate, block_tokens, stream);
    case CUDA_W_Q4_K: return launch_wg_bn<CUDA_W_Q4_K>(w, X, n_tokens, y, ldy, accumulate, block_tokens, stream);
    case CUDA_W_Q5_K: return launch_wg_bn<CUDA_W_Q5_K>(w, X, n_tokens, y, ldy, accumulate, block_tokens, stream);
    case CUDA_W_Q6_K: return launch_wg_bn<CUDA_W_Q6_K>(w, X, n_tokens, y, ldy, accumulate, block_tokens, stream);
    }
    return cudaErrorInvalidValue;
#else
    (void)x;
    (void)y;
    (void)ldy;
    (void)accumulate;
    (void)stream;
    return cudaErrorInvalidValue;
#endif
}
