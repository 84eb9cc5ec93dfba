/*
 * openai.c - OpenAI's /v1/chat/completions and /v1/completions, with llama-server's
 * extensions (top_k, min_p, repeat_penalty, ignore_eos, chat_template_kwargs).
 *
 * Streaming is server-sent events: chat.completion.chunk objects (the first with the
 * role, one per piece of text, the last with finish_reason), a usage chunk when
 * stream_options.include_usage asks, then "data: [DONE]". With tools, the text is held
 * to the end and Qwen3/Hermes-style <tool_call>{"name": ..., "arguments": ...}</tool_call>
 * blocks become tool_calls (finish_reason "tool_calls"): a call cannot be told from text
 * before its block is whole.
 */
#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

static const char *finish_reason(const er_text_result *r) {
    return r->stop == ER_STOP_LENGTH || r->stop == ER_STOP_CONTEXT ? "length" : "stop";
}

static json_t *usage(const job *j, const er_text_result *r) {
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)r->n_prompt, "completion_tokens",
                     (json_int_t)r->n_generated, "total_tokens", (json_int_t)(r->n_prompt + r->n_generated),
                     "prompt_tokens_details", "cached_tokens", (json_int_t)j->n_cached);
}

/* The logprob entries gathered since the last chunk, as chat's {"content": [...]}, or null. */
static json_t *take_chat_logprobs(job *j) {
    if (j->n_top_logprobs < 0)
        return json_null();
    json_t *lp = json_pack("{s:o}", "content", j->logprobs ? j->logprobs : json_array());
    j->logprobs = NULL;
    return lp;
}

/* Generation failed: an error event and [DONE] on a stream, else a 500 body. */
static void fail_job(job *j) {
    char message[600];
    snprintf(message, sizeof message, "generation failed: %s", er_last_error());
    if (!j->stream) {
        j->status = 500;
        job_emit_json(j, error_body_openai(500, message));
        return;
    }
    job_emit_sse(j, NULL, error_body_openai(500, message));
    job_emit(j, "data: [DONE]\n\n", 14);
}

/* ---- chat ----------------------------------------------------------------------------- */

static json_t *chat_chunk(job *j, json_t *delta, const char *finish) {
    return json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:o, s:s?}]}", "id", j->id, "object", "chat.completion.chunk",
                     "created", (json_int_t)j->created, "model", j->srv->alias, "choices", "index", 0, "delta", delta,
                     "logprobs", take_chat_logprobs(j), "finish_reason", finish);
}

static void chat_start(job *j) {
    if (j->stream)
        job_emit_sse(j, NULL, chat_chunk(j, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL));
}

static void chat_text(job *j, const char *text, int64_t len) {
    if (!j->stream || j->has_tools) {
        if (sbuf_add(&j->text, text, (size_t)len) != 0)
            job_cancel(j);
        return;
    }
    job_emit_sse(j, NULL, chat_chunk(j, json_pack("{s:o}", "content", json_text(text, (size_t)len)), NULL));
}

static void chat_finish(job *j, const er_text_result *r, er_status st) {
    if (st != ER_OK) {
        fail_job(j);
        return;
    }
    const char *finish = finish_reason(r);
    json_t *content = NULL, *calls = j->has_tools ? tool_calls_parse(j->text.data ? j->text.data : "", j->id, &content) : NULL;
    if (calls)
        finish = "tool_calls";
    else
        content = json_text(j->text.data, j->text.len);
    if (j->stream) {
        if (j->has_tools && json_is_string(content) && json_string_length(content))
            job_emit_sse(j, NULL, chat_chunk(j, json_pack("{s:O}", "content", content), NULL));
        for (size_t i = 0; calls && i < json_array_size(calls); i++) {
            json_t *call = json_deep_copy(json_array_get(calls, i));
            json_object_set_new(call, "index", json_integer((json_int_t)i));
            job_emit_sse(j, NULL, chat_chunk(j, json_pack("{s:[o]}", "tool_calls", call), NULL));
        }
        job_emit_sse(j, NULL, chat_chunk(j, json_object(), finish));
        if (j->include_usage)
            job_emit_sse(j, NULL, json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", j->id, "object",
                                            "chat.completion.chunk", "created", (json_int_t)j->created, "model",
                                            j->srv->alias, "choices", "usage", usage(j, r)));
        job_emit(j, "data: [DONE]\n\n", 14);
        json_decref(content);
        json_decref(calls);
        return;
    }
    json_t *message = json_pack("{s:s, s:o}", "role", "assistant", "content", content ? content : json_null());
    if (calls)
        json_object_set_new(message, "tool_calls", calls);
    job_emit_json(j, json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:o, s:s}], s:o}", "id", j->id, "object",
                           "chat.completion", "created", (json_int_t)j->created, "model", j->srv->alias, "choices",
                           "index", 0, "message", message, "logprobs", take_chat_logprobs(j), "finish_reason", finish,
                           "usage", usage(j, r)));
}

