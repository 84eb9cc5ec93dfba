/*
 * fast_avx2.c - the tiled matrix-matrix kernel of the prefill (and decode) path, and the
 * KV cache tables of attention (cpu_kv_ops: F32 and F16 rows); AVX2 + FMA + F16C through
 * target attributes.
 *
 * The int8 tiles, Q8_0 weights x Q8_0 activations and Q4_1 x Q8_1, a tile of RM rows x
 * RN tokens: per 32-element block each weight block and each activation block is loaded
 * once and used RN resp. RM times (the matvec loads both for every product), and the
 * scales of all RM x RN pairs are multiplied in one vector. Per pair and block: the
 * integer dot (AVX2: vpmaddubsw + vpmaddwd, and vpsignb for Q8_0; AVX-512 VNNI: one
 * vpdpbusd), vcvtdq2ps, one FMA with the pair's product of scales, accumulated in 8
 * lanes per pair in block order and summed at the end: exactly the arithmetic of the
 * table's dot (kernels_avx2.c), so tile shape, instruction set, batch size and thread
 * count never change a result. One body for both types and both sets
 * (fast_int8_tile.h); AVX2 tiles are 4 x 2 (8 accumulators + operands in 16 ymm
 * registers; 2 x 4 measured 0.8x its speed on pp64, 4 x 3 would spill), VNNI tiles 4 x 4
 * (32 registers). On an AVX-512 VNNI CPU, Q4_0, Q4_1, Q8_0 and Q2_K..Q6_K matrices
 * of a multiple of 8 rows are packed instead (packed.h; EDGERUNNER_CPU_PACK=0: not) and
 * run the packed kernels below at every token count.
 *
 * SwiGLU (the fast path's, not the reference's): expf in vectors (Cephes' polynomial);
 * the element-by-element libm expf and division were 6.7% of an 8-way server's samples.
 *
 * Attention over the KV cache: one body per kernel, written over a row loader that takes
 * the element type as a constant (f16 = 0 or 1); each table entry is that body inlined
 * for one type, so F16 rows convert in registers (vcvtph2ps) with no scratch and no
 * second copy of the kernel. Decode at long contexts reads the cache from memory: F16
 * halves those bytes.
 */
#include "backend/cpu/fast.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "backend/cpu/packed.h"
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/types.h"

/* element i of a cache row as f32: the types' reference conversion (core/fp16.h) */
static inline float load1(const void *row, int64_t i, const int f16) {
    return f16 ? er_f16_to_f32(((const uint16_t *)row)[i]) : ((const float *)row)[i];
}

static inline void dots_c_body(float *s, const float *q, const void *k, int64_t k_stride, int64_t n_rows,
                               int64_t d, const int f16) {
    for (int64_t j = 0; j < n_rows; j++) {
        float acc = 0.0f;
        for (int64_t i = 0; i < d; i++)
            acc += q[i] * load1(k, j * k_stride + i, f16);
        s[j] = acc;
    }
}

static inline void wsum_c_body(float *out, const float *p, const void *v, int64_t v_stride, int64_t n_rows,
                               int64_t d, const int f16) {
    for (int64_t i = 0; i < d; i++)
        out[i] = 0.0f;
    for (int64_t j = 0; j < n_rows; j++)
        for (int64_t i = 0; i < d; i++)
            out[i] += p[j] * load1(v, j * v_stride + i, f16);
}

static inline void panel_c_body(float *panel, const void *v, int64_t v_stride, int64_t n_rows, int nc,
                                const int f16) {
    for (int64_t j = 0; j < n_rows; j++)
        for (int i = 0; i < 16; i++)
            panel[16 * j + i] = i < nc ? load1(v, j * v_stride + i, f16) : 0.0f;
}

static void to_f32_f32_c(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }
static void store_f32_c(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

static void add_c(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] += src[i];
}

/* one table entry per (kernel, type): the body above with the type fixed */
#define KV_ENTRIES(IMPL, ATTR)                                                                                      \
    ATTR static void dots_f32_##IMPL(float *s, const float *q, const void *k, int64_t ks, int64_t n, int64_t d) {   \
        dots_##IMPL##_body(s, q, k, ks, n, d, 0);                                                                   \
    }                                                                                                               \
    ATTR static void dots_f16_##IMPL(float *s, const float *q, const void *k, int64_t ks, int64_t n, int64_t d) {   \
        dots_##IMPL##_body(s, q, k, ks, n, d, 1);                                                                   \
    }                                                                                                               \
    ATTR static void wsum_f32_##IMPL(float *o, const float *p, const void *v, int64_t vs, int64_t n, int64_t d) {   \
        wsum_##IMPL##_body(o, p, v, vs, n, d, 0);                                                                   \
    }                                                                                                               \
    ATTR static void wsum_f16_##IMPL(float *o, const float *p, const void *v, int64_t vs, int64_t n, int64_t d) {   \
        wsum_##IMPL##_body(o, p, v, vs, n, d, 1);                                                                   \
    }                                                                                                               \
    ATTR static void panel_f32_##IMPL(float *panel, const void *v, int64_t vs, int64_t n, int nc) {                 \
        panel_##IMPL##_body(panel, v, vs, n, nc, 0);                                                                \
    }                                                                                                               \
    ATTR static void panel_f16_##IMPL(float *panel, const void *v, int64_t vs, int64_t n, int nc) {                 \
        panel_##IMPL##_body(panel, v, vs, n, nc, 1);                                                                \
    }

KV_ENTRIES(c, )

static const cpu_kv_ops kv_f32_c = {ER_TYPE_F32, 4, store_f32_c, to_f32_f32_c, dots_f32_c, wsum_f32_c, panel_f32_c};
static const cpu_kv_ops kv_f16_c = {ER_TYPE_F16, 2, er_f32_row_to_f16, er_f16_row_to_f32, dots_f16_c, wsum_f16_c,
                                    panel_f16_c};

static void pack_panel_c(const float *rows, int64_t n, float *panel) {
    for (int64_t k = 0; k < n; k++)
        for (int r = 0; r < 16; r++)
            panel[16 * k + r] = rows[r * n + k];
}

static void sgemm_6x16_c(const float *const *xr, const float *panel, int64_t n, float *y, int64_t y_stride, int mt,
                         int nr) {
    for (int i = 0; i < mt; i++)
        for (int j = 0; j < nr; j++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < n; k++)
                acc = fmaf(xr[i][k], panel[16 * k + j], acc);
            y[i * y_stride + j] = acc;
        }
}

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE inline __attribute__((always_inline))

/* the first token block of a call reads the weights from memory: prefetched this far ahead
 * (as the table's matvec does); later blocks find them in cache and the hint costs little */
enum { PREFETCH_AHEAD = 1024 };

AVX2 static INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* the largest of 8 floats, in every lane */
AVX2 static INLINE __m256 hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm256_broadcastss_ps(m);
}

/* 6 tokens x 16 outputs in 12 accumulators; per k two panel loads, six broadcasts and
 * twelve FMAs: the FMA units, not the loads, set the pace (the int8 tiles below need
 * about seven instructions per 32 products). */
AVX2 static INLINE void store_row16(float *y, __m256 lo, __m256 hi, int nr) {
    if (nr == 16) {
        _mm256_storeu_ps(y, lo);
        _mm256_storeu_ps(y + 8, hi);
        return;
    }
    float out[16];
    _mm256_storeu_ps(out, lo);
    _mm256_storeu_ps(out + 8, hi);
    for (int j = 0; j < nr; j++)
        y[j] = out[j];
}

/* The accumulators are twelve named variables: an array of them ends up in memory. */
AVX2 static void sgemm_6x16_avx2(const float *const *xr, const float *panel, int64_t n, float *y, int64_t y_stride,
                                 int mt, int nr) {
    const float *x0 = xr[0], *x1 = xr[1], *x2 = xr[2], *x3 = xr[3], *x4 = xr[4], *x5 = xr[5];
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t k = 0; k < n; k++) {
        const __m256 b0 = _mm256_load_ps(panel + 16 * k), b1 = _mm256_load_ps(panel + 16 * k + 8);
        __m256 a = _mm256_broadcast_ss(x0 + k);
        c00 = _mm256_fmadd_ps(a, b0, c00);
        c01 = _mm256_fmadd_ps(a, b1, c01);
        a = _mm256_broadcast_ss(x1 + k);
        c10 = _mm256_fmadd_ps(a, b0, c10);
        c11 = _mm256_fmadd_ps(a, b1, c11);
        a = _mm256_broadcast_ss(x2 + k);
        c20 = _mm256_fmadd_ps(a, b0, c20);
        c21 = _mm256_fmadd_ps(a, b1, c21);
        a = _mm256_broadcast_ss(x3 + k);
        c30 = _mm256_fmadd_ps(a, b0, c30);
        c31 = _mm256_fmadd_ps(a, b1, c31);
        a = _mm256_broadcast_ss(x4 + k);
        c40 = _mm256_fmadd_ps(a, b0, c40);
        c41 = _mm256_fmadd_ps(a, b1, c41);
        a = _mm256_broadcast_ss(x5 + k);
        c50 = _mm256_fmadd_ps(a, b0, c50);
        c51 = _mm256_fmadd_ps(a, b1, c51);
    }
    store_row16(y, c00, c01, nr);
    if (mt > 1)
        store_row16(y + y_stride, c10, c11, nr);
    if (mt > 2)
        store_row16(y + 2 * y_stride, c20, c21, nr);
    if (mt > 3)
        store_row16(y + 3 * y_stride, c30, c31, nr);
    if (mt > 4)
        store_row16(y + 4 * y_stride, c40, c41, nr);
    if (mt > 5)
        store_row16(y + 5 * y_stride, c50, c51, nr);
}

/* Q8_0 rows to f32 for the panels: the reference's d * q, eight at a time (the scalar
 * dequantization took a third of a 64-token prefill's matmul time) */
AVX2 static void to_f32_q8_0_avx2(const void *src, float *dst, int64_t n) {
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0) {
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(b[i].d));
        for (int j = 0; j < QK8_0; j += 8) {
            const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b[i].qs + j)));
            _mm256_storeu_ps(dst + j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(q)));
        }
    }
}

/* Q4_K likewise: d * sc * q - dmin * m per sub-block of 32, as to_f32_q4_K_ref rounds
 * (a product, then a difference: no FMA) */
AVX2 static void to_f32_q4_K_avx2(const void *src, float *dst, int64_t n) {
    const block_q4_K *b = src;
    const __m256i low4 = _mm256_set1_epi32(15);
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = _cvtsh_ss(b[i].d), dmin = _cvtsh_ss(b[i].dmin);
        for (int j = 0; j < QK_K / 32; j++) {
            uint8_t sc, m;
            get_scale_min_k4(j, b[i].scales, &sc, &m);
            const __m256 d1 = _mm256_set1_ps(d * (float)sc), m1 = _mm256_set1_ps(dmin * (float)m);
            const uint8_t *q = b[i].qs + 32 * (j / 2);
            const __m128i shift = _mm_cvtsi32_si128(4 * (j % 2));
            for (int l = 0; l < 32; l += 8) {
                __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + l)));
                v = _mm256_and_si256(_mm256_srl_epi32(v, shift), low4);
                _mm256_storeu_ps(dst + 32 * j + l, _mm256_sub_ps(_mm256_mul_ps(d1, _mm256_cvtepi32_ps(v)), m1));
            }
        }
    }
}

