/*
 * fast_avx2.c - the tiled matrix-matrix kernel of the prefill (and decode) path, and the
 * f32 vector helpers of attention; AVX2 + FMA + F16C through target attributes.
 *
 * Q8_0 weights x Q8_0 activations, a tile of RM rows x RN tokens: per 32-element block
 * each weight block and each activation block is loaded once and used RN resp. RM times
 * (the matvec loads both for every product). Per pair and block: vpsignb, vpmaddubsw,
 * vpmaddwd, vcvtdq2ps, one FMA with the product of the two f16 scales, accumulated in
 * 8 lanes per pair in block order and summed at the end: exactly the arithmetic of
 * dot_q8_0_q8_0_avx2 (kernels_avx2.c), so tile shape, batch size and thread count never
 * change a result. 4 x 2 keeps 8 accumulators + operands in the 16 ymm registers (2 x 4
 * measured 0.8x its speed on pp64; 4 x 3 would spill).
 */
#include "backend/cpu/fast.h"

#include <math.h>

#include "quant/blocks.h"
#include "quant/types.h"

static void dots_c(float *s, const float *q, const float *k, int64_t k_stride, int64_t n_rows, int64_t d) {
    for (int64_t j = 0; j < n_rows; j++) {
        float acc = 0.0f;
        for (int64_t i = 0; i < d; i++)
            acc += q[i] * k[j * k_stride + i];
        s[j] = acc;
    }
}

static void wsum_c(float *out, const float *p, const float *v, int64_t v_stride, int64_t n_rows, int64_t d) {
    for (int64_t i = 0; i < d; i++)
        out[i] = 0.0f;
    for (int64_t j = 0; j < n_rows; j++)
        for (int64_t i = 0; i < d; i++)
            out[i] += p[j] * v[j * v_stride + i];
}

static const cpu_vec_ops vec_c = {dots_c, wsum_c};

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

AVX2 static INLINE void tile_q8_0(const uint8_t *w, size_t w_stride, const uint8_t *x, size_t x_stride, float *y,
                                  int64_t y_stride, int64_t nb, const int RM, const int RN) {
    __m256 acc[4][4];
    const __m256i ones = _mm256_set1_epi16(1);
    for (int i = 0; i < RM; i++)
        for (int j = 0; j < RN; j++)
            acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i xv[4];
        float dx[4];
        for (int j = 0; j < RN; j++) {
            const block_q8_0 *xb = (const block_q8_0 *)(x + (size_t)j * x_stride) + b;
            xv[j] = _mm256_loadu_si256((const __m256i *)xb->qs);
            dx[j] = _cvtsh_ss(xb->d);
        }
        for (int i = 0; i < RM; i++) {
            const block_q8_0 *wb = (const block_q8_0 *)(w + (size_t)i * w_stride) + b;
            _mm_prefetch((const char *)wb + PREFETCH_AHEAD, _MM_HINT_T0);
            const __m256i wv = _mm256_loadu_si256((const __m256i *)wb->qs);
            const __m256i aw = _mm256_sign_epi8(wv, wv);
            const float dw = _cvtsh_ss(wb->d);
            for (int j = 0; j < RN; j++) {
                const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv[j], wv)), ones);
                acc[i][j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[j]), _mm256_cvtepi32_ps(p), acc[i][j]);
            }
        }
    }
    for (int i = 0; i < RM; i++)
        for (int j = 0; j < RN; j++)
            y[j * y_stride + i] = hsum8(acc[i][j]);
}

#define TILE(rm, rn) tile_q8_0(w + (size_t)r * w_stride, w_stride, x + (size_t)t * x_stride, x_stride, \
                               y + t * y_stride + r, y_stride, nb, rm, rn)

/* Token blocks of TOK_BLOCK (their activations, 35-105 KB, stay in L1/L2) outside, tiles
 * of 4 rows inside (the rows of one call, a chunk of <= ~400 KB, stay in L2 across token
 * blocks): every operand comes from cache, weights from memory once per call. */
