/*
 * forward.c - the CPU backend's transformer forward pass, for every architecture: the
 * plain Llama layer, with the features of backend.h switched on by flags read once at
 * load (the blocks marked with the feature they belong to):
 *
 *   x = embed(tokens)                                   [EMBD_SCALE: * embd_scale]
 *   per layer:  h = rmsnorm(x) ; q, k, v = h Wq, h Wk, h Wv   [QKV_BIAS: + bq, bk, bv]
 *               [QK_NORM: rmsnorm over each q and k head] ; rope(q, k) ; k, v -> cache
 *               a = attention(q, cache) Wo     [SLIDING_WINDOW: the last n_swa rows only]
 *               x += a                                   [POST_NORMS: x += rmsnorm(a)]
 *               h = rmsnorm(x) ; f = (silu(h Wgate) * (h Wup)) Wdown  [GEGLU: gelu]
 *               x += f                                   [POST_NORMS: x += rmsnorm(f)]
 *   logits = rmsnorm(x) Wout
 *
 * The batch is processed layer by layer (every weight row is read once per batch); K and
 * V are computed in f32 and then stored into the cache rows of their positions, in the
 * cache's type (F32, or F16 on the fast path; the reference rounds them through F16 or
 * Q8_0 when asked, cpu.h). RoPE reads the model layer's table of
 * angles (backend.h), the same floats every backend rotates by.
 */
#include <assert.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/ops.h"

/* Batch invariance. The fast path multiplies a call of CPU_SGEMM_MIN_TOKENS tokens or
 * more in f32 on dequantized weights and a smaller one with 8-bit activations (fast.c):
 * two different roundings, chosen by the call's row count. Within either, a row's result
 * does not depend on the other rows (every output is one dot product in a fixed order).
 * So that a sequence's numbers do not depend on who shares its batch, the path is chosen
 * by each sequence's own row count ("big": >= CPU_SGEMM_MIN_TOKENS), never the batch's:
 * consecutive big sequences go through one call, and consecutive small ones through calls
 * of fewer than CPU_SGEMM_MIN_TOKENS rows. The reference's matmul is invariant anyway. */
static int is_big(int64_t n_rows) { return n_rows >= CPU_SGEMM_MIN_TOKENS; }
_Static_assert(CPU_SGEMM_MIN_TOKENS == ER_PROMPT_CHUNK_MIN, "edgerunner.h promises chunks of ER_PROMPT_CHUNK_MIN "
                                                          "tokens or more are cut-invariant");

/* For each of outs: y (n rows, y_stride apart) = x (n rows of w->n_in) @ W^T, where the
 * rows are `runs`: a run is n_run[i] consecutive rows that may share one call (big[i]:
 * the f32 path). The fast path computes every weight of outs in one pool run per piece
 * (cpu_fast_matmuls), and with `swiglu` (outs = {gate, up}) gate = silu(gate) * up.
 * f (NULL: none): x is first normalized into f->xn, and/or the one product is added to
 * f->residual (cpu_mm_fuse), in the same pool runs on the fast path. */
static void matmul_runs(cpu_context *cc, const cpu_mm_out *outs, int n_outs, int swiglu, const float *x,
                        const cpu_mm_fuse *f, const int64_t *n_run, const int8_t *big, int64_t n_runs) {
    const int64_t n_in = outs[0].w->n_in;
    int64_t t = 0, n_all = 0;
    for (int64_t i = 0; i < n_runs; i++)
        n_all += n_run[i];
    if (cc->reference) {
        if (f && f->norm_w) {
            cpu_rmsnorm(f->xn, x, f->norm_w, n_all, n_in, f->eps);
            x = f->xn;
        }
        for (int i = 0; i < n_outs; i++)
            cpu_matmul(cc->pool, outs[i].w, x, n_all, outs[i].y, outs[i].y_stride, cc->row);
        for (int64_t i = 0; swiglu && i < n_all; i++)
            cpu_swiglu(outs[0].y + i * outs[0].y_stride, outs[1].y + i * outs[1].y_stride, outs[0].w->n_out);
        for (int64_t i = 0; f && f->residual && i < n_all * outs[0].y_stride; i++)
            f->residual[i] += outs[0].y[i];
        return;
    }
    for (int64_t i = 0; i < n_runs; i++) {
        const int64_t piece = big[i] ? n_run[i] : CPU_SGEMM_MIN_TOKENS - 1;
        for (int64_t done = 0; done < n_run[i]; done += piece) {
            const int64_t n = n_run[i] - done < piece ? n_run[i] - done : piece, row = t + done;
            cpu_mm_out at[CPU_MM_MAX_OUTS]; /* outs from row t + done */
            for (int o = 0; o < n_outs; o++)
                at[o] = (cpu_mm_out){outs[o].w, outs[o].y + row * outs[o].y_stride, outs[o].y_stride};
            cpu_mm_fuse fa; /* f from row t + done */
            if (f)
                fa = (cpu_mm_fuse){f->norm_w, f->eps, f->xn ? f->xn + row * n_in : NULL,
                                   f->residual ? f->residual + row * outs[0].y_stride : NULL};
            cpu_fast_matmuls_fused(cc->pool, at, n_outs, x + row * n_in, n, cc->act, swiglu, f ? &fa : NULL);
        }
        t += n_run[i];
    }
}