/* Q6_K likewise: (d * scale) * (q - 32) per group of 16, as to_f32_q6_K_ref rounds */
AVX2 static void to_f32_q6_K_avx2(const void *src, float *dst, int64_t n) {
    const block_q6_K *b = src;
    const __m256i low4 = _mm256_set1_epi32(15), low2 = _mm256_set1_epi32(3), bias = _mm256_set1_epi32(32);
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = _cvtsh_ss(b[i].d);
        for (int j = 0; j < QK_K / 16; j++) {
            const __m256 dl = _mm256_set1_ps(d * (float)b[i].scales[j]);
            const int e0 = 16 * j, h = e0 / 128, sb = (e0 / 32) % 4;
            const __m128i hshift = _mm_cvtsi32_si128(2 * sb), lshift = _mm_cvtsi32_si128(sb < 2 ? 0 : 4);
            for (int t = 0; t < 16; t += 8) {
                const int l = e0 % 32 + t;
                const __m256i lb = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b[i].ql + 64 * h + 32 * (sb & 1) + l)));
                const __m256i qh = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b[i].qh + 32 * h + l)));
                const __m256i lo = _mm256_and_si256(_mm256_srl_epi32(lb, lshift), low4);
                const __m256i hi = _mm256_and_si256(_mm256_srl_epi32(qh, hshift), low2);
                const __m256i q = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), bias);
                _mm256_storeu_ps(dst + e0 + t, _mm256_mul_ps(dl, _mm256_cvtepi32_ps(q)));
            }
        }
    }
}

/* panel (n, 16) = rows (16, n) transposed, 8x8 blocks in registers */
AVX2 static void pack_panel_avx2(const float *rows, int64_t n, float *panel) {
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int h = 0; h < 2; h++) {
            const float *r = rows + 8 * h * n + k;
            const __m256 r0 = _mm256_loadu_ps(r), r1 = _mm256_loadu_ps(r + n), r2 = _mm256_loadu_ps(r + 2 * n);
            const __m256 r3 = _mm256_loadu_ps(r + 3 * n), r4 = _mm256_loadu_ps(r + 4 * n);
            const __m256 r5 = _mm256_loadu_ps(r + 5 * n), r6 = _mm256_loadu_ps(r + 6 * n);
            const __m256 r7 = _mm256_loadu_ps(r + 7 * n);
            const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
            const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
            const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
            const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
            const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
            const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
            float *p = panel + 16 * k + 8 * h;
            _mm256_store_ps(p, _mm256_permute2f128_ps(s0, s4, 0x20));
            _mm256_store_ps(p + 16, _mm256_permute2f128_ps(s1, s5, 0x20));
            _mm256_store_ps(p + 32, _mm256_permute2f128_ps(s2, s6, 0x20));
            _mm256_store_ps(p + 48, _mm256_permute2f128_ps(s3, s7, 0x20));
            _mm256_store_ps(p + 64, _mm256_permute2f128_ps(s0, s4, 0x31));
            _mm256_store_ps(p + 80, _mm256_permute2f128_ps(s1, s5, 0x31));
            _mm256_store_ps(p + 96, _mm256_permute2f128_ps(s2, s6, 0x31));
            _mm256_store_ps(p + 112, _mm256_permute2f128_ps(s3, s7, 0x31));
        }
    for (; k < n; k++)
        for (int r = 0; r < 16; r++)
            panel[16 * k + r] = rows[r * n + k];
}

/* ---- the int8 tiles: Q8_0 x Q8_0 and Q4_1 x Q8_1 (SmolLM2's type) -------------------------
 *
 * One body (fast_int8_tile.h) included once per instruction set: AVX2, and AVX-512 VNNI
 * on ymm registers (cpu_gemm_get takes it where the CPU has it). Both compute each (row,
 * token) to the bit as the table's vec_dot does (fast_int8_tile.h says how), so a
 * sequence's numbers do not depend on how many others share its decode step, nor on the
 * CPU's instruction set (batch invariance, forward.c). */

/* the weight formats of the tiles: Q8_0 rows x Q8_0 activations, Q4_1 rows x Q8_1 */
enum { W_Q8_0, W_Q4_1, W_Q4_0, W_Q2_K, W_Q3_K, W_Q4_K, W_Q5_K, W_Q6_K }; /* from W_Q4_0 on: packed only */

/* A row's 32 weights of block wb as bytes in element order: Q8_0's int8 as they are,
 * Q4_1's nibbles (elements j and j + 16 share byte j) as 0..15 */
AVX2 static INLINE __m256i load_w(const uint8_t *wb, const int wt) {
    if (wt == W_Q8_0)
        return _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)wb)->qs);
    const __m128i q = _mm_loadu_si128((const __m128i *)((const block_q4_1 *)wb)->qs), m4 = _mm_set1_epi8(0x0F);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(q, m4)),
                                   _mm_and_si128(_mm_srli_epi16(q, 4), m4), 1);
}

/* A token's 32 int8 activations of block xb (Q8_0 or Q8_1) */
AVX2 static INLINE __m256i load_x(const uint8_t *xb, const int wt) {
    const int8_t *qs = wt == W_Q8_0 ? ((const block_q8_0 *)xb)->qs : ((const block_q8_1 *)xb)->qs;
    return _mm256_loadu_si256((const __m256i *)qs);
}

/* A block's two leading f16, (d, m) of Q4_1 or (d, s) of Q8_1, as one int (d low); a Q8_0
 * block has d only: 0 beside it */
static INLINE int f16_pair(const uint8_t *blk, const int wt) {
    uint32_t v = 0;
    memcpy(&v, blk, wt == W_Q8_0 ? 2 : 4);
    return (int)v;
}

/* Lane l of the v-th vector of (row, token) pairs, pair i * RN + j: where row i's resp.
 * token j's d sits among block_scales' f16 pairs (its m or s one further) */
#define PAIR_W(v, l) (2 * (((8 * (v) + (l)) / RN) % RM))
#define PAIR_X(v, l) (2 * ((8 * (v) + (l)) % RN))
#define PAIR_IDX(F, v) _mm256_setr_epi32(F(v, 0), F(v, 1), F(v, 2), F(v, 3), F(v, 4), F(v, 5), F(v, 6), F(v, 7))

/* The scale work of block b for the RM x RN pairs of a tile, in vectors of 8 pairs:
 * dd[i * RN + j] = dw_i * dx_j (the dot's f16(w.d) * f16(x.d)) and, for Q4_1, summ lane
 * i * RN + j += mw_i * sx_j (a product, then a sum, as the dot). wb: the rows' blocks,
 * xb: the tokens' blocks. */
AVX2 static INLINE void block_scales(const uint8_t *const *wb, const uint8_t *const *xb, const int wt, const int RM,
                                     const int RN, float *dd, __m256 *summ) {
    /* (d0, m0, d1, m1, .., d3, m3) of rows 0..3 and (d0, s0, ..) of tokens 0..3; past RM
     * rows or RN tokens, earlier ones again (their lanes are not used) */
    const __m256 wf = _mm256_cvtph_ps(_mm_setr_epi32(f16_pair(wb[0], wt), f16_pair(wb[1 % RM], wt),
                                                     f16_pair(wb[2 % RM], wt), f16_pair(wb[3 % RM], wt)));
    const __m256 xf = _mm256_cvtph_ps(_mm_setr_epi32(f16_pair(xb[0], wt), f16_pair(xb[1 % RN], wt),
                                                     f16_pair(xb[2 % RN], wt), f16_pair(xb[3 % RN], wt)));
#pragma GCC unroll 2
    for (int v = 0; v < (RM * RN + 7) / 8; v++) {
        const __m256i iw = PAIR_IDX(PAIR_W, v), ix = PAIR_IDX(PAIR_X, v);
        _mm256_store_ps(dd + 8 * v, _mm256_mul_ps(_mm256_permutevar8x32_ps(wf, iw), _mm256_permutevar8x32_ps(xf, ix)));
        if (wt == W_Q4_1) {
            const __m256i one = _mm256_set1_epi32(1);
            const __m256 mw = _mm256_permutevar8x32_ps(wf, _mm256_add_epi32(iw, one));
            const __m256 sx = _mm256_permutevar8x32_ps(xf, _mm256_add_epi32(ix, one));
            summ[v] = _mm256_add_ps(summ[v], _mm256_mul_ps(mw, sx));
        }
    }
}
#undef PAIR_IDX
#undef PAIR_X
#undef PAIR_W

/* AVX2: vpmaddubsw (unsigned x signed bytes, pairs summed to int16: never saturated, as
 * |w * x| <= 128 * 127 for Q8_0 and 15 * 127 for Q4_1), then vpmaddwd by 1. Q8_0 is
 * signed x signed: |w| is the unsigned operand and w's signs go onto the activations
 * (vpsignb, the dot's mul_sum_i8; exact for activations > -128, which quantize_row
 * never writes). a: the unsigned weights, c: the weights' signs. */
AVX2 static INLINE __m256i load_w_avx2(const uint8_t *wb, const int wt) { return load_w(wb, wt); }

AVX2 static INLINE void prep_w_avx2(__m256i raw, const int wt, __m256i *a, __m256i *c) {
    *a = wt == W_Q8_0 ? _mm256_sign_epi8(raw, raw) : raw;
    *c = raw;
}

AVX2 static INLINE __m256i prep_x_avx2(__m256i raw, const int wt) {
    (void)wt;
    return raw;
}

AVX2 static INLINE __m256i pair_avx2(__m256i a, __m256i c, __m256i x, const int wt) {
    const __m256i xs = wt == W_Q8_0 ? _mm256_sign_epi8(x, c) : x;
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, xs), _mm256_set1_epi16(1));
}

#define INT8_ATTR AVX2
#define INT8_FN(name) name##_avx2
#define INT8_RN 2 /* 8 accumulators + operands in 16 ymm registers (4 x 3 would spill) */
#include "backend/cpu/fast_int8_tile.h"
#undef INT8_RN
#undef INT8_FN
#undef INT8_ATTR

/* AVX-512 VNNI on ymm registers (AVX512VL): vpdpbusd sums the four unsigned x signed
 * byte products of each int32 lane into it, exactly: one instruction for vpmaddubsw +
 * vpmaddwd, the same lanes. Q8_0: the activations made unsigned (x + 128: the top bit
 * flipped) and the row's 128 * sum(w) per lane taken off once per row and block
 * (c = -dpbusd(0, 128, w)), so a pair is dpbusd(c, x + 128, w) = sum x * w: one
 * instruction, against three with vpsignb. a: the weights, c: the lanes' start. */
#define VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

/* Q4_1's nibbles in one shift: the 16 bytes in both halves, the high half shifted by 4
 * (vpsrlvw), then masked: two instructions, against four for load_w's */
VNNI static INLINE __m256i load_w_vnni(const uint8_t *wb, const int wt) {
    if (wt == W_Q8_0)
        return load_w(wb, wt);
    const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)((const block_q4_1 *)wb)->qs));
    const __m256i shift = _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4);
    return _mm256_and_si256(_mm256_srlv_epi16(q, shift), _mm256_set1_epi8(0x0F));
}

