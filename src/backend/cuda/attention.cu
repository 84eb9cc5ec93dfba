/*
 * attention.cu - grouped-query attention over the KV cache, in F32, F16 or Q8_0
 * (enum cuda_kv_type, kernels.h: -ctk/-ctv).
 *
 * Decode (one token) is one fused kernel per layer, a thread-block cluster of
 * ATT_CLUSTER blocks per head. Before waiting for the previous kernel, each block loads
 * what does not depend on it: its first round of cached keys and values (earlier steps
 * wrote them), the norm weights, the RoPE angles and its share of the output
 * projection's weights. Then it applies the per-head Q RMSNorm and RoPE to its query,
 * the same to the new K of its KV head (the first block of the group also writes K and
 * V to the cache), and attends over its share of positions j0..pos with an online
 * softmax per warp, the next round's loads in flight during each round. Each block
 * stores its partial result into the shared memory of every block of the cluster
 * (distributed shared memory); after one cluster barrier each merges them, multiplies
 * the head's output by its rows of wo's columns for the head, and adds that into the
 * residual stream's accumulator: no global ticket, no second launch, no wo kernel.
 * Reads per token: (pos + 1 - j0) * 2 * head_dim elements of the cache per KV head.
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
 * Prefill runs two kernels: Q/K norm + RoPE + cache store for all tokens, then
 * attention over the cache on the tensor cores (head_dim 64 and 128; see
 * k_attention_prefill_mma), or for other head sizes one warp per (head, query).
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
#include "backend/cuda/common.cuh"

#define ATT_WARPS 4
#define PROJ_PASSES 4 /* see the projection in k_attention_decode */
#define KB 4 /* keys in flight per warp in decode */
#define ATT_CLUSTER 8 /* blocks per head in decode: the largest portable cluster */
#define ATT_SPLIT_MAX 128 /* most blocks per head in the split decode: a thread each in the merge */
static_assert(ATT_SPLIT_MAX == ATT_WARPS * 32, "k_attention_merge gives each share a thread");

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
template <int DPL, int KV>
static __device__ __forceinline__ void attend_keys(const float *q, const float *k_new, const float *v_new,
                                                   const void *k_cache, const __half *k_d, const void *v_cache,
                                                   const __half *v_d, int jb0, int stride, int j_end, int pos,
                                                   int kv_dim, int off, int hd, int lane, uint32_t kv[KB][DPL],
                                                   uint32_t vv[KB][DPL], float *m_out, float *l_out, float acc[DPL]) {
    const float scale = 1.0f / sqrtf((float)hd);
    float m = -INFINITY, l = 0.0f, qr[DPL];
#pragma unroll
    for (int t = 0; t < DPL; t++) {
        acc[t] = 0.0f;
        qr[t] = lane + 32 * t < hd ? q[lane + 32 * t] : 0.0f;
    }
    for (int jb = jb0; jb < j_end; jb += stride) {
        uint32_t kn[KB][DPL], vn[KB][DPL]; /* the next round, in flight during this one */
        if (jb + stride < j_end)
            load_round<DPL, KV>(k_cache, k_d, v_cache, v_d, jb + stride, j_end, pos, kv_dim, off, hd, lane, kn, vn);
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

/* The block's state from its warps' (m, l, acc) of attend_keys (both decode kernels):
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

/* Thread-block clusters (sm_90): the blocks of one head share their partial results
 * through distributed shared memory, without a round trip through global memory. */
static __device__ __forceinline__ void cluster_sync(void) {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

/* Stores v at `local` (a shared-memory address of this block) in the shared memory of
 * block `rank` of the cluster: a remote store does not wait for a reply, a remote load
 * does. */
static __device__ __forceinline__ void cluster_store(float *local, unsigned int rank, float v) {
    const unsigned int a = (unsigned int)__cvta_generic_to_shared(local);
    unsigned int r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(r), "f"(v) : "memory");
}

/* The output projection's share of one block: rows [s * proj_rows, ..) of wo (n_embd,
 * n_head * hd), the head's hd columns, staged in shared memory with their scales. */
static __host__ __device__ __forceinline__ int proj_rows(int n_embd) { return (n_embd + ATT_CLUSTER - 1) / ATT_CLUSTER; }
static __host__ __device__ __forceinline__ size_t proj_smem(int wt, int n_embd, int hd) {
    return cuda_matrix_bytes(wt, proj_rows(n_embd), hd);
}
/* Elements whose scales make up 4 bytes: the projection copies a head's scales in words
 * (where 4 bytes are whole scales, see cuda_attention_can_project). */
static constexpr __host__ __device__ int scale_word_elems(int wt) {
    return HAS_SCALES(wt) ? 4 * cuda_wtype_scale_elems(wt) / cuda_wtype_scale_bytes(wt) : 1;
}
#define PROJ_SMEM_MAX (64 * 1024) /* beyond, wo runs as its own matvec */

/* grid (n_head, ATT_CLUSTER), one cluster per head (blockIdx.y is the block's rank in
 * it). Warp w of block s takes keys j0 + (s * ATT_WARPS + w) * KB + r * stride .. + KB - 1
 * in round r (stride: the keys of a round of the whole cluster; j0 the window's first
 * key, 0 without one), with the next round's loads in flight while it computes this one.
 *
 * WT < 0: rank 0 merges the blocks' states and writes the head's output to out. WT >= 0
 * (a weight type): every block merges them, and multiplies the head's output by its
 * share of wo's columns for the head (copied to shared memory before the wait), adding
 * the result to res_acc: the wo matvec is folded in, and with it one kernel boundary. */
template <int DPL, int WT, int KV>
__global__ void __launch_bounds__(ATT_WARPS * 32)
k_attention_decode(const cuda_attn_params p, const float *__restrict__ qkv, void *k_cache, void *v_cache,
                   const cuda_step_state *state, float *__restrict__ out, const uint8_t *__restrict__ wo,
                   const __half *__restrict__ wo_d, int n_embd, unsigned long long *res_acc) {
    /* WT >= 0: (proj_rows, hb) bytes, then their scales, (proj_rows, SCALE_HALVES(WT, hd)) f16 */
    extern __shared__ __align__(16) uint8_t w_slice[];
    __shared__ float q[32 * DPL], k_new[32 * DPL], v_new[32 * DPL];
    __shared__ float w_m[ATT_WARPS], w_l[ATT_WARPS], w_acc[ATT_WARPS][32 * DPL];
    /* every block's merged state, stored there by the blocks: in rank 0, or (WT >= 0) in each block */
    __shared__ float c_m[ATT_CLUSTER], c_l[ATT_CLUSTER], c_acc[ATT_CLUSTER][32 * DPL];
    const int h = blockIdx.x, s = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int hd = p.head_dim, group = p.n_head / p.n_head_kv, kvh = h / group;
    const int kv_dim = p.n_head_kv * hd, q_dim = p.n_head * hd;
    __half *k_d = kv_scales<KV>(k_cache, p), *v_d = kv_scales<KV>(v_cache, p);
    pdl_launch_next(); /* at once: the next matvec copies its weights while this kernel runs */
    /* the position comes from the previous step (its commit), not from this one */
    const int pos = __ldcg(&state->pos);
    const bool writer = h % group == 0 && s == 0;
    /* keys j0..pos: the warps' keys shifted by j0, so nothing below the window is read
     * and full attention (j0 = 0) pays a select and an add */
    const int j0 = p.window > 0 ? max(0, pos - p.window + 1) : 0;
    const int n_keys = pos + 1, stride = ATT_CLUSTER * ATT_WARPS * KB;
    const int jb0 = j0 + (s * ATT_WARPS + warp) * KB;
    /* everything that does not depend on this step's q, k and v before the wait: the
     * first round of cached keys and values (earlier steps wrote them), the norm weights,
     * the RoPE angles and the projection's weights */
    uint32_t kv[KB][DPL], vv[KB][DPL]; /* kv_raw */
    float nw[DPL];
    float2 cs[(DPL + 1) / 2];
    load_round<DPL, KV>(k_cache, k_d, v_cache, v_d, jb0, n_keys, pos, kv_dim, kvh * hd, hd, lane, kv, vv);
    load_norm<DPL>(warp == 0 ? p.q_norm : p.k_norm, hd, lane, nw);
    load_rope<DPL>(p, pos, lane, cs);
    const int hb = WT >= 0 ? (int)cuda_row_bytes(WT, hd) : 0; /* bytes of a row's slice: 16 * chunks */
    const int row0 = s * proj_rows(n_embd), nr = WT >= 0 ? max(0, min(proj_rows(n_embd), n_embd - row0)) : 0;
    __half *w_scales = reinterpret_cast<__half *>(w_slice + (size_t)proj_rows(n_embd) * hb);
    if (WT >= 0) {
        const size_t rb = cuda_row_bytes(WT, q_dim);
        const int cpr = hb / 16;
        for (int i = threadIdx.x; i < nr * cpr; i += blockDim.x) {
            const int r = i / cpr, c = i % cpr;
            cp_async16(w_slice + (size_t)r * hb + 16 * c, wo + (size_t)(row0 + r) * rb + (size_t)h * hb + 16 * c, 16);
        }
        if (HAS_SCALES(WT)) { /* words of scales (whole words per head, see cuda_attention_can_project) */
            constexpr int WE = scale_word_elems(WT);
            const int words = hd / WE;
            const uint32_t *d2 = reinterpret_cast<const uint32_t *>(wo_d);
            uint32_t *s2 = reinterpret_cast<uint32_t *>(w_scales);
            for (int i = threadIdx.x; i < nr * words; i += blockDim.x)
                cp_async4(s2 + i, d2 + (size_t)(row0 + i / words) * (q_dim / WE) + h * words + i % words);
        }
        cp_async_commit();
    }
    pdl_wait();

    decode_new_rows<DPL, KV>(p, qkv, h, kvh, pos, writer, nw, cs, k_cache, k_d, v_cache, v_d, q, k_new, v_new, warp,
                             lane);
    __syncthreads();

    float m, l, acc[DPL];
    attend_keys<DPL, KV>(q, k_new, v_new, k_cache, k_d, v_cache, v_d, jb0, stride, n_keys, pos, kv_dim, kvh * hd, hd,
                         lane, kv, vv, &m, &l, acc);

    /* merge the warps: thread i owns dims i, i + blockDim.x, ... */
    float bm, bl;
    block_state<DPL>(m, l, acc, w_m, w_l, w_acc, warp, lane, &bm, &bl);
    const int n_dest = WT >= 0 ? ATT_CLUSTER : 1; /* the blocks that merge */
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        const float a = block_acc<DPL>(w_m, w_acc, bm, i);
        for (int r = 0; r < n_dest; r++)
            cluster_store(&c_acc[s][i], r, a);
    }
    if (threadIdx.x < n_dest) {
        cluster_store(&c_m[s], threadIdx.x, bm);
        cluster_store(&c_l[s], threadIdx.x, bl);
    }
    /* one barrier: the blocks' stores are then visible to the blocks that merge, out of
     * their own shared memory, so no block waits for another after it */
    cluster_sync();
    if (s >= n_dest)
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
    float *o = q; /* (hd) the head's output; q is in registers since the keys began */
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float a = 0.0f;
#pragma unroll
        for (int r = 0; r < ATT_CLUSTER; r++)
            a += wr[r] != 0.0f ? c_acc[r][i] * wr[r] : 0.0f;
        if (WT < 0)
            out[h * hd + i] = a / gl;
        else
            o[i] = a / gl;
    }
    if (WT < 0)
        return;

    /* the projection: cpr lanes per row (a power of two, see cuda_attention_can_project),
     * lane c of a row multiplying chunk c of its slice, the same chunk for all its rows;
     * PROJ_PASSES passes of the warp at once, so that their loads and sums overlap */
    constexpr int WTC = WT < 0 ? 0 : WT, CE = CHUNK_ELEMS(WTC);
    const int cpr = hb / 16, c = lane % cpr, rows_per_pass = 32 / cpr, pass_rows = ATT_WARPS * rows_per_pass;
    cp_async_wait_all();
    __syncthreads();
    float4 xv[CE / 4];
#pragma unroll
    for (int k = 0; k < CE / 4; k++)
        xv[k] = reinterpret_cast<const float4 *>(o)[c * (CE / 4) + k];
    for (int base = warp * rows_per_pass; base < nr; base += PROJ_PASSES * pass_rows) {
        int r[PROJ_PASSES];
        uint4 v[PROJ_PASSES];
        chunk_sc d[PROJ_PASSES]; /* the chunks' scales (wtypes.cuh) */
        float a[PROJ_PASSES];
#pragma unroll
        for (int k = 0; k < PROJ_PASSES; k++) { /* rows past the slice repeat row 0, and are dropped */
            r[k] = base + k * pass_rows + lane / cpr;
            const int rk = r[k] < nr ? r[k] : 0;
            v[k] = reinterpret_cast<const uint4 *>(w_slice + (size_t)rk * hb)[c];
            d[k] = chunk_scale<WTC>(w_scales + rk * SCALE_HALVES(WTC, hd), c);
        }
#pragma unroll
        for (int k = 0; k < PROJ_PASSES; k++)
            a[k] = chunk_dot<WTC>(v[k], d[k], xv);
        for (int m_ = cpr / 2; m_ > 0; m_ >>= 1)
#pragma unroll
            for (int k = 0; k < PROJ_PASSES; k++)
                a[k] += __shfl_xor_sync(0xffffffffu, a[k], m_);
#pragma unroll
        for (int k = 0; k < PROJ_PASSES; k++)
            if (c == 0 && r[k] < nr)
                atomicAdd(res_acc + row0 + r[k], to_fixed(a[k]));
    }
}

