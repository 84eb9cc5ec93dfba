/*
 * attention.cu - grouped-query attention of one token (decode) over the KV cache, in
 * F32, F16 or Q8_0 (enum cuda_kv_type, kernels.h: -ctk/-ctv); prompts and batches of
 * several sequences are in attention_batch.cu, what both share in attention.cuh.
 *
 * Decode (one token) is one fused kernel per layer, a thread-block cluster of
 * ATT_CLUSTER blocks per head. Before waiting for the previous kernel, each block loads
 * what does not depend on it: its first round of cached keys and values (earlier steps
 * wrote them; with an F16 cache and a grid of one block a multiprocessor the next
 * ATT_PRE_ROUNDS rounds too, copied into shared memory: decode_pre), the norm weights and
 * the RoPE angles. Then it applies the per-head Q RMSNorm and RoPE to its query, the
 * same to the new K of its KV head (the first block of the group also writes K and V to
 * the cache), and attends over its share of positions j0..pos with an online softmax
 * per warp, the next round's loads in flight during each round. Each block stores its
 * partial result into the shared memory of the cluster's first block (distributed shared
 * memory), which after one cluster barrier merges them: no global ticket, no second
 * launch. The output projection wo is a matvec of its own (step.c says why).
 * Reads per token: (pos + 1 - j0) * 2 * head_dim elements of the cache per KV head.
 *
 * Over a long context the step splits its attention over the context instead
 * (flash-decoding: k_attention_decode_split and its F16 form, then k_attention_merge).
 */
#include "backend/cuda/attention.cuh"

#define KB 4 /* keys in flight per warp in decode */
#define ATT_CLUSTER 8 /* blocks per head in decode: the largest portable cluster */
/* Rounds after the first that k_attention_decode copies into shared memory before the
 * wait (an F16 cache): with CUDA_SPLIT_MIN 512 the step's cluster kernel has at most 4
 * rounds of ATT_CLUSTER * ATT_WARPS * KB = 128 keys */
#define ATT_PRE_ROUNDS 3

/* An element of a decode round as it sits in a register until used: the F16 cache's
 * 16 bits, else the float's bits. F16 elements are widened only where they are used:
 * widened as they arrived (kv_get), ptxas reused one register per load and so waited
 * for each pair of loads before issuing the next, and the round's 32 loads ran one
 * after another (the F16 decode attention took 15.8 us a launch against F32's 10.2). */
template <int KV>
static __device__ __forceinline__ uint32_t kv_raw(const void *cache, const __half *scales, size_t e) {
    if constexpr (KV == CUDA_KV_F16)
        return static_cast<const uint16_t *>(cache)[e];
    else
        return __float_as_uint(kv_get<KV>(cache, scales, e));
}
template <int KV>
static __device__ __forceinline__ float kv_val(uint32_t raw) {
    if constexpr (KV == CUDA_KV_F16)
        return __half2float(__ushort_as_half((unsigned short)raw));
    else
        return __uint_as_float(raw);
}
/* A value the cache holds (a row rounded by kv_round_store), as kv_raw gives it. */
template <int KV>
static __device__ __forceinline__ uint32_t kv_raw_of(float held) {
    if constexpr (KV == CUDA_KV_F16)
        return __half_as_ushort(__float2half_rn(held)); /* exact: held is an F16 value */
    else
        return __float_as_uint(held);
}

/* Keys and values jb .. jb + KB - 1 (those < n_keys, except the newest at pos, which
 * the caller takes from shared memory) into registers (kv_raw), all loads in flight at
 * once. */
template <int DPL, int KV>
static __device__ __forceinline__ void load_round(const void *k_cache, const __half *k_d, const void *v_cache,
                                                  const __half *v_d, int jb, int n_keys, int pos, int kv_dim, int off,
                                                  int hd, int lane, uint32_t kv[KB][DPL], uint32_t vv[KB][DPL]) {
#pragma unroll
    for (int b = 0; b < KB; b++) {
        const int j = jb + b;
        const bool ok = j < n_keys && j != pos;
        const size_t e = (size_t)(ok ? j : 0) * kv_dim + off;
#pragma unroll
        for (int t = 0; t < DPL; t++) {
            const int i = lane + 32 * t;
            kv[b][t] = ok && i < hd ? kv_raw<KV>(k_cache, k_d, e + i) : 0u; /* 0u: +0.0 in every type */
            vv[b][t] = ok && i < hd ? kv_raw<KV>(v_cache, v_d, e + i) : 0u;
        }
    }
}

/* A warp's rounds 1 .. ATT_PRE_ROUNDS of an F16 cache (heads of 32 DPL), copied before
 * the wait into its buffer buf, (ATT_PRE_ROUNDS, KB, 2: K then V, 32 DPL) halves: the
 * keys below pos only (those earlier steps wrote; the rest stay unset, as load_round
 * leaves them 0). Without it each of those rounds is a round trip to L2 after the wait. */
