/*
 * kquants.c - reference kernels of the 256-element super-block types Q2_K, Q3_K, Q4_K, Q5_K,
 * Q6_K (layouts in blocks.h), and Q8_K's dequantization.
 *
 * Dequantization follows each format's definition operation for operation: the sub-block
 * scale is formed first in float (d * sc, dmin * m), then multiplied by the code (and the
 * minimum subtracted). That order is what GGML and the gguf package compute, so the result
 * is bit-identical to theirs.
 *
 * Quantization has two levels, each a least-squares search (fit.c):
 *   1. every sub-block gets its best float scale (and minimum, for the affine types);
 *   2. those are rounded to the format's small integers under an f16 super-scale: starting
 *      from the super-scale that puts the largest sub-scale on the top integer, each
 *      sub-block tries its integer scale (and minimum) +-radius and keeps the pair whose
 *      re-derived codes give the smallest squared error; then the super-scale(s) are
 *      re-fitted by least squares to the chosen integers and codes, and the sub-blocks are
 *      re-assigned, for as long as the error of the whole super-block falls.
 * Every error is measured with the dequantizer's own float arithmetic, so the search
 * optimizes what the engine will actually compute with.
 */
#include <math.h>
#include <string.h>

#include "core/fp16.h"
#include "quant/quants.h"

/* ---- dequantization -------------------------------------------------------------- */

void to_f32_q2_K_ref(const void *restrict src, float *restrict dst, int64_t n) {
    const block_q2_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = er_f16_to_f32(b[i].d), dmin = er_f16_to_f32(b[i].dmin);
        for (int j = 0; j < QK_K / 16; j++) {
            const uint8_t sc = b[i].scales[j];
            const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
            const int h = j / 8, s = (j / 2) % 4; /* of element e = 16 j + t: e / 128, (e / 32) % 4 */
            const uint8_t *q = b[i].qs + 32 * h + 16 * (j % 2); /* q[t]: qs[32 h + e % 32] */
            for (int t = 0; t < 16; t++)
                dst[16 * j + t] = dl * (float)((q[t] >> (2 * s)) & 3) - ml;
        }
    }
}

void to_f32_q3_K_ref(const void *restrict src, float *restrict dst, int64_t n) {
    const block_q3_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = er_f16_to_f32(b[i].d);
        for (int j = 0; j < QK_K / 16; j++) {
            const float dl = d * (float)(q3_K_scale(b[i].scales, j) - 32);
            const int h = j / 8, s = (j / 2) % 4, l0 = 16 * (j % 2); /* as in to_f32_q2_K_ref */
            const uint8_t *q = b[i].qs + 32 * h + l0, *hm = b[i].hmask + l0;
            for (int t = 0; t < 16; t++) {
                const int low = (q[t] >> (2 * s)) & 3, high = (hm[t] >> (4 * h + s)) & 1;
                dst[16 * j + t] = dl * (float)(low - (high ? 0 : 4));
            }
        }
    }
}

void to_f32_q4_K_ref(const void *restrict src, float *restrict dst, int64_t n) {
    const block_q4_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = er_f16_to_f32(b[i].d), dmin = er_f16_to_f32(b[i].dmin);
        for (int j = 0; j < QK_K / 32; j++) {
            uint8_t sc, m;
            get_scale_min_k4(j, b[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            const uint8_t *q = b[i].qs + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            for (int l = 0; l < 32; l++)
                dst[32 * j + l] = d1 * (float)((q[l] >> shift) & 0xF) - m1;
        }
    }
}

void to_f32_q5_K_ref(const void *restrict src, float *restrict dst, int64_t n) {
    const block_q5_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = er_f16_to_f32(b[i].d), dmin = er_f16_to_f32(b[i].dmin);
        for (int j = 0; j < QK_K / 32; j++) {
            uint8_t sc, m;
            get_scale_min_k4(j, b[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            const uint8_t *q = b[i].qs + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            for (int l = 0; l < 32; l++) {
                const int v = ((q[l] >> shift) & 0xF) | ((b[i].qh[l] >> j) & 1) << 4;
                dst[32 * j + l] = d1 * (float)v - m1;
            }
        }
    }
}

void to_f32_q6_K_ref(const void *restrict src, float *restrict dst, int64_t n) {
    const block_q6_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = er_f16_to_f32(b[i].d);
        for (int j = 0; j < QK_K / 16; j++) {
            const float dl = d * (float)b[i].scales[j];
            const int h = j / 8, s = (j / 2) % 4, l0 = 16 * (j % 2); /* as in to_f32_q2_K_ref */
            const uint8_t *ql = b[i].ql + 64 * h + 32 * (s & 1) + l0, *qh = b[i].qh + 32 * h + l0;
            for (int t = 0; t < 16; t++) {
                const int low = (ql[t] >> (s < 2 ? 0 : 4)) & 0xF, high = (qh[t] >> (2 * s)) & 3;
                dst[16 * j + t] = dl * (float)((low | high << 4) - 32);
            }
        }
    }
}

void to_f32_q8_K_ref(const void *restrict src, float *restrict dst, int64_t n) {
    const block_q8_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K)
        for (int j = 0; j < QK_K; j++)
            dst[j] = b[i].d * (float)b[i].qs[j];
}

