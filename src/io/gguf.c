/*
 * gguf.c - GGUF parser and validator (see gguf.h for the format).
 *
 * Invariant: the cursor never moves past the end of the buffer. Every read goes through
 * take(), which checks the length against what remains; every count is checked against
 * the bytes that remain (each element needs at least its minimal encoded size) before
 * anything is allocated for it, so a huge count cannot make us allocate or loop.
 */
#define _DEFAULT_SOURCE /* madvise */
#define _POSIX_C_SOURCE 200809L

#include "io/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status.h"
#include "io/mapfile.h"
#include "quant/types.h"

typedef struct reader {
    const uint8_t *base; /* (size) */
    size_t size;
    size_t pos;
    const char *name; /* for messages */
} reader;

static const size_t scalar_size[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = 1,   [GGUF_TYPE_INT8] = 1,   [GGUF_TYPE_UINT16] = 2,
    [GGUF_TYPE_INT16] = 2,   [GGUF_TYPE_UINT32] = 4, [GGUF_TYPE_INT32] = 4,
    [GGUF_TYPE_FLOAT32] = 4, [GGUF_TYPE_BOOL] = 1,   [GGUF_TYPE_STRING] = 0,
    [GGUF_TYPE_ARRAY] = 0,   [GGUF_TYPE_UINT64] = 8, [GGUF_TYPE_INT64] = 8,
    [GGUF_TYPE_FLOAT64] = 8,
};

const char *gguf_type_name(enum gguf_value_type type) {
    static const char *names[GGUF_TYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
    };
    return (unsigned)type < GGUF_TYPE_COUNT ? names[type] : "?";
}

bool gguf_string_eq(gguf_string s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && memcmp(s.data, cstr, n) == 0;
}

static size_t remaining(const reader *r) { return r->size - r->pos; }

/* A name's length for "%.*s" in a message: at most 200 bytes (an int cast of a longer
 * length could be negative, which would make printf read to a NUL past the name). */
static int shown(uint64_t len) { return len > 200 ? 200 : (int)len; }

static er_status take(reader *r, size_t n, const void **out, const char *what) {
    if (n > remaining(r))
        return er_fail(ER_ERR_FORMAT,
                       "%s: truncated at byte offset %zu: %s needs %zu bytes, %zu remain",
                       r->name, r->pos, what, n, remaining(r));
    *out = r->base + r->pos;
    r->pos += n;
    return ER_OK;
}

static er_status read_u32(reader *r, uint32_t *out, const char *what) {
    const void *p = NULL;
    er_status st = take(r, 4, &p, what);
    if (st == ER_OK)
        memcpy(out, p, 4);
    return st;
}

static er_status read_u64(reader *r, uint64_t *out, const char *what) {
    const void *p = NULL;
    er_status st = take(r, 8, &p, what);
    if (st == ER_OK)
        memcpy(out, p, 8);
    return st;
}

static er_status read_string(reader *r, gguf_string *out, const char *what) {
    size_t at = r->pos;
    uint64_t len;
    const void *p = NULL;
    er_status st = read_u64(r, &len, what);
    if (st != ER_OK)
        return st;
    if (len > remaining(r))
        return er_fail(ER_ERR_FORMAT,
                       "%s: %s at byte offset %zu has length %llu but only %zu bytes remain",
                       r->name, what, at, (unsigned long long)len, remaining(r));
    st = take(r, (size_t)len, &p, what);
    out->data = p;
    out->len = len;
    return st;
}

