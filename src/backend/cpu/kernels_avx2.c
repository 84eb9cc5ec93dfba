/*
 * kernels_avx2.c - AVX2 + FMA + F16C versions of the CPU kernel table (see kernels.h),
 * compiled per function with target attributes so that the default build stays portable;
 * kernels.c hands them out only when the CPU reports all three features.
 *
 * Per 32 weights the integer work is: unpack the codes to one byte each (nibble masks,
 * high bits from qh/hmask shifted into place), then one vpmaddubsw (u8 x s8 -> 16 x i16,
 * never saturating: codes are at most 63, or |-128| for Q8_0 weights, and activations
 * within +-127, so a pair sums to at most 2 * 128 * 127 < 2^15) and one vpmaddwd (against ones, or against the sub-block scales for the K types) into
 * 8 x i32. Signed codes (Q4_0, Q5_0, Q8_0) use the sign trick: |x| * sign(y, x). The
 * K types multiply the unsigned code and fold the code offset (-4 for Q3_K, -32 for
 * Q6_K) and the minimums into one scalar correction per super-block via Q8_K's bsums.
 * Float work is one FMA per block (per super-block for the K types) into 8 lanes.
 *
 * The results equal the scalar versions' up to the order of the float accumulation
 * (same activation bytes, same exact integer sums): tests/unit/test_quant.c.
 *
 * Numbers (bench/matvec_bench.c, 4096 x 4096, one core, BENCHMARKS.md): every type reads
 * its weights from DRAM at 7-12 GB/s against ~12 GB/s for a plain read; from cache the K
 * types reach 10-20 GB/s, the 32-element types ~9-10 GB/s (two f16 scales per 18-24
 * bytes); the scalar versions run at 0.3-3 GB/s.
 */
#include "backend/cpu/kernels_impl.h"

#include <stddef.h>

#include "backend/cpu/x86.h"

#if CPU_X86

#include <float.h>
#include <immintrin.h>
#include <string.h>

#include "core/fp16.h"
#include "quant/types.h"

AVX2 static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AVX2 static inline int hsum8_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

AVX2 static inline float f16(uint16_t h) { return _cvtsh_ss(h); }

/* unsigned bytes x signed bytes -> 8 x i32 sums of 4 products */
AVX2 static inline __m256i mul_sum_u8_i8(__m256i x, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
}

/* signed x signed (y != -128, which our activations never are) */
AVX2 static inline __m256i mul_sum_i8(__m256i x, __m256i y) {
    return mul_sum_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* 16 bytes of nibbles -> 32 bytes in element order (low nibbles, then high nibbles) */
AVX2 static inline __m256i nibbles32(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

/* byte j = 0xFF where bit j of the little-endian u32 at qh is set, else 0 */
AVX2 static inline __m256i bits32(const uint8_t *qh) {
    uint32_t x;
    memcpy(&x, qh, 4);
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, /* lane 0: bytes 0, 1 */
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3); /* lane 1: bytes 2, 3 */
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), spread);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* (v >> count) & mask, per byte */
AVX2 static inline __m256i shr_mask(__m256i v, int count, __m256i mask) {
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(count)), mask);
}

/* Software prefetch of the weight stream ahead of the block being read. The hardware
 * prefetchers alone leave one core far below DRAM bandwidth once the loop does real work
 * per byte (measured on the 4096 x 4096 Q4_0 matvec from DRAM: 2.3 GB/s without, 7.7 GB/s
 * 2 KiB ahead into L1; a plain read gives ~13 GB/s). Prefetching past the end of a row is
 * harmless: it never faults, and the next row follows.
 * prefetch_w: 2 KiB ahead into L1, for the K-quants (more work per byte).
 * prefetch_w_l2: 8 KiB ahead into L2, for the simple block types: prefetches into L1
 * hold the core's few L1 fill buffers, the L2's deeper miss queue keeps more lines in
 * flight. Qwen3-0.6B decode, 2 threads, same run: Q8_0 23.5 -> 28.0 tok/s, Q4_0 33.6 ->
 * 37.3 (4 and 16 KiB ahead: slower); Q4_K_M 1 thread 25.5 -> 23.8 with it, hence two. */
