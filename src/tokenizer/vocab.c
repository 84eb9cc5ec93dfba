/*
 * vocab.c - loading and indexing the vocabulary (see vocab.h), and token id -> bytes.
 *
 * SentencePiece stores a space as U+2581 and unknown bytes as tokens "<0xNN>".
 * Byte-level BPE stores each byte as one printable code point (GPT-2's bytes_to_unicode:
 * bytes 33..126, 161..172 and 174..255 map to themselves, the other 68 to U+0100..U+0143
 * in byte order), so decoding maps each code point back to its byte.
 *
 * Both lookups of the tokenizer's inner loops are open-addressing hash tables built here
 * once: token text -> id, and (left id, right id) -> merge rank and result.
 */
#include "tokenizer/vocab.h"

#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "tokenizer/unicode.h"

enum { MAX_TOKENS = 1 << 24 };

/* ---- hashing -------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    return x;
}

static uint64_t hash_bytes(const char *s, uint64_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 29;
    }
    uint64_t w = 0;
    for (uint64_t k = 0; i + k < n; k++)
        w |= (uint64_t)(unsigned char)s[i + k] << (8 * k);
    return mix64(h ^ w);
}

static uint64_t table_size(int64_t n) {
    uint64_t size = 16;
    while (size < 2 * (uint64_t)n)
        size *= 2;
    return size;
}

int32_t vocab_find(const vocab *v, const char *s, uint64_t n) {
    if (!v->by_text)
        return -1;
    for (uint64_t slot = hash_bytes(s, n) & v->by_text_mask;; slot = (slot + 1) & v->by_text_mask) {
        const int32_t id = v->by_text[slot];
        if (id < 0)
            return -1;
        if (v->tokens[id].len == n && memcmp(v->tokens[id].data, s, n) == 0)
            return id;
    }
}

static uint64_t merge_key(int32_t left, int32_t right) { return (uint64_t)(uint32_t)left << 32 | (uint32_t)right; }

int vocab_merge_find(const vocab *v, int32_t left, int32_t right, int32_t *rank, int32_t *result) {
    if (!v->merges)
        return 0;
    const uint64_t key = merge_key(left, right);
    for (uint64_t slot = mix64(key) & v->merges_mask;; slot = (slot + 1) & v->merges_mask) {
        const vocab_merge *m = &v->merges[slot];
        if (m->result < 0)
            return 0;
        if (m->key == key) {
            *rank = m->rank;
            *result = m->result;
            return 1;
        }
    }
}

/* ---- loading -------------------------------------------------------------------------- */

/* A shortened string for messages. */
#define SHOW(s) (int)((s).len > 40 ? 40 : (s).len), (s).data

/* The pair `key` when it has the type asked for (an array of INT32 also accepts any
 * integer elements); NULL when it is absent (*st ER_OK) or has another type (*st says
 * which), so that no caller can go on to read a value of the wrong type. */
static const gguf_kv *find_typed(const gguf_file *f, const char *key, enum gguf_value_type type,
                                 enum gguf_value_type elem, const char *path, er_status *st) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    *st = ER_OK;
    if (!kv)
        return NULL;
    const gguf_value *v = &kv->value;
    if (v->type != type || (type == GGUF_TYPE_ARRAY && v->arr.type != elem && !(elem == GGUF_TYPE_INT32 && v->arr.raw))) {
        *st = er_fail(ER_ERR_FORMAT, "%s: tokenizer metadata '%s' has type %s%s%s, expected %s%s", path, key,
                      gguf_type_name(v->type), v->type == GGUF_TYPE_ARRAY ? " of " : "",
                      v->type == GGUF_TYPE_ARRAY ? gguf_type_name(v->arr.type) : "",
                      type == GGUF_TYPE_ARRAY ? "an array of " : "", gguf_type_name(type == GGUF_TYPE_ARRAY ? elem : type));
        return NULL;
    }
    return kv;
}

static er_status read_bool(const gguf_file *f, const char *key, int def, const char *path, int *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    int64_t v;
    *out = def;
    if (!kv)
        return ER_OK;
    if (!gguf_value_as_int(&kv->value, &v))
        return er_fail(ER_ERR_FORMAT, "%s: tokenizer metadata '%s' has type %s, expected a bool", path, key,
                       gguf_type_name(kv->value.type));
    *out = v != 0;
    return ER_OK;
}

/* A special token id: absent, -1 or 0xFFFFFFFF (the converters' "none") give -1; any
 * other value must name a token. */