/* Decodes one scalar of `type` at p into the widened union member. */
static void decode_scalar(enum gguf_value_type type, const uint8_t *p, gguf_value *v) {
    v->type = type;
    switch (type) {
    case GGUF_TYPE_UINT8: v->u64 = p[0]; break;
    case GGUF_TYPE_BOOL: v->u64 = p[0] != 0; break;
    case GGUF_TYPE_INT8: v->i64 = (int8_t)p[0]; break;
    case GGUF_TYPE_UINT16: { uint16_t x; memcpy(&x, p, 2); v->u64 = x; break; }
    case GGUF_TYPE_INT16: { int16_t x; memcpy(&x, p, 2); v->i64 = x; break; }
    case GGUF_TYPE_UINT32: { uint32_t x; memcpy(&x, p, 4); v->u64 = x; break; }
    case GGUF_TYPE_INT32: { int32_t x; memcpy(&x, p, 4); v->i64 = x; break; }
    case GGUF_TYPE_UINT64: { uint64_t x; memcpy(&x, p, 8); v->u64 = x; break; }
    case GGUF_TYPE_INT64: { int64_t x; memcpy(&x, p, 8); v->i64 = x; break; }
    case GGUF_TYPE_FLOAT32: { float x; memcpy(&x, p, 4); v->f64 = x; break; }
    case GGUF_TYPE_FLOAT64: { double x; memcpy(&x, p, 8); v->f64 = x; break; }
    default: break;
    }
}

static void free_value(gguf_value *v) {
    if (v->type != GGUF_TYPE_ARRAY)
        return;
    free(v->arr.strs);
    if (v->arr.items) {
        for (uint64_t i = 0; i < v->arr.n; i++)
            free_value(&v->arr.items[i]);
        free(v->arr.items);
    }
    v->arr.strs = NULL;
    v->arr.items = NULL;
}

static er_status read_value(reader *r, enum gguf_value_type type, gguf_value *v, int depth,
                            const gguf_string *key);

/* An array body (element type, count, elements) after its ARRAY type tag. */
static er_status read_array(reader *r, gguf_value *v, int depth, const gguf_string *key) {
    size_t at = r->pos;
    uint32_t elem_type;
    uint64_t n;
    er_status st;
    v->type = GGUF_TYPE_ARRAY;
    v->arr.n = 0; /* so that free_value on a half-read array frees only what was read */
    v->arr.raw = NULL;
    v->arr.strs = NULL;
    v->arr.items = NULL;
    if ((st = read_u32(r, &elem_type, "array element type")) != ER_OK ||
        (st = read_u64(r, &n, "array length")) != ER_OK)
        return st;
    if (elem_type >= GGUF_TYPE_COUNT)
        return er_fail(ER_ERR_FORMAT, "%s: key '%.*s': array at byte offset %zu has unknown element type %u",
                       r->name, shown(key->len), key->data, at, elem_type);
    if (depth >= GGUF_MAX_ARRAY_DEPTH)
        return er_fail(ER_ERR_FORMAT, "%s: key '%.*s': arrays nested deeper than %d at byte offset %zu",
                       r->name, shown(key->len), key->data, GGUF_MAX_ARRAY_DEPTH, at);
    v->arr.type = (enum gguf_value_type)elem_type;

    /* the smallest encoding of one element bounds how many can fit in what remains */
    size_t min_size = scalar_size[elem_type];
    if (elem_type == GGUF_TYPE_STRING)
        min_size = 8;
    else if (elem_type == GGUF_TYPE_ARRAY)
        min_size = 12;
    if (n > remaining(r) / min_size)
        return er_fail(ER_ERR_FORMAT,
                       "%s: key '%.*s': array at byte offset %zu claims %llu %s elements, more than the %zu bytes left can hold",
                       r->name, shown(key->len), key->data, at, (unsigned long long)n,
                       gguf_type_name(v->arr.type), remaining(r));

    if (elem_type == GGUF_TYPE_STRING) {
        gguf_string *strs = calloc(n ? n : 1, sizeof *strs);
        if (!strs)
            return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory for a %llu-string array", r->name, (unsigned long long)n);
        v->arr.strs = strs;
        v->arr.n = n;
        for (uint64_t i = 0; i < n; i++)
            if ((st = read_string(r, &strs[i], "array string")) != ER_OK)
                return st;
        return ER_OK;
    }
    if (elem_type == GGUF_TYPE_ARRAY) {
        gguf_value *items = calloc(n ? n : 1, sizeof *items);
        if (!items)
            return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory for a %llu-array array", r->name, (unsigned long long)n);
        v->arr.items = items;
        for (uint64_t i = 0; i < n; i++) {
            v->arr.n = i + 1;
            if ((st = read_array(r, &items[i], depth + 1, key)) != ER_OK)
                return st;
        }
        v->arr.n = n;
        return ER_OK;
    }
    const void *p = NULL;
    if ((st = take(r, (size_t)n * min_size, &p, "array elements")) != ER_OK)
        return st;
    v->arr.raw = p;
    v->arr.n = n;
    return ER_OK;
}

