/*
 * serve.c - `edgerunner serve`: flags (llama-server's names), the model and one context
 * per slot, the HTTP daemon, and the shutdown: on SIGTERM or SIGINT the listening socket
 * closes (new connections are refused, new requests on open ones get 503), the requests
 * in flight finish, and the process exits 0.
 *
 * The signals are blocked in every thread (the mask is set before any thread starts) and
 * taken by sigwait on the main thread, so no handler runs inside library or MHD code.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cli/cli.h"
#include "server.h"

/* Larger bodies get 413; 8 MiB holds any conversation that fits a context of this engine. */
#define MAX_BODY_BYTES (8u << 20)

typedef struct serve_opts {
    cli_model_opts mo;
    const char *host, *api_key, *alias, *template_path;
    int64_t port, parallel;
} serve_opts;

static int flag_error(const char *what) {
    fprintf(stderr, "edgerunner: serve: %s\n", what);
    return -1;
}

static int parse_flags(int argc, char **argv, serve_opts *o) {
    cli_model_opts_init(&o->mo, 0, 0);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->parallel = 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes_value = 1, parsed;
        if (!strcmp(a, "--")) {
            if (cli_no_operands("serve", argc, argv, i))
                return -1;
            break;
        }
        if ((parsed = cli_parse_model_opt("serve", a, v, &o->mo, &takes_value)) != 0) {
            if (parsed < 0)
                return -1;
        } else if (!v) {
            fprintf(stderr, "edgerunner: serve: %s needs a value\n", a);
            return -1;
        } else if (!strcmp(a, "--host")) {
            o->host = v;
        } else if (!strcmp(a, "--port")) {
            if (!cli_parse_i64(v, 0, 65535, &o->port))
                return flag_error("--port wants an integer in [0, 65535] (0: any free port)");
        } else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) {
            if (!cli_parse_i64(v, 1, 256, &o->parallel))
                return flag_error("--parallel wants an integer in [1, 256]");
        } else if (!strcmp(a, "--api-key")) {
            o->api_key = v;
        } else if (!strcmp(a, "-a") || !strcmp(a, "--alias")) {
            o->alias = v;
        } else if (!strcmp(a, "--chat-template-file")) {
            o->template_path = v;
        } else {
            fprintf(stderr, "edgerunner: serve: unknown option '%s'\n", a);
            return -1;
        }
        i += takes_value;
    }
    if (!o->mo.path)
        return flag_error("-m MODEL is required");
    return 0;
}

int cmd_serve(int argc, char **argv) {
    serve_opts o;
    memset(&o, 0, sizeof o);
    if (parse_flags(argc, argv, &o) < 0)
        return 1;
    int rc = 1, port = 0;
    er_status st;
    struct MHD_Daemon *daemon = NULL;
    char *template_text = NULL;
    server srv;
    memset(&srv, 0, sizeof srv);
    pthread_mutex_init(&srv.mu, NULL);
    pthread_cond_init(&srv.cv, NULL);
    srv.api_key = o.api_key;
    srv.max_body = MAX_BODY_BYTES;
    srv.n_slots = (int)o.parallel;

    /* before any thread starts, so that every thread inherits the mask */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client gone mid-write is an error return, not a kill */

    cli_catch_sigbus(o.mo.path);
    if ((st = er_model_load(o.mo.path, &o.mo.model, &srv.model)) != ER_OK) {
        rc = cli_fail_status(st);
        goto done;
    }
    size_t template_len = 0;
    if (o.template_path && !(template_text = cli_read_file(o.template_path, &template_len))) {
        fprintf(stderr, "edgerunner: serve: --chat-template-file %s: %s\n", o.template_path, strerror(errno));
        goto done;
    }
    srv.chat_template = template_text;
    if (!(srv.vocab = er_model_vocab(srv.model))) {
        cli_fail("serve: the model file has no tokenizer this build knows");
        goto done;
    }
    if (!(srv.slots = calloc((size_t)srv.n_slots, sizeof *srv.slots))) {
        cli_fail("serve: out of memory");
        goto done;
    }
    if (!o.alias) { /* the file's name without its directories, as llama-server's model id */
        const char *slash = strrchr(o.mo.path, '/');
        o.alias = slash ? slash + 1 : o.mo.path;
    }
    srv.alias = o.alias;
    /* one context, one sequence per slot, all the CPUs (or -t): one batch per step, room
     * in it for every slot's token and a prompt chunk of at least 2 x 32 */
    er_context_params cp = cli_model_opts_context(&o.mo);
    cp.n_seq_max = srv.n_slots;
    if (cp.n_batch == 0)
        cp.n_batch = 512;
    if (cp.n_batch < srv.n_slots + 2 * ER_PROMPT_CHUNK_MIN)
        cp.n_batch = srv.n_slots + 2 * ER_PROMPT_CHUNK_MIN;
    if ((st = er_context_create(srv.model, &cp, &srv.ctx)) != ER_OK) {
        rc = cli_fail_status(st);
        goto done;
    }
    if (pool_start(&srv) != 0) {
        cli_fail("serve: out of memory for the scheduler");
        goto done;
    }
    if (!(daemon = http_start(&srv, o.host, (int)o.port, &port)))
        goto done;
    fprintf(stderr, "edgerunner: serve: %s, %d slot(s) of %lld tokens decoded together, %d thread(s); listening on "
            "http://%s:%d\n", srv.alias, srv.n_slots, (long long)srv.n_ctx, srv.n_threads, o.host, port);

    int sig = 0;
    sigwait(&stop_signals, &sig);
    pthread_mutex_lock(&srv.mu);
    srv.draining = 1;
    fprintf(stderr, "edgerunner: serve: %s: no new requests; finishing %lld in flight\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
            (long long)srv.in_flight);
    pthread_mutex_unlock(&srv.mu);
    http_quiesce(daemon);
    pthread_mutex_lock(&srv.mu);
    while (srv.in_flight > 0)
        pthread_cond_wait(&srv.cv, &srv.mu);
    pthread_mutex_unlock(&srv.mu);
    fprintf(stderr, "edgerunner: serve: stopped\n");
    rc = 0;
done:
    if (daemon)
        http_stop(daemon);
    if (srv.slots) {
        pool_stop(&srv);
        free(srv.slots);
    }
    er_model_free(srv.model);
    free(template_text);
    pthread_cond_destroy(&srv.cv);
    pthread_mutex_destroy(&srv.mu);
    return rc;
}
