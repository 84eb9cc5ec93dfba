/*
 * common.cuh - helpers shared by the kernel files: warp and block reductions, a float4
 * dot, cp.async copies, the int8 quantization of inputs, tensor-core mma and F16 pairs,
 * and on the host side the launch configuration for programmatic dependent launch, the
 * shared-memory attributes of a kernel and the environment's on/off switches. What
 * depends on the weight type (chunk dot products, single elements, the GEMM's
 * conversion) is in wtypes.cuh, which this file includes last.
 */
#ifndef ER_BACKEND_CUDA_COMMON_CUH
#define ER_BACKEND_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdlib.h>

#define ER_CUDA_LAUNCH_CHECK() cudaGetLastError()

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
 * `red` is 32 floats of shared memory. */
static __device__ __forceinline__ float block_sum(float v, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* red may still be read from a previous call */
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = lane < n_warps ? red[lane] : 0.0f;
    return warp_sum(v);
}

static __device__ __forceinline__ float dot4(float4 a, float b0, float b1, float b2, float b3) {
    return fmaf(a.x, b0, fmaf(a.y, b1, fmaf(a.z, b2, a.w * b3)));
}

/* The gated FFN's activations, with the CPU's arithmetic (ops.c: cpu_swiglu, cpu_geglu):
 * silu, and GELU's tanh approximation (Gemma-3's gelu_pytorch_tanh). */
static __device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }
static __device__ __forceinline__ float gelu_tanh(float g) {
    return 0.5f * g * (1.0f + tanhf(0.79788456080286535588f * g * (1.0f + 0.044715f * g * g)));
}

#include "backend/cuda/sync.cuh" /* smem_addr, and the waits of resident kernels */

/* 16 bytes global -> shared, asynchronously (cp.async, through L2 only); of those,
 * src_bytes are read and the rest filled with zeros. */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(src_bytes)
                 : "memory");
}
/* 4 bytes global -> shared, asynchronously (through L1: cp.async.cg takes only 16). */
static __device__ __forceinline__ void cp_async4(void *dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src)
                 : "memory");
}
static __device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
/* Waits for this thread's copies but the last `pending` committed groups. */
template <int pending>
static __device__ __forceinline__ void cp_async_wait(void) { asm volatile("cp.async.wait_group %0;" ::"n"(pending) : "memory"); }
static __device__ __forceinline__ void cp_async_wait_all(void) { cp_async_wait<0>(); }

/* One quarter v (8 elements) of a block of 32 quantized to int8 with the block's scale,
 * as the CPU's dot quantizes its input: the 4 lanes of a block are 4 consecutive lanes
 * (their max |x| by shuffles, so every lane of the warp must call this). d = max / 127,
 * q = round(x 127 / max) to even (a block of zeros: d = 0, q = 0); the 8 quants in order
 * come back as int8 bytes, d in *d_out. The one arithmetic of the batch GEMM's inputs
 * (mmq.cu) and the decode matvecs' (matvec.cu). */
static __device__ __forceinline__ uint2 quant8_f32(const float v[8], float *d_out) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++)
        amax = fmaxf(amax, fmaxf(fabsf(v[2 * i]), fabsf(v[2 * i + 1])));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    uint32_t w[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int qi = max(-127, min(127, __float2int_rn(v[i] * id)));
        w[i >> 2] |= (uint32_t)(qi & 0xff) << (8 * (i & 3));
    }
    *d_out = amax / 127.0f;
    return make_uint2(w[0], w[1]);
}

/* dp4a with a's bytes unsigned and b's signed (dp4a.u32.s32; CUDA's __dp4a has no such
 * mix): c + the sum of a's 4 bytes (0-255) times b's (-128-127) */
static __device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

/* The sum of a block's 32 quants on each of its 4 lanes, q this lane's 8 (quant8_f32:
 * called by whole warps). The K types with an offset (cuda_wtype_int8_offset) multiply it
 * by theirs. */
static __device__ __forceinline__ int quant8_sum(uint2 q) {
    int sum = __dp4a((int)q.x, 0x01010101, __dp4a((int)q.y, 0x01010101, 0)); /* its 8 quants */
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    return sum + __shfl_xor_sync(0xffffffffu, sum, 2);
}

