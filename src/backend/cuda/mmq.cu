/*
 * mmq.cu - the batch GEMM of Q8_0, Q4_0 and K-quant (Q4_K, Q5_K, Q6_K) weights on the int8
 * tensor cores (as llama.cpp's MMQ):
 * y (T, ldy) (+)= X (T, K) . W (N, K)^T with X quantized per block of 32 as the CPU's dot
 * quantizes it (d = max |x| / 127, q = round(x / d)), so that a block's product of
 * weight and input quants is an exact integer (mma.m16n8k32.s8, S32 sums) and only its
 * scaling and the F32 sum across blocks round:
 *
 *   y[t][n] = sum over blocks b in order of  (float) isum(b, t, n) * (dw[n][b] * dx[t][b])
 *
 * (fmaf, block by block; the K types: mma_block_k). That makes a token's row of y the
 * same whatever else the batch holds, whatever the tile: the integer does not depend on
 * the order of its 32 products, nor on which lane sums them, and the F32 chain is the
 * same for every token. Why not F16 tiles (gemm.cu) for a batch's few tokens: each
 * weight there is converted to F16 before an mma that serves at most the batch's tokens,
 * and those conversions bound the step (docs/perf-log.md, 2026-12-02); here Q8_0's quants
 * go into the mma as they are (one XOR of their bias a word), the 4-bit planes' after a
 * shift, a mask and at most a subtraction a word (mma_word, wtypes.cuh).
 *
 * Three kernels. k_mmq_ring (below, for K a multiple of 128: every Qwen3 matrix, every K
 * type) streams the weights and inputs through a ring of cp.async stages in shared
 * memory; there a batch of a few tokens takes k_mmq_few (a thread a row, the same
 * integers and sums by dp4a and the CUDA cores). k_mmq (the rest, Q8_0 and Q4_0): a block
 * computes 64 weight rows (16 a warp) x
 * 8 NT tokens, K in chunks of MQ_CB quant blocks: each warp's lanes hold their rows'
 * quants of the chunk in registers (8 contiguous bytes a lane, row and block; the next
 * chunk's load in flight while the mmas run on this one), the block stages its tokens'
 * quantized X of the chunk in shared memory, and the warps run their mmas. A batch of a
 * few tokens quantizes its X inside each block (no extra launch); a larger one quantizes
 * it once beforehand (k_quantize_x), as every block of rows would quantize it again.
 * Both round alike: quant8 is the one arithmetic. The mma's k positions of a lane are
 * 4c..4c+3 and 16+4c..16+4c+3 (c = lane % 4); A and B both put elements 8c..8c+7 of the
 * block there, the same permutation of k on both sides, which leaves the integer as it is.
 */
#include <stdlib.h>

#include "backend/cuda/common.cuh"

#define MQ_THREADS 128
#define MQ_CB 8                    /* quant blocks of K per chunk */
#define MQ_XROW (MQ_CB * 32 + 32)  /* bytes between tokens' rows of staged quants: lane g's 8-byte
                                      reads fall in distinct banks for the 4 g of a half-warp */
/* Batches of up to this many tokens quantize their X inside the GEMM's blocks; larger ones
 * once, beforehand: every block of 64 rows quantizes again what it stages. Measured with
 * k_mmq, before the ring (docs/perf-log.md): up to 32 tokens inside, B = 32 fell from 7,793
 * to 7,426 tok/s at Qwen3-0.6B and from 2,816 to 2,036 at 8B. */
#define MQ_INKERNEL_MAX_T 16
#define MQ_MAGIC 0x4B400000 /* the bits of MQ_MAGIC_F = 1.5 * 2^23 (mma_block) */
#define MQ_MAGIC_F 12582912.0f

template <int NT>
struct mmq_stage {
    int8_t xq[8 * NT][MQ_XROW]; /* (tokens, k of the chunk) the input's quants */
    float xd[MQ_CB][8 * NT];    /* (blocks, tokens) their scales */
};

/* d += a (16 x 32 int8) . b (32 x 8 int8), S32; fragments as mma_16816's (common.cuh)
 * with 4 int8 a register: a0 (g, 4c..), a1 (g + 8, 4c..), a2 (g, 16 + 4c..),
 * a3 (g + 8, 16 + 4c..); b0 (k 4c.., n g), b1 (k 16 + 4c.., n g). */
