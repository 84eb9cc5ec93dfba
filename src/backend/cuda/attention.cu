/*
 * attention.cu - grouped-query attention over the F32 KV cache.
 *
 * Decode (one token) is one fused kernel per layer: each block (head h, split s)
 * loads the cached keys and values of its first round before waiting for the previous
 * kernel (they come from earlier steps), applies the per-head Q RMSNorm and RoPE to its
 * query, does the same to the new K of its KV head (the first block of the group also
 * writes K and V to the cache), then attends over its share of positions 0..pos with an
 * online softmax per warp. The
 * n_split partial results of a head are merged by whichever block finishes last
 * (a ticket counter), so the step needs no second launch. Reads per token:
 * (pos + 1) * 2 * head_dim floats per KV head.
 *
 * Prefill runs two kernels: Q/K norm + RoPE + cache store for all tokens, then one
 * warp per (head, query) over the cache; the four warps of a block take four
 * consecutive queries of one head, so their K/V rows are mostly served from L1.
 *
 * DPL (dims per lane) = ceil(head_dim / 32): lane l holds dims l, l + 32, ...
 */
#include "backend/cuda/common.cuh"

#define ATT_WARPS 4
#define KB 4 /* keys in flight per warp in decode */

/* RMSNorm (optional) and RoPE of one head vector held by a warp: in[] -> out[] (both
 * may be shared memory; out may equal in). */
template <int DPL>
static __device__ void head_norm_rope(const float *in, float *out, const float *norm_w, const cuda_attn_params p,
                                      int pos, int lane) {
    const int hd = p.head_dim;
    float v[DPL];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < DPL; k++) {
        const int i = lane + 32 * k;
        v[k] = i < hd ? __ldcg(in + i) : 0.0f; /* written by the previous kernel: L2, not a stale L1 */
        ss += v[k] * v[k];
    }
    if (norm_w) {
        ss = warp_sum(ss);
        const float scale = 1.0f / sqrtf(ss / (float)hd + p.eps);
#pragma unroll
        for (int k = 0; k < DPL; k++) {
            const int i = lane + 32 * k;
            if (i < hd)
                v[k] = v[k] * scale * norm_w[i];
        }
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
    for (int i = lane; i < half; i += 32) {
        const float2 csn = p.rope_cs[(size_t)pos * half + i];
        const float cs = csn.x, sn = csn.y;
        const int i0 = p.rope_neox ? i : 2 * i, i1 = p.rope_neox ? i + half : 2 * i + 1;
        const float x0 = out[i0], x1 = out[i1];
        out[i0] = x0 * cs - x1 * sn;
        out[i1] = x0 * sn + x1 * cs;
    }
    __syncwarp();
}

/* Online-softmax accumulation of one key/value row into a warp's state. */
template <int DPL>
static __device__ __forceinline__ void attend_row(const float *q, const float *k, const float *v, int hd, float scale,
                                                  int lane, float *m, float *l, float acc[DPL]) {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < DPL; j++) {
        const int i = lane + 32 * j;
        if (i < hd)
            s += q[i] * k[i];
    }
    s = warp_sum(s) * scale;
    const float m_new = fmaxf(*m, s);
    const float corr = expf(*m - m_new); /* exp(-inf) = 0 on the first row */
    const float pr = expf(s - m_new);
    *l = *l * corr + pr;
#pragma unroll
    for (int j = 0; j < DPL; j++) {
        const int i = lane + 32 * j;
        acc[j] = acc[j] * corr + (i < hd ? pr * v[i] : 0.0f);
    }
    *m = m_new;
}

/* Keys and values jb .. jb + KB - 1 (those < j1, except the newest at pos, which the
 * caller takes from shared memory) into registers, all loads in flight at once. */