template <int DPL>
static __device__ __forceinline__ void copy_rounds(const void *k_cache, const void *v_cache, uint16_t *buf, int jb0,
                                                   int stride, int pos, int kv_dim, int off, int lane) {
    constexpr int HD = 32 * DPL, CHUNKS = HD / 8; /* 16-byte chunks a row */
    for (int c = lane; c < ATT_PRE_ROUNDS * KB * 2 * CHUNKS; c += 32) {
        const int row = c / CHUNKS, r = row / (2 * KB) + 1, b = (row / 2) % KB, j = jb0 + r * stride + b;
        if (j < pos)
            cp_async16(buf + (size_t)row * HD + 8 * (c % CHUNKS),
                       static_cast<const uint16_t *>(row % 2 ? v_cache : k_cache) + (size_t)j * kv_dim + off +
                           8 * (c % CHUNKS),
                       16);
    }
    cp_async_commit();
}

/* Round r (1 .. ATT_PRE_ROUNDS, keys jb ..) from copy_rounds' buffer, as load_round
 * would give it */
template <int DPL>
static __device__ __forceinline__ void load_round_shared(const uint16_t *buf, int r, int jb, int pos, int lane,
                                                         uint32_t kv[KB][DPL], uint32_t vv[KB][DPL]) {
    constexpr int HD = 32 * DPL;
#pragma unroll
    for (int b = 0; b < KB; b++) {
        const bool ok = jb + b < pos;
        const uint16_t *row = buf + (size_t)(((r - 1) * KB + b) * 2) * HD;
#pragma unroll
        for (int t = 0; t < DPL; t++) {
            kv[b][t] = ok ? row[lane + 32 * t] : 0u;
            vv[b][t] = ok ? row[HD + lane + 32 * t] : 0u;
        }
    }
}

/* The new rows of a decode step, after the wait (both decode kernels): warp 0 norms and
 * rotates head h's query into q, warp 1 the new K of its KV head into k_new and warp 2
 * rounds the new V into v_new, each as the cache holds it (the writer also stores K and V
 * in the caches); nw and cs: the norm weights (q's for warp 0, k's for the others) and
 * RoPE angles loaded before the wait. The caller syncs the block. */
template <int DPL, int KV>
static __device__ __forceinline__ void decode_new_rows(const cuda_attn_params &p, const float *qkv, int h, int kvh,
                                                       int pos, bool writer, const float nw[DPL],
                                                       const float2 cs[(DPL + 1) / 2], void *k_cache, __half *k_d,
                                                       void *v_cache, __half *v_d, float *q, float *k_new,
                                                       float *v_new, int warp, int lane) {
    const int hd = p.head_dim, kv_dim = p.n_head_kv * hd, q_dim = p.n_head * hd;
    if (warp == 0) {
        head_norm_rope<DPL>(qkv + h * hd, head_bias(p, h * hd), q, p.q_norm != nullptr, nw, cs, p, lane);
    } else if (warp == 1) {
        head_norm_rope<DPL>(qkv + q_dim + kvh * hd, head_bias(p, q_dim + kvh * hd), k_new, p.k_norm != nullptr, nw,
                            cs, p, lane);
        /* every block rounds the new row as the writer stores it: it attends with the cache's values */
        store_head_row<DPL, KV>(k_new, nullptr, true, k_new, k_cache, k_d, (size_t)pos * kv_dim + kvh * hd, hd, lane,
                                writer);
    } else if (warp == 2) {
        store_head_row<DPL, KV>(qkv + q_dim + kv_dim + kvh * hd, head_bias(p, q_dim + kv_dim + kvh * hd), false, v_new,
                                v_cache, v_d, (size_t)pos * kv_dim + kvh * hd, hd, lane, writer);
    }
}

/* A warp's online softmax over its keys jb0, jb0 + stride, ... below j_end, KB at a
 * time (both decode kernels): the first round already in kv/vv (load_round, issued before
 * the wait), each next round's loads in flight while it computes this one. The key at pos
 * is the new row, from k_new/v_new in shared memory (other blocks may not see its store
 * yet). q: the head's query (shared memory); m, l, acc: the warp's state (lane l holds
 * dims l, l + 32, ...). */