/* ---- dot products with f32 activations: dequantize-then-dot ------------------------ */

float dot_q2_K_f32_ref(const void *w, const float *x, int64_t n) {
    return quant_dot_by_blocks(to_f32_q2_K_ref, sizeof(block_q2_K), QK_K, w, x, n);
}
float dot_q3_K_f32_ref(const void *w, const float *x, int64_t n) {
    return quant_dot_by_blocks(to_f32_q3_K_ref, sizeof(block_q3_K), QK_K, w, x, n);
}
float dot_q4_K_f32_ref(const void *w, const float *x, int64_t n) {
    return quant_dot_by_blocks(to_f32_q4_K_ref, sizeof(block_q4_K), QK_K, w, x, n);
}
float dot_q5_K_f32_ref(const void *w, const float *x, int64_t n) {
    return quant_dot_by_blocks(to_f32_q5_K_ref, sizeof(block_q5_K), QK_K, w, x, n);
}
float dot_q6_K_f32_ref(const void *w, const float *x, int64_t n) {
    return quant_dot_by_blocks(to_f32_q6_K_ref, sizeof(block_q6_K), QK_K, w, x, n);
}

/* ---- quantization: affine types (value = d*sc*q - dmin*m): Q2_K, Q4_K, Q5_K ----------- */

enum { MAX_SUB = 16, SUPER_ITERS = 4, SUPER_SHIFTS = 2 };

typedef struct kspec {
    int n_sub, sub_len; /* sub-blocks per super-block and their length */
    int qmin, qmax;     /* code range (affine types: 0..qmax) */
    int smin, smax;     /* integer sub-scale range (affine: minimums use 0..smax too) */
    int radius;         /* integer neighbours tried around the rounded sub-scale */
} kspec;

typedef struct kresult {
    uint16_t d, dmin;     /* f16 super-scales */
    int sc[MAX_SUB];      /* integer sub-scales (signed for the symmetric types) */
    int m[MAX_SUB];       /* integer minimums (affine types) */
    int8_t L[QK_K];       /* codes, in the format's range */
    double err;
} kresult;

/* The best (sc, m) within radius of (sc0, m0) for one sub-block under float super-scales
 * df, dminf; writes codes, returns the squared error. */
static double affine_assign(const float *x, const kspec *p, float df, float dminf, int sc0, int m0, int *sc_out,
                            int *m_out, int8_t *L) {
    double best = INFINITY;
    int8_t cand[32];
    for (int s = sc0 - p->radius; s <= sc0 + p->radius; s++) {
        if (s < 0 || s > p->smax)
            continue;
        for (int m = m0 - p->radius; m <= m0 + p->radius; m++) {
            if (m < 0 || m > p->smax)
                continue;
            const float A = df * (float)s, B = dminf * (float)m;
            const float inv = A != 0.0f ? 1.0f / A : 0.0f;
            double err = 0;
            for (int i = 0; i < p->sub_len; i++) {
                const int q = quant_nearest((x[i] + B) * inv, 0, p->qmax);
                const double e = (double)x[i] - (double)(A * (float)q - B);
                cand[i] = (int8_t)q;
                err += e * e;
            }
            if (err < best) {
                best = err;
                *sc_out = s;
                *m_out = m;
                memcpy(L, cand, (size_t)p->sub_len);
            }
        }
    }
    return best;
}

