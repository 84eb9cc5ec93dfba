/*
 * attention.cuh - what the attention kernel files share (attention.cu: one token's
 * decode; attention_batch.cu: prompts and batches of several sequences): the KV cache's
 * types read and rounded, the per-head norms and RoPE, a block's merge of its warps'
 * states, the F16 split kernels' cp.async ring, and the launchers' dispatch on head size
 * and cache type.
 *
 * Sliding windows (cuda_attn_params.window > 0, kernels.h): the token at pos sees rows
 * j0 = max(0, pos - window + 1) .. pos, as cpu_attention_window does; j0 = 0 without a
 * window. Every kernel computes its j0 once and starts its key loop there: decode
 * shifts the warps' keys by j0, the prefill kernels start at the first key the window of
 * their (block's) first query touches and the tensor-core one masks the rest per query,
 * so rows below the window are never read. Full attention pays a few integer ops per
 * thread, outside the key loops (in the tensor-core prefill: one more compare per score
 * in the diagonal tiles, the only ones it now masks).
 *
 * DPL (dims per lane) = ceil(head_dim / 32): lane l holds dims l, l + 32, ...
 *
 * KV cache types (template parameter KV of every kernel that touches the cache): the
 * kernels read elements as floats (kv_get, kv_get4), so every sum is an F32 sum as with
 * the F32 cache; a new row is rounded to the type by the warp that holds it
 * (kv_round_store) and, in decode, attended with its rounded values, as the CPU, which
 * stores the row first and reads it back, does. Bytes read per key: head_dim * 4 (F32),
 * * 2 (F16), * (1 + 2/32) (Q8_0).
 */
#ifndef ER_BACKEND_CUDA_ATTENTION_CUH
#define ER_BACKEND_CUDA_ATTENTION_CUH

#include "backend/cuda/common.cuh"

#define ATT_WARPS 4

/* The f16 scales of a Q8_0 cache of this layer (after its n_ctx * kv_dim quants,
 * kernels.h), or NULL for the other types. */
template <int KV>
static __device__ __forceinline__ __half *kv_scales(const void *cache, const cuda_attn_params p) {
    return KV == CUDA_KV_Q8_0
               ? reinterpret_cast<__half *>(const_cast<int8_t *>(static_cast<const int8_t *>(cache)) +
                                            (size_t)p.n_ctx * p.n_head_kv * p.head_dim)
               : nullptr;
}

/* Element e (row * kv_dim + dim) of a cache of type KV, as a float. */
template <int KV>
static __device__ __forceinline__ float kv_get(const void *cache, const __half *scales, size_t e) {
    if constexpr (KV == CUDA_KV_F16)
        return __half2float(static_cast<const __half *>(cache)[e]);
    else if constexpr (KV == CUDA_KV_Q8_0)
        return (float)static_cast<const int8_t *>(cache)[e] * __half2float(scales[e / 32]);
    else
        return static_cast<const float *>(cache)[e];
}

/* Elements e .. e + 3 (e % 4 == 0: one aligned load) of a cache of type KV. */
template <int KV>
static __device__ __forceinline__ float4 kv_get4(const void *cache, const __half *scales, size_t e) {
    if constexpr (KV == CUDA_KV_F16) {
        const uint2 u = *reinterpret_cast<const uint2 *>(static_cast<const __half *>(cache) + e);
        const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&u.x));
        const float2 b = __half22float2(*reinterpret_cast<const __half2 *>(&u.y));
        return make_float4(a.x, a.y, b.x, b.y);
    } else if constexpr (KV == CUDA_KV_Q8_0) {
        const char4 q = *reinterpret_cast<const char4 *>(static_cast<const int8_t *>(cache) + e);
        const float d = __half2float(scales[e / 32]);
        return make_float4((float)q.x * d, (float)q.y * d, (float)q.z * d, (float)q.w * d);
    } else {
        return *reinterpret_cast<const float4 *>(static_cast<const float *>(cache) + e);
    }
}

