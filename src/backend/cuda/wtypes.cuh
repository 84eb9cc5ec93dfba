/*
 * wtypes.cuh - the weight types of the CUDA backend, described in one place: the file
 * type each comes from, the layout the upload gives it on the device, how the kernels
 * read that layout, and the constants they are tuned by per type. The rest follows from
 * the list CUDA_WTYPES: the enum, the er_type mapping, the bytes of rows and scales, the
 * upload (copy or repack), every kernel file's dispatch (CUDA_WTYPE_SWITCH: a switch over
 * the types, each case a template instance) and the unit test's loops. No other file of
 * the backend names a type in its code.
 *
 * Adding a type (say Q4_K), in this file and its test:
 *   1. Its line at the end of CUDA_WTYPES: er_type, block, the device layout's quant and
 *      scale bytes, RAW (the file's block bytes, when the upload repacks them), HEAD_ROWS.
 *      At the end: the enum values are the kernels' template arguments, and renumbering a
 *      type renames its kernels.
 *   2. Its layout in the drawing of the device part, and its branch in each of the six
 *      functions there: chunk_dot and chunk_scale (decode matvecs, output head),
 *      elem (rows of odd lengths, embeddings), gemm_load and gemm_half (prefill GEMM),
 *      repack_block (upload, when RAW is not 0). Then count it in the static_assert
 *      before them, which stops the build until it is.
 *   3. tests/unit/test_cuda.c: encode_<name>, one random element in the device layout
 *      (the build stops without it); the test then runs every kernel on the new type
 *      against doubles on the host.
 *
 * The part before __CUDACC__ is plain C, which the host files (upload.c, step.c) and the
 * tests see through kernels.h.
 */
#ifndef ER_BACKEND_CUDA_WTYPES_CUH
#define ER_BACKEND_CUDA_WTYPES_CUH

#include <stddef.h>
#include <stdint.h>

#include "quant/types.h"

/* One line per type: X(A, NAME, name, ER_TYPE, BLK, QE, QB, SE, SB, RAW, HEAD_ROWS)
 *   A           passed through to X as it is (CUDA_WTYPE_SWITCH passes its CALL)
 *   NAME, name  CUDA_W_<NAME>, "<NAME>"; <name> in function names
 *   ER_TYPE     the file's type (quant/types.h) that uploads to this one
 *   BLK         elements per block of the file type: rows are whole blocks (1: any length)
 *   QE, QB      the device layout's quants: QB bytes per QE elements, rows of n_in / QE * QB
 *               bytes, 16-byte chunks of 16 QE / QB elements (CHUNK_ELEMS)
 *   SE, SB      and its scales, beside them: SB bytes per SE elements, rows of n_in / SE * SB
 *               bytes (SB = 0: none, SE = 1). A K-quant's super-block of 256 elements with 8
 *               sub-block scales is SE = 256 with SB all its scale bytes, or SE = 32 with SB
 *               one sub-block's: chunk_scale and elem read them as the type lays them out.
 *               SB is even: the kernels address scales in f16 units.
 *   RAW         bytes of a file block when the upload repacks the file's blocks on the device
 *               (repack_block, one thread per block); 0: the file's rows are the device layout
 *               and are copied as they are
 *   HEAD_ROWS   rows per warp and pass of the output head (matvec.cu, k_head, which explains
 *               the choice): Q4_0's rows of 1,024 are one 16-byte chunk per lane, so it takes 3
 *               (the Qwen3-0.6B Q4_0 step on the H200: 517 us, against 520 with 2) */
#define CUDA_WTYPES(X, A)                                      \
    /* NAME  name  ER_TYPE      BLK QE QB SE SB RAW HEAD_ROWS */ \
    X(A, F32,  f32,  ER_TYPE_F32,    1, 1, 4,  1, 0,   0,  2)  \
    X(A, F16,  f16,  ER_TYPE_F16,    1, 1, 2,  1, 0,   0,  2)  \
    X(A, BF16, bf16, ER_TYPE_BF16,   1, 1, 2,  1, 0,   0,  2)  \
    X(A, Q8_0, q8_0, ER_TYPE_Q8_0,  32, 1, 1, 32, 2,  34,  2)  \
    X(A, Q4_0, q4_0, ER_TYPE_Q4_0,  32, 2, 1, 32, 2,  18,  3)  \
    X(A, Q4_K, q4_k, ER_TYPE_Q4_K, 256, 2, 1, 256, 16, 144, 2) \
    X(A, Q6_K, q6_k, ER_TYPE_Q6_K, 256, 2, 1, 256, 84, 210, 2) \
    X(A, Q5_K, q5_k, ER_TYPE_Q5_K, 256, 2, 1, 256, 48, 176, 2) \
    X(A, Q4_1, q4_1, ER_TYPE_Q4_1,  32, 2, 1, 32, 4,  20,  2)  \
    X(A, Q5_0, q5_0, ER_TYPE_Q5_0,  32, 2, 1, 32, 6,  22,  2)  \
    X(A, Q5_1, q5_1, ER_TYPE_Q5_1,  32, 2, 1, 32, 8,  24,  2)  \
    X(A, Q2_K, q2_k, ER_TYPE_Q2_K, 256, 4, 1, 256, 20, 84,  2) \
    X(A, Q3_K, q3_k, ER_TYPE_Q3_K, 256, 4, 1, 256, 48, 110, 2)

enum cuda_wtype {
#define CUDA_WT_ENUM_(A, NAME, ...) CUDA_W_##NAME,
    CUDA_WTYPES(CUDA_WT_ENUM_, _)
#undef CUDA_WT_ENUM_
    CUDA_W_COUNT
};

/* The names, " F32 F16 ...", for messages. */
#define CUDA_WT_NAMES_(A, NAME, ...) " " #NAME
#define CUDA_WTYPE_NAMES CUDA_WTYPES(CUDA_WT_NAMES_, _)

/* The functions below are constant expressions in the kernel files (template arguments,
 * array sizes), and fold to the plain arithmetic of one type wherever the type is known. */
#ifdef __CUDACC__
#define CUDA_WT_FN static constexpr __host__ __device__ __forceinline__
#else
#define CUDA_WT_FN static inline
#endif

/* A column of the list by type id, from the column's selector; 0 (NULL) outside the list. */
#define CUDA_WT_GET_(COL, NAME, ...) \
    case CUDA_W_##NAME:              \
        return COL(NAME, __VA_ARGS__);
#define CUDA_WT_COLUMN_(fn, T, COL)                      \
    CUDA_WT_FN T fn(int type) {                          \
        switch (type) { CUDA_WTYPES(CUDA_WT_GET_, COL) } \
        return 0;                                        \
    }
