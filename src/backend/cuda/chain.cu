/*
 * chain.cu - several dependent decode matvecs in one resident kernel that never stops
 * reading weights: a layer's wo, gate|up and down and the next layer's qkv (step.c).
 *
 * Between two matvecs run as kernels, HBM idles: the first kernel's last warps finish
 * alone, the next one's blocks become resident, wait for it, stage their input, and only
 * then does each warp have its loads in flight (matvec.cu loads its first chunks before
 * the wait, 2 KB a warp). Qwen3-8B's layer matvecs take 64 us against 48 for their bytes
 * at the copy bandwidth (docs/perf-log.md, nineteenth and twentieth sessions). The
 * weights never depend on the previous matvec, only the input does. So here one block
 * per multiprocessor has a producer warp that streams the block's rows of every matvec
 * of the chain, one matrix after the other, through a ring of CHAIN_STAGES stages of
 * shared memory (cp.async.bulk, counted in by mbarriers); it waits only for a free
 * stage. The 16 consumer warps, at each matvec, wait until every block has finished the
 * previous one (a counter that only grows, cuda_step_state.chain_ctr), stage the input
 * and sum the stages as they arrive, in two teams that take alternate stages. The ring
 * (192 KB, ~6 us of a multiprocessor's share of the bandwidth) keeps filling while they
 * wait. bench/phase_chain_bench.cu measured the shape of this on the H200 at Qwen3-8B's
 * matrices (int8, no scales): 52.7-54.4 us a layer against 69.4 for one kernel a
 * matvec. The real kernel gains less. This GPU reads at 4.5 TB/s, through such a ring
 * too (bench/read_bench.cu): 45.6 us for an 8B Q8_0 layer. The chain takes 62 (the
 * matvecs one by one: 64); without the barrier it would take 58.6, without staging the
 * input 56.7, without either 52.6: the ring does not hide what holds the consumers
 * (docs/perf-log.md, twenty-first session). It is faster where cuda_chain_pays says.
 *
 * The input is quantized to int8 per block of 32 as the streaming matvec quantizes it
 * (stage_quant: an RMSNorm's 1 / rms left out of the quants, the row's sum scaled by it
 * at the end), and the products are chunk_isum's.
 *
 * Q8_0 and Q4_0 (cuda_wtype_int8_one_scale), one type for the whole chain; rows whose quants
 * and scales are whole 16-byte units (n_in a multiple of 256).
 */

#include "backend/cuda/common.cuh"

#ifndef CHAIN_CONSUMERS
#define CHAIN_CONSUMERS 512
#endif
#define CHAIN_WARPS (CHAIN_CONSUMERS / 32)
#ifndef CHAIN_TEAMS /* teams of consumer warps, each summing every CHAIN_TEAMS-th stage (k_chain) */
#define CHAIN_TEAMS 2
#endif
#define TEAM_WARPS (CHAIN_WARPS / CHAIN_TEAMS)
static_assert(CHAIN_WARPS % CHAIN_TEAMS == 0, "teams of equal size");
#define CHAIN_THREADS (CHAIN_CONSUMERS + 32) /* and the producer warp */
#ifndef CHAIN_STAGES /* (-D to compare) */
#define CHAIN_STAGES 6
#endif
#ifndef CHAIN_STAGE_BYTES
#define CHAIN_STAGE_BYTES (32 << 10)
#endif
static_assert(CHAIN_STAGES % CHAIN_TEAMS == 0, "a stage's every use summed by one team: parity waits see no older use");
#define CHAIN_SUMS 2048 /* partial sums of a block's rows (cuda_chain_fits) */

/* a matvec of the chain, as the kernel reads it */
typedef struct chain_phase {
    const uint8_t *w;      /* (n_out, rb) quants */
    const __half *d;       /* (n_out, n_in / 32) scales */
    const float *x;        /* (n_in) input */
    const float *norm_w;   /* (n_in) the NORM modes' weights */
    float *y;              /* (n_logical) output */
    int mode, n_in, n_logical;
} chain_phase;

