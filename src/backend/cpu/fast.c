/*
 * fast.c - the CPU fast path (see fast.h): matmul, attention and SwiGLU on the pool.
 *
 * matmul: the output rows are handed out in chunks (a multiple of 16 rows: no two threads
 * write the same 64-byte line of y) from an atomic counter, so a thread slowed by a
 * neighbour on a shared machine simply takes fewer chunks. Batches of
 * CPU_SGEMM_MIN_TOKENS or more multiply in f32: each 16 rows of a chunk are dequantized
 * and packed into a k-major panel once, then a 6x16 FMA tile runs over all tokens (the
 * integer dots cost about 7 instructions per 32 products, the FMA tile 12 per 96).
 * Smaller batches convert their activations once per call to the format the weight
 * type's dot product consumes (kernels.h), shared out like the chunks; within a chunk, Q8_0,
 * Q4_1 and Q4_K run the int8 tiles of fast_avx2.c over the tokens (Q4_K: a 16-token prompt
 * 1.4x as fast as vec_dot; at 64 tokens the same speed as the f32 tile, which keeps
 * those), other types call vec_dot per (row, token). Packed weights (packed.h: Q4_0, Q4_1,
 * Q8_0 and Q2_K..Q6_K on an AVX-512 VNNI CPU) run their own int8 kernel at every
 * token count, one and 32+ included. Decode (one token) reads every weight byte once from
 * memory: it is bound by bandwidth. cpu_fast_matmuls runs several weights of one input in
 * one pool run (Q, K, V; gate and up, with the SwiGLU).
 *
 * Every task here takes its work items from an atomic counter: the pool runs a task on
 * whichever threads arrive (threadpool.h), and each item is computed the same way
 * whoever takes it.
 */
#include "backend/cpu/fast.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/packed.h"
#include "quant/types.h"

enum { SGEMM_TILE_TOKENS = 6, SGEMM_PANEL_ROWS = 16 };

/* Floats of one thread's sgemm scratch: 16 dequantized rows, then their panel. */
static size_t sgemm_scratch_floats(int64_t n_in) {
    return (2 * SGEMM_PANEL_ROWS * (size_t)n_in + 15) / 16 * 16;
}

size_t cpu_fast_act_size(int64_t n_tokens, int64_t n_in, int n_threads) {
    /* f32 is the largest activation format (Q8_K: 292 bytes per 256 elements) */
    const size_t act = (size_t)n_tokens * (size_t)n_in * sizeof(float);
    const size_t sgemm = (size_t)n_threads * sgemm_scratch_floats(n_in) * sizeof(float);
    return act > sgemm ? act : sgemm;
}

/* One weight of an mm_task: its output columns and how its rows are cut into chunks. */
typedef struct mm_part {
    const er_weight *w;
    const cpu_kernels *k; /* the weight type's vec_dot (types may differ between parts) */
    er_to_f32_fn to_f32;  /* sgemm: the weight rows' dequantization */
    cpu_gemm_fn gemm;    /* the tiled kernel over the tokens, or NULL (vec_dot per pair) */
    const uint8_t *rows; /* what gemm reads: w->packed for the packed kernel, else w->data */
    float *y;            /* (n_tokens, y_stride)[:, 0..w->n_out) */
    int64_t y_stride;
    int64_t chunk;    /* rows per chunk, a multiple of 16: no two threads write one 64-byte line */
    int64_t n_chunks; /* swiglu: of the gate, whose chunks also cover the up's rows */
} mm_part;

/* Several weights times the same activations, in one pool run. */
typedef struct mm_task {
    mm_part part[CPU_MM_MAX_OUTS];
    int n_parts;
    cpu_swiglu_fn swiglu;       /* parts {gate, up}: gate = silu(gate) * up per chunk, or NULL */
    cpu_add_fn add;             /* fuse->residual += y per chunk, where fuse->residual is set */
    const cpu_kernels *k;       /* the activations' quantize_row (every part's) */
    const cpu_sgemm_ops *sgemm; /* prefill in f32 on dequantized weights, when set */
    float *scratch;             /* (threads, sgemm_scratch_floats) */
    const float *x; /* the products' input: fuse->xn where the task normalizes into it */
    const float *x_in; /* what the task normalizes (fuse->norm_w), or NULL */
    const cpu_mm_fuse *fuse;
    int64_t n_tokens;
    const uint8_t *xq; /* (n_tokens, xq_stride) activations in k->vec_dot_type */
    size_t xq_stride;
    uint8_t *xq_out;   /* where the task quantizes x first (then xq == xq_out), or NULL */
    atomic_llong q_next, q_done; /* rows of x taken, and quantized */
    atomic_llong next; /* the next chunk to take, counted over the parts in turn */
} mm_task;

