/*
 * ops.c - reference CPU operations (see ops.h).
 *
 * Costs, per token: matmul reads every weight once (decode is bound by memory
 * bandwidth); attention reads pos * (head_dim + head_dim_v) floats per KV head.
 *
 * Threads: matmul and attention split their outputs over the context's pool, so that
 * every output element is computed by one thread, by the same code and in the same
 * order as on one thread: matmul ranges of output rows, attention (tile of tokens, head)
 * pairs, each taken from a counter by whichever thread is free (threadpool.h). The
 * results are bit-identical for any thread count (tests/unit/test_cpu.c). The other
 * operations are cheap beside these and stay serial.
 */
#include "backend/cpu/ops.h"

#include "backend/cpu/x86.h"
#include "quant/blocks.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

void cpu_rmsnorm(float *y, const float *x, const float *weight, int64_t n_rows, int64_t n, float eps) {
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        float ss = 0.0f;
        for (int64_t i = 0; i < n; i++)
            ss += xr[i] * xr[i];
        const float scale = 1.0f / sqrtf(ss / (float)n + eps);
        for (int64_t i = 0; i < n; i++)
            yr[i] = xr[i] * scale * weight[i];
    }
}

static float dot_f32(const float *a, const float *b, int64_t n) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

/* Dot products computed side by side: several tokens' (dots) or several rows' (row_dots),
 * each sum still one chain in dot_f32's order, so that the add's latency (a sum waiting
 * on its last add) is paid once for many sums. cpu_matmul interleaves the tokens of a
 * slab of up to SLAB at a time, DOTS side by side; one token takes ROWS rows at a time,
 * CHUNK elements of each dequantized at once, so that they stay in L1. Measured on a
 * 2-core Zen 4 VM, a random Qwen3-0.6B Q8_0 on 2 threads, a 256-token prompt: 49.4 s one
 * sum at a time, 8.6 s with 8 tokens side by side, 5.8 s with 16, 6.4 s with 32; one
 * token's rows interleaved as the tokens are (a store a float) took longer than the
 * products, hence row_dots. */
enum { DOTS = 16, SLAB = 64, ROWS = 8, CHUNK = 256 };
_Static_assert(CHUNK % QK_K == 0, "a chunk is whole blocks of every type");

/* acc[(r * N_GROUPS + g) * DOTS + u] += the products of column u of group g of t
 * (N_GROUPS groups of (n, DOTS), n * DOTS floats apart) and row r of v (N_ROWS, n), for
 * u < DOTS, added in element order: dot_f32's sums (a multiply, then an add: C11
 * contracts no FMA), carried on from acc, so the bits are dot_f32's over the elements
 * summed so far; side by side in t's rows, the compiler keeps the sums in vector
 * registers (unrolled; rolled, GCC keeps 16 in memory). One row and group are 4 SSE2
 * registers. AVX2 takes 2 rows and 2 groups, 8 registers: 8 chains of adds in flight
 * rather than 2, and each load of t (from L2: a slab is n * SLAB floats) used twice. */
#define DOTS_BODY(N_ROWS, N_GROUPS)                                                                           \
    float a[(N_ROWS) * (N_GROUPS) * DOTS];                                                                  \
    memcpy(a, acc, sizeof a);                                                                               \
    for (int64_t i = 0; i < n; i++) {                                                                       \
        _Pragma("GCC unroll 2") for (int r = 0; r < (N_ROWS); r++) {                                        \
            const float vi = v[r * n + i];                                                                  \
            _Pragma("GCC unroll 2") for (int g = 0; g < (N_GROUPS); g++)                                    \
                _Pragma("GCC unroll 16") for (int u = 0; u < DOTS; u++) a[(r * (N_GROUPS) + g) * DOTS + u] += \
                    t[g * DOTS * n + i * DOTS + u] * vi;                                                    \
        }                                                                                                   \
    }                                                                                                       \
    memcpy(acc, a, sizeof a);
static void dots(const float *t, const float *v, int64_t n, float *acc) { DOTS_BODY(1, 1) }
#if CPU_X86
/* the same C for AVX2 (its multiplies and adds round as SSE2's: the bits do not depend on
 * the instruction set) */
