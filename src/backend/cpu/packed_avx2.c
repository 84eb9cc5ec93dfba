/*
 * packed_avx2.c - the packed kernels (packed.h) of Q4_0, Q4_1 and Q2_K..Q6_K where the CPU
 * has AVX2 but not AVX-512 VNNI: one group of 8 rows (lane r of a ymm register is row r)
 * times every token of the call, the same int32 sums and float steps as packed_vnni.c's,
 * so a (row, token) has the same bits on either kernel. (Q8_0's signed weights would need
 * a vpsignb and a vpmaddwd per chunk and token: the row-major tile's cost.)
 *
 * Without vpdpbusd a product of 32 unsigned codes and signed activations is vpmaddubsw
 * (int16 pairs) and vpmaddwd (int32). The vpmaddwd is the one that multiplies by the
 * sub-block's scale (an int16 pair (s, s) per lane), and it comes once per several
 * chunks: their vpmaddubsw results are added in int16 first, as many as cannot overflow
 * (G chunks: 16 x 15 x 128 = 30,720 for Q4_K's sub-block of 32). A super-block is done as
 * 8 units of 32 elements (Q4_K and Q5_K: a sub-block, the others: two of 16): a unit's 8
 * chunks of codes are unpacked once into registers, then every token of the call takes its
 * 8 broadcast activations against them: per token and 256 products of a Q4_K row group, 8
 * vpmaddubsw, 7 vpaddw, 1 vpmaddwd, 1 vpaddd. The minimums and the codes' offsets come
 * per super-block and token from Q8_K's sums of 16 (vpmaddwd by pairs), then the float
 * steps of packed.h. Q4_0 and Q4_1 likewise per block of 32 (q4_gemm).
 */
#include "backend/cpu/packed.h"

#include <stddef.h>
#include <string.h>

#include "backend/cpu/x86.h"
#include "quant/blocks.h"
#include "quant/types.h"

#if CPU_X86

#include <immintrin.h>

enum { A_Q2_K, A_Q3_K, A_Q4_K, A_Q5_K, A_Q6_K, A_Q4_0, A_Q4_1 };

/* tokens per pass over a row group (the int32 sums and float accumulators of each, 2 KiB) */
enum { A_TOK_BLOCK = 32 };

/* The chunks of 4 elements whose vpmaddubsw results add up in int16 without overflow:
 * 2 products x G chunks x the largest code x 128 <= 32,767 (codes: Q2_K 3, Q3_K 7, Q4_K
 * 15, Q5_K 31, Q6_K 63), and within one sub-block (Q2_K, Q3_K: 4 chunks) */
static inline int chunks_per_sum(const int wt) {
    return wt == A_Q4_K ? 8 : wt == A_Q6_K ? 2 : 4;
}

/* the int32 v as the int16 pair (v, v): vpmaddwd's multiplier, v in -32,768..32,767 */
AVX2 static INLINE __m256i pair16(__m256i v) {
    return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(v, 16));
}