static __device__ __forceinline__ void mma_s8(int d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* acc (a tile's C fragment: rows g, g + 8 x tokens 2c, 2c + 1) += an mma's integers sum
 * times the scales of their rows (w0, w1) and tokens (dx0, dx1), by fmaf in this order
 * (fma_isum: one integer, as k_mmq_few adds its own).
 * The mma started sum at MQ_MAGIC, so an integer comes out as the float 1.5 * 2^23 + isum
 * (exact for |isum| < 2^22; a block's is at most 32 * 127 * 127): one F32 subtraction
 * gives isum exactly, as (float) isum would, whose conversion runs at a quarter of the
 * FP32 rate and bounded the GEMM at 32-64 tokens. */
static __device__ __forceinline__ float fma_isum(float acc, int sum, float w, float dx) {
    return fmaf(__int_as_float(sum) - MQ_MAGIC_F, w * dx, acc);
}
static __device__ __forceinline__ void fma_isums(float acc[4], const int sum[4], float w0, float w1, float dx0,
                                                 float dx1) {
    acc[0] = fma_isum(acc[0], sum[0], w0, dx0);
    acc[1] = fma_isum(acc[1], sum[1], w0, dx1);
    acc[2] = fma_isum(acc[2], sum[2], w1, dx0);
    acc[3] = fma_isum(acc[3], sum[3], w1, dx1);
}

/* Where lane c's 8 bytes of a quant block (cuda_row_bytes(WT, 32) bytes: Q8_0 32, the 4-bit
 * planes of Q4_0 and the K types 16) start, its elements 8c..8c+7: Q8_0 byte e holds
 * element e; a plane's byte e holds element e in its low nibble and e + 16 in its high
 * one, so elements 8c..8c+7 are the low (c < 2) or high (c >= 2) nibbles of bytes
 * 8 (c & 1)..+7, which lanes c and c ^ 2 both load. */
template <int WT>
static __device__ __forceinline__ int mq_lane_offset(int c) {
    return WT == CUDA_W_Q8_0 ? 8 * c : 8 * (c & 1);
}

/* acc += one quant block's products for the K types (the ring alone: their K is a
 * multiple of 256), as mma_block: rows g and g + 8 (a lane's 8 bytes a0, a1 of each,
 * their chunk scales s0, s1) and the warp's NT tiles of staged tokens. A block of 32 is a
 * chunk of their 4-bit plane: value = d q + m (Q4_K, Q5_K: one sub-block) or d_g (q - 32)
 * (Q6_K: g = the element's group of 16). Q4_K, Q5_K: d dx isum + m xsum, xsum the token's
 * block as quantized summed, dx times the sum of its quants (staged with them: xs, as xd);
 * Q6_K: two mmas, each with the other group's lanes zero (lanes c < 2 hold group 0), d_0
 * dx isum_0 + d_1 dx isum_1. Every term by fmaf in this order. */
template <int WT, int NT>
static __device__ __forceinline__ void mma_block_k(uint2 a0, uint2 a1, const chunk_sc &s0, const chunk_sc &s1,
                                                   const int8_t *xq, int x_row, const float *xd, const float *xs,
                                                   int xd_t, int g, int c, float acc[NT][4]) {
    constexpr bool OFFSET = cuda_wtype_int8_offset(WT);
    static_assert(OFFSET || WT == CUDA_W_Q6_K, "the K types");
    const int i0 = 2 * (c & 1);
    uint32_t af[4] = {mma_word<WT>(a0.x, s0, c, i0), mma_word<WT>(a1.x, s1, c, i0),
                      mma_word<WT>(a0.y, s0, c, i0 + 1), mma_word<WT>(a1.y, s1, c, i0 + 1)};
    uint32_t bf[4] = {}; /* Q6_K: the second mma's A, group 1 */
    if constexpr (!OFFSET) {
        const bool g0 = c < 2;
#pragma unroll
        for (int r = 0; r < 4; r++) {
            bf[r] = g0 ? 0u : af[r];
            af[r] = g0 ? af[r] : 0u;
        }
    }
    /* the scales of the first and second terms, rows g and g + 8 */
    const float ua0 = s0.d[0], ua1 = s1.d[0];
    const float ub0 = OFFSET ? s0.m[0] : s0.d[1], ub1 = OFFSET ? s1.m[0] : s1.d[1];
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const uint2 bx = *reinterpret_cast<const uint2 *>(xq + (8 * j + g) * x_row);
        const int t0 = (8 * j + 2 * c) * xd_t, t1 = (8 * j + 2 * c + 1) * xd_t;
        int sa[4] = {MQ_MAGIC, MQ_MAGIC, MQ_MAGIC, MQ_MAGIC};
        mma_s8(sa, af, bx.x, bx.y);
        const float dx0 = xd[t0], dx1 = xd[t1];
        fma_isums(acc[j], sa, ua0, ua1, dx0, dx1);
        if constexpr (OFFSET) { /* m times the token's block summed as quantized */
            const float xs0 = xs[t0], xs1 = xs[t1];
            acc[j][0] = fmaf(ub0, xs0, acc[j][0]);
            acc[j][1] = fmaf(ub0, xs1, acc[j][1]);
            acc[j][2] = fmaf(ub1, xs0, acc[j][2]);
            acc[j][3] = fmaf(ub1, xs1, acc[j][3]);
        } else {
            int sg[4] = {MQ_MAGIC, MQ_MAGIC, MQ_MAGIC, MQ_MAGIC};
            mma_s8(sg, bf, bx.x, bx.y);
            fma_isums(acc[j], sg, ub0, ub1, dx0, dx1);
        }
    }
}

/* One quarter (8 elements, raw F16) of a block of 32, quantized with the block's scale
 * (quant8_f32, common.cuh): every lane of the warp must call this. */
static __device__ __forceinline__ uint2 quant8(uint4 raw, float *d_out) {
    const __half2 *h = reinterpret_cast<const __half2 *>(&raw);
    float v[8];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __half22float2(h[i]);
        v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
    return quant8_f32(v, d_out);
}

/* A block's sum as quantized (the K offsets' xs): d times the sum of its quants (sum:
 * quant8_sum's, which every lane of the warp must call). The one definition of what
 * k_quantize_x, the ring and k_mmq_few stage; called where it is stored, which keeps the
 * product off the lanes that store nothing (the ring at 8 tokens: 1.3% faster). */
static __device__ __forceinline__ float quant8_xs(int sum, float d) { return (float)sum * d; }

/* xq (n_rows, K) int8, xd and xs (n_rows, K / 32) float: X (n_rows, K) F16 quantized per
 * block of 32, each block's scale d and its sum as quantized (d times the sum of its
 * quants); grid of 256-thread blocks over n_rows K / 8 threads. */
__global__ void k_quantize_x(const __half *X, int64_t n, int8_t *xq, float *xd, float *xs) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; /* 8 elements at 8 i */
    pdl_wait();
    pdl_launch_next();
    /* X is written by the previous kernel, which may still have been running when this
     * one started: L2 loads (__ldcg), never the read-only path */
    const uint4 raw = 8 * i < n ? __ldcg(reinterpret_cast<const uint4 *>(X) + i) : make_uint4(0, 0, 0, 0);
    float d;
    const uint2 q = quant8(raw, &d);
    const int sum = quant8_sum(q);
    if (8 * i < n) {
        reinterpret_cast<uint2 *>(xq)[i] = q;
        if ((i & 3) == 0) {
            xd[i >> 2] = d;
            xs[i >> 2] = quant8_xs(sum, d);
        }
    }
}

/* The chunk's X of this block's tokens, quantized into s: 4 lanes a (token, block), 8
 * elements each. Tokens past T and blocks past kb_end are zeros (their products are never
 * stored, or add 0). */
template <int NT>
static __device__ __forceinline__ void stage_x(const __half *X, int K, int T, int64_t t0, int kb0, int kb_end,
                                               mmq_stage<NT> *s) {
    const int q = threadIdx.x & 3;
#pragma unroll 2
    for (int it = 0; it < 2 * NT; it++) {
        const int pair = it * (MQ_THREADS / 4) + (threadIdx.x >> 2); /* token-major: tt, b */
        const int tt = pair / MQ_CB, b = pair % MQ_CB;
        const int64_t t = t0 + tt;
        const uint4 raw = t < T && kb0 + b < kb_end
                              ? __ldcg(reinterpret_cast<const uint4 *>(X + t * K + (int64_t)(kb0 + b) * 32 + 8 * q))
                              : make_uint4(0, 0, 0, 0);
        float d;
        const uint2 qs = quant8(raw, &d);
        *reinterpret_cast<uint2 *>(&s->xq[tt][b * 32 + 8 * q]) = qs;
        if (q == 0)
            s->xd[b][tt] = d;
    }
}

/* The chunk of this block's tokens from X quantized beforehand (k_quantize_x). */
template <int NT>
static __device__ __forceinline__ void stage_xq(const int8_t *xq, const float *xd, int K, int T, int64_t t0, int kb0,
                                                int kb_end, mmq_stage<NT> *s) {
#pragma unroll 2
    for (int it = 0; it < NT; it++) {
        const int j = it * MQ_THREADS + threadIdx.x, tt = j / (2 * MQ_CB), part = j % (2 * MQ_CB); /* 16 bytes */
        const int64_t t = t0 + tt;
        const uint4 v = t < T && kb0 + part / 2 < kb_end
                            ? __ldcg(reinterpret_cast<const uint4 *>(xq + t * K + (int64_t)kb0 * 32 + 16 * part))
                            : make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4 *>(&s->xq[tt][16 * part]) = v;
    }
    for (int j = threadIdx.x; j < 8 * NT * MQ_CB; j += MQ_THREADS) {
        const int tt = j / MQ_CB, b = j % MQ_CB;
        const int64_t t = t0 + tt;
        s->xd[b][tt] = t < T && kb0 + b < kb_end ? __ldcg(xd + t * (K / 32) + kb0 + b) : 0.0f;
    }
}

/* Row g and g + 8's quants (this lane's 8 bytes a block) and scales of the chunk at kb0
 * (blocks past kb_end: block kb_end - 1 again, loaded and not used). */
template <int WT>
static __device__ __forceinline__ void load_chunk(const uint8_t *const wq[2], const __half *const wd[2], int kb0,
                                                  int kb_end, uint2 a[MQ_CB][2], __half2 ad[MQ_CB]) {
#pragma unroll
    for (int b = 0; b < MQ_CB; b++) {
        const int kb = min(kb0 + b, kb_end - 1);
#pragma unroll
        for (int h = 0; h < 2; h++)
            a[b][h] = __ldg(reinterpret_cast<const uint2 *>(wq[h] + (size_t)kb * cuda_row_bytes(WT, 32)));
        ad[b] = __halves2half2(wd[0][kb], wd[1][kb]);
    }
}

/* What k_mmq reads and writes besides the weights. */
typedef struct mmq_args {
    const __half *X;  /* (T, K) F16, or (PRE) */
    const int8_t *xq; /* (T, K) its quants */
    const float *xd;  /* (T, K / 32) and their scales */
    const float *xs;  /* (T, K / 32) and the blocks' sums as quantized (cuda_wtype_int8_offset) */
    int T;
    float *y;         /* (T, ldy): y[:, :N] (+)= the product, or (n_split > 1) block z's share into
                       * the z-th plane of (T, ldy) floats at y */
    int64_t ldy;
    int accumulate;
    int split_steps;  /* K's blocks per share: n_split = gridDim.z shares */
} mmq_args;

/* acc += one quant block's products, for a warp's rows g and g + 8 (their quants a0, a1:
 * a lane's 8 bytes, as mma_word reads them; their scales dw0, dw1) and its NT tiles of
 * staged tokens (token t's 8 bytes at xq + t x_row, its scale at xd[t xd_t]). The
 * arithmetic both kernels share: a token's numbers come out of it alike whatever its
 * tile or kernel. */
template <int WT, int NT>
static __device__ __forceinline__ void mma_block(uint2 a0, uint2 a1, float dw0, float dw1, const int8_t *xq, int x_row,
                                                 const float *xd, int xd_t, int g, int c, float acc[NT][4]) {
    const chunk_sc none = {}; /* Q8_0 and Q4_0 keep no high bits */
    const int i0 = 2 * (c & 1);
    const uint32_t af[4] = {mma_word<WT>(a0.x, none, c, i0), mma_word<WT>(a1.x, none, c, i0),
                            mma_word<WT>(a0.y, none, c, i0 + 1), mma_word<WT>(a1.y, none, c, i0 + 1)};
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const uint2 bx = *reinterpret_cast<const uint2 *>(xq + (8 * j + g) * x_row);
        int sum[4] = {MQ_MAGIC, MQ_MAGIC, MQ_MAGIC, MQ_MAGIC}; /* (fma_isums) */
        mma_s8(sum, af, bx.x, bx.y);
        fma_isums(acc[j], sum, dw0, dw1, xd[(8 * j + 2 * c) * xd_t], xd[(8 * j + 2 * c + 1) * xd_t]);
    }
}

/* A warp's sums into y (or block z's plane): rows n0 + g and n0 + g + 8, tokens t0 + 8 j +
 * 2 c and + 1 of its tiles j, as the mma's C fragments hold them. */
template <int NT>
static __device__ __forceinline__ void store_tile(const float acc[NT][4], const cuda_weight &w, const mmq_args &p,
                                                  int64_t n0, int64_t t0, int g, int c) {
    float *const Y = p.y + blockIdx.z * (size_t)p.T * (size_t)p.ldy;
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int64_t n = n0 + g + 8 * (i >> 1), t = t0 + 8 * j + 2 * c + (i & 1);
            if (t < p.T && n < w.n_out) {
                float *y = Y + t * p.ldy + n;
                *y = p.accumulate ? *y + acc[j][i] : acc[j][i];
            }
        }
}

