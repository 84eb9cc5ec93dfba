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
 * registers the kernel reached 635 tok/s at 16k; these stages, 712). Heads of 64 and 128
 * dims then multiply on the tensor cores (ring_attend_mma: a warp's query heads against 8
 * keys a tile, its state merged per warp); heads of 256 take ring_attend, where a lane
 * reads back only what it copied itself and a group of LPK lanes keeps its own online
 * softmax (its keys are not its neighbours'). The groups or warps are merged in shared
 * memory (over the ring, once it is drained), each query head's state goes to part as
 * k_attention_decode_split's does, for k_attention_merge. */
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

/* Where 16-byte word dc (dims 8 dc .. 8 dc + 7) of a stage's row k sits in the stage: rows
 * of LPK words in key order; for ring_attend_mma (LPK <= 16) the words rotated by k % 8
 * (an XOR), so that ldmatrix's 8 rows of one word fall in 8 different bank groups
 * (unrotated, rows of 128 or 256 bytes put them all in one). */
template <int LPK>
static __device__ __forceinline__ int ring_word(int k, int dc) {
    return LPK <= 16 ? LPK * k + (dc ^ (k & 7)) : LPK * k + dc;
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
        const int k = i * KPL + lane / LPK, j = jb + k; /* the stage's row k */
        const bool ok = j < j_end && j != pos;
        const size_t e = (size_t)(ok ? j : 0) * kv_dim + off + 8 * (lane % LPK);
        cp_async16(ring_k + ring_word<LPK>(k, lane % LPK), kc + e, ok ? 16 : 0);
        cp_async16(ring_v + ring_word<LPK>(k, lane % LPK), vc + e, ok ? 16 : 0);
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
            ring_row8(j, pos, k_new + 8 * c, rk + ring_word<LPK>(i * KPL + lane / LPK, c), kf);
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
            ring_row8(j, pos, v_new + 8 * c, rv + ring_word<LPK>(i * KPL + lane / LPK, c), vf);
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

/* 8 floats as F16 (one 16-byte word), halves8's inverse. */
static __device__ __forceinline__ uint4 half_word8(const float f[8]) {
    return make_uint4(half2_bits(f[0], f[1]), half2_bits(f[2], f[3]), half2_bits(f[4], f[5]), half2_bits(f[6], f[7]));
}

/* x0, x1 as two F16 pairs whose sum is them to about 22 bits: hi rounded, lo the rest. */
static __device__ __forceinline__ void split_half2(float x0, float x1, uint32_t *hi, uint32_t *lo) {
    const __half2 h = __floats2half2_rn(x0, x1);
    const float2 hf = __half22float2(h);
    *hi = *reinterpret_cast<const uint32_t *>(&h);
    *lo = half2_bits(x0 - hf.x, x1 - hf.y);
}

/* ring_attend_mma keeps a stale maximum until a score passes it by this much (log2
 * units): exp2 of a score less the maximum is then at most 2^8, which F16 holds, and the
 * accumulators are rescaled only then, not at every new maximum (FlashAttention-4's lazy
 * rescaling; the result is the same, l and O share the maximum they were summed with). */
#define ATT_RESCALE_LOG2 8.0f

/* ring_attend on tensor cores (heads of 64 or 128 dims, LPK 8 or 16; the warp's group <= 8
 * query heads): per stage, tiles of 8 keys, S = Q K^T by mma m16n8k16 and P V by
 * m16n8k8, rows g < 8 of A the queries' (or P's) F16 part and rows g + 8 what F16 left
 * of them (split_half2), so a score or an output is the sum of its two rows: F32-grade
 * sums of exact F16 products, K and V being F16 already. Each tile's P V comes from a
 * zeroed accumulator and is added to O in F32: accumulated across tiles, the tensor
 * cores' truncated F32 sums drifted to 1e-5 of the output over 4,096 keys a warp. K's
 * 8 x 8 pieces come by ldmatrix (the ring's rows are keys, ring_word rotates them against
 * bank conflicts), V's by ldmatrix.trans. Scores are in log2 units (Q scaled by log2 e /
 * sqrt(HD)), so that a probability is one exp2. Lane (g, c) = (lane / 4, lane % 4) holds
 * query g's scores of keys 2c, 2c + 1 of a tile, its maximum m (shared by the 4 lanes of
 * g, returned in natural-log units as the merges take it), its partial l (their sum is
 * g's) and O's dims 8 n + 2c, + 1. The new row at pos comes from k_new, v_new (F16
 * values, rounded by store_head_row) into the ring once its stage has landed. Compared
 * with ring_attend's ~450 instructions a lane per 8 keys of 128 dims at G = 4 (8 FMAs and
 * 4 shuffles per 8 dims and query), ~200. */
template <int LPK, int S>
static __device__ __forceinline__ void ring_attend_mma(uint4 *ring, const __half *kc, const __half *vc, int jb0,
                                                       int round, int j_end, int pos, const float *k_new,
                                                       const float *v_new, int kv_dim, int off, int lane,
                                                       const float *q_s, int group, float *m_out, float *l_out,
                                                       float o[LPK][2]) {
    constexpr int HD = 8 * LPK, KPL = 32 / LPK, L = SPLIT_LOADS, RK = L * KPL, NKK = HD / 16;
    static_assert(RK % 8 == 0 && LPK % 4 == 0 && LPK <= 16, "tiles of 8 keys, ldmatrix by 4 words, rows <= 16 words");
    const int g = lane >> 2, c = lane & 3;
    const float scale = 1.4426950408889634f / sqrtf((float)HD); /* log2 e / sqrt(HD) */
    uint32_t qa[NKK][4]; /* A of each 16 dims: (g, hi), (g + 8, lo) */
#pragma unroll
    for (int kk = 0; kk < NKK; kk++) {
        const float *q = q_s + g * HD + 16 * kk + 2 * c;
        const bool on = g < group;
        split_half2(on ? q[0] * scale : 0.0f, on ? q[1] * scale : 0.0f, &qa[kk][0], &qa[kk][1]);
        split_half2(on ? q[8] * scale : 0.0f, on ? q[9] * scale : 0.0f, &qa[kk][2], &qa[kk][3]);
    }
    float m = -INFINITY, l = 0.0f;
#pragma unroll
    for (int n = 0; n < LPK; n++)
        o[n][0] = o[n][1] = 0.0f;
    const int row = lane & 7, word = lane >> 3; /* the ldmatrix row and word this lane addresses */
    int t_read = 0, t_copy = S - 1;
    for (int jb = jb0; jb < j_end; jb += round) {
        __syncwarp(); /* the warp is done reading the slot copied into next */
        const int jc = jb + (S - 1) * round;
        if (jc < j_end)
            copy_stage<LPK, L>(ring + t_copy * 2 * L * 32, ring + (t_copy * 2 + 1) * L * 32, kc, vc, jc, j_end, pos,
                               kv_dim, off, lane);
        cp_async_commit();
        cp_async_wait<S - 1>(); /* this lane's copies of stage t_read have landed */
        uint4 *rk = ring + t_read * 2 * L * 32, *rv = rk + L * 32;
        if (pos >= jb && pos < jb + RK && (lane / LPK) == (pos - jb) % KPL) { /* the lanes that zero-filled pos */
            const int k = pos - jb, dc = lane % LPK;
            rk[ring_word<LPK>(k, dc)] = half_word8(k_new + 8 * dc);
            rv[ring_word<LPK>(k, dc)] = half_word8(v_new + 8 * dc);
        }
        __syncwarp(); /* every lane's copies of the stage are visible to the warp */
#pragma unroll
        for (int t = 0; t < RK / 8; t++) {
            const int kr = 8 * t + row; /* the stage's row this lane addresses */
            float sa[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sb[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* two chains of mma */
#pragma unroll
            for (int kk = 0; kk < NKK; kk += 2) {
                uint32_t b[4];
                ldmatrix_x4(b, rk + ring_word<LPK>(kr, 2 * kk + word));
                mma_16816(sa, qa[kk], b[0], b[1]);
                mma_16816(sb, qa[kk + 1], b[2], b[3]);
            }
            const int j = jb + 8 * t + 2 * c; /* keys past j_end (zeros in the ring) weigh nothing */
            const float s0 = j < j_end ? (sa[0] + sa[2]) + (sb[0] + sb[2]) : -INFINITY;
            const float s1 = j + 1 < j_end ? (sa[1] + sa[3]) + (sb[1] + sb[3]) : -INFINITY;
            float tmax = fmaxf(s0, s1);
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
            tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
            /* a query with no key so far keeps m = -inf (no NaN); its first key sets m */
            if (__any_sync(0xffffffffu, tmax > m + ATT_RESCALE_LOG2)) {
                const float m_new = fmaxf(m, tmax);
                const float corr = m_new == -INFINITY ? 1.0f : exp2f(m - m_new);
                l *= corr;
#pragma unroll
                for (int n = 0; n < LPK; n++) {
                    o[n][0] *= corr;
                    o[n][1] *= corr;
                }
                m = m_new;
            }
            const float p0 = s0 == -INFINITY ? 0.0f : exp2f(s0 - m), p1 = s1 == -INFINITY ? 0.0f : exp2f(s1 - m);
            l += p0 + p1;
            uint32_t ph, pl;
            split_half2(p0, p1, &ph, &pl);
#pragma unroll
            for (int n = 0; n < LPK; n += 4) {
                uint32_t b[4];
                ldmatrix_x4_trans(b, rv + ring_word<LPK>(kr, n + word));
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    float pv[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    mma_1688(pv, ph, pl, b[u]);
                    o[n + u][0] += pv[0] + pv[2];
                    o[n + u][1] += pv[1] + pv[3];
                }
            }
        }
        t_read = t_read + 1 == S ? 0 : t_read + 1;
        t_copy = t_copy + 1 == S ? 0 : t_copy + 1;
    }
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    *m_out = m * 0.6931471805599453f; /* ln 2: natural-log units */
    *l_out = l;
}

/* After ring_attend_mma: the warps' states (query g's m, l, and acc of HD dims) into the
 * block's dynamic shared memory over the rings, once all have drained, for slot_state. */
template <int LPK, int G>
static __device__ __forceinline__ void store_warp_states(uint4 *smem, int warp, int lane, int group, float m, float l,
                                                         const float o[LPK][2]) {
    constexpr int HD = 8 * LPK;
    const int g = lane >> 2, c = lane & 3;
    cp_async_wait_all();
    __syncthreads(); /* every warp is done with its ring: the states go over it */
    float *st_m = reinterpret_cast<float *>(smem); /* (ATT_WARPS, G) */
    float *st_l = st_m + ATT_WARPS * G;            /* (ATT_WARPS, G) */
    float *st_acc = st_l + ATT_WARPS * G;          /* (ATT_WARPS, G, HD) */
    if (g < group) {
        if (c == 0) {
            st_m[warp * G + g] = m;
            st_l[warp * G + g] = l;
        }
#pragma unroll
        for (int n = 0; n < LPK; n++)
            *reinterpret_cast<float2 *>(st_acc + (warp * G + g) * HD + 8 * n + 2 * c) = make_float2(o[n][0], o[n][1]);
    }
    __syncthreads();
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

/* The block's state of query head g from its SLOTS states (store_slot_states: the lane
 * groups', SLOTS = ATT_WARPS * 32 / LPK; store_warp_states: the warps', ATT_WARPS): its
 * largest score *bm, its sum *bl, and the accumulator of dim d (returned), the slots in
 * order. A slot without keys (m = -inf) weighs nothing. */
template <int LPK, int G, int SLOTS>
static __device__ __forceinline__ float slot_state(const uint4 *smem, int g, int d, float *bm, float *bl) {
    constexpr int HD = 8 * LPK;
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

/* The states a block of the F16 ring kernels keeps: its warps' (ring_attend_mma, heads of
 * 64 and 128 dims) or its lane groups' (ring_attend). */
template <int LPK>
static __host__ __device__ constexpr int ring_slots() {
    return LPK <= 16 ? ATT_WARPS : ATT_WARPS * 32 / LPK;
}

/* A block of the F16 ring kernels (k_attention_decode_split_f16, k_attention_batch_f16)
 * over its warps' keys (ring_attend's arguments), on the tensor cores where the head
 * allows; the states then in smem for slot_state<LPK, G, ring_slots<LPK>()>. */
template <int LPK, int G, int S>
static __device__ __forceinline__ void ring_attend_block(uint4 *ring, const __half *kc, const __half *vc, int jb0,
                                                         int round, int j_end, int pos, const float *k_new,
                                                         const float *v_new, int kv_dim, int off, int warp, int lane,
                                                         const float (*q_s)[8 * LPK], int group, uint4 *smem) {
    if constexpr (LPK <= 16) {
        float m, l, o[LPK][2];
        ring_attend_mma<LPK, S>(ring, kc, vc, jb0, round, j_end, pos, k_new, v_new, kv_dim, off, lane, &q_s[0][0],
                                group, &m, &l, o);
        store_warp_states<LPK, G>(smem, warp, lane, group, m, l, o);
    } else {
        float m[G], l[G], acc[G][8];
        ring_attend<LPK, G, S>(ring, kc, vc, jb0, round, j_end, pos, k_new, v_new, kv_dim, off, lane, q_s, group, m,
                               l, acc);
        store_slot_states<LPK, G>(smem, warp * (32 / LPK) + lane / LPK, lane % LPK, m, l, acc);
    }
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
