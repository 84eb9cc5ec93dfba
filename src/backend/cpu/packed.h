/*
 * packed.h - the fast path's copy of the weights it multiplies fastest with 8 rows in the
 * 8 lanes of a vector (Q4_0, Q4_1, Q8_0, Q2_K..Q6_K where the CPU has AVX-512 VNNI; all
 * but Q8_0 where it has AVX2): shared by every fast context of one model.
 *
 * Why: in the row-major tile (fast_int8_tile.h) each (row, token) pair of a block ends as
 * 8 int32 lanes, each converted to float and multiplied in, 3 vector instructions per 32
 * products. With the rows of a block interleaved so that int32 lane r of a vector is row
 * r, one vpdpbusd with one token's 4 activations broadcast adds 4 products to each of 8
 * rows: a block of 8 rows x 1 token is 8 vpdpbusd, then one conversion and one or two
 * FMAs for all 8 rows (about 13 instructions per 256 products, against 24).
 *
 * Layout of a weight of n_out rows (a multiple of 8) and nb = n_in / 32 blocks (Q2_K..Q6_K:
 * n_in / 256): (n_out / 8, nb) blocks of 8 rows, group g = rows 8g .. 8g + 7, its
 * blocks in k order. The bytes are those of the rows' blocks, moved (Q4_K's and Q5_K's
 * scales rearranged); a group is 8 row_size bytes, so row r0 (a multiple of 8) starts at
 * packed + r0 * row_size, as in the file.
 *
 *   block_q4_1x8   +--------+--------+-----------------------------------------------+
 *   (160 bytes)    | d[8]   | m[8]   | qs[4][8][4]: chunk c, row r, byte i =         |
 *                  | f16    | f16    |   row r's qs[4c + i] (low nibble: element     |
 *                  |        |        |   4c + i, high nibble: element 16 + 4c + i)   |
 *                  +--------+--------+-----------------------------------------------+
 *   block_q4_0x8   +--------+-------------------------------------------------------+
 *   (144 bytes)    | d[8]   | qs[4][8][4]: as block_q4_1x8's                        |
 *                  +--------+-------------------------------------------------------+
 *   block_q8_0x8   +--------+------------------------------------------------------+
 *   (272 bytes)    | d[8]   | qs[8][8][4]: chunk c, row r, byte i = row r's        |
 *                  | f16    |   qs[4c + i] (element 4c + i)                        |
 *                  +--------+------------------------------------------------------+
 *   block_q4_Kx8   +------+---------+---------+---------+------------------------------+
 *   (1,152 bytes:  | d[8] | dmin[8] | scl[8]  | sch[4]  | qs[4][8][8][4]: pair p,      |
 *   a super-block  | f16  | f16     | [8]     | [8]     |   chunk c, row r, byte i =   |
 *   of 256)        |      |         |         |         |   row r's qs[32p + 4c + i]   |
 *                  +------+---------+---------+---------+------------------------------+
 *     scl[j][r]: the low 4 bits of row r's sub-block j scale | those of its minimum << 4;
 *     sch[p][r]: the high 2 bits of sub-block 2p's scale, of its minimum, of 2p + 1's
 *     scale and minimum, in bits 0-1, 2-3, 4-5, 6-7 (the file's 12 bytes per row, moved
 *     so that 16 rows' 6-bit values come out with a few vector operations)
 *   block_q5_Kx8   +-------------------------------+-------------------------------------+
 *   (1,408 bytes)  | a block_q4_Kx8 of the rows'   | qh[8][8][4]: chunk c, row r, byte i |
 *                  | scales and low 4 bits         |   = row r's qh[4c + i] (bit j: bit  |
 *                  |                               |   4 of sub-block j's element 4c + i)|
 *                  +-------------------------------+-------------------------------------+
 *   block_q2_Kx8   +------+---------+----------------------------+---------------------+
 *   (672 bytes)    | d[8] | dmin[8] | sc[16][8]: sub-block j,    | qs[2][8][8][4]: as  |
 *                  | f16  | f16     |   row r = row r's          |   block_q3_Kx8's    |
 *                  |      |         |   scales[j] (scale, min)   |                     |
 *                  +------+---------+----------------------------+---------------------+
 *   block_q3_Kx8   +------+---------+---------+---------------------+------------------+
 *   (880 bytes)    | d[8] | scl[8]  | sch[4]  | qs[2][8][8][4]:     | hm[8][8][4]:     |
 *                  | f16  | [8]     | [8]     |   half h, chunk c,  |   chunk c, row r,|
 *                  |      |         |         |   row r, byte i =   |   byte i = row   |
 *                  |      |         |         |   qs[32h + 4c + i]  |   r's hmask[4c+i]|
 *                  +------+---------+---------+---------------------+------------------+
 *     scl[k][r]: the low 4 bits of row r's scales 2k | 2k + 1 << 4; sch[q][r]: the high 2
 *     bits of its scales 4q .. 4q + 3, in bits 0-1 .. 6-7
 *   block_q6_Kx8   +------+----------+----------------------------+--------------------+
 *   (1,680 bytes)  | d[8] | sc[16]   | ql[2][2][8][8][4]: half h, | qh[2][8][8][4]:    |
 *                  | f16  | [8] int8 |   part a, chunk c, row r,  |   half h, chunk c, |
 *                  |      |          |   byte i = row r's         |   row r, byte i =  |
 *                  |      |          |   ql[64h + 32a + 4c + i]   |   qh[32h + 4c + i] |
 *                  +------+----------+----------------------------+--------------------+
 *
 * Q4_1, Q4_0: chunk c's low nibbles are elements 4c .. 4c + 3 of the 8 rows (lane r = row
 * r), its high nibbles 16 + 4c .. 16 + 4c + 3; a token's activations (Q8_1, Q8_0) for
 * them are the 4 bytes at 4c resp. 16 + 4c of its block, broadcast: unsigned x signed, as
 * vpdpbusd takes them. Q4_0's weight is q - 8: a block's sums start at -8 * sum(x), the
 * token's, computed once per call for every row. Q8_0 x Q8_0 is signed x signed: the activations are quantized as Q8_0 and stored
 * unsigned, x + 128 (cpu_packed_kernels: the top bit flipped), and a row's 128 * sum(w)
 * per block, computed once per block for all tokens of a tile, is where its sums start.
 *
 * Q4_K x Q8_K: pair p's chunk c holds, in its low nibbles, elements 64p + 4c .. + 3 of
 * sub-block 2p, in its high ones 64p + 32 + 4c .. + 3 of sub-block 2p + 1 (the file's
 * order); each sub-block's int32 sum is multiplied by its 6-bit scale, and the minimums
 * take the token's sums of 32 (Q8_K's bsums, by pairs) times the rows' 6-bit minimums.
 * Q5_K x Q8_K: as Q4_K, each nibble with its fifth bit from qh (values 0..31).
 * Q2_K x Q8_K: as Q3_K's qs (codes q, 0..3, no third bit); its minimums as Q4_K's, by
 * sub-blocks of 16.
 * Q3_K x Q8_K: qs's chunk c of half h holds in bits 2p, 2p + 1 the low 2 bits of elements
 * 128h + 32p + 4c .. + 3, hmask's chunk c in bit 4h + p their third (the file's order);
 * the codes u = q + 4 (0..7) are multiplied unsigned, the 4 taken back as Q6_K's 32.
 * Q6_K x Q8_K: chunk c of half h and part a holds the low 4 bits of elements 128h + 32a +
 * 4c .. + 3 (low nibbles) and 128h + 64 + 32a + 4c .. + 3 (high ones), qh's chunk their 2
 * high bits (the file's order); the codes u = q + 32 (0..63) are multiplied unsigned, and
 * the token's sums of 16 times the rows' scales take the 32 back.
 *
 * The result, per (row, token): per block the exact int32 sum s of its 32 products, then
 *   Q4_1: acc = fma(dw * dx, float(s), acc); acc = fma(mw, sx, acc)    (blocks in order)
 *   Q8_0, Q4_0: acc = fma(dw * dx, float(s), acc)
 * and per super-block, Q4_K and Q5_K: the exact int32 sums is = sum_j sc_j * s_j and ms =
 * sum_j m_j * bsum_j, then acc = fma(d * dx, float(is), acc); acc = fnma(dmin * dx,
 * float(ms), acc);
 * Q3_K, Q6_K: is = sum_j sc_j * s_j - (4 resp. 32) sum_j sc_j * bsum_j (sub-blocks of
 * 16; Q3_K's sc_j its 6 bits - 32), then acc = fma(d * dx, float(is), acc); Q2_K: as
 * Q4_K's, by sub-blocks of 16.
 * (dw, mw: the row's f16 d and m; dx, sx: the token's d and s). Every tile shape computes
 * a lane this way, so a row's value does not depend on the batch or the tile (batch
 * invariance); it is not the row-major vec_dot's order (8 lanes per block summed at the
 * end), so where the packed kernel runs it runs for every token count, 1 included.
 */
