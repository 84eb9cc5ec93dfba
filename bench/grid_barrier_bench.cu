/*
 * grid_barrier_bench.cu - what a step loses between two dependent matvecs: a kernel
 * boundary (programmatic dependent launch, in a CUDA graph, as the decode step runs)
 * against a grid barrier inside one resident (cooperative) kernel. Each of P phases
 * streams B bytes of its own (every block a grid-strided share, 8 16-byte loads a thread
 * in flight, as the streaming matvec); the table gives microseconds a phase:
 *
 *   kernels     P kernels, each waiting for the previous (griddepcontrol) and launching
 *               the next early, captured in a graph; 120 KB of shared memory a block, so
 *               that the next kernel's block cannot start beside this one (the streaming
 *               matvec's registers fill the multiprocessor)
 *   kernels2    the same, without the shared memory: the next kernel's blocks resident early
 *   gen         one kernel, a barrier between phases: arrivals and a generation in one
 *               word (the barrier of the FFN chain kernel, removed in 39130d9)
 *   count       one kernel, a barrier on a counter that only grows (one atomic a block,
 *               release/acquire)
 *   count+pre   as count, each thread's first loads of the next phase issued before the
 *               barrier (weights do not depend on the previous phase)
 *   none        one kernel, no barrier at all: the streaming floor
 *
 * Build: nvcc -O3 -arch=sm_90 -o grid_barrier_bench bench/grid_barrier_bench.cu
 * Usage: grid_barrier_bench   (a markdown table on stdout)
 */
#include <stdint.h>
#include <stdio.h>

#include "cuda_bench.cuh"

#define THREADS 512
#define U 8 /* 16-byte loads in flight a thread */

static __device__ __forceinline__ unsigned fold(uint4 v) { return v.x + v.y + v.z + v.w; }

/* this thread's share of n16 16-byte units at w, from unit i0 on (the first U loads
 * already in pre where have_pre) */
static __device__ __forceinline__ unsigned stream_share(const uint4 *__restrict__ w, size_t n16, size_t i0,
                                                        size_t stride, const uint4 *pre, bool have_pre) {
    unsigned acc = 0;
    size_t i = i0;
    if (have_pre) {
#pragma unroll
        for (int u = 0; u < U; u++)
            acc ^= fold(pre[u]);
        i += U * stride;
    }
    for (; i + (U - 1) * stride < n16; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            v[u] = __ldg(w + i + u * stride);
#pragma unroll
        for (int u = 0; u < U; u++)
            acc ^= fold(v[u]);
    }
    for (; i < n16; i += stride)
        acc ^= fold(__ldg(w + i));
    return acc;
}

__global__ void __launch_bounds__(THREADS, 1) k_phase(const uint4 *__restrict__ w, size_t n16, unsigned *out) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
    const size_t stride = (size_t)gridDim.x * THREADS;
    const unsigned acc = stream_share(w, n16, (size_t)blockIdx.x * THREADS + threadIdx.x, stride, nullptr, false);
    if (acc == 0x9e3779b9u) /* never: keeps the loads */
        out[blockIdx.x] = acc;
}

static __device__ __forceinline__ void barrier_gen(unsigned *bar) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        const unsigned old = atomicAdd(bar, 1u);
        if ((old & 0xffffu) == gridDim.x - 1) {
            atomicAdd(bar, 0x10000u - gridDim.x);
        } else {
            unsigned now;
            do {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(bar) : "memory");
            } while ((now >> 16) == (old >> 16));
        }
        __threadfence();
    }
    __syncthreads();
}

/* barrier number k (from 1) of this launch: the counter reaches k * gridDim.x */
static __device__ __forceinline__ void barrier_count(unsigned *bar, unsigned k) {
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(bar) : "memory");
        poll_count(bar, k * gridDim.x);
    }
    __syncthreads();
}

/* MODE 0 gen, 1 count, 2 count+pre, 3 none; bar: zero at launch (MODE 1, 2) */
template <int MODE>
__global__ void __launch_bounds__(THREADS, 1)
k_persist(const uint4 *__restrict__ w, size_t n16, int n_phase, unsigned *bar, unsigned *out) {
    const size_t stride = (size_t)gridDim.x * THREADS, i0 = (size_t)blockIdx.x * THREADS + threadIdx.x;
    uint4 pre[U];
    bool have_pre = false;
    unsigned acc = 0;
    for (int p = 0; p < n_phase; p++) {
        const uint4 *wp = w + (size_t)p * n16;
        acc ^= stream_share(wp, n16, i0, stride, pre, have_pre);
        if (p + 1 == n_phase)
            break;
        have_pre = MODE == 2 && i0 + (U - 1) * stride < n16;
        if (have_pre) {
#pragma unroll
            for (int u = 0; u < U; u++)
                pre[u] = __ldg(wp + n16 + i0 + u * stride);
        }
        if (MODE == 0)
            barrier_gen(bar);
        else if (MODE != 3)
            barrier_count(bar, (unsigned)p + 1);
    }
    if (acc == 0x9e3779b9u)
        out[blockIdx.x] = acc;
}