__attribute__((target("avx2"))) static void dots_avx2(const float *t, const float *v, int64_t n, float *acc) {
    DOTS_BODY(2, 2)
}
#endif
#undef DOTS_BODY

/* dots for rows as they are: acc[u] += the products of row u of rows (ROWS, n) and v
 * (n), in element order. ROWS sums fit the registers of a scalar loop. */
static void row_dots(const float *rows, const float *v, int64_t n, float acc[ROWS]) {
    float a[ROWS];
    memcpy(a, acc, sizeof a);
    for (int64_t i = 0; i < n; i++) {
        const float vi = v[i];
#pragma GCC unroll 8
        for (int u = 0; u < ROWS; u++)
            a[u] += rows[u * n + i] * vi;
    }
    memcpy(acc, a, sizeof a);
}

/* column u of t (n, DOTS) = src (n) */
static void put_column(float *t, int u, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        t[i * DOTS + u] = src[i];
}

/* xt (groups of DOTS tokens, each (n, DOTS)) = the k tokens of x (k, n) side by side;
 * the last group's columns past k zero */
static void interleave(float *xt, const float *x, int64_t k, int64_t n) {
    for (int64_t t0 = 0; t0 < k; t0 += DOTS) {
        if (k - t0 < DOTS)
            memset(xt + t0 * n, 0, (size_t)(DOTS * n) * sizeof *xt);
        for (int u = 0; u < DOTS && t0 + u < k; u++)
            put_column(xt + t0 * n, u, x + (t0 + u) * n, n);
    }
}

int64_t cpu_matmul_scratch(int64_t n_in, int n_threads) { return (SLAB + (int64_t)n_threads * ROWS) * n_in; }

/* Output rows o_begin..o_end of n_tokens tokens, each output dot_f32 of its dequantized
 * row (to_f32: the values the type's dot_f32 multiplies) and its token, whatever
 * n_tokens: one token (x), ROWS rows at a time, CHUNK elements of each dequantized into
 * mine, the sums carried from chunk to chunk; several (xt: groups of DOTS tokens, each
 * (n, DOTS)), a row (with AVX2 two) dequantized once into mine, then against each group
 * (with AVX2 two at a time). mine: this thread's scratch, ROWS n floats. */
static void matmul_rows(const er_weight *w, const float *x, const float *xt, int64_t n_tokens, float *y,
                        int64_t y_stride, float *mine, int64_t o_begin, int64_t o_end) {
    const int64_t n = w->n_in;
    if (n_tokens == 1) {
        const size_t chunk_bytes = (size_t)(CHUNK / w->traits->block_size) * w->traits->type_size;
        for (int64_t o = o_begin; o < o_end; o += ROWS) {
            const int k = o_end - o < ROWS ? (int)(o_end - o) : ROWS;
            float acc[ROWS] = {0};
            if (o + ROWS < o_end) { /* the next rows towards the cache while these are summed */
                const uint8_t *next = w->data + (size_t)(o + ROWS) * w->row_size;
                const size_t next_bytes = (size_t)(o_end - o - ROWS < ROWS ? o_end - o - ROWS : ROWS) * w->row_size;
                for (size_t b = 0; b < next_bytes; b += 64)
                    __builtin_prefetch(next + b);
            }
            for (int64_t i0 = 0; i0 < n; i0 += CHUNK) { /* n - i0: whole blocks */
                const int64_t len = n - i0 < CHUNK ? n - i0 : CHUNK;
                for (int u = 0; u < ROWS; u++) { /* mine: (ROWS, len) */
                    if (u < k)
                        w->traits->to_f32(w->data + (size_t)(o + u) * w->row_size + (size_t)(i0 / CHUNK) * chunk_bytes,
                                          mine + u * len, len);
                    else /* past the range: zeros, not stale floats */
                        memset(mine + u * len, 0, (size_t)len * sizeof *mine);
                }
                row_dots(mine, x + i0, len, acc);
            }
            for (int u = 0; u < k; u++)
                y[o + u] = acc[u];
        }
        return;
    }
#if CPU_X86
    const int wide = cpu_has_avx2(); /* dots_avx2: 2 rows and 2 groups at once */
#endif
    for (int64_t o = o_begin, n_rows; o < o_end; o += n_rows) {
        n_rows = 1;
#if CPU_X86
        if (wide && o_end - o >= 2)
            n_rows = 2;
#endif
        for (int64_t r = 0; r < n_rows; r++) /* mine: (n_rows, n) */
            w->traits->to_f32(w->data + (size_t)(o + r) * w->row_size, mine + r * n, n);
        for (int64_t t0 = 0, k; t0 < n_tokens; t0 += k) {
            float acc[2 * 2 * DOTS] = {0}; /* (rows, groups, DOTS) */
            k = DOTS; /* tokens this step */
#if CPU_X86
            if (n_rows == 2 && n_tokens - t0 > DOTS) {
                dots_avx2(xt + t0 * n, mine, n, acc);
                k = 2 * DOTS;
            } else
#endif
                for (int64_t r = 0; r < n_rows; r++)
                    dots(xt + t0 * n, mine + r * n, n, acc + r * 2 * DOTS);
            for (int64_t r = 0; r < n_rows; r++)
                for (int64_t u = 0; u < k && t0 + u < n_tokens; u++)
                    y[(t0 + u) * y_stride + o + r] = acc[r * 2 * DOTS + u];
        }
    }
}

