/*
 * gpu_matvec_bench.c - the decode matvecs of a whole model's layers alone on the GPU, at
 * its real shapes: per layer qkv (RMSNorm in), wo (residual add), gate|up (RMSNorm,
 * SwiGLU) and down (residual add), each layer with weights of its own so that nothing
 * is served from L2, in captured graphs (programmatic dependent launch between the
 * kernels, as in the decode step). Development only (the step's own timing is
 * `edgerunner bench --profile`); weights and inputs are constant bytes, so only the time
 * means anything.
 *
 *   gpu_matvec_bench TYPE N_EMBD N_FF Q_DIM KV_DIM N_LAYER [T]
 *   e.g. Qwen3-8B: gpu_matvec_bench Q8_0 4096 12288 4096 1024 36
 * With T (tokens), the same matrices through the batch GEMM (cuda_gemm_batch, the
 * decode_batch path: its shares of K and their sums included) on T tokens of F16 input,
 * without the norm or activation kernels around them; with GEMM=prefill in the
 * environment, through the prefill's GEMM (cuda_gemm) instead, with TFLOP/s.
 *
 * Prints one line per matrix (its N_LAYER launches in one graph: microseconds a launch,
 * weight bytes read per second) and one for the four in sequence. With ATTN_POS=P in the
 * environment, the decode attention (cuda_attention_decode, the cluster kernel; F16
 * caches of P + 1 rows a layer, heads of HEAD_DIM, default 128, Q/K norms) runs between
 * qkv and wo in the layer, as in the decode step, and one more line times it alone
 * (bytes: the K and V rows it reads). Gate|up hands down its output quantized where
 * cuda_matvec_q8_handoff allows (MV_NORM_SWIGLU_Q8, MV_ADD_Q8), as in the step; Q8=0 or 1
 * in the environment overrides the step's choice; STREAM=1 streams every matrix. Build
 * (after `make CUDA=1`):
 *   gcc -std=c11 -O2 -Iinclude -Isrc -I/usr/local/cuda/include -o build/gpu_matvec_bench \
 *       bench/gpu_matvec_bench.c build/libedgerunner.a -lm -lpthread -L/usr/local/cuda/lib64 -lcudart -lstdc++
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"

enum { REPS = 20, N_MAT = 4 };

static const char *const mat_names[N_MAT] = {"qkv", "wo", "gate_up", "down"};

/* The name of output line m (main's loop) */
static const char *line_name(int m) {
    return m < N_MAT ? mat_names[m] : m == N_MAT ? "layer" : "attn";
}

/* One matrix of type t, (n_out, n_in), its bytes set to constants: Q8_0 quants 51,
 * scales 0x2020 (~0.008). */
