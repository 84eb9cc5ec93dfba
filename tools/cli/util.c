/* util.c - helpers shared by the subcommands (see cli.h). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
