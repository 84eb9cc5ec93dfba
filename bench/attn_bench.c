/*
 * attn_bench.c - the decode attention kernels alone on the GPU: one layer's step at a
 * context position, timed with CUDA events over many launches, as microseconds per call
 * and the KV cache bytes read per second. Development only (the step's own timing is
 * `edgerunner bench --profile`); values are random, so only the time means anything.
 *
 *   attn_bench N_HEAD N_HEAD_KV HEAD_DIM POS [N_SPLIT]
 *
 * Prints one line for the split decode (cuda_attention_decode_split, N_SPLIT blocks per
 * head, default cuda_attention_split_count) and one for the cluster decode
 * (cuda_attention_decode without wo), both over an F16 cache of POS + 1 rows. Build (after
 * `make CUDA=1`):
 *   gcc -std=c11 -O2 -Iinclude -Isrc -I/usr/local/cuda/include -o build/attn_bench bench/attn_bench.c \
 *       build/libedgerunner.a -lm -lpthread -L/usr/local/cuda/lib64 -lcudart -lstdc++
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"

enum { REPS = 200 };

static void *device_random(size_t bytes) {
    void *d = NULL;
    uint16_t *h = malloc(bytes);
    if (!h || cudaMalloc(&d, bytes) != cudaSuccess) {
        free(h);
        return NULL;
    }
    for (size_t i = 0; i < bytes / 2; i++)
        h[i] = (uint16_t)(0x3000 + rand() % 0x0800); /* F16 values in [0.125, 0.25) */
    cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    free(h);
    return d;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: attn_bench N_HEAD N_HEAD_KV HEAD_DIM POS [N_SPLIT]\n");
        return 2;
    }
    const int n_head = atoi(argv[1]), n_head_kv = atoi(argv[2]), hd = atoi(argv[3]), pos = atoi(argv[4]);
    const int64_t n_ctx = pos + 1, kv_dim = (int64_t)n_head_kv * hd, q_dim = (int64_t)n_head * hd;
    cuda_attn_params p = {.n_head = n_head, .n_head_kv = n_head_kv, .head_dim = hd, .head_dim_v = hd, .n_rot = hd,
                          .rope_neox = 1, .eps = 1e-6f, .n_ctx = n_ctx, .kv_type = CUDA_KV_F16};
    const int n_split = argc > 5 ? atoi(argv[5]) : cuda_attention_split_count(&p);
    const size_t cache_bytes = cuda_kv_layer_bytes(CUDA_KV_F16, n_ctx, kv_dim);
    void *kc = device_random(cache_bytes), *vc = device_random(cache_bytes);
    float *qkv = device_random((size_t)(q_dim + 2 * kv_dim) * 4), *cs = device_random((size_t)n_ctx * hd * 4);
    float *out = NULL, *part = NULL;
    cuda_step_state *state = NULL;
    const cuda_step_state st = {0, 0, pos, 0};
    cudaEvent_t e0, e1;
    if (!kc || !vc || !qkv || !cs || cudaMalloc((void **)&out, (size_t)q_dim * 4) != cudaSuccess ||
        cudaMalloc((void **)&part, (size_t)n_head * 128 * (hd + 2) * 4) != cudaSuccess ||
        cudaMalloc((void **)&state, sizeof st) != cudaSuccess) {
        fprintf(stderr, "attn_bench: out of device memory\n");
        return 1;
    }
    cudaMemcpy(state, &st, sizeof st, cudaMemcpyHostToDevice);
    p.rope_cs = (const float2 *)cs;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const double kv_read = 2.0 * (double)(pos + 1) * (double)kv_dim * 2.0; /* K and V rows 0..pos, F16 */
    for (int split = 1; split >= 0; split--) {
        float ms = 0.0f;
        for (int pass = 0; pass < 2; pass++) { /* the first warms up */
            cudaEventRecord(e0, 0);
            for (int r = 0; r < REPS; r++) {
                const cudaError_t e = split ? cuda_attention_decode_split(&p, qkv, kc, vc, state, part, n_split, out, 0)
                                            : cuda_attention_decode(&p, qkv, kc, vc, state, out, 0);
                if (e != cudaSuccess) {
                    fprintf(stderr, "attn_bench: %s\n", cudaGetErrorString(e));
                    return 1;
                }
            }
            cudaEventRecord(e1, 0);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&ms, e0, e1);
        }
        const double us = 1e3 * ms / REPS;
        printf("%-7s heads %d/%d hd %d pos %6d split %3d: %8.2f us  %7.1f GB/s of KV\n", split ? "split" : "cluster",
               n_head, n_head_kv, hd, pos, split ? n_split : 0, us, kv_read / (us * 1e3));
    }
    return 0;
}