static const job_api chat_api = {"chat", chat_start, chat_text, chat_finish};

/* One message in the template's terms: role, content as a string, and what an assistant's
 * tool calls or a tool's reply carry; NULL with e set. */
static json_t *chat_message(json_t *m, size_t i, req_error *e) {
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    char where[48];
    snprintf(where, sizeof where, "messages[%zu]", i);
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!json_is_object(m) || !role) {
        req_fail(e, 400, "%s must be an object with a string 'role'", where);
        return NULL;
    }
    size_t r = 0;
    while (r < sizeof roles / sizeof roles[0] && strcmp(roles[r], role))
        r++;
    if (r == sizeof roles / sizeof roles[0]) {
        req_fail(e, 400, "%s: unknown role '%.40s' (system, developer, user, assistant or tool)", where, role);
        return NULL;
    }
    json_t *tool_calls = json_object_get(m, "tool_calls"), *content_in = json_object_get(m, "content");
    if (tool_calls && !json_is_null(tool_calls) && (!json_is_array(tool_calls) || strcmp(role, "assistant"))) {
        req_fail(e, 400, "%s: 'tool_calls' must be a list, on an assistant message", where);
        return NULL;
    }
    json_t *content = (!content_in || json_is_null(content_in)) && json_is_array(tool_calls)
                          ? json_string("")
                          : req_content_text(content_in, where, e);
    if (!content)
        return NULL;
    /* "developer" is OpenAI's newer name for the system role, which templates know */
    json_t *out = json_pack("{s:s, s:o}", "role", r == 1 ? "system" : role, "content", content);
    if (json_is_array(tool_calls)) {
        /* arguments arrive as a JSON string; templates expect an object (Hugging Face's
         * convention) and print a string as it is, so a string that parses goes as one */
        json_t *calls = json_deep_copy(tool_calls);
        size_t k;
        json_t *call;
        json_array_foreach(calls, k, call) {
            json_t *fn = json_object_get(call, "function"), *args = json_object_get(fn, "arguments");
            json_t *parsed = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL) : NULL;
            if (json_is_object(parsed))
                json_object_set(fn, "arguments", parsed);
            json_decref(parsed);
        }
        json_object_set_new(out, "tool_calls", calls);
    }
    static const char *const copied[] = {"tool_call_id", "name"};
    for (size_t c = 0; c < sizeof copied / sizeof copied[0]; c++)
        if (json_is_string(json_object_get(m, copied[c])))
            json_object_set(out, copied[c], json_object_get(m, copied[c]));
    return out;
}

/* The fields both OpenAI endpoints check the same way: n, stream, stream_options,
 * response_format, logprobs. */
static int parse_common(json_t *body, job *j, int chat, req_error *e) {
    json_t *n = json_object_get(body, "n"), *stream = json_object_get(body, "stream");
    json_t *rf = json_object_get(body, "response_format");
    if (n && !json_is_null(n) && !(json_is_integer(n) && json_integer_value(n) == 1))
        return req_fail(e, 400, "'n' must be 1: one choice per request");
    if (stream && !json_is_null(stream) && !json_is_boolean(stream))
        return req_fail(e, 400, "'stream' must be a boolean");
    j->stream = json_is_true(stream);
    json_t *so = json_object_get(body, "stream_options");
    if (so && !json_is_null(so) && !json_is_object(so))
        return req_fail(e, 400, "'stream_options' must be an object");
    j->include_usage = json_is_true(json_object_get(so, "include_usage"));
    if (rf && !json_is_null(rf)) {
        const char *type = json_string_value(json_object_get(rf, "type"));
        if (!type || strcmp(type, "text"))
            return req_fail(e, 400, "'response_format' of type '%.40s' is not supported: only text (no constrained "
                            "output yet)", type ? type : "?");
    }
    json_t *lp = json_object_get(body, "logprobs"), *top = json_object_get(body, "top_logprobs");
    if (chat) {
        if (lp && !json_is_null(lp) && !json_is_boolean(lp))
            return req_fail(e, 400, "'logprobs' must be a boolean");
        if (top && !json_is_null(top) &&
            (!json_is_integer(top) || json_integer_value(top) < 0 || json_integer_value(top) > MAX_TOP_LOGPROBS))
            return req_fail(e, 400, "'top_logprobs' must be an integer in [0, %d]", MAX_TOP_LOGPROBS);
        if (top && !json_is_null(top) && !json_is_true(lp))
            return req_fail(e, 400, "'top_logprobs' needs 'logprobs': true");
        if (json_is_true(lp))
            j->n_top_logprobs = json_is_integer(top) ? (int)json_integer_value(top) : 0;
    } else if (lp && !json_is_null(lp)) {
        if (!json_is_integer(lp) || json_integer_value(lp) < 0 || json_integer_value(lp) > 5)
            return req_fail(e, 400, "'logprobs' must be an integer in [0, 5]");
        j->n_top_logprobs = (int)json_integer_value(lp);
    }
    return 0;
}

