/*
 * test_quant.c - the quantized types: hand-made blocks, the reference quantizers, and the
 * CPU kernel table (AVX2 against scalar, q8 activations against the f32 reference).
 *
 * Bit-exactness of dequantization against GGML's own code, and of the fast path's activation
 * quantizers and dot products against llama.cpp's, is checked by the Python oracle tests
 * (tests/quant), which call the gguf package and ggml; these tests need no Python.
 *
 * Bounds, all computed per row from the data (eps = 2^-24):
 *   AVX2 vs scalar (same activation bytes, same exact integer sums, different float
 *     accumulation order): |a - s| <= 4 * (n/16 + 16) * eps * M, where M = sum over
 *     elements of 3 * max|w| of the element's 32-block * |x_i| bounds every float term the
 *     two sum (the K types' d*sc*q and dmin*m parts are each below about 2 max|w|).
 *   q8 vs f32 reference (activations rounded to 8 bits): |q8 - ref| <= sum over activation
 *     blocks of c * max|x| of the block * sum |w_i| + the Q8_1 term + the bound above, with
 *     c = (0.5 + 127 * 2^-11) / 127 for Q8_0/Q8_1 (the code is rounded with the f32 scale,
 *     then the scale is stored in f16: half a step plus 127 codes times the f16 rounding)
 *     and c = (0.5 + 2^-16) / 127 for Q8_K (f32 scale). Q8_1 adds |m| * 2^-10 * 32 * max|x|
 *     per block for s = f16(d * sum q). A wrong layout gives errors of order M.
 *   That bound adds up every element's worst case; the rounding's actual effect on the dot,
 *     err = sum w_i * (step_b * q_i - x_i) in double (step_b = max|x| / 127 of the block, or
 *     Q8_K's d), is a sum of independent terms w_i * step_b * u_i with u_i uniform in
 *     [-1/2, 1/2] when the codes are rounded to nearest: sigma^2 = sum w_i^2 step_b^2 / 12.
 *     Bound: |err| <= 6 sigma. Measured worst over the 36 rows of each type (Q4_0 Q4_1 Q5_0
 *     Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K): 2.42 2.92 2.38 1.75 1.67 1.51 1.84 2.00 2.91 2.39
 *     sigma, i.e. 6 is twice the worst (a normal variable passes 6 sigma once in 5e8 rows);
 *     the worst-case bound above sits at 8.5 to 370 sigma on these rows. A third of the rows
 *     have weights along the activations (w = x, as q . k of similar vectors), where a biased
 *     rounding adds up instead of cancelling: truncating the codes measured 83 to 95 sigma
 *     there (and broke even the worst-case bound on Q2_K, Q3_K and Q6_K).
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/cpu/kernels.h"
#include "core/fp16.h"
#include "io/gguf.h"
#include "io/gguf_write.h"
#include "quant/blocks.h"
#include "quant/mix.h"
#include "quant/quants.h"
#include "quant/types.h"
#include "test.h"

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static uint64_t rng_next(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}
static float rng_uniform(void) { return (float)((rng_next() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }
static float rng_gauss(void) { /* Box-Muller */
    const double u1 = ((rng_next() >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    const double u2 = (rng_next() >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static const uint32_t quant_types[] = {ER_TYPE_Q4_0, ER_TYPE_Q4_1, ER_TYPE_Q5_0, ER_TYPE_Q5_1, ER_TYPE_Q8_0,
                                       ER_TYPE_Q2_K, ER_TYPE_Q3_K, ER_TYPE_Q4_K, ER_TYPE_Q5_K, ER_TYPE_Q6_K};
#define N_QUANT_TYPES (sizeof quant_types / sizeof quant_types[0])

/* Byte offsets of the f16 scales in each block (-1: none): random bytes elsewhere are
 * valid codes, random scales could be inf or NaN. */
static void scale_offsets(uint32_t type, int off[2]) {
    off[0] = off[1] = -1;
    switch (type) {
    case ER_TYPE_Q4_0: case ER_TYPE_Q5_0: case ER_TYPE_Q8_0: off[0] = 0; break;
    case ER_TYPE_Q4_1: case ER_TYPE_Q5_1: case ER_TYPE_Q4_K: case ER_TYPE_Q5_K: off[0] = 0; off[1] = 2; break;
    case ER_TYPE_Q2_K: off[0] = 80; off[1] = 82; break;
    case ER_TYPE_Q3_K: off[0] = 108; break;
    case ER_TYPE_Q6_K: off[0] = 208; break;
    default: break;
    }
}

/* Random bytes with finite scales in [-scale, scale]. */
static void random_blocks(uint32_t type, uint8_t *w, int64_t n, float scale) {
    const er_type_traits *t = er_type_get(type);
    const int64_t nb = n / t->block_size;
    int off[2];
    scale_offsets(type, off);
    for (size_t i = 0; i < (size_t)nb * t->type_size; i++)
        w[i] = (uint8_t)rng_next();
    for (int64_t b = 0; b < nb; b++)
        for (int k = 0; k < 2; k++)
            if (off[k] >= 0) {
                const uint16_t h = er_f32_to_f16(rng_uniform() * scale);
                memcpy(w + b * t->type_size + off[k], &h, 2);
            }
}

/* ---- the table ----------------------------------------------------------------------- */

static void test_table_rows(void) {
    for (size_t i = 0; i < N_QUANT_TYPES; i++) {
        const er_type_traits *t = er_type_get(quant_types[i]);
        CHECK(t && t->to_f32 && t->dot_f32 && t->from_f32, "type %u has reference kernels", quant_types[i]);
    }
    static const struct { uint32_t type, act; } cpu[] = {
        {ER_TYPE_F32, ER_TYPE_F32},   {ER_TYPE_F16, ER_TYPE_F32},   {ER_TYPE_BF16, ER_TYPE_F32},
        {ER_TYPE_Q4_0, ER_TYPE_Q8_0}, {ER_TYPE_Q4_1, ER_TYPE_Q8_1}, {ER_TYPE_Q5_0, ER_TYPE_Q8_0},
        {ER_TYPE_Q5_1, ER_TYPE_Q8_1}, {ER_TYPE_Q8_0, ER_TYPE_Q8_0}, {ER_TYPE_Q2_K, ER_TYPE_Q8_K},
        {ER_TYPE_Q3_K, ER_TYPE_Q8_K}, {ER_TYPE_Q4_K, ER_TYPE_Q8_K}, {ER_TYPE_Q5_K, ER_TYPE_Q8_K},
        {ER_TYPE_Q6_K, ER_TYPE_Q8_K},
    };
    for (size_t i = 0; i < sizeof cpu / sizeof cpu[0]; i++) {
        const cpu_kernels *r = cpu_kernels_ref(cpu[i].type), *g = cpu_kernels_get(cpu[i].type);
        CHECK(r && g && r->vec_dot_type == cpu[i].act && g->vec_dot_type == cpu[i].act && r->quantize_row &&
                  g->quantize_row,
              "CPU kernels of %s", er_type_get(cpu[i].type)->name);
    }
    CHECK(cpu_kernels_get(ER_TYPE_Q8_K) == NULL && cpu_kernels_get(ER_TYPE_I8) == NULL &&
              cpu_kernels_get(ER_TYPE_COUNT) == NULL,
          "no CPU kernels for activation-only or unknown types");
    CHECK(cpu_act_row_size(cpu_kernels_ref(ER_TYPE_Q4_K), 512) == 2 * sizeof(block_q8_K), "Q8_K row size");
}

/* ---- dequantization by hand ----------------------------------------------------------- */

static void test_dequant_by_hand(void) {
    float out[QK_K];
    /* Q4_0: d = 0.25, element j has code j % 16 (j < 16: low nibbles; j >= 16: high) */
    block_q4_0 a;
    a.d = er_f32_to_f16(0.25f);
    for (int j = 0; j < 16; j++)
        a.qs[j] = (uint8_t)(j | (15 - j) << 4);
    to_f32_q4_0_ref(&a, out, 32);
    int bad = 0;
    for (int j = 0; j < 16; j++)
        bad += out[j] != 0.25f * (float)(j - 8) || out[j + 16] != 0.25f * (float)(7 - j);
    CHECK(bad == 0, "Q4_0 by hand");

    /* Q5_1: d = 0.5, m = -3, codes j (0..31): qh bit j = bit 4 of j */
    block_q5_1 c;
    c.d = er_f32_to_f16(0.5f);
    c.m = er_f32_to_f16(-3.0f);
    uint32_t qh = 0;
    for (int j = 0; j < 32; j++)
        qh |= (uint32_t)((j >> 4) & 1) << j;
    memcpy(c.qh, &qh, 4);
    for (int j = 0; j < 16; j++)
        c.qs[j] = (uint8_t)((j & 0xF) | ((j + 16) & 0xF) << 4);
    to_f32_q5_1_ref(&c, out, 32);
    bad = 0;
    for (int j = 0; j < 32; j++)
        bad += out[j] != 0.5f * (float)j - 3.0f;
    CHECK(bad == 0, "Q5_1 by hand");

    /* Q4_K: d = 1, dmin = 0.5; sub-block j has sc = j + 1, m = 2j (j >= 4 uses the packed
     * high bits: sc up to 8, m up to 14, so set one scale to 63 to test the top bits) */
    int sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = j + 1;
        mn[j] = 2 * j;
    }
    sc[6] = 63;
    mn[7] = 50;
    block_q4_K k;
    memset(&k, 0, sizeof k);
    k.d = er_f32_to_f16(1.0f);
    k.dmin = er_f32_to_f16(0.5f);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            k.scales[j] = (uint8_t)sc[j];
            k.scales[j + 4] = (uint8_t)mn[j];
        } else {
            k.scales[j + 4] = (uint8_t)((sc[j] & 0xF) | (mn[j] & 0xF) << 4);
            k.scales[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            k.scales[j] |= (uint8_t)((mn[j] >> 4) << 6);
        }
    }
    for (int c4 = 0; c4 < 4; c4++)
        for (int l = 0; l < 32; l++)
            k.qs[32 * c4 + l] = (uint8_t)((l % 16) | (15 - l % 16) << 4);
    to_f32_q4_K_ref(&k, out, QK_K);
    bad = 0;
    for (int e = 0; e < QK_K; e++) {
        const int j = e / 32, l = e % 32, q = j % 2 ? 15 - l % 16 : l % 16;
        bad += out[e] != (float)sc[j] * (float)q - 0.5f * (float)mn[j];
    }
    CHECK(bad == 0, "Q4_K by hand (6-bit scale packing)");

    /* Q6_K: d = 2, scales[j] = j - 8, code of element e = e % 64 (q - 32 in -32..31) */
    block_q6_K s6;
    memset(&s6, 0, sizeof s6);
    s6.d = er_f32_to_f16(2.0f);
    for (int j = 0; j < 16; j++)
        s6.scales[j] = (int8_t)(j - 8);
    for (int e = 0; e < QK_K; e++) {
        const int h = e / 128, sb = (e / 32) % 4, l = e % 32, u = e % 64;
        s6.ql[64 * h + 32 * (sb & 1) + l] |= (uint8_t)((u & 0xF) << (sb < 2 ? 0 : 4));
        s6.qh[32 * h + l] |= (uint8_t)((u >> 4) << (2 * sb));
    }
    to_f32_q6_K_ref(&s6, out, QK_K);
    bad = 0;
    for (int e = 0; e < QK_K; e++)
        bad += out[e] != 2.0f * (float)(e / 16 - 8) * (float)(e % 64 - 32);
    CHECK(bad == 0, "Q6_K by hand");

    /* Q3_K: d = 1, scale of sub-block j = j - 16 (stored j + 16), code of e = e % 8 - 4 */
    block_q3_K s3;
    memset(&s3, 0, sizeof s3);
    s3.d = er_f32_to_f16(1.0f);
    for (int j = 0; j < 16; j++) {
        const int v = j + 16;
        s3.scales[j % 8] |= (uint8_t)((v & 0xF) << (j < 8 ? 0 : 4));
        s3.scales[8 + j % 4] |= (uint8_t)((v >> 4) << (2 * (j / 4)));
    }
    for (int e = 0; e < QK_K; e++) {
        const int h = e / 128, sb = (e / 32) % 4, l = e % 32, u = e % 8;
        s3.qs[32 * h + l] |= (uint8_t)((u & 3) << (2 * sb));
        s3.hmask[l] |= (uint8_t)((u >> 2) << (4 * h + sb));
    }
    to_f32_q3_K_ref(&s3, out, QK_K);
    bad = 0;
    for (int e = 0; e < QK_K; e++)
        bad += out[e] != (float)(e / 16 - 16) * (float)(e % 8 - 4);
    CHECK(bad == 0, "Q3_K by hand");
}

/* ---- reference quantizers --------------------------------------------------------------- */

/* RMS error of quantize -> dequantize on N(0, 1) data, per type: the formats' resolution
 * (measured: 0.081 0.070 0.040 0.034 0.0054 0.26 0.144 0.070 0.034 0.016); each bound
 * leaves ~10% above what our quantizer reaches and sits below GGML's reference quantizer
 * (0.086 0.078 0.043 0.038 0.0054 0.297 0.151 0.072 0.036 0.018), except Q8_0 which is
 * GGML's rule exactly. */
static void test_roundtrip(void) {
    static const float max_rms[N_QUANT_TYPES] = {0.085f, 0.075f, 0.042f, 0.036f, 0.0056f,
                                                 0.28f,  0.150f, 0.0715f, 0.0355f, 0.0172f};
    enum { N = 64 * QK_K };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    uint8_t *q = malloc(N * 2), *q2 = malloc(N * 2);
    for (int i = 0; i < N; i++)
        x[i] = rng_gauss();
    for (size_t ti = 0; ti < N_QUANT_TYPES; ti++) {
        const er_type_traits *t = er_type_get(quant_types[ti]);
        t->from_f32(x, q, N);
        t->to_f32(q, y, N);
        double se = 0;
        for (int i = 0; i < N; i++)
            se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        const double rms = sqrt(se / N);
        CHECK(rms < max_rms[ti], "%s round-trip RMS %.5f (bound %.4f)", t->name, rms, max_rms[ti]);
        /* quantizing the dequantized values again represents them exactly: the search finds
         * the scale they came from. Not quite for the K types whose sub-scales are a second
         * level: the float fit of a sub-block may prefer other codes (the affine ones spread
         * their codes over the whole range), which the integer sub-scales then cannot follow
         * exactly. Measured: 0 for the 32-element types and Q3_K; 8%, 7%, 17%, 2% of the RMS
         * for Q2_K, Q4_K, Q5_K, Q6_K. */
        static const double requant_limit[N_QUANT_TYPES] = {1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 0.15, 1e-6, 0.15, 0.25, 0.04};
        t->from_f32(y, q2, N);
        float *z = malloc(N * sizeof *z);
        t->to_f32(q2, z, N);
        double se2 = 0;
        for (int i = 0; i < N; i++)
            se2 += ((double)y[i] - z[i]) * ((double)y[i] - z[i]);
        CHECK(sqrt(se2 / N) <= requant_limit[ti] * rms, "%s re-quantizing its own output: RMS %.2g (bound %.2g)",
              t->name, sqrt(se2 / N), requant_limit[ti] * rms);
        free(z);
    }
    free(x);
    free(y);
    free(q);
    free(q2);
}

/* Zeros, constants, spikes, huge and tiny values: finite output, sensible values. */
static void test_quantize_edges(void) {
    static float x[QK_K], y[QK_K];
    static uint8_t q[sizeof(block_q6_K)];
    for (size_t ti = 0; ti < N_QUANT_TYPES; ti++) {
        const er_type_traits *t = er_type_get(quant_types[ti]);
        const int64_t n = t->block_size;
        const char *what[] = {"zeros", "constant 0.7", "constant -3", "one spike", "1e30", "1e-30", "ramp"};
        for (int c = 0; c < 7; c++) {
            for (int64_t i = 0; i < n; i++) {
                const float v[] = {0.0f, 0.7f, -3.0f, i == 5 ? 100.0f : 0.01f, 1e30f * (i % 2 ? 1 : -1),
                                   1e-30f * (float)i, (float)i / (float)n - 0.5f};
                x[i] = v[c];
            }
            t->from_f32(x, q, n);
            t->to_f32(q, y, n);
            int finite = 1;
            double err = 0, ss = 0;
            for (int64_t i = 0; i < n; i++) {
                finite &= isfinite(y[i]);
                err += fabs((double)x[i] - y[i]);
                ss += fabs((double)x[i]);
            }
            CHECK(finite, "%s %s: non-finite output", t->name, what[c]);
            if (c == 0)
                CHECK(err == 0, "%s zeros stay zeros", t->name);
            else if (c == 3) /* the spike itself is represented to within its type's step */
                CHECK(fabsf(y[5] - 100.0f) < 4.0f, "%s spike: 100 -> %g", t->name, y[5]);
            else if (c == 5) /* below what an f16 scale resolves: zeros, not garbage */
                CHECK(err <= ss, "%s %s: mean abs error %.3g of mean %.3g", t->name, what[c], err / n, ss / n);
            else if (c != 4) /* 1e30 saturates the f16 scale */
                CHECK(err <= 0.2 * ss, "%s %s: mean abs error %.3g of mean %.3g", t->name, what[c], err / n, ss / n);
        }
    }
}

/* ---- CPU kernels: activation quantization ---------------------------------------------- */

/* The activation quantizers compute what llama.cpp's CPU backend computes on x86 (kernels.c;
 * tests/quant compares them with ggml's own functions byte for byte). Here, without Python:
 * hand-made blocks whose codes ggml gives. With max|x| = 127 the multiplier 127 / amax is
 * exactly 1 (and Q8_K's -127 / max exactly -1), so each value is its own product and .5 ties
 * round to even: truncation (3.5 -> 3) and ggml's reference rule roundf (2.5 -> 3) give other
 * codes. The block of max 11 pins the multiplier: x * (127 / 11) is just above 2.5 (code 3),
 * x * (1 / (11 / 127)) exactly 2.5. */
static void test_act_ties(void) {
    enum { N = QK_K };
    static const float tie[13] = {127.0f, 2.5f,   3.5f,    -2.5f,         -3.5f,        0.5f, -0.5f,
                                  1.5f,   -1.5f,  126.5f, -126.5f, 0x1.fffffep-2f, 0x1.000002p-1f};
    static const int8_t want[13] = {127, 2, 4, -2, -4, 0, 0, 2, -2, 126, -126, 0, 1};
    float x[N] = {0};
    uint8_t out[2 * sizeof(block_q8_K)];
    memcpy(x, tie, sizeof tie);
    x[32] = 11.0f;
    x[33] = 0x1.bb76fp-3f;
    for (int impl = 0; impl < 2; impl++) {
        const uint32_t via[2] = {ER_TYPE_Q8_0, ER_TYPE_Q4_1}; /* Q8_0 and Q8_1 activations */
        for (int f = 0; f < 2; f++) {
            const cpu_kernels *k = impl ? cpu_kernels_avx2(via[f]) : cpu_kernels_ref(via[f]);
            if (!k)
                continue;
            k->quantize_row(x, out, 64);
            const size_t bs = f ? sizeof(block_q8_1) : sizeof(block_q8_0), qs = f ? 4 : 2;
            const int8_t *q0 = (const int8_t *)(out + qs), *q1 = (const int8_t *)(out + bs + qs);
            int bad = 0, sum = 0;
            for (int i = 0; i < 32; i++) {
                bad += q0[i] != (i < 13 ? want[i] : 0);
                sum += q0[i];
            }
            uint16_t d0, d1, s0, s1;
            memcpy(&d0, out, 2);
            memcpy(&d1, out + bs, 2);
            memcpy(&s0, out + 2, 2);
            memcpy(&s1, out + bs + 2, 2);
            const int s_ok = !f || (s0 == er_f32_to_f16(128.0f) && s1 == er_f32_to_f16(11.0f / 127.0f * 130.0f));
            CHECK(bad == 0 && sum == 128 && q1[0] == 127 && q1[1] == 3 && d0 == er_f32_to_f16(1.0f) &&
                      d1 == er_f32_to_f16(11.0f / 127.0f) && s_ok,
                  "%s %s ties as ggml's x86 quantize_row (half to even, x * (127 / amax)): %d codes differ, "
                  "code of 0x1.bb76fp-3 in a block of max 11: %d (want 3)",
                  k->impl, f ? "Q8_1" : "Q8_0", bad, q1[1]);
        }
        /* Q8_K: max = +127 first (iscale = -1, d = -1: codes negated), -127 later */
        const cpu_kernels *k = impl ? cpu_kernels_avx2(ER_TYPE_Q4_K) : cpu_kernels_ref(ER_TYPE_Q4_K);
        if (!k)
            continue;
        float xk[N] = {0};
        memcpy(xk, tie + 1, 12 * sizeof(float));
        xk[100] = 127.0f;
        xk[200] = -127.0f;
        k->quantize_row(xk, out, N);
        const block_q8_K *b = (const block_q8_K *)out;
        int bad = 0;
        for (int i = 0; i < 12; i++)
            bad += b->qs[i] != -want[i + 1];
        CHECK(bad == 0 && b->d == -1.0f && b->qs[100] == -127 && b->qs[200] == 127 && b->bsums[0] == -1 &&
                  b->bsums[6] == -127 && b->bsums[12] == 127,
              "%s Q8_K ties as ggml's quantize_row_q8_K_ref (nearest_int, iscale = -127 / max): %d codes differ, d %g",
              k->impl, bad, b->d);
    }
}

/* Scalar and AVX2 write the same bytes, corner blocks included: zeros, signed zeros,
 * subnormals (127 / amax overflows to inf: code -128 for Q8_0/Q8_1, 0 for Q8_K),
 * infinities, f16-overflowing scales, FLT_MAX. */
static void test_act_quantize(void) {
    static const uint32_t formats[][2] = {{ER_TYPE_Q4_0, ER_TYPE_Q8_0}, {ER_TYPE_Q4_1, ER_TYPE_Q8_1},
                                          {ER_TYPE_Q4_K, ER_TYPE_Q8_K}};
    enum { N = 24 * QK_K };
    float *x = malloc(N * sizeof *x);
    uint8_t *a = malloc(N * 2), *b = malloc(N * 2);
    for (int i = 0; i < N; i++) {
        const int blk = i / QK_K;
        const float g = rng_gauss();
        x[i] = blk == 0    ? 0.0f
               : blk == 1  ? -0.0f
               : blk == 2  ? g * 1e-40f                           /* subnormal */
               : blk == 3  ? g * 1e-37f                           /* normal, 127 / amax = inf */
               : blk == 4  ? g * 5e-37f                           /* 127 / amax finite */
               : blk == 5  ? g * 65504.0f * 127.0f * 1.5f         /* d overflows f16 */
               : blk == 6  ? (i % 97 == 5 ? INFINITY : g)         /* an infinity */
               : blk == 7  ? (i % 89 == 3 ? -3.4028235e38f : g)   /* -FLT_MAX */
               : blk == 8  ? (float)((int)(g * 40.0f)) + 0.5f     /* ties */
                           : g * (i % 512 < 256 ? 1e-3f : 10.0f); /* two scales */
    }
    for (size_t f = 0; f < 3; f++) {
        const cpu_kernels *r = cpu_kernels_ref(formats[f][0]), *v = cpu_kernels_avx2(formats[f][0]);
        const size_t bytes = cpu_act_row_size(r, N);
        r->quantize_row(x, a, N);
        if (v) {
            memset(b, 0xAA, bytes);
            v->quantize_row(x, b, N);
            CHECK(memcmp(a, b, bytes) == 0, "%s activations: AVX2 bytes equal scalar", er_type_get(formats[f][1])->name);
        }
    }
    /* Q8_K by hand: bsums, and ggml's scale: d = 1 / (-127 / max), the maximum's code -127 */
    const cpu_kernels *r = cpu_kernels_ref(ER_TYPE_Q4_K);
    block_q8_K k;
    for (int i = 0; i < QK_K; i++)
        x[i] = i == 100 ? 124.0f : (float)(i % 16) - 7.0f; /* max |x| = 124 at 100 */
    r->quantize_row(x, &k, QK_K);
    int bad = 0;
    for (int j = 0; j < 16; j++) {
        int s = 0;
        for (int i = 0; i < 16; i++)
            s += k.qs[16 * j + i];
        bad += s != k.bsums[j];
    }
    CHECK(bad == 0 && k.d == 1.0f / (-127.0f / 124.0f) && k.qs[100] == -127 && k.qs[0] == 7,
          "Q8_K by hand: d %g q[100] %d q[0] %d", k.d, k.qs[100], k.qs[0]);
    free(x);
    free(a);
    free(b);
}

/* ---- CPU kernels: dot products ------------------------------------------------------- */

#define K_SIGMA 6.0 /* the rounding's error, in its own sigmas (header) */

typedef struct dot_stats {
    double worst_tight, worst_act; /* max over rows of error / bound */
    double worst_sigma;            /* max over rows of the rounding's error in sigmas */
} dot_stats;

/* code i of a row of activations in format fmt (Q8_0, Q8_1, Q8_K) */
static int act_code(const uint8_t *xq, uint32_t fmt, int64_t i) {
    if (fmt == ER_TYPE_Q8_K)
        return ((const block_q8_K *)xq)[i / QK_K].qs[i % QK_K];
    const size_t bs = fmt == ER_TYPE_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q8_1);
    return ((const int8_t *)(xq + (size_t)(i / 32) * bs + (fmt == ER_TYPE_Q8_0 ? 2 : 4)))[i % 32];
}