template <int DPL, int KV, bool PRE>
static __device__ __forceinline__ void attend_keys(const float *q, const float *k_new, const float *v_new,
                                                   const void *k_cache, const __half *k_d, const void *v_cache,
                                                   const __half *v_d, int jb0, int stride, int j_end, int pos,
                                                   int kv_dim, int off, int hd, int lane, uint32_t kv[KB][DPL],
                                                   uint32_t vv[KB][DPL], const uint16_t *pre_buf, float *m_out,
                                                   float *l_out, float acc[DPL]) {
    const float scale = 1.0f / sqrtf((float)hd);
    float m = -INFINITY, l = 0.0f, qr[DPL];
#pragma unroll
    for (int t = 0; t < DPL; t++) {
        acc[t] = 0.0f;
        qr[t] = lane + 32 * t < hd ? q[lane + 32 * t] : 0.0f;
    }
    for (int jb = jb0, r = 0; jb < j_end; jb += stride, r++) {
        uint32_t kn[KB][DPL], vn[KB][DPL]; /* the next round, in flight during this one */
        if (jb + stride < j_end) {
            if (PRE && r < ATT_PRE_ROUNDS) /* copied before the wait (copy_rounds) */
                load_round_shared<DPL>(pre_buf, r + 1, jb + stride, pos, lane, kn, vn);
            else
                load_round<DPL, KV>(k_cache, k_d, v_cache, v_d, jb + stride, j_end, pos, kv_dim, off, hd, lane, kn,
                                    vn);
        }
#pragma unroll
        for (int b = 0; b < KB; b++) {
            if (jb + b == pos) {
#pragma unroll
                for (int t = 0; t < DPL; t++) {
                    const int i = lane + 32 * t;
                    kv[b][t] = i < hd ? kv_raw_of<KV>(k_new[i]) : 0u;
                    vv[b][t] = i < hd ? kv_raw_of<KV>(v_new[i]) : 0u;
                }
            }
        }
        float sc[KB];
#pragma unroll
        for (int b = 0; b < KB; b++) {
            float s_ = 0.0f;
#pragma unroll
            for (int t = 0; t < DPL; t++)
                s_ += qr[t] * kv_val<KV>(kv[b][t]);
            sc[b] = jb + b < j_end ? warp_sum(s_) * scale : -INFINITY;
        }
        float m_new = m;
#pragma unroll
        for (int b = 0; b < KB; b++)
            m_new = fmaxf(m_new, sc[b]);
        const float corr = expf(m - m_new); /* exp(-inf) = 0 on the first keys */
        l *= corr;
#pragma unroll
        for (int t = 0; t < DPL; t++)
            acc[t] *= corr;
#pragma unroll
        for (int b = 0; b < KB; b++) {
            const float pr = expf(sc[b] - m_new); /* 0 for keys past the range */
            l += pr;
#pragma unroll
            for (int t = 0; t < DPL; t++)
                acc[t] += pr * kv_val<KV>(vv[b][t]);
        }
        m = m_new;
#pragma unroll
        for (int b = 0; b < KB; b++)
#pragma unroll
            for (int t = 0; t < DPL; t++) {
                kv[b][t] = kn[b][t];
                vv[b][t] = vn[b][t];
            }
    }
    *m_out = m;
    *l_out = l;
}

/* A block's share of head h's keys in both decode kernels: before the wait, what does not
 * depend on this step's q, k and v (the first round of cached keys and values, which
 * earlier steps wrote, the norm weights and the RoPE angles); after it, the new rows
 * (decode_new_rows), the online softmax of each warp over keys jb0, jb0 + stride, ...
 * below j_end (attend_keys), and the warps merged into the block's state (block_state:
 * *bm, *bl, and block_acc's accumulator). */
template <int DPL, int KV, bool PRE>
static __device__ __forceinline__ void attend_share(const cuda_attn_params &p, const float *qkv, void *k_cache,
                                                    void *v_cache, int h, int pos, bool writer, int jb0, int stride,
                                                    int j_end, uint16_t *pre_buf, float *q, float *k_new, float *v_new,
                                                    float *w_m, float *w_l, float (*w_acc)[32 * DPL], float *bm,
                                                    float *bl) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int hd = p.head_dim, kvh = h / (p.n_head / p.n_head_kv), kv_dim = p.n_head_kv * hd;
    __half *k_d = kv_scales<KV>(k_cache, p), *v_d = kv_scales<KV>(v_cache, p);
    uint32_t kv[KB][DPL], vv[KB][DPL]; /* kv_raw */
    float nw[DPL];
    float2 cs[(DPL + 1) / 2];
    load_round<DPL, KV>(k_cache, k_d, v_cache, v_d, jb0, j_end, pos, kv_dim, kvh * hd, hd, lane, kv, vv);
    if (PRE)
        copy_rounds<DPL>(k_cache, v_cache, pre_buf, jb0, stride, pos, kv_dim, kvh * hd, lane);
    load_norm<DPL>(warp == 0 ? p.q_norm : p.k_norm, hd, lane, nw);
    load_rope<DPL>(p, pos, lane, cs);
    pdl_wait();

    decode_new_rows<DPL, KV>(p, qkv, h, kvh, pos, writer, nw, cs, k_cache, k_d, v_cache, v_d, q, k_new, v_new, warp,
                             lane);
    if (PRE)
        cp_async_wait_all();
    __syncthreads();
    float m, l, acc[DPL];
    attend_keys<DPL, KV, PRE>(q, k_new, v_new, k_cache, k_d, v_cache, v_d, jb0, stride, j_end, pos, kv_dim, kvh * hd,
                              hd, lane, kv, vv, pre_buf, &m, &l, acc);
    block_state<DPL>(m, l, acc, w_m, w_l, w_acc, warp, lane, bm, bl);
}