/* y (n_tok rows, y_stride apart) = x (n_tok rows of n, x_stride apart) times panel (n, 16),
 * nr of its 16 columns kept, through the tile 6 rows at a time. */
static void tile_rows(const cpu_sgemm_ops *mm, const float *x, int64_t x_stride, int64_t n_tok, const float *panel,
                      int64_t n, float *y, int64_t y_stride, int nr) {
    for (int64_t t = 0; t < n_tok; t += SGEMM_TILE_TOKENS) {
        const int mt = (int)(n_tok - t < SGEMM_TILE_TOKENS ? n_tok - t : SGEMM_TILE_TOKENS);
        const float *xr[SGEMM_TILE_TOKENS];
        for (int i = 0; i < SGEMM_TILE_TOKENS; i++)
            xr[i] = x + (t + (i < mt ? i : 0)) * x_stride;
        mm->tile(xr, panel, n, y + t * y_stride, y_stride, mt, nr);
    }
}

/* Output rows [r0, r1) of part p for every token through the f32 tile: 16 rows at a time
 * are dequantized and packed into a k-major panel (once per call), then every 6 tokens
 * multiply it. */
static void sgemm_rows(const mm_task *t, const mm_part *p, int ith, int64_t r0, int64_t r1) {
    const er_weight *w = p->w;
    const int64_t n = w->n_in;
    float *rows = t->scratch + (size_t)ith * sgemm_scratch_floats(n); /* (16, n), 64-byte aligned */
    float *panel = rows + SGEMM_PANEL_ROWS * n;                       /* (n, 16), 64-byte aligned */
    for (int64_t p0 = r0; p0 < r1; p0 += SGEMM_PANEL_ROWS) {
        const int nr = (int)(r1 - p0 < SGEMM_PANEL_ROWS ? r1 - p0 : SGEMM_PANEL_ROWS);
        for (int r = 0; r < SGEMM_PANEL_ROWS; r++) {
            if (r < nr)
                p->to_f32(w->data + (size_t)(p0 + r) * w->row_size, rows + r * n, n);
            else
                memset(rows + r * n, 0, (size_t)n * sizeof(float));
        }
        t->sgemm->pack(rows, n, panel);
        /* the panel (64-192 KB) stays in L2 across the tokens; blocking k to keep a part
         * of it in L1 measured 14% slower */
        tile_rows(t->sgemm, t->x, n, t->n_tokens, panel, n, p->y + p0, p->y_stride, nr);
    }
}

/* Output rows [r0, r1) of part p, every token. */
static void mm_rows(const mm_task *t, const mm_part *p, int ith, int64_t r0, int64_t r1) {
    const er_weight *w = p->w;
    if (t->sgemm) {
        sgemm_rows(t, p, ith, r0, r1);
    } else if (p->gemm) {
        p->gemm(p->rows + (size_t)r0 * w->row_size, w->row_size, r1 - r0, t->xq, t->xq_stride, t->n_tokens, p->y + r0,
                p->y_stride, w->n_in);
    } else {
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *wr = w->data + (size_t)r * w->row_size;
            for (int64_t i = 0; i < t->n_tokens; i++)
                p->y[i * p->y_stride + r] = p->k->vec_dot(wr, t->xq + (size_t)i * t->xq_stride, w->n_in);
        }
    }
}

