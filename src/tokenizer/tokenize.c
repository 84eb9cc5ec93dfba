/*
 * tokenize.c - the public tokenizer API: er_vocab_load, er_tokenize, er_detokenize and
 * the streaming detokenizer.
 *
 * er_tokenize, in order:
 *   1. special tokens are split out of the text, leftmost-longest (Hugging Face's added
 *      vocabulary): user-defined tokens always, control tokens only with PARSE_SPECIAL;
 *   2. each stretch of text between them is tokenized alone: byte-level BPE (NFC first if
 *      the model asks for it, then the pre-tokenizer, then BPE per pre-token), or
 *      SentencePiece (spaces as U+2581, a space before the first word and after each
 *      special token when add_space_prefix, as llama.cpp does);
 *   3. BOS/EOS around it all with ADD_SPECIAL, as the file asks.
 */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/hf.h"
#include "tokenizer/tokenizer.h"

/* ---- vocabulary handle ---------------------------------------------------------------- */

er_status er_vocab_load(const char *path, er_vocab **out) {
    if (!path || !out)
        return er_fail(ER_ERR_INVALID_ARG, "er_vocab_load: NULL %s", path ? "out" : "path");
    *out = NULL;
    gguf_file *file = NULL;
    er_status st = hf_open_any(path, HF_TOKENIZER_ONLY, &file);
    if (st != ER_OK)
        return st;
    vocab *v = calloc(1, sizeof *v);
    if (!v) {
        gguf_close(file);
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    if ((st = vocab_load(file, path, v)) != ER_OK) {
        gguf_close(file);
        free(v);
        return st;
    }
    v->owned_file = file;
    if (v->kind == VOCAB_NONE) {
        er_vocab_free(v);
        return er_fail(ER_ERR_UNSUPPORTED, "%s: no tokenizer this build knows (tokenizer.ggml.model 'llama' or 'gpt2')", path);
    }
    *out = v;
    return ER_OK;
}

void er_vocab_free(er_vocab *v) {
    if (!v)
        return;
    vocab_free(v);
    free(v);
}

int64_t er_vocab_n_tokens(const er_vocab *v) { return v ? v->n_tokens : 0; }
int32_t er_vocab_bos(const er_vocab *v) { return v ? v->bos : -1; }
int32_t er_vocab_eos(const er_vocab *v) { return v ? v->eos : -1; }
int er_vocab_is_eog(const er_vocab *v, int32_t id) { return v && v->is_eog && id >= 0 && id < v->n_tokens && v->is_eog[id]; }

/* ---- text -> ids ---------------------------------------------------------------------- */

/* The ids of pre-tokens already seen in this call. Text repeats its words, and merging a
 * word costs a hash probe per candidate pair, mostly cache misses in the merge table:
 * remembering short pre-tokens doubles the speed on long texts. Built only for long texts. */
enum { CACHE_SLOTS = 1 << 16, CACHE_MAX_PIECE = 48, CACHE_MIN_TEXT = 8192 };

typedef struct cache_slot {
    uint64_t hash; /* 0: empty */
    uint32_t text_off, ids_off;
    uint16_t text_len, n_ids;
} cache_slot;

typedef struct tok_state {
    const vocab *v;
    merge_work work;
    idbuf ids;
    strbuf text;        /* NFC output, or the SentencePiece text with escaped spaces */
    cache_slot *cache;  /* (CACHE_SLOTS) or NULL */
    int64_t n_cached;
    strbuf cache_text;  /* the cached pre-tokens' bytes */
    idbuf cache_ids;    /* their ids */
} tok_state;

static uint64_t piece_hash(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h | 1;
}

static er_status encode_piece(void *user, const char *piece, size_t n) {
    tok_state *t = user;
    if (!t->cache || n > CACHE_MAX_PIECE)
        return bpe_encode(t->v, &t->work, piece, n, &t->ids);
    const uint64_t h = piece_hash(piece, n);
    uint64_t slot = h & (CACHE_SLOTS - 1);
    for (; t->cache[slot].hash; slot = (slot + 1) & (CACHE_SLOTS - 1)) {
        const cache_slot *c = &t->cache[slot];
        if (c->hash == h && c->text_len == n && !memcmp(t->cache_text.data + c->text_off, piece, n)) {
            for (uint16_t k = 0; k < c->n_ids; k++) {
                er_status st = idbuf_push(&t->ids, t->cache_ids.ids[c->ids_off + k]);
                if (st != ER_OK)
                    return st;
            }
            return ER_OK;
        }
    }
    const int64_t before = t->ids.n;
    er_status st = bpe_encode(t->v, &t->work, piece, n, &t->ids);
    if (st != ER_OK || t->n_cached >= CACHE_SLOTS / 2 || t->cache_text.len > UINT32_MAX / 2)
        return st;
    const cache_slot c = {h, (uint32_t)t->cache_text.len, (uint32_t)t->cache_ids.n, (uint16_t)n, (uint16_t)(t->ids.n - before)};
    if ((st = strbuf_append(&t->cache_text, piece, n)) != ER_OK)
        return st;
    for (int64_t k = before; k < t->ids.n; k++)
        if ((st = idbuf_push(&t->cache_ids, t->ids.ids[k])) != ER_OK)
            return st;
    t->cache[slot] = c;
    t->n_cached++;
    return ER_OK;
}

/* One stretch of text with no special token in it. */
static er_status encode_text(tok_state *t, const char *s, size_t n, int after_special) {
    const vocab *v = t->v;
    er_status st;
    t->text.len = 0;
    if (v->kind == VOCAB_BPE) {
        if (v->nfc && unicode_needs_nfc(s, n)) {
            if ((st = unicode_nfc(s, n, &t->text)) != ER_OK)
                return st;
            s = t->text.data, n = t->text.len;
        }
        return pretok_split(v->pre, s, n, encode_piece, t);
    }
    static const char escaped_space[3] = {(char)0xe2, (char)0x96, (char)0x81}; /* U+2581 */
    if ((st = strbuf_reserve(&t->text, 3 * n + 3)) != ER_OK)
        return st;
    if (v->add_space_prefix && after_special)
        strbuf_append(&t->text, escaped_space, 3);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ')
            strbuf_append(&t->text, escaped_space, 3);
        else
            t->text.data[t->text.len++] = s[i];
    }
    return spm_encode(v, &t->work, t->text.data, t->text.len, &t->ids);
}

