/*
 * test_safetensors.c - the SafeTensors reader on files built in memory: a valid file, then
 * hostile ones (every truncation point, a header length past the file, offsets out of
 * range, overlapping, reversed, a span that does not match shape and dtype, unknown
 * dtypes, bad shapes, duplicate names, JSON that is not JSON or not UTF-8).
 *
 * Every hostile case checks ER_ERR_FORMAT, that *out is NULL, and that the message is one
 * line naming the file and what was wrong. Each parse gets its own heap copy of exactly
 * `size` bytes, so that under AddressSanitizer (make debug) a read past the end crashes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "test.h"

/* A file of `header` (padded with spaces to a multiple of 8, as the writer does) and
 * data_size bytes of data (byte i is i); its size in *size. */
static uint8_t *make_file(const char *header, size_t data_size, size_t *size) {
    const size_t n = strlen(header), padded = (n + 7) / 8 * 8;
    uint8_t *p = malloc(8 + padded + data_size);
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(p + 8, header, n);
    memset(p + 8 + n, ' ', padded - n);
    for (size_t i = 0; i < data_size; i++)
        p[8 + padded + i] = (uint8_t)i;
    *size = 8 + padded + data_size;
    return p;
}

/* Parses a heap copy of exactly size bytes. */
static er_status parse(const uint8_t *bytes, size_t size, st_file **out) {
    uint8_t *copy = malloc(size ? size : 1);
    memcpy(copy, bytes, size);
    er_status st = safetensors_parse(copy, size, "t.safetensors", out);
    safetensors_close(*out);
    *out = NULL;
    free(copy);
    return st;
}

static const char VALID[] =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"n\\u00e9\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]}}";

/* A hostile header (32 bytes of data after it) must fail naming `want`. */
static void check_refused(const char *header, const char *want) {
    size_t size;
    uint8_t *file = make_file(header, 32, &size);
    st_file *f = (st_file *)1;
    er_status st = parse(file, size, &f);
    const char *msg = er_last_error();
    CHECK(st == ER_ERR_FORMAT && f == NULL, "%s: status %d", header, (int)st);
    CHECK(strstr(msg, "t.safetensors") && strstr(msg, want) && !strchr(msg, '\n'), "%s: message '%s', want '%s'",
          header, msg, want);
    free(file);
}

void test_safetensors(void) {
    size_t size;
    uint8_t *file = make_file(VALID, 32, &size);

    /* the valid file: names (JSON escapes decoded), dtypes, shapes, data views */
    st_file *f = NULL;
    CHECK(safetensors_parse(file, size, "t.safetensors", &f) == ER_OK, "valid: %s", er_last_error());
    if (f) {
        CHECK(f->n_tensors == 2, "n_tensors %zu", f->n_tensors);
        const st_tensor *w = safetensors_find(f, "w"), *n = safetensors_find(f, "n\xc3\xa9");
        CHECK(w && w->dtype == ST_F32 && w->n_dims == 2 && w->shape[0] == 2 && w->shape[1] == 3 && w->size == 24,
              "tensor w");
        CHECK(n && n->dtype == ST_BF16 && n->n_dims == 1 && n->shape[0] == 4 && n->size == 8, "tensor né");
        CHECK(w && n && n->data == w->data + 24 && w->data[0] == 0 && n->data[0] == 24, "data views");
        safetensors_close(f);
    }

    /* every truncation point: the header length, the header, the data of the last tensor */
    int all_refused = 1;
    for (size_t n = 0; n < size; n++) {
        st_file *g = NULL;
        const er_status st = parse(file, n, &g);
        if (st != ER_ERR_FORMAT || strchr(er_last_error(), '\n') || !strstr(er_last_error(), "t.safetensors")) {
            all_refused = 0;
            fprintf(stderr, "truncated to %zu bytes: status %d, '%s'\n", n, (int)st, er_last_error());
        }
    }
    CHECK(all_refused, "every truncation of the %zu-byte file refused with one line", size);

    /* a header length past the end of the file, and one past every limit */
    uint8_t *bad = malloc(size);
    memcpy(bad, file, size);
    bad[0] = (uint8_t)(size - 7);
    bad[1] = bad[2] = 0;
    CHECK(parse(bad, size, &f) == ER_ERR_FORMAT && strstr(er_last_error(), "runs past the end"), "%s",
          er_last_error());
    memset(bad, 0xff, 8);
    CHECK(parse(bad, size, &f) == ER_ERR_FORMAT && strstr(er_last_error(), "runs past the end"), "%s",
          er_last_error());
    free(bad);
    free(file);

    check_refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,40]}}", "outside the 32 bytes");
    check_refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,8]}}", "outside");
    check_refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                  "\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[20,28]}}", "overlap");
    check_refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", "need 24");
    check_refused("{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", "need 12");
    check_refused("{\"w\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", "unknown dtype 'F33'");
    check_refused("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", "'dtype'");
    check_refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", "shape[0]");
    check_refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", "shape[0]");
    check_refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", "overflows");
    check_refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", "dimensions");
    check_refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", "data_offsets");
    check_refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", "data_offsets");
    check_refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", "appears twice");
    check_refused("{\"w\":[1,2]}", "not a JSON object");
    check_refused("[1,2]", "not a JSON object");
    check_refused("{\"__metadata__\":7}", "__metadata__");
    check_refused("{\"w\":{\"dtype\":\"F32\",", "JSON");
    check_refused("{\"w\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "not UTF-8 at byte 3");
    check_refused("{\"\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "empty");
    check_refused("{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "NUL");
}