typedef struct matmul_task {
    const er_weight *w;
    const float *x, *xt; /* x (n_tokens == 1), or xt: the tokens interleaved (matmul_rows) */
    int64_t n_tokens;
    float *y;
    int64_t y_stride;
    float *scratch; /* (threads, ROWS n_in) */
    int64_t chunk; /* output rows per work item */
    atomic_llong next; /* the next item's first row */
} matmul_task;

/* Ranges of output rows from a counter (threadpool.h: whoever arrives takes part). */
static void matmul_worker(void *arg, int ith, int nth) {
    matmul_task *j = arg;
    const int64_t n_out = j->w->n_out;
    (void)nth;
    for (int64_t r0; (r0 = atomic_fetch_add(&j->next, j->chunk)) < n_out;)
        matmul_rows(j->w, j->x, j->xt, j->n_tokens, j->y, j->y_stride,
                    j->scratch + (size_t)ith * (size_t)(ROWS * j->w->n_in), r0,
                    r0 + j->chunk < n_out ? r0 + j->chunk : n_out);
}

void cpu_matmul(cpu_pool *pool, const er_weight *w, const float *x, int64_t n_tokens, float *y, int64_t y_stride,
                float *scratch) {
    const int64_t n = w->n_in;
    /* 16-row multiples (no shared 64-byte lines of y), about 4 per thread */
    const int64_t per = 4 * (int64_t)cpu_pool_size(pool);
    float *xt = scratch; /* (SLAB / DOTS groups, n, DOTS) */
    for (int64_t s0 = 0; s0 < n_tokens; s0 += SLAB) { /* one pass over the weights a slab */
        const int64_t k = n_tokens - s0 < SLAB ? n_tokens - s0 : SLAB;
        if (k > 1)
            interleave(xt, x + s0 * n, k, n);
        matmul_task j = {w, x + s0 * n, xt, k, y + s0 * y_stride, y_stride, scratch + SLAB * n,
                         ((w->n_out + per - 1) / per + 15) / 16 * 16, 0};
        atomic_init(&j.next, 0);
        if (cpu_pool_size(pool) == 1)
            matmul_worker(&j, 0, 1);
        else
            cpu_pool_run(pool, matmul_worker, &j);
    }
}

void cpu_get_rows(const er_weight *embd, const int32_t *tokens, int64_t n_tokens, float *y) {
    for (int64_t t = 0; t < n_tokens; t++)
        embd->traits->to_f32(embd->data + (size_t)tokens[t] * embd->row_size, y + t * embd->n_in, embd->n_in);
}

