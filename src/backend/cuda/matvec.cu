/*
 * matvec.cu - y = W x for one token, reading the weights in their own format (Q8_0,
 * F16, BF16, F32) with 16-byte loads, with the neighbouring ops folded in (see
 * enum cuda_matvec_mode): RMSNorm of the input, residual add, SwiGLU of gate and up,
 * the argmax of the output head.
 *
 * Decode is bound by memory bandwidth: every weight byte is read once per token, so
 * time ~ bytes(W) / bandwidth. A block of 256 threads (8 warps) stages the input
 * vector (normalized when asked) in shared memory; each group of `ks` warps owns 2
 * weight rows and splits their length, so that small matrices still give every
 * multiprocessor a few blocks.
 *
 * Latency, not bandwidth, bounds the small matrices of a 0.6B model (2-7 MB each, a few
 * microseconds of HBM time), so each kernel issues its weight loads first (NC chunks of
 * 16 bytes per lane and row, held in registers), and only then waits for the previous
 * kernel (programmatic dependent launch) and stages its input. Rows longer than
 * NC = 4 chunks per lane fall back to a loop (NC = 0).
 */
#include "backend/cuda/common.cuh"

#define MV_THREADS 256
#define MV_WARPS 8
#define MV_ROWS 2 /* physical rows per warp group */

