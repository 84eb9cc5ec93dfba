/*
 * context.c - contexts: the backend chosen once (CPU reference, CPU fast path or the
 * backend that holds the model's weights), its KV cache and scratch made once, the RoPE
 * tables built for it, and decode through it.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "core/cpus.h"
#include "core/status.h"
#include "model/model.h"

enum { DEFAULT_N_CTX = 4096, DEFAULT_N_BATCH = 512 };

er_context_params er_context_default_params(void) {
    er_context_params p = {0, 0, 0, 0, ER_KV_DEFAULT, ER_KV_DEFAULT, 0};
    return p;
}

/* The cache type (enum er_type) that `asked` means on backend ops: its default for
 * ER_KV_DEFAULT; a type it does not store fails. */
static er_status kv_type(er_kv_type asked, const char *which, const backend_ops *ops, uint32_t *out) {
    static const uint32_t types[] = {[ER_KV_F32] = ER_TYPE_F32, [ER_KV_F16] = ER_TYPE_F16, [ER_KV_Q8_0] = ER_TYPE_Q8_0};
    if (asked != ER_KV_DEFAULT && asked != ER_KV_F32 && asked != ER_KV_F16 && asked != ER_KV_Q8_0)
        return er_fail(ER_ERR_INVALID_ARG, "er_context_create: %s %d is not an er_kv_type", which, (int)asked);
    *out = asked == ER_KV_DEFAULT ? ops->kv_default : types[asked];
    if (!(ops->kv_types & 1u << *out))
        return er_fail(ER_ERR_UNSUPPORTED, "er_context_create: the %s backend does not keep a KV cache in %s (%s; its "
                       "default is %s)", ops->name, er_type_get(*out)->name, which, er_type_get(ops->kv_default)->name);
    return ER_OK;
}

er_status er_context_create(er_model *model, const er_context_params *params, er_context **out) {
    er_status st = ER_OK;
    if (!model || !out)
        return er_fail(ER_ERR_INVALID_ARG, "er_context_create: NULL %s", model ? "out" : "model");
    *out = NULL;
    er_context_params p = params ? *params : er_context_default_params();
    const model_config *c = &model->view.config;
    if (p.n_ctx < 0 || p.n_batch < 0 || p.n_threads < 0 || p.n_seq_max < 0)
        return er_fail(ER_ERR_INVALID_ARG, "er_context_create: negative n_ctx, n_batch, n_threads or n_seq_max");
    if (p.n_seq_max == 0)
        p.n_seq_max = 1;
    if (p.n_seq_max > ER_MAX_SEQ)
        return er_fail(ER_ERR_INVALID_ARG, "er_context_create: n_seq_max %d is more than %d sequences", p.n_seq_max,
                       ER_MAX_SEQ);
    if (p.n_ctx == 0)
        p.n_ctx = c->n_ctx_train < DEFAULT_N_CTX ? c->n_ctx_train : DEFAULT_N_CTX;
    if (p.n_batch == 0)
        p.n_batch = DEFAULT_N_BATCH;
    /* a batch holds at most every sequence's whole context (the product cannot overflow
     * where it is taken: it is at most n_batch) */
    if (p.n_batch / p.n_seq_max >= p.n_ctx)
        p.n_batch = p.n_ctx * p.n_seq_max;
    const int n_cpus = er_usable_cpus();
    if (p.n_threads == 0)
        p.n_threads = n_cpus > 64 ? 64 : n_cpus;
    else if (p.n_threads > n_cpus) /* threads that cannot all run spin at every barrier */
        p.n_threads = n_cpus;
    /* the backend that holds the weights, else the CPU's path the caller asked for */
    const backend_ops *ops = model->device ? model->device : backend_get(p.reference ? BACKEND_CPU_REFERENCE : BACKEND_CPU);
    backend_ctx_params bp = {p.n_ctx, p.n_batch, p.n_threads, 0, 0, {NULL, NULL}, p.n_seq_max};
    if (p.n_seq_max > 1 && !ops->decode_batch)
        return er_fail(ER_ERR_UNSUPPORTED, "er_context_create: the %s backend decodes one sequence per context so far; "
                       "n_seq_max %d is not supported (use one context per sequence)", ops->name, p.n_seq_max);
    if ((st = model_check_backend(model, ops)) != ER_OK || (st = kv_type(p.type_k, "type_k", ops, &bp.type_k)) != ER_OK ||
        (st = kv_type(p.type_v, "type_v", ops, &bp.type_v)) != ER_OK)
        return st;

    er_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return er_fail(ER_ERR_NO_MEMORY, "er_context_create: out of memory");
    ctx->model = model;
    ctx->ops = ops;
    ctx->type_k = bp.type_k;
    ctx->type_v = bp.type_v;
    ctx->n_ctx = p.n_ctx;
    ctx->n_seq = p.n_seq_max;
    ctx->n_batch = p.n_batch;
    ctx->n_threads = p.n_threads;
    /* a second table only where sliding-window layers rotate differently (Gemma-3's: their
     * own base, no position scaling) */
    const int n_tables = (c->features & ER_FEAT_SLIDING_WINDOW) &&
                                 (c->rope_base_swa != c->rope_base || c->rope_pos_scale_swa != c->rope_pos_scale)
                             ? 2
                             : 1;
    const size_t table_floats = (size_t)p.n_ctx * (size_t)c->n_rot; /* (n_ctx, n_rot / 2, 2) */
    ctx->logits = calloc((size_t)c->n_vocab, sizeof(float));
    ctx->rope_cs = malloc((size_t)n_tables * table_floats * sizeof(float));
    ctx->n_pos = calloc((size_t)p.n_seq_max, sizeof(int64_t));
    ctx->next_pos = calloc((size_t)p.n_seq_max, sizeof(int64_t));
    ctx->no_logits = calloc((size_t)p.n_batch, sizeof(int8_t));
    if (!ctx->logits || !ctx->rope_cs || !ctx->n_pos || !ctx->next_pos || !ctx->no_logits) {
        st = er_fail(ER_ERR_NO_MEMORY, "er_context_create: out of memory for a %lld-token context of %s",
                     (long long)p.n_ctx, model->path);
        goto fail;
    }
    /* the divisors: Llama 3's, else longrope's for this context length (long ones when it
     * passes the original context, as llama.cpp chooses), else none */
    const float *divisors = model->rope_freqs    ? model->rope_freqs
                            : p.n_ctx > c->n_ctx_orig && model->rope_long ? model->rope_long
                                                                        : model->rope_short;
    model_rope_table(c, c->rope_base, c->rope_pos_scale, divisors, p.n_ctx, ctx->rope_cs);
    bp.rope_cs[0] = ctx->rope_cs;
    if (n_tables == 2) {
        model_rope_table(c, c->rope_base_swa, c->rope_pos_scale_swa, divisors, p.n_ctx, ctx->rope_cs + table_floats);
        bp.rope_cs[1] = ctx->rope_cs + table_floats;
    }
    if ((st = ops->context_create(&model->view, model->dev, &bp, &ctx->bctx)) != ER_OK)
        goto fail;
    *out = ctx;
    return ER_OK;
fail:
    er_context_free(ctx);
    return st;
}