static er_status read_value(reader *r, enum gguf_value_type type, gguf_value *v, int depth,
                            const gguf_string *key) {
    if (type == GGUF_TYPE_STRING) {
        v->type = type;
        return read_string(r, &v->str, "string value");
    }
    if (type == GGUF_TYPE_ARRAY)
        return read_array(r, v, depth, key);
    const void *p = NULL;
    er_status st = take(r, scalar_size[type], &p, "scalar value");
    if (st != ER_OK)
        return st;
    decode_scalar(type, p, v);
    return ER_OK;
}

static int cmp_string(gguf_string a, gguf_string b) {
    size_t n = a.len < b.len ? (size_t)a.len : (size_t)b.len;
    int c = memcmp(a.data, b.data, n);
    if (c != 0)
        return c;
    return (a.len > b.len) - (a.len < b.len);
}

static int cmp_string_ptr(const void *a, const void *b) {
    return cmp_string(**(const gguf_string *const *)a, **(const gguf_string *const *)b);
}

/* Finds a repeated string among n (sorted copies of pointers); returns it or NULL. */
static const gguf_string *find_duplicate(const gguf_string **sorted, uint64_t n) {
    qsort(sorted, n, sizeof *sorted, cmp_string_ptr);
    for (uint64_t i = 1; i < n; i++)
        if (cmp_string(*sorted[i - 1], *sorted[i]) == 0)
            return sorted[i];
    return NULL;
}

static er_status read_metadata(reader *r, gguf_file *f) {
    er_status st;
    const uint64_t n_read = f->n_kv;
    f->n_kv = 0; /* counts fully read pairs, for gguf_close on failure (f->kv may be NULL) */
    /* each pair needs at least 8 (key length) + 4 (type) + 1 bytes */
    if (n_read > remaining(r) / 13)
        return er_fail(ER_ERR_FORMAT, "%s: header claims %llu metadata pairs, more than the %zu bytes left can hold",
                       r->name, (unsigned long long)n_read, remaining(r));
    f->kv = calloc(n_read ? n_read : 1, sizeof *f->kv);
    if (!f->kv)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory for %llu metadata pairs", r->name, (unsigned long long)n_read);
    for (uint64_t i = 0; i < n_read; i++) {
        gguf_kv *kv = &f->kv[i];
        size_t at = r->pos;
        uint32_t type;
        if ((st = read_string(r, &kv->key, "metadata key")) != ER_OK)
            return st;
        if (kv->key.len == 0)
            return er_fail(ER_ERR_FORMAT, "%s: metadata pair %llu at byte offset %zu has an empty key",
                           r->name, (unsigned long long)i, at);
        if ((st = read_u32(r, &type, "metadata value type")) != ER_OK)
            return st;
        if (type >= GGUF_TYPE_COUNT)
            return er_fail(ER_ERR_FORMAT, "%s: key '%.*s' at byte offset %zu has unknown value type %u",
                           r->name, shown(kv->key.len), kv->key.data, at, type);
        f->n_kv = i + 1;
        if ((st = read_value(r, (enum gguf_value_type)type, &kv->value, 0, &kv->key)) != ER_OK)
            return st;
    }
    return ER_OK;
}

