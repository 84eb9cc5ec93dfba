/*
 * edgerunner.h - the one public header of EdgeRunner-C.
 *
 * Using the library, in four steps:
 *   1. er_model_load() maps a GGUF file read-only, validates it and binds the weights.
 *      A loaded model is shared read-only: any number of contexts may use it.
 *   2. er_context_create() makes a context: its own KV cache and scratch, sized once.
 *      A context is used by one thread at a time.
 *   3. er_context_decode() feeds tokens (a whole prompt in one batched pass, or one
 *      generated token); er_context_logits() gives the logits of the last token fed.
 *      er_generate_greedy() does the whole greedy loop with a per-token callback;
 *      er_sampler + er_generate() sample (penalties, temperature, top-k/p, min-p, seed).
 *   4. Text in and out: er_model_vocab() (or er_vocab_load() on any GGUF) gives the
 *      tokenizer; er_tokenize() / er_detokenize() and the streaming er_detokenizer turn
 *      text into ids and back; er_chat_apply_template() renders a conversation with the
 *      model's chat template.
 *   Or, in a few lines: er_model_open(), er_context_create(), er_stream_text() or
 *   er_generate_text() (text in, text out; see "text in, text out" below).
 *
 * Errors: every fallible call returns an er_status. On failure, er_last_error() gives a
 * message naming what was wrong and where (file, tensor, byte offset). The message is
 * kept per thread until that thread's next failing call. The library never prints,
 * exits or aborts on bad input.
 */
#ifndef EDGERUNNER_H
#define EDGERUNNER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum er_status {
    ER_OK = 0,
    ER_ERR_INVALID_ARG,  /* NULL pointer, zero size, out-of-range value from the caller */
    ER_ERR_IO,           /* open/stat/mmap failed */
    ER_ERR_FORMAT,       /* malformed or truncated file, inconsistent metadata */
    ER_ERR_UNSUPPORTED,  /* valid file, but a type or architecture we do not run */
    ER_ERR_NO_MEMORY,
    ER_ERR_CONTEXT_FULL, /* the tokens do not fit in the context's KV cache */
    ER_ERR_DEVICE,       /* no usable GPU, or a CUDA call failed */
} er_status;

/* A short constant name for a status ("ER_ERR_FORMAT"). */
const char *er_status_name(er_status status);

/* The message of this thread's last failing call ("" when there was none). */
const char *er_last_error(void);

typedef struct er_model er_model;
typedef struct er_context er_context;

/* ---- model -------------------------------------------------------------------------- */

typedef enum er_backend {
    ER_BACKEND_CPU = 0, /* threads and AVX2, or the plain-C reference (er_context_params.reference) */
    ER_BACKEND_CUDA,    /* one NVIDIA GPU (sm_90 build); weights uploaded once at load */
} er_backend;

typedef struct er_model_params {
    er_backend backend;
    /* NULL: the weights keep the file's types. Else a quantize target, as `edgerunner
     * quantize` names them ("Q8_0", "Q4_K_M", ...; case-insensitive): the F32, F16 and BF16
     * weights are converted while loading, to the bytes `edgerunner quantize` would write
     * (a Hugging Face folder, or a GGUF file in those types; an already quantized weight
     * is refused). The converted weights live in memory; the file's pages are dropped. */
    const char *type;
} er_model_params;

/* Whether this build has the CUDA backend and a usable device (0 or 1). */
int er_cuda_available(void);

er_model_params er_model_default_params(void);

/* The file stays mapped until er_model_free and must not be truncated or rewritten
 * meanwhile: reading a page that is gone raises SIGBUS, which the library does not catch
 * (it installs no signal handlers). */
er_status er_model_load(const char *path, const er_model_params *params, er_model **out);
void er_model_free(er_model *model); /* NULL-safe */

int64_t er_model_n_vocab(const er_model *model);
int64_t er_model_n_ctx_train(const er_model *model);
int32_t er_model_bos(const er_model *model); /* -1 when the file names none */
int32_t er_model_eos(const er_model *model); /* -1 when the file names none */
const char *er_model_arch(const er_model *model);