static void mm_worker(void *arg, int ith, int nth) {
    mm_task *t = arg;
    (void)nth;
    if (t->xq_out) {
        /* rows shared out like the chunks; then every thread waits until all are done,
         * but only on threads inside the task (those that took rows), not on one that
         * has not arrived: that one finds no row left and waits as the others do */
        const int64_t n_in = t->part[0].w->n_in;
        for (int64_t i; (i = atomic_fetch_add(&t->q_next, 1)) < t->n_tokens;) {
            if (t->x_in)
                cpu_rmsnorm(t->fuse->xn + i * n_in, t->x_in + i * n_in, t->fuse->norm_w, 1, n_in, t->fuse->eps);
            t->k->quantize_row(t->x + i * n_in, t->xq_out + (size_t)i * t->xq_stride, n_in);
            atomic_fetch_add(&t->q_done, 1);
        }
        for (int spins = 0; atomic_load(&t->q_done) < t->n_tokens;)
            cpu_pool_spin(&spins);
    }
    for (;;) {
        int64_t c = atomic_fetch_add(&t->next, 1);
        int i = 0;
        while (i < t->n_parts && c >= t->part[i].n_chunks)
            c -= t->part[i++].n_chunks;
        if (i == t->n_parts)
            return;
        const mm_part *p = &t->part[i];
        const int64_t r0 = c * p->chunk, r1 = r0 + p->chunk < p->w->n_out ? r0 + p->chunk : p->w->n_out;
        mm_rows(t, p, ith, r0, r1);
        if (t->add)
            for (int64_t i_tok = 0; i_tok < t->n_tokens; i_tok++)
                t->add(t->fuse->residual + i_tok * p->y_stride + r0, p->y + i_tok * p->y_stride + r0, r1 - r0);
        if (!t->swiglu)
            continue;
        /* the same rows of the up, then gate = silu(gate) * up on them: a chunk's rows are
         * final once both are done, so the elementwise pass needs no run of its own */
        mm_rows(t, &t->part[1], ith, r0, r1);
        for (int64_t i_tok = 0; i_tok < t->n_tokens; i_tok++)
            t->swiglu(p->y + i_tok * p->y_stride + r0, t->part[1].y + i_tok * t->part[1].y_stride + r0, r1 - r0);
    }
}

/* The kernels w's activations are made for: packed rows' own (packed.h), else the type's. */
static const cpu_kernels *weight_kernels(const er_weight *w) {
    return w->packed ? cpu_packed_kernels(w->type) : cpu_kernels_get(w->type);
}

/* Whether w's product with n_tokens rows takes the f32 tiles: CPU_SGEMM_MIN_TOKENS rows or
 * more, unless w is packed, whose int8 kernel is the faster one at any count (packed.h:
 * Qwen3-0.6B Q8_0 pp512, 2 threads, f32 tiles 0.94x llama.cpp's int8 build) and computes
 * every count alike. */
static int f32_path(const er_weight *w, int64_t n_tokens) { return n_tokens >= CPU_SGEMM_MIN_TOKENS && !w->packed; }

/* Whether outs can share one mm_task: one n_in, the same activations (one format, made
 * by the same quantize_row: Q4_K and Q6_K rows of a Q4_K_M file share them), one path. */
static int same_activations(const cpu_mm_out *outs, int n_outs, int64_t n_tokens) {
    const cpu_kernels *k0 = weight_kernels(outs[0].w);
    for (int i = 0; i < n_outs; i++) {
        const er_weight *w = outs[i].w;
        const cpu_kernels *k = weight_kernels(w);
        if (w->n_in != outs[0].w->n_in || k->vec_dot_type != k0->vec_dot_type || k->quantize_row != k0->quantize_row ||
            f32_path(w, n_tokens) != f32_path(outs[0].w, n_tokens) || (f32_path(w, n_tokens) && !w->traits->to_f32))
            return 0;
    }
    return 1;
}

void cpu_fast_matmuls(cpu_pool *pool, const cpu_mm_out *outs, int n_outs, const float *x, int64_t n_tokens,
                      void *act, int swiglu) {
    cpu_fast_matmuls_fused(pool, outs, n_outs, x, n_tokens, act, swiglu, NULL);
}