/* Decode over a long context (flash-decoding): grid (n_head, n_split), block s of head h
 * attends over the s-th share of the keys j0..pos (shares of whole rounds of the block's
 * warps) as a block of k_attention_decode does, and stores its state (m, l, acc[hd]) into
 * part; k_attention_merge combines a head's shares. The cluster kernel gives a head 32
 * warps, each waiting on its round of loads every KB keys: at 16k keys that is 128
 * rounds in a row, a memory latency each, and the kernel ran at about a tenth of the
 * bandwidth. Here a head gets n_split blocks (cuda_attention_split_count: the blocks
 * that fit on the device at once), so the rounds run side by side. The wo projection is
 * not folded in (a matvec after the merge). */
template <int DPL, int KV>
__global__ void __launch_bounds__(ATT_WARPS * 32)
k_attention_decode_split(const cuda_attn_params p, const float *__restrict__ qkv, void *k_cache, void *v_cache,
                         const cuda_step_state *state, float *__restrict__ part) {
    __shared__ float q[32 * DPL], k_new[32 * DPL], v_new[32 * DPL];
    __shared__ float w_m[ATT_WARPS], w_l[ATT_WARPS], w_acc[ATT_WARPS][32 * DPL];
    const int h = blockIdx.x, s = blockIdx.y, n_split = gridDim.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int hd = p.head_dim, group = p.n_head / p.n_head_kv, kvh = h / group, kv_dim = p.n_head_kv * hd;
    __half *k_d = kv_scales<KV>(k_cache, p), *v_d = kv_scales<KV>(v_cache, p);
    pdl_launch_next();
    const int pos = __ldcg(&state->pos);
    const bool writer = h % group == 0 && s == 0;
    const int j0 = p.window > 0 ? max(0, pos - p.window + 1) : 0;
    const int round = ATT_WARPS * KB, n_rounds = (pos + 1 - j0 + round - 1) / round;
    const int share = (n_rounds + n_split - 1) / n_split * round; /* keys per block */
    const int j_begin = j0 + s * share, j_end = min(pos + 1, j_begin + share);
    const int jb0 = j_begin + warp * KB;
    uint32_t kv[KB][DPL], vv[KB][DPL]; /* kv_raw */
    float nw[DPL];
    float2 cs[(DPL + 1) / 2];
    load_round<DPL, KV>(k_cache, k_d, v_cache, v_d, jb0, j_end, pos, kv_dim, kvh * hd, hd, lane, kv, vv);
    load_norm<DPL>(warp == 0 ? p.q_norm : p.k_norm, hd, lane, nw);
    load_rope<DPL>(p, pos, lane, cs);
    pdl_wait();

    decode_new_rows<DPL, KV>(p, qkv, h, kvh, pos, writer, nw, cs, k_cache, k_d, v_cache, v_d, q, k_new, v_new, warp,
                             lane);
    __syncthreads();
    float m, l, acc[DPL];
    attend_keys<DPL, KV>(q, k_new, v_new, k_cache, k_d, v_cache, v_d, jb0, round, j_end, pos, kv_dim, kvh * hd, hd,
                         lane, kv, vv, &m, &l, acc);
    float bm, bl;
    block_state<DPL>(m, l, acc, w_m, w_l, w_acc, warp, lane, &bm, &bl);
    float *ps = part + ((size_t)h * n_split + s) * (hd + 2); /* (hd + 2): m, l, acc */
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        ps[2 + i] = block_acc<DPL>(w_m, w_acc, bm, i);
    if (threadIdx.x == 0) {
        ps[0] = bm;
        ps[1] = bl;
    }
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
            if (j == pos) { /* the new row */
#pragma unroll
                for (int e = 0; e < 8; e++)
                    kf[e] = k_new[8 * c + e];
            } else {
                halves8(rk[32 * i + lane], kf);
            }
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
            if (j == pos) {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    vf[e] = v_new[8 * c + e];
            } else {
                halves8(rv[32 * i + lane], vf);
            }
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
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, c = lane % LPK, slot = warp * KPL + lane / LPK;
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

    float m[G], l[G], acc[G][8];
    ring_attend<LPK, G, S>(ring, kc, vc, jb0, round, j_end, pos, k_new, v_new, kv_dim, kvh * HD, lane, q_s, group, m,
                           l, acc);
    store_slot_states<LPK, G>(smem, slot, c, m, l, acc);
    for (int i = threadIdx.x; i < group * HD; i += blockDim.x) {
        const int g = i / HD, d = i % HD;
        float bm, bl;
        const float a = slot_state<LPK, G>(smem, g, d, &bm, &bl);
        float *ps = part + ((size_t)(kvh * group + g) * n_split + s) * (HD + 2); /* (HD + 2): m, l, acc */
        ps[2 + d] = a;
        if (d == 0) {
            ps[0] = bm;
            ps[1] = bl;
        }
    }
}