#ifndef ER_BACKEND_CPU_PACKED_H
#define ER_BACKEND_CPU_PACKED_H

#include <assert.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/fast.h"
#include "backend/cpu/kernels.h"
#include "quant/blocks.h"

typedef struct block_q4_1x8 {
    uint16_t d[8];       /* f16 scales of rows 0..7 */
    uint16_t m[8];       /* f16 minimums */
    uint8_t qs[4][8][4]; /* (chunk, row, byte) the rows' nibbles, as drawn above */
} block_q4_1x8;
static_assert(sizeof(block_q4_1x8) == 8 * sizeof(block_q4_1), "block_q4_1x8 must be 8 Q4_1 blocks");

typedef struct block_q4_0x8 {
    uint16_t d[8];       /* f16 scales of rows 0..7 */
    uint8_t qs[4][8][4]; /* (chunk, row, byte) the rows' nibbles, as block_q4_1x8's */
} block_q4_0x8;
static_assert(sizeof(block_q4_0x8) == 8 * sizeof(block_q4_0), "block_q4_0x8 must be 8 Q4_0 blocks");

typedef struct block_q8_0x8 {
    uint16_t d[8];       /* f16 scales of rows 0..7 */
    int8_t qs[8][8][4];  /* (chunk, row, byte) the rows' weights, as drawn above */
} block_q8_0x8;
static_assert(sizeof(block_q8_0x8) == 8 * sizeof(block_q8_0), "block_q8_0x8 must be 8 Q8_0 blocks");