static double block_amax(const float *v, int64_t start, int64_t len) {
    double m = 0;
    for (int64_t i = start; i < start + len; i++)
        m = fmax(m, fabs(v[i]));
    return m;
}

/* One (w, x) pair of length n: AVX2 vs scalar, scalar vs the f32 reference. */
static void check_dot(uint32_t type, const uint8_t *w, const float *x, int64_t n, dot_stats *st, const char *what) {
    const er_type_traits *t = er_type_get(type);
    const cpu_kernels *r = cpu_kernels_ref(type), *v = cpu_kernels_avx2(type);
    const size_t act_bytes = cpu_act_row_size(r, n);
    uint8_t *xq = malloc(act_bytes ? act_bytes : 1);
    float *wf = malloc((size_t)n * sizeof *wf), *xd = malloc((size_t)n * sizeof *xd);
    t->to_f32(w, wf, n);
    r->quantize_row(x, xq, n);
    /* the activations as the kernels see them */
    int64_t act_block = 1;
    double c = 0;
    if (r->vec_dot_type == ER_TYPE_F32) {
        memcpy(xd, x, (size_t)n * sizeof *xd);
    } else if (r->vec_dot_type == ER_TYPE_Q8_K) {
        to_f32_q8_K_ref(xq, xd, n);
        act_block = QK_K;
        c = (0.5 + 1.0 / 65536) / 127.0;
    } else { /* Q8_0 and Q8_1: f16 d then codes */
        const size_t bs = r->vec_dot_type == ER_TYPE_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q8_1);
        const size_t qs_off = r->vec_dot_type == ER_TYPE_Q8_0 ? 2 : 4;
        for (int64_t b = 0; b < n / 32; b++) {
            uint16_t d;
            memcpy(&d, xq + b * bs, 2);
            const int8_t *qs = (const int8_t *)(xq + b * bs + qs_off);
            for (int i = 0; i < 32; i++)
                xd[b * 32 + i] = er_f16_to_f32(d) * (float)qs[i];
        }
        act_block = 32;
        c = (0.5 + 127.0 / 2048) / 127.0;
    }
    double M = 0, act_err = 0;
    for (int64_t i = 0; i < n; i++)
        M += 3.0 * block_amax(wf, i / 32 * 32, 32) * fabs(xd[i]);
    for (int64_t b = 0; b < n / act_block; b++) {
        double sw = 0;
        for (int64_t i = b * act_block; i < (b + 1) * act_block; i++)
            sw += fabs(wf[i]);
        act_err += c * block_amax(x, b * act_block, act_block) * sw;
        if (r->vec_dot_type == ER_TYPE_Q8_1) { /* |m| * |s - d * sum q| */
            uint16_t m;
            memcpy(&m, w + b * t->type_size + 2, 2);
            act_err += fabs(er_f16_to_f32(m)) * (32.0 / 1024.0) * block_amax(x, b * act_block, act_block);
        }
    }
    const double tight = 4.0 * ((double)n / 16 + 16) * 0x1p-24 * M + 1e-30;
    const float s = r->vec_dot(w, xq, n);
    if (v) {
        uint8_t *xq2 = malloc(act_bytes ? act_bytes : 1);
        v->quantize_row(x, xq2, n);
        const float a = v->vec_dot(w, xq2, n);
        const double e = fabs((double)a - s);
        st->worst_tight = fmax(st->worst_tight, e / tight);
        CHECK(e <= tight, "%s %s n=%lld: AVX2 %.9g vs scalar %.9g (bound %.3g)", t->name, what, (long long)n, a,
              s, tight);
        free(xq2);
    }
    const float ref_q = t->dot_f32(w, xd, n); /* reference on the rounded activations */
    const float ref = t->dot_f32(w, x, n);    /* reference on the f32 activations */
    double e_q = fabs((double)s - ref_q);
    double bound_q = tight + (r->vec_dot_type == ER_TYPE_Q8_1 ? act_err : 0) + 2.0 * n * 0x1p-24 * M;
    CHECK(e_q <= bound_q, "%s %s n=%lld: scalar q8 %.9g vs f32 reference on the same rounded activations %.9g", t->name,
          what, (long long)n, s, ref_q);
    const double e = fabs((double)s - ref), bound = act_err + bound_q;
    st->worst_act = fmax(st->worst_act, e / bound);
    CHECK(e <= bound, "%s %s n=%lld: q8 dot %.9g vs f32 reference %.9g: error %.3g > bound %.3g", t->name, what,
          (long long)n, s, ref, e, bound);
    if (act_block > 1) { /* the rounding's error against its own size (header), in double */
        double var = 0, err = 0;
        for (int64_t b = 0; b < n / act_block; b++) {
            const double step = r->vec_dot_type == ER_TYPE_Q8_K ? ((const block_q8_K *)xq)[b].d
                                                                 : block_amax(x, b * act_block, act_block) / 127.0;
            for (int64_t i = b * act_block; i < (b + 1) * act_block; i++) {
                var += (double)wf[i] * wf[i] * step * step / 12.0;
                err += (double)wf[i] * (step * act_code(xq, r->vec_dot_type, i) - x[i]);
            }
        }
        const double z = fabs(err) / (sqrt(var) + 1e-300);
        st->worst_sigma = fmax(st->worst_sigma, z);
        CHECK(z <= K_SIGMA, "%s %s n=%lld: the activations' rounding moves the dot by %.3g = %.2f sigma (bound %.1f)",
              t->name, what, (long long)n, err, z, K_SIGMA);
    }
    free(xq);
    free(wf);
    free(xd);
}