/* 8 bytes at p (a byte per row) as 8 int32 */
AVX2 static INLINE __m256i bytes8_u(const uint8_t *p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}
AVX2 static INLINE __m256i bytes8_s(const int8_t *p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

/* One super-block's scales of the 8 rows of b: sc[k] the multiplier of sub-block k
 * (pair16: Q4_K, Q5_K k < 8, the others k < 16), and pp[k] the pairs that the token's
 * word k of Q8_K's sums (bsums[2k], bsums[2k + 1]) multiplies: Q4_K, Q5_K (m_k, m_k), the
 * minimum of sub-block k of 32; Q2_K (m_2k, m_2k+1); Q3_K, Q6_K (sc_2k, sc_2k+1). */
AVX2 static INLINE void unit_scales(const uint8_t *b, __m256i sc[16], __m256i pp[8], const int wt) {
    const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
    if (wt == A_Q4_K || wt == A_Q5_K) {
        const block_q4_Kx8 *q = (const block_q4_Kx8 *)b;
        for (int j = 0; j < 8; j++) {
            const __m256i lo = bytes8_u(q->scl[j]), hi = _mm256_srli_epi32(bytes8_u(q->sch[j / 2]), 4 * (j & 1));
            const __m256i s = _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(0x0F)),
                                              _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(0x03)), 4));
            const __m256i m = _mm256_or_si256(_mm256_srli_epi32(lo, 4),
                                              _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(0x0C)), 2));
            sc[j] = pair16(s);
            pp[j] = pair16(m);
        }
        return;
    }
    __m256i s[16]; /* sub-block k's scale (Q2_K: s[k] its scale, m its minimum) as int32 */
    __m256i m[16];
    for (int k = 0; k < 16; k++) {
        if (wt == A_Q2_K) {
            const __m256i v = bytes8_u(((const block_q2_Kx8 *)b)->sc[k]);
            s[k] = _mm256_and_si256(v, _mm256_set1_epi32(0x0F));
            m[k] = _mm256_srli_epi32(v, 4);
        } else if (wt == A_Q6_K) {
            s[k] = bytes8_s(((const block_q6_Kx8 *)b)->sc[k]);
        } else {
            const block_q3_Kx8 *q = (const block_q3_Kx8 *)b;
            const __m256i lo = _mm256_srli_epi32(bytes8_u(q->scl[k / 2]), 4 * (k & 1));
            const __m256i hi = _mm256_srli_epi32(bytes8_u(q->sch[k / 4]), 2 * (k & 3));
            const __m256i hi2 = _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(0x03)), 4);
            s[k] = _mm256_sub_epi32(_mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(0x0F)), hi2),
                                    _mm256_set1_epi32(32));
        }
        sc[k] = pair16(s[k]);
    }
    for (int k = 0; k < 8; k++) {
        const __m256i even = wt == A_Q2_K ? m[2 * k] : s[2 * k], odd = wt == A_Q2_K ? m[2 * k + 1] : s[2 * k + 1];
        pp[k] = _mm256_or_si256(_mm256_and_si256(even, lo16), _mm256_slli_epi32(odd, 16));
    }
}

/* The codes of chunk c of unit u (elements 32u .. 32u + 31) of the 8 rows of b: elements
 * 32u + 4c .. + 3 of each row, a byte each, unsigned (packed.h's layouts; 16-bit shifts,
 * each byte masked to the bits its own byte brought) */
AVX2 static INLINE __m256i chunk_codes(const uint8_t *b, int u, int c, const int wt) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x03);
#define LOAD(p) _mm256_loadu_si256((const __m256i *)(p))
    const int h = u / 4, p = u % 4; /* Q2_K, Q3_K, Q6_K: half h, part p */
    if (wt == A_Q4_K || wt == A_Q5_K) { /* sub-block u: pair u / 2, low or high nibbles */
        const block_q4_Kx8 *q = (const block_q4_Kx8 *)b;
        __m256i w = _mm256_and_si256(_mm256_srli_epi16(LOAD(q->qs[u / 2][c][0]), 4 * (u & 1)), m4);
        if (wt == A_Q5_K) { /* bit u of qh's byte: bit 4 of sub-block u's element */
            const __m256i qh = LOAD(((const block_q5_Kx8 *)b)->qh[c][0]);
            const __m256i b4 = u <= 4 ? _mm256_slli_epi16(qh, 4 - u) : _mm256_srli_epi16(qh, u - 4);
            w = _mm256_or_si256(w, _mm256_and_si256(b4, _mm256_set1_epi8(0x10)));
        }
        return w;
    }
    if (wt == A_Q2_K)
        return _mm256_and_si256(_mm256_srli_epi16(LOAD(((const block_q2_Kx8 *)b)->qs[h][c][0]), 2 * p), m3);
    if (wt == A_Q3_K) { /* + hmask's bit 4h + p as bit 2 */
        const block_q3_Kx8 *q = (const block_q3_Kx8 *)b;
        const int hb = 4 * h + p;
        const __m256i hm = LOAD(q->hm[c][0]);
        const __m256i b2 = hb <= 2 ? _mm256_slli_epi16(hm, 2 - hb) : _mm256_srli_epi16(hm, hb - 2);
        return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(LOAD(q->qs[h][c][0]), 2 * p), m3),
                               _mm256_and_si256(b2, _mm256_set1_epi8(0x04)));
    }
    /* Q6_K: 4 bits of ql (parts 0, 1 low nibbles, 2, 3 high), 2 of qh (bits 2p, 2p + 1) */
    const block_q6_Kx8 *q = (const block_q6_Kx8 *)b;
    const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(LOAD(q->ql[h][p & 1][c][0]), 4 * (p >> 1)), m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(LOAD(q->qh[h][c][0]), 2 * p), m3);
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
#undef LOAD
}