static const char *const openai_max_tokens[] = {"max_tokens", "max_completion_tokens", NULL};

/* The template's variables for a chat request's messages, chat_template_kwargs and tools
 * (left out under tool_choice "none"): a new object, *has_tools set; NULL with e set. */
static json_t *chat_vars(json_t *body, int *has_tools, req_error *e) {
    json_t *messages = json_object_get(body, "messages"), *tools = json_object_get(body, "tools");
    json_t *kwargs = json_object_get(body, "chat_template_kwargs"), *choice = json_object_get(body, "tool_choice");
    json_t *vars = NULL;
    *has_tools = 0;
    if (!json_is_array(messages) || json_array_size(messages) == 0) {
        req_fail(e, 400, "'messages' must be a non-empty list");
        goto fail;
    }
    if (kwargs && !json_is_null(kwargs) && !json_is_object(kwargs)) {
        req_fail(e, 400, "'chat_template_kwargs' must be an object");
        goto fail;
    }
    if (tools && !json_is_null(tools) && !json_is_array(tools)) {
        req_fail(e, 400, "'tools' must be a list");
        goto fail;
    }
    if (!(vars = json_pack("{s:[], s:b}", "messages", "add_generation_prompt", 1))) {
        req_fail(e, 500, "out of memory");
        goto fail;
    }
    if (json_is_object(kwargs))
        json_object_update(vars, kwargs);
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        json_t *msg = chat_message(m, i, e);
        if (!msg)
            goto fail;
        json_array_append_new(json_object_get(vars, "messages"), msg);
    }
    const int tools_off = json_is_string(choice) && !strcmp(json_string_value(choice), "none");
    if (json_is_array(tools) && json_array_size(tools) > 0 && !tools_off) {
        json_object_set(vars, "tools", tools);
        *has_tools = 1;
    }
    return vars;
fail:
    json_decref(vars);
    return NULL;
}

void handle_chat_completions(server *srv, json_t *body, reply *out) {
    req_error e = {0, ""};
    json_t *vars = NULL;
    job *j = job_new(srv, &chat_api, "chatcmpl-");
    if (!j) {
        req_fail(&e, 500, "out of memory");
        goto fail;
    }
    if (!(vars = chat_vars(body, &j->has_tools, &e)) || parse_common(body, j, 1, &e) < 0 ||
        req_parse_generation(srv, body, openai_max_tokens, "stop", j, &e) < 0)
        goto fail;
    req_queue_chat(srv, vars, j, 0, out);
    json_decref(vars);
    return;
fail:
    reply_error(out, 0, &e);
    job_release(j);
    json_decref(vars);
}

/* llama-server's /apply-template: the prompt a chat request would be given, rendered and
 * not generated from ({"prompt": text}). */
void handle_apply_template(server *srv, json_t *body, reply *out) {
    req_error e = {0, ""};
    int has_tools = 0;
    json_t *vars = chat_vars(body, &has_tools, &e);
    char *prompt = vars ? req_render_chat(srv, vars, &e) : NULL;
    if (prompt)
        out->body = json_pack("{s:o}", "prompt", json_text(prompt, strlen(prompt)));
    else
        reply_error(out, 0, &e);
    free(prompt);
    json_decref(vars);
}

/* ---- completions ------------------------------------------------------------------------ */

/* The legacy logprobs object from the entries: tokens, token_logprobs, top_logprobs (a
 * {token: logprob} per position), text_offset (from `offset`, the text already sent). */
