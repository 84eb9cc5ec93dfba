/*
 * tokenizer.h - the pieces of text -> ids, internal to src/tokenizer:
 *   tokenize.c  er_tokenize: special tokens split out, BOS/EOS, dispatch (and ids -> text)
 *   pretok.c    the BPE pre-tokenizers (the split regexes of GPT-2, Llama-3, Qwen2)
 *   bpe.c       byte-level BPE of one pre-token: merges by rank, with a priority queue
 *   spm.c       SentencePiece of one text fragment: merges by score, byte fallback
 */
#ifndef ER_TOKENIZER_TOKENIZER_H
#define ER_TOKENIZER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

/* A growable array of token ids. */
typedef struct idbuf {
    int32_t *ids;
    int64_t n, cap;
} idbuf;

er_status idbuf_push(idbuf *b, int32_t id);

/* A candidate merge of adjacent symbols left and right. The heap pops the highest
 * priority first, the leftmost among equals (BPE: minus the merge's rank; SPM: the
 * merged token's score). A popped pair is stale if a side changed since the push:
 * BPE compares the sides' ids, SPM their byte lengths. */
typedef struct merge_pair {
    double priority; /* exact for ranks and for float scores */
    int32_t left, right;       /* symbol indices */
    int32_t left_id, right_id; /* BPE: the sides' ids when pushed */
    int32_t result;            /* BPE: the merged token */
    uint32_t size;             /* SPM: bytes of left + right when pushed */
} merge_pair;

/* Merge scratch shared by bpe.c and spm.c, grown as needed and reused across pieces. */
typedef struct merge_work {
    int32_t *id;     /* (cap) BPE: symbol token ids */
    int32_t *prev;   /* (cap) linked list of live symbols, -1 at the ends */
    int32_t *next;   /* (cap) */
    uint32_t *len;   /* (cap) SPM: symbol lengths in bytes (0: merged away) */
    size_t *off;     /* (cap) SPM: symbol byte offsets */
    merge_pair *heap; /* (heap_cap) candidate merges */
    size_t cap, heap_n, heap_cap;
    strbuf text;     /* BPE: the pre-token as byte-level characters (ignore_merges) */
} merge_work;

er_status merge_work_reserve(merge_work *w, size_t n_symbols);
void merge_work_free(merge_work *w);
void merge_heap_push(merge_work *w, const merge_pair *p);
merge_pair merge_heap_pop(merge_work *w);

/* Calls emit(user, piece, n) for each pre-token of text[0..n), in order; the pre-tokens
 * cover the text exactly. Stops at the first error emit returns. */
typedef er_status (*pretok_emit)(void *user, const char *piece, size_t n);
er_status pretok_split(enum vocab_pre pre, const char *text, size_t n, pretok_emit emit, void *user);

/* Appends the BPE ids of one pre-token. */
er_status bpe_encode(const vocab *v, merge_work *w, const char *piece, size_t n, idbuf *out);

/* Appends the SentencePiece ids of text[0..n) (spaces already escaped to U+2581). */
er_status spm_encode(const vocab *v, merge_work *w, const char *text, size_t n, idbuf *out);

#endif
