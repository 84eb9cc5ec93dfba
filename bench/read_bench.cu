// read_bench.cu - how fast this GPU reads a buffer far larger than L2, by the ways a decode
// kernel can stream its weights: 16-byte loads into registers (grid-stride, or each block
// a contiguous slice as a matvec's rows), U loads in flight a thread; and bulk copies into
// a ring of shared memory (cp.async.bulk, one producer lane a block, as the chain kernel
// that the fifty-second session removed), with
// consumer warps that read each stage once from shared memory; and the ring's stages
// issued as several copies (by one lane or several). The ceiling the decode matvecs and
// the chain are measured against (docs/perf-log.md, twenty-first session: 4.5-4.6 TB/s
// every way but stages of 4 KB, 3.3).
// Build and run on the GPU machine:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -o /tmp/rb bench/read_bench.cu && /tmp/rb
#include <cstdio>
#include <cuda_runtime.h>

#include "../src/backend/cuda/sync.cuh"

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

static __device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// grid-stride: U loads of 16 bytes in flight a thread
template <int U>
__global__ void k_ldg(const uint4 *w, size_t n16, unsigned *out) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i + (U - 1) * stride < n16; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int k = 0; k < U; k++) v[k] = ld_stream(w + i + k * stride);
#pragma unroll
        for (int k = 0; k < U; k++) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    }
    if (acc == 0x9e3779b9u) out[0] = acc;
}

// each block a contiguous slice (as a matvec's rows), U loads in flight a thread
template <int U>
__global__ void k_slice(const uint4 *w, size_t n16, unsigned *out) {
    const size_t b0 = n16 * blockIdx.x / gridDim.x, b1 = n16 * (blockIdx.x + 1) / gridDim.x;
    unsigned acc = 0;
    for (size_t i = b0 + threadIdx.x; i + (U - 1) * blockDim.x < b1; i += U * blockDim.x) {
        uint4 v[U];
#pragma unroll
        for (int k = 0; k < U; k++) v[k] = ld_stream(w + i + k * blockDim.x);
#pragma unroll
        for (int k = 0; k < U; k++) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    }
    if (acc == 0x9e3779b9u) out[0] = acc;
}

// a ring of NST stages of STAGE bytes: lane 0 of the last warp copies the block's slice in
// (each stage as K bulk copies; with MULTI, lane k issues copy k), CW consumer warps read
// each stage once (16 bytes a lane at a time) and free it
template <int STAGE, int NST, int CW, int K = 1, bool MULTI = false>
__global__ void __launch_bounds__((CW + 1) * 32, 1) k_ring(const uint8_t *w, size_t bytes, unsigned *out) {
    extern __shared__ __align__(128) uint8_t ring[];
    __shared__ __align__(8) uint64_t full[NST], empty[NST];
    const size_t per = bytes / gridDim.x / STAGE * STAGE;
    const uint8_t *src = w + per * blockIdx.x;
    const unsigned n_st = (unsigned)(per / STAGE);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        for (int s = 0; s < NST; s++) { mbar_init(&full[s], 1); mbar_init(&empty[s], CW); }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (warp == CW) {
        if (MULTI || lane == 0)
            for (unsigned g = 0; g < n_st; g++) {
                const unsigned s = g % NST, use = g / NST;
                if (use > 0) mbar_wait(&empty[s], (use - 1) & 1);
                if (lane == 0) mbar_expect(&full[s], STAGE);
                if (MULTI) __syncwarp();
                for (int k = MULTI ? lane : 0; k < K; k += MULTI ? 32 : 1)
                    bulk_copy(ring + (size_t)s * STAGE + k * (STAGE / K), src + (size_t)g * STAGE + k * (STAGE / K),
                              STAGE / K, &full[s]);
            }
        return;
    }
    unsigned acc = 0;
    for (unsigned g = 0; g < n_st; g++) {
        const unsigned s = g % NST, use = g / NST;
        mbar_wait(&full[s], use & 1);
        const uint4 *st = reinterpret_cast<const uint4 *>(ring + (size_t)s * STAGE);
        for (int i = warp * 32 + lane; i < STAGE / 16; i += CW * 32) {
            const uint4 v = st[i];
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);
    }
    if (acc == 0x9e3779b9u) out[0] = acc;
}

static int sms;

template <typename K, typename... A>
static int time_it(const char *name, K kernel, dim3 grid, dim3 block, size_t smem, size_t bytes, A... args) {
    if (smem > 48 * 1024) CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    float best = 1e30f;
    for (int r = 0; r < 6; r++) {
        CK(cudaEventRecord(a));
        kernel<<<grid, block, smem>>>(args...);
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (r > 0 && ms < best) best = ms;
    }
    CK(cudaGetLastError());
    printf("%-34s %7.1f GB/s\n", name, bytes / (best * 1e-3) / 1e9);
    return 0;
}

int main() {
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const size_t bytes = (size_t)4 << 30;
    uint8_t *w;
    unsigned *out;
    CK(cudaMalloc(&w, bytes));
    CK(cudaMalloc(&out, 64));
    CK(cudaMemset(w, 0x33, bytes));
    const uint4 *w16 = reinterpret_cast<const uint4 *>(w);
    const size_t n16 = bytes / 16;
    char name[64];
    for (int bps = 1; bps <= 4; bps *= 2)
        for (int t = 256; t <= 1024; t *= 2) {
            if (bps * t > 2048) continue;
            snprintf(name, sizeof name, "ldg U4 %dx%d blocks/SM x threads", bps, t);
            if (time_it(name, k_ldg<4>, dim3(sms * bps), dim3(t), 0, bytes, w16, n16, out)) return 1;
            snprintf(name, sizeof name, "ldg U8 %dx%d", bps, t);
            if (time_it(name, k_ldg<8>, dim3(sms * bps), dim3(t), 0, bytes, w16, n16, out)) return 1;
            snprintf(name, sizeof name, "slice U4 %dx%d", bps, t);
            if (time_it(name, k_slice<4>, dim3(sms * bps), dim3(t), 0, bytes, w16, n16, out)) return 1;
            snprintf(name, sizeof name, "slice U8 %dx%d", bps, t);
            if (time_it(name, k_slice<8>, dim3(sms * bps), dim3(t), 0, bytes, w16, n16, out)) return 1;
        }
#define RING(S, N, CW)                                                                                         \
    if (time_it("ring " #S "K x " #N " stages, " #CW " warps", k_ring<S * 1024, N, CW>, dim3(sms),             \
                dim3((CW + 1) * 32), (size_t)S * 1024 * N, bytes, w, bytes, out))                             \
        return 1;
    RING(16, 4, 16) RING(16, 8, 16) RING(16, 12, 16) RING(32, 4, 16) RING(32, 6, 16) RING(64, 3, 16)
    RING(32, 6, 4) RING(8, 24, 16) RING(4, 48, 16)
#define SPLIT(K, M)                                                                                            \
    if (time_it("ring 32K x 6, " #K " copies a stage, multi-lane " #M, k_ring<32 * 1024, 6, 16, K, M>, dim3(sms), dim3(17 * 32), \
                (size_t)32 * 1024 * 6, bytes, w, bytes, out))                                                  \
        return 1;
    SPLIT(2, false) SPLIT(4, false) SPLIT(16, false) SPLIT(4, true) SPLIT(16, true)
    return 0;
}