/* One weight's matmul_runs. */
static void matmul_runs1(cpu_context *cc, const er_weight *w, const float *x, float *y, int64_t y_stride,
                         const cpu_mm_fuse *f, const int64_t *n_run, const int8_t *big, int64_t n_runs) {
    const cpu_mm_out out = {w, y, y_stride};
    matmul_runs(cc, &out, 1, 0, x, f, n_run, big, n_runs);
}

/* rows (n_rows, n) = their values in `type` (quantized and back), row by row; row: scratch
 * of one row in that type */
static void round_rows(const er_type_traits *type, float *rows, int64_t n_rows, int64_t n, void *row) {
    for (int64_t r = 0; r < n_rows; r++) {
        type->from_f32(rows + r * n, row, n);
        type->to_f32(row, rows + r * n, n);
    }
}

/* A layer's work on each token between the q, k, v products and the attention. */
typedef struct token_prep {
    cpu_context *cc;
    const backend_batch *b;
    const layer_weights *l;
    const float *rope_cs;       /* (n_ctx, n_rot / 2, 2) */
    uint8_t *k_cache, *v_cache; /* the layer's, (n_seq, n_ctx, kv_dim) and (n_seq, n_ctx, v_dim) */
    size_t k_row, v_row;        /* bytes of a row of each */
} token_prep;

/* Token t: [QKV_BIAS] biases, [QK_NORM] the heads' norms, RoPE on q and k, [the reference,
 * when asked] K and V rounded through the cache type, then K and V into the cache rows of
 * its sequence and position (each sequence reads and writes its own rows only). */
static void prep_token(void *arg, int64_t t) {
    const token_prep *p = arg;
    cpu_context *cc = p->cc;
    const model_config *c = &cc->m->config;
    const layer_weights *l = p->l;
    const int64_t q_dim = c->n_head * c->head_dim, kv_dim = c->n_head_kv * c->head_dim;
    const int64_t v_dim = c->n_head_kv * c->head_dim_v;
    float *qt = cc->q + t * q_dim, *kt = cc->k_cur + t * kv_dim, *vt = cc->v_cur + t * v_dim;
    if (c->features & ER_FEAT_QKV_BIAS) {
        cpu_add_bias(qt, l->bq, 1, q_dim);
        cpu_add_bias(kt, l->bk, 1, kv_dim);
        cpu_add_bias(vt, l->bv, 1, v_dim);
    }
    const float *cs = p->rope_cs + p->b->pos[t] * (c->n_rot / 2) * 2;
    if (c->features & ER_FEAT_QK_NORM) {
        cpu_rmsnorm(qt, qt, l->q_norm, c->n_head, c->head_dim, c->norm_eps);
        cpu_rmsnorm(kt, kt, l->k_norm, c->n_head_kv, c->head_dim, c->norm_eps);
    }
    cpu_rope(qt, c->n_head, c->head_dim, c->n_rot, c->rope_neox, cs);
    cpu_rope(kt, c->n_head_kv, c->head_dim, c->n_rot, c->rope_neox, cs);
    if (cc->k_round)
        round_rows(cc->k_round, kt, 1, kv_dim, cc->round_row);
    if (cc->v_round)
        round_rows(cc->v_round, vt, 1, v_dim, cc->round_row);
    const size_t row = (size_t)p->b->seq_ids[t] * (size_t)cc->n_ctx + (size_t)p->b->pos[t];
    cc->k_ops->store(kt, p->k_cache + row * p->k_row, kv_dim);
    cc->v_ops->store(vt, p->v_cache + row * p->v_row, v_dim);
}

/* Each token's prep_token, then the attention of every sequence over its own cache rows.
 * Fast path: the sequences of fewer than CPU_SGEMM_MIN_TOKENS tokens (decode steps) in one
 * pool run, per token as cpu_fast_attention computes them, with the tokens' prep shared
 * out in the same run when they are all such (a step of decodes); longer ones one call
 * each (its blocked prompt path). The reference and its rounding prepare on one thread. */
