/*
 * facade.c - the text-in, text-out facade (er_model_open, er_stream_text,
 * er_generate_text) on top of contexts, er_generate and the tokenizer.
 *
 * Stop strings: generated text is held back while its tail could still be the start of a
 * stop string; a piece goes out once no stop string can begin in it. Nothing after the
 * start of a matched stop string is ever emitted.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "model/model.h"
#include "sampler/sampler.h"

er_status er_model_open(const char *path, er_model **out) { return er_model_load(path, NULL, out); }

const char *er_model_chat_template(const er_model *model, int64_t *len) {
    const char *t = model && model->vocab.chat_template.data ? model->vocab.chat_template.data : NULL;
    if (len)
        *len = t ? (int64_t)model->vocab.chat_template.len : 0;
    return t;
}

void er_free(void *ptr) { free(ptr); }

/* ---- text ---------------------------------------------------------------------------- */

er_text_params er_text_default_params(void) {
    er_text_params p;
    memset(&p, 0, sizeof p);
    p.max_tokens = 256;
    p.sampling = er_sampler_default_params();
    return p;
}

typedef struct text_stream {
    const er_context *ctx; /* er_stream_ids: the on_token hook reads its logits; NULL: `logits` */
    const er_vocab *vocab;
    const er_text_params *params;
    er_detokenizer *detok;
    er_text_callback on_text;
    void *user;
    char *pending; /* (n_pending) text held back: it may be the start of a stop string */
    size_t n_pending, cap_pending;
    int stopped; /* a stop string or a callback ended generation */
    er_stop_reason why; /* set where generation is ended from here */
    int64_t stop_index; /* ER_STOP_STRING: the stop string that matched */
    er_status st;
    const float *logits; /* (n_vocab) er_text_gen_step's: what the on_token hook sees */
    int64_t n_vocab;
} text_stream;

static int emit(text_stream *ts, size_t n) {
    if (n && ts->on_text && ts->on_text(ts->pending, (int64_t)n, ts->user) != 0 && !ts->stopped) {
        ts->stopped = 1;
        ts->why = ER_STOP_CALLBACK;
    }
    memmove(ts->pending, ts->pending + n, ts->n_pending - n);
    ts->n_pending -= n;
    return ts->stopped;
}

/* Appends text and emits what can no longer be part of a stop string. Non-zero: stop. */
static int push_text(text_stream *ts, const char *text, size_t len, int final) {
    if (ts->n_pending + len > ts->cap_pending) {
        size_t cap = ts->cap_pending ? ts->cap_pending : 256;
        while (cap < ts->n_pending + len)
            cap *= 2;
        char *grown = realloc(ts->pending, cap);
        if (!grown) {
            ts->st = er_fail(ER_ERR_NO_MEMORY, "er_stream_text: out of memory");
            return 1;
        }
        ts->pending = grown;
        ts->cap_pending = cap;
    }
    memcpy(ts->pending + ts->n_pending, text, len);
    ts->n_pending += len;
    /* the earliest complete stop string ends generation; the text before it goes out */
    size_t hold = ts->n_pending;
    int matched = 0;
    int64_t which = -1;
    for (int64_t i = 0; i < ts->params->n_stop; i++) {
        const char *stop = ts->params->stop[i];
        const size_t n_stop = strlen(stop);
        for (size_t at = 0; at + n_stop <= ts->n_pending && at < hold; at++)
            if (!memcmp(ts->pending + at, stop, n_stop)) {
                hold = at;
                matched = 1;
                which = i;
                break;
            }
    }
    if (matched) {
        ts->n_pending = hold;
        emit(ts, hold);
        ts->stopped = 1;
        ts->why = ER_STOP_STRING;
        ts->stop_index = which;
        return 1;
    }
    if (final)
        return emit(ts, ts->n_pending);
    /* hold back the longest tail that is a proper prefix of a stop string */
    size_t keep = 0;
    for (int64_t i = 0; i < ts->params->n_stop; i++) {
        const char *stop = ts->params->stop[i];
        const size_t n_stop = strlen(stop);
        for (size_t k = n_stop - 1 < ts->n_pending ? n_stop - 1 : ts->n_pending; k > keep; k--)
            if (!memcmp(ts->pending + ts->n_pending - k, stop, k)) {
                keep = k;
                break;
            }
    }
    return emit(ts, ts->n_pending - keep);
}