/* The text of token `id` as stored in the vocabulary, decoded to bytes: SentencePiece
 * spaces and <0xNN> byte tokens, or GPT-2 byte-level characters. Writes at most
 * `cap` bytes (no NUL) and returns the number written, or -1 when the model has no
 * vocabulary, the id is out of range or cap is negative. Control tokens decode to "". */
int64_t er_token_to_piece(const er_model *model, int32_t id, char *buf, int64_t cap);

/* ---- context ------------------------------------------------------------------------ */

/* Element type of the KV cache (llama.cpp's --cache-type-k / --cache-type-v). */
typedef enum er_kv_type {
    ER_KV_DEFAULT = 0, /* F16 on the CPU fast path and CUDA, as llama.cpp; F32 on the reference path */
    ER_KV_F32,
    ER_KV_F16,         /* half the bytes; each element rounded to 11 significant bits (~5e-4
                          relative) */
    ER_KV_Q8_0,        /* llama.cpp's q8_0: 34 bytes per 32 elements, each within 1/254 of its
                          block's largest magnitude. CUDA (K and V of one type there) and the
                          reference path; the CPU fast path refuses it (ER_ERR_UNSUPPORTED).
                          The reference path keeps its cache in F32 but rounds every K and V
                          through the type asked for: the values of such a cache, the oracle of
                          the other backends' F16 and Q8_0 caches */
} er_kv_type;

typedef struct er_context_params {
    int64_t n_ctx;   /* KV cache length in tokens; 0 = the model's training context, capped at 4096 */
    int64_t n_batch; /* most tokens processed in one pass; 0 = 512 */
    int n_threads;   /* 0 = every CPU this process may use (its affinity mask and cgroup CPU
                        quota), at most 64; more than it may use is capped to that number
                        (er_context_n_threads says how many) */
    int reference;   /* CPU backend: 1 = the plain-C reference kernels (F32 activations and KV
                        cache, one summation order, the same logits bit for bit at any n_threads):
                        the oracle every faster path is checked against */
    er_kv_type type_k; /* the cache's K rows; 0 = ER_KV_DEFAULT */
    er_kv_type type_v; /* the cache's V rows; 0 = ER_KV_DEFAULT */
    int n_seq_max;     /* sequences the context holds (er_context_decode_batch), each with n_ctx
                          positions of its own; 0 = 1, at most ER_MAX_SEQ */
} er_context_params;

er_context_params er_context_default_params(void);

er_status er_context_create(er_model *model, const er_context_params *params, er_context **out);
void er_context_free(er_context *ctx); /* NULL-safe */

int64_t er_context_n_ctx(const er_context *ctx);
int64_t er_context_n_past(const er_context *ctx); /* tokens in the KV cache */
int er_context_n_threads(const er_context *ctx);  /* the CPU threads it computes with */

/* Appends `n_tokens` tokens to the context (a prompt in batches of n_batch, or one
 * generated token). If `logits_all` is not NULL it receives the logits of every token
 * fed: (n_tokens, n_vocab) row-major. The logits of the last token are always kept and
 * returned by er_context_logits(). Fails with ER_ERR_CONTEXT_FULL, changing nothing,
 * when the tokens do not fit. */
er_status er_context_decode(er_context *ctx, const int32_t *tokens, int64_t n_tokens,
                            float *logits_all);

/* (n_vocab) logits of the last token decoded; NULL before the first decode. */
const float *er_context_logits(const er_context *ctx);

/* Forgets the KV cache from position `n_past` on (0 clears it). */
er_status er_context_rewind(er_context *ctx, int64_t n_past);

/* ---- several sequences in one pass (continuous batching) ------------------------------ */