#define CUDA_WT_NAME_(NAME, ...) #NAME
#define CUDA_WT_BLK_(NAME, name, ER_TYPE, BLK, ...) BLK
#define CUDA_WT_QE_(NAME, name, ER_TYPE, BLK, QE, ...) QE
#define CUDA_WT_QB_(NAME, name, ER_TYPE, BLK, QE, QB, ...) QB
#define CUDA_WT_SE_(NAME, name, ER_TYPE, BLK, QE, QB, SE, ...) SE
#define CUDA_WT_SB_(NAME, name, ER_TYPE, BLK, QE, QB, SE, SB, ...) SB
#define CUDA_WT_RAW_(NAME, name, ER_TYPE, BLK, QE, QB, SE, SB, RAW, ...) RAW
#define CUDA_WT_HR_(NAME, name, ER_TYPE, BLK, QE, QB, SE, SB, RAW, HR) HR
CUDA_WT_COLUMN_(cuda_wtype_name, const char *, CUDA_WT_NAME_)
CUDA_WT_COLUMN_(cuda_wtype_block, int, CUDA_WT_BLK_)
CUDA_WT_COLUMN_(cuda_wtype_quant_elems, int, CUDA_WT_QE_)
CUDA_WT_COLUMN_(cuda_wtype_quant_bytes, int, CUDA_WT_QB_)
CUDA_WT_COLUMN_(cuda_wtype_scale_elems, int, CUDA_WT_SE_)
CUDA_WT_COLUMN_(cuda_wtype_scale_bytes, int, CUDA_WT_SB_)
CUDA_WT_COLUMN_(cuda_wtype_repack_bytes, int, CUDA_WT_RAW_)
CUDA_WT_COLUMN_(cuda_wtype_head_rows, int, CUDA_WT_HR_)

/* The device type of a file type, or -1: one the CUDA backend does not run. */
CUDA_WT_FN int cuda_wtype_from_er(uint32_t er_type) {
#define CUDA_WT_FROM_ER_(A, NAME, name, ER_TYPE, ...) \
    case ER_TYPE:                                     \
        return CUDA_W_##NAME;
    switch (er_type) { CUDA_WTYPES(CUDA_WT_FROM_ER_, _) }
#undef CUDA_WT_FROM_ER_
    return -1;
}

/* Bytes of the quants of one row of n_in elements in the device layout. */
CUDA_WT_FN size_t cuda_row_bytes(int type, int64_t n_in) {
#define CUDA_WT_ROW_(A, NAME, name, ER_TYPE, BLK, QE, QB, ...) \
    case CUDA_W_##NAME:                                        \
        return (size_t)n_in / (QE) * (QB);
    switch (type) { CUDA_WTYPES(CUDA_WT_ROW_, _) }
#undef CUDA_WT_ROW_
    return 0;
}

/* Bytes of the scales of one row (0 for a type without scales). */
CUDA_WT_FN size_t cuda_scale_row_bytes(int type, int64_t n_in) {
#define CUDA_WT_SCALE_ROW_(A, NAME, name, ER_TYPE, BLK, QE, QB, SE, SB, ...) \
    case CUDA_W_##NAME:                                                      \
        return (size_t)(n_in / (SE)) * (SB);
    switch (type) { CUDA_WTYPES(CUDA_WT_SCALE_ROW_, _) }
#undef CUDA_WT_SCALE_ROW_
    return 0;
}

/* Device bytes of an (n_out, n_in) matrix: its quants and its scales. */
CUDA_WT_FN size_t cuda_matrix_bytes(int type, int64_t n_out, int64_t n_in) {
    return (size_t)n_out * (cuda_row_bytes(type, n_in) + cuda_scale_row_bytes(type, n_in));
}