/* One element of a new K or V row rounded to the cache's type, stored at element e when
 * `write`; returns what the cache holds. Q8_0 is llama.cpp's quantize_row_q8_0_ref, as
 * from_f32_q8_0_ref on the CPU (d = amax / 127, q = round(x / d) half away from zero, d
 * saturated to F16), and a call of the whole warp, lane l holding element l of a block
 * of 32 (head_dim % 32 == 0, which the context checks). */
template <int KV>
static __device__ __forceinline__ float kv_round_store(float v, void *cache, __half *scales, size_t e, int lane,
                                                       bool write) {
    if constexpr (KV == CUDA_KV_Q8_0) {
        const float amax = warp_max(fabsf(v));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const __half dh = __float2half_rn(fminf(d, 65504.0f));
        const float q = fmaxf(-127.0f, fminf(127.0f, roundf(v * id)));
        if (write) {
            static_cast<int8_t *>(cache)[e] = (int8_t)q;
            if (lane == 0)
                scales[e / 32] = dh;
        }
        return q * __half2float(dh);
    } else if constexpr (KV == CUDA_KV_F16) {
        const __half h = __float2half_rn(v);
        if (write)
            static_cast<__half *>(cache)[e] = h;
        return __half2float(h);
    } else {
        if (write)
            static_cast<float *>(cache)[e] = v;
        return v;
    }
}

/* RoPE angles of position pos that lane `lane` rotates (pairs i = lane + 32 k < n_rot / 2):
 * loaded ahead of the data they rotate. */
template <int DPL>
static __device__ __forceinline__ void load_rope(const cuda_attn_params p, int pos, int lane, float2 cs[(DPL + 1) / 2]) {
    const int half = p.n_rot / 2;
#pragma unroll
    for (int k = 0; k < (DPL + 1) / 2; k++) {
        const int i = lane + 32 * k;
        cs[k] = i < half ? p.rope_cs[(size_t)pos * half + i] : make_float2(1.0f, 0.0f);
    }
}

/* The RMSNorm weights lane `lane` applies (dims lane + 32 k), or NULL. */
template <int DPL>
static __device__ __forceinline__ void load_norm(const float *norm_w, int hd, int lane, float nw[DPL]) {
#pragma unroll
    for (int k = 0; k < DPL; k++) {
        const int i = lane + 32 * k;
        nw[k] = norm_w && i < hd ? norm_w[i] : 1.0f;
    }
}

/* The head's slice of the Q|K|V biases at `at` (an offset into a qkv row), or NULL. */
static __device__ __forceinline__ const float *head_bias(const cuda_attn_params p, int at) {
    return p.qkv_bias ? p.qkv_bias + at : nullptr;
}

/* Bias (when not NULL), RMSNorm (when `norm`) and RoPE of one head vector held by a
 * warp: in[] -> out[] (out in shared memory; it may equal in). nw and cs from load_norm
 * and load_rope. */
template <int DPL>
static __device__ void head_norm_rope(const float *in, const float *bias, float *out, bool norm, const float nw[DPL],
                                      const float2 cs[(DPL + 1) / 2], const cuda_attn_params p, int lane) {
    const int hd = p.head_dim;
    float v[DPL];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < DPL; k++) {
        const int i = lane + 32 * k;
        v[k] = i < hd ? __ldcg(in + i) : 0.0f; /* written by the previous kernel: L2, not a stale L1 */
        if (bias && i < hd)
            v[k] += bias[i];
        ss += v[k] * v[k];
    }
    if (norm) {
        ss = warp_sum(ss);
        const float scale = 1.0f / sqrtf(ss / (float)hd + p.eps);
#pragma unroll
        for (int k = 0; k < DPL; k++)
            v[k] = v[k] * scale * nw[k];
    }
    __syncwarp();
