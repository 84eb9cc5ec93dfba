/*
 * elementwise.cu - the small kernels around the matvecs and GEMMs: embedding lookup,
 * committing the argmax of a step, RMSNorm and SwiGLU/GeGLU for prefill (F16 outputs: the
 * inputs of the prefill GEMMs), the post-norms' residual add (decode and prefill) and the
 * repacks at upload (repack_block of wtypes.cuh).
 * All are bound by memory bandwidth and tiny next to the weight reads.
 */
#include "backend/cuda/common.cuh"

/* Row `row` of w into dst as floats, times scale (as cpu_scale after the lookup). */
template <int WT>
static __device__ void dequant_row(const cuda_weight w, int64_t row, float scale, float *dst) {
    const uint8_t *w_row = (const uint8_t *)w.w + (size_t)row * cuda_row_bytes(WT, w.n_in);
    const __half *d_row = HAS_SCALES(WT) ? (const __half *)w.d + (size_t)row * SCALE_HALVES(WT, w.n_in) : nullptr;
    for (int i = threadIdx.x; i < w.n_in; i += blockDim.x)
        dst[i] = elem<WT>(w_row, d_row, i) * scale;
}

static __device__ void dequant_row_any(const cuda_weight w, int64_t row, float scale, float *dst) {
#define CALL(WT)                             \
    dequant_row<WT>(w, row, scale, dst); \
    break
    CUDA_WTYPE_SWITCH(w.type, CALL);
#undef CALL
}

__global__ void k_embed_state(const cuda_weight w, float scale, cuda_step_state *state, float *x) {
    pdl_launch_next();
    pdl_wait();
    dequant_row_any(w, state->token, scale, x);
    if (threadIdx.x == 0)
        state->argmax_key = 0;
}

__global__ void k_embed_tokens(const cuda_weight w, float scale, const int32_t *tokens, float *x) {
    dequant_row_any(w, tokens[blockIdx.x], scale, x + (size_t)blockIdx.x * w.n_in);
}

__global__ void k_commit(cuda_step_state *state, int32_t *out_ids) {
    pdl_launch_next();
    pdl_wait();
    /* the head's atomics wrote the key in L2; an L1 line of the state may be stale */
    const int32_t token = (int32_t)(0xffffffffu - (unsigned int)(__ldcg(&state->argmax_key) & 0xffffffffu));
    state->token = token;
    out_ids[state->n_out] = token;
    state->n_out += 1;
    state->pos += 1;
}

/* one block per row of y: row rows[blockIdx.x] of x, or row blockIdx.x without rows */
__global__ void k_rmsnorm(const float *x, const int32_t *rows, const float *w, int n, float eps, __half *y) {
    __shared__ float red[32];
    pdl_wait();
    pdl_launch_next();
    const float *xr = x + (size_t)(rows ? rows[blockIdx.x] : (int)blockIdx.x) * n;
    __half *yr = y + (size_t)blockIdx.x * n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = __float2half_rn(xr[i] * scale * w[i]);
}

/* grid (n_rows, chunks): block (r, c) takes every chunks-th run of blockDim.x elements
 * of row r from the c-th (a batch of a few rows still fills the device) */
__global__ void k_glu(const float *gu, int n_ff, int gelu, __half *y) {
    pdl_wait();
    pdl_launch_next();
    const float *g = gu + (size_t)blockIdx.x * 2 * n_ff;
    for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < n_ff; i += gridDim.y * blockDim.x) {
        const float gi = g[i];
        y[(size_t)blockIdx.x * n_ff + i] = __float2half_rn((gelu ? gelu_tanh(gi) : silu(gi)) * g[n_ff + i]);
    }
}

/* one block per row; waits for the previous kernel when launched in the step graph */
__global__ void k_add_rmsnorm(const float *y, const float *w, int n, float eps, float *x) {
    __shared__ float red[32];
    pdl_wait();
    pdl_launch_next();
    const float *yr = y + (size_t)blockIdx.x * n;
    float *xr = x + (size_t)blockIdx.x * n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = __ldcg(yr + i); /* written by the previous kernel: L2, not a stale L1 */
        ss += v * v;
    }
    ss = block_sum(ss, red);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        xr[i] = __ldcg(xr + i) + __ldcg(yr + i) * scale * w[i];
}