static er_status read_id(const vocab *v, const gguf_file *f, const char *key, const char *path, int32_t *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    int64_t id;
    *out = -1;
    if (!kv)
        return ER_OK;
    if (!gguf_value_as_int(&kv->value, &id))
        return er_fail(ER_ERR_FORMAT, "%s: tokenizer metadata '%s' has type %s, expected a token id", path, key,
                       gguf_type_name(kv->value.type));
    if (id == -1 || id == 0xFFFFFFFFll)
        return ER_OK;
    if (id < 0 || id >= v->n_tokens)
        return er_fail(ER_ERR_FORMAT, "%s: tokenizer metadata '%s' is %lld, outside the vocabulary [0, %lld)", path,
                       key, (long long)id, (long long)v->n_tokens);
    *out = (int32_t)id;
    return ER_OK;
}

static er_status index_texts(vocab *v, const char *path) {
    const uint64_t size = table_size(v->n_tokens);
    v->by_text = malloc(size * sizeof *v->by_text);
    if (!v->by_text)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory indexing %lld tokens", path, (long long)v->n_tokens);
    memset(v->by_text, 0xff, size * sizeof *v->by_text);
    v->by_text_mask = size - 1;
    for (int64_t id = 0; id < v->n_tokens; id++) {
        const gguf_string t = v->tokens[id];
        uint64_t slot = hash_bytes(t.data, t.len) & v->by_text_mask;
        for (;; slot = (slot + 1) & v->by_text_mask) {
            const int32_t other = v->by_text[slot];
            if (other < 0 || (v->tokens[other].len == t.len && memcmp(v->tokens[other].data, t.data, t.len) == 0))
                break;
        }
        v->by_text[slot] = (int32_t)id; /* a repeated text maps to its last id, as in llama.cpp */
    }
    return ER_OK;
}

static er_status index_merges(vocab *v, const gguf_file *f, const char *path) {
    er_status st;
    const gguf_kv *kv = find_typed(f, "tokenizer.ggml.merges", GGUF_TYPE_ARRAY, GGUF_TYPE_STRING, path, &st);
    if (!kv)
        return st;
    if (kv->value.arr.n > (uint64_t)INT32_MAX)
        return er_fail(ER_ERR_FORMAT, "%s: %llu merges are too many", path, (unsigned long long)kv->value.arr.n);
    v->n_merges = (int64_t)kv->value.arr.n;
    const uint64_t size = table_size(v->n_merges);
    v->merges = malloc(size * sizeof *v->merges);
    strbuf joined = {0};
    if (!v->merges)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory for %lld merges", path, (long long)v->n_merges);
    for (uint64_t i = 0; i < size; i++)
        v->merges[i] = (vocab_merge){0, 0, -1};
    v->merges_mask = size - 1;
    for (int64_t rank = 0; rank < v->n_merges; rank++) {
        const gguf_string m = kv->value.arr.strs[rank];
        /* "left right"; the split is at the first space after the first byte, as in
         * llama.cpp, so that a left token that is a space still works */
        uint64_t sp = 1;
        while (sp < m.len && m.data[sp] != ' ')
            sp++;
        if (sp >= m.len) {
            st = er_fail(ER_ERR_FORMAT, "%s: tokenizer.ggml.merges[%lld] '%.*s' is not two tokens separated by a space",
                         path, (long long)rank, SHOW(m));
            goto done;
        }
        const int32_t left = vocab_find(v, m.data, sp);
        const int32_t right = vocab_find(v, m.data + sp + 1, m.len - sp - 1);
        joined.len = 0;
        if ((st = strbuf_append(&joined, m.data, sp)) != ER_OK ||
            (st = strbuf_append(&joined, m.data + sp + 1, m.len - sp - 1)) != ER_OK)
            goto done;
        const int32_t result = vocab_find(v, joined.data, joined.len);
        if (left < 0 || right < 0 || result < 0) {
            const gguf_string missing = left < 0    ? (gguf_string){m.data, sp}
                                        : right < 0 ? (gguf_string){m.data + sp + 1, m.len - sp - 1}
                                                    : (gguf_string){joined.data, joined.len};
            st = er_fail(ER_ERR_FORMAT, "%s: tokenizer.ggml.merges[%lld] '%.*s': token '%.*s' is not in the vocabulary",
                         path, (long long)rank, SHOW(m), SHOW(missing));
            goto done;
        }
        const uint64_t key = merge_key(left, right);
        uint64_t slot = mix64(key) & v->merges_mask;
        while (v->merges[slot].result >= 0 && v->merges[slot].key != key)
            slot = (slot + 1) & v->merges_mask;
        if (v->merges[slot].result < 0) /* a repeated merge keeps its first (lowest) rank */
            v->merges[slot] = (vocab_merge){key, (int32_t)rank, result};
    }
    st = ER_OK;
done:
    strbuf_free(&joined);
    return st;
}

