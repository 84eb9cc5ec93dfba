/*
 * slots.c - jobs and their queue. Jobs wait in a FIFO queue until the scheduler (sched.c)
 * gives them a slot; a job cancelled while it waits is dropped unrun. A job's output goes
 * through its locked buffer to the connection thread, which waits on its condition. The
 * per-token and text hooks the scheduler calls for a job are here too.
 */
#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server.h"

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- jobs ----------------------------------------------------------------------------- */

job *job_new(server *srv, const job_api *api, const char *id_prefix) {
    job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->api = api;
    j->srv = srv;
    j->params = er_text_default_params();
    j->n_top_logprobs = -1;
    j->refs = 1;
    j->status = 200;
    j->created = (int64_t)time(NULL);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    pthread_mutex_lock(&srv->mu);
    const uint64_t n = ++srv->n_ids;
    pthread_mutex_unlock(&srv->mu);
    snprintf(j->id, sizeof j->id, "%s%llx%08llx", id_prefix, (unsigned long long)j->created, (unsigned long long)n);
    return j;
}

void job_release(job *j) {
    if (!j)
        return;
    pthread_mutex_lock(&j->mu);
    const int last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last)
        return;
    free(j->prompt);
    for (int64_t i = 0; j->stop && i < j->params.n_stop; i++)
        free(j->stop[i]);
    free(j->stop);
    sbuf_free(&j->text);
    sbuf_free(&j->out);
    json_decref(j->logprobs);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* Out of memory for the client's bytes: the stream ends there (the connection sees done). */
void job_emit(job *j, const char *data, size_t len) {
    pthread_mutex_lock(&j->mu);
    if (sbuf_add(&j->out, data, len) != 0)
        j->cancelled = 1; /* the stream ends short rather than with a hole */
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void job_cancel(job *j) {
    pthread_mutex_lock(&j->mu);
    j->cancelled = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void job_emit_sse(job *j, const char *event, json_t *obj) {
    char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!text) {
        job_cancel(j);
        return;
    }
    sbuf b = {0};
    if (event)
        sbuf_printf(&b, "event: %s\n", event);
    sbuf_printf(&b, "data: %s\n\n", text);
    job_emit(j, b.data, b.len);
    sbuf_free(&b);
    free(text);
}

void job_emit_json(job *j, json_t *obj) {
    char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (text)
        job_emit(j, text, strlen(text));
    else
        j->status = 500;
    free(text);
}

/* ---- a job's hooks, called by the scheduler ---------------------------------------------- */

int job_is_cancelled(job *j) {
    pthread_mutex_lock(&j->mu);
    const int c = j->cancelled;
    pthread_mutex_unlock(&j->mu);
    return c;
}

int job_on_text(const char *text, int64_t len, void *user) {
    job *j = user;
    if (job_is_cancelled(j))
        return 1;
    j->api->text(j, text, len);
    return 0;
}

/* {"token", "bytes", "logprob"}: the token's text as stored (JSON needs valid UTF-8, so a
 * byte token's text is "" and its bytes say what it is) */
static json_t *token_entry(const er_model *model, int32_t token, double logprob) {
    char piece[256];
    const int64_t n = er_token_to_piece(model, token, piece, sizeof piece);
    const size_t len = n > 0 ? (size_t)n : 0;
    json_t *entry = json_object(), *bytes = json_array(), *text = json_stringn(piece, len);
    for (size_t i = 0; i < len; i++)
        json_array_append_new(bytes, json_integer((unsigned char)piece[i]));
    json_object_set_new(entry, "token", text ? text : json_string(""));
    json_object_set_new(entry, "logprob", json_real(logprob));
    json_object_set_new(entry, "bytes", bytes);
    return entry;
}

/* The per-token hook: timing for /metrics, the disconnect check, and logprobs (the
 * log-softmax of the model's logits, in double, with the top alternatives). */
int job_on_token(int32_t token, const float *logits, int64_t n_vocab, void *user) {
    job *j = user;
    server *srv = j->srv;
    const double t = now_seconds();
    pthread_mutex_lock(&srv->mu);
    if (j->t_first == 0)
        metrics_observe(&srv->m.ttft, t - j->t_queued);
    else
        metrics_observe(&srv->m.per_token, t - j->t_last);
    srv->m.generation_tokens++;
    pthread_mutex_unlock(&srv->mu);
    j->n_tokens++;
    if (j->t_first == 0)
        j->t_first = t;
    j->t_last = t;
    if (job_is_cancelled(j))
        return 1;
    if (j->n_top_logprobs < 0)
        return 0;
    double max = logits[0], sum = 0;
    for (int64_t i = 1; i < n_vocab; i++)
        max = logits[i] > max ? logits[i] : max;
    for (int64_t i = 0; i < n_vocab; i++)
        sum += exp((double)logits[i] - max);
    const double log_z = max + log(sum);
    /* the top alternatives, kept sorted (largest first) in one pass; ties: the smaller id */
    int32_t top[MAX_TOP_LOGPROBS]; /* (n_top) ids */
    int n_top = 0;
    for (int64_t i = 0; i < n_vocab; i++) {
        if (n_top == j->n_top_logprobs && (n_top == 0 || logits[i] <= logits[top[n_top - 1]]))
            continue;
        int at = n_top < j->n_top_logprobs ? n_top++ : n_top - 1;
        for (; at > 0 && logits[top[at - 1]] < logits[i]; at--)
            top[at] = top[at - 1];
        top[at] = (int32_t)i;
    }
    json_t *entry = token_entry(srv->model, token, (double)logits[token] - log_z), *alts = json_array();
    for (int k = 0; k < n_top; k++)
        json_array_append_new(alts, token_entry(srv->model, top[k], (double)logits[top[k]] - log_z));
    json_object_set_new(entry, "top_logprobs", alts);
    if (!j->logprobs)
        j->logprobs = json_array();
    json_array_append_new(j->logprobs, entry);
    return 0;
}

void pool_submit(server *srv, job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    j->t_queued = now_seconds();
    pthread_mutex_lock(&srv->mu);
    j->next = NULL;
    if (srv->queue_tail)
        srv->queue_tail->next = j;
    else
        srv->queue_head = j;
    srv->queue_tail = j;
    srv->m.waiting++;
    pthread_cond_broadcast(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
}