/* grid (ceil(N / 64), ceil(T / (8 NT)), n_split), MQ_THREADS threads. X F16 (T, K), or
 * with PRE its quants and scales. Split over K (n_split > 1): block z sums blocks
 * [z split_steps, (z + 1) split_steps) of K into its own plane (as k_gemm; gemm.cu's
 * k_split_sum adds them up). */
/* 3 blocks an SM (168 registers); 4 for a batch of up to 8 tokens (128, small spills), which
 * bring more weight loads in flight: Qwen3-8B, 8 sequences, 905 against 881 tok/s
 * (docs/perf-log.md); larger tiles spill at 4 */
template <int WT, int NT, bool PRE>
__global__ void __launch_bounds__(MQ_THREADS, NT == 1 ? 4 : 3) k_mmq(const cuda_weight w, const mmq_args p) {
    __shared__ __align__(16) mmq_stage<NT> st;
    const int K = (int)w.n_in, n_blocks = K / 32, kb_begin = (int)blockIdx.z * p.split_steps;
    const int kb_end = min(n_blocks, kb_begin + p.split_steps);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int64_t n0 = (int64_t)blockIdx.x * 64 + warp * 16, t0 = (int64_t)blockIdx.y * (8 * NT);
    const int T = p.T;
    /* this lane's two weight rows (rows past N: loaded, never stored) */
    int64_t row[2];
#pragma unroll
    for (int h = 0; h < 2; h++)
        row[h] = n0 + g + 8 * h < w.n_out ? n0 + g + 8 * h : w.n_out - 1;
    const size_t row_bytes = cuda_row_bytes(WT, K);
    const uint8_t *const wq[2] = {(const uint8_t *)w.w + row[0] * row_bytes + mq_lane_offset<WT>(c),
                                  (const uint8_t *)w.w + row[1] * row_bytes + mq_lane_offset<WT>(c)};
    const __half *const wd[2] = {(const __half *)w.d + row[0] * n_blocks, (const __half *)w.d + row[1] * n_blocks};

    float acc[NT][4] = {};
    uint2 a[MQ_CB][2], a_next[MQ_CB][2]; /* a chunk's quants: block b, rows g and g + 8 */
    __half2 ad[MQ_CB], ad_next[MQ_CB];   /* their scales, rows g and g + 8 */
    /* the first chunk's weights (read-only) load while the previous kernel ends */
    if (kb_begin < kb_end)
        load_chunk<WT>(wq, wd, kb_begin, kb_end, a, ad);
    pdl_wait();
    pdl_launch_next();
    for (int kb0 = kb_begin; kb0 < kb_end; kb0 += MQ_CB) {
        if (kb0 + MQ_CB < kb_end) /* the next chunk's weights in flight during this one */
            load_chunk<WT>(wq, wd, kb0 + MQ_CB, kb_end, a_next, ad_next);
        if (kb0 != kb_begin)
            __syncthreads(); /* the previous chunk's mmas have read st */
        if (PRE)
            stage_xq<NT>(p.xq, p.xd, K, T, t0, kb0, kb_end, &st);
        else
            stage_x<NT>(p.X, K, T, t0, kb0, kb_end, &st);
        __syncthreads();
#pragma unroll
        for (int b = 0; b < MQ_CB; b++) {
            if (kb0 + b >= kb_end)
                break;
            const float2 dw = __half22float2(ad[b]);
            mma_block<WT, NT>(a[b][0], a[b][1], dw.x, dw.y, &st.xq[0][b * 32 + 8 * c], MQ_XROW, st.xd[b], 1, g, c,
                              acc);
        }
#pragma unroll
        for (int b = 0; b < MQ_CB; b++) {
            a[b][0] = a_next[b][0], a[b][1] = a_next[b][1];
            ad[b] = ad_next[b];
        }
    }
    store_tile<NT>(acc, w, p, n0, t0, g, c);
}

template <int NT>
static cudaError_t launch_nt(const cuda_weight *w, mmq_args p, int n_split, cudaStream_t stream) {
    const int n_blocks = (int)(w->n_in / 32);
    const dim3 grid((unsigned int)((w->n_out + 63) / 64), (unsigned int)((p.T + 8 * NT - 1) / (8 * NT)),
                    (unsigned int)n_split);
    p.split_steps = (n_blocks + n_split - 1) / n_split;
    if (grid.y > 65535u)
        return cudaErrorInvalidValue;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(grid, dim3(MQ_THREADS), 0, stream, &attr);
#define CALL(WT) \
    return p.xq ? cudaLaunchKernelEx(&cfg, k_mmq<WT, NT, true>, *w, p) : cudaLaunchKernelEx(&cfg, k_mmq<WT, NT, false>, *w, p)
    switch (w->type) { /* the K types take the ring alone (use_ring) */
        CUDA_WT_CASE_(CALL, Q8_0)
        CUDA_WT_CASE_(CALL, Q4_0)
    }
#undef CALL
    return cudaErrorInvalidValue;
}

/* ---- The ring: weights through shared memory ------------------------------------------
 * The kernel above holds a chunk's weights in registers (at most two chunks a warp in
 * flight, 3 blocks an SM by registers: 1.6 TB/s at Qwen3-8B, latency-bound, ncu). This
 * one streams them with cp.async through a ring of S stages of MR_CB quant
 * blocks in shared memory, S - 1 stages in flight while the mmas run on one, the
 * input's stages in the same ring (its F16, quantized when its stage comes up, or its
 * quants). The same products and sums, for the matrices whose K is a whole number of
 * stages (K % 128 == 0); its shares of K are whole stages. Qwen3-8B per layer at 8
 * tokens: 92 us (2.2 TB/s) against k_mmq's 131 (docs/perf-log.md). */
#define MR_CB 4                  /* quant blocks a stage */
#define MR_ROW (MR_CB * 32 + 32) /* bytes between rows of a stage's quants: a half-warp's 8-byte
                                    reads (4 rows x 4 lanes; a 4-bit plane's lanes c and c ^ 2
                                    read the same 8 bytes) fall in distinct banks */

/* Bytes a weight row's K scales take in a stage (ring_issue_w; 0: Q8_0, Q4_0): Q4_K's
 * super-block's first 16 (f16 d and dmin, 12 scale bytes); Q5_K's and the high bits of the
 * stage's 4 blocks (16); Q6_K's high bits of its 4 blocks (32), their signed scales (8), the
 * super-block's f16 d (4 with 2 unused), 4 unused. */
template <int WT>
static constexpr __host__ __device__ int k_head_bytes(void) {
    return WT == CUDA_W_Q4_K ? 16 : WT == CUDA_W_Q5_K ? 32 : WT == CUDA_W_Q6_K ? 48 : 0;
}

/* Where piece `part` of a row's K scales for the stage at block kb0 starts in its super-
 * block's scale bytes (k_head_bytes of them, copied in order): Q4_K, Q5_K 16-byte pieces,
 * the first 16 bytes and Q5_K's high bits of the stage's 4 blocks at 16 + 4 (kb0 % 8);
 * Q6_K 11 words, its high bits at 8 (kb0 % 8), scales at 64 + 2 (kb0 % 8), d at 80. */
template <int WT>
static __device__ __forceinline__ int k_head_at(int kb0, int part) {
    if (WT == CUDA_W_Q6_K)
        return part < 8 ? 8 * (kb0 & 7) + 4 * part : part < 10 ? 64 + 2 * (kb0 & 7) + 4 * (part - 8) : 80;
    return part ? 16 + 4 * (kb0 & 7) : 0;
}

/* k_head_at's pieces of a Q6_K stage, a word each: 8 of high bits, 2 of scales, d */
#define K6_STAGE_WORDS 11

/* Where the scale bytes of the super-block holding block kb0 of row `row` start in w.d
 * (rows of K / 256 super-blocks' scale bytes). */
template <int WT>
static __device__ __forceinline__ const uint8_t *k_super_src(const cuda_weight &w, int64_t row, int kb0) {
    constexpr int SB = cuda_wtype_scale_bytes(WT);
    const int64_t k_row_bytes = (int64_t)((int)w.n_in / 256 * SB);
    return (const uint8_t *)w.d + (kb0 >> 3) * SB + row * k_row_bytes;
}

/* Where piece `part` (k_head_at) of row `row`'s K scales for the stage at block kb0 is in
 * w.d. */
template <int WT>
static __device__ __forceinline__ const uint8_t *k_head_src(const cuda_weight &w, int64_t row, int kb0, int part) {
    return k_super_src<WT>(w, row, kb0) + k_head_at<WT>(kb0, part);
}

/* Block b's scales of the stage at kb from its row's staged K scales at k (k_head_at's
 * layout; WHOLE: Q6_K's super-block's scale bytes as they lie in w.d, k_mmq_few's), as
 * chunk_scale decodes them from the row's: Q6_K its two groups' scales, Q4_K and Q5_K the
 * sub-block's scale and offset. (chunk_scale itself on the WHOLE bytes compiled to other
 * code, 0.4% slower: docs/perf-log.md, thirty-ninth session.) */