/* An on/off switch read from the environment (for measurements): off where `name` is set
 * to a number that is 0, on where set to another, fallback where unset or empty. */
static inline int env_switch(const char *name, int fallback) {
    const char *env = getenv(name);
    return env && *env ? atoi(env) != 0 : fallback;
}

/* A switch that a test or benchmark may set (*mode 0 or 1, by set_switch) or leave to the
 * environment (*mode -1: `name` read once, on where unset). */
static inline int read_switch(int *mode, const char *name) {
    if (*mode < 0)
        *mode = env_switch(name, 1);
    return *mode;
}

/* What a cuda_*_set_* function stores: -1 (back to the environment) for a negative on */
static inline int set_switch(int on) { return on < 0 ? -1 : on != 0; }

/* A launch that may overlap the previous kernel's tail (programmatic dependent launch:
 * the kernel pdl_waits for it); attr is the storage of its one attribute. */
static inline cudaLaunchConfig_t pdl_config(dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                            cudaLaunchAttribute *attr) {
    cudaLaunchConfig_t cfg = {};
    attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr->val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}

/* pdl_config for clusters of (1, cluster_y, 1) blocks; attr: the storage of its two
 * attributes. */
static inline cudaLaunchConfig_t pdl_cluster_config(dim3 grid, dim3 block, int cluster_y, cudaStream_t stream,
                                                    cudaLaunchAttribute attr[2]) {
    cudaLaunchConfig_t cfg = pdl_config(grid, block, 0, stream, &attr[0]);
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = 1;
    attr[1].val.clusterDim.y = cluster_y;
    attr[1].val.clusterDim.z = 1;
    cfg.numAttrs = 2;
    return cfg;
}

/* The multiprocessors of the device (132 on the H200; 132 too where the runtime cannot
 * say), asked once: the same device for the whole process. */
static inline int multiprocessors(void) {
    static int n_sm = 0;
    if (n_sm == 0) {
        int dev = 0, n = 0;
        if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess)
            n_sm = n;
        n_sm = n_sm > 0 ? n_sm : 132;
    }
    return n_sm;
}

/* Shared memory a block may have on sm_90 (static and dynamic together), once allowed */
#define SMEM_BLOCK_MAX (227 << 10)

/* `smem` bytes of dynamic shared memory for kernel, and the largest carveout for it:
 * blocks of the next kernels can only become resident beside this one if the
 * multiprocessor's shared memory is configured large enough for all of them. The
 * default limit, 48 KB, holds the kernel's static and dynamic shared memory together;
 * beyond it the dynamic part must be allowed explicitly. (Testing the dynamic part alone
 * against 48 KB let an attention kernel with 43.5 KB of dynamic shared memory beside its
 * static arrays fail to launch at Qwen3-4B.) */
template <typename K>
static cudaError_t allow_smem(K kernel, size_t smem) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         (int)cudaSharedmemCarveoutMaxShared);
    if (e != cudaSuccess || smem == 0)
        return e;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
}

/* Programmatic dependent launch (sm_90): a kernel launched with the PDL attribute may
 * start once every block of the previous kernel has called pdl_launch_next (or ended);
 * it must pdl_wait before reading or writing anything earlier kernels write, and the
 * wait returns when the previous kernel has completed, which itself waited for its own
 * predecessor. A kernel's work on read-only data (weight loads) goes before its wait;
 * see matvec.cu for where the decode kernels let the next one launch. ptxas may place
 * ld.global.nc loads (__ldg, const __restrict__ pointers) after the wait whatever the
 * source order (griddepcontrol.wait is ACQBULK in the SASS: cuobjdump -sass shows where
 * they went); cp.async and coherent loads (plain, __ldcg) stay before it. */
static __device__ __forceinline__ void pdl_wait(void) { asm volatile("griddepcontrol.wait;" ::: "memory"); }
static __device__ __forceinline__ void pdl_launch_next(void) { asm volatile("griddepcontrol.launch_dependents;"); }

/* Tensor cores, mma.sync m16n8k16 (F16 inputs, F32 sums). Fragment layouts (PTX ISA),
 * g = lane / 4, c = lane % 4:
 *   A (16 x 16, row): a0 (g, 2c..2c+1), a1 (g + 8, 2c..), a2 (g, 2c + 8..), a3 (g + 8, 2c + 8..)
 *   B (16 x 8, col):  b0 (k 2c..2c+1, n g), b1 (k 2c + 8.., n g)
 *   C (16 x 8):       c0, c1 (g, 2c..2c+1), c2, c3 (g + 8, 2c..2c+1) */