static er_status read_tensor_infos(reader *r, gguf_file *f) {
    er_status st;
    /* each info needs at least 8 (name) + 4 (n_dims) + 8 (ne[0]) + 4 (type) + 8 (offset) */
    if (f->n_tensors > remaining(r) / 32)
        return er_fail(ER_ERR_FORMAT, "%s: header claims %llu tensors, more than the %zu bytes left can hold",
                       r->name, (unsigned long long)f->n_tensors, remaining(r));
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    if (!f->tensors)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory for %llu tensor infos", r->name, (unsigned long long)f->n_tensors);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        size_t at = r->pos;
        uint32_t n_dims, type;
        if ((st = read_string(r, &t->name, "tensor name")) != ER_OK)
            return st;
        if (t->name.len == 0)
            return er_fail(ER_ERR_FORMAT, "%s: tensor %llu at byte offset %zu has an empty name",
                           r->name, (unsigned long long)i, at);
        const int nl = (int)(t->name.len > 200 ? 200 : t->name.len);
        if ((st = read_u32(r, &n_dims, "tensor n_dims")) != ER_OK)
            return st;
        if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
            return er_fail(ER_ERR_FORMAT, "%s: tensor '%.*s' at byte offset %zu has %u dimensions (1..%d allowed)",
                           r->name, nl, t->name.data, at, n_dims, GGUF_MAX_DIMS);
        t->n_dims = (int)n_dims;
        uint64_t n_elements = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) {
            uint64_t ne = 1;
            if (d < t->n_dims && (st = read_u64(r, &ne, "tensor dimension")) != ER_OK)
                return st;
            /* every product stays below 2^62 so that byte sizes cannot overflow either */
            if (ne == 0 || ne > ((uint64_t)1 << 62) / n_elements)
                return er_fail(ER_ERR_FORMAT, "%s: tensor '%.*s' at byte offset %zu: dimension %d is %llu (zero, or the element count overflows)",
                               r->name, nl, t->name.data, at, d, (unsigned long long)ne);
            n_elements *= ne;
            t->ne[d] = (int64_t)ne;
        }
        if ((st = read_u32(r, &type, "tensor type")) != ER_OK)
            return st;
        const er_type_traits *traits = er_type_get(type);
        if (!traits)
            return er_fail(ER_ERR_FORMAT, "%s: tensor '%.*s' at byte offset %zu has unknown type id %u",
                           r->name, nl, t->name.data, at, type);
        t->type = type;
        if (t->ne[0] % traits->block_size != 0)
            return er_fail(ER_ERR_FORMAT, "%s: tensor '%.*s': row length %lld is not a multiple of the %s block size %lld",
                           r->name, nl, t->name.data, (long long)t->ne[0], traits->name, (long long)traits->block_size);
        /* n_elements <= 2^62 blocks of up to 292 bytes: the byte size can pass 2^64 */
        const uint64_t n_blocks = n_elements / (uint64_t)traits->block_size;
        if (n_blocks > SIZE_MAX / traits->type_size)
            return er_fail(ER_ERR_FORMAT, "%s: tensor '%.*s' is too large (%llu blocks of %zu bytes)", r->name, nl,
                           t->name.data, (unsigned long long)n_blocks, traits->type_size);
        t->size = (size_t)n_blocks * traits->type_size;
        if ((st = read_u64(r, &t->offset, "tensor offset")) != ER_OK)
            return st;
    }
    return ER_OK;
}

/* general.alignment: a u32 power of two when present (llama.cpp's rule). */
static er_status read_alignment(const reader *r, gguf_file *f) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find_kv(f, "general.alignment");
    if (!kv)
        return ER_OK;
    if (kv->value.type != GGUF_TYPE_UINT32)
        return er_fail(ER_ERR_FORMAT, "%s: general.alignment has type %s, expected u32",
                       r->name, gguf_type_name(kv->value.type));
    uint64_t a = kv->value.u64;
    if (a == 0 || (a & (a - 1)) != 0)
        return er_fail(ER_ERR_FORMAT, "%s: general.alignment is %llu, not a power of two", r->name, (unsigned long long)a);
    f->alignment = a;
    return ER_OK;
}