/* The special token that starts at text[i] (the longest one allowed), or -1. */
static int32_t special_at(const vocab *v, const char *text, size_t n, size_t i, int parse_special) {
    const unsigned char b = (unsigned char)text[i];
    for (int32_t k = v->special_start[b]; k < v->special_start[b + 1]; k++) {
        const int32_t id = v->specials[k];
        const gguf_string tok = v->tokens[id];
        if (v->types[id] != TOKEN_USER_DEFINED && !parse_special)
            continue;
        if (tok.len <= n - i && memcmp(text + i, tok.data, tok.len) == 0)
            return id;
    }
    return -1;
}

er_status er_tokenize(const er_vocab *v, const char *text, int64_t len, int flags, int32_t *ids, int64_t cap,
                      int64_t *n_ids) {
    if (!v || (!text && len > 0) || len < 0 || (!ids && cap > 0) || cap < 0 || !n_ids)
        return er_fail(ER_ERR_INVALID_ARG, "er_tokenize: %s", !v ? "NULL vocabulary" : !n_ids ? "NULL n_ids" : "bad text or buffer");
    *n_ids = 0;
    if (v->kind == VOCAB_NONE)
        return er_fail(ER_ERR_UNSUPPORTED, "er_tokenize: the file has no tokenizer this build knows");
    if (v->kind == VOCAB_BPE && v->pre == PRE_NONE)
        return er_fail(ER_ERR_UNSUPPORTED,
                       "er_tokenize: the file's BPE pre-tokenizer (tokenizer.ggml.pre) is not supported (gpt-2, llama-bpe, qwen2, smollm are)");
    const int parse_special = (flags & ER_TOKENIZE_PARSE_SPECIAL) != 0;
    const size_t n = (size_t)len;
    tok_state t = {v, {0}, {0}, {0}, NULL, 0, {0}, {0}};
    er_status st = ER_OK;
    if (v->kind == VOCAB_BPE && n >= CACHE_MIN_TEXT)
        t.cache = calloc(CACHE_SLOTS, sizeof *t.cache); /* without it (out of memory) no cache */
    if ((flags & ER_TOKENIZE_ADD_SPECIAL) && v->add_bos && v->bos >= 0 && (st = idbuf_push(&t.ids, v->bos)) != ER_OK)
        goto done;
    size_t start = 0;
    int after_special = 1; /* SentencePiece: the first stretch gets the space prefix */
    for (size_t i = 0; i < n;) {
        const unsigned char b = (unsigned char)text[i];
        const int32_t id = v->special_start[b] < v->special_start[b + 1] ? special_at(v, text, n, i, parse_special) : -1;
        if (id < 0) {
            i++;
            continue;
        }
        if (i > start && (st = encode_text(&t, text + start, i - start, after_special)) != ER_OK)
            goto done;
        if ((st = idbuf_push(&t.ids, id)) != ER_OK)
            goto done;
        after_special = 1;
        i += v->tokens[id].len;
        start = i;
        continue;
    }
    if (n > start && (st = encode_text(&t, text + start, n - start, after_special)) != ER_OK)
        goto done;
    if ((flags & ER_TOKENIZE_ADD_SPECIAL) && v->add_eos && v->eos >= 0 && (st = idbuf_push(&t.ids, v->eos)) != ER_OK)
        goto done;
    *n_ids = t.ids.n;
    if (cap > 0 && t.ids.n > 0)
        memcpy(ids, t.ids.ids, (size_t)(t.ids.n < cap ? t.ids.n : cap) * sizeof *ids);
done:
    merge_work_free(&t.work);
    free(t.ids.ids);
    strbuf_free(&t.text);
    free(t.cache);
    strbuf_free(&t.cache_text);
    free(t.cache_ids.ids);
    return st;
}

