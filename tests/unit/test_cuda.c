/*
 * test_cuda.c - the CUDA decode kernels against a double-precision host computation on
 * random inputs: every weight type of the device layout (wtypes.cuh), every matvec mode
 * (plain, residual add, RMSNorm folded in, SwiGLU, the head's argmax), at the shapes of
 * Qwen3-0.6B, of the output head, and at small odd shapes that take the fallbacks
 * (rows not a whole number of 16-byte chunks, slices not 16-byte aligned), the types of
 * cuda_wtype_int8_dot (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K) with the input in f32 and, where the
 * kernel takes it so (takes_int8: every decode matvec of those types while int8 is on),
 * quantized to int8 (the host quantizes its own
 * alike; run_case's bound allows one rounding apart); and the fused decode attention
 * (Q/K norm, RoPE, cache write, GQA over 1 to 3,001 positions, one or several rounds of
 * its cluster, sliding windows) and the prefill's attention (also with windows) and
 * tensor-core GEMM against the same kind of host computation.
 * With a window, the cache rows below every window are NaN: a kernel that reads one
 * fails. Every attention case runs with the KV cache in F32, F16 or Q8_0 (enum
 * cuda_kv_type): the host attends over the values the cache holds, so the bounds are
 * those of the F32 cache (1e-5 in decode, 2e-3 in the F16 tensor-core prefill) whatever
 * the type; the rounding itself is checked where a kernel writes a row (kv_tolerance:
 * F16 half a unit, 2^-11 relative; Q8_0 half a step of its block, amax / 254, or one
 * step across a boundary; V bit for bit the CPU's from_f32_q8_0_ref / er_f32_to_f16).
 * What the rounding does to the logits, against an F32 cache, is bench/check_cuda.py's
 * and test_cpu.c's to bound.
 *
 * Built when the CUDA backend is; passes with a note on machines without a GPU (CI),
 * and is run on the GPU machine by bench/gpu.sh (`build/unit_tests cuda` and `cuda_gemm`).
 */
#include "test.h"

#ifndef ER_HAVE_CUDA
void test_cuda(void) { printf("cuda: built without CUDA, nothing to test\n"); }
void test_cuda_gemm(void) { printf("cuda_gemm: built without CUDA, nothing to test\n"); }
#else

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/internal.h"
#include "backend/cuda/kernels.h"
#include "core/fp16.h"
#include "quant/quants.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* uniform in [-1, 1) */
static float rndf(void) { return (float)(rnd() & 0xffffff) / 8388608.0f - 1.0f; }

static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

/* Element i of a row in the device layout, per type (wtypes.cuh): a random value written
 * into the row (its scales d_row, f16, already random), and returned as a double. */
static double encode_f32(uint8_t *row, const uint16_t *d_row, int i) {
    (void)d_row;
    const float f = rndf();
    memcpy(row + 4 * i, &f, 4);
    return f;
}

static double encode_f16(uint8_t *row, const uint16_t *d_row, int i) {
    (void)d_row;
    const uint16_t h = quant_f16_sat(rndf());
    memcpy(row + 2 * i, &h, 2);
    return er_f16_to_f32(h);
}

static double encode_bf16(uint8_t *row, const uint16_t *d_row, int i) {
    (void)d_row;
    const uint16_t h = f32_to_bf16(rndf());
    memcpy(row + 2 * i, &h, 2);
    return er_bf16_to_f32(h);
}

static double encode_q8_0(uint8_t *row, const uint16_t *d_row, int i) {
    const uint8_t q = (uint8_t)rnd();
    row[i] = q;
    return (double)((int)q - 128) * er_f16_to_f32(d_row[i / 32]);
}

static double encode_q4_0(uint8_t *row, const uint16_t *d_row, int i) {
    /* byte j of block b: element j low nibble, j + 16 high nibble */
    const int b = i / 32, j = i % 32;
    uint8_t *byte = row + b * 16 + (j & 15);
    const uint8_t q = (uint8_t)(rnd() & 15);
    *byte = j < 16 ? (uint8_t)((*byte & 0xf0) | q) : (uint8_t)((*byte & 0x0f) | (q << 4));
    return (double)((int)q - 8) * er_f16_to_f32(d_row[b]);
}

/* The plane types (wtypes.cuh: the low bits of each element in 16-byte chunks w, scales
 * and high bits beside them in d), from the drawing there, written again here for the
 * host: element i of a row is element e = 16 g + 4 wi + k of chunk c. */
typedef struct plane_elem {
    int c, g, wi, k, j; /* j = e % 16: the byte of the chunk */
} plane_elem;

static plane_elem plane_at(int type, int i) {
    const int ce = 16 * cuda_wtype_quant_elems(type) / cuda_wtype_quant_bytes(type), e = i % ce;
    return (plane_elem){i / ce, e >> 4, (e >> 2) & 3, e & 3, e & 15};
}

static uint32_t get_u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static void set_bits(uint8_t *p, int bit, int n, uint32_t v) { /* n bits at bit of the u32 at p */
    uint32_t u = get_u32(p);
    u = (u & ~(((1u << n) - 1) << bit)) | (v << bit);
    for (int b = 0; b < 4; b++)
        p[b] = (uint8_t)(u >> (8 * b));
}
static float half_at(const uint8_t *p) { return er_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

/* A random code of element i of a plane-type row written into it (low bits into w, high
 * bits into the scales' bytes sd), and its value: d (code - bias) + m with the scale and
 * offset of its group, formed in float as the format defines them. */
static double encode_plane(int type, int bits, int bias, uint8_t *row, const uint16_t *d_row, int i) {
    uint8_t *sd = (uint8_t *)d_row;
    const plane_elem p = plane_at(type, i);
    const int low_bits = cuda_wtype_quant_elems(type) == 2 ? 4 : 2;
    const uint32_t code = rnd() & ((1u << bits) - 1);
    uint8_t *byte = row + 16 * p.c + p.j;
    *byte = (uint8_t)((*byte & ~(((1 << low_bits) - 1) << (low_bits * p.g))) |
                      ((code & ((1u << low_bits) - 1)) << (low_bits * p.g)));
    const int se = cuda_wtype_scale_elems(type), sb = cuda_wtype_scale_bytes(type);
    const int per = se / (16 * cuda_wtype_quant_elems(type) / cuda_wtype_quant_bytes(type)); /* chunks per scale unit */
    uint8_t *u = sd + (p.c / per) * sb;
    const int cc = p.c % per, wb = 8 * p.k; /* chunk in the unit; byte k of a high-bit word */
    float d = 1.0f, m = 0.0f;
    switch (type) {
    case CUDA_W_Q4_1: d = half_at(u), m = half_at(u + 2); break;
    case CUDA_W_Q5_0: d = half_at(u), set_bits(u + 2, wb + 4 * p.g + p.wi, 1, code >> 4); break;
    case CUDA_W_Q5_1: d = half_at(u), m = half_at(u + 2), set_bits(u + 4, wb + 4 * p.g + p.wi, 1, code >> 4); break;
    case CUDA_W_Q4_K:
    case CUDA_W_Q5_K: {
        uint8_t sc, mn;
        get_scale_min_k4(cc, u + 4, &sc, &mn);
        d = half_at(u) * (float)sc, m = -(half_at(u + 2) * (float)mn);
        if (type == CUDA_W_Q5_K)
            set_bits(u + 16 + 4 * cc, wb + 4 * p.g + p.wi, 1, code >> 4);
        break;
    }
    case CUDA_W_Q6_K:
        d = half_at(u + 80) * (float)(int8_t)u[64 + 2 * cc + p.g];
        set_bits(u + 8 * cc + 4 * (p.wi & 1), wb + 4 * (p.wi >> 1) + 2 * p.g, 2, code >> 4);
        break;
    case CUDA_W_Q2_K: {
        const uint8_t sc = u[4 * cc + p.g];
        d = half_at(u + 16) * (float)(sc & 15), m = -(half_at(u + 18) * (float)(sc >> 4));
        break;
    }
    case CUDA_W_Q3_K:
        d = half_at(u + 44) * (float)(q3_K_scale(u + 32, 4 * cc + p.g) - 32);
        set_bits(u + 8 * cc + 4 * (p.wi & 1), wb + 4 * (p.wi >> 1) + p.g, 1, code >> 2);
        break;
    }
    return (double)d * ((int)code - bias) + m;
}

static double encode_q4_k(uint8_t *row, const uint16_t *d_row, int i) { return encode_plane(CUDA_W_Q4_K, 4, 0, row, d_row, i); }
static double encode_q5_k(uint8_t *row, const uint16_t *d_row, int i) { return encode_plane(CUDA_W_Q5_K, 5, 0, row, d_row, i); }
static double encode_q6_k(uint8_t *row, const uint16_t *d_row, int i) { return encode_plane(CUDA_W_Q6_K, 6, 32, row, d_row, i); }
static double encode_q4_1(uint8_t *row, const uint16_t *d_row, int i) { return encode_plane(CUDA_W_Q4_1, 4, 0, row, d_row, i); }
static double encode_q5_0(uint8_t *row, const uint16_t *d_row, int i) { return encode_plane(CUDA_W_Q5_0, 5, 16, row, d_row, i); }
static double encode_q5_1(uint8_t *row, const uint16_t *d_row, int i) { return encode_plane(CUDA_W_Q5_1, 5, 0, row, d_row, i); }
static double encode_q2_k(uint8_t *row, const uint16_t *d_row, int i) { return encode_plane(CUDA_W_Q2_K, 2, 0, row, d_row, i); }
static double encode_q3_k(uint8_t *row, const uint16_t *d_row, int i) { return encode_plane(CUDA_W_Q3_K, 3, 4, row, d_row, i); }

/* encode_<name> of every type in the list, by type id */
#define ENCODER(A, NAME, name, ...) encode_##name,
static double (*const encoders[CUDA_W_COUNT])(uint8_t *, const uint16_t *, int) = {CUDA_WTYPES(ENCODER, _)};
#undef ENCODER

/* A random matrix in the device layout on the host, and its values as doubles. */
typedef struct host_matrix {
    int type;
    int n_out, n_in;
    uint8_t *w;    /* (n_out, cuda_row_bytes) */
    uint16_t *d;   /* (n_out, cuda_scale_row_bytes / 2) f16 scales, or NULL */
    double *value; /* (n_out, n_in) what the layout means */
} host_matrix;

static int make_matrix(int type, int n_out, int n_in, host_matrix *m) {
    const size_t rb = cuda_row_bytes(type, n_in), nd = cuda_scale_row_bytes(type, n_in) / 2;
    memset(m, 0, sizeof *m);
    m->type = type;
    m->n_out = n_out;
    m->n_in = n_in;
    m->w = calloc((size_t)n_out, rb);
    m->value = malloc((size_t)n_out * (size_t)n_in * sizeof(double));
    if (nd)
        m->d = malloc((size_t)n_out * nd * sizeof(uint16_t));
    if (!m->w || !m->value || (nd && !m->d))
        return -1;
    for (int r = 0; r < n_out; r++) {
        uint16_t *d_row = m->d ? m->d + (size_t)r * nd : NULL;
        for (size_t k = 0; k < nd; k++)
            d_row[k] = quant_f16_sat(0.01f + 0.02f * (rndf() + 1.0f));
        for (int i = 0; i < n_in; i++)
            m->value[(size_t)r * n_in + i] = encoders[type](m->w + (size_t)r * rb, d_row, i);
    }
    return 0;
}

static void free_matrix(host_matrix *m) {
    free(m->w);
    free(m->d);
    free(m->value);
}

/* m on the device as *dw (rows and scales padded by 16 bytes, as upload_matrix pads);
 * 0, or -1 when out of device memory or a copy failed (what was allocated stays in *dw
 * for cudaFree). m->value is not read. */
static int upload_weight(const host_matrix *m, cuda_weight *dw) {
    const size_t w_bytes = (size_t)m->n_out * cuda_row_bytes(m->type, m->n_in);
    const size_t d_bytes = (size_t)m->n_out * cuda_scale_row_bytes(m->type, m->n_in);
    *dw = (cuda_weight){m->type, m->n_in, m->n_out, NULL, NULL, NULL};
    if (cudaMalloc(&dw->w, w_bytes + 16) != cudaSuccess || (m->d && cudaMalloc(&dw->d, d_bytes + 16) != cudaSuccess))
        return -1;
    if (cudaMemcpy(dw->w, m->w, w_bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
        (m->d && cudaMemcpy(dw->d, m->d, d_bytes, cudaMemcpyHostToDevice) != cudaSuccess))
        return -1;
    return 0;
}

static const char *mode_name(int mode) {
    static const char *names[] = {"store", "add", "norm_store", "norm_swiglu", "norm_argmax", "norm_geglu"};
    return names[mode];
}

/* GELU's tanh approximation (cpu_geglu) in doubles */
static double gelu_tanh(double g) { return 0.5 * g * (1.0 + tanh(0.79788456080286535588 * g * (1.0 + 0.044715 * g * g))); }

/* x (n, whole blocks of 32) quantized in place per block as the int8 kernels quantize
 * their input (common.cuh, quant8_f32: d = max |x| / 127 in float, q = x * (127 / max)
 * rounded to even): each element becomes q d, and d[block] (d not NULL) its block's d. */
static void quantize_ref(double *x, size_t n, double *d) {
    for (size_t i = 0; i < n; i += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf((float)x[i + j]));
        const float dq = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (int j = 0; j < 32; j++) {
            const float q = fminf(127.0f, fmaxf(-127.0f, rintf((float)x[i + j] * id)));
            x[i + j] = (double)q * dq;
        }
        if (d)
            d[i / 32] = dq;
    }
}

/* Whether m's matvec in this mode quantizes its input to int8 (cuda_matvec_takes_int8) */
static int takes_int8(const host_matrix *m, int mode) {
    const cuda_weight w = {m->type, m->n_in, m->n_out, NULL, NULL, NULL};
    return cuda_matvec_takes_int8(&w, mode);
}

/* Whether its matvec in this mode takes k_matvec_ring (the device copy is 16-byte aligned) */
static int takes_ring(const host_matrix *m, int mode) {
    const cuda_weight w = {m->type, m->n_in, m->n_out, NULL, NULL, NULL};
    return cuda_matvec_takes_ring(&w, mode);
}

/* One matvec on the device vs the host; returns the worst |error| / max |y|, and in *tol
 * the bound it is held to.
 *
 * The bound: 1e-5 for the float sums. With int8 input (cuda_matvec_takes_int8) the host
 * quantizes its xn as the kernel does (quantize_ref), but what the kernel quantizes
 * (in float; with a norm x times its weights, the 1 / rms multiplied into the sums:
 * stage_quant) differs from the host's xn, scaled, by an ulp or so, which
 * moves x 127 / max by up to ~|q| 2^-23 <= 1.5e-5: an element that close to a .5 boundary
 * (~1e-5 of them) rounds to the neighbouring q on one side, and moves a row's dot by
 * |w| d_x (d_x = max / 127 of its block). tol adds one such flip at the row's worst
 * element (largest |w| d_x: ~2-3x a typical element's, so two typical flips fit too),
 * through the activation in the gated modes (|act'| <= 1.13, GELU's; SiLU's 1.10), over
 * max(|y|, sum |w x|). With this test's rows (Q8_0 |w| <= 6.4, mean 1.9; Q4_0 0.4 and
 * 0.12: the same ratio; |xn| <= ~3, mean ~0.9) that is ~(6.4 x 3 / 127) / (n_in 1.9 x 0.9)
 * = 0.09 / n_in: 2.8e-3 at 32 elements, 9e-5 at 1,024, while a wrong quant, nibble,
 * swizzle or scale moves y by whole terms. A flip is expected in ~1e-5 n_in of the cases
 * (0.1 at n_in 12,288). */
static double run_case(const host_matrix *m, int mode, int *argmax_ok, double *tol) {
    const int n_in = m->n_in, n_out = m->n_out;
    const int gated = mode == MV_NORM_SWIGLU || mode == MV_NORM_GEGLU;
    const int n_y = gated ? n_out / 2 : n_out;
    const float eps = 1e-6f;
    float *x = malloc((size_t)n_in * sizeof(float)), *nw = malloc((size_t)n_in * sizeof(float));
    float *y0 = malloc((size_t)n_y * sizeof(float)), *y = malloc((size_t)n_y * sizeof(float));
    double *ref = malloc((size_t)n_y * sizeof(double)), *xn = malloc((size_t)n_in * sizeof(double));
    double *xd = calloc((size_t)(n_in + 31) / 32, sizeof(double)); /* int8 input: each block's scale, else 0 */
    const int int8 = takes_int8(m, mode);
    cuda_weight dw = {m->type, n_in, n_out, NULL, NULL, NULL};
    float *dx = NULL, *dnw = NULL, *dy = NULL;
    cuda_step_state *dstate = NULL;
    double worst = INFINITY;
    *argmax_ok = 1;
    *tol = 1e-5;
    if (!x || !nw || !y0 || !y || !ref || !xn || !xd)
        goto done;
    for (int i = 0; i < n_in; i++) {
        x[i] = 2.0f * rndf();
        nw[i] = 1.0f + 0.5f * rndf();
    }
    for (int i = 0; i < n_y; i++)
        y0[i] = rndf();

    /* the host: doubles throughout */
    const int norm = mode == MV_NORM_STORE || gated || mode == MV_NORM_ARGMAX;
    double ss = 0.0;
    for (int i = 0; i < n_in; i++) {
        xn[i] = x[i];
        ss += xn[i] * xn[i];
    }
    const double scale = 1.0 / sqrt(ss / n_in + eps);
    for (int i = 0; i < n_in; i++)
        xn[i] = norm ? xn[i] * scale * nw[i] : xn[i];
    if (int8)
        quantize_ref(xn, (size_t)n_in, xd);
    /* the error's scale: the largest |y|, and at least the largest sum |w x| of a row
     * (for the gated modes the product of the gate's and the up row's), since the
     * kernel's float error is relative to those sums: a dot can cancel to far less (a
     * single row of 32 did: 1.6e-5 of its |y|), and act(gate) * up can be far smaller
     * than gate . x and up . x (GeGLU of a large negative gate: ~1e-25 in doubles, 0 in
     * floats; with 2 rows that is the whole y) */
    double ymax = 0.0, flip = 0.0;
    int best = 0;
    for (int r = 0; r < n_y; r++) {
        double a = 0.0, u = 0.0, sa = 0.0, su = 0.0, fa = 0.0, fu = 0.0; /* fa, fu: a flip's, largest |w| d_x */
        for (int i = 0; i < n_in; i++) {
            const double w = m->value[(size_t)r * n_in + i];
            a += w * xn[i];
            sa += fabs(w * xn[i]);
            fa = fmax(fa, fabs(w) * xd[i / 32]);
        }
        if (gated) {
            for (int i = 0; i < n_in; i++) {
                const double w = m->value[(size_t)(n_y + r) * n_in + i];
                u += w * xn[i];
                su += fabs(w * xn[i]);
                fu = fmax(fu, fabs(w) * xd[i / 32]);
            }
            const double g = mode == MV_NORM_GEGLU ? gelu_tanh(a) : a / (1.0 + exp(-a));
            fa = 1.13 * fabs(u) * fa + fabs(g) * fu;
            a = g * u;
            sa *= su;
        }
        flip = fa > flip ? fa : flip;
        ymax = sa > ymax ? sa : ymax;
        ref[r] = mode == MV_ADD ? y0[r] + a : a;
        ymax = fabs(ref[r]) > ymax ? fabs(ref[r]) : ymax;
        best = ref[r] > ref[best] ? r : best;
    }
    *tol += ymax > 0 ? flip / ymax : 0.0;

    /* the device */
    if (upload_weight(m, &dw) != 0 || cudaMalloc((void **)&dx, (size_t)n_in * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dnw, (size_t)n_in * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dy, (size_t)n_y * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dstate, sizeof *dstate) != cudaSuccess)
        goto done;
    cudaMemcpy(dx, x, (size_t)n_in * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dnw, nw, (size_t)n_in * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dy, y0, (size_t)n_y * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemset(dstate, 0, sizeof *dstate);
    if (cuda_matvec(&dw, mode, dx, norm ? dnw : NULL, eps, dy, dstate, 0) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess)
        goto done;
    cudaMemcpy(y, dy, (size_t)n_y * sizeof(float), cudaMemcpyDeviceToHost);
    worst = 0.0;
    for (int r = 0; r < n_y; r++) {
        const double e = fabs((double)y[r] - ref[r]) / (ymax > 0 ? ymax : 1.0);
        worst = e > worst || isnan(e) ? e : worst;
    }
    if (mode == MV_NORM_ARGMAX) {
        cuda_step_state s;
        cudaMemcpy(&s, dstate, sizeof s, cudaMemcpyDeviceToHost);
        const int got = (int)(0xffffffffu - (unsigned int)(s.argmax_key & 0xffffffffu));
        *argmax_ok = got == best || fabs(ref[got] - ref[best]) <= 2 * *tol * ymax; /* each within tol */
    }
done:
    cudaFree(dw.w);
    cudaFree(dw.d);
    cudaFree(dx);
    cudaFree(dnw);
    cudaFree(dy);
    cudaFree(dstate);
    free(x);
    free(nw);
    free(y0);
    free(y);
    free(ref);
    free(xn);
    free(xd);
    return worst;
}

/* RMSNorm (with nw, when not NULL) and RoPE (every dim rotated, by the angles cs (hd / 2,
 * 2) of the position) of a head vector, in doubles. */
static void norm_rope_ref(const float *src, const float *nw, int hd, int neox, const float *cs, double eps,
                          double *dst) {
    const int half = hd / 2;
    double ss = 0.0;
    for (int i = 0; i < hd; i++)
        ss += (double)src[i] * src[i];
    const double scale = nw ? 1.0 / sqrt(ss / hd + eps) : 1.0;
    for (int i = 0; i < hd; i++)
        dst[i] = src[i] * scale * (nw ? nw[i] : 1.0f);
    for (int i = 0; i < half; i++) {
        const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        const double c = cs[2 * i], s = cs[2 * i + 1], x0 = dst[i0], x1 = dst[i1];
        dst[i0] = x0 * c - x1 * s;
        dst[i1] = x0 * s + x1 * c;
    }
}

/* Attention parameters of heads of hd dims without norms, biases or RoPE table (the
 * shape checks and the prefill's attention, whose q comes normed and rotated). */
static cuda_attn_params plain_attn(int n_head, int n_head_kv, int hd, int neox, int64_t n_ctx, int window) {
    const cuda_attn_params p = {.n_head = n_head, .n_head_kv = n_head_kv, .head_dim = hd, .head_dim_v = hd,
                                .n_rot = hd, .rope_neox = neox, .eps = 1e-6f, .n_ctx = n_ctx, .window = window};
    return p;
}

/* A device copy of `bytes` of host, or NULL (out of device memory). */
static void *to_device(const void *host, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess)
        return NULL;
    cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
    return d;
}

/* Folds one result into a worst absolute error and the largest reference magnitude
 * (NaN counts as the worst). */
static void track_error(double got, double ref, double *err, double *vmax) {
    const double e = fabs(got - ref);
    *err = e > *err || isnan(e) ? e : *err;
    *vmax = fabs(ref) > *vmax ? fabs(ref) : *vmax;
}

/* Random floats: n of them, each scale * rndf() + offset. */
static float *random_floats(size_t n, float scale, float offset) {
    float *f = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; f && i < n; i++)
        f[i] = scale * rndf() + offset;
    return f;
}

