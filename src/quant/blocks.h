/*
 * blocks.h - quantized block layouts, pinned by static_assert (bit-compatible with GGML).
 *
 * Every multi-byte field is little-endian (the only byte order GGUF defines); f16 is IEEE
 * half. Blocks are packed back to back in a row with no padding, so a block's address is
 * only as aligned as its size allows (2 bytes for most): kernels read them through the
 * struct (alignment 2, or 4 for Q8_K which never comes from a file) or with unaligned
 * vector loads.
 *
 * Two families:
 *   32-element blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1): one f16 scale per block, an f16
 *     minimum for the _1 types. Element j of the block is nibble j of qs for j < 16 (the
 *     low nibble of qs[j]) and the high nibble of qs[j - 16] for j >= 16.
 *   256-element super-blocks (the K types): 8 or 16 sub-blocks, each with its own small
 *     integer scale (and minimum) that an f16 super-scale multiplies.
 */
#ifndef ER_QUANT_BLOCKS_H
#define ER_QUANT_BLOCKS_H

#include <assert.h>
#include <stdint.h>

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256

/*
 * Q4_0: 32 weights in 18 bytes (4.5 bits/weight), value = d * (q - 8), q in 0..15.
 *
 *   byte  0     2                              18
 *         +-----+------------------------------+
 *         |  d  | qs[0] ... qs[15]             |
 *         | f16 | element j: low nibble of     |
 *         |     | qs[j], j+16: high nibble     |
 *         +-----+------------------------------+
 */
typedef struct block_q4_0 {
    uint16_t d; /* f16 scale */
    uint8_t qs[QK4_0 / 2];
} block_q4_0;
static_assert(sizeof(block_q4_0) == 2 + QK4_0 / 2, "block_q4_0 must be 18 bytes");

/*
 * Q4_1: 32 weights in 20 bytes (5 bits/weight), value = d * q + m, q in 0..15.
 *
 *   byte  0     2     4                         20
 *         +-----+-----+-------------------------+
 *         |  d  |  m  | qs[16], nibbles as Q4_0 |
 *         | f16 | f16 |                         |
 *         +-----+-----+-------------------------+
 */
typedef struct block_q4_1 {
    uint16_t d; /* f16 scale */
    uint16_t m; /* f16 minimum (the value of q = 0) */
    uint8_t qs[QK4_1 / 2];
} block_q4_1;
static_assert(sizeof(block_q4_1) == 4 + QK4_1 / 2, "block_q4_1 must be 20 bytes");

/*
 * Q5_0: 32 weights in 22 bytes (5.5 bits/weight), value = d * (q - 16), q in 0..31.
 * The low 4 bits of q are nibbles as in Q4_0; bit 4 of element j is bit j of qh, read as
 * one little-endian u32.
 *
 *   byte  0     2            6                      22
 *         +-----+------------+----------------------+
 *         |  d  | qh (u32)   | qs[16] low nibbles   |
 *         | f16 | bit j = q_j bit 4                 |
 *         +-----+------------+----------------------+
 */
typedef struct block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
} block_q5_0;
static_assert(sizeof(block_q5_0) == 2 + 4 + QK5_0 / 2, "block_q5_0 must be 22 bytes");

/*
 * Q5_1: 32 weights in 24 bytes (6 bits/weight), value = d * q + m, q in 0..31; q's bits
 * as in Q5_0.
 *
 *   byte  0     2     4            8                  24
 *         +-----+-----+------------+------------------+
 *         |  d  |  m  | qh (u32)   | qs[16]           |
 *         +-----+-----+------------+------------------+
 */
typedef struct block_q5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
} block_q5_1;
static_assert(sizeof(block_q5_1) == 4 + 4 + QK5_1 / 2, "block_q5_1 must be 24 bytes");

/*
 * Q8_0: 32 weights per 34-byte block (8.5 bits/weight), value = d * qs[i].
 *
 *   byte  0      2                                    34
 *         +------+------------------------------------+
 *         |  d   | qs[0] qs[1] ...            qs[31]  |
 *         | f16  | int8 x 32                          |
 *         +------+------------------------------------+
 */
typedef struct block_q8_0 {
    uint16_t d; /* f16 scale */
    int8_t qs[QK8_0];
} block_q8_0;
static_assert(sizeof(block_q8_0) == 2 + QK8_0, "block_q8_0 must be 34 bytes");

/*
 * Q8_1: Q8_0 plus s = d * sum(qs) (an activation format: the dot products with Q4_1 and
 * Q5_1, whose values carry an offset m, need sum(x) per block: m * s).
 *
 *   byte  0     2     4                          36
 *         +-----+-----+--------------------------+
 *         |  d  |  s  | qs[32] int8              |
 *         +-----+-----+--------------------------+
 */
typedef struct block_q8_1 {
    uint16_t d; /* f16 scale */
    uint16_t s; /* f16 of d * sum(qs) */
    int8_t qs[QK8_1];
} block_q8_1;
static_assert(sizeof(block_q8_1) == 4 + QK8_1, "block_q8_1 must be 36 bytes");

/*
 * Q2_K: 256 weights in 84 bytes (2.625 bits/weight), 16 sub-blocks of 16.
 * Sub-block j: value = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4), q in 0..3.
 * Element e = 128*h + 32*s + l (h = 0..1 half, s = 0..3 bit pair, l = 0..31) is bits
 * 2s..2s+1 of qs[32*h + l]; its sub-block is e / 16.
 *
 *   byte  0                16                        80    82     84
 *         +----------------+-------------------------+-----+------+
 *         | scales[16]     | qs[64], 4 codes a byte  |  d  | dmin |
 *         | lo 4: scale    |                         | f16 | f16  |
 *         | hi 4: min      |                         |     |      |
 *         +----------------+-------------------------+-----+------+
 */