template <int WT, bool WHOLE = false>
static __device__ __forceinline__ float2 head_dec(const uint8_t *k, int kb, int b) {
    if constexpr (WT == CUDA_W_Q6_K && WHOLE)
        return q6k_scales(__half2float(*reinterpret_cast<const __half *>(k + 80)),
                          reinterpret_cast<const uint16_t *>(k + 64)[(kb + b) & 7]);
    else if constexpr (WT == CUDA_W_Q6_K)
        return q6k_scales(__half2float(*reinterpret_cast<const __half *>(k + 40)),
                          reinterpret_cast<const uint16_t *>(k + 32)[b]);
    else
        return k_scale_min(*reinterpret_cast<const uint4 *>(k), (kb + b) & 7);
}

/* Block b's chunk_sc: its decoded scales dec (head_dec) and high bits from the staged k. */
template <int WT>
static __device__ __forceinline__ chunk_sc head_scale(const uint8_t *k, float2 dec, int b) {
    chunk_sc s = {};
    if (WT == CUDA_W_Q6_K) {
        s.d[0] = dec.x, s.d[1] = dec.y;
        s.h[0] = reinterpret_cast<const uint32_t *>(k)[2 * b];
        s.h[1] = reinterpret_cast<const uint32_t *>(k)[2 * b + 1];
    } else {
        s.d[0] = dec.x, s.m[0] = dec.y;
        if (WT == CUDA_W_Q5_K)
            s.h[0] = reinterpret_cast<const uint32_t *>(k + 16)[b];
    }
    return s;
}

/* Bytes of one stage, and where its parts start: weights' quants (64, MR_ROW), their
 * scales (64, MR_CB) halves (Q8_0, Q4_0) or K scales (64, KH), then the input: with PRE
 * its quants (8 NT, MR_ROW), scales (8 NT, MR_CB) floats and, for Q4_K and Q5_K (XS), its
 * sums (8 NT, MR_CB) floats, else its F16 (8 NT, 32 MR_CB). S stages, then, without PRE,
 * one buffer of the current stage's quantized input (quants, scales, sums), and with KH the
 * stage's weight scales and offsets (Q6_K: its two scales), decoded from their K scales
 * (64, MR_CB) float2. */
template <int WT, int NT, bool PRE, int S>
struct ring_layout {
    static constexpr int KH = k_head_bytes<WT>();
    static constexpr bool XS = cuda_wtype_int8_offset(WT);
    static constexpr int w_q = 0, w_d = 64 * MR_ROW, k_head = w_d + 64 * MR_CB * 2, x = k_head + 64 * KH;
    static constexpr int x_d = x + 8 * NT * MR_ROW, x_s = x_d + 8 * NT * MR_CB * 4;
    static constexpr int stage = PRE ? x_s + (XS ? 8 * NT * MR_CB * 4 : 0) : x + 8 * NT * 32 * MR_CB * 2;
    static constexpr int qbuf = S * stage, q_d = qbuf + 8 * NT * MR_ROW, q_s = q_d + 8 * NT * MR_CB * 4;
    static constexpr int k_dec = PRE ? qbuf : q_s + (XS ? 8 * NT * MR_CB * 4 : 0);
    static constexpr int bytes = k_dec + (KH ? 64 * MR_CB * 8 : 0);
    /* blocks an SM by shared memory (228 KB, 1 KB of it reserved a block), at most 4
     * (ring_min_blocks) */
    static constexpr int blocks_per_sm = 228 * 1024 / (bytes + 1024) < 4 ? 228 * 1024 / (bytes + 1024) : 4;
};

/* Stage kb0 .. kb0 + MR_CB - 1 of the weights (read-only: may be issued before pdl_wait). */
template <int WT, int THREADS>
static __device__ __forceinline__ void ring_issue_w(const cuda_weight &w, int64_t n_tile, int kb0, uint8_t *st) {
    const int K = (int)w.n_in, n_blocks = K / 32;
    const size_t row_bytes = cuda_row_bytes(WT, K);
    /* quants: 64 rows x MR_CB blocks (Q8_0 128 bytes, 8 chunks of 16 a row; Q4_0 and the
     * K types 64, 4 chunks, the rest of the row's MR_ROW unused): 64 PARTS / THREADS
     * chunks a thread */
    constexpr int BB = (int)cuda_row_bytes(WT, 32), LOG_PARTS = BB == 32 ? 3 : 2, PARTS = 1 << LOG_PARTS;
    static_assert(PARTS * 16 == MR_CB * BB && 64 * PARTS % THREADS == 0, "whole chunks of a stage a thread");
#pragma unroll
    for (int i = 0; i < 64 * PARTS / THREADS; i++) {
        const int j = i * THREADS + threadIdx.x, r = j >> LOG_PARTS, part = j & (PARTS - 1);
        const int64_t row = n_tile + r < w.n_out ? n_tile + r : w.n_out - 1;
        const uint8_t *src = (const uint8_t *)w.w + row * row_bytes + (size_t)kb0 * BB + 16 * part;
        cp_async16(st + r * MR_ROW + 16 * part, src, 16);
    }
    /* scales (Q8_0, Q4_0; Q6_K reads its own where used): 64 rows x 4 halves, 4 bytes a
     * thread of the first 128 */
    if (cuda_wtype_int8_one_scale(WT) && (THREADS == 128 || threadIdx.x < 128)) {
        const int r = threadIdx.x >> 1, part = threadIdx.x & 1;
        const int64_t row = n_tile + r < w.n_out ? n_tile + r : w.n_out - 1;
        cp_async4(st + ring_layout<WT, 1, true, 1>::w_d + r * MR_CB * 2 + 4 * part,
                  (const __half *)w.d + row * n_blocks + kb0 + 2 * part);
    }
    /* the K types' scales of the stage (k_head_at; a stage is half a super-block, kb0 % 8
     * is 0 or 4): Q4_K, Q5_K a 16-byte copy a thread, Q6_K (super-blocks of 84 bytes, 4-byte
     * aligned) 11 words a row */
    constexpr int KH = k_head_bytes<WT>();
    uint8_t *k_dst = st + ring_layout<WT, 1, true, 1>::k_head;
    if (WT == CUDA_W_Q4_K || WT == CUDA_W_Q5_K) {
        if (threadIdx.x < 64 * KH / 16) {
            const int r = threadIdx.x / (KH / 16), part = threadIdx.x % (KH / 16);
            const int64_t row = n_tile + r < w.n_out ? n_tile + r : w.n_out - 1;
            cp_async16(k_dst + r * KH + 16 * part, k_head_src<WT>(w, row, kb0, part), 16);
        }
    } else if (WT == CUDA_W_Q6_K) {
        for (int e = threadIdx.x; e < 64 * K6_STAGE_WORDS; e += THREADS) {
            const int r = e / K6_STAGE_WORDS, word = e % K6_STAGE_WORDS;
            const int64_t row = n_tile + r < w.n_out ? n_tile + r : w.n_out - 1;
            cp_async4(k_dst + r * KH + 4 * word, k_head_src<WT>(w, row, kb0, word));
        }
    }
}

/* The input's stage (written by earlier kernels: after pdl_wait, through L2 only). Rows
 * past T copy nothing (zeros). */
template <int WT, int NT, bool PRE, int S, int THREADS>
static __device__ __forceinline__ void ring_issue_x(const mmq_args &p, int K, int64_t t0, int kb0, uint8_t *st) {
    typedef ring_layout<WT, NT, PRE, S> L;
    if (PRE) { /* quants: 8 NT rows x 128 bytes, 8 chunks of 16 a row; scales (and sums): 16
                * bytes a row */
#pragma unroll
        for (int i = 0; i < (64 * NT + THREADS - 1) / THREADS; i++) {
            const int j = i * THREADS + threadIdx.x, r = j >> 3, part = j & 7;
            const int64_t t = t0 + r < p.T ? t0 + r : p.T - 1;
            if (64 * NT % THREADS == 0 || j < 64 * NT)
                cp_async16(st + L::x + r * MR_ROW + 16 * part, p.xq + t * K + (int64_t)kb0 * 32 + 16 * part,
                           t0 + r < p.T ? 16 : 0);
        }
        static_assert(16 * NT <= THREADS, "a thread a row of scales or sums");
        if (threadIdx.x < (L::XS ? 16 : 8) * NT) {
            const bool sums = threadIdx.x >= 8 * NT;
            const int r = sums ? threadIdx.x - 8 * NT : threadIdx.x;
            const int64_t t = t0 + r < p.T ? t0 + r : p.T - 1;
            cp_async16(st + (sums ? L::x_s : L::x_d) + r * MR_CB * 4, (sums ? p.xs : p.xd) + t * (K / 32) + kb0,
                       t0 + r < p.T ? 16 : 0);
        }
    } else { /* F16: 8 NT rows x 256 bytes */
        for (int j = threadIdx.x; j < 8 * NT * 16; j += THREADS) {
            const int r = j >> 4, part = j & 15;
            const int64_t t = t0 + r < p.T ? t0 + r : p.T - 1;
            cp_async16(st + L::x + r * 256 + 16 * part, p.X + t * K + (int64_t)kb0 * 32 + 8 * part,
                       t0 + r < p.T ? 16 : 0);
        }
    }
}