/* ---- the KV cache's types on the host (kernels.h: enum cuda_kv_type) ---------------- */

static const char *kv_name(int kv_type) { return kv_type == CUDA_KV_F16 ? "F16" : kv_type == CUDA_KV_Q8_0 ? "Q8_0" : "F32"; }

/* Rows 0..n_rows of vals (n_rows, kv_dim) into a layer's cache of n_ctx rows in the
 * device layout of kv_type at dst (cuda_kv_layer_bytes), with the CPU's conversions
 * (er_f32_to_f16; from_f32_q8_0_ref, whose blocks of 32 are those of the device when
 * kv_dim % 32 == 0); vals becomes what the cache holds. */
static void kv_encode(int kv_type, float *vals, int n_rows, int n_ctx, int kv_dim, uint8_t *dst) {
    for (int r = 0; r < n_rows; r++) {
        float *row = vals + (size_t)r * kv_dim;
        const size_t e0 = (size_t)r * kv_dim;
        if (kv_type == CUDA_KV_F32) {
            memcpy(dst + 4 * e0, row, (size_t)kv_dim * 4);
        } else if (kv_type == CUDA_KV_F16) {
            for (int i = 0; i < kv_dim; i++) {
                const uint16_t h = er_f32_to_f16(row[i]);
                memcpy(dst + 2 * (e0 + i), &h, 2);
                row[i] = er_f16_to_f32(h);
            }
        } else {
            uint16_t *scales = (uint16_t *)(dst + (size_t)n_ctx * kv_dim);
            for (int b = 0; b < kv_dim / 32; b++) {
                block_q8_0 q;
                from_f32_q8_0_ref(row + 32 * b, &q, 32);
                to_f32_q8_0_ref(&q, row + 32 * b, 32);
                memcpy(dst + e0 + 32 * b, q.qs, 32);
                scales[e0 / 32 + b] = q.d;
            }
        }
    }
}

/* Row r of a layer's cache of n_ctx rows in the device layout of kv_type, as floats. */
static void kv_decode(int kv_type, const uint8_t *src, int r, int n_ctx, int kv_dim, float *out) {
    const size_t e0 = (size_t)r * kv_dim;
    for (int i = 0; i < kv_dim; i++) {
        if (kv_type == CUDA_KV_F32) {
            memcpy(&out[i], src + 4 * (e0 + i), 4);
        } else if (kv_type == CUDA_KV_F16) {
            uint16_t h;
            memcpy(&h, src + 2 * (e0 + i), 2);
            out[i] = er_f16_to_f32(h);
        } else {
            uint16_t d;
            memcpy(&d, src + (size_t)n_ctx * kv_dim + 2 * ((e0 + i) / 32), 2);
            out[i] = er_f16_to_f32(d) * (float)(int8_t)src[e0 + i];
        }
    }
}

/* Rows 0..n_rows of the cache become NaN (Q8_0: their scales), so that a kernel that
 * reads one shows it. */
static void kv_poison(int kv_type, uint8_t *dst, int n_rows, int n_ctx, int kv_dim) {
    const uint16_t nan16 = 0x7e00;
    const float nan32 = NAN;
    for (size_t e = 0; e < (size_t)n_rows * kv_dim; e++) {
        if (kv_type == CUDA_KV_F32)
            memcpy(dst + 4 * e, &nan32, 4);
        else if (kv_type == CUDA_KV_F16)
            memcpy(dst + 2 * e, &nan16, 2);
        else if (e % 32 == 0)
            memcpy(dst + (size_t)n_ctx * kv_dim + 2 * (e / 32), &nan16, 2);
    }
}

/* How far a new K element that the kernel rounded to kv_type may be from its exact value
 * ref (block_amax: the largest |ref| of its 32-element block): F32 sums (1e-5 of the
 * head's largest, scale); F16 half a unit (2^-11 relative) of the kernel's f32 value;
 * Q8_0 half a step d = amax / 127 (and one more step where the kernel's f32 value and
 * the exact one fall on two sides of a rounding boundary), d itself rounded to F16. */
static double kv_tolerance(int kv_type, double ref, double block_amax, double scale) {
    if (kv_type == CUDA_KV_F16)
        return ldexp(fabs(ref), -11) + 1e-5 * scale;
    if (kv_type == CUDA_KV_Q8_0)
        return 1.1 * block_amax / 127.0 + 1e-5 * scale;
    return 1e-5 * scale;
}

/* One decode attention step at position pos against doubles on the host: worst error
 * of the output over its largest value, and whether row pos of both caches was written.
 * window > 0: the step sees rows max(0, pos - window + 1) .. pos only (as
 * cpu_attention_window), and the rows below are NaN, so that reading one shows.
 * With with_bias, random Q/K/V biases (Qwen2) added to qkv before everything else.
 * The cache in kv_type: the host attends over the values the cache holds (the earlier
 * rows encoded on the host, row pos as the kernel wrote it), so the bound stays the F32
 * one whatever the type; the kernel's rounding of the new row is checked apart: V bit
 * for bit the CPU's conversion of the same floats, K within kv_tolerance of its exact
 * value (the kernel's f32 K is ~1e-6 from it, so a rounding may fall the other way).
 * With n_split > 0, the split decode over that many blocks per head instead. */
typedef struct attn_case {
    int n_head, n_head_kv, hd, pos, window, neox, with_norm;
    int with_bias;
    int kv_type; /* enum cuda_kv_type */
    int n_split; /* > 0: the split decode (cuda_attention_decode_split) over this many blocks per head */
    int spike;   /* > 0: every 97th key row (from row 41) is that many times larger: scores far past the others */
} attn_case;

