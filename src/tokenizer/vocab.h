/*
 * vocab.h - the token vocabulary from GGUF metadata, for turning ids into text.
 *
 * This is the decoding half only (id -> bytes); text -> ids is the tokenizer issue.
 * Token strings stay views into the file mapping.
 */
#ifndef ER_TOKENIZER_VOCAB_H
#define ER_TOKENIZER_VOCAB_H

#include <stdint.h>

#include "edgerunner.h"
#include "io/gguf.h"

enum vocab_kind { VOCAB_NONE, VOCAB_SPM, VOCAB_BPE };

typedef struct vocab {
    enum vocab_kind kind;
    int64_t n_tokens;
    const gguf_string *tokens; /* (n_tokens) into the file */
    const gguf_value *types;   /* tokenizer.ggml.token_type array, or NULL */
} vocab;

/* Binds tokenizer.ggml.model / tokens / token_type; a file without them gets VOCAB_NONE. */
er_status vocab_load(const gguf_file *file, const char *path, vocab *out);

/* See er_token_to_piece. */
int64_t vocab_token_to_piece(const vocab *v, int32_t id, char *buf, int64_t cap);

#endif