static void test_dots(void) {
    static const uint32_t types[] = {ER_TYPE_F32,  ER_TYPE_F16,  ER_TYPE_BF16, ER_TYPE_Q4_0, ER_TYPE_Q4_1,
                                     ER_TYPE_Q5_0, ER_TYPE_Q5_1, ER_TYPE_Q8_0, ER_TYPE_Q2_K, ER_TYPE_Q3_K,
                                     ER_TYPE_Q4_K, ER_TYPE_Q5_K, ER_TYPE_Q6_K};
    static const int64_t lengths[] = {256, 768, 4096, 4096 + 512};
    const int64_t nmax = 4096 + 512;
    float *x = malloc((size_t)nmax * sizeof *x), *wsrc = malloc((size_t)nmax * sizeof *wsrc);
    uint8_t *w = malloc((size_t)nmax * 4);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const er_type_traits *t = er_type_get(types[ti]);
        dot_stats st = {0, 0, 0};
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
            const int64_t n = lengths[li];
            for (int rep = 0; rep < 3; rep++) {
                for (int64_t i = 0; i < n; i++) {
                    x[i] = rng_gauss() * (rep == 2 ? 30.0f : 1.0f);
                    wsrc[i] = rng_gauss() * 0.05f;
                }
                if (rep == 1)
                    for (int64_t i = 0; i < n; i += 7) /* outliers */
                        x[i] *= 20.0f;
                t->from_f32(wsrc, w, n);
                check_dot(types[ti], w, x, n, &st, "quantized N(0,1)");
                if (t->block_size > 1) { /* every code pattern: random bytes, finite scales */
                    random_blocks(types[ti], w, n, 0.01f);
                    check_dot(types[ti], w, x, n, &st, "random blocks");
                }
                /* weights along the activations (x . x, as q . k of similar vectors): a biased
                 * rounding (truncation: -step/2 * sign(x) on average) adds up over all n
                 * elements here instead of cancelling, ~0.5 sqrt(12 n) sigma */
                for (int64_t i = 0; i < n; i++)
                    wsrc[i] = x[i] * 0.05f;
                t->from_f32(wsrc, w, n);
                check_dot(types[ti], w, x, n, &st, "weights = activations");
            }
        }
        printf("       %-5s dot: worst AVX2-vs-scalar error %.3f of bound, worst q8-vs-f32 error %.3f of bound, "
               "%.2f sigma (bound %.1f)\n", t->name, st.worst_tight, st.worst_act, st.worst_sigma, K_SIGMA);
    }
    free(x);
    free(wsrc);
    free(w);
}

