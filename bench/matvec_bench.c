/*
 * matvec_bench.c - single-thread CPU matrix-vector throughput per weight type, through the
 * kernel table (backend/cpu/kernels.h): quantize the activation row once, then one vec_dot
 * per weight row, for a 4096 x 4096 matrix. Reports GB/s of weight bytes read.
 *
 *   make bench            (or: build/bench/matvec_bench [n_rows n_cols])
 *
 * Two numbers per type:
 *   hot   the same matrix every time: it stays in the last-level cache when it fits, so
 *         this measures the kernel's compute rate;
 *   cold  a rotation over copies of the matrix totalling >= 1 GiB: every byte comes from
 *         DRAM, as in decoding a real model whose weights exceed the cache.
 * plus the scalar reference's hot rate (the AVX2 speed-up), and a plain read of the cold
 * working set with AVX2 loads as the machine's single-thread DRAM bound, and the core's
 * AVX2 FMA peak (the prefill's compute bound). The machine is
 * shared and noisy: compare the ratios within one run, not numbers across runs. Each
 * figure is the best of several timed repetitions.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/kernels.h"
#include "quant/types.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 0x853c49e6748fea9bull;
static float gauss(void) {
    double u[2];
    for (int i = 0; i < 2; i++) {
        rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
        u[i] = ((rng * 0x2545f4914f6cdd1dull >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    }
    return (float)(sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]));
}

static volatile float sink;

/* One matvec: y = W x over n_rows rows; returns seconds. */
static double matvec(const cpu_kernels *k, const uint8_t *w, size_t row_size, int64_t n_rows, int64_t n_cols,
                     const float *x, void *xq, float *y) {
    const double t0 = now();
    k->quantize_row(x, xq, n_cols);
    for (int64_t r = 0; r < n_rows; r++)
        y[r] = k->vec_dot(w + (size_t)r * row_size, xq, n_cols);
    const double t = now() - t0;
    sink = y[n_rows / 2];
    return t;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static double read_all(const uint8_t *p, size_t n) {
    const double t0 = now();
    __m256i acc = _mm256_setzero_si256();
    for (size_t i = 0; i + 32 <= n; i += 32)
        acc = _mm256_add_epi64(acc, _mm256_loadu_si256((const __m256i *)(p + i)));
    const double t = now() - t0;
    long long out[4];
    _mm256_storeu_si256((__m256i *)out, acc);
    sink = (float)(out[0] + out[1] + out[2] + out[3]);
    return t;
}
/* Seconds for `iters` rounds of 12 independent 8-wide FMAs (192 flops a round): enough
 * chains to cover the FMA latency on two ports, so this is the core's f32 peak, the
 * bound of the f32 prefill tile (fast_avx2.c sgemm_6x16_avx2). */
__attribute__((target("avx2,fma"))) static double fma_rounds(long iters) {
    __m256 acc[12];
    for (int k = 0; k < 12; k++)
        acc[k] = _mm256_set1_ps((float)k);
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    const double t0 = now();
    for (long i = 0; i < iters; i++) {
#pragma GCC unroll 12 /* the accumulators stay in registers only when unrolled */
        for (int k = 0; k < 12; k++)
            acc[k] = _mm256_fmadd_ps(acc[k], a, b);
    }
    const double t = now() - t0;
    float out[8];
    for (int k = 1; k < 12; k++)
        acc[0] = _mm256_add_ps(acc[0], acc[k]);
    _mm256_storeu_ps(out, acc[0]);
    sink = out[0];
    return t;
}
#define HAVE_FMA_PEAK 1
#else
static double read_all(const uint8_t *p, size_t n) {
    const double t0 = now();
    uint64_t acc = 0;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        acc += v;
    }
    sink = (float)acc;
    return now() - t0;
}
#endif

/* Two threads each reading half of a buffer: the two-thread DRAM bound that decoding on
 * two threads is compared with. */
typedef struct read_half {
    const uint8_t *p;
    size_t n;
} read_half;

static void *read_half_main(void *arg) {
    const read_half *r = arg;
    read_all(r->p, r->n);
    return NULL;
}

static double read_two_threads(const uint8_t *p, size_t n) {
    pthread_t th;
    read_half halves[2] = {{p, n / 2}, {p + n / 2, n - n / 2}};
    const double t0 = now();
    if (pthread_create(&th, NULL, read_half_main, &halves[1]) != 0)
        return INFINITY;
    read_half_main(&halves[0]);
    pthread_join(th, NULL);
    return now() - t0;
}

