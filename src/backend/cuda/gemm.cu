/*
 * gemm.cu - the prefill's matrix products on the tensor cores, reading the weights in
 * their device layout (wtypes.cuh) directly:  Y (T, ldy) f32 (+)= X (T, K) f16 . W (N, K)^T.
 *
 * A block computes BT tokens x BN weight rows, each of its 4 warps a quarter
 * (BT / 2 x BN / 2) as mma.sync m16n8k16 (F16 inputs, F32 sums). K goes in steps of 32 (one
 * quant block) through two shared-memory stages: X arrives by cp.async, W is loaded
 * into registers one step ahead, converted to F16 and stored while the tensor cores
 * work on the other stage. The conversion (gemm_load and gemm_half, per type in
 * wtypes.cuh) rounds each weight to F16 once, as a dequantization to F16 followed by an
 * F16 GEMM would (llama.cpp's cuBLAS path); for Q8_0 / Q4_0 it is exact integer
 * arithmetic in F16 and one rounded multiply.
 */
#include <stdlib.h>

#include "backend/cuda/common.cuh"

#define GM_BK 32  /* K per stage: one quant block */
#define GM_PAD 8  /* halves: rows 80 bytes apart, so a warp's ldmatrix rows hit distinct banks */
#define GM_THREADS 128

template <int BT, int BN>
struct gemm_stage {
    __half x[BT][GM_BK + GM_PAD]; /* (tokens, k) */
    __half w[BN][GM_BK + GM_PAD]; /* (weight rows, k) */
};

/* Four 8x8 F16 matrices; lanes 8j..8j+7 give the row addresses of matrix j, and each
 * lane receives (row lane / 4, columns 2 (lane % 4) ..+1) of every matrix. */
static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], const __half *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* A thread's share of a stage's W tile: 16 consecutive elements k0 + 16 part .. of one
 * weight row, loaded into registers (a step ahead). */
template <int WT>
static __device__ __forceinline__ void load_w(const cuda_weight &w, int64_t row, int k0, int part, w_regs &r) {
    const uint8_t *w_row = (const uint8_t *)w.w + (size_t)row * cuda_row_bytes(WT, w.n_in);
    gemm_load<WT>(w_row, (const __half *)w.d, row, w.n_in, k0, part, r);
}

/* The 16 elements of load_w as F16 into dst (16-byte aligned). */
template <int WT>
static __device__ __forceinline__ void store_w(const w_regs &r, int part, __half *dst) {
    uint32_t h[8];
    gemm_half<WT>(r, part, h);
    reinterpret_cast<uint4 *>(dst)[0] = make_uint4(h[0], h[1], h[2], h[3]);
    reinterpret_cast<uint4 *>(dst)[1] = make_uint4(h[4], h[5], h[6], h[7]);
}

/* Stage kt's tiles, element by element with zeros past K: the last step of a K that
 * is not a whole number of steps, or rows not 16-byte aligned (F16/BF16/F32 only). */
template <int WT, int BT, int BN>
static __device__ void load_stage_ragged(const cuda_weight &w, const __half *X, int T, int64_t t0, int64_t n0,
                                         int k0, gemm_stage<BT, BN> *s) {
    const int K = (int)w.n_in;
    for (int i = threadIdx.x; i < BT * GM_BK; i += GM_THREADS) {
        const int r = i / GM_BK, k = k0 + i % GM_BK;
        s->x[r][i % GM_BK] = t0 + r < T && k < K ? X[(t0 + r) * K + k] : __float2half_rn(0.0f);
    }
    for (int i = threadIdx.x; i < BN * GM_BK; i += GM_THREADS) {
        const int r = i / GM_BK, k = k0 + i % GM_BK;
        const uint8_t *w_row = (const uint8_t *)w.w + (size_t)(n0 + r) * cuda_row_bytes(WT, w.n_in);
        const __half *d_row = HAS_SCALES(WT) ? (const __half *)w.d + (size_t)(n0 + r) * SCALE_HALVES(WT, K) : nullptr;
        s->w[r][i % GM_BK] = __float2half_rn(n0 + r < w.n_out && k < K ? elem<WT>(w_row, d_row, k) : 0.0f);
    }
}