void cpu_rope(float *x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int neox, const float *cs) {
    const int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; i++) {
        for (int64_t h = 0; h < n_heads; h++) {
            float *xh = x + h * head_dim;
            const int64_t i0 = neox ? i : 2 * i;
            const int64_t i1 = neox ? i + half : 2 * i + 1;
            const float x0 = xh[i0], x1 = xh[i1];
            xh[i0] = x0 * cs[2 * i] - x1 * cs[2 * i + 1];
            xh[i1] = x0 * cs[2 * i + 1] + x1 * cs[2 * i];
        }
    }
}

/* scores[j] = dot_f32(q, key j) * scale for j0 <= j <= pos, key j (hd) at kh + j * stride:
 * KEYS keys' sums side by side (dots' reason), each in dot_f32's order. Eight, not DOTS:
 * their rows are apart, one scalar load each, and sixteen sums spilled registers. */
enum { KEYS = 8 };
static void key_scores(float *scores, const float *q, const float *kh, int64_t stride, int64_t hd, int64_t j0,
                       int64_t pos, float scale) {
    int64_t j = j0;
    for (; j + KEYS <= pos + 1; j += KEYS) {
        float a[KEYS] = {0};
        for (int64_t d = 0; d < hd; d++)
#pragma GCC unroll 8 /* the sums in registers */
            for (int u = 0; u < KEYS; u++)
                a[u] += q[d] * kh[(j + u) * stride + d];
        for (int u = 0; u < KEYS; u++)
            scores[j + u] = a[u] * scale;
    }
    for (; j <= pos; j++)
        scores[j] = dot_f32(q, kh + j * stride, hd) * scale;
}

/* acc (n) += p[k] * row k of v (rows `stride` apart) for k < m <= VALUES, per element in
 * the order of k: the adds of a loop over the keys one by one, so the same bits. In
 * pieces of 8 elements, which GCC -O2 vectorizes (a loop of n it would not), and each
 * piece of acc loaded once for the m keys. */
enum { VALUES = 4 };
static void add_values(float *restrict acc, const float *restrict v, int64_t stride, const float *p, int m,
                       int64_t n) {
    int64_t d = 0;
    for (; d + 8 <= n; d += 8) {
        float a[8];
        memcpy(a, acc + d, sizeof a);
        for (int k = 0; k < m; k++)
            for (int u = 0; u < 8; u++)
                a[u] += p[k] * v[k * stride + d + u];
        memcpy(acc + d, a, sizeof a);
    }
    for (; d < n; d++)
        for (int k = 0; k < m; k++)
            acc[d] += p[k] * v[k * stride + d];
}

/* first cache row a token at pos sees (window 0: all) */
static int64_t first_row(int64_t pos, int64_t window) { return window > 0 && pos >= window ? pos - window + 1 : 0; }

/* One head h of one token at position pos over cache rows j0..pos: out_h (head_dim_v)
 * from q (n_head * head_dim), scores scratch (pos + 1). */
static void attention_head(float *out, const float *q, const float *k_cache, const float *v_cache, int64_t pos,
                           const model_config *c, float *scores, int64_t window, int64_t h) {
    const int64_t j0 = first_row(pos, window);
    const int64_t kv_stride = c->n_head_kv * c->head_dim;
    const int64_t v_stride = c->n_head_kv * c->head_dim_v;
    const int64_t kvh = h / (c->n_head / c->n_head_kv);
    const float scale = 1.0f / sqrtf((float)c->head_dim);
    const float *qh = q + h * c->head_dim;
    key_scores(scores, qh, k_cache + kvh * c->head_dim, kv_stride, c->head_dim, j0, pos, scale);
    float max = -INFINITY;
    for (int64_t j = j0; j <= pos; j++)
        if (scores[j] > max)
            max = scores[j];
    float sum = 0.0f;
    for (int64_t j = j0; j <= pos; j++) {
        scores[j] = expf(scores[j] - max);
        sum += scores[j];
    }
    const float inv = 1.0f / sum;
    float *oh = out + h * c->head_dim_v;
    memset(oh, 0, (size_t)c->head_dim_v * sizeof *oh);
    for (int64_t j = j0; j <= pos; j += VALUES) {
        float p[VALUES];
        const int m = pos + 1 - j < VALUES ? (int)(pos + 1 - j) : VALUES;
        for (int k = 0; k < m; k++)
            p[k] = scores[j + k] * inv;
        add_values(oh, v_cache + j * v_stride + kvh * c->head_dim_v, v_stride, p, m, c->head_dim_v);
    }
}

