/*
 * ops.c - reference CPU operations (see ops.h).
 *
 * Costs, per token: matmul reads every weight once (decode is bound by memory
 * bandwidth); attention reads pos * (head_dim + head_dim_v) floats per KV head.
 */
#include "backend/cpu/ops.h"

#include <math.h>
#include <pthread.h>
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

typedef struct matmul_job {
    const er_weight *w;
    const float *x;
    int64_t n_tokens;
    float *y;
    int64_t y_stride;
    float *row;
    int64_t o_begin, o_end;
} matmul_job;

static void *matmul_worker(void *arg) {
    const matmul_job *j = arg;
    matmul_rows(j->w, j->x, j->n_tokens, j->y, j->y_stride, j->row, j->o_begin, j->o_end);
    return NULL;
}

void cpu_matmul(const er_weight *w, const float *x, int64_t n_tokens, float *y, int64_t y_stride, float *row,
                int n_threads) {
    enum { MAX_THREADS = 64, MIN_WORK_PER_THREAD = 1 << 20 }; /* multiply-adds */
    const int64_t work = w->n_out * w->n_in * n_tokens;
    int n = n_threads < MAX_THREADS ? n_threads : MAX_THREADS;
    if (n > 1 && work / n < MIN_WORK_PER_THREAD)
        n = (int)(work / MIN_WORK_PER_THREAD);
    if (n <= 1) {
        matmul_rows(w, x, n_tokens, y, y_stride, row, 0, w->n_out);
        return;
    }
    /* rows split evenly; each row is computed exactly as on one thread, so the result
     * does not depend on the thread count */
    pthread_t threads[MAX_THREADS];
    matmul_job jobs[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int i = 0; i < n; i++) {
        jobs[i] = (matmul_job){w, x, n_tokens, y, y_stride, row + (size_t)i * (size_t)w->n_in,
                               w->n_out * i / n, w->n_out * (i + 1) / n};
        if (i > 0)
            started[i] = pthread_create(&threads[i], NULL, matmul_worker, &jobs[i]) == 0;
    }
    matmul_worker(&jobs[0]);
    for (int i = 1; i < n; i++) {
        if (started[i])
            pthread_join(threads[i], NULL);
        else /* no thread could be started: do its rows here */
            matmul_worker(&jobs[i]);
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

void cpu_attention(float *out, const float *q, const float *k_cache, const float *v_cache,
                   int64_t pos, const model_config *c, float *scores) {
    cpu_attention_window(out, q, k_cache, v_cache, pos, c, scores, 0);
}

void cpu_attention_window(float *out, const float *q, const float *k_cache, const float *v_cache,
                          int64_t pos, const model_config *c, float *scores, int64_t window) {
    const int64_t j0 = window > 0 && pos >= window ? pos - window + 1 : 0; /* first row seen */
    const int64_t kv_stride = c->n_head_kv * c->head_dim;
    const int64_t v_stride = c->n_head_kv * c->head_dim_v;
    const int64_t group = c->n_head / c->n_head_kv;
    const float scale = 1.0f / sqrtf((float)c->head_dim);
    for (int64_t h = 0; h < c->n_head; h++) {
        const int64_t kvh = h / group;
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
