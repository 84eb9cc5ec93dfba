/*
 * elementwise.cu - the small kernels around the matvecs and GEMMs: embedding lookup,
 * committing the argmax of a step, RMSNorm and SwiGLU for prefill (F16 outputs: the
 * inputs of the prefill GEMMs), dequantization of weight rows to F16 (the other input)
 * and the Q8_0 / Q4_0 repacks at upload.
 * All are bound by memory bandwidth and tiny next to the weight reads.
 */
#include "backend/cuda/common.cuh"

/* Row `row` of w into dst: floats, or halves (rounded to nearest) when F16_OUT. */
template <int WT, int F16_OUT>
static __device__ void dequant_row(const cuda_weight w, int64_t row, void *dst) {
    const uint8_t *w_row = (const uint8_t *)w.w + (size_t)row * cuda_row_bytes(WT, w.n_in);
    const __half *d_row = HAS_SCALES(WT) ? (const __half *)w.d + (size_t)row * (w.n_in / 32) : nullptr;
    for (int i = threadIdx.x; i < w.n_in; i += blockDim.x) {
        const float v = elem<WT>(w_row, d_row, i);
        if (F16_OUT)
            static_cast<__half *>(dst)[i] = __float2half_rn(v);
        else
            static_cast<float *>(dst)[i] = v;
    }
}

template <int F16_OUT>
static __device__ void dequant_row_any(const cuda_weight w, int64_t row, void *dst) {
    switch (w.type) {
    case CUDA_W_F32: dequant_row<CUDA_W_F32, F16_OUT>(w, row, dst); break;
    case CUDA_W_F16: dequant_row<CUDA_W_F16, F16_OUT>(w, row, dst); break;
    case CUDA_W_BF16: dequant_row<CUDA_W_BF16, F16_OUT>(w, row, dst); break;
    case CUDA_W_Q8_0: dequant_row<CUDA_W_Q8_0, F16_OUT>(w, row, dst); break;
    case CUDA_W_Q4_0: dequant_row<CUDA_W_Q4_0, F16_OUT>(w, row, dst); break;
    }
}

__global__ void k_embed_state(const cuda_weight w, cuda_step_state *state, float *x) {
    pdl_launch_next();
    pdl_wait();
    dequant_row_any<0>(w, state->token, x);
    if (threadIdx.x == 0)
        state->argmax_key = 0;
}

__global__ void k_embed_tokens(const cuda_weight w, const int32_t *tokens, float *x) {
    dequant_row_any<0>(w, tokens[blockIdx.x], x + (size_t)blockIdx.x * w.n_in);
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

__global__ void k_rmsnorm(const float *x, const float *w, int n, float eps, __half *y) {
    __shared__ float red[32];
    const float *xr = x + (size_t)blockIdx.x * n;
    __half *yr = y + (size_t)blockIdx.x * n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = __float2half_rn(xr[i] * scale * w[i]);
}

__global__ void k_swiglu(const float *gu, int n_ff, __half *y) {
    const float *g = gu + (size_t)blockIdx.x * 2 * n_ff;
    for (int i = threadIdx.x; i < n_ff; i += blockDim.x) {
        const float gi = g[i];
        y[(size_t)blockIdx.x * n_ff + i] = __float2half_rn(gi / (1.0f + expf(-gi)) * g[n_ff + i]);
    }
}

/* Elements e .. e + 7 of a row (e a multiple of 8, rows of whole groups of 8) as
 * floats, from one 8- or 16-byte load: exactly what elem() gives. */
template <int WT>
static __device__ __forceinline__ void elems8(const uint8_t *w_row, const __half *d_row, int e, float v[8]) {
    if (WT == CUDA_W_Q8_0 || WT == CUDA_W_Q4_0) {
        /* Q4_0: byte j of a block holds elements j (low nibble) and j + 16 (high) */
        const uint2 u = *reinterpret_cast<const uint2 *>(w_row + (WT == CUDA_W_Q8_0 ? e : (e >> 5) * 16 + (e & 15)));
        const float d = __half2float(d_row[e >> 5]);
        const int shift = (e & 16) ? 4 : 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (WT == CUDA_W_Q8_0) {
                v[k] = d * q8_byte(u.x, k);
                v[4 + k] = d * q8_byte(u.y, k);
            } else {
                v[k] = d * q4_byte((u.x >> shift) & 0x0f0f0f0fu, k);
                v[4 + k] = d * q4_byte((u.y >> shift) & 0x0f0f0f0fu, k);
            }
        }
    } else if (WT == CUDA_W_F32) {
        const float4 a = *reinterpret_cast<const float4 *>(w_row + 4 * (size_t)e);
        const float4 b = *reinterpret_cast<const float4 *>(w_row + 4 * (size_t)e + 16);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
        const uint4 u = *reinterpret_cast<const uint4 *>(w_row + 2 * (size_t)e);
        const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float2 f = pair_f32(words[k], WT);
            v[2 * k] = f.x;
            v[2 * k + 1] = f.y;
        }
    }
}