enum { PREFETCH_AHEAD = 2048, PREFETCH_AHEAD_L2 = 8192 };
AVX2 static inline void prefetch_w(const void *p, size_t bytes) {
    const char *c = (const char *)p + PREFETCH_AHEAD;
    for (size_t o = 0; o < bytes; o += 64)
        _mm_prefetch(c + o, _MM_HINT_T0);
}
AVX2 static inline void prefetch_w_l2(const void *p, size_t bytes) {
    const char *c = (const char *)p + PREFETCH_AHEAD_L2;
    for (size_t o = 0; o < bytes; o += 64)
        _mm_prefetch(c + o, _MM_HINT_T1);
}

/* ---- activation quantization (bit-identical to the scalar versions and to ggml's) ------ */

/* Q8_0/Q8_1: the arithmetic of ggml-cpu/arch/x86/quants.c's quantize_row_q8_0 (AVX2):
 * d = max|x| / 127 of n = 8 * nv floats, and the codes as i32 vectors,
 * cvtps(round-to-nearest-even(x * (127 / max|x|))) */
AVX2 static inline float q8_block_avx2(const float *x, int nv, __m256i *q) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < nv; k++)
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float max = _mm_cvtss_f32(m);
    const __m256 id = _mm256_set1_ps(max != 0.0f ? 127.0f / max : 0.0f);
    for (int k = 0; k < nv; k++)
        q[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), id),
                                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return max / 127.0f;
}

/* 4 x (8 x i32) -> 32 x i8 in order */
AVX2 static inline void pack_i8(const __m256i *q, int8_t *out) {
    const __m256i a = _mm256_packs_epi32(q[0], q[1]), b = _mm256_packs_epi32(q[2], q[3]);
    const __m256i p = _mm256_packs_epi16(a, b); /* lane-interleaved groups of 4 */
    _mm256_storeu_si256((__m256i *)out, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

AVX2 static void quantize_row_q8_0_avx2(const float *x, void *y, int64_t n) {
    block_q8_0 *b = y;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256i q[4];
        const float d = q8_block_avx2(x + i * QK8_0, 4, q);
        b[i].d = er_f32_to_f16(d);
        pack_i8(q, b[i].qs);
    }
}

AVX2 static void quantize_row_q8_1_avx2(const float *x, void *y, int64_t n) {
    block_q8_1 *b = y;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        __m256i q[4];
        const float d = q8_block_avx2(x + i * QK8_1, 4, q);
        const int sum = hsum8_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
        b[i].d = er_f32_to_f16(d);
        b[i].s = er_f32_to_f16(d * (float)sum);
        pack_i8(q, b[i].qs);
    }
}

/* Q8_K: ggml's quantize_row_q8_K_ref (see kernels.c) in 8 lanes. max_ps(new, acc) keeps acc
 * where new is NaN, so NaN drops out of the maximum as it does from the scalar scan. */
AVX2 static void quantize_row_q8_K_avx2(const float *x, void *y, int64_t n) {
    block_q8_K *b = y;
    const __m256 sign = _mm256_set1_ps(-0.0f), flt_max = _mm256_set1_ps(FLT_MAX);
    const __m256i c127 = _mm256_set1_epi32(127);
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m256 a8 = _mm256_setzero_ps();
        for (int k = 0; k < QK_K / 8; k++)
            a8 = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)), a8);
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        const float amax = _mm_cvtss_f32(m);
        if (amax == 0.0f) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        /* the first element of largest |x|, with its sign */
        const __m256 am = _mm256_set1_ps(amax);
        int j = 0;
        for (int k = 0; k < QK_K / 8; k++) {
            const __m256 ax = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k));
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(ax, am, _CMP_EQ_OQ));
            if (hit) {
                j = 8 * k + __builtin_ctz((unsigned)hit);
                break;
            }
        }
        const float iscale = -127.0f / x[j];
        const __m256 is = _mm256_set1_ps(iscale);
        __m256i q[QK_K / 8];
        for (int k = 0; k < QK_K / 8; k++) { /* an inf or NaN product (nearest_int's) gives 0 */
            const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), is);
            const __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            const __m256 finite = _mm256_cmp_ps(_mm256_andnot_ps(sign, v), flt_max, _CMP_LE_OQ);
            q[k] = _mm256_and_si256(_mm256_min_epi32(_mm256_cvtps_epi32(r), c127), _mm256_castps_si256(finite));
        }
        for (int k = 0; k < QK_K / 32; k++)
            pack_i8(q + 4 * k, b[i].qs + 32 * k);
        b[i].d = 1.0f / iscale;
        q8_K_bsums(&b[i]);
    }
}

