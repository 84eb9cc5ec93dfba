/*
 * main.c - the `edgerunner` command line: run, info.
 *
 * Flags follow llama.cpp's where one exists. Output meant for programs (ids, text)
 * goes to stdout; logs and errors to stderr. Any error: one line on stderr, exit 1.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edgerunner.h"
#include "io/gguf.h"
#include "quant/types.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: edgerunner COMMAND [options]\n"
            "\n"
            "commands:\n"
            "  run   -m MODEL --prompt-ids ID,ID,... [-n N] [--temp 0] [--ids] [--ignore-eos]\n"
            "        [-c N_CTX] [-b N_BATCH] [-t N_THREADS] [--dump-logits FILE]\n"
            "        greedy generation from token ids; prints text, or ids with --ids\n"
            "        --dump-logits writes the logits of every prompt token, float32\n"
            "        (n_prompt x n_vocab), and generates nothing unless -n is given\n"
            "  info  -m MODEL   metadata and tensor summary of a GGUF file\n");
}

static int fail(const char *what) {
    fprintf(stderr, "edgerunner: %s\n", what);
    return 1;
}

static int fail_status(er_status st) {
    fprintf(stderr, "edgerunner: %s (%s)\n", er_last_error(), er_status_name(st));
    return 1;
}

static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

/* "1,2,3" or "1 2 3" -> ids; returns the count, or -1 on a malformed list */
static int64_t parse_ids(const char *s, int32_t **out) {
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

typedef struct run_state {
    const er_model *model;
    int print_ids;
    int64_t n_printed;
} run_state;

static int print_token(int32_t token, void *user) {
    run_state *rs = user;
    char piece[256];
    int64_t n = rs->print_ids ? -1 : er_token_to_piece(rs->model, token, piece, sizeof piece);
    if (n < 0)
        printf(rs->n_printed ? " %d" : "%d", token);
    else
        fwrite(piece, 1, (size_t)n, stdout);
    rs->n_printed++;
    fflush(stdout);
    return 0;
}

static int cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *ids_arg = NULL, *dump_path = NULL;
    int64_t n_predict = -1, n_ctx = 0, n_batch = 0, n_threads = 0;
    int print_ids = 0, ignore_eos = 0, n_given = 0;
    double temp = 0.0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes_value = 1;
        if (!strcmp(a, "--ids")) {
            print_ids = 1;
            takes_value = 0;
        } else if (!strcmp(a, "--ignore-eos")) {
            ignore_eos = 1;
            takes_value = 0;
        } else if (!v) {
            fprintf(stderr, "edgerunner: run: %s needs a value\n", a);
            return 1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            model_path = v;
        } else if (!strcmp(a, "--prompt-ids")) {
            ids_arg = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            return fail("run: text prompts need the tokenizer, which is not built yet; use --prompt-ids");
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (!parse_i64(v, -1, INT32_MAX, &n_predict))
                return fail("run: -n wants an integer >= -1");
            n_given = 1;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (!parse_i64(v, 0, INT32_MAX, &n_ctx))
                return fail("run: -c wants an integer >= 0");
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            if (!parse_i64(v, 0, INT32_MAX, &n_batch))
                return fail("run: -b wants an integer >= 0");
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!parse_i64(v, 0, 1024, &n_threads))
                return fail("run: -t wants an integer in [0, 1024]");
        } else if (!strcmp(a, "--temp")) {
            char *end;
            temp = strtod(v, &end);
            if (end == v || *end || temp < 0)
                return fail("run: --temp wants a number >= 0");
            if (temp != 0.0)
                return fail("run: only greedy decoding (--temp 0) is implemented so far");
        } else if (!strcmp(a, "--dump-logits")) {
            dump_path = v;
        } else {
            fprintf(stderr, "edgerunner: run: unknown option '%s'\n", a);
            return 1;
        }
        i += takes_value;
    }
    if (!model_path)
        return fail("run: -m MODEL is required");
    if (!ids_arg)
        return fail("run: --prompt-ids ID,ID,... is required");

    int rc = 1;
    er_status st;
    er_model *model = NULL;
    er_context *ctx = NULL;
    int32_t *prompt = NULL;
    float *logits = NULL;
    FILE *dump = NULL;
    int64_t n_prompt = parse_ids(ids_arg, &prompt);
    if (n_prompt < 0) {
        fail("run: --prompt-ids wants a comma-separated list of non-negative token ids");
        goto done;
    }
    er_context_params cp = er_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.n_threads = (int)n_threads;
    if ((st = er_model_load(model_path, NULL, &model)) != ER_OK ||
        (st = er_context_create(model, &cp, &ctx)) != ER_OK) {
        rc = fail_status(st);
        goto done;
    }
    if (dump_path) {
        const int64_t n_vocab = er_model_n_vocab(model);
        logits = malloc((size_t)n_prompt * (size_t)n_vocab * sizeof *logits);
        if (!logits) {
            fail("run: out of memory for the logits");
            goto done;
        }
        if ((st = er_context_decode(ctx, prompt, n_prompt, logits)) != ER_OK) {
            rc = fail_status(st);
            goto done;
        }
        dump = fopen(dump_path, "wb");
        if (!dump || fwrite(logits, sizeof *logits, (size_t)(n_prompt * n_vocab), dump) != (size_t)(n_prompt * n_vocab) ||
            fclose(dump) != 0) {
            dump = NULL;
            fprintf(stderr, "edgerunner: run: cannot write %s: %s\n", dump_path, strerror(errno));
            goto done;
        }
        dump = NULL;
        if (!n_given) {
            rc = 0;
            goto done;
        }
        er_context_rewind(ctx, 0);
    }

    run_state rs = {model, print_ids, 0};
    er_generate_params gp = {n_predict < 0 ? INT64_MAX : n_predict, ignore_eos};
    int64_t n_generated = 0;
    st = er_generate_greedy(ctx, prompt, n_prompt, &gp, print_token, &rs, &n_generated);
    if (rs.n_printed || print_ids)
        printf("\n");
    if (st != ER_OK) {
        rc = fail_status(st);
        goto done;
    }
    if (n_generated < gp.n_predict && er_context_n_past(ctx) >= er_context_n_ctx(ctx))
        fprintf(stderr, "edgerunner: stopped: the context of %lld tokens is full\n", (long long)er_context_n_ctx(ctx));
    rc = 0;
