/*
 * kernels.c - the CPU kernel table (see kernels.h) and its scalar reference versions.
 *
 * What the q8 dot products compute, per weight block of B elements against activation
 * block(s) of the same elements:
 *   32-element types   sum_b  d_w * d_x * sum_i q_w,i * q_x,i   (+ m_w * s_x for _1 types)
 *   K types            sum_b  d_x * (d * sum_j sc_j * sum_{i in j} q_i * q_x,i
 *                                    - dmin * sum_j m_j * bsum_j)
 * The inner sums are exact int32 (|sum| < 2^28 for every type); only the scale products and
 * the accumulation across blocks are float. The scalar versions accumulate blocks in order
 * in one float; the AVX2 versions (kernels_avx2.c) in 8 lanes with FMA.
 *
 * Activation quantization: bit for bit what llama.cpp's CPU backend computes on an x86 build
 * with AVX2 (ggml-cpu's type_traits_cpu[].from_float), which is not always ggml's reference:
 *   Q8_0, Q8_1  ggml-cpu/arch/x86/quants.c quantize_row_q8_0/_q8_1 (AVX2), not ggml-quants.c's
 *               quantize_row_q8_0_ref (which rounds half away from zero, roundf, and multiplies
 *               by 1/d): d = amax / 127, q = x * (127 / amax) rounded half to even; Q8_1's
 *               s = d * (float)(sum of the codes).
 *   Q8_K        ggml-quants.c quantize_row_q8_K_ref (x86 has no SIMD version): max = the first
 *               element of largest |x|, with its sign; iscale = -127 / max; q = min(127,
 *               nearest_int(iscale * x)) (half to even); d = 1 / iscale. So d < 0 when max > 0
 *               and the largest element's code is always -127.
 * Corner cases come out as ggml's instructions give them: an inf or NaN product (inf input,
 * or 127 / amax = inf for amax < 3.7e-37, subnormals included) is INT32_MIN after vcvtps2dq
 * (code -128, and a wrapped Q8_1 sum) but 0 after nearest_int (Q8_K). tests/quant
 * compares both versions with ggml's own functions byte for byte, ties (exact .5 codes),
 * zeros, extremes, infinities and subnormals included; NaN inputs are not pinned.
 *
 * Numbers: a decode step reads every weight byte once and the activations (n * 1.1 bytes)
 * from cache, so a matvec is bound by memory bandwidth whenever the kernel retires a
 * block faster than DRAM delivers it (bench/matvec_bench.c measures GB/s per type).
 */
#include "backend/cpu/kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels_impl.h"
#include "backend/cpu/x86.h"
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/types.h"

/* ---- activation quantization --------------------------------------------------------- */

void quantize_row_f32_ref(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

/* vcvtps2dq: round half to even; NaN and |v| >= 2^31 give INT32_MIN ("integer indefinite").
 * The code is rounded in the FPU's mode, which the engine leaves at nearest-even. */
static int32_t cvt_i32(float v) { return fabsf(v) < 2147483648.0f ? (int32_t)nearbyintf(v) : INT32_MIN; }

/* vpackssdw then vpacksswb: signed saturation to int8 */
static int8_t sat_i8(int32_t v) { return (int8_t)(v > 127 ? 127 : v < -128 ? -128 : v); }

/* One Q8_0/Q8_1 block of 32 (ggml's x86 quantize_row_q8_0): the codes, d, and the sum of the
 * int32 codes as vpaddd forms it (wrapping: 32 x INT32_MIN sum to 0). */
static float q8_block(const float *x, int8_t *q, int32_t *sum) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f; /* 127 / amax, not 1 / d: an ulp apart */
    uint32_t s = 0;
    for (int i = 0; i < 32; i++) {
        const int32_t v = cvt_i32(x[i] * id);
        q[i] = sat_i8(v);
        s += (uint32_t)v;
    }
    *sum = s <= INT32_MAX ? (int32_t)s : -(int32_t)~s - 1;
    return d;
}

void quantize_row_q8_0_ref(const float *x, void *y, int64_t n) {
    block_q8_0 *b = y;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int32_t sum;
        b[i].d = er_f32_to_f16(q8_block(x + i * QK8_0, b[i].qs, &sum));
    }
}

