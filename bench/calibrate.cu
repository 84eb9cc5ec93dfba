// calibrate.cu - floors of this GPU for the decode step's shape, to read the profile
// against: the cost of a launch inside a graph (with and without programmatic dependent
// launch), of a matvec-shaped kernel that does almost nothing (512 blocks of 256 threads
// staging a 4 KB vector), of streaming 4.5 MB with 16-byte loads, and the copy bandwidth.
// Build and run on the GPU machine: nvcc -arch=sm_90 -O3 -o /tmp/cal bench/calibrate.cu && /tmp/cal
#include <cstdio>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

__global__ void k_empty(int pdl) {
    if (pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
    if (pdl) asm volatile("griddepcontrol.launch_dependents;");
}

__global__ void k_stage(const float *x, float *y, int pdl) {
    __shared__ float xs[1024];
    __shared__ float red[8];
    if (pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
    if (pdl) asm volatile("griddepcontrol.launch_dependents;");
    float ss = 0;
    for (int i = threadIdx.x; i < 1024; i += 256) { xs[i] = x[i]; ss += x[i] * x[i]; }
    for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(~0u, ss, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x == 0) { float t = 0; for (int i = 0; i < 8; i++) t += red[i]; y[blockIdx.x] = t + xs[5]; }
}

__global__ void k_stream(const uint4 *w, int n16, float *y, int pdl) {
    uint4 v = make_uint4(0, 0, 0, 0);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n16) v = __ldg(w + i);
    if (pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
    if (pdl) asm volatile("griddepcontrol.launch_dependents;");
    float s = (float)(v.x ^ v.y ^ v.z ^ v.w);
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(~0u, s, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(y, s);
}

template <typename F>
static float graph_us(cudaStream_t st, int n, F launch) {
    cudaGraph_t g; cudaGraphExec_t ge; cudaEvent_t a, b;
    cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
    for (int i = 0; i < n; i++) launch(i);
    cudaStreamEndCapture(st, &g);
    cudaGraphInstantiate(&ge, g, 0);
    cudaEventCreate(&a); cudaEventCreate(&b);
    for (int w = 0; w < 3; w++) cudaGraphLaunch(ge, st);
    cudaEventRecord(a, st);
    for (int r = 0; r < 20; r++) cudaGraphLaunch(ge, st);
    cudaEventRecord(b, st);
    cudaStreamSynchronize(st);
    float ms; cudaEventElapsedTime(&ms, a, b);
    return 1e3f * ms / 20 / n;
}

int main() {
    cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    float *x, *y; uint4 *w; const int nw = 4500000 / 16 * 8; // 8 different 4.5 MB slices: 36 MB, past the L2
    CK(cudaMalloc(&x, 4096)); CK(cudaMalloc(&y, 1 << 20)); CK(cudaMalloc(&w, (size_t)nw * 16));
    CK(cudaMemset(x, 0, 4096)); CK(cudaMemset(w, 1, (size_t)nw * 16));
    cudaLaunchAttribute at; at.id = cudaLaunchAttributeProgrammaticStreamSerialization; at.val.programmaticStreamSerializationAllowed = 1;
    for (int pdl = 0; pdl < 2; pdl++) {
        auto cfg = [&](int grid, int block) { cudaLaunchConfig_t c = {}; c.gridDim = grid; c.blockDim = block; c.stream = st; c.attrs = pdl ? &at : nullptr; c.numAttrs = pdl; return c; };
        float e = graph_us(st, 140, [&](int) { auto c = cfg(1, 32); cudaLaunchKernelEx(&c, k_empty, pdl); });
        float s = graph_us(st, 140, [&](int) { auto c = cfg(512, 256); cudaLaunchKernelEx(&c, k_stage, (const float *)x, y, pdl); });
        const int n16 = 4500000 / 16;
        float m = graph_us(st, 140, [&](int i) { auto c = cfg((n16 + 255) / 256, 256); cudaLaunchKernelEx(&c, k_stream, (const uint4 *)(w + (size_t)(i % 8) * n16), n16, y, pdl); });
        printf("pdl=%d  empty kernel %.2f us | stage-4KB 512x256 %.2f us | stream 4.5 MB %.2f us (%.0f GB/s)\n", pdl, e, s, m, 4.5e6 / (m * 1e3));
    }
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    void *src, *dst; size_t n = 1ull << 30; CK(cudaMalloc(&src, n)); CK(cudaMalloc(&dst, n));
    cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice);
    cudaEventRecord(a); for (int i = 0; i < 5; i++) cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice); cudaEventRecord(b); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b);
    printf("copy 1 GiB: %.0f GB/s (read + write)\n", 2.0 * 5 * n / (ms * 1e6));
    return 0;
}
