/*
 * test_cpu.c - the CPU fast path: the thread pool (every thread runs every task once,
 * barriers hold), the tiled Q8_0 kernel against the table's vec_dot (bit for bit), the
 * threaded fast matmul against the reference matmul per weight type at several shapes
 * (f32 activation types within float rounding, 8-bit activation types within the
 * quantization bound, and bit-identical across thread counts and batch sizes), and the
 * whole model: prefill == token-by-token decode on both paths, fast vs reference logits.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/fast.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/threadpool.h"
#include "edgerunner.h"
#include "model/model.h"
#include "quant/types.h"
#include "test.h"

typedef struct pool_check {
    cpu_pool *pool;
    atomic_int runs[8];
    atomic_int phase_errors;
    atomic_int arrived;
} pool_check;

static void pool_task(void *arg, int ith, int nth) {
    pool_check *p = arg;
    atomic_fetch_add(&p->runs[ith], 1);
    atomic_fetch_add(&p->arrived, 1);
    cpu_pool_barrier(p->pool);
    /* after the barrier every thread has arrived */
    if (atomic_load(&p->arrived) < nth)
        atomic_fetch_add(&p->phase_errors, 1);
    cpu_pool_barrier(p->pool);
}

static void test_pool(void) {
    for (int n = 1; n <= 4; n++) {
        cpu_pool *pool = NULL;
        CHECK(cpu_pool_create(n, &pool) == ER_OK && pool, "pool of %d", n);
        if (!pool)
            continue;
        CHECK(cpu_pool_size(pool) == n, "pool size %d", cpu_pool_size(pool));
        pool_check pc = {.pool = pool};
        enum { N_TASKS = 500 };
        int bad = 0;
        for (int r = 0; r < N_TASKS; r++) {
            atomic_store(&pc.arrived, 0);
            cpu_pool_run(pool, pool_task, &pc);
            bad += atomic_load(&pc.arrived) != n;
        }
        for (int i = 0; i < n; i++)
            CHECK(atomic_load(&pc.runs[i]) == N_TASKS, "pool %d: thread %d ran %d of %d tasks", n, i,
                  atomic_load(&pc.runs[i]), N_TASKS);
        CHECK(bad == 0 && atomic_load(&pc.phase_errors) == 0, "pool %d: %d incomplete tasks, %d barrier errors", n,
              bad, atomic_load(&pc.phase_errors));
        cpu_pool_free(pool);
    }
    cpu_pool_free(NULL);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

/* gemm_q8_0 computes each (row, token) exactly as vec_dot does */
static void test_gemm_q8_0(void) {
    cpu_gemm_fn gemm = cpu_gemm_get(ER_TYPE_Q8_0);
    const cpu_kernels *k = cpu_kernels_get(ER_TYPE_Q8_0);
    if (!gemm) {
        printf("       (no AVX2: the tiled Q8_0 kernel is not tested)\n");
        return;
    }
    const er_type_traits *t = er_type_get(ER_TYPE_Q8_0);
    static const int64_t rows[] = {1, 3, 4, 5, 17}, toks[] = {1, 2, 3, 7}, ns[] = {32, 256, 1024};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        const int64_t n = ns[a], R = 17, T = 7;
        const size_t rs = er_type_row_size(t, n);
        float *f = malloc((size_t)(R > T ? R : T) * (size_t)n * sizeof *f);
        uint8_t *w = malloc((size_t)R * rs), *x = malloc((size_t)T * rs);
        float *y = malloc((size_t)R * T * sizeof *y);
        for (int64_t i = 0; i < R * n; i++)
            f[i] = frand();
        for (int64_t r = 0; r < R; r++)
            t->from_f32(f + r * n, w + (size_t)r * rs, n);
        for (int64_t i = 0; i < T * n; i++)
            f[i] = frand();
        for (int64_t j = 0; j < T; j++)
            k->quantize_row(f + j * n, x + (size_t)j * rs, n);
        for (size_t b = 0; b < sizeof rows / sizeof rows[0]; b++)
            for (size_t c = 0; c < sizeof toks / sizeof toks[0]; c++) {
                const int64_t nr = rows[b], nt = toks[c];
                gemm(w, rs, nr, x, rs, nt, y, R, n);
                int same = 1;
                for (int64_t j = 0; j < nt; j++)
                    for (int64_t r = 0; r < nr; r++) {
                        const float want = k->vec_dot(w + (size_t)r * rs, x + (size_t)j * rs, n);
                        same &= memcmp(&want, &y[j * R + r], sizeof want) == 0;
                    }
                CHECK(same, "gemm q8_0 %lld rows x %lld tokens x %lld: == vec_dot", (long long)nr, (long long)nt,
                      (long long)n);
            }
        free(f);
        free(w);
        free(x);
        free(y);
    }
}