VNNI static INLINE void prep_w_vnni(__m256i raw, const int wt, __m256i *a, __m256i *c) {
    const __m256i zero = _mm256_setzero_si256();
    *a = raw;
    *c = wt == W_Q8_0 ? _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, _mm256_set1_epi8((char)0x80), raw)) : zero;
}

VNNI static INLINE __m256i prep_x_vnni(__m256i raw, const int wt) {
    return wt == W_Q8_0 ? _mm256_xor_si256(raw, _mm256_set1_epi8((char)0x80)) : raw;
}

VNNI static INLINE __m256i pair_vnni(__m256i a, __m256i c, __m256i x, const int wt) {
    return wt == W_Q8_0 ? _mm256_dpbusd_epi32(c, x, a) : _mm256_dpbusd_epi32(c, a, x);
}

#define INT8_ATTR VNNI
#define INT8_FN(name) name##_vnni
#define INT8_RN 4 /* 16 accumulators + operands in 32 ymm registers */
#include "backend/cpu/fast_int8_tile.h"
#undef INT8_RN
#undef INT8_FN
#undef INT8_ATTR

/* ---- rows packed by 8 (packed.h) x tokens, AVX-512 VNNI ------------------------------
 *
 * A tile is two groups of 8 rows (16 rows, lane r of a zmm register is row r of the pair)
 * x RN tokens over a window of nbw blocks: vpdpbusd on zmm adds as many products per
 * instruction as two on ymm, at the same rate where the CPU has 512-bit units (Zen 5:
 * 7.5 G instructions/s on one core either width, a microbenchmark), and at half the
 * instructions where it splits them (Zen 4). A pair's second group may be missing (a
 * weight of 8 mod 16 rows, or one token's call): its lanes then recompute the first group
 * and are not stored.
 * The tokens' scales come as floats (packed_gemm converts them once per call and window,
 * not once per group: per block and token the f16 conversions and broadcasts were a fifth
 * of the tile's instructions); acc starts at 0 in the first window and at y's values after
 * it (a float stored and loaded back unchanged: the order of packed.h). Each lane is one
 * row throughout, so a (row, token) is computed the same whatever RN, the window, the
 * pairing or the call. */
enum { PACKED_WIN = 64 }; /* blocks per window: the scales of 32 tokens fit 16 KiB */
/* The weight stream prefetched 8 KiB ahead into L2 (as kernels_avx2.c's simple types):
 * SmolLM2 Q4_1 decode, 2 threads, 6 pairs in one run, 1 KiB ahead into L1 against this:
 * 281/350, 312/378, 355/372, 340/347, 274/336, 241/265 tok/s. */
enum { PACKED_PREFETCH = 8192 };

/* One token's tile prefetches into L2, as measured above; a tile of several into L1,
 * where the line is used RN times (100 MB of SmolLM2-shaped Q4_1 matrices, 8 tokens, 2
 * threads, 5 pairs: 262-307 GMAC/s against 249-268 into L2; one token: L1 41-57 against
 * L2 47-59 GB/s, L2 kept). */
VNNI static INLINE void packed_prefetch(const char *p, const int RN) {
    if (RN == 1)
        _mm_prefetch(p, _MM_HINT_T1);
    else
        _mm_prefetch(p, _MM_HINT_T0);
}

/* 32 bytes at a (lanes 0..7) and at b (lanes 8..15) */
VNNI static INLINE __m512i load_pair(const uint8_t *a, const uint8_t *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* 8 f16 at a and 8 at b as 16 floats */
VNNI static INLINE __m512 load_pair_f16(const uint16_t *a, const uint16_t *b) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
                                                   _mm_loadu_si128((const __m128i *)b), 1));
}

/* Q4_1 rows x Q8_1 tokens, Q4_0 rows x Q8_0 tokens: per block, each of the 4 chunks'
 * nibbles (low, high: 16 rows x 4 elements each) is unpacked once and multiplied by every
 * token's 4 activations of those elements, broadcast (vpdpbusd, unsigned weights x signed
 * activations: no sign work); Q4_0's sums start at the token's -8 * sum(x). Then per
 * token: its 16 rows' block sums to float, one multiply of the rows' d by the token's, an
 * FMA (Q4_1: and one for the minimums). w0, w1: the two groups' blocks of the window;
 * lanes: the lanes stored (0xFFFF, or 0x00FF without a second group); sc: (RN,
 * PACKED_WIN, 2) the tokens' d per block, and s (Q4_1) or the int32 -8 * sum(x) (Q4_0). */
VNNI static INLINE void q4x8_tile(const uint8_t *w0, const uint8_t *w1, __mmask16 lanes, const uint8_t *x,
                                  size_t x_stride, const float *sc, float *y, int64_t y_stride, int64_t nbw, int first,
                                  const int wt, const int RN) {
    const size_t wbs = wt == W_Q4_0 ? sizeof(block_q4_0x8) : sizeof(block_q4_1x8);
    const size_t xbs = wt == W_Q4_0 ? sizeof(block_q8_0) : sizeof(block_q8_1);
    const size_t xqs = wt == W_Q4_0 ? offsetof(block_q8_0, qs) : offsetof(block_q8_1, qs);
    const size_t qso = wt == W_Q4_0 ? offsetof(block_q4_0x8, qs) : offsetof(block_q4_1x8, qs);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[8]; /* (RN) 16 rows' sums of token j */
#pragma GCC unroll 8
    for (int j = 0; j < RN; j++)
        acc[j] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(lanes, y + j * y_stride);
    for (int64_t b = 0; b < nbw; b++) {
        const uint8_t *wb0 = w0 + (size_t)b * wbs, *wb1 = w1 + (size_t)b * wbs;
        const int8_t *xq[8]; /* (RN) the 32 activations of block b of each token */
#pragma GCC unroll 8
        for (int j = 0; j < RN; j++)
            xq[j] = (const int8_t *)(x + (size_t)j * x_stride + (size_t)b * xbs + xqs);
#pragma GCC unroll 3
        for (int l = 0; l < 3; l++) {
            packed_prefetch((const char *)wb0 + PACKED_PREFETCH + 64 * l, RN);
            packed_prefetch((const char *)wb1 + PACKED_PREFETCH + 64 * l, RN);
        }
        __m512i s[8]; /* (RN) 16 rows' int32 block sums of token j */
#pragma GCC unroll 8
        for (int j = 0; j < RN; j++) {
            int32_t start = 0;
            if (wt == W_Q4_0)
                memcpy(&start, sc + (j * PACKED_WIN + b) * 2 + 1, sizeof start);
            s[j] = _mm512_set1_epi32(start);
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m512i q = load_pair(wb0 + qso + 32 * c, wb1 + qso + 32 * c);
            const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
#pragma GCC unroll 8
            for (int j = 0; j < RN; j++) {
                int32_t xl, xh; /* the token's elements 4c .. 4c + 3 and 16 + 4c .. 16 + 4c + 3 */
                memcpy(&xl, xq[j] + 4 * c, 4);
                memcpy(&xh, xq[j] + 16 + 4 * c, 4);
                s[j] = _mm512_dpbusd_epi32(s[j], lo, _mm512_set1_epi32(xl));
                s[j] = _mm512_dpbusd_epi32(s[j], hi, _mm512_set1_epi32(xh));
            }
        }
        const __m512 dw = load_pair_f16((const uint16_t *)wb0, (const uint16_t *)wb1); /* d[8] leads both blocks */
        const __m512 mw = wt == W_Q4_1 ? load_pair_f16(((const block_q4_1x8 *)wb0)->m, ((const block_q4_1x8 *)wb1)->m)
                                       : _mm512_setzero_ps(); /* Q4_1's minimums */
#pragma GCC unroll 8
        for (int j = 0; j < RN; j++) {
            const float *sj = sc + (j * PACKED_WIN + b) * 2; /* token j's d, s */
            acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(sj[0])), _mm512_cvtepi32_ps(s[j]), acc[j]);
            if (wt == W_Q4_1)
                acc[j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(sj[1]), acc[j]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < RN; j++)
        _mm512_mask_storeu_ps(y + j * y_stride, lanes, acc[j]);
}

/* the sum of 32 int8 */
VNNI static INLINE int32_t sum_i8_32(const int8_t *q) {
    const __m256i p =
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), _mm256_loadu_si256((const __m256i *)q));
    __m128i v = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4E));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0xB1));
    return _mm_cvtsi128_si32(v);
}

/* Q8_0 rows x Q8_0 tokens stored unsigned (x + 128): per block the rows' 128 * sum(w)
 * (vpdpbusd of 128 in every byte with each chunk, in two chains), negated, is where every
 * token's sums start; then one vpdpbusd per chunk and token, one conversion and one FMA
 * per token. w0, w1, lanes: as q4x8_tile's; sc: (RN, PACKED_WIN, 2) the tokens' d per
 * block (and an unused slot). */
VNNI static INLINE void q8_0x8_tile(const block_q8_0x8 *w0, const block_q8_0x8 *w1, __mmask16 lanes,
                                    const uint8_t *x, size_t x_stride, const float *sc, float *y, int64_t y_stride,
                                    int64_t nbw, int first, const int RN) {
    const __m512i top = _mm512_set1_epi8((char)0x80);
    __m512 acc[8]; /* (RN) 16 rows' sums of token j */
#pragma GCC unroll 8
    for (int j = 0; j < RN; j++)
        acc[j] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(lanes, y + j * y_stride);
    for (int64_t b = 0; b < nbw; b++) {
        const block_q8_0x8 *wb0 = w0 + b, *wb1 = w1 + b;
        const block_q8_0 *xb[8]; /* (RN) block b of each token */
#pragma GCC unroll 8
        for (int j = 0; j < RN; j++)
            xb[j] = (const block_q8_0 *)(x + (size_t)j * x_stride) + b;
#pragma GCC unroll 5
        for (int l = 0; l < 5; l++) {
            packed_prefetch((const char *)wb0 + PACKED_PREFETCH + 64 * l, RN);
            packed_prefetch((const char *)wb1 + PACKED_PREFETCH + 64 * l, RN);
        }
        __m512i c0 = _mm512_setzero_si512(), c1 = _mm512_setzero_si512(); /* 128 * sum(w), even and odd chunks */
#pragma GCC unroll 4
        for (int c = 0; c < 8; c += 2) {
            c0 = _mm512_dpbusd_epi32(c0, top, load_pair((const uint8_t *)wb0->qs[c], (const uint8_t *)wb1->qs[c]));
            c1 = _mm512_dpbusd_epi32(c1, top,
                                     load_pair((const uint8_t *)wb0->qs[c + 1], (const uint8_t *)wb1->qs[c + 1]));
        }
        const __m512i start = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_add_epi32(c0, c1));
        /* 16 rows' int32 block sums of token j in two chains, even and odd chunks: half as
         * long a chain of dependent vpdpbusd (6,144 x 576 x 8 tokens, one thread: 168 against
         * 217 us; Qwen3-0.6B Q8_0 pp256 521 against 459 tok/s; Q4_1's tile, split likewise,
         * did not move). Integer sums: the same bits. */
        __m512i s[8], s_odd[8]; /* (RN) */
#pragma GCC unroll 8
        for (int j = 0; j < RN; j++) {
            s[j] = start;
            s_odd[j] = _mm512_setzero_si512();
        }
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            const __m512i q = load_pair((const uint8_t *)wb0->qs[c], (const uint8_t *)wb1->qs[c]);
#pragma GCC unroll 8
            for (int j = 0; j < RN; j++) {
                int32_t xc; /* the token's elements 4c .. 4c + 3, unsigned */
                memcpy(&xc, xb[j]->qs + 4 * c, 4);
                if (c & 1)
                    s_odd[j] = _mm512_dpbusd_epi32(s_odd[j], _mm512_set1_epi32(xc), q);
                else
                    s[j] = _mm512_dpbusd_epi32(s[j], _mm512_set1_epi32(xc), q);
            }
        }
