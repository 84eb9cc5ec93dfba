/*
 * cuda.c - the CUDA backend's ops table (backend.h): which features of the model layer
 * it implements, its KV cache types, and where each operation lives (internal.h).
 */
#include "backend/cuda/cuda.h"

#include "backend/cuda/internal.h"
#include "backend/cuda/profile.h"

static int available(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

static size_t device_bytes_in_use(void) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        return 0;
    return total_b - free_b;
}

const backend_ops cuda_ops = {
    .name = "CUDA",
    /* step.c's forward pass: the Llama layer with every feature of backend.h: Q/K/V
     * biases (Qwen2), Q/K norms (Qwen3), sliding windows (attention.cu), and Gemma-3's
     * scaled embeddings, post-norms and GeGLU */
    .features = ER_FEAT_QKV_BIAS | ER_FEAT_QK_NORM | ER_FEAT_POST_NORMS | ER_FEAT_GEGLU | ER_FEAT_SLIDING_WINDOW |
                ER_FEAT_EMBD_SCALE | ER_FEAT_TIED_OUTPUT,
    /* attention.cu: F32, F16 and Q8_0 caches (K and V of one type, context.c) */
    .kv_types = 1u << ER_TYPE_F32 | 1u << ER_TYPE_F16 | 1u << ER_TYPE_Q8_0,
    /* F32, not llama.cpp's F16, for now: on the H200 (2026-12-01, random Qwen3-0.6B Q4_0,
     * position 65) the decode attention with its folded wo took 442.6 us of a 662.6 us
     * step with an F16 cache, where the whole step was 514.4 us with F32 before the KV
     * types came in (docs/perf-log.md). F16 and Q8_0 stay a flag away (-ctk/-ctv). */
    .kv_default = ER_TYPE_F32,
    .available = available,
    .model_upload = cuda_model_upload,
    .model_free = cuda_model_free,
    .model_bytes = cuda_model_bytes,
    .context_create = cuda_context_create,
    .context_free = cuda_context_free,
    .decode = cuda_decode,
    .generate_greedy = cuda_generate_greedy,
    .device_bytes_in_use = device_bytes_in_use,
    .profile = cuda_profile,
};
