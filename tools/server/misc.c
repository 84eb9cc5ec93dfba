/*
 * misc.c - the endpoints that do not generate: /health, /v1/models, /tokenize and
 * /detokenize (llama-server's shapes), /metrics (Prometheus text, vLLM's names), and the
 * chat page at GET / (chat.html, built into the binary by page.S).
 */
#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

void handle_health(server *srv, json_t *body, reply *out) {
    (void)srv;
    (void)body;
    out->body = json_pack("{s:s}", "status", "ok");
}

void handle_models(server *srv, json_t *body, reply *out) {
    (void)body;
    out->body = json_pack("{s:s, s:[{s:s, s:s, s:i, s:s, s:{s:I, s:I, s:I}}]}", "object", "list", "data", "id",
                          srv->alias, "object", "model", "created", 0, "owned_by", "edgerunner", "meta", "n_ctx",
                          (json_int_t)srv->n_ctx, "n_ctx_train", (json_int_t)er_model_n_ctx_train(srv->model), "n_vocab",
                          (json_int_t)er_model_n_vocab(srv->model));
}

/* A boolean field, absent: `dflt`; -1 when it is not a boolean. */
static int bool_field(json_t *body, const char *name, int dflt) {
    json_t *v = json_object_get(body, name);
    return !v || json_is_null(v) ? dflt : json_is_boolean(v) ? json_is_true(v) : -1;
}

/* {"content": TEXT, "add_special": false, "parse_special": true, "with_pieces": false}
 * -> {"tokens": [ids]} or, with pieces, {"tokens": [{"id": N, "piece": TEXT}]}. */
void handle_tokenize(server *srv, json_t *body, reply *out) {
    req_error e = {0, ""};
    json_t *content = json_object_get(body, "content");
    const int add_special = bool_field(body, "add_special", 0), parse_special = bool_field(body, "parse_special", 1);
    const int with_pieces = bool_field(body, "with_pieces", 0);
    int32_t *ids = NULL;
    int64_t n = 0;
    if (!json_is_string(content) || add_special < 0 || parse_special < 0 || with_pieces < 0) {
        req_fail(&e, 400, "'content' must be a string; add_special, parse_special and with_pieces booleans");
        reply_error(out, 0, &e);
        return;
    }
    const int flags = (add_special ? ER_TOKENIZE_ADD_SPECIAL : 0) | (parse_special ? ER_TOKENIZE_PARSE_SPECIAL : 0);
    if (er_tokenize_prompt(srv->vocab, json_string_value(content), (int64_t)json_string_length(content), flags, &ids,
                           &n) != ER_OK) {
        req_fail(&e, 400, "cannot tokenize: %s", er_last_error());
        reply_error(out, 0, &e);
        return;
    }
    json_t *tokens = json_array();
    for (int64_t i = 0; i < n; i++) {
        if (!with_pieces) {
            json_array_append_new(tokens, json_integer(ids[i]));
            continue;
        }
        char piece[256];
        const int64_t len = er_token_to_piece(srv->model, ids[i], piece, sizeof piece);
        json_array_append_new(tokens, json_pack("{s:i, s:o}", "id", (int)ids[i], "piece",
                                                json_text(piece, len > 0 ? (size_t)len : 0)));
    }
    er_free(ids);
    out->body = json_pack("{s:o}", "tokens", tokens);
}

/* {"tokens": [ids]} -> {"content": TEXT} */
void handle_detokenize(server *srv, json_t *body, reply *out) {
    req_error e = {0, ""};
    json_t *tokens = json_object_get(body, "tokens");
    const size_t n = json_array_size(tokens);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    char *text = NULL;
    int64_t len = 0;
    if (!json_is_array(tokens) || !ids) {
        req_fail(&e, ids ? 400 : 500, ids ? "'tokens' must be a list of token ids" : "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *id = json_array_get(tokens, i);
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= er_vocab_n_tokens(srv->vocab)) {
            req_fail(&e, 400, "tokens[%zu] is not a token id in [0, %lld)", i, (long long)er_vocab_n_tokens(srv->vocab));
            goto fail;
        }
        ids[i] = (int32_t)json_integer_value(id);
    }
    if (er_detokenize(srv->vocab, ids, (int64_t)n, 0, NULL, 0, &len) != ER_OK || !(text = malloc((size_t)len + 1)) ||
        er_detokenize(srv->vocab, ids, (int64_t)n, 0, text, len + 1, &len) != ER_OK) {
        req_fail(&e, text ? 400 : 500, "cannot detokenize: %s", er_last_error());
        goto fail;
    }
    out->body = json_pack("{s:o}", "content", json_text(text, (size_t)len));
    free(ids);
    free(text);
    return;
fail:
    reply_error(out, 0, &e);
    free(ids);
    free(text);
}

