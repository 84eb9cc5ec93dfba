/*
 * text.c - bytes and text: the growable buffer every reply is built in, and generated
 * text made fit for JSON (which must be UTF-8).
 */
#define _GNU_SOURCE

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

/* ---- sbuf ----------------------------------------------------------------------------- */

int sbuf_add(sbuf *b, const char *data, size_t len) {
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + len + 1)
            cap *= 2;
        char *grown = realloc(b->data, cap);
        if (!grown)
            return -1;
        b->data = grown;
        b->cap = cap;
    }
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = 0;
    return 0;
}

int sbuf_printf(sbuf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    if ((size_t)n < sizeof small)
        return sbuf_add(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big)
        return -1;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    const int rc = sbuf_add(b, big, (size_t)n);
    free(big);
    return rc;
}

void sbuf_free(sbuf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

/* The length of the valid UTF-8 sequence at s[0..n), or 0 (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF). */
static size_t utf8_valid_at(const unsigned char *s, size_t n) {
    if (s[0] < 0x80)
        return 1;
    const size_t len = s[0] >= 0xC2 && s[0] <= 0xDF ? 2 : s[0] >= 0xE0 && s[0] <= 0xEF ? 3 : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] > 0x9F) || (s[0] == 0xF0 && s[1] < 0x90) ||
        (s[0] == 0xF4 && s[1] > 0x8F))
        return 0;
    return len;
}

json_t *json_text(const char *data, size_t len) {
    sbuf clean = {0};
    const unsigned char *s = (const unsigned char *)data;
    size_t i = 0, run = 0; /* s[run..i) is valid and not yet copied */
    while (i < len) {
        const size_t n = utf8_valid_at(s + i, len - i);
        if (n) {
            i += n;
            continue;
        }
        sbuf_add(&clean, data + run, i - run);
        sbuf_add(&clean, "\xEF\xBF\xBD", 3);
        run = ++i;
    }
    if (run == 0)
        return json_stringn(len ? data : "", len);
    sbuf_add(&clean, data + run, len - run);
    json_t *out = json_stringn(clean.data ? clean.data : "", clean.len);
    sbuf_free(&clean);
    return out;
}