/* Tokens of several sequences decoded together, as llama.cpp's llama_batch. A context
 * made with n_seq_max = S holds S sequences (ids 0..S-1), each with its own n_ctx
 * positions of KV cache; er_context_decode works on sequence 0. Rules, each checked (a
 * batch that breaks one fails with ER_ERR_INVALID_ARG naming the token, changing
 * nothing): at most n_batch tokens; a sequence's tokens are consecutive in the batch and
 * at its next positions in order (the first at er_context_seq_pos, then +1 each); a
 * sequence that would pass n_ctx fails with ER_ERR_CONTEXT_FULL.
 *
 * Batch invariance: a sequence's K/V and logits are bit-identical whatever other
 * sequences share the batch (each one's attention reads only its own keys, and the
 * matrix products choose their kernel by each sequence's own token count, not the
 * batch's). On the CPU fast path a chunk of ER_PROMPT_CHUNK_MIN (32) tokens or more of
 * one sequence is multiplied in f32, a shorter one with 8-bit activations: the same
 * tokens fed in chunks on either side of 32 can differ in the last bits. */
typedef struct er_batch {
    int64_t n_tokens;
    const int32_t *tokens;  /* (n_tokens) ids */
    const int32_t *seq_ids; /* (n_tokens) each token's sequence, in [0, n_seq_max) */
    const int64_t *pos;     /* (n_tokens) each token's position in its sequence */
    const int8_t *logits;   /* (n_tokens) non-zero: return this token's logits; NULL: none */
} er_batch;

/* Decodes a batch; `logits` receives (number of tokens asking, n_vocab) rows, in batch
 * order. NULL: the rows stay in the context, read with er_context_batch_logits until the
 * next decode (on CUDA in page-locked memory, copied from the device at full speed, as
 * llama.cpp's output buffer; a copy into an ordinary buffer takes several times as long:
 * 4.2 against 0.7 ms for 64 rows of Qwen3's vocabulary on the H200).
 * er_context_logits() is NULL afterwards. */
er_status er_context_decode_batch(er_context *ctx, const er_batch *batch, float *logits);
/* Row i (in batch order among the tokens that asked) of the last er_context_decode_batch
 * called with logits NULL, or NULL when there is no such row. */
const float *er_context_batch_logits(const er_context *ctx, int64_t i);

#define ER_MAX_SEQ 256 /* most sequences in one context (llama.cpp's LLAMA_MAX_SEQ) */

/* Chunks of a sequence of at least this many tokens give the same numbers however its
 * tokens are cut into them (the CPU fast path's f32 products); shorter ones their own. */
#define ER_PROMPT_CHUNK_MIN 32

int er_context_n_seq(const er_context *ctx);
int64_t er_context_n_batch(const er_context *ctx); /* most tokens in one batch */
/* Positions sequence `seq` holds (its next position); -1 for a sequence that is not there. */
int64_t er_context_seq_pos(const er_context *ctx, int32_t seq);
/* Forgets sequence `seq` from position p0 on (0: all of it; its rows are free again). */
er_status er_context_seq_remove(er_context *ctx, int32_t seq, int64_t p0);
/* Sequence dst becomes a copy of the first n positions of src (dst's own are dropped):
 * a shared prefix (a system prompt, earlier turns) reused instead of recomputed. */
er_status er_context_seq_copy(er_context *ctx, int32_t src, int32_t dst, int64_t n);

/* ---- generation --------------------------------------------------------------------- */

/* The index of the largest logit (the first one on ties). */
int32_t er_argmax(const float *logits, int64_t n_vocab);

/* Called with each generated token; return non-zero to stop generation. */
typedef int (*er_token_callback)(int32_t token, void *user);

typedef struct er_generate_params {
    int64_t n_predict; /* most tokens to generate */
    int ignore_eos;    /* non-zero: do not stop at the model's end-of-sequence token */
} er_generate_params;

/* Feeds the prompt, then greedily generates up to n_predict tokens, calling `on_token`
 * for each (the EOS token that stops generation is not reported). Stops early, without
 * error, when the context is full; *n_generated (may be NULL) says how many were made. */
er_status er_generate_greedy(er_context *ctx, const int32_t *prompt, int64_t n_prompt,
                             const er_generate_params *params, er_token_callback on_token,
                             void *user, int64_t *n_generated);

/* ---- sampling ---------------------------------------------------------------------- */