template <int DPL>
static __device__ __forceinline__ void load_round(const float *k_cache, const float *v_cache, int jb, int j1, int pos,
                                                  int kv_dim, int off, int hd, int lane, float kv[KB][DPL],
                                                  float vv[KB][DPL]) {
#pragma unroll
    for (int b = 0; b < KB; b++) {
        const int j = jb + b;
        const bool ok = j < j1 && j != pos;
        const float *kr = k_cache + (size_t)(ok ? j : 0) * kv_dim + off;
        const float *vr = v_cache + (size_t)(ok ? j : 0) * kv_dim + off;
#pragma unroll
        for (int t = 0; t < DPL; t++) {
            const int i = lane + 32 * t;
            kv[b][t] = ok && i < hd ? kr[i] : 0.0f;
            vv[b][t] = ok && i < hd ? vr[i] : 0.0f;
        }
    }
}

template <int DPL>
__global__ void __launch_bounds__(ATT_WARPS * 32)
k_attention_decode(const cuda_attn_params p, const float *__restrict__ qkv, float *k_cache, float *v_cache,
                   const cuda_step_state *state, float *partial, unsigned int *counters, float *__restrict__ out) {
    __shared__ float q[32 * DPL], k_new[32 * DPL], v_new[32 * DPL];
    __shared__ float w_m[ATT_WARPS], w_l[ATT_WARPS], w_acc[ATT_WARPS][32 * DPL];
    __shared__ bool last;
    const int h = blockIdx.x, s = blockIdx.y, n_split = gridDim.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int hd = p.head_dim, group = p.n_head / p.n_head_kv, kvh = h / group;
    const int kv_dim = p.n_head_kv * hd, q_dim = p.n_head * hd;
    pdl_launch_next(); /* at once: the next matvec copies its weights while this kernel runs */
    /* the position comes from the previous step (its commit), not from this one */
    const int pos = __ldcg(&state->pos);
    const bool writer = h % group == 0 && s == 0;
    /* short contexts use fewer splits (>= 16 positions each, one round of KB keys per
     * warp); blocks past them only do the q/k work below and leave */
    const int n_keys = pos + 1;
    const int n_used = min(n_split, (n_keys + ATT_WARPS * KB - 1) / (ATT_WARPS * KB));
    const int chunk = (n_keys + n_used - 1) / n_used;
    const int j0 = s * chunk, j1 = min(j0 + chunk, n_keys);
    /* the cached keys and values of the first round were written by earlier steps: load
     * them before waiting for this step's q, k and v */
    float kv[KB][DPL], vv[KB][DPL];
    load_round<DPL>(k_cache, v_cache, j0 + warp * KB, j1, pos, kv_dim, kvh * hd, hd, lane, kv, vv);
    pdl_wait();

    if (warp == 0) {
        head_norm_rope<DPL>(qkv + h * hd, q, p.q_norm, p, pos, lane);
    } else if (warp == 1) {
        head_norm_rope<DPL>(qkv + q_dim + kvh * hd, k_new, p.k_norm, p, pos, lane);
        if (writer)
            for (int i = lane; i < hd; i += 32)
                k_cache[(size_t)pos * kv_dim + kvh * hd + i] = k_new[i];
    } else if (warp == 2) {
        for (int i = lane; i < hd; i += 32) {
            const float vi = __ldcg(qkv + q_dim + kv_dim + kvh * hd + i);
            v_new[i] = vi;
            if (writer)
                v_cache[(size_t)pos * kv_dim + kvh * hd + i] = vi;
        }
    }
    __syncthreads();

    if (s >= n_used && !writer)
        return;
    const float scale = 1.0f / sqrtf((float)hd);
    float m = -INFINITY, l = 0.0f, acc[DPL];
#pragma unroll
    for (int j = 0; j < DPL; j++)
        acc[j] = 0.0f;
    /* KB keys per warp at a time, all their K and V loads issued before the first use:
     * the key loop is bound by memory latency, not bandwidth */
    for (int jb = j0 + warp * KB; jb < j1; jb += ATT_WARPS * KB) {
        float sc[KB];
        if (jb != j0 + warp * KB) /* the first round is loaded */
            load_round<DPL>(k_cache, v_cache, jb, j1, pos, kv_dim, kvh * hd, hd, lane, kv, vv);
        /* the newest row comes from shared memory: other blocks may not see its store yet */
#pragma unroll
        for (int b = 0; b < KB; b++) {
            if (jb + b == pos) {
#pragma unroll
                for (int t = 0; t < DPL; t++) {
                    const int i = lane + 32 * t;
                    kv[b][t] = i < hd ? k_new[i] : 0.0f;
                    vv[b][t] = i < hd ? v_new[i] : 0.0f;
                }
            }
        }
#pragma unroll
        for (int b = 0; b < KB; b++) {
            float s_ = 0.0f;
#pragma unroll
            for (int t = 0; t < DPL; t++)
                s_ += q[lane + 32 * t < hd ? lane + 32 * t : 0] * kv[b][t];
            sc[b] = jb + b < j1 ? warp_sum(s_) * scale : -INFINITY;
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
                acc[t] += pr * vv[b][t];
        }
        m = m_new;
    }
    if (lane == 0) {
        w_m[warp] = m;
        w_l[warp] = l;
    }
#pragma unroll
    for (int j = 0; j < DPL; j++)
        w_acc[warp][lane + 32 * j] = acc[j];
    __syncthreads();

    /* merge the warps: thread i owns dim i */
    float bm = -INFINITY;
    for (int w = 0; w < ATT_WARPS; w++)
        bm = fmaxf(bm, w_m[w]);
    float bl = 0.0f;
    for (int w = 0; w < ATT_WARPS; w++)
        bl += w_m[w] == -INFINITY ? 0.0f : w_l[w] * expf(w_m[w] - bm);
    float *part = partial + ((size_t)h * n_split + s) * (hd + 2); /* (m, l, acc[hd]) */
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float a = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++)
            a += w_m[w] == -INFINITY ? 0.0f : w_acc[w][i] * expf(w_m[w] - bm);
        if (n_used == 1)
            out[h * hd + i] = a / bl;
        else
            part[2 + i] = a;
    }
    if (n_used == 1)
        return;
    if (threadIdx.x == 0) {
        part[0] = bm;
        part[1] = bl;
    }
    /* the last block of this head merges all splits */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned int ticket = atomicAdd(&counters[h], 1u);
        last = ticket == (unsigned int)n_used - 1;
    }
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    /* merge in parallel: every split's max and weight to shared memory first, then each
     * thread sums its dims over the splits with independent loads */
    __shared__ float sw[32];
    const float *parts = partial + (size_t)h * n_split * (hd + 2);
    if (threadIdx.x < 32) {
        const int t = threadIdx.x;
        const float mt = t < n_used ? __ldcg(parts + (size_t)t * (hd + 2)) : -INFINITY;
        const float lt = t < n_used ? __ldcg(parts + (size_t)t * (hd + 2) + 1) : 0.0f;
        const float gm = warp_max(mt);
        const float wt = mt == -INFINITY ? 0.0f : expf(mt - gm);
        const float gl = warp_sum(lt * wt);
        sw[t] = wt / gl;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float a = 0.0f;
        for (int t = 0; t < n_used; t++)
            a += sw[t] == 0.0f ? 0.0f : __ldcg(parts + (size_t)t * (hd + 2) + 2 + i) * sw[t];
        out[h * hd + i] = a;
    }
    if (threadIdx.x == 0)
        counters[h] = 0; /* ready for the next step */
}