static double attention_case(const attn_case *ac, int *cache_ok) {
    const int n_head = ac->n_head, n_head_kv = ac->n_head_kv, hd = ac->hd, pos = ac->pos, window = ac->window;
    const int neox = ac->neox, with_norm = ac->with_norm;
    const int kv_dim = n_head_kv * hd, q_dim = n_head * hd, n_qkv = q_dim + 2 * kv_dim, half = hd / 2;
    const int n_ctx = pos + 1, group = n_head / n_head_kv;
    const int j0 = window > 0 && pos >= window ? pos - window + 1 : 0; /* the first row seen */
    const float eps = 1e-6f;
    const size_t cache_n = (size_t)n_ctx * kv_dim, cache_bytes = cuda_kv_layer_bytes(ac->kv_type, n_ctx, kv_dim);
    float *kc = malloc(cache_n * sizeof(float)), *vc = malloc(cache_n * sizeof(float));
    uint8_t *kcb = calloc(cache_bytes, 1), *vcb = calloc(cache_bytes, 1);
    float *qkv = malloc((size_t)n_qkv * sizeof(float)), *qn = malloc((size_t)hd * sizeof(float));
    float *bias = malloc((size_t)n_qkv * sizeof(float)), *qkv_b = malloc((size_t)n_qkv * sizeof(float));
    float *kn = malloc((size_t)hd * sizeof(float)), *cs = malloc((size_t)n_ctx * half * 2 * sizeof(float));
    float *out = malloc((size_t)q_dim * sizeof(float)), *v_want = malloc((size_t)kv_dim * sizeof(float));
    double *ref = malloc((size_t)q_dim * sizeof(double)), *kr = malloc((size_t)kv_dim * sizeof(double));
    double *sc = malloc((size_t)n_ctx * sizeof(double)), *qr = malloc((size_t)hd * sizeof(double));
    float *dqkv = NULL, *dqn = NULL, *dkn = NULL, *dcs = NULL, *dout = NULL, *dbias = NULL;
    float *dpart = NULL; /* (n_head, n_split, hd + 2) the split decode's states */
    uint8_t *dkc = NULL, *dvc = NULL;
    cuda_step_state *dstate = NULL;
    double worst = INFINITY;
    *cache_ok = 0;
    if (!kc || !vc || !kcb || !vcb || !qkv || !qn || !kn || !cs || !out || !v_want || !ref || !kr || !sc || !qr ||
        !bias || !qkv_b)
        goto done;
    for (size_t i = 0; i < cache_n; i++) {
        const int row = (int)(i / (size_t)kv_dim);
        kc[i] = 2.0f * rndf() * (ac->spike > 0 && row % 97 == 41 ? (float)ac->spike : 1.0f);
        vc[i] = rndf();
    }
    /* rows 0..pos - 1 in the cache's type (kc, vc: their values); row pos is the kernel's */
    kv_encode(ac->kv_type, kc, pos, n_ctx, kv_dim, kcb);
    kv_encode(ac->kv_type, vc, pos, n_ctx, kv_dim, vcb);
    kv_poison(ac->kv_type, kcb, j0, n_ctx, kv_dim);
    kv_poison(ac->kv_type, vcb, j0, n_ctx, kv_dim);
    for (int i = 0; i < n_qkv; i++) {
        qkv[i] = 2.0f * rndf();
        bias[i] = ac->with_bias ? rndf() : 0.0f;
        qkv_b[i] = qkv[i] + bias[i]; /* what the kernel attends with: one f32 add, as cpu_add_bias */
    }
    for (int i = 0; i < hd; i++) {
        qn[i] = 1.0f + 0.5f * rndf();
        kn[i] = 1.0f + 0.5f * rndf();
    }
    for (int i = 0; i < n_ctx * half; i++) {
        const double a = 3.14159265 * rndf();
        cs[2 * i] = (float)cos(a);
        cs[2 * i + 1] = (float)sin(a);
    }

    /* the device */
    if (!(dkc = to_device(kcb, cache_bytes)) || !(dvc = to_device(vcb, cache_bytes)) ||
        !(dqkv = to_device(qkv, (size_t)n_qkv * sizeof(float))) || !(dqn = to_device(qn, (size_t)hd * sizeof(float))) ||
        !(dkn = to_device(kn, (size_t)hd * sizeof(float))) ||
        !(dcs = to_device(cs, (size_t)n_ctx * half * 2 * sizeof(float))) ||
        cudaMalloc((void **)&dout, (size_t)q_dim * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dstate, sizeof *dstate) != cudaSuccess ||
        !(dbias = to_device(bias, (size_t)n_qkv * sizeof(float))) ||
        (ac->n_split > 0 &&
         cudaMalloc((void **)&dpart, (size_t)n_head * ac->n_split * (hd + 2) * sizeof(float)) != cudaSuccess))
        goto done;
    {
        const cuda_step_state st = {0, 0, pos, 0};
        cudaMemcpy(dstate, &st, sizeof st, cudaMemcpyHostToDevice);
    }
    cuda_attn_params p = plain_attn(n_head, n_head_kv, hd, neox, n_ctx, window);
    p.q_norm = with_norm ? dqn : NULL;
    p.k_norm = with_norm ? dkn : NULL;
    p.rope_cs = (const float2 *)dcs;
    p.qkv_bias = ac->with_bias ? dbias : NULL;
    p.kv_type = ac->kv_type;
    if ((ac->n_split > 0 ? cuda_attention_decode_split(&p, dqkv, dkc, dvc, dstate, dpart, ac->n_split, dout, 0)
                         : cuda_attention_decode(&p, dqkv, dkc, dvc, dstate, dout, 0)) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess)
        goto done;
    cudaMemcpy(out, dout, (size_t)q_dim * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(kcb, dkc, cache_bytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(vcb, dvc, cache_bytes, cudaMemcpyDeviceToHost);
    kv_decode(ac->kv_type, kcb, pos, n_ctx, kv_dim, kc + (size_t)pos * kv_dim);
    kv_decode(ac->kv_type, vcb, pos, n_ctx, kv_dim, vc + (size_t)pos * kv_dim);

    /* the host: the new K exactly (its rounding checked below), attention over the cache */
    double omax = 0.0, kmax = 0.0;
    for (int h = 0; h < n_head; h++) {
        const int kvh = h / group;
        norm_rope_ref(qkv_b + h * hd, with_norm ? qn : NULL, hd, neox, cs + (size_t)pos * half * 2, eps, qr);
        norm_rope_ref(qkv_b + q_dim + kvh * hd, with_norm ? kn : NULL, hd, neox, cs + (size_t)pos * half * 2, eps,
                      kr + kvh * hd);
        double m = -INFINITY, l = 0.0;
        for (int j = j0; j <= pos; j++) {
            double d = 0.0;
            for (int i = 0; i < hd; i++)
                d += qr[i] * (double)kc[(size_t)j * kv_dim + kvh * hd + i];
            sc[j] = d / sqrt((double)hd);
            m = sc[j] > m ? sc[j] : m;
        }
        for (int j = j0; j <= pos; j++)
            l += exp(sc[j] - m);
        for (int i = 0; i < hd; i++) {
            double a = 0.0;
            for (int j = j0; j <= pos; j++)
                a += exp(sc[j] - m) * (double)vc[(size_t)j * kv_dim + kvh * hd + i];
            ref[h * hd + i] = a / l;
            omax = fabs(ref[h * hd + i]) > omax ? fabs(ref[h * hd + i]) : omax;
        }
    }
    worst = 0.0;
    for (int i = 0; i < q_dim; i++) {
        const double e = fabs((double)out[i] - ref[i]) / (omax > 0 ? omax : 1.0);
        worst = e > worst || isnan(e) ? e : worst;
    }
    /* row pos: V as the CPU converts the same floats (with its bias), K near its exact value */
    memcpy(v_want, qkv_b + q_dim + kv_dim, (size_t)kv_dim * sizeof(float));
    kv_encode(ac->kv_type, v_want, 1, 1, kv_dim, kcb); /* kcb: scratch now */
    *cache_ok = !memcmp(v_want, vc + (size_t)pos * kv_dim, (size_t)kv_dim * sizeof(float));
    for (int i = 0; i < kv_dim; i++)
        kmax = fabs(kr[i]) > kmax ? fabs(kr[i]) : kmax;
    for (int i = 0; i < kv_dim; i++) {
        double amax = 0.0;
        for (int b = i / 32 * 32; b < i / 32 * 32 + 32 && b < kv_dim; b++)
            amax = fabs(kr[b]) > amax ? fabs(kr[b]) : amax;
        const double got = kc[(size_t)pos * kv_dim + i];
        *cache_ok &= fabs(got - kr[i]) <= kv_tolerance(ac->kv_type, kr[i], amax, kmax);
    }
done:
    cudaFree(dkc);
    cudaFree(dvc);
    cudaFree(dqkv);
    cudaFree(dqn);
    cudaFree(dkn);
    cudaFree(dcs);
    cudaFree(dout);
    cudaFree(dstate);
    cudaFree(dbias);
    cudaFree(dpart);
    free(kc);
    free(vc);
    free(kcb);
    free(vcb);
    free(qkv);
    free(bias);
    free(qkv_b);
    free(qn);
    free(kn);
    free(cs);
    free(out);
    free(v_want);
    free(ref);
    free(kr);
    free(sc);
    free(qr);
    return worst;
}

/* One head's attention in doubles: query q (hd) over rows j0 .. n_keys - 1 of the caches
 * kc and vc (rows of kv_dim floats, the head's at off) into out (hd); sc (n_keys) scratch. */
static void attention_ref(const float *q, const float *kc, const float *vc, int kv_dim, int off, int j0, int n_keys,
                          int hd, double *sc, double *out) {
    double m = -INFINITY, l = 0.0;
    for (int j = j0; j < n_keys; j++) {
        double d = 0.0;
        for (int i = 0; i < hd; i++)
            d += (double)q[i] * kc[(size_t)j * kv_dim + off + i];
        sc[j] = d / sqrt((double)hd);
        m = sc[j] > m ? sc[j] : m;
    }
    for (int j = j0; j < n_keys; j++)
        l += exp(sc[j] - m);
    for (int i = 0; i < hd; i++) {
        double a = 0.0;
        for (int j = j0; j < n_keys; j++)
            a += exp(sc[j] - m) * vc[(size_t)j * kv_dim + off + i];
        out[i] = a / l;
    }
}

/* Prefill attention over a cache of pos0 + T rows (q as qk_rope_store leaves it) against
 * doubles on the host: worst error over the largest output. window > 0: token t sees
 * rows max(0, pos0 + t - window + 1) .. pos0 + t, and the rows below the first token's
 * window are NaN. The cache in kv_type: the host attends over the values it holds. */
static double prefill_attention_case(int n_head, int n_head_kv, int hd, int T, int pos0, int window, int kv_type) {
    const int kv_dim = n_head_kv * hd, q_dim = n_head * hd, row_len = q_dim + 2 * kv_dim, n_ctx = pos0 + T;
    const int group = n_head / n_head_kv;
    const int j0_min = window > 0 && pos0 >= window ? pos0 - window + 1 : 0; /* no token sees a row below */
    const size_t cache_n = (size_t)n_ctx * kv_dim, cache_bytes = cuda_kv_layer_bytes(kv_type, n_ctx, kv_dim);
    float *kc = malloc(cache_n * sizeof(float)), *vc = malloc(cache_n * sizeof(float));
    uint8_t *kcb = calloc(cache_bytes, 1), *vcb = calloc(cache_bytes, 1);
    float *qkv = malloc((size_t)T * row_len * sizeof(float));
    uint16_t *out = malloc((size_t)T * q_dim * sizeof(uint16_t));
    double *ref = malloc((size_t)T * q_dim * sizeof(double)), *sc = malloc((size_t)n_ctx * sizeof(double));
    float *dqkv = NULL;
    uint8_t *dkc = NULL, *dvc = NULL;
    uint16_t *dout = NULL;
    double worst = INFINITY;
    if (!kc || !vc || !kcb || !vcb || !qkv || !out || !ref || !sc)
        goto done;
    for (size_t i = 0; i < cache_n; i++) {
        kc[i] = 2.0f * rndf();
        vc[i] = rndf();
    }
    kv_encode(kv_type, kc, n_ctx, n_ctx, kv_dim, kcb);
    kv_encode(kv_type, vc, n_ctx, n_ctx, kv_dim, vcb);
    kv_poison(kv_type, kcb, j0_min, n_ctx, kv_dim);
    kv_poison(kv_type, vcb, j0_min, n_ctx, kv_dim);
    for (size_t i = 0; i < (size_t)j0_min * kv_dim; i++)
        kc[i] = vc[i] = NAN;
    for (int i = 0; i < T * row_len; i++)
        qkv[i] = 2.0f * rndf();
    double omax = 0.0;
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < n_head; h++) {
            const float *q = qkv + (size_t)t * row_len + h * hd;
            const int kvh = h / group, n_keys = pos0 + t + 1;
            const int j0 = window > 0 && n_keys > window ? n_keys - window : 0;
            double *r = ref + (size_t)t * q_dim + h * hd;
            attention_ref(q, kc, vc, kv_dim, kvh * hd, j0, n_keys, hd, sc, r);
            for (int i = 0; i < hd; i++)
                omax = fabs(r[i]) > omax ? fabs(r[i]) : omax;
        }
    }
    if (!(dkc = to_device(kcb, cache_bytes)) || !(dvc = to_device(vcb, cache_bytes)) ||
        !(dqkv = to_device(qkv, (size_t)T * row_len * sizeof(float))) ||
        cudaMalloc((void **)&dout, (size_t)T * q_dim * sizeof(uint16_t)) != cudaSuccess)
        goto done;
    cuda_attn_params p = plain_attn(n_head, n_head_kv, hd, 1, n_ctx, window);
    p.kv_type = kv_type;
    if (cuda_attention_prefill(&p, dqkv, T, pos0, dkc, dvc, dout, 0) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess)
        goto done;
    cudaMemcpy(out, dout, (size_t)T * q_dim * sizeof(uint16_t), cudaMemcpyDeviceToHost);
    worst = 0.0;
    for (int i = 0; i < T * q_dim; i++) {
        const double e = fabs((double)er_f16_to_f32(out[i]) - ref[i]) / (omax > 0 ? omax : 1.0);
        worst = e > worst || isnan(e) ? e : worst;
    }
done:
    cudaFree(dkc);
    cudaFree(dvc);
    cudaFree(dqkv);
    cudaFree(dout);
    free(kc);
    free(vc);
    free(kcb);
    free(vcb);
    free(qkv);
    free(out);
    free(ref);
    free(sc);
    return worst;
}

/* The attention of a batch of several sequences (cuda_attention_batch, F16 cache) against
 * doubles on the host: n_seq sequences of n_ctx rows each (random, as the cache holds
 * them), T tokens, token t of sequence seq[t] at pos[t] (q as qk_rope_store leaves it),
 * window as the prefill's. Worst error over the largest output of the kernel with its
 * scratch (shares of a query's keys, merged by its last share) or, without (with_scratch
 * 0), of the block-per-query kernel. *alone_ok: each of the first few tokens alone gives
 * its row of the batch bit for bit, and the batch run again gives the same bits (its
 * tickets were left at 0). */
