/*
 * bpe.c - byte-level BPE of one pre-token, and the merge scratch shared with spm.c.
 *
 * The pre-token starts as one symbol per byte (the token of its byte-level character).
 * Every adjacent pair that has a merge goes into a min-heap keyed by (rank, position);
 * the lowest is merged, and the pairs it forms with its neighbours are pushed. A popped
 * pair is skipped when either side changed since it was pushed (lazy deletion). This is
 * Hugging Face's and llama.cpp's order exactly (lowest rank first, leftmost on ties), in
 * O(n log n): a 100 KB pre-token of one repeated character costs milliseconds.
 */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

er_status idbuf_push(idbuf *b, int32_t id) {
    if (b->n == b->cap) {
        const int64_t cap = b->cap ? 2 * b->cap : 256;
        int32_t *p = realloc(b->ids, (size_t)cap * sizeof *p);
        if (!p)
            return er_fail(ER_ERR_NO_MEMORY, "tokenizer: out of memory for %lld token ids", (long long)cap);
        b->ids = p;
        b->cap = cap;
    }
    b->ids[b->n++] = id;
    return ER_OK;
}

/* Grows the per-symbol arrays to n_symbols and the heap to 2 * n_symbols entries. */
er_status merge_work_reserve(merge_work *w, size_t n_symbols) {
    if (n_symbols <= w->cap)
        return ER_OK;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < n_symbols)
        cap *= 2;
    int32_t *id = realloc(w->id, cap * sizeof *id);
    if (id)
        w->id = id;
    int32_t *prev = realloc(w->prev, cap * sizeof *prev);
    if (prev)
        w->prev = prev;
    int32_t *next = realloc(w->next, cap * sizeof *next);
    if (next)
        w->next = next;
    uint32_t *len = realloc(w->len, cap * sizeof *len);
    if (len)
        w->len = len;
    size_t *off = realloc(w->off, cap * sizeof *off);
    if (off)
        w->off = off;
    merge_pair *heap = realloc(w->heap, 2 * cap * sizeof *heap);
    if (heap)
        w->heap = heap;
    if (!id || !prev || !next || !len || !off || !heap)
        return er_fail(ER_ERR_NO_MEMORY, "tokenizer: out of memory for %zu symbols", cap);
    w->cap = cap;
    w->heap_cap = 2 * cap;
    return ER_OK;
}

void merge_work_free(merge_work *w) {
    free(w->id);
    free(w->prev);
    free(w->next);
    free(w->len);
    free(w->off);
    free(w->heap);
    strbuf_free(&w->text);
    memset(w, 0, sizeof *w);
}

static int pair_before(const merge_pair *a, const merge_pair *b) {
    return a->priority > b->priority || (a->priority == b->priority && a->left < b->left);
}

void merge_heap_push(merge_work *w, const merge_pair *p) {
    merge_pair *h = w->heap;
    size_t i = w->heap_n++;
    while (i > 0) {
        const size_t parent = (i - 1) / 2;
        if (!pair_before(p, &h[parent]))
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = *p;
}

merge_pair merge_heap_pop(merge_work *w) {
    merge_pair *h = w->heap;
    const merge_pair top = h[0], last = h[--w->heap_n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= w->heap_n)
            break;
        if (child + 1 < w->heap_n && pair_before(&h[child + 1], &h[child]))
            child++;
        if (!pair_before(&h[child], &last))
            break;
        h[i] = h[child];
        i = child;
    }
    if (w->heap_n)
        h[i] = last;
    return top;
}

static void try_pair(const vocab *v, merge_work *w, int32_t left, int32_t right) {
    int32_t rank, result;
    if (left < 0 || right < 0 || !vocab_merge_find(v, w->id[left], w->id[right], &rank, &result))
        return;
    const merge_pair p = {-(double)rank, left, right, w->id[left], w->id[right], result, 0}; /* low ranks first */
    /* the heap never holds more than one entry per live adjacent pair plus the stale
     * ones popped later: each merge pushes at most 2, and n symbols allow n - 1 merges */
    merge_heap_push(w, &p);
}

er_status bpe_encode(const vocab *v, merge_work *w, const char *piece, size_t n, idbuf *out) {
    er_status st;
    if (n == 0)
        return ER_OK;
    if (n > INT32_MAX / 2)
        return er_fail(ER_ERR_INVALID_ARG, "tokenizer: a pre-token of %zu bytes is too long", n);
    const unsigned char *s = (const unsigned char *)piece;
    if (v->ignore_merges && n > 1) {
        /* Llama-3: a pre-token that is a token is taken whole, whatever the merges say */
        w->text.len = 0;
        if ((st = strbuf_reserve(&w->text, 2 * n)) != ER_OK)
            return st;
        for (size_t i = 0; i < n; i++) {
            const char *c = v->byte_char[s[i]];
            w->text.data[w->text.len++] = c[0];
            if (c[1])
                w->text.data[w->text.len++] = c[1];
        }
        const int32_t id = vocab_find(v, w->text.data, w->text.len);
        if (id >= 0)
            return idbuf_push(out, id);
    }
    if ((st = merge_work_reserve(w, n)) != ER_OK)
        return st;
    for (size_t i = 0; i < n; i++) {
        int32_t id = v->byte_token[s[i]];
        if (id < 0 && (id = v->unk) < 0)
            return er_fail(ER_ERR_FORMAT, "tokenizer: the vocabulary has no token for byte 0x%02X", s[i]);
        w->id[i] = id;
        w->prev[i] = (int32_t)i - 1;
        w->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    w->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        try_pair(v, w, (int32_t)i, (int32_t)i + 1);
    while (w->heap_n) {
        const merge_pair p = merge_heap_pop(w);
        if (w->id[p.left] != p.left_id || w->next[p.left] != p.right || w->id[p.right] != p.right_id)
            continue; /* stale: a side was merged into something else */
        const int32_t after = w->next[p.right];
        w->id[p.left] = p.result;
        w->id[p.right] = -1;
        w->next[p.left] = after;
        if (after >= 0)
            w->prev[after] = p.left;
        try_pair(v, w, w->prev[p.left], p.left);
        try_pair(v, w, p.left, after);
    }
    for (int32_t i = 0; i >= 0; i = w->next[i])
        if ((st = idbuf_push(out, w->id[i])) != ER_OK)
            return st;
    return ER_OK;
}