/* A sampler turns logits into the next token. Its stages run in this order, each one
 * skipped when its parameter has the value marked "off":
 *   1. repetition penalty (llama.cpp semantics): every token seen in the last
 *      repeat_last_n tokens of history has its logit divided by repeat_penalty when
 *      positive, multiplied by it when negative or zero;
 *   2. frequency and presence penalties (OpenAI / llama.cpp): logit -= count *
 *      frequency_penalty + (count > 0) * presence_penalty, count over the same window;
 *   3. temperature: 0 means greedy, the largest penalized logit (the first on ties), and
 *      stages 4-7 are skipped; otherwise probabilities are softmax(logit / temperature),
 *      in double precision; -inf and NaN logits have probability 0;
 *   4. top-k: keep the k most probable tokens (ties broken by the smaller id);
 *   5. top-p (nucleus): keep the smallest most-probable prefix whose mass is >= top_p
 *      (at least one token);
 *   6. min-p: keep tokens whose probability is >= min_p times the largest one;
 *   7. draw: u = a uniform double in [0, 1) from xoshiro256** seeded by splitmix64(seed),
 *      (next() >> 11) * 2^-53; the token is the first whose cumulative renormalized
 *      probability, in the order left by the stages (probability descending when any of
 *      4-5 ran, else token id), exceeds u. Integer-only RNG: the same seed gives the same
 *      draws on every platform, and one draw per sampled token.
 * History: er_sampler_accept() appends a token (prompt tokens too, as llama.cpp does);
 * the penalties see the last repeat_last_n accepted tokens.
 * A sampler holds its own state (history, RNG, scratch sized once): one thread at a time. */
typedef struct er_sampler_params {
    float temperature;       /* 0 = greedy; default 1.0 */
    int32_t top_k;           /* <= 0: off; default 40 (larger than the vocabulary: off) */
    float top_p;             /* >= 1: off; default 0.9 */
    float min_p;             /* <= 0: off; default 0 */
    float repeat_penalty;    /* 1: off; default 1.0; must be > 0 */
    int32_t repeat_last_n;   /* tokens of history the penalties see; 0: off; default 64 */
    float frequency_penalty; /* 0: off */
    float presence_penalty;  /* 0: off */
    uint64_t seed;           /* default 0; any value is a valid seed */
} er_sampler_params;

typedef struct er_sampler er_sampler;

er_sampler_params er_sampler_default_params(void);
/* Greedy decoding: temperature 0, every other stage off. */
er_sampler_params er_sampler_greedy_params(void);

/* A sampler for logits of n_vocab entries. ER_ERR_INVALID_ARG on a negative or NaN
 * temperature, repeat_penalty <= 0, negative repeat_last_n, n_vocab <= 0. */
er_status er_sampler_create(const er_sampler_params *params, int64_t n_vocab, er_sampler **out);
void er_sampler_free(er_sampler *sampler); /* NULL-safe */
/* Forgets the history and re-seeds the RNG: the sampler is as just created. */
void er_sampler_reset(er_sampler *sampler);
/* Appends a token to the history the penalties see. */
er_status er_sampler_accept(er_sampler *sampler, int32_t token);
/* Chooses a token from (n_vocab) logits (left unchanged). Does not accept it. Fails with
 * ER_ERR_INVALID_ARG when no logit is finite or larger than -inf. */
er_status er_sampler_sample(er_sampler *sampler, const float *logits, int32_t *token);
/* Stages 1-2 alone, in place on (n_vocab) logits: what the penalties do to them. */
er_status er_sampler_apply_penalties(er_sampler *sampler, float *logits);
/* Non-zero when the sampler is plain greedy (temperature 0, no penalty). */
int er_sampler_is_greedy(const er_sampler *sampler);

/* Feeds the prompt (n_prompt may be 0 when the context already holds logits, e.g. after
 * an earlier generation), then generates up to n_predict tokens with `sampler` (NULL:
 * greedy), calling `on_token` with each; every prompt and generated token is accepted
 * into the sampler's history. Stops at the model's EOS (unless ignore_eos), when the
 * callback returns non-zero, or when the context is full (without error). A greedy
 * sampler runs er_generate_greedy, the GPU's device-side loop included. */
er_status er_generate(er_context *ctx, const int32_t *prompt, int64_t n_prompt, const er_generate_params *params,
                      er_sampler *sampler, er_token_callback on_token, void *user, int64_t *n_generated);

