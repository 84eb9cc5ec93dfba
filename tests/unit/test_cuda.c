/*
 * test_cuda.c - the CUDA decode kernels against a double-precision host computation on
 * random inputs: every weight type of the device layout (kernels.h), every matvec mode
 * (plain, residual add, RMSNorm folded in, SwiGLU, the head's argmax), at the shapes of
 * Qwen3-0.6B, of the output head, and at small odd shapes that take the fallbacks
 * (rows not a whole number of 16-byte chunks, slices not 16-byte aligned).
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

/* A random matrix in the device layout on the host, and its values as doubles. */
typedef struct host_matrix {
    int type;
    int n_out, n_in;
    uint8_t *w;    /* (n_out, row bytes) */
    uint16_t *d;   /* (n_out, n_in / 32) f16 scales, or NULL */
    double *value; /* (n_out, n_in) what the layout means */
} host_matrix;

static int make_matrix(int type, int n_out, int n_in, host_matrix *m) {
    const size_t rb = cuda_row_bytes(type, n_in), nb = (size_t)n_in / 32;
    memset(m, 0, sizeof *m);
    m->type = type;
    m->n_out = n_out;
    m->n_in = n_in;
    m->w = malloc((size_t)n_out * rb);
    m->value = malloc((size_t)n_out * (size_t)n_in * sizeof(double));
    if (type == CUDA_W_Q8_0 || type == CUDA_W_Q4_0)
        m->d = malloc((size_t)n_out * nb * sizeof(uint16_t));
    if (!m->w || !m->value || ((type == CUDA_W_Q8_0 || type == CUDA_W_Q4_0) && !m->d))
        return -1;
    for (int r = 0; r < n_out; r++) {
        uint8_t *row = m->w + (size_t)r * rb;
        double *v = m->value + (size_t)r * n_in;
        if (m->d)
            for (size_t b = 0; b < nb; b++)
                m->d[(size_t)r * nb + b] = quant_f16_sat(0.01f + 0.02f * (rndf() + 1.0f));
        for (int i = 0; i < n_in; i++) {
            switch (type) {
            case CUDA_W_Q8_0: {
                const uint8_t q = (uint8_t)rnd();
                row[i] = q;
                v[i] = (double)((int)q - 128) * er_f16_to_f32(m->d[(size_t)r * nb + i / 32]);
                break;
            }
            case CUDA_W_Q4_0: {
                /* byte j of block b: element j low nibble, j + 16 high nibble */
                const int b = i / 32, j = i % 32;
                uint8_t *byte = row + b * 16 + (j & 15);
                const uint8_t q = (uint8_t)(rnd() & 15);
                *byte = j < 16 ? (uint8_t)((*byte & 0xf0) | q) : (uint8_t)((*byte & 0x0f) | (q << 4));
                v[i] = (double)((int)q - 8) * er_f16_to_f32(m->d[(size_t)r * nb + b]);
                break;
            }
            case CUDA_W_F16: {
                const uint16_t h = quant_f16_sat(rndf());
                memcpy(row + 2 * i, &h, 2);
                v[i] = er_f16_to_f32(h);
                break;
            }
            case CUDA_W_BF16: {
                const uint16_t h = f32_to_bf16(rndf());
                memcpy(row + 2 * i, &h, 2);
                v[i] = er_bf16_to_f32(h);
                break;
            }
            default: {
                const float f = rndf();
                memcpy(row + 4 * i, &f, 4);
                v[i] = f;
                break;
            }
            }
        }
    }
    return 0;
}

static void free_matrix(host_matrix *m) {
    free(m->w);
    free(m->d);
    free(m->value);
}