/* ---- f32 activations ------------------------------------------------------------------ */

AVX2 static float dot_f32_f32_avx2(const void *w, const void *y, int64_t n) {
    const float *a = w, *b = y;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        prefetch_w_l2(a + i, 128);
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float sum = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

AVX2 static inline __m256 load_f16x8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

AVX2 static inline __m256 load_bf16x8(const uint8_t *p) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

#define DOT_HALF_F32(name, load, convert)                                                \
    AVX2 static float name(const void *w, const void *y, int64_t n) {                   \
        const uint8_t *a = w;                                                           \
        const float *b = y;                                                             \
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;                     \
        int64_t i = 0;                                                                  \
        for (; i + 32 <= n; i += 32) {                                                  \
            prefetch_w_l2(a + 2 * i, 64);                                               \
            s0 = _mm256_fmadd_ps(load(a + 2 * i), _mm256_loadu_ps(b + i), s0);          \
            s1 = _mm256_fmadd_ps(load(a + 2 * i + 16), _mm256_loadu_ps(b + i + 8), s1); \
            s2 = _mm256_fmadd_ps(load(a + 2 * i + 32), _mm256_loadu_ps(b + i + 16), s2);\
            s3 = _mm256_fmadd_ps(load(a + 2 * i + 48), _mm256_loadu_ps(b + i + 24), s3);\
        }                                                                               \
        for (; i + 8 <= n; i += 8)                                                      \
            s0 = _mm256_fmadd_ps(load(a + 2 * i), _mm256_loadu_ps(b + i), s0);          \
        float sum = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3))); \
        for (; i < n; i++) {                                                            \
            uint16_t h;                                                                 \
            memcpy(&h, a + 2 * i, 2);                                                   \
            sum += convert(h) * b[i];                                                   \
        }                                                                               \
        return sum;                                                                     \
    }

DOT_HALF_F32(dot_f16_f32_avx2, load_f16x8, er_f16_to_f32)
DOT_HALF_F32(dot_bf16_f32_avx2, load_bf16x8, er_bf16_to_f32)

/* ---- 32-element types ------------------------------------------------------------------ */

AVX2 static float dot_q4_0_q8_0_avx2(const void *w, const void *y, int64_t n) {
    const block_q4_0 *x = w;
    const block_q8_0 *q = y;
    const __m256i off = _mm256_set1_epi8(8);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK4_0; b++) {
        prefetch_w_l2(x + b, sizeof x[b]);
        const __m256i xv = _mm256_sub_epi8(nibbles32(x[b].qs), off);
        const __m256i p = mul_sum_i8(xv, _mm256_loadu_si256((const __m256i *)q[b].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[b].d) * f16(q[b].d)), _mm256_cvtepi32_ps(p), acc);
    }
    return hsum8(acc);
}

AVX2 static float dot_q4_1_q8_1_avx2(const void *w, const void *y, int64_t n) {
    const block_q4_1 *x = w;
    const block_q8_1 *q = y;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    for (int64_t b = 0; b < n / QK4_1; b++) {
        prefetch_w_l2(x + b, sizeof x[b]);
        const __m256i p = mul_sum_u8_i8(nibbles32(x[b].qs), _mm256_loadu_si256((const __m256i *)q[b].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[b].d) * f16(q[b].d)), _mm256_cvtepi32_ps(p), acc);
        summ += f16(x[b].m) * f16(q[b].s);
    }
    return hsum8(acc) + summ;
}