/* ---- text in, text out ---------------------------------------------------------------- */

/* The few-lines way in:
 *     er_model *model; er_context *ctx;
 *     er_model_open("model.gguf", &model);
 *     er_context_create(model, NULL, &ctx);
 *     er_stream_text(ctx, "Once upon a time", NULL, print_piece, NULL);
 * The prompt is appended to what the context holds (BOS added, as the model asks, only
 * when the context is empty), so successive calls continue one conversation; rewind the
 * context (er_context_rewind(ctx, 0)) to start afresh. */

/* er_model_load with default parameters (CPU backend). */
er_status er_model_open(const char *path, er_model **out);
/* tokenizer.chat_template of the model's file: *len bytes (not NUL-terminated) owned by
 * the model; NULL (and *len 0) when the file has none. `len` may be NULL. */
const char *er_model_chat_template(const er_model *model, int64_t *len);

/* Called with each generated token and the (n_vocab) logits it was chosen from (the
 * model's, before the sampler's penalties), before its text is streamed; return non-zero
 * to stop generation. An end-of-generation token that stops generation is not reported. */
typedef int (*er_token_logits_callback)(int32_t token, const float *logits, int64_t n_vocab, void *user);

typedef struct er_text_params {
    int64_t max_tokens;           /* most tokens to generate; <= 0: until a stop or a full context */
    er_sampler_params sampling;   /* default: er_sampler_default_params() */
    const char *const *stop;      /* (n_stop) strings that end generation; not part of the text */
    int64_t n_stop;
    int parse_special;            /* non-zero: control tokens' text in the prompt becomes those tokens */
    int ignore_eos;               /* non-zero: do not stop at end-of-generation tokens */
    er_token_logits_callback on_token; /* NULL: none. Set, every step's logits come to the host
                                          (no device-side greedy loop) */
    void *on_token_user;
} er_text_params;

/* Why generation ended. */
typedef enum er_stop_reason {
    ER_STOP_NONE = 0, /* it did not run (an error) */
    ER_STOP_EOG,      /* an end-of-generation token (EOS, end of turn) */
    ER_STOP_STRING,   /* one of the stop strings */
    ER_STOP_LENGTH,   /* max_tokens were generated */
    ER_STOP_CONTEXT,  /* the context is full */
    ER_STOP_CALLBACK, /* a callback returned non-zero */
} er_stop_reason;

typedef struct er_text_result {
    int64_t n_prompt;    /* tokens fed from the prompt */
    int64_t n_generated; /* tokens generated; the end-of-generation token is not counted */
    er_stop_reason stop;
    int64_t stop_index;  /* ER_STOP_STRING: which of params.stop matched; else -1 */
} er_text_result;

er_text_params er_text_default_params(void); /* max_tokens 256, default sampling, no stops */

/* Called with each piece of generated text as soon as it is whole UTF-8 and cannot be the
 * start of a stop string; return non-zero to stop generation. */
typedef int (*er_text_callback)(const char *text, int64_t len, void *user);

/* Tokenizes `prompt`, generates and streams the text (params NULL: the defaults). Stops
 * at an end-of-generation token (EOS, end of turn), a stop string, max_tokens, a full
 * context or the callback. A prompt that does not fit fails with ER_ERR_CONTEXT_FULL,
 * changing nothing. *n_generated (may be NULL) counts the tokens generated. */
er_status er_stream_text(er_context *ctx, const char *prompt, const er_text_params *params, er_text_callback on_text,
                         void *user, int64_t *n_generated);

/* The same from prompt ids (fed exactly, nothing added), with why it stopped in *result
 * (may be NULL). A prompt that does not fit fails with ER_ERR_CONTEXT_FULL naming both
 * lengths, changing nothing; an empty prompt continues from the logits the context holds. */
er_status er_stream_ids(er_context *ctx, const int32_t *prompt, int64_t n_prompt, const er_text_params *params,
                        er_text_callback on_text, void *user, er_text_result *result);

/* The same, returning the whole text in *text: malloc'd, NUL-terminated, free with
 * er_free(); *len (may be NULL) gets its length. */