/* grid and shares as k_mmq's (shares of whole stages), TW MQ_THREADS threads, dynamic
 * shared memory ring_bytes<WT, NT, PRE, S>(). With TW = 2 (PRE only) two warps share
 * each 16 rows, one on each half of the tokens: the same products, twice the warps. */
template <int WT, int NT, bool PRE, int S>
static constexpr int ring_bytes(void) {
    return ring_layout<WT, NT, PRE, S>::bytes;
}
/* the blocks an SM that the kernel's registers leave room for: with 3 stages all that
 * shared memory allows; so too the K types' two warps a 16 rows, which took 134-150
 * registers without it (one block of 256 threads an SM; Q8_0's and Q4_0's 104-106). The
 * K types' one warp a 16 rows with 4 tiles of tokens or more, at most 3: at 4 Q4_K's took
 * 128 registers and spilled 96 bytes (Qwen3-8B's four layer GEMMs at 32 tokens 212.9 us
 * against 169.3 with the scales read where used, H100; docs/perf-log.md) */
template <int WT, int NT, bool PRE, int S, int TW>
static constexpr int ring_min_blocks(void) {
    constexpr int by_smem = ring_layout<WT, NT, PRE, S>::blocks_per_sm;
    constexpr bool k_type = !cuda_wtype_int8_one_scale(WT);
    return S == 3 || (TW == 2 && k_type) ? (k_type && TW == 1 && NT >= 4 && by_smem > 3 ? 3 : by_smem) : 0;
}
template <int WT, int NT, bool PRE, int S, int TW>
__global__ void __launch_bounds__(TW *MQ_THREADS, (ring_min_blocks<WT, NT, PRE, S, TW>()))
    k_mmq_ring(const cuda_weight w, const mmq_args p) {
    typedef ring_layout<WT, NT, PRE, S> L;
    constexpr int KH = L::KH;
    constexpr int THREADS = TW * MQ_THREADS, NTW = NT / TW; /* a warp's tiles of 8 tokens */
    static_assert(TW == 1 || (PRE && NT % TW == 0), "token halves need the input quantized beforehand");
    extern __shared__ __align__(16) uint8_t ring[];
    const int K = (int)w.n_in, n_blocks = K / 32, kb_begin = (int)blockIdx.z * p.split_steps;
    const int kb_end = min(n_blocks, kb_begin + p.split_steps);
    const int n_stages = kb_end > kb_begin ? (kb_end - kb_begin) / MR_CB : 0;
    /* this warp's rows: 16 warp .. + 15 of the tile; its tokens: tiles tw NTW .. + NTW - 1 */
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3, tw = threadIdx.x >> 7;
    const int g = lane >> 2, c = lane & 3;
    const int64_t n_tile = (int64_t)blockIdx.x * 64, t0 = (int64_t)blockIdx.y * (8 * NT);

    /* the first stages' weights load while the previous kernel ends; their input after it */
#pragma unroll
    for (int s = 0; s < S - 1; s++)
        if (s < n_stages)
            ring_issue_w<WT, THREADS>(w, n_tile, kb_begin + s * MR_CB, ring + s * L::stage);
    pdl_wait();
    pdl_launch_next();
#pragma unroll
    for (int s = 0; s < S - 1; s++) {
        if (s < n_stages)
            ring_issue_x<WT, NT, PRE, S, THREADS>(p, K, t0, kb_begin + s * MR_CB, ring + s * L::stage);
        cp_async_commit(); /* group s (group 0 also holds the weights issued above) */
    }

    float acc[NTW][4] = {};
    for (int i = 0; i < n_stages; i++) {
        cp_async_wait<S - 2>(); /* this thread's copies of stage i */
        __syncthreads();                /* everyone's; and stage i - 1's slot is free */
        const int next = i + S - 1;
        if (next < n_stages) {
            uint8_t *slot = ring + (next % S) * L::stage;
            ring_issue_w<WT, THREADS>(w, n_tile, kb_begin + next * MR_CB, slot);
            ring_issue_x<WT, NT, PRE, S, THREADS>(p, K, t0, kb_begin + next * MR_CB, slot);
        }
        cp_async_commit();
        const uint8_t *st = ring + (i % S) * L::stage;
        const int8_t *xq = (const int8_t *)(st + L::x) + tw * 8 * NTW * MR_ROW;
        const float *xd = (const float *)(st + L::x_d) + tw * 8 * NTW * MR_CB;
        const float *xs = (const float *)(st + L::x_s) + tw * 8 * NTW * MR_CB; /* (KH) */
        const int kb = kb_begin + i * MR_CB;
        if (!PRE) { /* the stage's F16 input quantized into qbuf: 4 lanes a (token, block) */
            int8_t *qq = (int8_t *)(ring + L::qbuf);
            float *qd = (float *)(ring + L::q_d), *qsum = (float *)(ring + L::q_s);
            const int q = threadIdx.x & 3;
#pragma unroll
            for (int it = 0; it < NT; it++) {
                const int pair = it * (MQ_THREADS / 4) + (threadIdx.x >> 2), tt = pair / MR_CB, b = pair % MR_CB;
                float d;
                const uint2 qs = quant8(*reinterpret_cast<const uint4 *>(st + L::x + tt * 256 + b * 64 + 16 * q), &d);
                *reinterpret_cast<uint2 *>(qq + tt * MR_ROW + b * 32 + 8 * q) = qs;
                const int sum = L::XS ? quant8_sum(qs) : 0;
                if (q == 0) {
                    qd[tt * MR_CB + b] = d;
                    if (L::XS)
                        qsum[tt * MR_CB + b] = quant8_xs(sum, d);
                }
            }
            xq = qq;
            xd = qd;
            xs = qsum;
        }
        if constexpr (KH > 0) { /* the stage's weight scales and offsets, a (row, block) a thread */
            float2 *dec = reinterpret_cast<float2 *>(ring + L::k_dec);
            for (int e = threadIdx.x; e < 64 * MR_CB; e += THREADS) {
                dec[e] = head_dec<WT>(st + L::k_head + e / MR_CB * KH, kb, e % MR_CB);
            }
        }
        if (!PRE || KH > 0)
            __syncthreads();
        const uint8_t *wq = st + (warp * 16 + g) * MR_ROW + mq_lane_offset<WT>(c);
        const __half *wd = (const __half *)(st + L::w_d) + (warp * 16 + g) * MR_CB;
        constexpr int bb = (int)cuda_row_bytes(WT, 32);
#pragma unroll
        for (int b = 0; b < MR_CB; b++) {
            const uint2 a0 = *reinterpret_cast<const uint2 *>(wq + b * bb);
            const uint2 a1 = *reinterpret_cast<const uint2 *>(wq + 8 * MR_ROW + b * bb);
            if constexpr (cuda_wtype_int8_one_scale(WT)) {
                mma_block<WT, NTW>(a0, a1, __half2float(wd[b]), __half2float(wd[8 * MR_CB + b]), xq + b * 32 + 8 * c,
                                   MR_ROW, xd + b, MR_CB, g, c, acc);
            } else { /* rows g and g + 8: their scales decoded above, their high bits */
                chunk_sc s[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = warp * 16 + g + 8 * h;
                    s[h] = head_scale<WT>(st + L::k_head + r * KH,
                                          reinterpret_cast<const float2 *>(ring + L::k_dec)[r * MR_CB + b], b);
                }
                mma_block_k<WT, NTW>(a0, a1, s[0], s[1], xq + b * 32 + 8 * c, MR_ROW, xd + b, xs + b, MR_CB, g, c,
                                     acc);
            }
        }
    }
    cp_async_wait_all();
    store_tile<NTW>(acc, w, p, n_tile + warp * 16, t0 + tw * 8 * NTW, g, c);
}

template <int NT, bool PRE, int S, int TW>
static cudaError_t launch_ring_nt(const cuda_weight *w, const mmq_args &p, const dim3 grid, cudaStream_t stream) {
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = pdl_config(grid, dim3(TW * MQ_THREADS), 0, stream, &attr); /* its bytes by the type */
#define CALL(WT)                                                                    \
    {                                                                               \
        constexpr int smem = ring_bytes<WT, NT, PRE, S>();                          \
        cfg.dynamicSmemBytes = smem;                                                \
        static bool allowed = false; /* once per kernel, before its first launch */ \
        if (!allowed) {                                                             \
            const cudaError_t e = allow_smem(k_mmq_ring<WT, NT, PRE, S, TW>, smem); \
            if (e != cudaSuccess)                                                   \
                return e;                                                           \
            allowed = true;                                                         \
        }                                                                           \
        return cudaLaunchKernelEx(&cfg, k_mmq_ring<WT, NT, PRE, S, TW>, *w, p);     \
    }
    CUDA_WTYPE_SWITCH_INT8(w->type, CALL);
#undef CALL
    return cudaErrorInvalidValue;
}