static int on_token_text(int32_t token, void *user) {
    text_stream *ts = user;
    if (!ts->params->ignore_eos && er_vocab_is_eog(ts->vocab, token)) {
        ts->why = ER_STOP_EOG;
        return 1;
    }
    if (ts->params->on_token) {
        const float *logits = ts->ctx ? er_context_logits(ts->ctx) : ts->logits;
        if (ts->params->on_token(token, logits, ts->n_vocab, ts->params->on_token_user) != 0) {
            ts->stopped = 1;
            ts->why = ER_STOP_CALLBACK;
        }
    }
    const char *text;
    int64_t len;
    if ((ts->st = er_detokenizer_push(ts->detok, token, &text, &len)) != ER_OK)
        return 1;
    return push_text(ts, text, (size_t)len, 0) || ts->stopped;
}

/* The end: what the detokenizer holds back, unless a stop string or a callback ended it. */
static er_status flush_text(text_stream *ts) {
    if (ts->st != ER_OK || ts->stopped)
        return ts->st;
    const char *tail;
    int64_t n_tail;
    er_status st = er_detokenizer_flush(ts->detok, &tail, &n_tail);
    if (st != ER_OK)
        return st;
    push_text(ts, tail, (size_t)n_tail, 1);
    return ts->st;
}

static er_status check_text_params(const char *fn, const er_text_params *p) {
    if (p->n_stop < 0 || (p->n_stop > 0 && !p->stop))
        return er_fail(ER_ERR_INVALID_ARG, "%s: %lld stop strings at %p", fn, (long long)p->n_stop, (const void *)p->stop);
    for (int64_t i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0])
            return er_fail(ER_ERR_INVALID_ARG, "%s: stop string %lld is NULL or empty", fn, (long long)i);
    return ER_OK;
}

/* With an on_token hook the prompt is fed here and generation continues from its logits:
 * er_generate runs the device-side greedy loop only straight after a prompt it fed
 * itself, and that loop never brings a step's logits to the host. */
er_status er_stream_ids(er_context *ctx, const int32_t *prompt, int64_t n_prompt, const er_text_params *params,
                        er_text_callback on_text, void *user, er_text_result *result) {
    if (result) {
        memset(result, 0, sizeof *result);
        result->stop_index = -1;
    }
    const er_text_params p = params ? *params : er_text_default_params();
    er_status st;
    if (!ctx || n_prompt < 0 || (n_prompt > 0 && !prompt))
        return er_fail(ER_ERR_INVALID_ARG, "er_stream_ids: %s", !ctx ? "NULL context" : "bad prompt");
    if ((st = check_text_params("er_stream_ids", &p)) != ER_OK)
        return st;
    const er_vocab *voc = er_model_vocab(ctx->model);
    if (!voc)
        return er_fail(ER_ERR_UNSUPPORTED, "er_stream_ids: %s has no tokenizer", ctx->model->path);
    if (n_prompt > ctx->n_ctx - ctx->n_pos[0])
        return er_fail(ER_ERR_CONTEXT_FULL, "the prompt's %lld tokens do not fit: %lld of the context's %lld are used",
                       (long long)n_prompt, (long long)ctx->n_pos[0], (long long)ctx->n_ctx);

    er_sampler *sampler = NULL;
    text_stream ts = {ctx, voc, &p, NULL, on_text, user, NULL, 0, 0, 0, ER_STOP_NONE, -1, ER_OK, NULL,
                      ctx->model->view.config.n_vocab};
    int64_t n_gen = 0;
    if ((st = er_sampler_create(&p.sampling, ctx->model->view.config.n_vocab, &sampler)) != ER_OK ||
        (st = er_detokenizer_create(voc, 0, &ts.detok)) != ER_OK)
        goto done;
    /* the EOS check is ours (any end-of-generation token), hence ignore_eos for er_generate */
    const er_generate_params gp = {p.max_tokens <= 0 ? INT64_MAX : p.max_tokens, 1};
    if (p.on_token && n_prompt > 0) {
        if ((st = er_context_decode(ctx, prompt, n_prompt, NULL)) != ER_OK)
            goto done;
        for (int64_t i = 0; i < n_prompt; i++)
            er_sampler_accept(sampler, prompt[i]);
        st = er_generate(ctx, NULL, 0, &gp, sampler, on_token_text, &ts, &n_gen);
    } else {
        st = er_generate(ctx, prompt, n_prompt, &gp, sampler, on_token_text, &ts, &n_gen);
    }
    if (st == ER_OK)
        st = flush_text(&ts);
    if (st == ER_OK && result) {
        result->n_prompt = n_prompt;
        result->n_generated = n_gen - (ts.why == ER_STOP_EOG);
        result->stop_index = ts.stop_index;
        result->stop = ts.why != ER_STOP_NONE ? ts.why : n_gen >= gp.n_predict ? ER_STOP_LENGTH : ER_STOP_CONTEXT;
    }
done:
    er_detokenizer_free(ts.detok);
    er_sampler_free(sampler);
    free(ts.pending);
    return st;
}

