/*
 * test_cuda.c - the CUDA decode kernels against a double-precision host computation on
 * random inputs: every weight type of the device layout (wtypes.cuh), every matvec mode
 * (plain, residual add, RMSNorm folded in, SwiGLU, the head's argmax), at the shapes of
 * Qwen3-0.6B, of the output head, and at small odd shapes that take the fallbacks
 * (rows not a whole number of 16-byte chunks, slices not 16-byte aligned); and the
 * fused decode attention (Q/K norm, RoPE, cache write, GQA over 1 to 3,001 positions,
 * one or several rounds of its cluster, sliding windows) and the prefill's attention
 * (also with windows) and tensor-core GEMM against the same kind of host computation.
 * With a window, the cache rows below every window are NaN: a kernel that reads one
 * fails.
 *
 * Built when the CUDA backend is; passes with a note on machines without a GPU (CI),
 * and is run on the GPU machine by bench/gpu.sh (`build/unit_tests cuda`).
 */
#include "test.h"

#ifndef ER_HAVE_CUDA
void test_cuda(void) { printf("cuda: built without CUDA, nothing to test\n"); }
#else

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda.h"
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
 * 0, or -1 when out of device memory (what was allocated stays in *dw for cudaFree). */
static int upload_weight(const host_matrix *m, cuda_weight *dw) {
    const size_t w_bytes = (size_t)m->n_out * cuda_row_bytes(m->type, m->n_in);
    const size_t d_bytes = (size_t)m->n_out * cuda_scale_row_bytes(m->type, m->n_in);
    *dw = (cuda_weight){m->type, m->n_in, m->n_out, NULL, NULL, NULL};
    if (cudaMalloc(&dw->w, w_bytes + 16) != cudaSuccess || (m->d && cudaMalloc(&dw->d, d_bytes + 16) != cudaSuccess))
        return -1;
    cudaMemcpy(dw->w, m->w, w_bytes, cudaMemcpyHostToDevice);
    if (m->d)
        cudaMemcpy(dw->d, m->d, d_bytes, cudaMemcpyHostToDevice);
    return 0;
}

static const char *mode_name(int mode) {
    static const char *names[] = {"store", "add", "norm_store", "norm_swiglu", "norm_argmax"};
    return names[mode];
}

/* Random fixed-point values (kernels.h, cuda_matvec's acc) in [-1, 1), and as doubles. */
static void random_acc(unsigned long long *acc, double *value, int n) {
    for (int i = 0; i < n; i++) {
        const long long a = llrint(ldexp(rndf(), 32));
        acc[i] = (unsigned long long)a;
        value[i] = ldexp((double)a, -32);
    }
}

/* One matvec on the device vs the host; returns the worst |error| / max |y|. With
 * with_acc, the residual has a pending fixed-point part (cuda_matvec's acc), which
 * MV_ADD must also clear. */