/* The ring's shape by the batch's tiles: 3 stages up to 32 tokens a block (4 KB to 49 KB a
 * block: 4 blocks an SM), and for 64, 4 stages with two warps a 16 rows (88 KB: 2 blocks
 * of 8 warps). Qwen3-8B's four layer GEMMs (bench/gpu_matvec_bench.c, H200, one run;
 * docs/perf-log.md): 8 tokens 85.5 us against 4 stages' 91.9, 32 tokens 115.0 against
 * 122.5, 64 tokens 185.2 against 202.7 (3 stages of one warp: 200.0). For measurements
 * EDGERUNNER_CUDA_MMQ_STAGES (3 or 4) and EDGERUNNER_CUDA_MMQ_TW (1 or 2) override them
 * (read once). */
static int ring_env(const char *name) {
    const char *env = getenv(name);
    return env && *env ? atoi(env) : 0;
}

template <int NT, bool PRE, int S>
static cudaError_t launch_ring_s(const cuda_weight *w, const mmq_args &p, const dim3 grid, cudaStream_t stream) {
    constexpr int TW_MAX = PRE && NT >= 4 ? 2 : 1; /* token halves need 4 tiles and quants beforehand */
    static const int tw_env = ring_env("EDGERUNNER_CUDA_MMQ_TW");
    const int tw = tw_env ? tw_env : NT == 8 ? 2 : 1;
    if (TW_MAX == 2 && tw == 2)
        return launch_ring_nt<NT, PRE, S, TW_MAX>(w, p, grid, stream);
    return launch_ring_nt<NT, PRE, S, 1>(w, p, grid, stream);
}

/* K's blocks a share in the ring (and k_mmq_few, whose sums must be the ring's): whole
 * stages */
static int ring_split_steps(const cuda_weight *w, int n_split) {
    const int n_stages = (int)(w->n_in / (32 * MR_CB));
    return (n_stages + n_split - 1) / n_split * MR_CB;
}

template <int NT>
static cudaError_t launch_ring(const cuda_weight *w, mmq_args p, int n_split, cudaStream_t stream) {
    static const int stages_env = ring_env("EDGERUNNER_CUDA_MMQ_STAGES");
    const int stages = stages_env ? stages_env : NT == 8 ? 4 : 3;
    const dim3 grid((unsigned int)((w->n_out + 63) / 64), (unsigned int)((p.T + 8 * NT - 1) / (8 * NT)),
                    (unsigned int)n_split);
    p.split_steps = ring_split_steps(w, n_split);
    if (grid.y > 65535u)
        return cudaErrorInvalidValue;
    if (stages == 3)
        return p.xq ? launch_ring_s<NT, true, 3>(w, p, grid, stream) : launch_ring_s<NT, false, 3>(w, p, grid, stream);
    return p.xq ? launch_ring_s<NT, true, 4>(w, p, grid, stream) : launch_ring_s<NT, false, 4>(w, p, grid, stream);
}

/* ---- A few tokens: a thread a row -----------------------------------------------------
 * At a few tokens a batch GEMM streams its weights once for all of them, as a decode
 * matvec does, and the ring's tiles of 64 rows wait on their stages: Qwen3-8B's four layer
 * GEMMs of Q4_K at one token took 95.7 us against the decode matvecs' 50.2 for the same
 * bytes (H100, docs/perf-log.md, thirty-sixth session). Here each thread takes one row of
 * one share of K and walks its blocks in order, every token's sum in a register: each
 * warp streams its 32 rows' stages (few_cb blocks, and their scales) through a ring of its
 * own in shared memory, all stages but one in flight, waited for by the warp alone; every
 * token's input is quantized into shared memory MF_XCB blocks at a time (quant8, as the
 * ring quantizes it). A block's integer is the ring's (the same codes, mma_word's less
 * the lane permutation, summed by dp4a: exact either way) and so is its scaling, term
 * for term (fma_isums, mma_block_k), over the ring's shares: a token's row of y is the
 * same bits whichever kernel runs its batch. For K a multiple of 128 (the ring's) and
 * batches of up to 4 tokens (few_pays). */
#define MF_WARPS 4
#define MF_XCB 64  /* blocks of the input quantized at a time */
#define MF_MAX_T 4 /* batches of up to this many tokens (launch_few's instances) */

/* Quant blocks of a stage of w's rows for NT tokens: 8 (Q4_0, Q4_K 128 contiguous bytes
 * of a row, Q5_K 160, Q6_K 192 with its super-block's scales whole), but Q8_0's 4 (already
 * 128 bytes) and Q6_K's 4 at 3-4 tokens (the ring's staged scales, k_head_at). A stage
 * never crosses a multiple of its size in K (a super-block's scales serve it whole). */
template <int WT, int NT>
static constexpr __host__ __device__ int few_cb(void) {
    return WT == CUDA_W_Q8_0 || (WT == CUDA_W_Q6_K && NT > 2) ? MR_CB : 8;
}

/* Stages of a warp's ring. Fewer take less shared memory, so more warps share a
 * multiprocessor, which pays more than stages in flight where a block's dot products are
 * light. Qwen3-8B's four layer GEMMs at one token (us, H100, docs/perf-log.md, thirty-
 * eighth session), blocks x stages: Q4_K 4 x 4 63.9, 8 x 3 55.9, 8 x 2 52.7; Q4_0 69.9,
 * 60.5, 56.6; Q8_0 4 x 4 91.6, 4 x 3 88.8, 4 x 2 89.7 (at two tokens 101.6, 93.9, 100.1);
 * Q5_K 4 x 4 78.4, 8 x 3 69.9, 8 x 2 64.5; Q6_K (thirty-ninth) 4 x 4 104.5, 8 x 3 97.9,
 * 8 x 2 85.4, at two tokens 112.9, 107.4, 94.0, but at four 132.0, 128.3, 123.1 with
 * gate|up alone 55.8, 59.7, 58.1: 4 x 4 there. */
template <int WT, int NT>
static constexpr __host__ __device__ int few_stages(void) {
    return WT == CUDA_W_Q8_0 ? 3 : WT == CUDA_W_Q6_K && NT > 2 ? 4 : 2;
}

/* Bytes of a warp's stage, and where its parts start: its 32 rows' quants (CB blocks, then
 * 16 bytes of padding, so that 8 lanes' 16-byte reads of their own rows fall in distinct
 * banks), their scales (Q8_0, Q4_0: CB halves a row) or K scales (k_head_at, k_head_bytes
 * a row). After MF_WARPS rings of S stages, the input: quants (NT, MF_XCB x 32) int8,
 * scales and sums as quantized (NT, MF_XCB) floats. */
template <int WT, int NT>
struct few_layout {
    static constexpr int CB = few_cb<WT, NT>(), S = few_stages<WT, NT>();
    static_assert(CB % MR_CB == 0 && MF_XCB % CB == 0 && S >= 2, "whole shares' blocks; stages within the input");
    static constexpr int BB = (int)cuda_row_bytes(WT, 32), ROW = CB * BB + 16;
    static constexpr int HEAD = cuda_wtype_int8_one_scale(WT)  ? 2 * CB
                                : WT == CUDA_W_Q5_K             ? 16 + 4 * CB
                                : WT == CUDA_W_Q6_K && CB == 8 ? cuda_wtype_scale_bytes(WT) /* whole */
                                                                : k_head_bytes<WT>();
    static constexpr int head = 32 * ROW, stage = head + 32 * HEAD, ring = S * stage;
    static constexpr int x = MF_WARPS * ring, x_d = x + NT * MF_XCB * 32, x_s = x_d + NT * MF_XCB * 4;
    static constexpr int bytes = x_s + NT * MF_XCB * 4;
};

/* A warp's stage of nb blocks from kb0 of its rows row0 .. row0 + 31 (read-only: may be
 * issued before pdl_wait): a row's quants coalesced across the warp, its scales a lane a
 * row (Q8_0: 4 halves) or spread over the lanes. Rows past N copy the last row (computed,
 * never stored). */