/* grid (ceil(N / BN), ceil(T / BT), n_split), GM_THREADS threads. Each thread loads X in
 * 16-byte chunks (BT / 32 of them per stage) and W in runs of 16 elements of one row
 * (BN / 64). Split over K (n_split > 1): block z sums steps [z split_steps, (z + 1)
 * split_steps) of K into its own (T, ldy) plane of Y, split_plane floats after z - 1's. */
template <int WT, int BT, int BN>
__global__ void __launch_bounds__(GM_THREADS)
k_gemm(const cuda_weight w, const __half *__restrict__ X, int T, float *__restrict__ Y, int64_t ldy, int accumulate,
       int split_steps, size_t split_plane) {
    constexpr int MI = BT / 32, NI = BN / 16;          /* m16 and n8 tiles of a warp */
    constexpr int XC = BT * 4 / GM_THREADS;             /* X chunks per thread and stage */
    constexpr int WR = BN * 2 > GM_THREADS ? BN * 2 / GM_THREADS : 1; /* W runs per thread */
    __shared__ __align__(16) gemm_stage<BT, BN> st[2];
    const int K = (int)w.n_in, kt_begin = (int)blockIdx.z * split_steps;
    const int n_steps = min((K + GM_BK - 1) / GM_BK, kt_begin + split_steps); /* this block's end */
    Y += blockIdx.z * split_plane;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int64_t n0 = (int64_t)blockIdx.x * BN, t0 = (int64_t)blockIdx.y * BT;
    /* 16-byte loads need 16-byte aligned rows of X (and W); F16/BF16/F32 matrices of
     * other row lengths go element by element */
    const bool vec_rows = K % 8 == 0;
    /* this thread's X chunks: token xr[i], 8 halves at 8 xq */
    const __half *x_src[XC];
    int x_bytes[XC], xr[XC];
    const int xq = threadIdx.x & 3;
#pragma unroll
    for (int i = 0; i < XC; i++) {
        xr[i] = (threadIdx.x >> 2) + i * (GM_THREADS / 4);
        x_bytes[i] = t0 + xr[i] < T ? 16 : 0;
        x_src[i] = X + (t0 + xr[i] < T ? t0 + xr[i] : 0) * (int64_t)K + 8 * xq;
    }
    /* this thread's W runs: row wr_row[i] of the tile, elements 16 part .. */
    const int part = threadIdx.x & 1;
    const bool w_active = BN * 2 >= GM_THREADS || (int)threadIdx.x < BN * 2;
    int wr_row[WR];
    int64_t w_row[WR];
#pragma unroll
    for (int i = 0; i < WR; i++) {
        wr_row[i] = ((threadIdx.x >> 1) + i * (GM_THREADS / 2)) % BN;
        w_row[i] = n0 + wr_row[i] < w.n_out ? n0 + wr_row[i] : w.n_out - 1; /* rows past N: loaded, never stored */
    }
    const int wm = warp >> 1, wn = warp & 1; /* this warp's quarter */
    float acc[MI][NI][4] = {};
    w_regs wreg[WR];

    /* the first stage: its weights (read-only) load while the previous kernel ends,
     * then X, which that kernel writes */
    const int k_first = kt_begin * GM_BK;
    const bool first_fast = vec_rows && k_first + GM_BK <= K;
    if (first_fast) {
#pragma unroll
        for (int i = 0; i < WR; i++)
            if (w_active)
                load_w<WT>(w, w_row[i], k_first, part, wreg[i]);
    }
    pdl_wait();
    pdl_launch_next();
    if (first_fast) {
#pragma unroll
        for (int i = 0; i < XC; i++)
            cp_async16(&st[0].x[xr[i]][8 * xq], x_src[i] + k_first, x_bytes[i]);
        cp_async_commit();
#pragma unroll
        for (int i = 0; i < WR; i++)
            if (w_active)
                store_w<WT>(wreg[i], part, &st[0].w[wr_row[i]][16 * part]);
        cp_async_wait_all();
    } else {
        load_stage_ragged<WT, BT, BN>(w, X, T, t0, n0, k_first, &st[0]);
    }
    __syncthreads();

    for (int kt = kt_begin; kt < n_steps; kt++) {
        gemm_stage<BT, BN> *cur = &st[(kt - kt_begin) & 1], *next = &st[(kt - kt_begin + 1) & 1];
        const int k_next = (kt + 1) * GM_BK;
        const bool more = kt + 1 < n_steps, fast = vec_rows && k_next + GM_BK <= K;
        if (more && fast) {
#pragma unroll
            for (int i = 0; i < XC; i++)
                cp_async16(&next->x[xr[i]][8 * xq], x_src[i] + k_next, x_bytes[i]);
            cp_async_commit();
#pragma unroll
            for (int i = 0; i < WR; i++)
                if (w_active)
                    load_w<WT>(w, w_row[i], k_next, part, wreg[i]);
        }
#pragma unroll
        for (int ks = 0; ks < GM_BK; ks += 16) {
            uint32_t a[MI][4], b[NI / 2][4];
#pragma unroll
            for (int mi = 0; mi < MI; mi++)
                ldsm_x4(a[mi], &cur->x[wm * (BT / 2) + mi * 16 + (lane & 15)][ks + (lane >> 4) * 8]);
            /* b[nj]: b0, b1 of the n8 tile 2 nj, then of tile 2 nj + 1 */
#pragma unroll
            for (int nj = 0; nj < NI / 2; nj++)
                ldsm_x4(b[nj], &cur->w[wn * (BN / 2) + nj * 16 + (lane & 7) + ((lane >> 4) << 3)]
                                      [ks + ((lane >> 3) & 1) * 8]);
#pragma unroll
            for (int mi = 0; mi < MI; mi++)
#pragma unroll
                for (int ni = 0; ni < NI; ni++)
                    mma_16816(acc[mi][ni], a[mi], b[ni >> 1][2 * (ni & 1)], b[ni >> 1][2 * (ni & 1) + 1]);
        }
        if (more) {
            if (fast) {
#pragma unroll
                for (int i = 0; i < WR; i++)
                    if (w_active)
                        store_w<WT>(wreg[i], part, &next->w[wr_row[i]][16 * part]);
                cp_async_wait_all();
            } else {
                load_stage_ragged<WT, BT, BN>(w, X, T, t0, n0, k_next, next);
            }
        }
        __syncthreads();
    }

    const bool pairs = ldy % 2 == 0 && ((uintptr_t)Y & 7) == 0;
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const int64_t t = t0 + wm * (BT / 2) + mi * 16 + g + 8 * hh, n = n0 + wn * (BN / 2) + ni * 8 + 2 * c;
                if (t >= T || n >= w.n_out)
                    continue;
                float *y = Y + t * ldy + n;
                float v0 = acc[mi][ni][2 * hh], v1 = acc[mi][ni][2 * hh + 1];
                if (pairs && n + 1 < w.n_out) {
                    if (accumulate) {
                        const float2 old = *reinterpret_cast<const float2 *>(y);
                        v0 += old.x, v1 += old.y;
                    }
                    *reinterpret_cast<float2 *>(y) = make_float2(v0, v1);
                } else {
                    y[0] = accumulate ? y[0] + v0 : v0;
                    if (n + 1 < w.n_out)
                        y[1] = accumulate ? y[1] + v1 : v1;
                }
            }
}