/* What the kernels assume of every layout. */
#ifdef __cplusplus
#define CUDA_WT_ASSERT_ static_assert
#else
#define CUDA_WT_ASSERT_ _Static_assert
#endif
#define CUDA_WT_CHECK_(A, NAME, name, ER_TYPE, BLK, QE, QB, SE, SB, ...)                                        \
    CUDA_WT_ASSERT_(16 * (QE) % (QB) == 0 && (BLK) % (QE) == 0,                                               \
                    #NAME ": 16-byte chunks hold whole elements, blocks whole quant units");                  \
    CUDA_WT_ASSERT_((SB) == 0 ? (SE) == 1 : (SB) % 2 == 0 && (BLK) % (SE) == 0 && (SE) % (QE) == 0,           \
                    #NAME ": scales in f16 units, for whole quant units of a block (no scales: SE = 1)");
CUDA_WTYPES(CUDA_WT_CHECK_, _)
#undef CUDA_WT_CHECK_

/* The dispatch: switch (type) { case CUDA_W_<NAME>: CALL(CUDA_W_<NAME>); ... } over every
 * type, CALL(WT) a statement that returns or breaks, with WT a constant for a template:
 *     #define CALL(WT) return launch<WT>(w, x, y)
 *     CUDA_WTYPE_SWITCH(w->type, CALL);
 *     #undef CALL
 *     return cudaErrorInvalidValue;  (an id outside the list) */
#define CUDA_WT_CASE_(CALL, NAME, ...) \
    case CUDA_W_##NAME:                \
        CALL(CUDA_W_##NAME);
#define CUDA_WTYPE_SWITCH(type, CALL) \
    switch (type) { CUDA_WTYPES(CUDA_WT_CASE_, CALL) }

/* The types whose batch GEMMs run on the int8 tensor cores (mmq.cu: a lane's 8 bytes of a
 * row's block of 32, made signed int8 codes by one XOR a word for Q8_0, the nibbles of
 * Q4_0 and the 4-bit planes of the K types by word_codes), and the switch over them
 * alone. Q8_0 and Q4_0 scale a block's integer once; Q4_K and Q5_K add their offset times
 * the input's sum, Q6_K scales two integers (mma_block_k). */
CUDA_WT_FN int cuda_wtype_int8_mma(int type) {
    return type == CUDA_W_Q8_0 || type == CUDA_W_Q4_0 || type == CUDA_W_Q4_K || type == CUDA_W_Q5_K ||
           type == CUDA_W_Q6_K;
}
#define CUDA_WTYPE_SWITCH_INT8(type, CALL) \
    switch (type) {                        \
        CUDA_WT_CASE_(CALL, Q8_0)          \
        CUDA_WT_CASE_(CALL, Q4_0)          \
        CUDA_WT_CASE_(CALL, Q4_K)          \
        CUDA_WT_CASE_(CALL, Q5_K)          \
        CUDA_WT_CASE_(CALL, Q6_K)          \
    }

/* The types whose decode matvecs (matvec.cu) multiply their quants by the input
 * quantized to int8 per block of 32 (dp4a, chunk_isum below), as llama.cpp's MMVQ: Q4_0,
 * whose f32 dot was bound by its instructions (nibbles to floats), and Q8_0. Q8_0's f32
 * dot took ~72 instructions a chunk of each row, about half of what a multiprocessor
 * can issue while its matvecs stream at 3.6 TB/s; once the loads were faster, int8 paid
 * (H200, sixteenth session, docs/perf-log.md): Qwen3-8B decode 371.4 -> 383.2 tok/s,
 * 0.6B (the head alone streams) 1,681 -> 1,702; the layer's matvecs (gpu_matvec_bench)
 * 8B 65.2 -> 64.4 us, 4B 47.7 -> 45.7, 1.7B 28.2 -> 26.6. (Before, at 72.2 against
 * 72.4 us, it was not worth its rounding.)
 * Q4_K, Q5_K and Q6_K too (the types of the _K_M files people run), through chunk_qsum: a
 * sub-block's scale and offset, or two sub-blocks' scales, applied to the integer sums;
 * in f32 their plane decode (word_vals) took as many instructions as Q4_0's. Measured
 * on an H100 (docs/perf-log.md, thirty-third session; f32 -> int8, alternated, random
 * Qwen3 with llama.cpp's _K_M recipes): decode (edgerunner bench -n 128) 0.6B Q4_K_M
 * 1,518-1,520 -> 1,862-1,863 tok/s, Q5_K_M 1,474-1,475 -> 1,762-1,767, Q6_K 1,544-1,549
 * -> 1,820-1,831, 8B Q4_K_M 339-341 -> 410; gpu_matvec_bench's 8B layer Q4_K 66.9 ->
 * 53.1 us, Q6_K 80.1 -> 71.8. */
CUDA_WT_FN int cuda_wtype_int8_dot(int type) {
    return type == CUDA_W_Q4_0 || type == CUDA_W_Q8_0 || type == CUDA_W_Q4_K || type == CUDA_W_Q5_K ||
           type == CUDA_W_Q6_K;
}
/* Of those, the ones whose chunk has one scale and no offset (chunk_isum): the streaming
 * matvec's scales loaded before its wait (stream_chunks) keep only that scale. */
CUDA_WT_FN int cuda_wtype_int8_one_scale(int type) { return type == CUDA_W_Q4_0 || type == CUDA_W_Q8_0; }
/* Of those, the ones whose chunk adds an offset (d q + m: Q4_K, Q5_K), m times the sum of
 * the input's quants of the block: the batch GEMM stages that sum with the quants. */
CUDA_WT_FN int cuda_wtype_int8_offset(int type) { return type == CUDA_W_Q4_K || type == CUDA_W_Q5_K; }
/* The types whose streaming matvec (matvec.cu, stream_chunks) loads the first chunks of
 * its first pass before it waits for the previous kernel, and sends the rest of that
 * pass to L2 after (stream_l2): Q8_0 and Q4_0, and on the int8 input Q4_K and Q5_K (their
 * scales read after the wait). Measured (docs/perf-log.md, thirty-third session;
 * gpu_matvec_bench's 8B layer without / with): H200 Q4_K 45.19-45.26 / 44.34-44.35 us,
 * Q5_K 51.89-51.92 / 50.84-50.85; H100 Q4_K 53.04 / 50.82. Random Qwen3-8B Q4_K_M decode
 * (edgerunner bench -n 128, alternated): H100 410.7-411.4 / 422.9-423.1 tok/s; H200
 * 486.6-487.3 / 491.5-491.6 with Q6_K's loads before the wait too. Not Q6_K: H200
 * 59.61-59.66 / 60.57-60.64 (gate|up and down slower; its instances of three rows a pass
 * spilled). */
CUDA_WT_FN int cuda_wtype_stream_pre(int type, int int8) {
    return cuda_wtype_int8_one_scale(type) || (int8 && (type == CUDA_W_Q4_K || type == CUDA_W_Q5_K));
}

#ifdef __CUDACC__
/* ---- The device part: how the kernels read each type ---------------------------------- */

/* for its helpers (dot4, half2_bits); common.cuh includes this file, through kernels.h,
 * after them */
#include "backend/cuda/common.cuh"

#define HAS_SCALES(WT) (cuda_wtype_scale_bytes(WT) > 0)
#define CHUNK_ELEMS(WT) (16 * cuda_wtype_quant_elems(WT) / cuda_wtype_quant_bytes(WT))
#define HEAD_ROWS(WT) cuda_wtype_head_rows(WT)
/* f16 units of scales of a row of n elements, in n's integer type (that of the kernel's
 * own indexing: an int row length divides as an int) */
#define SCALE_HALVES(WT, n) ((n) / cuda_wtype_scale_elems(WT) * (cuda_wtype_scale_bytes(WT) / 2))

/* The device layouts (made once at upload; w and d of cuda_weight):
 *   F32:      w (n_out, n_in) floats, the file's rows as they are
 *   F16/BF16: w (n_out, n_in) 16-bit floats, the file's rows as they are
 *   Q8_0:     w (n_out, n_in) uint8 holding q + 128, 16-byte aligned rows,
 *             d (n_out, n_in / 32) f16 scales         value = d * (w - 128)
 *             upload: the file's blocks of 34 bytes (d, then 32 int8) repacked
 *   Q4_0:     w (n_out, n_in / 2) the blocks' 16 nibble bytes, one block per 16 bytes
 *             (byte j: element j in the low nibble, element j + 16 in the high one),
 *             d (n_out, n_in / 32) f16 scales         value = d * (nibble - 8)
 *             upload: the file's blocks of 18 bytes (d, then the 16 nibble bytes)
 *             repacked, the nibbles kept as they are
 *
 * The other quantized types: the kernels are fed as Q4_0's are, one 16-byte load of
 * quants per lane and chunk, coalesced across the warp, so that they stream the same
 * bytes per second. That fixes the layout of w: the low 4 bits of every element (2 for
 * Q2_K and Q3_K) in planes of 16-byte chunks, and everything else (scales, minimums,
 * high bits) beside them in d, in as many bytes as the file has (Q6_K and Q3_K: 2 more
 * per 256 elements, for 4-byte aligned words). In a chunk of 32 (4-bit plane), byte j
 * holds element j in its low nibble and element j + 16 in its high one, as Q4_0; in a
 * chunk of 64 (2-bit plane), byte j holds element 16 g + j in bits 2g..2g+1. Either way
 * word i of a chunk holds elements 16 g + 4 i + k (byte k) of each group g of 16, which
 * multiply the chunk's staged input float4 4 g + i: one extraction per word and group.
 * A group of 16 lies in one sub-block of every type, so it has one scale and offset.
 *   Q4_1:  d (.., n_in / 32 x 4 bytes):  f16 d, f16 m                value = d q + m
 *   Q5_0:  d (.., n_in / 32 x 6 bytes):  f16 d, H (two halves)       value = d (q - 16)
 *   Q5_1:  d (.., n_in / 32 x 8 bytes):  f16 d, f16 m, H             value = d q + m
 *   Q4_K:  d (.., n_in / 256 x 16):  f16 d, f16 dmin, the file's 12 scale bytes;
 *          chunk j of the super-block is sub-block j      value = d sc_j q - dmin m_j
 *   Q5_K:  d (.., n_in / 256 x 48):  as Q4_K, then H of each of the 8 chunks
 *   Q6_K:  d (.., n_in / 256 x 84):  G0, G1 of each of the 8 chunks (64 bytes), the 16
 *          int8 scales, f16 d, 2 bytes of padding; chunk j: sub-blocks 2j (low nibbles),
 *          2j + 1 (high)                                  value = d sc (q - 32)
 *   Q2_K:  d (.., n_in / 256 x 20):  the file's 16 scale bytes (sc | m << 4), f16 d,
 *          f16 dmin; chunk c: sub-blocks 4c + g            value = d sc q - dmin m
 *   Q3_K:  d (.., n_in / 256 x 48):  M0, M1 of each of the 4 chunks (32 bytes), the
 *          file's 12 scale bytes, f16 d, 2 bytes of padding    value = d (sc - 32) (q - 4)
 * The high bits, placed so that one shift and one mask put those of word i, group g at
 * their place in each byte of the extracted word (word_vals):
 *   H (Q5_*):  byte k, bit 4 g + i: bit 4 of element 16 g + 4 i + k
 *   G0/G1 (Q6_K): G(i & 1), byte k, bits 4 (i >> 1) + 2 g ..+1: bits 4..5 of that element
 *   M0/M1 (Q3_K): M(i & 1), byte k, bit 4 (i >> 1) + g: bit 2 of that element
 * Upload: repack_block, one thread per file block.
 *
 * How the kernels read them: the six functions below, a branch per type in each (and
 * chunk_isum and chunk_qsum, the int8 dots, for the types of cuda_wtype_int8_dot alone). They
 * stay branches of one template, not one function per type (explicit specializations):
 * the optimizer's choices depend on that shape, and with Q4_0's elem on its own the
 * GEMM's code changed (16-bit nibble selects became 32-bit ones), while the kernels must
 * keep the code they were measured and tuned with. */
static_assert(CUDA_W_COUNT == 13, "a new type: its branch in chunk_scale, chunk_dot, elem, gemm_load, gemm_half "
                                  "and repack_block below, then count it here");

/* The types with the layout of planes described above (word_vals reads them). */
#define IS_PLANE(WT)                                                                                             \
    ((WT) == CUDA_W_Q4_1 || (WT) == CUDA_W_Q5_0 || (WT) == CUDA_W_Q5_1 || (WT) == CUDA_W_Q2_K ||                 \
     (WT) == CUDA_W_Q3_K || (WT) == CUDA_W_Q4_K || (WT) == CUDA_W_Q5_K || (WT) == CUDA_W_Q6_K)

/* Biased quant byte k of word u as a float in [-128, 127], exactly: the byte goes into
 * the mantissa of 2^23 (one PRMT), then one FADD removes 2^23 + 128. */
static __device__ __forceinline__ float q8_byte(uint32_t u, int k) {
    return __int_as_float((int)__byte_perm(u, 0x4B000000u, 0x7540u | (uint32_t)k)) - 8388736.0f;
}

/* Nibble byte k of a masked word u (values 0..15) as a float in [-8, 7], exactly. */
static __device__ __forceinline__ float q4_byte(uint32_t u, int k) {
    return __int_as_float((int)__byte_perm(u, 0x4B000000u, 0x7540u | (uint32_t)k)) - 8388616.0f;
}

/* The two F16 or BF16 elements of a 32-bit word (the lower one first) as floats. */
static __device__ __forceinline__ float2 pair_f32(uint32_t u, int wt) {
    if (wt == CUDA_W_BF16)
        return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
    return __half22float2(*reinterpret_cast<const __half2 *>(&u));
}

static __device__ __forceinline__ float dot4_q8(uint32_t u, float4 x) {
    return dot4(x, q8_byte(u, 0), q8_byte(u, 1), q8_byte(u, 2), q8_byte(u, 3));
}

/* low nibbles of u times lo, high nibbles times hi */
static __device__ __forceinline__ float dot8_q4(uint32_t u, float4 lo, float4 hi) {
    const uint32_t l = u & 0x0f0f0f0fu, h = (u >> 4) & 0x0f0f0f0fu;
    return dot4(lo, q4_byte(l, 0), q4_byte(l, 1), q4_byte(l, 2), q4_byte(l, 3)) +
           dot4(hi, q4_byte(h, 0), q4_byte(h, 1), q4_byte(h, 2), q4_byte(h, 3));
}

/* What a chunk's elements are scaled by (chunk_scale): Q8_0 and Q4_0 use d[0], the float
 * types nothing; the plane types give each group of 16 (g) its scale and offset,
 * value = d[g] q + m[g], and their high bits (H in h[0]; G0, G1 or M0, M1). */
typedef struct chunk_sc {
    float d[4];
    float m[4];
    uint32_t h[2];
} chunk_sc;

/* a[g] for a g known only at run time, without indexing (local memory) */
static __device__ __forceinline__ float pick4(const float a[4], int g) {
    return g == 0 ? a[0] : g == 1 ? a[1] : g == 2 ? a[2] : a[3];
}

static __device__ __forceinline__ uint32_t byte_of(uint32_t u, int k) { return (u >> (8 * k)) & 0xffu; }

/* The code of a plane type's element is q + bias; q as a float, exactly. */
CUDA_WT_FN int plane_bias(int wt) {
    return wt == CUDA_W_Q5_0 ? 16 : wt == CUDA_W_Q6_K ? 32 : wt == CUDA_W_Q3_K ? 4 : 0;
}

/* Plane types: the codes (q + bias, one a byte) of elements 16 g + 4 i + 0..3 of a chunk
 * from its word i, u, and the word's high bits hb (H, or G / M of word i). */
template <int WT>
static __device__ __forceinline__ uint32_t word_codes(uint32_t u, uint32_t hb, int g, int i) {
    uint32_t q;
    if (cuda_wtype_quant_elems(WT) == 2) { /* 4-bit plane */
        q = (u >> (4 * g)) & 0x0f0f0f0fu;
        if (WT == CUDA_W_Q5_0 || WT == CUDA_W_Q5_1 || WT == CUDA_W_Q5_K)
            q |= ((hb >> (4 * g + i)) << 4) & 0x10101010u;
        else if (WT == CUDA_W_Q6_K)
            q |= ((hb >> (4 * (i >> 1) + 2 * g)) << 4) & 0x30303030u;
    } else { /* 2-bit plane */
        q = (u >> (2 * g)) & 0x03030303u;
        if (WT == CUDA_W_Q3_K)
            q |= ((hb >> (4 * (i >> 1) + g)) << 2) & 0x04040404u;
    }
    return q;
}

/* Plane types: the values of elements 16 g + 4 i + 0..3 of a chunk from its word i, u,
 * with the group's scale d and offset m and the word's high bits hb (word_codes). Codes
 * go into the mantissa of 2^23 as in q4_byte, then one FMA each. */
template <int WT>
static __device__ __forceinline__ float4 word_vals(uint32_t u, float d, float m, uint32_t hb, int g, int i) {
    const uint32_t q = word_codes<WT>(u, hb, g, i);
    const float magic = 8388608.0f + (float)plane_bias(WT);
    float4 v;
    v.x = fmaf(d, __int_as_float((int)__byte_perm(q, 0x4B000000u, 0x7540u)) - magic, m);
    v.y = fmaf(d, __int_as_float((int)__byte_perm(q, 0x4B000000u, 0x7541u)) - magic, m);
    v.z = fmaf(d, __int_as_float((int)__byte_perm(q, 0x4B000000u, 0x7542u)) - magic, m);
    v.w = fmaf(d, __int_as_float((int)__byte_perm(q, 0x4B000000u, 0x7543u)) - magic, m);
    return v;
}

/* The high bits that word i of a plane type's chunk needs (word_vals' hb). */
template <int WT>
static __device__ __forceinline__ uint32_t word_high_bits(const chunk_sc &s, int i) {
    return WT == CUDA_W_Q6_K || WT == CUDA_W_Q3_K ? ((i & 1) ? s.h[1] : s.h[0]) : s.h[0];
}

/* Dot of one 16-byte chunk v of a row in the device layout (scales s, from chunk_scale)
 * with the CHUNK_ELEMS(WT) inputs it multiplies, in order, as float4s xv: the decode
 * matvecs and the head. */
template <int WT>
static __device__ __forceinline__ float chunk_dot(uint4 v, const chunk_sc &s, const float4 *xv) {
    if (WT == CUDA_W_Q8_0) {
        return s.d[0] *
               (dot4_q8(v.x, xv[0]) + dot4_q8(v.y, xv[1]) + dot4_q8(v.z, xv[2]) + dot4_q8(v.w, xv[3]));
    } else if (WT == CUDA_W_Q4_0) {
        /* byte j: element j (low nibble) and j + 16 (high nibble) */
        return s.d[0] * (dot8_q4(v.x, xv[0], xv[4]) + dot8_q4(v.y, xv[1], xv[5]) + dot8_q4(v.z, xv[2], xv[6]) +
                         dot8_q4(v.w, xv[3], xv[7]));
    } else if (IS_PLANE(WT)) {
        const uint32_t words[4] = {v.x, v.y, v.z, v.w};
        float a = 0.0f;
#pragma unroll
        for (int g = 0; g < CHUNK_ELEMS(WT) / 16; g++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float4 w = word_vals<WT>(words[i], s.d[g], s.m[g], word_high_bits<WT>(s, i), g, i);
                const float4 x = xv[4 * g + i];
                a = fmaf(w.x, x.x, fmaf(w.y, x.y, fmaf(w.z, x.z, fmaf(w.w, x.w, a))));
            }
        return a;
    } else if (WT == CUDA_W_F32) {
        return dot4(xv[0], __uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z), __uint_as_float(v.w));
    } else { /* F16, BF16 */
        const float2 p0 = pair_f32(v.x, WT), p1 = pair_f32(v.y, WT), p2 = pair_f32(v.z, WT), p3 = pair_f32(v.w, WT);
        return dot4(xv[0], p0.x, p0.y, p1.x, p1.y) + dot4(xv[1], p2.x, p2.y, p3.x, p3.y);
    }
}

/* The int8 dot of chunk v of a row in the device layout, for the types of
 * cuda_wtype_int8_one_scale, with the input quantized per block of 32: xq[0] the 16 int8
 * inputs of the chunk's first 16 elements, xq[1] (Q4_0) those of the next 16, xsum the
 * sum of the block's 32 input quants. Q4_0: a chunk is a block, byte j holds element j in
 * the low nibble and j + 16 in the high one, each q + 8. Q8_0: a chunk is half a block,
 * byte j is element j as q + 128, which flipping its top bit makes q in two's complement.
 * The exact integer sum of quant times input quant, which the caller scales by the
 * weight's and the input's block scales. */
template <int WT>
static __device__ __forceinline__ int chunk_isum(uint4 v, const int4 *xq, int xsum) {
    static_assert(cuda_wtype_int8_one_scale(WT), "cuda_wtype_int8_one_scale's types");
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    const int x0[4] = {xq[0].x, xq[0].y, xq[0].z, xq[0].w};
    if (WT == CUDA_W_Q8_0) {
        int s = 0;
#pragma unroll
        for (int i = 0; i < 4; i++)
            s = __dp4a((int)(words[i] ^ 0x80808080u), x0[i], s);
        return s;
    }
    /* Q4_0's high nibbles stay in place, as unsigned bytes 16 q (dp4a.u32.s32): no shifts.
     * hi is 16 times an exact integer (|hi| <= 16 x 15 x 128 x 16 < 2^31). On an H100 the
     * 0.6B Q4_0 layer took 15.45 against 15.63 us, 4B's 38.62 against 38.97
     * (docs/perf-log.md, fifty-eighth session). */
    const int x1[4] = {xq[1].x, xq[1].y, xq[1].z, xq[1].w};
    int s = -8 * xsum, hi = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s = __dp4a((int)(words[i] & 0x0f0f0f0fu), x0[i], s);
        hi = dp4a_us(words[i] & 0xf0f0f0f0u, x1[i], hi);
    }
    return s + (hi >> 4);
}

/* Word i of a 4-bit plane's block (u: its bytes 4i..4i+3; byte e holds element e in its
 * low nibble, e + 16 in its high one; Q5_K's and Q6_K's high bits in s), group g of
 * word_codes (the low nibbles, g 0, or the high ones), as four signed int8 codes: Q4_0's
 * and Q6_K's less their bias (8, 32: the signed byte, by the wrap of __vsub4). */
template <int WT>
static __device__ __forceinline__ uint32_t plane_codes(uint32_t u, const chunk_sc &s, int g, int i) {
    const uint32_t q = word_codes<WT>(u, word_high_bits<WT>(s, i), g, i);
    return WT == CUDA_W_Q4_0 ? __vsub4(q, 0x08080808u) : WT == CUDA_W_Q6_K ? __vsub4(q, 0x20202020u) : q;
}

/* The int8 dot of chunk v of a Q4_K, Q5_K or Q6_K row (scales s: chunk_scale) with the
 * input quantized per block of 32 (xq, xsum as chunk_isum's), in units of the input
 * block's scale. The chunk is the block: word i holds elements 4 i .. 4 i + 3 in its low
 * nibbles (group 0, xq[0]) and 16 + 4 i .. in its high ones (group 1, xq[1]), with the
 * high bits of word_codes. Q4_K and Q5_K: one sub-block, value = d q + m, so the dot is d
 * times the integer sum plus m times the input's; Q6_K: two sub-blocks of 16 (groups 0
 * and 1), value = d_g (q - 32), q - 32 a signed byte (__vsub4) for dp4a. */
template <int WT>
static __device__ __forceinline__ float chunk_qsum(uint4 v, const chunk_sc &s, const int4 *xq, int xsum) {
    static_assert(cuda_wtype_int8_dot(WT) && !cuda_wtype_int8_one_scale(WT) && cuda_wtype_quant_elems(WT) == 2,
                  "the 4-bit plane types of cuda_wtype_int8_dot");
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    const int xg[2][4] = {{xq[0].x, xq[0].y, xq[0].z, xq[0].w}, {xq[1].x, xq[1].y, xq[1].z, xq[1].w}};
    int sum[2] = {0, 0};
#pragma unroll
    for (int g = 0; g < 2; g++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            sum[g] = __dp4a((int)plane_codes<WT>(words[i], s, g, i), xg[g][i], sum[g]);
    if (WT == CUDA_W_Q6_K)
        return s.d[0] * (float)sum[0] + s.d[1] * (float)sum[1];
    return s.d[0] * (float)(sum[0] + sum[1]) + s.m[0] * (float)xsum;
}

/* The types of cuda_wtype_int8_mma (mmq.cu): word i of lane c's 8 bytes of a block (u; i =
 * 2 (c & 1) + 0 or 1: Q8_0's bytes 8c.., the planes' bytes 8 (c & 1)..) as four signed
 * int8 codes of the mma's A fragment: the block's elements 8c..8c+3 (the first word) or
 * 8c+4..8c+7 (the second). Q8_0 holds q + 128: one XOR; the planes' elements 8c.. are
 * group c >> 1 of plane_codes. */
template <int WT>
static __device__ __forceinline__ uint32_t mma_word(uint32_t u, const chunk_sc &s, int c, int i) {
    if constexpr (WT == CUDA_W_Q8_0)
        return u ^ 0x80808080u;
    else
        return plane_codes<WT>(u, s, c >> 1, i);
}

/* Q6_K's two scales of a block, its groups of 16: the super-block's d times their signed
 * bytes sc2 (the low one group 0's). */
static __device__ __forceinline__ float2 q6k_scales(float d, uint32_t sc2) {
    return make_float2(d * (float)(int8_t)(sc2 & 0xff), d * (float)(int8_t)(sc2 >> 8));
}

/* Q4_K's and Q5_K's sub-block j (of 8) from their super-block's first 16 bytes (head: f16
 * d and dmin, then the file's 12 scale bytes): its scale d sc and offset -(dmin mn), the
 * 6-bit sc and mn as get_scale_min_k4 takes them. */
static __device__ __forceinline__ float2 k_scale_min(uint4 head, int j) {
    const int k = j & 3;
    const uint32_t a = byte_of(head.y, k), b = byte_of(head.z, k), e = byte_of(head.w, k);
    const uint32_t sc = j < 4 ? a & 63 : (e & 15) | ((a >> 6) << 4);
    const uint32_t mn = j < 4 ? b & 63 : (e >> 4) | ((b >> 6) << 4);
    const float2 dm = __half22float2(*reinterpret_cast<const __half2 *>(&head.x));
    return make_float2(dm.x * (float)sc, -(dm.y * (float)mn));
}

/* 32-bit word at byte offset `at` (a multiple of 4) of a row's scales */
static __device__ __forceinline__ uint32_t scale_word(const __half *d_row, int at) {
    return *reinterpret_cast<const uint32_t *>(reinterpret_cast<const uint8_t *>(d_row) + at);
}
static __device__ __forceinline__ float scale_half(const __half *d_row, int at) {
    return __half2float(*reinterpret_cast<const __half *>(reinterpret_cast<const uint8_t *>(d_row) + at));
}

/* Scales of chunk c of a row (1 for the float types); d_row from the row's first element.
 * The sub-block scales are products in float of the f16 super-scale and the small
 * integer, as the CPU reference (quant/kquants.c) forms them: exact. */
template <int WT>
static __device__ __forceinline__ chunk_sc chunk_scale(const __half *d_row, int c) {
    chunk_sc s = {};
    constexpr int SB = cuda_wtype_scale_bytes(WT);
    if (WT == CUDA_W_Q8_0) {
        s.d[0] = __half2float(d_row[c >> 1]);
    } else if (WT == CUDA_W_Q4_0) {
        s.d[0] = __half2float(d_row[c]);
    } else if (WT == CUDA_W_Q4_1 || WT == CUDA_W_Q5_1) { /* d, m[, H] */
        s.d[0] = s.d[1] = scale_half(d_row, c * SB);
        s.m[0] = s.m[1] = scale_half(d_row, c * SB + 2);
        if (WT == CUDA_W_Q5_1)
            s.h[0] = scale_word(d_row, c * SB + 4);
    } else if (WT == CUDA_W_Q5_0) { /* d, H in two halves (6 bytes: 2-byte aligned) */
        const uint16_t *p = reinterpret_cast<const uint16_t *>(d_row) + 3 * c;
        s.d[0] = s.d[1] = __half2float(__ushort_as_half(p[0]));
        s.h[0] = (uint32_t)p[1] | (uint32_t)p[2] << 16;
    } else if (WT == CUDA_W_Q4_K || WT == CUDA_W_Q5_K) {
        /* the super-block's first 16 bytes in one load (base and the rows' scales are
         * 16-byte units) */
        const int base = (c >> 3) * SB, j = c & 7;
        const float2 dm =
            k_scale_min(*reinterpret_cast<const uint4 *>(reinterpret_cast<const uint8_t *>(d_row) + base), j);
        s.d[0] = s.d[1] = dm.x;
        s.m[0] = s.m[1] = dm.y;
        if (WT == CUDA_W_Q5_K)
            s.h[0] = scale_word(d_row, base + 16 + 4 * j);
    } else if (WT == CUDA_W_Q6_K) {
        const int base = (c >> 3) * SB, j = c & 7;
        const float2 d = q6k_scales(
            scale_half(d_row, base + 80),
            reinterpret_cast<const uint16_t *>(reinterpret_cast<const uint8_t *>(d_row) + base + 64)[j]);
        s.d[0] = d.x;
        s.d[1] = d.y;
        s.h[0] = scale_word(d_row, base + 8 * j);
        s.h[1] = scale_word(d_row, base + 8 * j + 4);
    } else if (WT == CUDA_W_Q2_K) {
        const int base = (c >> 2) * SB, cc = c & 3;
        const uint32_t scales = scale_word(d_row, base + 4 * cc);
        const float d = scale_half(d_row, base + 16), dmin = scale_half(d_row, base + 18);
#pragma unroll
        for (int g = 0; g < 4; g++) {
            s.d[g] = d * (float)(byte_of(scales, g) & 15);
            s.m[g] = -(dmin * (float)(byte_of(scales, g) >> 4));
        }
    } else if (WT == CUDA_W_Q3_K) {
        /* sub-block 4 cc + g: low 4 bits in byte 4 (cc & 1) + g of the scales (the high
         * nibble for cc >= 2), top 2 in byte 8 + g, bits 2 cc..; as q3_K_scale */
        const int base = (c >> 2) * SB, cc = c & 3;
        const uint32_t lo = scale_word(d_row, base + 32 + 4 * (cc & 1)), hi = scale_word(d_row, base + 40);
        const float d = scale_half(d_row, base + 44);
#pragma unroll
        for (int g = 0; g < 4; g++) {
            const int sc = (int)((lo >> (8 * g + 4 * (cc >> 1))) & 15) | (int)(((hi >> (8 * g + 2 * cc)) & 3) << 4);
            s.d[g] = d * (float)(sc - 32);
        }
        s.h[0] = scale_word(d_row, base + 8 * cc);
        s.h[1] = scale_word(d_row, base + 8 * cc + 4);
    } else {
        s.d[0] = 1.0f;
    }
    return s;
}

/* One element of a row, for rows whose length is not a whole number of chunks, and the
 * embedding lookup. */
template <int WT>
static __device__ __forceinline__ float elem(const uint8_t *w_row, const __half *d_row, int i) {
    if (WT == CUDA_W_Q8_0)
        return (float)((int)w_row[i] - 128) * __half2float(d_row[i >> 5]);
    if (WT == CUDA_W_Q4_0) {
        const uint8_t b = w_row[(i >> 5) * 16 + (i & 15)];
        return (float)((int)((i & 16) ? b >> 4 : b & 15) - 8) * __half2float(d_row[i >> 5]);
    }
    if (IS_PLANE(WT)) {
        constexpr int CE = CHUNK_ELEMS(WT);
        const int c = i / CE, e = i % CE, g = e >> 4, wi = (e >> 2) & 3, k = e & 3;
        const chunk_sc s = chunk_scale<WT>(d_row, c);
        const uint32_t u = reinterpret_cast<const uint32_t *>(w_row)[4 * c + wi];
        const float4 v = word_vals<WT>(u, pick4(s.d, g), pick4(s.m, g), word_high_bits<WT>(s, wi), g, wi);
        return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
    }
    if (WT == CUDA_W_F32)
        return reinterpret_cast<const float *>(w_row)[i];
    const uint16_t h = reinterpret_cast<const uint16_t *>(w_row)[i];
    if (WT == CUDA_W_BF16)
        return __uint_as_float((uint32_t)h << 16);
    return __half2float(__ushort_as_half(h));
}

/* The prefill GEMM (gemm.cu) takes a row 16 elements at a time per thread, loaded into
 * registers a step ahead (gemm_load) and rounded to F16 when stored (gemm_half), once
 * per weight, as a dequantization to F16 followed by an F16 GEMM would round it. */
typedef struct w_regs {
    uint4 raw[4]; /* Q8_0/Q4_0 and the plane types: raw[0]; F16/BF16: raw[0..1]; F32: raw[0..3] */
    __half d;     /* Q8_0/Q4_0: the block's scale */
    float sd, sm; /* the plane types: the group's scale and offset */
    uint32_t h0, h1; /* and the chunk's high bits */
    int g;        /* and the group of 16 of the chunk */
} w_regs;

/* Elements k0 + 16 part .. + 15 (k0 a multiple of 32) of row `row` (its quants at w_row;
 * d: all the scales; n_in its length) into r. */
template <int WT>
static __device__ __forceinline__ void gemm_load(const uint8_t *w_row, const __half *d, int64_t row, int64_t n_in,
                                                 int k0, int part, w_regs &r) {
    const int k = k0 + 16 * part;
    if (WT == CUDA_W_Q8_0 || WT == CUDA_W_Q4_0) {
        /* Q4_0: all 16 bytes of the block; this part's elements are one nibble of each */
        r.raw[0] = __ldg(reinterpret_cast<const uint4 *>(w_row + (WT == CUDA_W_Q8_0 ? k : k0 / 2)));
        r.d = d[(size_t)row * (n_in / 32) + k0 / 32];
    } else if (IS_PLANE(WT)) {
        /* the chunk holding the 16 elements (all of it: they are one group of each word) */
        constexpr int CE = CHUNK_ELEMS(WT);
        const int c = k0 / CE;
        r.raw[0] = __ldg(reinterpret_cast<const uint4 *>(w_row) + c);
        r.g = (k0 % CE) / 16 + part;
        const chunk_sc s = chunk_scale<WT>(d + (size_t)row * SCALE_HALVES(WT, n_in), c);
        r.sd = pick4(s.d, r.g);
        r.sm = pick4(s.m, r.g);
        r.h0 = s.h[0];
        r.h1 = s.h[1];
    } else {
        const int n16 = WT == CUDA_W_F32 ? 4 : 2;
        const uint4 *src = reinterpret_cast<const uint4 *>(w_row + (size_t)k * (WT == CUDA_W_F32 ? 4 : 2));
#pragma unroll
        for (int i = 0; i < n16; i++)
            r.raw[i] = __ldg(src + i);
    }
}

/* Biased quant bytes (Q8_0: q + 128) or nibbles (Q4_0: q + 8) of word u as two F16
 * pairs of q, exactly: each byte goes under the exponent of 1024 (0x64xx = 1024 + byte),
 * then one subtraction removes 1024 + bias. */
static __device__ __forceinline__ void bytes_to_half2(uint32_t u, __half2 bias, __half2 d, uint32_t out[2]) {
    const uint32_t lo = __byte_perm(u, 0x64646464u, 0x4140), hi = __byte_perm(u, 0x64646464u, 0x4342);
    const __half2 a = __hmul2(__hsub2(*reinterpret_cast<const __half2 *>(&lo), bias), d);
    const __half2 b = __hmul2(__hsub2(*reinterpret_cast<const __half2 *>(&hi), bias), d);
    out[0] = *reinterpret_cast<const uint32_t *>(&a);
    out[1] = *reinterpret_cast<const uint32_t *>(&b);
}

/* The 16 elements of gemm_load as 8 F16 pairs h, the lower element first. For Q8_0 and
 * Q4_0, exact integer arithmetic in F16 and one rounded multiply; for the plane types,
 * the value in float (as chunk_dot forms it), rounded once. */
template <int WT>
static __device__ __forceinline__ void gemm_half(const w_regs &r, int part, uint32_t h[8]) {
    if (WT == CUDA_W_Q8_0 || WT == CUDA_W_Q4_0) {
        const __half2 d = __half2half2(r.d);
        const __half2 bias = __float2half2_rn(WT == CUDA_W_Q8_0 ? 1152.0f : 1032.0f);
        const uint32_t words[4] = {r.raw[0].x, r.raw[0].y, r.raw[0].z, r.raw[0].w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t u = WT == CUDA_W_Q8_0 ? words[i] : (words[i] >> (4 * part)) & 0x0f0f0f0fu;
            bytes_to_half2(u, bias, d, h + 2 * i);
        }
    } else if (IS_PLANE(WT)) {
        const uint32_t words[4] = {r.raw[0].x, r.raw[0].y, r.raw[0].z, r.raw[0].w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t hb = (WT == CUDA_W_Q6_K || WT == CUDA_W_Q3_K) && (i & 1) ? r.h1 : r.h0;
            const float4 v = word_vals<WT>(words[i], r.sd, r.sm, hb, r.g, i);
            h[2 * i] = half2_bits(v.x, v.y);
            h[2 * i + 1] = half2_bits(v.z, v.w);
        }
    } else if (WT == CUDA_W_F16) {
        h[0] = r.raw[0].x, h[1] = r.raw[0].y, h[2] = r.raw[0].z, h[3] = r.raw[0].w;
        h[4] = r.raw[1].x, h[5] = r.raw[1].y, h[6] = r.raw[1].z, h[7] = r.raw[1].w;
    } else if (WT == CUDA_W_BF16) {
        const uint32_t words[8] = {r.raw[0].x, r.raw[0].y, r.raw[0].z, r.raw[0].w,
                                   r.raw[1].x, r.raw[1].y, r.raw[1].z, r.raw[1].w};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float2 f = pair_f32(words[i], WT);
            h[i] = half2_bits(f.x, f.y);
        }
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float4 f = *reinterpret_cast<const float4 *>(&r.raw[i]);
            h[2 * i] = half2_bits(f.x, f.y);
            h[2 * i + 1] = half2_bits(f.z, f.w);
        }
    }
}