static json_t *take_legacy_logprobs(job *j, size_t offset) {
    if (j->n_top_logprobs < 0)
        return json_null();
    json_t *lp = json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
    size_t i;
    json_t *entry;
    json_array_foreach(j->logprobs, i, entry) {
        json_t *token = json_object_get(entry, "token"), *top = json_object_get(entry, "top_logprobs"), *alts = json_object();
        json_array_append(json_object_get(lp, "tokens"), token);
        json_array_append(json_object_get(lp, "token_logprobs"), json_object_get(entry, "logprob"));
        size_t k;
        json_t *alt;
        json_array_foreach(top, k, alt)
            json_object_set(alts, json_string_value(json_object_get(alt, "token")), json_object_get(alt, "logprob"));
        json_array_append_new(json_object_get(lp, "top_logprobs"), alts);
        json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)offset));
        offset += json_string_length(token);
    }
    json_decref(j->logprobs);
    j->logprobs = NULL;
    return lp;
}

static json_t *completion_object(job *j, json_t *text, json_t *logprobs, const char *finish) {
    return json_pack("{s:s, s:s, s:I, s:s, s:[{s:o, s:i, s:o, s:s?}]}", "id", j->id, "object", "text_completion",
                     "created", (json_int_t)j->created, "model", j->srv->alias, "choices", "text", text, "index", 0,
                     "logprobs", logprobs, "finish_reason", finish);
}

static void completion_start(job *j) { (void)j; }

static void completion_text(job *j, const char *text, int64_t len) {
    const size_t offset = j->text.len;
    if (sbuf_add(&j->text, text, (size_t)len) != 0)
        job_cancel(j);
    if (j->stream)
        job_emit_sse(j, NULL, completion_object(j, json_text(text, (size_t)len), take_legacy_logprobs(j, offset), NULL));
}

static void completion_finish(job *j, const er_text_result *r, er_status st) {
    if (st != ER_OK) {
        fail_job(j);
        return;
    }
    if (j->stream) {
        job_emit_sse(j, NULL, completion_object(j, json_string(""), take_legacy_logprobs(j, j->text.len), finish_reason(r)));
        if (j->include_usage)
            job_emit_sse(j, NULL, json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", j->id, "object", "text_completion",
                                            "created", (json_int_t)j->created, "model", j->srv->alias, "choices",
                                            "usage", usage(j, r)));
        job_emit(j, "data: [DONE]\n\n", 14);
        return;
    }
    json_t *body = completion_object(j, json_text(j->text.data, j->text.len),
                                     take_legacy_logprobs(j, 0), finish_reason(r));
    json_object_set_new(body, "usage", usage(j, r));
    job_emit_json(j, body);
}

static const job_api completion_api = {"completion", completion_start, completion_text, completion_finish};

void handle_completions(server *srv, json_t *body, reply *out) {
    req_error e = {0, ""};
    json_t *prompt = json_object_get(body, "prompt");
    job *j = job_new(srv, &completion_api, "cmpl-");
    if (!j) {
        req_fail(&e, 500, "out of memory");
        goto fail;
    }
    if (parse_common(body, j, 0, &e) < 0 || req_parse_generation(srv, body, openai_max_tokens, "stop", j, &e) < 0)
        goto fail;
    if (json_is_true(json_object_get(body, "echo"))) {
        req_fail(&e, 400, "'echo' is not supported");
        goto fail;
    }
    if (json_is_array(prompt) && json_array_size(prompt) == 1 && json_is_string(json_array_get(prompt, 0)))
        prompt = json_array_get(prompt, 0); /* a list of one prompt */
    if (json_is_string(prompt)) {
        if (req_tokenize_prompt(srv, json_string_value(prompt), json_string_length(prompt), j, &e) < 0)
            goto fail;
    } else if (json_is_array(prompt) && json_array_size(prompt) > 0 && json_is_integer(json_array_get(prompt, 0))) {
        /* token ids, fed exactly */
        const size_t n = json_array_size(prompt);
        if (n >= (size_t)srv->n_ctx) {
            req_fail(&e, 400, "the prompt is %zu tokens long, the context %lld tokens: it must be shorter", n,
                     (long long)srv->n_ctx);
            goto fail;
        }
        if (!(j->prompt = malloc(n * sizeof *j->prompt))) {
            req_fail(&e, 500, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < n; i++) {
            json_t *id = json_array_get(prompt, i);
            if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= er_vocab_n_tokens(srv->vocab)) {
                req_fail(&e, 400, "prompt[%zu] is not a token id in [0, %lld)", i, (long long)er_vocab_n_tokens(srv->vocab));
                goto fail;
            }
            j->prompt[i] = (int32_t)json_integer_value(id);
        }
        j->n_prompt = (int64_t)n;
    } else {
        req_fail(&e, 400, "'prompt' must be a string, a list of one string, or a list of token ids");
        goto fail;
    }
    pool_submit(srv, j);
    out->job = j;
    return;
fail:
    reply_error(out, 0, &e);
    job_release(j);
}