typedef struct chain_params {
    chain_phase ph[CUDA_CHAIN_MAX];
    int n_phase;
    float eps;
    unsigned int *ctr;      /* arrivals: every block adds one at the end of each matvec */
    unsigned int base;      /* matvecs of the step's earlier chains */
} chain_params;

/* A matvec's geometry in the ring: per stage `rows` logical rows (each of `parts` rows:
 * gate and up, or one), laid out as [part][row] quants then [part][row] scales; a warp
 * takes one row, or a part (1 / per_row) of its chunks. */
typedef struct chain_geom {
    int parts, rb, sb, rows, per_row;
} chain_geom;

static __host__ __device__ __forceinline__ chain_geom chain_geometry(int wt, int mode, int n_in) {
    chain_geom g;
    g.parts = gated(mode) ? 2 : 1;
    g.rb = wt == CUDA_W_Q8_0 ? n_in : n_in / 2;
    g.sb = n_in / 32 * 2;
    const int per_stage = CHAIN_STAGE_BYTES / (g.parts * (g.rb + g.sb));
    g.rows = per_stage < TEAM_WARPS ? per_stage : TEAM_WARPS;
    g.per_row = g.rows > 0 ? TEAM_WARPS / g.rows : 0;
    return g;
}

/* this block's logical rows [*r0, *r1) of n */
static __device__ __forceinline__ void chain_slice(int n, int *r0, int *r1) {
    *r0 = (int)((long long)n * blockIdx.x / gridDim.x);
    *r1 = (int)((long long)n * (blockIdx.x + 1) / gridDim.x);
}

/* A walk over the block's stages: matvec i, its logical rows [row, min(row + geo.rows, r1)) */
typedef struct chain_cursor {
    int i, row, r1;
    chain_geom geo;
} chain_cursor;

/* the first stage of matvec i on (past the last: i == n_phase) */
template <int WT>
static __device__ __forceinline__ void cursor_at(const chain_params &p, int i, chain_cursor &c) {
    for (c.i = i; c.i < p.n_phase; c.i++) {
        c.geo = chain_geometry(WT, p.ph[c.i].mode, p.ph[c.i].n_in);
        chain_slice(p.ph[c.i].n_logical, &c.row, &c.r1);
        if (c.row < c.r1)
            return;
    }
}

template <int WT>
static __device__ __forceinline__ void cursor_next(const chain_params &p, chain_cursor &c) {
    c.row += c.geo.rows;
    if (c.row >= c.r1)
        cursor_at<WT>(p, c.i + 1, c);
}

/* the global bytes of part k (gate or up) of the cursor's stage: its quants, its scales */
static __device__ __forceinline__ void stage_src(const chain_params &p, const chain_cursor &c, int k,
                                                 const uint8_t **q, const uint8_t **d, unsigned *nq, unsigned *nd) {
    const chain_phase &ph = p.ph[c.i];
    const int nr = min(c.geo.rows, c.r1 - c.row);
    const size_t r = (size_t)k * ph.n_logical + c.row;
    *q = ph.w + r * c.geo.rb;
    *d = reinterpret_cast<const uint8_t *>(ph.d) + r * c.geo.sb;
    *nq = (unsigned)(nr * c.geo.rb);
    *nd = (unsigned)(nr * c.geo.sb);
}

/* The producer: every matvec's slice of this block, stage after stage. */
template <int WT>
static __device__ void chain_produce(const chain_params &p, uint8_t *ring, uint64_t *full, uint64_t *empty) {
    chain_cursor ld;
    cursor_at<WT>(p, 0, ld);
    for (unsigned int g = 0; ld.i < p.n_phase; g++, cursor_next<WT>(p, ld)) {
        const unsigned int s = g % CHAIN_STAGES, use = g / CHAIN_STAGES;
        if (use > 0)
            mbar_wait(&empty[s], (use - 1) & 1);
        const chain_geom &geo = ld.geo;
        const int nr = min(geo.rows, ld.r1 - ld.row);
        mbar_expect(&full[s], (unsigned)(geo.parts * nr * (geo.rb + geo.sb)));
        uint8_t *stage = ring + (size_t)s * CHAIN_STAGE_BYTES;
        for (int k = 0; k < geo.parts; k++) {
            const uint8_t *q, *d;
            unsigned nq, nd;
            stage_src(p, ld, k, &q, &d, &nq, &nd);
            bulk_copy(stage + (size_t)k * geo.rows * geo.rb, q, nq, &full[s]);
            bulk_copy(stage + (size_t)geo.parts * geo.rows * geo.rb + (size_t)k * geo.rows * geo.sb, d, nd, &full[s]);
        }
    }
}

