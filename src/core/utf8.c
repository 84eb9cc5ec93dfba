/* utf8.c - UTF-8 decoding and encoding (see utf8.h). */
#include "core/utf8.h"

int32_t utf8_next(const unsigned char *s, size_t n, size_t *i) {
    const unsigned char c = s[*i];
    if (c < 0x80) {
        (*i)++;
        return c;
    }
    int len;
    int32_t cp, min;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2, cp = c & 0x1f, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3, cp = c & 0x0f, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4, cp = c & 0x07, min = 0x10000;
    } else {
        (*i)++;
        return -1 - (int32_t)c;
    }
    if (*i + (size_t)len > n)
        goto invalid;
    for (int k = 1; k < len; k++) {
        const unsigned char cc = s[*i + (size_t)k];
        if ((cc & 0xc0) != 0x80)
            goto invalid;
        cp = (cp << 6) | (cc & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000))
        goto invalid;
    *i += (size_t)len;
    return cp;
invalid:
    (*i)++;
    return -1 - (int32_t)c;
}

int utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}
