/*
 * test_tokenizer.c - the tokenizer's C-level contracts, also run under ASan + UBSan:
 * UTF-8 and NFC edge cases, SentencePiece on the real stories260K vocabulary (BOS,
 * special tokens, byte fallback, byte-exact round trips of invalid UTF-8), byte-level BPE
 * on small vocabularies built in memory (merge order, a 100 KB run of one character),
 * hostile tokenizer metadata, the streaming detokenizer, and the Jinja engine's errors.
 * (Agreement with Hugging Face and llama.cpp on real vocabularies: tests/tokenizer/.)
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "edgerunner.h"
#include "io/gguf.h"
#include "test.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

#define STORIES TEST_DATA "stories260K.gguf"

/* ---- a GGUF with only tokenizer metadata, in memory ----------------------------------- */

typedef struct mbuf {
    uint8_t *p;
    size_t n, cap;
} mbuf;

static void put(mbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_u32(mbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(mbuf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(mbuf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

typedef struct tok_spec {
    const char *model;           /* "gpt2" or "llama" */
    const char *pre;             /* or NULL */
    const char *const *tokens;   /* NULL-terminated */
    const char *const *merges;   /* NULL-terminated, or NULL */
    const int32_t *types;        /* (n_types) or NULL */
    int n_types;
    int64_t bos;                 /* -2: no key */
    int merges_u32;              /* merges written as an array of u32 (their indices) */
} tok_spec;

static size_t count(const char *const *v) {
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

static mbuf build_gguf(const tok_spec *t) {
    mbuf b = {0};
    const uint64_t n_kv = 2 + (t->pre != NULL) + (t->merges != NULL) + (t->types != NULL) + (t->bos != -2);
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, 0);
    put_u64(&b, n_kv);
    put_str(&b, "tokenizer.ggml.model");
    put_u32(&b, GGUF_TYPE_STRING);
    put_str(&b, t->model);
    if (t->pre) {
        put_str(&b, "tokenizer.ggml.pre");
        put_u32(&b, GGUF_TYPE_STRING);
        put_str(&b, t->pre);
    }
    put_str(&b, "tokenizer.ggml.tokens");
    put_u32(&b, GGUF_TYPE_ARRAY);
    put_u32(&b, GGUF_TYPE_STRING);
    put_u64(&b, count(t->tokens));
    for (size_t i = 0; i < count(t->tokens); i++)
        put_str(&b, t->tokens[i]);
    if (t->merges) {
        put_str(&b, "tokenizer.ggml.merges");
        put_u32(&b, GGUF_TYPE_ARRAY);
        put_u32(&b, t->merges_u32 ? GGUF_TYPE_UINT32 : GGUF_TYPE_STRING);
        put_u64(&b, count(t->merges));
        for (size_t i = 0; i < count(t->merges); i++) {
            if (t->merges_u32)
                put_u32(&b, (uint32_t)i);
            else
                put_str(&b, t->merges[i]);
        }
    }
    if (t->types) {
        put_str(&b, "tokenizer.ggml.token_type");
        put_u32(&b, GGUF_TYPE_ARRAY);
        put_u32(&b, GGUF_TYPE_INT32);
        put_u64(&b, (uint64_t)t->n_types);
        put(&b, t->types, sizeof(int32_t) * (size_t)t->n_types);
    }
    if (t->bos != -2) {
        put_str(&b, "tokenizer.ggml.bos_token_id");
        put_u32(&b, GGUF_TYPE_UINT32);
        put_u32(&b, (uint32_t)t->bos);
    }
    while (b.n % 32)
        put(&b, "", 1);
    return b;
}

/* Parses the spec's GGUF and loads its vocabulary; *file must be closed by the caller. */
static er_status load_spec(const tok_spec *t, mbuf *b, gguf_file **file, vocab *v) {
    *b = build_gguf(t);
    *file = NULL;
    er_status st = gguf_parse(b->p, b->n, "test.gguf", file);
    return st == ER_OK ? vocab_load(*file, "test.gguf", v) : st;
}

/* ---- tests ---------------------------------------------------------------------------- */

static void test_utf8(void) {
    static const struct {
        const char *s;
        int32_t first; /* what utf8_next returns at 0 */
        size_t len;
    } cases[] = {
        {"A", 'A', 1},           {"\xc3\xa9", 0xe9, 2},      {"\xe2\x82\xac", 0x20ac, 3},
        {"\xf0\x9f\x98\x80", 0x1f600, 4},
        {"\xc0\xaf", -1 - 0xc0, 1},     /* overlong */
        {"\xed\xa0\x80", -1 - 0xed, 1}, /* surrogate */
        {"\xf4\x90\x80\x80", -1 - 0xf4, 1}, /* beyond U+10FFFF */
        {"\xe2\x82", -1 - 0xe2, 1},     /* truncated */
        {"\x80", -1 - 0x80, 1},         /* stray continuation */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t at = 0;
        const int32_t cp = utf8_next((const unsigned char *)cases[i].s, strlen(cases[i].s), &at);
        CHECK(cp == cases[i].first && at == cases[i].len, "utf8_next case %zu: %d after %zu bytes", i, cp, at);
    }
    CHECK(unicode_class('a') == UNI_LETTER && unicode_class('7') == UNI_NUMBER && unicode_class(0x3000) == UNI_SPACE,
          "ASCII and U+3000 classes");
    CHECK(unicode_class(0x1c89) & UNI_LETTER, "U+1C89 (Unicode 16) is a letter");
    CHECK(unicode_class(-5) == 0, "invalid bytes have no class");
}

static void nfc_case(const char *in, const char *want) {
    strbuf out = {0};
    CHECK(unicode_nfc(in, strlen(in), &out) == ER_OK, "nfc: %s", er_last_error());
    CHECK(out.len == strlen(want) && (out.len == 0 || !memcmp(out.data, want, out.len)), "NFC of '%s': got '%.*s'", in,
          (int)out.len, out.data ? out.data : "");
    strbuf_free(&out);
}

static void test_nfc(void) {
    nfc_case("e\xcc\x81", "\xc3\xa9");                             /* e + acute -> é */
    nfc_case("x e\xcc\x81 y", "x \xc3\xa9 y");
    nfc_case("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81"); /* Hangul L V T -> 각 */
    nfc_case("a\xcc\xa3\xcc\x82", "\xe1\xba\xad");                 /* a + dot below + circumflex -> ậ */
    nfc_case("a\xcc\x82\xcc\xa3", "\xe1\xba\xad");                 /* reordered first */
    nfc_case("\xe2\x84\xab", "\xc3\x85");                          /* Angstrom sign -> Å (singleton) */
    nfc_case("a\xe1\xb7\xba\xcc\x80", "a\xe1\xb7\xba\xcc\x80");    /* U+1DFA is a starter in Unicode 9 */
    nfc_case("\xff" "e\xcc\x81\xfe", "\xff\xc3\xa9\xfe");          /* invalid bytes kept */
    nfc_case("plain ascii", "plain ascii");
    CHECK(!unicode_needs_nfc("plain", 5) && unicode_needs_nfc("e\xcc\x81", 3), "needs_nfc");
}

static void test_spm(void) {
    er_vocab *v = NULL;
    CHECK(er_vocab_load(STORIES, &v) == ER_OK, "load stories vocab: %s", er_last_error());
    if (!v)
        return;
    int32_t ids[64];
    int64_t n = 0;
    CHECK(er_tokenize(v, "Once upon a time", 16, ER_TOKENIZE_ADD_SPECIAL, ids, 64, &n) == ER_OK && n == 5 && ids[0] == 1 &&
              ids[1] == 403 && ids[4] == 378,
          "stories 'Once upon a time' -> 1 403 407 261 378 (%lld ids)", (long long)n);
    CHECK(er_tokenize(v, "Once upon a time", 16, ER_TOKENIZE_ADD_SPECIAL, ids, 2, &n) == ER_OK && n == 5,
          "a small buffer gets the count");
    CHECK(er_tokenize(v, "<s>", 3, ER_TOKENIZE_PARSE_SPECIAL, ids, 64, &n) == ER_OK && n == 1 && ids[0] == 1,
          "<s> with PARSE_SPECIAL is BOS");
    CHECK(er_tokenize(v, "<s>", 3, 0, ids, 64, &n) == ER_OK && n > 1, "<s> without PARSE_SPECIAL is text (%lld ids)",
          (long long)n);
    CHECK(er_tokenize(v, "", 0, 0, ids, 64, &n) == ER_OK && n == 0, "empty text");
    CHECK(er_tokenize(v, NULL, 5, 0, ids, 64, &n) == ER_ERR_INVALID_ARG, "NULL text refused");

    /* bytes the vocabulary lacks fall back to <0xNN>; any bytes round-trip exactly */
    static const char weird[] = "\xe4\xbd\xa0 hi \xff\xfe\x80 x\xe2\x82";
    const int64_t len = (int64_t)sizeof weird - 1;
    CHECK(er_tokenize(v, weird, len, 0, ids, 64, &n) == ER_OK && n > 0 && n <= len + 3, "weird bytes: %s", er_last_error());
    char back[64];
    int64_t nb = 0;
    CHECK(er_detokenize(v, ids, n, ER_DETOKENIZE_STRIP_SPACE, back, sizeof back, &nb) == ER_OK && nb == len &&
              !memcmp(back, weird, (size_t)len),
          "decode(encode(x)) == x for invalid UTF-8 (%lld bytes)", (long long)nb);
    CHECK(er_detokenize(v, ids, n, 0, back, 1, &nb) == ER_OK && nb == len + 1, "detokenize reports the full length");
    int32_t bad = 9999;
    CHECK(er_detokenize(v, &bad, 1, 0, back, sizeof back, &nb) == ER_ERR_INVALID_ARG, "id out of range refused");
    CHECK(vocab_token_to_piece(v, 403, back, -5) == -1, "a negative size gives -1, not the size");

    /* streaming: the three byte tokens of U+4F60 come out only when complete */
    er_detokenizer *d = NULL;
    CHECK(er_detokenizer_create(v, 0, &d) == ER_OK, "detokenizer");
    int32_t seq[3]; /* the byte tokens of U+4F60, which the vocabulary lacks */
    for (int k = 0; k < 3; k++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", (unsigned char)"\xe4\xbd\xa0"[k]);
        seq[k] = vocab_find(v, name, 6);
        CHECK(seq[k] >= 0, "byte token %s", name);
    }
    const char *text;
    int64_t tn;
    CHECK(er_detokenizer_push(d, seq[0], &text, &tn) == ER_OK && tn == 0, "first byte held");
    CHECK(er_detokenizer_push(d, seq[1], &text, &tn) == ER_OK && tn == 0, "second byte held");
    CHECK(er_detokenizer_push(d, seq[2], &text, &tn) == ER_OK && tn == 3 && !memcmp(text, "\xe4\xbd\xa0", 3),
          "character complete");
    CHECK(er_detokenizer_push(d, seq[0], &text, &tn) == ER_OK && tn == 0, "a new lead byte held");
    CHECK(er_detokenizer_push(d, 403, &text, &tn) == ER_OK && tn == 6 && !memcmp(text, "\xe4 Once", 6),
          "an incomplete character is released once it cannot complete");
    CHECK(er_detokenizer_push(d, seq[0], &text, &tn) == ER_OK && tn == 0, "held again");
    CHECK(er_detokenizer_flush(d, &text, &tn) == ER_OK && tn == 1 && (unsigned char)text[0] == 0xe4, "flush gives the rest");
    CHECK(er_detokenizer_push(d, 1, &text, &tn) == ER_OK && tn == 0, "control tokens print nothing");
    er_detokenizer_free(d);
    CHECK(er_detokenizer_create(v, 0, &d) == ER_OK && er_detokenizer_push(d, 1, &text, &tn) == ER_OK && tn == 0 && text,
          "a control token first gives \"\", not NULL");
    er_detokenizer_free(d);
    CHECK(er_vocab_is_eog(v, 2) && !er_vocab_is_eog(v, 1), "EOS ends generation");
    er_vocab_free(v);
}

/* A byte-level vocabulary: the 256 byte characters, then merges of 'a' runs and "ab". */
static void test_bpe(void) {
    const char *tokens[256 + 8] = {0};
    char storage[256][4];
    int n = 0;
    for (int b = 0; b < 256; b++) {
        /* GPT-2 bytes_to_unicode */
        int cp = b;
        if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
            int k = 0;
            for (int x = 0; x < b; x++)
                k += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
            cp = 0x100 + k;
        }
        int len = utf8_put((uint32_t)cp, storage[b]);
        storage[b][len] = 0;
        tokens[n++] = storage[b];
    }
    tokens[n++] = "aa";   /* 256 */
    tokens[n++] = "aaaa"; /* 257 */
    tokens[n++] = "ab";   /* 258 */
    tokens[n++] = "<|end|>";
    static const char *const merges[] = {"a b", "a a", "aa aa", NULL};
    int32_t types[260];
    for (int i = 0; i < 260; i++)
        types[i] = i == 259 ? TOKEN_CONTROL : TOKEN_NORMAL;
    tok_spec spec = {"gpt2", "gpt-2", tokens, merges, types, 260, -2, 0};
    mbuf b;
    gguf_file *f;
    vocab v;
    CHECK(load_spec(&spec, &b, &f, &v) == ER_OK, "byte-level vocab: %s", er_last_error());
    if (f) {
        int32_t ids[8];
        int64_t n_ids = 0;
        /* "aab": 'a b' has the lowest rank, so "a" + "ab", not "aa" + "b" */
        CHECK(er_tokenize(&v, "aab", 3, 0, ids, 8, &n_ids) == ER_OK && n_ids == 2 && ids[0] == 'a' &&
                  ids[1] == 258,
              "merge order: aab -> a ab (%lld ids: %d %d)", (long long)n_ids, ids[0], ids[1]);
        CHECK(er_tokenize(&v, "aaaaa", 5, 0, ids, 8, &n_ids) == ER_OK && n_ids == 2 && ids[0] == 257 && ids[1] == 'a',
              "aaaaa -> aaaa a");
        CHECK(er_tokenize(&v, "x<|end|>", 8, ER_TOKENIZE_PARSE_SPECIAL, ids, 8, &n_ids) == ER_OK && n_ids == 2 && ids[1] == 259,
              "control token parsed with PARSE_SPECIAL");
        /* 100 KB of one character: linear-ish, and the right split */
        const size_t big = 100000;
        char *text = malloc(big);
        int32_t *out = malloc((big + 3) * sizeof *out);
        memset(text, 'a', big);
        CHECK(er_tokenize(&v, text, (int64_t)big, 0, out, (int64_t)big + 3, &n_ids) == ER_OK && n_ids == (int64_t)big / 4 &&
                  out[0] == 257 && out[n_ids - 1] == 257,
              "100 KB of 'a' -> %lld tokens", (long long)n_ids);
        free(text);
        free(out);
        vocab_free(&v);
        gguf_close(f);
    }
    free(b.p);
}

static void expect_bad_vocab(const char *what, const tok_spec *spec, const char *needle) {
    mbuf b;
    gguf_file *f;
    vocab v;
    const er_status st = load_spec(spec, &b, &f, &v);
    CHECK(st == ER_ERR_FORMAT && strstr(er_last_error(), needle), "%s: %s (%s)", what, er_status_name(st), er_last_error());
    if (st == ER_OK)
        vocab_free(&v);
    gguf_close(f);
    free(b.p);
}

static void test_hostile(void) {
    static const char *const ab[] = {"a", "b", "ab", NULL};
    static const char *const none[] = {NULL};
    static const char *const missing[] = {"a c", NULL};
    static const char *const result[] = {"b a", NULL};
    static const char *const nospace[] = {"ab", NULL};
    static const int32_t short_types[] = {1};
    static const int32_t bad_types[] = {1, 1, 42};
    tok_spec s = {"gpt2", "gpt-2", ab, missing, NULL, 0, -2, 0};
    expect_bad_vocab("merge names a missing token", &s, "'c' is not in the vocabulary");
    s.merges = result;
    expect_bad_vocab("merge result missing", &s, "'ba' is not in the vocabulary");
    s.merges = nospace;
    expect_bad_vocab("merge without a space", &s, "not two tokens");
    s.merges = missing;
    s.merges_u32 = 1; /* was a NULL dereference: the type error was reported, then the strings read */
    expect_bad_vocab("merges stored as u32", &s, "'tokenizer.ggml.merges' has type array of u32, expected an array of string");
    s.merges_u32 = 0;
    s.merges = NULL;
    s.tokens = none;
    expect_bad_vocab("empty vocabulary", &s, "is empty");
    s.tokens = ab;
    s.bos = 3;
    expect_bad_vocab("BOS out of range", &s, "outside the vocabulary");
    s.bos = 0xFFFFFFFFll; /* the converters' "none" */
    mbuf b;
    gguf_file *f;
    vocab v;
    CHECK(load_spec(&s, &b, &f, &v) == ER_OK && v.bos == -1, "BOS 0xFFFFFFFF means none");
    vocab_free(&v);
    gguf_close(f);
    free(b.p);
    s.bos = -2;
    s.types = short_types;
    s.n_types = 1;
    expect_bad_vocab("token types too short", &s, "token_type has 1 entries");
    s.types = bad_types;
    s.n_types = 3;
    expect_bad_vocab("token type out of range", &s, "not a token type");
    /* an unknown pre-tokenizer loads, but tokenizing says what is missing */
    s.types = NULL;
    s.pre = "made-up";
    CHECK(load_spec(&s, &b, &f, &v) == ER_OK, "unknown pre-tokenizer loads");
    int32_t ids[4];
    int64_t n = 0;
    CHECK(er_tokenize(&v, "ab", 2, 0, ids, 4, &n) == ER_ERR_UNSUPPORTED && strstr(er_last_error(), "pre-tokenizer"),
          "unknown pre-tokenizer: %s", er_last_error());
    /* a byte the vocabulary has no token for, and no unknown token */
    CHECK(er_tokenize(&v, "\x01", 1, 0, ids, 4, &n) != ER_OK, "missing byte token refused");
    vocab_free(&v);
    gguf_close(f);
    free(b.p);
    er_vocab *ev = NULL;
    CHECK(er_vocab_load(TEST_DATA "does-not-exist.gguf", &ev) == ER_ERR_IO && !ev, "missing file");
}

/* The number of ids is not bounded by the text's length: a SentencePiece vocabulary
 * without the U+2581 token makes each space 3 byte tokens, and Qwen2's NFC turns U+0958
 * (3 bytes) into U+0915 U+093C (6 bytes, 6 byte-level ids). er_tokenize reports the full
 * count and never writes past cap, and er_stream_text sizes its buffer from the count. */
static void check_count(const er_vocab *v, const char *what, const char *text, int64_t want) {
    const int64_t len = (int64_t)strlen(text), cap = len + 3;
    int32_t *ids = malloc((size_t)(want + 8) * sizeof *ids);
    for (int64_t i = 0; i < want + 8; i++)
        ids[i] = -7;
    int64_t n = -1;
    CHECK(er_tokenize(v, text, len, ER_TOKENIZE_ADD_SPECIAL, NULL, 0, &n) == ER_OK && n == want,
          "%s: the count alone is %lld, expected %lld", what, (long long)n, (long long)want);
    CHECK(er_tokenize(v, text, len, ER_TOKENIZE_ADD_SPECIAL, ids, cap, &n) == ER_OK && n == want && n > cap &&
              ids[cap - 1] != -7 && ids[cap] == -7,
          "%s: cap %lld (len + 3) is filled, not passed, and the count is %lld", what, (long long)cap, (long long)n);
    CHECK(er_tokenize(v, text, len, ER_TOKENIZE_ADD_SPECIAL, ids, want, &n) == ER_OK && n == want &&
              ids[want - 1] != -7 && ids[want] == -7,
          "%s: a buffer of the count holds them all", what);
    free(ids);
}

static void test_many_ids_per_byte(void) {
    static const char spaces[] = "                                        "; /* 40 */
    static const char deva[] = "\xe0\xa5\x98\xe0\xa5\x98\xe0\xa5\x98\xe0\xa5\x98"; /* U+0958 x 4 */
    /* SentencePiece: <unk>, then the 256 byte tokens; no U+2581 */
    const char *tokens[258] = {"<unk>"};
    char bytes[256][8];
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tokens[1 + b] = bytes[b];
    }
    tok_spec spm = {"llama", NULL, tokens, NULL, NULL, 0, -2, 0};
    mbuf b;
    gguf_file *f;
    vocab v;
    CHECK(load_spec(&spm, &b, &f, &v) == ER_OK, "byte-only SentencePiece vocab: %s", er_last_error());
    if (f) {
        check_count(&v, "40 spaces, no U+2581 token", spaces, 3 * 41); /* the prefix space too */
        vocab_free(&v);
    }
    gguf_close(f);
    free(b.p);
    /* byte-level BPE: the 256 byte characters, no merges */
    char chars[256][4];
    for (int c = 0; c < 256; c++) {
        int cp = c;
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174)) {
            int k = 0;
            for (int x = 0; x < c; x++)
                k += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
            cp = 0x100 + k;
        }
        chars[c][utf8_put((uint32_t)cp, chars[c])] = 0;
        tokens[c] = chars[c];
    }
    tokens[256] = NULL;
    tok_spec bpe = {"gpt2", "qwen2", tokens, NULL, NULL, 0, -2, 0};
    CHECK(load_spec(&bpe, &b, &f, &v) == ER_OK, "byte-only qwen2 vocab: %s", er_last_error());
    if (f) {
        check_count(&v, "U+0958 x 4 under NFC", deva, 24);
        vocab_free(&v);
    }
    gguf_close(f);
    free(b.p);

    /* er_stream_text on stories260K with its U+2581 token renamed to U+2580 (same length) */
    FILE *in = fopen(STORIES, "rb");
    uint8_t *model = malloc(2u << 20);
    const size_t n_model = in ? fread(model, 1, 2u << 20, in) : 0;
    if (in)
        fclose(in);
    static const uint8_t space_token[11] = {3, 0, 0, 0, 0, 0, 0, 0, 0xe2, 0x96, 0x81};
    size_t at = 0, found = 0;
    for (size_t i = 0; i + sizeof space_token <= n_model; i++)
        if (!memcmp(model + i, space_token, sizeof space_token))
            at = i, found++;
    CHECK(found == 1, "stories260K has one U+2581 token (%zu)", found);
    char path[] = "/tmp/er_test_nospace_XXXXXX";
    const int fd = mkstemp(path);
    if (found == 1 && fd >= 0) {
        model[at + 10] = 0x80;
        CHECK(write(fd, model, n_model) == (ssize_t)n_model, "write %s", path);
        er_model *m = NULL;
        er_context *ctx = NULL;
        er_text_params tp = er_text_default_params();
        tp.max_tokens = 1;
        tp.sampling = er_sampler_greedy_params();
        char *text = NULL;
        CHECK(er_model_load(path, NULL, &m) == ER_OK && er_context_create(m, NULL, &ctx) == ER_OK,
              "load %s: %s", path, er_last_error());
        CHECK(ctx && er_generate_text(ctx, spaces, &tp, &text, NULL) == ER_OK && er_context_n_past(ctx) >= 1 + 3 * 41,
              "er_stream_text feeds all %d ids of 40 spaces: %s", 1 + 3 * 41, er_last_error());
        er_free(text);
        er_context_free(ctx);
        er_model_free(m);
    }
    if (fd >= 0) {
        close(fd);
        unlink(path);
    }
    free(model);
}

