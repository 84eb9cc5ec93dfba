/*
 * packed_vnni.c - the packed kernels (packed.h): rows packed by 8 times tokens on AVX-512
 * VNNI, for Q4_0, Q4_1, Q8_0 and Q2_K..Q6_K (packed_avx2.c has the K-quants' for AVX2).
 * The packing itself, and the one copy per model, are packed.c's.
 */
#include "backend/cpu/packed.h"

#include <stddef.h>
#include <string.h>

#include "backend/cpu/x86.h"
#include "quant/blocks.h"
#include "quant/types.h"

#if CPU_X86

#include <immintrin.h>

/* the weight formats of the packed kernels */
enum { W_Q8_0, W_Q4_1, W_Q4_0, W_Q2_K, W_Q3_K, W_Q4_K, W_Q5_K, W_Q6_K };

/* A tile is two groups of 8 rows (16 rows, lane r of a zmm register is row r of the pair)
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

/* packed.h's float steps of one K-quant super-block for 16 rows and one token (k4x8_tile,
 * k_units_tile): sj the token's words (d, then its n_st - 1 sums of 32 resp. 16), off their
 * sum times the pairs sp (vpdpwssd); then Q3_K, Q6_K: acc + d dx (is - off x the codes'
 * offset, 4 or 32); Q2_K, Q4_K, Q5_K: acc + d dx is - dmin dx off (dw, mw: the rows' d and
 * dmin) */
VNNI static INLINE __m512 k_token_acc(__m512 acc, const int32_t *sj, const __m512i *sp, const int n_st, __m512i is,
                                      __m512 dw, __m512 mw, const int wt) {
    float dx;
    memcpy(&dx, sj, sizeof dx);
    __m512i off = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int k = 0; k < n_st - 1; k++)
        off = _mm512_dpwssd_epi32(off, sp[k], _mm512_set1_epi32(sj[1 + k]));
    const __m512 dxv = _mm512_set1_ps(dx);
    if (wt == W_Q3_K || wt == W_Q6_K) {
        const __m512i isum = _mm512_sub_epi32(is, _mm512_slli_epi32(off, wt == W_Q6_K ? 5 : 2));
        return _mm512_fmadd_ps(_mm512_mul_ps(dw, dxv), _mm512_cvtepi32_ps(isum), acc);
    }
    acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, dxv), _mm512_cvtepi32_ps(is), acc);
    return _mm512_fnmadd_ps(_mm512_mul_ps(mw, dxv), _mm512_cvtepi32_ps(off), acc);
}

/* Q4_K and Q5_K rows x Q8_K tokens, RN at a time (Q4_K's tiles; Q5_K's for one token, a
 * decode step's lone group: k_units_tile takes more): per super-block its scales unpacked
 * once (q4_Kx8_scales); per sub-block pair each chunk's nibbles once (low: sub-block 2p, high:
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
            const __m512 acc = first && b == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(lanes, y + j * y_stride);
            _mm512_mask_storeu_ps(y + j * y_stride, lanes, k_token_acc(acc, sj, mp, K4_ST, is[j], dw, mw, wt));
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

/* The scales of n sub-blocks of 16 a lane (k16_scales): sc[j] sub-block j of b0's rows
 * (lanes 0..7) and j + d1 of b1's (8..15); sp[k] the int16 pairs of sub-blocks 2k, 2k + 1
 * (Q2_K: their minimums) that multiply the token's sums of 16 (vpdpwssd) */