/* GPT-2's bytes_to_unicode: the code point that stands for byte b. */
static uint32_t byte_level_char(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))
        return (uint32_t)b;
    int k = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255)))
            k++;
    return 0x100 + (uint32_t)k;
}

static void find_byte_tokens(vocab *v) {
    for (int cp = 0; cp < 0x144; cp++)
        v->char_byte[cp] = -1;
    for (int b = 0; b < 256; b++) {
        char text[8];
        int n;
        if (v->kind == VOCAB_BPE) {
            n = utf8_put(byte_level_char(b), text);
            memcpy(v->byte_char[b], text, (size_t)n);
            v->char_byte[byte_level_char(b)] = (int16_t)b;
        } else {
            static const char hex[] = "0123456789ABCDEF";
            memcpy(text, "<0x", 3);
            text[3] = hex[b >> 4], text[4] = hex[b & 15], text[5] = '>';
            n = 6;
        }
        v->byte_token[b] = vocab_find(v, text, (uint64_t)n);
    }
}

typedef struct special_key {
    unsigned char first;
    uint64_t len;
    int32_t id;
} special_key;

/* By first byte, then longest first (leftmost-longest matching), then by id. */
static int special_cmp(const void *pa, const void *pb) {
    const special_key *a = pa, *b = pb;
    if (a->first != b->first)
        return a->first < b->first ? -1 : 1;
    if (a->len != b->len)
        return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static er_status index_specials(vocab *v, const char *path) {
    int64_t n = 0;
    for (int64_t id = 0; id < v->n_tokens; id++)
        n += (v->types[id] == TOKEN_CONTROL || v->types[id] == TOKEN_USER_DEFINED || v->types[id] == TOKEN_UNKNOWN) &&
             v->tokens[id].len > 0;
    v->specials = malloc((size_t)(n ? n : 1) * sizeof *v->specials);
    special_key *keys = malloc((size_t)(n ? n : 1) * sizeof *keys);
    if (!v->specials || !keys) {
        free(keys);
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory for %lld special tokens", path, (long long)n);
    }
    n = 0;
    for (int64_t id = 0; id < v->n_tokens; id++)
        if ((v->types[id] == TOKEN_CONTROL || v->types[id] == TOKEN_USER_DEFINED || v->types[id] == TOKEN_UNKNOWN) &&
            v->tokens[id].len > 0)
            keys[n++] = (special_key){(unsigned char)v->tokens[id].data[0], v->tokens[id].len, (int32_t)id};
    qsort(keys, (size_t)n, sizeof *keys, special_cmp);
    for (int64_t i = 0; i < n; i++)
        v->specials[i] = keys[i].id;
    free(keys);
    int64_t k = 0;
    for (int b = 0; b < 256; b++) {
        v->special_start[b] = (int32_t)k;
        while (k < n && (unsigned char)v->tokens[v->specials[k]].data[0] == b)
            k++;
    }
    v->special_start[256] = (int32_t)n;
    return ER_OK;
}

/* End of generation: eos, eot, eom, and the end-of-turn tokens llama.cpp recognizes by
 * their text. */
static er_status mark_eog(vocab *v, const char *path) {
    static const char *const eog_texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
        "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
    };
    v->is_eog = calloc((size_t)v->n_tokens, 1);
    if (!v->is_eog)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", path);
    for (size_t i = 0; i < sizeof eog_texts / sizeof eog_texts[0]; i++) {
        const int32_t id = vocab_find(v, eog_texts[i], strlen(eog_texts[i]));
        if (id >= 0)
            v->is_eog[id] = 1;
    }
    if (v->eos >= 0)
        v->is_eog[v->eos] = 1;
    if (v->eot >= 0)
        v->is_eog[v->eot] = 1;
    if (v->eom >= 0)
        v->is_eog[v->eom] = 1;
    return ER_OK;
}

