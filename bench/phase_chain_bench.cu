/*
 * phase_chain_bench.cu - what a Qwen3 layer's four matvecs could cost as a chain of
 * dependent phases, by how each phase gets its weights and its input. A phase is an int8
 * matvec: out[r] = clamp(dot(W[r], in) >> 12) for the rows of one matrix, in = the first
 * k entries of the previous phase's out (a real dependency: no phase can start its dots
 * before the previous one has finished). The weights are plain int8 (no scales) at the
 * shapes of Qwen3-0.6B (qkv 4,096 x 1,024, wo 1,024 x 2,048, gate|up 6,144 x 1,024, down
 * 1,024 x 3,072; 28 layers of their own: 440 MB, past L2) or of Qwen3-8B (6,144 x 4,096,
 * 4,096 x 4,096, 24,576 x 4,096, 4,096 x 12,288; 36 layers: 6.9 GB). Each block takes a
 * contiguous slice of rows, one block per multiprocessor (132 on the H200). Columns, us
 * a layer (a mode whose shared memory the shapes would pass is left out, "-"):
 *
 *   kernels      one kernel a phase in a graph, programmatic dependent launch (as the
 *                decode step runs): wait, stage the input, read the slice from global
 *   kernels+copy as kernels, but the slice goes into shared memory by cp.async *before*
 *                the wait; the blocks are small enough (256 or 512 threads, <= 52 KB) for
 *                the next kernels' blocks to become resident early and copy then
 *   copy, heavy  kernels+copy 512, but qkv and gate|up ask for 180 KB of shared memory, so
 *                that no block of a neighbouring phase fits beside theirs (as the 0.6B step
 *                today, whose qkv and gate|up stream and fill the register file)
 *   persist      one cooperative kernel, a counter barrier between phases, the slice read
 *                from global after the barrier
 *   persist+copy as persist, the next phase's slice copied into the other of two shared
 *                buffers while this phase waits and computes
 *   ring         one cooperative kernel, a counter barrier between phases; a producer
 *                warp streams the block's slices of every phase, one after another,
 *                through a ring of RING_STAGES stages in shared memory (cp.async.bulk,
 *                mbarriers), so the weights keep arriving while the consumers wait at a
 *                barrier or stage the input: the boundary costs bytes only where the
 *                ring runs full
 *   ring, free   the ring without the barrier (no dependency; outputs not compared): the
 *                ring's streaming rate
 *   floor        the layer's bytes at 4.25 TB/s
 *
 * Every mode's outputs of every phase must equal the first mode's, and the first layer's
 * the host's; a mismatch is printed and the exit status is 1.
 *
 * Build: nvcc -O3 -arch=sm_90 -o phase_chain_bench bench/phase_chain_bench.cu
 *   (-DNORM_STAGE=1: the input staged with an RMSNorm's block reduction, as the real
 *   kernels; 0.6B only)
 * Usage: phase_chain_bench [layers] [0.6b|8b]   (a markdown table on stdout; default 28
 *   layers of 0.6B, 36 of 8B)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_bench.cuh"

#define MAX_PHASES 256
#define SHIFT 12
#ifndef RING_STAGES /* (-D to compare) */
#define RING_STAGES 3
#endif
#ifndef STAGE_BYTES
#define STAGE_BYTES (64 << 10)
#endif
#define RING_THREADS (512 + 32) /* 16 consumer warps and the producer's */
#define SLICE_ROWS_MAX 256      /* ring: rows of a block's slice of any phase */

typedef struct {
    const uint4 *w; /* [rows][k / 16] */
    int rows, k;
} phase_t;

__constant__ phase_t c_phase[MAX_PHASES];
__constant__ int c_in16;      /* the widest input in 16-byte units: xs in shared memory */
__constant__ int c_out_bytes; /* a phase's output buffer: the most rows */