/* Groups of 8 input elements a consumer thread has in flight at once while staging: the
 * input's loads are L2 round trips on the matvec's critical path, which the streaming
 * weights make long; one round for rows up to 8,192 (3 for Qwen3-8B's down: 3 a round spilled). */
#ifndef CHAIN_GROUPS
#define CHAIN_GROUPS 2
#endif

template <int WT>
__global__ void __launch_bounds__(CHAIN_THREADS, 1) k_chain(const __grid_constant__ chain_params p) {
    constexpr int CE = CHUNK_ELEMS(WT);
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ __align__(8) uint64_t full[CHAIN_STAGES], empty[CHAIN_STAGES];
    __shared__ float sums[CHAIN_SUMS]; /* [row of the slice][part of it][gate or up] */
    __shared__ float red[CHAIN_WARPS];
    uint8_t *ring = smem; /* CHAIN_STAGES stages of CHAIN_STAGE_BYTES */
    int4 *xq = reinterpret_cast<int4 *>(smem + (size_t)CHAIN_STAGES * CHAIN_STAGE_BYTES); /* (n_in / 16) */
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        for (int s = 0; s < CHAIN_STAGES; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], TEAM_WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (warp == CHAIN_WARPS) { /* the weights depend on nothing: the producer never waits for a matvec */
        if (lane == 0)
            chain_produce<WT>(p, ring, full, empty);
        return;
    }
    unsigned int g = 0;
    for (int i = 0; i < p.n_phase; i++) {
        const chain_phase &ph = p.ph[i];
        const chain_geom geo = chain_geometry(WT, ph.mode, ph.n_in);
        xq_block *xb = reinterpret_cast<xq_block *>(xq + ph.n_in / 16); /* (n_in / 32) */
        int r0, r1;
        chain_slice(ph.n_logical, &r0, &r1);
        float4 w0[2 * CHAIN_GROUPS];
        stage_norm_weights<CHAIN_CONSUMERS, CHAIN_GROUPS>(ph.norm_w, ph.mode != MV_ADD, ph.n_in, (int)threadIdx.x, w0);
        /* every block has finished the previous matvec (the first: the previous kernel) */
        if (i == 0)
            pdl_wait();
        else if (threadIdx.x == 0)
            poll_count(p.ctr, (p.base + i) * gridDim.x);
        threads_sync<CHAIN_CONSUMERS>();
        if (i == p.n_phase - 1) /* every block is resident now: the next kernel's may take the room we leave */
            pdl_launch_next();
        /* the residual's rows this block adds to: its own stores of an earlier matvec or
         * kernel, loaded beside the input rather than on the way to the barrier at the end */
        const float y_old = ph.mode == MV_ADD && (int)threadIdx.x < r1 - r0 ? __ldcg(ph.y + r0 + threadIdx.x) : 0.0f;
        const float scale = stage_quant<WT, CHAIN_CONSUMERS, CHAIN_GROUPS>(ph.x, ph.norm_w, ph.mode != MV_ADD, p.eps,
                                                                           ph.n_in, xq, xb, red, w0);
        threads_sync<CHAIN_CONSUMERS>();

        /* Teams of TEAM_WARPS warps sum alternate stages. A stage's sums are a few chunks a
         * lane and then shuffles, mostly latency: with all 16 warps on every stage, the
         * consumers alone (no loads) took 53 us a Qwen3-8B Q8_0 layer, more than its bytes
         * take at the read bandwidth (45.6); with two teams, 39.5 (docs/perf-log.md). */
        const int team = warp / TEAM_WARPS, tw = warp % TEAM_WARPS;
        const int rr = tw % geo.rows, part = tw / geo.rows; /* this warp's row of a stage, and part of it */
        const int n_chunks = ph.n_in / CE, c0 = part * n_chunks / geo.per_row,
                  c1 = (part + 1) * n_chunks / geo.per_row;
        const unsigned int g_end = g + (unsigned int)((r1 - r0 + geo.rows - 1) / geo.rows);
        g += team;
        for (int row = r0 + team * geo.rows; row < r1; row += CHAIN_TEAMS * geo.rows, g += CHAIN_TEAMS) {
            const unsigned int s = g % CHAIN_STAGES, use = g / CHAIN_STAGES;
            mbar_wait(&full[s], use & 1);
            const bool mine = part < geo.per_row && row + rr < r1;
            float a[2] = {0.0f, 0.0f};
            if (mine) {
                const uint8_t *stage = ring + (size_t)s * CHAIN_STAGE_BYTES;
                for (int c = c0 + lane; c < c1; c += 32) {
                    int4 xv[CE / 16];
#pragma unroll
                    for (int q = 0; q < CE / 16; q++)
                        xv[q] = xq[xq_slot<WT>(c, q)];
                    const xq_block xbc = xb[c * CE / 32];
#pragma unroll
                    for (int k = 0; k < 2; k++) {
                        if (k == geo.parts)
                            break;
                        const int kr = k * geo.rows + rr;
                        const uint4 v = *reinterpret_cast<const uint4 *>(stage + (size_t)kr * geo.rb + 16 * c);
                        const __half *d = reinterpret_cast<const __half *>(stage + (size_t)geo.parts * geo.rows * geo.rb +
                                                                           (size_t)kr * geo.sb);
                        a[k] += (float)chunk_isum<WT>(v, xv, xbc.sum) * (__half2float(d[c * CE / 32]) * xbc.d);
                    }
                }
            }
            /* the stage is read: free it for the producer before the sums, whose shuffles
             * would otherwise hold its next load back (with the ring about as deep as the
             * bytes in flight need, each cycle a stage is held costs bandwidth) */
            __syncwarp();
            if (lane == 0)
                mbar_arrive(&empty[s]);
            if (mine) {
                a[0] = warp_sum(a[0]);
                a[1] = warp_sum(a[1]);
                if (lane == 0) {
                    const int at = ((row - r0 + rr) * geo.per_row + part) * 2;
                    sums[at] = a[0];
                    sums[at + 1] = a[1];
                }
            }
        }
        g = g_end;
        threads_sync<CHAIN_CONSUMERS>();
        for (int r = threadIdx.x; r < r1 - r0; r += CHAIN_CONSUMERS) {
            float gate = 0.0f, up = 0.0f;
            for (int k = 0; k < geo.per_row; k++) { /* the parts in order: the same sums every run */
                gate += sums[(r * geo.per_row + k) * 2];
                up += sums[(r * geo.per_row + k) * 2 + 1];
            }
            gate *= scale;
            up *= scale;
            float *y = ph.y + r0 + r;
            if (ph.mode == MV_NORM_SWIGLU)
                *y = silu(gate) * up;
            else if (ph.mode == MV_NORM_GEGLU)
                *y = gelu_tanh(gate) * up;
            else if (ph.mode == MV_ADD)
                *y = (r == (int)threadIdx.x ? y_old : __ldcg(y)) + gate;
            else
                *y = gate;
        }
        threads_sync<CHAIN_CONSUMERS>(); /* every row stored, and sums free for the next matvec */
        if (threadIdx.x == 0) /* the release orders the rows the block stored before the sync */
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p.ctr) : "memory");
    }
}