/* y (T, ldy) (+)= X w^T, or with n_split > 1 the split's sums into n_split planes of
 * (T, ldy) floats at y. One tile size for every weight type. */
template <int BT, int BN>
static cudaError_t launch_gemm(const cuda_weight *w, const __half *X, int T, float *y, int64_t ldy, int accumulate,
                               int n_split, cudaStream_t stream) {
    const int n_steps = (int)((w->n_in + GM_BK - 1) / GM_BK), split_steps = (n_steps + n_split - 1) / n_split;
    const dim3 grid((unsigned int)((w->n_out + BN - 1) / BN), (unsigned int)((T + BT - 1) / BT),
                    (unsigned int)n_split);
    const size_t plane = (size_t)T * (size_t)ldy;
    if (T <= 0 || grid.y > 65535u || n_split < 1 || n_split > n_steps)
        return cudaErrorInvalidValue;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(grid, dim3(GM_THREADS), 0, stream, &attr);
#define CALL(WT) return cudaLaunchKernelEx(&cfg, k_gemm<WT, BT, BN>, *w, X, T, y, ldy, accumulate, split_steps, plane)
    CUDA_WTYPE_SWITCH(w->type, CALL);
#undef CALL
    return cudaErrorInvalidValue;
}

/* y (T, ldy)[:, :n] (+)= the sum of n_split planes (T, n) of part, in plane order */
__global__ void k_split_sum(const float *__restrict__ part, int n_split, int T, int n, float *__restrict__ y,
                            int64_t ldy, int accumulate) {
    pdl_wait();
    pdl_launch_next();
    const size_t plane = (size_t)T * (size_t)n;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < plane; i += (size_t)gridDim.x * blockDim.x) {
        float sum = part[i];
        for (int z = 1; z < n_split; z++)
            sum += part[(size_t)z * plane + i];
        float *dst = y + (i / (size_t)n) * (size_t)ldy + i % (size_t)n;
        *dst = accumulate ? *dst + sum : sum;
    }
}