static __device__ __forceinline__ void mma_16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* mma.sync m16n8k8 (F16 inputs, F32 sums): A (16 x 8, row) a0 (g, 2c..2c+1), a1 (g + 8,
 * 2c..); B (8 x 8, col) b0 (k 2c..2c+1, n g); C as m16n8k16's. */
static __device__ __forceinline__ void mma_1688(float d[4], uint32_t a0, uint32_t a1, uint32_t b0) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(b0));
}

/* Four 8 x 8 F16 matrices from shared memory (ldmatrix): lane l gives the address of row
 * l % 8 of matrix l / 8 (16 bytes); r[i] gets element (l / 4, 2 (l % 4) .. + 1) of matrix
 * i, with _trans element (2 (l % 4) .. + 1, l / 4): a B fragment of a matrix stored as
 * (k, n) rows. */
static __device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((unsigned)__cvta_generic_to_shared(row))
                 : "memory");
}
static __device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((unsigned)__cvta_generic_to_shared(row))
                 : "memory");
}

/* Two floats as an F16 pair, lo in the low half (the lower column of a fragment). */
static __device__ __forceinline__ uint32_t half2_bits(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
}

/* Last: the launchers, and through them the weight types (wtypes.cuh), whose device part
 * builds on the helpers above. */
#include "backend/cuda/kernels.h"

/* The modes whose rows are gate and up halves, y[i] = act(gate[i] . x) * (up[i] . x). */
static __host__ __device__ __forceinline__ constexpr bool gated(int mode) {
    return mode == MV_NORM_SWIGLU || mode == MV_NORM_GEGLU || mode == MV_NORM_SWIGLU_Q8;
}

/* 16-byte unit q of chunk c of a staged input of Q units a chunk (a power of 2): rotated
 * within the chunk by (c * Q) / 8 so that 8 consecutive chunks put the same q on 8
 * different 16-byte bank groups. */
template <int Q>
static __device__ __forceinline__ int unit_slot(int c, int q) {
    return c * Q + ((q + ((c * Q) >> 3)) & (Q - 1));
}

/* 16 int8 q of chunk c of the quantized input: Q4_0's chunk has two (elements 0..15 and
 * 16..31 of its block), rotated as matvec.cu's xs_slot rotates float4s, without which
 * the 8 lanes of a quarter-warp would read units 32 bytes apart, two on each bank group. */
template <int WT>
static __device__ __forceinline__ int xq_slot(int c, int q) {
    return unit_slot<CHUNK_ELEMS(WT) / 16>(c, q);
}

/* An input block of 32 quantized (quant8_store): its scale, and the sum of its quants
 * (chunk_isum's xsum). */
typedef struct xq_block {
    float d;
    int sum;
} xq_block;

/* Elements 8 i .. 8 i + 7 of the input, v, quantized with their block (quant8_f32: called
 * by whole warps, lanes 4k .. 4k + 3 holding a block) into xq at xq_slot, and by the
 * block's first lane its scale and sum of quants into xb[i / 4]; stored only where i < n8
 * (the lanes past the input hold zeros). The decode matvecs' int8 input (matvec.cu). */
template <int WT>
static __device__ __forceinline__ void quant8_store(const float v[8], int i, int n8, int4 *xq, xq_block *xb) {
    constexpr int CE = CHUNK_ELEMS(WT);
    float d;
    const uint2 q = quant8_f32(v, &d);
    const int sum = quant8_sum(q);
    if (i < n8) {
        const int c = 8 * i / CE, e = 8 * i % CE; /* elements e..e + 7 of chunk c */
        reinterpret_cast<uint2 *>(xq + xq_slot<WT>(c, e / 16))[(e / 8) & 1] = q;
        if ((i & 3) == 0)
            xb[i / 4] = {d, sum};
    }
}

/* The norm weights of a thread's G groups of 8 input elements from group `first` on, a
 * group every T threads (zeros past n_in, and without a norm): stage_quant's. Those of
 * its first round depend on nothing, so the decode matvecs load them before they wait
 * for the input. ptxas may sink these read-only path loads past the wait (pdl_wait);
 * only their place in the source keeps them before it today (cuobjdump). Through L2
 * (__ldcg), which stays put, decode measured 1.4-1.8% slower at 0.6B (perf log). */