/* ---- GGUF writer: a round trip through our reader ----------------------------------------- */

static gguf_string gs(const char *s) { return (gguf_string){s, strlen(s)}; }

static void test_gguf_write(void) {
    char path[] = "/tmp/er-test-write-XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0)
        return;
    close(fd);
    gguf_writer *w = NULL;
    CHECK(gguf_writer_create(&w) == ER_OK, "create");
    /* metadata: scalars, a string, a string array, a nested array, a replaced and a removed key */
    gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = GGUF_TYPE_INT8;
    v.i64 = -5;
    gguf_writer_set(w, gs("a.i8"), &v);
    v.type = GGUF_TYPE_FLOAT32;
    v.f64 = 0.1f;
    gguf_writer_set(w, gs("a.f32"), &v);
    v.type = GGUF_TYPE_UINT64;
    v.u64 = UINT64_MAX - 1;
    gguf_writer_set(w, gs("a.u64"), &v);
    gguf_writer_set_str(w, "a.str", "hello");
    gguf_writer_set_u32(w, "a.gone", 1);
    gguf_string strs[3] = {gs("x"), gs(""), gs("yz")};
    gguf_value sa;
    memset(&sa, 0, sizeof sa);
    sa.type = GGUF_TYPE_ARRAY;
    sa.arr.type = GGUF_TYPE_STRING;
    sa.arr.n = 3;
    sa.arr.strs = strs;
    gguf_writer_set(w, gs("a.strs"), &sa);
    const int32_t ints0[2] = {1, -2}, ints1[1] = {7};
    gguf_value items[2], nested;
    memset(items, 0, sizeof items);
    memset(&nested, 0, sizeof nested);
    for (int i = 0; i < 2; i++) {
        items[i].type = GGUF_TYPE_ARRAY;
        items[i].arr.type = GGUF_TYPE_INT32;
        items[i].arr.n = i ? 1 : 2;
        items[i].arr.raw = (const uint8_t *)(i ? ints1 : ints0);
    }
    nested.type = GGUF_TYPE_ARRAY;
    nested.arr.type = GGUF_TYPE_ARRAY;
    nested.arr.n = 2;
    nested.arr.items = items;
    gguf_writer_set(w, gs("a.nested"), &nested);
    gguf_writer_set_u32(w, "a.i8", 9); /* replaced in place: stays first */
    gguf_writer_remove(w, "a.gone");
    gguf_writer_set_u32(w, "general.alignment", 64);
    /* tensors: F32 [5], Q4_K [256, 2], Q8_0 [64, 3] */
    const int64_t ne0[1] = {5}, ne1[2] = {256, 2}, ne2[2] = {64, 3}, bad[2] = {100, 2};
    CHECK(gguf_writer_add_tensor(w, gs("t.f32"), 1, ne0, ER_TYPE_F32) == ER_OK &&
              gguf_writer_add_tensor(w, gs("t.q4k"), 2, ne1, ER_TYPE_Q4_K) == ER_OK &&
              gguf_writer_add_tensor(w, gs("t.q80"), 2, ne2, ER_TYPE_Q8_0) == ER_OK,
          "add tensors");
    CHECK(gguf_writer_add_tensor(w, gs("t.bad"), 2, bad, ER_TYPE_Q4_0) == ER_ERR_INVALID_ARG, "row of 100 in Q4_0 refused");
    CHECK(gguf_writer_add_tensor(w, gs("t.f32"), 1, ne0, ER_TYPE_F32) == ER_ERR_INVALID_ARG, "duplicate name refused");
    uint8_t data[3][300];
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 300; i++)
            data[t][i] = (uint8_t)(rng_next() >> 7);
    const size_t sizes[3] = {20, 2 * 144, 3 * 2 * 34};
    CHECK(gguf_writer_tensor_size(w, 1) == sizes[1], "tensor size");
    CHECK(gguf_writer_begin(w, path) == ER_OK, "begin: %s", er_last_error());
    CHECK(gguf_writer_write_tensor(w, data[0], 19) == ER_ERR_INVALID_ARG, "a wrong size is refused");
    for (int t = 0; t < 2; t++)
        CHECK(gguf_writer_write_tensor(w, data[t], sizes[t]) == ER_OK, "write tensor %d", t);
    CHECK(gguf_writer_finish(w) == ER_ERR_INVALID_ARG, "finishing with a tensor missing is refused");
    CHECK(gguf_writer_write_tensor(w, data[2], sizes[2]) == ER_OK && gguf_writer_finish(w) == ER_OK, "finish");
    gguf_writer_free(w);

    gguf_file *f = NULL;
    CHECK(gguf_open(path, &f) == ER_OK, "our reader opens what we wrote: %s", er_last_error());
    if (f) {
        CHECK(f->version == 3 && f->n_kv == 7 && f->n_tensors == 3 && f->alignment == 64 && f->data_offset % 64 == 0,
              "header: version %u, %llu pairs, %llu tensors, alignment %llu", f->version, (unsigned long long)f->n_kv,
              (unsigned long long)f->n_tensors, (unsigned long long)f->alignment);
        const char *order[7] = {"a.i8", "a.f32", "a.u64", "a.str", "a.strs", "a.nested", "general.alignment"};
        int bad_order = 0;
        for (uint64_t i = 0; i < f->n_kv && i < 7; i++)
            bad_order += !gguf_string_eq(f->kv[i].key, order[i]);
        CHECK(bad_order == 0, "keys in insertion order, the replaced one in place, the removed one gone");
        const gguf_kv *kv = gguf_find_kv(f, "a.i8");
        CHECK(kv && kv->value.type == GGUF_TYPE_UINT32 && kv->value.u64 == 9, "replaced value");
        kv = gguf_find_kv(f, "a.f32");
        CHECK(kv && kv->value.type == GGUF_TYPE_FLOAT32 && kv->value.f64 == (double)0.1f, "f32");
        kv = gguf_find_kv(f, "a.u64");
        CHECK(kv && kv->value.type == GGUF_TYPE_UINT64 && kv->value.u64 == UINT64_MAX - 1, "u64");
        kv = gguf_find_kv(f, "a.str");
        CHECK(kv && kv->value.type == GGUF_TYPE_STRING && gguf_string_eq(kv->value.str, "hello"), "string");
        kv = gguf_find_kv(f, "a.strs");
        CHECK(kv && kv->value.arr.type == GGUF_TYPE_STRING && kv->value.arr.n == 3 &&
                  gguf_string_eq(kv->value.arr.strs[1], "") && gguf_string_eq(kv->value.arr.strs[2], "yz"),
              "string array");
        kv = gguf_find_kv(f, "a.nested");
        int64_t e0 = 0, e1 = 0;
        CHECK(kv && kv->value.arr.type == GGUF_TYPE_ARRAY && kv->value.arr.n == 2 && kv->value.arr.items[0].arr.n == 2 &&
                  gguf_array_int(&kv->value.arr.items[0], 1, &e0) && e0 == -2 &&
                  gguf_array_int(&kv->value.arr.items[1], 0, &e1) && e1 == 7,
              "nested array");
        int bad_data = 0;
        for (int t = 0; t < 3; t++)
            bad_data += f->tensors[t].size != sizes[t] || memcmp(f->tensors[t].data, data[t], sizes[t]) != 0 ||
                        f->tensors[t].offset % 64 != 0;
        CHECK(bad_data == 0 && f->tensors[1].type == ER_TYPE_Q4_K && f->tensors[2].ne[1] == 3, "tensor infos and data");
        gguf_close(f);
    }
    remove(path);

    /* a file begun and never finished is removed */
    CHECK(gguf_writer_create(&w) == ER_OK && gguf_writer_add_tensor(w, gs("t"), 1, ne0, ER_TYPE_F32) == ER_OK &&
              gguf_writer_begin(w, path) == ER_OK,
          "begin");
    gguf_writer_free(w);
    CHECK(access(path, F_OK) != 0, "an unfinished file is removed");
}

