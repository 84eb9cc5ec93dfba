/*
 * spm.c - SentencePiece (BPE variant, as in Llama 2 and TinyLlama vocabularies).
 *
 * The text (spaces already U+2581) starts as one symbol per UTF-8 character. Every
 * adjacent pair whose concatenation is a token is a candidate, scored by that token's
 * score; the best (highest score, leftmost on ties) is merged, and the candidates it
 * forms with its neighbours are added. A symbol left at the end that is not a token falls
 * back to its bytes, <0xNN>, or to the unknown token. This is llama.cpp's llm_tokenizer_spm
 * with a binary heap (and invalid UTF-8 cut into single bytes, so that it round-trips).
 *
 * Control and unknown tokens are never formed by merging: their text in user input is
 * plain text (special tokens are split out before, and only when asked).
 */
#include <string.h>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

static void try_pair(const vocab *v, merge_work *w, const char *text, int32_t left, int32_t right) {
    if (left < 0 || right < 0)
        return;
    const uint32_t size = w->len[left] + w->len[right];
    const int32_t id = vocab_find(v, text + w->off[left], size);
    if (id < 0 || v->types[id] == TOKEN_CONTROL || v->types[id] == TOKEN_UNKNOWN)
        return;
    const merge_pair p = {v->scores[id], left, right, -1, -1, -1, size};
    merge_heap_push(w, &p);
}

er_status spm_encode(const vocab *v, merge_work *w, const char *text, size_t n, idbuf *out) {
    er_status st;
    if (n == 0)
        return ER_OK;
    if (n > INT32_MAX / 2)
        return er_fail(ER_ERR_INVALID_ARG, "tokenizer: a text fragment of %zu bytes is too long", n);
    if ((st = merge_work_reserve(w, n)) != ER_OK)
        return st;
    /* one symbol per character; an invalid UTF-8 byte is a symbol of its own (llama.cpp
     * takes the length from the lead byte alone, which can swallow the next character:
     * an escaped space after a stray 0xFF would come back as the bytes of U+2581) */
    int32_t n_sym = 0;
    for (size_t off = 0; off < n; n_sym++) {
        size_t next = off;
        utf8_next((const unsigned char *)text, n, &next);
        w->off[n_sym] = off;
        w->len[n_sym] = (uint32_t)(next - off);
        w->prev[n_sym] = n_sym - 1;
        off = next;
        w->next[n_sym] = off < n ? n_sym + 1 : -1;
    }
    w->heap_n = 0;
    for (int32_t i = 1; i < n_sym; i++)
        try_pair(v, w, text, i - 1, i);
    while (w->heap_n) {
        const merge_pair p = merge_heap_pop(w);
        if (w->len[p.left] == 0 || w->len[p.right] == 0 || w->len[p.left] + w->len[p.right] != p.size)
            continue; /* stale */
        w->len[p.left] += w->len[p.right];
        w->len[p.right] = 0;
        w->next[p.left] = w->next[p.right];
        if (w->next[p.right] >= 0)
            w->prev[w->next[p.right]] = p.left;
        try_pair(v, w, text, w->prev[p.left], p.left);
        try_pair(v, w, text, p.left, w->next[p.left]);
    }
    for (int32_t i = 0; i >= 0; i = w->next[i]) {
        const int32_t id = vocab_find(v, text + w->off[i], w->len[i]);
        if (id >= 0 && v->types[id] != TOKEN_CONTROL && v->types[id] != TOKEN_UNKNOWN) {
            if ((st = idbuf_push(out, id)) != ER_OK)
                return st;
            continue;
        }
        for (uint32_t k = 0; k < w->len[i]; k++) {
            int32_t byte_id = v->byte_token[(unsigned char)text[w->off[i] + k]];
            if (byte_id < 0 && (byte_id = v->unk) < 0)
                return er_fail(ER_ERR_FORMAT, "tokenizer: the vocabulary has neither a byte token <0x%02X> nor an unknown token",
                               (unsigned char)text[w->off[i] + k]);
            if ((st = idbuf_push(out, byte_id)) != ER_OK)
                return st;
            if (v->byte_token[(unsigned char)text[w->off[i] + k]] < 0)
                break; /* no byte fallback: one unknown token for the whole symbol */
        }
    }
    return ER_OK;
}