static void test_templates(void) {
    er_vocab *v = NULL;
    CHECK(er_vocab_load(STORIES, &v) == ER_OK, "load: %s", er_last_error());
    if (!v)
        return;
    char buf[512];
    int64_t len = 0;
    const er_chat_message msgs[] = {{"system", "Be brief."}, {"user", "Hi \"there\"\n"}};
    CHECK(er_chat_apply_template(v, msgs, 2, 1, buf, sizeof buf, &len) == ER_OK &&
              !strcmp(buf, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi \"there\"\n<|im_end|>\n"
                           "<|im_start|>assistant\n"),
          "ChatML fallback: '%s' %s", buf, er_last_error());
    CHECK(er_chat_apply_template(v, msgs, 2, 0, buf, 8, &len) == ER_OK && len > 8 && strlen(buf) == 7,
          "a small buffer gets the length and a NUL");
    static const struct {
        const char *tmpl, *json;
        er_status st;
        const char *out_or_msg;
    } cases[] = {
        {"{{ bos_token }}{{ eos_token }}{{ add_generation_prompt }}", "{}", ER_OK, "<s></s>False"},
        {"{% for m in messages %}{{ loop.index }}{{ m.role[0] | upper }}{% endfor %}",
         "{\"messages\": [{\"role\": \"user\"}, {\"role\": \"bot\"}]}", ER_OK, "1U2B"},
        {"{{ raise_exception('no system role') }}", "{}", ER_ERR_INVALID_ARG, "no system role"},
        {"{% include 'x' %}", "{}", ER_ERR_UNSUPPORTED, "include"},
        {"line\n{{ x | nope }}", "{}", ER_ERR_UNSUPPORTED, "line 2: filter 'nope'"},
        {"{{ x.y }}", "{}", ER_ERR_INVALID_ARG, "'x' is undefined"},
        {"{% if %}", "{}", ER_ERR_FORMAT, "expected an expression"},
        {"{% for x in y %}", "{}", ER_ERR_FORMAT, "missing {% endfor %}"},
        {"{{ 'unterminated }}", "{}", ER_ERR_FORMAT, "unterminated string"},
        {"{{ 1 }}", "[1, 2]", ER_ERR_INVALID_ARG, "JSON object"},
        {"{{ 1 }}", "{\"a\": ", ER_ERR_INVALID_ARG, "variables JSON"},
        {"{{ 1 / 0 }}", "{}", ER_ERR_INVALID_ARG, "division by zero"},
        {"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "{}", ER_ERR_INVALID_ARG, "too deeply"},
        {"{{ x }}", "{\"x\": \"\\ud83d\\ude00 \\u00e9\"}", ER_OK, "\xf0\x9f\x98\x80 \xc3\xa9"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const er_status st = er_chat_render_json(v, cases[i].tmpl, cases[i].json, buf, sizeof buf, &len);
        const char *got = st == ER_OK ? buf : er_last_error();
        CHECK(st == cases[i].st && strstr(got, cases[i].out_or_msg), "template case %zu: %s '%s'", i, er_status_name(st), got);
    }
    er_vocab_free(v);
}

void test_tokenizer(void) {
    test_utf8();
    test_nfc();
    test_spm();
    test_bpe();
    test_hostile();
    test_many_ids_per_byte();
    test_templates();
}
