/*
 * fast_int8_tile.h - the body of the int8 tiles (Q8_0 x Q8_0, Q4_1 x Q8_1) and their
 * blocking, written once and included by fast_avx2.c once per instruction set (AVX2;
 * AVX-512 VNNI on 256-bit registers). Not a header of its own: the includer defines
 *   INT8_ATTR        the target attribute of the functions below
 *   INT8_FN(name)    name with the set's suffix (name##_avx2)
 *   INT8_RN          tokens per tile (2 with 16 ymm registers, 4 with 32)
 * and, for that set, how a block's weights and activations become the operands of one
 * integer dot, and that dot:
 *   load_w_SET(wb, wt)            the 32 weights of block wb as bytes (Q4_1: 0..15)
 *   prep_w_SET(raw, wt, &a, &c)   a row's operands from those, once per block
 *   prep_x_SET(raw, wt)           a token's operand from its 32 int8, once per block
 *   pair_SET(a, c, x, wt)         8 int32 lanes, lane l = sum of products 4l .. 4l + 3
 * Every set gives the same exact int32 lanes as the dot's (the products are exact
 * integers), so the float arithmetic that follows, written only here, gives the bits of
 * dot_q8_0_q8_0_avx2 / dot_q4_1_q8_1_avx2 (kernels_avx2.c) for any set, tile shape,
 * batch size or thread count: per block acc = fma(dw * dx, float(p), acc), and for Q4_1
 * summ += mw * sx (a product, then a sum: no FMA, as -std=c11 compiles the dot); the
 * result hsum8(acc) (+ summ).
 *
 * Per block the scale work of all RM x RN (row, token) pairs is done in vectors of 8
 * pairs (block_scales): one f16 conversion for the rows' (d, m), one for the tokens'
 * (d, s), one multiply for 8 products dw * dx (stored; each pair's FMA broadcasts its own
 * from memory: a load, not a shuffle) and one multiply and one add for 8 minimum terms.
 * Per pair, as before, that was a scalar multiply and a register broadcast (Q4_1: and a
 * scalar multiply-add into 8 scalar sums that crowded the accumulators out of the
 * registers). What is left per pair and block is the integer dot, its conversion to
 * float and the FMA: the vector units' work (docs/perf-log.md).
 */

INT8_ATTR static INLINE void INT8_FN(tile)(const uint8_t *w, size_t w_stride, const uint8_t *x, size_t x_stride,
                                           float *y, int64_t y_stride, int64_t nb, const int wt, const int RM,
                                           const int RN) {
    enum { NV = (4 * INT8_RN + 7) / 8 }; /* vectors of 8 (row, token) pairs, at most */
    const size_t wbs = wt == W_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_1);
    const size_t xbs = wt == W_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q8_1);
    __m256 acc[4][INT8_RN]; /* (RM, RN) the dots' float lanes */
    __m256 summ[NV];        /* (RM * RN) the minimum terms, pair i * RN + j in lane (i * RN + j) % 8 */
    /* every loop over RM and RN unrolled: the accumulators then live in registers (rolled,
     * GCC kept them on the stack and each block waited on a store and a reload) */
#pragma GCC unroll 4
    for (int i = 0; i < RM; i++)
#pragma GCC unroll 4
        for (int j = 0; j < RN; j++)
            acc[i][j] = _mm256_setzero_ps();
#pragma GCC unroll 2
    for (int v = 0; v < NV; v++)
        summ[v] = _mm256_setzero_ps();
    _Alignas(32) float ddbuf[2 * 8 * NV]; /* (2, RM * RN rounded up to 8) block_scales' dw * dx */
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb[4], *xb[INT8_RN]; /* block b of each row and token */
#pragma GCC unroll 4
        for (int i = 0; i < RM; i++)
            wb[i] = w + (size_t)i * w_stride + (size_t)b * wbs;
#pragma GCC unroll 4
        for (int j = 0; j < RN; j++)
            xb[j] = x + (size_t)j * x_stride + (size_t)b * xbs;
        /* (RM * RN) dw * dx of pair i * RN + j, in one of two buffers by the block's parity:
         * with one, GCC kept the address of each element in a register, spilled */
        float *dd = ddbuf + 8 * NV * (b & 1);
        block_scales(wb, xb, wt, RM, RN, dd, summ);
        __m256i xv[INT8_RN];
#pragma GCC unroll 4
        for (int j = 0; j < RN; j++)
            xv[j] = INT8_FN(prep_x)(load_x(xb[j], wt), wt);