void cpu_attention(float *out, const float *q, const float *k_cache, const float *v_cache,
                   int64_t pos, const model_config *c, float *scores) {
    cpu_attention_window(out, q, k_cache, v_cache, pos, c, scores, 0);
}

void cpu_attention_window(float *out, const float *q, const float *k_cache, const float *v_cache,
                          int64_t pos, const model_config *c, float *scores, int64_t window) {
    for (int64_t h = 0; h < c->n_head; h++)
        attention_head(out, q, k_cache, v_cache, pos, c, scores, window, h);
}

/* A prompt's attention by tiles: TILE consecutive tokens of one head side by side.
 * attention_head reads every key and value row once per token, and its scores take a
 * strided load a product; a tile reads the rows once per TILE tokens, and its products
 * are vector lanes, a lane a token. Each output is still attention_head's, bit for bit:
 * every score, exp, sum, weight and add of a token in its order. Measured on a 2-core Zen
 * 4 VM, one thread, a 4,096-token prompt at Qwen3-0.6B's heads, ns a (token, key) pair:
 * token by token 64-70; tiles of 8 tokens: plain C (SSE2) 28, AVX2 17-20; of 16: 23, 15,
 * AVX-512 12. */
enum { TILE = CPU_ATTENTION_TILE, COLS = 2, COLS_AVX2 = 4, COLS_AVX512 = 8, VALUE_BLOCK = 32 };

/* acc[c * TILE + u] += x[r * TILE + u] * y[r * y_row + c * y_col] for u < TILE and
 * c < N_COLS, r = 0..n_r - 1 in order: TILE * N_COLS sums side by side, each one chain
 * of adds in r's order. Unrolled (N_COLS a constant), the sums stay in registers: 8 of
 * them (fewer would wait on the adds' latency), 2 columns of SSE2, 4 of AVX2, 8 of AVX-512.
 * A tile's scores are these sums over the elements r of N_COLS keys (x: the queries
 * (head_dim, TILE)); its values, over the keys r for N_COLS elements of the value rows
 * (x: the weights (keys, TILE)). */
#define LANES_BODY(N_COLS)                                                                                     \
    float a[(N_COLS) * TILE];                                                                               \
    memcpy(a, acc, sizeof a);                                                                               \
    for (int64_t r = 0; r < n_r; r++) {                                                                     \
        _Pragma("GCC unroll 128") for (int i = 0; i < (N_COLS) * TILE; i++) a[i] +=                         \
            x[r * TILE + i % TILE] * y[r * y_row + i / TILE * y_col];                                       \
    }                                                                                                       \
    memcpy(acc, a, sizeof a);
typedef void lanes_fn(float *acc, const float *x, const float *y, int64_t n_r, int64_t y_row, int64_t y_col);
static void lanes_cols(float *acc, const float *x, const float *y, int64_t n_r, int64_t y_row, int64_t y_col) {
    LANES_BODY(COLS)
}
static void lanes_col(float *acc, const float *x, const float *y, int64_t n_r, int64_t y_row, int64_t y_col) {
    LANES_BODY(1)
}
#if CPU_X86
/* the same C for AVX2's wider registers: its multiplies and adds round as SSE2's (no FMA:
 * C11 contracts none), so the bits do not depend on the instruction set */
__attribute__((target("avx2"))) static void lanes_cols_avx2(float *acc, const float *x, const float *y, int64_t n_r,
                                                            int64_t y_row, int64_t y_col) {
    LANES_BODY(COLS_AVX2)
}
__attribute__((target("avx512f"))) static void lanes_cols_avx512(float *acc, const float *x, const float *y,
                                                                  int64_t n_r, int64_t y_row, int64_t y_col) {
    LANES_BODY(COLS_AVX512)
}
#endif
#undef LANES_BODY

