/*
 * chat.c - `edgerunner chat`: an interactive chat, sampled with the sampler flags of cli.h
 * (--temp 0: greedy).
 *
 * Each line on standard input is a user turn (/reset forgets the conversation, /exit
 * ends). The conversation is rendered through the model's chat template every turn, and
 * only what the KV cache does not already hold is fed: the cache's text is kept beside
 * it, the new rendering is compared with it, the cache is rewound to the last point
 * where the two agree (a checkpoint: the end of a fed chunk or of a generated token) and
 * the rest is tokenized and fed. When the template re-renders an earlier turn differently
 * (Qwen3 drops the thinking of earlier answers), this re-feeds from there, so the model
 * always sees exactly what the template says; otherwise a turn costs only its new text.
 *
 * Special tokens are parsed in the template's text but never in what the user typed
 * (the user's message is tokenized without special-token parsing). The reply streams to
 * stdout; it stops at an end-of-generation token (EOS, <|im_end|>, <|eot_id|>, ...), after
 * -n tokens, or when the context is full. Every token fed or generated goes into the
 * sampler's penalty history; /reset clears it and restarts the RNG from the seed.
 *
 * --verbose shows the KV cache at work on stderr, one line each: "[rewind N]" (the cache
 * kept N tokens), "[feed ID ...]" (tokens fed), "[reply ID ...]" (tokens generated and fed).
 *
 * --render-json FILE prints the template's rendering of the JSON variables in FILE
 * ({"messages": [...], "tools": [...], "add_generation_prompt": true, ...}) and exits;
 * it needs only the tokenizer, so vocab-only GGUF files work.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

typedef struct checkpoint {
    int64_t n_past;   /* tokens in the KV cache */
    size_t text_len;  /* bytes of the cache's text they stand for */
} checkpoint;

typedef struct chat {
    const er_vocab *vocab;
    er_context *ctx;
    er_chat_message *msgs; /* (n_msgs) role and content strings, malloc'd */
    int64_t n_msgs, cap_msgs;
    char *text; /* (text_len) what the KV cache holds, as text */
    size_t text_len, text_cap;
    checkpoint *cps; /* (n_cps) increasing in both fields; cps[0] = {0, 0} */
    int64_t n_cps, cap_cps;
    int64_t n_predict;
    int verbose;
    er_sampler *sampler;
} chat;

static void show_ids(const chat *c, const char *what, const int32_t *ids, int64_t n) {
    if (!c->verbose)
        return;
    fprintf(stderr, "[%s", what);
    for (int64_t i = 0; i < n; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "]\n");
}

static int grow(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap)
        return 1;
    int64_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return 0;
    *p = q;
    *cap = c;
    return 1;
}

static int text_append(chat *c, const char *s, size_t n) {
    int64_t cap = (int64_t)c->text_cap;
    if (!grow((void **)&c->text, &cap, (int64_t)(c->text_len + n + 1), 1))
        return 0;
    c->text_cap = (size_t)cap;
    memcpy(c->text + c->text_len, s, n);
    c->text_len += n;
    return 1;
}

static int add_checkpoint(chat *c) {
    if (!grow((void **)&c->cps, &c->cap_cps, c->n_cps + 1, sizeof *c->cps))
        return 0;
    c->cps[c->n_cps++] = (checkpoint){er_context_n_past(c->ctx), c->text_len};
    return 1;
}

static int add_message(chat *c, const char *role, const char *content, size_t n) {
    if (!grow((void **)&c->msgs, &c->cap_msgs, c->n_msgs + 1, sizeof *c->msgs))
        return 0;
    char *r = strdup(role), *t = malloc(n + 1);
    if (!r || !t) {
        free(r);
        free(t);
        return 0;
    }
    memcpy(t, content, n);
    t[n] = 0;
    c->msgs[c->n_msgs++] = (er_chat_message){r, t};
    return 1;
}

static void drop_messages(chat *c, int64_t keep) {
    while (c->n_msgs > keep) {
        c->n_msgs--;
        free((char *)c->msgs[c->n_msgs].role);
        free((char *)c->msgs[c->n_msgs].content);
    }
}