done:
    if (dump)
        fclose(dump);
    free(logits);
    free(prompt);
    er_context_free(ctx);
    er_model_free(model);
    return rc;
}

static void print_value(const gguf_value *v, int depth) {
    switch (v->type) {
    case GGUF_TYPE_STRING: {
        const int n = (int)(v->str.len > 120 ? 120 : v->str.len);
        printf("\"");
        for (int i = 0; i < n; i++) {
            unsigned char ch = (unsigned char)v->str.data[i];
            if (ch == '\n')
                printf("\\n");
            else if (ch < 32 || ch == 127)
                printf("\\x%02x", ch);
            else
                putchar(ch);
        }
        printf(v->str.len > 120 ? "\"... (%" PRIu64 " bytes)" : "\"", v->str.len);
        break;
    }
    case GGUF_TYPE_ARRAY: {
        const uint64_t shown = v->arr.n < 8 ? v->arr.n : 8;
        printf("[%s x %" PRIu64 "] [", gguf_type_name(v->arr.type), v->arr.n);
        for (uint64_t i = 0; i < shown; i++) {
            gguf_value elem;
            int64_t iv;
            double fv;
            if (i)
                printf(", ");
            if (v->arr.type == GGUF_TYPE_STRING) {
                elem.type = GGUF_TYPE_STRING;
                elem.str = v->arr.strs[i];
                print_value(&elem, depth + 1);
            } else if (v->arr.type == GGUF_TYPE_ARRAY) {
                print_value(&v->arr.items[i], depth + 1);
            } else if (v->arr.type == GGUF_TYPE_FLOAT32 || v->arr.type == GGUF_TYPE_FLOAT64) {
                if (gguf_array_float(v, i, &fv))
                    printf("%g", fv);
            } else if (v->arr.type == GGUF_TYPE_UINT64) {
                uint64_t u;
                memcpy(&u, v->arr.raw + 8 * i, 8);
                printf("%" PRIu64, u);
            } else if (gguf_array_int(v, i, &iv)) {
                printf("%" PRId64, iv);
            }
        }
        printf(v->arr.n > shown ? ", ...]" : "]");
        break;
    }
    case GGUF_TYPE_FLOAT32:
    case GGUF_TYPE_FLOAT64: printf("%g", v->f64); break;
    case GGUF_TYPE_BOOL: printf(v->u64 ? "true" : "false"); break;
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_UINT64: printf("%" PRIu64, v->u64); break;
    default: printf("%" PRId64, v->i64); break;
    }
}

static int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc)
            path = argv[++i];
        else {
            fprintf(stderr, "edgerunner: info: unknown option '%s'\n", argv[i]);
            return 1;
        }
    }
    if (!path)
        return fail("info: -m MODEL is required");
    gguf_file *f = NULL;
    er_status st = gguf_open(path, &f);
    if (st != ER_OK)
        return fail_status(st);
    printf("file: %s\nGGUF version %u, %zu bytes, %" PRIu64 " metadata pairs, %" PRIu64
           " tensors, alignment %" PRIu64 ", data at byte %" PRIu64 "\n\nmetadata:\n",
           path, f->version, f->size, f->n_kv, f->n_tensors, f->alignment, f->data_offset);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        printf("  %.*s = ", (int)f->kv[i].key.len, f->kv[i].key.data);
        print_value(&f->kv[i].value, 0);
        printf("\n");
    }
    uint64_t n_params = 0, n_bytes = 0;
    uint64_t type_count[ER_TYPE_COUNT] = {0}, type_params[ER_TYPE_COUNT] = {0};
    printf("\ntensors:\n");
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        uint64_t ne = 1;
        char shape[96];
        int len = 0;
        for (int d = 0; d < t->n_dims; d++) {
            ne *= (uint64_t)t->ne[d];
            len += snprintf(shape + len, sizeof shape - (size_t)len, d ? ", %" PRId64 : "%" PRId64, t->ne[d]);
        }
        printf("  %-32.*s %-5s [%s] at %" PRIu64 "\n", (int)t->name.len, t->name.data, er_type_get(t->type)->name,
               shape, f->data_offset + t->offset);
        n_params += ne;
        n_bytes += t->size;
        type_count[t->type]++;
        type_params[t->type] += ne;
    }
    printf("\n%" PRIu64 " parameters, %.2f MiB of tensor data, %.3f bits per weight\ntypes:",
           n_params, (double)n_bytes / (1024.0 * 1024.0), n_params ? 8.0 * (double)n_bytes / (double)n_params : 0.0);
    for (int t = 0; t < ER_TYPE_COUNT; t++)
        if (type_count[t])
            printf(" %s: %" PRIu64 " tensors (%.1f%% of weights)", er_type_get((uint32_t)t)->name, type_count[t],
                   100.0 * (double)type_params[t] / (double)n_params);
    printf("\n");
    gguf_close(f);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    if (!strcmp(argv[1], "run"))
        return cmd_run(argc - 2, argv + 2);
    if (!strcmp(argv[1], "info"))
        return cmd_info(argc - 2, argv + 2);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "edgerunner: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 1;
}
