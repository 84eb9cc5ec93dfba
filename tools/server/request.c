/*
 * request.c - what the generating endpoints share: the sampling and length fields (one
 * table, read the same way for OpenAI and Anthropic), stop strings, message contents, the
 * chat template, the prompt's tokens, and errors in each API's shape.
 *
 * Every field is checked for its type and range here, so that a bad request gets a 400
 * naming the field before it waits for a slot.
 */
#define _GNU_SOURCE

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server.h"

int req_fail(req_error *e, unsigned status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    e->status = status;
    return -1;
}

/* The float fields of er_sampler_params and their ranges. */
typedef struct float_field {
    const char *name;
    size_t offset; /* in er_sampler_params */
    double lo, hi;
} float_field;

static const float_field float_fields[] = {
    {"temperature", offsetof(er_sampler_params, temperature), 0, 100},
    {"top_p", offsetof(er_sampler_params, top_p), 0, 1},
    {"min_p", offsetof(er_sampler_params, min_p), 0, 1},
    {"presence_penalty", offsetof(er_sampler_params, presence_penalty), -2, 2},
    {"frequency_penalty", offsetof(er_sampler_params, frequency_penalty), -2, 2},
    {"repeat_penalty", offsetof(er_sampler_params, repeat_penalty), 1e-6, 100},
};