void cpu_fast_matmuls_fused(cpu_pool *pool, const cpu_mm_out *outs, int n_outs, const float *x, int64_t n_tokens,
                            void *act, int swiglu, const cpu_mm_fuse *f) {
    const er_weight *w0 = outs[0].w;
    const int nth = cpu_pool_size(pool);
    if (n_outs > CPU_MM_MAX_OUTS || !same_activations(outs, n_outs, n_tokens) ||
        (swiglu && (n_outs != 2 || outs[0].w->n_out != outs[1].w->n_out))) {
        if (f && f->norm_w) { /* normalized once, here, for every product */
            cpu_rmsnorm(f->xn, x, f->norm_w, n_tokens, w0->n_in, f->eps);
            x = f->xn;
        }
        for (int i = 0; i < n_outs; i++) /* (a residual comes with one product, which never gets here) */
            cpu_fast_matmuls(pool, &outs[i], 1, x, n_tokens, act, 0);
        for (int64_t i = 0; swiglu && i < n_tokens; i++)
            cpu_fast_swiglu_get()(outs[0].y + i * outs[0].y_stride, outs[1].y + i * outs[1].y_stride,
                                  outs[0].w->n_out);
        return;
    }
    const cpu_kernels *k = weight_kernels(w0);
    /* the activations are quantized inside the task (xq_out) for a batch of several
     * threads; by the caller for one token or one thread; not at all on the f32 paths */
    const int quantize_inside =
        !f32_path(w0, n_tokens) && k->vec_dot_type != ER_TYPE_F32 && n_tokens > 1 && nth > 1;
    /* the rows are normalized where they are quantized: inside the task, by the thread
     * that quantizes each; else before it, as cpu_rmsnorm on every row */
    const int norm_inside = f && f->norm_w && quantize_inside;
    if (f && f->norm_w && !norm_inside)
        cpu_rmsnorm(f->xn, x, f->norm_w, n_tokens, w0->n_in, f->eps);
    mm_task t = {.n_parts = n_outs, .swiglu = swiglu ? cpu_fast_swiglu_get() : NULL,
                 .add = f && f->residual ? cpu_fast_add_get() : NULL, .k = k,
                 .x = f && f->norm_w ? f->xn : x, .x_in = norm_inside ? x : NULL, .fuse = f, .n_tokens = n_tokens};
    x = t.x;
    if (f32_path(w0, n_tokens)) {
        /* the activations are used as they are; the buffer holds the panels */
        t.sgemm = cpu_sgemm_get();
        t.scratch = act;
    } else if (k->vec_dot_type == ER_TYPE_F32) { /* used as they are */
        t.xq = (const uint8_t *)x;
        t.xq_stride = (size_t)w0->n_in * sizeof(float);
    } else {
        /* once for every part; one row by the caller, several inside the task (8 rows
         * serial in the caller were 3% of an 8-way server's samples, the worker idle) */
        t.xq = act;
        t.xq_stride = cpu_act_row_size(k, w0->n_in);
        if (quantize_inside)
            t.xq_out = act;
        else
            for (int64_t i = 0; i < n_tokens; i++)
                k->quantize_row(x + i * w0->n_in, (uint8_t *)act + (size_t)i * t.xq_stride, w0->n_in);
    }
    /* chunks of a multiple of 16 rows, about 8 per thread for a batch; for one token only
     * 2: each chunk starts a new weight stream that the prefetchers must ramp up again
     * (Qwen3-0.6B Q8_0 decode, 2 threads, same run: 8 per thread 31.6 tok/s, 4 32.3,
     * 2 33.7, 1 33.7; 32 per thread 26.8) */
    const int64_t per_thread = n_tokens == 1 ? 2 : 8;
    for (int i = 0; i < n_outs; i++) {
        const er_weight *w = outs[i].w;
        mm_part *p = &t.part[i];
        int64_t chunk = (w->n_out + per_thread * nth - 1) / (per_thread * nth);
        chunk = (chunk + 15) / 16 * 16;
        /* one token: the table's vec_dot, which prefetches the weight stream (measured 1.5x
         * the tiled kernel's speed at 1 thread); the tiled kernel computes the same bits.
         * Packed rows (packed.h) have one kernel for every token count, their own order. */
        const cpu_gemm_fn packed = w->packed ? cpu_gemm_packed(w->type) : NULL;
        *p = (mm_part){.w = w,
                       .k = weight_kernels(w),
                       .gemm = packed ? packed : n_tokens > 1 ? cpu_gemm_get(w->type) : NULL,
                       .rows = packed ? w->packed : w->data,
                       .y = outs[i].y,
                       .y_stride = outs[i].y_stride,
                       .chunk = chunk,
                       .n_chunks = (w->n_out + chunk - 1) / chunk};
        if (t.sgemm)
            p->to_f32 = cpu_fast_to_f32(w->type, w->traits);
    }
    if (swiglu) /* the gate's chunks carry the up's */
        t.part[1].n_chunks = 0;
    atomic_init(&t.q_next, 0);
    atomic_init(&t.q_done, 0);
    atomic_init(&t.next, 0);
    cpu_pool_run(pool, mm_worker, &t);
}