/* grid (rows): row row0 + blockIdx.x of w to dst as F16, 8 elements (one 16-byte
 * store) per thread and pass; rows not a whole number of 8 go element by element. */
template <int WT>
__global__ void k_dequant_rows(const cuda_weight w, int64_t row0, __half *dst) {
    const int64_t row = row0 + blockIdx.x;
    __half *out = dst + (size_t)blockIdx.x * w.n_in;
    if (w.n_in % 8 != 0) {
        dequant_row<WT, 1>(w, row, out);
        return;
    }
    const uint8_t *w_row = (const uint8_t *)w.w + (size_t)row * cuda_row_bytes(WT, w.n_in);
    const __half *d_row = HAS_SCALES(WT) ? (const __half *)w.d + (size_t)row * (w.n_in / 32) : nullptr;
    for (int e = 8 * threadIdx.x; e < w.n_in; e += 8 * blockDim.x) {
        float v[8];
        elems8<WT>(w_row, d_row, e, v);
        const __half2 h[4] = {__floats2half2_rn(v[0], v[1]), __floats2half2_rn(v[2], v[3]),
                              __floats2half2_rn(v[4], v[5]), __floats2half2_rn(v[6], v[7])};
        *reinterpret_cast<uint4 *>(out + e) = *reinterpret_cast<const uint4 *>(h);
    }
}

/* one thread per 34-byte block: d (f16) then 32 int8 */
__global__ void k_repack_q8_0(const uint8_t *blocks, int64_t n_blocks, uint8_t *qs, uint16_t *d) {
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= n_blocks)
        return;
    const uint8_t *src = blocks + b * 34;
    d[b] = (uint16_t)(src[0] | (src[1] << 8));
    for (int j = 0; j < 32; j++)
        qs[b * 32 + j] = (uint8_t)((int)(int8_t)src[2 + j] + 128);
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

/* a launch that may overlap the previous kernel's tail (the kernel waits for it) */
static cudaLaunchConfig_t pdl_config(dim3 grid, dim3 block, cudaStream_t stream, cudaLaunchAttribute *attr) {
    cudaLaunchConfig_t cfg = {};
    attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr->val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}

/* one thread per 18-byte block: d (f16) then 16 nibble bytes, kept as they are */
__global__ void k_repack_q4_0(const uint8_t *blocks, int64_t n_blocks, uint8_t *qs, uint16_t *d) {
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= n_blocks)
        return;
    const uint8_t *src = blocks + b * 18;
    d[b] = (uint16_t)(src[0] | (src[1] << 8));
    for (int j = 0; j < 16; j++)
        qs[b * 16 + j] = src[2 + j];
}