AVX2 static void gemm_q8_0_q8_0_avx2(const uint8_t *w, size_t w_stride, int64_t n_rows, const uint8_t *x,
                                     size_t x_stride, int64_t n_tok, float *y, int64_t y_stride, int64_t n) {
    enum { TOK_BLOCK = 32 };
    const int64_t nb = n / QK8_0;
    for (int64_t t0 = 0; t0 < n_tok; t0 += TOK_BLOCK) {
        const int64_t t1 = t0 + TOK_BLOCK < n_tok ? t0 + TOK_BLOCK : n_tok;
        int64_t r = 0;
        for (; r + 4 <= n_rows; r += 4) {
            int64_t t = t0;
            for (; t + 2 <= t1; t += 2)
                TILE(4, 2);
            if (t < t1)
                TILE(4, 1);
        }
        for (; r < n_rows; r++) {
            int64_t t = t0;
            for (; t + 2 <= t1; t += 2)
                TILE(1, 2);
            if (t < t1)
                TILE(1, 1);
        }
    }
}
#undef TILE

/* four keys per pass: the query's 8 floats are loaded once per 4 FMAs */
AVX2 static void dots_avx2(float *s, const float *q, const float *k, int64_t k_stride, int64_t n_rows, int64_t d) {
    if (d % 8) {
        dots_c(s, q, k, k_stride, n_rows, d);
        return;
    }
    int64_t j = 0;
    for (; j + 4 <= n_rows; j += 4) {
        const float *k0 = k + j * k_stride, *k1 = k0 + k_stride, *k2 = k1 + k_stride, *k3 = k2 + k_stride;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        for (int64_t i = 0; i < d; i += 8) {
            const __m256 qv = _mm256_loadu_ps(q + i);
            a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + i), a0);
            a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k1 + i), a1);
            a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k2 + i), a2);
            a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k3 + i), a3);
        }
        s[j] = hsum8(a0);
        s[j + 1] = hsum8(a1);
        s[j + 2] = hsum8(a2);
        s[j + 3] = hsum8(a3);
    }
    for (; j < n_rows; j++) {
        const float *kj = k + j * k_stride;
        __m256 a0 = _mm256_setzero_ps();
        for (int64_t i = 0; i < d; i += 8)
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(kj + i), a0);
        s[j] = hsum8(a0);
    }
}

/* the output held in registers, 64 floats (8 accumulators) at a time: one load per FMA */
AVX2 static void wsum_avx2(float *out, const float *p, const float *v, int64_t v_stride, int64_t n_rows, int64_t d) {
    if (d % 8) {
        wsum_c(out, p, v, v_stride, n_rows, d);
        return;
    }
    int64_t i0 = 0;
    for (; i0 + 64 <= d; i0 += 64) {
        __m256 acc[8];
        for (int c = 0; c < 8; c++)
            acc[c] = _mm256_setzero_ps();
        for (int64_t j = 0; j < n_rows; j++) {
            const __m256 pj = _mm256_set1_ps(p[j]);
            const float *vj = v + j * v_stride + i0;
            for (int c = 0; c < 8; c++)
                acc[c] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * c), acc[c]);
        }
        for (int c = 0; c < 8; c++)
            _mm256_storeu_ps(out + i0 + 8 * c, acc[c]);
    }
    for (; i0 < d; i0 += 8) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t j = 0; j < n_rows; j++)
            acc = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(v + j * v_stride + i0), acc);
        _mm256_storeu_ps(out + i0, acc);
    }
}

static const cpu_vec_ops vec_avx2 = {dots_avx2, wsum_avx2};

static int have_avx2(void) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

cpu_gemm_fn cpu_gemm_get(uint32_t type) {
    return type == ER_TYPE_Q8_0 && have_avx2() ? gemm_q8_0_q8_0_avx2 : NULL;
}

const cpu_vec_ops *cpu_vec_ops_get(void) { return have_avx2() ? &vec_avx2 : &vec_c; }

#else

cpu_gemm_fn cpu_gemm_get(uint32_t type) {
    (void)type;
    return NULL;
}

const cpu_vec_ops *cpu_vec_ops_get(void) { return &vec_c; }

#endif