#pragma GCC unroll 8
        for (int j = 0; j < RN; j++)
            s[j] = _mm512_add_epi32(s[j], s_odd[j]);
        const __m512 dw = load_pair_f16(wb0->d, wb1->d);
#pragma GCC unroll 8
        for (int j = 0; j < RN; j++)
            acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(sc[(j * PACKED_WIN + b) * 2])),
                                     _mm512_cvtepi32_ps(s[j]), acc[j]);
    }
#pragma GCC unroll 8
    for (int j = 0; j < RN; j++)
        _mm512_mask_storeu_ps(y + j * y_stride, lanes, acc[j]);
}

/* Q2_K..Q6_K: super-blocks per window (the two groups' 10 to 26 KiB, reused by the tiles
 * of a block of 32 tokens), and the int32 words per token and super-block of
 * packed_gemm's scales: the token's d (f32 bits), then its sums by pairs, lo | hi << 16:
 * Q4_K's and Q5_K's 4 pairs of sums of 32, Q2_K's, Q3_K's and Q6_K's 8 pairs of sums of 16
 * (Q8_K's bsums) */
enum { K_WIN = 8, K4_ST = 5, K6_ST = 9 };

/* The 6-bit scales and minimums of super-blocks b0 (lanes 0..7) and b1 (8..15), from
 * block_q4_Kx8's split bits (packed.h): sc[j] sub-block j's scale, mp[p] the minimums of
 * sub-blocks 2p and 2p + 1 as an int16 pair (vpdpwssd's operand) */
VNNI static INLINE void q4_Kx8_scales(const block_q4_Kx8 *b0, const block_q4_Kx8 *b1, __m512i sc[8], __m512i mp[4]) {
    const __m128i m4 = _mm_set1_epi8(0x0F), m2 = _mm_set1_epi8(0x03), m12 = _mm_set1_epi8(0x0C);
    __m128i mins[8]; /* (8) sub-block j's minimums, a byte per lane */
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        const __m128i lo = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)b0->scl[j]),
                                              _mm_loadl_epi64((const __m128i *)b1->scl[j]));
        __m128i hi = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)b0->sch[j / 2]),
                                        _mm_loadl_epi64((const __m128i *)b1->sch[j / 2]));
        if (j & 1) /* (16-bit shifts: each byte is masked to bits its own byte brought) */
            hi = _mm_srli_epi16(hi, 4);
        sc[j] = _mm512_cvtepu8_epi32(_mm_or_si128(_mm_and_si128(lo, m4), _mm_slli_epi16(_mm_and_si128(hi, m2), 4)));
        mins[j] = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(lo, 4), m4), _mm_slli_epi16(_mm_and_si128(hi, m12), 2));
    }
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++)
        mp[p] = _mm512_or_si512(_mm512_cvtepu8_epi32(mins[2 * p]),
                                _mm512_slli_epi32(_mm512_cvtepu8_epi32(mins[2 * p + 1]), 16));
}

/* v with bit j of each byte moved to bit 4 (16-bit shifts: bit 4 of each byte then holds
 * its own byte's bit j, the rest is masked away) */
VNNI static INLINE __m512i shift_bit4(__m512i v, const int j) {
    return j <= 4 ? _mm512_slli_epi16(v, 4 - j) : _mm512_srli_epi16(v, j - 4);
}

/* Q4_K and Q5_K rows x Q8_K tokens: per super-block its scales unpacked once
 * (q4_Kx8_scales); per sub-block pair each chunk's nibbles once (low: sub-block 2p, high:
 * 2p + 1; Q5_K: each with its fifth bit), times every token's 4 activations of those
 * elements, broadcast (vpdpbusd); each sub-block's sums times its scale (vpmulld) into the
 * token's int32 sum is, its minimums' sum ms by pairs (vpdpwssd with the token's sums of
 * 32); then two FMAs per token (packed.h). The 16 rows' acc lives in y between
 * super-blocks (a float stored and loaded back unchanged), so registers hold the 3 RN
 * sums. w0, w1, lanes: as q4x8_tile's (wt: W_Q4_K or W_Q5_K); st: (RN, K_WIN, K4_ST) the
 * tokens' words; first: the window starts the rows (acc from 0). */
VNNI static INLINE void k4x8_tile(const uint8_t *w0, const uint8_t *w1, __mmask16 lanes, const uint8_t *x,
                                  size_t x_stride, const int32_t *st, float *y, int64_t y_stride, int64_t nbw,
                                  int first, const int wt, const int RN) {
    const size_t wbs = wt == W_Q5_K ? sizeof(block_q5_Kx8) : sizeof(block_q4_Kx8);
    const __m512i m4 = _mm512_set1_epi8(0x0F), bit4 = _mm512_set1_epi8(0x10);
    for (int64_t b = 0; b < nbw; b++) {
        /* (a block_q5_Kx8 starts with its block_q4_Kx8) */
        const block_q4_Kx8 *wb0 = (const block_q4_Kx8 *)(w0 + (size_t)b * wbs);
        const block_q4_Kx8 *wb1 = (const block_q4_Kx8 *)(w1 + (size_t)b * wbs);
#pragma GCC unroll 22
        for (int l = 0; l < (int)(wbs / 64); l++) {
            packed_prefetch((const char *)wb0 + PACKED_PREFETCH + 64 * l, RN);
            packed_prefetch((const char *)wb1 + PACKED_PREFETCH + 64 * l, RN);
        }
        __m512i sc[8], mp[4];
        q4_Kx8_scales(wb0, wb1, sc, mp);
        const int8_t *xq[8]; /* (RN) the 256 activations of super-block b of each token */
#pragma GCC unroll 8
        for (int j = 0; j < RN; j++)
            xq[j] = ((const block_q8_K *)(x + (size_t)j * x_stride) + b)->qs;
        __m512i is[8]; /* (RN) 16 rows' sum over sub-blocks of scale x int32 sum, token j */
#pragma GCC unroll 8
        for (int j = 0; j < RN; j++)
            is[j] = _mm512_setzero_si512();
        for (int p = 0; p < 4; p++) {
            __m512i slo[8], shi[8]; /* (RN) sub-block 2p's and 2p + 1's int32 sums, token j */
#pragma GCC unroll 8
            for (int j = 0; j < RN; j++)
                slo[j] = shi[j] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++) {
                const __m512i q = load_pair(wb0->qs[p][c][0], wb1->qs[p][c][0]);
                __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
                if (wt == W_Q5_K) { /* bit j of qh's byte: bit 4 of sub-block j's element, to bit 4 */
                    const __m512i h = load_pair(((const block_q5_Kx8 *)wb0)->qh[c][0],
                                                ((const block_q5_Kx8 *)wb1)->qh[c][0]);
                    lo = _mm512_or_si512(lo, _mm512_and_si512(shift_bit4(h, 2 * p), bit4));
                    hi = _mm512_or_si512(hi, _mm512_and_si512(shift_bit4(h, 2 * p + 1), bit4));
                }
#pragma GCC unroll 8
                for (int j = 0; j < RN; j++) {
                    int32_t xl, xh; /* elements 64p + 4c .. + 3 and 64p + 32 + 4c .. + 3 */
                    memcpy(&xl, xq[j] + 64 * p + 4 * c, 4);
                    memcpy(&xh, xq[j] + 64 * p + 32 + 4 * c, 4);
                    slo[j] = _mm512_dpbusd_epi32(slo[j], lo, _mm512_set1_epi32(xl));
                    shi[j] = _mm512_dpbusd_epi32(shi[j], hi, _mm512_set1_epi32(xh));
                }
            }
#pragma GCC unroll 8
            for (int j = 0; j < RN; j++)
                is[j] = _mm512_add_epi32(is[j], _mm512_add_epi32(_mm512_mullo_epi32(slo[j], sc[2 * p]),
                                                                 _mm512_mullo_epi32(shi[j], sc[2 * p + 1])));
        }
        const __m512 dw = load_pair_f16(wb0->d, wb1->d), mw = load_pair_f16(wb0->dmin, wb1->dmin);
#pragma GCC unroll 8
        for (int j = 0; j < RN; j++) {
            const int32_t *sj = st + (j * K_WIN + b) * K4_ST; /* token j's d, sums of 32 */
            float dx;
            memcpy(&dx, sj, sizeof dx);
            __m512i ms = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mp[0], _mm512_set1_epi32(sj[1]));
            ms = _mm512_dpwssd_epi32(ms, mp[1], _mm512_set1_epi32(sj[2]));
            ms = _mm512_dpwssd_epi32(ms, mp[2], _mm512_set1_epi32(sj[3]));
            ms = _mm512_dpwssd_epi32(ms, mp[3], _mm512_set1_epi32(sj[4]));
            const __m512 dxv = _mm512_set1_ps(dx);
            __m512 acc = first && b == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(lanes, y + j * y_stride);
            acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, dxv), _mm512_cvtepi32_ps(is[j]), acc);
            acc = _mm512_fnmadd_ps(_mm512_mul_ps(mw, dxv), _mm512_cvtepi32_ps(ms), acc);
            _mm512_mask_storeu_ps(y + j * y_stride, lanes, acc);
        }
    }
}

/* Q2_K, Q3_K and Q6_K: sub-blocks of 16 elements, one scale each (Q2_K: and a minimum),
 * codes u = q (Q2_K), q + 4 (Q3_K) or q + 32 (Q6_K), unsigned. The helpers below read two
 * places of packed blocks into the two halves of a zmm: lanes 0..7 from b0 (8 rows), lanes
 * 8..15 from b1 (the other group's rows in a tile, or the same rows' other half of the
 * super-block in a decode step). */

/* Sub-block j0's scales of b0's rows (lanes 0..7) and j1's of b1's (8..15), as int32:
 * Q6_K's int8 as they are, Q3_K's 6 bits (split as packed.h draws them) minus 32, Q2_K's
 * low 4 bits; with min, Q2_K's minimums (the high 4 bits) */
