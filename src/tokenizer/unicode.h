/*
 * unicode.h - what the tokenizer needs of Unicode: UTF-8 (core/utf8.h, which never fails: a
 * byte that does not start a valid sequence stands for itself), the character classes of
 * the pre-tokenizer regexes (\p{L}, \p{N}, \s) and NFC normalization.
 *
 * Versions follow Hugging Face tokenizers, the reference: classes from Unicode 16.0 (its
 * regex engine, Oniguruma), NFC from Unicode 9.0 (its normalization crate); see
 * tools/gen_unicode.py, which generates unicode_data.h.
 */
#ifndef ER_TOKENIZER_UNICODE_H
#define ER_TOKENIZER_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#include "core/utf8.h" /* utf8_next, utf8_put */
#include "edgerunner.h"

/* Character class bits (unicode_data.h defines the same values). */
enum { UNI_LETTER = 1, UNI_NUMBER = 2, UNI_SPACE = 4, UNI_NFC = 8 };

/* The class bits of a code point; 0 for the invalid-byte values utf8_next returns. */
uint8_t unicode_class(int32_t cp);

/* A growable byte buffer (the tokenizer's scratch). */
typedef struct strbuf {
    char *data;
    size_t len;
    size_t cap;
} strbuf;

er_status strbuf_reserve(strbuf *b, size_t extra);
er_status strbuf_append(strbuf *b, const char *s, size_t n);
void strbuf_free(strbuf *b);

/* Non-zero when NFC could change s[0..n) (it holds a character flagged UNI_NFC). */
int unicode_needs_nfc(const char *s, size_t n);

/* Appends the NFC normalization of s[0..n) to out. Invalid bytes are copied unchanged and
 * act as starters that nothing composes with. */
er_status unicode_nfc(const char *s, size_t n, strbuf *out);

#endif
