/*
 * cuda_bench.cuh - what the single-file CUDA benches share (grid_barrier_bench.cu,
 * phase_chain_bench.cu): the error check, launch configurations with programmatic
 * dependent launch or a cooperative grid, and the poll of a grid counter.
 */
#ifndef EDGERUNNER_BENCH_CUDA_BENCH_CUH
#define EDGERUNNER_BENCH_CUDA_BENCH_CUH

#include <stdio.h>

/* main's error check: print the failing call and return 1 */
#define TRY(call)                                                                                                     \
    do {                                                                                                              \
        cudaError_t e_ = (call);                                                                                      \
        if (e_ != cudaSuccess) {                                                                                      \
            fprintf(stderr, "%s: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__);                          \
            return 1;                                                                                                 \
        }                                                                                                             \
    } while (0)

/* A launch of `grid` blocks of `threads` on stream st with the n attributes at a. */
static cudaLaunchConfig_t launch_config(int grid, int threads, size_t smem, cudaStream_t st, cudaLaunchAttribute *a,
                                        int n) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = a;
    cfg.numAttrs = n;
    return cfg;
}

static cudaLaunchAttribute programmatic(void) {
    cudaLaunchAttribute a;
    a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a.val.programmaticStreamSerializationAllowed = 1;
    return a;
}

static cudaLaunchAttribute cooperative(void) {
    cudaLaunchAttribute a;
    a.id = cudaLaunchAttributeCooperative;
    a.val.cooperative = 1;
    return a;
}

/* thread 0 polls (acquire) until the counter that only grows reaches target */
static __device__ __forceinline__ void poll_count(const unsigned *ctr, unsigned target) {
    unsigned now;
    do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(ctr) : "memory");
    } while ((int)(now - target) < 0);
}

#endif