/* Thread-block clusters (sm_90): the blocks of one head share their partial results
 * through distributed shared memory, without a round trip through global memory. */
static __device__ __forceinline__ void cluster_sync(void) {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

/* Stores v at `local` (a shared-memory address of this block) in the shared memory of
 * block `rank` of the cluster: a remote store does not wait for a reply, a remote load
 * does. */
static __device__ __forceinline__ void cluster_store(float *local, unsigned int rank, float v) {
    const unsigned int a = smem_addr(local);
    unsigned int r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(r), "f"(v) : "memory");
}

/* grid (n_head, ATT_CLUSTER), one cluster per head (blockIdx.y is the block's rank in
 * it). Warp w of block s takes keys j0 + (s * ATT_WARPS + w) * KB + r * stride .. + KB - 1
 * in round r (stride: the keys of a round of the whole cluster; j0 the window's first
 * key, 0 without one), with the next round's loads in flight while it computes this one;
 * with PRE (an F16 cache of heads of 32 DPL, rows in whole 16-byte units: decode_pre)
 * rounds 1 .. ATT_PRE_ROUNDS come from shared memory, copied before the wait.
 * Rank 0 merges the blocks' states and writes the head's output to out. */
template <int DPL, int KV, bool PRE>
__global__ void __launch_bounds__(ATT_WARPS * 32)
k_attention_decode(const cuda_attn_params p, const float *__restrict__ qkv, void *k_cache, void *v_cache,
                   const cuda_step_state *state, float *__restrict__ out) {
    __shared__ float q[32 * DPL], k_new[32 * DPL], v_new[32 * DPL];
    __shared__ float w_m[ATT_WARPS], w_l[ATT_WARPS], w_acc[ATT_WARPS][32 * DPL];
    /* every block's merged state, stored there by the blocks (in rank 0's) */
    __shared__ float c_m[ATT_CLUSTER], c_l[ATT_CLUSTER], c_acc[ATT_CLUSTER][32 * DPL];
    const int h = blockIdx.x, s = blockIdx.y;
    const int warp = threadIdx.x >> 5, group = p.n_head / p.n_head_kv;
    pdl_launch_next(); /* at once: the next matvec copies its weights while this kernel runs */
    /* the position comes from the previous step (its commit), not from this one */
    const int pos = __ldcg(&state->pos);
    const bool writer = h % group == 0 && s == 0;
    /* keys j0..pos: the warps' keys shifted by j0, so nothing below the window is read
     * and full attention (j0 = 0) pays a select and an add */
    const int j0 = p.window > 0 ? max(0, pos - p.window + 1) : 0;
    const int jb0 = j0 + (s * ATT_WARPS + warp) * KB;
    /* with PRE, the warps' later rounds copied before the wait (copy_rounds) */
    __shared__ __align__(16) uint16_t pre_s[ATT_WARPS][PRE ? ATT_PRE_ROUNDS * KB * 2 * 32 * DPL : 8];
    float bm, bl;
    attend_share<DPL, KV, PRE>(p, qkv, k_cache, v_cache, h, pos, writer, jb0, ATT_CLUSTER * ATT_WARPS * KB, pos + 1,
                               PRE ? pre_s[warp] : nullptr, q, k_new, v_new, w_m, w_l, w_acc, &bm, &bl);
    const int hd = p.head_dim;
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        cluster_store(&c_acc[s][i], 0, block_acc<DPL>(w_m, w_acc, bm, i));
    if (threadIdx.x == 0) {
        cluster_store(&c_m[s], 0, bm);
        cluster_store(&c_l[s], 0, bl);
    }
    /* one barrier: the blocks' stores are then visible to rank 0, out of its own shared
     * memory, so no block waits for another after it */
    cluster_sync();
    if (s != 0)
        return;
    float gm = -INFINITY;
    for (int r = 0; r < ATT_CLUSTER; r++)
        gm = fmaxf(gm, c_m[r]);
    float wr[ATT_CLUSTER], gl = 0.0f; /* each block's weight, 0 for a block with no keys */
#pragma unroll
    for (int r = 0; r < ATT_CLUSTER; r++) {
        wr[r] = c_m[r] != -INFINITY ? expf(c_m[r] - gm) : 0.0f;
        gl += wr[r] != 0.0f ? c_l[r] * wr[r] : 0.0f;
    }
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float a = 0.0f;
#pragma unroll
        for (int r = 0; r < ATT_CLUSTER; r++)
            a += wr[r] != 0.0f ? c_acc[r][i] * wr[r] : 0.0f;
        out[h * hd + i] = a / gl;
    }
}