/* the fast dequantizers of the f32 prefill == the types' reference, bit for bit */
static void test_fast_to_f32(void) {
    static const uint32_t types[] = {ER_TYPE_Q8_0, ER_TYPE_Q4_K, ER_TYPE_Q4_0, ER_TYPE_Q6_K, ER_TYPE_F16};
    enum { N = 1024 };
    float *f = malloc(N * sizeof *f), *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    uint8_t *q = malloc(4 * N);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const er_type_traits *tr = er_type_get(types[ti]);
        for (int i = 0; i < N; i++)
            f[i] = 3.0f * frand() * (i % 97 == 0 ? 50.0f : 1.0f);
        tr->from_f32(f, q, N);
        tr->to_f32(q, a, N);
        cpu_fast_to_f32(types[ti], tr)(q, b, N);
        CHECK(!memcmp(a, b, N * sizeof *a), "cpu_fast_to_f32 %s == reference to_f32, bit for bit", tr->name);
    }
    free(f);
    free(a);
    free(b);
    free(q);
}

/* the blocked prompt attention vs the reference attention, token by token: GQA, a value
 * width that is not whole panels, a block and a remainder, a prefix already cached */
static void test_fast_attention_blocked(void) {
    static const int64_t cases[][5] = {{4, 2, 64, 40, 50}, {8, 8, 128, 128, 33}, {2, 1, 8, 8, 97}}; /* heads, kv heads, hd, hd_v, tokens */
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        model_config c;
        memset(&c, 0, sizeof c);
        c.n_head = cases[ci][0], c.n_head_kv = cases[ci][1], c.head_dim = cases[ci][2], c.head_dim_v = cases[ci][3];
        const int64_t n_tok = cases[ci][4], pos0 = 7, n_ctx = pos0 + n_tok + 5;
        const int64_t q_dim = c.n_head * c.head_dim, o_dim = c.n_head * c.head_dim_v;
        float *q = malloc((size_t)(n_tok * q_dim) * sizeof(float));
        float *k = malloc((size_t)(n_ctx * c.n_head_kv * c.head_dim) * sizeof(float));
        float *v = malloc((size_t)(n_ctx * c.n_head_kv * c.head_dim_v) * sizeof(float));
        float *ref = malloc((size_t)(n_tok * o_dim) * sizeof(float)), *out = malloc((size_t)(n_tok * o_dim) * sizeof(float));
        float *scores = malloc((size_t)(3 * n_ctx) * sizeof(float));
        cpu_pool *pool = NULL;
        cpu_pool_create(2, &pool);
        float *scratch = aligned_alloc(64, 2 * cpu_fast_attn_scratch_floats(n_ctx, c.head_dim) * sizeof(float));
        for (int64_t i = 0; i < n_tok * q_dim; i++)
            q[i] = 2.0f * frand();
        for (int64_t i = 0; i < n_ctx * c.n_head_kv * c.head_dim; i++)
            k[i] = 2.0f * frand();
        for (int64_t i = 0; i < n_ctx * c.n_head_kv * c.head_dim_v; i++)
            v[i] = frand();
        for (int64_t t = 0; t < n_tok; t++)
            cpu_attention_window(ref + t * o_dim, q + t * q_dim, k, v, pos0 + t, &c, scores, 0);
        cpu_fast_attention(pool, out, q, k, v, pos0, n_tok, &c, scores, n_ctx, scratch);
        double err = 0, scale = 0;
        for (int64_t i = 0; i < n_tok * o_dim; i++) {
            err = fabs(out[i] - ref[i]) > err ? fabs(out[i] - ref[i]) : err;
            scale = fabs(ref[i]) > scale ? fabs(ref[i]) : scale;
        }
        CHECK(err <= 1e-5 * scale, "blocked attention %lld heads / %lld kv, hd %lld/%lld, %lld tokens: err %.2e of %.3f",
              (long long)c.n_head, (long long)c.n_head_kv, (long long)c.head_dim, (long long)c.head_dim_v,
              (long long)n_tok, err / scale, scale);
        cpu_pool_free(pool);
        free(scratch);
        free(q);
        free(k);
        free(v);
        free(ref);
        free(out);
        free(scores);
    }
}