/* A first guess of len + 3 ids holds ordinary text; a vocabulary without U+2581 or an NFC
 * expansion needs more, and the count er_tokenize reports says how many. */
er_status er_tokenize_prompt(const er_vocab *v, const char *text, int64_t len, int flags, int32_t **ids,
                             int64_t *n_ids) {
    if (!ids || !n_ids || len < 0)
        return er_fail(ER_ERR_INVALID_ARG, "er_tokenize_prompt: %s", !ids ? "NULL ids" : !n_ids ? "NULL n_ids" : "negative length");
    *ids = NULL;
    *n_ids = 0;
    int64_t cap = len + 3;
    int32_t *buf = NULL;
    er_status st;
    for (;;) {
        int32_t *grown = realloc(buf, (size_t)cap * sizeof *buf);
        if (!grown) {
            st = er_fail(ER_ERR_NO_MEMORY, "er_tokenize_prompt: out of memory for the %lld ids of a %lld-byte text",
                         (long long)cap, (long long)len);
            goto fail;
        }
        buf = grown;
        if ((st = er_tokenize(v, text, len, flags, buf, cap, n_ids)) != ER_OK)
            goto fail;
        if (*n_ids <= cap)
            break;
        cap = *n_ids;
    }
    if ((flags & ER_TOKENIZE_ADD_SPECIAL) && *n_ids >= 2 && v->bos >= 0 && buf[0] == v->bos && buf[1] == v->bos) {
        memmove(buf, buf + 1, (size_t)(*n_ids - 1) * sizeof *buf);
        (*n_ids)--;
    }
    *ids = buf;
    return ER_OK;
fail:
    free(buf);
    *n_ids = 0;
    return st;
}

/* ---- ids -> text ---------------------------------------------------------------------- */

static er_status append_piece(const vocab *v, int32_t id, int flags, int first, strbuf *out) {
    char small[64];
    int64_t n = vocab_piece(v, id, (flags & ER_DETOKENIZE_SPECIAL) != 0, small, sizeof small);
    if (n < 0)
        return er_fail(ER_ERR_INVALID_ARG, "detokenize: token id %d is outside the vocabulary [0, %lld)", id,
                       (long long)v->n_tokens);
    if (n == 0)
        return ER_OK;
    er_status st = strbuf_reserve(out, (size_t)n);
    if (st != ER_OK)
        return st;
    if (n > (int64_t)sizeof small)
        vocab_piece(v, id, (flags & ER_DETOKENIZE_SPECIAL) != 0, out->data + out->len, n);
    else
        memcpy(out->data + out->len, small, (size_t)n);
    if (first && (flags & ER_DETOKENIZE_STRIP_SPACE) && v->kind == VOCAB_SPM && v->add_space_prefix && n > 0 &&
        out->data[out->len] == ' ') {
        memmove(out->data + out->len, out->data + out->len + 1, (size_t)n - 1);
        n--;
    }
    out->len += (size_t)n;
    return ER_OK;
}