#pragma unroll
    for (int k = 0; k < DPL; k++) {
        const int i = lane + 32 * k;
        if (i < hd)
            out[i] = v[k];
    }
    __syncwarp();
    /* rotate pairs: NeoX (i, i + n_rot/2), original (2i, 2i + 1), by the angles of the
     * table (computed on the host exactly as the CPU reference computes them) */
    const int half = p.n_rot / 2;
#pragma unroll
    for (int k = 0; k < (DPL + 1) / 2; k++) {
        const int i = lane + 32 * k;
        if (i < half) {
            const int i0 = p.rope_neox ? i : 2 * i, i1 = p.rope_neox ? i + half : 2 * i + 1;
            const float x0 = out[i0], x1 = out[i1];
            out[i0] = x0 * cs[k].x - x1 * cs[k].y;
            out[i1] = x0 * cs[k].y + x1 * cs[k].x;
        }
    }
    __syncwarp();
}

/* A head's new K or V row by a warp, element by element (one value live at a time: the
 * decode kernel holds its first round of keys meanwhile): src[0..hd) from shared memory
 * (from_shared), or from global memory that the previous kernel wrote (L2, not a stale
 * L1) plus the bias when not NULL; rounded to the cache's type, stored at element e0 of
 * the cache when `write`, and what the cache holds into dst[0..hd) (shared memory; may be
 * src: each lane rewrites its own elements). */
template <int DPL, int KV>
static __device__ __forceinline__ void store_head_row(const float *src, const float *bias, bool from_shared, float *dst,
                                                      void *cache, __half *scales, size_t e0, int hd, int lane,
                                                      bool write) {
#pragma unroll
    for (int k = 0; k < DPL; k++) {
        const int i = lane + 32 * k;
        if (KV == CUDA_KV_Q8_0 ? 32 * k < hd : i < hd) { /* Q8_0: the whole warp, a block per k */
            const float v = from_shared ? src[i] : __ldcg(src + i) + (bias ? bias[i] : 0.0f);
            const float held = kv_round_store<KV>(v, cache, scales, e0 + i, lane, write);
            if (KV != CUDA_KV_F32 || !from_shared) /* an F32 row in shared memory is already what the cache holds */
                dst[i] = held;
        }
    }
    __syncwarp();
}

/* The block's state from its warps' (m, l, acc) (the cluster decode, k_attention_prefill):
 * each warp stores its own into w_m, w_l, w_acc, the block syncs, and every thread gets
 * the largest score *bm and the sum *bl; block_acc then gives its accumulator of dim i.
 * A warp without keys (m = -inf) weighs nothing. */
template <int DPL>
static __device__ __forceinline__ void block_state(float warp_m, float warp_l, const float acc[DPL], float *w_m,
                                                   float *w_l, float (*w_acc)[32 * DPL], int warp, int lane, float *bm,
                                                   float *bl) {
    if (lane == 0) {
        w_m[warp] = warp_m;
        w_l[warp] = warp_l;
    }
#pragma unroll
    for (int j = 0; j < DPL; j++)
        w_acc[warp][lane + 32 * j] = acc[j];
    __syncthreads();
    float m = -INFINITY, l = 0.0f;
    for (int w = 0; w < ATT_WARPS; w++)
        m = fmaxf(m, w_m[w]);
    for (int w = 0; w < ATT_WARPS; w++)
        l += w_m[w] == -INFINITY ? 0.0f : w_l[w] * expf(w_m[w] - m);
    *bm = m;
    *bl = l;
}
template <int DPL>
static __device__ __forceinline__ float block_acc(const float *w_m, const float (*w_acc)[32 * DPL], float bm, int i) {
    float a = 0.0f;
    for (int w = 0; w < ATT_WARPS; w++)
        a += w_m[w] == -INFINITY ? 0.0f : w_acc[w][i] * expf(w_m[w] - bm);
    return a;
}