/* dynamic shared memory of a chain: the ring, and the widest input quantized */
static size_t chain_smem(const cuda_chain_link *links, int n) {
    int64_t n_in = 0;
    for (int i = 0; i < n; i++)
        n_in = links[i].w->n_in > n_in ? links[i].w->n_in : n_in;
    return (size_t)CHAIN_STAGES * CHAIN_STAGE_BYTES + (size_t)n_in + (size_t)n_in / 32 * sizeof(xq_block);
}

extern "C" int cuda_chain_fits(const cuda_chain_link *links, int n) {
    if (n < 1 || n > CUDA_CHAIN_MAX || !cuda_matvec_int8())
        return 0;
    const int wt = links[0].w->type, grid = multiprocessors();
    for (int i = 0; i < n; i++) {
        const cuda_weight *w = links[i].w;
        const int mode = links[i].mode;
        if (w->type != wt || !cuda_wtype_int8_one_scale(wt) || w->next || w->n_in % 256 != 0 || w->n_in > (1 << 20) ||
            w->n_out > (1 << 24) || ((uintptr_t)w->w & 15) || ((uintptr_t)w->d & 15) ||
            ((uintptr_t)links[i].x & 15) || ((uintptr_t)links[i].norm_w & 15) ||
            (mode != MV_ADD && mode != MV_NORM_STORE && !gated(mode)))
            return 0;
        const chain_geom geo = chain_geometry(wt, mode, (int)w->n_in);
        const int64_t n_logical = w->n_out / geo.parts, slice_rows = (n_logical + grid - 1) / grid;
        if (geo.rows < 1 || slice_rows * geo.per_row * 2 > CHAIN_SUMS)
            return 0;
    }
    return chain_smem(links, n) + sizeof(float) * (CHAIN_SUMS + CHAIN_WARPS) + 16 * CHAIN_STAGES <= SMEM_BLOCK_MAX;
}