static __device__ __forceinline__ int dot16(uint4 w, uint4 x, int acc) {
    acc = __dp4a((int)w.x, (int)x.x, acc);
    acc = __dp4a((int)w.y, (int)x.y, acc);
    acc = __dp4a((int)w.z, (int)x.z, acc);
    return __dp4a((int)w.w, (int)x.w, acc);
}

static __device__ __forceinline__ int8_t quant(int acc) {
    const int v = acc >> SHIFT;
    return (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
}

static __device__ __forceinline__ uint4 ld_nc(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

static __device__ __forceinline__ void cp_async16(uint4 *dst, const uint4 *src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}

static __device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }

/* this block's rows of a phase: [r0, r1) */
static __device__ __forceinline__ void block_rows(int rows, int *r0, int *r1) {
    *r0 = (int)((long long)rows * blockIdx.x / gridDim.x);
    *r1 = (int)((long long)rows * (blockIdx.x + 1) / gridDim.x);
}

/* the slice [r0, r1) of phase p into ws[(r1 - r0) * k / 16] by cp.async, one group */
static __device__ __forceinline__ void copy_slice(const phase_t *ph, int r0, int r1, uint4 *ws) {
    const int n16 = ph->k / 16, n = (r1 - r0) * n16;
    const uint4 *src = ph->w + (size_t)r0 * n16;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        cp_async16(ws + i, src + i);
    cp_async_commit();
}

/* in[k] (global, written by other blocks) into xs[k / 16] */
static __device__ __forceinline__ void stage_input(const uint4 *in, int k, uint4 *xs) {
#if NORM_STAGE
    /* as the real kernels' RMSNorm staging: the sum of squares over the block (a block
     * reduction, two barriers) and each 16's largest magnitude, before the int8 input is
     * stored; the values are stored unchanged (the condition always holds) */
    __shared__ float red[32];
    uint4 v = make_uint4(0, 0, 0, 0);
    float ss = 0.0f, amax = 0.0f;
    if ((int)threadIdx.x < k / 16) {
        v = __ldcg(in + threadIdx.x);
        const unsigned u[4] = {v.x, v.y, v.z, v.w};
        for (int j = 0; j < 16; j++) {
            const float f = (float)(int8_t)(u[j / 4] >> (8 * (j % 4)));
            ss += f * f;
            amax = fmaxf(amax, fabsf(f));
        }
    }
    for (int o = 16; o > 0; o >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x / 32] = ss;
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < (int)blockDim.x / 32; i++)
        total += red[i];
    if ((int)threadIdx.x < k / 16)
        xs[threadIdx.x] = total >= 0.0f && amax >= 0.0f ? v : make_uint4(0, 0, 0, 0);
    __syncthreads();
#else
    for (int i = threadIdx.x; i < k / 16; i += blockDim.x)
        xs[i] = __ldcg(in + i);
#endif
}

/* out[r0 .. r1) of phase p; the slice in shared memory (ws) or read from global (ws null) */
static __device__ __forceinline__ void slice_dots(const phase_t *ph, int r0, int r1, const uint4 *ws,
                                                 const uint4 *xs, int8_t *out) {
    const int n16 = ph->k / 16, lane = threadIdx.x & 31;
    for (int r = threadIdx.x / 32; r < r1 - r0; r += blockDim.x / 32) {
        int acc = 0;
        if (ws) {
            const uint4 *wr = ws + (size_t)r * n16;
            for (int c = lane; c < n16; c += 32)
                acc = dot16(wr[c], xs[c], acc);
        } else {
            const uint4 *wr = ph->w + (size_t)(r0 + r) * n16;
#pragma unroll 6
            for (int c = lane; c < n16; c += 32)
                acc = dot16(ld_nc(wr + c), xs[c], acc);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0)
            out[r0 + r] = quant(acc);
    }
}