/* grid (T, chunks): h (T, n_ff) f16 = act(gate) * up from the n_split shares of gate|up,
 * planes of (T, 2 n_ff) `plane` floats apart, summed in plane order as k_split_sum sums
 * them, then k_glu's arithmetic; block (t, c) takes every chunks-th run of blockDim.x
 * elements of row t from the c-th. */
__global__ void k_split_glu(const float *__restrict__ part, int n_split, size_t plane, int n_ff, int gelu,
                            __half *__restrict__ h) {
    pdl_wait();
    pdl_launch_next();
    const float *row = part + (size_t)blockIdx.x * 2 * n_ff;
    for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < n_ff; i += gridDim.y * blockDim.x) {
        /* written by the GEMM just before: L2, not a stale L1 */
        float g = __ldcg(row + i), u = __ldcg(row + n_ff + i);
#pragma unroll 4
        for (int z = 1; z < n_split; z++) {
            g += __ldcg(row + (size_t)z * plane + i);
            u += __ldcg(row + (size_t)z * plane + n_ff + i);
        }
        h[(size_t)blockIdx.x * n_ff + i] = __float2half_rn((gelu ? gelu_tanh(g) : silu(g)) * u);
    }
}

/* One block per token t: x (T, n) += the n_split shares of (T, n), planes `plane` floats
 * apart, summed in plane order (k_split_sum's sums), then h (T, n) f16 = rmsnorm(x) * w.
 * A batch of 8 tokens has 8 blocks, so what each reads (n x n_split floats) must be in
 * flight at once: n / E threads (norm_split_elems), each with its E elements (thread i
 * holds i + (n / E) k) in registers, the loads of 8 planes together. */
