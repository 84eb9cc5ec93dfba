/*
 * attention_batch.cu - attention of a prompt of one sequence (prefill) and of a batch of
 * several sequences' tokens (decode_batch), over the KV cache in any of its types; the
 * one-token decode is in attention.cu, what both share in attention.cuh.
 *
 * Prefill runs two kernels: Q/K norm + RoPE + cache store for all tokens, then
 * attention over the cache on the tensor cores (head_dim 64 and 128; see
 * k_attention_prefill_mma), or for other head sizes one warp per (head, query).
 *
 * A batch of several sequences runs the same Q/K norm + RoPE + store, each token at its
 * own position and sequence (token_rows), then, on an F16 cache with heads of 64, 128 or
 * 256, k_attention_batch_f16 (below), else a block per query head (k_attention_prefill).
 */
#include "backend/cuda/attention.cuh"

/* Online-softmax accumulation of one key/value row (elements e .. e + hd - 1 of the
 * caches) into a warp's state. */
template <int DPL, int KV>
static __device__ __forceinline__ void attend_row(const float *q, const void *k_cache, const __half *k_d,
                                                  const void *v_cache, const __half *v_d, size_t e, int hd, float scale,
                                                  int lane, float *m, float *l, float acc[DPL]) {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < DPL; j++) {
        const int i = lane + 32 * j;
        if (i < hd)
            s += q[i] * kv_get<KV>(k_cache, k_d, e + i);
    }
    s = warp_sum(s) * scale;
    const float m_new = fmaxf(*m, s);
    const float corr = expf(*m - m_new); /* exp(-inf) = 0 on the first row */
    const float pr = expf(s - m_new);
    *l = *l * corr + pr;
#pragma unroll
    for (int j = 0; j < DPL; j++) {
        const int i = lane + 32 * j;
        acc[j] = acc[j] * corr + (i < hd ? pr * kv_get<KV>(v_cache, v_d, e + i) : 0.0f);
    }
    *m = m_new;
}

/* Token t's position and its sequence's caches: pos0 + t in the caches given, or with
 * br.pos (a batch of several sequences) br.pos[t] in sequence br.seq[t]'s. */
static __device__ __forceinline__ int token_rows(const cuda_batch_rows &br, int t, int pos0, const void **k_cache,
                                                 const void **v_cache) {
    if (!br.pos)
        return pos0 + t;
    const size_t off = (size_t)br.seq[t] * br.seq_bytes;
    *k_cache = static_cast<const uint8_t *>(*k_cache) + off;
    *v_cache = static_cast<const uint8_t *>(*v_cache) + off;
    return br.pos[t];
}

/* ---- a batch of several sequences on an F16 cache: the split kernel's ring per query ----
 *
 * k_attention_prefill (a block per query head, a key per warp at a time, a load round trip
 * each) took 53 us a layer at Qwen3-0.6B's shape with 8 sequences of 128 keys, half the
 * batch step's kernel time (ncu, 2026-12-02). Here a block takes every query head of one
 * KV head of one token, over a share of the token's keys in its sequence's rows, through
 * the F16 split kernel's ring (ring_attend), BATCH_STAGES - 1 stages of loads in flight.
 * The shares are fixed by the query's own key count (batch_split_count), so its sums run
 * in the same order whatever else the batch holds. With one share the block writes the
 * query's output; else each share's state goes to part, and the query's last share to
 * finish (a ticket per token and KV head, left at 0 for the next launch) merges them in
 * share order. */
/* Rounds of keys (ATT_WARPS warps' stages) a share takes before a query splits: 8 (256
 * keys of 128 dims), so a batch of many short queries (a decode step of 64 sequences at a
 * few hundred keys) runs one block per (token, KV head) and no merge; at 4 rounds,
 * Qwen3-8B with 64 sequences of 130 keys took 48.5 us a layer in 1,024 blocks (ncu,
 * 2026-12-02) */
#define BATCH_SPLIT_ROUNDS 8
/* Ring stages per warp: 3 (48 KB a block) fit 4 blocks an SM, as the 4-head kernel's
 * registers do, where the decode kernel's 4 (64 KB) fit 3 */