AVX2 static float dot_q5_0_q8_0_avx2(const void *w, const void *y, int64_t n) {
    const block_q5_0 *x = w;
    const block_q8_0 *q = y;
    const __m256i b4 = _mm256_set1_epi8(0x10), off = _mm256_set1_epi8(16);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK5_0; b++) {
        prefetch_w_l2(x + b, sizeof x[b]);
        const __m256i hb = _mm256_and_si256(bits32(x[b].qh), b4);
        const __m256i xv = _mm256_sub_epi8(_mm256_or_si256(nibbles32(x[b].qs), hb), off);
        const __m256i p = mul_sum_i8(xv, _mm256_loadu_si256((const __m256i *)q[b].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[b].d) * f16(q[b].d)), _mm256_cvtepi32_ps(p), acc);
    }
    return hsum8(acc);
}

AVX2 static float dot_q5_1_q8_1_avx2(const void *w, const void *y, int64_t n) {
    const block_q5_1 *x = w;
    const block_q8_1 *q = y;
    const __m256i b4 = _mm256_set1_epi8(0x10);
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    for (int64_t b = 0; b < n / QK5_1; b++) {
        prefetch_w_l2(x + b, sizeof x[b]);
        const __m256i xv = _mm256_or_si256(nibbles32(x[b].qs), _mm256_and_si256(bits32(x[b].qh), b4));
        const __m256i p = mul_sum_u8_i8(xv, _mm256_loadu_si256((const __m256i *)q[b].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[b].d) * f16(q[b].d)), _mm256_cvtepi32_ps(p), acc);
        summ += f16(x[b].m) * f16(q[b].s);
    }
    return hsum8(acc) + summ;
}

AVX2 static float dot_q8_0_q8_0_avx2(const void *w, const void *y, int64_t n) {
    const block_q8_0 *x = w;
    const block_q8_0 *q = y;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK8_0; b++) {
        prefetch_w_l2(x + b, sizeof x[b]);
        const __m256i p = mul_sum_i8(_mm256_loadu_si256((const __m256i *)x[b].qs),
                                     _mm256_loadu_si256((const __m256i *)q[b].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[b].d) * f16(q[b].d)), _mm256_cvtepi32_ps(p), acc);
    }
    return hsum8(acc);
}

/* ---- K types ------------------------------------------------------------------------------ */

/* Sub-block scales as i16 lanes: half h (0, 1) of 16 scales broadcast to both 128-bit lanes,
 * then pair s (0..3) spread as lanes 0..7 = scale 8h + 2s, lanes 8..15 = scale 8h + 2s + 1:
 * the multipliers of the 16 i16 sums vpmaddubsw leaves for one 32-byte group. */
AVX2 static inline __m256i scales_half(__m256i sc16, int h) {
    return h ? _mm256_permute4x64_epi64(sc16, 0xEE) : _mm256_permute4x64_epi64(sc16, 0x44);
}
#define PAIR_MASK(s)                                                                                     \
    _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)((4 * (s) + 1) << 8 | 4 * (s)))), \
                            _mm_set1_epi16((short)((4 * (s) + 3) << 8 | (4 * (s) + 2))), 1)

/* sum over 16 lanes of a_i * bsums_i */
AVX2 static inline int dot_bsums(__m256i a16, const int16_t *bsums) {
    return hsum8_i32(_mm256_madd_epi16(a16, _mm256_loadu_si256((const __m256i *)bsums)));
}

AVX2 static float dot_q2_K_q8_K_avx2(const void *w, const void *y, int64_t n) {
    const block_q2_K *x = w;
    const block_q8_K *q = y;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0xF);
    const __m256i pm[4] = {PAIR_MASK(0), PAIR_MASK(1), PAIR_MASK(2), PAIR_MASK(3)};
    __m256 acc = _mm256_setzero_ps();
    float corr = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        prefetch_w(x + b, sizeof x[b]);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[b].scales);
        const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sc8, m4));
        const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), m4));
        const int summ = dot_bsums(mn16, q[b].bsums);
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i sch = scales_half(sc16, h);
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(x[b].qs + 32 * h));
            const int8_t *yq = q[b].qs + 128 * h;