template <int E>
__global__ void __launch_bounds__(1024)
k_split_norm(const float *__restrict__ part, int n_split, size_t plane, int n, float *__restrict__ x,
             const float *__restrict__ w, float eps, __half *__restrict__ h) {
    __shared__ float red[32];
    const int stride = blockDim.x; /* n / E */
    /* the norm's weights, read while the GEMM ends: through L2, as ptxas sinks read-only
     * path loads (ld.global.nc) past the wait (cuobjdump: docs/perf-log.md, fortieth
     * and forty-first sessions) */
    float wv[E];
#pragma unroll
    for (int k = 0; k < E; k++)
        wv[k] = __ldcg(w + threadIdx.x + k * stride);
    pdl_wait();
    pdl_launch_next();
    const float *pr = part + (size_t)blockIdx.x * n + threadIdx.x;
    float *xr = x + (size_t)blockIdx.x * n + threadIdx.x;
    float v[E], ss = 0.0f;
#pragma unroll
    for (int k = 0; k < E; k++)
        v[k] = __ldcg(pr + k * stride); /* written by the GEMM just before: L2, not a stale L1 */
#pragma unroll 8
    for (int z = 1; z < n_split; z++)
#pragma unroll
        for (int k = 0; k < E; k++)
            v[k] += __ldcg(pr + (size_t)z * plane + k * stride);
#pragma unroll
    for (int k = 0; k < E; k++) {
        v[k] += __ldcg(xr + k * stride);
        xr[k * stride] = v[k];
        ss += v[k] * v[k];
    }
    ss = block_sum(ss, red);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
#pragma unroll
    for (int k = 0; k < E; k++)
        h[(size_t)blockIdx.x * n + threadIdx.x + k * stride] = __float2half_rn(v[k] * scale * wv[k]);
}

/* Elements a thread of k_split_norm for rows of n: the fewest of 1, 2, 4, 5, 8 that leave
 * at most 1,024 threads, a whole number of warps; 0 where none does. */
static int norm_split_elems(int64_t n) {
    static const int e[] = {1, 2, 4, 5, 8};
    for (int i = 0; i < 5; i++)
        if (n % e[i] == 0 && n / e[i] <= 1024 && n / e[i] % 32 == 0)
            return e[i];
    return 0;
}

extern "C" int cuda_gemm_epi_norm_fits(int64_t n) { return norm_split_elems(n) > 0; }

/* The tile height for T tokens of a matrix of n_out rows (64 rows a tile, 128 for a few
 * tokens). */
static cudaError_t launch_tiles(const cuda_weight *w, const __half *X, int T, float *y, int64_t ldy, int accumulate,
                                int n_split, cudaStream_t stream) {
    /* 128 tokens per block halve the conversions of each weight, but leave too few
     * blocks for the 132 SMs below ~4096 rows (bench/gemm_bench.cu: 28 vs 33 us for
     * qkv, 31 vs 35 us for wo, 512 tokens); 32 tokens for the batches of a few
     * sequences' decode steps: half the tensor-core work of 64 on rows no token fills */
    if (T > 32)
        return T > 64 && w->n_out >= 4096 ? launch_gemm<128, 64>(w, X, T, y, ldy, accumulate, n_split, stream)
                                          : launch_gemm<64, 64>(w, X, T, y, ldy, accumulate, n_split, stream);
    /* a few tokens: the blocks wait on their weight loads, one stage after another; 128
     * rows a block put twice the bytes in flight of 64 (the sums are the same: each
     * token's row of y is the same chain of products over K whatever the tile). 64 and
     * 256 rows measured no faster (docs/perf-log.md, 2026-12-02 third session) */
    return launch_gemm<32, 128>(w, X, T, y, ldy, accumulate, n_split, stream);
}

/* How the prefill takes the warpgroup GEMM (gemm_wg.cu): cuda_gemm_set_wg's modes; from
 * EDGERUNNER_CUDA_WGMMA (read once; to compare) unless cuda_gemm_set_wg (tests) says. */
static int wg_mode = -1;

extern "C" void cuda_gemm_set_wg(int mode) {
    wg_mode = mode == 0 || mode == 1 || mode == 128 || mode == 256 ? mode : -1;
}