static void attention(cpu_context *cc, const token_prep *prep, int64_t n_spans, int64_t window) {
    const model_config *c = &cc->m->config;
    uint8_t *k_cache = prep->k_cache, *v_cache = prep->v_cache;
    const size_t k_seq = (size_t)cc->n_ctx * prep->k_row, v_seq = (size_t)cc->n_ctx * prep->v_row; /* a sequence's bytes */
    int all_small = !cc->reference && !cc->k_round && !cc->v_round;
    for (int64_t i = 0; i < n_spans; i++)
        all_small &= !is_big(cc->spans[i].n);
    if (!all_small)
        for (int64_t t = 0; t < prep->b->n_tokens; t++)
            prep_token((void *)prep, t);
    int64_t n_small = 0;
    for (int64_t i = 0; i < n_spans; i++) {
        const cpu_span *s = &cc->spans[i];
        const cpu_kv_view kv = {k_cache + (size_t)s->seq * k_seq, v_cache + (size_t)s->seq * v_seq, cc->k_ops, cc->v_ops};
        float *out = cc->attn + s->t0 * c->n_head * c->head_dim_v; /* (s->n, n_head * head_dim_v) */
        const float *q = cc->q + s->t0 * c->n_head * c->head_dim;  /* (s->n, n_head * head_dim) */
        if (cc->reference) {
            assert(kv.k_ops->type == ER_TYPE_F32 && kv.v_ops->type == ER_TYPE_F32); /* cpu_reference_ops.kv_types */
            cpu_attention_tokens(cc->pool, out, q, kv.k, kv.v, s->pos0, s->n, c, cc->scores, cc->n_ctx, window);
        } else if (is_big(s->n)) {
            cpu_fast_attention(cc->pool, out, q, &kv, s->pos0, s->n, c, cc->scores, cc->n_ctx, cc->attn_scratch, window);
        } else {
            cc->attn_seqs[n_small++] = (cpu_attn_seq){s->t0, s->n, s->pos0, kv};
        }
    }
    if (n_small > 0) {
        const cpu_attn_prep inside = {prep_token, (void *)prep};
        cpu_fast_attention_seqs_prep(cc->pool, cc->attn, cc->q, cc->attn_seqs, n_small, c, cc->scores, cc->n_ctx,
                                     window, all_small ? &inside : NULL);
    }
}

/* The batch's sequences into cc->spans; returns how many. */
static int64_t find_spans(cpu_context *cc, const backend_batch *b) {
    int64_t n_spans = 0;
    for (int64_t t = 0; t < b->n_tokens; t++) {
        if (t == 0 || b->seq_ids[t] != b->seq_ids[t - 1])
            cc->spans[n_spans++] = (cpu_span){t, 0, b->pos[t], b->seq_ids[t], 0};
        cc->spans[n_spans - 1].n++;
        cc->spans[n_spans - 1].n_logits += b->logits[t] != 0;
    }
    return n_spans;
}

/* Runs of the layers' matmuls: consecutive sequences of the same class. n_run, big:
 * (n_spans) at most; returns how many. */
static int64_t layer_runs(const cpu_span *spans, int64_t n_spans, int64_t *n_run, int8_t *big) {
    int64_t n_runs = 0;
    for (int64_t i = 0; i < n_spans; i++) {
        if (n_runs > 0 && big[n_runs - 1] == is_big(spans[i].n)) {
            n_run[n_runs - 1] += spans[i].n;
            continue;
        }
        n_run[n_runs] = spans[i].n;
        big[n_runs++] = (int8_t)is_big(spans[i].n);
    }
    return n_runs;
}