/* Repack helpers: element e (0..31) of a 32-element chunk at its place in a 4-bit plane
 * chunk q (16 bytes, zeroed first), its bit 4 in H, its bits 4..5 in G[2]; element e
 * (0..63) of a 64-element chunk in a 2-bit plane chunk, its bit 2 in M[2]. */
static __device__ __forceinline__ void put_nibble(uint8_t *q, int e, int v) {
    q[e & 15] |= (uint8_t)((v & 15) << (4 * (e >> 4)));
}
static __device__ __forceinline__ void put_h(uint32_t *H, int e, int bit) {
    *H |= (uint32_t)bit << (8 * (e & 3) + 4 * (e >> 4) + ((e >> 2) & 3));
}
static __device__ __forceinline__ void put_g(uint32_t *G, int e, int two) {
    const int i = (e >> 2) & 3;
    G[i & 1] |= (uint32_t)two << (8 * (e & 3) + 4 * (i >> 1) + 2 * (e >> 4));
}
static __device__ __forceinline__ void put_crumb(uint8_t *q, int e, int v) {
    q[e & 15] |= (uint8_t)((v & 3) << (2 * (e >> 4)));
}
static __device__ __forceinline__ void put_m(uint32_t *M, int e, int bit) {
    const int i = (e >> 2) & 3;
    M[i & 1] |= (uint32_t)bit << (8 * (e & 3) + 4 * (i >> 1) + (e >> 4));
}
static __device__ __forceinline__ uint32_t load_u32_le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static __device__ __forceinline__ void store_u32(uint8_t *p, uint32_t v) {
    for (int k = 0; k < 4; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

/* Upload: file block b (RAW bytes at src) into the device layout, quants qs and scales d;
 * one thread per block (elementwise.cu, k_repack), only for the types with RAW > 0.
 * The file layouts are drawn in quant/blocks.h. */
template <int WT>
static __device__ __forceinline__ void repack_block(const uint8_t *src, int64_t b, uint8_t *qs, uint16_t *d) {
    constexpr int BLK = cuda_wtype_block(WT), QE = cuda_wtype_quant_elems(WT);
    constexpr int SE = cuda_wtype_scale_elems(WT), SB = cuda_wtype_scale_bytes(WT);
    uint8_t *q = qs + b * (BLK / QE);                                 /* this block's quants */
    uint8_t *sd = reinterpret_cast<uint8_t *>(d) + b * (BLK / SE * SB); /* and scales */
    if (WT == CUDA_W_Q8_0) { /* d (f16) then 32 int8 */
        d[b] = (uint16_t)(src[0] | (src[1] << 8));
        for (int j = 0; j < 32; j++)
            qs[b * 32 + j] = (uint8_t)((int)(int8_t)src[2 + j] + 128);
    } else if (WT == CUDA_W_Q4_0) { /* d (f16) then 16 nibble bytes, kept as they are */
        d[b] = (uint16_t)(src[0] | (src[1] << 8));
        for (int j = 0; j < 16; j++)
            qs[b * 16 + j] = src[2 + j];
    } else if (WT == CUDA_W_Q4_1 || WT == CUDA_W_Q5_0 || WT == CUDA_W_Q5_1) {
        /* d[, m][, qh (u32, bit e: bit 4 of element e)], then the nibbles of Q4_0's order */
        const int n_half = WT == CUDA_W_Q5_0 ? 1 : 2, has_qh = WT != CUDA_W_Q4_1;
        for (int j = 0; j < 2 * n_half; j++)
            sd[j] = src[j];
        const uint8_t *nib = src + 2 * n_half + 4 * has_qh;
        for (int j = 0; j < 16; j++)
            q[j] = nib[j];
        if (has_qh) {
            const uint32_t qh = load_u32_le(src + 2 * n_half);
            uint32_t H = 0;
            for (int e = 0; e < 32; e++)
                put_h(&H, e, (int)((qh >> e) & 1));
            store_u32(sd + 2 * n_half, H);
        }
    } else if (WT == CUDA_W_Q4_K || WT == CUDA_W_Q5_K) {
        /* file: d, dmin, scales[12], (Q5_K: qh[32],) qs[128]; element 64 c + 32 hi + l is
         * nibble hi of qs[32 c + l] (bit 2c + hi of qh[l]); sub-block j = 2 c + hi */
        const uint8_t *fq = src + (WT == CUDA_W_Q5_K ? 48 : 16);
        for (int j = 0; j < 16; j++)
            sd[j] = src[j];
        for (int j = 0; j < 128; j++)
            q[j] = 0;
        for (int j = 0; j < 8; j++) {
            uint32_t H = 0;
            for (int l = 0; l < 32; l++) {
                put_nibble(q + 16 * j, l, fq[32 * (j >> 1) + l] >> (4 * (j & 1)));
                if (WT == CUDA_W_Q5_K)
                    put_h(&H, l, (src[16 + l] >> j) & 1);
            }
            if (WT == CUDA_W_Q5_K)
                store_u32(sd + 16 + 4 * j, H);
        }
    } else if (WT == CUDA_W_Q6_K) {
        /* file: ql[128], qh[64], scales[16], d; element e = 128 h + 32 s + l: low 4 bits
         * nibble (s >= 2) of ql[64 h + 32 (s & 1) + l], top 2 bits 2s.. of qh[32 h + l] */
        for (int j = 0; j < 128; j++)
            q[j] = 0;
        for (int j = 0; j < 8; j++) {
            const int h = j >> 2, s = j & 3;
            uint32_t G[2] = {0, 0};
            for (int l = 0; l < 32; l++) {
                put_nibble(q + 16 * j, l, src[64 * h + 32 * (s & 1) + l] >> (4 * (s >> 1)));
                put_g(G, l, (src[128 + 32 * h + l] >> (2 * s)) & 3);
            }
            store_u32(sd + 8 * j, G[0]);
            store_u32(sd + 8 * j + 4, G[1]);
        }
        for (int j = 0; j < 16; j++)
            sd[64 + j] = src[192 + j];
        sd[80] = src[208], sd[81] = src[209], sd[82] = 0, sd[83] = 0;
    } else if (WT == CUDA_W_Q2_K || WT == CUDA_W_Q3_K) {
        /* Q2_K file: scales[16], qs[64], d, dmin; Q3_K: hmask[32], qs[64], scales[12], d.
         * element e = 128 h + 32 s + l: bits 2s.. of qs[32 h + l] (Q3_K: its bit 2 is bit
         * 4 h + s of hmask[l]) */
        const uint8_t *fq = src + (WT == CUDA_W_Q2_K ? 16 : 32);
        for (int j = 0; j < 64; j++)
            q[j] = 0;
        for (int c = 0; c < 4; c++) {
            uint32_t M[2] = {0, 0};
            for (int e = 0; e < 64; e++) {
                const int f = 64 * c + e, h = f >> 7, s = (f >> 5) & 3, l = f & 31;
                put_crumb(q + 16 * c, e, fq[32 * h + l] >> (2 * s));
                if (WT == CUDA_W_Q3_K)
                    put_m(M, e, (src[l] >> (4 * h + s)) & 1);
            }
            if (WT == CUDA_W_Q3_K) {
                store_u32(sd + 8 * c, M[0]);
                store_u32(sd + 8 * c + 4, M[1]);
            }
        }
        if (WT == CUDA_W_Q2_K) {
            for (int j = 0; j < 16; j++)
                sd[j] = src[j];
            sd[16] = src[80], sd[17] = src[81], sd[18] = src[82], sd[19] = src[83];
        } else {
            for (int j = 0; j < 12; j++)
                sd[32 + j] = src[96 + j];
            sd[44] = src[108], sd[45] = src[109], sd[46] = 0, sd[47] = 0;
        }
    }
}

#endif /* __CUDACC__ */
#endif
