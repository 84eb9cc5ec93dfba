/*
 * ops.c - reference CPU operations (see ops.h).
 *
 * Costs, per token: matmul reads every weight once (decode is bound by memory
 * bandwidth); attention reads pos * (head_dim + head_dim_v) floats per KV head.
 *
 * Threads: matmul and attention split their outputs over the context's pool, so that
 * every output element is computed by one thread, by the same code and in the same
 * order as on one thread: matmul ranges of output rows, attention (token, head) pairs,
 * each taken from a counter by whichever thread is free (threadpool.h). The results are
 * bit-identical for any thread count (tests/unit/test_cpu.c). The other operations are
 * cheap beside these and stay serial.
 */
#include "backend/cpu/ops.h"

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

/* acc[u] += the products of column u of t (n, DOTS) and v (n), for u < DOTS, added in
 * element order: dot_f32's sums (a multiply, then an add: C11 contracts no FMA), carried
 * on from acc, so the bits are dot_f32's over the elements summed so far; side by side in
 * t's rows, the compiler keeps the DOTS sums in vector registers. */
static void dots(const float *t, const float *v, int64_t n, float acc[DOTS]) {
    float a[DOTS];
    memcpy(a, acc, sizeof a);
    for (int64_t i = 0; i < n; i++) {
        const float vi = v[i];
#pragma GCC unroll 32 /* the sums in registers (rolled, GCC keeps DOTS of 16 in memory) */
        for (int u = 0; u < DOTS; u++)
            a[u] += t[i * DOTS + u] * vi;
    }
    memcpy(acc, a, sizeof a);
}

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
 * (n, DOTS)), a row dequantized once into mine, then against each group. mine: this
 * thread's scratch, ROWS n floats. */
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
    for (int64_t o = o_begin; o < o_end; o++) {
        w->traits->to_f32(w->data + (size_t)o * w->row_size, mine, n);
        for (int64_t t0 = 0; t0 < n_tokens; t0 += DOTS) {
            float acc[DOTS] = {0};
            dots(xt + t0 * n, mine, n, acc);
            for (int64_t u = 0; u < DOTS && t0 + u < n_tokens; u++)
                y[(t0 + u) * y_stride + o] = acc[u];
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

/* One head h of one token at position pos over cache rows j0..pos: out_h (head_dim_v)
 * from q (n_head * head_dim), scores scratch (pos + 1). */
static void attention_head(float *out, const float *q, const float *k_cache, const float *v_cache, int64_t pos,
                           const model_config *c, float *scores, int64_t window, int64_t h) {
    const int64_t j0 = window > 0 && pos >= window ? pos - window + 1 : 0; /* first row seen */
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

typedef struct attention_task {
    float *out;
    const float *q;
    const float *k_cache, *v_cache;
    int64_t pos0, n_tokens;
    const model_config *c;
    float *scores; /* (threads, n_ctx) */
    int64_t n_ctx, window;
    atomic_llong next; /* the next (token, head) pair */
} attention_task;

/* (token, head) pairs one at a time from a counter (later tokens cost more: no ranges). */
static void attention_worker(void *arg, int ith, int nth) {
    attention_task *a = arg;
    const model_config *c = a->c;
    float *scores = a->scores + (size_t)ith * (size_t)a->n_ctx;
    (void)nth;
    for (int64_t p; (p = atomic_fetch_add(&a->next, 1)) < a->n_tokens * c->n_head;) {
        const int64_t t = p / c->n_head, h = p % c->n_head;
        attention_head(a->out + t * c->n_head * c->head_dim_v, a->q + t * c->n_head * c->head_dim, a->k_cache,
                       a->v_cache, a->pos0 + t, c, scores, a->window, h);
    }
}

void cpu_attention_tokens(cpu_pool *pool, float *out, const float *q, const float *k_cache, const float *v_cache,
                          int64_t pos0, int64_t n_tokens, const model_config *c, float *scores, int64_t n_ctx,
                          int64_t window) {
    attention_task a = {out, q, k_cache, v_cache, pos0, n_tokens, c, scores, n_ctx, window, 0};
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