extern "C" cudaError_t cuda_repack_q4_0(const void *blocks, int64_t n_rows, int64_t n_in, uint8_t *qs, void *d,
                                        cudaStream_t stream) {
    const int64_t n_blocks = n_rows * (n_in / 32);
    k_repack_q4_0<<<(unsigned int)((n_blocks + 255) / 256), 256, 0, stream>>>((const uint8_t *)blocks, n_blocks, qs,
                                                                               (uint16_t *)d);
    return ER_CUDA_LAUNCH_CHECK();
}

extern "C" cudaError_t cuda_embed_state(const cuda_weight *embd, cuda_step_state *state, float *x,
                                        cudaStream_t stream) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(dim3(1), dim3(256), stream, &attr);
    return cudaLaunchKernelEx(&cfg, k_embed_state, *embd, state, x);
}

extern "C" cudaError_t cuda_embed_tokens(const cuda_weight *embd, const int32_t *tokens, int n_tokens, float *x,
                                         cudaStream_t stream) {
    k_embed_tokens<<<n_tokens, 256, 0, stream>>>(*embd, tokens, x);
    return ER_CUDA_LAUNCH_CHECK();
}

extern "C" cudaError_t cuda_commit(cuda_step_state *state, int32_t *out_ids, cudaStream_t stream) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(dim3(1), dim3(1), stream, &attr);
    return cudaLaunchKernelEx(&cfg, k_commit, state, out_ids);
}

extern "C" cudaError_t cuda_rmsnorm(const float *x, const float *w, int n_rows, int n, float eps, uint16_t *y,
                                    cudaStream_t stream) {
    k_rmsnorm<<<n_rows, 256, 0, stream>>>(x, w, n, eps, reinterpret_cast<__half *>(y));
    return ER_CUDA_LAUNCH_CHECK();
}

extern "C" cudaError_t cuda_swiglu(const float *gu, int n_rows, int n_ff, uint16_t *y, cudaStream_t stream) {
    k_swiglu<<<n_rows, 256, 0, stream>>>(gu, n_ff, reinterpret_cast<__half *>(y));
    return ER_CUDA_LAUNCH_CHECK();
}

extern "C" cudaError_t cuda_dequant_rows(const cuda_weight *w, int64_t row0, int64_t rows, uint16_t *dst,
                                         cudaStream_t stream) {
    __half *out = reinterpret_cast<__half *>(dst);
    switch (w->type) {
    case CUDA_W_F32: k_dequant_rows<CUDA_W_F32><<<(unsigned int)rows, 128, 0, stream>>>(*w, row0, out); break;
    case CUDA_W_F16: k_dequant_rows<CUDA_W_F16><<<(unsigned int)rows, 128, 0, stream>>>(*w, row0, out); break;
    case CUDA_W_BF16: k_dequant_rows<CUDA_W_BF16><<<(unsigned int)rows, 128, 0, stream>>>(*w, row0, out); break;
    case CUDA_W_Q8_0: k_dequant_rows<CUDA_W_Q8_0><<<(unsigned int)rows, 128, 0, stream>>>(*w, row0, out); break;
    case CUDA_W_Q4_0: k_dequant_rows<CUDA_W_Q4_0><<<(unsigned int)rows, 128, 0, stream>>>(*w, row0, out); break;
    default: return cudaErrorInvalidValue;
    }
    return ER_CUDA_LAUNCH_CHECK();
}

extern "C" cudaError_t cuda_repack_q8_0(const void *blocks, int64_t n_rows, int64_t n_in, uint8_t *qs, void *d,
                                        cudaStream_t stream) {
    const int64_t n_blocks = n_rows * (n_in / 32);
    k_repack_q8_0<<<(unsigned int)((n_blocks + 255) / 256), 256, 0, stream>>>((const uint8_t *)blocks, n_blocks, qs,
                                                                               (uint16_t *)d);
    return ER_CUDA_LAUNCH_CHECK();
}
