/*
 * unicode.c - character classes, the tokenizer's byte buffer and NFC (see unicode.h).
 *
 * NFC is the textbook algorithm (UAX #15): full canonical decomposition (Hangul
 * algorithmically), canonical ordering by combining class, then canonical composition.
 * Only the stretches that can change are normalized: a character without the UNI_NFC flag
 * is a starter that has no decomposition and composes with nothing before it, so the text
 * between such characters is copied as is; a flagged run is normalized together with the
 * one starter before it (which may be the first half of a composition).
 */
#include "tokenizer/unicode.h"

#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "tokenizer/unicode_data.h"

_Static_assert((int)UNI_LETTER == (int)UCLASS_LETTER && (int)UNI_NUMBER == (int)UCLASS_NUMBER &&
                   (int)UNI_SPACE == (int)UCLASS_SPACE && (int)UNI_NFC == (int)UCLASS_NFC,
               "class bits agree with the generated tables");

uint8_t unicode_class(int32_t cp) {
    if (cp < 0 || cp >= 0x110000)
        return 0;
    return unicode_class_stage2[unicode_class_stage1[cp >> 8]][cp & 0xff];
}

er_status strbuf_reserve(strbuf *b, size_t extra) {
    if (b->cap - b->len >= extra)
        return ER_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap - b->len < extra) {
        if (cap > SIZE_MAX / 2)
            return er_fail(ER_ERR_NO_MEMORY, "tokenizer: buffer of %zu bytes is too large", b->len + extra);
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (!p)
        return er_fail(ER_ERR_NO_MEMORY, "tokenizer: out of memory for %zu bytes", cap);
    b->data = p;
    b->cap = cap;
    return ER_OK;
}

er_status strbuf_append(strbuf *b, const char *s, size_t n) {
    er_status st = strbuf_reserve(b, n);
    if (st != ER_OK)
        return st;
    if (n)
        memcpy(b->data + b->len, s, n);
    b->len += n;
    return ER_OK;
}

void strbuf_free(strbuf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

/* ---- NFC ------------------------------------------------------------------------------ */

enum {
    HANGUL_S = 0xAC00, HANGUL_L = 0x1100, HANGUL_V = 0x1161, HANGUL_T = 0x11A7,
    HANGUL_L_COUNT = 19, HANGUL_V_COUNT = 21, HANGUL_T_COUNT = 28,
    HANGUL_N_COUNT = HANGUL_V_COUNT * HANGUL_T_COUNT, HANGUL_S_COUNT = HANGUL_L_COUNT * HANGUL_N_COUNT,
};

static int ccc_of(int32_t cp) {
    if (cp < 0 || !(unicode_class(cp) & UNI_NFC))
        return 0;
    size_t lo = 0, hi = sizeof unicode_ccc / sizeof unicode_ccc[0];
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (unicode_ccc[mid].cp < (uint32_t)cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < sizeof unicode_ccc / sizeof unicode_ccc[0] && unicode_ccc[lo].cp == (uint32_t)cp ? unicode_ccc[lo].ccc : 0;
}

static const unicode_decomp_entry *decomp_of(int32_t cp) {
    size_t lo = 0, hi = sizeof unicode_decomp / sizeof unicode_decomp[0];
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (unicode_decomp[mid].cp < (uint32_t)cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < sizeof unicode_decomp / sizeof unicode_decomp[0] && unicode_decomp[lo].cp == (uint32_t)cp
               ? &unicode_decomp[lo]
               : NULL;
}

/* The primary composite of (a, b), or -1. */
static int32_t compose(int32_t a, int32_t b) {
    if (a < 0 || b < 0)
        return -1;
    if (a >= HANGUL_L && a < HANGUL_L + HANGUL_L_COUNT && b >= HANGUL_V && b < HANGUL_V + HANGUL_V_COUNT)
        return HANGUL_S + ((a - HANGUL_L) * HANGUL_V_COUNT + (b - HANGUL_V)) * HANGUL_T_COUNT;
    if (a >= HANGUL_S && a < HANGUL_S + HANGUL_S_COUNT && (a - HANGUL_S) % HANGUL_T_COUNT == 0 &&
        b > HANGUL_T && b < HANGUL_T + HANGUL_T_COUNT)
        return a + (b - HANGUL_T);
    size_t lo = 0, hi = sizeof unicode_compose / sizeof unicode_compose[0];
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        const unicode_compose_entry *e = &unicode_compose[mid];
        if (e->first < (uint32_t)a || (e->first == (uint32_t)a && e->second < (uint32_t)b))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < sizeof unicode_compose / sizeof unicode_compose[0] && unicode_compose[lo].first == (uint32_t)a &&
        unicode_compose[lo].second == (uint32_t)b)
        return (int32_t)unicode_compose[lo].cp;
    return -1;
}

typedef struct cpbuf {
    int32_t *cp; /* (cap) code points, or -1 - byte for an invalid byte */
    size_t n, cap;
} cpbuf;

static int cp_push(cpbuf *b, int32_t cp) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        int32_t *p = realloc(b->cp, cap * sizeof *p);
        if (!p)
            return 0;
        b->cp = p;
        b->cap = cap;
    }
    b->cp[b->n++] = cp;
    return 1;
}