er_status vocab_load(const gguf_file *file, const char *path, vocab *out) {
    er_status st;
    memset(out, 0, sizeof *out);
    out->bos = out->eos = out->eot = out->eom = out->unk = out->pad = out->sep = -1;
    for (int b = 0; b < 256; b++)
        out->byte_token[b] = -1;
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
        return ER_OK; /* a vocabulary we do not know: ids only */
    vocab *v = out;
    if (tokens->value.arr.n == 0)
        return er_fail(ER_ERR_FORMAT, "%s: tokenizer.ggml.tokens is empty", path);
    if (tokens->value.arr.n > MAX_TOKENS)
        return er_fail(ER_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu tokens, more than %d", path,
                       (unsigned long long)tokens->value.arr.n, MAX_TOKENS);
    v->n_tokens = (int64_t)tokens->value.arr.n;
    v->tokens = tokens->value.arr.strs;

    v->types = malloc((size_t)v->n_tokens);
    if (!v->types) {
        st = er_fail(ER_ERR_NO_MEMORY, "%s: out of memory for %lld token types", path, (long long)v->n_tokens);
        goto fail;
    }
    memset(v->types, TOKEN_NORMAL, (size_t)v->n_tokens);
    const gguf_kv *types = find_typed(file, "tokenizer.ggml.token_type", GGUF_TYPE_ARRAY, GGUF_TYPE_INT32, path, &st);
    if (st != ER_OK)
        goto fail;
    if (types) {
        if (types->value.arr.n != tokens->value.arr.n) {
            st = er_fail(ER_ERR_FORMAT, "%s: tokenizer.ggml.token_type has %llu entries for %lld tokens", path,
                         (unsigned long long)types->value.arr.n, (long long)v->n_tokens);
            goto fail;
        }
        for (int64_t id = 0; id < v->n_tokens; id++) {
            int64_t t = -1;
            if (!gguf_array_int(&types->value, (uint64_t)id, &t) || t < 0 || t > TOKEN_BYTE) {
                st = er_fail(ER_ERR_FORMAT, "%s: tokenizer.ggml.token_type[%lld] is %lld, not a token type (0..6)",
                             path, (long long)id, (long long)t);
                goto fail;
            }
            v->types[id] = (uint8_t)t;
        }
    }
    if (v->kind == VOCAB_SPM) {
        v->scores = calloc((size_t)v->n_tokens, sizeof *v->scores);
        if (!v->scores) {
            st = er_fail(ER_ERR_NO_MEMORY, "%s: out of memory for %lld scores", path, (long long)v->n_tokens);
            goto fail;
        }
        const gguf_kv *scores = find_typed(file, "tokenizer.ggml.scores", GGUF_TYPE_ARRAY, GGUF_TYPE_FLOAT32, path, &st);
        if (st != ER_OK)
            goto fail;
        if (scores && scores->value.arr.n != tokens->value.arr.n) {
            st = er_fail(ER_ERR_FORMAT, "%s: tokenizer.ggml.scores has %llu entries for %lld tokens", path,
                         (unsigned long long)scores->value.arr.n, (long long)v->n_tokens);
            goto fail;
        }
        for (int64_t id = 0; scores && id < v->n_tokens; id++) {
            double s = 0;
            gguf_array_float(&scores->value, (uint64_t)id, &s);
            v->scores[id] = (float)s;
        }
    }

    if ((st = read_id(v, file, "tokenizer.ggml.bos_token_id", path, &v->bos)) != ER_OK ||
        (st = read_id(v, file, "tokenizer.ggml.eos_token_id", path, &v->eos)) != ER_OK ||
        (st = read_id(v, file, "tokenizer.ggml.eot_token_id", path, &v->eot)) != ER_OK ||
        (st = read_id(v, file, "tokenizer.ggml.eom_token_id", path, &v->eom)) != ER_OK ||
        (st = read_id(v, file, "tokenizer.ggml.unknown_token_id", path, &v->unk)) != ER_OK ||
        (st = read_id(v, file, "tokenizer.ggml.padding_token_id", path, &v->pad)) != ER_OK ||
        (st = read_id(v, file, "tokenizer.ggml.seperator_token_id", path, &v->sep)) != ER_OK)
        goto fail;

    const gguf_kv *pre = find_typed(file, "tokenizer.ggml.pre", GGUF_TYPE_STRING, GGUF_TYPE_STRING, path, &st);
    if (st != ER_OK)
        goto fail;
    if (v->kind == VOCAB_BPE) {
        v->pre = PRE_GPT2; /* llama.cpp's "default" is close to GPT-2's; files without the key are old GPT-2 ones */
        if (pre && (gguf_string_eq(pre->value.str, "llama-bpe") || gguf_string_eq(pre->value.str, "llama3") ||
                    gguf_string_eq(pre->value.str, "llama-v3"))) {
            v->pre = PRE_LLAMA3;
            v->ignore_merges = 1;
        } else if (pre && gguf_string_eq(pre->value.str, "qwen2")) {
            v->pre = PRE_QWEN2;
            v->nfc = 1; /* Qwen2/Qwen3 tokenizer.json: normalizer NFC */
        } else if (pre && gguf_string_eq(pre->value.str, "smollm")) {
            v->pre = PRE_SMOLLM;
        } else if (pre && !gguf_string_eq(pre->value.str, "gpt-2") && !gguf_string_eq(pre->value.str, "default")) {
            v->pre = PRE_NONE; /* er_tokenize says which pre-tokenizer is missing */
        }
    }
    if ((st = read_bool(file, "tokenizer.ggml.add_bos_token", v->kind == VOCAB_SPM || v->pre == PRE_LLAMA3, path,
                        &v->add_bos)) != ER_OK ||
        (st = read_bool(file, "tokenizer.ggml.add_eos_token", 0, path, &v->add_eos)) != ER_OK ||
        (st = read_bool(file, "tokenizer.ggml.add_space_prefix", v->kind == VOCAB_SPM, path, &v->add_space_prefix)) != ER_OK)
        goto fail;
    const gguf_kv *tmpl = find_typed(file, "tokenizer.chat_template", GGUF_TYPE_STRING, GGUF_TYPE_STRING, path, &st);
    if (st != ER_OK)
        goto fail;
    if (tmpl)
        v->chat_template = tmpl->value.str;

    if ((st = index_texts(v, path)) != ER_OK || (v->kind == VOCAB_BPE && (st = index_merges(v, file, path)) != ER_OK) ||
        (st = index_specials(v, path)) != ER_OK || (st = mark_eog(v, path)) != ER_OK)
        goto fail;
    find_byte_tokens(v);
    return ER_OK;
fail:
    vocab_free(v);
    memset(v, 0, sizeof *v);
    return st;
}

