/*
 * anthropic.c - Anthropic's Messages API, POST /v1/messages: system (a string or text
 * blocks), messages (user/assistant, content a string or text blocks), max_tokens
 * (required), stop_sequences, temperature, top_p, top_k, stream.
 *
 * Streaming events, in Anthropic's order: message_start, content_block_start,
 * content_block_delta (text_delta) per piece, content_block_stop, message_delta (the
 * stop_reason and output tokens), message_stop; each as "event: NAME" + "data: JSON".
 */
#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

static const char *stop_reason(const er_text_result *r) {
    return r->stop == ER_STOP_STRING ? "stop_sequence" : r->stop == ER_STOP_LENGTH || r->stop == ER_STOP_CONTEXT ? "max_tokens" : "end_turn";
}

static json_t *stop_sequence(const job *j, const er_text_result *r) {
    return r->stop == ER_STOP_STRING && r->stop_index >= 0 && r->stop_index < j->params.n_stop
               ? json_string(j->stop[r->stop_index])
               : json_null();
}

static void messages_start(job *j) {
    if (!j->stream)
        return;
    job_emit_sse(j, "message_start",
                 json_pack("{s:s, s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:{s:I, s:i}}}", "type", "message_start",
                           "message", "id", j->id, "type", "message", "role", "assistant", "model", j->srv->alias,
                           "content", "stop_reason", "stop_sequence", "usage", "input_tokens",
                           (json_int_t)j->n_prompt, "output_tokens", 0));
    job_emit_sse(j, "content_block_start", json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_start", "index",
                                                     0, "content_block", "type", "text", "text", ""));
}

static void messages_text(job *j, const char *text, int64_t len) {
    if (!j->stream) {
        if (sbuf_add(&j->text, text, (size_t)len) != 0)
            job_cancel(j);
        return;
    }
    job_emit_sse(j, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:o}}", "type", "content_block_delta", "index",
                                                     0, "delta", "type", "text_delta", "text", json_text(text, (size_t)len)));
}

static void messages_finish(job *j, const er_text_result *r, er_status st) {
    char message[600];
    if (st != ER_OK) {
        snprintf(message, sizeof message, "generation failed: %s", er_last_error());
        if (j->stream) {
            job_emit_sse(j, "error", error_body_anthropic(500, message));
        } else {
            j->status = 500;
            job_emit_json(j, error_body_anthropic(500, message));
        }
        return;
    }
    if (j->stream) {
        job_emit_sse(j, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", 0));
        job_emit_sse(j, "message_delta", json_pack("{s:s, s:{s:s, s:o}, s:{s:I}}", "type", "message_delta", "delta",
                                                   "stop_reason", stop_reason(r), "stop_sequence", stop_sequence(j, r),
                                                   "usage", "output_tokens", (json_int_t)r->n_generated));
        job_emit_sse(j, "message_stop", json_pack("{s:s}", "type", "message_stop"));
        return;
    }
    job_emit_json(j, json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:o}], s:s, s:o, s:{s:I, s:I}}", "id", j->id, "type",
                               "message", "role", "assistant", "model", j->srv->alias, "content", "type", "text", "text",
                               json_text(j->text.data, j->text.len), "stop_reason", stop_reason(r), "stop_sequence",
                               stop_sequence(j, r), "usage", "input_tokens", (json_int_t)r->n_prompt, "output_tokens",
                               (json_int_t)r->n_generated));
}

static const job_api messages_api = {"messages", messages_start, messages_text, messages_finish};

static const char *const anthropic_max_tokens[] = {"max_tokens", NULL};

void handle_messages(server *srv, json_t *body, reply *out) {
    req_error e = {0, ""};
    json_t *vars = NULL, *messages = json_object_get(body, "messages"), *system = json_object_get(body, "system");
    json_t *stream = json_object_get(body, "stream");
    job *j = job_new(srv, &messages_api, "msg_");
    if (!j) {
        req_fail(&e, 500, "out of memory");
        goto fail;
    }
    if (!json_is_integer(json_object_get(body, "max_tokens"))) {
        req_fail(&e, 400, "max_tokens: an integer is required");
        goto fail;
    }
    if (!json_is_array(messages) || json_array_size(messages) == 0) {
        req_fail(&e, 400, "messages: a non-empty list is required");
        goto fail;
    }
    if (stream && !json_is_boolean(stream)) {
        req_fail(&e, 400, "stream: must be a boolean");
        goto fail;
    }
    j->stream = json_is_true(stream);
    if (req_parse_generation(srv, body, anthropic_max_tokens, "stop_sequences", j, &e) < 0)
        goto fail;
    vars = json_pack("{s:[], s:b}", "messages", "add_generation_prompt", 1);
    json_t *list = json_object_get(vars, "messages");
    if (system && !json_is_null(system)) {
        json_t *text = req_content_text(system, "system", &e);
        if (!text)
            goto fail;
        json_array_append_new(list, json_pack("{s:s, s:o}", "role", "system", "content", text));
    }
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        char where[48];
        snprintf(where, sizeof where, "messages.%zu", i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant"))) {
            req_fail(&e, 400, "%s.role: must be \"user\" or \"assistant\"", where);
            goto fail;
        }
        json_t *text = req_content_text(json_object_get(m, "content"), where, &e);
        if (!text)
            goto fail;
        json_array_append_new(list, json_pack("{s:s, s:o}", "role", role, "content", text));
    }
    req_queue_chat(srv, vars, j, 1, out);
    json_decref(vars);
    return;
fail:
    reply_error(out, 1, &e);
    job_release(j);
    json_decref(vars);
}