/* Orders floats as unsigned integers: a > b iff key(a) > key(b) (NaN aside). */
static __device__ __forceinline__ unsigned int ordered_bits(float f) {
    const unsigned int u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

template <int WT, int MODE, int NC>
__global__ void __launch_bounds__(MV_THREADS)
k_matvec(const uint8_t *__restrict__ w, const __half *__restrict__ d, int n_in, int n_out, int ks,
         const float *__restrict__ x, const float *__restrict__ norm_w, float eps, float *__restrict__ y,
         cuda_step_state *state) {
    extern __shared__ float xs[]; /* (n_in) the input, normalized in the NORM modes */
    __shared__ float red[32];
    __shared__ float partial[MV_WARPS][MV_ROWS];
    __shared__ unsigned long long best;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const bool norm = MODE == MV_NORM_STORE || MODE == MV_NORM_SWIGLU || MODE == MV_NORM_ARGMAX;

    /* rows of this warp group; SWIGLU pairs gate row i with up row n_out/2 + i */
    const int groups = MV_WARPS / ks, group = warp / ks, sub = warp % ks;
    const int n_logical = MODE == MV_NORM_SWIGLU ? n_out / 2 : n_out;
    const int first = (blockIdx.x * groups + group) * (MODE == MV_NORM_SWIGLU ? 1 : MV_ROWS);
    int rows[MV_ROWS];
    bool valid[MV_ROWS];
    if (MODE == MV_NORM_SWIGLU) {
        rows[0] = first;
        rows[1] = n_out / 2 + first;
        valid[0] = valid[1] = first < n_logical;
    } else {
        rows[0] = first;
        rows[1] = first + 1;
        valid[0] = rows[0] < n_out;
        valid[1] = rows[1] < n_out;
    }
    const size_t rb = cuda_row_bytes(WT, n_in);
    const int n_blocks32 = n_in / 32;
    const uint8_t *w_row[MV_ROWS];
    const __half *d_row[MV_ROWS];
#pragma unroll
    for (int r = 0; r < MV_ROWS; r++) {
        const int row = valid[r] ? rows[r] : 0; /* invalid rows read row 0 and are dropped */
        w_row[r] = w + (size_t)row * rb;
        d_row[r] = HAS_SCALES(WT) ? d + (size_t)row * n_blocks32 : nullptr;
    }
    /* 16-byte chunks need 16-byte aligned rows; otherwise everything goes element-wise */
    const int n_chunks = rb % 16 == 0 ? n_in / CHUNK_ELEMS(WT) : 0;
    const int step = 32 * ks;
    const int c0 = sub * 32 + lane;

    /* the weights do not depend on the previous kernel: load them first */
    uint4 wv[MV_ROWS][NC > 0 ? NC : 1];
    float wd[MV_ROWS][NC > 0 ? NC : 1];
#pragma unroll
    for (int r = 0; r < MV_ROWS; r++)
#pragma unroll
        for (int k = 0; k < NC; k++) {
            const int c = c0 + k * step;
            if (c < n_chunks) {
                wv[r][k] = __ldg(reinterpret_cast<const uint4 *>(w_row[r]) + c);
                wd[r][k] = WT == CUDA_W_Q8_0 ? __half2float(d_row[r][c >> 1])
                           : WT == CUDA_W_Q4_0 ? __half2float(d_row[r][c]) : 1.0f;
            }
        }
    pdl_wait();
    pdl_launch_next();

    float scale = 1.0f;
    if (norm) {
        float ss = 0.0f;
        for (int i = tid; i < n_in; i += MV_THREADS)
            ss += x[i] * x[i];
        ss = block_sum(ss, red);
        scale = 1.0f / sqrtf(ss / (float)n_in + eps);
    }
    for (int i = tid; i < n_in; i += MV_THREADS)
        xs[i] = norm ? x[i] * scale * norm_w[i] : x[i];
    if (MODE == MV_NORM_ARGMAX && tid == 0)
        best = 0;
    __syncthreads();

    float acc[MV_ROWS] = {0.0f, 0.0f};
    if (NC > 0) {
#pragma unroll
        for (int r = 0; r < MV_ROWS; r++)
#pragma unroll
            for (int k = 0; k < NC; k++) {
                const int c = c0 + k * step;
                if (c < n_chunks)
                    acc[r] += chunk_fma<WT>(wv[r][k], wd[r][k], xs + c * CHUNK_ELEMS(WT));
            }
    } else {
        int c = c0;
        for (; c + step < n_chunks; c += 2 * step) {
#pragma unroll
            for (int r = 0; r < MV_ROWS; r++)
                acc[r] += chunk_dot<WT>(w_row[r], d_row[r], c, xs) + chunk_dot<WT>(w_row[r], d_row[r], c + step, xs);
        }
        if (c < n_chunks) {
#pragma unroll
            for (int r = 0; r < MV_ROWS; r++)
                acc[r] += chunk_dot<WT>(w_row[r], d_row[r], c, xs);
        }
    }
    for (int i = n_chunks * CHUNK_ELEMS(WT) + sub * 32 + lane; i < n_in; i += step) {
#pragma unroll
        for (int r = 0; r < MV_ROWS; r++)
            acc[r] += elem<WT>(w_row[r], d_row[r], i) * xs[i];
    }
#pragma unroll
    for (int r = 0; r < MV_ROWS; r++)
        acc[r] = warp_sum(acc[r]);
    if (ks > 1) {
        if (lane == 0) {
            partial[warp][0] = acc[0];
            partial[warp][1] = acc[1];
        }
        __syncthreads();
        if (sub == 0 && lane == 0)
            for (int k = 1; k < ks; k++) {
                acc[0] += partial[warp + k][0];
                acc[1] += partial[warp + k][1];
            }
    }

    if (sub == 0 && lane == 0) {
        if (MODE == MV_NORM_SWIGLU) {
            if (valid[0]) {
                const float g = acc[0];
                y[first] = g / (1.0f + expf(-g)) * acc[1];
            }
        } else {
#pragma unroll
            for (int r = 0; r < MV_ROWS; r++) {
                if (!valid[r])
                    continue;
                if (MODE == MV_ADD)
                    y[rows[r]] += acc[r];
                else
                    y[rows[r]] = acc[r];
                if (MODE == MV_NORM_ARGMAX) {
                    const unsigned long long key =
                        ((unsigned long long)ordered_bits(acc[r]) << 32) | (0xffffffffu - (unsigned int)rows[r]);
                    atomicMax(&best, key);
                }
            }
        }
    }
    if (MODE == MV_NORM_ARGMAX) {
        __syncthreads();
        if (tid == 0)
            atomicMax(&state->argmax_key, best);
    }
}

template <int WT, int MODE, int NC>
static cudaError_t launch_nc(const cuda_weight *w, int ks, int n_blocks, size_t smem, const float *x,
                             const float *norm_w, float eps, float *y, cuda_step_state *state, cudaStream_t stream) {
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(k_matvec<WT, MODE, NC>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess)
            return e;
    }
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3(n_blocks);
    cfg.blockDim = dim3(MV_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, k_matvec<WT, MODE, NC>, (const uint8_t *)w->w, (const __half *)w->d, (int)w->n_in,
                              (int)w->n_out, ks, x, norm_w, eps, y, state);
}