static er_status place_tensors(const reader *r, gguf_file *f) {
    /* the data section starts at the next multiple of the alignment; a file with no
     * tensors may end before it */
    uint64_t data_offset = (r->pos + f->alignment - 1) / f->alignment * f->alignment;
    if (data_offset < r->pos || (f->n_tensors > 0 && data_offset > r->size))
        return er_fail(ER_ERR_FORMAT, "%s: data section would start at byte offset %llu, past the end of the %zu-byte file",
                       r->name, (unsigned long long)data_offset, r->size);
    f->data_offset = data_offset;
    const uint64_t data_size = f->n_tensors > 0 ? r->size - data_offset : 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        const int nl = (int)(t->name.len > 200 ? 200 : t->name.len);
        if (t->offset % f->alignment != 0)
            return er_fail(ER_ERR_FORMAT, "%s: tensor '%.*s' data offset %llu is not a multiple of the alignment %llu",
                           r->name, nl, t->name.data, (unsigned long long)t->offset, (unsigned long long)f->alignment);
        if (t->offset > data_size || t->size > data_size - t->offset)
            return er_fail(ER_ERR_FORMAT,
                           "%s: tensor '%.*s' data [%llu, +%zu) at file offset %llu lies outside the file (%zu bytes)",
                           r->name, nl, t->name.data, (unsigned long long)t->offset, t->size,
                           (unsigned long long)(data_offset + t->offset), r->size);
        t->data = r->base + data_offset + t->offset;
    }
    return ER_OK;
}

static er_status check_unique(const reader *r, gguf_file *f) {
    uint64_t n = f->n_kv > f->n_tensors ? f->n_kv : f->n_tensors;
    const gguf_string **sorted = malloc((n ? n : 1) * sizeof *sorted);
    if (!sorted)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", r->name);
    er_status st = ER_OK;
    for (uint64_t i = 0; i < f->n_kv; i++)
        sorted[i] = &f->kv[i].key;
    const gguf_string *dup = find_duplicate(sorted, f->n_kv);
    if (dup) {
        st = er_fail(ER_ERR_FORMAT, "%s: duplicate metadata key '%.*s'", r->name, shown(dup->len), dup->data);
        goto done;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++)
        sorted[i] = &f->tensors[i].name;
    dup = find_duplicate(sorted, f->n_tensors);
    if (dup)
        st = er_fail(ER_ERR_FORMAT, "%s: duplicate tensor name '%.*s'", r->name, (int)(dup->len > 200 ? 200 : dup->len), dup->data);
done:
    free(sorted);
    return st;
}

er_status gguf_parse(const uint8_t *data, size_t size, const char *name, gguf_file **out) {
    er_status st;
    reader r = {data, size, 0, name ? name : "gguf"};
    const void *magic = NULL;
    gguf_file *f = NULL;
    if (out)
        *out = NULL;
    if (!out || (!data && size > 0))
        return er_fail(ER_ERR_INVALID_ARG, "gguf_parse: NULL argument");
    f = calloc(1, sizeof *f);
    if (!f)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", r.name);
    f->base = data;
    f->size = size;
    if ((st = take(&r, 4, &magic, "magic")) != ER_OK)
        goto fail;
    if (memcmp(magic, "GGUF", 4) != 0) {
        st = er_fail(ER_ERR_FORMAT, "%s: not a GGUF file (bad magic at byte offset 0)", r.name);
        goto fail;
    }
    if ((st = read_u32(&r, &f->version, "version")) != ER_OK)
        goto fail;
    if (f->version != 2 && f->version != 3) {
        st = er_fail(f->version == 1 ? ER_ERR_UNSUPPORTED : ER_ERR_FORMAT,
                     "%s: GGUF version %u at byte offset 4 is not supported (2 and 3 are)", r.name, f->version);
        goto fail;
    }
    if ((st = read_u64(&r, &f->n_tensors, "tensor count")) != ER_OK ||
        (st = read_u64(&r, &f->n_kv, "metadata count")) != ER_OK)
        goto fail;
    uint64_t n_tensors = f->n_tensors;
    f->n_tensors = 0; /* no tensor array yet */
    if ((st = read_metadata(&r, f)) != ER_OK)
        goto fail;
    f->n_tensors = n_tensors;
    if ((st = read_tensor_infos(&r, f)) != ER_OK ||
        (st = check_unique(&r, f)) != ER_OK ||
        (st = read_alignment(&r, f)) != ER_OK ||
        (st = place_tensors(&r, f)) != ER_OK)
        goto fail;
    *out = f;
    return ER_OK;
fail:
    gguf_close(f);
    return st;
}

