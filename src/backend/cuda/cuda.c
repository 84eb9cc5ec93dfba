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

/* A cudaMemcpy between two 256 MiB buffers on the device, the best of REPS after one
 * warm-up, timed with events: 2 * 256 MiB (read and written) per copy time, bytes/s;
 * 0 when anything fails (then the error is cleared, so that later calls do not see it).
 * The best rather than the median: it is the ceiling bench's decode is compared with. */
static double copy_bandwidth(void) {
    enum { BYTES = 256 << 20, REPS = 10 };
    void *src = NULL, *dst = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double best = 0.0;
    if (cudaMalloc(&src, BYTES) != cudaSuccess || cudaMalloc(&dst, BYTES) != cudaSuccess ||
        cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess ||
        cudaMemset(src, 0, BYTES) != cudaSuccess || cudaMemcpy(dst, src, BYTES, cudaMemcpyDeviceToDevice) != cudaSuccess)
        goto done;
    for (int r = 0; r < REPS; r++) {
        float ms = 0.0f;
        if (cudaEventRecord(e0, 0) != cudaSuccess ||
            cudaMemcpyAsync(dst, src, BYTES, cudaMemcpyDeviceToDevice, 0) != cudaSuccess ||
            cudaEventRecord(e1, 0) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
            cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess || ms <= 0.0f) {
            best = 0.0;
            goto done;
        }
        const double bw = 2.0 * (double)BYTES / (1e-3 * (double)ms);
        best = bw > best ? bw : best;
    }
done:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaFree(src); /* NULL-safe */
    cudaFree(dst);
    cudaGetLastError();
    return best;
}

/* Whether a matrix has a part whose matvec in this mode takes the int8 input
 * (cuda_matvec_takes_int8). */
static int int8_matvec(const cuda_weight *w, int mode) {
    for (; w; w = w->next)
        if (cuda_matvec_takes_int8(w, mode))
            return 1;
    return 0;
}

/* Whether the head, or one of a layer's matrices, takes the int8 input. */
static int rounds_activations(const void *dev) {
    const cuda_model *cm = dev;
    if (!cm)
        return 0;
    int any = int8_matvec(&cm->output, MV_NORM_ARGMAX);
    for (int64_t il = 0; il < cm->m->config.n_layer && !any; il++)
        any = int8_matvec(&cm->layers[il].qkv, MV_NORM_STORE) || int8_matvec(&cm->layers[il].gate_up, MV_NORM_SWIGLU) ||
              int8_matvec(&cm->layers[il].wo, MV_ADD) || int8_matvec(&cm->layers[il].down, MV_ADD);
    return any;
}

const backend_ops cuda_ops = {
    .name = "CUDA",
    /* step.c's forward pass: the Llama layer with every feature of backend.h: Q/K/V
     * biases (Qwen2), Q/K norms (Qwen3), sliding windows (attention.cuh), and Gemma-3's
     * scaled embeddings, post-norms and GeGLU */
    .features = ER_FEAT_QKV_BIAS | ER_FEAT_QK_NORM | ER_FEAT_POST_NORMS | ER_FEAT_GEGLU | ER_FEAT_SLIDING_WINDOW |
                ER_FEAT_EMBD_SCALE | ER_FEAT_TIED_OUTPUT,
    /* attention*.cu: F32, F16 and Q8_0 caches (K and V of one type, context.c) */
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
    .rounds_activations = rounds_activations,
    .context_create = cuda_context_create,
    .context_free = cuda_context_free,
    .decode = cuda_decode,
    .decode_batch = cuda_decode_batch,
    .seq_copy = cuda_seq_copy,
    .logits_buffer = cuda_logits_buffer,
    .generate_greedy = cuda_generate_greedy,
    .device_bytes_in_use = device_bytes_in_use,
    .copy_bandwidth = copy_bandwidth,
    .profile = cuda_profile,
};