/* Where the chain measured faster than the matvecs one by one in decode (docs/perf-log.md,
 * twentieth, twenty-first and forty-fifth sessions; edgerunner bench, tok/s, chain / one
 * by one): Qwen3-4B (wo and down of 2,560 rows give k_matvec_stream 80 blocks for 132
 * multiprocessors), Q4_0 727 / 713, on the H200 again 774 / 746; Q8_0 583 / 552, now level
 * (596 / 596). Not 8B (4,096 rows): Q4_0 578 / 582; Q8_0 390 / 383 at first, since the
 * streaming matvec's later gains 394-395 / 402-404. Nor 1.7B (2,048 rows: Q4_0 1,303 /
 * 1,304; its Q8_0 layer measured slower, 27.0 against 25.8 us). So: residuals from 2,560
 * rows to two thirds of what fills the streaming blocks (4B), and not where k_matvec_ring
 * takes gate|up: one by one through the ring, 4B Q8_0 decodes at 532 tok/s against the
 * chain's 493, Q4_0 level (686 / 684; an H100, fifty-first session). */
extern "C" int cuda_chain_pays(const cuda_chain_link *links, int n) {
    if (n < 1)
        return 0;
    const int64_t rows = links[0].w->n_out; /* wo's: the residual's */
    if (n > 1 && cuda_matvec_takes_ring(links[1].w, links[1].mode))
        return 0;
    return rows >= 2560 && rows * 3 <= (int64_t)2 * multiprocessors() * cuda_matvec_stream_block_rows();
}

template <int WT>
static cudaError_t launch_chain(const chain_params &p, size_t smem, cudaStream_t stream) {
    const cudaError_t e = allow_smem(k_chain<WT>, smem);
    if (e != cudaSuccess)
        return e;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(dim3(multiprocessors()), dim3(CHAIN_THREADS), smem, stream, &attr);
    return cudaLaunchKernelEx(&cfg, k_chain<WT>, p);
}

extern "C" cudaError_t cuda_chain(const cuda_chain_link *links, int n, float eps, cuda_step_state *state,
                                  unsigned int base, cudaStream_t stream) {
    if (!cuda_chain_fits(links, n))
        return cudaErrorInvalidValue;
    chain_params p = {};
    for (int i = 0; i < n; i++) {
        const cuda_weight *w = links[i].w;
        p.ph[i] = {(const uint8_t *)w->w, (const __half *)w->d, links[i].x, links[i].norm_w, links[i].y,
                   links[i].mode, (int)w->n_in, (int)(w->n_out / (gated(links[i].mode) ? 2 : 1))};
    }
    p.n_phase = n;
    p.eps = eps;
    p.ctr = &state->chain_ctr;
    p.base = base;
    const size_t smem = chain_smem(links, n);
    return links[0].w->type == CUDA_W_Q8_0 ? launch_chain<CUDA_W_Q8_0>(p, smem, stream)
                                           : launch_chain<CUDA_W_Q4_0>(p, smem, stream);
}
