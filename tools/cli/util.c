/* util.c - helpers shared by the subcommands (see cli.h). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

int cli_fail(const char *what) {
    fprintf(stderr, "edgerunner: %s\n", what);
    return 1;
}

int cli_fail_status(er_status st) {
    fprintf(stderr, "edgerunner: %s (%s)\n", er_last_error(), er_status_name(st));
    return 1;
}

int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

er_status cli_tokenize(const er_vocab *vocab, const char *text, int64_t len, int flags, int32_t **ids, int64_t *n_ids) {
    int64_t cap = len + 3; /* enough for ordinary text: one call */
    er_status st = ER_OK;
    *ids = NULL;
    *n_ids = 0;
    for (;;) {
        int32_t *grown = realloc(*ids, (size_t)cap * sizeof **ids);
        if (!grown) {
            st = ER_ERR_NO_MEMORY;
            break;
        }
        *ids = grown;
        if ((st = er_tokenize(vocab, text, len, flags, *ids, cap, n_ids)) != ER_OK || *n_ids <= cap)
            break;
        cap = *n_ids;
    }
    if (st != ER_OK) {
        free(*ids);
        *ids = NULL;
    }
    return st;
}

int cli_no_operands(const char *cmd, int argc, char **argv, int i) {
    if (i + 1 >= argc)
        return 0;
    fprintf(stderr, "edgerunner: %s: unexpected argument '%s' after --\n", cmd, argv[i + 1]);
    return 1;
}

int64_t cli_parse_ids(const char *s, int32_t **out) {
    int64_t cap = 16, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    while (ids && *s) {
        char *end;
        if (*s == ',' || *s == ' ') {
            s++;
            continue;
        }
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno || end == s || v < 0 || v > INT32_MAX || (*end && *end != ',' && *end != ' '))
            break;
        if (n == cap) {
            int32_t *grown = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            if (!grown)
                break;
            ids = grown;
        }
        ids[n++] = (int32_t)v;
        s = end;
    }
    if (!ids || *s || n == 0) {
        free(ids);
        return -1;
    }
    *out = ids;
    return n;
}

void cli_model_opts_init(cli_model_opts *o, int64_t n_ctx, int64_t n_ctx_min) {
    const char *ref_env = getenv("EDGERUNNER_REFERENCE");
    memset(o, 0, sizeof *o);
    o->n_ctx = n_ctx;
    o->n_ctx_min = n_ctx_min;
    o->reference = ref_env && *ref_env && strcmp(ref_env, "0") != 0;
    o->model = er_model_default_params();
}

int cli_parse_model_opt(const char *cmd, const char *flag, const char *value, cli_model_opts *o, int *took_value) {
    if (!strcmp(flag, "--reference")) {
        o->reference = 1;
        *took_value = 0;
        return 1;
    }
    const int cache_k = !strcmp(flag, "-ctk") || !strcmp(flag, "--cache-type-k");
    const int cache_v = !strcmp(flag, "-ctv") || !strcmp(flag, "--cache-type-v");
    const int known = !strcmp(flag, "-m") || !strcmp(flag, "--model") || !strcmp(flag, "-c") ||
                      !strcmp(flag, "--ctx-size") || !strcmp(flag, "-b") || !strcmp(flag, "--batch-size") ||
                      !strcmp(flag, "-t") || !strcmp(flag, "--threads") || !strcmp(flag, "--backend") ||
                      !strcmp(flag, "--type") || cache_k || cache_v;
    if (!known)
        return 0;
    if (!value) {
        fprintf(stderr, "edgerunner: %s: %s needs a value\n", cmd, flag);
        return -1;
    }
    *took_value = 1;
    if (!strcmp(flag, "-m") || !strcmp(flag, "--model")) {
        o->path = value;
    } else if (!strcmp(flag, "--type")) {
        o->model.type = value; /* checked by er_model_load, which names the types */
    } else if (!strcmp(flag, "-c") || !strcmp(flag, "--ctx-size")) {
        if (!cli_parse_i64(value, o->n_ctx_min, INT32_MAX, &o->n_ctx)) {
            fprintf(stderr, "edgerunner: %s: -c wants an integer >= %lld\n", cmd, (long long)o->n_ctx_min);
            return -1;
        }
    } else if (!strcmp(flag, "-b") || !strcmp(flag, "--batch-size")) {
        if (!cli_parse_i64(value, 0, INT32_MAX, &o->n_batch)) {
            fprintf(stderr, "edgerunner: %s: -b wants an integer >= 0\n", cmd);
            return -1;
        }
    } else if (!strcmp(flag, "-t") || !strcmp(flag, "--threads")) {
        if (!cli_parse_i64(value, 0, 1024, &o->n_threads)) {
            fprintf(stderr, "edgerunner: %s: -t wants an integer in [0, 1024]\n", cmd);
            return -1;
        }
    } else if (cache_k || cache_v) {
        if (!cli_parse_kv_type(value, cache_k ? &o->type_k : &o->type_v)) {
            fprintf(stderr, "edgerunner: %s: %s wants f32, f16 or q8_0\n", cmd, flag);
            return -1;
        }
    } else if (!cli_parse_backend(value, &o->model.backend)) {
        fprintf(stderr, "edgerunner: %s: --backend wants cpu or cuda\n", cmd);
        return -1;
    }
    return 1;
}