#define Q2_STEP(s, u)                                                                                          \
    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16((u), _mm256_loadu_si256((const __m256i *)(yq + 32 * (s)))), \
                                                    _mm256_shuffle_epi8(sch, pm[s])))
            Q2_STEP(0, _mm256_and_si256(qv, m3));
            Q2_STEP(1, _mm256_and_si256(_mm256_srli_epi16(qv, 2), m3));
            Q2_STEP(2, _mm256_and_si256(_mm256_srli_epi16(qv, 4), m3));
            Q2_STEP(3, _mm256_and_si256(_mm256_srli_epi16(qv, 6), m3));
#undef Q2_STEP
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(q[b].d * f16(x[b].d)), _mm256_cvtepi32_ps(isum), acc);
        corr += q[b].d * f16(x[b].dmin) * (float)summ;
    }
    return hsum8(acc) - corr;
}

/* The 16 signed 6-bit scales (sc - 32) of a Q3_K block as i16 lanes. */
AVX2 static inline __m256i q3_K_scales16(const uint8_t *s) {
    uint64_t lo;
    uint32_t hi;
    memcpy(&lo, s, 8);
    memcpy(&hi, s + 8, 4);
    const __m128i low = _mm_set_epi64x((long long)((lo >> 4) & 0x0F0F0F0F0F0F0F0FULL), (long long)(lo & 0x0F0F0F0F0F0F0F0FULL));
    const __m128i high = _mm_and_si128(_mm_set_epi32((int)(hi >> 6), (int)(hi >> 4), (int)(hi >> 2), (int)hi), _mm_set1_epi8(3));
    return _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32)));
}

AVX2 static float dot_q3_K_q8_K_avx2(const void *w, const void *y, int64_t n) {
    const block_q3_K *x = w;
    const block_q8_K *q = y;
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
    const __m256i pm[4] = {PAIR_MASK(0), PAIR_MASK(1), PAIR_MASK(2), PAIR_MASK(3)};
    __m256 acc = _mm256_setzero_ps();
    float corr = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        prefetch_w(x + b, sizeof x[b]);
        const __m256i sc16 = q3_K_scales16(x[b].scales);
        const int off = dot_bsums(sc16, q[b].bsums); /* codes are u - 4: sum_j sc_j * 4 * bsum_j */
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x[b].hmask);
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i sch = scales_half(sc16, h);
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(x[b].qs + 32 * h));
            const __m256i hmh = h ? _mm256_srli_epi16(hm, 2) : _mm256_slli_epi16(hm, 2); /* bit 4h+s -> bit s+2 */
            const int8_t *yq = q[b].qs + 128 * h;
            /* u = code + 4 in 0..7: the low 2 bits, and the hmask bit as bit 2 */
#define Q3_STEP(s, low, hb)                                                                                    \
    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_or_si256((low), _mm256_and_si256((hb), m4)), \
                                                                         _mm256_loadu_si256((const __m256i *)(yq + 32 * (s)))), \
                                                    _mm256_shuffle_epi8(sch, pm[s])))
            Q3_STEP(0, _mm256_and_si256(qv, m3), hmh);
            Q3_STEP(1, _mm256_and_si256(_mm256_srli_epi16(qv, 2), m3), _mm256_srli_epi16(hmh, 1));
            Q3_STEP(2, _mm256_and_si256(_mm256_srli_epi16(qv, 4), m3), _mm256_srli_epi16(hmh, 2));
            Q3_STEP(3, _mm256_and_si256(_mm256_srli_epi16(qv, 6), m3), _mm256_srli_epi16(hmh, 3));
#undef Q3_STEP
        }
        const float d = q[b].d * f16(x[b].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum), acc);
        corr += d * (float)(4 * off);
    }
    return hsum8(acc) - corr;
}

/* The 8 six-bit scales and minimums of a Q4_K/Q5_K block (get_scale_min_k4, four at a
 * time in 32-bit words; x86 is little-endian) */