/* The float steps of packed.h for super-block b (wb: the group's block) and one token (xb),
 * from the 8 rows' is: off = sum_k pp_k . (bsums[2k], bsums[2k + 1]) */
AVX2 static INLINE __m256 superblock_acc(const uint8_t *wb, const block_q8_K *xb, __m256i is, const __m256i pp[8],
                                         __m256 acc, const int wt) {
    __m256i off = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        int32_t word;
        memcpy(&word, xb->bsums + 2 * k, sizeof word);
        off = _mm256_add_epi32(off, _mm256_madd_epi16(pp[k], _mm256_set1_epi32(word)));
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb)); /* d[8] leads each block */
    const __m256 dxv = _mm256_set1_ps(xb->d);
    if (wt == A_Q3_K || wt == A_Q6_K) { /* the codes' offset, 4 or 32, taken back */
        const __m256i isum = _mm256_sub_epi32(is, _mm256_slli_epi32(off, wt == A_Q6_K ? 5 : 2));
        return _mm256_fmadd_ps(_mm256_mul_ps(dw, dxv), _mm256_cvtepi32_ps(isum), acc);
    }
    const uint16_t *dmin = wt == A_Q2_K ? ((const block_q2_Kx8 *)wb)->dmin : ((const block_q4_Kx8 *)wb)->dmin;
    const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dmin));
    acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, dxv), _mm256_cvtepi32_ps(is), acc);
    return _mm256_fnmadd_ps(_mm256_mul_ps(mw, dxv), _mm256_cvtepi32_ps(off), acc);
}

/* the bytes of one packed super-block of 8 rows of type wt (a K-quant) */
static inline size_t block_bytes(const int wt) {
    return wt == A_Q2_K   ? sizeof(block_q2_Kx8)
           : wt == A_Q3_K ? sizeof(block_q3_Kx8)
           : wt == A_Q4_K ? sizeof(block_q4_Kx8)
           : wt == A_Q5_K ? sizeof(block_q5_Kx8)
                          : sizeof(block_q6_Kx8);
}

/* y (n_tok, y_stride) rows 8g .. 8g + 7 of group w (nb super-blocks) x tokens x (2 <= n_tok
 * <= A_TOK_BLOCK, x_stride bytes apart, Q8_K): a unit's codes unpacked once for all */
AVX2 static INLINE void group_tokens(const uint8_t *w, int64_t nb, const uint8_t *x, size_t x_stride, int64_t n_tok,
                                     float *y, int64_t y_stride, const int wt) {
    const int G = chunks_per_sum(wt), by16 = wt == A_Q2_K || wt == A_Q3_K || wt == A_Q6_K;
    __m256i is[A_TOK_BLOCK]; /* (n_tok) 8 rows' sum over sub-blocks of scale x int32 sum */
    __m256 acc[A_TOK_BLOCK]; /* (n_tok) 8 rows' float sums */
    for (int64_t t = 0; t < n_tok; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = w + (size_t)b * block_bytes(wt);
        __m256i sc[16], pp[8];
        unit_scales(wb, sc, pp, wt);
        for (int u = 0; u < 8; u++) {
            __m256i wc[8]; /* (chunk) the unit's codes */
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++)
                wc[c] = chunk_codes(wb, u, c, wt);
            for (int64_t t = 0; t < n_tok; t++) {
                const int8_t *xq = ((const block_q8_K *)(x + (size_t)t * x_stride) + b)->qs + 32 * u;
                __m256i sum = u == 0 ? _mm256_setzero_si256() : is[t];
#pragma GCC unroll 8
                for (int c0 = 0; c0 < 8; c0 += G) {
                    __m256i s16 = _mm256_setzero_si256(); /* G chunks' products by int16 pairs */
#pragma GCC unroll 8
                    for (int c = c0; c < c0 + G; c++) {
                        int32_t xc; /* the token's elements 32u + 4c .. + 3 */
                        memcpy(&xc, xq + 4 * c, sizeof xc);
                        const __m256i p = _mm256_maddubs_epi16(wc[c], _mm256_set1_epi32(xc));
                        s16 = c == c0 ? p : _mm256_add_epi16(s16, p);
                    }
                    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(s16, sc[by16 ? 2 * u + c0 / 4 : u]));
                }
                is[t] = sum;
            }
        }
        for (int64_t t = 0; t < n_tok; t++)
            acc[t] = superblock_acc(wb, (const block_q8_K *)(x + (size_t)t * x_stride) + b, is[t], pp, acc[t], wt);
    }
    for (int64_t t = 0; t < n_tok; t++)
        _mm256_storeu_ps(y + t * y_stride, acc[t]);
}