/* A number field: absent or null leaves *out; 1 when set, 0 when absent, -1 on error. */
static int number_field(json_t *body, const char *name, double lo, double hi, double *out, req_error *e) {
    json_t *v = json_object_get(body, name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return req_fail(e, 400, "'%s' must be a number", name);
    const double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return req_fail(e, 400, "'%s' must be in [%g, %g], not %g", name, lo, hi, x);
    *out = x;
    return 1;
}

/* An integer field, as number_field. */
static int integer_field(json_t *body, const char *name, json_int_t lo, json_int_t hi, json_int_t *out, req_error *e) {
    json_t *v = json_object_get(body, name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return req_fail(e, 400, "'%s' must be an integer", name);
    const json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return req_fail(e, 400, "'%s' must be in [%lld, %lld], not %lld", name, (long long)lo, (long long)hi,
                        (long long)x);
    *out = x;
    return 1;
}

static int add_stop(job *j, const char *text, size_t len, req_error *e) {
    if (len == 0)
        return 0; /* an empty stop string stops nothing */
    if (j->params.n_stop >= 16)
        return req_fail(e, 400, "at most 16 stop strings");
    char **grown = realloc(j->stop, (size_t)(j->params.n_stop + 1) * sizeof *grown);
    if (!grown)
        return req_fail(e, 500, "out of memory");
    j->stop = grown;
    if (!(j->stop[j->params.n_stop] = strndup(text, len)))
        return req_fail(e, 500, "out of memory");
    j->params.n_stop++;
    j->params.stop = (const char *const *)j->stop;
    return 0;
}

int req_parse_generation(server *srv, json_t *body, const char *const *max_tokens_keys, const char *stop_key, job *j,
                         req_error *e) {
    er_sampler_params *sp = &j->params.sampling;
    double x = 0;
    json_int_t n = 0;
    int rc;
    for (size_t i = 0; i < sizeof float_fields / sizeof float_fields[0]; i++) {
        const float_field *f = &float_fields[i];
        if ((rc = number_field(body, f->name, f->lo, f->hi, &x, e)) < 0)
            return -1;
        if (rc)
            *(float *)((char *)sp + f->offset) = (float)x;
    }
    if ((rc = integer_field(body, "top_k", 0, INT32_MAX, &n, e)) < 0)
        return -1;
    if (rc)
        sp->top_k = (int32_t)n;
    if ((rc = integer_field(body, "repeat_last_n", -1, INT32_MAX, &n, e)) < 0)
        return -1;
    if (rc)
        sp->repeat_last_n = n < 0 ? (int32_t)srv->n_ctx : (int32_t)n;
    /* no seed: a different one each request, as OpenAI's */
    sp->seed = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)j ^ srv->n_ids;
    if ((rc = integer_field(body, "seed", INT64_MIN, INT64_MAX, &n, e)) < 0)
        return -1;
    if (rc)
        sp->seed = (uint64_t)n;
    j->params.max_tokens = 0; /* until the end of generation or a full context */
    for (; *max_tokens_keys; max_tokens_keys++) {
        if ((rc = integer_field(body, *max_tokens_keys, 1, srv->n_ctx, &n, e)) < 0) {
            if (json_is_integer(json_object_get(body, *max_tokens_keys)))
                return req_fail(e, 400, "'%s' is %lld; it must be in [1, %lld], the context's length", *max_tokens_keys,
                                (long long)json_integer_value(json_object_get(body, *max_tokens_keys)),
                                (long long)srv->n_ctx);
            return -1;
        }
        if (rc)
            j->params.max_tokens = n;
    }
    json_t *ignore_eos = json_object_get(body, "ignore_eos");
    if (ignore_eos && !json_is_null(ignore_eos) && !json_is_boolean(ignore_eos))
        return req_fail(e, 400, "'ignore_eos' must be a boolean");
    j->params.ignore_eos = json_is_true(ignore_eos);
    json_t *stop = json_object_get(body, stop_key);
    if (json_is_string(stop))
        return add_stop(j, json_string_value(stop), json_string_length(stop), e);
    if (json_is_array(stop)) {
        size_t i;
        json_t *s;
        json_array_foreach(stop, i, s) {
            if (!json_is_string(s))
                return req_fail(e, 400, "'%s' must be a string or a list of strings", stop_key);
            if (add_stop(j, json_string_value(s), json_string_length(s), e) < 0)
                return -1;
        }
        return 0;
    }
    if (stop && !json_is_null(stop))
        return req_fail(e, 400, "'%s' must be a string or a list of strings", stop_key);
    return 0;
}

int req_tokenize_prompt(server *srv, const char *text, size_t len, job *j, req_error *e) {
    if (er_tokenize_prompt(srv->vocab, text, (int64_t)len, ER_TOKENIZE_ADD_SPECIAL | ER_TOKENIZE_PARSE_SPECIAL,
                           &j->prompt, &j->n_prompt) != ER_OK)
        return req_fail(e, 400, "the prompt cannot be tokenized: %s", er_last_error());
    if (j->n_prompt == 0)
        return req_fail(e, 400, "the prompt is empty");
    if (j->n_prompt >= srv->n_ctx)
        return req_fail(e, 400, "the prompt is %lld tokens long, the context %lld tokens: it must be shorter",
                        (long long)j->n_prompt, (long long)srv->n_ctx);
    return 0;
}

char *req_render_chat(server *srv, json_t *vars, req_error *e) {
    char *json = json_dumps(vars, JSON_COMPACT);
    char *out = NULL;
    int64_t len = 0;
    if (!json) {
        req_fail(e, 500, "out of memory");
        goto done;
    }
    if (er_chat_render_json(srv->vocab, srv->chat_template, json, NULL, 0, &len) != ER_OK) {
        req_fail(e, 400, "the chat template cannot render these messages: %s", er_last_error());
        goto done;
    }
    if (!(out = malloc((size_t)len + 1))) {
        req_fail(e, 500, "out of memory");
        goto done;
    }
    if (er_chat_render_json(srv->vocab, srv->chat_template, json, out, len + 1, &len) != ER_OK) {
        req_fail(e, 400, "the chat template cannot render these messages: %s", er_last_error());
        free(out);
        out = NULL;
    }
done:
    free(json);
    return out;
}

void req_queue_chat(server *srv, json_t *vars, job *j, int anthropic, reply *out) {
    req_error e = {0, ""};
    char *prompt = req_render_chat(srv, vars, &e);
    if (prompt && req_tokenize_prompt(srv, prompt, strlen(prompt), j, &e) == 0) {
        pool_submit(srv, j);
        out->job = j;
    } else {
        reply_error(out, anthropic, &e);
        job_release(j);
    }
    free(prompt);
}

json_t *req_content_text(json_t *content, const char *where, req_error *e) {
    if (json_is_string(content))
        return json_incref(content);
    if (!json_is_array(content)) {
        req_fail(e, 400, "%s: 'content' must be a string or a list of text parts", where);
        return NULL;
    }
    sbuf text = {0};
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *t = json_object_get(part, "text");
        if (!type || strcmp(type, "text") || !json_is_string(t)) {
            sbuf_free(&text);
            req_fail(e, 400, "%s: content part %zu is not {\"type\": \"text\", \"text\": string}", where, i);
            return NULL;
        }
        if (sbuf_add(&text, json_string_value(t), json_string_length(t)) != 0) {
            sbuf_free(&text);
            req_fail(e, 500, "out of memory");
            return NULL;
        }
    }
    json_t *joined = json_stringn(text.data ? text.data : "", text.len);
    sbuf_free(&text);
    if (!joined)
        req_fail(e, 400, "%s: the content is not valid UTF-8 text", where);
    return joined;
}

/* ---- errors ----------------------------------------------------------------------------- */

static const char *openai_type(unsigned status) {
    return status == 401 ? "authentication_error" : status == 404 ? "not_found_error" : status >= 500 ? "server_error" : "invalid_request_error";
}

json_t *error_body_openai(unsigned status, const char *message) {
    return json_pack("{s:{s:s, s:s, s:n, s:i}}", "error", "message", message, "type", openai_type(status), "param",
                     "code", (int)status);
}

static const char *anthropic_type(unsigned status) {
    return status == 401   ? "authentication_error"
           : status == 404 ? "not_found_error"
           : status == 413 ? "request_too_large"
           : status == 503 ? "overloaded_error"
           : status >= 500 ? "api_error"
                           : "invalid_request_error";
}

json_t *error_body_anthropic(unsigned status, const char *message) {
    return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", anthropic_type(status), "message", message);
}

void reply_error(reply *out, int anthropic, const req_error *e) {
    out->status = e->status;
    out->body = anthropic ? error_body_anthropic(e->status, e->message) : error_body_openai(e->status, e->message);
}
