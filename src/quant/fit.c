/*
 * fit.c - scale search for the reference quantizers: given a few values (one block or
 * sub-block, n <= 32), the float scale (and offset) whose round-to-nearest codes give the
 * smallest squared error.
 *
 * Why a search: the scale that maps the largest value onto the end of the code range (what
 * the formats were first quantized with) wastes levels whenever the largest value is an
 * outlier. For a fixed set of codes the best scale is a least-squares solution, and for a
 * fixed scale the best codes are round-to-nearest; we try a grid of scales (each given by
 * the code the largest value should get), solve least squares for each one's codes, keep
 * the best, then alternate the two steps until the error stops falling. The error is
 * unweighted: every weight counts the same, which is what the RMS comparisons measure.
 *
 * Cost: about 3 * n * (grid size ~ 50) float operations per block; the quantizers call it
 * once per (sub-)block, so quantizing is ~100-300 flops per weight (a 7B model: minutes
 * on one core, in line with the reference quantizers of other engines).
 */
#include <math.h>
#include <string.h>

#include "core/fp16.h"
#include "quant/quants.h"

enum { FIT_MAX_N = 32, SYM_STEPS = 24, AFFINE_STEPS = 30, REFINE_ITERS = 6 };

uint16_t quant_f16_sat(float s) {
    if (!(fabsf(s) <= 65504.0f)) /* inf or beyond: saturate (NaN -> 0) */
        s = isnan(s) ? 0.0f : (s > 0 ? 65504.0f : -65504.0f);
    return er_f32_to_f16(s);
}

/* Codes for scale s, and the sums sum(x*q), sum(q*q) in double. */
static void sym_codes(const float *x, int n, int qmin, int qmax, float inv, int8_t *L, double *sxq, double *sqq) {
    double a = 0, b = 0;
    for (int i = 0; i < n; i++) {
        const int q = quant_nearest(x[i] * inv, qmin, qmax);
        L[i] = (int8_t)q;
        a += (double)x[i] * q;
        b += (double)q * q;
    }
    *sxq = a;
    *sqq = b;
}

float quant_fit_sym(const float *x, int n, int qmin, int qmax, int8_t *L) {
    float amax = 0.0f, xm = 0.0f;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            xm = x[i];
        }
    }
    if (amax == 0.0f || !isfinite(amax)) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    int8_t cand[FIT_MAX_N];
    double best_score = -1.0, best_s = 0.0;
    /* sum (x - s q)^2 = sum x^2 - sxq^2 / sqq at the least-squares s: maximize sxq^2/sqq */
    for (int side = 0; side < 2; side++) {
        const float qend = (float)(side ? qmax : -qmin); /* magnitude of the end used */
        const float sign = side ? 1.0f : -1.0f;
        /* the largest value gets code +-t, t from qend + 0.5 (just clipping) down to 0.6 qend */
        const float t_hi = qend + 0.499f, t_lo = 0.6f * qend;
        for (int k = 0; k <= SYM_STEPS; k++) {
            const float t = t_hi - (t_hi - t_lo) * (float)k / SYM_STEPS;
            double sxq, sqq;
            sym_codes(x, n, qmin, qmax, sign * t / xm, cand, &sxq, &sqq);
            if (sqq > 0 && sxq * sxq / sqq > best_score) {
                best_score = sxq * sxq / sqq;
                best_s = sxq / sqq;
                memcpy(L, cand, (size_t)n);
            }
        }
    }
    for (int it = 0; it < REFINE_ITERS && best_s != 0.0; it++) {
        double sxq, sqq;
        sym_codes(x, n, qmin, qmax, (float)(1.0 / best_s), cand, &sxq, &sqq);
        if (!(sqq > 0 && sxq * sxq / sqq > best_score * (1.0 + 1e-12)))
            break;
        best_score = sxq * sxq / sqq;
        best_s = sxq / sqq;
        memcpy(L, cand, (size_t)n);
    }
    return (float)best_s;
}

double quant_affine_ls(const float *x, int n, const uint8_t *L, int nonpos_offset, float *a_out, float *o_out) {
    double s1 = 0, s2 = 0, sx = 0, sxq = 0;
    for (int i = 0; i < n; i++) {
        s1 += L[i];
        s2 += (double)L[i] * L[i];
        sx += x[i];
        sxq += (double)x[i] * L[i];
    }
    const double det = n * s2 - s1 * s1;
    if (!(det > 0))
        return -1.0; /* every code equal: no scale to fit */
    double a = (n * sxq - s1 * sx) / det;
    double o = (sx - a * s1) / n;
    if (nonpos_offset && o > 0) {
        o = 0;
        a = sxq / s2;
    }
    if (!(a > 0))
        return -1.0;
    const float af = (float)a, of = (float)o;
    double err = 0;
    for (int i = 0; i < n; i++) {
        const double e = (double)x[i] - ((double)af * L[i] + of);
        err += e * e;
    }
    *a_out = af;
    *o_out = of;
    return err;
}

static void affine_codes(const float *x, int n, int nmax, float a, float o, uint8_t *L) {
    const float inv = 1.0f / a;
    for (int i = 0; i < n; i++)
        L[i] = (uint8_t)quant_nearest((x[i] - o) * inv, 0, nmax);
}

void quant_fit_affine(const float *x, int n, int nmax, int nonpos_offset, uint8_t *L, float *a, float *o) {
    float mn = x[0], mx = x[0];
    for (int i = 1; i < n; i++) {
        mn = fminf(mn, x[i]);
        mx = fmaxf(mx, x[i]);
    }
    if (nonpos_offset && mn > 0)
        mn = 0;
    if (!(mx > mn) || !isfinite(mx - mn)) { /* constant block (or non-finite input) */
        memset(L, 0, (size_t)n);
        *a = 0.0f;
        *o = isfinite(mn) ? mn : 0.0f;
        return;
    }
    uint8_t cand[FIT_MAX_N];
    double best = -1.0;
    /* grid over the code the range [mn, mx] spans: nmax - 1.5 .. nmax + 1.5 */
    for (int k = 0; k <= AFFINE_STEPS; k++) {
        const float span = (float)nmax - 1.5f + 3.0f * (float)k / AFFINE_STEPS;
        if (span <= 0.5f)
            continue;
        const float iscale = span / (mx - mn);
        for (int i = 0; i < n; i++)
            cand[i] = (uint8_t)quant_nearest((x[i] - mn) * iscale, 0, nmax);
        float ca, co;
        const double err = quant_affine_ls(x, n, cand, nonpos_offset, &ca, &co);
        if (err >= 0 && (best < 0 || err < best)) {
            best = err;
            *a = ca;
            *o = co;
            memcpy(L, cand, (size_t)n);
        }
    }
    if (best < 0) { /* every candidate degenerate: plain min/max */
        *a = (mx - mn) / (float)nmax;
        *o = mn;
        affine_codes(x, n, nmax, *a, *o, L);
        return;
    }
    for (int it = 0; it < REFINE_ITERS; it++) {
        float ca, co;
        affine_codes(x, n, nmax, *a, *o, cand);
        const double err = quant_affine_ls(x, n, cand, nonpos_offset, &ca, &co);
        if (!(err >= 0 && err < best * (1.0 - 1e-12)))
            break;
        best = err;
        *a = ca;
        *o = co;
        memcpy(L, cand, (size_t)n);
    }
}
