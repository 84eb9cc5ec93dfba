/*
 * server.h - `edgerunner serve`: an OpenAI- and Anthropic-compatible HTTP server on the
 * public API (include/edgerunner.h). Only this directory links libmicrohttpd (HTTP) and
 * jansson (JSON); the library stays libc/libm/pthreads.
 *
 * The parts, each a file:
 *   serve.c     flags, model and slots, the daemon, SIGTERM/SIGINT: stop accepting, finish
 *               what is in flight, exit 0
 *   http.c      libmicrohttpd glue: body with a cap (413), API key (401), the route table,
 *               JSON and SSE responses, one log line per request
 *   text.c      the growable byte buffer; generated text made valid UTF-8 for JSON
 *   slots.c     jobs and their FIFO queue; a job's output travels to its connection through
 *               a locked buffer
 *   sched.c     the scheduler: one thread decodes every active slot's tokens in one batch
 *               per step (continuous batching), and the slots' KV rows are a prefix cache
 *   request.c   what the generating endpoints share: sampling fields, stop strings, chat
 *               template rendering, tokenizing, errors as JSON
 *   openai.c    /v1/chat/completions and /v1/completions (streamed as server-sent events),
 *               /apply-template
 *   anthropic.c /v1/messages
 *   toolcall.c  <tool_call> blocks of generated text into OpenAI's tool_calls
 *   misc.c      /health, /v1/models, /tokenize, /detokenize, /metrics, GET / (page.S: chat.html)
 *
 * A request's life: the connection thread parses and checks the body, renders and
 * tokenizes the prompt (a bad request is answered there, before it takes a slot), then
 * queues a job; the scheduler gives it a slot at its next step and generates into the
 * job's buffer; the connection thread sends it (all at the end, or as SSE chunks while it
 * comes). A client gone mid-stream marks its job cancelled, and the scheduler ends it at
 * its next step.
 */
#ifndef ER_SERVER_H
#define ER_SERVER_H

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "edgerunner.h"

/* ---- a growable byte buffer ------------------------------------------------------------ */

typedef struct sbuf {
    char *data; /* (cap) bytes, the first len used, NUL after them when len > 0 */
    size_t len, cap;
} sbuf;

int sbuf_add(sbuf *b, const char *data, size_t len); /* 0, or -1 when out of memory */
int sbuf_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sbuf_free(sbuf *b);

/* ---- jobs ----------------------------------------------------------------------------- */

typedef struct job job;
typedef struct server server;
typedef struct reply reply;

#define MAX_TOP_LOGPROBS 20 /* OpenAI's limit on top_logprobs */

/* How one API turns generation into bytes: called on the scheduler's thread. */
typedef struct job_api {
    const char *name;                                      /* for the log */
    void (*start)(job *j);                                 /* before the first token */
    void (*text)(job *j, const char *text, int64_t len);   /* a piece of generated text */
    void (*finish)(job *j, const er_text_result *r, er_status st); /* the end, or an error */
} job_api;

struct job {
    const job_api *api;
    server *srv;
    int32_t *prompt; /* (n_prompt) ids, fed exactly */
    int64_t n_prompt;
    er_text_params params;
    char **stop;     /* (params.n_stop) owned copies of the stop strings */
    int stream;      /* server-sent events, else one JSON body at the end */
    int include_usage; /* stream_options.include_usage */
    int n_top_logprobs; /* -1: no logprobs; else the alternatives per token (0..MAX_TOP_LOGPROBS) */
    int has_tools;   /* parse <tool_call> blocks out of the text at the end */
    char id[48];     /* "chatcmpl-...", "cmpl-...", "msg_..." */
    int64_t created; /* unix seconds */

    /* the worker's own, until done */
    sbuf text;       /* everything generated (non-streaming, or held back for tool calls) */
    json_t *logprobs; /* (tokens not yet sent) logprob entries, or NULL */
    double t_queued, t_first, t_last; /* monotonic seconds, for /metrics */
    int64_t n_tokens; /* generated so far (the per-token hook's calls) */
    int64_t n_cached; /* prompt tokens whose KV came from the prefix cache */

    /* shared with the connection thread, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sbuf out;        /* bytes for the client, from out_sent on not yet sent */
    size_t out_sent;
    int done;        /* the worker wrote its last byte */
    int cancelled;   /* the client is gone: stop at the next token */
    unsigned status; /* the HTTP status of a non-streaming reply */
    int refs;        /* the connection and the queue/worker */
    job *next;       /* in the queue */
};

