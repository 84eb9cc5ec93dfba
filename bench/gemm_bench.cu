/*
 * gemm_bench.cu - times the prefill GEMM (src/backend/cuda/gemm.cu) at several tile
 * sizes on Qwen3-0.6B's four layer matrices (512 tokens), against cuBLAS's F16 GEMM on
 * weights already in F16 (the old path, without its dequantization pass), and checks
 * that every tile size gives the same bits as the default one (the k order of the sums
 * does not depend on the tile). Benchmark only: the product does not link cuBLAS.
 *   nvcc -arch=sm_90 -O3 -std=c++17 -Iinclude -Isrc -o build/gemm_bench bench/gemm_bench.cu -lcublas
 */
#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/gemm.cu"

typedef cudaError_t (*gemm_fn)(const cuda_weight *, const __half *, int, float *, int64_t, int, cudaStream_t);

static const struct {
    const char *name;
    gemm_fn fn;
} variants[] = {
    {"64x64", launch_gemm<64, 64>},   {"32x64", launch_gemm<32, 64>},   {"64x32", launch_gemm<64, 32>},
    {"128x64", launch_gemm<128, 64>}, {"64x128", launch_gemm<64, 128>}, {"128x128", launch_gemm<128, 128>},
    {"32x128", launch_gemm<32, 128>},
};
enum { N_VARIANTS = sizeof variants / sizeof variants[0], REPS = 20 };

static void fill(void *p, size_t bytes, unsigned seed) {
    unsigned char *h = (unsigned char *)malloc(bytes);
    for (size_t i = 0; i < bytes; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = (unsigned char)(seed >> 24);
    }
    cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice);
    free(h);
}

/* halves in [-1, 1]: random bits would give NaNs and infinities */
__global__ void k_halves(__half *p, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = __float2half_rn((float)((i * 2654435761u) % 2001u) / 1000.0f - 1.0f);
}

int main(void) {
    const int T = 512;
    static const int shapes[][2] = {{4096, 1024}, {1024, 2048}, {6144, 1024}, {1024, 3072}}; /* qkv wo gate|up down */
    static const int types[] = {CUDA_W_Q8_0, CUDA_W_Q4_0};
    cublasHandle_t blas;
    cudaEvent_t e0, e1;
    cublasCreate(&blas);
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double layer_us[2][N_VARIANTS + 1] = {{0}};
    for (int ti = 0; ti < 2; ti++) {
        for (int s = 0; s < 4; s++) {
            const int N = shapes[s][0], K = shapes[s][1], wt = types[ti];
            cuda_weight w = {wt, K, N, NULL, NULL};
            __half *x, *wf16;
            float *y, *y_ref;
            cudaMalloc(&w.w, cuda_row_bytes(wt, K) * N);
            cudaMalloc(&w.d, (size_t)N * (K / 32) * 2);
            cudaMalloc((void **)&x, (size_t)T * K * 2);
            cudaMalloc((void **)&wf16, (size_t)N * K * 2);
            cudaMalloc((void **)&y, (size_t)T * N * 4);
            cudaMalloc((void **)&y_ref, (size_t)T * N * 4);
            fill(w.w, cuda_row_bytes(wt, K) * N, 1);
            k_halves<<<(unsigned)(((size_t)N * K / 32 + 255) / 256), 256>>>((__half *)w.d, (size_t)N * K / 32);
            k_halves<<<(unsigned)(((size_t)T * K + 255) / 256), 256>>>(x, (size_t)T * K);
            k_halves<<<(unsigned)(((size_t)N * K + 255) / 256), 256>>>(wf16, (size_t)N * K);
            const double flop = 2.0 * T * N * K;
            printf("%s %5d x %4d (512 tokens):", wt == CUDA_W_Q8_0 ? "Q8_0" : "Q4_0", N, K);
            for (int v = 0; v <= N_VARIANTS; v++) {
                float ms = 0.0f;
                for (int r = -3; r < REPS; r++) {
                    if (r == 0)
                        cudaEventRecord(e0);
                    if (v < N_VARIANTS) {
                        variants[v].fn(&w, x, T, v == 0 ? y_ref : y, N, 0, 0);
                    } else {
                        const float one = 1.0f, zero = 0.0f;
                        cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &one, wf16, CUDA_R_16F, K, x, CUDA_R_16F,
                                     K, &zero, y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
                    }
                }
                cudaEventRecord(e1);
                cudaEventSynchronize(e1);
                cudaEventElapsedTime(&ms, e0, e1);
                const double us = 1000.0 * ms / REPS;
                layer_us[ti][v] += us;
                int same = 1;
                if (v > 0 && v < N_VARIANTS) {
                    float *a = (float *)malloc((size_t)T * N * 4), *b = (float *)malloc((size_t)T * N * 4);
                    cudaMemcpy(a, y_ref, (size_t)T * N * 4, cudaMemcpyDeviceToHost);
                    cudaMemcpy(b, y, (size_t)T * N * 4, cudaMemcpyDeviceToHost);
                    same = memcmp(a, b, (size_t)T * N * 4) == 0;
                    free(a);
                    free(b);
                }
                printf("  %s %.1f us %.0f TF%s", v < N_VARIANTS ? variants[v].name : "cublas", us, flop / us * 1e-6,
                       same ? "" : " DIFFERS");
            }
            printf("  [%s]\n", cudaGetErrorString(cudaGetLastError()));
            cudaFree(w.w);
            cudaFree(w.d);
            cudaFree(x);
            cudaFree(wf16);
            cudaFree(y);
            cudaFree(y_ref);
        }
        printf("%s per layer (4 matrices):", types[ti] == CUDA_W_Q8_0 ? "Q8_0" : "Q4_0");
        for (int v = 0; v <= N_VARIANTS; v++)
            printf("  %s %.1f us", v < N_VARIANTS ? variants[v].name : "cublas", layer_us[ti][v]);
        printf("\n");
    }
    cublasDestroy(blas);
    return 0;
}