/* Decode over a long context (flash-decoding): grid (n_head, n_split), block s of head h
 * attends over the s-th share of the keys j0..pos (shares of whole rounds of the block's
 * warps) as a block of k_attention_decode does, and stores its state (m, l, acc[hd]) into
 * part; k_attention_merge combines a head's shares. The cluster kernel gives a head 32
 * warps, each waiting on its round of loads every KB keys: at 16k keys that is 128
 * rounds in a row, a memory latency each, and the kernel ran at about a tenth of the
 * bandwidth. Here a head gets n_split blocks (cuda_attention_split_count: the blocks
 * that fit on the device at once), so the rounds run side by side. */
template <int DPL, int KV>
__global__ void __launch_bounds__(ATT_WARPS * 32)
k_attention_decode_split(const cuda_attn_params p, const float *__restrict__ qkv, void *k_cache, void *v_cache,
                         const cuda_step_state *state, float *__restrict__ part) {
    __shared__ float q[32 * DPL], k_new[32 * DPL], v_new[32 * DPL];
    __shared__ float w_m[ATT_WARPS], w_l[ATT_WARPS], w_acc[ATT_WARPS][32 * DPL];
    const int h = blockIdx.x, s = blockIdx.y, n_split = gridDim.y;
    const int warp = threadIdx.x >> 5, hd = p.head_dim, group = p.n_head / p.n_head_kv;
    pdl_launch_next();
    const int pos = __ldcg(&state->pos);
    const bool writer = h % group == 0 && s == 0;
    const int j0 = p.window > 0 ? max(0, pos - p.window + 1) : 0;
    const int round = ATT_WARPS * KB, n_rounds = (pos + 1 - j0 + round - 1) / round;
    const int share = (n_rounds + n_split - 1) / n_split * round; /* keys per block */
    const int j_begin = j0 + s * share, j_end = min(pos + 1, j_begin + share);
    float bm, bl;
    attend_share<DPL, KV, false>(p, qkv, k_cache, v_cache, h, pos, writer, j_begin + warp * KB, round, j_end, nullptr,
                                 q, k_new, v_new, w_m, w_l, w_acc, &bm, &bl);
    float *ps = part + ((size_t)h * n_split + s) * (hd + 2); /* (hd + 2): m, l, acc */
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        ps[2 + i] = block_acc<DPL>(w_m, w_acc, bm, i);
    if (threadIdx.x == 0) {
        ps[0] = bm;
        ps[1] = bl;
    }
}

/* grid (n_head_kv, n_split), dynamic shared memory split_f16_smem(LPK, G); G >= the
 * heads per KV head (a power of two: the registers of the queries and their states),
 * hd = 8 * LPK. */
