/*
 * sync.cuh - how the threads of a kernel wait for data: the engine's kernels take
 * smem_addr and threads_sync (through common.cuh), the rest serves the single-file benches
 * bench/read_bench.cu, phase_chain_bench.cu and grid_barrier_bench.cu, which include it by
 * its path (it needs nothing but the CUDA headers):
 *   mbarriers in shared memory that count the bytes of bulk copies (cp.async.bulk) and
 *     the arrivals of the warps that free a stage;
 *   a counter in global memory that only grows: a grid's barrier, each block adding one
 *     as it finishes a phase (red.release), thread 0 of each polling (ld.acquire);
 *   a named barrier over the first N threads of a block (a producer warp past them
 *     never meets it).
 */
#ifndef ER_BACKEND_CUDA_SYNC_CUH
#define ER_BACKEND_CUDA_SYNC_CUH

#include <stdint.h>

/* The shared-memory address of p (a pointer into shared memory), as PTX's shared-state
 * operands take it. The copy and ldmatrix helpers of common.cuh spell the conversion out:
 * routed through this function, nvcc schedules attention_batch.cu's kernels differently. */
static __device__ __forceinline__ unsigned smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

static __device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

static __device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

/* arrives, and tells the barrier to expect `bytes` more from the bulk copies */
static __device__ __forceinline__ void mbar_expect(uint64_t *bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

/* until the barrier's phase of this parity has completed */
static __device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity) {
    asm volatile("{\n\t.reg .pred done;\n"
                 "WAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
                 "@!done bra WAIT_%=;\n}" ::"r"(smem_addr(bar)),
                 "r"(parity)
                 : "memory");
}

/* bytes (a multiple of 16, 16-byte aligned both ends) from global to shared, counted in at bar */
static __device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}

/* thread 0 polls (acquire) until the counter that only grows reaches target */
static __device__ __forceinline__ void poll_count(const unsigned int *ctr, unsigned int target) {
    unsigned int now;
    do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(ctr) : "memory");
    } while ((int)(now - target) < 0);
}

/* the first N threads of the block meet (named barrier 1) */
template <int N>
static __device__ __forceinline__ void threads_sync(void) {
    asm volatile("bar.sync 1, %0;" ::"n"(N) : "memory");
}

#endif
