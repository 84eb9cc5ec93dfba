/*
 * fuzz_vocab.c - libFuzzer target for the tokenizer on hostile vocabularies (make fuzz-vocab).
 *
 * The input is a recipe for a vocabulary, written as a GGUF in memory the way a converter
 * would, then loaded (vocab_load), and its last part is text to tokenize and detokenize:
 *
 *   byte 0      bit 0: gpt2 (else llama); bits 1-3: tokenizer.ggml.pre (none, gpt-2,
 *               llama-bpe, qwen2, smollm, an unknown one); bit 4: the 256 byte tokens
 *               (byte-level characters, or <0xNN>); bit 5: PARSE_SPECIAL; bit 6:
 *               ADD_SPECIAL; bit 7: token types from the recipe
 *   byte 1      bos, byte 2 eos, byte 3 unknown token: an index, 0xff none
 *   byte 4      bit 0: add_space_prefix false; bit 1: add_bos_token true; bit 2:
 *               tokenizer.ggml.merges as an array of u32 (a mistyped key)
 *   byte 5      n tokens, then each: 1 byte length (0..15), its bytes, and (bit 7 of
 *               byte 0) 1 byte type (0..7: invalid ones included), 1 byte score
 *   1 byte      n merges, then each: 2 bytes, two token indices; their concatenation is
 *               added to the vocabulary, so that most merges name three tokens
 *   the rest    the text
 *
 * A vocabulary that fails to load must say why. One that loads must tokenize any text
 * into ids inside it, report the same count whatever the buffer (never writing past
 * it: every buffer is malloc'd to its exact size), detokenize them to the length it
 * reports, and the streaming detokenizer must give the same bytes.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "edgerunner.h"
#include "io/gguf.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct input {
    const uint8_t *p;
    size_t n, at;
} input;

static uint8_t take(input *in) { return in->at < in->n ? in->p[in->at++] : 0; }

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_bytes(buf *b, const void *s, size_t n) {
    put_u64(b, n);
    put(b, s, n);
}
static void put_key(buf *b, const char *key, uint32_t type) {
    put_bytes(b, key, strlen(key));
    put_u32(b, type);
}

enum { MAX_TOKENS = 256 + 255 + 255, MAX_TOKEN_LEN = 32 };

typedef struct recipe {
    char text[MAX_TOKENS][MAX_TOKEN_LEN];
    uint8_t len[MAX_TOKENS];
    int32_t type[MAX_TOKENS];
    float score[MAX_TOKENS];
    int n;
    char merges[255][2 * MAX_TOKEN_LEN + 1];
    uint8_t merge_len[255];
    int n_merges;
} recipe;

static void add_token(recipe *r, const char *s, size_t n, int32_t type, float score) {
    if (n > MAX_TOKEN_LEN)
        n = MAX_TOKEN_LEN;
    memcpy(r->text[r->n], s, n);
    r->len[r->n] = (uint8_t)n;
    r->type[r->n] = type;
    r->score[r->n] = score;
    r->n++;
}

/* GPT-2's bytes_to_unicode */
static uint32_t byte_char(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
        return (uint32_t)b;
    int k = 0;
    for (int x = 0; x < b; x++)
        k += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
    return 0x100 + (uint32_t)k;
}

static float score_of(uint8_t b) { return b == 0x7f ? NAN : b == 0x80 ? -INFINITY : (float)(int8_t)b; }