/* The weight stream prefetched 8 KiB ahead into L2 in a decode step, as packed_vnni.c's */
enum { A_PREFETCH = 8192 };

/* group_tokens for one token (a decode step): each chunk's codes go straight into its
 * product, and the group's next blocks are prefetched */
AVX2 static INLINE void group_one(const uint8_t *w, int64_t nb, const uint8_t *x, float *y, const int wt) {
    const int G = chunks_per_sum(wt), by16 = wt == A_Q2_K || wt == A_Q3_K || wt == A_Q6_K;
    const size_t wbs = block_bytes(wt);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = w + (size_t)b * wbs;
#pragma GCC unroll 27
        for (int l = 0; l < (int)((wbs + 63) / 64); l++)
            _mm_prefetch((const char *)wb + A_PREFETCH + 64 * l, _MM_HINT_T1);
        __m256i sc[16], pp[8];
        unit_scales(wb, sc, pp, wt);
        const block_q8_K *xb = (const block_q8_K *)x + b;
        __m256i is = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int u = 0; u < 8; u++)
#pragma GCC unroll 8
            for (int c0 = 0; c0 < 8; c0 += G) {
                __m256i s16 = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int c = c0; c < c0 + G; c++) {
                    int32_t xc;
                    memcpy(&xc, xb->qs + 32 * u + 4 * c, sizeof xc);
                    const __m256i p = _mm256_maddubs_epi16(chunk_codes(wb, u, c, wt), _mm256_set1_epi32(xc));
                    s16 = c == c0 ? p : _mm256_add_epi16(s16, p);
                }
                is = _mm256_add_epi32(is, _mm256_madd_epi16(s16, sc[by16 ? 2 * u + c0 / 4 : u]));
            }
        acc = superblock_acc(wb, xb, is, pp, acc, wt);
    }
    _mm256_storeu_ps(y, acc);
}

/* A cpu_gemm_fn over packed rows of type wt: each group of 8 rows over the tokens, in
 * blocks of A_TOK_BLOCK */
AVX2 static INLINE void packed_gemm_avx2(const uint8_t *w, int64_t n_rows, const uint8_t *x, size_t x_stride,
                                         int64_t n_tok, float *y, int64_t y_stride, int64_t n, const int wt) {
    const int64_t nb = n / QK_K;
    const size_t group_bytes = (size_t)nb * block_bytes(wt);
    for (int64_t t0 = 0; t0 < n_tok; t0 += A_TOK_BLOCK) {
        const int64_t nt = n_tok - t0 < A_TOK_BLOCK ? n_tok - t0 : A_TOK_BLOCK;
        for (int64_t g = 0; g < n_rows / 8; g++) {
            const uint8_t *wg = w + (size_t)g * group_bytes, *xt = x + (size_t)t0 * x_stride;
            float *yt = y + t0 * y_stride + 8 * g;
            if (nt == 1)
                group_one(wg, nb, xt, yt, wt);
            else
                group_tokens(wg, nb, xt, x_stride, nt, yt, y_stride, wt);
        }
    }
}

/* Q4_0 and Q4_1 rows x Q8_0 resp. Q8_1 tokens, blocks of 32: a block's 8 code vectors
 * (chunk c's low nibbles: elements 4c .. + 3, high: 16 + 4c .. + 3) unpacked once, then per
 * token 8 vpmaddubsw added in int16 (16 x 15 x 128 at most), one vpmaddwd by ones into its
 * int32 sum (Q4_0: from the token's -8 * sum(x)), and packed.h's float steps. The tokens'
 * scales as floats for a window of blocks (as packed_vnni.c's packed_gemm), the 8 rows'
 * float sums kept in y between windows. */
enum { A_WIN = 64 }; /* blocks per window: (A_TOK_BLOCK, A_WIN, 2) scales, 16 KiB */

