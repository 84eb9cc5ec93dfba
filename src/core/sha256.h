/* sha256.h - SHA-256 (FIPS 180-4), to identify model files (benchmark reference cache). */
#ifndef ER_CORE_SHA256_H
#define ER_CORE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "edgerunner.h"

typedef struct sha256_ctx {
    uint32_t h[8];
    uint64_t n_bytes;
    uint8_t block[64];
    size_t n_block;
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
void sha256_final(sha256_ctx *c, uint8_t digest[32]);

/* Hex digest (65 bytes with the NUL) of a whole file. */
er_status sha256_file(const char *path, char hex[65]);

#endif