VNNI static INLINE __m512i k16_scales(const uint8_t *b0, int j0, const uint8_t *b1, int j1, const int wt,
                                      const int min) {
    if (wt == W_Q2_K) {
        const block_q2_Kx8 *q0 = (const block_q2_Kx8 *)b0, *q1 = (const block_q2_Kx8 *)b1;
        const __m128i v = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)q0->sc[j0]),
                                             _mm_loadl_epi64((const __m128i *)q1->sc[j1]));
        return _mm512_cvtepu8_epi32(_mm_and_si128(min ? _mm_srli_epi16(v, 4) : v, _mm_set1_epi8(0x0F)));
    }
    if (wt == W_Q6_K) {
        const block_q6_Kx8 *q0 = (const block_q6_Kx8 *)b0, *q1 = (const block_q6_Kx8 *)b1;
        return _mm512_cvtepi8_epi32(_mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)q0->sc[j0]),
                                                       _mm_loadl_epi64((const __m128i *)q1->sc[j1])));
    }
    const block_q3_Kx8 *q0 = (const block_q3_Kx8 *)b0, *q1 = (const block_q3_Kx8 *)b1;
    const __m128i lo = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)q0->scl[j0 / 2]),
                                          _mm_loadl_epi64((const __m128i *)q1->scl[j1 / 2]));
    const __m128i hi = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)q0->sch[j0 / 4]),
                                          _mm_loadl_epi64((const __m128i *)q1->sch[j1 / 4]));
    /* (64-bit shifts by each half's count, then masks: each byte keeps its own bits) */
    const __m128i lo4 =
        _mm_and_si128(_mm_srlv_epi64(lo, _mm_set_epi64x(4 * (j1 & 1), 4 * (j0 & 1))), _mm_set1_epi8(0x0F));
    const __m128i hi2 =
        _mm_and_si128(_mm_srlv_epi64(hi, _mm_set_epi64x(2 * (j1 & 3), 2 * (j0 & 3))), _mm_set1_epi8(0x03));
    return _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_or_si128(lo4, _mm_slli_epi16(hi2, 4))), _mm512_set1_epi32(32));
}

/* The codes u of chunk c of half h0 of b0 (lanes 0..7) and of half h1 of b1 (8..15), for
 * the 4 parts of 32 elements of a half, a byte each. 16-bit shifts: each byte is masked to
 * the bits its own byte brought. Q6_K: 4 bits of ql (parts 0 and 1 low nibbles, 2 and 3
 * high ones) and 2 of qh (bits 2p, 2p + 1); Q3_K: 2 bits of qs (bits 2p, 2p + 1) and hmask's
 * bit 4h + p as bit 2; Q2_K: qs's 2 bits alone. */
VNNI static INLINE void k16_codes(const uint8_t *b0, int h0, const uint8_t *b1, int h1, int c, __m512i u[4],
                                  const int wt) {
    if (wt == W_Q6_K) {
        const block_q6_Kx8 *q0 = (const block_q6_Kx8 *)b0, *q1 = (const block_q6_Kx8 *)b1;
        const __m512i qa = load_pair(q0->ql[h0][0][c][0], q1->ql[h1][0][c][0]);
        const __m512i qb = load_pair(q0->ql[h0][1][c][0], q1->ql[h1][1][c][0]);
        const __m512i qh = load_pair(q0->qh[h0][c][0], q1->qh[h1][c][0]);
        const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(0x03);
        u[0] = _mm512_or_si512(_mm512_and_si512(qa, m4), _mm512_slli_epi16(_mm512_and_si512(qh, m3), 4));
        u[1] = _mm512_or_si512(_mm512_and_si512(qb, m4),
                               _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 2), m3), 4));
        u[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(qa, 4), m4),
                               _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 4), m3), 4));
        u[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(qb, 4), m4),
                               _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 6), m3), 4));
        return;
    }
    if (wt == W_Q2_K) {
        const block_q2_Kx8 *q0 = (const block_q2_Kx8 *)b0, *q1 = (const block_q2_Kx8 *)b1;
        const __m512i q = load_pair(q0->qs[h0][c][0], q1->qs[h1][c][0]), m3 = _mm512_set1_epi8(0x03);
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++)
            u[p] = _mm512_and_si512(_mm512_srli_epi16(q, 2 * p), m3);
        return;
    }
    const block_q3_Kx8 *q0 = (const block_q3_Kx8 *)b0, *q1 = (const block_q3_Kx8 *)b1;
    const __m512i q = load_pair(q0->qs[h0][c][0], q1->qs[h1][c][0]);
    /* hmask's bits of half h moved to bits 0..3: by 4 h0 in lanes 0..7, 4 h1 in 8..15 */
    const __m512i hm = _mm512_srlv_epi16(load_pair(q0->hm[c][0], q1->hm[c][0]),
                                         _mm512_inserti64x4(_mm512_set1_epi16((short)(4 * h0)),
                                                            _mm256_set1_epi16((short)(4 * h1)), 1));
    const __m512i m3 = _mm512_set1_epi8(0x03), bit2 = _mm512_set1_epi8(0x04);
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        const __m512i low = _mm512_and_si512(_mm512_srli_epi16(q, 2 * p), m3);
        const __m512i third = _mm512_and_si512(p <= 2 ? _mm512_slli_epi16(hm, 2 - p) : _mm512_srli_epi16(hm, 1), bit2);
        u[p] = _mm512_or_si512(low, third);
    }
}

/* Q2_K, Q3_K and Q6_K rows x Q8_K tokens, as k4x8_tile, for up to 4 tokens (4 parts x RN
 * sums in registers): per super-block the 16 scales of the 16 rows once; per half h and
 * half of its chunks, each chunk's codes u of its 4 parts (k16_codes) once, times every
 * token's 4 activations (vpdpbusd) into the sums of the parts' sub-blocks of 16, each times
 * its scale (vpmulld); the codes' offset (4, 32) is taken back by the scales times the
 * token's sums of 16 (vpdpwssd), Q2_K's minimums likewise in a sum of their own. */
VNNI static INLINE void k16x8_tile4(const uint8_t *w0, const uint8_t *w1, __mmask16 lanes, const uint8_t *x,
                                    size_t x_stride, const int32_t *st, float *y, int64_t y_stride, int64_t nbw,
                                    int first, const int wt, const int RN) {
    const size_t wbs = wt == W_Q6_K   ? sizeof(block_q6_Kx8)
                       : wt == W_Q3_K ? sizeof(block_q3_Kx8)
                                      : sizeof(block_q2_Kx8);
    const int off_shift = wt == W_Q6_K ? 5 : 2; /* the codes' offset, 32 or 4 (Q2_K: none) */
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
    for (int64_t b = 0; b < nbw; b++) {
        const uint8_t *wb0 = w0 + (size_t)b * wbs, *wb1 = w1 + (size_t)b * wbs;
#pragma GCC unroll 27
        for (int l = 0; l < (int)((wbs + 63) / 64); l++) {
            packed_prefetch((const char *)wb0 + PACKED_PREFETCH + 64 * l, RN);
            packed_prefetch((const char *)wb1 + PACKED_PREFETCH + 64 * l, RN);
        }
        /* sub-block j's scale; sub-blocks 2k, 2k + 1's scales (Q2_K: minimums) as an int16 pair */
        __m512i sc[16], sp[8];
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++)
            sc[j] = k16_scales(wb0, j, wb1, j, wt, 0);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m512i even = wt == W_Q2_K ? k16_scales(wb0, 2 * k, wb1, 2 * k, wt, 1) : sc[2 * k];
            const __m512i odd = wt == W_Q2_K ? k16_scales(wb0, 2 * k + 1, wb1, 2 * k + 1, wt, 1) : sc[2 * k + 1];
            sp[k] = _mm512_or_si512(_mm512_and_si512(even, lo16), _mm512_slli_epi32(odd, 16));
        }
        const int8_t *xq[4]; /* (RN) the 256 activations of super-block b of each token */
#pragma GCC unroll 4
        for (int j = 0; j < RN; j++)
            xq[j] = ((const block_q8_K *)(x + (size_t)j * x_stride) + b)->qs;
        __m512i is[4]; /* (RN) 16 rows' sum over sub-blocks of scale x int32 sum of u x, token j */
#pragma GCC unroll 4
        for (int j = 0; j < RN; j++)
            is[j] = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++)
            for (int half = 0; half < 2; half++) { /* chunks 4 half .. + 3: sub-blocks 8h + 2 part + half */
                __m512i s[4][4]; /* (4 parts, RN) the int32 sums of part p's sub-block, token j */
#pragma GCC unroll 4
                for (int p = 0; p < 4; p++)
#pragma GCC unroll 4
                    for (int j = 0; j < RN; j++)
                        s[p][j] = _mm512_setzero_si512();
#pragma GCC unroll 4
                for (int c = 4 * half; c < 4 * half + 4; c++) {
                    __m512i u[4];
                    k16_codes(wb0, h, wb1, h, c, u, wt);
#pragma GCC unroll 4
                    for (int p = 0; p < 4; p++)
#pragma GCC unroll 4
                        for (int j = 0; j < RN; j++) {
                            int32_t xc; /* elements 128h + 32p + 4c .. + 3 */
                            memcpy(&xc, xq[j] + 128 * h + 32 * p + 4 * c, 4);
                            s[p][j] = _mm512_dpbusd_epi32(s[p][j], u[p], _mm512_set1_epi32(xc));
                        }
                }
#pragma GCC unroll 4
                for (int p = 0; p < 4; p++)
#pragma GCC unroll 4
                    for (int j = 0; j < RN; j++)
                        is[j] = _mm512_add_epi32(is[j], _mm512_mullo_epi32(s[p][j], sc[8 * h + 2 * p + half]));
            }
        const __m512 dw = load_pair_f16((const uint16_t *)wb0, (const uint16_t *)wb1); /* d[8] leads both blocks */
#pragma GCC unroll 4
        for (int j = 0; j < RN; j++) {
            const int32_t *sj = st + (j * K_WIN + b) * K6_ST; /* token j's d, sums of 16 */
            float dx;
            memcpy(&dx, sj, sizeof dx);
            __m512i off = _mm512_setzero_si512(); /* sum_j sc_j * bsum_j (Q2_K: m_j * bsum_j) */
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
                off = _mm512_dpwssd_epi32(off, sp[k], _mm512_set1_epi32(sj[1 + k]));
            const __m512 dxv = _mm512_set1_ps(dx);
            __m512 acc = first && b == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(lanes, y + j * y_stride);
            if (wt == W_Q2_K) {
                const __m512 mw = load_pair_f16(((const block_q2_Kx8 *)wb0)->dmin, ((const block_q2_Kx8 *)wb1)->dmin);
                acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, dxv), _mm512_cvtepi32_ps(is[j]), acc);
                acc = _mm512_fnmadd_ps(_mm512_mul_ps(mw, dxv), _mm512_cvtepi32_ps(off), acc);
            } else {
                const __m512i isum = _mm512_sub_epi32(is[j], _mm512_slli_epi32(off, off_shift));
                acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, dxv), _mm512_cvtepi32_ps(isum), acc);
            }
            _mm512_mask_storeu_ps(y + j * y_stride, lanes, acc);
        }
    }
}

/* k16x8_tile4 for one token and one group of 8 rows (a decode step), on all 16 lanes:
 * lanes 0..7 take the rows' first half of each super-block (h = 0), lanes 8..15 the same
 * rows' second half, each with its own activations (one 64-byte load per part, a dword
 * broadcast within each 256-bit half per chunk), and the halves' exact int32 sums meet
 * before the same float steps as k16x8_tile4's: the same bits, at half the instructions
 * (there, lanes 8..15 repeat lanes 0..7). */