template <int WT, int NT>
static __device__ __forceinline__ void few_issue(const cuda_weight &w, int64_t row0, int kb0, int nb, uint8_t *st,
                                                 int lane) {
    typedef few_layout<WT, NT> L;
    const int K = (int)w.n_in;
    const size_t row_bytes = cuda_row_bytes(WT, K);
    constexpr int PARTS = L::CB * L::BB / 16; /* 16-byte pieces of a row's stage */
#pragma unroll
    for (int i = 0; i < PARTS; i++) {
        const int j = i * 32 + lane, r = j / PARTS, part = j % PARTS;
        const int64_t row = row0 + r < w.n_out ? row0 + r : w.n_out - 1;
        const uint8_t *src = (const uint8_t *)w.w + row * row_bytes + (size_t)kb0 * L::BB + 16 * part;
        if (L::CB == MR_CB || part < nb * L::BB / 16) /* a share's first or last stage may hold fewer */
            cp_async16(st + r * L::ROW + 16 * part, src, 16);
    }
    const int64_t row = row0 + lane < w.n_out ? row0 + lane : w.n_out - 1;
    uint8_t *h = st + L::head + lane * L::HEAD;
    /* the stage's scales as words of 4 bytes, 32 rows x WORDS, a few rows an instruction:
     * Q8_0's and Q4_0's halves in pairs, Q6_K's super-block scale bytes whole (stages of 8
     * blocks) or the stage's 11 words (k_head_src) */
    constexpr bool ONE = cuda_wtype_int8_one_scale(WT);
    constexpr bool WORDWISE = (ONE && L::CB != MR_CB) || WT == CUDA_W_Q6_K;
    constexpr int WORDS = ONE ? L::CB / 2 : WT == CUDA_W_Q6_K && L::CB == 8 ? L::HEAD / 4 : K6_STAGE_WORDS;
    if constexpr (WORDWISE) {
#pragma unroll
        for (int i = 0; i < WORDS; i++) {
            const int f = i * 32 + lane, r = f / WORDS, word = f % WORDS;
            const int64_t rr = row0 + r < w.n_out ? row0 + r : w.n_out - 1;
            const void *src = ONE          ? (const void *)((const __half *)w.d + rr * (K / 32) + kb0 + 2 * word)
                              : L::CB == 8 ? (const void *)(k_super_src<WT>(w, rr, kb0) + 4 * word)
                                           : (const void *)k_head_src<WT>(w, rr, kb0, word);
            if (!ONE || 2 * word < nb)
                cp_async4(st + L::head + r * L::HEAD + 4 * word, src);
        }
    } else if constexpr (ONE) {
        const __half *d = (const __half *)w.d + row * (K / 32) + kb0;
        cp_async4(h, d);
        cp_async4(h + 4, d + 2);
    } else { /* Q4_K's 16 bytes; Q5_K's and the high bits of the stage's blocks, 4 a piece */
#pragma unroll
        for (int part = 0; part < L::HEAD / 16; part++)
            if (part == 0 || 4 * (part - 1) < nb)
                cp_async16(h + 16 * part, k_head_src<WT>(w, row, kb0, part > 0) + 16 * max(part - 1, 0), 16);
    }
}

/* Every token's input, blocks kc .. kc + MF_XCB - 1 (those past kb_end and tokens past T:
 * zeros), quantized into the layout's x: 4 lanes a (token, block), as the ring's stages. */
template <int WT, int NT>
static __device__ __forceinline__ void few_stage_x(const mmq_args &p, int K, int kc, int kb_end, uint8_t *smem) {
    typedef few_layout<WT, NT> L;
    const int q = threadIdx.x & 3;
#pragma unroll 2
    for (int it = 0; it < NT * MF_XCB * 4 / (32 * MF_WARPS); it++) {
        const int pair = it * (32 * MF_WARPS / 4) + (threadIdx.x >> 2), t = pair / MF_XCB, b = pair % MF_XCB;
        const uint4 raw =
            t < p.T && kc + b < kb_end
                ? __ldcg(reinterpret_cast<const uint4 *>(p.X + (int64_t)t * K + (int64_t)(kc + b) * 32 + 8 * q))
                : make_uint4(0, 0, 0, 0);
        float d;
        const uint2 qs = quant8(raw, &d);
        const int sum = cuda_wtype_int8_offset(WT) ? quant8_sum(qs) : 0;
        *reinterpret_cast<uint2 *>(smem + L::x + t * MF_XCB * 32 + b * 32 + 8 * q) = qs;
        if (q == 0) {
            reinterpret_cast<float *>(smem + L::x_d)[t * MF_XCB + b] = d;
            if (cuda_wtype_int8_offset(WT))
                reinterpret_cast<float *>(smem + L::x_s)[t * MF_XCB + b] = quant8_xs(sum, d);
        }
    }
}

/* acc[t] += one block's products for a row (its quants at wq, its scales: dw, or s for the
 * K types) and every token (staged input: quants at xq + t MF_XCB 32, scale xd[t MF_XCB],
 * sum xs[t MF_XCB]): the ring's terms in the ring's order. */