/* The recipe's GGUF; the input is left at the text. */
static buf build(input *in, recipe *r, int *flags_out) {
    static const char *const pres[] = {NULL, "gpt-2", "llama-bpe", "qwen2", "smollm", "made-up", NULL, NULL};
    const uint8_t f0 = take(in), bos = take(in), eos = take(in), unk = take(in), f4 = take(in);
    const int bpe = f0 & 1;
    const char *pre = pres[(f0 >> 1) & 7];
    r->n = 0;
    r->n_merges = 0;
    if (f0 & 16) {
        for (int b = 0; b < 256; b++) {
            char s[8];
            int n = bpe ? utf8_put(byte_char(b), s) : snprintf(s, sizeof s, "<0x%02X>", b);
            add_token(r, s, (size_t)n, bpe ? TOKEN_NORMAL : TOKEN_BYTE, 0);
        }
    }
    const int n_tokens = take(in);
    for (int i = 0; i < n_tokens; i++) {
        char s[16];
        const size_t n = take(in) & 15;
        for (size_t k = 0; k < n; k++)
            s[k] = (char)take(in);
        const int32_t type = f0 & 128 ? take(in) & 7 : TOKEN_NORMAL;
        add_token(r, s, n, type, score_of(f0 & 128 ? take(in) : 0));
    }
    const int n_merges = take(in);
    for (int i = 0; i < n_merges && r->n > 0; i++) {
        const int a = take(in) % r->n, b = take(in) % r->n;
        char *m = r->merges[r->n_merges];
        memcpy(m, r->text[a], r->len[a]);
        m[r->len[a]] = ' ';
        memcpy(m + r->len[a] + 1, r->text[b], r->len[b]);
        r->merge_len[r->n_merges++] = (uint8_t)(r->len[a] + 1 + r->len[b]);
        char joined[2 * MAX_TOKEN_LEN];
        memcpy(joined, r->text[a], r->len[a]);
        memcpy(joined + r->len[a], r->text[b], r->len[b]);
        add_token(r, joined, (size_t)r->len[a] + r->len[b], TOKEN_NORMAL, score_of((uint8_t)i));
    }

    buf g = {0};
    const uint64_t n_kv = 3 + (pre != NULL) + (r->n_merges > 0) + ((f0 & 128) != 0) + (bos != 0xff) + (eos != 0xff) +
                          (unk != 0xff) + ((f4 & 1) != 0) + ((f4 & 2) != 0);
    put(&g, "GGUF", 4);
    put_u32(&g, 3);
    put_u64(&g, 0);
    put_u64(&g, n_kv);
    put_key(&g, "tokenizer.ggml.model", GGUF_TYPE_STRING);
    put_bytes(&g, bpe ? "gpt2" : "llama", bpe ? 4 : 5);
    if (pre) {
        put_key(&g, "tokenizer.ggml.pre", GGUF_TYPE_STRING);
        put_bytes(&g, pre, strlen(pre));
    }
    put_key(&g, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY);
    put_u32(&g, GGUF_TYPE_STRING);
    put_u64(&g, (uint64_t)r->n);
    for (int i = 0; i < r->n; i++)
        put_bytes(&g, r->text[i], r->len[i]);
    put_key(&g, "tokenizer.ggml.scores", GGUF_TYPE_ARRAY);
    put_u32(&g, GGUF_TYPE_FLOAT32);
    put_u64(&g, (uint64_t)r->n);
    put(&g, r->score, sizeof(float) * (size_t)r->n);
    if (f0 & 128) {
        put_key(&g, "tokenizer.ggml.token_type", GGUF_TYPE_ARRAY);
        put_u32(&g, GGUF_TYPE_INT32);
        put_u64(&g, (uint64_t)r->n);
        put(&g, r->type, sizeof(int32_t) * (size_t)r->n);
    }
    if (r->n_merges > 0) {
        put_key(&g, "tokenizer.ggml.merges", GGUF_TYPE_ARRAY);
        put_u32(&g, f4 & 4 ? GGUF_TYPE_UINT32 : GGUF_TYPE_STRING);
        put_u64(&g, (uint64_t)r->n_merges);
        for (int i = 0; i < r->n_merges; i++) {
            if (f4 & 4)
                put_u32(&g, (uint32_t)i);
            else
                put_bytes(&g, r->merges[i], r->merge_len[i]);
        }
    }
    static const char *const id_keys[3] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                            "tokenizer.ggml.unknown_token_id"};
    const uint8_t ids[3] = {bos, eos, unk};
    for (int k = 0; k < 3; k++)
        if (ids[k] != 0xff) {
            put_key(&g, id_keys[k], GGUF_TYPE_UINT32);
            put_u32(&g, ids[k]);
        }
    if (f4 & 1) {
        put_key(&g, "tokenizer.ggml.add_space_prefix", GGUF_TYPE_BOOL);
        put(&g, "", 1);
    }
    if (f4 & 2) {
        put_key(&g, "tokenizer.ggml.add_bos_token", GGUF_TYPE_BOOL);
        put(&g, "\1", 1);
    }
    *flags_out = (f0 & 32 ? ER_TOKENIZE_PARSE_SPECIAL : 0) | (f0 & 64 ? ER_TOKENIZE_ADD_SPECIAL : 0);
    return g;
}