/* ---- the split decode on an F16 cache: 16-byte copies in stages, a KV head's queries together ----
 *
 * k_attention_decode_split reads 2-byte elements into 32-bit registers, KB keys a warp
 * per round, and every query head reads its KV head's rows again: at 16k keys of
 * Qwen3-0.6B it ran at about 1.2 TB/s, latency-bound. Here, for the F16 cache (the
 * default) and heads of 64, 128 or 256: a block takes all the query heads of one KV head
 * (grid (n_head_kv, n_split)), so each row is read once per step; a lane copies 16 bytes
 * (8 elements) of a row, LPK = hd / 8 lanes a row, so one copy of the warp covers 32 /
 * LPK rows. The copies go to shared memory by cp.async, SPLIT_LOADS of K and as many of V
 * per lane per stage, SPLIT_STAGES stages per warp in a ring, so all but one stage are
 * in flight while one is computed, without holding registers (with 4 loads a lane in
 * registers the kernel reached 635 tok/s at 16k; these stages, 712). A lane reads back
 * only what it copied itself, so a warp needs no barrier. A group of LPK lanes keeps its
 * own online softmax (its keys are not its neighbours'); the groups and the warps are
 * merged in shared memory (over the ring, once it is drained), each query head's state
 * goes to part as k_attention_decode_split's does, for k_attention_merge. */
#define SPLIT_LOADS 4
#define SPLIT_STAGES 4

/* The dynamic shared memory of k_attention_decode_split_f16<LPK, G>: the larger of
 * the copy ring, (ATT_WARPS, SPLIT_STAGES, 2, SPLIT_LOADS, 32) 16-byte words, and the lane groups' states,
 * (SLOTS, G) maxima and sums and (SLOTS, G, hd) accumulators (SLOTS = ATT_WARPS * 32 / LPK). */
static constexpr size_t split_f16_smem(int LPK, int G, int S = SPLIT_STAGES) {
    constexpr int L = SPLIT_LOADS;
    return (size_t)ATT_WARPS * S * 2 * L * 32 * 16 > (size_t)ATT_WARPS * (32 / LPK) * G * (2 + 8 * LPK) * 4
               ? (size_t)ATT_WARPS * S * 2 * L * 32 * 16
               : (size_t)ATT_WARPS * (32 / LPK) * G * (2 + 8 * LPK) * 4;
}

/* Stage `slot` of the lane's ring: keys jb + i * (32 / LPK) + (lane / LPK), i < L, 8
 * elements of K and of V from dim 8 * (lane % LPK); zeros for keys at or past j_end and
 * for the newest at pos (from shared memory: other blocks may not see its store yet). */
template <int LPK, int L>
static __device__ __forceinline__ void copy_stage(uint4 *ring_k, uint4 *ring_v, const __half *kc, const __half *vc,
                                                  int jb, int j_end, int pos, int kv_dim, int off, int lane) {
    constexpr int KPL = 32 / LPK;
#pragma unroll
    for (int i = 0; i < L; i++) {
        const int j = jb + i * KPL + lane / LPK;
        const bool ok = j < j_end && j != pos;
        const size_t e = (size_t)(ok ? j : 0) * kv_dim + off + 8 * (lane % LPK);
        cp_async16(ring_k + 32 * i + lane, kc + e, ok ? 16 : 0);
        cp_async16(ring_v + 32 * i + lane, vc + e, ok ? 16 : 0);
    }
}

/* 8 F16 elements (one 16-byte word) as floats. */
static __device__ __forceinline__ void halves8(uint4 u, float f[8]) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const float2 t = __half22float2(*reinterpret_cast<const __half2 *>(&w[k]));
        f[2 * k] = t.x;
        f[2 * k + 1] = t.y;
    }
}

/* A lane's 8 elements of key or value row j: the new row's from `fresh` (F32, this step's,
 * not yet in the cache) when j == pos, else the staged F16 word (read only then). */