template <int LPK, int G>
__global__ void __launch_bounds__(ATT_WARPS * 32)
k_attention_decode_split_f16(const cuda_attn_params p, const float *__restrict__ qkv, void *k_cache, void *v_cache,
                             const cuda_step_state *state, float *__restrict__ part) {
    constexpr int HD = 8 * LPK, DPL = HD / 32, KPL = 32 / LPK;
    constexpr int L = SPLIT_LOADS, S = SPLIT_STAGES, RK = L * KPL; /* RK: keys of a warp's stage */
    extern __shared__ uint4 smem[];
    __shared__ float q_s[G][HD], k_new[HD], v_new[HD];
    const int kvh = blockIdx.x, s = blockIdx.y, n_split = gridDim.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int group = p.n_head / p.n_head_kv, kv_dim = p.n_head_kv * HD, q_dim = p.n_head * HD;
    const __half *kc = static_cast<const __half *>(k_cache), *vc = static_cast<const __half *>(v_cache);
    uint4 *ring = smem + (size_t)warp * S * 2 * L * 32; /* this warp's (S, 2, L, 32) */
    pdl_launch_next();
    const int pos = __ldcg(&state->pos);
    const int j0 = p.window > 0 ? max(0, pos - p.window + 1) : 0;
    const int round = ATT_WARPS * RK, n_rounds = (pos + 1 - j0 + round - 1) / round;
    const int share = (n_rounds + n_split - 1) / n_split * round; /* keys per block */
    const int j_begin = j0 + s * share, j_end = min(pos + 1, j_begin + share);
    const int jb0 = j_begin + warp * RK;
    /* the first S - 1 stages before the wait: the rows below pos are not the previous
     * kernels' to write */
#pragma unroll
    for (int t = 0; t < S - 1; t++) {
        const int jb = jb0 + t * round;
        if (jb < j_end)
            copy_stage<LPK, L>(ring + t * 2 * L * 32, ring + (t * 2 + 1) * L * 32, kc, vc, jb, j_end, pos, kv_dim,
                               kvh * HD, lane);
        cp_async_commit(); /* empty groups too: the wait below counts groups */
    }
    pdl_wait();

    /* the new K and V rows (block 0 of the KV head writes them) and the group's queries:
     * a warp per row, in turn */
    for (int t = warp; t < 2 + group; t += ATT_WARPS) {
        float nw[DPL];
        float2 cs[(DPL + 1) / 2];
        load_rope<DPL>(p, pos, lane, cs);
        if (t == 0) {
            load_norm<DPL>(p.k_norm, HD, lane, nw);
            head_norm_rope<DPL>(qkv + q_dim + kvh * HD, head_bias(p, q_dim + kvh * HD), k_new, p.k_norm != nullptr, nw,
                                cs, p, lane);
            store_head_row<DPL, CUDA_KV_F16>(k_new, nullptr, true, k_new, k_cache, nullptr,
                                             (size_t)pos * kv_dim + kvh * HD, HD, lane, s == 0);
        } else if (t == 1) {
            store_head_row<DPL, CUDA_KV_F16>(qkv + q_dim + kv_dim + kvh * HD, head_bias(p, q_dim + kv_dim + kvh * HD),
                                             false, v_new, v_cache, nullptr, (size_t)pos * kv_dim + kvh * HD, HD, lane,
                                             s == 0);
        } else {
            const int h = kvh * group + t - 2;
            load_norm<DPL>(p.q_norm, HD, lane, nw);
            head_norm_rope<DPL>(qkv + h * HD, head_bias(p, h * HD), q_s[t - 2], p.q_norm != nullptr, nw, cs, p, lane);
        }
    }
    __syncthreads();

    ring_attend_block<LPK, G, S>(ring, kc, vc, jb0, round, j_end, pos, k_new, v_new, kv_dim, kvh * HD, warp, lane, q_s,
                                 group, smem);
    for (int i = threadIdx.x; i < group * HD; i += blockDim.x) {
        const int g = i / HD, d = i % HD;
        float bm, bl;
        const float a = slot_state<LPK, G, ring_slots<LPK>()>(smem, g, d, &bm, &bl);
        float *ps = part + ((size_t)(kvh * group + g) * n_split + s) * (HD + 2); /* (HD + 2): m, l, acc */
        ps[2 + d] = a;
        if (d == 0) {
            ps[0] = bm;
            ps[1] = bl;
        }
    }
}

/* Folds a share's state (mt, lt, at) into an online softmax state (m, l, a); a share
 * without keys (mt = -inf) weighs nothing. */
static __device__ __forceinline__ void fold_share(float &m, float &l, float &a, float mt, float lt, float at) {
    if (mt == -INFINITY)
        return;
    const float mn = fmaxf(m, mt), sa = expf(m - mn), sb = expf(mt - mn);
    l = l * sa + lt * sb;
    a = a * sa + at * sb;
    m = mn;
}

/* grid (n_head, hd / 32 rounded up): 32 outputs of head h, a lane each, from the head's
 * n_split states (part, (n_head, n_split, hd + 2)). Warp w folds shares w, w + ATT_WARPS,
 * ... in that order, MERGE_LOADS at a time whose loads are all issued before any is used;
 * warp 0 then folds the 4 warps' states in order, so the order of the sums is fixed. Its
 * latency is the step's (wo waits for it): up to 64 shares cost one round trip to L2.
 * The merge before (grid (n_head), a thread a share) read every share's m and l, reduced
 * them across the block, then each output's n_split values 16 at a time: 5 round trips
 * at 49 shares. Measured on an H100 (docs/perf-log.md, forty-second session; gpu_depth.sh,
 * 256 steps), one round trip: Qwen3-0.6B Q8_0 1,283 -> 1,363 tok/s at 4,096 keys, 793 ->
 * 833 at 16,384; 8B Q8_0 266 -> 272 at 4,096. Reading them one after another (each thread
 * every share's m) had taken 10 us a layer at 0.6B's 16k keys; folding the merge into the
 * split kernel's last block to finish was slower than both (twenty-eighth session). */