/* Tokens a block of the warpgroup GEMM for w and T tokens, 0 for gemm.cu's tiles */
static int wg_tokens(const cuda_weight *w, int T) {
    if (wg_mode < 0) {
        const char *env = getenv("EDGERUNNER_CUDA_WGMMA");
        cuda_gemm_set_wg(env && *env ? atoi(env) : 1);
        wg_mode = wg_mode < 0 ? 1 : wg_mode;
    }
    if (wg_mode == 128 || wg_mode == 256)
        return cuda_gemm_wg_fits(w, T) ? wg_mode : 0;
    return wg_mode == 1 ? cuda_gemm_wg_tokens(w, T) : 0;
}

extern "C" cudaError_t cuda_gemm(const cuda_weight *w, const uint16_t *x, int n_tokens, float *y, int64_t ldy,
                                 int accumulate, cudaStream_t stream) {
    const __half *X = reinterpret_cast<const __half *>(x);
    /* a stacked matrix of several types (w->next): each part into its columns of y */
    for (int64_t col0 = 0; w; col0 += w->n_out, w = w->next) {
        const int wg = wg_tokens(w, n_tokens);
        const cudaError_t e = wg ? cuda_gemm_wg(w, x, n_tokens, y + col0, ldy, accumulate, wg, stream)
                                 : launch_tiles(w, X, n_tokens, y + col0, ldy, accumulate, 1, stream);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

/* Whether cuda_gemm_batch takes the int8 tensor cores (mmq.cu) for the types that have
 * them: yes, unless EDGERUNNER_CUDA_MMQ=0 (read once) or cuda_gemm_set_mmq (tests,
 * benchmarks) says otherwise. */
static int mmq_mode = -1;

extern "C" void cuda_gemm_set_mmq(int on) { mmq_mode = set_switch(on); }

static int mmq_on(void) { return read_switch(&mmq_mode, "EDGERUNNER_CUDA_MMQ"); }

/* Whether a batch GEMM of w (one part) takes the int8 tensor cores: by its type, never by
 * the batch (a token's numbers may not depend on it). The K types too: random Qwen3 Q4_K_M,
 * bench --parallel B = 8 / 32 / 64 on an H100 (docs/perf-log.md, thirty-sixth session),
 * S_TG 0.6B 6,075 / 13,115 / 18,452 tok/s against the F16 tiles' 4,196 / 12,930 / 18,431,
 * 8B 1,716 / 3,923 / 5,248 against 902 / 3,045 / 4,562. Q6_K's unless
 * EDGERUNNER_CUDA_MMQ_Q6K=0 (read once; for measurements). */
static bool use_int8(const cuda_weight *w) {
    static const int q6k = env_switch("EDGERUNNER_CUDA_MMQ_Q6K", 1);
    return mmq_on() && cuda_wtype_int8_mma(w->type) && (q6k || w->type != CUDA_W_Q6_K);
}

/* Blocks a batch GEMM aims at, per SM of the H200 (132 SMs): 8 for the F16 tiles, where a
 * block's steps wait mostly on their loads; 4 for the int8 tensor cores' ring, which runs
 * 2 to 4 blocks an SM. Each share is a (T, n) plane of floats written and read again: at
 * Qwen3-8B, 8 a SM gave 16 shares to wo and down, and halving that took the four layer
 * GEMMs at 64 tokens from 182.4 to 163.2 us and B = 64 from 6,746 to 7,529 tok/s
 * (docs/perf-log.md). EDGERUNNER_CUDA_SPLIT_BLOCKS overrides both (read once), for
 * measurements. */
enum { SPLIT_TARGET_BLOCKS = 8 * 132, SPLIT_TARGET_BLOCKS_INT8 = 4 * 132, SPLIT_MIN_STEPS = 8 };

static int64_t split_target_blocks(const cuda_weight *w) {
    static int64_t target_env = -1;
    if (target_env < 0) {
        const char *env = getenv("EDGERUNNER_CUDA_SPLIT_BLOCKS");
        const long long v = env ? atoll(env) : 0;
        target_env = v > 0 ? (int64_t)v : 0;
    }
    return target_env ? target_env : use_int8(w) ? SPLIT_TARGET_BLOCKS_INT8 : SPLIT_TARGET_BLOCKS;
}

extern "C" int cuda_gemm_split_count(const cuda_weight *w) {
    int n = 1;
    for (; w; w = w->next) {
        const int64_t target = split_target_blocks(w);
        const int64_t n_steps = (w->n_in + GM_BK - 1) / GM_BK, n_blocks = (w->n_out + 63) / 64;
        int64_t s = (target + n_blocks - 1) / n_blocks;
        s = s < n_steps / SPLIT_MIN_STEPS ? s : n_steps / SPLIT_MIN_STEPS;
        if (s > 1) /* no split without steps: (s - 1) whole shares and the rest */
            s = (n_steps + (n_steps + s - 1) / s - 1) / ((n_steps + s - 1) / s);
        n = s > n ? (int)s : n;
    }
    return n;
}


/* One part of a batch GEMM: int8 tensor cores (mmq.cu) or F16 tiles */
static cudaError_t batch_tiles(const cuda_weight *w, const __half *X, const int8_t *xq, const float *xd,
                               const float *xs, int T, float *y, int64_t ldy, int accumulate, int n_split,
                               cudaStream_t stream) {
    if (use_int8(w))
        return cuda_mmq_tiles(w, reinterpret_cast<const uint16_t *>(X), xq, xd, xs, T, y, ldy, accumulate, n_split,
                              stream);
    return launch_tiles(w, X, T, y, ldy, accumulate, n_split, stream);
}

/* The epilogue of one pass of T tokens from t0: what ep makes of the product's n_split
 * shares of K in part, planes of (T, n) floats. */
static cudaError_t epilogue(const cuda_gemm_epi *ep, const float *part, int n_split, int T, int64_t n, int t0,
                            cudaStream_t stream) {
    const size_t plane = (size_t)T * (size_t)n;
    cudaLaunchAttribute attr;
    if (ep->kind == CUDA_EPI_GLU) {
        const int n_ff = (int)(n / 2), chunks = (n_ff + 1023) / 1024; /* 4 elements a thread */
        const cudaLaunchConfig_t cfg = pdl_config(dim3(T, chunks), dim3(256), 0, stream, &attr);
        return cudaLaunchKernelEx(&cfg, k_split_glu, part, n_split, plane, n_ff, ep->gelu,
                                  reinterpret_cast<__half *>(ep->h) + (size_t)t0 * n_ff);
    }
    if (ep->kind == CUDA_EPI_NORM) {
        const int E = norm_split_elems(n);
        const cudaLaunchConfig_t cfg = pdl_config(dim3(T), dim3((unsigned int)(n / (E ? E : 1))), 0, stream, &attr);
        float *y = ep->y + (size_t)t0 * n;
        __half *h = reinterpret_cast<__half *>(ep->h) + (size_t)t0 * n;
#define CALL(E_)                                                                                             \
    case E_:                                                                                                \
        return cudaLaunchKernelEx(&cfg, k_split_norm<E_>, part, n_split, plane, (int)n, y, ep->norm_w, ep->eps, h)
        switch (E) {
            CALL(1);
            CALL(2);
            CALL(4);
            CALL(5);
            CALL(8);
        default:
            return cudaErrorInvalidValue;
        }
#undef CALL
    }
    const unsigned int blocks = (unsigned int)((plane + 255) / 256 < 1024 ? (plane + 255) / 256 : 1024);
    const cudaLaunchConfig_t cfg = pdl_config(dim3(blocks), dim3(256), 0, stream, &attr);
    return cudaLaunchKernelEx(&cfg, k_split_sum, part, n_split, T, (int)n, ep->y + (size_t)t0 * (size_t)ep->ldy,
                              ep->ldy, ep->accumulate);
}

extern "C" cudaError_t cuda_gemm_batch_epi(const cuda_weight *w, const uint16_t *x, int n_tokens,
                                           const cuda_gemm_epi *ep, const cuda_gemm_scratch *s, cudaStream_t stream) {
    const __half *X = reinterpret_cast<const __half *>(x);
    const int n_split = cuda_gemm_split_count(w);
    const int64_t K = w->n_in; /* alike in every part */
    int64_t n = 0;             /* the product's columns, every part's */
    int8_t *xq = NULL;         /* (n_tokens, K) the input's quants; xd, xs (n_tokens, K / 32) their scales, sums */
    float *xd = NULL, *xs = NULL;
    bool int8 = false;
    for (const cuda_weight *p = w; p; p = p->next) {
        int8 = int8 || use_int8(p);
        n += p->n_out;
    }
    if ((ep->kind == CUDA_EPI_GLU && n % 2 != 0) ||
        (ep->kind == CUDA_EPI_NORM && (ep->ldy != n || !norm_split_elems(n))))
        return cudaErrorInvalidValue;
    if (int8 && cuda_mmq_prequantize(n_tokens) && s->xq && s->xq_bytes >= cuda_gemm_xq_bytes(n_tokens, K)) {
        xq = (int8_t *)s->xq;
        xd = (float *)(xq + (size_t)n_tokens * (size_t)K);
        xs = xd + (size_t)n_tokens * (size_t)(K / 32);
        const cudaError_t e = cuda_quantize_x(x, n_tokens, K, xq, xd, xs, stream);
        if (e != cudaSuccess)
            return e;
    }
    if (ep->kind == CUDA_EPI_STORE && n_split == 1) { /* straight into y, part by part */
        for (int64_t col0 = 0; w; col0 += w->n_out, w = w->next) {
            const cudaError_t e =
                batch_tiles(w, X, xq, xd, xs, n_tokens, ep->y + col0, ep->ldy, ep->accumulate, 1, stream);
            if (e != cudaSuccess)
                return e;
        }
        return cudaSuccess;
    }
    /* every part's shares into its columns of the same planes (T, n), then the epilogue,
     * in passes of as many tokens as part holds (each pass's sums are those of one). An
     * epilogue may write h over x, the GEMM's input (the layers' f16 buffer): where its
     * rows are the wider, the passes go from the last tokens to the first, so that no pass
     * writes over the input of a token still to come */
    const int64_t fit = (int64_t)(s->part_floats / ((size_t)n_split * (size_t)n));
    if (fit < 1)
        return cudaErrorInvalidValue;
    const int64_t h_row = ep->kind == CUDA_EPI_GLU ? n / 2 : n;
    const int n_pass = (int)((n_tokens + fit - 1) / fit), backward = ep->kind != CUDA_EPI_STORE && h_row > K;
    for (int i = 0; i < n_pass; i++) {
        const int t0 = (int)((backward ? n_pass - 1 - i : i) * fit);
        const int T = n_tokens - t0 < fit ? n_tokens - t0 : (int)fit;
        cudaError_t e = cudaSuccess;
        int64_t col0 = 0;
        for (const cuda_weight *p = w; p && e == cudaSuccess; col0 += p->n_out, p = p->next)
            e = batch_tiles(p, X + (size_t)t0 * (size_t)K, xq ? xq + (size_t)t0 * (size_t)K : NULL,
                            xd ? xd + (size_t)t0 * (size_t)(K / 32) : NULL,
                            xs ? xs + (size_t)t0 * (size_t)(K / 32) : NULL, T, s->part + col0, n, 0, n_split, stream);
        if (e == cudaSuccess)
            e = epilogue(ep, s->part, n_split, T, n, t0, stream);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

extern "C" cudaError_t cuda_gemm_batch(const cuda_weight *w, const uint16_t *x, int n_tokens, float *y, int64_t ldy,
                                       int accumulate, const cuda_gemm_scratch *s, cudaStream_t stream) {
    const cuda_gemm_epi ep = {CUDA_EPI_STORE, y, ldy, accumulate, NULL, 0.0f, 0, NULL};
    return cuda_gemm_batch_epi(w, x, n_tokens, &ep, s, stream);
}
