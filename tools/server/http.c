/*
 * http.c - the HTTP side, on GNU libmicrohttpd: a thread per connection (a connection
 * thread may block while its job waits for a slot or generates), the request body
 * gathered up to srv->max_body (past it: 413, and the rest is not read), the API key
 * (401), the route table, JSON bodies through jansson, and replies: JSON, static bytes,
 * or a job's output (all of it once done, or server-sent events as it comes).
 *
 * Every request is counted in srv->in_flight from its first byte to MHD's "completed"
 * notice, which also logs its one line; SIGTERM waits for that count to reach zero.
 */
#define _GNU_SOURCE

#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server.h"

typedef struct route {
    const char *method, *path;
    handler_fn handle;
    int needs_key; /* when --api-key is set */
    int anthropic; /* errors in Anthropic's shape */
} route;

/* llama-server's paths, with and without /v1 */
static const route routes[] = {
    {"POST", "/v1/chat/completions", handle_chat_completions, 1, 0},
    {"POST", "/chat/completions", handle_chat_completions, 1, 0},
    {"POST", "/v1/completions", handle_completions, 1, 0},
    {"POST", "/completions", handle_completions, 1, 0},
    {"POST", "/v1/messages", handle_messages, 1, 1},
    {"GET", "/v1/models", handle_models, 1, 0},
    {"GET", "/models", handle_models, 1, 0},
    {"POST", "/apply-template", handle_apply_template, 1, 0},
    {"POST", "/tokenize", handle_tokenize, 1, 0},
    {"POST", "/detokenize", handle_detokenize, 1, 0},
    {"GET", "/metrics", handle_metrics, 1, 0},
    {"GET", "/health", handle_health, 0, 0},
    {"GET", "/v1/health", handle_health, 0, 0},
    {"GET", "/", handle_page, 0, 0},
    {"GET", "/index.html", handle_page, 0, 0},
};

/* One request: what MHD keeps for us between its calls (con_cls). */
typedef struct conn {
    server *srv;
    sbuf body;        /* the request body so far */
    int too_large;    /* past max_body: the rest is dropped, the answer is 413 */
    int answered;     /* a response is queued */
    unsigned status;
    int streamed;     /* the reply is a job's SSE stream */
    double t_start;
    char method[16], path[96];
} conn;

/* ---- replies -------------------------------------------------------------------------- */

static enum MHD_Result send_bytes(struct MHD_Connection *c, conn *k, unsigned status, const char *type, char *data,
                                  size_t len, enum MHD_ResponseMemoryMode mode) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, data, mode);
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE)
            free(data);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    const enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    k->status = status;
    k->answered = 1;
    return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *c, conn *k, unsigned status, json_t *body) {
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}";
        return send_bytes(c, k, 500, "application/json", (char *)oom, sizeof oom - 1, MHD_RESPMEM_PERSISTENT);
    }
    return send_bytes(c, k, status, "application/json", text, strlen(text), MHD_RESPMEM_MUST_FREE);
}

static enum MHD_Result send_error(struct MHD_Connection *c, conn *k, int anthropic, unsigned status, const char *message) {
    return send_json(c, k, status, anthropic ? error_body_anthropic(status, message) : error_body_openai(status, message));
}

/* MHD pulls a stream's bytes from here, on the connection's thread: it waits until the
 * worker has written more or is done. */
static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max) {
    job *j = cls;
    (void)pos;
    pthread_mutex_lock(&j->mu);
    while (j->out_sent == j->out.len && !j->done && !j->cancelled)
        pthread_cond_wait(&j->cv, &j->mu);
    ssize_t n = MHD_CONTENT_READER_END_OF_STREAM;
    if (j->out_sent < j->out.len) {
        n = (ssize_t)(j->out.len - j->out_sent < max ? j->out.len - j->out_sent : max);
        memcpy(buf, j->out.data + j->out_sent, (size_t)n);
        j->out_sent += (size_t)n;
    }
    pthread_mutex_unlock(&j->mu);
    return n;
}

/* The response is gone: sent, or the client left. Either way the worker may stop. */
static void free_stream(void *cls) {
    job *j = cls;
    job_cancel(j);
    job_release(j);
}

static enum MHD_Result send_job(struct MHD_Connection *c, conn *k, job *j) {
    if (j->stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, read_stream, j, free_stream);
        if (!r) {
            free_stream(j);
            return MHD_NO;
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        const enum MHD_Result ok = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        k->status = 200;
        k->streamed = 1;
        k->answered = 1;
        return ok;
    }
    pthread_mutex_lock(&j->mu);
    while (!j->done)
        pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
    enum MHD_Result ok;
    if (j->out.len == 0)
        ok = send_error(c, k, 0, 500, "the reply could not be made (out of memory)");
    else
        ok = send_bytes(c, k, j->status, "application/json", j->out.data, j->out.len, MHD_RESPMEM_MUST_COPY);
    job_release(j);
    return ok;
}

static enum MHD_Result send_reply(struct MHD_Connection *c, conn *k, reply *r) {
    if (r->job)
        return send_job(c, k, r->job);
    if (r->raw_owned)
        return send_bytes(c, k, r->status, r->content_type, r->raw_owned, r->raw_len, MHD_RESPMEM_MUST_FREE);
    if (r->raw)
        return send_bytes(c, k, r->status, r->content_type, (char *)r->raw, r->raw_len, MHD_RESPMEM_PERSISTENT);
    return send_json(c, k, r->status, r->body);
}

