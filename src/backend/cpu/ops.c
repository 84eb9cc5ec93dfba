/*
 * ops.c - reference CPU operations (see ops.h).
 *
 * Costs, per token: matmul reads every weight once (decode is bound by memory
 * bandwidth); attention reads pos * (head_dim + head_dim_v) floats per KV head.
 *
 * Threads: matmul and attention split their outputs over the context's pool, so that
 * every output element is computed by one thread, by the same code and in the same
 * order as on one thread: matmul ranges of output rows, attention (token, head) pairs,
 * each taken from a counter by whichever thread is free (threadpool.h). The results are bit-identical for any thread count
 * (tests/unit/test_cpu.c). The other operations are cheap beside these and stay serial.
 */
#include "backend/cpu/ops.h"

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

static void matmul_rows(const er_weight *w, const float *x, int64_t n_tokens, float *y, int64_t y_stride,
                        float *row, int64_t o_begin, int64_t o_end) {
    for (int64_t o = o_begin; o < o_end; o++) {
        const uint8_t *wrow = w->data + (size_t)o * w->row_size;
        if (n_tokens == 1) {
            y[o] = w->traits->dot_f32(wrow, x, w->n_in);
            continue;
        }
        /* several tokens: dequantize the row once; the reference dot products compute
         * the same sums in the same order, so results match the n_tokens == 1 path */
        w->traits->to_f32(wrow, row, w->n_in);
        for (int64_t t = 0; t < n_tokens; t++)
            y[t * y_stride + o] = dot_f32(row, x + t * w->n_in, w->n_in);
    }
}

typedef struct matmul_task {
    const er_weight *w;
    const float *x;
    int64_t n_tokens;
    float *y;
    int64_t y_stride;
    float *row; /* (threads, n_in) */
    int64_t chunk; /* output rows per work item */
    atomic_llong next; /* the next item's first row */
} matmul_task;

/* Ranges of output rows from a counter (threadpool.h: whoever arrives takes part). */
static void matmul_worker(void *arg, int ith, int nth) {
    matmul_task *j = arg;
    const int64_t n_out = j->w->n_out;
    (void)nth;
    for (int64_t r0; (r0 = atomic_fetch_add(&j->next, j->chunk)) < n_out;)
        matmul_rows(j->w, j->x, j->n_tokens, j->y, j->y_stride, j->row + (size_t)ith * (size_t)j->w->n_in, r0,
                    r0 + j->chunk < n_out ? r0 + j->chunk : n_out);
}

void cpu_matmul(cpu_pool *pool, const er_weight *w, const float *x, int64_t n_tokens, float *y, int64_t y_stride,
                float *row) {
    /* 16-row multiples (no shared 64-byte lines of y), about 4 per thread */
    const int64_t per = 4 * (int64_t)cpu_pool_size(pool);
    matmul_task j = {w, x, n_tokens, y, y_stride, row, ((w->n_out + per - 1) / per + 15) / 16 * 16, 0};
    atomic_init(&j.next, 0);
    if (cpu_pool_size(pool) == 1)
        matmul_worker(&j, 0, 1);
    else
        cpu_pool_run(pool, matmul_worker, &j);
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
    float max = -INFINITY;
    for (int64_t j = j0; j <= pos; j++) {
        scores[j] = dot_f32(qh, k_cache + j * kv_stride + kvh * c->head_dim, c->head_dim) * scale;
        if (scores[j] > max)
            max = scores[j];
    }
    float sum = 0.0f;
    for (int64_t j = j0; j <= pos; j++) {
        scores[j] = expf(scores[j] - max);
        sum += scores[j];
    }
    const float inv = 1.0f / sum;
    float *oh = out + h * c->head_dim_v;
    memset(oh, 0, (size_t)c->head_dim_v * sizeof *oh);
    for (int64_t j = j0; j <= pos; j++) {
        const float p = scores[j] * inv;
        const float *vj = v_cache + j * v_stride + kvh * c->head_dim_v;
        for (int64_t d = 0; d < c->head_dim_v; d++)
            oh[d] += p * vj[d];
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
