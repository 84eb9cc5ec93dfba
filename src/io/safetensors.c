/*
 * safetensors.c - the SafeTensors reader (see safetensors.h).
 *
 * The header is parsed whole into a JSON tree (core/json_doc.h), then checked member by
 * member in the order of the header, so that the first problem is the one reported. The
 * bounds: a header of at most 100 MiB (the limit of the reference implementation), names
 * unique, dims and byte sizes overflow-checked, ranges inside the data and disjoint.
 */
#define _POSIX_C_SOURCE 200809L

#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json_doc.h"
#include "core/status.h"
#include "io/mapfile.h"

enum { MAX_HEADER = 100 << 20, HEADER_DEPTH = 4 };

static const struct {
    const char *name;
    size_t size;
} dtypes[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1}, [ST_U8] = {"U8", 1},    [ST_I8] = {"I8", 1},   [ST_F8_E5M2] = {"F8_E5M2", 1},
    [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_I16] = {"I16", 2}, [ST_U16] = {"U16", 2}, [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2}, [ST_I32] = {"I32", 4}, [ST_U32] = {"U32", 4}, [ST_F32] = {"F32", 4},
    [ST_I64] = {"I64", 8},  [ST_U64] = {"U64", 8},  [ST_F64] = {"F64", 8},
};

const char *safetensors_dtype_name(enum st_dtype t) { return (unsigned)t < ST_DTYPE_COUNT ? dtypes[t].name : "?"; }
size_t safetensors_dtype_size(enum st_dtype t) { return (unsigned)t < ST_DTYPE_COUNT ? dtypes[t].size : 0; }

/* A non-negative JSON integer. */
static int as_size(const json_node *n, uint64_t *out) {
    if (!n || n->kind != JSON_INT || n->i < 0)
        return 0;
    *out = (uint64_t)n->i;
    return 1;
}

/* Reads one tensor's entry `e` (its name already copied to t->name). */
static er_status read_entry(const json_doc *d, const json_node *e, const char *file, const uint8_t *data,
                            size_t data_size, st_tensor *t) {
    const char *name = t->name;
    if (e->kind != JSON_OBJECT)
        return er_fail(ER_ERR_FORMAT, "%s: tensor '%s': its entry is not a JSON object", file, name);
    const json_node *dtype = json_doc_get(d, e, "dtype"), *shape = json_doc_get(d, e, "shape"),
                    *offsets = json_doc_get(d, e, "data_offsets");
    if (!dtype || dtype->kind != JSON_STRING)
        return er_fail(ER_ERR_FORMAT, "%s: tensor '%s': missing string field 'dtype'", file, name);
    t->dtype = ST_DTYPE_COUNT;
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (json_doc_is(d, dtype, dtypes[i].name))
            t->dtype = (enum st_dtype)i;
    if (t->dtype == ST_DTYPE_COUNT)
        return er_fail(ER_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%.32s'", file, name, json_doc_str(d, dtype));
    if (!shape || shape->kind != JSON_ARRAY)
        return er_fail(ER_ERR_FORMAT, "%s: tensor '%s': missing array field 'shape'", file, name);
    if (shape->len > SAFETENSORS_MAX_DIMS)
        return er_fail(ER_ERR_FORMAT, "%s: tensor '%s': shape has %zu dimensions, at most %d are supported", file,
                       name, shape->len, SAFETENSORS_MAX_DIMS);
    uint64_t n_bytes = dtypes[t->dtype].size;
    t->n_dims = 0;
    for (const json_node *dim = json_doc_first(d, shape); dim; dim = json_doc_next(d, dim)) {
        uint64_t ne;
        if (!as_size(dim, &ne))
            return er_fail(ER_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", file, name,
                           t->n_dims);
        if (ne != 0 && n_bytes > UINT64_MAX / ne)
            return er_fail(ER_ERR_FORMAT, "%s: tensor '%s': shape overflows 64 bits", file, name);
        n_bytes *= ne;
        t->shape[t->n_dims++] = (int64_t)ne;
    }
    uint64_t begin, end;
    if (!offsets || offsets->kind != JSON_ARRAY || offsets->len != 2 || !as_size(json_doc_first(d, offsets), &begin) ||
        !as_size(json_doc_next(d, json_doc_first(d, offsets)), &end))
        return er_fail(ER_ERR_FORMAT, "%s: tensor '%s': 'data_offsets' is not two non-negative integers", file, name);
    if (begin > end || end > data_size)
        return er_fail(ER_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] outside the %zu bytes of data",
                       file, name, (unsigned long long)begin, (unsigned long long)end, data_size);
    if (end - begin != n_bytes)
        return er_fail(ER_ERR_FORMAT, "%s: tensor '%s': data_offsets span %llu bytes but its shape and dtype %s need "
                       "%llu", file, name, (unsigned long long)(end - begin), dtypes[t->dtype].name,
                       (unsigned long long)n_bytes);
    t->data = data + begin;
    t->size = (size_t)n_bytes;
    return ER_OK;
}

static int by_data(const void *a, const void *b) {
    const st_tensor *x = *(st_tensor *const *)a, *y = *(st_tensor *const *)b;
    return x->data < y->data ? -1 : x->data > y->data;
}

