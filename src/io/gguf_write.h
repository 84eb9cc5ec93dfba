/*
 * gguf_write.h - GGUF writer (version 3, the layout gguf.h describes): metadata of every
 * value type including nested arrays, tensor infos, alignment padding, then the tensor data
 * streamed in order, so that a model never has to be held in memory whole.
 *
 * Usage:
 *   gguf_writer *w;
 *   gguf_writer_create(&w);
 *   gguf_writer_set(w, key, value);         any number, any order; a key set twice keeps its
 *   gguf_writer_set_u32(w, "k", 7);         first position and its last value
 *   gguf_writer_add_tensor(w, name, n_dims, ne, type);   in data order
 *   gguf_writer_begin(w, path);             header, metadata, tensor infos, padding
 *   gguf_writer_write_tensor(w, data, size) once per tensor, in the order added
 *   gguf_writer_finish(w);                  checks every tensor was written, closes the file
 *   gguf_writer_free(w);
 * Everything is written to a new temporary file beside `path` (PATH.PID-XXXXXX.tmp);
 * finish fsyncs it and renames it over `path`. Until then `path` is untouched, and a
 * failure or a writer freed unfinished removes only the temporary file. `path` must be
 * absent or a regular file: anything else (a directory, FIFO, device, symbolic link) is
 * refused by begin, before anything is written.
 * The data section is aligned to general.alignment when the metadata sets it (a u32 power
 * of two), else 32; every tensor starts on a multiple of it and is zero-padded to the next.
 * Values passed to gguf_writer_set are views (strings and arrays are not copied): what
 * they point to (usually a gguf_file being rewritten) must outlive the writer. Keys and
 * tensor names are copied.
 */
#ifndef ER_IO_GGUF_WRITE_H
#define ER_IO_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "edgerunner.h"
#include "io/gguf.h"

typedef struct gguf_writer gguf_writer;

er_status gguf_writer_create(gguf_writer **out);
/* NULL-safe. A file begun but not finished is closed and its temporary file removed. */
void gguf_writer_free(gguf_writer *w);

er_status gguf_writer_set(gguf_writer *w, gguf_string key, const gguf_value *value);
er_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
/* The string is copied. */
er_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *s);
/* Removes a key if present. */
void gguf_writer_remove(gguf_writer *w, const char *key);

/* A tensor of n_dims (1..4) dimensions ne (ne[0] contiguous, a multiple of the type's block
 * size) and GGML type `type`. */
er_status gguf_writer_add_tensor(gguf_writer *w, gguf_string name, int n_dims, const int64_t *ne, uint32_t type);

/* The byte size of tensor i's data, as gguf_writer_write_tensor expects it. */
size_t gguf_writer_tensor_size(const gguf_writer *w, uint64_t i);

er_status gguf_writer_begin(gguf_writer *w, const char *path);
er_status gguf_writer_write_tensor(gguf_writer *w, const void *data, size_t size);
er_status gguf_writer_finish(gguf_writer *w);

#endif