VNNI static INLINE void k16x8_tile_1(const uint8_t *w, const uint8_t *x, const int32_t *st, float *y, int64_t nbw,
                                     int first, const int wt) {
    const size_t wbs = wt == W_Q6_K   ? sizeof(block_q6_Kx8)
                       : wt == W_Q3_K ? sizeof(block_q3_Kx8)
                                      : sizeof(block_q2_Kx8);
    const int off_shift = wt == W_Q6_K ? 5 : 2;
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
    for (int64_t b = 0; b < nbw; b++) {
        const uint8_t *wb = w + (size_t)b * wbs;
#pragma GCC unroll 27
        for (int l = 0; l < (int)((wbs + 63) / 64); l++)
            packed_prefetch((const char *)wb + PACKED_PREFETCH + 64 * l, 1);
        /* lanes 0..7: sub-block j's scale of the first half, 8..15: of the second (j + 8) */
        __m512i sc[8], sp[4];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            sc[j] = k16_scales(wb, j, wb, j + 8, wt, 0);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m512i even = wt == W_Q2_K ? k16_scales(wb, 2 * k, wb, 2 * k + 8, wt, 1) : sc[2 * k];
            const __m512i odd = wt == W_Q2_K ? k16_scales(wb, 2 * k + 1, wb, 2 * k + 9, wt, 1) : sc[2 * k + 1];
            sp[k] = _mm512_or_si512(_mm512_and_si512(even, lo16), _mm512_slli_epi32(odd, 16));
        }
        const int8_t *xq = ((const block_q8_K *)x + b)->qs;
        __m512i is = _mm512_setzero_si512();
        for (int half = 0; half < 2; half++) {
            __m512i s[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                            _mm512_setzero_si512()}; /* (4 parts) */
            __m512i xp[4]; /* part p's 32 activations of the first half (low 256 bits), of the second */
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++)
                xp[p] = load_pair((const uint8_t *)xq + 32 * p, (const uint8_t *)xq + 128 + 32 * p);
#pragma GCC unroll 4
            for (int c = 4 * half; c < 4 * half + 4; c++) {
                __m512i u[4];
                k16_codes(wb, 0, wb, 1, c, u, wt);
                const __m512i idx = _mm512_setr_epi32(c, c, c, c, c, c, c, c, 8 + c, 8 + c, 8 + c, 8 + c, 8 + c,
                                                      8 + c, 8 + c, 8 + c);
#pragma GCC unroll 4
                for (int p = 0; p < 4; p++)
                    s[p] = _mm512_dpbusd_epi32(s[p], u[p], _mm512_permutexvar_epi32(idx, xp[p]));
            }
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++)
                is = _mm512_add_epi32(is, _mm512_mullo_epi32(s[p], sc[2 * p + half]));
        }
        int32_t sj[K6_ST]; /* the token's d, sums of 16 */
        memcpy(sj, st + b * K6_ST, sizeof sj);
        __m512i off = _mm512_setzero_si512(); /* lanes 0..7: the first half's sum_j sc_j * bsum_j */
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m512i bs = _mm512_inserti64x4(_mm512_set1_epi32(sj[1 + k]), _mm256_set1_epi32(sj[5 + k]), 1);
            off = _mm512_dpwssd_epi32(off, sp[k], bs);
        }
        float dx;
        memcpy(&dx, sj, sizeof dx);
        const __m256 dxv = _mm256_set1_ps(dx);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb)); /* d[8] leads the block */
        __m256 acc = first && b == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(y);
        if (wt == W_Q2_K) {
            const __m256i is8 = _mm256_add_epi32(_mm512_castsi512_si256(is), _mm512_extracti64x4_epi64(is, 1));
            const __m256i ms8 = _mm256_add_epi32(_mm512_castsi512_si256(off), _mm512_extracti64x4_epi64(off, 1));
            const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const block_q2_Kx8 *)wb)->dmin));
            acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, dxv), _mm256_cvtepi32_ps(is8), acc);
            acc = _mm256_fnmadd_ps(_mm256_mul_ps(mw, dxv), _mm256_cvtepi32_ps(ms8), acc);
        } else {
            const __m512i both = _mm512_sub_epi32(is, _mm512_slli_epi32(off, off_shift));
            const __m256i isum = _mm256_add_epi32(_mm512_castsi512_si256(both), _mm512_extracti64x4_epi64(both, 1));
            acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, dxv), _mm256_cvtepi32_ps(isum), acc);
        }
        _mm256_storeu_ps(y, acc);
    }
}

/* k16x8_tile4 for up to 8 tokens: the first 4, then the rest (the window's weights again,
 * from cache) */
VNNI static INLINE void k16x8_tile(const uint8_t *w0, const uint8_t *w1, __mmask16 lanes, const uint8_t *x,
                                   size_t x_stride, const int32_t *st, float *y, int64_t y_stride, int64_t nbw,
                                   int first, const int wt, const int RN) {
    if (RN == 1 && lanes == 0x00FF) {
        k16x8_tile_1(w0, x, st, y, nbw, first, wt);
        return;
    }
    k16x8_tile4(w0, w1, lanes, x, x_stride, st, y, y_stride, nbw, first, wt, RN < 4 ? RN : 4);
    if (RN > 4)
        k16x8_tile4(w0, w1, lanes, x + 4 * x_stride, x_stride, st + 4 * K_WIN * K6_ST, y + 4 * y_stride, y_stride,
                    nbw, first, wt, RN - 4);
}

/* The scales packed_gemm hands a tile for token t (x_t its row) and block b of a window
 * (st: the token's slots of the window, `words` each): Q8_0, Q4_1, Q4_0: d and s (Q4_1),
 * or Q4_0's -8 * sum(x), exact, as int32 bits (its weights are q - 8), as floats; Q4_K,
 * Q6_K: K4_ST resp. K6_ST words */
VNNI static INLINE void packed_scales(const uint8_t *x_t, int64_t b, float *st, const int wt) {
    if (wt == W_Q2_K || wt == W_Q3_K || wt == W_Q4_K || wt == W_Q5_K || wt == W_Q6_K) {
        const block_q8_K *xb = (const block_q8_K *)x_t + b;
        int32_t words[K6_ST];
        const int by16 = wt == W_Q2_K || wt == W_Q3_K || wt == W_Q6_K, n_words = by16 ? K6_ST : K4_ST;
        memcpy(&words[0], &xb->d, sizeof xb->d);
        for (int p = 0; p + 1 < n_words; p++) {
            const int lo = by16 ? xb->bsums[2 * p] : xb->bsums[4 * p] + xb->bsums[4 * p + 1];
            const int hi = by16 ? xb->bsums[2 * p + 1] : xb->bsums[4 * p + 2] + xb->bsums[4 * p + 3];
            words[1 + p] = (int32_t)((uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16);
        }
        memcpy(st + b * n_words, words, (size_t)n_words * sizeof words[0]);
        return;
    }
    const uint16_t *h = (const uint16_t *)(x_t + (size_t)b * (wt == W_Q4_1 ? sizeof(block_q8_1) : sizeof(block_q8_0)));
    st[2 * b] = _cvtsh_ss(h[0]);
    if (wt == W_Q4_0) {
        const int32_t start = -8 * sum_i8_32(((const block_q8_0 *)h)->qs);
        memcpy(st + 2 * b + 1, &start, sizeof start);
    } else {
        st[2 * b + 1] = wt == W_Q4_1 ? _cvtsh_ss(h[1]) : 0.0f; /* Q8_0: unused */
    }
}

/* A cpu_gemm_fn over packed rows of type wt (W_Q8_0, W_Q4_1, W_Q4_0, W_Q2_K .. W_Q6_K):
 * token blocks of 32 (as int8_gemm), windows of PACKED_WIN blocks (K_WIN super-blocks),
 * the groups of 8 rows in pairs, tiles of 8 tokens, then one of the rest. */
VNNI static INLINE void packed_gemm(const uint8_t *w, int64_t n_rows, const uint8_t *x, size_t x_stride, int64_t n_tok,
                                    float *y, int64_t y_stride, int64_t n, const int wt) {
    enum { TOK_BLOCK = 32, RN = 8 };
    const int k_quant = wt == W_Q2_K || wt == W_Q3_K || wt == W_Q4_K || wt == W_Q5_K || wt == W_Q6_K;
    const int64_t nb = n / (k_quant ? QK_K : QK8_0), n_groups = n_rows / 8;
    const int by16 = wt == W_Q2_K || wt == W_Q3_K || wt == W_Q6_K; /* sub-blocks of 16 */
    const int64_t win = k_quant ? K_WIN : PACKED_WIN, words = by16 ? K6_ST : k_quant ? K4_ST : 2;
    const size_t wbs = wt == W_Q8_0   ? sizeof(block_q8_0x8)
                       : wt == W_Q4_0 ? sizeof(block_q4_0x8)
                       : wt == W_Q4_K ? sizeof(block_q4_Kx8)
                       : wt == W_Q5_K ? sizeof(block_q5_Kx8)
                       : wt == W_Q6_K ? sizeof(block_q6_Kx8)
                       : wt == W_Q3_K ? sizeof(block_q3_Kx8)
                       : wt == W_Q2_K ? sizeof(block_q2_Kx8)
                                      : sizeof(block_q4_1x8);
    const size_t xbs = k_quant ? sizeof(block_q8_K) : wt == W_Q4_1 ? sizeof(block_q8_1) : sizeof(block_q8_0);
    _Alignas(32) float sc[TOK_BLOCK * PACKED_WIN * 2]; /* (TOK_BLOCK, win, words) the window's token scales */
    _Static_assert(K_WIN * K6_ST <= PACKED_WIN * 2, "a K-quant window's scales fit sc");
    for (int64_t t0 = 0; t0 < n_tok; t0 += TOK_BLOCK) {
        const int64_t t1 = t0 + TOK_BLOCK < n_tok ? t0 + TOK_BLOCK : n_tok;
        for (int64_t b0 = 0; b0 < nb; b0 += win) {
            const int64_t nbw = nb - b0 < win ? nb - b0 : win;
            for (int64_t t = t0; t < t1; t++)
                for (int64_t b = 0; b < nbw; b++)
                    packed_scales(x + (size_t)t * x_stride + (size_t)b0 * xbs, b, sc + (t - t0) * win * words, wt);
            /* one token's groups go alone (lanes 8..15 idle): it is bound by memory, and a pair
             * is two weight streams for the prefetchers (SmolLM2 Q4_1, one sequence, 8 pairs:
             * median 0.875 paired, 0.99 alone, against the ymm tile) */
            for (int64_t g = 0; g < n_groups; g += 1 + (n_tok > 1)) {
                const uint8_t *wg0 = w + ((size_t)g * (size_t)nb + (size_t)b0) * wbs;
                const int pair = n_tok > 1 && g + 1 < n_groups;
                const uint8_t *wg1 = pair ? wg0 + (size_t)nb * wbs : wg0;
                const __mmask16 lanes = pair ? 0xFFFF : 0x00FF;
#define TILE(rn)                                                                                             \
    do {                                                                                                     \
        const uint8_t *xt = x + (size_t)t * x_stride + (size_t)b0 * xbs;                                     \
        const float *st = sc + (t - t0) * win * words;                                                       \
        float *yt = y + t * y_stride + 8 * g;                                                                \
        if (wt == W_Q8_0)                                                                                    \
            q8_0x8_tile((const block_q8_0x8 *)wg0, (const block_q8_0x8 *)wg1, lanes, xt, x_stride, st, yt,   \
                        y_stride, nbw, b0 == 0, rn);                                                         \
        else if (wt == W_Q4_K || wt == W_Q5_K)                                                               \
            k4x8_tile(wg0, wg1, lanes, xt, x_stride, (const int32_t *)st, yt, y_stride, nbw, b0 == 0, wt, rn); \
        else if (wt == W_Q2_K || wt == W_Q3_K || wt == W_Q6_K)                                               \
            k16x8_tile(wg0, wg1, lanes, xt, x_stride, (const int32_t *)st, yt, y_stride, nbw, b0 == 0, wt, rn); \
        else                                                                                                 \
            q4x8_tile(wg0, wg1, lanes, xt, x_stride, st, yt, y_stride, nbw, b0 == 0, wt, rn);                \
    } while (0)
                int64_t t = t0;
                for (; t + RN <= t1; t += RN)
                    TILE(RN);
                switch (t1 - t) {
                case 1: TILE(1); break;
                case 2: TILE(2); break;
                case 3: TILE(3); break;
                case 4: TILE(4); break;
                case 5: TILE(5); break;
                case 6: TILE(6); break;
                case 7: TILE(7); break;
                default: break;
                }
#undef TILE
            }
        }
    }
}

/* packed_gemm for one weight type, as a cpu_gemm_fn (w_stride unused: packed rows) */
#define PACKED_GEMM_FN(name, wt)                                                                                   \
    VNNI static void name(const uint8_t *w, size_t w_stride, int64_t n_rows, const uint8_t *x, size_t x_stride,    \
                          int64_t n_tok, float *y, int64_t y_stride, int64_t n) {                                  \
        (void)w_stride;                                                                                            \
        packed_gemm(w, n_rows, x, x_stride, n_tok, y, y_stride, n, wt);                                            \
    }
PACKED_GEMM_FN(gemm_q4_1x8_q8_1_vnni, W_Q4_1)
PACKED_GEMM_FN(gemm_q4_0x8_q8_0_vnni, W_Q4_0)
PACKED_GEMM_FN(gemm_q2_Kx8_q8_K_vnni, W_Q2_K)
PACKED_GEMM_FN(gemm_q3_Kx8_q8_K_vnni, W_Q3_K)
PACKED_GEMM_FN(gemm_q4_Kx8_q8_K_vnni, W_Q4_K)
PACKED_GEMM_FN(gemm_q5_Kx8_q8_K_vnni, W_Q5_K)
PACKED_GEMM_FN(gemm_q6_Kx8_q8_K_vnni, W_Q6_K)
PACKED_GEMM_FN(gemm_q8_0x8_q8_0u_vnni, W_Q8_0)
#undef PACKED_GEMM_FN

/* Q4_K x Q8_K for a batch, in the shape of llama.cpp's tiled AVX2 kernel: per 256-block,
 * 16 weight rows are unpacked once to bytes (with their 6-bit scales), then each 32-byte
 * weight load serves 8 tokens (vpmaddubsw, then vpmaddwd by the sub-block's scale into
 * 8 independent int32 sums). Each (row, token) keeps the dot's own state (8 float lanes
 * and the minimums' correction), updated in the dot's order, so the result is
 * dot_q4_K_q8_K_avx2's to the bit. */
enum { K4_ROWS = 16, K4_TOK = 8, K4_TOK_BLOCK = 32 };

typedef struct k4_tile {
    _Alignas(32) uint8_t q[K4_ROWS][QK_K];   /* (16, 256) one block of each row, a byte per weight */
    _Alignas(32) float acc[K4_ROWS][K4_TOK_BLOCK][8]; /* (16, 32, 8) the dots' float lanes */
    _Alignas(32) float corr[K4_ROWS][K4_TOK_BLOCK];  /* (16, 32) the minimums' corrections */
    int16_t sc[K4_ROWS][8];                    /* (16, 8) sub-block scales */
    float m[K4_ROWS][8];                       /* (16, 8) sub-block minimums */
    float d[K4_ROWS], dmin[K4_ROWS];
} k4_tile;

/* Row r of the tile from block b of a Q4_K row */
AVX2 static INLINE void k4_unpack(k4_tile *tl, int r, const block_q4_K *b) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int c = 0; c < 4; c++) { /* 32 bytes: sub-block 2c in the low nibbles, 2c + 1 in the high */
        const __m256i qv = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
        _mm256_store_si256((__m256i *)(tl->q[r] + 64 * c), _mm256_and_si256(qv, m4));
        _mm256_store_si256((__m256i *)(tl->q[r] + 64 * c + 32), _mm256_and_si256(_mm256_srli_epi16(qv, 4), m4));
    }
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        get_scale_min_k4(j, b->scales, &sc, &m);
        tl->sc[r][j] = sc;
        tl->m[r][j] = m;
    }
    tl->d[r] = _cvtsh_ss(b->d);
    tl->dmin[r] = _cvtsh_ss(b->dmin);
}