int main(void) {
    const size_t max_bytes = (size_t)2 << 30;
    uint4 *w = nullptr;
    unsigned *bar = nullptr, *out = nullptr;
    int n_sm = 0;
    TRY(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0));
    TRY(cudaMalloc(&w, max_bytes));
    TRY(cudaMemset(w, 1, max_bytes));
    TRY(cudaMalloc(&bar, sizeof(unsigned)));
    TRY(cudaMalloc(&out, n_sm * sizeof(unsigned)));
    TRY(cudaMemset(bar, 0, sizeof(unsigned)));
    cudaStream_t st;
    TRY(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    TRY(cudaEventCreate(&e0));
    TRY(cudaEventCreate(&e1));
    const int grid = n_sm; /* one block of 512 threads per multiprocessor, as the streaming matvec */

    /* does the runtime take a cooperative launch that is also a programmatic one? */
    {
        cudaLaunchAttribute a[2] = {programmatic(), cooperative()};
        const cudaLaunchConfig_t cfg = launch_config(grid, THREADS, 0, st, a, 2);
        TRY(cudaMemsetAsync(bar, 0, sizeof(unsigned), st));
        cudaError_t e = cudaLaunchKernelEx(&cfg, k_persist<1>, (const uint4 *)w, (size_t)4096, 4, bar, out);
        printf("cooperative + programmatic launch: %s\n", cudaGetErrorString(e));
        (void)cudaGetLastError();
        TRY(cudaStreamSynchronize(st));
        /* and captured into a graph */
        cudaGraph_t g;
        cudaGraphExec_t ge;
        TRY(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        e = cudaLaunchKernelEx(&cfg, k_persist<1>, (const uint4 *)w, (size_t)4096, 4, bar, out);
        cudaError_t e2 = cudaStreamEndCapture(st, &g);
        printf("  captured in a graph: launch %s, capture %s", cudaGetErrorString(e), cudaGetErrorString(e2));
        if (e2 == cudaSuccess) {
            e2 = cudaGraphInstantiate(&ge, g, 0);
            printf(", instantiate %s", cudaGetErrorString(e2));
            if (e2 == cudaSuccess)
                cudaGraphExecDestroy(ge);
            cudaGraphDestroy(g);
        }
        printf("\n");
        (void)cudaGetLastError();
    }

    printf("| bytes a phase | phases | kernels | kernels2 | gen | count | count+pre | none | floor (bytes / 4.2 TB/s) |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    const size_t big_smem = 120 << 10;
    TRY(cudaFuncSetAttribute(k_phase, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)big_smem));
    const size_t sizes[] = {0, (size_t)2 << 20, (size_t)8 << 20, (size_t)17 << 20, (size_t)54 << 20,
                            (size_t)107 << 20};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const size_t bytes = sizes[si], n16 = bytes / 16;
        int n_phase = bytes ? (int)(((size_t)512 << 20) / bytes) : 256; /* 512 MB a pass: past L2 */
        n_phase = n_phase < 16 ? 16 : n_phase > 256 ? 256 : n_phase;
        const int reps = 5;
        float ms[6];
        /* kernels: a graph of n_phase launches */
        for (int k = 0; k < 2; k++) {
            cudaGraph_t g;
            cudaLaunchAttribute a = programmatic();
            const cudaLaunchConfig_t cfg = launch_config(grid, THREADS, k == 0 ? big_smem : 0, st, &a, 1);
            TRY(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            for (int p = 0; p < n_phase; p++)
                TRY(cudaLaunchKernelEx(&cfg, k_phase, (const uint4 *)(w + (size_t)p * n16), n16, out));
            TRY(cudaStreamEndCapture(st, &g));
            if (time_graph(g, st, reps, e0, e1, &ms[k]))
                return 1;
            cudaGraphDestroy(g);
        }
        for (int m = 0; m < 4; m++) {
            void (*fn)(const uint4 *, size_t, int, unsigned *, unsigned *) =
                m == 0 ? k_persist<0> : m == 1 ? k_persist<1> : m == 2 ? k_persist<2> : k_persist<3>;
            cudaLaunchAttribute a = cooperative();
            const cudaLaunchConfig_t cfg = launch_config(grid, THREADS, 0, st, &a, 1);
            float t = 0.0f;
            for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
                TRY(cudaMemsetAsync(bar, 0, sizeof(unsigned), st));
                TRY(cudaEventRecord(e0, st));
                TRY(cudaLaunchKernelEx(&cfg, fn, (const uint4 *)w, n16, n_phase, bar, out));
                TRY(cudaEventRecord(e1, st));
                TRY(cudaEventSynchronize(e1));
                float x;
                TRY(cudaEventElapsedTime(&x, e0, e1));
                if (r >= 0)
                    t += x;
            }
            ms[2 + m] = t;
        }
        printf("| %zu | %d", bytes, n_phase);
        for (int m = 0; m < 6; m++)
            printf(" | %.2f", 1e3 * ms[m] / reps / n_phase);
        printf(" | %.2f |\n", bytes / 4.2e6);
    }
    return 0;
}
