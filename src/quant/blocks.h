/*
 * blocks.h - quantized block layouts, pinned by static_assert (bit-compatible with GGML).
 */
#ifndef ER_QUANT_BLOCKS_H
#define ER_QUANT_BLOCKS_H

#include <assert.h>
#include <stdint.h>

/*
 * Q8_0: 32 weights per 34-byte block, value = d * qs[i].
 *
 *   byte  0      2                                    34
 *         +------+------------------------------------+
 *         |  d   | qs[0] qs[1] ...            qs[31]  |
 *         | f16  | int8 x 32                          |
 *         +------+------------------------------------+
 */
#define QK8_0 32
typedef struct block_q8_0 {
    uint16_t d; /* f16 scale */
    int8_t qs[QK8_0];
} block_q8_0;
static_assert(sizeof(block_q8_0) == 2 + QK8_0, "block_q8_0 must be 34 bytes");

#endif
