/*
 * json.c - the JSON reader and string writer (see json.h).
 *
 * The reader keeps the stack of open containers itself (one byte each, at most
 * JSON_MAX_DEPTH + 1 of them), so that it can hand out one item per call. Checks happen in
 * the order of the text, so the first error is the one reported, at the byte where it was
 * seen: the same messages and offsets as the recursive parser the chat engine had before.
 */
#include "core/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"

void json_init(json_reader *r, const char *text, size_t n, int max_depth) {
    memset(r, 0, sizeof *r);
    r->start = r->p = text;
    r->end = text + n;
    r->max_depth = max_depth < 0 ? 0 : max_depth > JSON_MAX_DEPTH ? JSON_MAX_DEPTH : max_depth;
}

static int fail(json_reader *r, const char *what) {
    r->error = what;
    r->error_at = (size_t)(r->p - r->start);
    return 0;
}

static void skip_ws(json_reader *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

/* Four hex digits, each checked. */
static int hex4(const char *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        const char c = p[i];
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return 0;
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 1;
}

/* A string's body from p (after its opening quote) to its closing quote: checks it and,
 * when out is not NULL, writes its decoded bytes there. Returns where it stopped (after
 * the closing quote, or where the error was seen, with *err set) and the decoded length.
 * Reading and decoding are this one function, so that they cannot disagree. */
static const char *scan_string(const char *p, const char *end, char *out, size_t *len, const char **err) {
    static const char escapes[] = "\"\\/bfnrt", decoded[] = "\"\\/\b\f\n\r\t";
    size_t n = 0;
    for (;;) {
        if (p >= end) {
            *err = "unterminated string";
            break;
        }
        char enc[4] = {*p++};
        int k = 1;
        if (enc[0] == '"')
            break;
        if ((unsigned char)enc[0] < 0x20) {
            *err = "control character in a string";
            break;
        }
        if (enc[0] == '\\') {
            if (p >= end) {
                *err = "unterminated string";
                break;
            }
            const char e = *p++;
            const char *simple = strchr(escapes, e);
            uint32_t u, lo;
            if (simple && e) {
                enc[0] = decoded[simple - escapes];
            } else if (e != 'u' || end - p < 4 || !hex4(p, &u)) {
                *err = "bad escape";
                break;
            } else {
                p += 4;
                if (u >= 0xD800 && u < 0xDC00 && end - p >= 6 && p[0] == '\\' && p[1] == 'u' && hex4(p + 2, &lo) &&
                    lo >= 0xDC00 && lo < 0xE000) {
                    u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
                k = utf8_put(u, enc); /* a lone surrogate is kept as its 3 bytes */
            }
        }
        if (out)
            memcpy(out + n, enc, (size_t)k);
        n += (size_t)k;
    }
    *len = n;
    return p;
}

static int read_string(json_reader *r, json_str *s) {
    const char *err = NULL;
    s->body = r->p + 1;
    r->p = scan_string(s->body, r->end, NULL, &s->len, &err);
    s->end = r->p;
    return err ? fail(r, err) : 1;
}

void json_decode(json_str s, char *out) {
    size_t n;
    const char *err = NULL;
    scan_string(s.body, s.end, out, &n, &err);
}

/* The length of RFC 8259's number at s[0..n): -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?,
 * or 0 when s does not start with one; *is_float when it has a fraction or an exponent. */
static size_t number_len(const char *s, size_t n, int *is_float) {
    size_t i = 0;
    *is_float = 0;
    if (i < n && s[i] == '-')
        i++;
    if (i < n && s[i] == '0') {
        i++;
    } else if (i < n && s[i] >= '1' && s[i] <= '9') {
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    } else {
        return 0;
    }
    if (i < n && s[i] == '.') {
        if (++i >= n || s[i] < '0' || s[i] > '9')
            return 0;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        *is_float = 1;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        if (++i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        if (i >= n || s[i] < '0' || s[i] > '9')
            return 0;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        *is_float = 1;
    }
    return i;
}

/* A number: the run of characters that can be part of one, which must be one number whole
 * (so "01", "1." and "-.5" fail, as in Python's json). An integer is an int64, or an error:
 * Python's big ints have no equal here. */
static int read_number(json_reader *r, json_item *it) {
    const char *s = r->p;
    while (r->p < r->end && *r->p && strchr("+-0123456789.eE", *r->p))
        r->p++;
    const size_t n = (size_t)(r->p - s);
    int is_float;
    if (number_len(s, n, &is_float) != n)
        return fail(r, "bad number");
    char tmp[64];
    if (n >= sizeof tmp)
        return fail(r, is_float ? "number too long" : "integer beyond 64 bits");
    memcpy(tmp, s, n);
    tmp[n] = 0;
    it->kind = is_float ? JSON_FLOAT : JSON_INT;
    errno = 0;
    if (is_float)
        it->f = strtod(tmp, NULL); /* beyond the doubles: +-inf or 0, as Python's float() */
    else
        it->i = strtoll(tmp, NULL, 10);
    if (!is_float && errno == ERANGE && r->big_int_as_float) {
        it->kind = JSON_FLOAT;
        it->f = strtod(tmp, NULL);
        return 1;
    }
    return !is_float && errno == ERANGE ? fail(r, "integer beyond 64 bits") : 1;
}

/* A value at the current depth: a scalar whole, or the opening of a container. */
static int read_value(json_reader *r, json_item *it) {
    static const char *const words[] = {"true", "false", "null"};
    skip_ws(r);
    if (r->depth > r->max_depth)
        return fail(r, "nesting too deep");
    if (r->p >= r->end)
        return fail(r, "unexpected end");
    const char c = *r->p;
    int ok = 0;
    if (c == '"') {
        it->kind = JSON_STRING;
        ok = read_string(r, &it->str);
    } else if (c == '{' || c == '[') {
        it->kind = c == '{' ? JSON_OBJECT : JSON_ARRAY;
        r->open[r->depth++] = c;
        r->fresh = 1;
        r->p++;
        return 1;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        ok = read_number(r, it);
    } else {
        for (int w = 0; w < 3 && !ok; w++) {
            const size_t n = strlen(words[w]);
            if ((size_t)(r->end - r->p) >= n && memcmp(r->p, words[w], n) == 0) {
                r->p += n;
                it->kind = w == 2 ? JSON_NULL : JSON_BOOL;
                it->boolean = w == 0;
                ok = 1;
            }
        }
        if (!ok)
            return fail(r, "unexpected character");
    }
    r->done = ok && r->depth == 0;
    return ok;
}

int json_next(json_reader *r, json_item *it) {
    memset(it, 0, sizeof *it);
    if (r->error)
        return 0;
    if (r->done) {
        skip_ws(r);
        if (r->p != r->end)
            return fail(r, "trailing characters");
        it->kind = JSON_END;
        return 1;
    }
    if (r->depth > 0) { /* the next member of the innermost container, or its end */
        const int object = r->open[r->depth - 1] == '{';
        skip_ws(r);
        if (r->p < r->end && *r->p == (object ? '}' : ']')) {
            r->p++;
            r->depth--;
            r->fresh = 0;
            r->done = r->depth == 0;
            it->kind = JSON_END;
            return 1;
        }
        if (!r->fresh) {
            if (r->p >= r->end || *r->p != ',')
                return fail(r, object ? "expected ',' or '}'" : "expected ',' or ']'");
            r->p++;
        }
        r->fresh = 0;
        if (object) {
            skip_ws(r);
            if (r->p >= r->end || *r->p != '"')
                return fail(r, "expected a key");
            if (!read_string(r, &it->key))
                return 0;
            skip_ws(r);
            if (r->p >= r->end || *r->p != ':')
                return fail(r, "expected ':'");
            r->p++;
        }
    }
    return read_value(r, it);
}

static void put(char *out, size_t *len, const char *s, size_t n) {
    if (out)
        memcpy(out + *len, s, n);
    *len += n;
}

size_t json_quote(char *out, const char *s, size_t n, int ensure_ascii) {
    size_t len = 0;
    put(out, &len, "\"", 1);
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)s[i];
        char esc[16];
        const char *piece = esc;
        int k = 2;
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c;
            i++;
        } else if (c < 0x20) {
            piece = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : esc;
            if (piece == esc)
                k = snprintf(esc, sizeof esc, "\\u%04x", c);
            i++;
        } else if (c >= 0x80 && ensure_ascii) {
            const int32_t cp = utf8_next((const unsigned char *)s, n, &i);
            const uint32_t u = cp < 0 ? 0xFFFD : (uint32_t)cp;
            if (u >= 0x10000)
                k = snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + ((u - 0x10000) >> 10), 0xDC00 + ((u - 0x10000) & 0x3ff));
            else
                k = snprintf(esc, sizeof esc, "\\u%04x", u);
        } else {
            piece = &s[i++];
            k = 1;
        }
        put(out, &len, piece, (size_t)k);
    }
    put(out, &len, "\"", 1);
    return len;
}
