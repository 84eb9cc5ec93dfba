/*
 * vocab.c - token id -> bytes for SentencePiece ("llama") and byte-level BPE ("gpt2")
 * vocabularies.
 *
 * SentencePiece stores a space as U+2581 and unknown bytes as tokens "<0xNN>".
 * Byte-level BPE stores each byte as one printable code point (GPT-2's bytes_to_unicode:
 * bytes 33..126, 161..172 and 174..255 map to themselves, the other 68 to U+0100..U+0143
 * in byte order), so decoding maps each code point back to its byte.
 */
#include "tokenizer/vocab.h"

#include <string.h>

#include "core/status.h"

enum { TOKEN_TYPE_CONTROL = 3 }; /* llama.cpp's LLAMA_TOKEN_TYPE_CONTROL */

er_status vocab_load(const gguf_file *file, const char *path, vocab *out) {
    memset(out, 0, sizeof *out);
    const gguf_kv *model = gguf_find_kv(file, "tokenizer.ggml.model");
    const gguf_kv *tokens = gguf_find_kv(file, "tokenizer.ggml.tokens");
    if (!model || !tokens)
        return ER_OK;
    if (model->value.type != GGUF_TYPE_STRING)
        return er_fail(ER_ERR_FORMAT, "%s: tokenizer.ggml.model is not a string", path);
    if (tokens->value.type != GGUF_TYPE_ARRAY || tokens->value.arr.type != GGUF_TYPE_STRING)
        return er_fail(ER_ERR_FORMAT, "%s: tokenizer.ggml.tokens is not an array of strings", path);
    if (gguf_string_eq(model->value.str, "llama"))
        out->kind = VOCAB_SPM;
    else if (gguf_string_eq(model->value.str, "gpt2"))
        out->kind = VOCAB_BPE;
    else
        return ER_OK; /* a vocabulary we cannot decode yet: ids only */
    out->n_tokens = (int64_t)tokens->value.arr.n;
    out->tokens = tokens->value.arr.strs;
    const gguf_kv *types = gguf_find_kv(file, "tokenizer.ggml.token_type");
    if (types && types->value.type == GGUF_TYPE_ARRAY && types->value.arr.raw &&
        types->value.arr.n == tokens->value.arr.n)
        out->types = &types->value;
    return ER_OK;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Reads one UTF-8 code point from s[*i..n); returns -1 on a malformed sequence. */
static int32_t next_code_point(const unsigned char *s, uint64_t n, uint64_t *i) {
    unsigned char c = s[*i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || *i + (uint64_t)len > n)
        return -1;
    int32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (int k = 1; k < len; k++) {
        if ((s[*i + k] & 0xc0) != 0x80)
            return -1;
        cp = (cp << 6) | (s[*i + k] & 0x3f);
    }
    *i += (uint64_t)len;
    return cp;
}

/* GPT-2's bytes_to_unicode, inverted: the byte a code point stands for, or -1. */
static int bpe_byte_of(int32_t cp) {
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return cp;
    if (cp < 0x100 || cp > 0x143)
        return -1;
    int k = cp - 0x100; /* the k-th byte that is not printable, in byte order */
    for (int b = 0; b < 256; b++) {
        if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))
            continue;
        if (k-- == 0)
            return b;
    }
    return -1;
}

int64_t vocab_token_to_piece(const vocab *v, int32_t id, char *buf, int64_t cap) {
    if (v->kind == VOCAB_NONE || id < 0 || id >= v->n_tokens || cap < 0)
        return -1;
    int64_t token_type = 0;
    if (v->types && gguf_array_int(v->types, (uint64_t)id, &token_type) && token_type == TOKEN_TYPE_CONTROL)
        return 0;
    const gguf_string tok = v->tokens[id];
    const unsigned char *s = (const unsigned char *)tok.data;
    int64_t n_out = 0;
#define PUT(byte)                       \
    do {                                \
        if (n_out < cap)                \
            buf[n_out] = (char)(byte);  \
        n_out++;                        \
    } while (0)
    if (v->kind == VOCAB_SPM) {
        if (tok.len == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && hex_digit((char)s[3]) >= 0 &&
            hex_digit((char)s[4]) >= 0) {
            PUT(hex_digit((char)s[3]) * 16 + hex_digit((char)s[4]));
        } else {
            for (uint64_t i = 0; i < tok.len; i++) {
                if (i + 2 < tok.len && s[i] == 0xe2 && s[i + 1] == 0x96 && s[i + 2] == 0x81) {
                    PUT(' '); /* U+2581 LOWER ONE EIGHTH BLOCK */
                    i += 2;
                } else {
                    PUT(s[i]);
                }
            }
        }
    } else {
        uint64_t i = 0;
        while (i < tok.len) {
            uint64_t start = i;
            int32_t cp = next_code_point(s, tok.len, &i);
            int b = cp < 0 ? -1 : bpe_byte_of(cp);
            if (b < 0) { /* not a byte-level character (an added token): copy it as is */
                if (cp < 0)
                    i = start + 1;
                for (uint64_t k = start; k < i; k++)
                    PUT(s[k]);
            } else {
                PUT(b);
            }
        }
    }
#undef PUT
    return n_out < cap ? n_out : cap;
}