/* fast matmul vs the reference, several types, shapes, thread counts and batch sizes */
static void test_fast_matmul(void) {
    static const uint32_t types[] = {ER_TYPE_F32, ER_TYPE_F16, ER_TYPE_BF16, ER_TYPE_Q8_0, ER_TYPE_Q4_0, ER_TYPE_Q4_K, ER_TYPE_Q6_K};
    /* n_in, n_out, n_tokens; the last three take the f32 prefill (CPU_SGEMM_MIN_TOKENS):
     * output rows not a whole panel, token counts not whole tiles */
    static const int64_t shapes[][3] = {{256, 1, 1}, {256, 37, 5}, {512, 100, 8}, {1024, 64, 3},
                                        {256, 37, 33}, {512, 100, 40}, {1024, 16, 70}};
    cpu_pool *pools[3] = {NULL, NULL, NULL};
    for (int p = 0; p < 3; p++)
        cpu_pool_create(p + 1, &pools[p]);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const er_type_traits *tr = er_type_get(types[ti]);
        const cpu_kernels *k = cpu_kernels_get(types[ti]);
        if (!tr || !tr->from_f32 || !k)
            continue;
        const int f32_acts = k->vec_dot_type == ER_TYPE_F32;
        /* f32 activations: summation order only; 8-bit activations: ~1/127 per element,
         * mostly averaging out over n_in: 2e-2 of the output's scale (the norm bound) */
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t n_in = shapes[si][0], n_out = shapes[si][1], n_tok = shapes[si][2];
            /* f32 prefill: the reference's arithmetic but for the order of the sums; one
             * token at a time then takes the integer dots, so only threads must not matter */
            const int sgemm = n_tok >= CPU_SGEMM_MIN_TOKENS;
            const double bound = f32_acts || sgemm ? 1e-5 : 2e-2;
            const size_t rs = er_type_row_size(tr, n_in);
            uint8_t *wd = malloc((size_t)n_out * rs);
            float *f = malloc((size_t)n_in * sizeof *f), *x = malloc((size_t)(n_tok * n_in) * sizeof *x);
            float *yr = malloc((size_t)(n_tok * n_out) * sizeof *yr), *yf = malloc((size_t)(n_tok * n_out) * sizeof *yf);
            float *y1 = malloc((size_t)(n_tok * n_out) * sizeof *y1), *row = malloc((size_t)(3 * n_in) * sizeof *row);
            void *act = aligned_alloc(64, (cpu_fast_act_size(n_tok, n_in, 3) + 63) / 64 * 64);
            for (int64_t r = 0; r < n_out; r++) {
                for (int64_t i = 0; i < n_in; i++)
                    f[i] = frand();
                tr->from_f32(f, wd + (size_t)r * rs, n_in);
            }
            for (int64_t i = 0; i < n_tok * n_in; i++)
                x[i] = frand();
            er_weight w = {wd, types[ti], tr, n_in, n_out, rs};
            cpu_matmul(&w, x, n_tok, yr, n_out, row, 1);
            /* the scale: max |y|, at least the std of one dot of uniform[-1, 1) vectors
             * (sqrt(n_in) / 3), so that a lone output near zero does not shrink the bound */
            double err = 0, scale = sqrt((double)n_in) / 3.0;
            for (int64_t i = 0; i < n_tok * n_out; i++)
                scale = fabs(yr[i]) > scale ? fabs(yr[i]) : scale;
            int same_threads = 1, same_batch = 1;
            for (int p = 0; p < 3; p++) {
                if (!pools[p])
                    continue;
                cpu_fast_matmul(pools[p], &w, x, n_tok, yf, n_out, act);
                if (p == 0) {
                    memcpy(y1, yf, (size_t)(n_tok * n_out) * sizeof *yf);
                    for (int64_t i = 0; i < n_tok * n_out; i++)
                        err = fabs(yf[i] - yr[i]) > err ? fabs(yf[i] - yr[i]) : err;
                } else {
                    same_threads &= !memcmp(y1, yf, (size_t)(n_tok * n_out) * sizeof *yf);
                }
                for (int64_t t = 0; t < n_tok && !sgemm; t++) { /* one token at a time */
                    cpu_fast_matmul(pools[p], &w, x + t * n_in, 1, yf, n_out, act);
                    same_batch &= !memcmp(y1 + t * n_out, yf, (size_t)n_out * sizeof *yf);
                }
            }
            CHECK(err <= bound * scale, "fast matmul %s %lldx%lld x %lld tokens: err %.2e > %.0e * %.3f", tr->name,
                  (long long)n_out, (long long)n_in, (long long)n_tok, err, bound, scale);
            CHECK(same_threads && same_batch, "fast matmul %s %lldx%lld: independent of threads (%d) and batch (%d)",
                  tr->name, (long long)n_out, (long long)n_in, same_threads, same_batch);
            free(wd);
            free(f);
            free(x);
            free(yr);
            free(yf);
            free(y1);
            free(row);
            free(act);
        }
    }
    for (int p = 0; p < 3; p++)
        cpu_pool_free(pools[p]);
}