er_status er_generate_text(er_context *ctx, const char *prompt, const er_text_params *params, char **text,
                           int64_t *len);

/* One sequence's text step by step, from logits the caller computes (a server decoding
 * many sequences in one er_context_decode_batch): the sampling, end-of-generation
 * tokens, stop strings, max_tokens, UTF-8-whole text pieces and the on_token hook of
 * er_stream_ids, one token at a time. Fed the same logits, it makes er_stream_ids's
 * tokens and text. One thread at a time per generator. */
typedef struct er_text_gen er_text_gen;

/* params NULL: er_text_default_params(); params->stop must outlive the generator. */
er_status er_text_gen_create(const er_model *model, const er_text_params *params, er_text_callback on_text,
                             void *user, er_text_gen **out);
/* The prompt's ids into the sampler's history (the penalties see them, as er_stream_ids's). */
er_status er_text_gen_prompt(er_text_gen *gen, const int32_t *prompt, int64_t n_prompt);
/* Chooses the next token from (n_vocab) logits and streams its text; *done non-zero:
 * generation ended (an end-of-generation token, which is not to be fed, a stop string,
 * max_tokens, the callbacks), else *token is the one to feed next. */
er_status er_text_gen_step(er_text_gen *gen, const float *logits, int32_t *token, int *done);
/* Ends generation: the text held back is streamed (unless a stop string or callback
 * ended it) and *result (may be NULL) says why; `if_running` is the reason when it had
 * not ended by itself (ER_STOP_CONTEXT for a full context, ER_STOP_CALLBACK, ...). */
er_status er_text_gen_finish(er_text_gen *gen, er_stop_reason if_running, er_text_result *result);
void er_text_gen_free(er_text_gen *gen); /* NULL-safe */

/* Frees memory the library returned (er_generate_text's text). NULL-safe. */
void er_free(void *ptr);

/* ---- thread safety -------------------------------------------------------------------- */
/* A loaded er_model (and its er_vocab) is read-only after er_model_load: any number of
 * threads may use it at once, each through its own er_context. An er_context, er_sampler
 * and er_detokenizer are used by one thread at a time (no internal locking). Two threads
 * generating on two contexts of one model give exactly the results of running them one
 * after the other. er_last_error() is per thread. */

/* ---- tokenizer and chat template ---------------------------------------------------- */

/* A tokenizer: the vocabulary (byte-level BPE or SentencePiece), its special tokens and
 * its chat template, from a GGUF file's tokenizer.* metadata. A model's comes with it
 * (er_model_vocab); er_vocab_load reads one from any GGUF file, including vocab-only files
 * without tensors. Read-only once loaded: any number of threads may use one. */
typedef struct er_vocab er_vocab;

er_status er_vocab_load(const char *path, er_vocab **out);
void er_vocab_free(er_vocab *vocab); /* NULL-safe; only for er_vocab_load's vocabularies */

/* The model's tokenizer, owned by the model; NULL when the file has none we know
 * (tokenizer.ggml.model other than "llama" or "gpt2"). */
const er_vocab *er_model_vocab(const er_model *model);

int64_t er_vocab_n_tokens(const er_vocab *vocab);
int32_t er_vocab_bos(const er_vocab *vocab); /* -1 when the file names none */
int32_t er_vocab_eos(const er_vocab *vocab); /* -1 when the file names none */
/* Non-zero for tokens that end generation: EOS, end of turn (tokenizer.ggml.eot_token_id,
 * eom) and the end-of-turn tokens llama.cpp recognizes by text (<|im_end|>, <|eot_id|>,
 * <|endoftext|>, <end_of_turn>, ...). */
int er_vocab_is_eog(const er_vocab *vocab, int32_t id);

enum {
    /* add BOS (and EOS) as the file asks: tokenizer.ggml.add_bos_token (default: on for
     * SentencePiece and Llama-3), add_eos_token (default off) */
    ER_TOKENIZE_ADD_SPECIAL = 1,
    /* the text of control tokens ("<|im_start|>", "<s>") becomes those tokens; without
     * this flag it is plain text. User-defined tokens (e.g. Qwen3's <think>) are always
     * recognized, as in Hugging Face tokenizers and llama.cpp. */
    ER_TOKENIZE_PARSE_SPECIAL = 2,
};