#define MERGE_LOADS 16
__global__ void __launch_bounds__(ATT_WARPS * 32)
k_attention_merge(const float *__restrict__ part, int n_split, int hd, float *__restrict__ out) {
    __shared__ float wm[ATT_WARPS][32], wl[ATT_WARPS][32], wa[ATT_WARPS][32]; /* (m, l, a) a warp and lane */
    const int h = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int i = blockIdx.y * 32 + lane; /* this lane's output */
    const float *ph = part + (size_t)h * n_split * (hd + 2);
    pdl_launch_next();
    pdl_wait();
    float m = -INFINITY, l = 0.0f, a = 0.0f;
    for (int t0 = warp; t0 < n_split; t0 += MERGE_LOADS * ATT_WARPS) {
        float mt[MERGE_LOADS], lt[MERGE_LOADS], at[MERGE_LOADS];
#pragma unroll
        for (int k = 0; k < MERGE_LOADS; k++) {
            const int t = t0 + k * ATT_WARPS;
            const float *ps = ph + (size_t)t * (hd + 2);
            mt[k] = t < n_split ? __ldcg(ps) : -INFINITY;
            lt[k] = t < n_split ? __ldcg(ps + 1) : 0.0f;
            at[k] = t < n_split && i < hd ? __ldcg(ps + 2 + i) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < MERGE_LOADS; k++)
            fold_share(m, l, a, mt[k], lt[k], at[k]);
    }
    wm[warp][lane] = m;
    wl[warp][lane] = l;
    wa[warp][lane] = a;
    __syncthreads();
    if (warp != 0 || i >= hd)
        return;
    for (int w = 1; w < ATT_WARPS; w++)
        fold_share(m, l, a, wm[w][lane], wl[w][lane], wa[w][lane]);
    out[h * hd + i] = a / l;
}

/* Whether k_attention_decode copies its later rounds before the wait (PRE), asked by
 * launch_decode only for an F16 cache and DPL <= 4: heads of exactly 32 DPL whose rows
 * start at 16 bytes, and a grid of at most one block a multiprocessor, unless
 * EDGERUNNER_CUDA_ATT_PRE=0 (read once; for comparison). Two blocks of 32 KB a
 * multiprocessor (32 heads: Qwen3-4B, 8B) do not fit beside qkv's block, and wait for it
 * to leave: on the H200 (docs/perf-log.md, fifty-fifth session) the 8B Q4_0 layer at 16
 * keys took 41.54 -> 42.03 us with them, while at 16 heads (0.6B, 1.7B) decode after 300
 * keys gained 1-4%. */
static bool decode_pre(const cuda_attn_params *p, int dpl, const void *k_cache, const void *v_cache) {
    static const int on = env_switch("EDGERUNNER_CUDA_ATT_PRE", 1);
    return on && p->head_dim == 32 * dpl && (p->n_head_kv * p->head_dim) % 8 == 0 &&
           ((uintptr_t)k_cache | (uintptr_t)v_cache) % 16 == 0 && p->n_head * ATT_CLUSTER <= multiprocessors();
}

template <int DPL, int KV, bool PRE>
static cudaError_t launch_decode_pre(const cudaLaunchConfig_t *cfg, const cuda_attn_params *p, const float *qkv,
                                     void *k_cache, void *v_cache, const cuda_step_state *state, float *out) {
    /* no dynamic shared memory, but the largest carveout (allow_smem says why) */
    const cudaError_t e = allow_smem(k_attention_decode<DPL, KV, PRE>, 0);
    if (e != cudaSuccess)
        return e;
    return cudaLaunchKernelEx(cfg, k_attention_decode<DPL, KV, PRE>, *p, qkv, k_cache, v_cache, state, out);
}
template <int DPL, int KV>
static cudaError_t launch_decode(const cudaLaunchConfig_t *cfg, const cuda_attn_params *p, const float *qkv,
                                 void *k_cache, void *v_cache, const cuda_step_state *state, float *out) {
    if constexpr (KV == CUDA_KV_F16 && DPL <= 4)
        if (decode_pre(p, DPL, k_cache, v_cache))
            return launch_decode_pre<DPL, KV, true>(cfg, p, qkv, k_cache, v_cache, state, out);
    return launch_decode_pre<DPL, KV, false>(cfg, p, qkv, k_cache, v_cache, state, out);
}

template <int DPL>
static cudaError_t launch_decode_kv(const cudaLaunchConfig_t *cfg, const cuda_attn_params *p, const float *qkv,
                                    void *k_cache, void *v_cache, const cuda_step_state *state, float *out) {
#define CALL(KV) return launch_decode<DPL, KV>(cfg, p, qkv, k_cache, v_cache, state, out)
    DISPATCH_KV(p->kv_type, CALL);
#undef CALL
}