/* Assigns every sub-block around the given integer centres; returns the total error. */
static double affine_assign_all(const float *x, const kspec *p, uint16_t d, uint16_t dmin, const int *sc0,
                                const int *m0, kresult *r) {
    const float df = er_f16_to_f32(d), dminf = er_f16_to_f32(dmin);
    double total = 0;
    r->d = d;
    r->dmin = dmin;
    for (int j = 0; j < p->n_sub; j++)
        total += affine_assign(x + j * p->sub_len, p, df, dminf, sc0[j], m0[j], &r->sc[j], &r->m[j],
                               r->L + j * p->sub_len);
    r->err = total;
    return total;
}

static void quantize_kaffine(const float *x, const kspec *p, kresult *best) {
    float a[MAX_SUB], b[MAX_SUB], max_a = 0, max_b = 0;
    uint8_t tmp[32];
    for (int j = 0; j < p->n_sub; j++) {
        float o;
        quant_fit_affine(x + j * p->sub_len, p->sub_len, p->qmax, 1, tmp, &a[j], &o);
        b[j] = -o;
        max_a = fmaxf(max_a, a[j]);
        max_b = fmaxf(max_b, b[j]);
    }
    memset(best, 0, sizeof *best);
    best->err = INFINITY;
    if (!(max_a > 0) && !(max_b > 0)) { /* all zero (or non-finite): zeros */
        best->err = 0;
        return;
    }
    /* super-scales that put the largest sub-scale on smax - kd and the largest minimum on
     * smax - km (the top integer is not always the best grid for the other sub-blocks):
     * kd = 0..SUPER_SHIFTS with km = 0, then km = 1..SUPER_SHIFTS with the best kd */
    kresult cur;
    int kd_best = 0;
    for (int step = 0; step <= 2 * SUPER_SHIFTS; step++) {
        const int kd = step <= SUPER_SHIFTS ? step : kd_best, km = step <= SUPER_SHIFTS ? 0 : step - SUPER_SHIFTS;
        const uint16_t d = quant_f16_sat(max_a / (float)(p->smax - kd));
        const uint16_t dmin = quant_f16_sat(max_b / (float)(p->smax - km));
        const float df = er_f16_to_f32(d), dminf = er_f16_to_f32(dmin);
        int sc0[MAX_SUB], m0[MAX_SUB];
        for (int j = 0; j < p->n_sub; j++) {
            sc0[j] = df > 0 ? quant_nearest(a[j] / df, 0, p->smax) : 0;
            m0[j] = dminf > 0 ? quant_nearest(b[j] / dminf, 0, p->smax) : 0;
        }
        affine_assign_all(x, p, d, dmin, sc0, m0, &cur);
        if (cur.err < best->err) {
            *best = cur;
            if (step <= SUPER_SHIFTS)
                kd_best = kd;
        }
    }
    for (int it = 0; it < SUPER_ITERS; it++) {
        /* least-squares super-scales for the chosen integers and codes:
         * value_i = d * u_i - dmin * w_i with u_i = sc_j * q_i, w_i = m_j */
        double A = 0, B = 0, C = 0, P = 0, Q = 0;
        for (int j = 0; j < p->n_sub; j++)
            for (int i = 0; i < p->sub_len; i++) {
                const double u = (double)best->sc[j] * best->L[j * p->sub_len + i], w = best->m[j];
                const double xi = x[j * p->sub_len + i];
                A += u * u;
                B += u * w;
                C += w * w;
                P += xi * u;
                Q += xi * w;
            }
        double nd, ndmin = 0;
        const double det = A * C - B * B;
        if (C == 0)
            nd = A > 0 ? P / A : 0;
        else if (det > 0) {
            nd = (P * C - Q * B) / det;
            ndmin = (B * P - A * Q) / det;
        } else
            break;
        if (!(nd >= 0) || !(ndmin >= 0))
            break;
        const uint16_t d2 = quant_f16_sat((float)nd), dmin2 = quant_f16_sat((float)ndmin);
        if (d2 == best->d && dmin2 == best->dmin)
            break;
        affine_assign_all(x, p, d2, dmin2, best->sc, best->m, &cur);
        if (!(cur.err < best->err))
            break;
        *best = cur;
    }
}

