/*
 * fuzz_safetensors.c - libFuzzer target for the SafeTensors reader (make fuzz-safetensors).
 *
 * Parses the input as a whole file (from a heap copy of exactly its size, so that a read
 * past the end is an AddressSanitizer report) and checks the reader's promises: on
 * success every tensor's data lies inside the file and has the size its shape and dtype
 * give, no two tensors overlap; on failure *out is NULL and the message is one line.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *copy = malloc(size ? size : 1);
    memcpy(copy, data, size);
    st_file *f = (st_file *)1;
    if (safetensors_parse(copy, size, "fuzz", &f) != ER_OK) {
        if (f != NULL || strchr(er_last_error(), '\n'))
            abort();
        free(copy);
        return 0;
    }
    for (size_t i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = &f->tensors[i];
        uint64_t n = safetensors_dtype_size(t->dtype);
        for (int d = 0; d < t->n_dims; d++)
            n *= (uint64_t)t->shape[d];
        if (t->data < copy || t->size > size || t->data - copy > (ptrdiff_t)(size - t->size) || n != t->size)
            abort();
        if (t->size) /* every byte readable */
            (void)((volatile const uint8_t *)t->data)[t->size - 1];
        for (size_t j = 0; j < i; j++) {
            const st_tensor *u = &f->tensors[j];
            if (t->size && u->size && t->data < u->data + u->size && u->data < t->data + t->size)
                abort();
        }
    }
    safetensors_close(f);
    free(copy);
    return 0;
}