typedef struct block_q2_K {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    uint16_t d;
    uint16_t dmin;
} block_q2_K;
static_assert(sizeof(block_q2_K) == QK_K / 16 + QK_K / 4 + 4, "block_q2_K must be 84 bytes");

/*
 * Q3_K: 256 weights in 110 bytes (3.4375 bits/weight), 16 sub-blocks of 16.
 * Sub-block j: value = d * (sc_j - 32) * q, sc_j a 6-bit unsigned scale, q in -4..3.
 * Element e = 128*h + 32*s + l: low 2 bits of q + 4 are bits 2s..2s+1 of qs[32*h + l];
 * the third bit is bit 4*h + s of hmask[l], and q = low - (that bit ? 0 : 4).
 * The 16 scales pack into 12 bytes: low nibbles in bytes 0..7 (sc_j in the low nibble of
 * byte j % 8 for j < 8, the high nibble for j >= 8), top 2 bits in bytes 8..11 (bits
 * 2*(j / 4)..+1 of byte 8 + j % 4).
 *
 *   byte  0              32                    96          108   110
 *         +--------------+---------------------+-----------+-----+
 *         | hmask[32]    | qs[64] low 2 bits   | scales[12]|  d  |
 *         +--------------+---------------------+-----------+-----+
 */
typedef struct block_q3_K {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
} block_q3_K;
static_assert(sizeof(block_q3_K) == QK_K / 8 + QK_K / 4 + 12 + 2, "block_q3_K must be 110 bytes");

/*
 * Q4_K: 256 weights in 144 bytes (4.5 bits/weight), 8 sub-blocks of 32.
 * Sub-block j: value = d * sc_j * q - dmin * m_j, q in 0..15, sc_j and m_j 6-bit.
 * Element e = 64*c + 32*hi + l (c = 0..3) is the low (hi = 0) or high (hi = 1) nibble
 * of qs[32*c + l]; its sub-block is e / 32 = 2c + hi.
 * scales[12] (sc, m 6 bits each; see get_scale_min_k4):
 *   bytes 0..3  : sc_0..3 in the low 6 bits, top 2 bits of sc_4..7 above them
 *   bytes 4..7  : m_0..3  in the low 6 bits, top 2 bits of m_4..7 above them
 *   bytes 8..11 : low 4 bits of sc_4..7 (low nibble), of m_4..7 (high nibble)
 *
 *   byte  0     2      4           16                                 144
 *         +-----+------+-----------+----------------------------------+
 *         |  d  | dmin | scales[12]| qs[128] nibbles                  |
 *         +-----+------+-----------+----------------------------------+
 */
typedef struct block_q4_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qs[QK_K / 2];
} block_q4_K;
static_assert(sizeof(block_q4_K) == 4 + 12 + QK_K / 2, "block_q4_K must be 144 bytes");

/*
 * Q5_K: 256 weights in 176 bytes (5.5 bits/weight), as Q4_K with q in 0..31: bit 4 of
 * element e = 64*c + 32*hi + l is bit 2c + hi of qh[l].
 *
 *   byte  0     2      4           16         48                      176
 *         +-----+------+-----------+----------+-----------------------+
 *         |  d  | dmin | scales[12]| qh[32]   | qs[128] low nibbles   |
 *         +-----+------+-----------+----------+-----------------------+
 */
typedef struct block_q5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;
static_assert(sizeof(block_q5_K) == 4 + 12 + QK_K / 8 + QK_K / 2, "block_q5_K must be 176 bytes");

/*
 * Q6_K: 256 weights in 210 bytes (6.5625 bits/weight), 16 sub-blocks of 16.
 * Sub-block j: value = d * scales[j] * (q - 32), scales int8, q in 0..63.
 * Element e = 128*h + 32*s + l (s = 0..3): the low 4 bits of q are the low (s < 2) or
 * high (s >= 2) nibble of ql[64*h + 32*(s & 1) + l]; the top 2 bits are bits 2s..2s+1 of
 * qh[32*h + l].
 *
 *   byte  0                 128           192          208   210
 *         +-----------------+-------------+------------+-----+
 *         | ql[128] low 4   | qh[64] hi 2 | scales[16] |  d  |
 *         +-----------------+-------------+------------+-----+
 */
typedef struct block_q6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
} block_q6_K;
static_assert(sizeof(block_q6_K) == QK_K / 2 + QK_K / 4 + QK_K / 16 + 2, "block_q6_K must be 210 bytes");

/*
 * Q8_K: 256 activations in 292 bytes, value = d * qs[i]; bsums[k] = sum of qs[16k..16k+15]
 * (the K types' minimums and offsets multiply these sums). An activation format only:
 * d is a full f32.
 *
 *   byte  0     4                               260                 292
 *         +-----+-------------------------------+-------------------+
 *         |  d  | qs[256] int8                  | bsums[16] int16   |
 *         | f32 |                               |                   |
 *         +-----+-------------------------------+-------------------+
 */
typedef struct block_q8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
} block_q8_K;
static_assert(sizeof(block_q8_K) == 4 + QK_K + QK_K / 8, "block_q8_K must be 292 bytes");

/* The 6-bit scale and minimum of sub-block j (0..7) of a Q4_K/Q5_K block. */
static inline void get_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* The 6-bit scale (0..63, meaning sc - 32) of sub-block j (0..15) of a Q3_K block. */
static inline int q3_K_scale(const uint8_t *s, int j) {
    const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return lo | (hi << 4);
}

#endif