/* ---- quantization: symmetric types (value = d*sc*q): Q3_K, Q6_K ------------------- */

static double sym_assign(const float *x, const kspec *p, float df, int sc0, int *sc_out, int8_t *L) {
    double best = INFINITY;
    int8_t cand[32];
    for (int s = sc0 - p->radius; s <= sc0 + p->radius; s++) {
        if (s < p->smin || s > p->smax)
            continue;
        const float A = df * (float)s;
        const float inv = A != 0.0f ? 1.0f / A : 0.0f;
        double err = 0;
        for (int i = 0; i < p->sub_len; i++) {
            const int q = quant_nearest(x[i] * inv, p->qmin, p->qmax);
            const double e = (double)x[i] - (double)(A * (float)q);
            cand[i] = (int8_t)q;
            err += e * e;
        }
        if (err < best) {
            best = err;
            *sc_out = s;
            memcpy(L, cand, (size_t)p->sub_len);
        }
    }
    return best;
}

static double sym_assign_all(const float *x, const kspec *p, uint16_t d, const int *sc0, kresult *r) {
    const float df = er_f16_to_f32(d);
    double total = 0;
    r->d = d;
    r->dmin = 0;
    for (int j = 0; j < p->n_sub; j++) {
        r->m[j] = 0;
        total += sym_assign(x + j * p->sub_len, p, df, sc0[j], &r->sc[j], r->L + j * p->sub_len);
    }
    r->err = total;
    return total;
}

static void quantize_ksym(const float *x, const kspec *p, kresult *best) {
    float s[MAX_SUB], s_big = 0;
    int8_t tmp[32];
    for (int j = 0; j < p->n_sub; j++) {
        s[j] = quant_fit_sym(x + j * p->sub_len, p->sub_len, p->qmin, p->qmax, tmp);
        if (fabsf(s[j]) > fabsf(s_big))
            s_big = s[j];
    }
    memset(best, 0, sizeof *best);
    best->err = INFINITY;
    if (!(fabsf(s_big) > 0)) {
        best->err = 0;
        return;
    }
    /* the largest sub-scale on either end of the integer range */
    const float starts[2] = {s_big / (float)p->smin, s_big / (float)p->smax};
    for (int c = 0; c < 2; c++) {
        kresult cur;
        int sc0[MAX_SUB];
        const uint16_t d = quant_f16_sat(starts[c]);
        const float df = er_f16_to_f32(d);
        for (int j = 0; j < p->n_sub; j++)
            sc0[j] = df != 0.0f ? quant_nearest(s[j] / df, p->smin, p->smax) : 0;
        sym_assign_all(x, p, d, sc0, &cur);
        for (int it = 0; it < SUPER_ITERS; it++) {
            double uu = 0, xu = 0;
            for (int j = 0; j < p->n_sub; j++)
                for (int i = 0; i < p->sub_len; i++) {
                    const double u = (double)cur.sc[j] * cur.L[j * p->sub_len + i];
                    uu += u * u;
                    xu += (double)x[j * p->sub_len + i] * u;
                }
            if (!(uu > 0))
                break;
            const uint16_t d2 = quant_f16_sat((float)(xu / uu));
            if (d2 == cur.d)
                break;
            kresult next;
            sym_assign_all(x, p, d2, cur.sc, &next);
            if (!(next.err < cur.err))
                break;
            cur = next;
        }
        if (cur.err < best->err)
            *best = cur;
    }
}

/* ---- packing ---------------------------------------------------------------------- */

static const kspec spec_q2_K = {16, 16, 0, 3, 0, 15, 2};
static const kspec spec_q3_K = {16, 16, -4, 3, -32, 31, 1};
static const kspec spec_q4_K = {8, 32, 0, 15, 0, 63, 1};
static const kspec spec_q5_K = {8, 32, 0, 31, 0, 63, 1};
static const kspec spec_q6_K = {16, 16, -32, 31, -128, 127, 1};