/* Full canonical decomposition; the depth of Unicode's decompositions is at most 4. */
static int decompose(cpbuf *b, int32_t cp, int depth) {
    if (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_S_COUNT) {
        const int32_t s = cp - HANGUL_S;
        const int32_t t = s % HANGUL_T_COUNT;
        if (!cp_push(b, HANGUL_L + s / HANGUL_N_COUNT) || !cp_push(b, HANGUL_V + (s % HANGUL_N_COUNT) / HANGUL_T_COUNT))
            return 0;
        return t == 0 || cp_push(b, HANGUL_T + t);
    }
    const unicode_decomp_entry *d = cp >= 0 && depth < 8 && (unicode_class(cp) & UNI_NFC) ? decomp_of(cp) : NULL;
    if (!d)
        return cp_push(b, cp);
    return decompose(b, (int32_t)d->first, depth + 1) && (d->second == 0 || decompose(b, (int32_t)d->second, depth + 1));
}

/* Normalizes s[0..n) (all of it) and appends it to out. */
static er_status nfc_region(const char *s, size_t n, cpbuf *b, strbuf *out) {
    b->n = 0;
    for (size_t i = 0; i < n;) {
        if (!decompose(b, utf8_next((const unsigned char *)s, n, &i), 0))
            return er_fail(ER_ERR_NO_MEMORY, "tokenizer: out of memory normalizing %zu bytes", n);
    }
    int32_t *c = b->cp;
    /* canonical ordering: a stable insertion sort of each run of non-starters */
    for (size_t i = 1; i < b->n; i++) {
        const int cc = ccc_of(c[i]);
        if (cc == 0)
            continue;
        const int32_t x = c[i];
        size_t j = i;
        while (j > 0 && ccc_of(c[j - 1]) > cc) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
    /* canonical composition */
    size_t n_out = 0;
    if (b->n) {
        size_t starter = 0;
        int last_class = ccc_of(c[0]) ? 256 : 0;
        n_out = 1;
        for (size_t i = 1; i < b->n; i++) {
            const int cc = ccc_of(c[i]);
            const int32_t composite = last_class != 256 ? compose(c[starter], c[i]) : -1;
            if (composite >= 0 && (last_class < cc || last_class == 0)) {
                c[starter] = composite;
                continue;
            }
            if (cc == 0)
                starter = n_out;
            last_class = cc;
            c[n_out++] = c[i];
        }
    }
    er_status st = strbuf_reserve(out, 4 * n_out);
    if (st != ER_OK)
        return st;
    for (size_t i = 0; i < n_out; i++) {
        if (c[i] < 0)
            out->data[out->len++] = (char)(-1 - c[i]);
        else
            out->len += (size_t)utf8_put((uint32_t)c[i], out->data + out->len);
    }
    return ER_OK;
}

int unicode_needs_nfc(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        if (unicode_class(utf8_next(u, n, &i)) & UNI_NFC)
            return 1;
    }
    return 0;
}

er_status unicode_nfc(const char *s, size_t n, strbuf *out) {
    const unsigned char *u = (const unsigned char *)s;
    cpbuf b = {0};
    er_status st = ER_OK;
    size_t copied = 0, prev = 0; /* prev: start of the last unflagged character */
    int have_prev = 0;
    for (size_t i = 0; i < n;) {
        const size_t start = i;
        if (u[i] < 0x80 || !(unicode_class(utf8_next(u, n, &i)) & UNI_NFC)) {
            if (u[start] < 0x80)
                i++;
            prev = start;
            have_prev = 1;
            continue;
        }
        /* a flagged run [start, end), normalized together with the starter before it */
        size_t end = i;
        while (end < n) {
            size_t k = end;
            if (u[k] < 0x80 || !(unicode_class(utf8_next(u, n, &k)) & UNI_NFC))
                break;
            end = k;
        }
        const size_t from = have_prev && prev >= copied ? prev : start;
        if ((st = strbuf_append(out, s + copied, from - copied)) != ER_OK ||
            (st = nfc_region(s + from, end - from, &b, out)) != ER_OK)
            goto done;
        copied = end;
        have_prev = 0;
        i = end;
    }
    st = strbuf_append(out, s + copied, n - copied);
done:
    free(b.cp);
    return st;
}