void quantize_row_q8_1_ref(const float *x, void *y, int64_t n) {
    block_q8_1 *b = y;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        int32_t sum;
        const float d = q8_block(x + i * QK8_1, b[i].qs, &sum);
        b[i].d = er_f32_to_f16(d);
        b[i].s = er_f32_to_f16(d * (float)sum);
    }
}

/* ggml's nearest_int(v) (v + 1.5 * 2^23, the low mantissa bits: half to even) after
 * MIN(127, .), stored in an int8: inf and NaN products leave 0 in the byte. */
static int8_t q8_K_code(float v) {
    if (!(fabsf(v) <= 4194303.0f))
        return 0;
    const int32_t r = (int32_t)nearbyintf(v);
    return (int8_t)(r < 127 ? r : 127);
}

void quantize_row_q8_K_ref(const float *x, void *y, int64_t n) {
    block_q8_K *b = y;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_K; j++)
            if (fabsf(x[j]) > amax) { /* the first of the largest, with its sign */
                amax = fabsf(x[j]);
                max = x[j];
            }
        if (amax == 0.0f) { /* ggml leaves bsums as they were; ours are the zero codes' sums */
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++)
            b[i].qs[j] = q8_K_code(iscale * x[j]);
        b[i].d = 1.0f / iscale;
        q8_K_bsums(&b[i]);
    }
}

void q8_K_bsums(block_q8_K *b) {
    for (int j = 0; j < QK_K / 16; j++) {
        int s = 0;
        for (int i = 0; i < 16; i++)
            s += b->qs[16 * j + i];
        b->bsums[j] = (int16_t)s;
    }
}

/* ---- dot products with f32 activations -------------------------------------------------- */

/* F32/F16/BF16 keep F32 activations: the type table's reference dots are exactly these
 * kernels (same summation order), so the table is called rather than copied. */
static float dot_f32_f32_ref(const void *w, const void *y, int64_t n) {
    return er_type_get(ER_TYPE_F32)->dot_f32(w, y, n);
}

static float dot_f16_f32_ref(const void *w, const void *y, int64_t n) {
    return er_type_get(ER_TYPE_F16)->dot_f32(w, y, n);
}

static float dot_bf16_f32_ref(const void *w, const void *y, int64_t n) {
    return er_type_get(ER_TYPE_BF16)->dot_f32(w, y, n);
}

/* ---- 32-element types with Q8_0 / Q8_1 activations ------------------------------------ */

static float dot_q4_0_q8_0_ref(const void *w, const void *y, int64_t n) {
    const block_q4_0 *x = w;
    const block_q8_0 *q = y;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK4_0; b++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += ((x[b].qs[j] & 0xF) - 8) * q[b].qs[j] + ((x[b].qs[j] >> 4) - 8) * q[b].qs[j + 16];
        sum += (float)sumi * (er_f16_to_f32(x[b].d) * er_f16_to_f32(q[b].d));
    }
    return sum;
}

static float dot_q4_1_q8_1_ref(const void *w, const void *y, int64_t n) {
    const block_q4_1 *x = w;
    const block_q8_1 *q = y;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK4_1; b++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += (x[b].qs[j] & 0xF) * q[b].qs[j] + (x[b].qs[j] >> 4) * q[b].qs[j + 16];
        sum += (float)sumi * (er_f16_to_f32(x[b].d) * er_f16_to_f32(q[b].d)) +
               er_f16_to_f32(x[b].m) * er_f16_to_f32(q[b].s);
    }
    return sum;
}

static uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float dot_q5_0_q8_0_ref(const void *w, const void *y, int64_t n) {
    const block_q5_0 *x = w;
    const block_q8_0 *q = y;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK5_0; b++) {
        const uint32_t qh = load_u32(x[b].qh);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            const int lo = ((x[b].qs[j] & 0xF) | (int)((qh >> j) & 1) << 4) - 16;
            const int hi = ((x[b].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4) - 16;
            sumi += lo * q[b].qs[j] + hi * q[b].qs[j + 16];
        }
        sum += (float)sumi * (er_f16_to_f32(x[b].d) * er_f16_to_f32(q[b].d));
    }
    return sum;
}