/* Block b of rows [0, nr) of the tile times 8 tokens (xb: their blocks b), into the
 * tokens' state slots [slot, slot + 8) */
AVX2 static INLINE void k4_tokens8(k4_tile *tl, int nr, const block_q8_K *const xb[K4_TOK], int slot) {
    /* the minimums' sums multiply bsums per sub-block of 32: exact integers in floats
     * (in memory: kept in registers across the row loop they would crowd out the sums) */
    _Alignas(32) float bs[8][K4_TOK];
    float dq[K4_TOK];
    for (int s = 0; s < 8; s++)
        for (int i = 0; i < K4_TOK; i++)
            bs[s][i] = (float)(xb[i]->bsums[2 * s] + xb[i]->bsums[2 * s + 1]);
    for (int i = 0; i < K4_TOK; i++)
        dq[i] = xb[i]->d;
    const __m256 dqv = _mm256_loadu_ps(dq);
    for (int r = 0; r < nr; r++) {
        __m256i isum[K4_TOK]; /* in registers only if the token loops are unrolled */
#pragma GCC unroll 8
        for (int i = 0; i < K4_TOK; i++)
            isum[i] = _mm256_setzero_si256();
        for (int s = 0; s < 8; s++) {
            const __m256i wv = _mm256_load_si256((const __m256i *)(tl->q[r] + 32 * s));
            const __m256i scale = _mm256_set1_epi16(tl->sc[r][s]);
#pragma GCC unroll 8
            for (int i = 0; i < K4_TOK; i++) {
                const __m256i xv = _mm256_loadu_si256((const __m256i *)(xb[i]->qs + 32 * s));
                isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(_mm256_maddubs_epi16(wv, xv), scale));
            }
        }
        __m256 summ = _mm256_mul_ps(_mm256_set1_ps(tl->m[r][0]), _mm256_load_ps(bs[0]));
        for (int s = 1; s < 8; s++)
            summ = _mm256_fmadd_ps(_mm256_set1_ps(tl->m[r][s]), _mm256_load_ps(bs[s]), summ);
        /* the dot: corr += (q.d * dmin) * summ, then acc = fma(q.d * d, isum, acc) */
        float *corr = tl->corr[r] + slot;
        _mm256_storeu_ps(corr, _mm256_add_ps(_mm256_loadu_ps(corr),
                                             _mm256_mul_ps(_mm256_mul_ps(dqv, _mm256_set1_ps(tl->dmin[r])), summ)));
#pragma GCC unroll 8
        for (int i = 0; i < K4_TOK; i++) {
            float *a = tl->acc[r][slot + i];
            _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_set1_ps(dq[i] * tl->d[r]), _mm256_cvtepi32_ps(isum[i]),
                                               _mm256_load_ps(a)));
        }
    }
}

AVX2 static void gemm_q4_K_q8_K_avx2(const uint8_t *w, size_t w_stride, int64_t n_rows, const uint8_t *x,
                                     size_t x_stride, int64_t n_tok, float *y, int64_t y_stride, int64_t n) {
    k4_tile tl; /* 23 KB of stack */
    const int64_t nb = n / QK_K;
    for (int64_t r0 = 0; r0 < n_rows; r0 += K4_ROWS) {
        const int nr = (int)(n_rows - r0 < K4_ROWS ? n_rows - r0 : K4_ROWS);
        for (int64_t t0 = 0; t0 < n_tok; t0 += K4_TOK_BLOCK) {
            const int mt = (int)(n_tok - t0 < K4_TOK_BLOCK ? n_tok - t0 : K4_TOK_BLOCK);
            memset(tl.acc, 0, sizeof tl.acc);
            memset(tl.corr, 0, sizeof tl.corr);
            for (int64_t b = 0; b < nb; b++) {
                for (int r = 0; r < nr; r++)
                    k4_unpack(&tl, r, (const block_q4_K *)(w + (size_t)(r0 + r) * w_stride) + b);
                for (int tg = 0; tg < mt; tg += K4_TOK) {
                    const block_q8_K *xb[K4_TOK]; /* tokens past mt repeat the last; their slots are dropped */
                    for (int i = 0; i < K4_TOK; i++) {
                        const int64_t t = t0 + (tg + i < mt ? tg + i : mt - 1);
                        xb[i] = (const block_q8_K *)(x + (size_t)t * x_stride) + b;
                    }
                    k4_tokens8(&tl, nr, xb, tg);
                }
            }
            for (int r = 0; r < nr; r++)
                for (int t = 0; t < mt; t++)
                    y[(t0 + t) * y_stride + r0 + r] = hsum8(_mm256_load_ps(tl.acc[r][t])) - tl.corr[r][t];
        }
    }
}

/* exp(x) of 8 floats, Cephes' expf in vectors: x clamped to [-87.34, 88.38] (so 2^n is a
 * normal float), n = round(x / ln 2), r = x - n ln 2 in two parts, a degree-7 polynomial,
 * times 2^n through the exponent bits. The SwiGLU below is within 4 ulp (3.5e-7 relative)
 * of cpu_swiglu's for gates in [-90, 90] (test_cpu). */