/* lane u's adds of attention_head's values over rows j0..j1: acc (hd_v, TILE) column u
 * += w[j * TILE + u] * row j of vh (rows `stride` apart) */
static void lane_values(float *acc, int u, const float *w, const float *vh, int64_t stride, int64_t hd_v,
                        int64_t j0, int64_t j1) {
    for (int64_t j = j0; j <= j1; j++)
        for (int64_t d = 0; d < hd_v; d++)
            acc[d * TILE + u] += w[j * TILE + u] * vh[j * stride + d];
}

/* Head h of the TILE tokens at positions pos..pos + TILE - 1 (out, q: the first token's
 * rows; tokens n_head * head_dim_v and n_head * head_dim apart) over their cache rows.
 * scratch: cpu_attention_scratch(c, pos + TILE) floats. */
static void attention_tile(float *out, const float *q, const float *k_cache, const float *v_cache, int64_t pos,
                           const model_config *c, float *scratch, int64_t window, int64_t h) {
    const int64_t hd = c->head_dim, hd_v = c->head_dim_v;
    const int64_t kv_stride = c->n_head_kv * hd, v_stride = c->n_head_kv * hd_v;
    const int64_t kvh = h / (c->n_head / c->n_head_kv);
    const float scale = 1.0f / sqrtf((float)hd);
    const float *kh = k_cache + kvh * hd, *vh = v_cache + kvh * hd_v;
    lanes_fn *wide = lanes_cols;
    int64_t cols = COLS;
#if CPU_X86
    if (cpu_has_avx2())
        wide = lanes_cols_avx2, cols = COLS_AVX2;
    if (cpu_has_vnni()) /* the AVX-512 level (x86.h) */
        wide = lanes_cols_avx512, cols = COLS_AVX512;
#endif
    float *qt = scratch;          /* (hd, TILE) the queries */
    float *acc = qt + TILE * hd;  /* (hd_v, TILE) the outputs */
    float *w = acc + TILE * hd_v; /* (pos + TILE, TILE) row j: the tokens' scores, then weights, of key j */
    for (int64_t d = 0; d < hd; d++)
        for (int u = 0; u < TILE; u++)
            qt[d * TILE + u] = q[u * c->n_head * hd + h * hd + d];
    /* token u sees rows lo[u]..pos + u; every token rows lo[TILE - 1]..pos */
    int64_t lo[TILE];
    for (int u = 0; u < TILE; u++)
        lo[u] = first_row(pos + u, window);
    const int64_t last = pos + TILE - 1;
    memset(w + lo[0] * TILE, 0, (size_t)((last + 1 - lo[0]) * TILE) * sizeof *w);
    int64_t j = lo[0];
    for (; j + cols <= last + 1; j += cols)
        wide(w + j * TILE, qt, kh + j * kv_stride, hd, 1, kv_stride);
    for (; j <= last; j++)
        lanes_col(w + j * TILE, qt, kh + j * kv_stride, hd, 1, kv_stride);
    for (int u = 0; u < TILE; u++) { /* attention_head's softmax, over the rows token u sees */
        float max = -INFINITY;
        for (j = lo[u]; j <= pos + u; j++) {
            w[j * TILE + u] *= scale;
            if (w[j * TILE + u] > max)
                max = w[j * TILE + u];
        }
        float sum = 0.0f;
        for (j = lo[u]; j <= pos + u; j++) {
            w[j * TILE + u] = expf(w[j * TILE + u] - max);
            sum += w[j * TILE + u];
        }
        const float inv = 1.0f / sum;
        for (j = lo[u]; j <= pos + u; j++)
            w[j * TILE + u] *= inv;
    }
    /* the values: each token's rows before the shared ones, the shared ones side by side
     * (VALUE_BLOCK rows through every column while they are in cache), then each token's
     * after them; none shared (a window under TILE): each token's all, one by one */
    memset(acc, 0, (size_t)(TILE * hd_v) * sizeof *acc);
    const int64_t shared0 = lo[TILE - 1], shared1 = pos;
    for (int u = 0; u < TILE; u++)
        lane_values(acc, u, w, vh, v_stride, hd_v, lo[u], shared0 <= shared1 ? shared0 - 1 : pos + u);
    if (shared0 <= shared1) {
        for (int64_t b = shared0; b <= shared1; b += VALUE_BLOCK) {
            const int64_t n = shared1 + 1 - b < VALUE_BLOCK ? shared1 + 1 - b : VALUE_BLOCK;
            int64_t d = 0;
            for (; d + cols <= hd_v; d += cols)
                wide(acc + d * TILE, w + b * TILE, vh + b * v_stride + d, n, v_stride, 1);
            for (; d < hd_v; d++)
                lanes_col(acc + d * TILE, w + b * TILE, vh + b * v_stride + d, n, v_stride, 1);
        }
        for (int u = 0; u < TILE; u++)
            lane_values(acc, u, w, vh, v_stride, hd_v, shared1 + 1, pos + u);
    }
    for (int u = 0; u < TILE; u++)
        for (int64_t d = 0; d < hd_v; d++)
            out[u * c->n_head * hd_v + h * hd_v + d] = acc[d * TILE + u];
}