static double run_case(const host_matrix *m, int mode, int with_acc, int *argmax_ok) {
    const int n_in = m->n_in, n_out = m->n_out;
    const int n_y = mode == MV_NORM_SWIGLU ? n_out / 2 : n_out;
    const float eps = 1e-6f;
    float *x = malloc((size_t)n_in * sizeof(float)), *nw = malloc((size_t)n_in * sizeof(float));
    float *y0 = malloc((size_t)n_y * sizeof(float)), *y = malloc((size_t)n_y * sizeof(float));
    double *ref = malloc((size_t)n_y * sizeof(double)), *xn = malloc((size_t)n_in * sizeof(double));
    const int n_acc = mode == MV_ADD ? n_y : n_in; /* acc belongs to the residual: y of MV_ADD, else x */
    unsigned long long *acc = malloc((size_t)n_acc * sizeof *acc), *dacc = NULL;
    double *acc_v = calloc((size_t)n_acc, sizeof(double));
    cuda_weight dw = {m->type, n_in, n_out, NULL, NULL, NULL};
    float *dx = NULL, *dnw = NULL, *dy = NULL;
    cuda_step_state *dstate = NULL;
    double worst = INFINITY;
    *argmax_ok = 1;
    if (!x || !nw || !y0 || !y || !ref || !xn || !acc || !acc_v)
        goto done;
    for (int i = 0; i < n_in; i++) {
        x[i] = 2.0f * rndf();
        nw[i] = 1.0f + 0.5f * rndf();
    }
    for (int i = 0; i < n_y; i++)
        y0[i] = rndf();
    if (with_acc)
        random_acc(acc, acc_v, n_acc);

    /* the host: doubles throughout */
    const int norm = mode == MV_NORM_STORE || mode == MV_NORM_SWIGLU || mode == MV_NORM_ARGMAX;
    double ss = 0.0;
    for (int i = 0; i < n_in; i++) {
        xn[i] = x[i] + (mode == MV_ADD ? 0.0 : acc_v[i]);
        ss += xn[i] * xn[i];
    }
    const double scale = 1.0 / sqrt(ss / n_in + eps);
    for (int i = 0; i < n_in; i++)
        xn[i] = norm ? xn[i] * scale * nw[i] : xn[i];
    double ymax = 0.0;
    int best = 0;
    for (int r = 0; r < n_y; r++) {
        double a = 0.0, u = 0.0;
        for (int i = 0; i < n_in; i++)
            a += m->value[(size_t)r * n_in + i] * xn[i];
        if (mode == MV_NORM_SWIGLU) {
            for (int i = 0; i < n_in; i++)
                u += m->value[(size_t)(n_y + r) * n_in + i] * xn[i];
            a = a / (1.0 + exp(-a)) * u;
        }
        ref[r] = mode == MV_ADD ? y0[r] + acc_v[r] + a : a;
        ymax = fabs(ref[r]) > ymax ? fabs(ref[r]) : ymax;
        best = ref[r] > ref[best] ? r : best;
    }

    /* the device */
    if (upload_weight(m, &dw) != 0 || cudaMalloc((void **)&dx, (size_t)n_in * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dnw, (size_t)n_in * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dy, (size_t)n_y * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dstate, sizeof *dstate) != cudaSuccess ||
        (with_acc && cudaMalloc((void **)&dacc, (size_t)n_acc * sizeof *dacc) != cudaSuccess))
        goto done;
    if (with_acc)
        cudaMemcpy(dacc, acc, (size_t)n_acc * sizeof *acc, cudaMemcpyHostToDevice);
    cudaMemcpy(dx, x, (size_t)n_in * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dnw, nw, (size_t)n_in * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dy, y0, (size_t)n_y * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemset(dstate, 0, sizeof *dstate);
    if (cuda_matvec(&dw, mode, dx, norm ? dnw : NULL, eps, dy, dacc, dstate, 0) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess)
        goto done;
    cudaMemcpy(y, dy, (size_t)n_y * sizeof(float), cudaMemcpyDeviceToHost);
    worst = 0.0;
    for (int r = 0; r < n_y; r++) {
        const double e = fabs((double)y[r] - ref[r]) / (ymax > 0 ? ymax : 1.0);
        worst = e > worst || isnan(e) ? e : worst;
    }
    if (with_acc && mode == MV_ADD) { /* folded in: cleared for the next layer */
        cudaMemcpy(acc, dacc, (size_t)n_acc * sizeof *acc, cudaMemcpyDeviceToHost);
        for (int r = 0; r < n_acc; r++)
            worst = acc[r] != 0 ? INFINITY : worst;
    }
    if (mode == MV_NORM_ARGMAX) {
        cuda_step_state s;
        cudaMemcpy(&s, dstate, sizeof s, cudaMemcpyDeviceToHost);
        const int got = (int)(0xffffffffu - (unsigned int)(s.argmax_key & 0xffffffffu));
        *argmax_ok = got == best || fabs(ref[got] - ref[best]) <= 1e-5 * ymax;
    }
done:
    cudaFree(dw.w);
    cudaFree(dw.d);
    cudaFree(dx);
    cudaFree(dnw);
    cudaFree(dy);
    cudaFree(dstate);
    cudaFree(dacc);
    free(acc);
    free(acc_v);
    free(x);
    free(nw);
    free(y0);
    free(y);
    free(ref);
    free(xn);
    return worst;
}

/* One decode attention step at position pos against doubles on the host: worst error
 * of the output over its largest value, and whether row pos of both caches was written.
 * window > 0: the step sees rows max(0, pos - window + 1) .. pos only (as
 * cpu_attention_window), and the rows below are NaN, so that reading one shows.
 * With wo_type >= 0, the output projection folded in: a random wo (n_embd, n_head * hd)
 * of that type, and the error of what the kernel added into the fixed-point
 * accumulator, over the largest value it added. */
static double attention_case(int n_head, int n_head_kv, int hd, int pos, int window, int neox, int with_norm,
                             int wo_type, int n_embd, int *cache_ok) {
    const int kv_dim = n_head_kv * hd, q_dim = n_head * hd, n_qkv = q_dim + 2 * kv_dim, half = hd / 2;
    const int n_ctx = pos + 1, group = n_head / n_head_kv;
    const int j0 = window > 0 && pos >= window ? pos - window + 1 : 0; /* the first row seen */
    const float eps = 1e-6f;
    const size_t cache_n = (size_t)n_ctx * kv_dim;
    float *kc = malloc(cache_n * sizeof(float)), *vc = malloc(cache_n * sizeof(float));
    float *qkv = malloc((size_t)n_qkv * sizeof(float)), *qn = malloc((size_t)hd * sizeof(float));
    float *kn = malloc((size_t)hd * sizeof(float)), *cs = malloc((size_t)n_ctx * half * 2 * sizeof(float));
    float *out = malloc((size_t)q_dim * sizeof(float)), *row = malloc((size_t)2 * kv_dim * sizeof(float));
    double *ref = malloc((size_t)q_dim * sizeof(double)), *kr = malloc((size_t)kv_dim * sizeof(double));
    double *sc = malloc((size_t)n_ctx * sizeof(double)), *qr = malloc((size_t)hd * sizeof(double));
    float *dkc = NULL, *dvc = NULL, *dqkv = NULL, *dqn = NULL, *dkn = NULL, *dcs = NULL, *dout = NULL;
    cuda_step_state *dstate = NULL;
    host_matrix wo = {0};
    cuda_weight dwo = {0};
    const int n_acc = wo_type >= 0 ? n_embd : 0;
    unsigned long long *acc = malloc((size_t)n_acc * sizeof *acc + 1), *dacc = NULL;
    double *acc_v = malloc((size_t)n_acc * sizeof(double) + 1);
    double worst = INFINITY;
    *cache_ok = 0;
    if (!kc || !vc || !qkv || !qn || !kn || !cs || !out || !row || !ref || !kr || !sc || !qr || !acc || !acc_v ||
        (wo_type >= 0 && make_matrix(wo_type, n_embd, q_dim, &wo) != 0))
        goto done;
    random_acc(acc, acc_v, n_acc);
    for (size_t i = 0; i < cache_n; i++) {
        kc[i] = 2.0f * rndf();
        vc[i] = rndf();
    }
    for (size_t i = 0; i < (size_t)j0 * kv_dim; i++)
        kc[i] = vc[i] = NAN;
    for (int i = 0; i < n_qkv; i++)
        qkv[i] = 2.0f * rndf();
    for (int i = 0; i < hd; i++) {
        qn[i] = 1.0f + 0.5f * rndf();
        kn[i] = 1.0f + 0.5f * rndf();
    }
    for (int i = 0; i < n_ctx * half; i++) {
        const double a = 3.14159265 * rndf();
        cs[2 * i] = (float)cos(a);
        cs[2 * i + 1] = (float)sin(a);
    }

    /* the host: norm + rope of a head vector in doubles, the new K and V, softmax */
#define NORM_ROPE(src, nw, dst)                                                                   \
    do {                                                                                          \
        double ss_ = 0.0;                                                                         \
        for (int i = 0; i < hd; i++)                                                              \
            ss_ += (double)(src)[i] * (src)[i];                                                   \
        const double sc_ = with_norm ? 1.0 / sqrt(ss_ / hd + eps) : 1.0;                          \
        for (int i = 0; i < hd; i++)                                                              \
            (dst)[i] = (src)[i] * sc_ * (with_norm ? (nw)[i] : 1.0f);                             \
        for (int i = 0; i < half; i++) {                                                          \
            const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;                     \
            const double c_ = cs[((size_t)pos * half + i) * 2], s_ = cs[((size_t)pos * half + i) * 2 + 1]; \
            const double x0 = (dst)[i0], x1 = (dst)[i1];                                          \
            (dst)[i0] = x0 * c_ - x1 * s_;                                                        \
            (dst)[i1] = x0 * s_ + x1 * c_;                                                        \
        }                                                                                         \
    } while (0)
    double omax = 0.0;
    for (int h = 0; h < n_head; h++) {
        const int kvh = h / group;
        NORM_ROPE(qkv + h * hd, qn, qr);
        NORM_ROPE(qkv + q_dim + kvh * hd, kn, kr);
        double m = -INFINITY, l = 0.0;
        for (int j = j0; j <= pos; j++) {
            double d = 0.0;
            for (int i = 0; i < hd; i++)
                d += qr[i] * (j == pos ? kr[i] : (double)kc[(size_t)j * kv_dim + kvh * hd + i]);
            sc[j] = d / sqrt((double)hd);
            m = sc[j] > m ? sc[j] : m;
        }
        for (int j = j0; j <= pos; j++)
            l += exp(sc[j] - m);
        for (int i = 0; i < hd; i++) {
            double a = 0.0;
            for (int j = j0; j <= pos; j++)
                a += exp(sc[j] - m) * (j == pos ? (double)qkv[q_dim + kv_dim + kvh * hd + i]
                                                : (double)vc[(size_t)j * kv_dim + kvh * hd + i]);
            ref[h * hd + i] = a / l;
            omax = fabs(ref[h * hd + i]) > omax ? fabs(ref[h * hd + i]) : omax;
        }
    }
#undef NORM_ROPE

    if (cudaMalloc((void **)&dkc, cache_n * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dvc, cache_n * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dqkv, (size_t)n_qkv * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dqn, (size_t)hd * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dkn, (size_t)hd * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dcs, (size_t)n_ctx * half * 2 * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dout, (size_t)q_dim * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dstate, sizeof *dstate) != cudaSuccess ||
        (wo_type >= 0 && (upload_weight(&wo, &dwo) != 0 ||
                          cudaMalloc((void **)&dacc, (size_t)n_acc * sizeof *dacc) != cudaSuccess)))
        goto done;
    if (wo_type >= 0)
        cudaMemcpy(dacc, acc, (size_t)n_acc * sizeof *acc, cudaMemcpyHostToDevice);
    /* row pos of the caches starts as garbage: the kernel must write it */
    cudaMemcpy(dkc, kc, cache_n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dvc, vc, cache_n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dqkv, qkv, (size_t)n_qkv * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dqn, qn, (size_t)hd * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dkn, kn, (size_t)hd * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dcs, cs, (size_t)n_ctx * half * 2 * sizeof(float), cudaMemcpyHostToDevice);
    {
        const cuda_step_state st = {0, 0, pos, 0, 0};
        cudaMemcpy(dstate, &st, sizeof st, cudaMemcpyHostToDevice);
    }
    const cuda_attn_params p = {n_head, n_head_kv, hd, hd, hd, neox, eps, with_norm ? dqn : NULL,
                                with_norm ? dkn : NULL, (const float2 *)dcs, n_ctx, window};
    if (wo_type >= 0 && !cuda_attention_can_project(&p, &dwo))
        goto done;
    if (cuda_attention_decode(&p, dqkv, dkc, dvc, dstate, dout, wo_type >= 0 ? &dwo : NULL, dacc, 0) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess)
        goto done;
    cudaMemcpy(out, dout, (size_t)q_dim * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(row, dkc + (size_t)pos * kv_dim, (size_t)kv_dim * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(row + kv_dim, dvc + (size_t)pos * kv_dim, (size_t)kv_dim * sizeof(float), cudaMemcpyDeviceToHost);
    worst = 0.0;
    if (wo_type < 0) {
        for (int i = 0; i < q_dim; i++) {
            const double e = fabs((double)out[i] - ref[i]) / (omax > 0 ? omax : 1.0);
            worst = e > worst || isnan(e) ? e : worst;
        }
    } else {
        /* acc_v becomes what acc should hold: its start plus wo . out */
        double pmax = 0.0;
        for (int r = 0; r < n_embd; r++) {
            double a = 0.0;
            for (int i = 0; i < q_dim; i++)
                a += wo.value[(size_t)r * q_dim + i] * ref[i];
            acc_v[r] += a;
            pmax = fabs(a) > pmax ? fabs(a) : pmax;
        }
        cudaMemcpy(acc, dacc, (size_t)n_acc * sizeof *acc, cudaMemcpyDeviceToHost);
        for (int r = 0; r < n_embd; r++) {
            const double e = fabs(ldexp((double)(long long)acc[r], -32) - acc_v[r]) / (pmax > 0 ? pmax : 1.0);
            worst = e > worst || isnan(e) ? e : worst;
        }
    }
    /* V is stored as it came; K after its norm and rope, within rounding */
    *cache_ok = 1;
    for (int i = 0; i < kv_dim; i++)
        *cache_ok &= row[kv_dim + i] == qkv[q_dim + kv_dim + i] && isfinite(row[i]) && row[i] != kc[(size_t)pos * kv_dim + i];
done:
    cudaFree(dkc);
    cudaFree(dvc);
    cudaFree(dqkv);
    cudaFree(dqn);
    cudaFree(dkn);
    cudaFree(dcs);
    cudaFree(dout);
    cudaFree(dstate);
    cudaFree(dwo.w);
    cudaFree(dwo.d);
    cudaFree(dacc);
    if (wo_type >= 0)
        free_matrix(&wo);
    free(acc);
    free(acc_v);
    free(kc);
    free(vc);
    free(qkv);
    free(qn);
    free(kn);
    free(cs);
    free(out);
    free(row);
    free(ref);
    free(kr);
    free(sc);
    free(qr);
    return worst;
}

/* Prefill attention over a cache of pos0 + T rows (q as qk_rope_store leaves it) against
 * doubles on the host: worst error over the largest output. window > 0: token t sees
 * rows max(0, pos0 + t - window + 1) .. pos0 + t, and the rows below the first token's
 * window are NaN. */
static double prefill_attention_case(int n_head, int n_head_kv, int hd, int T, int pos0, int window) {
    const int kv_dim = n_head_kv * hd, q_dim = n_head * hd, row_len = q_dim + 2 * kv_dim, n_ctx = pos0 + T;
    const int group = n_head / n_head_kv;
    const int j0_min = window > 0 && pos0 >= window ? pos0 - window + 1 : 0; /* no token sees a row below */
    const size_t cache_n = (size_t)n_ctx * kv_dim;
    float *kc = malloc(cache_n * sizeof(float)), *vc = malloc(cache_n * sizeof(float));
    float *qkv = malloc((size_t)T * row_len * sizeof(float));
    uint16_t *out = malloc((size_t)T * q_dim * sizeof(uint16_t));
    double *ref = malloc((size_t)T * q_dim * sizeof(double)), *sc = malloc((size_t)n_ctx * sizeof(double));
    float *dkc = NULL, *dvc = NULL, *dqkv = NULL;
    uint16_t *dout = NULL;
    double worst = INFINITY;
    if (!kc || !vc || !qkv || !out || !ref || !sc)
        goto done;
    for (size_t i = 0; i < cache_n; i++) {
        kc[i] = 2.0f * rndf();
        vc[i] = rndf();
    }
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
            double m = -INFINITY, l = 0.0;
            for (int j = j0; j < n_keys; j++) {
                double d = 0.0;
                for (int i = 0; i < hd; i++)
                    d += (double)q[i] * kc[(size_t)j * kv_dim + kvh * hd + i];
                sc[j] = d / sqrt((double)hd);
                m = sc[j] > m ? sc[j] : m;
            }
            for (int j = j0; j < n_keys; j++)
                l += exp(sc[j] - m);
            for (int i = 0; i < hd; i++) {
                double a = 0.0;
                for (int j = j0; j < n_keys; j++)
                    a += exp(sc[j] - m) * vc[(size_t)j * kv_dim + kvh * hd + i];
                ref[(size_t)t * q_dim + h * hd + i] = a / l;
                omax = fabs(a / l) > omax ? fabs(a / l) : omax;
            }
        }
    }
    if (cudaMalloc((void **)&dkc, cache_n * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dvc, cache_n * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dqkv, (size_t)T * row_len * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dout, (size_t)T * q_dim * sizeof(uint16_t)) != cudaSuccess)
        goto done;
    cudaMemcpy(dkc, kc, cache_n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dvc, vc, cache_n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dqkv, qkv, (size_t)T * row_len * sizeof(float), cudaMemcpyHostToDevice);
    const cuda_attn_params p = {n_head, n_head_kv, hd, hd, hd, 1, 1e-6f, NULL, NULL, NULL, n_ctx, window};
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
    free(qkv);
    free(out);
    free(ref);
    free(sc);
    return worst;
}

/* The prefill GEMM, y (T, ldy) (+)= x (T, K) f16 . W^T, against doubles on the host
 * with W's values rounded to F16 as the kernel rounds them: worst |error| over
 * sum_k |x w| (the scale of F32 rounding in the sums). ldy = n_out + 1 when `odd_ldy`:
 * the element-by-element stores. */
static double gemm_case(const host_matrix *m, int T, int accumulate, int odd_ldy) {
    const int K = m->n_in, N = m->n_out, ldy = N + (odd_ldy ? 1 : 0);
    const size_t ny = (size_t)T * ldy;
    uint16_t *x = malloc((size_t)T * K * sizeof(uint16_t));
    float *y0 = malloc(ny * sizeof(float)), *y = malloc(ny * sizeof(float));
    double *w16 = malloc((size_t)N * K * sizeof(double));
    cuda_weight dw = {m->type, K, N, NULL, NULL, NULL};
    uint16_t *dx = NULL;
    float *dy = NULL;
    double worst = INFINITY;
    if (!x || !y0 || !y || !w16)
        goto done;
    for (size_t i = 0; i < (size_t)T * K; i++)
        x[i] = quant_f16_sat(2.0f * rndf());
    for (size_t i = 0; i < ny; i++)
        y0[i] = rndf();
    for (size_t i = 0; i < (size_t)N * K; i++)
        w16[i] = er_f16_to_f32(er_f32_to_f16((float)m->value[i]));
    if (upload_weight(m, &dw) != 0 || cudaMalloc((void **)&dx, (size_t)T * K * sizeof(uint16_t)) != cudaSuccess ||
        cudaMalloc((void **)&dy, ny * sizeof(float)) != cudaSuccess)
        goto done;
    cudaMemcpy(dx, x, (size_t)T * K * sizeof(uint16_t), cudaMemcpyHostToDevice);
    cudaMemcpy(dy, y0, ny * sizeof(float), cudaMemcpyHostToDevice);
    if (cuda_gemm(&dw, dx, T, dy, ldy, accumulate, 0) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
        goto done;
    cudaMemcpy(y, dy, ny * sizeof(float), cudaMemcpyDeviceToHost);
    worst = 0.0;
    for (int t = 0; t < T; t++) {
        for (int n = 0; n < ldy; n++) {
            const size_t at = (size_t)t * ldy + n;
            double ref = accumulate || n >= N ? y0[at] : 0.0, mag = 1e-30;
            for (int k = 0; n < N && k < K; k++) {
                const double p = er_f16_to_f32(x[(size_t)t * K + k]) * w16[(size_t)n * K + k];
                ref += p;
                mag += fabs(p);
            }
            const double e = n < N ? fabs((double)y[at] - ref) / mag : (y[at] == y0[at] ? 0.0 : INFINITY);
            worst = e > worst || isnan(e) ? e : worst;
        }
    }
done:
    cudaFree(dw.w);
    cudaFree(dw.d);
    cudaFree(dx);
    cudaFree(dy);
    free(x);
    free(y0);
    free(y);
    free(w16);
    return worst;
}

/* The upload's repack against the CPU reference: random rows quantized by our CPU
 * quantizer into the file's blocks, repacked on the device (cuda_repack), then a matvec
 * (worst error over max |y|, against doubles of the CPU's dequantized values) and the
 * embedding of every row (worst error over the largest value, against to_f32). */
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
        cuda_matvec(&dw, MV_STORE, dx, NULL, 0.0f, dy, NULL, NULL, 0) != cudaSuccess ||
        cuda_embed_tokens(&dw, dids, n_out, de, 0) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
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

void test_cuda(void) {
    if (!er_cuda_available()) {
        printf("cuda: no CUDA device here, nothing to test\n");
        return;
    }
    /* (n_out, n_in): Qwen3-0.6B's qkv, wo, gate|up, down; small and odd shapes */
    static const int shapes[][2] = {{4096, 1024}, {1024, 2048}, {6144, 1024}, {1024, 3072}, {64, 64},
                                    {300, 96}, {38, 160}, {2, 32}, {37, 768}, {5, 256}};
    for (int t = 0; t < CUDA_W_COUNT; t++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            if (shapes[s][1] % cuda_wtype_block(t) != 0)
                continue; /* rows of whole blocks (256 for the K types) */
            host_matrix m;
            CHECK(make_matrix(t, shapes[s][0], shapes[s][1], &m) == 0, "out of memory");
            for (int mode = MV_STORE; mode <= MV_NORM_ARGMAX; mode++) {
                for (int with_acc = 0; with_acc <= (mode != MV_NORM_ARGMAX); with_acc++) {
                    int argmax_ok = 0;
                    const double err = run_case(&m, mode, with_acc, &argmax_ok);
                    CHECK(err <= 1e-5 && argmax_ok, "%s %s%s (%d x %d): error %.3g of max |y|, argmax %s",
                          cuda_wtype_name(t), mode_name(mode), with_acc ? " + acc" : "", shapes[s][0], shapes[s][1], err,
                          argmax_ok ? "ok" : "wrong");
                }
            }
            free_matrix(&m);
        }
        /* rows that are not whole 16-byte chunks (the element path), for the types whose
         * rows may have any length (F16/BF16/F32) */
        if (cuda_wtype_block(t) == 1) {
            host_matrix m;
            CHECK(make_matrix(t, 50, 172, &m) == 0, "out of memory");
            for (int mode = MV_STORE; mode <= MV_NORM_ARGMAX; mode++) {
                int argmax_ok = 0;
                const double err = run_case(&m, mode, mode == MV_NORM_SWIGLU, &argmax_ok);
                CHECK(err <= 1e-5 && argmax_ok, "%s %s (50 x 172): error %.3g", cuda_wtype_name(t), mode_name(mode), err);
            }
            free_matrix(&m);
        }
    }
    /* the upload's repack of the file's blocks, for every type it repacks: the values of
     * the CPU reference (quant/), through the matvec and the embedding */
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
    /* prefill GEMM: (tokens, n_out, n_in) at Qwen3-0.6B's shapes, partial tiles of tokens
     * and rows, a single token, rows not 16-byte aligned (F16/BF16/F32: 172 and 44
     * elements, the element-by-element stages); the residual add and odd row strides */
    static const int gm[][3] = {{200, 1024, 3072}, {130, 4096, 1024}, {64, 64, 64}, {1, 2, 32},
                                {70, 100, 96},     {37, 50, 172},     {9, 20, 44}, {33, 70, 768}, {1, 3, 256}};
    for (int t = 0; t < CUDA_W_COUNT; t++) {
        for (size_t s = 0; s < sizeof gm / sizeof gm[0]; s++) {
            if (gm[s][2] % cuda_wtype_block(t) != 0)
                continue;
            host_matrix m;
            CHECK(make_matrix(t, gm[s][1], gm[s][2], &m) == 0, "out of memory");
            for (int variant = 0; variant < 2; variant++) {
                /* the F32 sums of the tensor cores vs doubles: ~1e-7 of sum |x w| typically */
                const double err = gemm_case(&m, gm[s][0], variant, variant);
                CHECK(err <= 1e-5, "%s GEMM %d tokens x %d x %d%s: error %.3g of sum |x w|", cuda_wtype_name(t), gm[s][0],
                      gm[s][1], gm[s][2], variant ? " (accumulate, odd ldy)" : "", err);
                if (s == 0 && variant == 0)
                    printf("  %s GEMM %d x %d x %d: error %.2e of sum |x w|\n", cuda_wtype_name(t), gm[s][0], gm[s][1],
                           gm[s][2], err);
            }
            free_matrix(&m);
        }
    }
    /* the output head of Qwen3, in the quantized types (the float ones: 0.6-1.2 GB here) */
    for (int t = 0; t < CUDA_W_COUNT; t++) {
        if (cuda_wtype_block(t) == 1)
            continue;
        host_matrix m;
        CHECK(make_matrix(t, 151936, 1024, &m) == 0, "out of memory");
        int argmax_ok = 0;
        const double err = run_case(&m, MV_NORM_ARGMAX, 0, &argmax_ok);
        CHECK(err <= 1e-5 && argmax_ok, "%s head (151936 x 1024): error %.3g, argmax %s", cuda_wtype_name(t), err,
              argmax_ok ? "ok" : "wrong");
        free_matrix(&m);
    }
    /* decode attention: Qwen3-0.6B's heads at 1 to 3,001 positions (one round of the
     * cluster is 128 keys), a Llama-like head without Q/K norm and with the original
     * RoPE pairing, stories260K's 8-dim heads, a head of 80 dims (not whole warps) */
    static const int att[][6] = {{16, 8, 128, 1, 1, 0},   {16, 8, 128, 1, 1, 1},   {16, 8, 128, 1, 1, 15},
                                 {16, 8, 128, 1, 1, 127}, {16, 8, 128, 1, 1, 128}, {16, 8, 128, 1, 1, 129},
                                 {16, 8, 128, 1, 1, 1000}, {16, 8, 128, 1, 1, 3000}, {8, 2, 64, 0, 0, 0},
                                 {8, 2, 64, 0, 0, 200},   {8, 4, 8, 0, 0, 0},      {8, 4, 8, 0, 0, 50},
                                 {4, 4, 80, 1, 1, 33}};
    for (size_t i = 0; i < sizeof att / sizeof att[0]; i++) {
        int cache_ok = 0;
        const double err =
            attention_case(att[i][0], att[i][1], att[i][2], att[i][5], 0, att[i][3], att[i][4], -1, 0, &cache_ok);
        CHECK(err <= 1e-5 && cache_ok, "attention %d/%d heads of %d, position %d: error %.3g of max |out|, cache %s",
              att[i][0], att[i][1], att[i][2], att[i][5], err, cache_ok ? "written" : "NOT written");
    }
    /* with the output projection folded in: every weight type at Qwen3-0.6B's shape (one
     * and several rounds), 64-dim heads with n_embd not a multiple of the cluster's 8
     * blocks, and fewer rows than blocks */
    static const int proj[][6] = {{16, 8, 128, 0, 1024, -1}, {16, 8, 128, 129, 1024, -1}, {16, 8, 128, 1000, 1024, -1},
                                  {8, 2, 64, 200, 100, -1},  {8, 2, 64, 3, 5, -1}};
    for (size_t i = 0; i < sizeof proj / sizeof proj[0]; i++) {
        for (int t = 0; t < CUDA_W_COUNT; t++) {
            const cuda_attn_params p = {.n_head = proj[i][0], .n_head_kv = proj[i][1], .head_dim = proj[i][2],
                                        .head_dim_v = proj[i][2], .n_rot = proj[i][2], .rope_neox = 1,
                                        .eps = 1e-6f, .n_ctx = proj[i][3] + 1};
            const cuda_weight w = {t, proj[i][0] * proj[i][2], proj[i][4], NULL, NULL, NULL};
            if (!cuda_attention_can_project(&p, &w)) {
                /* Q8_0, Q4_0 and the float types always fold in at these shapes; the
                 * others where their scales come in whole 4-byte words per head */
                CHECK(t > CUDA_W_Q4_0, "attention would not fold in a %s wo", cuda_wtype_name(t));
                continue;
            }
            int cache_ok = 0;
            const double err = attention_case(proj[i][0], proj[i][1], proj[i][2], proj[i][3], 0, 1, 1, t, proj[i][4],
                                              &cache_ok);
            CHECK(err <= 1e-5 && cache_ok,
                  "attention + %s wo %d/%d heads of %d, position %d, n_embd %d: error %.3g of max |wo out|, cache %s",
                  cuda_wtype_name(t), proj[i][0], proj[i][1], proj[i][2], proj[i][3], proj[i][4], err,
                  cache_ok ? "written" : "NOT written");
            if (i == 2)
                printf("  attention + %s wo at position 1000: error %.2e\n", cuda_wtype_name(t), err);
        }
    }
    /* the dense Qwen3 sizes' attention (heads, KV heads, n_embd: 0.6B, 1.7B, 4B, 8B, 14B,
     * 32B), wo folded in wherever the kernel takes it, for every type: every launch must
     * succeed (Qwen3-4B's did not: its folded wo and static arrays passed 48 KB) */
    static const int sizes[][3] = {{16, 8, 1024}, {16, 8, 2048}, {32, 8, 2560}, {32, 8, 4096}, {40, 8, 5120},
                                   {64, 8, 5120}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (int t = -1; t < CUDA_W_COUNT; t++) {
            const cuda_attn_params p = {sizes[i][0], sizes[i][1], 128, 128, 128, 1, 1e-6f, NULL, NULL, NULL, 1, 0};
            const cuda_weight w = {t, sizes[i][0] * 128, sizes[i][2], NULL, NULL, NULL};
            if (t >= 0 && !cuda_attention_can_project(&p, &w))
                continue; /* wo runs as a matvec: the matvec cases above */
            int cache_ok = 0;
            const double err = attention_case(sizes[i][0], sizes[i][1], 128, 129, 0, 1, 1, t, sizes[i][2], &cache_ok);
            CHECK(err <= 1e-5 && cache_ok, "attention %d/%d heads of 128, %s wo, n_embd %d: error %.3g, cache %s",
                  sizes[i][0], sizes[i][1], t >= 0 ? cuda_wtype_name(t) : "no", sizes[i][2], err,
                  cache_ok ? "written" : "NOT written");
        }
    }
    {
        /* heads of 8 or 80 dims: not whole chunks of every type; wo runs as a matvec */
        const cuda_attn_params p8 = {8, 4, 8, 8, 8, 0, 1e-6f, NULL, NULL, NULL, 1, 0};
        const cuda_attn_params p80 = {4, 4, 80, 80, 80, 1, 1e-6f, NULL, NULL, NULL, 1, 0};
        const cuda_weight w8 = {CUDA_W_F32, 64, 64, NULL, NULL, NULL}, w80 = {CUDA_W_Q8_0, 320, 320, NULL, NULL, NULL};
        CHECK(!cuda_attention_can_project(&p8, &w8) && !cuda_attention_can_project(&p80, &w80),
              "attention would fold in wo for 8- or 80-dim heads");
    }
    /* decode attention with a sliding window (n_head, n_head_kv, head_dim, n_embd,
     * position, window): positions inside the window (it sees every row) and beyond it,
     * windows of 1 (the new row alone), 4 and 8 (a part of one warp's keys, not aligned
     * to them), 130 (more than one round of the cluster, 128 keys) and more than the
     * context; head sizes 128 and 64 (Qwen3, Llama-like), 256 (Gemma-3: n_embd 1152,
     * window 512), 80 and 8 (lanes past the head). Without wo, and folded in for every
     * type the kernel takes it for. */
    static const int win[][6] = {
        {16, 8, 128, 1024, 0, 1},      {16, 8, 128, 1024, 5, 1},     {16, 8, 128, 1024, 1000, 1},
        {16, 8, 128, 1024, 3, 4},      {16, 8, 128, 1024, 4, 4},     {16, 8, 128, 1024, 201, 4},
        {16, 8, 128, 1024, 7, 8},      {16, 8, 128, 1024, 8, 8},     {16, 8, 128, 1024, 9, 8},
        {16, 8, 128, 1024, 130, 8},    {16, 8, 128, 1024, 129, 130}, {16, 8, 128, 1024, 130, 130},
        {16, 8, 128, 1024, 131, 130},  {16, 8, 128, 1024, 300, 130}, {16, 8, 128, 1024, 3000, 130},
        {16, 8, 128, 1024, 100, 5000}, {16, 8, 128, 1024, 3000, 4096}, {8, 2, 64, 100, 0, 1},
        {8, 2, 64, 100, 200, 1},       {8, 2, 64, 100, 3, 4},        {8, 2, 64, 100, 57, 4},
        {8, 2, 64, 100, 50, 8},        {8, 2, 64, 100, 129, 130},    {8, 2, 64, 100, 500, 130},
        {8, 2, 64, 100, 100, 5000},    {4, 1, 256, 1152, 600, 512},  {4, 1, 256, 1152, 511, 512},
        {4, 1, 256, 1152, 40, 8},      {4, 4, 80, 320, 33, 8},       {4, 4, 80, 320, 300, 130},
        {8, 4, 8, 64, 50, 4},          {8, 4, 8, 64, 3, 8}};
    double win_worst = 0.0;
    for (size_t i = 0; i < sizeof win / sizeof win[0]; i++) {
        const int nh = win[i][0], nkv = win[i][1], hd = win[i][2], n_embd = win[i][3], pos = win[i][4];
        const int window = win[i][5];
        for (int t = -1; t < CUDA_W_COUNT; t++) {
            const cuda_attn_params p = {nh, nkv, hd, hd, hd, 1, 1e-6f, NULL, NULL, NULL, pos + 1, window};
            const cuda_weight w = {t, nh * hd, n_embd, NULL, NULL, NULL};
            if (t >= 0 && !cuda_attention_can_project(&p, &w))
                continue;
            int cache_ok = 0;
            const double err = attention_case(nh, nkv, hd, pos, window, 1, 1, t, n_embd, &cache_ok);
            CHECK(err <= 1e-5 && cache_ok,
                  "attention %d/%d heads of %d, position %d, window %d, %s wo: error %.3g, cache %s", nh, nkv, hd, pos,
                  window, t >= 0 ? cuda_wtype_name(t) : "no", err, cache_ok ? "written" : "NOT written");
            win_worst = err > win_worst || isnan(err) ? err : win_worst;
        }
    }
    printf("  attention with sliding windows: worst error %.2e\n", win_worst);
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
        const double err = prefill_attention_case(pre[i][0], pre[i][1], pre[i][2], pre[i][3], pre[i][4], pre[i][5]);
        CHECK(err <= 2e-3,
              "prefill attention %d/%d heads of %d, %d tokens after %d, window %d: error %.3g of max |out|",
              pre[i][0], pre[i][1], pre[i][2], pre[i][3], pre[i][4], pre[i][5], err);
        printf("  prefill attention %d/%d heads of %d, %d tokens after %d, window %d: error %.2e\n", pre[i][0],
               pre[i][1], pre[i][2], pre[i][3], pre[i][4], pre[i][5], err);
    }
}
#endif