AVX2 static INLINE __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3365447504f)), _mm256_set1_ps(88.3762626647949f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* gate = gate / (1 + exp(-gate)) * up for 8 elements */
AVX2 static INLINE __m256 swiglu8(__m256 g, __m256 u) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

/* Every element through swiglu8, the tail too (through an 8-float buffer): an element's
 * value never depends on where a range of it starts or ends, so the row chunks of any
 * batch or thread count give the same bits. */
AVX2 static void swiglu_avx2(float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(gate + i, swiglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        float g[8] = {0}, u[8] = {0};
        memcpy(g, gate + i, (size_t)(n - i) * sizeof(float));
        memcpy(u, up + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(g, swiglu8(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
        memcpy(gate + i, g, (size_t)(n - i) * sizeof(float));
    }
}

/* The residual adds after wo and down, per chunk of rows (cpu_mm_fuse): GCC -O2 left the
 * plain loop scalar, and each 4-byte load of a row the packed tile had just written as
 * a 64-byte vector waited on the store (perf of an 8-way server: 5% of its samples). */
AVX2 static void add_avx2(float *dst, const float *src, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(dst + i), _mm256_loadu_ps(src + i)));
    add_c(dst + i, src + i, n - i);
}

/* row[0..n) = softmax(scale * row) in place, exp through exp8: the max, then exp(x - max)
 * summed in 8 lanes (a tail's unused lanes zeroed) and added in hsum8's order, then one
 * multiply by 1 / sum. The result depends on n and the row only. The element-by-element
 * libm expf was ~5% of an 8-way batch's samples (perf log). */
AVX2 static void softmax_avx2(float *row, int64_t n, float scale) {
    const __m256 sc = _mm256_set1_ps(scale);
    __m256 mx = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(row + i), sc);
        _mm256_storeu_ps(row + i, v);
        mx = _mm256_max_ps(mx, v);
    }
    float tail[8];
    const int nt = (int)(n - i);
    for (int k = 0; k < 8; k++)
        tail[k] = k < nt ? row[i + k] * scale : -INFINITY;
    const __m256 max = hmax8(_mm256_max_ps(mx, _mm256_loadu_ps(tail)));
    __m256 sum = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(row + i), max));
        _mm256_storeu_ps(row + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (nt > 0) {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256 used = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(nt), lane));
        const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_loadu_ps(tail), max)), used);
        _mm256_storeu_ps(tail, e);
        sum = _mm256_add_ps(sum, e);
        memcpy(row + i, tail, (size_t)nt * sizeof(float));
    }
    const __m256 inv = _mm256_set1_ps(1.0f / hsum8(sum));
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(row + i, _mm256_mul_ps(_mm256_loadu_ps(row + i), inv));
    for (; i < n; i++)
        row[i] *= _mm256_cvtss_f32(inv);
}

/* 8 elements of cache rows from element i, as f32 */
AVX2 static INLINE __m256 load8(const void *row, int64_t i, const int f16) {
    return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)))
               : _mm256_loadu_ps((const float *)row + i);
}

/* four keys per pass: the query's 8 floats are loaded once per 4 FMAs */
AVX2 static INLINE void dots_avx2_body(float *s, const float *q, const void *k, int64_t k_stride, int64_t n_rows,
                                       int64_t d, const int f16) {
    if (d % 8) {
        dots_c_body(s, q, k, k_stride, n_rows, d, f16);
        return;
    }
    int64_t j = 0;
    for (; j + 4 <= n_rows; j += 4) {
        const int64_t k0 = j * k_stride, k1 = k0 + k_stride, k2 = k1 + k_stride, k3 = k2 + k_stride;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        for (int64_t i = 0; i < d; i += 8) {
            const __m256 qv = _mm256_loadu_ps(q + i);
            a0 = _mm256_fmadd_ps(qv, load8(k, k0 + i, f16), a0);
            a1 = _mm256_fmadd_ps(qv, load8(k, k1 + i, f16), a1);
            a2 = _mm256_fmadd_ps(qv, load8(k, k2 + i, f16), a2);
            a3 = _mm256_fmadd_ps(qv, load8(k, k3 + i, f16), a3);
        }
        s[j] = hsum8(a0);
        s[j + 1] = hsum8(a1);
        s[j + 2] = hsum8(a2);
        s[j + 3] = hsum8(a3);
    }
    for (; j < n_rows; j++) {
        __m256 a0 = _mm256_setzero_ps();
        for (int64_t i = 0; i < d; i += 8)
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k, j * k_stride + i, f16), a0);
        s[j] = hsum8(a0);
    }
}

/* the output held in registers, 64 floats (8 accumulators) at a time: one load per FMA */
AVX2 static INLINE void wsum_avx2_body(float *out, const float *p, const void *v, int64_t v_stride, int64_t n_rows,
                                       int64_t d, const int f16) {
    if (d % 8) {
        wsum_c_body(out, p, v, v_stride, n_rows, d, f16);
        return;
    }
    int64_t i0 = 0;
    for (; i0 + 64 <= d; i0 += 64) {
        /* unrolled, so that acc lives in registers: GCC -O2 left the loops rolled and acc
         * on the stack, each FMA a load and a store (perf, bench --parallel 8 on SmolLM2:
         * this function's share of the samples 7.2-7.7% before, 4.5-4.6% after) */
        __m256 acc[8];
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++)
            acc[c] = _mm256_setzero_ps();
        for (int64_t j = 0; j < n_rows; j++) {
            const __m256 pj = _mm256_set1_ps(p[j]);
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++)
                acc[c] = _mm256_fmadd_ps(pj, load8(v, j * v_stride + i0 + 8 * c, f16), acc[c]);
        }
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++)
            _mm256_storeu_ps(out + i0 + 8 * c, acc[c]);
    }
    for (; i0 < d; i0 += 8) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t j = 0; j < n_rows; j++)
            acc = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), load8(v, j * v_stride + i0, f16), acc);
        _mm256_storeu_ps(out + i0, acc);
    }
}

AVX2 static INLINE void panel_avx2_body(float *panel, const void *v, int64_t v_stride, int64_t n_rows, int nc,
                                        const int f16) {
    if (nc != 16) {
        panel_c_body(panel, v, v_stride, n_rows, nc, f16);
        return;
    }
    for (int64_t j = 0; j < n_rows; j++) {
        _mm256_storeu_ps(panel + 16 * j, load8(v, j * v_stride, f16));
        _mm256_storeu_ps(panel + 16 * j + 8, load8(v, j * v_stride + 8, f16));
    }
}

KV_ENTRIES(avx2, AVX2)

AVX2 static void to_f32_f16_avx2(const void *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, load8(src, i, 1));
    /* the tail, also of F16 weight rows, which need not be 2-byte aligned */
    er_f16_row_to_f32((const uint8_t *)src + 2 * i, dst + i, n - i);
}

/* vcvtps2ph with immediate 0: round to nearest even whatever MXCSR says, overflow to
 * infinity, subnormal halves kept: bit for bit er_f32_to_f16 (test_cpu checks edge cases) */
AVX2 static void store_f16_avx2(const float *src, void *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)((uint16_t *)dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    er_f32_row_to_f16(src + i, (uint16_t *)dst + i, n - i);
}

static const cpu_kv_ops kv_f32_avx2 = {ER_TYPE_F32, 4, store_f32_c, to_f32_f32_c, dots_f32_avx2, wsum_f32_avx2,
                                       panel_f32_avx2};
static const cpu_kv_ops kv_f16_avx2 = {ER_TYPE_F16, 2, store_f16_avx2, to_f32_f16_avx2, dots_f16_avx2,
                                       wsum_f16_avx2, panel_f16_avx2};

static int have_avx2(void) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

static int have_vnni(void) {
    return have_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

cpu_gemm_fn cpu_gemm_avx2(uint32_t type) {
    if (!have_avx2())
        return NULL;
    return type == ER_TYPE_Q8_0   ? gemm_q8_0_q8_0_avx2
           : type == ER_TYPE_Q4_1 ? gemm_q4_1_q8_1_avx2
           : type == ER_TYPE_Q4_K ? gemm_q4_K_q8_K_avx2
                                  : NULL;
}

cpu_gemm_fn cpu_gemm_vnni(uint32_t type) {
    if (!have_vnni())
        return NULL;
    return type == ER_TYPE_Q8_0 ? gemm_q8_0_q8_0_vnni : type == ER_TYPE_Q4_1 ? gemm_q4_1_q8_1_vnni : NULL;
}

cpu_gemm_fn cpu_gemm_packed(uint32_t type) {
    if (!have_vnni())
        return NULL;
    return type == ER_TYPE_Q4_1   ? gemm_q4_1x8_q8_1_vnni
           : type == ER_TYPE_Q8_0 ? gemm_q8_0x8_q8_0u_vnni
           : type == ER_TYPE_Q4_0 ? gemm_q4_0x8_q8_0_vnni
           : type == ER_TYPE_Q2_K ? gemm_q2_Kx8_q8_K_vnni
           : type == ER_TYPE_Q3_K ? gemm_q3_Kx8_q8_K_vnni
           : type == ER_TYPE_Q4_K ? gemm_q4_Kx8_q8_K_vnni
           : type == ER_TYPE_Q5_K ? gemm_q5_Kx8_q8_K_vnni
           : type == ER_TYPE_Q6_K ? gemm_q6_Kx8_q8_K_vnni
                                  : NULL;
}

cpu_gemm_fn cpu_gemm_get(uint32_t type) {
    const cpu_gemm_fn f = cpu_gemm_vnni(type);
    return f ? f : cpu_gemm_avx2(type);
}

cpu_swiglu_fn cpu_fast_swiglu_get(void) { return have_avx2() ? swiglu_avx2 : cpu_swiglu; }

cpu_add_fn cpu_fast_add_get(void) { return have_avx2() ? add_avx2 : add_c; }

cpu_softmax_fn cpu_fast_softmax_get(void) { return have_avx2() ? softmax_avx2 : cpu_softmax_scaled; }

const cpu_kv_ops *cpu_kv_ops_get(uint32_t type) {
    if (type == ER_TYPE_F32)
        return have_avx2() ? &kv_f32_avx2 : &kv_f32_c;
    return type == ER_TYPE_F16 ? (have_avx2() ? &kv_f16_avx2 : &kv_f16_c) : NULL;
}

static const cpu_sgemm_ops sgemm_avx2 = {pack_panel_avx2, sgemm_6x16_avx2};
static const cpu_sgemm_ops sgemm_c = {pack_panel_c, sgemm_6x16_c};

const cpu_sgemm_ops *cpu_sgemm_get(void) { return have_avx2() ? &sgemm_avx2 : &sgemm_c; }

er_to_f32_fn cpu_fast_to_f32(uint32_t type, const er_type_traits *traits) {
    if (have_avx2() && type == ER_TYPE_Q8_0)
        return to_f32_q8_0_avx2;
    if (have_avx2() && type == ER_TYPE_Q4_K)
        return to_f32_q4_K_avx2;
    if (have_avx2() && type == ER_TYPE_Q6_K)
        return to_f32_q6_K_avx2;
    if (have_avx2() && type == ER_TYPE_F16)
        return to_f32_f16_avx2;
    return traits->to_f32;
}

#else

cpu_gemm_fn cpu_gemm_get(uint32_t type) {
    (void)type;
    return NULL;
}

cpu_gemm_fn cpu_gemm_avx2(uint32_t type) {
    (void)type;
    return NULL;
}

cpu_gemm_fn cpu_gemm_vnni(uint32_t type) {
    (void)type;
    return NULL;
}

cpu_gemm_fn cpu_gemm_packed(uint32_t type) {
    (void)type;
    return NULL;
}

cpu_swiglu_fn cpu_fast_swiglu_get(void) { return cpu_swiglu; }

cpu_add_fn cpu_fast_add_get(void) { return add_c; }

cpu_softmax_fn cpu_fast_softmax_get(void) { return cpu_softmax_scaled; }

const cpu_kv_ops *cpu_kv_ops_get(uint32_t type) {
    return type == ER_TYPE_F32 ? &kv_f32_c : type == ER_TYPE_F16 ? &kv_f16_c : NULL;
}

static const cpu_sgemm_ops sgemm_c = {pack_panel_c, sgemm_6x16_c};

const cpu_sgemm_ops *cpu_sgemm_get(void) { return &sgemm_c; }

er_to_f32_fn cpu_fast_to_f32(uint32_t type, const er_type_traits *traits) {
    (void)type;
    return traits->to_f32;
}

#endif