void cpu_fast_matmul(cpu_pool *pool, const er_weight *w, const float *x, int64_t n_tokens, float *y,
                     int64_t y_stride, void *act) {
    const cpu_mm_out out = {w, y, y_stride};
    cpu_fast_matmuls(pool, &out, 1, x, n_tokens, act, 0);
}

typedef struct attn_task {
    float *out;
    const float *q;
    const cpu_attn_seq *seqs;
    int64_t n_seqs, n_ctx, window;
    const model_config *c;
    float *scores;
    int64_t heads; /* heads per work item: a whole group that shares a KV head, or 1 */
    const cpu_attn_prep *prep; /* or NULL */
    int64_t n_tokens;
    atomic_llong p_next, p_done; /* prep's tokens taken, and done */
    atomic_llong next; /* the next work item, counted over the sequences' tokens in turn */
} attn_task;

void cpu_softmax_scaled(float *row, int64_t n, float scale) {
    float max = -INFINITY, sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        row[j] *= scale;
        max = row[j] > max ? row[j] : max;
    }
    for (int64_t j = 0; j < n; j++) {
        row[j] = expf(row[j] - max);
        sum += row[j];
    }
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; j++)
        row[j] *= inv;
}

/* element `i` of cache rows in o's type */
static const void *kv_at(const void *base, const cpu_kv_ops *o, int64_t i) {
    return (const uint8_t *)base + (size_t)i * o->elem_size;
}

static void attn_worker(void *arg, int ith, int nth) {
    attn_task *a = arg;
    const model_config *c = a->c;
    const int64_t kv_stride = c->n_head_kv * c->head_dim;
    const int64_t v_stride = c->n_head_kv * c->head_dim_v;
    const int64_t group = c->n_head / c->n_head_kv;
    const int64_t per_token = c->n_head / a->heads; /* items per token */
    const float scale = 1.0f / sqrtf((float)c->head_dim);
    const cpu_softmax_fn softmax = cpu_fast_softmax_get();
    float *scores = a->scores + (size_t)ith * (size_t)a->n_ctx;
    (void)nth;
    if (a->prep) { /* as mm_worker's quantization: only threads inside the task are waited on */
        for (int64_t t; (t = atomic_fetch_add(&a->p_next, 1)) < a->n_tokens;) {
            a->prep->fn(a->prep->arg, t);
            atomic_fetch_add(&a->p_done, 1);
        }
        for (int spins = 0; atomic_load(&a->p_done) < a->n_tokens;)
            cpu_pool_spin(&spins);
    }
    /* items in increasing order: i and base (the items of the sequences before it) only
     * move forward */
    int64_t i = 0, base = 0;
    for (;;) {
        int64_t item = atomic_fetch_add(&a->next, 1);
        while (i < a->n_seqs && item - base >= a->seqs[i].n * per_token)
            base += a->seqs[i++].n * per_token;
        if (i == a->n_seqs)
            return;
        const cpu_attn_seq *sq = &a->seqs[i];
        const cpu_kv_ops *ko = sq->kv.k_ops, *vo = sq->kv.v_ops;
        const int64_t tok = (item - base) / per_token, h0 = (item - base) % per_token * a->heads;
        const int64_t t = sq->t0 + tok, pos = sq->pos0 + tok;
        const int64_t j0 = a->window > 0 && pos >= a->window ? pos - a->window + 1 : 0; /* first row seen */
        for (int64_t h = h0; h < h0 + a->heads; h++) {
            const int64_t kvh = h / group;
            const float *qh = a->q + t * c->n_head * c->head_dim + h * c->head_dim;
            ko->dots(scores, qh, kv_at(sq->kv.k, ko, j0 * kv_stride + kvh * c->head_dim), kv_stride, pos + 1 - j0,
                     c->head_dim);
            softmax(scores, pos + 1 - j0, scale);
            vo->wsum(a->out + t * c->n_head * c->head_dim_v + h * c->head_dim_v, scores,
                     kv_at(sq->kv.v, vo, j0 * v_stride + kvh * c->head_dim_v), v_stride, pos + 1 - j0, c->head_dim_v);
        }
    }
}