static int by_name(const void *a, const void *b) {
    return strcmp((*(st_tensor *const *)a)->name, (*(st_tensor *const *)b)->name);
}

/* No two tensors share a name or a byte. */
static er_status check_disjoint(st_file *f, const char *file) {
    er_status st = ER_OK;
    st_tensor **order = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *order);
    if (!order)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", file);
    for (size_t i = 0; i < f->n_tensors; i++)
        order[i] = &f->tensors[i];
    qsort(order, f->n_tensors, sizeof *order, by_name);
    for (size_t i = 1; i < f->n_tensors && st == ER_OK; i++)
        if (!strcmp(order[i - 1]->name, order[i]->name))
            st = er_fail(ER_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", file, order[i]->name);
    qsort(order, f->n_tensors, sizeof *order, by_data);
    for (size_t i = 1; i < f->n_tensors && st == ER_OK; i++)
        if (order[i]->size && order[i - 1]->data + order[i - 1]->size > order[i]->data)
            st = er_fail(ER_ERR_FORMAT, "%s: tensors '%s' and '%s': their data_offsets overlap", file,
                         order[i - 1]->name, order[i]->name);
    free(order);
    return st;
}

er_status safetensors_parse(const uint8_t *data, size_t size, const char *file, st_file **out) {
    er_status st;
    json_doc *doc = NULL;
    st_file *f = calloc(1, sizeof *f);
    *out = NULL;
    if (!f)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", file);
    f->base = data;
    f->size = size;
    uint64_t header_len = 0;
    if (size < 8) {
        st = er_fail(ER_ERR_FORMAT, "%s: %zu bytes: too short for the 8-byte header length", file, size);
        goto fail;
    }
    for (int i = 7; i >= 0; i--)
        header_len = header_len << 8 | data[i];
    if (header_len > size - 8 || header_len > MAX_HEADER) {
        st = er_fail(ER_ERR_FORMAT, "%s: header length %llu runs past the end of the file (%zu bytes)%s", file,
                     (unsigned long long)header_len, size, header_len > MAX_HEADER ? " or past 100 MiB" : "");
        goto fail;
    }
    char what[512];
    snprintf(what, sizeof what, "%s: header", file);
    if ((st = json_doc_parse((const char *)data + 8, (size_t)header_len, what, HEADER_DEPTH, &doc)) != ER_OK)
        goto fail;
    const json_node *root = json_doc_root(doc);
    if (root->kind != JSON_OBJECT) {
        st = er_fail(ER_ERR_FORMAT, "%s: header is not a JSON object", file);
        goto fail;
    }
    size_t names_size = 0;
    for (const json_node *e = json_doc_first(doc, root); e; e = json_doc_next(doc, e))
        if (strcmp(json_doc_key(doc, e), "__metadata__") != 0) {
            f->n_tensors++;
            names_size += strlen(json_doc_key(doc, e)) + 1;
        }
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    f->names = malloc(names_size ? names_size : 1);
    if (!f->tensors || !f->names) {
        st = er_fail(ER_ERR_NO_MEMORY, "%s: out of memory for %zu tensors", file, f->n_tensors);
        goto fail;
    }
    const uint8_t *tensor_data = data + 8 + header_len;
    const size_t data_size = size - 8 - (size_t)header_len;
    char *name = f->names;
    size_t i = 0;
    for (const json_node *e = json_doc_first(doc, root); e; e = json_doc_next(doc, e)) {
        const char *key = json_doc_key(doc, e);
        if (!strcmp(key, "__metadata__")) {
            if (e->kind != JSON_OBJECT) {
                st = er_fail(ER_ERR_FORMAT, "%s: header: '__metadata__' is not a JSON object", file);
                goto fail;
            }
            continue;
        }
        if (e->key_len != strlen(key) || e->key_len == 0) {
            st = er_fail(ER_ERR_FORMAT, "%s: header: a tensor name is empty or holds a NUL", file);
            goto fail;
        }
        memcpy(name, key, e->key_len + 1);
        f->tensors[i].name = name;
        name += e->key_len + 1;
        if ((st = read_entry(doc, e, file, tensor_data, data_size, &f->tensors[i++])) != ER_OK)
            goto fail;
    }
    if ((st = check_disjoint(f, file)) != ER_OK)
        goto fail;
    json_doc_free(doc);
    *out = f;
    return ER_OK;
fail:
    json_doc_free(doc);
    safetensors_close(f);
    return st;
}

er_status safetensors_open(const char *path, st_file **out) {
    void *map;
    size_t size;
    *out = NULL;
    er_status st = io_map_file(path, &map, &size);
    if (st != ER_OK)
        return st;
    st = safetensors_parse(map, size, path, out);
    if (st == ER_OK)
        (*out)->mapping = map;
    else
        munmap(map, size);
    return st;
}

void safetensors_close(st_file *f) {
    if (!f)
        return;
    if (f->mapping)
        munmap(f->mapping, f->size);
    free(f->tensors);
    free(f->names);
    free(f);
}

const st_tensor *safetensors_find(const st_file *f, const char *name) {
    for (size_t i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name))
            return &f->tensors[i];
    return NULL;
}