#define BATCH_STAGES 3
static_assert(CUDA_ATT_BATCH_SPLIT <= ATT_WARPS * 32, "k_attention_batch_f16 merges a share a thread");

/* Shares of a query's n_rounds rounds of keys: one per BATCH_SPLIT_ROUNDS, at most
 * CUDA_ATT_BATCH_SPLIT. */
static __host__ __device__ __forceinline__ int batch_split_count(int n_rounds) {
    const int n = (n_rounds + BATCH_SPLIT_ROUNDS - 1) / BATCH_SPLIT_ROUNDS;
    return n < 1 ? 1 : n > CUDA_ATT_BATCH_SPLIT ? CUDA_ATT_BATCH_SPLIT : n;
}

/* grid (n_head_kv, tokens t0.., the most shares any query of the context has), dynamic
 * shared memory split_f16_smem(LPK, G, BATCH_STAGES); hd = 8 * LPK, G >= the heads per KV
 * head (a power of two). part (CUDA_ATT_BATCH_TOKENS, n_head, CUDA_ATT_BATCH_SPLIT, hd +
 * 2): m, l, acc of each share of the launch's tokens; ticket (CUDA_ATT_BATCH_TOKENS,
 * n_head_kv). */
template <int LPK, int G>
__global__ void __launch_bounds__(ATT_WARPS * 32)
k_attention_batch_f16(const cuda_attn_params p, const float *qkv, int t0, const cuda_batch_rows br,
                      const void *k_cache_l, const void *v_cache_l, float *part, unsigned int *ticket, __half *out) {
    constexpr int HD = 8 * LPK, KPL = 32 / LPK, L = SPLIT_LOADS, S = BATCH_STAGES, RK = L * KPL;
    extern __shared__ uint4 smem[];
    __shared__ float q_s[G][HD];
    __shared__ int is_last;
    const int kvh = blockIdx.x, tl = blockIdx.y, t = t0 + tl, s = blockIdx.z;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int group = p.n_head / p.n_head_kv, kv_dim = p.n_head_kv * HD, q_dim = p.n_head * HD;
    pdl_wait(); /* the batch's own rows were stored by the previous kernel */
    pdl_launch_next();
    const void *kcv = k_cache_l, *vcv = v_cache_l;
    const int qpos = token_rows(br, t, 0, &kcv, &vcv);
    const __half *kc = static_cast<const __half *>(kcv), *vc = static_cast<const __half *>(vcv);
    const int j0 = p.window > 0 ? max(0, qpos - p.window + 1) : 0;
    const int round = ATT_WARPS * RK, n_rounds = (qpos + 1 - j0 + round - 1) / round;
    const int n_split = batch_split_count(n_rounds);
    if (s >= n_split)
        return;
    const int share = (n_rounds + n_split - 1) / n_split * round; /* keys per block */
    const int j_begin = j0 + s * share, j_end = min(qpos + 1, j_begin + share);
    const int jb0 = j_begin + warp * RK;
    uint4 *ring = smem + (size_t)warp * S * 2 * L * 32; /* this warp's (S, 2, L, 32) */
#pragma unroll
    for (int st = 0; st < S - 1; st++) {
        const int jb = jb0 + st * round;
        if (jb < j_end)
            copy_stage<LPK, L>(ring + st * 2 * L * 32, ring + (st * 2 + 1) * L * 32, kc, vc, jb, j_end, -1, kv_dim,
                               kvh * HD, lane);
        cp_async_commit(); /* empty groups too: ring_attend's wait counts groups */
    }
    /* the group's queries, normed and rotated in place by k_qk_rope_store */
    const float *q = qkv + (size_t)t * (q_dim + 2 * kv_dim) + (size_t)kvh * group * HD;
    for (int i = threadIdx.x; i < group * HD; i += blockDim.x)
        q_s[i / HD][i % HD] = __ldcg(q + i);
    __syncthreads();
    ring_attend_block<LPK, G, S>(ring, kc, vc, jb0, round, j_end, -1, nullptr, nullptr, kv_dim, kvh * HD, warp, lane,
                                 q_s, group, smem);
    __half *o = out + (size_t)t * q_dim + (size_t)kvh * group * HD; /* (group, HD) */
    float *pt = part + ((size_t)tl * p.n_head + (size_t)kvh * group) * CUDA_ATT_BATCH_SPLIT * (HD + 2);
    for (int i = threadIdx.x; i < group * HD; i += blockDim.x) {
        const int g = i / HD, d = i % HD;
        float bm, bl;
        const float a = slot_state<LPK, G, ring_slots<LPK>()>(smem, g, d, &bm, &bl);
        if (n_split == 1) {
            o[i] = __float2half_rn(a / bl);
            continue;
        }
        float *ps = pt + ((size_t)g * CUDA_ATT_BATCH_SPLIT + s) * (HD + 2); /* (HD + 2): m, l, acc */
        ps[2 + d] = a;
        if (d == 0) {
            ps[0] = bm;
            ps[1] = bl;
        }
    }
    if (n_split == 1)
        return;
    __threadfence(); /* the state is visible before the ticket counts it */
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int *tk = ticket + (size_t)tl * p.n_head_kv + kvh;
        is_last = atomicAdd(tk, 1u) == (unsigned int)n_split - 1;
        if (is_last)
            atomicExch(tk, 0u); /* every share has counted */
    }
    __syncthreads();
    if (!is_last)
        return;
    __threadfence();
    for (int i = threadIdx.x; i < group * HD; i += blockDim.x) {
        const int g = i / HD, d = i % HD;
        const float *ph = pt + (size_t)g * CUDA_ATT_BATCH_SPLIT * (HD + 2);
        float gm = -INFINITY, gl = 0.0f, a = 0.0f;
        for (int r = 0; r < n_split; r++)
            gm = fmaxf(gm, __ldcg(ph + (size_t)r * (HD + 2)));
        for (int r = 0; r < n_split; r++) {
            const float mr = __ldcg(ph + (size_t)r * (HD + 2));
            const float w = mr == -INFINITY ? 0.0f : expf(mr - gm); /* a share without keys weighs nothing */
            gl += __ldcg(ph + (size_t)r * (HD + 2) + 1) * w;
            a += __ldcg(ph + (size_t)r * (HD + 2) + 2 + d) * w;
        }
        o[i] = __float2half_rn(a / gl);
    }
}

