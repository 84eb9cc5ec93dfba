/*
 * utf8.h - UTF-8 decoding that never fails and encoding, for every layer that reads text
 * (the tokenizer, the JSON reader, the chat template engine).
 *
 * Invariant: decoding then re-encoding keeps any input byte-exact. A byte that does not
 * start a well-formed sequence stands for itself, as a negative value the caller can tell
 * from every code point.
 */
#ifndef ER_CORE_UTF8_H
#define ER_CORE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Decodes the code point at s[*i] (i < n) and advances *i. A byte that does not begin a
 * well-formed sequence (overlong, surrogate, beyond U+10FFFF, truncated) is consumed
 * alone and returned as -1 - byte, so that callers can keep invalid input byte-exact. */
int32_t utf8_next(const unsigned char *s, size_t n, size_t *i);

/* Writes cp (0..0x10FFFF) as UTF-8 into out; returns the length (1..4). A surrogate is
 * written as its 3 bytes (the JSON reader keeps a lone \uD800 that way). */
int utf8_put(uint32_t cp, char *out);

#endif
