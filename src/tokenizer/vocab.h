/*
 * vocab.h - the tokenizer's vocabulary, built from GGUF metadata (the keys llama.cpp's
 * converter writes):
 *   tokenizer.ggml.model        "llama" (SentencePiece) or "gpt2" (byte-level BPE)
 *   tokenizer.ggml.pre          BPE pre-tokenizer: "gpt-2", "llama-bpe"/"llama3", "qwen2", ...
 *   tokenizer.ggml.tokens       (n_tokens) strings, by id
 *   tokenizer.ggml.token_type   (n_tokens) llama.cpp token types (1 normal ... 6 byte)
 *   tokenizer.ggml.scores       (n_tokens) SentencePiece merge scores
 *   tokenizer.ggml.merges       BPE merges by rank, "left right"
 *   tokenizer.ggml.{bos,eos,eot,eom,unknown,padding,seperator}_token_id
 *   tokenizer.ggml.add_bos_token, add_eos_token, add_space_prefix
 *   tokenizer.chat_template
 *
 * Invariants after vocab_load succeeds on a file with a tokenizer: every special id is in
 * range or -1; every merge names two tokens and a merged token that exist; every byte has
 * a token (BPE: its byte-level character; SentencePiece: <0xNN>, when byte fallback
 * exists) or -1. Token strings and the template stay views into the file mapping.
 */
#ifndef ER_TOKENIZER_VOCAB_H
#define ER_TOKENIZER_VOCAB_H

#include <stdint.h>

#include "edgerunner.h"
#include "io/gguf.h"

enum vocab_kind { VOCAB_NONE, VOCAB_SPM, VOCAB_BPE };

/* BPE pre-tokenizers: the split regexes of the model families (see pretok.c). */
enum vocab_pre { PRE_NONE, PRE_GPT2, PRE_LLAMA3, PRE_QWEN2, PRE_SMOLLM };

/* llama.cpp's token types (LLAMA_TOKEN_TYPE_*), as stored in token_type. */
enum { TOKEN_NORMAL = 1, TOKEN_UNKNOWN = 2, TOKEN_CONTROL = 3, TOKEN_USER_DEFINED = 4, TOKEN_UNUSED = 5, TOKEN_BYTE = 6 };

typedef struct vocab_merge {
    uint64_t key;   /* left id << 32 | right id */
    int32_t rank;   /* position in tokenizer.ggml.merges: lower merges first */
    int32_t result; /* id of left + right; -1 marks an empty slot */
} vocab_merge;

typedef struct er_vocab vocab;
struct er_vocab {
    enum vocab_kind kind;
    enum vocab_pre pre;
    int64_t n_tokens;
    const gguf_string *tokens; /* (n_tokens) into the file */
    uint8_t *types;            /* (n_tokens) TOKEN_*; NORMAL where the file has no types */
    float *scores;             /* (n_tokens) SentencePiece only, else NULL */

    int32_t bos, eos, eot, eom, unk, pad, sep; /* -1: none */
    int add_bos, add_eos;
    int add_space_prefix; /* SentencePiece: a space before the text (after each special token) */
    int ignore_merges;    /* BPE (Llama-3): a pre-token that is a whole token is taken as is */
    int nfc;              /* BPE (Qwen2): NFC-normalize text before pre-tokenizing */

    int32_t *by_text;  /* (by_text_mask + 1) open-addressing table: token text -> id, -1 = empty */
    uint64_t by_text_mask;
    vocab_merge *merges; /* (merges_mask + 1) open-addressing table of BPE merges */
    uint64_t merges_mask;
    int64_t n_merges;
    int32_t byte_token[256]; /* the token of each single byte, or -1 */
    char byte_char[256][3];  /* BPE: each byte's byte-level character, UTF-8, NUL-padded */
    int16_t char_byte[0x144]; /* BPE: the byte each code point below U+0144 stands for, or -1 */

    /* Tokens matched in text before tokenizing it (control, user-defined, unknown; not
     * empty), grouped by first byte, longest first: specials[special_start[b] ..
     * special_start[b + 1]) start with byte b. */
    int32_t *specials;
    int32_t special_start[257];

    uint8_t *is_eog; /* (n_tokens) end of generation: eos, eot, eom and llama.cpp's list */
    gguf_string chat_template; /* {NULL, 0} when the file has none */

    gguf_file *owned_file; /* set by er_vocab_load: the mapping this vocab owns */
};

/* Binds and indexes the tokenizer metadata of `file` (which must outlive it). A file
 * without tokenizer.ggml.model/tokens gets VOCAB_NONE and ER_OK; inconsistent tokenizer
 * metadata gives ER_ERR_FORMAT naming the key and index. `path` is for messages. */
er_status vocab_load(const gguf_file *file, const char *path, vocab *out);
void vocab_free(vocab *v); /* the contents; NULL-safe */

/* The id of the token whose text is s[0..n), or -1. */
int32_t vocab_find(const vocab *v, const char *s, uint64_t n);

/* The rank and result of merging tokens (left, right); 0 when there is no such merge. */
int vocab_merge_find(const vocab *v, int32_t left, int32_t right, int32_t *rank, int32_t *result);

/* The bytes of token id: SentencePiece spaces and <0xNN> byte tokens, or GPT-2
 * byte-level characters, decoded; control and unknown tokens give "" unless `special`.
 * Writes at most cap bytes and returns the full length, or -1 for an id out of range. */
int64_t vocab_piece(const vocab *v, int32_t id, int special, char *buf, int64_t cap);

/* See er_token_to_piece. */
int64_t vocab_token_to_piece(const vocab *v, int32_t id, char *buf, int64_t cap);

#endif