/* The conversation through the template, in a malloc'd string. */
static er_status render(const chat *c, char **out, int64_t *len) {
    *out = NULL;
    er_status st = er_chat_apply_template(c->vocab, c->msgs, c->n_msgs, 1, NULL, 0, len);
    if (st != ER_OK)
        return st;
    *out = malloc((size_t)*len + 1);
    if (!*out)
        return ER_ERR_NO_MEMORY;
    return er_chat_apply_template(c->vocab, c->msgs, c->n_msgs, 1, *out, *len + 1, len);
}

/* Tokenizes text[0..n) (special tokens parsed when `special`) and feeds it. */
static er_status feed(chat *c, const char *text, size_t n, int special, int add_bos) {
    int64_t n_ids = 0;
    int32_t *ids = NULL;
    const int flags = (special ? ER_TOKENIZE_PARSE_SPECIAL : 0) | (add_bos ? ER_TOKENIZE_ADD_SPECIAL : 0);
    er_status st = cli_tokenize(c->vocab, text, (int64_t)n, flags, &ids, &n_ids);
    const int32_t bos = er_vocab_bos(c->vocab);
    int64_t from = 0;
    if (st == ER_OK && add_bos && n_ids >= 2 && ids[0] == bos && ids[1] == bos)
        from = 1; /* the template wrote BOS itself */
    if (st == ER_OK && n_ids > from) {
        show_ids(c, "feed", ids + from, n_ids - from);
        st = er_context_decode(c->ctx, ids + from, n_ids - from, NULL);
        for (int64_t i = from; st == ER_OK && i < n_ids; i++)
            er_sampler_accept(c->sampler, ids[i]);
    }
    free(ids);
    if (st == ER_OK && (!text_append(c, text, n) || !add_checkpoint(c)))
        st = ER_ERR_NO_MEMORY;
    return st;
}

