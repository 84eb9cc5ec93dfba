/*
 * packed.h - the fast path's copy of the weights it multiplies fastest with 8 rows in the
 * 8 lanes of a vector (Q4_0, Q4_1 and Q8_0, where the CPU has AVX-512 VNNI): shared by
 * every fast context of one model.
 *
 * Why: in the row-major tile (fast_int8_tile.h) each (row, token) pair of a block ends as
 * 8 int32 lanes, each converted to float and multiplied in, 3 vector instructions per 32
 * products. With the rows of a block interleaved so that int32 lane r of a vector is row
 * r, one vpdpbusd with one token's 4 activations broadcast adds 4 products to each of 8
 * rows: a block of 8 rows x 1 token is 8 vpdpbusd, then one conversion and one or two
 * FMAs for all 8 rows (about 13 instructions per 256 products, against 24).
 *
 * Layout of a weight of n_out rows (a multiple of 8) and nb = n_in / 32 blocks: (n_out /
 * 8, nb) blocks of 8 rows, group g = rows 8g .. 8g + 7, its blocks in k order. The bytes
 * are those of the rows' blocks, moved; a group is 8 row_size bytes, so row r0 (a
 * multiple of 8) starts at packed + r0 * row_size, as in the file.
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
 *
 * Q4_1, Q4_0: chunk c's low nibbles are elements 4c .. 4c + 3 of the 8 rows (lane r = row
 * r), its high nibbles 16 + 4c .. 16 + 4c + 3; a token's activations (Q8_1, Q8_0) for
 * them are the 4 bytes at 4c resp. 16 + 4c of its block, broadcast: unsigned x signed, as
 * vpdpbusd takes them. Q4_0's weight is q - 8: a block's sums start at -8 * sum(x), the
 * token's, computed once per call for every row. Q8_0 x Q8_0 is signed x signed: the activations are quantized as Q8_0 and stored
 * unsigned, x + 128 (cpu_packed_kernels: the top bit flipped), and a row's 128 * sum(w)
 * per block, computed once per block for all tokens of a tile, is where its sums start.
 *
 * The result, per (row, token): per block the exact int32 sum s of its 32 products, then
 *   Q4_1: acc = fma(dw * dx, float(s), acc); acc = fma(mw, sx, acc)    (blocks in order)
 *   Q8_0, Q4_0: acc = fma(dw * dx, float(s), acc)
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

/* dst (n_out / 8, n_in / 32) packed blocks = src (n_out, row_size) rows of `type` (Q4_0,
 * Q4_1 or Q8_0), n_out a multiple of 8. */
void cpu_pack_rows(uint32_t type, const uint8_t *src, size_t row_size, int64_t n_out, int64_t n_in, uint8_t *dst);

/* The activations' format and quantizer of the packed kernel of `type`, or NULL when it
 * has none (vec_dot is NULL: every product goes through cpu_gemm_packed). */
const cpu_kernels *cpu_packed_kernels(uint32_t type);

/* The packed kernel of `type` on this CPU, or NULL: y[t * y_stride + r] for r < n_rows (a
 * multiple of 8), t < n_tok, w the packed rows from row 0 of the call, x the tokens' rows
 * in cpu_packed_kernels' format, x_stride bytes apart, n elements each (w_stride: the
 * weight's row_size). */
cpu_gemm_fn cpu_gemm_packed(uint32_t type);

/* The model's view with its packable weights packed (er_weight.packed set), shared by the
 * fast contexts of m: the first call packs, each call takes a reference that
 * cpu_packed_put gives back (the last one frees the copy). *out = m itself when nothing
 * is packed here (no AVX-512 VNNI, no Q4_0, Q4_1 or Q8_0 weight, or EDGERUNNER_CPU_PACK=0). */
er_status cpu_packed_get(const model_view *m, const model_view **out);
/* Gives back a view cpu_packed_get returned (a model's own view: nothing to do). */
void cpu_packed_put(const model_view *view);

#endif
