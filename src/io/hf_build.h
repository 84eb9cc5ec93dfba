/*
 * hf_build.h - internal to src/io/hf*.c: the gguf_file being built from a folder (its
 * metadata pairs, its tensors) and what it will own.
 */
#ifndef ER_IO_HF_BUILD_H
#define ER_IO_HF_BUILD_H

#include <stddef.h>
#include <stdint.h>

#include "core/json_doc.h"
#include "io/gguf.h"
#include "io/safetensors.h"

/* Something the built file owns, released by gguf_close. */
typedef struct hf_owned {
    void *p;
    void (*release)(void *p);
} hf_owned;

typedef struct hf_build {
    const char *dir;
    gguf_kv *kv; /* (n_kv) */
    size_t n_kv, cap_kv;
    gguf_tensor *tensors; /* (n_tensors) */
    size_t n_tensors, cap_tensors;
    hf_owned *owned; /* (n_owned) */
    size_t n_owned, cap_owned;
    st_file **shards; /* (n_shards) the SafeTensors files, owned through `owned` */
    size_t n_shards;
    int64_t n_vocab; /* config.json's vocab_size, 0 when unknown: the tokens are padded to it */
    int32_t bos_id, eos_id; /* config.json's, -1: none; the tokenizer's own take precedence */
} hf_build;

/* Takes p (may be NULL) into the file's ownership; on failure releases it at once. */
er_status hf_own(hf_build *b, void *p, void (*release)(void *));
/* malloc owned by the file. */
er_status hf_alloc(hf_build *b, size_t size, void **out);
/* A copy of s, NUL-terminated, owned by the file. */
er_status hf_strdup(hf_build *b, const char *s, const char **out);

/* Metadata pairs; the key must outlive the file (a literal, or hf_strdup's). A value's
 * strings and arrays belong to the file too (gguf_close frees an array's strs). */
er_status hf_kv(hf_build *b, const char *key, gguf_value value);
er_status hf_kv_u32(hf_build *b, const char *key, uint32_t v);
er_status hf_kv_f32(hf_build *b, const char *key, double v);
er_status hf_kv_bool(hf_build *b, const char *key, int v);
er_status hf_kv_str(hf_build *b, const char *key, const char *s, size_t len);

/* Reads DIR/name into a JSON tree owned by the file; *out NULL (and ER_OK) when the file
 * does not exist and `optional`. */
er_status hf_read_json(hf_build *b, const char *name, int optional, const json_doc **out);
/* Reads DIR/name (a text file of at most 16 MiB) into n bytes and a NUL, owned by the
 * file; *out NULL (and ER_OK) when the file does not exist and `optional`. */
er_status hf_read_text(hf_build *b, const char *name, int optional, const char **out, size_t *n);

/* tokenizer.json and tokenizer_config.json -> tokenizer.ggml.* keys (hf_tokenizer.c);
 * nothing when the folder has no tokenizer.json. */
er_status hf_tokenizer(hf_build *b);

#endif
