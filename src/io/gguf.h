/*
 * gguf.h - GGUF reader: parse and validate only; never trusts the file.
 *
 * The format (versions 2 and 3, little-endian), in order:
 *   1. magic "GGUF", u32 version, u64 n_tensors, u64 n_kv
 *   2. n_kv metadata pairs: string key, u32 value type, value. A string is u64 length +
 *      bytes (no NUL); an array is u32 element type + u64 count + elements, and may nest.
 *   3. n_tensors tensor infos: string name, u32 n_dims (1..4), u64 ne[n_dims] (ne[0] is
 *      the contiguous dimension), u32 GGML type, u64 offset from the data section
 *   4. padding to general.alignment (u32, default 32), then the data section.
 *
 * gguf_parse() checks every count, length and offset against the bytes that remain
 * before using it (sizes multiplied with overflow checks), so that a hostile file gives
 * an ER_ERR_FORMAT whose message names the problem and the byte offset, never a crash.
 * Strings and tensor data are views into the caller's buffer (usually the mapping).
 */
#ifndef ER_IO_GGUF_H
#define ER_IO_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "edgerunner.h"

enum gguf_value_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT,
};

enum { GGUF_MAX_DIMS = 4, GGUF_DEFAULT_ALIGNMENT = 32, GGUF_MAX_ARRAY_DEPTH = 8 };

typedef struct gguf_string {
    const char *data; /* into the file, not NUL-terminated */
    uint64_t len;
} gguf_string;

typedef struct gguf_value gguf_value;
struct gguf_value {
    enum gguf_value_type type;
    union {
        uint64_t u64; /* UINT8/16/32/64 and BOOL, widened */
        int64_t i64;  /* INT8/16/32/64, widened */
        double f64;   /* FLOAT32/64, widened */
        gguf_string str;
        struct {
            enum gguf_value_type type; /* element type */
            uint64_t n;
            const uint8_t *raw;  /* scalar elements: n packed little-endian values in the file */
            gguf_string *strs;   /* STRING elements: (n) */
            gguf_value *items;   /* ARRAY elements: (n), each an ARRAY value */
        } arr;
    };
};

typedef struct gguf_kv {
    gguf_string key;
    gguf_value value;
} gguf_kv;

typedef struct gguf_tensor {
    gguf_string name;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* unused dimensions are 1 */
    uint32_t type;             /* enum er_type; always a known type */
    uint64_t offset;           /* from the start of the data section */
    size_t size;               /* bytes */
    const uint8_t *data;       /* into the file, checked to lie inside it */
} gguf_tensor;

typedef struct gguf_file {
    const uint8_t *base; /* (size) the whole file */
    size_t size;
    void *mapping; /* non-NULL when gguf_open mapped the file; gguf_close unmaps it */
    uint32_t version;
    uint64_t n_kv;
    gguf_kv *kv; /* (n_kv) */
    uint64_t n_tensors;
    gguf_tensor *tensors; /* (n_tensors) */
    uint64_t alignment;
    uint64_t data_offset; /* start of the data section */
    /* A file built in memory rather than parsed (a Hugging Face folder, io/hf.h) owns more
     * than kv and tensors (its mappings, converted tensors, strings): gguf_close calls
     * owner_free(owner) after freeing kv and tensors. NULL for a parsed file. */
    void *owner;
    void (*owner_free)(void *owner);
    /* Such a file's gguf_drop_pages: drops what its mappings hold of [p, p + n), or all of
     * them when p is NULL. NULL when it maps nothing. */
    void (*owner_drop_pages)(void *owner, const uint8_t *p, size_t n);
} gguf_file;

/* Maps `path` read-only and parses it. On failure *out is NULL. */
er_status gguf_open(const char *path, gguf_file **out);

/* Parses a GGUF held in memory (not copied; must outlive the result). `name` is used in
 * error messages. */
er_status gguf_parse(const uint8_t *data, size_t size, const char *name, gguf_file **out);

void gguf_close(gguf_file *file); /* NULL-safe */

/* Drops the resident pages of the data section of a mapped file (they stay mapped and
 * fault back in from the file if read): for when the tensors now live elsewhere. */
void gguf_drop_pages(gguf_file *file);
/* The same for the pages that hold only [p, p + n) (a tensor's data, say). */
void gguf_drop_range(gguf_file *file, const uint8_t *p, size_t n);

const gguf_kv *gguf_find_kv(const gguf_file *file, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *file, const char *name);

/* Value conversions that fail (return false) on a type mismatch or out of range. */
bool gguf_value_as_int(const gguf_value *value, int64_t *out);
bool gguf_value_as_float(const gguf_value *value, double *out);
/* Element i of a scalar array, converted as above. */
bool gguf_array_int(const gguf_value *array, uint64_t i, int64_t *out);
bool gguf_array_float(const gguf_value *array, uint64_t i, double *out);

const char *gguf_type_name(enum gguf_value_type type);
bool gguf_string_eq(gguf_string s, const char *cstr);

#endif
