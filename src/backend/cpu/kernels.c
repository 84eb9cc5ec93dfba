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
 * Activation quantization (Q8_0, Q8_1, Q8_K): d = max|x| / 127, q = round-half-even(x / d)
 * computed as x * (1/d), which the AVX2 versions reproduce bit for bit.
 *
 * Numbers: a decode step reads every weight byte once and the activations (n * 1.1 bytes)
 * from cache, so a matvec is bound by memory bandwidth whenever the kernel retires a
 * block faster than DRAM delivers it (bench/matvec_bench.c measures GB/s per type).
 */
#include "backend/cpu/kernels.h"

#include <math.h>
#include <string.h>

#include "backend/cpu/kernels_impl.h"
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/types.h"

/* ---- activation quantization --------------------------------------------------------- */

void quantize_row_f32_ref(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

/* One block: d = max|x| / 127, codes x * (1/d) rounded half to even (the FPU's mode). */
static float q8_block(const float *x, int n, int8_t *q) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < n; i++)
        q[i] = (int8_t)nearbyintf(x[i] * id);
    return d;
}

void quantize_row_q8_0_ref(const float *x, void *y, int64_t n) {
    block_q8_0 *b = y;
    for (int64_t i = 0; i < n / QK8_0; i++)
        b[i].d = er_f32_to_f16(q8_block(x + i * QK8_0, QK8_0, b[i].qs));
}

void quantize_row_q8_1_ref(const float *x, void *y, int64_t n) {
    block_q8_1 *b = y;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        const float d = q8_block(x + i * QK8_1, QK8_1, b[i].qs);
        int sum = 0;
        for (int j = 0; j < QK8_1; j++)
            sum += b[i].qs[j];
        b[i].d = er_f32_to_f16(d);
        b[i].s = er_f32_to_f16(d * (float)sum);
    }
}

void quantize_row_q8_K_ref(const float *x, void *y, int64_t n) {
    block_q8_K *b = y;
    for (int64_t i = 0; i < n / QK_K; i++) {
        b[i].d = q8_block(x + i * QK_K, QK_K, b[i].qs);
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

const cpu_kernels *cpu_kernels_avx2(uint32_t type) {
    if (type >= ER_TYPE_COUNT)
        return NULL;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        return cpu_kernels_avx2_row(type);
#endif
    return NULL;
}

const cpu_kernels *cpu_kernels_get(uint32_t type) {
    const cpu_kernels *k = cpu_kernels_avx2(type);
    return k ? k : cpu_kernels_ref(type);
}

size_t cpu_act_row_size(const cpu_kernels *k, int64_t n) {
    const er_type_traits *t = er_type_get(k->vec_dot_type);
    return t ? er_type_row_size(t, n) : 0;
}