/* token x's d and Q4_1's s, or Q4_0's -8 * sum(x) as int32 bits, of block b */
AVX2 static INLINE void q4_token_scales(const uint8_t *x, int64_t b, float st[2], const int wt) {
    if (wt == A_Q4_1) {
        const block_q8_1 *xb = (const block_q8_1 *)x + b;
        st[0] = _cvtsh_ss(xb->d);
        st[1] = _cvtsh_ss(xb->s);
        return;
    }
    const block_q8_0 *xb = (const block_q8_0 *)x + b;
    const __m256i x16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), _mm256_loadu_si256((const __m256i *)xb->qs));
    const __m256i p = _mm256_madd_epi16(x16, _mm256_set1_epi16(1));
    __m128i v = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4E));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0xB1));
    const int32_t start = -8 * _mm_cvtsi128_si32(v);
    st[0] = _cvtsh_ss(xb->d);
    memcpy(&st[1], &start, sizeof start);
}

/* The 8 rows' int32 sum of block wb (codes wc) with the token's activations xq (32) */
AVX2 static INLINE __m256i q4_block_sum(const __m256i wc[8], const int8_t *xq, const float st[2], const int wt) {
    __m256i s16 = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) { /* k = 2c: chunk c's low nibbles, 2c + 1: its high ones */
        int32_t xc;
        memcpy(&xc, xq + (k & 1 ? 16 : 0) + 4 * (k / 2), sizeof xc);
        const __m256i p = _mm256_maddubs_epi16(wc[k], _mm256_set1_epi32(xc));
        s16 = k == 0 ? p : _mm256_add_epi16(s16, p);
    }
    int32_t start = 0;
    if (wt == A_Q4_0)
        memcpy(&start, &st[1], sizeof start);
    return _mm256_add_epi32(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)), _mm256_set1_epi32(start));
}

/* block wb's codes: wc[2c] chunk c's low nibbles, wc[2c + 1] its high ones */
AVX2 static INLINE void q4_codes(const uint8_t *wb, __m256i wc[8], const int wt) {
    const uint8_t *qs = wt == A_Q4_0 ? ((const block_q4_0x8 *)wb)->qs[0][0] : ((const block_q4_1x8 *)wb)->qs[0][0];
    const __m256i m4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        wc[2 * c] = _mm256_and_si256(q, m4);
        wc[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    }
}

/* y rows 8g .. 8g + 7 (w: the group's blocks b0 .. b0 + nbw) x n_tok tokens (x: their
 * blocks from b0; st: (n_tok, A_WIN, 2) their scales); first: acc from 0, else from y */
AVX2 static INLINE void q4_group_window(const uint8_t *w, int64_t nbw, const uint8_t *x, size_t x_stride,
                                        int64_t n_tok, const float *st, float *y, int64_t y_stride, int first,
                                        const int wt) {
    const size_t wbs = wt == A_Q4_0 ? sizeof(block_q4_0x8) : sizeof(block_q4_1x8);
    const size_t xbs = wt == A_Q4_0 ? sizeof(block_q8_0) : sizeof(block_q8_1);
    const size_t xqs = wt == A_Q4_0 ? offsetof(block_q8_0, qs) : offsetof(block_q8_1, qs);
    __m256 acc[A_TOK_BLOCK]; /* (n_tok) 8 rows' float sums */
    for (int64_t t = 0; t < n_tok; t++)
        acc[t] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + t * y_stride);
    for (int64_t b = 0; b < nbw; b++) {
        const uint8_t *wb = w + (size_t)b * wbs;
        if (n_tok == 1)
            for (int l = 0; l < (int)((wbs + 63) / 64); l++)
                _mm_prefetch((const char *)wb + A_PREFETCH + 64 * l, _MM_HINT_T1);
        __m256i wc[8];
        q4_codes(wb, wc, wt);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wb)); /* d[8] leads the block */
        const uint16_t *m = ((const block_q4_1x8 *)wb)->m; /* Q4_1's minimums */
        const __m256 mw = wt == A_Q4_1 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)m)) : _mm256_setzero_ps();
        for (int64_t t = 0; t < n_tok; t++) {
            const float *sj = st + (t * A_WIN + b) * 2; /* token t's d, s */
            const int8_t *xq = (const int8_t *)(x + (size_t)t * x_stride + (size_t)b * xbs + xqs);
            const __m256i s = q4_block_sum(wc, xq, sj, wt);
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(sj[0])), _mm256_cvtepi32_ps(s), acc[t]);
            if (wt == A_Q4_1)
                acc[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(sj[1]), acc[t]);
        }
    }
    for (int64_t t = 0; t < n_tok; t++)
        _mm256_storeu_ps(y + t * y_stride, acc[t]);
}