#pragma GCC unroll 4
        for (int i = 0; i < RM; i++) {
            _mm_prefetch((const char *)wb[i] + PREFETCH_AHEAD, _MM_HINT_T0);
            __m256i a, c;
            INT8_FN(prep_w)(INT8_FN(load_w)(wb[i], wt), wt, &a, &c);
#pragma GCC unroll 4
            for (int j = 0; j < RN; j++) {
                const __m256i p = INT8_FN(pair)(a, c, xv[j], wt);
                acc[i][j] = _mm256_fmadd_ps(_mm256_broadcast_ss(&dd[i * RN + j]), _mm256_cvtepi32_ps(p), acc[i][j]);
            }
        }
    }
    _Alignas(32) float sm[8 * NV]; /* (RM * RN rounded up to 8) summ's lanes */
#pragma GCC unroll 2
    for (int v = 0; v < NV; v++)
        _mm256_store_ps(sm + 8 * v, summ[v]);
    /* unrolled too: rolled, this loop indexes acc, which puts it in memory */
#pragma GCC unroll 4
    for (int i = 0; i < RM; i++)
#pragma GCC unroll 4
        for (int j = 0; j < RN; j++)
            y[j * y_stride + i] = wt == W_Q8_0 ? hsum8(acc[i][j]) : hsum8(acc[i][j]) + sm[i * RN + j];
}

/* The tiles over rows r (4 at a time, then 1) x tokens [t0, t1) (INT8_RN at a time, then
 * fewer): RM constant, so that each tile is compiled for its shape. */
INT8_ATTR static INLINE void INT8_FN(tile_tokens)(const uint8_t *w, size_t w_stride, const uint8_t *x,
                                                  size_t x_stride, float *y, int64_t y_stride, int64_t nb,
                                                  int64_t r, int64_t t0, int64_t t1, const int wt, const int RM) {
#define INT8_AT(rn)                                                                                               \
    INT8_FN(tile)(w + (size_t)r * w_stride, w_stride, x + (size_t)t * x_stride, x_stride, y + t * y_stride + r, \
                  y_stride, nb, wt, RM, rn)
    int64_t t = t0;
    for (; t + INT8_RN <= t1; t += INT8_RN)
        INT8_AT(INT8_RN);
    if (INT8_RN > 2 && t + 2 <= t1) {
        INT8_AT(2);
        t += 2;
    }
    if (t < t1)
        INT8_AT(1);
#undef INT8_AT
}

/* The body of a cpu_gemm_fn: token blocks of TOK_BLOCK (their activations, 35-105 KB,
 * stay in L1/L2) outside, tiles inside (the rows of one call, a chunk of <= ~400 KB, stay
 * in L2 across token blocks): every operand comes from cache, weights from memory once
 * per call. */
INT8_ATTR static INLINE void INT8_FN(int8_gemm)(const uint8_t *w, size_t w_stride, int64_t n_rows, const uint8_t *x,
                                                size_t x_stride, int64_t n_tok, float *y, int64_t y_stride, int64_t n,
                                                const int wt) {
    enum { TOK_BLOCK = 32 };
    _Static_assert(QK4_1 == QK8_0 && QK8_1 == QK8_0, "one block count for both weight types");
    const int64_t nb = n / QK8_0;
    for (int64_t t0 = 0; t0 < n_tok; t0 += TOK_BLOCK) {
        const int64_t t1 = t0 + TOK_BLOCK < n_tok ? t0 + TOK_BLOCK : n_tok;
        int64_t r = 0;
        for (; r + 4 <= n_rows; r += 4)
            INT8_FN(tile_tokens)(w, w_stride, x, x_stride, y, y_stride, nb, r, t0, t1, wt, 4);
        for (; r < n_rows; r++)
            INT8_FN(tile_tokens)(w, w_stride, x, x_stride, y, y_stride, nb, r, t0, t1, wt, 1);
    }
}

INT8_ATTR static void INT8_FN(gemm_q8_0_q8_0)(const uint8_t *w, size_t w_stride, int64_t n_rows, const uint8_t *x,
                                              size_t x_stride, int64_t n_tok, float *y, int64_t y_stride, int64_t n) {
    INT8_FN(int8_gemm)(w, w_stride, n_rows, x, x_stride, n_tok, y, y_stride, n, W_Q8_0);
}

INT8_ATTR static void INT8_FN(gemm_q4_1_q8_1)(const uint8_t *w, size_t w_stride, int64_t n_rows, const uint8_t *x,
                                              size_t x_stride, int64_t n_tok, float *y, int64_t y_stride, int64_t n) {
    INT8_FN(int8_gemm)(w, w_stride, n_rows, x, x_stride, n_tok, y, y_stride, n, W_Q4_1);
}