/* A new job with one reference (the caller's); NULL when out of memory. */
job *job_new(server *srv, const job_api *api, const char *id_prefix);
void job_release(job *j); /* drops one reference; the last frees it */
/* Appends bytes for the client and wakes the connection thread. */
void job_emit(job *j, const char *data, size_t len);
/* job_emit of "data: JSON\n\n" (event: NAME first when NAME is not NULL); frees obj.
 * A NULL obj (jansson out of memory) ends the stream. */
void job_emit_sse(job *j, const char *event, json_t *obj);
/* job_emit of a whole JSON body (a non-streaming reply); frees obj. */
void job_emit_json(job *j, json_t *obj);
/* The client is gone (or its bytes cannot be kept): the worker stops at the next token. */
void job_cancel(job *j);

/* ---- slots ---------------------------------------------------------------------------- */

/* One sequence of the shared context (sched.c). Idle, its rows stay as a cached prefix
 * until a request that shares it, or the least recently used choice, takes the slot. */
typedef struct slot {
    int32_t seq;        /* its sequence in srv->ctx */
    job *job;           /* the request it serves; NULL: idle */
    er_text_gen *gen;   /* the request's sampling and text */
    int64_t n_fed;      /* prompt tokens in the cache (reused ones included) */
    int generating;     /* the prompt is in: `next` is fed at the next step */
    int32_t next;
    int32_t *tokens;    /* (n_ctx) what its KV rows hold, in order: prompt, then generated */
    int64_t n_tokens;   /* its rows (er_context_seq_pos) */
    int64_t n_exact;    /* the leading rows another prompt may reuse (sched.c says why) */
    uint64_t last_used; /* when its last request ended: the least recent is evicted first */
} slot;

/* Queues a job (takes a reference of its own); the scheduler admits it at its next step. */
void pool_submit(server *srv, job *j);
/* The scheduler's buffers for srv->ctx (made with one sequence per slot and n_batch of
 * at least n_slots + 2 * ER_PROMPT_CHUNK_MIN), and its thread; -1 when out of memory. */
int pool_start(server *srv);
/* Wakes the scheduler to exit once every job is done and the queue is empty; joins it
 * and frees the context. */
void pool_stop(server *srv);

/* Called by the scheduler (slots.c): the per-token hook (metrics, disconnects, logprobs)
 * and the text hook of a job. */
int job_on_token(int32_t token, const float *logits, int64_t n_vocab, void *user);
int job_on_text(const char *text, int64_t len, void *user);
int job_is_cancelled(job *j);

/* ---- metrics -------------------------------------------------------------------------- */

#define METRIC_N_BUCKETS 12

typedef struct histogram {
    uint64_t counts[METRIC_N_BUCKETS + 1]; /* per bucket of metric_buckets, then +Inf */
    uint64_t n;
    double sum;
} histogram;

typedef struct metrics {
    int64_t running, waiting;
    uint64_t requests_ok, requests_failed;
    uint64_t prompt_tokens, generation_tokens;
    int64_t kv_tokens;   /* tokens held in the active slots' KV caches now */
    uint64_t prefix_hits;   /* requests that reused a cached prefix */
    uint64_t cached_tokens; /* prompt tokens taken from the cache instead of computed */
    uint64_t steps;         /* batched decode steps */
    histogram ttft;      /* seconds from queued to the first token */
    histogram per_token; /* seconds between generated tokens */
} metrics;

void metrics_observe(histogram *h, double seconds); /* under srv->mu */

/* ---- the server ----------------------------------------------------------------------- */

struct server {
    er_model *model;
    const er_vocab *vocab;
    const char *alias;   /* the model's name in responses and /v1/models */
    const char *api_key; /* NULL: no key needed */
    const char *chat_template; /* --chat-template-file's text, or NULL: the model's */
    int64_t n_ctx;       /* every slot's context length */
    size_t max_body;     /* bytes; larger bodies get 413 */
    slot *slots;         /* (n_slots) */
    int n_slots;
    int n_threads;       /* the context's */

    /* the scheduler's own (sched.c) */
    er_context *ctx;     /* one sequence per slot */
    int64_t n_batch;     /* most tokens in one step */
    int64_t chunk;       /* most prompt tokens of one slot in one step */
    int32_t *b_tokens, *b_seq; /* (n_batch) the step's batch */
    int64_t *b_pos;      /* (n_batch) */
    int8_t *b_want;      /* (n_batch) */
    int32_t *b_slot;     /* (n_batch) the slot of each token */
    uint64_t clock;      /* counts requests ended, for last_used */
    pthread_t sched;
    int sched_started;