/* kernels / kernels+copy: phase p reads in, writes out; smem: xs[c_in16], then the slice */
template <int THREADS, bool COPY>
__global__ void __launch_bounds__(THREADS) k_phase(int p, const int8_t *in, int8_t *out) {
    extern __shared__ uint4 smem[];
    uint4 *xs = smem, *ws = smem + c_in16;
    const phase_t ph = c_phase[p];
    int r0, r1;
    block_rows(ph.rows, &r0, &r1);
    asm volatile("griddepcontrol.launch_dependents;");
    if (COPY)
        copy_slice(&ph, r0, r1, ws); /* the weights do not depend on the previous phase */
    asm volatile("griddepcontrol.wait;" ::: "memory");
    stage_input((const uint4 *)in, ph.k, xs);
    if (COPY)
        asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    slice_dots(&ph, r0, r1, COPY ? ws : nullptr, xs, out);
}

/* persist / persist+copy: all n_phase phases, outs[p * c_out_bytes]; ctr zero at launch;
 * smem: xs[c_in16], then two slices of slice16 */
template <bool COPY>
__global__ void __launch_bounds__(512, 1)
k_persist(int n_phase, const int8_t *x0, int8_t *outs, unsigned *ctr, int slice16) {
    extern __shared__ uint4 smem[];
    uint4 *xs = smem, *bufs = smem + c_in16; /* slice b at bufs + b * slice16 */
    int r0, r1;
    if (COPY) {
        block_rows(c_phase[0].rows, &r0, &r1);
        copy_slice(&c_phase[0], r0, r1, bufs);
    }
    for (int p = 0; p < n_phase; p++) {
        const phase_t ph = c_phase[p];
        if (COPY && p + 1 < n_phase) { /* the next slice streams in while this phase waits and computes */
            int n0, n1;
            block_rows(c_phase[p + 1].rows, &n0, &n1);
            copy_slice(&c_phase[p + 1], n0, n1, bufs + ((p + 1) & 1) * slice16);
        }
        if (p > 0) { /* every block has finished phase p - 1 */
            if (threadIdx.x == 0)
                poll_count(ctr, (unsigned)p * gridDim.x);
            __syncthreads();
        }
        block_rows(ph.rows, &r0, &r1);
        stage_input((const uint4 *)(p ? outs + (size_t)(p - 1) * c_out_bytes : x0), ph.k, xs);
        if (COPY) {
            if (p + 1 < n_phase)
                asm volatile("cp.async.wait_group 1;" ::: "memory");
            else
                asm volatile("cp.async.wait_group 0;" ::: "memory");
        }
        __syncthreads();
        slice_dots(&ph, r0, r1, COPY ? bufs + (p & 1) * slice16 : nullptr, xs, outs + (size_t)p * c_out_bytes);
        __syncthreads(); /* every row stored, the buffer free for the slice after next */
        if (threadIdx.x == 0) {
            __threadfence();
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(ctr) : "memory");
        }
    }
}


/* rows of a ring stage for rows of k bytes: a power of 2, at most 16 (a warp a row) */
static __host__ __device__ __forceinline__ int stage_rows(int k) {
    int n = 16;
    while (n > 1 && n * k > STAGE_BYTES)
        n >>= 1;
    return n;
}

/* ring / ring, free (BARRIER false): all n_phase phases as persist; smem: xs[c_in16], the
 * ring's RING_STAGES stages of STAGE_BYTES, the slice's sums, the stages' full and empty
 * barriers. Stage g of the block's sequence (every phase's slice in chunks of stage_rows
 * rows, one phase after another) sits in ring slot g % RING_STAGES, on its (g /
 * RING_STAGES)th use. A consumer warp takes one row of a chunk, or a part of it where the
 * chunk has fewer than 16 rows. */