/* grid (n_tokens, ceil((n_head + n_head_kv) / 8)), 8 warps: warp y norms and rotates
 * q head 8 blockIdx.y + y in place, or a k head (stored to the cache, with its v). */
template <int DPL, int KV>
__global__ void k_qk_rope_store(const cuda_attn_params p, float *qkv, int pos0, const cuda_batch_rows br,
                                void *k_cache_l, void *v_cache_l) {
    __shared__ float bufs[8][32 * DPL];
    const int t = blockIdx.x, hh = blockIdx.y * 8 + threadIdx.y, lane = threadIdx.x;
    const bool live = hh < p.n_head + p.n_head_kv;
    float *buf = bufs[threadIdx.y];
    const int hd = p.head_dim, kv_dim = p.n_head_kv * hd, q_dim = p.n_head * hd;
    float *row = qkv + (size_t)t * (q_dim + 2 * kv_dim);
    /* the token's rows (the batch's positions, copied before the graph), its norm weights
     * and RoPE angles: read while the previous kernel ends */
    const void *kc = k_cache_l, *vc = v_cache_l;
    const int pos = token_rows(br, t, pos0, &kc, &vc);
    void *k_cache = const_cast<void *>(kc), *v_cache = const_cast<void *>(vc);
    const bool is_q = hh < p.n_head;
    const float *norm_w = is_q ? p.q_norm : p.k_norm;
    float nw[DPL];
    float2 cs[(DPL + 1) / 2];
    if (live) {
        load_norm<DPL>(norm_w, hd, lane, nw);
        load_rope<DPL>(p, pos, lane, cs);
    }
    pdl_wait();
    pdl_launch_next();
    if (!live)
        return;
    if (is_q) {
        head_norm_rope<DPL>(row + hh * hd, head_bias(p, hh * hd), buf, norm_w != nullptr, nw, cs, p, lane);
        for (int i = lane; i < hd; i += 32)
            row[hh * hd + i] = buf[i];
    } else {
        const int kvh = hh - p.n_head;
        head_norm_rope<DPL>(row + q_dim + kvh * hd, head_bias(p, q_dim + kvh * hd), buf, norm_w != nullptr, nw, cs,
                            p, lane);
        const size_t e0 = (size_t)pos * kv_dim + kvh * hd;
        store_head_row<DPL, KV>(buf, nullptr, true, buf, k_cache, kv_scales<KV>(k_cache, p), e0, hd, lane, true);
        store_head_row<DPL, KV>(row + q_dim + kv_dim + kvh * hd, head_bias(p, q_dim + kv_dim + kvh * hd), false, buf,
                                v_cache, kv_scales<KV>(v_cache, p), e0, hd, lane, true);
    }
}