static double batch_attention_case(int n_head, int n_head_kv, int hd, int n_seq, int n_ctx, int T, const int32_t *seq,
                                   const int32_t *pos, int window, int with_scratch, int *alone_ok) {
    const int kv_dim = n_head_kv * hd, q_dim = n_head * hd, row_len = q_dim + 2 * kv_dim, group = n_head / n_head_kv;
    const size_t seq_bytes = cuda_kv_layer_bytes(CUDA_KV_F16, n_ctx, kv_dim), seq_n = (size_t)n_ctx * kv_dim;
    float *kc = malloc((size_t)n_seq * seq_n * sizeof(float)), *vc = malloc((size_t)n_seq * seq_n * sizeof(float));
    uint8_t *kcb = calloc((size_t)n_seq * seq_bytes, 1), *vcb = calloc((size_t)n_seq * seq_bytes, 1);
    float *qkv = malloc((size_t)T * row_len * sizeof(float));
    uint16_t *out = malloc((size_t)T * q_dim * sizeof(uint16_t)), *again = malloc((size_t)T * q_dim * sizeof(uint16_t));
    uint16_t *one = malloc((size_t)q_dim * sizeof(uint16_t));
    double *sc = malloc((size_t)n_ctx * sizeof(double)), *ref = malloc((size_t)hd * sizeof(double));
    float *dqkv = NULL;
    uint8_t *dkc = NULL, *dvc = NULL;
    uint16_t *dout = NULL;
    int32_t *dpos = NULL, *dseq = NULL;
    cuda_attn_scratch scratch = {NULL, NULL};
    double worst = INFINITY;
    *alone_ok = 0;
    if (!kc || !vc || !kcb || !vcb || !qkv || !out || !again || !one || !sc || !ref)
        goto done;
    for (size_t i = 0; i < (size_t)n_seq * seq_n; i++) {
        kc[i] = 2.0f * rndf();
        vc[i] = rndf();
    }
    for (int s = 0; s < n_seq; s++) {
        kv_encode(CUDA_KV_F16, kc + s * seq_n, n_ctx, n_ctx, kv_dim, kcb + s * seq_bytes);
        kv_encode(CUDA_KV_F16, vc + s * seq_n, n_ctx, n_ctx, kv_dim, vcb + s * seq_bytes);
    }
    for (int i = 0; i < T * row_len; i++)
        qkv[i] = 2.0f * rndf();
    cuda_attn_params p = plain_attn(n_head, n_head_kv, hd, 1, n_ctx, window);
    p.kv_type = CUDA_KV_F16;
    const size_t part_floats = cuda_attention_batch_part_floats(&p);
    if (!(dkc = to_device(kcb, (size_t)n_seq * seq_bytes)) || !(dvc = to_device(vcb, (size_t)n_seq * seq_bytes)) ||
        !(dqkv = to_device(qkv, (size_t)T * row_len * sizeof(float))) ||
        !(dpos = to_device(pos, (size_t)T * sizeof(int32_t))) || !(dseq = to_device(seq, (size_t)T * sizeof(int32_t))) ||
        cudaMalloc((void **)&dout, (size_t)T * q_dim * sizeof(uint16_t)) != cudaSuccess)
        goto done;
    if (with_scratch) {
        const size_t tickets = (size_t)CUDA_ATT_BATCH_TOKENS * n_head_kv * sizeof(unsigned);
        if (part_floats == 0 || cudaMalloc((void **)&scratch.part, part_floats * sizeof(float)) != cudaSuccess ||
            cudaMalloc((void **)&scratch.ticket, tickets) != cudaSuccess ||
            cudaMemset(scratch.ticket, 0, tickets) != cudaSuccess)
            goto done;
    }
    const cuda_batch_rows br = {dpos, dseq, seq_bytes};
    if (cuda_attention_batch(&p, dqkv, T, &br, dkc, dvc, dout, with_scratch ? &scratch : NULL, 0) != cudaSuccess ||
        cudaMemcpy(out, dout, (size_t)T * q_dim * sizeof(uint16_t), cudaMemcpyDeviceToHost) != cudaSuccess ||
        cuda_attention_batch(&p, dqkv, T, &br, dkc, dvc, dout, with_scratch ? &scratch : NULL, 0) != cudaSuccess ||
        cudaMemcpy(again, dout, (size_t)T * q_dim * sizeof(uint16_t), cudaMemcpyDeviceToHost) != cudaSuccess)
        goto done;
    *alone_ok = memcmp(out, again, (size_t)T * q_dim * sizeof(uint16_t)) == 0;
    for (int t = 0; t < T && t < 4; t++) { /* token t alone: its q as row 0 */
        const cuda_batch_rows br1 = {dpos + t, dseq + t, seq_bytes};
        if (cuda_attention_batch(&p, dqkv + (size_t)t * row_len, 1, &br1, dkc, dvc, dout,
                                 with_scratch ? &scratch : NULL, 0) != cudaSuccess ||
            cudaMemcpy(one, dout, (size_t)q_dim * sizeof(uint16_t), cudaMemcpyDeviceToHost) != cudaSuccess)
            goto done;
        *alone_ok &= memcmp(one, out + (size_t)t * q_dim, (size_t)q_dim * sizeof(uint16_t)) == 0;
    }
    double omax = 0.0, emax = 0.0;
    for (int t = 0; t < T; t++) {
        const float *kr = kc + seq[t] * seq_n, *vr = vc + seq[t] * seq_n;
        const int n_keys = pos[t] + 1, j0 = window > 0 && n_keys > window ? n_keys - window : 0;
        for (int h = 0; h < n_head; h++) {
            const float *q = qkv + (size_t)t * row_len + h * hd;
            attention_ref(q, kr, vr, kv_dim, (h / group) * hd, j0, n_keys, hd, sc, ref);
            for (int i = 0; i < hd; i++)
                track_error(er_f16_to_f32(out[(size_t)t * q_dim + h * hd + i]), ref[i], &emax, &omax);
        }
    }
    worst = emax / (omax > 0 ? omax : 1.0);
done:
    cudaFree(dkc);
    cudaFree(dvc);
    cudaFree(dqkv);
    cudaFree(dout);
    cudaFree(dpos);
    cudaFree(dseq);
    cudaFree(scratch.part);
    cudaFree(scratch.ticket);
    free(kc);
    free(vc);
    free(kcb);
    free(vcb);
    free(qkv);
    free(out);
    free(again);
    free(one);
    free(sc);
    free(ref);
    return worst;
}

/* The prefill's preparation of Q, K and V (cuda_qk_rope_store) for T tokens after pos0
 * against doubles: Q/K/V biases (with_bias), Q/K norms (with_norm), RoPE; q in place in
 * qkv, K and V into rows pos0 .. pos0 + T - 1 of the caches, in kv_type. Worst error of
 * q over its largest value; K must be within kv_tolerance of its exact value and V the
 * CPU's conversion of its f32 sum with its bias, bit for bit (else the error is inf). */