/* grid (n_tokens, n_head + n_head_kv), one warp: norm + rope of a q head in place, or
 * of a k head (stored to the cache, with its v). */
template <int DPL>
__global__ void k_qk_rope_store(const cuda_attn_params p, float *qkv, int pos0, float *k_cache, float *v_cache) {
    __shared__ float buf[32 * DPL];
    const int t = blockIdx.x, hh = blockIdx.y, lane = threadIdx.x;
    const int hd = p.head_dim, kv_dim = p.n_head_kv * hd, q_dim = p.n_head * hd;
    float *row = qkv + (size_t)t * (q_dim + 2 * kv_dim);
    const int pos = pos0 + t;
    if (hh < p.n_head) {
        head_norm_rope<DPL>(row + hh * hd, buf, p.q_norm, p, pos, lane);
        for (int i = lane; i < hd; i += 32)
            row[hh * hd + i] = buf[i];
    } else {
        const int kvh = hh - p.n_head;
        head_norm_rope<DPL>(row + q_dim + kvh * hd, buf, p.k_norm, p, pos, lane);
        for (int i = lane; i < hd; i += 32) {
            k_cache[(size_t)pos * kv_dim + kvh * hd + i] = buf[i];
            v_cache[(size_t)pos * kv_dim + kvh * hd + i] = row[q_dim + kv_dim + kvh * hd + i];
        }
    }
}