static __device__ __forceinline__ void ring_row8(int j, int pos, const float *fresh, const uint4 *staged, float f[8]) {
    if (j == pos) {
#pragma unroll
        for (int e = 0; e < 8; e++)
            f[e] = fresh[e];
    } else {
        halves8(*staged, f);
    }
}

/* A warp's keys jb0, jb0 + round, ... below j_end through its ring of S stages (both F16
 * split kernels), RK = SPLIT_LOADS * 32 / LPK keys a stage: the first S - 1 stages
 * already issued (copy_stage, a commit each), each next one copied while one is
 * computed. The lanes of a key (lane group lane / LPK, LPK lanes of 8
 * dims) keep an online softmax of their own per query head g < group (<= G): the queries
 * q_s (G, HD) in shared memory, m, l, acc the lanes' states. The key at pos is the new
 * row, from k_new and v_new in shared memory (other blocks may not see its store yet);
 * pos < 0: none. */
template <int LPK, int G, int S>
static __device__ __forceinline__ void ring_attend(uint4 *ring, const __half *kc, const __half *vc, int jb0, int round,
                                                   int j_end, int pos, const float *k_new, const float *v_new,
                                                   int kv_dim, int off, int lane, const float (*q_s)[8 * LPK],
                                                   int group, float m[G], float l[G], float acc[G][8]) {
    constexpr int HD = 8 * LPK, KPL = 32 / LPK, L = SPLIT_LOADS;
    const int c = lane % LPK;
    const float scale = 1.0f / sqrtf((float)HD);
    float qf[G][8]; /* the lane's 8 dims of each query */
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            acc[g][e] = 0.0f;
            qf[g][e] = g < group ? q_s[g][8 * c + e] : 0.0f;
        }
    }
    int t_read = 0, t_copy = S - 1; /* the ring slots read and filled next */
    for (int jb = jb0; jb < j_end; jb += round) {
        const int jc = jb + (S - 1) * round; /* the stage copied now */
        if (jc < j_end)
            copy_stage<LPK, L>(ring + t_copy * 2 * L * 32, ring + (t_copy * 2 + 1) * L * 32, kc, vc, jc, j_end, pos,
                               kv_dim, off, lane);
        cp_async_commit();
        cp_async_wait<S - 1>(); /* this lane's copies of stage t_read have landed */
        const uint4 *rk = ring + t_read * 2 * L * 32, *rv = rk + L * 32;
        float sc[L][G];
#pragma unroll
        for (int i = 0; i < L; i++) {
            const int j = jb + i * KPL + lane / LPK;
            float kf[8];
            ring_row8(j, pos, k_new + 8 * c, rk + 32 * i + lane, kf);
#pragma unroll
            for (int g = 0; g < G; g++) {
                float d = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e++)
                    d += qf[g][e] * kf[e];
#pragma unroll
                for (int o = LPK / 2; o > 0; o >>= 1) /* the row's LPK lanes */
                    d += __shfl_xor_sync(0xffffffffu, d, o);
                sc[i][g] = j < j_end ? d * scale : -INFINITY;
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
            float m_new = m[g];
#pragma unroll
            for (int i = 0; i < L; i++)
                m_new = fmaxf(m_new, sc[i][g]);
            /* a group whose keys have all been past j_end so far keeps m = -inf: no NaN */
            const float corr = m_new == -INFINITY ? 1.0f : expf(m[g] - m_new);
            l[g] *= corr;
#pragma unroll
            for (int e = 0; e < 8; e++)
                acc[g][e] *= corr;
            m[g] = m_new;
        }
#pragma unroll
        for (int i = 0; i < L; i++) {
            const int j = jb + i * KPL + lane / LPK;
            float vf[8];
            ring_row8(j, pos, v_new + 8 * c, rv + 32 * i + lane, vf);
#pragma unroll
            for (int g = 0; g < G; g++) {
                const float pr = sc[i][g] == -INFINITY ? 0.0f : expf(sc[i][g] - m[g]);
                l[g] += pr;
#pragma unroll
                for (int e = 0; e < 8; e++)
                    acc[g][e] += pr * vf[e];
            }
        }
        t_read = t_read + 1 == S ? 0 : t_read + 1;
        t_copy = t_copy + 1 == S ? 0 : t_copy + 1;
    }
}