int main(int argc, char **argv) {
    int64_t n_rows = 4096, n_cols = 4096;
    if (argc == 3) {
        n_rows = atoll(argv[1]);
        n_cols = atoll(argv[2]);
    }
    if (n_rows <= 0 || n_cols <= 0 || n_cols % 256 != 0) {
        fprintf(stderr, "usage: matvec_bench [n_rows n_cols]   (n_cols a multiple of 256)\n");
        return 1;
    }
    static const uint32_t types[] = {ER_TYPE_F32,  ER_TYPE_F16,  ER_TYPE_BF16, ER_TYPE_Q8_0, ER_TYPE_Q6_K,
                                     ER_TYPE_Q5_1, ER_TYPE_Q5_0, ER_TYPE_Q5_K, ER_TYPE_Q4_1, ER_TYPE_Q4_0,
                                     ER_TYPE_Q4_K, ER_TYPE_Q3_K, ER_TYPE_Q2_K};
    enum { PANEL = 64, REPS = 5 };
    const size_t cold_bytes = (size_t)1 << 30;
    float *x = malloc((size_t)n_cols * sizeof *x), *y = malloc((size_t)n_rows * sizeof *y);
    float *panel = malloc((size_t)PANEL * (size_t)n_cols * sizeof *panel);
    void *xq = malloc((size_t)n_cols * 4);
    if (!x || !y || !panel || !xq)
        return 1;
    for (int64_t i = 0; i < n_cols; i++)
        x[i] = gauss();
    for (int64_t i = 0; i < PANEL * n_cols; i++)
        panel[i] = gauss() * 0.02f;

    printf("matvec %lld x %lld, one thread, GB/s of weight bytes (best of %d); AVX2 kernels: %s\n",
           (long long)n_rows, (long long)n_cols, REPS, cpu_kernels_avx2(ER_TYPE_Q4_0) ? "yes" : "no (scalar only)");
    printf("%-5s %7s %9s %9s %9s %9s %8s\n", "type", "bits/w", "MiB", "hot", "cold", "scalar", "speedup");
    double stream = 0, stream2 = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const er_type_traits *t = er_type_get(types[ti]);
        const cpu_kernels *best = cpu_kernels_get(types[ti]), *ref = cpu_kernels_ref(types[ti]);
        const size_t row_size = er_type_row_size(t, n_cols), mat_size = row_size * (size_t)n_rows;
        const size_t copies = (cold_bytes + mat_size - 1) / mat_size;
        uint8_t *w = malloc(mat_size * copies);
        if (!w) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        /* quantize a panel of distinct rows, then tile it (the bytes, not their values,
         * set the speed) */
        t->from_f32(panel, w, PANEL * n_cols);
        for (int64_t r = PANEL; r < n_rows; r++)
            memcpy(w + (size_t)r * row_size, w + (size_t)(r % PANEL) * row_size, row_size);
        for (size_t c = 1; c < copies; c++)
            memcpy(w + c * mat_size, w, mat_size);
        double hot = 1e9, cold = 1e9, scalar = 1e9;
        for (int rep = 0; rep < REPS; rep++) {
            hot = fmin(hot, matvec(best, w, row_size, n_rows, n_cols, x, xq, y));
            double tc = 0;
            for (size_t c = 0; c < copies; c++)
                tc += matvec(best, w + c * mat_size, row_size, n_rows, n_cols, x, xq, y);
            cold = fmin(cold, tc / (double)copies);
            if (rep < 2)
                scalar = fmin(scalar, matvec(ref, w, row_size, n_rows, n_cols, x, xq, y));
        }
        if (ti == 0) {
            for (int rep = 0; rep < REPS; rep++)
                stream = fmax(stream, (double)(mat_size * copies) / read_all(w, mat_size * copies) / 1e9);
            for (int rep = 0; rep < REPS; rep++)
                stream2 = fmax(stream2, (double)(mat_size * copies) / read_two_threads(w, mat_size * copies) / 1e9);
        }
        const double gb = (double)mat_size / 1e9;
        printf("%-5s %7.3f %9.2f %9.2f %9.2f %9.2f %7.1fx\n", t->name, 8.0 * (double)row_size / (double)n_cols,
               (double)mat_size / 1048576.0, gb / hot, gb / cold, gb / scalar, scalar / hot);
        fflush(stdout);
        free(w);
    }
    printf("plain AVX2 read of a 1 GiB buffer: %.2f GB/s (the single-thread DRAM bound), %.2f GB/s on two threads\n",
           stream, stream2);
#ifdef HAVE_FMA_PEAK
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        double best = INFINITY;
        for (int rep = 0; rep < 5; rep++)
            best = fmin(best, fma_rounds(50000000));
        printf("AVX2 FMA peak of one core: %.1f GFLOP/s (the bound of the f32 prefill tile)\n",
               192.0 * 50000000 / best / 1e9);
    }
#endif
    free(x);
    free(y);
    free(panel);
    free(xq);
    return 0;
}
