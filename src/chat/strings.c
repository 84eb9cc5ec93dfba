/*
 * strings.c - Python's str methods as the templates use them, on UTF-8 text: lengths,
 * indices and slices count code points (jinja_char_offsets maps them to bytes), white
 * space is str.isspace's, and invalid bytes stand for themselves (core/utf8.h), so no
 * input is refused. Case mapping is ASCII only, as it always was here. Searching is
 * glibc's memmem (two-way: linear, where a naive search is quadratic on hostile strings);
 * the functions that scan a string without allocating in proportion charge its bytes to
 * the step budget.
 */
#define _GNU_SOURCE /* memmem */

#include "chat/engine.h"
#include "tokenizer/unicode.h"

int jinja_isspace(int32_t cp) {
    return cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f) ||
           (cp >= 0x80 && (unicode_class(cp) & UNI_SPACE));
}

/* From s[i]: past the code points that are (space = 1) or are not (0) white space. */
static size_t skip(const char *s, size_t n, size_t i, int space) {
    while (i < n) {
        size_t k = i;
        if (jinja_isspace(utf8_next((const unsigned char *)s, n, &k)) != space)
            break;
        i = k;
    }
    return i;
}

size_t jinja_skip_space(const char *s, size_t n, size_t i) { return skip(s, n, i, 1); }

jstr jinja_spaces(state *S, int64_t n) {
    const size_t k = (size_t)(n > 0 ? n : 0);
    char *p = jinja_alloc(S, k + 1);
    memset(p, ' ', k);
    return (jstr){p, k};
}

size_t jinja_n_chars(jstr s) {
    size_t k = 0;
    for (size_t i = 0; i < s.n; i++)
        k += ((unsigned char)s.s[i] & 0xc0) != 0x80;
    return k;
}

size_t jinja_char_at(jstr s, size_t i) {
    for (size_t b = 0; b < s.n; b++)
        if (((unsigned char)s.s[b] & 0xc0) != 0x80 && i-- == 0)
            return b;
    return s.n;
}

/* Byte offsets of each code point: (n + 1) entries. */
size_t *jinja_char_offsets(state *S, jstr s, size_t *n) {
    *n = jinja_n_chars(s);
    size_t *off = jinja_alloc(S, (*n + 1) * sizeof *off);
    size_t k = 0;
    for (size_t i = 0; i < s.n; i++)
        if (((unsigned char)s.s[i] & 0xc0) != 0x80)
            off[k++] = i;
    off[k] = s.n;
    return off;
}

static int has_char(jstr set, int32_t cp) {
    for (size_t i = 0; i < set.n;)
        if (utf8_next((const unsigned char *)set.s, set.n, &i) == cp)
            return 1;
    return 0;
}

jstr jinja_strip(jstr s, const jstr *chars, int left, int right) {
    size_t b = 0, e = s.n;
    if (left)
        while (b < e) {
            size_t k = b;
            const int32_t cp = utf8_next((const unsigned char *)s.s, e, &k);
            if (chars ? !has_char(*chars, cp) : !jinja_isspace(cp))
                break;
            b = k;
        }
    if (right)
        while (e > b) {
            size_t start = e - 1;
            while (start > b && ((unsigned char)s.s[start] & 0xc0) == 0x80)
                start--;
            size_t k = start;
            const int32_t cp = utf8_next((const unsigned char *)s.s, e, &k);
            if (chars ? !has_char(*chars, cp) : !jinja_isspace(cp))
                break;
            e = start;
        }
    return (jstr){s.s + b, e - b};
}

const char *jinja_find(jstr s, size_t from, jstr sub) {
    if (from > s.n)
        return NULL;
    if (sub.n == 0)
        return s.s + from;
    return sub.n <= s.n - from ? memmem(s.s + from, s.n - from, sub.s, sub.n) : NULL;
}

