/*
 * test_types.c - the type table and the reference conversions and kernels.
 *
 * Half-precision conversions are checked exhaustively against the CPU's own F16C
 * instructions (an independent implementation) where the CPU has them.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/types.h"
#include "test.h"

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f) {
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
static int have_f16c(void) { return __builtin_cpu_supports("f16c"); }
#else
static float hw_f16_to_f32(uint16_t h) { return er_f16_to_f32(h); }
static uint16_t hw_f32_to_f16(float f) { return er_f32_to_f16(f); }
static int have_f16c(void) { return 0; }
#endif

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}
static float rng_uniform(void) { return (float)((rng_next() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }

static void test_f16(void) {
    int bad_roundtrip = 0, bad_hw = 0, bad_hw_back = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = er_f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            bad_roundtrip += !isnan(er_f16_to_f32(er_f32_to_f16(f)));
            continue;
        }
        bad_roundtrip += er_f32_to_f16(f) != h;
        if (have_f16c())
            bad_hw += er_f32_to_bits(hw_f16_to_f32((uint16_t)h)) != er_f32_to_bits(f);
    }
    CHECK(bad_roundtrip == 0, "%d half values do not survive f16 -> f32 -> f16", bad_roundtrip);
    CHECK(bad_hw == 0, "%d half values convert differently from F16C", bad_hw);
    /* float -> half rounding, against the hardware on 2^20 random bit patterns */
    if (have_f16c()) {
        for (int i = 0; i < (1 << 20); i++) {
            float f = er_bits_to_f32((uint32_t)rng_next());
            if (isnan(f))
                continue;
            bad_hw_back += er_f32_to_f16(f) != hw_f32_to_f16(f);
        }
        CHECK(bad_hw_back == 0, "%d floats round to half differently from F16C", bad_hw_back);
    }
    CHECK(er_f32_to_f16(65504.0f) == 0x7bff, "max half");
    CHECK(er_f32_to_f16(65520.0f) == 0x7c00, "65520 rounds to inf");
    CHECK(er_f32_to_f16(0.1f) == 0x2e66, "0.1 -> 0x2e66, got 0x%04x", er_f32_to_f16(0.1f));
    CHECK(er_f32_to_f16(-0.0f) == 0x8000, "-0");
    CHECK(er_f16_to_f32(0x0001) == 5.9604644775390625e-8f, "smallest subnormal");
}

static void test_bf16(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = er_bf16_to_f32((uint16_t)h);
        if (!isnan(f))
            bad += er_f32_to_bf16(f) != h;
    }
    CHECK(bad == 0, "%d bf16 values do not round-trip", bad);
    CHECK(er_f32_to_bf16(1.00390625f) == 0x3f80, "ties round to even (down)");
    CHECK(er_f32_to_bf16(1.01171875f) == 0x3f82, "ties round to even (up)");
    CHECK(isnan(er_bf16_to_f32(er_f32_to_bf16(NAN))), "NaN stays NaN");
}