int64_t cpu_attention_scratch(const model_config *c, int64_t n_ctx) {
    return TILE * (c->head_dim + c->head_dim_v + n_ctx);
}

typedef struct attention_task {
    float *out;
    const float *q;
    const float *k_cache, *v_cache;
    int64_t pos0, n_tokens;
    const model_config *c;
    float *scratch; /* (threads, cpu_attention_scratch(c, n_ctx)) */
    int64_t n_ctx, window;
    atomic_llong next; /* the next work item: a (tile, head) pair, then a (token, head) pair */
} attention_task;

/* Items one at a time from a counter (later tokens cost more: no ranges): the whole tiles'
 * (tile, head) pairs, then the (token, head) pairs of the tokens past them. */
static void attention_worker(void *arg, int ith, int nth) {
    attention_task *a = arg;
    const model_config *c = a->c;
    float *scratch = a->scratch + (size_t)ith * (size_t)cpu_attention_scratch(c, a->n_ctx);
    const int64_t q_row = c->n_head * c->head_dim, o_row = c->n_head * c->head_dim_v; /* a token's */
    const int64_t n_tiled = a->n_tokens / TILE * TILE, n_items = (n_tiled / TILE + a->n_tokens - n_tiled) * c->n_head;
    (void)nth;
    for (int64_t p; (p = atomic_fetch_add(&a->next, 1)) < n_items;) {
        const int64_t h = p % c->n_head, i = p / c->n_head;
        if (i < n_tiled / TILE)
            attention_tile(a->out + i * TILE * o_row, a->q + i * TILE * q_row, a->k_cache, a->v_cache,
                           a->pos0 + i * TILE, c, scratch, a->window, h);
        else {
            const int64_t t = n_tiled + i - n_tiled / TILE;
            attention_head(a->out + t * o_row, a->q + t * q_row, a->k_cache, a->v_cache, a->pos0 + t, c, scratch,
                           a->window, h);
        }
    }
}

void cpu_attention_tokens(cpu_pool *pool, float *out, const float *q, const float *k_cache, const float *v_cache,
                          int64_t pos0, int64_t n_tokens, const model_config *c, float *scratch, int64_t n_ctx,
                          int64_t window) {
    attention_task a = {out, q, k_cache, v_cache, pos0, n_tokens, c, scratch, n_ctx, window, 0};
    atomic_init(&a.next, 0);
    if (cpu_pool_size(pool) == 1)
        attention_worker(&a, 0, 1);
    else
        cpu_pool_run(pool, attention_worker, &a);
}

void cpu_swiglu(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void cpu_geglu(float *gate, const float *up, int64_t n) {
    const float sqrt_2_over_pi = 0.79788456080286535588f;
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        gate[i] = 0.5f * g * (1.0f + tanhf(sqrt_2_over_pi * g * (1.0f + 0.044715f * g * g))) * up[i];
    }
}

void cpu_add_bias(float *x, const float *bias, int64_t n_rows, int64_t n) {
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < n; i++)
            x[r * n + i] += bias[i];
}

void cpu_scale(float *x, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
}