/* After ring_attend: every lane group's states (m, l, acc) into the block's dynamic
 * shared memory (split_f16_smem(LPK, G)), over the rings once all have drained, for
 * slot_state. */
template <int LPK, int G>
static __device__ __forceinline__ void store_slot_states(uint4 *smem, int slot, int c, const float m[G],
                                                         const float l[G], const float acc[G][8]) {
    constexpr int HD = 8 * LPK, SLOTS = ATT_WARPS * 32 / LPK;
    cp_async_wait_all();
    __syncthreads(); /* every warp is done with its ring: the states go over it */
    float *st_m = reinterpret_cast<float *>(smem); /* (SLOTS, G) */
    float *st_l = st_m + SLOTS * G;                /* (SLOTS, G) */
    float *st_acc = st_l + SLOTS * G;              /* (SLOTS, G, HD) */
#pragma unroll
    for (int g = 0; g < G; g++) {
        if (c == 0) {
            st_m[slot * G + g] = m[g];
            st_l[slot * G + g] = l[g];
        }
#pragma unroll
        for (int e = 0; e < 8; e++)
            st_acc[(slot * G + g) * HD + 8 * c + e] = acc[g][e];
    }
    __syncthreads();
}

/* The block's state of query head g from the slots' (store_slot_states): its largest
 * score *bm, its sum *bl, and the accumulator of dim d (returned), the slots in order. A
 * slot without keys (m = -inf) weighs nothing. */
template <int LPK, int G>
static __device__ __forceinline__ float slot_state(const uint4 *smem, int g, int d, float *bm, float *bl) {
    constexpr int HD = 8 * LPK, SLOTS = ATT_WARPS * 32 / LPK;
    const float *st_m = reinterpret_cast<const float *>(smem), *st_l = st_m + SLOTS * G, *st_acc = st_l + SLOTS * G;
    float m = -INFINITY, l = 0.0f, a = 0.0f;
    for (int k = 0; k < SLOTS; k++)
        m = fmaxf(m, st_m[k * G + g]);
    for (int k = 0; k < SLOTS; k++) {
        const float w = st_m[k * G + g] == -INFINITY ? 0.0f : expf(st_m[k * G + g] - m);
        l += st_l[k * G + g] * w;
        a += st_acc[(k * G + g) * HD + d] * w;
    }
    *bm = m;
    *bl = l;
    return a;
}

#define DISPATCH_DPL(hd, CALL)          \
    do {                                \
        if ((hd) <= 32) {               \
            CALL(1);                    \
        } else if ((hd) <= 64) {        \
            CALL(2);                    \
        } else if ((hd) <= 128) {       \
            CALL(4);                    \
        } else if ((hd) <= 256) {       \
            CALL(8);                    \
        } else {                        \
            return cudaErrorInvalidValue; \
        }                               \
    } while (0)

/* CALL(KV) with the cache type as a constant */
#define DISPATCH_KV(kv, CALL)              \
    do {                                   \
        if ((kv) == CUDA_KV_F32) {         \
            CALL(CUDA_KV_F32);             \
        } else if ((kv) == CUDA_KV_F16) {  \
            CALL(CUDA_KV_F16);             \
        } else if ((kv) == CUDA_KV_Q8_0) { \
            CALL(CUDA_KV_Q8_0);            \
        } else {                           \
            return cudaErrorInvalidValue;  \
        }                                  \
    } while (0)

#endif
