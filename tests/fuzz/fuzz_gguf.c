/*
 * fuzz_gguf.c - libFuzzer target for the GGUF parser (make fuzz).
 *
 * Parses the input, then reads every byte of every view the result hands out (keys,
 * strings, array elements at any depth, the first and last byte of each tensor's data),
 * so that AddressSanitizer flags any view that reaches outside the input. A failed parse
 * must leave *out NULL and a message behind; anything else aborts.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "edgerunner.h"
#include "io/gguf.h"
#include "quant/types.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink; /* keeps the reads from being optimised away */

static uint64_t touch_string(gguf_string s) {
    uint64_t sum = s.len;
    for (uint64_t i = 0; i < s.len; i++)
        sum += (uint8_t)s.data[i];
    return sum;
}

static uint64_t touch_value(const gguf_value *v, int depth) {
    uint64_t sum = (uint64_t)v->type;
    if (depth > GGUF_MAX_ARRAY_DEPTH)
        abort(); /* the parser let a deeper nest through */
    switch (v->type) {
    case GGUF_TYPE_STRING: return sum + touch_string(v->str);
    case GGUF_TYPE_ARRAY:
        if ((unsigned)v->arr.type >= GGUF_TYPE_COUNT)
            abort();
        for (uint64_t i = 0; i < v->arr.n; i++) {
            int64_t iv;
            double fv;
            if (v->arr.type == GGUF_TYPE_STRING)
                sum += touch_string(v->arr.strs[i]);
            else if (v->arr.type == GGUF_TYPE_ARRAY)
                sum += touch_value(&v->arr.items[i], depth + 1);
            else if (gguf_array_int(v, i, &iv))
                sum += (uint64_t)iv;
            else if (gguf_array_float(v, i, &fv))
                sum += fv > 0;
            else if (v->arr.type != GGUF_TYPE_UINT64)
                abort(); /* a scalar element that cannot be read */
        }
        return sum;
    default: {
        int64_t iv;
        double fv;
        if (gguf_value_as_int(v, &iv))
            sum += (uint64_t)iv;
        if (gguf_value_as_float(v, &fv))
            sum += fv > 0;
        return sum;
    }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = (gguf_file *)&f;
    er_status st = gguf_parse(data, size, "fuzz", &f);
    if (st != ER_OK) {
        if (f != NULL || er_last_error()[0] == '\0')
            abort();
        return 0;
    }
    uint64_t sum = f->version + f->alignment + f->data_offset;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        sum += touch_string(f->kv[i].key);
        sum += touch_value(&f->kv[i].value, 0);
        /* lookups by key find this pair or an equal earlier one (keys are unique) */
        if (f->kv[i].key.len < 256) {
            char key[256];
            memcpy(key, f->kv[i].key.data, f->kv[i].key.len);
            key[f->kv[i].key.len] = '\0';
            if (strlen(key) == f->kv[i].key.len && gguf_find_kv(f, key) != &f->kv[i])
                abort();
        }
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        const er_type_traits *traits = er_type_get(t->type);
        if (!traits || t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS || t->size == 0 ||
            t->ne[0] % traits->block_size != 0 || t->offset % f->alignment != 0 ||
            t->data != f->base + f->data_offset + t->offset)
            abort();
        sum += touch_string(t->name);
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            sum += (uint64_t)t->ne[d];
        sum += t->data[0] + t->data[t->size - 1];
    }
    sink = sum;
    gguf_close(f);
    return 0;
}
