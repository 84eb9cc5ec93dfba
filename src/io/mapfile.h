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

#endif
