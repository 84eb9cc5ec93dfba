/*
 * tokenize.c - `edgerunner tokenize`: text -> token ids (and back with --decode), from the
 * tokenizer of any GGUF file, vocab-only files included (no tensors are needed).
 *
 * Output: one line "ID -> 'piece'" per token; with --ids, the ids space-separated on one
 * line. --batch reads NUL-separated texts and prints one line of ids per text (the oracle
 * tests run thousands of texts through one process this way).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct tok_opts {
    const er_vocab *vocab;
    int flags;
    int print_ids;
} tok_opts;

/* --bench: tokenizes the input (after a warm-up) and prints the speed on stderr. */
static int bench(const tok_opts *o, const char *text, size_t len) {
    int64_t cap = (int64_t)len + 3, n = 0; /* only the count is read; ids past cap are not written */
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids)
        return cli_fail("tokenize: out of memory");
    er_status st = er_tokenize(o->vocab, text, (int64_t)(len < 100000 ? len : 100000), o->flags, ids, cap, &n);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (st == ER_OK)
        st = er_tokenize(o->vocab, text, (int64_t)len, o->flags, ids, cap, &n);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    free(ids);
    if (st != ER_OK)
        return cli_fail_status(st);
    const double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    fprintf(stderr, "%.2f MB, %lld tokens in %.3f s: %.1f MB/s\n", (double)len / 1e6, (long long)n, s,
            (double)len / 1e6 / s);
    return 0;
}

static int print_tokens(const tok_opts *o, const char *text, size_t len) {
    int32_t *ids = NULL;
    int64_t n = 0;
    er_status st = cli_tokenize(o->vocab, text, (int64_t)len, o->flags, &ids, &n);
    if (st != ER_OK)
        return st == ER_ERR_NO_MEMORY ? cli_fail("tokenize: out of memory") : cli_fail_status(st);
    for (int64_t i = 0; i < n; i++) {
        if (o->print_ids) {
            printf(i ? " %d" : "%d", ids[i]);
            continue;
        }
        char piece[256];
        int64_t n_piece = 0;
        er_detokenize(o->vocab, &ids[i], 1, ER_DETOKENIZE_SPECIAL, piece, sizeof piece, &n_piece);
        printf("%6d -> '%.*s'\n", ids[i], (int)(n_piece < (int64_t)sizeof piece ? n_piece : (int64_t)sizeof piece), piece);
    }
    if (o->print_ids)
        printf("\n");
    free(ids);
    return 0;
}

/* "1 2 3" or "1,2,3" (a blank line: no ids) -> text on stdout. */
static int print_decoded(const tok_opts *o, const char *line) {
    int32_t *ids = NULL;
    int64_t n = line[strspn(line, " ,\r")] ? cli_parse_ids(line, &ids) : 0;
    if (n < 0)
        return cli_fail("tokenize: --decode wants token ids separated by spaces or commas");
    const int flags = o->flags & ER_TOKENIZE_PARSE_SPECIAL ? ER_DETOKENIZE_SPECIAL : 0;
    int64_t len = 0;
    char *text = NULL;
    er_status st = er_detokenize(o->vocab, ids, n, flags, NULL, 0, &len);
    if (st == ER_OK && !(text = malloc((size_t)len + 1)))
        st = ER_ERR_NO_MEMORY;
    if (st == ER_OK)
        st = er_detokenize(o->vocab, ids, n, flags, text, len, &len);
    if (st == ER_OK)
        fwrite(text, 1, (size_t)len, stdout);
    free(text);
    free(ids);
    return st == ER_OK ? 0 : st == ER_ERR_NO_MEMORY ? cli_fail("tokenize: out of memory") : cli_fail_status(st);
}

int cmd_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *file = NULL, *text = NULL;
    int batch = 0, decode = 0, no_bos = 0, do_bench = 0, operands_only = 0;
    tok_opts o = {NULL, ER_TOKENIZE_ADD_SPECIAL, 0};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (operands_only) {
            if (text)
                return cli_fail("tokenize: give the text once (as one argument, with -p, or with -f FILE)");
            text = a;
        } else if (!strcmp(a, "--")) {
            operands_only = 1; /* the end of options: a text may start with '-' */
        } else if (!strcmp(a, "--ids")) {
            o.print_ids = 1;
        } else if (!strcmp(a, "--special")) {
            o.flags |= ER_TOKENIZE_PARSE_SPECIAL;
        } else if (!strcmp(a, "--no-bos")) {
            no_bos = 1;
        } else if (!strcmp(a, "--batch")) {
            batch = 1;
        } else if (!strcmp(a, "--decode")) {
            decode = 1;
        } else if (!strcmp(a, "--bench")) {
            do_bench = 1;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) {
            model_path = argv[++i];
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && i + 1 < argc) {
            file = argv[++i];
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && i + 1 < argc) {
            text = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "edgerunner: tokenize: unknown option '%s'\n", a);
            return 1;
        } else if (!text) {
            text = a;
        } else {
            return cli_fail("tokenize: give the text once (as one argument, with -p, or with -f FILE)");
        }
    }
    if (no_bos)
        o.flags &= ~ER_TOKENIZE_ADD_SPECIAL;
    if (!model_path)
        return cli_fail("tokenize: -m MODEL is required");
    if (!text == !file)
        return cli_fail("tokenize: give the text as an argument or with -f FILE (- for standard input)");

    size_t len = text ? strlen(text) : 0;
    char *buf = NULL;
    if (file && !(buf = cli_read_file(file, &len))) {
        fprintf(stderr, "edgerunner: tokenize: cannot read %s: %s\n", file, strerror(errno));
        return 1;
    }
    er_vocab *vocab = NULL;
    cli_catch_sigbus(model_path);
    er_status st = er_vocab_load(model_path, &vocab);
    int rc = 1;
    if (st != ER_OK) {
        rc = cli_fail_status(st);
        goto done;
    }
    o.vocab = vocab;
    const char *input = buf ? buf : text;
    if (do_bench) {
        rc = bench(&o, input, len);
    } else if (decode) {
        /* one text per line of ids; with --batch each is followed by a NUL */
        char *line = buf ? buf : (char *)text; /* argv strings may be written */
        rc = 0;
        while (rc == 0 && *line) {
            char *nl = strchr(line, '\n');
            if (nl)
                *nl = 0;
            rc = print_decoded(&o, line);
            if (batch)
                fputc(0, stdout);
            if (!nl)
                break;
            line = nl + 1;
        }
    } else if (batch) {
        rc = 0;
        for (size_t start = 0; rc == 0 && start <= len;) {
            const char *nul = memchr(input + start, 0, len - start);
            const size_t end = nul ? (size_t)(nul - input) : len;
            if (!nul && end == start && start > 0)
                break; /* a trailing separator ends the last text */
            rc = print_tokens(&o, input + start, end - start);
            if (!o.print_ids)
                printf("\n");
            start = end + 1;
        }
    } else {
        rc = print_tokens(&o, input, len);
    }
done:
    fflush(stdout);
    er_vocab_free(vocab);
    free(buf);
    return rc;
}