/* Entries in dir other than . and .. */
static int n_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    if (d)
        closedir(d);
    return n;
}

/* The target is replaced only by a finished file: an existing one survives a writer
 * freed unfinished byte for byte, a directory or a FIFO is refused (and stays), and no
 * temporary file is left behind either way. */
static void test_gguf_write_replace(void) {
    char dir[] = "/tmp/er-test-replace-XXXXXX", path[64], fifo[64], sub[64], buf[16] = {0};
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    snprintf(path, sizeof path, "%s/out.gguf", dir);
    snprintf(fifo, sizeof fifo, "%s/fifo.gguf", dir);
    snprintf(sub, sizeof sub, "%s/dir.gguf", dir);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite("precious", 1, 8, f) == 8 && fclose(f) == 0, "write %s", path);
    const int64_t ne[1] = {8};
    const float data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    gguf_writer *w = NULL;
    CHECK(gguf_writer_create(&w) == ER_OK && gguf_writer_add_tensor(w, gs("t"), 1, ne, ER_TYPE_F32) == ER_OK &&
              gguf_writer_begin(w, path) == ER_OK && gguf_writer_write_tensor(w, data, sizeof data) == ER_OK,
          "begin over an existing file: %s", er_last_error());
    CHECK(n_entries(dir) == 2, "the temporary file is beside the target");
    gguf_writer_free(w);
    f = fopen(path, "rb");
    CHECK(f && fread(buf, 1, sizeof buf, f) == 8 && !memcmp(buf, "precious", 8), "an unfinished writer leaves the old file");
    if (f)
        fclose(f);
    CHECK(n_entries(dir) == 1, "and removes its temporary file");

    CHECK(mkfifo(fifo, 0600) == 0 && mkdir(sub, 0700) == 0, "mkfifo, mkdir");
    const char *const refused[2] = {fifo, sub};
    for (int i = 0; i < 2; i++) {
        struct stat sb;
        CHECK(gguf_writer_create(&w) == ER_OK && gguf_writer_add_tensor(w, gs("t"), 1, ne, ER_TYPE_F32) == ER_OK &&
                  gguf_writer_begin(w, refused[i]) == ER_ERR_INVALID_ARG && strstr(er_last_error(), refused[i]) &&
                  strstr(er_last_error(), i ? "directory" : "FIFO"),
              "%s refused: %s", refused[i], er_last_error());
        gguf_writer_free(w);
        CHECK(stat(refused[i], &sb) == 0 && (i ? S_ISDIR(sb.st_mode) : S_ISFIFO(sb.st_mode)), "%s is still there",
              refused[i]);
    }
    CHECK(n_entries(dir) == 3, "nothing else was created");

    gguf_file *g = NULL;
    CHECK(gguf_writer_create(&w) == ER_OK && gguf_writer_add_tensor(w, gs("t"), 1, ne, ER_TYPE_F32) == ER_OK &&
              gguf_writer_begin(w, path) == ER_OK && gguf_writer_write_tensor(w, data, sizeof data) == ER_OK &&
              gguf_writer_finish(w) == ER_OK,
          "replace an existing file: %s", er_last_error());
    gguf_writer_free(w);
    CHECK(n_entries(dir) == 3 && gguf_open(path, &g) == ER_OK && g->n_tensors == 1 &&
              !memcmp(g->tensors[0].data, data, sizeof data),
          "the finished file replaces it, and no temporary file is left");
    gguf_close(g);
    unlink(path);
    unlink(fifo);
    rmdir(sub);
    rmdir(dir);
}