/* grid (n_head, n_tokens): block (h, t) takes query t of head h, its warp w every
 * ATT_WARPS-th key of the query's window from the w-th, and the warps' states are merged
 * in warp order: each query's sums run in the same order whatever else the batch holds. */
template <int DPL, int KV>
__global__ void __launch_bounds__(ATT_WARPS * 32)
k_attention_prefill(const cuda_attn_params p, const float *__restrict__ qkv, int pos0, const cuda_batch_rows br,
                    const void *__restrict__ k_cache_l, const void *__restrict__ v_cache_l,
                    __half *__restrict__ out) {
    __shared__ float w_m[ATT_WARPS], w_l[ATT_WARPS], w_acc[ATT_WARPS][32 * DPL];
    pdl_wait();
    pdl_launch_next();
    const int h = blockIdx.x, t = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const void *k_cache = k_cache_l, *v_cache = v_cache_l;
    const int qpos = token_rows(br, t, pos0, &k_cache, &v_cache);
    const int hd = p.head_dim, kv_dim = p.n_head_kv * hd, q_dim = p.n_head * hd;
    const int kvh = h / (p.n_head / p.n_head_kv);
    const float *q = qkv + (size_t)t * (q_dim + 2 * kv_dim) + h * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float m = -INFINITY, l = 0.0f, acc[DPL];
#pragma unroll
    for (int j = 0; j < DPL; j++)
        acc[j] = 0.0f;
    const int j0 = p.window > 0 ? max(0, qpos - p.window + 1) : 0;
    const __half *k_d = kv_scales<KV>(k_cache, p), *v_d = kv_scales<KV>(v_cache, p);
    for (int j = j0 + warp; j <= qpos; j += ATT_WARPS)
        attend_row<DPL, KV>(q, k_cache, k_d, v_cache, v_d, (size_t)j * kv_dim + kvh * hd, hd, scale, lane, &m, &l, acc);
    float bm, bl;
    block_state<DPL>(m, l, acc, w_m, w_l, w_acc, warp, lane, &bm, &bl);
    for (int i = threadIdx.x; i < hd; i += ATT_WARPS * 32)
        out[(size_t)t * q_dim + h * hd + i] = __float2half_rn(block_acc<DPL>(w_m, w_acc, bm, i) / bl);
}

/* Prefill attention on the tensor cores (head_dim 64 or 128), FlashAttention-2 style:
 * a block takes FA_BQ queries of one head, each warp 16 of them; key tiles of FA_BK
 * keys are read from the cache (any type, as floats) into shared memory as F16 (K by key, V transposed:
 * by dim), S = Q K^T and O += P V run as mma.sync m16n8k16 (F16 inputs, F32 sums),
 * with the online softmax on S's fragments in registers. Q is scaled by 1/sqrt(hd)
 * before rounding to F16; P is rounded to F16 for P V, its row sums stay F32.
 * With the fragment layouts of mma_16816 (common.cuh), the C fragments of two 8-key
 * tiles of S are the A fragment of P for 16 keys. With a window, the tiles start at the
 * first key the block's first query sees; the keys below each row's window are masked
 * like those past it. */
#define FA_BQ 64
#define FA_BK 64
#define FA_THREADS (FA_BQ / 16 * 32)