void cpu_fast_attention_seqs(cpu_pool *pool, float *out, const float *q, const cpu_attn_seq *seqs, int64_t n_seqs,
                             const model_config *c, float *scores, int64_t n_ctx, int64_t window) {
    cpu_fast_attention_seqs_prep(pool, out, q, seqs, n_seqs, c, scores, n_ctx, window, NULL);
}

void cpu_fast_attention_seqs_prep(cpu_pool *pool, float *out, const float *q, const cpu_attn_seq *seqs,
                                  int64_t n_seqs, const model_config *c, float *scores, int64_t n_ctx, int64_t window,
                                  const cpu_attn_prep *prep) {
    int64_t n_tokens = 0;
    for (int64_t i = 0; i < n_seqs; i++)
        n_tokens += seqs[i].n;
    /* a group of heads per item keeps its KV head's rows in L1 from one head to the next;
     * single heads where groups would be too few to share out (one token's 3 groups) */
    const int64_t group = c->n_head / c->n_head_kv;
    const int64_t heads = n_tokens * c->n_head_kv >= 4 * (int64_t)cpu_pool_size(pool) ? group : 1;
    attn_task a = {out, q, seqs, n_seqs, n_ctx, window, c, scores, heads, prep, n_tokens, 0, 0, 0};
    atomic_init(&a.p_next, 0);
    atomic_init(&a.p_done, 0);
    atomic_init(&a.next, 0);
    cpu_pool_run(pool, attn_worker, &a);
}

enum { ATTN_BLOCK_TOKENS = 48 }; /* queries per unit of the blocked prompt attention */

size_t cpu_fast_attn_scratch_floats(int64_t n_ctx, int64_t head_dim) {
    /* scores (block, n_ctx), a value panel (n_ctx, 16), 16 key rows and their panel */
    const size_t n = (size_t)(ATTN_BLOCK_TOKENS + SGEMM_PANEL_ROWS) * (size_t)n_ctx +
                     2 * SGEMM_PANEL_ROWS * (size_t)head_dim;
    return (n + 15) / 16 * 16;
}

typedef struct battn_task {
    float *out;
    const float *q;
    cpu_kv_view kv;
    int64_t pos0, n_tokens, n_ctx;
    const model_config *c;
    float *scratch; /* (threads, cpu_fast_attn_scratch_floats) */
    const cpu_sgemm_ops *mm;
    atomic_llong next; /* the next unit */
} battn_task;

/* One unit: query tokens [t0, t1) of head h. The scores of a query past its own position
 * are computed (up to the block's last position) and then weighted zero. K and V reach
 * the tile as f32 panels, converted from the cache's type while they are packed. */