/* grid (n_head): head h's n_split states of a split decode (part, (n_head, n_split, hd +
 * 2)) merged into its hd outputs in out. Each share's m and l are read by a thread of its
 * own and reduced across the block, then each output sums its n_split values with the
 * loads unrolled: a merge reading them one after another (each thread every share's m,
 * then thread 0 every l) took about 10 us a layer, mostly waiting on dependent loads
 * (measured at Qwen3-0.6B's shape, 16k keys: 33 against 23 us for the split kernel alone);
 * folding the merge into the split kernel's last block to finish was slower still (36
 * us). The order of the sums is fixed. A share without keys (m = -inf) weighs nothing. */
__global__ void __launch_bounds__(ATT_WARPS * 32)
k_attention_merge(const float *__restrict__ part, int n_split, int hd, float *__restrict__ out) {
    __shared__ float weight[ATT_SPLIT_MAX], w_red[ATT_WARPS];
    const int h = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float *ph = part + (size_t)h * n_split * (hd + 2);
    pdl_launch_next();
    pdl_wait();
    /* n_split <= ATT_SPLIT_MAX = blockDim.x: thread s holds share s */
    const int s = threadIdx.x;
    const float m = s < n_split ? __ldcg(ph + (size_t)s * (hd + 2)) : -INFINITY;
    const float l = s < n_split ? __ldcg(ph + (size_t)s * (hd + 2) + 1) : 0.0f;
    float gm = warp_max(m);
    if (lane == 0)
        w_red[warp] = gm;
    __syncthreads();
    gm = w_red[0];
    for (int w = 1; w < ATT_WARPS; w++)
        gm = fmaxf(gm, w_red[w]);
    const float wt = m == -INFINITY ? 0.0f : expf(m - gm);
    if (s < n_split)
        weight[s] = wt;
    const float wl = warp_sum(wt * l);
    __syncthreads(); /* every warp has read w_red */
    if (lane == 0)
        w_red[warp] = wl;
    __syncthreads();
    float gl = 0.0f;
    for (int w = 0; w < ATT_WARPS; w++)
        gl += w_red[w];
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float a = 0.0f;
#pragma unroll 16
        for (int t = 0; t < n_split; t++)
            a += weight[t] * __ldcg(ph + (size_t)t * (hd + 2) + 2 + i);
        out[h * hd + i] = a / gl;
    }
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
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, c = lane % LPK, slot = warp * KPL + lane / LPK;
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
    float m[G], l[G], acc[G][8];
    ring_attend<LPK, G, S>(ring, kc, vc, jb0, round, j_end, -1, nullptr, nullptr, kv_dim, kvh * HD, lane, q_s, group,
                           m, l, acc);
    store_slot_states<LPK, G>(smem, slot, c, m, l, acc);
    __half *o = out + (size_t)t * q_dim + (size_t)kvh * group * HD; /* (group, HD) */
    float *pt = part + ((size_t)tl * p.n_head + (size_t)kvh * group) * CUDA_ATT_BATCH_SPLIT * (HD + 2);
    for (int i = threadIdx.x; i < group * HD; i += blockDim.x) {
        const int g = i / HD, d = i % HD;
        float bm, bl;
        const float a = slot_state<LPK, G>(smem, g, d, &bm, &bl);
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
    pdl_wait();
    pdl_launch_next();
    const int t = blockIdx.x, hh = blockIdx.y * 8 + threadIdx.y, lane = threadIdx.x;
    if (hh >= p.n_head + p.n_head_kv)
        return;
    float *buf = bufs[threadIdx.y];
    const int hd = p.head_dim, kv_dim = p.n_head_kv * hd, q_dim = p.n_head * hd;
    float *row = qkv + (size_t)t * (q_dim + 2 * kv_dim);
    const void *kc = k_cache_l, *vc = v_cache_l;
    const int pos = token_rows(br, t, pos0, &kc, &vc);
    void *k_cache = const_cast<void *>(kc), *v_cache = const_cast<void *>(vc);
    const bool is_q = hh < p.n_head;
    const float *norm_w = is_q ? p.q_norm : p.k_norm;
    float nw[DPL];
    float2 cs[(DPL + 1) / 2];
    load_norm<DPL>(norm_w, hd, lane, nw);
    load_rope<DPL>(p, pos, lane, cs);
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

template <int DPL, int WT, int KV>
static cudaError_t launch_decode(cudaLaunchConfig_t *cfg, const cuda_attn_params *p, const float *qkv, void *k_cache,
                                 void *v_cache, const cuda_step_state *state, float *out, const cuda_weight *wo,
                                 unsigned long long *acc) {
    if constexpr (WT >= 0 && !cuda_wtype_folds_wo(WT)) {
        return cudaErrorInvalidValue; /* cuda_attention_can_project refuses it: no instance is compiled */
    } else {
        const int n_embd = wo ? (int)wo->n_out : 0;
        cfg->dynamicSmemBytes = WT >= 0 ? proj_smem(WT, n_embd, p->head_dim) : 0;
        const cudaError_t e = allow_smem(k_attention_decode<DPL, WT, KV>, cfg->dynamicSmemBytes);
        if (e != cudaSuccess)
            return e;
        return cudaLaunchKernelEx(cfg, k_attention_decode<DPL, WT, KV>, *p, qkv, k_cache, v_cache, state, out,
                                  wo ? (const uint8_t *)wo->w : nullptr, wo ? (const __half *)wo->d : nullptr, n_embd,
                                  acc);
    }
}

template <int DPL, int KV>
static cudaError_t launch_decode_wt(cudaLaunchConfig_t *cfg, const cuda_attn_params *p, const float *qkv,
                                    void *k_cache, void *v_cache, const cuda_step_state *state, float *out,
                                    const cuda_weight *wo, unsigned long long *acc) {
    if (!wo)
        return launch_decode<DPL, -1, KV>(cfg, p, qkv, k_cache, v_cache, state, out, wo, acc);
#define CALL(WT) return launch_decode<DPL, WT, KV>(cfg, p, qkv, k_cache, v_cache, state, out, wo, acc)
    CUDA_WTYPE_SWITCH(wo->type, CALL);
#undef CALL
    return cudaErrorInvalidValue;
}

template <int DPL>
static cudaError_t launch_decode_kv(cudaLaunchConfig_t *cfg, const cuda_attn_params *p, const float *qkv,
                                    void *k_cache, void *v_cache, const cuda_step_state *state, float *out,
                                    const cuda_weight *wo, unsigned long long *acc) {
#define CALL(KV) return launch_decode_wt<DPL, KV>(cfg, p, qkv, k_cache, v_cache, state, out, wo, acc)
    DISPATCH_KV(p->kv_type, CALL);
#undef CALL
}

extern "C" int cuda_attention_can_project(const cuda_attn_params *p, const cuda_weight *wo) {
    const int hd = p->head_dim;
    /* only the types whose fold measured faster (FOLD_WO in wtypes.cuh, see step.c): the
     * kernel is compiled for those alone, times every head size and KV cache type */
    if (!wo || wo->type < 0 || wo->type >= CUDA_W_COUNT || !cuda_wtype_folds_wo(wo->type) || p->head_dim_v != hd ||
        hd % 32 != 0 || hd > 256 ||
        wo->n_in != (int64_t)p->n_head * hd || wo->n_out < 1 || wo->n_out > (1 << 20))
        return 0;
    if (HAS_SCALES(wo->type)) { /* the scales are copied in 4-byte words: whole words per head */
        const int se = cuda_wtype_scale_elems(wo->type), sb = cuda_wtype_scale_bytes(wo->type);
        if (hd % se != 0 || 4 * se % sb != 0 || hd % scale_word_elems(wo->type) != 0)
            return 0;
    }
    /* whole 16-byte chunks per row and per head, a power of two of them up to a warp */
    const size_t hb = cuda_row_bytes(wo->type, hd), cpr = hb / 16;
    if (hb % 16 != 0 || cpr > 32 || (cpr & (cpr - 1)) != 0 || cuda_row_bytes(wo->type, wo->n_in) % 16 != 0)
        return 0;
    return proj_smem(wo->type, (int)wo->n_out, hd) <= PROJ_SMEM_MAX;
}

extern "C" cudaError_t cuda_attention_decode(const cuda_attn_params *p, const float *qkv, void *k_cache,
                                             void *v_cache, const cuda_step_state *state, float *out,
                                             const cuda_weight *wo, unsigned long long *acc, cudaStream_t stream) {
    if (wo && (!acc || !cuda_attention_can_project(p, wo)))
        return cudaErrorInvalidValue;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = 1;
    attr[1].val.clusterDim.y = ATT_CLUSTER;
    attr[1].val.clusterDim.z = 1;
    cfg.gridDim = dim3(p->n_head, ATT_CLUSTER);
    cfg.blockDim = dim3(ATT_WARPS * 32);
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 2;
#define CALL(D) return launch_decode_kv<D>(&cfg, p, qkv, k_cache, v_cache, state, out, wo, acc)
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
    return n < 1 ? 1 : n > ATT_SPLIT_MAX ? ATT_SPLIT_MAX : n;
}

extern "C" cudaError_t cuda_attention_decode_split(const cuda_attn_params *p, const float *qkv, void *k_cache,
                                                   void *v_cache, const cuda_step_state *state, float *part,
                                                   int n_split, float *out, cudaStream_t stream) {
    const split_launch sl = split_kernel(p);
    if (!sl.fn || n_split < 1 || n_split > ATT_SPLIT_MAX)
        return cudaErrorInvalidValue;
    cudaError_t e = allow_smem(sl.fn, sl.smem);
    if (e != cudaSuccess)
        return e;
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = pdl_config(dim3(sl.grid_heads, n_split), dim3(ATT_WARPS * 32), sl.smem, stream, &attr);
    if ((e = cudaLaunchKernelEx(&cfg, sl.fn, *p, qkv, k_cache, v_cache, state, part)) != cudaSuccess)
        return e;
    cfg = pdl_config(dim3(p->n_head), dim3(ATT_WARPS * 32), 0, stream, &attr);
    return cudaLaunchKernelEx(&cfg, k_attention_merge, (const float *)part, n_split, p->head_dim, out);
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