static const char *type_name(int t) {
    static const char *names[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0"};
    return names[t];
}

static const char *mode_name(int mode) {
    static const char *names[] = {"store", "add", "norm_store", "norm_swiglu", "norm_argmax"};
    return names[mode];
}

/* One matvec on the device vs the host; returns the worst |error| / max |y|. */
static double run_case(const host_matrix *m, int mode, int *argmax_ok) {
    const int n_in = m->n_in, n_out = m->n_out;
    const int n_y = mode == MV_NORM_SWIGLU ? n_out / 2 : n_out;
    const size_t rb = cuda_row_bytes(m->type, n_in), nb = (size_t)n_in / 32;
    const float eps = 1e-6f;
    float *x = malloc((size_t)n_in * sizeof(float)), *nw = malloc((size_t)n_in * sizeof(float));
    float *y0 = malloc((size_t)n_y * sizeof(float)), *y = malloc((size_t)n_y * sizeof(float));
    double *ref = malloc((size_t)n_y * sizeof(double)), *xn = malloc((size_t)n_in * sizeof(double));
    cuda_weight dw = {m->type, n_in, n_out, NULL, NULL};
    float *dx = NULL, *dnw = NULL, *dy = NULL;
    cuda_step_state *dstate = NULL;
    double worst = INFINITY;
    *argmax_ok = 1;
    if (!x || !nw || !y0 || !y || !ref || !xn)
        goto done;
    for (int i = 0; i < n_in; i++) {
        x[i] = 2.0f * rndf();
        nw[i] = 1.0f + 0.5f * rndf();
    }
    for (int i = 0; i < n_y; i++)
        y0[i] = rndf();

    /* the host: doubles throughout */
    const int norm = mode == MV_NORM_STORE || mode == MV_NORM_SWIGLU || mode == MV_NORM_ARGMAX;
    double ss = 0.0;
    for (int i = 0; i < n_in; i++)
        ss += (double)x[i] * x[i];
    const double scale = 1.0 / sqrt(ss / n_in + eps);
    for (int i = 0; i < n_in; i++)
        xn[i] = norm ? x[i] * scale * nw[i] : x[i];
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
        ref[r] = mode == MV_ADD ? y0[r] + a : a;
        ymax = fabs(ref[r]) > ymax ? fabs(ref[r]) : ymax;
        best = ref[r] > ref[best] ? r : best;
    }

    /* the device, padded as upload_matrix pads */
    if (cudaMalloc(&dw.w, (size_t)n_out * rb + 16) != cudaSuccess ||
        (m->d && cudaMalloc(&dw.d, (size_t)n_out * nb * 2 + 16) != cudaSuccess) ||
        cudaMalloc((void **)&dx, (size_t)n_in * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dnw, (size_t)n_in * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dy, (size_t)n_y * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&dstate, sizeof *dstate) != cudaSuccess)
        goto done;
    cudaMemcpy(dw.w, m->w, (size_t)n_out * rb, cudaMemcpyHostToDevice);
    if (m->d)
        cudaMemcpy(dw.d, m->d, (size_t)n_out * nb * 2, cudaMemcpyHostToDevice);
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
        *argmax_ok = got == best || fabs(ref[got] - ref[best]) <= 1e-5 * ymax;
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
    return worst;
}

void test_cuda(void) {
    if (!er_cuda_available()) {
        printf("cuda: no CUDA device here, nothing to test\n");
        return;
    }
    /* (n_out, n_in): Qwen3-0.6B's qkv, wo, gate|up, down; small and odd shapes */
    static const int shapes[][2] = {{4096, 1024}, {1024, 2048}, {6144, 1024}, {1024, 3072}, {64, 64},
                                    {300, 96}, {38, 160}, {2, 32}};
    for (int t = CUDA_W_F32; t <= CUDA_W_Q4_0; t++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            host_matrix m;
            CHECK(make_matrix(t, shapes[s][0], shapes[s][1], &m) == 0, "out of memory");
            for (int mode = MV_STORE; mode <= MV_NORM_ARGMAX; mode++) {
                int argmax_ok = 0;
                const double err = run_case(&m, mode, &argmax_ok);
                CHECK(err <= 1e-5 && argmax_ok, "%s %s (%d x %d): error %.3g of max |y|, argmax %s", type_name(t),
                      mode_name(mode), shapes[s][0], shapes[s][1], err, argmax_ok ? "ok" : "wrong");
            }
            free_matrix(&m);
        }
        /* F16/BF16/F32 rows that are not whole 16-byte chunks (the element path) */
        if (t <= CUDA_W_BF16) {
            host_matrix m;
            CHECK(make_matrix(t, 50, 172, &m) == 0, "out of memory");
            for (int mode = MV_STORE; mode <= MV_NORM_ARGMAX; mode++) {
                int argmax_ok = 0;
                const double err = run_case(&m, mode, &argmax_ok);
                CHECK(err <= 1e-5 && argmax_ok, "%s %s (50 x 172): error %.3g", type_name(t), mode_name(mode), err);
            }
            free_matrix(&m);
        }
    }
    /* the output head of Qwen3 */
    for (int t = CUDA_W_Q8_0; t <= CUDA_W_Q4_0; t++) {
        host_matrix m;
        CHECK(make_matrix(t, 151936, 1024, &m) == 0, "out of memory");
        int argmax_ok = 0;
        const double err = run_case(&m, MV_NORM_ARGMAX, &argmax_ok);
        CHECK(err <= 1e-5 && argmax_ok, "%s head (151936 x 1024): error %.3g, argmax %s", type_name(t), err,
              argmax_ok ? "ok" : "wrong");
        free_matrix(&m);
    }
}
#endif