static float dot_q5_1_q8_1_ref(const void *w, const void *y, int64_t n) {
    const block_q5_1 *x = w;
    const block_q8_1 *q = y;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK5_1; b++) {
        const uint32_t qh = load_u32(x[b].qh);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            const int lo = (x[b].qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
            const int hi = (x[b].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            sumi += lo * q[b].qs[j] + hi * q[b].qs[j + 16];
        }
        sum += (float)sumi * (er_f16_to_f32(x[b].d) * er_f16_to_f32(q[b].d)) +
               er_f16_to_f32(x[b].m) * er_f16_to_f32(q[b].s);
    }
    return sum;
}

static float dot_q8_0_q8_0_ref(const void *w, const void *y, int64_t n) {
    const block_q8_0 *x = w;
    const block_q8_0 *q = y;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++)
            sumi += x[b].qs[j] * q[b].qs[j];
        sum += (float)sumi * (er_f16_to_f32(x[b].d) * er_f16_to_f32(q[b].d));
    }
    return sum;
}

/* ---- K types with Q8_K activations ---------------------------------------------------- */

static float dot_q2_K_q8_K_ref(const void *w, const void *y, int64_t n) {
    const block_q2_K *x = w;
    const block_q8_K *q = y;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        int isum = 0, summ = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            int s = 0;
            for (int t = 0; t < 16; t++) {
                const int e = 16 * j + t, h = e / 128, sh = 2 * ((e / 32) % 4), l = e % 32;
                s += ((x[b].qs[32 * h + l] >> sh) & 3) * q[b].qs[e];
            }
            isum += (x[b].scales[j] & 0xF) * s;
            summ += (x[b].scales[j] >> 4) * q[b].bsums[j];
        }
        sum += q[b].d * er_f16_to_f32(x[b].d) * (float)isum - q[b].d * er_f16_to_f32(x[b].dmin) * (float)summ;
    }
    return sum;
}

static float dot_q3_K_q8_K_ref(const void *w, const void *y, int64_t n) {
    const block_q3_K *x = w;
    const block_q8_K *q = y;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        int isum = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            int s = 0;
            for (int t = 0; t < 16; t++) {
                const int e = 16 * j + t, h = e / 128, sb = (e / 32) % 4, l = e % 32;
                const int low = (x[b].qs[32 * h + l] >> (2 * sb)) & 3;
                const int high = (x[b].hmask[l] >> (4 * h + sb)) & 1;
                s += (low - (high ? 0 : 4)) * q[b].qs[e];
            }
            isum += (q3_K_scale(x[b].scales, j) - 32) * s;
        }
        sum += q[b].d * er_f16_to_f32(x[b].d) * (float)isum;
    }
    return sum;
}

static float dot_q4_K_q8_K_ref(const void *w, const void *y, int64_t n) {
    const block_q4_K *x = w;
    const block_q8_K *q = y;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        int isum = 0, summ = 0;
        for (int j = 0; j < QK_K / 32; j++) {
            uint8_t sc, m;
            get_scale_min_k4(j, x[b].scales, &sc, &m);
            int s = 0;
            for (int l = 0; l < 32; l++)
                s += ((x[b].qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) * q[b].qs[32 * j + l];
            isum += sc * s;
            summ += m * (q[b].bsums[2 * j] + q[b].bsums[2 * j + 1]);
        }
        sum += q[b].d * er_f16_to_f32(x[b].d) * (float)isum - q[b].d * er_f16_to_f32(x[b].dmin) * (float)summ;
    }
    return sum;
}

static float dot_q5_K_q8_K_ref(const void *w, const void *y, int64_t n) {
    const block_q5_K *x = w;
    const block_q8_K *q = y;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        int isum = 0, summ = 0;
        for (int j = 0; j < QK_K / 32; j++) {
            uint8_t sc, m;
            get_scale_min_k4(j, x[b].scales, &sc, &m);
            int s = 0;
            for (int l = 0; l < 32; l++) {
                const int v = ((x[b].qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) | ((x[b].qh[l] >> j) & 1) << 4;
                s += v * q[b].qs[32 * j + l];
            }
            isum += sc * s;
            summ += m * (q[b].bsums[2 * j] + q[b].bsums[2 * j + 1]);
        }
        sum += q[b].d * er_f16_to_f32(x[b].d) * (float)isum - q[b].d * er_f16_to_f32(x[b].dmin) * (float)summ;
    }
    return sum;
}