AVX2 static INLINE void q4_gemm(const uint8_t *w, int64_t n_rows, const uint8_t *x, size_t x_stride, int64_t n_tok,
                                float *y, int64_t y_stride, int64_t n, const int wt) {
    const int64_t nb = n / QK4_0;
    const size_t wbs = wt == A_Q4_0 ? sizeof(block_q4_0x8) : sizeof(block_q4_1x8);
    const size_t xbs = wt == A_Q4_0 ? sizeof(block_q8_0) : sizeof(block_q8_1);
    float st[A_TOK_BLOCK * A_WIN * 2]; /* (A_TOK_BLOCK, A_WIN, 2) the window's token scales */
    for (int64_t t0 = 0; t0 < n_tok; t0 += A_TOK_BLOCK) {
        const int64_t nt = n_tok - t0 < A_TOK_BLOCK ? n_tok - t0 : A_TOK_BLOCK;
        const uint8_t *xt = x + (size_t)t0 * x_stride;
        for (int64_t b0 = 0; b0 < nb; b0 += A_WIN) {
            const int64_t nbw = nb - b0 < A_WIN ? nb - b0 : A_WIN;
            for (int64_t t = 0; t < nt; t++)
                for (int64_t b = 0; b < nbw; b++)
                    q4_token_scales(xt + (size_t)t * x_stride, b0 + b, st + (t * A_WIN + b) * 2, wt);
            for (int64_t g = 0; g < n_rows / 8; g++)
                q4_group_window(w + ((size_t)g * (size_t)nb + (size_t)b0) * wbs, nbw, xt + (size_t)b0 * xbs,
                                x_stride, nt, st, y + t0 * y_stride + 8 * g, y_stride, b0 == 0, wt);
        }
    }
}

/* a cpu_gemm_fn over packed rows of one type (w_stride unused: packed rows) */
#define PACKED_GEMM_FN(name, wt)                                                                                   \
    AVX2 static void name(const uint8_t *w, size_t w_stride, int64_t n_rows, const uint8_t *x, size_t x_stride,    \
                          int64_t n_tok, float *y, int64_t y_stride, int64_t n) {                                  \
        (void)w_stride;                                                                                            \
        if (wt == A_Q4_0 || wt == A_Q4_1)                                                                          \
            q4_gemm(w, n_rows, x, x_stride, n_tok, y, y_stride, n, wt);                                            \
        else                                                                                                       \
            packed_gemm_avx2(w, n_rows, x, x_stride, n_tok, y, y_stride, n, wt);                                   \
    }
PACKED_GEMM_FN(gemm_q4_0x8_q8_0_avx2, A_Q4_0)
PACKED_GEMM_FN(gemm_q4_1x8_q8_1_avx2, A_Q4_1)
PACKED_GEMM_FN(gemm_q2_Kx8_q8_K_avx2, A_Q2_K)
PACKED_GEMM_FN(gemm_q3_Kx8_q8_K_avx2, A_Q3_K)
PACKED_GEMM_FN(gemm_q4_Kx8_q8_K_avx2, A_Q4_K)
PACKED_GEMM_FN(gemm_q5_Kx8_q8_K_avx2, A_Q5_K)
PACKED_GEMM_FN(gemm_q6_Kx8_q8_K_avx2, A_Q6_K)
#undef PACKED_GEMM_FN

cpu_gemm_fn cpu_gemm_packed_avx2(uint32_t type) {
    if (!cpu_has_avx2())
        return NULL;
    return type == ER_TYPE_Q4_0   ? gemm_q4_0x8_q8_0_avx2
           : type == ER_TYPE_Q4_1 ? gemm_q4_1x8_q8_1_avx2
           : type == ER_TYPE_Q2_K ? gemm_q2_Kx8_q8_K_avx2
           : type == ER_TYPE_Q3_K ? gemm_q3_Kx8_q8_K_avx2
           : type == ER_TYPE_Q4_K ? gemm_q4_Kx8_q8_K_avx2
           : type == ER_TYPE_Q5_K ? gemm_q5_Kx8_q8_K_avx2
           : type == ER_TYPE_Q6_K ? gemm_q6_Kx8_q8_K_avx2
                                  : NULL;
}

#else

cpu_gemm_fn cpu_gemm_packed_avx2(uint32_t type) {
    (void)type;
    return NULL;
}

#endif