void vocab_free(vocab *v) {
    if (!v)
        return;
    free(v->types);
    free(v->scores);
    free(v->by_text);
    free(v->merges);
    free(v->specials);
    free(v->is_eog);
    gguf_close(v->owned_file);
    v->types = NULL, v->scores = NULL, v->by_text = NULL, v->merges = NULL, v->specials = NULL, v->is_eog = NULL;
    v->owned_file = NULL;
}

/* ---- id -> bytes ---------------------------------------------------------------------- */

static int hex_digit(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int64_t vocab_piece(const vocab *v, int32_t id, int special, char *buf, int64_t cap) {
    if (v->kind == VOCAB_NONE || id < 0 || id >= v->n_tokens || cap < 0)
        return -1;
    const int type = v->types[id];
    const gguf_string tok = v->tokens[id];
    const unsigned char *s = (const unsigned char *)tok.data;
    int64_t n_out = 0;
#define PUT(byte)                      \
    do {                               \
        if (n_out < cap)               \
            buf[n_out] = (char)(byte); \
        n_out++;                       \
    } while (0)
    if (type == TOKEN_CONTROL || type == TOKEN_UNKNOWN || type == TOKEN_USER_DEFINED) {
        /* text as stored, not byte-level encoded (llama.cpp's converter writes added
         * tokens verbatim) */
        if (type != TOKEN_USER_DEFINED && !special)
            return 0;
        for (uint64_t i = 0; i < tok.len; i++)
            PUT(s[i]);
    } else if (v->kind == VOCAB_SPM) {
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
        size_t i = 0;
        while (i < tok.len) {
            const size_t start = i;
            const int32_t cp = utf8_next(s, tok.len, &i);
            const int b = cp >= 0 && cp < 0x144 ? v->char_byte[cp] : -1;
            if (b < 0) { /* not a byte-level character: copy it as is */
                for (size_t k = start; k < i; k++)
                    PUT(s[k]);
            } else {
                PUT(b);
            }
        }
    }
#undef PUT
    return n_out;
}

int64_t vocab_token_to_piece(const vocab *v, int32_t id, char *buf, int64_t cap) {
    const int64_t n = vocab_piece(v, id, 0, buf, cap);
    return n < 0 ? -1 : n < cap ? n : cap; /* -1 (a bad id or cap) is not a length to clamp */
}
