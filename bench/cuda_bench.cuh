/*
 * cuda_bench.cuh - what the single-file CUDA benches share (grid_barrier_bench.cu,
 * phase_chain_bench.cu): the error check, launch configurations with programmatic
 * dependent launch or a cooperative grid, and a captured graph's timing. The grid
 * counter's poll and the mbarriers are src/backend/cuda/sync.cuh's, as the engine's.
 */
#ifndef EDGERUNNER_BENCH_CUDA_BENCH_CUH
#define EDGERUNNER_BENCH_CUDA_BENCH_CUH

#include <stdio.h>

#include "../src/backend/cuda/sync.cuh" /* poll_count, the mbarriers */

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

/* g instantiated, launched once to warm up, then reps times on st between e0 and e1:
 * their milliseconds in *ms. 0, or 1 after printing the failing call. */
static int time_graph(cudaGraph_t g, cudaStream_t st, int reps, cudaEvent_t e0, cudaEvent_t e1, float *ms) {
    cudaGraphExec_t ge;
    TRY(cudaGraphInstantiate(&ge, g, 0));
    TRY(cudaGraphLaunch(ge, st));
    TRY(cudaEventRecord(e0, st));
    for (int r = 0; r < reps; r++)
        TRY(cudaGraphLaunch(ge, st));
    TRY(cudaEventRecord(e1, st));
    TRY(cudaEventSynchronize(e1));
    TRY(cudaEventElapsedTime(ms, e0, e1));
    cudaGraphExecDestroy(ge);
    return 0;
}

static cudaLaunchAttribute cooperative(void) {
    cudaLaunchAttribute a;
    a.id = cudaLaunchAttributeCooperative;
    a.val.cooperative = 1;
    return a;
}

#endif