er_status gguf_open(const char *path, gguf_file **out) {
    if (!path || !out)
        return er_fail(ER_ERR_INVALID_ARG, "gguf_open: NULL argument");
    void *map;
    size_t size;
    *out = NULL;
    er_status st = io_map_file(path, &map, &size);
    if (st != ER_OK)
        return st;
    st = gguf_parse(map, size, path, out);
    if (st == ER_OK)
        (*out)->mapping = map;
    else
        munmap(map, size);
    return st;
}

void gguf_close(gguf_file *f) {
    if (!f)
        return;
    for (uint64_t i = 0; i < f->n_kv; i++)
        free_value(&f->kv[i].value);
    free(f->kv);
    free(f->tensors);
    if (f->mapping)
        munmap(f->mapping, f->size);
    if (f->owner_free)
        f->owner_free(f->owner);
    free(f);
}

void gguf_drop_pages(gguf_file *f) {
    if (f && f->mapping)
        io_drop_pages(f->mapping, f->size, f->base + f->data_offset, f->size - f->data_offset);
    else if (f && f->owner_drop_pages)
        f->owner_drop_pages(f->owner, NULL, 0);
}

void gguf_drop_range(gguf_file *f, const uint8_t *p, size_t n) {
    if (f && f->mapping)
        io_drop_pages(f->mapping, f->size, p, n);
    else if (f && f->owner_drop_pages)
        f->owner_drop_pages(f->owner, p, n);
}

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (gguf_string_eq(f->kv[i].key, key))
            return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (gguf_string_eq(f->tensors[i].name, name))
            return &f->tensors[i];
    return NULL;
}

static bool is_unsigned(enum gguf_value_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_BOOL;
}

static bool is_signed(enum gguf_value_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_INT64;
}

bool gguf_value_as_int(const gguf_value *v, int64_t *out) {
    if (is_signed(v->type)) {
        *out = v->i64;
        return true;
    }
    if (is_unsigned(v->type) && v->u64 <= (uint64_t)INT64_MAX) {
        *out = (int64_t)v->u64;
        return true;
    }
    return false;
}

bool gguf_value_as_float(const gguf_value *v, double *out) {
    int64_t i;
    if (v->type == GGUF_TYPE_FLOAT32 || v->type == GGUF_TYPE_FLOAT64) {
        *out = v->f64;
        return true;
    }
    if (gguf_value_as_int(v, &i)) {
        *out = (double)i;
        return true;
    }
    return false;
}

static bool array_scalar(const gguf_value *a, uint64_t i, gguf_value *elem) {
    if (a->type != GGUF_TYPE_ARRAY || i >= a->arr.n || !a->arr.raw)
        return false;
    size_t sz = scalar_size[a->arr.type];
    decode_scalar(a->arr.type, a->arr.raw + i * sz, elem);
    return true;
}

bool gguf_array_int(const gguf_value *a, uint64_t i, int64_t *out) {
    gguf_value elem;
    return array_scalar(a, i, &elem) && gguf_value_as_int(&elem, out);
}

bool gguf_array_float(const gguf_value *a, uint64_t i, double *out) {
    gguf_value elem;
    return array_scalar(a, i, &elem) && gguf_value_as_float(&elem, out);
}