/* ---- /metrics --------------------------------------------------------------------------- */

/* Upper bounds (seconds) of the latency histograms' buckets, as vLLM's coarser ones. */
static const double metric_buckets[METRIC_N_BUCKETS] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                        0.25,  0.5,   1.0,  2.5,   5.0,  10.0};

void metrics_observe(histogram *h, double seconds) {
    int b = 0;
    while (b < METRIC_N_BUCKETS && seconds > metric_buckets[b])
        b++;
    h->counts[b]++;
    h->n++;
    h->sum += seconds;
}

static void print_histogram(sbuf *b, const char *name, const char *help, const char *label, const histogram *h) {
    sbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cumulative = 0;
    for (int i = 0; i < METRIC_N_BUCKETS; i++) {
        cumulative += h->counts[i];
        sbuf_printf(b, "%s_bucket{%s,le=\"%g\"} %llu\n", name, label, metric_buckets[i], (unsigned long long)cumulative);
    }
    sbuf_printf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n%s_sum{%s} %.6f\n%s_count{%s} %llu\n", name, label,
                (unsigned long long)h->n, name, label, h->sum, name, label, (unsigned long long)h->n);
}

static void print_metric(sbuf *b, const char *name, const char *type, const char *help, const char *label, double v) {
    sbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s{%s} %.10g\n", name, help, name, type, name, label, v);
}

void handle_metrics(server *srv, json_t *body, reply *out) {
    (void)body;
    char label[200];
    size_t n = (size_t)snprintf(label, sizeof label, "model_name=\"");
    for (const char *s = srv->alias; *s && n + 4 < sizeof label; s++) /* Prometheus label escaping */
        n += (size_t)snprintf(label + n, sizeof label - n, *s == '"' ? "\\\"" : *s == '\\' ? "\\\\" : *s == '\n' ? "\\n" : "%c", *s);
    snprintf(label + n, sizeof label - n, "\"");
    pthread_mutex_lock(&srv->mu);
    const metrics m = srv->m;
    pthread_mutex_unlock(&srv->mu);
    sbuf b = {0};
    print_metric(&b, "vllm:num_requests_running", "gauge", "Requests generating in a slot.", label, (double)m.running);
    print_metric(&b, "vllm:num_requests_waiting", "gauge", "Requests queued for a free slot.", label, (double)m.waiting);
    print_metric(&b, "vllm:kv_cache_usage_perc", "gauge", "Fraction of the slots' KV cache positions in use (0 to 1).",
                 label, (double)m.kv_tokens / ((double)srv->n_slots * (double)srv->n_ctx));
    print_metric(&b, "vllm:prompt_tokens_total", "counter", "Prompt tokens processed.", label, (double)m.prompt_tokens);
    print_metric(&b, "vllm:generation_tokens_total", "counter", "Tokens generated.", label, (double)m.generation_tokens);
    print_metric(&b, "vllm:request_success_total", "counter", "Generation requests finished.", label,
                 (double)m.requests_ok);
    print_metric(&b, "edgerunner:request_failure_total", "counter", "Generation requests failed while generating.",
                 label, (double)m.requests_failed);
    print_metric(&b, "vllm:prefix_cache_hits_total", "counter", "Prompt tokens whose KV came from the prefix cache.",
                 label, (double)m.cached_tokens);
    print_metric(&b, "edgerunner:prefix_cache_requests_total", "counter", "Requests that reused a cached prefix.",
                 label, (double)m.prefix_hits);
    print_metric(&b, "edgerunner:batch_steps_total", "counter", "Batched decode steps (every active slot's tokens).",
                 label, (double)m.steps);
    print_histogram(&b, "vllm:time_to_first_token_seconds", "Seconds from queued to the first generated token.", label,
                    &m.ttft);
    print_histogram(&b, "vllm:time_per_output_token_seconds", "Seconds between generated tokens.", label, &m.per_token);
    out->raw_owned = b.data;
    out->raw_len = b.len;
    out->content_type = "text/plain; version=0.0.4; charset=utf-8";
    if (!b.data) {
        req_error e = {500, "out of memory"};
        reply_error(out, 0, &e);
    }
}

/* ---- the chat page ---------------------------------------------------------------------- */

extern const char chat_page_html[], chat_page_html_end[]; /* page.S */

void handle_page(server *srv, json_t *body, reply *out) {
    (void)srv;
    (void)body;
    out->raw = chat_page_html;
    out->raw_len = (size_t)(chat_page_html_end - chat_page_html);
    out->content_type = "text/html; charset=utf-8";
}