void from_f32_q2_K_ref(const float *src, void *dst, int64_t n) {
    block_q2_K *b = dst;
    kresult r;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        quantize_kaffine(src, &spec_q2_K, &r);
        memset(&b[i], 0, sizeof b[i]);
        b[i].d = r.d;
        b[i].dmin = r.dmin;
        for (int j = 0; j < 16; j++)
            b[i].scales[j] = (uint8_t)(r.sc[j] | r.m[j] << 4);
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, s = (e / 32) % 4, l = e % 32;
            b[i].qs[32 * h + l] |= (uint8_t)(r.L[e] << (2 * s));
        }
    }
}

void from_f32_q3_K_ref(const float *src, void *dst, int64_t n) {
    block_q3_K *b = dst;
    kresult r;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        quantize_ksym(src, &spec_q3_K, &r);
        memset(&b[i], 0, sizeof b[i]);
        b[i].d = r.d;
        for (int j = 0; j < 16; j++) {
            const int sc = r.sc[j] + 32; /* 0..63 */
            b[i].scales[j % 8] |= (uint8_t)((sc & 0xF) << (j < 8 ? 0 : 4));
            b[i].scales[8 + j % 4] |= (uint8_t)((sc >> 4) << (2 * (j / 4)));
        }
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, s = (e / 32) % 4, l = e % 32;
            const int u = r.L[e] + 4; /* 0..7: low 2 bits, and bit 2 set means "no -4" */
            b[i].qs[32 * h + l] |= (uint8_t)((u & 3) << (2 * s));
            b[i].hmask[l] |= (uint8_t)((u >> 2) << (4 * h + s));
        }
    }
}

static void pack_scales_k4(const int *sc, const int *m, uint8_t *q) {
    memset(q, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            q[j] |= (uint8_t)sc[j];
            q[j + 4] |= (uint8_t)m[j];
        } else {
            q[j + 4] = (uint8_t)((sc[j] & 0xF) | (m[j] & 0xF) << 4);
            q[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            q[j] |= (uint8_t)((m[j] >> 4) << 6);
        }
    }
}

void from_f32_q4_K_ref(const float *src, void *dst, int64_t n) {
    block_q4_K *b = dst;
    kresult r;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        quantize_kaffine(src, &spec_q4_K, &r);
        memset(&b[i], 0, sizeof b[i]);
        b[i].d = r.d;
        b[i].dmin = r.dmin;
        pack_scales_k4(r.sc, r.m, b[i].scales);
        for (int e = 0; e < QK_K; e++)
            b[i].qs[32 * (e / 64) + e % 32] |= (uint8_t)(r.L[e] << (4 * ((e / 32) % 2)));
    }
}

void from_f32_q5_K_ref(const float *src, void *dst, int64_t n) {
    block_q5_K *b = dst;
    kresult r;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        quantize_kaffine(src, &spec_q5_K, &r);
        memset(&b[i], 0, sizeof b[i]);
        b[i].d = r.d;
        b[i].dmin = r.dmin;
        pack_scales_k4(r.sc, r.m, b[i].scales);
        for (int e = 0; e < QK_K; e++) {
            b[i].qs[32 * (e / 64) + e % 32] |= (uint8_t)((r.L[e] & 0xF) << (4 * ((e / 32) % 2)));
            b[i].qh[e % 32] |= (uint8_t)((r.L[e] >> 4) << (e / 32));
        }
    }
}

void from_f32_q6_K_ref(const float *src, void *dst, int64_t n) {
    block_q6_K *b = dst;
    kresult r;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        quantize_ksym(src, &spec_q6_K, &r);
        memset(&b[i], 0, sizeof b[i]);
        b[i].d = r.d;
        for (int j = 0; j < 16; j++)
            b[i].scales[j] = (int8_t)r.sc[j];
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, s = (e / 32) % 4, l = e % 32;
            const int u = r.L[e] + 32; /* 0..63 */
            b[i].ql[64 * h + 32 * (s & 1) + l] |= (uint8_t)((u & 0xF) << (s < 2 ? 0 : 4));
            b[i].qh[32 * h + l] |= (uint8_t)((u >> 4) << (2 * s));
        }
    }
}