static inline void k4_scales(const uint8_t *s, uint8_t sc[8], uint8_t m[8]) {
    uint32_t w[3];
    memcpy(w, s, 12);
    const uint32_t sc_lo = w[0] & 0x3F3F3F3Fu, m_lo = w[1] & 0x3F3F3F3Fu;
    const uint32_t sc_hi = (w[2] & 0x0F0F0F0Fu) | ((w[0] >> 2) & 0x30303030u);
    const uint32_t m_hi = ((w[2] >> 4) & 0x0F0F0F0Fu) | ((w[1] >> 2) & 0x30303030u);
    memcpy(sc, &sc_lo, 4);
    memcpy(sc + 4, &sc_hi, 4);
    memcpy(m, &m_lo, 4);
    memcpy(m + 4, &m_hi, 4);
}

AVX2 static float dot_q4_K_q8_K_avx2(const void *w, const void *y, int64_t n) {
    const block_q4_K *x = w;
    const block_q8_K *q = y;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    float corr = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        prefetch_w(x + b, sizeof x[b]);
        uint8_t sc[8], m[8];
        k4_scales(x[b].scales, sc, m);
        const int summ = dot_bsums(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)m),
                                                                          _mm_loadl_epi64((const __m128i *)m))),
                                   q[b].bsums);
        __m256i isum = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(x[b].qs + 32 * c));
            const __m256i lo = _mm256_and_si256(qv, m4), hi = _mm256_and_si256(_mm256_srli_epi16(qv, 4), m4);
            const __m256i y0 = _mm256_loadu_si256((const __m256i *)(q[b].qs + 64 * c));
            const __m256i y1 = _mm256_loadu_si256((const __m256i *)(q[b].qs + 64 * c + 32));
            const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), _mm256_set1_epi16(sc[2 * c]));
            const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), _mm256_set1_epi16(sc[2 * c + 1]));
            isum = _mm256_add_epi32(isum, _mm256_add_epi32(p0, p1));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(q[b].d * f16(x[b].d)), _mm256_cvtepi32_ps(isum), acc);
        corr += q[b].d * f16(x[b].dmin) * (float)summ;
    }
    return hsum8(acc) - corr;
}

AVX2 static float dot_q5_K_q8_K_avx2(const void *w, const void *y, int64_t n) {
    const block_q5_K *x = w;
    const block_q8_K *q = y;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m1 = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    float corr = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        prefetch_w(x + b, sizeof x[b]);
        uint8_t sc[8], m[8];
        k4_scales(x[b].scales, sc, m);
        const int summ = dot_bsums(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)m),
                                                                          _mm_loadl_epi64((const __m128i *)m))),
                                   q[b].bsums);
        const __m256i hv = _mm256_loadu_si256((const __m256i *)x[b].qh);
        __m256i isum = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(x[b].qs + 32 * c));
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(qv, m4), _mm256_slli_epi16(shr_mask(hv, 2 * c, m1), 4));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qv, 4), m4),
                                               _mm256_slli_epi16(shr_mask(hv, 2 * c + 1, m1), 4));
            const __m256i y0 = _mm256_loadu_si256((const __m256i *)(q[b].qs + 64 * c));
            const __m256i y1 = _mm256_loadu_si256((const __m256i *)(q[b].qs + 64 * c + 32));
            const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), _mm256_set1_epi16(sc[2 * c]));
            const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), _mm256_set1_epi16(sc[2 * c + 1]));
            isum = _mm256_add_epi32(isum, _mm256_add_epi32(p0, p1));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(q[b].d * f16(x[b].d)), _mm256_cvtepi32_ps(isum), acc);
        corr += q[b].d * f16(x[b].dmin) * (float)summ;
    }
    return hsum8(acc) - corr;
}

