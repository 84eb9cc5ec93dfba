/*
 * legacy.c - reference kernels of the 32-element block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
 * (layouts in blocks.h).
 *
 * Dequantization follows the format definitions operation for operation (d * q, or
 * d * q + m, in float), which makes it bit-identical to GGML's and to the gguf package's
 * numpy code. The quantizers (Q8_0 aside) search the block scale: each block tries the
 * format's classic scale (the largest value on the end of the code range, what GGML's
 * reference quantizer uses) and the least-squares scales of quant_fit_*(), rounds each to
 * f16, re-derives the codes for the rounded scale, and keeps the one with the smallest
 * squared error. Because the classic scale is one of the candidates and the codes are
 * optimal for the stored scale, no block is ever worse than GGML's reference quantizer.
 * Q8_0 keeps GGML's exact rule (d = max|x| / 127, codes rounded half away from zero) so
 * that files match the gguf package's Q8_0 byte for byte; at 8 bits the search gains
 * almost nothing.
 */
#include <math.h>
#include <string.h>

#include "core/fp16.h"
#include "quant/quants.h"

/* ---- dequantization -------------------------------------------------------------- */

void to_f32_q4_0_ref(const void *restrict src, float *restrict dst, int64_t n) {
    const block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++, dst += QK4_0) {
        const float d = er_f16_to_f32(b[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            dst[j] = d * (float)((b[i].qs[j] & 0xF) - 8);
            dst[j + QK4_0 / 2] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

void to_f32_q4_1_ref(const void *restrict src, float *restrict dst, int64_t n) {
    const block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK4_1; i++, dst += QK4_1) {
        const float d = er_f16_to_f32(b[i].d), m = er_f16_to_f32(b[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            dst[j] = d * (float)(b[i].qs[j] & 0xF) + m;
            dst[j + QK4_1 / 2] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

static uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void to_f32_q5_0_ref(const void *restrict src, float *restrict dst, int64_t n) {
    const block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK5_0; i++, dst += QK5_0) {
        const float d = er_f16_to_f32(b[i].d);
        const uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int lo = (b[i].qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
            const int hi = (b[i].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            dst[j] = d * (float)(lo - 16);
            dst[j + QK5_0 / 2] = d * (float)(hi - 16);
        }
    }
}

void to_f32_q5_1_ref(const void *restrict src, float *restrict dst, int64_t n) {
    const block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK5_1; i++, dst += QK5_1) {
        const float d = er_f16_to_f32(b[i].d), m = er_f16_to_f32(b[i].m);
        const uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int lo = (b[i].qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
            const int hi = (b[i].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            dst[j] = d * (float)lo + m;
            dst[j + QK5_1 / 2] = d * (float)hi + m;
        }
    }
}

void to_f32_q8_0_ref(const void *restrict src, float *restrict dst, int64_t n) {
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0) {
        const float d = er_f16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++)
            dst[j] = d * (float)b[i].qs[j];
    }
}

/* ---- dot products with f32 activations: dequantize-then-dot ------------------------ */

float dot_q4_0_f32_ref(const void *w, const float *x, int64_t n) {
    return quant_dot_by_blocks(to_f32_q4_0_ref, sizeof(block_q4_0), QK4_0, w, x, n);
}
float dot_q4_1_f32_ref(const void *w, const float *x, int64_t n) {
    return quant_dot_by_blocks(to_f32_q4_1_ref, sizeof(block_q4_1), QK4_1, w, x, n);
}
float dot_q5_0_f32_ref(const void *w, const float *x, int64_t n) {
    return quant_dot_by_blocks(to_f32_q5_0_ref, sizeof(block_q5_0), QK5_0, w, x, n);
}
float dot_q5_1_f32_ref(const void *w, const float *x, int64_t n) {
    return quant_dot_by_blocks(to_f32_q5_1_ref, sizeof(block_q5_1), QK5_1, w, x, n);
}
float dot_q8_0_f32_ref(const void *w, const float *x, int64_t n) {
    return quant_dot_by_blocks(to_f32_q8_0_ref, sizeof(block_q8_0), QK8_0, w, x, n);
}

/* ---- quantization ----------------------------------------------------------------- */

/* Best codes in [qmin, qmax] for the stored scale df, and their squared error computed
 * with the dequantizer's arithmetic. */
static double sym_codes_err(const float *x, float df, int qmin, int qmax, int8_t *L) {
    const float inv = df != 0.0f ? 1.0f / df : 0.0f;
    double err = 0;
    for (int i = 0; i < 32; i++) {
        const int q = quant_nearest(x[i] * inv, qmin, qmax);
        const double e = (double)x[i] - (double)(df * (float)q);
        L[i] = (int8_t)q;
        err += e * e;
    }
    return err;
}

/* One 32-value block of a symmetric type (value = d * q, q in [qmin, qmax]): returns the
 * f16 scale, writes the codes. */
static uint16_t quantize_sym32(const float *x, int qmin, int qmax, int8_t *L) {
    float amax = 0.0f, xm = 0.0f;
    for (int i = 0; i < 32; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            xm = x[i];
        }
    memset(L, 0, 32);
    if (amax == 0.0f)
        return 0;
    int8_t cand[32];
    const float starts[2] = {xm / (float)qmin, quant_fit_sym(x, 32, qmin, qmax, cand)};
    double best = INFINITY;
    uint16_t best_d = 0;
    for (int c = 0; c < 2; c++) {
        uint16_t d = quant_f16_sat(starts[c]);
        for (int it = 0; it < 4; it++) { /* least-squares scale for the codes, re-rounded */
            const double err = sym_codes_err(x, er_f16_to_f32(d), qmin, qmax, cand);
            if (err < best) {
                best = err;
                best_d = d;
                memcpy(L, cand, 32);
            }
            double sxq = 0, sqq = 0;
            for (int i = 0; i < 32; i++) {
                sxq += (double)x[i] * cand[i];
                sqq += (double)cand[i] * cand[i];
            }
            const uint16_t next = sqq > 0 ? quant_f16_sat((float)(sxq / sqq)) : d;
            if (next == d)
                break;
            d = next;
        }
    }
    return best_d;
}

static double affine_codes_err(const float *x, float df, float mf, int nmax, uint8_t *L) {
    const float inv = df != 0.0f ? 1.0f / df : 0.0f;
    double err = 0;
    for (int i = 0; i < 32; i++) {
        const int q = quant_nearest((x[i] - mf) * inv, 0, nmax);
        const double e = (double)x[i] - (double)(df * (float)q + mf);
        L[i] = (uint8_t)q;
        err += e * e;
    }
    return err;
}

/* One block of an affine type (value = d * q + m, q in [0, nmax]). */
static void quantize_affine32(const float *x, int nmax, uint16_t *d_out, uint16_t *m_out, uint8_t *L) {
    float mn = x[0], mx = x[0];
    for (int i = 1; i < 32; i++) {
        mn = fminf(mn, x[i]);
        mx = fmaxf(mx, x[i]);
    }
    uint8_t cand[32];
    float a[2] = {(mx - mn) / (float)nmax, 0.0f}, o[2] = {mn, 0.0f};
    quant_fit_affine(x, 32, nmax, 0, cand, &a[1], &o[1]);
    double best = INFINITY;
    *d_out = 0;
    *m_out = 0;
    memset(L, 0, 32);
    for (int c = 0; c < 2; c++) {
        uint16_t d = quant_f16_sat(a[c]), m = quant_f16_sat(o[c]);
        for (int it = 0; it < 4; it++) {
            const double err = affine_codes_err(x, er_f16_to_f32(d), er_f16_to_f32(m), nmax, cand);
            if (err < best) {
                best = err;
                *d_out = d;
                *m_out = m;
                memcpy(L, cand, 32);
            }
            float na, no;
            if (quant_affine_ls(x, 32, cand, 0, &na, &no) < 0)
                break;
            const uint16_t nd = quant_f16_sat(na), nm = quant_f16_sat(no);
            if (nd == d && nm == m)
                break;
            d = nd;
            m = nm;
        }
    }
}

/* Packs 32 codes (0..15 or the low 4 bits) into nibbles: j low, j + 16 high. */
static void pack_nibbles(const uint8_t *u, uint8_t *qs) {
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)((u[j] & 0xF) | (u[j + 16] & 0xF) << 4);
}

static void pack_qh(const uint8_t *u, uint8_t *qh) {
    uint32_t h = 0;
    for (int j = 0; j < 32; j++)
        h |= (uint32_t)((u[j] >> 4) & 1) << j;
    for (int k = 0; k < 4; k++)
        qh[k] = (uint8_t)(h >> (8 * k));
}

void from_f32_q4_0_ref(const float *src, void *dst, int64_t n) {
    block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / QK4_0; i++, src += QK4_0) {
        int8_t L[32];
        uint8_t u[32];
        b[i].d = quantize_sym32(src, -8, 7, L);
        for (int j = 0; j < 32; j++)
            u[j] = (uint8_t)(L[j] + 8);
        pack_nibbles(u, b[i].qs);
    }
}

void from_f32_q5_0_ref(const float *src, void *dst, int64_t n) {
    block_q5_0 *b = dst;
    for (int64_t i = 0; i < n / QK5_0; i++, src += QK5_0) {
        int8_t L[32];
        uint8_t u[32];
        b[i].d = quantize_sym32(src, -16, 15, L);
        for (int j = 0; j < 32; j++)
            u[j] = (uint8_t)(L[j] + 16);
        pack_nibbles(u, b[i].qs);
        pack_qh(u, b[i].qh);
    }
}

void from_f32_q4_1_ref(const float *src, void *dst, int64_t n) {
    block_q4_1 *b = dst;
    for (int64_t i = 0; i < n / QK4_1; i++, src += QK4_1) {
        uint8_t u[32];
        quantize_affine32(src, 15, &b[i].d, &b[i].m, u);
        pack_nibbles(u, b[i].qs);
    }
}

void from_f32_q5_1_ref(const float *src, void *dst, int64_t n) {
    block_q5_1 *b = dst;
    for (int64_t i = 0; i < n / QK5_1; i++, src += QK5_1) {
        uint8_t u[32];
        quantize_affine32(src, 31, &b[i].d, &b[i].m, u);
        pack_nibbles(u, b[i].qs);
        pack_qh(u, b[i].qh);
    }
}

void from_f32_q8_0_ref(const float *src, void *dst, int64_t n) {
    block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, src += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++)
            amax = fmaxf(amax, fabsf(src[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < QK8_0; j++) /* half away from zero, as GGML and gguf-py */
            b[i].qs[j] = (int8_t)fmaxf(-127.0f, fminf(127.0f, roundf(src[j] * id)));
        b[i].d = quant_f16_sat(d);
    }
}