void er_context_free(er_context *ctx) {
    if (!ctx)
        return;
    if (ctx->bctx)
        ctx->ops->context_free(ctx->bctx);
    free(ctx->logits);
    free(ctx->rope_cs);
    free(ctx->n_pos);
    free(ctx->next_pos);
    free(ctx->no_logits);
    free(ctx->own_batch_logits);
    free(ctx);
}

int64_t er_context_n_ctx(const er_context *ctx) { return ctx ? ctx->n_ctx : 0; }
int64_t er_context_n_past(const er_context *ctx) { return ctx ? ctx->n_pos[0] : 0; }
int er_context_n_threads(const er_context *ctx) { return ctx ? ctx->n_threads : 0; }
const float *er_context_logits(const er_context *ctx) { return ctx && ctx->has_logits ? ctx->logits : NULL; }

er_status er_context_decode(er_context *ctx, const int32_t *tokens, int64_t n_tokens, float *logits_all) {
    if (!ctx || !tokens || n_tokens <= 0)
        return er_fail(ER_ERR_INVALID_ARG, "er_context_decode: %s", !ctx ? "NULL context" : !tokens ? "NULL tokens" : "no tokens");
    const int64_t n_vocab = ctx->model->view.config.n_vocab;
    for (int64_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return er_fail(ER_ERR_INVALID_ARG, "token %lld (id %d) is outside the vocabulary [0, %lld)",
                           (long long)i, tokens[i], (long long)n_vocab);
    if (n_tokens > ctx->n_ctx - ctx->n_pos[0])
        return er_fail(ER_ERR_CONTEXT_FULL, "%lld tokens do not fit: %lld of the context's %lld are used",
                       (long long)n_tokens, (long long)ctx->n_pos[0], (long long)ctx->n_ctx);
    er_status st = ctx->ops->decode(ctx->bctx, tokens, n_tokens, ctx->n_pos[0], logits_all, ctx->logits);
    if (st != ER_OK)
        return st;
    ctx->n_pos[0] += n_tokens;
    ctx->has_logits = 1;
    return ER_OK;
}

er_status er_context_rewind(er_context *ctx, int64_t n_past) {
    if (!ctx || n_past < 0 || n_past > ctx->n_pos[0])
        return er_fail(ER_ERR_INVALID_ARG, "er_context_rewind: position %lld is outside [0, %lld]",
                       (long long)n_past, ctx ? (long long)ctx->n_pos[0] : 0LL);
    ctx->n_pos[0] = n_past;
    ctx->has_logits = 0;
    return ER_OK;
}

int er_context_n_seq(const er_context *ctx) { return ctx ? ctx->n_seq : 0; }
int64_t er_context_n_batch(const er_context *ctx) { return ctx ? ctx->n_batch : 0; }

static int bad_seq(const er_context *ctx, int32_t seq) { return seq < 0 || seq >= ctx->n_seq; }

int64_t er_context_seq_pos(const er_context *ctx, int32_t seq) {
    return !ctx || bad_seq(ctx, seq) ? -1 : ctx->n_pos[seq];
}

er_status er_context_seq_remove(er_context *ctx, int32_t seq, int64_t p0) {
    if (!ctx || bad_seq(ctx, seq))
        return er_fail(ER_ERR_INVALID_ARG, "er_context_seq_remove: %s", !ctx ? "NULL context" : "no such sequence");
    if (p0 < 0 || p0 > ctx->n_pos[seq])
        return er_fail(ER_ERR_INVALID_ARG, "er_context_seq_remove: position %lld is outside sequence %d's [0, %lld]",
                       (long long)p0, seq, (long long)ctx->n_pos[seq]);
    ctx->n_pos[seq] = p0;
    if (seq == 0)
        ctx->has_logits = 0;
    return ER_OK;
}

er_status er_context_seq_copy(er_context *ctx, int32_t src, int32_t dst, int64_t n) {
    if (!ctx || bad_seq(ctx, src) || bad_seq(ctx, dst) || src == dst)
        return er_fail(ER_ERR_INVALID_ARG, "er_context_seq_copy: %s (sequences %d -> %d of %d)",
                       !ctx ? "NULL context" : src == dst ? "a sequence onto itself" : "no such sequence", src, dst,
                       ctx ? ctx->n_seq : 0);
    if (n < 0 || n > ctx->n_pos[src])
        return er_fail(ER_ERR_INVALID_ARG, "er_context_seq_copy: %lld positions, but sequence %d holds %lld",
                       (long long)n, src, (long long)ctx->n_pos[src]);
    er_status st = ctx->ops->seq_copy(ctx->bctx, src, dst, n);
    if (st != ER_OK)
        return st;
    ctx->n_pos[dst] = n;
    if (dst == 0)
        ctx->has_logits = 0;
    return ER_OK;
}

/* Every token in the vocabulary, each sequence's tokens consecutive and at its next
 * positions, within its n_ctx; *n_logits counts the tokens that ask for logits. */
static er_status check_batch(er_context *ctx, const er_batch *b, int64_t *n_logits) {
    const int64_t n_vocab = ctx->model->view.config.n_vocab;
    if (!b || b->n_tokens <= 0 || !b->tokens || !b->seq_ids || !b->pos)
        return er_fail(ER_ERR_INVALID_ARG, "er_context_decode_batch: %s", !b ? "NULL batch" : b->n_tokens <= 0 ? "no tokens"
                                                                                       : "NULL tokens, seq_ids or pos");
    if (b->n_tokens > ctx->n_batch)
        return er_fail(ER_ERR_INVALID_ARG, "er_context_decode_batch: %lld tokens, more than the context's n_batch %lld",
                       (long long)b->n_tokens, (long long)ctx->n_batch);
    for (int s = 0; s < ctx->n_seq; s++)
        ctx->next_pos[s] = -1; /* not in the batch yet */
    *n_logits = 0;
    for (int64_t i = 0; i < b->n_tokens; i++) {
        const int32_t s = b->seq_ids[i];
        if (b->tokens[i] < 0 || b->tokens[i] >= n_vocab)
            return er_fail(ER_ERR_INVALID_ARG, "er_context_decode_batch: token %lld (id %d) is outside the vocabulary "
                           "[0, %lld)", (long long)i, b->tokens[i], (long long)n_vocab);
        if (bad_seq(ctx, s))
            return er_fail(ER_ERR_INVALID_ARG, "er_context_decode_batch: token %lld's sequence %d is outside [0, %d)",
                           (long long)i, s, ctx->n_seq);
        if (ctx->next_pos[s] >= 0 && b->seq_ids[i - 1] != s)
            return er_fail(ER_ERR_INVALID_ARG, "er_context_decode_batch: sequence %d's tokens are not consecutive in "
                           "the batch (token %lld)", s, (long long)i);
        const int64_t want = ctx->next_pos[s] >= 0 ? ctx->next_pos[s] : ctx->n_pos[s];
        if (b->pos[i] != want)
            return er_fail(ER_ERR_INVALID_ARG, "er_context_decode_batch: token %lld of sequence %d is at position %lld; "
                           "the sequence's next position is %lld", (long long)i, s, (long long)b->pos[i], (long long)want);
        if (want >= ctx->n_ctx)
            return er_fail(ER_ERR_CONTEXT_FULL, "er_context_decode_batch: sequence %d is full: position %lld is past "
                           "its %lld", s, (long long)want, (long long)ctx->n_ctx);
        ctx->next_pos[s] = want + 1;
        *n_logits += b->logits && b->logits[i];
    }
    return ER_OK;
}

/* A backend without decode_batch has one sequence: the batch is an er_context_decode
 * whose logits are every token's or the last one's. */
static er_status decode_one_sequence(er_context *ctx, const er_batch *b, int64_t n_logits, float *logits) {
    const int64_t n_vocab = ctx->model->view.config.n_vocab;
    const int last_only = n_logits == 1 && b->logits[b->n_tokens - 1];
    if (n_logits != 0 && n_logits != b->n_tokens && !last_only)
        return er_fail(ER_ERR_UNSUPPORTED, "er_context_decode_batch: the %s backend gives the logits of every token "
                       "or of the last one, not of %lld of %lld", ctx->ops->name, (long long)n_logits,
                       (long long)b->n_tokens);
    er_status st = ctx->ops->decode(ctx->bctx, b->tokens, b->n_tokens, ctx->n_pos[0],
                                    n_logits == b->n_tokens ? logits : NULL, ctx->logits);
    if (st == ER_OK && last_only)
        memcpy(logits, ctx->logits, (size_t)n_vocab * sizeof(float));
    return st;
}

/* Where a batch's n_rows logits rows go when the caller keeps none: the backend's
 * buffer, else the context's own, grown to fit. */
static er_status kept_logits(er_context *ctx, int64_t n_rows, float **out) {
    const size_t row = (size_t)ctx->model->view.config.n_vocab * sizeof(float);
    float *buf = NULL;
    if (ctx->ops->logits_buffer) {
        if (!(buf = ctx->ops->logits_buffer(ctx->bctx, n_rows)))
            return ER_ERR_NO_MEMORY; /* the backend's message */
    } else {
        if (n_rows > ctx->own_batch_rows) {
            float *grown = realloc(ctx->own_batch_logits, (size_t)n_rows * row);
            if (!grown)
                return er_fail(ER_ERR_NO_MEMORY, "er_context_decode_batch: out of memory for %lld rows of logits",
                               (long long)n_rows);
            ctx->own_batch_logits = grown;
            ctx->own_batch_rows = n_rows;
        }
        buf = ctx->own_batch_logits;
    }
    ctx->batch_logits = *out = buf;
    ctx->n_batch_logits = n_rows;
    return ER_OK;
}

const float *er_context_batch_logits(const er_context *ctx, int64_t i) {
    if (!ctx || i < 0 || i >= ctx->n_batch_logits)
        return NULL;
    return ctx->batch_logits + i * ctx->model->view.config.n_vocab;
}

er_status er_context_decode_batch(er_context *ctx, const er_batch *batch, float *logits) {
    int64_t n_logits = 0;
    er_status st;
    if (!ctx)
        return er_fail(ER_ERR_INVALID_ARG, "er_context_decode_batch: NULL context");
    ctx->n_batch_logits = 0;
    if ((st = check_batch(ctx, batch, &n_logits)) != ER_OK)
        return st;
    if (n_logits > 0 && !logits && (st = kept_logits(ctx, n_logits, &logits)) != ER_OK)
        return st;
    /* no flags: none asks, and the backend reads the context's zeros */
    const backend_batch b = {batch->n_tokens, batch->tokens, batch->seq_ids, batch->pos,
                             batch->logits ? batch->logits : ctx->no_logits};
    st = ctx->ops->decode_batch ? ctx->ops->decode_batch(ctx->bctx, &b, logits)
                                : decode_one_sequence(ctx, batch, n_logits, logits);
    if (st != ER_OK) {
        ctx->n_batch_logits = 0;
        return st;
    }
    for (int64_t i = 0; i < batch->n_tokens; i++)
        ctx->n_pos[batch->seq_ids[i]] = batch->pos[i] + 1;
    ctx->has_logits = 0;
    return ER_OK;
}

er_status context_profile(er_context *ctx, int64_t pos, const int32_t *tokens, int64_t n_tokens, char *report,
                          size_t cap) {
    if (!ctx->ops->profile)
        return er_fail(ER_ERR_UNSUPPORTED, "the %s backend has no profile", ctx->ops->name);
    return ctx->ops->profile(ctx->bctx, pos, tokens, n_tokens, report, cap);
}