/* stories260K (F32): prefill == decode bit for bit on both paths; fast vs reference ~1e-6 */
static void test_model_paths(void) {
    static const int32_t prompt[] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};
    enum { N = sizeof prompt / sizeof prompt[0] };
    er_model *m = NULL;
    if (er_model_load(TEST_DATA "stories260K.gguf", NULL, &m) != ER_OK) {
        CHECK(0, "load stories260K: %s", er_last_error());
        return;
    }
    const int64_t nv = er_model_n_vocab(m);
    float *all[2], *one = malloc((size_t)nv * sizeof(float));
    for (int ref = 0; ref < 2; ref++) {
        all[ref] = malloc((size_t)(N * nv) * sizeof(float));
        er_context_params cp = er_context_default_params();
        cp.n_ctx = 32;
        cp.n_threads = 2;
        cp.reference = ref;
        er_context *ctx = NULL, *step = NULL;
        CHECK(er_context_create(m, &cp, &ctx) == ER_OK && er_context_create(m, &cp, &step) == ER_OK, "contexts");
        if (!ctx || !step) {
            er_context_free(ctx);
            er_context_free(step);
            continue;
        }
        CHECK(er_context_decode(ctx, prompt, N, all[ref]) == ER_OK, "prefill");
        int same = 1;
        for (int i = 0; i < N; i++) {
            CHECK(er_context_decode(step, &prompt[i], 1, one) == ER_OK, "decode");
            same &= !memcmp(one, all[ref] + i * nv, (size_t)nv * sizeof(float));
        }
        CHECK(same, "%s path: prefill == token-by-token decode, bit for bit", ref ? "reference" : "fast");
        er_context_free(ctx);
        er_context_free(step);
    }
    double err = 0, scale = 0;
    for (int64_t i = 0; i < N * nv; i++) {
        err = fabs(all[0][i] - all[1][i]) > err ? fabs(all[0][i] - all[1][i]) : err;
        scale = fabs(all[1][i]) > scale ? fabs(all[1][i]) : scale;
    }
    CHECK(err <= 1e-5 * scale, "fast vs reference logits: %.2e of max|logit| %.3f", err / scale, scale);
    free(all[0]);
    free(all[1]);
    free(one);
    er_model_free(m);
}

void test_cpu(void) {
    test_pool();
    test_gemm_q8_0();
    test_fast_to_f32();
    test_fast_attention_blocked();
    test_fast_matmul();
    test_model_paths();
}