/* Tokenizes and detokenizes `text` through a loaded vocabulary, checking the contracts. */
static void round_trip(const vocab *v, const char *text, int64_t len, int flags) {
    int64_t n = -1, n2 = -1;
    er_fail(ER_OK, "%s", ""); /* so that a failure must leave its own message */
    if (er_tokenize(v, text, len, flags, NULL, 0, &n) != ER_OK) {
        if (er_last_error()[0] == '\0')
            abort();
        return;
    }
    if (n < 0)
        abort();
    /* half the buffer: the same count, nothing written past it */
    const int64_t half = n / 2;
    int32_t *ids = malloc((size_t)(half ? half : 1) * sizeof *ids);
    if (er_tokenize(v, text, len, flags, ids, half, &n2) != ER_OK || n2 != n)
        abort();
    free(ids);
    ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (er_tokenize(v, text, len, flags, ids, n, &n2) != ER_OK || n2 != n)
        abort();
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= v->n_tokens)
            abort();
    for (int64_t i = 0; i < n; i++) { /* every piece, into a buffer too small for most */
        char piece[3];
        const int64_t k = vocab_token_to_piece(v, ids[i], piece, sizeof piece);
        if (k < 0 || k > (int64_t)sizeof piece || vocab_token_to_piece(v, ids[i], piece, -1) != -1)
            abort();
    }
    int64_t n_bytes = -1, n_bytes2 = -1;
    if (er_detokenize(v, ids, n, 0, NULL, 0, &n_bytes) != ER_OK || n_bytes < 0)
        abort();
    char *out = malloc((size_t)(n_bytes ? n_bytes : 1));
    if (er_detokenize(v, ids, n, 0, out, n_bytes, &n_bytes2) != ER_OK || n_bytes2 != n_bytes)
        abort();
    /* the streaming detokenizer gives the same bytes, in order */
    er_detokenizer *d = NULL;
    if (er_detokenizer_create(v, 0, &d) != ER_OK)
        abort();
    int64_t at = 0;
    for (int64_t i = 0; i <= n; i++) {
        const char *piece;
        int64_t k;
        if ((i < n ? er_detokenizer_push(d, ids[i], &piece, &k) : er_detokenizer_flush(d, &piece, &k)) != ER_OK ||
            k < 0 || at + k > n_bytes || memcmp(out + at, piece, (size_t)k) != 0)
            abort();
        at += k;
    }
    if (at != n_bytes)
        abort();
    er_detokenizer_free(d);
    free(out);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static recipe r;
    input in = {data, size, 0};
    int flags = 0;
    buf g = build(&in, &r, &flags);
    const char *text = (const char *)data + in.at;
    const int64_t len = (int64_t)(size - in.at);
    gguf_file *f = NULL;
    vocab v;
    er_status st = gguf_parse(g.p, g.n, "fuzz", &f);
    if (st != ER_OK) /* the recipe always writes a well-formed GGUF */
        abort();
    er_fail(ER_OK, "%s", "");
    st = vocab_load(f, "fuzz", &v);
    if (st != ER_OK) {
        if (er_last_error()[0] == '\0' || v.tokens || v.by_text || v.merges)
            abort(); /* a failed load says why and leaves nothing behind */
    } else {
        if (v.kind == VOCAB_NONE || v.n_tokens != r.n)
            abort();
        round_trip(&v, text, len, flags);
        vocab_free(&v);
    }
    gguf_close(f);
    free(g.p);
    return 0;
}