static void test_table(void) {
    static const struct { uint32_t id; const char *name; int64_t block; size_t size; int computes; } rows[] = {
        {ER_TYPE_F32, "F32", 1, 4, 1},        {ER_TYPE_F16, "F16", 1, 2, 1},
        {ER_TYPE_BF16, "BF16", 1, 2, 1},      {ER_TYPE_Q8_0, "Q8_0", 32, 34, 1},
        {ER_TYPE_Q4_0, "Q4_0", 32, 18, 1},    {ER_TYPE_Q4_1, "Q4_1", 32, 20, 1},
        {ER_TYPE_Q5_0, "Q5_0", 32, 22, 1},    {ER_TYPE_Q5_1, "Q5_1", 32, 24, 1},
        {ER_TYPE_Q2_K, "Q2_K", 256, 84, 1},   {ER_TYPE_Q3_K, "Q3_K", 256, 110, 1},
        {ER_TYPE_Q4_K, "Q4_K", 256, 144, 1},  {ER_TYPE_Q5_K, "Q5_K", 256, 176, 1},
        {ER_TYPE_Q6_K, "Q6_K", 256, 210, 1},  {ER_TYPE_Q8_1, "Q8_1", 32, 36, 0},
        {ER_TYPE_Q8_K, "Q8_K", 256, 292, 0},  {ER_TYPE_I8, "I8", 1, 1, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const er_type_traits *t = er_type_get(rows[i].id);
        CHECK(t && !strcmp(t->name, rows[i].name) && t->block_size == rows[i].block && t->type_size == rows[i].size &&
                  (t->dot_f32 != NULL) == rows[i].computes && (t->to_f32 != NULL) == rows[i].computes &&
                  (t->from_f32 != NULL) == rows[i].computes,
              "row for %s", rows[i].name);
    }
    CHECK(er_type_get(4) == NULL && er_type_get(5) == NULL && er_type_get(ER_TYPE_COUNT) == NULL &&
              er_type_get(UINT32_MAX) == NULL,
          "removed and out-of-range type ids are unknown");
    CHECK(er_type_row_size(er_type_get(ER_TYPE_Q8_0), 64) == 68, "Q8_0 row of 64");
    CHECK(er_type_row_size(er_type_get(ER_TYPE_Q8_0), 33) == 0, "Q8_0 row of 33 is invalid");
}

/* Byte offset of f16 scale k (0 or 1) in a block of a quantized type, -1 when none. */
static int scale_offset(uint32_t type, int k) {
    switch (type) {
    case ER_TYPE_Q4_0: case ER_TYPE_Q5_0: case ER_TYPE_Q8_0: return k ? -1 : 0;
    case ER_TYPE_Q4_1: case ER_TYPE_Q5_1: case ER_TYPE_Q4_K: case ER_TYPE_Q5_K: return 2 * k;
    case ER_TYPE_Q2_K: return 80 + 2 * k;
    case ER_TYPE_Q3_K: return k ? -1 : 108;
    case ER_TYPE_Q6_K: return k ? -1 : 208;
    default: return -1;
    }
}

/* Every type's dot product equals dequantize-then-dot exactly: the reference kernels
 * accumulate in the same order, which is what makes prefill and decode agree bit for bit. */
static void test_dot_matches_dequant(void) {
    static const uint32_t types[] = {ER_TYPE_F32,  ER_TYPE_F16,  ER_TYPE_BF16, ER_TYPE_Q8_0, ER_TYPE_Q4_0,
                                     ER_TYPE_Q4_1, ER_TYPE_Q5_0, ER_TYPE_Q5_1, ER_TYPE_Q2_K, ER_TYPE_Q3_K,
                                     ER_TYPE_Q4_K, ER_TYPE_Q5_K, ER_TYPE_Q6_K};
    static const int64_t lengths[] = {32, 96, 256, 768, 4096};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const er_type_traits *t = er_type_get(types[ti]);
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
            const int64_t n = lengths[li];
            if (n % t->block_size != 0)
                continue;
            const size_t bytes = er_type_row_size(t, n);
            uint8_t *w = malloc(bytes);
            float *x = malloc((size_t)n * sizeof *x), *wf = malloc((size_t)n * sizeof *wf);
            for (size_t b = 0; b < bytes; b++)
                w[b] = (uint8_t)rng_next();
            if (t->block_size > 1) /* keep scales finite: random halves can be inf/NaN */
                for (int64_t b = 0; b < n / t->block_size; b++)
                    for (int k = 0; k < 2; k++) {
                        const int off = scale_offset(types[ti], k);
                        uint16_t d = er_f32_to_f16(rng_uniform() * 0.1f);
                        if (off >= 0)
                            memcpy(w + b * t->type_size + off, &d, 2);
                    }
            else
                for (int64_t i = 0; i < n; i++) { /* finite random values of the type */
                    float v = rng_uniform() * 4.0f;
                    if (types[ti] == ER_TYPE_F32)
                        memcpy(w + 4 * i, &v, 4);
                    else {
                        uint16_t h = types[ti] == ER_TYPE_F16 ? er_f32_to_f16(v) : er_f32_to_bf16(v);
                        memcpy(w + 2 * i, &h, 2);
                    }
                }
            for (int64_t i = 0; i < n; i++)
                x[i] = rng_uniform();
            t->to_f32(w, wf, n);
            float expect = 0.0f;
            for (int64_t i = 0; i < n; i++)
                expect += wf[i] * x[i];
            const float got = t->dot_f32(w, x, n);
            CHECK(er_f32_to_bits(got) == er_f32_to_bits(expect), "%s dot of %lld: %.9g vs %.9g", t->name,
                  (long long)n, got, expect);
            free(w);
            free(x);
            free(wf);
        }
    }
    /* Q8_0 dequantization by hand: d = 0.5, q = -128, -120, ..., 120 */
    block_q8_0 blk;
    blk.d = er_f32_to_f16(0.5f);
    for (int j = 0; j < QK8_0; j++)
        blk.qs[j] = (int8_t)(j * 8 - 128);
    float out[QK8_0];
    er_type_get(ER_TYPE_Q8_0)->to_f32(&blk, out, QK8_0);
    int bad = 0;
    for (int j = 0; j < QK8_0; j++)
        bad += out[j] != 0.5f * (float)(j * 8 - 128);
    CHECK(bad == 0, "Q8_0 block dequantizes to d * q");
}

void test_types(void) {
    test_f16();
    test_bf16();
    test_table();
    test_dot_matches_dequant();
}