er_status er_stream_text(er_context *ctx, const char *prompt, const er_text_params *params, er_text_callback on_text,
                         void *user, int64_t *n_generated) {
    if (n_generated)
        *n_generated = 0;
    if (!ctx || !prompt)
        return er_fail(ER_ERR_INVALID_ARG, "er_stream_text: NULL %s", ctx ? "prompt" : "context");
    const er_text_params p = params ? *params : er_text_default_params();
    const er_vocab *voc = er_model_vocab(ctx->model);
    er_status st;
    if ((st = check_text_params("er_stream_text", &p)) != ER_OK)
        return st;
    if (!voc)
        return er_fail(ER_ERR_UNSUPPORTED, "er_stream_text: %s has no tokenizer", ctx->model->path);
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    er_text_result result;
    const int flags = (ctx->n_pos[0] == 0 ? ER_TOKENIZE_ADD_SPECIAL : 0) | (p.parse_special ? ER_TOKENIZE_PARSE_SPECIAL : 0);
    if ((st = er_tokenize_prompt(voc, prompt, (int64_t)strlen(prompt), flags, &ids, &n_ids)) == ER_OK &&
        (st = er_stream_ids(ctx, ids, n_ids, &p, on_text, user, &result)) == ER_OK && n_generated)
        *n_generated = result.n_generated;
    free(ids);
    return st;
}

typedef struct text_buf {
    char *data;
    size_t len, cap;
    int failed;
} text_buf;

static int append_text(const char *text, int64_t len, void *user) {
    text_buf *b = user;
    if (b->len + (size_t)len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + (size_t)len + 1)
            cap *= 2;
        char *grown = realloc(b->data, cap);
        if (!grown) {
            b->failed = 1;
            return 1;
        }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, text, (size_t)len);
    b->len += (size_t)len;
    return 0;
}

er_status er_generate_text(er_context *ctx, const char *prompt, const er_text_params *params, char **text,
                           int64_t *len) {
    if (len)
        *len = 0;
    if (!text)
        return er_fail(ER_ERR_INVALID_ARG, "er_generate_text: NULL text");
    *text = NULL;
    text_buf b = {malloc(1), 0, 1, 0};
    if (!b.data)
        return er_fail(ER_ERR_NO_MEMORY, "er_generate_text: out of memory");
    er_status st = er_stream_text(ctx, prompt, params, append_text, &b, NULL);
    if (st == ER_OK && b.failed)
        st = er_fail(ER_ERR_NO_MEMORY, "er_generate_text: out of memory for the text");
    if (st != ER_OK) {
        free(b.data);
        return st;
    }
    b.data[b.len] = 0;
    *text = b.data;
    if (len)
        *len = (int64_t)b.len;
    return ER_OK;
}

/* ---- one sequence's text, step by step ------------------------------------------------- */

struct er_text_gen {
    er_text_params params; /* a copy; params.stop points at the caller's strings */
    text_stream ts;
    er_sampler *sampler;
    int64_t n_gen;
    int done;
};