static void battn_unit(const battn_task *a, float *sc, int64_t h, int64_t t0, int64_t t1) {
    const model_config *c = a->c;
    const cpu_kv_ops *ko = a->kv.k_ops, *vo = a->kv.v_ops;
    const int64_t hd = c->head_dim, hdv = c->head_dim_v, kvh = h / (c->n_head / c->n_head_kv);
    const int64_t kv_stride = c->n_head_kv * hd, v_stride = c->n_head_kv * hdv;
    const int64_t q_stride = c->n_head * hd, out_stride = c->n_head * hdv;
    const int64_t n_keys = a->pos0 + t1, ld = n_keys; /* keys of the block's last query */
    const float scale = 1.0f / sqrtf((float)hd);
    const cpu_softmax_fn softmax = cpu_fast_softmax_get();
    float *s = sc;                                                   /* (t1 - t0, n_keys) */
    float *vpanel = s + (size_t)ATTN_BLOCK_TOKENS * (size_t)a->n_ctx; /* (n_keys, 16) */
    float *krows = vpanel + SGEMM_PANEL_ROWS * (size_t)a->n_ctx;      /* (16, hd) */
    float *kpanel = krows + SGEMM_PANEL_ROWS * hd;                    /* (hd, 16) */
    /* scores = Q K^T, 16 keys at a time */
    for (int64_t k0 = 0; k0 < n_keys; k0 += SGEMM_PANEL_ROWS) {
        const int nk = (int)(n_keys - k0 < SGEMM_PANEL_ROWS ? n_keys - k0 : SGEMM_PANEL_ROWS);
        for (int r = 0; r < SGEMM_PANEL_ROWS; r++) {
            if (r < nk)
                ko->to_f32(kv_at(a->kv.k, ko, (k0 + r) * kv_stride + kvh * hd), krows + r * hd, hd);
            else
                memset(krows + r * hd, 0, (size_t)hd * sizeof(float));
        }
        a->mm->pack(krows, hd, kpanel);
        tile_rows(a->mm, a->q + t0 * q_stride + h * hd, q_stride, t1 - t0, kpanel, hd, s + k0, ld, nk);
    }
    /* softmax of each query over its own keys 0..pos, zero past them */
    for (int64_t t = t0; t < t1; t++) {
        float *row = s + (t - t0) * ld;
        const int64_t pos = a->pos0 + t;
        softmax(row, pos + 1, scale);
        for (int64_t j = pos + 1; j < n_keys; j++)
            row[j] = 0.0f;
    }
    /* out = P V, 16 value dimensions at a time: their rows are already a k-major panel */
    for (int64_t d0 = 0; d0 < hdv; d0 += SGEMM_PANEL_ROWS) {
        const int nd = (int)(hdv - d0 < SGEMM_PANEL_ROWS ? hdv - d0 : SGEMM_PANEL_ROWS);
        vo->panel(vpanel, kv_at(a->kv.v, vo, kvh * hdv + d0), v_stride, n_keys, nd);
        tile_rows(a->mm, s, ld, t1 - t0, vpanel, n_keys, a->out + t0 * out_stride + h * hdv + d0, out_stride, nd);
    }
}

static void battn_worker(void *arg, int ith, int nth) {
    battn_task *a = arg;
    float *sc = a->scratch + (size_t)ith * cpu_fast_attn_scratch_floats(a->n_ctx, a->c->head_dim);
    const int64_t n_blocks = (a->n_tokens + ATTN_BLOCK_TOKENS - 1) / ATTN_BLOCK_TOKENS;
    (void)nth;
    /* units from a counter, last blocks (the costliest) first */
    for (int64_t u; (u = atomic_fetch_add(&a->next, 1)) < n_blocks * a->c->n_head;) {
        const int64_t b = n_blocks - 1 - u / a->c->n_head, h = u % a->c->n_head;
        const int64_t t0 = b * ATTN_BLOCK_TOKENS;
        battn_unit(a, sc, h, t0, t0 + ATTN_BLOCK_TOKENS < a->n_tokens ? t0 + ATTN_BLOCK_TOKENS : a->n_tokens);
    }
}

void cpu_fast_attention(cpu_pool *pool, float *out, const float *q, const cpu_kv_view *kv, int64_t pos0,
                        int64_t n_tokens, const model_config *c, float *scores, int64_t n_ctx, float *block_scratch,
                        int64_t window) {
    /* the blocked path has no window: it runs only while every query sees all rows */
    const int windowed = window > 0 && pos0 + n_tokens > window;
    if (n_tokens >= CPU_SGEMM_MIN_TOKENS && block_scratch && !windowed) {
        battn_task b = {out, q, *kv, pos0, n_tokens, n_ctx, c, block_scratch, cpu_sgemm_get(), 0};
        atomic_init(&b.next, 0);
        cpu_pool_run(pool, battn_worker, &b);
        return;
    }
    const cpu_attn_seq one = {0, n_tokens, pos0, *kv};
    cpu_fast_attention_seqs(pool, out, q, &one, 1, c, scores, n_ctx, window);
}