/* ---- quantize targets: which tensor gets which type (the rest: tests/quant vs llama.cpp) --- */

static void test_mix(void) {
    const quant_mix *m = quant_mix_find("q4_k_m"), *pure = quant_mix_find("Q4_K");
    CHECK(m && m->file_type == 15 && m->base == ER_TYPE_Q4_K && pure && pure->file_type == 15 && !quant_mix_find("Q7"),
          "targets by name");
    if (!m || !pure)
        return;
    const quant_model_desc d = {8, 8, 0, 0}; /* 8 layers, untied */
    const int64_t row[2] = {4096, 4096}, odd[2] = {192, 4096}, vec[1] = {4096};
    CHECK(quant_mix_tensor_type(m, &d, "blk.3.attn_norm.weight", 1, vec, ER_TYPE_F32, NULL) == ER_TYPE_F32,
          "norms keep their type");
    CHECK(quant_mix_tensor_type(m, &d, "output.weight", 2, row, ER_TYPE_F16, NULL) == ER_TYPE_Q6_K, "output in Q6_K");
    CHECK(quant_mix_tensor_type(m, &d, "token_embd.weight", 2, row, ER_TYPE_F16, NULL) == ER_TYPE_Q4_K,
          "untied embedding in the base type");
    /* llama.cpp's use_more_bits over 8 layers: i < 1 || i >= 7 || (i - 1) % 3 == 2 -> 0, 3, 6, 7 */
    static const int more[8] = {1, 0, 0, 1, 0, 0, 1, 1};
    int bad = 0;
    for (int il = 0; il < 8; il++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", il);
        bad += quant_mix_tensor_type(m, &d, name, 2, row, ER_TYPE_F32, NULL) != (more[il] ? ER_TYPE_Q6_K : ER_TYPE_Q4_K);
        snprintf(name, sizeof name, "blk.%d.attn_v.weight", il);
        bad += quant_mix_tensor_type(m, &d, name, 2, row, ER_TYPE_F32, NULL) != (more[il] ? ER_TYPE_Q6_K : ER_TYPE_Q4_K);
        bad += quant_mix_tensor_type(pure, &d, name, 2, row, ER_TYPE_F32, NULL) != ER_TYPE_Q4_K;
    }
    CHECK(bad == 0, "Q4_K_M: attn_v and ffn_down in Q6_K in layers 0, 3, 6, 7; pure Q4_K everywhere");
    int fell_back = 0;
    CHECK(quant_mix_tensor_type(pure, &d, "blk.0.attn_q.weight", 2, odd, ER_TYPE_F32, &fell_back) == ER_TYPE_Q5_0 &&
              fell_back,
          "rows of 192: Q4_K falls back to Q5_0");
    CHECK(quant_mix_tensor_type(quant_mix_find("Q4_0"), &d, "blk.0.attn_q.weight", 2, (const int64_t[2]){100, 4},
                                ER_TYPE_F32, NULL) == ER_TYPE_F16,
          "rows of 100: F16");
}

void test_quant(void) {
    test_table_rows();
    test_dequant_by_hand();
    test_roundtrip();
    test_quantize_edges();
    test_act_quantize();
    test_act_ties();
    test_dots();
    test_gguf_write();
    test_gguf_write_replace();
    test_mix();
}