template <int T, int G>
static __device__ __forceinline__ void stage_norm_weights(const float *const &norm_w, bool norm, const int &n_in,
                                                          int first, float4 w[2 * G]) {
    const int n8 = n_in / 8;
#pragma unroll
    for (int j = 0; j < G; j++) {
        const int i = first + j * T;
        const bool in = norm && i < n8;
        w[2 * j] = in ? __ldg(reinterpret_cast<const float4 *>(norm_w) + 2 * i) : make_float4(0.f, 0.f, 0.f, 0.f);
        w[2 * j + 1] = in ? __ldg(reinterpret_cast<const float4 *>(norm_w) + 2 * i + 1) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

/* A decode matvec's int8 input, in one pass: x times norm_w where `norm`, quantized per
 * block of 32 into xq and xb (quant8_store). Returns the RMSNorm's 1 / rms (1 without a
 * norm), by which the caller multiplies its rows' sums: a factor common to every block,
 * which the quantization does not see but for rounding, so the block reduction runs
 * beside the quantization rather than before it, and the input never sits in shared
 * memory in f32. Threads 0..T-1 (whole warps: quant8_f32 shuffles) take groups of 8
 * elements i = thread + j T, G at a time, all their loads first; x 16-byte aligned, n_in
 * a multiple of 32. w0: stage_norm_weights of the first round. With a norm it ends with
 * a barrier of the T threads (bar 1: threads_sync), else with none.
 * x, norm_w and n_in come by reference (as in stage_norm_weights): the resident chain
 * kernel this was shared with (removed in the fifty-second session) read its fields
 * where they were used. matvec.cu passes copies. */
template <int WT, int T, int G>
static __device__ __forceinline__ float stage_quant(const float *const &x, const float *const &norm_w, bool norm,
                                                    float eps, const int &n_in, int4 *xq, xq_block *xb, float *red,
                                                    const float4 w0[2 * G]) {
    const int lane = threadIdx.x & 31, n8 = n_in / 8;
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    float ss = 0.0f;
    for (int round = 0; round * G * T < n8; round++) {
        const int first = (int)threadIdx.x + round * G * T;
        float4 xv[2 * G], wv[2 * G];
#pragma unroll
        for (int j = 0; j < G; j++) {
            const int i = first + j * T;
            xv[2 * j] = i < n8 ? __ldcg(reinterpret_cast<const float4 *>(x) + 2 * i) : zero;
            xv[2 * j + 1] = i < n8 ? __ldcg(reinterpret_cast<const float4 *>(x) + 2 * i + 1) : zero;
            if (round == 0) {
                wv[2 * j] = w0[2 * j];
                wv[2 * j + 1] = w0[2 * j + 1];
            }
        }
        if (round > 0)
            stage_norm_weights<T, G>(norm_w, norm, n_in, first, wv);
#pragma unroll
        for (int j = 0; j < G; j++) {
            const int i = first + j * T;
            if (i - lane >= n8) /* whole warps: the same for all its lanes */
                break;
            const float xs[8] = {xv[2 * j].x, xv[2 * j].y, xv[2 * j].z, xv[2 * j].w,
                                 xv[2 * j + 1].x, xv[2 * j + 1].y, xv[2 * j + 1].z, xv[2 * j + 1].w};
            const float ws[8] = {wv[2 * j].x, wv[2 * j].y, wv[2 * j].z, wv[2 * j].w,
                                 wv[2 * j + 1].x, wv[2 * j + 1].y, wv[2 * j + 1].z, wv[2 * j + 1].w};
            float v[8];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                ss += xs[k] * xs[k];
                v[k] = norm ? xs[k] * ws[k] : xs[k];
            }
            quant8_store<WT>(v, i, n8, xq, xb);
        }
    }
    if (!norm)
        return 1.0f;
    ss = warp_sum(ss);
    if (lane == 0)
        red[threadIdx.x / 32] = ss;
    threads_sync<T>();
    ss = warp_sum(lane < T / 32 ? red[lane] : 0.0f);
    return 1.0f / sqrtf(ss / (float)n_in + eps);
}

#endif