extern "C" cudaError_t cuda_attention_decode(const cuda_attn_params *p, const float *qkv, void *k_cache,
                                             void *v_cache, const cuda_step_state *state, float *out,
                                             cudaStream_t stream) {
    cudaLaunchAttribute attr[2];
    cudaLaunchConfig_t cfg =
        pdl_cluster_config(dim3(p->n_head, ATT_CLUSTER), dim3(ATT_WARPS * 32), ATT_CLUSTER, stream, attr);
#define CALL(D) return launch_decode_kv<D>(&cfg, p, qkv, k_cache, v_cache, state, out)
    DISPATCH_DPL(p->head_dim, CALL);
#undef CALL
}

/* The split decode's kernel for the shape and cache type (fn NULL where none), the heads
 * its grid spans (n_head_kv for the F16 kernel, which takes a KV head's queries together)
 * and its dynamic shared memory. */
typedef void (*split_kernel_fn)(cuda_attn_params, const float *, void *, void *, const cuda_step_state *, float *);
typedef struct split_launch {
    split_kernel_fn fn;
    int grid_heads;
    size_t smem;
} split_launch;
template <int DPL>
static split_kernel_fn split_kernel_kv(int kv_type) {
    return kv_type == CUDA_KV_F32    ? k_attention_decode_split<DPL, CUDA_KV_F32>
           : kv_type == CUDA_KV_F16  ? k_attention_decode_split<DPL, CUDA_KV_F16>
           : kv_type == CUDA_KV_Q8_0 ? k_attention_decode_split<DPL, CUDA_KV_Q8_0>
                                     : nullptr;
}
template <int LPK, int G>
static split_launch split_f16_g(int n_head_kv) {
    const split_launch sl = {k_attention_decode_split_f16<LPK, G>, n_head_kv, split_f16_smem(LPK, G)};
    return sl;
}
template <int LPK>
static split_launch split_f16(int group, int n_head_kv) {
    return group <= 1   ? split_f16_g<LPK, 1>(n_head_kv)
           : group <= 2 ? split_f16_g<LPK, 2>(n_head_kv)
           : group <= 4 ? split_f16_g<LPK, 4>(n_head_kv)
                        : split_f16_g<LPK, 8>(n_head_kv);
}
static split_launch split_kernel(const cuda_attn_params *p) {
    const int hd = p->head_dim, group = p->n_head_kv > 0 ? p->n_head / p->n_head_kv : 0;
    if (p->kv_type == CUDA_KV_F16 && (hd == 64 || hd == 128 || hd == 256) && group >= 1 && group <= 8 &&
        p->n_head == group * p->n_head_kv)
        return hd == 64    ? split_f16<8>(group, p->n_head_kv)
               : hd == 128 ? split_f16<16>(group, p->n_head_kv)
                           : split_f16<32>(group, p->n_head_kv);
    split_launch sl = {nullptr, p->n_head, 0};
    sl.fn = hd < 1        ? nullptr
            : hd <= 32  ? split_kernel_kv<1>(p->kv_type)
            : hd <= 64  ? split_kernel_kv<2>(p->kv_type)
            : hd <= 128 ? split_kernel_kv<4>(p->kv_type)
            : hd <= 256 ? split_kernel_kv<8>(p->kv_type)
                        : nullptr;
    return sl;
}

extern "C" int cuda_attention_split_count(const cuda_attn_params *p) {
    int dev = 0, n_sm = 0, per_sm = 0;
    const split_launch sl = split_kernel(p);
    if (!sl.fn || sl.grid_heads < 1 || allow_smem(sl.fn, sl.smem) != cudaSuccess ||
        cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sl.fn, ATT_WARPS * 32, sl.smem) != cudaSuccess)
        return 1;
    const int n = per_sm * n_sm / sl.grid_heads;
    return n < 1 ? 1 : n > CUDA_ATT_SPLIT_MAX ? CUDA_ATT_SPLIT_MAX : n;
}

extern "C" cudaError_t cuda_attention_decode_split(const cuda_attn_params *p, const float *qkv, void *k_cache,
                                                   void *v_cache, const cuda_step_state *state, float *part,
                                                   int n_split, float *out, cudaStream_t stream) {
    const split_launch sl = split_kernel(p);
    if (!sl.fn || n_split < 1 || n_split > CUDA_ATT_SPLIT_MAX)
        return cudaErrorInvalidValue;
    cudaError_t e = allow_smem(sl.fn, sl.smem);
    if (e != cudaSuccess)
        return e;
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = pdl_config(dim3(sl.grid_heads, n_split), dim3(ATT_WARPS * 32), sl.smem, stream, &attr);
    if ((e = cudaLaunchKernelEx(&cfg, sl.fn, *p, qkv, k_cache, v_cache, state, part)) != cudaSuccess)
        return e;
    cfg = pdl_config(dim3(p->n_head, (p->head_dim + 31) / 32), dim3(ATT_WARPS * 32), 0, stream, &attr);
    return cudaLaunchKernelEx(&cfg, k_attention_merge, (const float *)part, n_split, p->head_dim, out);
}