/* ---- requests ------------------------------------------------------------------------- */

static int key_ok(struct MHD_Connection *c, const char *key) {
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *x_key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key"); /* Anthropic's header */
    return (auth && !strncmp(auth, "Bearer ", 7) && !strcmp(auth + 7, key)) || (x_key && !strcmp(x_key, key));
}

static const route *find_route(const char *method, const char *path, int *path_known) {
    *path_known = 0;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(routes[i].path, path)) {
            *path_known = 1;
            if (!strcmp(routes[i].method, method))
                return &routes[i];
        }
    return NULL;
}

static enum MHD_Result dispatch(struct MHD_Connection *c, conn *k, const char *url, const char *method) {
    server *srv = k->srv;
    int path_known;
    const route *rt = find_route(method, url, &path_known);
    const int anthropic = !strcmp(url, "/v1/messages");
    if (k->too_large) {
        char message[128];
        snprintf(message, sizeof message, "the request body is larger than %zu bytes", srv->max_body);
        return send_error(c, k, anthropic, 413, message);
    }
    if (!rt)
        return send_error(c, k, anthropic, path_known ? 405 : 404, path_known ? "method not allowed" : "no such endpoint");
    if (rt->needs_key && srv->api_key && !key_ok(c, srv->api_key))
        return send_error(c, k, anthropic, 401, "invalid or missing API key");
    json_t *body = NULL;
    if (!strcmp(method, "POST")) {
        json_error_t err;
        body = json_loadb(k->body.data ? k->body.data : "", k->body.len, 0, &err);
        if (!body) {
            char message[300];
            snprintf(message, sizeof message, "the body is not valid JSON: %s (line %d, column %d)", err.text, err.line,
                     err.column);
            return send_error(c, k, anthropic, 400, message);
        }
        if (!json_is_object(body)) {
            json_decref(body);
            return send_error(c, k, anthropic, 400, "the body must be a JSON object");
        }
    }
    reply r;
    memset(&r, 0, sizeof r);
    r.status = 200;
    r.content_type = "application/json";
    rt->handle(srv, body, &r);
    json_decref(body);
    return send_reply(c, k, &r);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    server *srv = cls;
    conn *k = *con_cls;
    (void)version;
    if (!k) { /* the headers are in: count the request, refuse early what must be refused */
        if (!(k = calloc(1, sizeof *k)))
            return MHD_NO;
        k->srv = srv;
        k->t_start = now_seconds();
        snprintf(k->method, sizeof k->method, "%s", method);
        snprintf(k->path, sizeof k->path, "%s", url);
        for (char *p = k->path; *p; p++) /* the log stays one line per request, whatever the URL */
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                *p = '?';
        *con_cls = k;
        pthread_mutex_lock(&srv->mu);
        srv->in_flight++;
        const int draining = srv->draining;
        pthread_mutex_unlock(&srv->mu);
        if (draining)
            return send_error(c, k, 0, 503, "the server is shutting down");
        const char *length = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (length && strtoull(length, NULL, 10) > srv->max_body) {
            k->too_large = 1;
            return dispatch(c, k, url, method);
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!k->answered && !k->too_large && k->body.len + *upload_data_size > srv->max_body)
            k->too_large = 1;
        if (!k->answered && !k->too_large && sbuf_add(&k->body, upload_data, *upload_data_size) != 0)
            k->too_large = 1;
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (k->answered)
        return MHD_YES;
    return dispatch(c, k, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    server *srv = cls;
    conn *k = *con_cls;
    (void)c;
    if (!k)
        return;
    const double ms = 1e3 * (now_seconds() - k->t_start);
    fprintf(stderr, "edgerunner: serve: %s %s %u %.1f ms%s\n", k->method, k->path, k->answered ? k->status : 0, ms,
            toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : k->streamed ? " (client gone)" : " (connection closed)");
    sbuf_free(&k->body);
    free(k);
    *con_cls = NULL;
    pthread_mutex_lock(&srv->mu);
    srv->in_flight--;
    pthread_cond_broadcast(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
}

struct MHD_Daemon *http_start(server *srv, const char *host, int port, int *bound_port) {
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port_text[16];
    snprintf(port_text, sizeof port_text, "%d", port);
    const int gai = getaddrinfo(host, port_text, &hints, &ai);
    if (gai != 0) {
        fprintf(stderr, "edgerunner: serve: --host %s: %s\n", host, gai_strerror(gai));
        return NULL;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_POLL;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR,
                                            ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
                                            MHD_OPTION_CONNECTION_LIMIT, 1024u, MHD_OPTION_CONNECTION_TIMEOUT, 600u,
                                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d) {
        fprintf(stderr, "edgerunner: serve: cannot listen on %s:%d (in use, or not an address of this machine)\n", host,
                port);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *bound_port = info ? info->port : port;
    return d;
}

void http_quiesce(struct MHD_Daemon *d) {
    const MHD_socket listener = MHD_quiesce_daemon(d);
    if (listener != MHD_INVALID_SOCKET)
        close(listener);
}

void http_stop(struct MHD_Daemon *d) { MHD_stop_daemon(d); }