template <bool BARRIER>
__global__ void __launch_bounds__(RING_THREADS, 1)
k_ring(int n_phase, const int8_t *x0, int8_t *outs, unsigned *ctr) {
    extern __shared__ uint4 smem[];
    uint4 *xs = smem, *ring = smem + c_in16; /* stage s at ring + s * STAGE_BYTES / 16 */
    int *sums = reinterpret_cast<int *>(ring + RING_STAGES * (STAGE_BYTES / 16)); /* [SLICE_ROWS_MAX] */
    uint64_t *full = reinterpret_cast<uint64_t *>(sums + SLICE_ROWS_MAX), *empty = full + RING_STAGES;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        for (int s = 0; s < RING_STAGES; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 16);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (warp == 16) { /* the producer: never waits for a phase, only for a free stage */
        if (lane == 0) {
            unsigned g = 0;
            for (int p = 0; p < n_phase; p++) {
                const phase_t ph = c_phase[p];
                const int n = stage_rows(ph.k);
                int r0, r1;
                block_rows(ph.rows, &r0, &r1);
                for (int row = r0; row < r1; row += n, g++) {
                    const unsigned s = g % RING_STAGES, use = g / RING_STAGES;
                    if (use > 0)
                        mbar_wait(&empty[s], (use - 1) & 1);
                    const unsigned bytes = (unsigned)(min(n, r1 - row) * ph.k);
                    mbar_expect(&full[s], bytes);
                    bulk_copy(ring + s * (STAGE_BYTES / 16), reinterpret_cast<const uint8_t *>(ph.w) + (size_t)row * ph.k,
                              bytes, &full[s]);
                }
            }
        }
        return;
    }
    unsigned g = 0;
    for (int p = 0; p < n_phase; p++) {
        const phase_t ph = c_phase[p];
        const int n = stage_rows(ph.k), parts = 16 / n, n16 = ph.k / 16, part16 = n16 / parts;
        int r0, r1;
        block_rows(ph.rows, &r0, &r1);
        if (BARRIER && p > 0 && threadIdx.x == 0) /* every block has finished phase p - 1 */
            poll_count(ctr, (unsigned)p * gridDim.x);
        threads_sync<512>();
        const uint4 *in = (const uint4 *)(p ? outs + (size_t)(p - 1) * c_out_bytes : x0);
        for (int i = threadIdx.x; i < n16; i += 512)
            xs[i] = __ldcg(in + i);
        for (int i = threadIdx.x; i < r1 - r0; i += 512)
            sums[i] = 0;
        threads_sync<512>();
        const int rr = warp % n, part = warp / n; /* this warp's row of a chunk, and part of it */
        for (int row = r0; row < r1; row += n, g++) {
            const unsigned s = g % RING_STAGES, use = g / RING_STAGES;
            mbar_wait(&full[s], use & 1);
            if (row + rr < r1) {
                const uint4 *wr = ring + s * (STAGE_BYTES / 16) + (size_t)rr * n16;
                int acc = 0;
                for (int c = part * part16 + lane; c < (part + 1) * part16; c += 32)
                    acc = dot16(wr[c], xs[c], acc);
#pragma unroll
                for (int o = 16; o > 0; o >>= 1)
                    acc += __shfl_xor_sync(0xffffffffu, acc, o);
                if (lane == 0)
                    atomicAdd(&sums[row - r0 + rr], acc);
            }
            __syncwarp();
            if (lane == 0)
                mbar_arrive(&empty[s]);
        }
        threads_sync<512>();
        for (int i = threadIdx.x; i < r1 - r0; i += 512)
            outs[(size_t)p * c_out_bytes + r0 + i] = quant(sums[i]);
        threads_sync<512>();
        if (threadIdx.x == 0) {
            __threadfence();
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(ctr) : "memory");
        }
    }
}

static __global__ void k_fill(uint32_t *p, size_t n, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 0x9e3779b1u ^ seed;
        h ^= h >> 15;
        h *= 0x2c1b3c6du;
        h ^= h >> 12;
        h *= 0x297a2d39u;
        h ^= h >> 15;
        /* four int8 in [-127, 127] */
        uint32_t v = 0;
        for (int b = 0; b < 4; b++)
            v |= (uint32_t)(uint8_t)(int8_t)((int)((h >> (8 * b)) & 0xffu) % 255 - 127) << (8 * b);
        p[i] = v;
    }
}