template <int WT, int MODE>
static cudaError_t launch(const cuda_weight *w, const float *x, const float *norm_w, float eps, float *y,
                          cuda_step_state *state, cudaStream_t stream) {
    const int n_out = (int)w->n_out, n_in = (int)w->n_in;
    const int rows_per_group = MODE == MV_NORM_SWIGLU ? 1 : MV_ROWS;
    const int n_logical = MODE == MV_NORM_SWIGLU ? n_out / 2 : n_out;
    /* split rows across more warps (ks) until there are >= 2 blocks per multiprocessor
     * (132 on an H200; the exact count matters little) */
    int ks = 1;
    while (ks < MV_WARPS && (n_logical + rows_per_group * (MV_WARPS / ks) - 1) / (rows_per_group * (MV_WARPS / ks)) < 264)
        ks *= 2;
    const int rows_per_block = rows_per_group * (MV_WARPS / ks);
    const int n_blocks = (n_logical + rows_per_block - 1) / rows_per_block;
    const size_t smem = (size_t)n_in * sizeof(float);
    /* chunks per lane and row: prefetched into registers when at most 4 */
    const int n_chunks = cuda_row_bytes(WT, n_in) % 16 == 0 ? n_in / CHUNK_ELEMS(WT) : 0;
    const int nc = (n_chunks + 32 * ks - 1) / (32 * ks);
    if (nc == 1)
        return launch_nc<WT, MODE, 1>(w, ks, n_blocks, smem, x, norm_w, eps, y, state, stream);
    if (nc == 2)
        return launch_nc<WT, MODE, 2>(w, ks, n_blocks, smem, x, norm_w, eps, y, state, stream);
    if (nc <= 4 && nc > 0)
        return launch_nc<WT, MODE, 4>(w, ks, n_blocks, smem, x, norm_w, eps, y, state, stream);
    return launch_nc<WT, MODE, 0>(w, ks, n_blocks, smem, x, norm_w, eps, y, state, stream);
}

template <int WT>
static cudaError_t launch_mode(const cuda_weight *w, int mode, const float *x, const float *norm_w, float eps,
                               float *y, cuda_step_state *state, cudaStream_t stream) {
    switch (mode) {
    case MV_STORE: return launch<WT, MV_STORE>(w, x, norm_w, eps, y, state, stream);
    case MV_ADD: return launch<WT, MV_ADD>(w, x, norm_w, eps, y, state, stream);
    case MV_NORM_STORE: return launch<WT, MV_NORM_STORE>(w, x, norm_w, eps, y, state, stream);
    case MV_NORM_SWIGLU: return launch<WT, MV_NORM_SWIGLU>(w, x, norm_w, eps, y, state, stream);
    case MV_NORM_ARGMAX: return launch<WT, MV_NORM_ARGMAX>(w, x, norm_w, eps, y, state, stream);
    }
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t cuda_matvec(const cuda_weight *w, int mode, const float *x, const float *norm_w, float eps,
                                   float *y, cuda_step_state *state, cudaStream_t stream) {
    switch (w->type) {
    case CUDA_W_F32: return launch_mode<CUDA_W_F32>(w, mode, x, norm_w, eps, y, state, stream);
    case CUDA_W_F16: return launch_mode<CUDA_W_F16>(w, mode, x, norm_w, eps, y, state, stream);
    case CUDA_W_BF16: return launch_mode<CUDA_W_BF16>(w, mode, x, norm_w, eps, y, state, stream);
    case CUDA_W_Q8_0: return launch_mode<CUDA_W_Q8_0>(w, mode, x, norm_w, eps, y, state, stream);
    case CUDA_W_Q4_0: return launch_mode<CUDA_W_Q4_0>(w, mode, x, norm_w, eps, y, state, stream);
    }
    return cudaErrorInvalidValue;
}