/* One user turn: render, feed what is new, generate and stream the reply. */
static er_status turn(chat *c, const char *user, size_t user_len) {
    char *rendered = NULL, *reply = NULL;
    size_t reply_len = 0, reply_cap = 0;
    int32_t *reply_ids = NULL;
    int64_t n_reply = 0, cap_reply = 0;
    int64_t len = 0;
    er_detokenizer *detok = NULL;
    const int64_t keep = c->n_msgs;
    er_status st = add_message(c, "user", user, user_len) ? ER_OK : ER_ERR_NO_MEMORY;
    if (st != ER_OK || (st = render(c, &rendered, &len)) != ER_OK)
        goto done;
    /* rewind to the last checkpoint inside the common prefix */
    size_t common = 0;
    while (common < c->text_len && common < (size_t)len && c->text[common] == rendered[common])
        common++;
    while (c->n_cps > 1 && c->cps[c->n_cps - 1].text_len > common)
        c->n_cps--;
    const checkpoint at = c->cps[c->n_cps - 1];
    if ((st = er_context_rewind(c->ctx, at.n_past)) != ER_OK)
        goto done;
    c->text_len = at.text_len;
    if (c->verbose)
        fprintf(stderr, "[rewind %lld]\n", (long long)at.n_past);
    /* feed the rest; the user's own words without special-token parsing */
    const char *rest = rendered + at.text_len;
    const size_t n_rest = (size_t)len - at.text_len;
    const char *u = NULL;
    for (const char *p = rest; user_len && (p = memchr(p, user[0], n_rest - (size_t)(p - rest))) != NULL; p++)
        if ((size_t)(rest + n_rest - p) >= user_len && !memcmp(p, user, user_len))
            u = p; /* the last occurrence */
    const int first = at.n_past == 0;
    if (u) {
        if ((u > rest && (st = feed(c, rest, (size_t)(u - rest), 1, first)) != ER_OK) ||
            (st = feed(c, u, user_len, 0, first && u == rest)) != ER_OK ||
            (st = feed(c, u + user_len, n_rest - (size_t)(u - rest) - user_len, 1, 0)) != ER_OK)
            goto done;
    } else if ((st = feed(c, rest, n_rest, 1, first)) != ER_OK) {
        goto done;
    }
    /* generate */
    if ((st = er_detokenizer_create(c->vocab, 0, &detok)) != ER_OK)
        goto done;
    for (int64_t i = 0; c->n_predict < 0 || i < c->n_predict; i++) {
        const float *logits = er_context_logits(c->ctx);
        int32_t tok;
        if ((st = er_sampler_sample(c->sampler, logits, &tok)) != ER_OK)
            goto done;
        er_sampler_accept(c->sampler, tok);
        if (er_vocab_is_eog(c->vocab, tok))
            break;
        const char *piece;
        int64_t n_piece;
        if ((st = er_detokenizer_push(detok, tok, &piece, &n_piece)) != ER_OK)
            goto done;
        fwrite(piece, 1, (size_t)n_piece, stdout);
        fflush(stdout);
        char full[256]; /* the token's text with control tokens spelled out, for the cache's text */
        int64_t n_full = 0;
        if ((st = er_detokenize(c->vocab, &tok, 1, ER_DETOKENIZE_SPECIAL, full, sizeof full, &n_full)) != ER_OK)
            goto done;
        if (n_full > (int64_t)sizeof full)
            n_full = sizeof full;
        int64_t cap = (int64_t)reply_cap;
        if (!grow((void **)&reply, &cap, (int64_t)(reply_len + (size_t)n_full + 1), 1)) {
            st = ER_ERR_NO_MEMORY;
            goto done;
        }
        reply_cap = (size_t)cap;
        memcpy(reply + reply_len, full, (size_t)n_full);
        reply_len += (size_t)n_full;
        if (er_context_n_past(c->ctx) >= er_context_n_ctx(c->ctx)) {
            fprintf(stderr, "\nedgerunner: the context of %lld tokens is full; /reset to start again\n",
                    (long long)er_context_n_ctx(c->ctx));
            break;
        }
        if ((st = er_context_decode(c->ctx, &tok, 1, NULL)) != ER_OK)
            goto done;
        if (!grow((void **)&reply_ids, &cap_reply, n_reply + 1, sizeof *reply_ids)) {
            st = ER_ERR_NO_MEMORY;
            goto done;
        }
        reply_ids[n_reply++] = tok;
        if (!text_append(c, full, (size_t)n_full) || !add_checkpoint(c)) {
            st = ER_ERR_NO_MEMORY;
            goto done;
        }
    }
    const char *tail;
    int64_t n_tail;
    er_detokenizer_flush(detok, &tail, &n_tail);
    fwrite(tail, 1, (size_t)n_tail, stdout);
    printf("\n");
    fflush(stdout);
    show_ids(c, "reply", reply_ids, n_reply);
    if (!add_message(c, "assistant", reply ? reply : "", reply_len))
        st = ER_ERR_NO_MEMORY;
done:
    if (st != ER_OK)
        drop_messages(c, keep); /* the failed turn is forgotten */
    er_detokenizer_free(detok);
    free(rendered);
    free(reply);
    free(reply_ids);
    return st;
}

static int render_json(const char *model_path, const char *json_path, const char *template_path) {
    size_t n = 0;
    char *json = cli_read_file(json_path, &n), *tmpl = NULL, *out = NULL;
    er_vocab *vocab = NULL;
    int rc = 1;
    int64_t len = 0;
    er_status st;
    if (!json || (template_path && !(tmpl = cli_read_file(template_path, &n)))) {
        fprintf(stderr, "edgerunner: chat: cannot read %s: %s\n", json ? template_path : json_path, strerror(errno));
        goto done;
    }
    cli_catch_sigbus(model_path);
    if ((st = er_vocab_load(model_path, &vocab)) != ER_OK ||
        (st = er_chat_render_json(vocab, tmpl, json, NULL, 0, &len)) != ER_OK) {
        rc = cli_fail_status(st);
        goto done;
    }
    if (!(out = malloc((size_t)len + 1))) {
        cli_fail("chat: out of memory");
        goto done;
    }
    if ((st = er_chat_render_json(vocab, tmpl, json, out, len + 1, &len)) != ER_OK) {
        rc = cli_fail_status(st);
        goto done;
    }
    fwrite(out, 1, (size_t)len, stdout);
    rc = 0;
done:
    free(out);
    free(json);
    free(tmpl);
    er_vocab_free(vocab);
    return rc;
}