/* one thread per file block of RAW bytes */
template <int WT>
__global__ void k_repack(const uint8_t *blocks, int64_t n_blocks, uint8_t *qs, uint16_t *d) {
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= n_blocks)
        return;
    repack_block<WT>(blocks + b * cuda_wtype_repack_bytes(WT), b, qs, d);
}

__global__ void k_spin(long long ns) {
    const long long t0 = clock64();
    /* clock64 counts SM cycles: about 2 per ns at the H200's 1.98 GHz */
    while (clock64() - t0 < 2 * ns) {
    }
}

extern "C" cudaError_t cuda_spin(long long ns, cudaStream_t stream) {
    k_spin<<<1, 1, 0, stream>>>(ns);
    return ER_CUDA_LAUNCH_CHECK();
}

template <int WT>
static cudaError_t launch_repack(const void *blocks, int64_t n_rows, int64_t n_in, uint8_t *qs, void *d,
                                 cudaStream_t stream) {
    if constexpr (cuda_wtype_repack_bytes(WT) == 0) {
        return cudaErrorInvalidValue; /* the upload copies these rows as they are */
    } else {
        const int64_t n_blocks = n_rows * (n_in / cuda_wtype_block(WT));
        k_repack<WT><<<(unsigned int)((n_blocks + 255) / 256), 256, 0, stream>>>((const uint8_t *)blocks, n_blocks,
                                                                                 qs, (uint16_t *)d);
        return ER_CUDA_LAUNCH_CHECK();
    }
}

extern "C" cudaError_t cuda_embed_state(const cuda_weight *embd, float scale, cuda_step_state *state, float *x,
                                        cudaStream_t stream) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(dim3(1), dim3(256), 0, stream, &attr);
    return cudaLaunchKernelEx(&cfg, k_embed_state, *embd, scale, state, x);
}

extern "C" cudaError_t cuda_embed_tokens(const cuda_weight *embd, float scale, const int32_t *tokens, int n_tokens,
                                         float *x, cudaStream_t stream) {
    k_embed_tokens<<<n_tokens, 256, 0, stream>>>(*embd, scale, tokens, x);
    return ER_CUDA_LAUNCH_CHECK();
}

extern "C" cudaError_t cuda_commit(cuda_step_state *state, int32_t *out_ids, cudaStream_t stream) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(dim3(1), dim3(1), 0, stream, &attr);
    return cudaLaunchKernelEx(&cfg, k_commit, state, out_ids);
}

extern "C" cudaError_t cuda_rmsnorm_rows(const float *x, const int32_t *rows, const float *w, int n_rows, int n,
                                         float eps, uint16_t *y, cudaStream_t stream) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(dim3(n_rows), dim3(256), 0, stream, &attr);
    return cudaLaunchKernelEx(&cfg, k_rmsnorm, x, rows, w, n, eps, reinterpret_cast<__half *>(y));
}

extern "C" cudaError_t cuda_rmsnorm(const float *x, const float *w, int n_rows, int n, float eps, uint16_t *y,
                                    cudaStream_t stream) {
    return cuda_rmsnorm_rows(x, nullptr, w, n_rows, n, eps, y, stream);
}

extern "C" cudaError_t cuda_glu(const float *gu, int n_rows, int n_ff, int gelu, uint16_t *y, cudaStream_t stream) {
    const int chunks = (n_ff + 1023) / 1024; /* 4 elements a thread */
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(dim3(n_rows, chunks), dim3(256), 0, stream, &attr);
    return cudaLaunchKernelEx(&cfg, k_glu, gu, n_ff, gelu, reinterpret_cast<__half *>(y));
}

extern "C" cudaError_t cuda_add_rmsnorm(const float *y, const float *w, int n_rows, int n, float eps, float *x,
                                        cudaStream_t stream) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(dim3(n_rows), dim3(256), 0, stream, &attr);
    return cudaLaunchKernelEx(&cfg, k_add_rmsnorm, y, w, n, eps, x);
}

extern "C" cudaError_t cuda_repack(int type, const void *blocks, int64_t n_rows, int64_t n_in, uint8_t *qs, void *d,
                                   cudaStream_t stream) {
#define CALL(WT) return launch_repack<WT>(blocks, n_rows, n_in, qs, d, stream)
    CUDA_WTYPE_SWITCH(type, CALL);
#undef CALL
    return cudaErrorInvalidValue;
}