er_context_params cli_model_opts_context(const cli_model_opts *o) {
    er_context_params cp = er_context_default_params();
    cp.n_ctx = o->n_ctx;
    cp.n_batch = o->n_batch;
    cp.n_threads = (int)o->n_threads;
    cp.reference = o->reference;
    cp.type_k = o->type_k;
    cp.type_v = o->type_v;
    return cp;
}

void cli_warn_threads(const cli_model_opts *o, const er_context *ctx) {
    const int n = er_context_n_threads(ctx);
    if (o->n_threads > n)
        fprintf(stderr, "edgerunner: warning: -t %lld is more than the %d CPU(s) this process may use; using %d thread(s)\n",
                (long long)o->n_threads, n, n);
}

int cli_parse_kv_type(const char *s, er_kv_type *out) {
    if (!strcmp(s, "f32"))
        *out = ER_KV_F32;
    else if (!strcmp(s, "f16"))
        *out = ER_KV_F16;
    else if (!strcmp(s, "q8_0"))
        *out = ER_KV_Q8_0;
    else
        return 0;
    return 1;
}

int cli_parse_backend(const char *s, er_backend *out) {
    if (!strcmp(s, "cpu"))
        *out = ER_BACKEND_CPU;
    else if (!strcmp(s, "cuda"))
        *out = ER_BACKEND_CUDA;
    else
        return 0;
    return 1;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    size_t cap = 1 << 16, n = 0;
    char *buf = f ? malloc(cap) : NULL;
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1)
            break;
        char *grown = cap < SIZE_MAX / 2 ? realloc(buf, cap *= 2) : NULL;
        if (!grown) {
            free(buf);
            buf = NULL;
            errno = ENOMEM;
        }
        buf = grown;
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
    }
    if (f && f != stdin)
        fclose(f);
    if (buf) {
        buf[n] = 0;
        *len = n;
    }
    return buf;
}

void cli_sampling_init(cli_sampling *s) {
    s->params = er_sampler_default_params();
    s->repeat_last_n = s->params.repeat_last_n;
    s->seed = -1;
}

static int parse_f32(const char *v, double lo, double hi, float *out) {
    char *end;
    errno = 0;
    const double d = strtod(v, &end);
    if (errno || end == v || *end || !(d >= lo && d <= hi))
        return 0;
    *out = (float)d;
    return 1;
}

int cli_parse_sampling(const char *cmd, const char *flag, const char *value, cli_sampling *s) {
    er_sampler_params *p = &s->params;
    int64_t v = 0;
    const char *want = NULL;
    if (!strcmp(flag, "--temp")) {
        if (!parse_f32(value, 0, 1e6, &p->temperature))
            want = "a number >= 0";
    } else if (!strcmp(flag, "--top-k")) {
        if (cli_parse_i64(value, 0, INT32_MAX, &v))
            p->top_k = (int32_t)v;
        else
            want = "an integer >= 0 (0: off)";
    } else if (!strcmp(flag, "--top-p")) {
        if (!parse_f32(value, 0, 1, &p->top_p))
            want = "a number in [0, 1] (1: off)";
    } else if (!strcmp(flag, "--min-p")) {
        if (!parse_f32(value, 0, 1, &p->min_p))
            want = "a number in [0, 1] (0: off)";
    } else if (!strcmp(flag, "--repeat-penalty")) {
        if (!parse_f32(value, 1e-6, 1e6, &p->repeat_penalty))
            want = "a number > 0 (1: off)";
    } else if (!strcmp(flag, "--repeat-last-n")) {
        if (!cli_parse_i64(value, -1, INT32_MAX, &s->repeat_last_n))
            want = "an integer >= -1 (0: off, -1: the context size)";
    } else if (!strcmp(flag, "--presence-penalty")) {
        if (!parse_f32(value, -1e6, 1e6, &p->presence_penalty))
            want = "a number (0: off)";
    } else if (!strcmp(flag, "--frequency-penalty")) {
        if (!parse_f32(value, -1e6, 1e6, &p->frequency_penalty))
            want = "a number (0: off)";
    } else if (!strcmp(flag, "--seed")) {
        if (!strcmp(value, "-1"))
            s->seed = -1;
        else if (cli_parse_i64(value, 0, INT64_MAX, &s->seed) == 0)
            want = "an integer >= 0 (-1: from the clock)";
    } else {
        return 0;
    }
    if (want) {
        fprintf(stderr, "edgerunner: %s: %s wants %s\n", cmd, flag, want);
        return -1;
    }
    return 1;
}

er_sampler_params cli_sampling_resolve(const cli_sampling *s, int64_t n_ctx) {
    er_sampler_params p = s->params;
    p.repeat_last_n = s->repeat_last_n < 0 ? (int32_t)(n_ctx < INT32_MAX ? n_ctx : INT32_MAX) : (int32_t)s->repeat_last_n;
    if (s->seed >= 0) {
        p.seed = (uint64_t)s->seed;
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        p.seed = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec;
    }
    return p;
}