static double qk_rope_store_case(int n_head, int n_head_kv, int hd, int T, int pos0, int with_norm, int with_bias,
                                 int kv_type) {
    const int kv_dim = n_head_kv * hd, q_dim = n_head * hd, row_len = q_dim + 2 * kv_dim, n_ctx = pos0 + T;
    const int half = hd / 2;
    const size_t cache_n = (size_t)n_ctx * kv_dim, cache_bytes = cuda_kv_layer_bytes(kv_type, n_ctx, kv_dim);
    float *qkv = random_floats((size_t)T * row_len, 2.0f, 0.0f), *bias = random_floats(row_len, 1.0f, 0.0f);
    float *nw = random_floats(2 * (size_t)hd, 0.5f, 1.0f), *cs = random_floats((size_t)n_ctx * half * 2, 1.0f, 0.0f);
    float *got = malloc((size_t)T * row_len * sizeof(float)), *kc = malloc(cache_n * sizeof(float));
    float *vc = malloc(cache_n * sizeof(float)), *b = malloc((size_t)kv_dim * sizeof(float));
    uint8_t *kcb = malloc(cache_bytes), *vcb = malloc(cache_bytes), *dkc = NULL, *dvc = NULL;
    double *ref = malloc((size_t)hd * sizeof(double));
    float *dqkv = NULL, *dbias = NULL, *dnw = NULL, *dcs = NULL;
    double worst = INFINITY, err = 0.0, vmax = 0.0;
    int kv_ok = 1;
    if (!qkv || !bias || !nw || !cs || !got || !kc || !vc || !b || !ref || !kcb || !vcb)
        goto done;
    for (int i = 0; i < n_ctx * half; i++) { /* unit rotations */
        const double a = 3.14159265 * cs[2 * i];
        cs[2 * i] = (float)cos(a);
        cs[2 * i + 1] = (float)sin(a);
    }
    for (int i = 0; !with_bias && i < row_len; i++)
        bias[i] = 0.0f;
    if (!(dqkv = to_device(qkv, (size_t)T * row_len * sizeof(float))) || !(dbias = to_device(bias, row_len * sizeof(float))) ||
        !(dnw = to_device(nw, 2 * (size_t)hd * sizeof(float))) ||
        !(dcs = to_device(cs, (size_t)n_ctx * half * 2 * sizeof(float))) ||
        cudaMalloc((void **)&dkc, cache_bytes) != cudaSuccess || cudaMalloc((void **)&dvc, cache_bytes) != cudaSuccess)
        goto done;
    cuda_attn_params p = plain_attn(n_head, n_head_kv, hd, 1, n_ctx, 0);
    p.q_norm = with_norm ? dnw : NULL;
    p.k_norm = with_norm ? dnw + hd : NULL;
    p.rope_cs = (const float2 *)dcs;
    p.qkv_bias = with_bias ? dbias : NULL;
    p.kv_type = kv_type;
    if (cuda_qk_rope_store(&p, dqkv, T, pos0, dkc, dvc, 0) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
        goto done;
    cudaMemcpy(got, dqkv, (size_t)T * row_len * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(kcb, dkc, cache_bytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(vcb, dvc, cache_bytes, cudaMemcpyDeviceToHost);
    /* every row first: kcb is the scratch of the V check below */
    for (int t = 0; t < T; t++) {
        kv_decode(kv_type, kcb, pos0 + t, n_ctx, kv_dim, kc + (size_t)(pos0 + t) * kv_dim);
        kv_decode(kv_type, vcb, pos0 + t, n_ctx, kv_dim, vc + (size_t)(pos0 + t) * kv_dim);
    }
    for (int t = 0; t < T; t++) {
        const float *row = qkv + (size_t)t * row_len;
        const size_t cache_row = (size_t)(pos0 + t) * kv_dim;
        for (int h = 0; h < n_head + n_head_kv; h++) {
            const int at = h < n_head ? h * hd : q_dim + (h - n_head) * hd;
            for (int i = 0; i < hd; i++)
                b[i] = row[at + i] + bias[at + i];
            norm_rope_ref(b, with_norm ? nw + (h < n_head ? 0 : hd) : NULL, hd, 1, cs + (size_t)(pos0 + t) * half * 2,
                          1e-6, ref);
            if (h < n_head) {
                for (int i = 0; i < hd; i++)
                    track_error(got[(size_t)t * row_len + at + i], ref[i], &err, &vmax);
                continue;
            }
            double kmax = 0.0;
            for (int i = 0; i < hd; i++)
                kmax = fabs(ref[i]) > kmax ? fabs(ref[i]) : kmax;
            for (int i = 0; i < hd; i++) {
                double amax = 0.0; /* of the 32-element block (hd % 32 == 0 for Q8_0) */
                for (int j = i / 32 * 32; j < i / 32 * 32 + 32 && j < hd; j++)
                    amax = fabs(ref[j]) > amax ? fabs(ref[j]) : amax;
                const double k = kc[cache_row + (h - n_head) * hd + i];
                if (kv_ok && fabs(k - ref[i]) > kv_tolerance(kv_type, ref[i], amax, kmax))
                    printf("  (token %d, K head %d, element %d: cached %.9g, exact %.9g, block max %.6g)\n", t,
                           h - n_head, i, k, ref[i], amax);
                kv_ok &= fabs(k - ref[i]) <= kv_tolerance(kv_type, ref[i], amax, kmax);
            }
        }
        for (int i = 0; i < kv_dim; i++)
            b[i] = row[q_dim + kv_dim + i] + bias[q_dim + kv_dim + i];
        kv_encode(kv_type, b, 1, 1, kv_dim, kcb); /* kcb: scratch now */
        for (int i = 0; kv_ok && i < kv_dim; i++)
            if (memcmp(&b[i], &vc[cache_row + i], sizeof(float)) != 0) {
                printf("  (token %d, V element %d: cached %.9g, the CPU's conversion %.9g)\n", t, i, vc[cache_row + i],
                       b[i]);
                kv_ok = 0;
            }
    }
    worst = kv_ok ? err / (vmax > 0 ? vmax : 1.0) : INFINITY;
done:
    cudaFree(dqkv);
    cudaFree(dbias);
    cudaFree(dnw);
    cudaFree(dcs);
    cudaFree(dkc);
    cudaFree(dvc);
    free(qkv);
    free(bias);
    free(nw);
    free(cs);
    free(got);
    free(kc);
    free(vc);
    free(kcb);
    free(vcb);
    free(b);
    free(ref);
    return worst;
}

/* The prefill's gated activation (cuda_glu: SwiGLU, or GeGLU with gelu) of n_rows rows
 * against doubles: worst error over the largest output (the output is F16: 2^-11
 * relative at most). */
static double glu_case(int n_rows, int n_ff, int gelu) {
    const size_t n = (size_t)n_rows * n_ff;
    float *gu = random_floats(2 * n, 4.0f, 0.0f);
    uint16_t *y = malloc(n * sizeof(uint16_t)), *dy = NULL;
    float *dgu = NULL;
    double worst = INFINITY, err = 0.0, ymax = 0.0;
    if (!gu || !y || !(dgu = to_device(gu, 2 * n * sizeof(float))) || cudaMalloc((void **)&dy, n * 2) != cudaSuccess ||
        cuda_glu(dgu, n_rows, n_ff, gelu, dy, 0) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
        goto done;
    cudaMemcpy(y, dy, n * sizeof(uint16_t), cudaMemcpyDeviceToHost);
    for (int r = 0; r < n_rows; r++) {
        for (int i = 0; i < n_ff; i++) {
            const double g = gu[(size_t)r * 2 * n_ff + i], u = gu[(size_t)r * 2 * n_ff + n_ff + i];
            const double ref = (gelu ? gelu_tanh(g) : g / (1.0 + exp(-g))) * u;
            track_error(er_f16_to_f32(y[(size_t)r * n_ff + i]), ref, &err, &ymax);
        }
    }
    worst = err / (ymax > 0 ? ymax : 1.0);
done:
    cudaFree(dgu);
    cudaFree(dy);
    free(gu);
    free(y);
    return worst;
}

/* The post-norms' residual add (cuda_add_rmsnorm), x += rmsnorm(y) * w over n_rows rows
 * of n, against doubles: worst error over the largest result. */
static double add_rmsnorm_case(int n_rows, int n) {
    const size_t total = (size_t)n_rows * n;
    float *x = random_floats(total, 2.0f, 0.0f), *y = random_floats(total, 3.0f, 0.0f), *w = random_floats(n, 0.5f, 1.0f);
    float *got = malloc(total * sizeof(float)), *dx = NULL, *dy = NULL, *dw = NULL;
    double worst = INFINITY, err = 0.0, xmax = 0.0;
    const float eps = 1e-6f;
    if (!x || !y || !w || !got || !(dx = to_device(x, total * sizeof(float))) || !(dy = to_device(y, total * sizeof(float))) ||
        !(dw = to_device(w, (size_t)n * sizeof(float))) || cuda_add_rmsnorm(dy, dw, n_rows, n, eps, dx, 0) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess)
        goto done;
    cudaMemcpy(got, dx, total * sizeof(float), cudaMemcpyDeviceToHost);
    for (int r = 0; r < n_rows; r++) {
        double ss = 0.0;
        for (int i = 0; i < n; i++)
            ss += (double)y[(size_t)r * n + i] * y[(size_t)r * n + i];
        const double scale = 1.0 / sqrt(ss / n + eps);
        for (int i = 0; i < n; i++) {
            const size_t at = (size_t)r * n + i;
            track_error(got[at], x[at] + y[at] * scale * w[i], &err, &xmax);
        }
    }
    worst = err / (xmax > 0 ? xmax : 1.0);
done:
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dw);
    free(x);
    free(y);
    free(w);
    free(got);
    return worst;
}

/* The embedding lookups times scale (Gemma-3's embd_scale), of the prefill
 * (cuda_embed_tokens) and of the step (cuda_embed_state, which also clears the argmax
 * key), from a random (n_vocab, n_in) matrix of type `type`: worst error over the largest value. */
static double embed_case(int type, int n_vocab, int n_in, float scale) {
    enum { N_TOK = 4 };
    const int32_t tokens[N_TOK] = {3, 0, n_vocab - 1, n_vocab / 2};
    host_matrix m;
    cuda_weight dw = {0};
    float *x = malloc((size_t)(N_TOK + 1) * n_in * sizeof(float)), *dx = NULL;
    int32_t *dtok = NULL;
    cuda_step_state *dstate = NULL;
    const cuda_step_state s0 = {~0ull, tokens[1], 5, 0};
    cuda_step_state s;
    double worst = INFINITY, err = 0.0, vmax = 0.0;
    if (make_matrix(type, n_vocab, n_in, &m) != 0 || !x)
        goto done;
    if (upload_weight(&m, &dw) != 0 || !(dtok = to_device(tokens, sizeof tokens)) ||
        !(dstate = to_device(&s0, sizeof s0)) ||
        cudaMalloc((void **)&dx, (size_t)(N_TOK + 1) * n_in * sizeof(float)) != cudaSuccess ||
        cuda_embed_tokens(&dw, scale, dtok, N_TOK, dx, 0) != cudaSuccess ||
        cuda_embed_state(&dw, scale, dstate, dx + (size_t)N_TOK * n_in, 0) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess)
        goto done;
    cudaMemcpy(x, dx, (size_t)(N_TOK + 1) * n_in * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(&s, dstate, sizeof s, cudaMemcpyDeviceToHost);
    for (int t = 0; t <= N_TOK; t++) {
        const int32_t tok = t < N_TOK ? tokens[t] : s0.token;
        for (int i = 0; i < n_in; i++) {
            track_error(x[(size_t)t * n_in + i], m.value[(size_t)tok * n_in + i] * scale, &err, &vmax);
        }
    }
    worst = s.argmax_key == 0 ? err / (vmax > 0 ? vmax : 1.0) : INFINITY;
done:
    cudaFree(dw.w);
    cudaFree(dw.d);
    cudaFree(dx);
    cudaFree(dtok);
    cudaFree(dstate);
    free_matrix(&m);
    free(x);
    return worst;
}

/* y = x w^T (+ y0) through cuda_gemm, or with `batch` through cuda_gemm_batch (split over
 * K, its shares in passes of 7 tokens). */
static cudaError_t gemm_run(const cuda_weight *dw, const uint16_t *dx, int T, float *dy, int ldy, int accumulate,
                            int batch, const cuda_gemm_scratch *s) {
    return batch ? cuda_gemm_batch(dw, dx, T, dy, ldy, accumulate, s, 0) : cuda_gemm(dw, dx, T, dy, ldy, accumulate, 0);
}

/* The host side of a GEMM case, shared by its variants: x (T, K) F16, and in doubles
 * (x w^T) and sum_k |x w| (T, N), W's values rounded to F16 as the kernel rounds them. */
typedef struct gemm_ref {
    int T;
    uint16_t *x;
    double *dot, *mag;
} gemm_ref;

/* With int8_x, the reference of the int8 tensor cores (mmq.cu) instead: x quantized per
 * block of 32 as the kernel quantizes it (d = max |x| / 127 in float, q = x * (127 / max)
 * rounded to even), w's values exact. */
static int gemm_ref_make(const host_matrix *m, int T, int int8_x, gemm_ref *r) {
    const int K = m->n_in, N = m->n_out;
    double *w16 = malloc((size_t)N * K * sizeof(double));
    double *xv = malloc((size_t)T * K * sizeof(double)); /* (T, K) the x the products see */
    r->T = T;
    r->x = malloc((size_t)T * K * sizeof(uint16_t));
    r->dot = malloc((size_t)T * N * sizeof(double));
    r->mag = malloc((size_t)T * N * sizeof(double));
    if (!w16 || !xv || !r->x || !r->dot || !r->mag) {
        free(w16);
        free(xv);
        return -1;
    }
    for (size_t i = 0; i < (size_t)T * K; i++) {
        r->x[i] = quant_f16_sat(2.0f * rndf());
        xv[i] = er_f16_to_f32(r->x[i]);
    }
    if (int8_x)
        quantize_ref(xv, (size_t)T * K, NULL);
    for (size_t i = 0; i < (size_t)N * K; i++)
        w16[i] = int8_x ? m->value[i] : er_f16_to_f32(er_f32_to_f16((float)m->value[i]));
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double dot = 0.0, mag = 1e-30;
            for (int k = 0; k < K; k++) {
                const double p = xv[(size_t)t * K + k] * w16[(size_t)n * K + k];
                dot += p;
                mag += fabs(p);
            }
            r->dot[(size_t)t * N + n] = dot;
            r->mag[(size_t)t * N + n] = mag;
        }
    free(w16);
    free(xv);
    return 0;
}

static void gemm_ref_free(gemm_ref *r) {
    free(r->x);
    free(r->dot);
    free(r->mag);
}

/* One variant of a case against its reference: worst |error| over sum_k |x w|, or -1
 * where a token alone differs from its row of the batch. ldy =
 * n_out + 1 when `odd_ldy` (the element-by-element stores). A batch GEMM's scratch holds
 * the quantized inputs of the int8 GEMM's batch when `with_xq` (else it quantizes inside). */
static double gemm_case(const host_matrix *m, const gemm_ref *r, int accumulate, int odd_ldy, int batch, int with_xq) {
    const int K = m->n_in, N = m->n_out, T = r->T, ldy = N + (odd_ldy ? 1 : 0);
    const size_t ny = (size_t)T * ldy;
    float *y0 = malloc(ny * sizeof(float)), *y = malloc(ny * sizeof(float));
    cuda_weight dw = {m->type, K, N, NULL, NULL, NULL};
    uint16_t *dx = NULL;
    float *dy = NULL;
    cuda_gemm_scratch s = {NULL, (size_t)cuda_gemm_split_count(&dw) * (size_t)N * 7, NULL,
                           with_xq ? cuda_gemm_xq_bytes(T, K) : 0};
    double worst = INFINITY;
    if (!y0 || !y)
        goto done;
    for (size_t i = 0; i < ny; i++)
        y0[i] = rndf();
    if (upload_weight(m, &dw) != 0 || cudaMalloc((void **)&dx, (size_t)T * K * sizeof(uint16_t)) != cudaSuccess ||
        cudaMalloc((void **)&dy, ny * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&s.part, s.part_floats * sizeof(float)) != cudaSuccess ||
        (with_xq && cudaMalloc(&s.xq, s.xq_bytes) != cudaSuccess))
        goto done;
    cudaMemcpy(dx, r->x, (size_t)T * K * sizeof(uint16_t), cudaMemcpyHostToDevice);
    cudaMemcpy(dy, y0, ny * sizeof(float), cudaMemcpyHostToDevice);
    if (gemm_run(&dw, dx, T, dy, ldy, accumulate, batch, &s) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess)
        goto done;
    cudaMemcpy(y, dy, ny * sizeof(float), cudaMemcpyDeviceToHost);
    worst = 0.0;
    for (int t = 0; t < T; t++) {
        for (int n = 0; n < ldy; n++) {
            const size_t at = (size_t)t * ldy + n;
            if (n >= N) { /* the odd stride's spare column: untouched */
                worst = y[at] == y0[at] ? worst : INFINITY;
                continue;
            }
            const double ref = (accumulate ? y0[at] : 0.0) + r->dot[(size_t)t * N + n];
            const double e = fabs((double)y[at] - ref) / r->mag[(size_t)t * N + n];
            worst = e > worst || isnan(e) ? e : worst;
        }
    }
    /* batch invariance: a token alone gives its row of the batch bit for bit (the first,
     * a middle and the last token; the batch may take larger tiles than one token) */
    for (int k = 0; !accumulate && k < 3 && T > 1; k++) {
        const int t = k == 0 ? 0 : k == 1 ? T / 2 : T - 1;
        if (gemm_run(&dw, dx + (size_t)t * K, 1, dy, ldy, 0, batch, &s) != cudaSuccess ||
            cudaMemcpy(y0, dy, (size_t)N * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess ||
            memcmp(y0, y + (size_t)t * ldy, (size_t)N * sizeof(float)) != 0)
            worst = -1.0;
    }
done:
    cudaFree(dw.w);
    cudaFree(dw.d);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(s.part);
    cudaFree(s.xq);
    free(y0);
    free(y);
    return worst;
}

/* The upload's repack against the CPU reference: random rows quantized by our CPU
 * quantizer into the file's blocks, repacked on the device (cuda_repack), then a matvec
 * (worst error over max |y|, against doubles of the CPU's dequantized values) and the
 * embedding of every row (worst error over the largest value, against to_f32). */
/* A batch GEMM's fused epilogue (cuda_gemm_batch_epi, kind GLU or NORM) on T tokens of a
 * random input against the unfused path (cuda_gemm_batch's sums, then cuda_glu, or the
 * residual added by cuda_gemm_batch): the GLU's h and the NORM's x bit for bit, the
 * NORM's h within 1e-3 of doubles over its largest |value| (the f16 rounding). As the
 * layers use it, the epilogue writes h over its own input; part holds 3 tokens, so the
 * batch goes in passes (backward where h's rows are the wider). Returns the NORM's error
 * (0 for GLU), or inf where a bit differs. */
static double epilogue_case(const host_matrix *m, int T, int kind) {
    const int K = m->n_in, N = m->n_out, n_h = kind == CUDA_EPI_GLU ? N / 2 : N;
    const size_t buf_halves = (size_t)T * (size_t)(K > n_h ? K : n_h);
    cuda_weight dw = {m->type, K, N, NULL, NULL, NULL};
    uint16_t *x = malloc((size_t)T * K * sizeof(uint16_t)), *h = malloc((size_t)T * n_h * sizeof(uint16_t));
    uint16_t *h_ref = malloc((size_t)T * n_h * sizeof(uint16_t));
    float *x0 = malloc((size_t)T * N * sizeof(float)), *xf = malloc((size_t)T * N * sizeof(float));
    float *xf_ref = malloc((size_t)T * N * sizeof(float)), *nw = malloc((size_t)N * sizeof(float));
    uint16_t *dbuf = NULL, *dx = NULL, *dh = NULL;
    float *dres = NULL, *dres_ref = NULL, *dy = NULL, *dnw = NULL;
    cuda_gemm_scratch s = {NULL, (size_t)cuda_gemm_split_count(&dw) * (size_t)N * 3, NULL, cuda_gemm_xq_bytes(T, K)};
    double worst = INFINITY;
    if (!x || !h || !h_ref || !x0 || !xf || !xf_ref || !nw)
        goto done;
    for (int i = 0; i < T * K; i++)
        x[i] = er_f32_to_f16(rndf());
    for (int i = 0; i < T * N; i++)
        x0[i] = 4.0f * rndf();
    for (int i = 0; i < N; i++)
        nw[i] = 1.0f + 0.5f * rndf();
    if (upload_weight(m, &dw) != 0 || !(dbuf = to_device(x, buf_halves * sizeof(uint16_t))) ||
        !(dx = to_device(x, (size_t)T * K * sizeof(uint16_t))) ||
        cudaMalloc((void **)&dh, (size_t)T * n_h * sizeof(uint16_t)) != cudaSuccess ||
        !(dres = to_device(x0, (size_t)T * N * sizeof(float))) ||
        !(dres_ref = to_device(x0, (size_t)T * N * sizeof(float))) ||
        cudaMalloc((void **)&dy, (size_t)T * N * sizeof(float)) != cudaSuccess ||
        !(dnw = to_device(nw, (size_t)N * sizeof(float))) ||
        cudaMalloc((void **)&s.part, s.part_floats * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&s.xq, s.xq_bytes) != cudaSuccess)
        goto done;
    const cuda_gemm_epi ep = {kind, dres, N, 1, dnw, 1e-6f, 0, dbuf};
    cudaError_t e = cuda_gemm_batch_epi(&dw, dbuf, T, &ep, &s, 0);
    if (kind == CUDA_EPI_GLU) {
        if (e == cudaSuccess)
            e = cuda_gemm_batch(&dw, dx, T, dy, N, 0, &s, 0);
        if (e == cudaSuccess)
            e = cuda_glu(dy, T, N / 2, 0, dh, 0);
    } else if (e == cudaSuccess) {
        e = cuda_gemm_batch(&dw, dx, T, dres_ref, N, 1, &s, 0);
    }
    if (e != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
        goto done;
    cudaMemcpy(h, dbuf, (size_t)T * n_h * sizeof(uint16_t), cudaMemcpyDeviceToHost);
    if (kind == CUDA_EPI_GLU) {
        cudaMemcpy(h_ref, dh, (size_t)T * n_h * sizeof(uint16_t), cudaMemcpyDeviceToHost);
        worst = memcmp(h, h_ref, (size_t)T * n_h * sizeof(uint16_t)) == 0 ? 0.0 : INFINITY;
        goto done;
    }
    cudaMemcpy(xf, dres, (size_t)T * N * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(xf_ref, dres_ref, (size_t)T * N * sizeof(float), cudaMemcpyDeviceToHost);
    if (memcmp(xf, xf_ref, (size_t)T * N * sizeof(float)) != 0)
        goto done;
    double err = 0.0, vmax = 0.0;
    for (int t = 0; t < T; t++) {
        double ss = 0.0;
        for (int i = 0; i < N; i++)
            ss += (double)xf[(size_t)t * N + i] * xf[(size_t)t * N + i];
        const double scale = 1.0 / sqrt(ss / N + 1e-6);
        for (int i = 0; i < N; i++)
            track_error(er_f16_to_f32(h[(size_t)t * N + i]), xf[(size_t)t * N + i] * scale * nw[i], &err, &vmax);
    }
    worst = err / (vmax > 0 ? vmax : 1.0);
done:
    cudaFree(dw.w);
    cudaFree(dw.d);
    cudaFree(dbuf);
    cudaFree(dx);
    cudaFree(dh);
    cudaFree(dres);
    cudaFree(dres_ref);
    cudaFree(dy);
    cudaFree(dnw);
    cudaFree(s.part);
    cudaFree(s.xq);
    free(x);
    free(h);
    free(h_ref);
    free(x0);
    free(xf);
    free(xf_ref);
    free(nw);
    return worst;
}

static double repack_case(int type, int n_out, int n_in, double *embd_err) {
    uint32_t er = 0;
    while (cuda_wtype_from_er(er) != type)
        er++;
    const er_type_traits *tr = er_type_get(er);
    const size_t row = er_type_row_size(tr, n_in), rb = cuda_row_bytes(type, n_in);
    const size_t sb = cuda_scale_row_bytes(type, n_in), n = (size_t)n_out * n_in;
    float *f = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float)), *x = malloc((size_t)n_in * sizeof(float));
    float *y = malloc((size_t)n_out * sizeof(float)), *e = malloc(n * sizeof(float));
    uint8_t *raw = malloc(row * n_out), *draw = NULL;
    int32_t ids[64], *dids = NULL;
    cuda_weight dw = {type, n_in, n_out, NULL, NULL, NULL};
    float *dx = NULL, *dy = NULL, *de = NULL;
    double worst = INFINITY;
    *embd_err = INFINITY;
    if (!f || !ref || !x || !y || !e || !raw || n_out > 64)
        goto done;
    for (size_t i = 0; i < n; i++) /* a few outliers: the scales' ranges */
        f[i] = rndf() * (rnd() % 10 == 0 ? 4.0f : 1.0f);
    for (int i = 0; i < n_in; i++)
        x[i] = rndf();
    for (int r = 0; r < n_out; r++) {
        tr->from_f32(f + (size_t)r * n_in, raw + r * row, n_in);
        tr->to_f32(raw + r * row, ref + (size_t)r * n_in, n_in);
        ids[r] = r;
    }
    if (cudaMalloc((void **)&draw, row * n_out) != cudaSuccess || cudaMalloc(&dw.w, rb * n_out + 16) != cudaSuccess ||
        cudaMalloc(&dw.d, sb * n_out + 16) != cudaSuccess || cudaMalloc((void **)&dx, (size_t)n_in * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dy, (size_t)n_out * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&de, n * sizeof(float)) != cudaSuccess || cudaMalloc((void **)&dids, sizeof ids) != cudaSuccess)
        goto done;
    cudaMemcpy(draw, raw, row * n_out, cudaMemcpyHostToDevice);
    cudaMemcpy(dx, x, (size_t)n_in * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dids, ids, sizeof ids, cudaMemcpyHostToDevice);
    if (cuda_repack(type, draw, n_out, n_in, dw.w, dw.d, 0) != cudaSuccess ||
        cuda_matvec(&dw, MV_STORE, dx, NULL, 0.0f, dy, NULL, 0) != cudaSuccess ||
        cuda_embed_tokens(&dw, 1.0f, dids, n_out, de, 0) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
        goto done;
    cudaMemcpy(y, dy, (size_t)n_out * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(e, de, n * sizeof(float), cudaMemcpyDeviceToHost);
    double ymax = 0.0, vmax = 0.0, ye = 0.0, ee = 0.0;
    for (int r = 0; r < n_out; r++) {
        double a = 0.0;
        for (int i = 0; i < n_in; i++)
            a += (double)ref[(size_t)r * n_in + i] * x[i];
        ymax = fabs(a) > ymax ? fabs(a) : ymax;
        ye = fabs(y[r] - a) > ye || isnan(y[r]) ? fabs(y[r] - a) : ye;
    }
    for (size_t i = 0; i < n; i++) {
        vmax = fabs(ref[i]) > vmax ? fabs(ref[i]) : vmax;
        ee = fabs(e[i] - ref[i]) > ee || isnan(e[i]) ? fabs(e[i] - ref[i]) : ee;
    }
    worst = ye / (ymax > 0 ? ymax : 1.0);
    *embd_err = ee / (vmax > 0 ? vmax : 1.0);
done:
    cudaFree(draw);
    cudaFree(dw.w);
    cudaFree(dw.d);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(de);
    cudaFree(dids);
    free(f);
    free(ref);
    free(x);
    free(y);
    free(e);
    free(raw);
    return worst;
}

/* The prefill's and the batches' GEMMs (a suite of its own: `unit_tests cuda_gemm`). */
void test_cuda_gemm(void) {
    if (!er_cuda_available()) {
        printf("cuda_gemm: no CUDA device here, nothing to test\n");
        return;
    }
    /* prefill and batch GEMM: (tokens, n_out, n_in) at Qwen3-0.6B's shapes, partial tiles
     * of tokens and rows, a single token, rows not 16-byte aligned (F16/BF16/F32: 172 and
     * 44 elements, the element-by-element stages); the residual add and odd row strides;
     * each tile height (128, 64, 32 tokens) against a token alone; batches of 2, 3 and 5
     * (the int8 GEMM's few-token kernel or not, by type); K in shares of 12 blocks (3 x
     * 4096 x 2560, 300 x 384 x 640: the few-token kernel's stages of 8 blocks cut short at
     * a share's start or end) */
    static const int gm[][3] = {{200, 1024, 3072}, {130, 4096, 1024}, {64, 64, 64}, {1, 2, 32},
                                {70, 100, 96},     {37, 50, 172},     {9, 20, 44}, {33, 70, 768}, {1, 3, 256},
                                {24, 160, 512},    {8, 1024, 3072},   {129, 128, 64}, {300, 384, 640},
                                {512, 256, 128},   {3, 96, 1024},     {5, 200, 2048}, {2, 160, 768}, {3, 4096, 2560}};
    cuda_gemm_set_mmq(0); /* F16 tiles for every type; the int8 tensor cores apart below */
    for (int t = 0; t < CUDA_W_COUNT; t++) {
        for (size_t s = 0; s < sizeof gm / sizeof gm[0]; s++) {
            if (gm[s][2] % cuda_wtype_block(t) != 0)
                continue;
            host_matrix m;
            gemm_ref ref = {0, NULL, NULL, NULL}, ref8 = {0, NULL, NULL, NULL};
            const int int8 = cuda_wtype_int8_mma(t);
            CHECK(make_matrix(t, gm[s][1], gm[s][2], &m) == 0 && gemm_ref_make(&m, gm[s][0], 0, &ref) == 0 &&
                      (!int8 || gemm_ref_make(&m, gm[s][0], 1, &ref8) == 0),
                  "out of memory");
            for (int variant = 0; variant < 8; variant++) {
                /* the F32 sums of the tensor cores vs doubles: ~1e-7 of sum |x w| typically;
                 * kind 0: the prefill as it chooses (at these sizes gemm.cu's tiles), 1: the
                 * batch GEMM, 2 and 3: the prefill on the warpgroup GEMM with 128 and 256
                 * tokens a block, wherever it fits */
                const int acc = variant & 1, kind = variant >> 1, batch = kind == 1;
                const cuda_weight probe = {t, gm[s][2], gm[s][1], NULL, NULL, NULL};
                if (kind >= 2 && !cuda_gemm_wg_fits(&probe, gm[s][0]))
                    continue;
                const int wg_tokens = kind >= 2 ? 32 << kind : 0; /* 128, 256 */
                cuda_gemm_set_wg(wg_tokens ? wg_tokens : -1);
                const double err = gemm_case(&m, &ref, acc, acc, batch, 0);
                cuda_gemm_set_wg(-1);
                CHECK(err >= 0.0 && err <= 1e-5, "%s %s (warpgroup GEMM's tokens a block: %d) %d tokens x %d x %d%s: "
                      "error %.3g of sum |x w| (-1: a token alone differs from its row of the batch)",
                      cuda_wtype_name(t), batch ? "batch GEMM (split over K)" : "GEMM", wg_tokens, gm[s][0], gm[s][1],
                      gm[s][2], acc ? " (accumulate, odd ldy)" : "", err);
                if (kind >= 2 && acc == 0 && gm[s][0] >= 100)
                    printf("  %s GEMM (warpgroup, %d tokens a block) %d x %d x %d: error %.2e of sum |x w|\n",
                           cuda_wtype_name(t), wg_tokens, gm[s][0], gm[s][1], gm[s][2], err);
                if (s == 0 && variant == 0)
                    printf("  %s GEMM %d x %d x %d: error %.2e of sum |x w|\n", cuda_wtype_name(t), gm[s][0], gm[s][1],
                           gm[s][2], err);
            }
            /* the int8 tensor cores (mmq.cu) for the batch GEMM, against the quantized x:
             * the batch quantized beforehand (accumulate 0) or inside (1); each token alone
             * quantized inside; the few-token kernel where it pays (few -1), and wherever it
             * can run (4: these shapes are smaller than where it pays for most types) */
            for (int v = 0; int8 && v < 4; v++) {
                const int acc = v & 1, few = v < 2 ? -1 : 4;
                cuda_gemm_set_mmq(1);
                cuda_mmq_set_few(few);
                const double err = gemm_case(&m, &ref8, acc, acc, 1, !acc);
                cuda_mmq_set_few(-1);
                cuda_gemm_set_mmq(0);
                CHECK(err >= 0.0 && err <= 1e-5,
                      "%s batch GEMM on int8 tensor cores (few-token kernel: %d) %d tokens x %d x %d%s: error %.3g "
                      "of sum |x w| (-1: a token alone differs from its row of the batch)",
                      cuda_wtype_name(t), few, gm[s][0], gm[s][1], gm[s][2], acc ? " (accumulate, odd ldy)" : "",
                      err);
                if (s == 0 && v == 0)
                    printf("  %s batch GEMM on int8 tensor cores %d x %d x %d: error %.2e of sum |x w|\n",
                           cuda_wtype_name(t), gm[s][0], gm[s][1], gm[s][2], err);
            }
            gemm_ref_free(&ref);
            if (int8)
                gemm_ref_free(&ref8);
            free_matrix(&m);
        }
    }
    /* the fused epilogues, on the int8 tensor cores (Q8_0, Q4_0, Q4_K, Q6_K; 40 tokens:
     * quantized beforehand) and F16 tiles (F16): (kind, T, n_out, n_in), the K types where
     * n_in is a whole number of their blocks of 256 */
    static const int ep[][4] = {{CUDA_EPI_GLU, 10, 192, 64}, {CUDA_EPI_GLU, 40, 256, 128},
                                {CUDA_EPI_NORM, 10, 64, 128}, {CUDA_EPI_NORM, 40, 1024, 256},
                                {CUDA_EPI_NORM, 7, 2560, 64}, {CUDA_EPI_GLU, 12, 256, 512}};
    static const int ep_types[] = {CUDA_W_Q8_0, CUDA_W_Q4_0, CUDA_W_Q4_K, CUDA_W_Q6_K, CUDA_W_F16};
    for (size_t tt = 0; tt < sizeof ep_types / sizeof ep_types[0]; tt++) {
        const int t = ep_types[tt];
        const char *type_name = cuda_wtype_name(t) ? cuda_wtype_name(t) : "?";
        cuda_gemm_set_mmq(1);
        for (size_t i = 0; i < sizeof ep / sizeof ep[0]; i++) {
            if (ep[i][3] % cuda_wtype_block(t) != 0)
                continue;
            host_matrix m;
            CHECK(make_matrix(t, ep[i][2], ep[i][3], &m) == 0, "out of memory");
            const double err = epilogue_case(&m, ep[i][1], ep[i][0]);
            CHECK(err <= 1e-3, "%s batch GEMM with the %s epilogue, %d tokens x %d x %d: error %.3g (inf: a bit differs "
                  "from the unfused path)", type_name, ep[i][0] == CUDA_EPI_GLU ? "GLU" : "RMSNorm",
                  ep[i][1], ep[i][2], ep[i][3], err);
            free_matrix(&m);
        }
    }
    cuda_gemm_set_mmq(-1);
}

/* A random matrix of type (Q8_0 or Q4_0) straight on the device (upload_weight): random
 * quants, scales in [0.01, 0.05) as make_matrix's, but no values on the host, which at
 * Qwen3-8B's gate|up would be 0.8 GB of doubles (for device-against-device checks). */
static int random_device_weight(int type, int n_out, int n_in, cuda_weight *dw) {
    const size_t w_bytes = (size_t)n_out * cuda_row_bytes(type, n_in);
    const size_t nd = (size_t)n_out * cuda_scale_row_bytes(type, n_in) / 2;
    host_matrix m = {type, n_out, n_in, malloc(w_bytes), malloc(nd * sizeof(uint16_t)), NULL};
    int ok = m.w && m.d;
    *dw = (cuda_weight){type, n_in, n_out, NULL, NULL, NULL};
    for (size_t i = 0; ok && i < w_bytes; i += 4) {
        const uint32_t r = rnd();
        memcpy(m.w + i, &r, 4);
    }
    for (size_t i = 0; ok && i < nd; i++)
        m.d[i] = quant_f16_sat(0.01f + 0.02f * (rndf() + 1.0f));
    ok = ok && upload_weight(&m, dw) == 0;
    free_matrix(&m);
    return ok ? 0 : -1;
}

/* A Qwen3 layer's gate|up (SwiGLU) and down of one type on the same random input, with
 * the hidden vector in f32 (MV_NORM_SWIGLU, MV_ADD) and handed over quantized
 * (MV_NORM_SWIGLU_Q8, MV_ADD_Q8): the residual must come out bit for bit the same (the
 * same rows' sums, quantized as down's staging quantizes them). 1: identical, 0: the
 * handoff does not take these shapes here (cuda_matvec_q8_handoff), -1: they differ,
 * -2: out of memory or a launch failed. */
static int q8_handoff_case(int type, int n_embd, int n_ff) {
    const float eps = 1e-6f;
    cuda_weight gate_up, down;
    float *x0 = random_floats((size_t)n_embd, 2.0f, 0.0f), *nw = random_floats((size_t)n_embd, 0.5f, 1.0f);
    float *out[2] = {malloc((size_t)n_embd * 4), malloc((size_t)n_embd * 4)}; /* f32, quantized */
    float *dx = NULL, *dnw = NULL, *dh = NULL;
    int result = -2;
    memset(&gate_up, 0, sizeof gate_up), memset(&down, 0, sizeof down);
    if (!x0 || !nw || !out[0] || !out[1] || random_device_weight(type, 2 * n_ff, n_embd, &gate_up) ||
        random_device_weight(type, n_embd, n_ff, &down) || !(dx = to_device(x0, (size_t)n_embd * 4)) ||
        !(dnw = to_device(nw, (size_t)n_embd * 4)) || cudaMalloc((void **)&dh, (size_t)n_ff * 4) != cudaSuccess)
        goto done;
    result = 0;
    if (!cuda_matvec_q8_handoff(&gate_up, &down))
        goto done;
    result = -2;
    for (int q8 = 0; q8 < 2; q8++) {
        cudaMemcpy(dx, x0, (size_t)n_embd * 4, cudaMemcpyHostToDevice);
        cudaMemset(dh, 0xff, (size_t)n_ff * 4); /* no block of the handoff left from the run before */
        if (cuda_matvec(&gate_up, q8 ? MV_NORM_SWIGLU_Q8 : MV_NORM_SWIGLU, dx, dnw, eps, dh, NULL, 0) != cudaSuccess ||
            cuda_matvec(&down, q8 ? MV_ADD_Q8 : MV_ADD, dh, NULL, 0.0f, dx, NULL, 0) != cudaSuccess ||
            cudaDeviceSynchronize() != cudaSuccess)
            goto done;
        cudaMemcpy(out[q8], dx, (size_t)n_embd * 4, cudaMemcpyDeviceToHost);
    }
    result = memcmp(out[0], out[1], (size_t)n_embd * 4) ? -1 : 1;
done:
    cudaFree(gate_up.w), cudaFree(gate_up.d), cudaFree(down.w), cudaFree(down.d);
    cudaFree(dx), cudaFree(dnw), cudaFree(dh);
    free(x0), free(nw), free(out[0]), free(out[1]);
    return result;
}

void test_cuda(void) {
    if (!er_cuda_available()) {
        printf("cuda: no CUDA device here, nothing to test\n");
        return;
    }
    /* (n_out, n_in): Qwen3-0.6B's qkv, wo, gate|up, down; small and odd shapes; rows of
     * Qwen3-4B's and 8B's inputs (2,560, 9,728, 12,288), whose chunks are not always a
     * whole number of the streaming kernel's 32-chunk items; last, a matrix whose slices
     * pass 64 KB a multiprocessor in the types of int8 input (k_matvec's slices on it go
     * to 120K weights: this one's are exactly that), for those types only (big_shape) */
    static const int shapes[][2] = {{4096, 1024}, {1024, 2048}, {6144, 1024}, {1024, 3072}, {64, 64},
                                    {300, 96}, {38, 160}, {2, 32}, {37, 768}, {5, 256},
                                    {96, 2560}, {40, 9728}, {64, 12288}, {2560, 6144}};
    const size_t big_shape = sizeof shapes / sizeof shapes[0] - 1;
    for (int t = 0; t < CUDA_W_COUNT; t++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            if (shapes[s][1] % cuda_wtype_block(t) != 0 || (s == big_shape && !cuda_wtype_int8_dot(t)))
                continue; /* rows of whole blocks (256 for the K types); big_shape */
            host_matrix m;
            CHECK(make_matrix(t, shapes[s][0], shapes[s][1], &m) == 0, "out of memory");
            /* each shape through the kernel its size picks, then through the streaming one
             * (by default only matrices of more than 64 KB a multiprocessor take it, 120K
             * weights for the types with int8 dot products when int8 is on); those types
             * with the f32 input, then the int8 one, streamed also with three rows a warp
             * and pass wherever it is ungated (the rule takes them only where two passes
             * become one: at 6,144 rows on 132 multiprocessors) */
            for (int int8 = 0; int8 <= cuda_wtype_int8_dot(t); int8++) {
                cuda_matvec_set_int8(int8);
                /* streamed: 1 two rows a pass, 2 three, 3 and 4 the same through k_matvec_ring
                 * (Q8_0, Q4_0: where the rows are whole steps and not Q4_0 at 3 rows, else as
                 * 1 and 2), two units a lane and step where the rows are whole steps of them
                 * whatever EDGERUNNER_CUDA_RING_WIDE says, 5 and 6 one unit */
                const int n_stream = int8 ? (cuda_wtype_int8_one_scale(t) ? 6 : 2) : 1;
                for (int stream = 0; stream <= n_stream; stream++) {
                    const int rows3 = stream > 0 && stream % 2 == 0;
                    cuda_matvec_set_stream_min(stream ? 1 : 0);
                    cuda_matvec_set_stream_rows(rows3 ? 3 : 1);
                    cuda_matvec_set_ring(stream >= 3);
                    cuda_matvec_set_ring_wide(stream >= 5 ? 0 : 1);
                    for (int mode = MV_STORE; mode <= MV_NORM_GEGLU; mode++) {
                        const int gated_mode = mode == MV_NORM_SWIGLU || mode == MV_NORM_GEGLU;
                        if ((stream && mode == MV_NORM_ARGMAX) || (rows3 && gated_mode))
                            continue; /* the head has its own kernel; gated rows pair up */
                        int argmax_ok = 0;
                        double tol = 0.0;
                        const double err = run_case(&m, mode, &argmax_ok, &tol);
                        CHECK(err <= tol && argmax_ok,
                              "%s %s%s%s%s (%d x %d): error %.3g of max(|y|, sum |w x|) (bound %.3g), argmax %s",
                              cuda_wtype_name(t), mode_name(mode),
                              rows3 ? " (streamed, 3 rows)" : stream ? " (streamed)" : "",
                              stream >= 3 && takes_ring(&m, mode) ? (stream >= 5 ? " (ring, 1 unit)" : " (ring)") : "",
                              takes_int8(&m, mode) ? " (int8 input)" : "", shapes[s][0], shapes[s][1], err, tol,
                              argmax_ok ? "ok" : "wrong");
                    }
                }
            }
            cuda_matvec_set_stream_min(0);
            cuda_matvec_set_stream_rows(-1);
            cuda_matvec_set_ring(-1);
            cuda_matvec_set_ring_wide(-1);
            free_matrix(&m);
        }
        /* rows that are not whole 16-byte chunks (the element path), for the types whose
         * rows may have any length (F16/BF16/F32) */
        if (cuda_wtype_block(t) == 1) {
            host_matrix m;
            CHECK(make_matrix(t, 50, 172, &m) == 0, "out of memory");
            for (int mode = MV_STORE; mode <= MV_NORM_GEGLU; mode++) {
                int argmax_ok = 0;
                double tol = 0.0;
                const double err = run_case(&m, mode, &argmax_ok, &tol);
                CHECK(err <= tol && argmax_ok, "%s %s (50 x 172): error %.3g", cuda_wtype_name(t), mode_name(mode),
                      err);
            }
            free_matrix(&m);
        }
    }
    /* the upload's repack of the file's blocks, for every type it repacks: the values of
     * the CPU reference (quant/), through the matvec (with the f32 input: a check of the
     * layout, which the int8 one would blur) and the embedding */
    cuda_matvec_set_int8(0);
    for (int t = 0; t < CUDA_W_COUNT; t++) {
        if (!cuda_wtype_repack_bytes(t))
            continue;
        static const int rp[][2] = {{37, 768}, {3, 256}, {64, 1024}};
        for (size_t s = 0; s < sizeof rp / sizeof rp[0]; s++) {
            double embd_err = 0.0;
            const double err = repack_case(t, rp[s][0], rp[s][1], &embd_err);
            CHECK(err <= 1e-5 && embd_err <= 1e-6, "%s repack (%d x %d): matvec error %.3g of max |y|, embedding %.3g",
                  cuda_wtype_name(t), rp[s][0], rp[s][1], err, embd_err);
        }
    }
    cuda_matvec_set_int8(-1);
    /* the layer matrices of the dense Qwen3 sizes as the decode step runs them (Q4_0 and
     * Q8_0, the input in f32 and in int8): qkv with the norm, wo and down with the residual
     * add, gate|up with SwiGLU; from 1.7B on they take the streaming kernels (k_matvec_ring
     * on the int8 input where it fits: not 32B's down, which stages 100 KB of input, 32 KB
     * of quants) */
    static const int qwen3[][4] = {/* n_embd, q_dim, n_ff, n_head_kv * 128 */
                                   {2048, 2048, 6144, 1024}, {2560, 4096, 9728, 1024},
                                   {4096, 4096, 12288, 1024}, {5120, 8192, 25600, 1024}};
    for (size_t i = 0; i < sizeof qwen3 / sizeof qwen3[0]; i++) {
        const int e = qwen3[i][0], q = qwen3[i][1], ff = qwen3[i][2], kv = qwen3[i][3];
        const int mat[4][3] = {{q + 2 * kv, e, MV_NORM_STORE}, {e, q, MV_ADD}, {2 * ff, e, MV_NORM_SWIGLU}, {e, ff, MV_ADD}};
        for (int k = 0; k < 8; k++) {
            const int t = k < 4 ? CUDA_W_Q4_0 : CUDA_W_Q8_0, *mk = mat[k % 4];
            if (i == 3 && k % 4 == 2)
                continue; /* 32B's gate|up: 2 GB of doubles here; 8B's has the same kernel */
            host_matrix m;
            CHECK(make_matrix(t, mk[0], mk[1], &m) == 0, "out of memory");
            for (int int8 = 0; int8 <= 1; int8++) {
                cuda_matvec_set_int8(int8);
                int argmax_ok = 0;
                double tol = 0.0;
                const double err = run_case(&m, mk[2], &argmax_ok, &tol);
                CHECK(err <= tol, "%s %s%s%s (%d x %d, Qwen3 n_embd %d): error %.3g of max(|y|, sum |w x|) (bound %.3g)",
                      cuda_wtype_name(t), mode_name(mk[2]), takes_int8(&m, mk[2]) ? " (int8 input)" : "",
                      takes_ring(&m, mk[2]) ? " (ring)" : "", mk[0], mk[1], e, err, tol);
            }
            free_matrix(&m);
        }
    }
    /* the quantized handoff between gate|up and down at Qwen3-8B's shapes (where this
     * device's multiprocessors let the handoff take them) and 4B's (not on 132) */
    static const int q8_shapes[][2] = {{4096, 12288}, {2560, 9728}};
    int q8_taken = 0, n_sm = 0;
    cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0);
    cuda_matvec_set_int8(1);
    cuda_matvec_set_q8_handoff(1);
    for (int ti = 0; ti < 2; ti++)
        for (size_t i = 0; i < sizeof q8_shapes / sizeof q8_shapes[0]; i++) {
            const int t = ti ? CUDA_W_Q4_0 : CUDA_W_Q8_0, r = q8_handoff_case(t, q8_shapes[i][0], q8_shapes[i][1]);
            const int want = n_sm == 132 ? i == 0 : r; /* (H100 and H200: 8B's shapes only) */
            CHECK(r >= 0 && r == want, "%s gate|up -> down handed over quantized (n_embd %d, n_ff %d): %s",
                  cuda_wtype_name(t), q8_shapes[i][0], q8_shapes[i][1],
                  r == -1 ? "residual DIFFERS from the f32 handoff" : r < 0 ? "failed" : r ? "taken" : "not taken");
            q8_taken += r == 1;
        }
    cuda_matvec_set_int8(-1);
    cuda_matvec_set_q8_handoff(-1);
    printf("  quantized gate|up -> down handoff: %d of 4 shapes taken, identical\n", q8_taken);
    /* the output head of Qwen3, in the quantized types (the float ones: 0.6-1.2 GB here) */
    for (int t = 0; t < CUDA_W_COUNT; t++) {
        if (cuda_wtype_block(t) == 1)
            continue;
        host_matrix m;
        CHECK(make_matrix(t, 151936, 1024, &m) == 0, "out of memory");
        for (int int8 = 0; int8 <= cuda_wtype_int8_dot(t); int8++) {
            cuda_matvec_set_int8(int8);
            int argmax_ok = 0;
            double tol = 0.0;
            const double err = run_case(&m, MV_NORM_ARGMAX, &argmax_ok, &tol);
            CHECK(err <= tol && argmax_ok, "%s head%s (151936 x 1024): error %.3g (bound %.3g), argmax %s",
                  cuda_wtype_name(t), int8 ? " (int8 input)" : "", err, tol, argmax_ok ? "ok" : "wrong");
        }
        free_matrix(&m);
    }
    cuda_matvec_set_int8(-1);
    /* decode attention: Qwen3-0.6B's heads at 1 to 3,001 positions (one round of the
     * cluster is 128 keys), a Llama-like head without Q/K norm and with the original
     * RoPE pairing, stories260K's 8-dim heads, a head of 80 dims (not whole warps) */
    static const int att[][6] = {{16, 8, 128, 1, 1, 0},   {16, 8, 128, 1, 1, 1},   {16, 8, 128, 1, 1, 15},
                                 {16, 8, 128, 1, 1, 127}, {16, 8, 128, 1, 1, 128}, {16, 8, 128, 1, 1, 129},
                                 {16, 8, 128, 1, 1, 1000}, {16, 8, 128, 1, 1, 3000}, {8, 2, 64, 0, 0, 0},
                                 {8, 2, 64, 0, 0, 200},   {8, 4, 8, 0, 0, 0},      {8, 4, 8, 0, 0, 50},
                                 {4, 4, 80, 1, 1, 33}};
    for (size_t i = 0; i < sizeof att / sizeof att[0]; i++) {
        for (int kv = CUDA_KV_F32; kv <= CUDA_KV_Q8_0; kv++) {
            if (kv == CUDA_KV_Q8_0 && att[i][2] % 32 != 0)
                continue; /* refused by the context (head_dim % 32) */
            int cache_ok = 0;
            const attn_case ac = {att[i][0], att[i][1], att[i][2], att[i][5], 0, att[i][3], att[i][4], 0, kv, 0, 0};
            const double err = attention_case(&ac, &cache_ok);
            CHECK(err <= 1e-5 && cache_ok,
                  "attention %d/%d heads of %d, position %d, %s cache: error %.3g of max |out|, cache %s", att[i][0],
                  att[i][1], att[i][2], att[i][5], kv_name(kv), err, cache_ok ? "written" : "NOT written");
        }
    }
    /* the dense Qwen3 sizes' attention (heads, KV heads: 0.6B and 1.7B, 4B and 8B, 14B,
     * 32B): every launch must succeed (Qwen3-4B's once did not: its folded wo and static
     * arrays passed 48 KB) */
    static const int sizes[][2] = {{16, 8}, {32, 8}, {40, 8}, {64, 8}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int cache_ok = 0;
        const attn_case ac = {sizes[i][0], sizes[i][1], 128, 129, 0, 1, 1, 0, (int)(i % 3), 0, 0};
        const double err = attention_case(&ac, &cache_ok);
        CHECK(err <= 1e-5 && cache_ok, "attention %d/%d heads of 128: error %.3g, cache %s", sizes[i][0], sizes[i][1],
              err, cache_ok ? "written" : "NOT written");
    }
    /* decode attention with a sliding window (n_head, n_head_kv, head_dim, position,
     * window): positions inside the window (it sees every row) and beyond it, windows of 1
     * (the new row alone), 4 and 8 (a part of one warp's keys, not aligned to them), 130
     * (more than one round of the cluster, 128 keys) and more than the context; head sizes
     * 128 and 64 (Qwen3, Llama-like), 256 (Gemma-3, window 512), 80 and 8 (lanes past the
     * head); each in every cache type (Q8_0 where the head is whole blocks). Windows past
     * the context at 300 and 511 keys: 3 and 4 rounds, the F16 cache's rounds 1-3 copied
     * before the wait (ATT_PRE_ROUNDS), and 3,000 with 4,096: later rounds loaded after it. */
    static const int win[][5] = {
        {16, 8, 128, 0, 1},        {16, 8, 128, 5, 1},        {16, 8, 128, 1000, 1},
        {16, 8, 128, 3, 4},        {16, 8, 128, 4, 4},        {16, 8, 128, 201, 4},
        {16, 8, 128, 7, 8},        {16, 8, 128, 8, 8},        {16, 8, 128, 9, 8},
        {16, 8, 128, 130, 8},      {16, 8, 128, 129, 130},    {16, 8, 128, 130, 130},
        {16, 8, 128, 131, 130},    {16, 8, 128, 300, 130},    {16, 8, 128, 3000, 130},
        {16, 8, 128, 100, 5000},   {16, 8, 128, 3000, 4096},  {16, 8, 128, 300, 5000},
        {16, 8, 128, 511, 5000},   {8, 2, 64, 0, 1},
        {8, 2, 64, 200, 1},        {8, 2, 64, 3, 4},          {8, 2, 64, 57, 4},
        {8, 2, 64, 50, 8},         {8, 2, 64, 129, 130},      {8, 2, 64, 500, 130},
        {8, 2, 64, 100, 5000},     {4, 1, 256, 600, 512},     {4, 1, 256, 511, 512},
        {4, 1, 256, 40, 8},        {4, 4, 80, 33, 8},         {4, 4, 80, 300, 130},
        {8, 4, 8, 50, 4},          {8, 4, 8, 3, 8}};
    double win_worst = 0.0;
    for (size_t i = 0; i < sizeof win / sizeof win[0]; i++) {
        const int nh = win[i][0], nkv = win[i][1], hd = win[i][2], pos = win[i][3], window = win[i][4];
        for (int kv = CUDA_KV_F32; kv <= (hd % 32 == 0 ? CUDA_KV_Q8_0 : CUDA_KV_F16); kv++) {
            int cache_ok = 0;
            const attn_case ac = {nh, nkv, hd, pos, window, 1, 1, 0, kv, 0, 0};
            const double err = attention_case(&ac, &cache_ok);
            CHECK(err <= 1e-5 && cache_ok,
                  "attention %d/%d heads of %d, position %d, window %d, %s cache: error %.3g, cache %s", nh, nkv, hd,
                  pos, window, kv_name(kv), err, cache_ok ? "written" : "NOT written");
            win_worst = err > win_worst || isnan(err) ? err : win_worst;
        }
    }
    printf("  attention with sliding windows: worst error %.2e\n", win_worst);
    /* Qwen2's Q/K/V biases (0.5B: 14/2 heads of 64; no Q/K norm) at one and several rounds
     * of the cluster and with a window; Gemma-3-270M's heads (4/1 of 256, Q/K norms, window
     * 512 on its sliding layers) */
    static const int arch_att[][7] = {{14, 2, 64, 0, 0, 0, 1},    {14, 2, 64, 1, 0, 0, 1},    {14, 2, 64, 200, 0, 0, 1},
                                      {14, 2, 64, 1000, 0, 0, 1}, {14, 2, 64, 300, 130, 0, 1}, {4, 1, 256, 0, 0, 1, 0},
                                      {4, 1, 256, 100, 0, 1, 0},  {4, 1, 256, 600, 512, 1, 0}, {4, 1, 256, 1000, 0, 1, 0}};
    for (size_t i = 0; i < sizeof arch_att / sizeof arch_att[0]; i++) {
        const int *a = arch_att[i];
        for (int kv = CUDA_KV_F32; kv <= CUDA_KV_Q8_0; kv++) {
            const attn_case ac = {a[0], a[1], a[2], a[3], a[4], 1, a[5], a[6], kv, 0, 0};
            int cache_ok = 0;
            const double err = attention_case(&ac, &cache_ok);
            CHECK(err <= 1e-5 && cache_ok,
                  "attention %d/%d heads of %d, position %d, window %d, %s%s, %s cache: error %.3g, cache %s", a[0],
                  a[1], a[2], a[3], a[4], a[5] ? "Q/K norms" : "no norms", a[6] ? ", Q/K/V biases" : "", kv_name(kv),
                  err, cache_ok ? "written" : "NOT written");
        }
    }

    /* the split decode over a long context (n_head, n_head_kv, head_dim, position, window,
     * biases): Qwen3-0.6B's heads at 1 to 16,384 positions, Qwen3-8B's and 32B's, heads of
     * 64, 256 (with a window), 80 and 8 dims, Qwen2's biases; each with the device's
     * block count (cuda_attention_split_count), one block, 7 (shares not a power of two)
     * and 128 (more blocks than rounds of keys: empty shares), each in the F16 cache (the
     * default, its own kernel for heads of 64, 128 and 256) and in F32 or Q8_0 by turns */
    static const int split[][6] = {{16, 8, 128, 0, 0, 0},     {16, 8, 128, 15, 0, 0},    {16, 8, 128, 16, 0, 0},
                                   {16, 8, 128, 17, 0, 0},    {16, 8, 128, 1000, 0, 0},  {16, 8, 128, 4095, 0, 0},
                                   {16, 8, 128, 16383, 0, 0}, {32, 8, 128, 5000, 0, 0},  {64, 8, 128, 2000, 0, 0},
                                   {16, 8, 128, 3000, 130, 0}, {16, 8, 128, 100, 5000, 0}, {8, 2, 64, 200, 0, 0},
                                   {4, 1, 256, 600, 512, 0},  {4, 1, 256, 2000, 0, 0},   {4, 4, 80, 33, 0, 0},
                                   {8, 4, 8, 50, 0, 0},       {14, 2, 64, 1000, 0, 1}};
    double split_worst = 0.0;
    for (size_t i = 0; i < sizeof split / sizeof split[0]; i++) {
        const int *a = split[i];
        const cuda_attn_params p = plain_attn(a[0], a[1], a[2], 1, a[3] + 1, a[4]);
        const int n_dev = cuda_attention_split_count(&p);
        const int counts[] = {n_dev, 1, 7, 128};
        CHECK(n_dev >= 1 && n_dev <= CUDA_ATT_SPLIT_MAX, "split count %d for %d heads", n_dev, a[0]);
        for (int c = 0; c < 2 * (int)(sizeof counts / sizeof counts[0]); c++) { /* each count in F16, then another */
            const int other = a[2] % 32 == 0 && (i + (size_t)c) % 2 ? CUDA_KV_Q8_0 : CUDA_KV_F32;
            const int kv = c % 2 ? other : CUDA_KV_F16;
            const attn_case ac = {a[0], a[1], a[2], a[3], a[4], 1, 1, a[5], kv, counts[c / 2], 0};
            int cache_ok = 0;
            const double err = attention_case(&ac, &cache_ok);
            CHECK(err <= 1e-5 && cache_ok,
                  "split attention %d/%d heads of %d, position %d, window %d, %d blocks, %s cache: error %.3g, "
                  "cache %s",
                  a[0], a[1], a[2], a[3], a[4], counts[c / 2], kv_name(kv), err, cache_ok ? "written" : "NOT written");
            split_worst = err > split_worst || isnan(err) ? err : split_worst;
        }
    }
    /* keys whose scores pass every earlier one's by far, late in a warp's keys: the F16
     * kernel's lazy rescaling (ring_attend_mma rescales only past 2^8) at Qwen3-8B's and
     * 0.6B's shapes and heads of 64, with the device's block count and with one block */
    static const int spiked[][4] = {{32, 8, 128, 5000}, {16, 8, 128, 16383}, {8, 2, 64, 2000}};
    for (size_t i = 0; i < sizeof spiked / sizeof spiked[0]; i++) {
        const int *a = spiked[i];
        const cuda_attn_params p = plain_attn(a[0], a[1], a[2], 1, a[3] + 1, 0);
        const int counts[] = {cuda_attention_split_count(&p), 1};
        for (int c = 0; c < 2; c++) {
            const attn_case ac = {a[0], a[1], a[2], a[3], 0, 1, 1, 0, CUDA_KV_F16, counts[c], 6};
            int cache_ok = 0;
            const double err = attention_case(&ac, &cache_ok);
            CHECK(err <= 1e-5 && cache_ok,
                  "split attention, spiked keys, %d/%d heads of %d, position %d, %d blocks: error %.3g", a[0], a[1],
                  a[2], a[3], counts[c], err);
            split_worst = err > split_worst || isnan(err) ? err : split_worst;
        }
    }
    const cuda_attn_params qwen3_06b = {.n_head = 16, .n_head_kv = 8, .head_dim = 128, .kv_type = CUDA_KV_F16};
    printf("  split decode attention: worst error %.2e (%d blocks per head at Qwen3-0.6B's shape)\n", split_worst,
           cuda_attention_split_count(&qwen3_06b));

    /* the prefill's Q/K/V preparation (n_head, n_head_kv, head_dim, tokens, pos0, norms,
     * biases): Qwen3, Qwen2 (biases), Gemma-3 (256 dims), stories260K, 80-dim heads */
    static const int qkr[][7] = {{16, 8, 128, 5, 0, 1, 0}, {14, 2, 64, 70, 37, 0, 1}, {4, 1, 256, 9, 3, 1, 0},
                                 {8, 4, 8, 9, 3, 0, 1},    {4, 4, 80, 20, 30, 1, 1}};
    for (size_t i = 0; i < sizeof qkr / sizeof qkr[0]; i++) {
        const int *a = qkr[i];
        for (int kv = CUDA_KV_F32; kv <= (a[2] % 32 == 0 ? CUDA_KV_Q8_0 : CUDA_KV_F16); kv++) {
            const double err = qk_rope_store_case(a[0], a[1], a[2], a[3], a[4], a[5], a[6], kv);
            CHECK(err <= 1e-5, "prefill Q/K/V preparation %d/%d heads of %d, %d tokens after %d%s%s, %s cache: error %.3g",
                  a[0], a[1], a[2], a[3], a[4], a[5] ? ", Q/K norms" : "", a[6] ? ", biases" : "", kv_name(kv), err);
        }
    }
    /* the prefill's SwiGLU and GeGLU (F16 outputs: 2^-11 of the largest at most), the
     * post-norms' residual add (Gemma-3-270M: n_embd 640; decode is one row) */
    static const int glu_shapes[][2] = {{1, 2048}, {37, 300}, {200, 3072}};
    for (size_t i = 0; i < sizeof glu_shapes / sizeof glu_shapes[0]; i++)
        for (int gelu = 0; gelu <= 1; gelu++) {
            const double err = glu_case(glu_shapes[i][0], glu_shapes[i][1], gelu);
            CHECK(err <= 5e-4, "%s %d x %d: error %.3g", gelu ? "GeGLU" : "SwiGLU", glu_shapes[i][0], glu_shapes[i][1], err);
        }
    static const int arn[][2] = {{1, 640}, {1, 1024}, {70, 640}, {3, 100}};
    for (size_t i = 0; i < sizeof arn / sizeof arn[0]; i++) {
        const double err = add_rmsnorm_case(arn[i][0], arn[i][1]);
        CHECK(err <= 1e-5, "post-norm residual add %d x %d: error %.3g", arn[i][0], arn[i][1], err);
    }
    /* the embedding lookups, scaled (Gemma-3-270M: sqrt(640)) and not, every type */
    for (int t = 0; t < CUDA_W_COUNT; t++)
        for (int scaled = 0; scaled <= 1; scaled++) {
            /* rows of whole blocks: 640 is not one of the K types' 256 (Gemma-3-270M's
             * recipe keeps those tensors in Q5_0/Q8_0), 768 is */
            const int n_in = 640 % cuda_wtype_block(t) == 0 ? 640 : 768;
            const double err = embed_case(t, 50, n_in, scaled ? sqrtf((float)n_in) : 1.0f);
            CHECK(err <= 1e-6, "%s embedding%s (%d wide): error %.3g", cuda_wtype_name(t), scaled ? " scaled" : "", n_in,
                  err);
        }
    /* prefill attention (n_head, n_head_kv, head_dim, tokens, pos0, window): the
     * tensor-core kernel (head_dim 128 and 64; batches not whole tiles, a cached prefix)
     * and the CUDA-core one (8, 80 and 256 dims); windows of 1, shorter than the batch,
     * longer than the batch but not the context, and longer than the context. Q, K, V and
     * P are rounded to F16 (2^-11 relative at most): 2e-3 of the largest output is ~4
     * such roundings. */
    static const int pre[][6] = {
        {16, 8, 128, 5, 0, 0},     {16, 8, 128, 64, 0, 0},     {16, 8, 128, 100, 0, 0},
        {16, 8, 128, 70, 37, 0},   {8, 2, 64, 130, 0, 0},      {8, 2, 64, 17, 200, 0},
        {8, 4, 8, 9, 3, 0},        {16, 8, 128, 100, 0, 1},    {16, 8, 128, 100, 0, 16},
        {16, 8, 128, 70, 37, 16},  {16, 8, 128, 70, 37, 100},  {16, 8, 128, 200, 300, 64},
        {16, 8, 128, 150, 20, 65}, {16, 8, 128, 130, 500, 130}, {16, 8, 128, 64, 200, 1000},
        {16, 8, 128, 5, 10, 3},    {8, 2, 64, 130, 0, 7},      {8, 2, 64, 17, 200, 50},
        {8, 2, 64, 130, 77, 129},  {8, 2, 64, 100, 1000, 4096}, {8, 4, 8, 9, 3, 2},
        {8, 4, 8, 9, 3, 20},       {4, 4, 80, 20, 30, 5},      {4, 4, 80, 20, 30, 100},
        {4, 1, 256, 40, 600, 512}, {4, 1, 256, 40, 600, 16}};
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++) {
        /* each cache type in turn (Q8_0 where the head is whole blocks) */
        const int kv = pre[i][2] % 32 == 0 ? (int)(i % 3) : (int)(i % 2);
        const double err =
            prefill_attention_case(pre[i][0], pre[i][1], pre[i][2], pre[i][3], pre[i][4], pre[i][5], kv);
        CHECK(err <= 2e-3,
              "prefill attention %d/%d heads of %d, %d tokens after %d, window %d, %s cache: error %.3g of max |out|",
              pre[i][0], pre[i][1], pre[i][2], pre[i][3], pre[i][4], pre[i][5], kv_name(kv), err);
        printf("  prefill attention %d/%d heads of %d, %d tokens after %d, window %d, %s cache: error %.2e\n",
               pre[i][0], pre[i][1], pre[i][2], pre[i][3], pre[i][4], pre[i][5], kv_name(kv), err);
    }
    /* batches of several sequences: (n_head, n_head_kv, hd, n_ctx, window, tokens): Qwen3-0.6B's
     * and 8B's heads with queries of one share (<= 128 keys), several (3, 5) and the most
     * (16, at 4,000 keys), two tokens of one sequence; heads of 64 and 256 (Gemma-3's four
     * per KV head, a window); more tokens than a launch takes (CUDA_ATT_BATCH_TOKENS) */
    static const int bat[][6] = {{16, 8, 128, 4096, 0, 7}, {32, 8, 128, 4096, 0, 7}, {8, 8, 64, 700, 0, 7},
                                 {4, 1, 256, 700, 100, 7}, {16, 8, 128, 300, 0, 300}};
    for (size_t i = 0; i < sizeof bat / sizeof bat[0]; i++) {
        enum { N_SEQ = 5 };
        static const int32_t pos7[7] = {5, 127, 0, 300, 599, 128, 3999};
        static const int32_t seq7[7] = {0, 1, 2, 3, 4, 1, 0};
        int32_t seq[300], pos[300];
        const int T = bat[i][5];
        for (int t = 0; t < T; t++) {
            seq[t] = T == 7 ? seq7[t] : t % 3;
            pos[t] = T == 7 ? (pos7[t] < bat[i][3] ? pos7[t] : bat[i][3] - 1 - t) : t;
        }
        for (int with_scratch = 1; with_scratch >= 0; with_scratch--) {
            int alone_ok = 0;
            const double err = batch_attention_case(bat[i][0], bat[i][1], bat[i][2], N_SEQ, bat[i][3], T, seq, pos,
                                                    bat[i][4], with_scratch, &alone_ok);
            CHECK(err <= 2e-3 && alone_ok,
                  "batch attention (%s) %d/%d heads of %d, %d tokens, window %d: error %.3g of max |out|, %s",
                  with_scratch ? "shares" : "a block a query", bat[i][0], bat[i][1], bat[i][2], T, bat[i][4], err,
                  alone_ok ? "alone as in the batch" : "a token alone or a second run differs");
            printf("  batch attention (%s) %d/%d heads of %d, %d tokens, window %d: error %.2e\n",
                   with_scratch ? "shares" : "a block a query", bat[i][0], bat[i][1], bat[i][2], T, bat[i][4], err);
        }
    }
}
#endif
