/*
 * mapfile.h - a whole regular file mapped read-only, for the readers of model files
 * (gguf.c, safetensors.c): one place for the open, stat and mmap and their messages.
 */
#ifndef ER_IO_MAPFILE_H
#define ER_IO_MAPFILE_H

#include <stddef.h>

#include "edgerunner.h"

/* Maps `path` (a non-empty regular file) read-only: *map (size bytes), to munmap. */
er_status io_map_file(const char *path, void **map, size_t *size);

/* Drops the resident pages of mapping `map` (size bytes, from io_map_file) that lie wholly
 * inside [p, p + n): they stay mapped and fault back in from the file if read. Nothing
 * when the range is outside the mapping. */
void io_drop_pages(const void *map, size_t size, const void *p, size_t n);

#endif