/* host reference of one phase */
static void host_phase(const int8_t *w, int rows, int k, const int8_t *in, int8_t *out) {
    for (int r = 0; r < rows; r++) {
        int acc = 0;
        for (int c = 0; c < k; c++)
            acc += (int)w[(size_t)r * k + c] * in[c];
        const int v = acc >> SHIFT;
        out[r] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
}

#define N_MODES 8
#define HEAVY_SMEM (180 << 10)
#define SMEM_MAX (227 << 10)

int main(int argc, char **argv) {
    const bool big = argc > 2 && !strcmp(argv[2], "8b");
    const int layers = argc > 1 && atoi(argv[1]) > 0 ? atoi(argv[1]) : big ? 36 : 28;
    const int shape_06[4][2] = {{4096, 1024}, {1024, 2048}, {6144, 1024}, {1024, 3072}}; /* rows, k */
    const int shape_8[4][2] = {{6144, 4096}, {4096, 4096}, {24576, 4096}, {4096, 12288}};
    const int(*shape)[2] = big ? shape_8 : shape_06;
    const int n_phase = 4 * layers;
    if (n_phase > MAX_PHASES || (argc > 2 && !big && strcmp(argv[2], "0.6b"))) {
        fprintf(stderr, "usage: phase_chain_bench [layers, at most %d] [0.6b|8b]\n", MAX_PHASES / 4);
        return 1;
    }
#if NORM_STAGE
    if (big) {
        fprintf(stderr, "NORM_STAGE stages at most 512 units: 0.6B only\n");
        return 1;
    }
#endif
    int n_sm = 0;
    TRY(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0));
    const int grid = n_sm;
    size_t layer_bytes = 0;
    int slice16 = 0, in16 = 0, out_bytes = 0;
    for (int i = 0; i < 4; i++) {
        layer_bytes += (size_t)shape[i][0] * shape[i][1];
        const int most_rows = (shape[i][0] + grid - 1) / grid + 1;
        if (most_rows * shape[i][1] / 16 > slice16)
            slice16 = most_rows * shape[i][1] / 16;
        in16 = shape[i][1] / 16 > in16 ? shape[i][1] / 16 : in16;
        out_bytes = shape[i][0] > out_bytes ? shape[i][0] : out_bytes;
        if (most_rows > SLICE_ROWS_MAX) {
            fprintf(stderr, "a slice of %d rows: more than the ring's sums\n", most_rows);
            return 1;
        }
    }
    int8_t *w = nullptr, *x0 = nullptr, *outs = nullptr, *ref_outs = nullptr;
    unsigned *ctr = nullptr;
    const size_t outs_bytes = (size_t)n_phase * out_bytes;
    TRY(cudaMalloc(&w, layer_bytes * layers));
    TRY(cudaMalloc(&x0, (size_t)in16 * 16));
    TRY(cudaMalloc(&outs, outs_bytes));
    TRY(cudaMalloc(&ref_outs, outs_bytes));
    TRY(cudaMalloc(&ctr, sizeof(unsigned)));
    k_fill<<<1024, 256>>>((uint32_t *)w, layer_bytes * layers / 4, 1u);
    k_fill<<<4, 256>>>((uint32_t *)x0, (size_t)in16 * 4, 2u);
    TRY(cudaGetLastError());
    phase_t ph[MAX_PHASES];
    size_t off = 0;
    for (int p = 0; p < n_phase; p++) {
        ph[p].w = (const uint4 *)(w + off);
        ph[p].rows = shape[p % 4][0];
        ph[p].k = shape[p % 4][1];
        off += (size_t)ph[p].rows * ph[p].k;
    }
    TRY(cudaMemcpyToSymbol(c_phase, ph, sizeof(phase_t) * n_phase));
    TRY(cudaMemcpyToSymbol(c_in16, &in16, sizeof(int)));
    TRY(cudaMemcpyToSymbol(c_out_bytes, &out_bytes, sizeof(int)));

    cudaStream_t st;
    TRY(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    TRY(cudaEventCreate(&e0));
    TRY(cudaEventCreate(&e1));
    const size_t smem_in = (size_t)in16 * 16; /* kernels, persist: the input only */
    const size_t smem_one = (size_t)(in16 + slice16) * 16, smem_two = (size_t)(in16 + 2 * slice16) * 16;
    const size_t smem_ring = smem_in + (size_t)RING_STAGES * STAGE_BYTES + SLICE_ROWS_MAX * sizeof(int) +
                             2 * RING_STAGES * sizeof(uint64_t);
    /* the modes: one kernel a phase (kernels, kernels+copy 256, kernels+copy 512, copy, heavy),
     * or one cooperative kernel (persist, persist+copy, ring, ring free) */
    typedef void (*phase_fn)(int, const int8_t *, int8_t *);
    typedef void (*chain_fn)(int, const int8_t *, int8_t *, unsigned *, int);
    typedef void (*ring_fn)(int, const int8_t *, int8_t *, unsigned *);
    const struct {
        const char *name;
        phase_fn fn;
        chain_fn chain;
        ring_fn ring;
        int threads;
        size_t smem;
    } mode[N_MODES] = {{"kernels", k_phase<512, false>, nullptr, nullptr, 512, smem_in},
                       {"kernels+copy 256", k_phase<256, true>, nullptr, nullptr, 256, smem_one},
                       {"kernels+copy 512", k_phase<512, true>, nullptr, nullptr, 512, smem_one},
                       {"persist", nullptr, k_persist<false>, nullptr, 512, smem_in},
                       {"persist+copy", nullptr, k_persist<true>, nullptr, 512, smem_two},
                       {"copy, heavy", k_phase<512, true>, nullptr, nullptr, 512, smem_one},
                       {"ring", nullptr, nullptr, k_ring<true>, RING_THREADS, smem_ring},
                       {"ring, free", nullptr, nullptr, k_ring<false>, RING_THREADS, smem_ring}};
    const int reps = 10;
    float us_layer[N_MODES];
    int bad = 0;
    for (int m = 0; m < N_MODES; m++) {
        us_layer[m] = -1.0f;
        if (mode[m].smem > SMEM_MAX || (m == 5 && big))
            continue; /* the slices do not fit: not a mode these shapes can run */
        const void *fn = mode[m].fn ? (const void *)mode[m].fn : mode[m].chain ? (const void *)mode[m].chain
                                                                               : (const void *)mode[m].ring;
        /* a cap, not a request: each launch asks for its own (HEAVY_SMEM for mode 5's heavy phases) */
        TRY(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)(mode[m].smem > HEAVY_SMEM ? mode[m].smem : HEAVY_SMEM)));
        int blocks = 0;
        TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fn, mode[m].threads, mode[m].smem));
        cudaFuncAttributes fa;
        TRY(cudaFuncGetAttributes(&fa, fn));
        fprintf(stderr, "%s: %d registers, %d blocks an SM resident at %zu bytes of shared memory\n", mode[m].name,
                fa.numRegs, blocks, mode[m].smem);
        TRY(cudaMemset(outs, 0, outs_bytes));
        float ms = 0.0f;
        if (mode[m].fn) {
            cudaLaunchAttribute a = programmatic();
            cudaLaunchConfig_t cfg = launch_config(grid, mode[m].threads, mode[m].smem, st, &a, 1);
            cudaGraph_t g;
            TRY(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            for (int p = 0; p < n_phase; p++) {
                if (m == 5)
                    cfg.dynamicSmemBytes = p % 2 == 0 ? HEAVY_SMEM : smem_one; /* qkv and gate|up heavy */
                TRY(cudaLaunchKernelEx(&cfg, mode[m].fn, p, p ? (const int8_t *)(outs + (size_t)(p - 1) * out_bytes) : x0,
                                       outs + (size_t)p * out_bytes));
            }
            TRY(cudaStreamEndCapture(st, &g));
            if (time_graph(g, st, reps, e0, e1, &ms))
                return 1;
            cudaGraphDestroy(g);
        } else {
            cudaLaunchAttribute a = cooperative();
            const cudaLaunchConfig_t cfg = launch_config(grid, mode[m].threads, mode[m].smem, st, &a, 1);
            for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
                TRY(cudaMemsetAsync(ctr, 0, sizeof(unsigned), st));
                TRY(cudaEventRecord(e0, st));
                if (mode[m].chain)
                    TRY(cudaLaunchKernelEx(&cfg, mode[m].chain, n_phase, (const int8_t *)x0, outs, ctr, slice16));
                else
                    TRY(cudaLaunchKernelEx(&cfg, mode[m].ring, n_phase, (const int8_t *)x0, outs, ctr));
                TRY(cudaEventRecord(e1, st));
                TRY(cudaEventSynchronize(e1));
                float x;
                TRY(cudaEventElapsedTime(&x, e0, e1));
                if (r >= 0)
                    ms += x;
            }
        }
        us_layer[m] = 1e3f * ms / reps / layers;
        if (m == 0) {
            TRY(cudaMemcpy(ref_outs, outs, outs_bytes, cudaMemcpyDeviceToDevice));
            /* the first layer against the host */
            int8_t *hw = (int8_t *)malloc(layer_bytes), *hin = (int8_t *)malloc((size_t)in16 * 16),
                   *hout = (int8_t *)malloc((size_t)4 * out_bytes), *href = (int8_t *)malloc(out_bytes);
            TRY(cudaMemcpy(hw, w, layer_bytes, cudaMemcpyDeviceToHost));
            TRY(cudaMemcpy(hin, x0, (size_t)in16 * 16, cudaMemcpyDeviceToHost));
            TRY(cudaMemcpy(hout, outs, (size_t)4 * out_bytes, cudaMemcpyDeviceToHost));
            size_t o = 0;
            for (int p = 0; p < 4; p++) {
                host_phase(hw + o, shape[p][0], shape[p][1], p ? hout + (size_t)(p - 1) * out_bytes : hin, href);
                if (memcmp(href, hout + (size_t)p * out_bytes, shape[p][0])) {
                    printf("phase %d differs from the host\n", p);
                    bad = 1;
                }
                o += (size_t)shape[p][0] * shape[p][1];
            }
            free(hw), free(hin), free(hout), free(href);
        } else if (m != 7) { /* ring, free has no dependency to honour */
            int8_t *a = (int8_t *)malloc(outs_bytes), *b = (int8_t *)malloc(outs_bytes);
            TRY(cudaMemcpy(a, ref_outs, outs_bytes, cudaMemcpyDeviceToHost));
            TRY(cudaMemcpy(b, outs, outs_bytes, cudaMemcpyDeviceToHost));
            if (memcmp(a, b, outs_bytes)) {
                printf("%s: outputs differ from kernels'\n", mode[m].name);
                bad = 1;
            }
            free(a), free(b);
        }
    }
    printf("%s layer as 4 int8 phases (qkv, wo, gate|up, down), %d layers, %d blocks, us a layer:\n\n",
           big ? "8B" : "0.6B", layers, grid);
    printf("|");
    for (int m = 0; m < N_MODES; m++)
        printf(" %s |", mode[m].name);
    printf(" floor (%.1f MB at 4.25 TB/s) |\n|", layer_bytes / 1e6);
    for (int m = 0; m <= N_MODES; m++)
        printf("---|");
    printf("\n|");
    for (int m = 0; m < N_MODES; m++)
        us_layer[m] < 0.0f ? printf(" - |") : printf(" %.2f |", us_layer[m]);
    printf(" %.2f |\n", layer_bytes / 4.25e6);
    return bad;
}