void er_text_gen_free(er_text_gen *g) {
    if (!g)
        return;
    er_detokenizer_free(g->ts.detok);
    er_sampler_free(g->sampler);
    free(g->ts.pending);
    free(g);
}

er_status er_text_gen_create(const er_model *model, const er_text_params *params, er_text_callback on_text,
                             void *user, er_text_gen **out) {
    er_status st;
    if (!model || !out)
        return er_fail(ER_ERR_INVALID_ARG, "er_text_gen_create: NULL %s", model ? "out" : "model");
    *out = NULL;
    const er_vocab *voc = er_model_vocab(model);
    if (!voc)
        return er_fail(ER_ERR_UNSUPPORTED, "er_text_gen_create: %s has no tokenizer", model->path);
    er_text_gen *g = calloc(1, sizeof *g);
    if (!g)
        return er_fail(ER_ERR_NO_MEMORY, "er_text_gen_create: out of memory");
    g->params = params ? *params : er_text_default_params();
    g->ts = (text_stream){NULL, voc, &g->params, NULL, on_text, user, NULL, 0, 0, 0, ER_STOP_NONE, -1, ER_OK, NULL,
                          model->view.config.n_vocab};
    if ((st = check_text_params("er_text_gen_create", &g->params)) != ER_OK ||
        (st = er_sampler_create(&g->params.sampling, model->view.config.n_vocab, &g->sampler)) != ER_OK ||
        (st = er_detokenizer_create(voc, 0, &g->ts.detok)) != ER_OK) {
        er_text_gen_free(g);
        return st;
    }
    *out = g;
    return ER_OK;
}

er_status er_text_gen_prompt(er_text_gen *g, const int32_t *prompt, int64_t n_prompt) {
    if (!g || n_prompt < 0 || (n_prompt > 0 && !prompt))
        return er_fail(ER_ERR_INVALID_ARG, "er_text_gen_prompt: %s", !g ? "NULL generator" : "bad prompt");
    for (int64_t i = 0; i < n_prompt; i++) {
        er_status st = er_sampler_accept(g->sampler, prompt[i]);
        if (st != ER_OK)
            return st;
    }
    return ER_OK;
}

/* er_stream_ids's loop body, with the logits coming from the caller: choose, stream, and
 * stop as er_generate and on_token_text stop it. */
er_status er_text_gen_step(er_text_gen *g, const float *logits, int32_t *token, int *done) {
    if (!g || !logits || !token || !done)
        return er_fail(ER_ERR_INVALID_ARG, "er_text_gen_step: NULL argument");
    if (g->done)
        return er_fail(ER_ERR_INVALID_ARG, "er_text_gen_step: generation has ended");
    er_status st = er_sampler_sample(g->sampler, logits, token);
    if (st == ER_OK)
        st = er_sampler_accept(g->sampler, *token);
    if (st != ER_OK)
        return st;
    g->n_gen++;
    g->ts.logits = logits;
    const int stop = on_token_text(*token, &g->ts);
    if (g->ts.st != ER_OK)
        return g->ts.st;
    g->done = stop || (g->params.max_tokens > 0 && g->n_gen >= g->params.max_tokens);
    *done = g->done;
    return ER_OK;
}

er_status er_text_gen_finish(er_text_gen *g, er_stop_reason if_running, er_text_result *result) {
    if (result) {
        memset(result, 0, sizeof *result);
        result->stop_index = -1;
    }
    if (!g)
        return er_fail(ER_ERR_INVALID_ARG, "er_text_gen_finish: NULL generator");
    er_status st = flush_text(&g->ts);
    if (st == ER_OK && result) {
        const text_stream *ts = &g->ts;
        result->n_generated = g->n_gen - (ts->why == ER_STOP_EOG);
        result->stop_index = ts->stop_index;
        result->stop = ts->why != ER_STOP_NONE                                          ? ts->why
                       : g->params.max_tokens > 0 && g->n_gen >= g->params.max_tokens ? ER_STOP_LENGTH
                                                                                        : if_running;
    }
    g->done = 1;
    return st;
}