er_status er_detokenize(const er_vocab *v, const int32_t *ids, int64_t n_ids, int flags, char *buf, int64_t cap,
                        int64_t *n_bytes) {
    if (!v || (!ids && n_ids > 0) || n_ids < 0 || (!buf && cap > 0) || cap < 0 || !n_bytes)
        return er_fail(ER_ERR_INVALID_ARG, "er_detokenize: %s", !v ? "NULL vocabulary" : "bad ids or buffer");
    *n_bytes = 0;
    strbuf out = {0};
    er_status st = ER_OK;
    for (int64_t i = 0; i < n_ids; i++)
        if ((st = append_piece(v, ids[i], flags, out.len == 0, &out)) != ER_OK)
            goto done;
    *n_bytes = (int64_t)out.len;
    if (cap > 0 && out.len > 0)
        memcpy(buf, out.data, (size_t)((int64_t)out.len < cap ? (int64_t)out.len : cap));
done:
    strbuf_free(&out);
    return st;
}

struct er_detokenizer {
    const vocab *v;
    int flags;
    int started;   /* a non-empty piece has been seen (for STRIP_SPACE) */
    strbuf text;   /* what the last call returned, then the held-back bytes after it */
    size_t n_held; /* bytes of an incomplete character at the end of text, kept for the next call */
};

er_status er_detokenizer_create(const er_vocab *v, int flags, er_detokenizer **out) {
    if (!v || !out)
        return er_fail(ER_ERR_INVALID_ARG, "er_detokenizer_create: NULL %s", v ? "out" : "vocabulary");
    *out = calloc(1, sizeof **out);
    if (!*out)
        return er_fail(ER_ERR_NO_MEMORY, "er_detokenizer_create: out of memory");
    (*out)->v = v;
    (*out)->flags = flags;
    return ER_OK;
}

void er_detokenizer_free(er_detokenizer *d) {
    if (!d)
        return;
    strbuf_free(&d->text);
    free(d);
}

/* How many bytes at the end of s[0..n) are the start of a UTF-8 character that more bytes
 * could still complete (0..3). Bytes that can never become valid are not held back. */
static size_t incomplete_tail(const unsigned char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        const unsigned char c = s[n - k];
        if ((c & 0xc0) == 0x80)
            continue; /* a continuation byte: look further back for its lead */
        const size_t need = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 1;
        return need > k ? k : 0;
    }
    return 0;
}

er_status er_detokenizer_push(er_detokenizer *d, int32_t id, const char **text, int64_t *len) {
    if (!d || !text || !len)
        return er_fail(ER_ERR_INVALID_ARG, "er_detokenizer_push: NULL argument");
    *text = "";
    *len = 0;
    /* move the held-back bytes to the front, then append the new piece */
    if (d->n_held)
        memmove(d->text.data, d->text.data + d->text.len, d->n_held);
    d->text.len = d->n_held;
    const size_t before = d->text.len;
    er_status st = append_piece(d->v, id, d->flags, !d->started, &d->text);
    if (st != ER_OK)
        return st;
    d->started |= d->text.len > before;
    d->n_held = incomplete_tail((const unsigned char *)d->text.data, d->text.len);
    d->text.len -= d->n_held;
    *text = d->text.data ? d->text.data : ""; /* NULL until a piece has had bytes */
    *len = (int64_t)d->text.len;
    return ER_OK;
}

er_status er_detokenizer_flush(er_detokenizer *d, const char **text, int64_t *len) {
    if (!d || !text || !len)
        return er_fail(ER_ERR_INVALID_ARG, "er_detokenizer_flush: NULL argument");
    if (d->n_held)
        memmove(d->text.data, d->text.data + d->text.len, d->n_held);
    d->text.len = d->n_held;
    d->n_held = 0;
    d->started = 0;
    *text = d->text.data ? d->text.data : "";
    *len = (int64_t)d->text.len;
    return ER_OK;
}
