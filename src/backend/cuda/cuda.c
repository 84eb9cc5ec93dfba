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
    /* F16, as llama.cpp: half the bytes of F32 at long context, and at short context
     * (random Qwen3-0.6B Q4_0, position 65, H200) the decode attention as fast as with
     * F32 once its F16 loads stayed in flight (attention.cu, kv_raw): 282.6 against
     * 280.6 us over 28 launches (docs/perf-log.md) */
    .kv_default = ER_TYPE_F16,
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