typedef struct block_q4_Kx8 {
    uint16_t d[8];          /* f16 super-block scales of rows 0..7 */
    uint16_t dmin[8];       /* f16 scales of their minimums */
    uint8_t scl[8][8];      /* (sub-block, row) low 4 bits of the scale | of the minimum << 4 */
    uint8_t sch[4][8];      /* (sub-block pair, row) the high 2 bits, as drawn above */
    uint8_t qs[4][8][8][4]; /* (pair, chunk, row, byte) the rows' nibbles, as drawn above */
} block_q4_Kx8;
static_assert(sizeof(block_q4_Kx8) == 8 * sizeof(block_q4_K), "block_q4_Kx8 must be 8 Q4_K blocks");

typedef struct block_q5_Kx8 {
    block_q4_Kx8 q4;     /* the scales, minimums and low 4 bits, as Q4_K's */
    uint8_t qh[8][8][4]; /* (chunk, row, byte) row r's qh[4c + i], as drawn above */
} block_q5_Kx8;
static_assert(sizeof(block_q5_Kx8) == 8 * sizeof(block_q5_K), "block_q5_Kx8 must be 8 Q5_K blocks");

typedef struct block_q2_Kx8 {
    uint16_t d[8];          /* f16 super-block scales of rows 0..7 */
    uint16_t dmin[8];       /* f16 scales of their minimums */
    uint8_t sc[16][8];      /* (sub-block, row) the 4-bit scale | the 4-bit minimum << 4 */
    uint8_t qs[2][8][8][4]; /* (half, chunk, row, byte) the 2-bit codes, as Q3_K's */
} block_q2_Kx8;
static_assert(sizeof(block_q2_Kx8) == 8 * sizeof(block_q2_K), "block_q2_Kx8 must be 8 Q2_K blocks");