static float dot_q6_K_q8_K_ref(const void *w, const void *y, int64_t n) {
    const block_q6_K *x = w;
    const block_q8_K *q = y;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        int isum = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            int s = 0;
            for (int t = 0; t < 16; t++) {
                const int e = 16 * j + t, h = e / 128, sb = (e / 32) % 4, l = e % 32;
                const uint8_t lb = x[b].ql[64 * h + 32 * (sb & 1) + l];
                const int low = sb < 2 ? lb & 0xF : lb >> 4;
                const int high = (x[b].qh[32 * h + l] >> (2 * sb)) & 3;
                s += ((low | high << 4) - 32) * q[b].qs[e];
            }
            isum += x[b].scales[j] * s;
        }
        sum += q[b].d * er_f16_to_f32(x[b].d) * (float)isum;
    }
    return sum;
}

/* ---- the tables ------------------------------------------------------------------------- */

static const cpu_kernels ref_table[ER_TYPE_COUNT] = {
    [ER_TYPE_F32] = {"scalar", ER_TYPE_F32, quantize_row_f32_ref, dot_f32_f32_ref},
    [ER_TYPE_F16] = {"scalar", ER_TYPE_F32, quantize_row_f32_ref, dot_f16_f32_ref},
    [ER_TYPE_BF16] = {"scalar", ER_TYPE_F32, quantize_row_f32_ref, dot_bf16_f32_ref},
    [ER_TYPE_Q4_0] = {"scalar", ER_TYPE_Q8_0, quantize_row_q8_0_ref, dot_q4_0_q8_0_ref},
    [ER_TYPE_Q4_1] = {"scalar", ER_TYPE_Q8_1, quantize_row_q8_1_ref, dot_q4_1_q8_1_ref},
    [ER_TYPE_Q5_0] = {"scalar", ER_TYPE_Q8_0, quantize_row_q8_0_ref, dot_q5_0_q8_0_ref},
    [ER_TYPE_Q5_1] = {"scalar", ER_TYPE_Q8_1, quantize_row_q8_1_ref, dot_q5_1_q8_1_ref},
    [ER_TYPE_Q8_0] = {"scalar", ER_TYPE_Q8_0, quantize_row_q8_0_ref, dot_q8_0_q8_0_ref},
    [ER_TYPE_Q2_K] = {"scalar", ER_TYPE_Q8_K, quantize_row_q8_K_ref, dot_q2_K_q8_K_ref},
    [ER_TYPE_Q3_K] = {"scalar", ER_TYPE_Q8_K, quantize_row_q8_K_ref, dot_q3_K_q8_K_ref},
    [ER_TYPE_Q4_K] = {"scalar", ER_TYPE_Q8_K, quantize_row_q8_K_ref, dot_q4_K_q8_K_ref},
    [ER_TYPE_Q5_K] = {"scalar", ER_TYPE_Q8_K, quantize_row_q8_K_ref, dot_q5_K_q8_K_ref},
    [ER_TYPE_Q6_K] = {"scalar", ER_TYPE_Q8_K, quantize_row_q8_K_ref, dot_q6_K_q8_K_ref},
};

const cpu_kernels *cpu_kernels_ref(uint32_t type) {
    if (type >= ER_TYPE_COUNT || !ref_table[type].vec_dot)
        return NULL;
    return &ref_table[type];
}

static int isa_limit = CPU_ISA_VNNI;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

static void isa_read(void) {
    const char *env = getenv("EDGERUNNER_CPU_ISA");
    if (env && strcmp(env, "avx2") == 0)
        isa_limit = CPU_ISA_AVX2;
    else if (env && strcmp(env, "c") == 0)
        isa_limit = CPU_ISA_C;
}

int cpu_isa_limit(void) {
    pthread_once(&isa_once, isa_read);
    return isa_limit;
}

const cpu_kernels *cpu_kernels_avx2(uint32_t type) {
    if (type >= ER_TYPE_COUNT)
        return NULL;
    return cpu_has_avx2() ? cpu_kernels_avx2_row(type) : NULL;
}

const cpu_kernels *cpu_kernels_get(uint32_t type) {
    const cpu_kernels *k = cpu_kernels_avx2(type);
    return k ? k : cpu_kernels_ref(type);
}

size_t cpu_act_row_size(const cpu_kernels *k, int64_t n) {
    const er_type_traits *t = er_type_get(k->vec_dot_type);
    return t ? er_type_row_size(t, n) : 0;
}