jv jinja_split(state *S, jstr s, const jstr *sep, int64_t maxsplit, int from_right) {
    jinja_step_bytes(S, S->line, s.n);
    jlist *l = jinja_list_new(S, 0);
    if (!sep) { /* runs of white space, none at the ends */
        jstr rest = jinja_strip(s, NULL, !from_right, from_right);
        size_t i = 0;
        int64_t splits = 0;
        if (!from_right) {
            while (i < rest.n) {
                const size_t end = skip(rest.s, rest.n, i, 0);
                if (maxsplit >= 0 && splits >= maxsplit) {
                    jinja_list_push(S, l, v_str((jstr){rest.s + i, rest.n - i}));
                    return v_list(l);
                }
                jinja_list_push(S, l, v_str((jstr){rest.s + i, end - i}));
                splits++;
                i = jinja_skip_space(rest.s, rest.n, end);
            }
            return v_list(l);
        }
        /* rsplit() with no separator: split all, then join the first ones back */
        jv all = jinja_split(S, rest, NULL, -1, 0);
        const size_t n = all.l->n;
        if (maxsplit < 0 || (size_t)maxsplit + 1 >= n)
            return all;
        const size_t keep = n - (size_t)maxsplit; /* items merged into the first */
        const char *first_end = all.l->items[keep - 1].s.s + all.l->items[keep - 1].s.n;
        jinja_list_push(S, l, v_str((jstr){rest.s, (size_t)(first_end - rest.s)}));
        for (size_t k = keep; k < n; k++)
            jinja_list_push(S, l, all.l->items[k]);
        return v_list(l);
    }
    if (sep->n == 0)
        jinja_fail(S, ER_ERR_INVALID_ARG, 0, "split: empty separator");
    /* find all separators left to right; with from_right keep only the last maxsplit */
    size_t count = 0;
    for (const char *p = jinja_find(s, 0, *sep); p; p = jinja_find(s, (size_t)(p - s.s) + sep->n, *sep))
        count++;
    size_t skip = from_right && maxsplit >= 0 && (size_t)maxsplit < count ? count - (size_t)maxsplit : 0;
    size_t start = 0, done = 0;
    for (const char *p = jinja_find(s, 0, *sep); p; p = jinja_find(s, (size_t)(p - s.s) + sep->n, *sep)) {
        if (skip) {
            skip--;
            continue;
        }
        if (!from_right && maxsplit >= 0 && done >= (size_t)maxsplit)
            break;
        jinja_list_push(S, l, v_str((jstr){s.s + start, (size_t)(p - s.s) - start}));
        start = (size_t)(p - s.s) + sep->n;
        done++;
    }
    jinja_list_push(S, l, v_str((jstr){s.s + start, s.n - start}));
    return v_list(l);
}

jstr jinja_case(state *S, jstr s, int mode) {
    char *p = jinja_alloc(S, s.n + 1);
    int prev_cased = 0;
    for (size_t i = 0; i < s.n; i++) {
        char c = s.s[i];
        const int lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z';
        int to_upper = mode == CASE_UPPER || (mode == CASE_CAPITALIZE && i == 0) || (mode == CASE_TITLE && !prev_cased);
        if (to_upper && lower)
            c = (char)(c - 32);
        else if (!to_upper && upper)
            c = (char)(c + 32);
        prev_cased = lower || upper || ((unsigned char)c >= 0x80 && mode == CASE_TITLE && prev_cased);
        p[i] = c;
    }
    p[s.n] = 0;
    return (jstr){p, s.n};
}

jstr jinja_replace(state *S, jstr s, jstr old, jstr new_s, int64_t count) {
    jinja_step_bytes(S, S->line, s.n);
    sbuf b = {0};
    size_t i = 0;
    int64_t done = 0;
    if (old.n == 0) { /* Python inserts between every character */
        size_t n;
        size_t *off = jinja_char_offsets(S, s, &n);
        for (size_t k = 0; k <= n; k++) {
            if (count < 0 || done < count) {
                jinja_sb_put(S, &b, new_s.s, new_s.n);
                done++;
            }
            if (k < n)
                jinja_sb_put(S, &b, s.s + off[k], off[k + 1] - off[k]);
        }
        return sb_str(&b);
    }
    for (const char *p = jinja_find(s, 0, old); p && (count < 0 || done < count); p = jinja_find(s, i, old)) {
        jinja_sb_put(S, &b, s.s + i, (size_t)(p - s.s) - i);
        jinja_sb_put(S, &b, new_s.s, new_s.n);
        i = (size_t)(p - s.s) + old.n;
        done++;
    }
    jinja_sb_put(S, &b, s.s + i, s.n - i);
    return sb_str(&b);
}