static int make_weight(cuda_weight *w, int t, int64_t n_out, int64_t n_in) {
    *w = (cuda_weight){.type = t, .n_in = n_in, .n_out = n_out};
    const size_t wb = (size_t)n_out * cuda_row_bytes(t, n_in), db = (size_t)n_out * cuda_scale_row_bytes(t, n_in);
    if (cudaMalloc(&w->w, wb) != cudaSuccess || cudaMemset(w->w, 0x33, wb) != cudaSuccess)
        return -1;
    if (db && (cudaMalloc(&w->d, db) != cudaSuccess || cudaMemset(w->d, 0x20, db) != cudaSuccess))
        return -1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: gpu_matvec_bench TYPE N_EMBD N_FF Q_DIM KV_DIM N_LAYER [T]\n");
        return 2;
    }
    int t = -1;
    for (int i = 0; i < CUDA_W_COUNT; i++)
        if (strcasecmp(argv[1], cuda_wtype_name(i)) == 0)
            t = i;
    const int64_t n_embd = atoll(argv[2]), n_ff = atoll(argv[3]), q_dim = atoll(argv[4]), kv_dim = atoll(argv[5]);
    const int n_layer = atoi(argv[6]), T = argc > 7 ? atoi(argv[7]) : 0;
    if (T < 0 || t < 0 || n_embd <= 0 || n_ff <= 0 || q_dim <= 0 || kv_dim <= 0 || n_layer <= 0) {
        fprintf(stderr, "gpu_matvec_bench: bad arguments\n");
        return 2;
    }
    const int64_t shape[N_MAT][2] = {{q_dim + 2 * kv_dim, n_embd}, {n_embd, q_dim}, {2 * n_ff, n_embd}, {n_embd, n_ff}};
    int mode[N_MAT] = {MV_NORM_STORE, MV_ADD, MV_NORM_SWIGLU, MV_ADD};
    cuda_weight *w = calloc((size_t)n_layer * N_MAT, sizeof *w); /* (n_layer, N_MAT) */
    float *x = NULL, *nw = NULL, *qkv = NULL, *ff = NULL;   /* (n_embd), (max n_embd n_ff), (q_dim + 2 kv_dim), (n_ff) */
    const int64_t n_max = n_ff > n_embd ? n_ff : n_embd;
    const char *gemm_env = getenv("GEMM");
    const int prefill = gemm_env && !strcmp(gemm_env, "prefill");
    if (!w || cudaMalloc((void **)&x, (size_t)n_embd * 4) != cudaSuccess ||
        cudaMalloc((void **)&nw, (size_t)n_max * 4) != cudaSuccess ||
        cudaMalloc((void **)&qkv, (size_t)shape[0][0] * 4) != cudaSuccess ||
        cudaMalloc((void **)&ff, (size_t)n_ff * 4) != cudaSuccess) {
        fprintf(stderr, "gpu_matvec_bench: out of memory\n");
        return 1;
    }
    cudaMemset(x, 0, (size_t)n_embd * 4);
    cudaMemset(nw, 0, (size_t)n_max * 4);
    cudaMemset(qkv, 0, (size_t)shape[0][0] * 4);
    cudaMemset(ff, 0, (size_t)n_ff * 4);
    /* T > 0: xh (T, max n_in) F16, y (T, max n_out) f32, gs: the shares of K and the
     * quantized inputs */
    uint16_t *xh = NULL;
    float *y = NULL;
    cuda_gemm_scratch gs = {0};
    if (T > 0) {
        int64_t out_max = 0;
        for (int m = 0; m < N_MAT; m++) {
            const cuda_weight probe = {.type = t, .n_in = shape[m][1], .n_out = shape[m][0]};
            const size_t f = (size_t)cuda_gemm_split_count(&probe) * (size_t)shape[m][0] * (size_t)T;
            gs.part_floats = f > gs.part_floats ? f : gs.part_floats;
            out_max = shape[m][0] > out_max ? shape[m][0] : out_max;
        }
        if (cudaMalloc((void **)&xh, (size_t)T * (size_t)n_max * 2) != cudaSuccess ||
            cudaMalloc((void **)&y, (size_t)T * (size_t)out_max * 4) != cudaSuccess ||
            cudaMalloc((void **)&gs.part, gs.part_floats * 4) != cudaSuccess ||
            cudaMalloc(&gs.xq, gs.xq_bytes = cuda_gemm_xq_bytes(T, n_max)) != cudaSuccess) {
            fprintf(stderr, "gpu_matvec_bench: out of memory\n");
            return 1;
        }
        cudaMemset(xh, 0x30, (size_t)T * (size_t)n_max * 2); /* 0x3030: ~0.13 */
    }
    for (int l = 0; l < n_layer; l++)
        for (int m = 0; m < N_MAT; m++)
            if (make_weight(&w[l * N_MAT + m], t, shape[m][0], shape[m][1]) != 0) {
                fprintf(stderr, "gpu_matvec_bench: out of device memory at layer %d\n", l);
                return 1;
            }
    /* STREAM=1: every matrix streams (through k_matvec_ring where it takes it), not only
     * those too large for one slice a multiprocessor */
    const char *stream_env = getenv("STREAM");
    cuda_matvec_set_stream_min(stream_env && atoi(stream_env) != 0 ? 1 : 0);
    const char *q8_env = getenv("Q8");
    /* unset: the library's own choice, as the step's (EDGERUNNER_CUDA_Q8_HANDOFF, on by default) */
    cuda_matvec_set_q8_handoff(T > 0 ? 0 : q8_env ? atoi(q8_env) != 0 : -1);
    if (cuda_matvec_q8_handoff(&w[2], &w[3])) {
        mode[2] = MV_NORM_SWIGLU_Q8;
        mode[3] = MV_ADD_Q8;
        fprintf(stderr, "gpu_matvec_bench: gate|up hands down its output quantized\n");
    }
    cudaStream_t st;
    cudaEvent_t e0, e1;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double layer_bytes = 0.0;
    for (int m = 0; m < N_MAT; m++)
        layer_bytes += (double)cuda_matrix_bytes(t, shape[m][0], shape[m][1]);
    /* ATTN_POS: the attention's caches (n_layer) of pos + 1 rows, its state (pos), its
     * output att (q_dim), which wo then reads; RoPE angles (pos + 1, hd / 2) and norm
     * weights: zeros, only the time means anything */
    const char *attn_env = getenv("ATTN_POS"), *hd_env = getenv("HEAD_DIM");
    const int attn = attn_env && *attn_env, pos = attn ? atoi(attn_env) : 0, hd = hd_env ? atoi(hd_env) : 128;
    void **kc = calloc((size_t)n_layer, sizeof *kc), **vc = calloc((size_t)n_layer, sizeof *vc);
    float *att = NULL;
    cuda_step_state *astate = NULL;
    cuda_attn_params ap = {0};
    if (attn) {
        const cuda_step_state as = {.pos = pos};
        const size_t cache_bytes = cuda_kv_layer_bytes(CUDA_KV_F16, pos + 1, kv_dim);
        float2 *cs = NULL;
        int ok = kc && vc && pos >= 0 && hd > 0 && q_dim % hd == 0 && kv_dim % hd == 0 && hd <= n_max &&
                 cudaMalloc((void **)&att, (size_t)q_dim * 4) == cudaSuccess &&
                 cudaMemset(att, 0, (size_t)q_dim * 4) == cudaSuccess &&
                 cudaMalloc((void **)&astate, sizeof as) == cudaSuccess &&
                 cudaMemcpy(astate, &as, sizeof as, cudaMemcpyHostToDevice) == cudaSuccess &&
                 cudaMalloc((void **)&cs, (size_t)(pos + 1) * (size_t)hd / 2 * sizeof *cs) == cudaSuccess &&
                 cudaMemset(cs, 0, (size_t)(pos + 1) * (size_t)hd / 2 * sizeof *cs) == cudaSuccess;
        for (int l = 0; l < n_layer && ok; l++) /* 0x3c00: F16 1.0 */
            ok = cudaMalloc(&kc[l], cache_bytes) == cudaSuccess && cudaMalloc(&vc[l], cache_bytes) == cudaSuccess &&
                 cudaMemset(kc[l], 0x3c, cache_bytes) == cudaSuccess && cudaMemset(vc[l], 0x3c, cache_bytes) == cudaSuccess;
        if (!ok) {
            fprintf(stderr, "gpu_matvec_bench: bad ATTN_POS / HEAD_DIM, or out of memory\n");
            return 1;
        }
        ap = (cuda_attn_params){.n_head = (int)(q_dim / hd), .n_head_kv = (int)(kv_dim / hd), .head_dim = hd,
                                .head_dim_v = hd, .n_rot = hd, .rope_neox = 1, .eps = 1e-6f, .q_norm = nw,
                                .k_norm = nw, .rope_cs = cs, .n_ctx = pos + 1, .kv_type = CUDA_KV_F16};
    }
    float *wo_in = attn ? att : qkv; /* what wo reads */
    /* m < N_MAT: that matrix of every layer; m == N_MAT: the four in order; m == N_MAT + 1:
     * the attention alone (ATTN_POS) */
    for (int m = 0; m <= N_MAT + 1; m++) {
        if (m == N_MAT + 1 && (T > 0 || !attn))
            continue;
        cudaGraph_t g;
        cudaGraphExec_t ge;
        cudaError_t e = cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
        for (int l = 0; l < n_layer && e == cudaSuccess && m == N_MAT + 1; l++)
            e = cuda_attention_decode(&ap, qkv, kc[l], vc[l], astate, att, st);
        for (int l = 0; l < n_layer && e == cudaSuccess && m <= N_MAT; l++)
            for (int k = (m < N_MAT ? m : 0); k <= (m < N_MAT ? m : N_MAT - 1) && e == cudaSuccess; k++) {
                const float *in = k == 1 ? wo_in : k == 3 ? ff : x;
                float *out = k == 0 ? qkv : k == 2 ? ff : x;
                if (k == 1 && m == N_MAT && attn) /* the layer: the attention between qkv and wo */
                    e = cuda_attention_decode(&ap, qkv, kc[l], vc[l], astate, att, st);
                if (e != cudaSuccess)
                    break;
                e = T > 0 && prefill ? cuda_gemm(&w[l * N_MAT + k], xh, T, y, shape[k][0], k == 1 || k == 3, st)
                    : T > 0          ? cuda_gemm_batch(&w[l * N_MAT + k], xh, T, y, shape[k][0], k == 1 || k == 3, &gs, st)
                                     : cuda_matvec(&w[l * N_MAT + k], mode[k], in, nw, 1e-6f, out, NULL, st);
            }
        const cudaError_t ec = cudaStreamEndCapture(st, &g);
        e = e != cudaSuccess ? e : ec;
        if (e == cudaSuccess)
            e = cudaGraphInstantiate(&ge, g, 0);
        if (e != cudaSuccess) {
            fprintf(stderr, "gpu_matvec_bench: %s: %s\n", line_name(m), cudaGetErrorString(e));
            return 1;
        }
        float ms = 0.0f;
        for (int pass = 0; pass < 2; pass++) { /* the first warms up */
            cudaEventRecord(e0, st);
            for (int r = 0; r < REPS; r++)
                cudaGraphLaunch(ge, st);
            cudaEventRecord(e1, st);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&ms, e0, e1);
        }
        e = cudaGetLastError();
        if (e != cudaSuccess) {
            fprintf(stderr, "gpu_matvec_bench: %s\n", cudaGetErrorString(e));
            return 1;
        }
        const double us = 1e3 * ms / REPS / n_layer; /* per launch, or per layer */
        const double bytes = m < N_MAT       ? (double)cuda_matrix_bytes(t, shape[m][0], shape[m][1])
                             : m == N_MAT + 1 ? 2.0 * (pos + 1) * (double)kv_dim * 2.0 /* K and V rows, F16 */
                                              : layer_bytes;
        double flops = 0.0; /* 2 T n_out n_in */
        for (int k = (m < N_MAT ? m : 0); k <= (m < N_MAT ? m : N_MAT - 1) && m <= N_MAT; k++)
            flops += 2.0 * T * (double)shape[k][0] * (double)shape[k][1];
        printf("%s T=%d %5lldx%-5lld %-8s %8.2f us  %7.1f GB/s  %6.1f TFLOP/s\n", cuda_wtype_name(t), T,
               (long long)(m < N_MAT ? shape[m][0] : 0), (long long)(m < N_MAT ? shape[m][1] : 0),
               line_name(m), us, bytes / (us * 1e3), flops / (us * 1e6));
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
    }
    return 0;
}