template <int HD, int KV>
__global__ void __launch_bounds__(FA_THREADS)
k_attention_prefill_mma(const cuda_attn_params p, const float *__restrict__ qkv, int n_tokens, int pos0,
                        const void *__restrict__ k_cache, const void *__restrict__ v_cache,
                        __half *__restrict__ out) {
    /* +8 halves per row: the fragment loads of a warp then hit 32 different banks */
    __shared__ __align__(16) __half ks[FA_BK][HD + 8]; /* (keys, dims) */
    __shared__ __align__(16) __half vt[HD][FA_BK + 8]; /* (dims, keys) */
    const int h = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, c = lane & 3;
    const int kv_dim = p.n_head_kv * HD, q_dim = p.n_head * HD, row_len = q_dim + 2 * kv_dim;
    const int kvh = h / (p.n_head / p.n_head_kv);
    const int q0 = blockIdx.y * FA_BQ + warp * 16; /* the warp's first query (token index) */
    const int qpos0 = pos0 + q0 + g, qpos1 = qpos0 + 8; /* positions of this thread's two rows */
    const float scale = 1.0f / sqrtf((float)HD);
    const __half *k_d = kv_scales<KV>(k_cache, p), *v_d = kv_scales<KV>(v_cache, p);

    /* the warp's Q as A fragments (rows past the batch are clamped and never stored) */
    uint32_t qf[HD / 16][4];
    {
        const float *qa = qkv + (size_t)min(q0 + g, n_tokens - 1) * row_len + h * HD;
        const float *qb = qkv + (size_t)min(q0 + g + 8, n_tokens - 1) * row_len + h * HD;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            const int d = 16 * kk + 2 * c;
            qf[kk][0] = half2_bits(qa[d] * scale, qa[d + 1] * scale);
            qf[kk][1] = half2_bits(qb[d] * scale, qb[d + 1] * scale);
            qf[kk][2] = half2_bits(qa[d + 8] * scale, qa[d + 9] * scale);
            qf[kk][3] = half2_bits(qb[d + 8] * scale, qb[d + 9] * scale);
        }
    }
    float o[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    /* -1e30, not -inf: with a window, a row may see no key of a whole tile (its first
     * tile, or any, for the rows past the batch); its maximum then stays finite, with
     * exp(m - mx) = 1 and l and o still 0 */
    float m0 = -1e30f, m1 = -1e30f, l0 = 0.0f, l1 = 0.0f;
    /* keys kb0 .. the position of the block's last query, kb0 the first key of its first
     * query's window (0 without one); lo0, lo1 the first keys of this thread's rows */
    const int n_keys = pos0 + min((int)(blockIdx.y + 1) * FA_BQ, n_tokens);
    const int kb0 = p.window > 0 ? max(0, pos0 + (int)blockIdx.y * FA_BQ - p.window + 1) : 0;
    const int lo0 = p.window > 0 ? qpos0 - p.window + 1 : 0, lo1 = p.window > 0 ? qpos1 - p.window + 1 : 0;
    /* the tiles a row of this warp masks: those past its first row's position (causal),
     * and those that start below its last row's window (first key w_lo_last) */
    const int w_first = pos0 + q0, w_lo_last = p.window > 0 ? w_first + 16 - p.window : 0;

    for (int kb = kb0; kb < n_keys; kb += FA_BK) {
        __syncthreads(); /* the previous tile is consumed */
        /* K: consecutive threads take consecutive float4s of a key row (coalesced) */
        for (int i = threadIdx.x; i < FA_BK * HD / 4; i += FA_THREADS) {
            const int key = i / (HD / 4), d = i % (HD / 4) * 4, j = kb + key;
            const float4 k4 = j < n_keys ? kv_get4<KV>(k_cache, k_d, (size_t)j * kv_dim + kvh * HD + d)
                                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            *reinterpret_cast<uint2 *>(&ks[key][d]) = make_uint2(half2_bits(k4.x, k4.y), half2_bits(k4.z, k4.w));
        }
        /* V: consecutive threads take consecutive keys, so that the transposed stores
         * of a warp fall in one row of vt */
        for (int i = threadIdx.x; i < FA_BK * HD / 4; i += FA_THREADS) {
            const int key = i % FA_BK, d = i / FA_BK * 4, j = kb + key;
            const float4 v4 = j < n_keys ? kv_get4<KV>(v_cache, v_d, (size_t)j * kv_dim + kvh * HD + d)
                                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            vt[d][key] = __float2half_rn(v4.x);
            vt[d + 1][key] = __float2half_rn(v4.y);
            vt[d + 2][key] = __float2half_rn(v4.z);
            vt[d + 3][key] = __float2half_rn(v4.w);
        }
        __syncthreads();

        /* S (16 x FA_BK) = Q K^T */
        float sc[FA_BK / 8][4];
#pragma unroll
        for (int n = 0; n < FA_BK / 8; n++) {
            sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
                const __half *kr = &ks[8 * n + g][16 * kk + 2 * c];
                mma_16816(sc[n], qf[kk], *reinterpret_cast<const uint32_t *>(kr),
                          *reinterpret_cast<const uint32_t *>(kr + 8));
            }
        }
        /* the mask, only in the tiles where a row of the warp needs it (a warp-uniform
         * branch): causal (keys past n_keys are past every row too), and the window */
        if (kb + FA_BK - 1 > w_first || kb < w_lo_last) {
#pragma unroll
            for (int n = 0; n < FA_BK / 8; n++) {
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int key = kb + 8 * n + 2 * c + e;
                    sc[n][e] = key <= qpos0 && key >= lo0 ? sc[n][e] : -INFINITY;
                    sc[n][2 + e] = key <= qpos1 && key >= lo1 ? sc[n][2 + e] : -INFINITY;
                }
            }
        }
        /* the rows' new maxima over the 4 threads that share them */
        float mx0 = m0, mx1 = m1;