template <int WT, int NT>
static __device__ __forceinline__ void few_block(const uint8_t *wq, float dw, const chunk_sc &s, const int8_t *xq,
                                                 const float *xd, const float *xs, float acc[NT]) {
    /* codes (signed int8, 4 a word) of elements 4i.. (c[i]) and, for the 4-bit planes,
     * 16 + 4i.. (c[4 + i]), against the input's words i and 4 + i */
    uint32_t c[8];
    if constexpr (WT == CUDA_W_Q8_0) {
        const uint4 a = *reinterpret_cast<const uint4 *>(wq), b = *reinterpret_cast<const uint4 *>(wq + 16);
        const uint32_t u[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 8; i++)
            c[i] = u[i] ^ 0x80808080u;
    } else {
        const uint4 a = *reinterpret_cast<const uint4 *>(wq);
        const uint32_t u[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int g = 0; g < 2; g++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                c[4 * g + i] = plane_codes<WT>(u[i], s, g, i);
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const int4 x0 = *reinterpret_cast<const int4 *>(xq + t * MF_XCB * 32);
        const int4 x1 = *reinterpret_cast<const int4 *>(xq + t * MF_XCB * 32 + 16);
        const int xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        const float dx = xd[t * MF_XCB];
        int sa = MQ_MAGIC, sg = MQ_MAGIC; /* (fma_isums) the first 16 elements' (Q6_K) or all */
#pragma unroll
        for (int i = 0; i < 4; i++)
            sa = __dp4a((int)c[i], xw[i], sa);
#pragma unroll
        for (int i = 4; i < 8; i++) {
            if (WT == CUDA_W_Q6_K)
                sg = __dp4a((int)c[i], xw[i], sg);
            else
                sa = __dp4a((int)c[i], xw[i], sa);
        }
        if constexpr (cuda_wtype_int8_one_scale(WT)) {
            acc[t] = fma_isum(acc[t], sa, dw, dx);
        } else {
            acc[t] = fma_isum(acc[t], sa, s.d[0], dx);
            if (WT == CUDA_W_Q6_K)
                acc[t] = fma_isum(acc[t], sg, s.d[1], dx);
            else
                acc[t] = fmaf(s.m[0], xs[t * MF_XCB], acc[t]);
        }
    }
}

/* grid (ceil(N / (32 MF_WARPS)), 1, n_split), 32 MF_WARPS threads, dynamic shared memory
 * few_layout<WT, NT>::bytes; T <= NT tokens; shares as the ring's, in stages between
 * multiples of CB blocks (a share's first and last may be shorter). */
template <int WT, int NT>
__global__ void __launch_bounds__(32 * MF_WARPS) k_mmq_few(const cuda_weight w, const mmq_args p) {
    typedef few_layout<WT, NT> L;
    constexpr int CB = L::CB, S = L::S;
    extern __shared__ __align__(16) uint8_t smem[];
    const int K = (int)w.n_in, n_blocks = K / 32, kb_begin = (int)blockIdx.z * p.split_steps;
    const int kb_end = min(n_blocks, kb_begin + p.split_steps);
    const int kb_base = CB == MR_CB ? kb_begin : kb_begin - kb_begin % CB; /* shares: whole MR_CB */
    const int n_stages = kb_end <= kb_begin ? 0
                         : CB == MR_CB    ? (kb_end - kb_begin) / CB
                                          : (kb_end - kb_base + CB - 1) / CB;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t row0 = ((int64_t)blockIdx.x * MF_WARPS + warp) * 32, row = row0 + lane;
    uint8_t *ring = smem + warp * L::ring;
/* stage i's first block, and its count */
#define STAGE_AT(i) (CB == MR_CB ? kb_begin + (i) * CB : max(kb_begin, kb_base + (i) * CB))
#define STAGE_NB(i) (CB == MR_CB ? CB : min(kb_end, kb_base + ((i) + 1) * CB) - STAGE_AT(i))

    /* the first stages' weights load while the previous kernel ends; the input after it */
#pragma unroll
    for (int s = 0; s < S - 1; s++) {
        if (s < n_stages)
            few_issue<WT, NT>(w, row0, STAGE_AT(s), STAGE_NB(s), ring + s * L::stage, lane);
        cp_async_commit();
    }
    pdl_wait();
    pdl_launch_next();

    float acc[NT] = {};
    int kx0 = -MF_XCB; /* the first of the MF_XCB blocks of input staged (none yet) */
    for (int i = 0; i < n_stages; i++) {
        const int kb = STAGE_AT(i), nb = STAGE_NB(i);
        /* past them, the next (every warp: the same stages) */
        if (CB == MR_CB ? (kb - kb_begin) % MF_XCB == 0 : kb + nb > kx0 + MF_XCB) {
            __syncthreads(); /* the previous ones are used */
            few_stage_x<WT, NT>(p, K, kb, kb_end, smem);
            __syncthreads();
            kx0 = kb;
        }
        const int kx = CB == MR_CB ? (kb - kb_begin) % MF_XCB : kb - kx0; /* the stage in the staged input */
        cp_async_wait<S - 2>();  /* this lane's copies of stage i */
        __syncwarp();            /* the warp's; and stage i - 1's slot is free */
        const int next = i + S - 1;
        if (next < n_stages)
            few_issue<WT, NT>(w, row0, STAGE_AT(next), STAGE_NB(next), ring + (next % S) * L::stage, lane);
        cp_async_commit();
        const uint8_t *st = ring + (i % S) * L::stage;
        const uint8_t *wq = st + lane * L::ROW, *head = st + L::head + lane * L::HEAD;
#pragma unroll
        for (int b = 0; b < CB; b++) {
            if (CB != MR_CB && b >= nb)
                break;
            float dw = 0.0f;
            chunk_sc s = {};
            if constexpr (cuda_wtype_int8_one_scale(WT))
                dw = __half2float(reinterpret_cast<const __half *>(head)[b]);
            else if constexpr (WT == CUDA_W_Q6_K && CB == 8) /* the super-block's scales: its block's */
                s = head_scale<WT>(head, head_dec<WT, true>(head, kb, b), (kb + b) & 7);
            else
                s = head_scale<WT>(head, head_dec<WT>(head, kb, b), b);
            few_block<WT, NT>(wq + b * L::BB, dw, s, (const int8_t *)(smem + L::x) + (kx + b) * 32,
                              (const float *)(smem + L::x_d) + kx + b, (const float *)(smem + L::x_s) + kx + b, acc);
        }
    }
#undef STAGE_AT
#undef STAGE_NB
    cp_async_wait_all();
    if (row < w.n_out) {
        float *const Y = p.y + blockIdx.z * (size_t)p.T * (size_t)p.ldy;
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (t < p.T) {
                float *y = Y + t * p.ldy + row;
                *y = p.accumulate ? *y + acc[t] : acc[t];
            }
    }
}

template <int NT>
static cudaError_t launch_few_nt(const cuda_weight *w, const mmq_args &p, int n_split, cudaStream_t stream) {
    const dim3 grid((unsigned int)((w->n_out + 32 * MF_WARPS - 1) / (32 * MF_WARPS)), 1, (unsigned int)n_split);
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = pdl_config(grid, dim3(32 * MF_WARPS), 0, stream, &attr);
#define CALL(WT)                                                                    \
    {                                                                               \
        constexpr int smem = few_layout<WT, NT>::bytes;                             \
        cfg.dynamicSmemBytes = smem;                                                \
        static bool allowed = false; /* once per kernel, before its first launch */ \
        if (!allowed) {                                                             \
            const cudaError_t e = allow_smem(k_mmq_few<WT, NT>, smem);              \
            if (e != cudaSuccess)                                                   \
                return e;                                                           \
            allowed = true;                                                         \
        }                                                                           \
        return cudaLaunchKernelEx(&cfg, k_mmq_few<WT, NT>, *w, p);                  \
    }
    CUDA_WTYPE_SWITCH_INT8(w->type, CALL);
#undef CALL
    return cudaErrorInvalidValue;
}

/* Whether k_mmq_few runs a batch of T tokens of w rather than the ring: where it measured
 * faster, by w's type and size alone (either kernel gives the same bits). The fewest
 * weights (n_out x n_in, millions) from which it does at 1, 2 and 3-4 tokens; -1: at no
 * size. From every int8 type's four layer GEMMs at Qwen3 0.6B, 1.7B, 4B and 8B shapes
 * (bench/gpu_matvec_bench.c with T, H100, one call each; docs/perf-log.md, thirty-seventh
 * session for Q6_K at 3-4 tokens, thirty-ninth at 1-2, thirty-eighth for the others): a
 * thread a row pays where rows are many, less so as tokens are added (8B, us ring / few
 * at 1, 2, 4 tokens: Q4_K 94.8 / 52.7, 58.4, 72.6; Q6_K 137.1 / 85.4, 94.0, 132.0; Q8_0
 * 97.6 / 88.8, 93.9, 104.1, its gate|up alone 48.7 / 46.5 at 4 tokens); on 0.6B's
 * smallest matrix Q6_K's loses even at one token (wo, 2.1M: the ring 4.82 us, k_mmq_few
 * 5.51; down, 3.1M: 5.70 / 5.52). */
static const struct {
    int type;
    int min_mweights[3];
} few_rule[] = {{CUDA_W_Q4_K, {0, 0, 16}},  {CUDA_W_Q5_K, {0, 0, 15}}, {CUDA_W_Q6_K, {3, 8, 40}},
                {CUDA_W_Q4_0, {0, 14, 90}}, {CUDA_W_Q8_0, {0, 90, 90}}};

/* cuda_mmq_set_few's: -2 not yet read from EDGERUNNER_CUDA_MMQ_FEW, -1 by few_rule, else
 * batches of up to that many tokens of every type and size (tests, measurements) */
static int few_mode = -2;

extern "C" void cuda_mmq_set_few(int max_t) { few_mode = max_t < 0 ? -2 : max_t; }

static bool few_pays(const cuda_weight *w, int T) {
    if (few_mode == -2) {
        const char *env = getenv("EDGERUNNER_CUDA_MMQ_FEW");
        few_mode = env && *env ? atoi(env) : -1;
        few_mode = few_mode < 0 ? -1 : few_mode;
    }
    if (few_mode >= 0)
        return T <= few_mode;
    const int col = T <= 1 ? 0 : T <= 2 ? 1 : 2;
    for (size_t i = 0; i < sizeof few_rule / sizeof few_rule[0]; i++)
        if (few_rule[i].type == w->type)
            return few_rule[i].min_mweights[col] >= 0 &&
                   w->n_out * w->n_in >= few_rule[i].min_mweights[col] * (int64_t)1000000;
    return false;
}

/* The few-token kernel for T tokens of w, or cudaErrorNotSupported where the ring runs them
 * (its shares: split_steps whole stages). */
static cudaError_t launch_few(const cuda_weight *w, mmq_args p, int n_split, cudaStream_t stream) {
    if (p.xq || p.T > MF_MAX_T || !few_pays(w, p.T))
        return cudaErrorNotSupported;
    p.split_steps = ring_split_steps(w, n_split);
    if (p.T <= 1)
        return launch_few_nt<1>(w, p, n_split, stream);
    if (p.T <= 2)
        return launch_few_nt<2>(w, p, n_split, stream);
    return launch_few_nt<4>(w, p, n_split, stream);
}

/* Whether w's batch GEMMs take the ring: by its shape alone (a token's numbers may not
 * depend on the batch), unless EDGERUNNER_CUDA_MMQ_RING=0 (read once; for measurements).
 * The K types always (their K is a multiple of 256; k_mmq has no path for them). */
static bool use_ring(const cuda_weight *w) {
    static int mode = -1;
    if (mode < 0) {
        const char *env = getenv("EDGERUNNER_CUDA_MMQ_RING");
        mode = env && *env ? atoi(env) != 0 : 1;
    }
    return (mode || !cuda_wtype_int8_one_scale(w->type)) && w->n_in % (32 * MR_CB) == 0;
}

/* NT tiles of 8 tokens a block, in the ring where w's shape allows it; a batch of a few
 * tokens there in k_mmq_few */
template <int NT>
static cudaError_t launch_mmq(const cuda_weight *w, const mmq_args &p, int n_split, cudaStream_t stream) {
    if (!use_ring(w))
        return launch_nt<NT>(w, p, n_split, stream);
    const cudaError_t e = NT == 1 ? launch_few(w, p, n_split, stream) : cudaErrorNotSupported;
    return e != cudaErrorNotSupported ? e : launch_ring<NT>(w, p, n_split, stream);
}

extern "C" int cuda_mmq_prequantize(int n_tokens) { return n_tokens > MQ_INKERNEL_MAX_T; }

extern "C" cudaError_t cuda_quantize_x(const uint16_t *x, int n_tokens, int64_t K, int8_t *xq, float *xd, float *xs,
                                       cudaStream_t stream) {
    const int64_t n = (int64_t)n_tokens * K;
    if (n_tokens <= 0 || K % 32 != 0)
        return cudaErrorInvalidValue;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(dim3((unsigned int)((n / 8 + 255) / 256)), dim3(256), 0, stream, &attr);
    return cudaLaunchKernelEx(&cfg, k_quantize_x, reinterpret_cast<const __half *>(x), n, xq, xd, xs);
}

extern "C" cudaError_t cuda_mmq_tiles(const cuda_weight *w, const uint16_t *x, const int8_t *xq, const float *xd,
                                      const float *xs, int T, float *y, int64_t ldy, int accumulate, int n_split,
                                      cudaStream_t stream) {
    if (T <= 0 || w->n_in % 32 != 0 || n_split < 1 || n_split > w->n_in / 32 || !cuda_wtype_int8_mma(w->type) ||
        !xq != !xd || !xq != !xs)
        return cudaErrorInvalidValue;
    const mmq_args p = {reinterpret_cast<const __half *>(x), xq, xd, xs, T, y, ldy, accumulate, 0};
    /* as few 8-token tiles a block as the batch needs: the mmas of tokens past T are
     * wasted, the weights are read once per block row of tokens */
    if (T <= 8)
        return launch_mmq<1>(w, p, n_split, stream);
    if (T <= 16)
        return launch_mmq<2>(w, p, n_split, stream);
    if (T <= 32)
        return launch_mmq<4>(w, p, n_split, stream);
    return launch_mmq<8>(w, p, n_split, stream);
}