typedef struct block_q3_Kx8 {
    uint16_t d[8];          /* f16 super-block scales of rows 0..7 */
    uint8_t scl[8][8];      /* (sub-block pair, row) low 4 bits of scales 2k and 2k + 1 */
    uint8_t sch[4][8];      /* (sub-block quad, row) high 2 bits of scales 4q .. 4q + 3 */
    uint8_t qs[2][8][8][4]; /* (half, chunk, row, byte) low 2 bits, as drawn above */
    uint8_t hm[8][8][4];    /* (chunk, row, byte) the third bits, as drawn above */
} block_q3_Kx8;
static_assert(sizeof(block_q3_Kx8) == 8 * sizeof(block_q3_K), "block_q3_Kx8 must be 8 Q3_K blocks");

typedef struct block_q6_Kx8 {
    uint16_t d[8];             /* f16 super-block scales of rows 0..7 */
    int8_t sc[16][8];          /* (sub-block of 16, row) the rows' 8-bit scales */
    uint8_t ql[2][2][8][8][4]; /* (half, part, chunk, row, byte) low 4 bits, as drawn above */
    uint8_t qh[2][8][8][4];    /* (half, chunk, row, byte) high 2 bits, as drawn above */
} block_q6_Kx8;
static_assert(sizeof(block_q6_Kx8) == 8 * sizeof(block_q6_K), "block_q6_Kx8 must be 8 Q6_K blocks");

/* dst (n_out / 8, n_in / block size) packed blocks = src (n_out, row_size) rows of `type`
 * (Q4_0, Q4_1, Q8_0 or Q2_K..Q6_K), n_out a multiple of 8. */
void cpu_pack_rows(uint32_t type, const uint8_t *src, size_t row_size, int64_t n_out, int64_t n_in, uint8_t *dst);

/* The activations' format and quantizer of the packed kernel of `type`, or NULL when it
 * has none (vec_dot is NULL: every product goes through cpu_gemm_packed). */
const cpu_kernels *cpu_packed_kernels(uint32_t type);

/* The packed kernel of `type` on this CPU, or NULL: y[t * y_stride + r] for r < n_rows (a
 * multiple of 8), t < n_tok, w the packed rows from row 0 of the call, x the tokens' rows
 * in cpu_packed_kernels' format, x_stride bytes apart, n elements each (w_stride: the
 * weight's row_size). */
cpu_gemm_fn cpu_gemm_packed(uint32_t type);
/* The packed kernels of each instruction set, NULL where this CPU lacks it or the type has
 * none there: AVX-512 VNNI (packed_vnni.c) all the packable types, AVX2 (packed_avx2.c)
 * all but Q8_0. cpu_gemm_packed is the first of them; tests compare the two. */
cpu_gemm_fn cpu_gemm_packed_vnni(uint32_t type);
cpu_gemm_fn cpu_gemm_packed_avx2(uint32_t type);

/* The model's view with its packable weights packed (er_weight.packed set), shared by the
 * fast contexts of m: the first call packs, each call takes a reference that
 * cpu_packed_put gives back (the last one frees the copy). *out = m itself when nothing
 * is packed here (no packed kernel for any of its weights' types on this CPU, or
 * EDGERUNNER_CPU_PACK=0). */
er_status cpu_packed_get(const model_view *m, const model_view **out);
/* Gives back a view cpu_packed_get returned (a model's own view: nothing to do). */
void cpu_packed_put(const model_view *view);

#endif