/* Text (len bytes, any bytes) -> token ids, the same ids as the model's own tokenizer
 * (Hugging Face tokenizers; llama.cpp's test vectors). Writes at most `cap` ids and sets
 * *n_ids to the number the whole text needs, like snprintf: when that exceeds cap, only
 * the first cap ids were written; call again with a buffer of *n_ids (cap 0 and ids NULL
 * ask for the count alone). No bound on the count follows from len: a byte the vocabulary
 * lacks falls back to byte tokens (a space without SentencePiece's U+2581 token is 3),
 * and NFC normalization can make the text longer. */
er_status er_tokenize(const er_vocab *vocab, const char *text, int64_t len, int flags, int32_t *ids,
                      int64_t cap, int64_t *n_ids);

/* er_tokenize into a malloc'd *ids (free with er_free) of *n_ids ids, sized by the count
 * er_tokenize reports. With ER_TOKENIZE_ADD_SPECIAL, a text that begins with BOS itself (a
 * chat template's rendering) does not get a second one. */
er_status er_tokenize_prompt(const er_vocab *vocab, const char *text, int64_t len, int flags, int32_t **ids,
                             int64_t *n_ids);

enum {
    ER_DETOKENIZE_SPECIAL = 1,     /* control tokens as their text; without it they give nothing */
    ER_DETOKENIZE_STRIP_SPACE = 2, /* drop the space SentencePiece puts before the first word */
};

/* Ids -> text: the inverse of er_tokenize (decode(encode(x)) == x, up to the NFC
 * normalization some models apply). Writes at most `cap` bytes (no NUL) and sets *n_bytes
 * to the full length, like snprintf. */
er_status er_detokenize(const er_vocab *vocab, const int32_t *ids, int64_t n_ids, int flags, char *buf,
                        int64_t cap, int64_t *n_bytes);

/* Streaming detokenization: push each token as it comes; what comes back is only whole
 * UTF-8 characters (the bytes of a character split across tokens are held back until it
 * is complete), so it can be printed at once. The text stays valid until the next call. */
typedef struct er_detokenizer er_detokenizer;

er_status er_detokenizer_create(const er_vocab *vocab, int flags, er_detokenizer **out);
er_status er_detokenizer_push(er_detokenizer *detok, int32_t id, const char **text, int64_t *len);
/* Whatever is held back (an incomplete character, as its bytes); then starts afresh. */
er_status er_detokenizer_flush(er_detokenizer *detok, const char **text, int64_t *len);
void er_detokenizer_free(er_detokenizer *detok); /* NULL-safe */

typedef struct er_chat_message {
    const char *role; /* "system", "user", "assistant", "tool" */
    const char *content;
} er_chat_message;

/* Renders a conversation through the vocabulary's chat template (tokenizer.chat_template,
 * or ChatML when the file has none, as llama.cpp does) exactly as Hugging Face's
 * apply_chat_template does with jinja2: the variables messages, add_generation_prompt,
 * bos_token and eos_token. Templates are run by a Jinja subset; a construct outside it
 * fails with ER_ERR_UNSUPPORTED naming it and its line. Writes at most `cap` bytes
 * including a terminating NUL and sets *len to the full length (without the NUL), like
 * snprintf. */
er_status er_chat_apply_template(const er_vocab *vocab, const er_chat_message *messages, int64_t n_messages,
                                 int add_generation_prompt, char *buf, int64_t cap, int64_t *len);

/* The same with every template variable given as one JSON object, e.g.
 * {"messages": [{"role": "assistant", "content": "", "tool_calls": [...]}], "tools": [...],
 *  "add_generation_prompt": true, "enable_thinking": false}. bos_token and eos_token are
 * added unless given. `template_source` NULL: the vocabulary's template. */
er_status er_chat_render_json(const er_vocab *vocab, const char *template_source, const char *json, char *buf,
                              int64_t cap, int64_t *len);

#ifdef __cplusplus
}
#endif

#endif /* EDGERUNNER_H */