VNNI static INLINE void k16_block_scales(const uint8_t *b0, const uint8_t *b1, const int d1, const int n, const int wt,
                                         __m512i *sc, __m512i *sp) {
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
#pragma GCC unroll 16
    for (int j = 0; j < n; j++)
        sc[j] = k16_scales(b0, j, b1, j + d1, wt, 0);
#pragma GCC unroll 8
    for (int k = 0; k < n / 2; k++) {
        const __m512i even = wt == W_Q2_K ? k16_scales(b0, 2 * k, b1, 2 * k + d1, wt, 1) : sc[2 * k];
        const __m512i odd = wt == W_Q2_K ? k16_scales(b0, 2 * k + 1, b1, 2 * k + 1 + d1, wt, 1) : sc[2 * k + 1];
        sp[k] = _mm512_or_si512(_mm512_and_si512(even, lo16), _mm512_slli_epi32(odd, 16));
    }
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

/* Q2_K, Q3_K and Q6_K rows x one token, one group of 8 rows (a decode step), on all 16 lanes:
 * lanes 0..7 take the rows' first half of each super-block (h = 0), lanes 8..15 the same
 * rows' second half, each with its own activations (one 64-byte load per part, a dword
 * broadcast within each 256-bit half per chunk), and the halves' exact int32 sums meet
 * before the same float steps as k_units_tile's: the same bits, at half the instructions
 * (there, one group's lanes 8..15 repeat lanes 0..7). */
VNNI static INLINE void k16x8_tile_1(const uint8_t *w, const uint8_t *x, const int32_t *st, float *y, int64_t nbw,
                                     int first, const int wt) {
    const size_t wbs = wt == W_Q6_K   ? sizeof(block_q6_Kx8)
                       : wt == W_Q3_K ? sizeof(block_q3_Kx8)
                                      : sizeof(block_q2_Kx8);
    const int off_shift = wt == W_Q6_K ? 5 : 2;
    for (int64_t b = 0; b < nbw; b++) {
        const uint8_t *wb = w + (size_t)b * wbs;
#pragma GCC unroll 27
        for (int l = 0; l < (int)((wbs + 63) / 64); l++)
            packed_prefetch((const char *)wb + PACKED_PREFETCH + 64 * l, 1);
        /* lanes 0..7: sub-block j's scale of the first half, 8..15: of the second (j + 8) */
        __m512i sc[8], sp[4];
        k16_block_scales(wb, wb, 8, 8, wt, sc, sp);
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

/* Q2_K, Q3_K, Q5_K, Q6_K rows x every token of the block (1 to 32; a decode step's lone
 * group goes to k4x8_tile / k16x8_tile_1), in packed_avx2.c's order of work: per super-block the 16 rows'
 * scales once; per unit of 32 elements (Q4_K, Q5_K: sub-block u; the others: sub-blocks 2u
 * and 2u + 1) its 8 chunks' codes unpacked once into registers, then per token 8 vpdpbusd
 * into the unit's one or two sub-block sums, each times its scale (vpmulld) into the
 * token's is; then per token the float steps of packed.h (the offsets and minimums by
 * pairs of the tokens' words, vpdpwssd; acc kept in y between super-blocks). The codes
 * serve up to 32 tokens: the tiles it replaced (k4x8_tile's 8 tokens, a Q2_K/Q3_K/Q6_K
 * tile of 4) unpacked them again for each 8 resp. 4, a large share of the work for Q2_K,
 * Q3_K and Q6_K (pp512 +14-18%, one thread). w0, w1, lanes: as q4x8_tile's; st: (n_tok, K_WIN, K4_ST
 * resp. K6_ST) the tokens' words. */
VNNI static INLINE void k_units_tile(const uint8_t *w0, const uint8_t *w1, __mmask16 lanes, const uint8_t *x,
                                     size_t x_stride, const int32_t *st, float *y, int64_t y_stride, int64_t nbw,
                                     int first, int64_t n_tok, const int wt) {
    const int by16 = wt == W_Q2_K || wt == W_Q3_K || wt == W_Q6_K;
    const size_t wbs = wt == W_Q6_K   ? sizeof(block_q6_Kx8)
                       : wt == W_Q3_K ? sizeof(block_q3_Kx8)
                       : wt == W_Q2_K ? sizeof(block_q2_Kx8)
                       : wt == W_Q5_K ? sizeof(block_q5_Kx8)
                                      : sizeof(block_q4_Kx8);
    const int n_st = by16 ? K6_ST : K4_ST;
    const __m512i m4 = _mm512_set1_epi8(0x0F), bit4 = _mm512_set1_epi8(0x10);
    __m512i is[32]; /* (n_tok) 16 rows' sum over sub-blocks of scale x int32 sum */
    for (int64_t b = 0; b < nbw; b++) {
        const uint8_t *wb0 = w0 + (size_t)b * wbs, *wb1 = w1 + (size_t)b * wbs;
        __m512i sc[16], sp[8]; /* sub-block scales; the pairs that multiply the tokens' words */
        if (by16) {
            k16_block_scales(wb0, wb1, 0, 16, wt, sc, sp);
        } else {
            q4_Kx8_scales((const block_q4_Kx8 *)wb0, (const block_q4_Kx8 *)wb1, sc, sp);
        }
        for (int u = 0; u < 8; u++) {
            __m512i wc[8]; /* (chunk) the unit's codes */
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++) {
                if (by16) {
                    __m512i parts[4];
                    k16_codes(wb0, u / 4, wb1, u / 4, c, parts, wt);
                    wc[c] = parts[u % 4];
                } else {
                    const block_q4_Kx8 *q0 = (const block_q4_Kx8 *)wb0, *q1 = (const block_q4_Kx8 *)wb1;
                    const __m512i q = load_pair(q0->qs[u / 2][c][0], q1->qs[u / 2][c][0]);
                    wc[c] = _mm512_and_si512(u & 1 ? _mm512_srli_epi16(q, 4) : q, m4);
                    if (wt == W_Q5_K) { /* bit u of qh's byte: bit 4 of sub-block u's element */
                        const __m512i h = load_pair(((const block_q5_Kx8 *)wb0)->qh[c][0],
                                                    ((const block_q5_Kx8 *)wb1)->qh[c][0]);
                        wc[c] = _mm512_or_si512(wc[c], _mm512_and_si512(shift_bit4(h, u), bit4));
                    }
                }
            }
            for (int64_t t = 0; t < n_tok; t++) {
                const int8_t *xq = ((const block_q8_K *)(x + (size_t)t * x_stride) + b)->qs + 32 * u;
                __m512i sa = _mm512_setzero_si512(), sb = _mm512_setzero_si512(); /* chunks 0-3, 4-7 */
#pragma GCC unroll 8
                for (int c = 0; c < 8; c++) {
                    int32_t xc; /* the token's elements 32u + 4c .. + 3 */
                    memcpy(&xc, xq + 4 * c, sizeof xc);
                    if (c < 4)
                        sa = _mm512_dpbusd_epi32(sa, wc[c], _mm512_set1_epi32(xc));
                    else
                        sb = _mm512_dpbusd_epi32(sb, wc[c], _mm512_set1_epi32(xc));
                }
                const __m512i add = by16 ? _mm512_add_epi32(_mm512_mullo_epi32(sa, sc[2 * u]),
                                                            _mm512_mullo_epi32(sb, sc[2 * u + 1]))
                                         : _mm512_mullo_epi32(_mm512_add_epi32(sa, sb), sc[u]);
                is[t] = u == 0 ? add : _mm512_add_epi32(is[t], add);
            }
        }
        const __m512 dw = load_pair_f16((const uint16_t *)wb0, (const uint16_t *)wb1); /* d[8] leads both blocks */
        const uint16_t *dmin0 = wt == W_Q2_K ? ((const block_q2_Kx8 *)wb0)->dmin : ((const block_q4_Kx8 *)wb0)->dmin;
        const uint16_t *dmin1 = wt == W_Q2_K ? ((const block_q2_Kx8 *)wb1)->dmin : ((const block_q4_Kx8 *)wb1)->dmin;
        const __m512 mw = wt == W_Q3_K || wt == W_Q6_K ? _mm512_setzero_ps() : load_pair_f16(dmin0, dmin1);
        for (int64_t t = 0; t < n_tok; t++) {
            const int32_t *sj = st + (t * K_WIN + b) * n_st; /* token t's d, sums */
            const __m512 acc = first && b == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(lanes, y + t * y_stride);
            _mm512_mask_storeu_ps(y + t * y_stride, lanes, k_token_acc(acc, sj, sp, n_st, is[t], dw, mw, wt));
        }
    }
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
                /* Q2_K, Q3_K, Q5_K, Q6_K: all the block's tokens in one call (Q4_K's tile of 8, whose
                 * codes cost two ops a chunk, was 2-4% faster than the units at pp64, pp512;
                 * Q5_K_M's pp512 +4-6% with Q5_K in units); a decode step's lone group alone */
                if (k_quant && (wt != W_Q4_K || n_tok == 1)) {
                    const uint8_t *xt = x + (size_t)t0 * x_stride + (size_t)b0 * xbs;
                    const int32_t *st = (const int32_t *)sc;
                    float *yt = y + t0 * y_stride + 8 * g;
                    if (n_tok > 1)
                        k_units_tile(wg0, wg1, lanes, xt, x_stride, st, yt, y_stride, nbw, b0 == 0, t1 - t0, wt);
                    else if (wt == W_Q4_K || wt == W_Q5_K)
                        k4x8_tile(wg0, wg1, lanes, xt, x_stride, st, yt, y_stride, nbw, b0 == 0, wt, 1);
                    else
                        k16x8_tile_1(wg0, xt, st, yt, nbw, b0 == 0, wt);
                    continue;
                }
#define TILE(rn)                                                                                             \
    do {                                                                                                     \
        const uint8_t *xt = x + (size_t)t * x_stride + (size_t)b0 * xbs;                                     \
        const float *st = sc + (t - t0) * win * words;                                                       \
        float *yt = y + t * y_stride + 8 * g;                                                                \
        if (wt == W_Q8_0)                                                                                    \
            q8_0x8_tile((const block_q8_0x8 *)wg0, (const block_q8_0x8 *)wg1, lanes, xt, x_stride, st, yt,   \
                        y_stride, nbw, b0 == 0, rn);                                                         \
        else if (wt == W_Q4_K)                                                                               \
            k4x8_tile(wg0, wg1, lanes, xt, x_stride, (const int32_t *)st, yt, y_stride, nbw, b0 == 0, wt, rn); \
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

cpu_gemm_fn cpu_gemm_packed_vnni(uint32_t type) {
    if (!cpu_has_vnni())
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

#else

cpu_gemm_fn cpu_gemm_packed_vnni(uint32_t type) {
    (void)type;
    return NULL;
}

#endif
