/*
 * safetensors.h - SafeTensors reader: parse and validate only; never trusts the file.
 *
 * The format (https://github.com/huggingface/safetensors), in order:
 *   1. u64 little-endian N: the length of the header
 *   2. N bytes of UTF-8 JSON: an object with one member per tensor,
 *        "name": {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}
 *      and an optional "__metadata__" object of strings; the writer pads it with spaces
 *   3. the data: each tensor's bytes at [begin, end) from the end of the header, row-major
 *      (the last dimension contiguous), little-endian
 *
 * safetensors_parse() checks the header length against the file, the JSON, every dtype,
 * that end - begin is exactly the bytes the shape and dtype need (products overflow-
 * checked), that every range lies inside the data, that no two ranges overlap, and that no
 * name repeats; a hostile file gives an ER_ERR_FORMAT whose one-line message names the
 * file, the tensor and the field. Tensor data are views into the caller's buffer.
 */
#ifndef ER_IO_SAFETENSORS_H
#define ER_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "edgerunner.h"

enum { SAFETENSORS_MAX_DIMS = 8 };

/* The dtypes of the format; the engine computes with F32, F16 and BF16. */
enum st_dtype {
    ST_BOOL, ST_U8, ST_I8, ST_F8_E5M2, ST_F8_E4M3, ST_I16, ST_U16, ST_F16, ST_BF16, ST_I32, ST_U32, ST_F32, ST_I64,
    ST_U64, ST_F64, ST_DTYPE_COUNT
};

typedef struct st_tensor {
    const char *name; /* NUL-terminated, owned by the file */
    enum st_dtype dtype;
    int n_dims;                           /* 0 (a scalar) .. SAFETENSORS_MAX_DIMS */
    int64_t shape[SAFETENSORS_MAX_DIMS]; /* (n_dims) outermost first */
    const uint8_t *data;                 /* (size) into the file */
    size_t size;
} st_tensor;

typedef struct st_file {
    const uint8_t *base; /* (size) the whole file */
    size_t size;
    void *mapping; /* non-NULL when safetensors_open mapped the file */
    size_t n_tensors;
    st_tensor *tensors; /* (n_tensors) in the header's order */
    char *names;        /* the tensors' names */
} st_file;

/* Maps `path` read-only and parses it. On failure *out is NULL. */
er_status safetensors_open(const char *path, st_file **out);
/* Parses a file held in memory (not copied; must outlive the result); `name` is for
 * messages. */
er_status safetensors_parse(const uint8_t *data, size_t size, const char *name, st_file **out);
void safetensors_close(st_file *f); /* NULL-safe */

const st_tensor *safetensors_find(const st_file *f, const char *name);
const char *safetensors_dtype_name(enum st_dtype dtype);
size_t safetensors_dtype_size(enum st_dtype dtype);

#endif