AVX2 static float dot_q6_K_q8_K_avx2(const void *w, const void *y, int64_t n) {
    const block_q6_K *x = w;
    const block_q8_K *q = y;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    const __m256i pm[4] = {PAIR_MASK(0), PAIR_MASK(1), PAIR_MASK(2), PAIR_MASK(3)};
    __m256 acc = _mm256_setzero_ps();
    float corr = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        prefetch_w(x + b, sizeof x[b]);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[b].scales));
        const int off = dot_bsums(sc16, q[b].bsums); /* codes are u - 32 */
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i sch = scales_half(sc16, h);
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(x[b].ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(x[b].ql + 64 * h + 32));
            const __m256i hv = _mm256_loadu_si256((const __m256i *)(x[b].qh + 32 * h));
            const int8_t *yq = q[b].qs + 128 * h;
            /* u = code 0..63 of elements 128h + 32s + l: 4 low bits from ql, 2 from qh */
#define Q6_STEP(s, low, high)                                                                                  \
    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_or_si256((low), _mm256_slli_epi16(_mm256_and_si256((high), m3), 4)), \
                                                                         _mm256_loadu_si256((const __m256i *)(yq + 32 * (s)))), \
                                                    _mm256_shuffle_epi8(sch, pm[s])))
            Q6_STEP(0, _mm256_and_si256(l0, m4), hv);
            Q6_STEP(1, _mm256_and_si256(l1, m4), _mm256_srli_epi16(hv, 2));
            Q6_STEP(2, _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_srli_epi16(hv, 4));
            Q6_STEP(3, _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_srli_epi16(hv, 6));
#undef Q6_STEP
        }
        const float d = q[b].d * f16(x[b].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum), acc);
        corr += d * (float)(32 * off);
    }
    return hsum8(acc) - corr;
}

static const cpu_kernels avx2_table[ER_TYPE_COUNT] = {
    [ER_TYPE_F32] = {"avx2", ER_TYPE_F32, quantize_row_f32_ref, dot_f32_f32_avx2},
    [ER_TYPE_F16] = {"avx2", ER_TYPE_F32, quantize_row_f32_ref, dot_f16_f32_avx2},
    [ER_TYPE_BF16] = {"avx2", ER_TYPE_F32, quantize_row_f32_ref, dot_bf16_f32_avx2},
    [ER_TYPE_Q4_0] = {"avx2", ER_TYPE_Q8_0, quantize_row_q8_0_avx2, dot_q4_0_q8_0_avx2},
    [ER_TYPE_Q4_1] = {"avx2", ER_TYPE_Q8_1, quantize_row_q8_1_avx2, dot_q4_1_q8_1_avx2},
    [ER_TYPE_Q5_0] = {"avx2", ER_TYPE_Q8_0, quantize_row_q8_0_avx2, dot_q5_0_q8_0_avx2},
    [ER_TYPE_Q5_1] = {"avx2", ER_TYPE_Q8_1, quantize_row_q8_1_avx2, dot_q5_1_q8_1_avx2},
    [ER_TYPE_Q8_0] = {"avx2", ER_TYPE_Q8_0, quantize_row_q8_0_avx2, dot_q8_0_q8_0_avx2},
    [ER_TYPE_Q2_K] = {"avx2", ER_TYPE_Q8_K, quantize_row_q8_K_avx2, dot_q2_K_q8_K_avx2},
    [ER_TYPE_Q3_K] = {"avx2", ER_TYPE_Q8_K, quantize_row_q8_K_avx2, dot_q3_K_q8_K_avx2},
    [ER_TYPE_Q4_K] = {"avx2", ER_TYPE_Q8_K, quantize_row_q8_K_avx2, dot_q4_K_q8_K_avx2},
    [ER_TYPE_Q5_K] = {"avx2", ER_TYPE_Q8_K, quantize_row_q8_K_avx2, dot_q5_K_q8_K_avx2},
    [ER_TYPE_Q6_K] = {"avx2", ER_TYPE_Q8_K, quantize_row_q8_K_avx2, dot_q6_K_q8_K_avx2},
};

const cpu_kernels *cpu_kernels_avx2_row(uint32_t type) {
    return type < ER_TYPE_COUNT && avx2_table[type].vec_dot ? &avx2_table[type] : NULL;
}

#else /* not x86-64 with GCC/Clang: no AVX2 kernels */

const cpu_kernels *cpu_kernels_avx2_row(uint32_t type) {
    (void)type;
    return NULL;
}

#endif