    pthread_mutex_t mu;  /* guards the queue, the metrics and the counters below */
    pthread_cond_t cv;   /* a job queued, the last request finished, or stopping */
    job *queue_head, *queue_tail;
    int stopping;        /* workers exit when the queue is empty */
    int draining;        /* SIGTERM: new requests get 503 */
    int64_t in_flight;   /* requests begun and not yet completed */
    metrics m;
    uint64_t n_ids;      /* for response ids */
};

/* ---- requests (request.c) ------------------------------------------------------------- */

/* A request's error: the HTTP status and a message. */
typedef struct req_error {
    unsigned status;
    char message[512];
} req_error;

int req_fail(req_error *e, unsigned status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The sampling and length fields the APIs share (temperature, top_p, top_k, min_p,
 * seed, presence/frequency/repeat penalties, max_tokens under `max_tokens_key`s, stop
 * strings under `stop_key`, ignore_eos) from body into j; 0, or -1 with e set. */
int req_parse_generation(server *srv, json_t *body, const char *const *max_tokens_keys, const char *stop_key,
                         job *j, req_error *e);
/* The ids of `text` (BOS as the model asks, special tokens parsed) into j->prompt, checked
 * against the context; 0, or -1 with e set. */
int req_tokenize_prompt(server *srv, const char *text, size_t len, job *j, req_error *e);
/* Renders the chat template with `vars` (messages, tools, add_generation_prompt set here)
 * into a malloc'd string; NULL with e set. */
char *req_render_chat(server *srv, json_t *vars, req_error *e);
/* Renders vars (req_render_chat), tokenizes into j and queues it: out->job; or out is
 * the error (in Anthropic's shape when `anthropic`) and j is released. */
void req_queue_chat(server *srv, json_t *vars, job *j, int anthropic, reply *out);
/* A message's content: a string, or an array of {"type":"text","text":...} parts joined;
 * a new string reference, or NULL with e set. `where` names it in the message. */
json_t *req_content_text(json_t *content, const char *where, req_error *e);

/* A JSON string of generated text: invalid UTF-8 bytes (a model can emit any byte) become
 * U+FFFD, since JSON text must be UTF-8. data may be NULL when len is 0. */
json_t *json_text(const char *data, size_t len);

/* Splits generated text into the content outside <tool_call> blocks (trimmed; JSON null
 * when none is left) and the calls in them, as OpenAI's tool_calls entries with ids
 * "call_<id_prefix>_<i>"; NULL (no calls, *content untouched) unless there is a block and
 * every block is whole and holds {"name": string, "arguments": object or string}
 * (toolcall.c). */
json_t *tool_calls_parse(const char *text, const char *id_prefix, json_t **content);

/* An error body: OpenAI's {"error": {...}} or Anthropic's {"type": "error", ...}. */
json_t *error_body_openai(unsigned status, const char *message);
json_t *error_body_anthropic(unsigned status, const char *message);

/* ---- endpoints ------------------------------------------------------------------------ */

/* What a handler answers: a JSON body, or a job whose output is the body or the stream. */
struct reply {
    unsigned status;
    json_t *body;      /* owned; or */
    job *job;          /* a queued job (one reference held) */
    const char *raw;   /* or static bytes (the page, /metrics text) ... */
    size_t raw_len;
    char *raw_owned;   /* ... or malloc'd bytes */
    const char *content_type;
};

typedef void (*handler_fn)(server *srv, json_t *body, reply *out);

void handle_chat_completions(server *srv, json_t *body, reply *out);
void handle_completions(server *srv, json_t *body, reply *out);
void handle_apply_template(server *srv, json_t *body, reply *out);
void handle_messages(server *srv, json_t *body, reply *out);
void handle_health(server *srv, json_t *body, reply *out);
void handle_models(server *srv, json_t *body, reply *out);
void handle_tokenize(server *srv, json_t *body, reply *out);
void handle_detokenize(server *srv, json_t *body, reply *out);
void handle_metrics(server *srv, json_t *body, reply *out);
void handle_page(server *srv, json_t *body, reply *out);

/* Sets out to an error reply in the API's style. */
void reply_error(reply *out, int anthropic, const req_error *e);

/* Starts the HTTP daemon on host:port (0: an ephemeral port, *bound_port says which);
 * NULL with a message on stderr. */
struct MHD_Daemon *http_start(server *srv, const char *host, int port, int *bound_port);
/* Stops accepting connections (SIGTERM), keeping the ones open. */
void http_quiesce(struct MHD_Daemon *d);
void http_stop(struct MHD_Daemon *d);

double now_seconds(void); /* CLOCK_MONOTONIC */

#endif