/* grid (n_head, ceil(n_tokens / 4)): warp w takes query blockIdx.y * 4 + w */
template <int DPL>
__global__ void __launch_bounds__(ATT_WARPS * 32)
k_attention_prefill(const cuda_attn_params p, const float *__restrict__ qkv, int n_tokens, int pos0,
                    const float *__restrict__ k_cache, const float *__restrict__ v_cache, float *__restrict__ out) {
    const int h = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int t = blockIdx.y * ATT_WARPS + warp;
    if (t >= n_tokens)
        return;
    const int hd = p.head_dim, kv_dim = p.n_head_kv * hd, q_dim = p.n_head * hd;
    const int kvh = h / (p.n_head / p.n_head_kv);
    const float *q = qkv + (size_t)t * (q_dim + 2 * kv_dim) + h * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float m = -INFINITY, l = 0.0f, acc[DPL];
#pragma unroll
    for (int j = 0; j < DPL; j++)
        acc[j] = 0.0f;
    for (int j = 0; j <= pos0 + t; j++)
        attend_row<DPL>(q, k_cache + (size_t)j * kv_dim + kvh * hd, v_cache + (size_t)j * kv_dim + kvh * hd, hd,
                        scale, lane, &m, &l, acc);
#pragma unroll
    for (int j = 0; j < DPL; j++) {
        const int i = lane + 32 * j;
        if (i < hd)
            out[(size_t)t * p.n_head * hd + h * hd + i] = acc[j] / l;
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

extern "C" cudaError_t cuda_attention_decode(const cuda_attn_params *p, const float *qkv, float *k_cache,
                                             float *v_cache, const cuda_step_state *state, int n_split,
                                             float *partial, unsigned int *counters, float *out,
                                             cudaStream_t stream) {
    if (n_split > 32)
        return cudaErrorInvalidValue; /* the merge keeps one split per lane */
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3(p->n_head, n_split);
    cfg.blockDim = dim3(ATT_WARPS * 32);
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
/* the largest shared-memory carveout, as the matvecs ask: a multiprocessor configured
 * smaller could not hold their blocks beside this kernel's */
#define CALL(D)                                                                                              \
    do {                                                                                                     \
        const cudaError_t e = cudaFuncSetAttribute(                                                          \
            k_attention_decode<D>, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared); \
        if (e != cudaSuccess)                                                                                \
            return e;                                                                                        \
        return cudaLaunchKernelEx(&cfg, k_attention_decode<D>, *p, qkv, k_cache, v_cache, state, partial,     \
                                  counters, out);                                                            \
    } while (0)
    DISPATCH_DPL(p->head_dim, CALL);
#undef CALL
}

extern "C" cudaError_t cuda_qk_rope_store(const cuda_attn_params *p, float *qkv, int n_tokens, int pos0,
                                          float *k_cache, float *v_cache, cudaStream_t stream) {
    const dim3 grid(n_tokens, p->n_head + p->n_head_kv);
#define CALL(D) k_qk_rope_store<D><<<grid, 32, 0, stream>>>(*p, qkv, pos0, k_cache, v_cache)
    DISPATCH_DPL(p->head_dim, CALL);
#undef CALL
    return ER_CUDA_LAUNCH_CHECK();
}

extern "C" cudaError_t cuda_attention_prefill(const cuda_attn_params *p, const float *qkv, int n_tokens, int pos0,
                                              const float *k_cache, const float *v_cache, float *out,
                                              cudaStream_t stream) {
    const dim3 grid(p->n_head, (n_tokens + ATT_WARPS - 1) / ATT_WARPS);
#define CALL(D) k_attention_prefill<D><<<grid, ATT_WARPS * 32, 0, stream>>>(*p, qkv, n_tokens, pos0, k_cache, v_cache, out)
    DISPATCH_DPL(p->head_dim, CALL);
#undef CALL
    return ER_CUDA_LAUNCH_CHECK();
}
