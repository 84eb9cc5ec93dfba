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
 * run the packed kernels of packed_vnni.c at every token count; on an AVX2 CPU without
 * VNNI, Q4_0, Q4_1 and Q2_K..Q6_K matrices are, and run packed_avx2.c's.
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
#include "backend/cpu/x86.h"
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

#if CPU_X86

#include <immintrin.h>

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
enum { W_Q8_0, W_Q4_1 };

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

cpu_gemm_fn cpu_gemm_avx2(uint32_t type) {
    if (!cpu_has_avx2())
        return NULL;
    return type == ER_TYPE_Q8_0   ? gemm_q8_0_q8_0_avx2
           : type == ER_TYPE_Q4_1 ? gemm_q4_1_q8_1_avx2
           : type == ER_TYPE_Q4_K ? gemm_q4_K_q8_K_avx2
                                  : NULL;
}

cpu_gemm_fn cpu_gemm_vnni(uint32_t type) {
    if (!cpu_has_vnni())
        return NULL;
    return type == ER_TYPE_Q8_0 ? gemm_q8_0_q8_0_vnni : type == ER_TYPE_Q4_1 ? gemm_q4_1_q8_1_vnni : NULL;
}

cpu_gemm_fn cpu_gemm_get(uint32_t type) {
    const cpu_gemm_fn f = cpu_gemm_vnni(type);
    return f ? f : cpu_gemm_avx2(type);
}

cpu_swiglu_fn cpu_fast_swiglu_get(void) { return cpu_has_avx2() ? swiglu_avx2 : cpu_swiglu; }

cpu_add_fn cpu_fast_add_get(void) { return cpu_has_avx2() ? add_avx2 : add_c; }

cpu_softmax_fn cpu_fast_softmax_get(void) { return cpu_has_avx2() ? softmax_avx2 : cpu_softmax_scaled; }

const cpu_kv_ops *cpu_kv_ops_get(uint32_t type) {
    if (type == ER_TYPE_F32)
        return cpu_has_avx2() ? &kv_f32_avx2 : &kv_f32_c;
    return type == ER_TYPE_F16 ? (cpu_has_avx2() ? &kv_f16_avx2 : &kv_f16_c) : NULL;
}

static const cpu_sgemm_ops sgemm_avx2 = {pack_panel_avx2, sgemm_6x16_avx2};
static const cpu_sgemm_ops sgemm_c = {pack_panel_c, sgemm_6x16_c};

const cpu_sgemm_ops *cpu_sgemm_get(void) { return cpu_has_avx2() ? &sgemm_avx2 : &sgemm_c; }

er_to_f32_fn cpu_fast_to_f32(uint32_t type, const er_type_traits *traits) {
    if (cpu_has_avx2() && type == ER_TYPE_Q8_0)
        return to_f32_q8_0_avx2;
    if (cpu_has_avx2() && type == ER_TYPE_Q4_K)
        return to_f32_q4_K_avx2;
    if (cpu_has_avx2() && type == ER_TYPE_Q6_K)
        return to_f32_q6_K_avx2;
    if (cpu_has_avx2() && type == ER_TYPE_F16)
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