void cpu_forward(cpu_context *cc, const backend_batch *b, float *logits) {
    const model_view *m = cc->m;
    const model_config *c = &m->config;
    const unsigned feat = c->features;
    const int64_t n_tokens = b->n_tokens;
    const int64_t n_embd = c->n_embd;
    const int64_t q_dim = c->n_head * c->head_dim;
    const int64_t kv_dim = c->n_head_kv * c->head_dim;
    const int64_t v_dim = c->n_head_kv * c->head_dim_v;
    float *x = cc->x, *xn = cc->xn;
    float *k_new = cc->k_cur, *v_new = cc->v_cur; /* (n_tokens, kv_dim), (n_tokens, v_dim) */
    const cpu_kv_ops *k_ops = cc->k_ops, *v_ops = cc->v_ops;
    const size_t k_row = (size_t)kv_dim * k_ops->elem_size, v_row = (size_t)v_dim * v_ops->elem_size; /* bytes */
    const size_t k_seq = (size_t)cc->n_ctx * k_row, v_seq = (size_t)cc->n_ctx * v_row; /* bytes per sequence */
    const int64_t n_spans = find_spans(cc, b);
    int64_t *n_run = cc->run_n; /* (n_spans) at most */
    int8_t *big = cc->run_big;  /* (n_spans) at most */
    const int64_t n_runs = layer_runs(cc->spans, n_spans, n_run, big);

    cpu_get_rows(&m->token_embd, b->tokens, n_tokens, x);
    if (feat & ER_FEAT_EMBD_SCALE)
        cpu_scale(x, c->embd_scale, n_tokens * n_embd);
    for (int64_t il = 0; il < c->n_layer; il++) {
        const layer_weights *l = &m->layers[il];
        /* (n_seq, n_ctx, kv_dim), (n_seq, n_ctx, v_dim) */
        uint8_t *k_cache = (uint8_t *)cc->k_cache + (size_t)(il * cc->n_seq) * k_seq;
        uint8_t *v_cache = (uint8_t *)cc->v_cache + (size_t)(il * cc->n_seq) * v_seq;

        const cpu_mm_out qkv[3] = {{&l->wq, cc->q, q_dim}, {&l->wk, k_new, kv_dim}, {&l->wv, v_new, v_dim}};
        const cpu_mm_fuse attn_norm = {l->attn_norm, c->norm_eps, xn, NULL}; /* xn = rmsnorm(x) */
        matmul_runs(cc, qkv, 3, 0, x, &attn_norm, n_run, big, n_runs);
        const token_prep prep = {cc, b, l, cc->rope_cs[l->swa], k_cache, v_cache, k_row, v_row};
        attention(cc, &prep, n_spans, l->swa ? c->n_swa : 0);
        /* x += attn Wo: added inside the product's pool run, unless post-normed first */
        const cpu_mm_fuse add_x = {NULL, 0.0f, NULL, x};
        const int post = (feat & ER_FEAT_POST_NORMS) != 0;
        matmul_runs1(cc, &l->wo, cc->attn, xn, n_embd, post ? NULL : &add_x, n_run, big, n_runs);
        if (post) {
            cpu_rmsnorm(xn, xn, l->post_attn_norm, n_tokens, n_embd, c->norm_eps);
            for (int64_t i = 0; i < n_tokens * n_embd; i++)
                x[i] += xn[i];
        }

        /* SwiGLU inside the gate/up products; GeGLU after them */
        const cpu_mm_out gate_up[2] = {{&l->w_gate, cc->gate, c->n_ff}, {&l->w_up, cc->up, c->n_ff}};
        const cpu_mm_fuse ffn_norm = {l->ffn_norm, c->norm_eps, xn, NULL}; /* xn = rmsnorm(x) */
        matmul_runs(cc, gate_up, 2, !(feat & ER_FEAT_GEGLU), x, &ffn_norm, n_run, big, n_runs);
        if (feat & ER_FEAT_GEGLU)
            cpu_geglu(cc->gate, cc->up, n_tokens * c->n_ff);
        matmul_runs1(cc, &l->w_down, cc->gate, xn, n_embd, post ? NULL : &add_x, n_run, big, n_runs);
        if (post) {
            cpu_rmsnorm(xn, xn, l->post_ffn_norm, n_tokens, n_embd, c->norm_eps);
            for (int64_t i = 0; i < n_tokens * n_embd; i++)
                x[i] += xn[i];
        }
    }

    /* the output head is the largest matmul: only the rows that ask, gathered into xn in
     * batch order; their runs classed by each sequence's count of them, as above */
    int64_t n_out = 0, n_head_runs = 0;
    for (int64_t i = 0; i < n_spans; i++) {
        const cpu_span *s = &cc->spans[i];
        for (int64_t t = s->t0; t < s->t0 + s->n; t++)
            if (b->logits[t])
                cpu_rmsnorm(xn + n_out++ * n_embd, x + t * n_embd, m->output_norm, 1, n_embd, c->norm_eps);
        if (s->n_logits == 0)
            continue;
        if (n_head_runs > 0 && big[n_head_runs - 1] == is_big(s->n_logits)) {
            n_run[n_head_runs - 1] += s->n_logits;
            continue;
        }
        n_run[n_head_runs] = s->n_logits;
        big[n_head_runs++] = (int8_t)is_big(s->n_logits);
    }
    if (n_out > 0)
        matmul_runs1(cc, &m->output, xn, logits, c->n_vocab, NULL, n_run, big, n_head_runs);
}