int cmd_chat(int argc, char **argv) {
    const char *system = NULL, *json_path = NULL, *template_path = NULL;
    int64_t n_predict = -1;
    int verbose = 0, parsed, took_value;
    cli_model_opts mo;
    cli_model_opts_init(&mo, 0, 0);
    cli_sampling sampling;
    cli_sampling_init(&sampling);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--")) {
            if (cli_no_operands("chat", argc, argv, i))
                return 1;
            break;
        }
        if (!strcmp(a, "--verbose")) {
            verbose = 1;
            continue;
        }
        if ((parsed = cli_parse_model_opt("chat", a, v, &mo, &took_value)) != 0) {
            if (parsed < 0)
                return 1;
            i += took_value;
            continue;
        }
        if (!v) {
            fprintf(stderr, "edgerunner: chat: %s needs a value\n", a);
            return 1;
        }
        if ((parsed = cli_parse_sampling("chat", a, v, &sampling)) != 0) {
            if (parsed < 0)
                return 1;
        } else if (!strcmp(a, "--system") || !strcmp(a, "-sys")) {
            system = v;
        } else if (!strcmp(a, "--render-json")) {
            json_path = v;
        } else if (!strcmp(a, "--template")) {
            template_path = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (!cli_parse_i64(v, -1, INT32_MAX, &n_predict))
                return cli_fail("chat: -n wants an integer >= -1");
        } else {
            fprintf(stderr, "edgerunner: chat: unknown option '%s'\n", a);
            return 1;
        }
        i++;
    }
    if (!mo.path)
        return cli_fail("chat: -m MODEL is required");
    if (json_path)
        return render_json(mo.path, json_path, template_path);
    if (template_path)
        return cli_fail("chat: --template works with --render-json only");

    int rc = 1;
    er_status st;
    er_model *model = NULL;
    chat c = {0};
    char *line = NULL;
    size_t line_cap = 0;
    c.n_predict = n_predict;
    c.verbose = verbose;
    const er_context_params cp = cli_model_opts_context(&mo);
    cli_catch_sigbus(mo.path);
    if ((st = er_model_load(mo.path, &mo.model, &model)) != ER_OK || (st = er_context_create(model, &cp, &c.ctx)) != ER_OK) {
        rc = cli_fail_status(st);
        goto done;
    }
    cli_warn_threads(&mo, c.ctx);
    if (!(c.vocab = er_model_vocab(model))) {
        cli_fail("chat: the model file has no tokenizer");
        goto done;
    }
    const er_sampler_params sp = cli_sampling_resolve(&sampling, er_context_n_ctx(c.ctx));
    if ((st = er_sampler_create(&sp, er_model_n_vocab(model), &c.sampler)) != ER_OK) {
        rc = cli_fail_status(st);
        goto done;
    }
    if ((system && !add_message(&c, "system", system, strlen(system))) || !add_checkpoint(&c)) {
        cli_fail("chat: out of memory");
        goto done;
    }
    const int64_t n_fixed = c.n_msgs; /* the system message survives /reset */
    const int interactive = isatty(STDIN_FILENO);
    for (;;) {
        if (interactive) {
            fputs("> ", stderr);
            fflush(stderr);
        }
        ssize_t n = getline(&line, &line_cap, stdin);
        if (n < 0)
            break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = 0;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit"))
            break;
        if (!strcmp(line, "/reset")) {
            drop_messages(&c, n_fixed);
            er_context_rewind(c.ctx, 0);
            er_sampler_reset(c.sampler);
            c.n_cps = 1;
            c.text_len = 0;
            fprintf(stderr, "(conversation reset)\n");
            continue;
        }
        if (n == 0)
            continue;
        if ((st = turn(&c, line, (size_t)n)) != ER_OK) {
            if (st == ER_ERR_CONTEXT_FULL) {
                fprintf(stderr, "edgerunner: %s; /reset to start again\n", er_last_error());
                continue;
            }
            rc = st == ER_ERR_NO_MEMORY ? cli_fail("chat: out of memory") : cli_fail_status(st);
            goto done;
        }
    }
    rc = 0;
done:
    free(line);
    drop_messages(&c, 0);
    free(c.msgs);
    free(c.text);
    free(c.cps);
    er_sampler_free(c.sampler);
    er_context_free(c.ctx);
    er_model_free(model);
    return rc;
}