#pragma unroll
        for (int n = 0; n < FA_BK / 8; n++) {
            mx0 = fmaxf(mx0, fmaxf(sc[n][0], sc[n][1]));
            mx1 = fmaxf(mx1, fmaxf(sc[n][2], sc[n][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float corr0 = expf(m0 - mx0), corr1 = expf(m1 - mx1);
        m0 = mx0;
        m1 = mx1;
        l0 *= corr0;
        l1 *= corr1;
#pragma unroll
        for (int n = 0; n < HD / 8; n++) {
            o[n][0] *= corr0;
            o[n][1] *= corr0;
            o[n][2] *= corr1;
            o[n][3] *= corr1;
        }
#pragma unroll
        for (int n = 0; n < FA_BK / 8; n++) {
            sc[n][0] = expf(sc[n][0] - mx0);
            sc[n][1] = expf(sc[n][1] - mx0);
            sc[n][2] = expf(sc[n][2] - mx1);
            sc[n][3] = expf(sc[n][3] - mx1);
            l0 += sc[n][0] + sc[n][1];
            l1 += sc[n][2] + sc[n][3];
        }
        /* O (16 x HD) += P V, 16 keys at a time */
#pragma unroll
        for (int kk = 0; kk < FA_BK / 16; kk++) {
            const uint32_t pa[4] = {half2_bits(sc[2 * kk][0], sc[2 * kk][1]), half2_bits(sc[2 * kk][2], sc[2 * kk][3]),
                                    half2_bits(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                                    half2_bits(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
            for (int n = 0; n < HD / 8; n++) {
                const __half *vr = &vt[8 * n + g][16 * kk + 2 * c];
                mma_16816(o[n], pa, *reinterpret_cast<const uint32_t *>(vr), *reinterpret_cast<const uint32_t *>(vr + 8));
            }
        }
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const int r0 = q0 + g, r1 = q0 + g + 8;
#pragma unroll
    for (int n = 0; n < HD / 8; n++) {
        const int d = h * HD + 8 * n + 2 * c;
        if (r0 < n_tokens)
            *reinterpret_cast<__half2 *>(out + (size_t)r0 * q_dim + d) = __floats2half2_rn(o[n][0] / l0, o[n][1] / l0);
        if (r1 < n_tokens)
            *reinterpret_cast<__half2 *>(out + (size_t)r1 * q_dim + d) = __floats2half2_rn(o[n][2] / l1, o[n][3] / l1);
    }
}

template <int KV>
static cudaError_t launch_qk_rope_store(const cuda_attn_params *p, float *qkv, int n_tokens, int pos0,
                                        const cuda_batch_rows &br, void *k_cache, void *v_cache, cudaStream_t stream) {
    const dim3 grid(n_tokens, (p->n_head + p->n_head_kv + 7) / 8);
    if (n_tokens <= 0)
        return cudaErrorInvalidValue;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(grid, dim3(32, 8), 0, stream, &attr);
#define CALL(D) return cudaLaunchKernelEx(&cfg, k_qk_rope_store<D, KV>, *p, qkv, pos0, br, k_cache, v_cache)
    DISPATCH_DPL(p->head_dim, CALL);
#undef CALL
}

extern "C" cudaError_t cuda_qk_rope_store(const cuda_attn_params *p, float *qkv, int n_tokens, int pos0,
                                          void *k_cache, void *v_cache, cudaStream_t stream) {
    const cuda_batch_rows one = {nullptr, nullptr, 0};
#define CALL(KV) return launch_qk_rope_store<KV>(p, qkv, n_tokens, pos0, one, k_cache, v_cache, stream)
    DISPATCH_KV(p->kv_type, CALL);
#undef CALL
}

extern "C" cudaError_t cuda_qk_rope_store_batch(const cuda_attn_params *p, float *qkv, int n_tokens,
                                                const cuda_batch_rows *br, void *k_cache, void *v_cache,
                                                cudaStream_t stream) {
    if (!br->pos || !br->seq)
        return cudaErrorInvalidValue;
#define CALL(KV) return launch_qk_rope_store<KV>(p, qkv, n_tokens, 0, *br, k_cache, v_cache, stream)
    DISPATCH_KV(p->kv_type, CALL);
#undef CALL
}

/* k_attention_prefill: a block per query on the CUDA cores */
template <int KV>
static cudaError_t launch_attention_rows(const cuda_attn_params *p, const float *qkv, int n_tokens, int pos0,
                                         const cuda_batch_rows &br, const void *k_cache, const void *v_cache,
                                         __half *o, cudaStream_t stream) {
    const dim3 grid(p->n_head, n_tokens);
    if (n_tokens <= 0 || n_tokens > 65535)
        return cudaErrorInvalidValue;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_config(grid, dim3(ATT_WARPS * 32), 0, stream, &attr);
#define CALL(D) return cudaLaunchKernelEx(&cfg, k_attention_prefill<D, KV>, *p, qkv, pos0, br, k_cache, v_cache, o)
    DISPATCH_DPL(p->head_dim, CALL);
#undef CALL
}

template <int KV>
static cudaError_t launch_prefill(const cuda_attn_params *p, const float *qkv, int n_tokens, int pos0,
                                  const void *k_cache, const void *v_cache, __half *o, cudaStream_t stream) {
    if (p->head_dim == 128 || p->head_dim == 64) {
        const dim3 grid(p->n_head, (n_tokens + FA_BQ - 1) / FA_BQ);
        if (p->head_dim == 128)
            k_attention_prefill_mma<128, KV><<<grid, FA_THREADS, 0, stream>>>(*p, qkv, n_tokens, pos0, k_cache, v_cache, o);
        else
            k_attention_prefill_mma<64, KV><<<grid, FA_THREADS, 0, stream>>>(*p, qkv, n_tokens, pos0, k_cache, v_cache, o);
        return ER_CUDA_LAUNCH_CHECK();
    }
    /* other head sizes: a block per query on the CUDA cores */
    const cuda_batch_rows one = {nullptr, nullptr, 0};
    return launch_attention_rows<KV>(p, qkv, n_tokens, pos0, one, k_cache, v_cache, o, stream);
}

extern "C" cudaError_t cuda_attention_prefill(const cuda_attn_params *p, const float *qkv, int n_tokens, int pos0,
                                              const void *k_cache, const void *v_cache, uint16_t *out,
                                              cudaStream_t stream) {
#define CALL(KV) return launch_prefill<KV>(p, qkv, n_tokens, pos0, k_cache, v_cache, reinterpret_cast<__half *>(out), stream)
    DISPATCH_KV(p->kv_type, CALL);
#undef CALL
}

/* k_attention_batch_f16 for the shape (fn NULL where it does not take it) and its
 * dynamic shared memory. */
typedef void (*batch_kernel_fn)(cuda_attn_params, const float *, int, cuda_batch_rows, const void *, const void *,
                                float *, unsigned int *, __half *);
typedef struct batch_launch {
    batch_kernel_fn fn;
    size_t smem;
} batch_launch;
template <int LPK, int G>
static batch_launch batch_f16_g(void) {
    const batch_launch bl = {k_attention_batch_f16<LPK, G>, split_f16_smem(LPK, G, BATCH_STAGES)};
    return bl;
}
template <int LPK>
static batch_launch batch_f16(int group) {
    return group <= 1 ? batch_f16_g<LPK, 1>() : group <= 2 ? batch_f16_g<LPK, 2>() : group <= 4 ? batch_f16_g<LPK, 4>()
                                                                                            : batch_f16_g<LPK, 8>();
}
static batch_launch batch_kernel(const cuda_attn_params *p) {
    const int hd = p->head_dim, group = p->n_head_kv > 0 ? p->n_head / p->n_head_kv : 0;
    const batch_launch none = {nullptr, 0};
    if (p->kv_type != CUDA_KV_F16 || p->head_dim_v != hd || group < 1 || group > 8 ||
        p->n_head != group * p->n_head_kv)
        return none;
    return hd == 64 ? batch_f16<8>(group) : hd == 128 ? batch_f16<16>(group) : hd == 256 ? batch_f16<32>(group) : none;
}

extern "C" size_t cuda_attention_batch_part_floats(const cuda_attn_params *p) {
    return batch_kernel(p).fn ? (size_t)CUDA_ATT_BATCH_TOKENS * p->n_head * CUDA_ATT_BATCH_SPLIT * (p->head_dim + 2)
                              : 0;
}

extern "C" cudaError_t cuda_attention_batch(const cuda_attn_params *p, const float *qkv, int n_tokens,
                                            const cuda_batch_rows *br, const void *k_cache, const void *v_cache,
                                            uint16_t *out, const cuda_attn_scratch *scratch, cudaStream_t stream) {
    if (!br->pos || !br->seq || n_tokens <= 0)
        return cudaErrorInvalidValue;
    const batch_launch bl = batch_kernel(p);
    if (bl.fn && scratch && scratch->part && scratch->ticket) {
        /* every query's shares in the grid: as many as the context's longest query has */
        const int64_t keys = p->window > 0 && p->window < p->n_ctx ? p->window : p->n_ctx;
        const int round = ATT_WARPS * SPLIT_LOADS * 256 / p->head_dim; /* keys of the warps' stages */
        const int max_split = batch_split_count((int)((keys + round - 1) / round));
        cudaError_t e = allow_smem(bl.fn, bl.smem);
        for (int t0 = 0; e == cudaSuccess && t0 < n_tokens; t0 += CUDA_ATT_BATCH_TOKENS) {
            const int nt = n_tokens - t0 < CUDA_ATT_BATCH_TOKENS ? n_tokens - t0 : CUDA_ATT_BATCH_TOKENS;
            cudaLaunchAttribute attr;
            const cudaLaunchConfig_t cfg =
                pdl_config(dim3(p->n_head_kv, nt, max_split), dim3(ATT_WARPS * 32), bl.smem, stream, &attr);
            e = cudaLaunchKernelEx(&cfg, bl.fn, *p, qkv, t0, *br, k_cache, v_cache, scratch->part, scratch->ticket,
                                   reinterpret_cast<__half *>(out));
        }
        return e;
    }
#define CALL(KV)                                                                                                  \
    return launch_attention_rows<KV>(p, qkv, n_tokens, 0, *br, k_cache, v_cache, reinterpret_cast<__half *>(out), \
                                     stream)
    DISPATCH_KV(p->kv_type, CALL);
#undef CALL
}
