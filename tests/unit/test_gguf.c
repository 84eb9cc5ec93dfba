/*
 * test_gguf.c - the GGUF parser on files built in memory: valid v2 and v3 files with every
 * value type, then hostile ones (every truncation, huge counts and lengths, bad types,
 * bad shapes, out-of-bounds and misaligned data, duplicates, random byte corruption).
 *
 * Every hostile case checks the status, that *out is NULL, and that the message names
 * what was wrong. Each parse gets its own heap copy of exactly `size` bytes, so that
 * under AddressSanitizer (make debug) a read one byte past the end is a crash, not luck.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status.h"
#include "io/gguf.h"
#include "quant/types.h"
#include "test.h"

/* ---- a tiny GGUF writer: a growable byte buffer ------------------------------------- */

typedef struct wbuf {
    uint8_t *p; /* (n) bytes written, (cap) allocated */
    size_t n, cap;
} wbuf;

static void w_bytes(wbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            fprintf(stderr, "test_gguf: out of memory\n");
            abort();
        }
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void w_u8(wbuf *b, uint8_t v) { w_bytes(b, &v, 1); }
static void w_u16(wbuf *b, uint16_t v) { w_bytes(b, &v, 2); }
static void w_u32(wbuf *b, uint32_t v) { w_bytes(b, &v, 4); }
static void w_u64(wbuf *b, uint64_t v) { w_bytes(b, &v, 8); }
static void w_f32(wbuf *b, float v) { w_bytes(b, &v, 4); }
static void w_f64(wbuf *b, double v) { w_bytes(b, &v, 8); }

static void w_strn(wbuf *b, const char *s, size_t n) {
    w_u64(b, n);
    w_bytes(b, s, n);
}

static void w_str(wbuf *b, const char *s) { w_strn(b, s, strlen(s)); }

static void w_header(wbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    w_bytes(b, "GGUF", 4);
    w_u32(b, version);
    w_u64(b, n_tensors);
    w_u64(b, n_kv);
}

/* key + value type; the value follows */
static void w_key(wbuf *b, const char *key, enum gguf_value_type type) {
    w_str(b, key);
    w_u32(b, (uint32_t)type);
}

static void w_kv_u32(wbuf *b, const char *key, uint32_t v) {
    w_key(b, key, GGUF_TYPE_UINT32);
    w_u32(b, v);
}

static void w_kv_str(wbuf *b, const char *key, const char *v) {
    w_key(b, key, GGUF_TYPE_STRING);
    w_str(b, v);
}

static void w_tensor(wbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                     uint64_t offset) {
    w_str(b, name);
    w_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims && d < 5; d++) /* a hostile n_dims gets 5 at most */
        w_u64(b, ne[d]);
    w_u32(b, type);
    w_u64(b, offset);
}

static void w_pad(wbuf *b, size_t alignment) {
    while (b->n % alignment != 0)
        w_u8(b, 0);
}

/* pads to the alignment, then appends n data bytes (a recognisable pattern) */
static void w_data(wbuf *b, size_t alignment, size_t n) {
    w_pad(b, alignment);
    for (size_t i = 0; i < n; i++)
        w_u8(b, (uint8_t)(i * 7 + 3));
}

static void w_free(wbuf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ---- parsing helpers ---------------------------------------------------------------- */

static void clear_error(void) { er_fail(ER_OK, "%s", ""); }

/* Parses a heap copy of exactly `size` bytes; *copy receives it (caller frees it after
 * gguf_close, since the result points into it). */
static er_status parse_copy(const uint8_t *data, size_t size, uint8_t **copy, gguf_file **out) {
    *copy = malloc(size ? size : 1);
    if (!*copy)
        abort();
    if (size)
        memcpy(*copy, data, size);
    clear_error();
    return gguf_parse(*copy, size, "mem.gguf", out);
}

/* Touches every parsed field, so that a view outside the buffer shows up under ASan;
 * returns a checksum so the reads cannot be optimised away. */
static uint64_t touch_value(const gguf_value *v) {
    uint64_t sum = (uint64_t)v->type;
    if (v->type == GGUF_TYPE_STRING) {
        for (uint64_t i = 0; i < v->str.len; i++)
            sum += (uint8_t)v->str.data[i];
    } else if (v->type == GGUF_TYPE_ARRAY) {
        sum += v->arr.n;
        for (uint64_t i = 0; i < v->arr.n; i++) {
            int64_t iv;
            double fv;
            if (v->arr.type == GGUF_TYPE_STRING) {
                for (uint64_t j = 0; j < v->arr.strs[i].len; j++)
                    sum += (uint8_t)v->arr.strs[i].data[j];
            } else if (v->arr.type == GGUF_TYPE_ARRAY) {
                sum += touch_value(&v->arr.items[i]);
            } else {
                if (gguf_array_int(v, i, &iv))
                    sum += (uint64_t)iv;
                if (gguf_array_float(v, i, &fv))
                    sum += fv == fv ? 1 : 2;
            }
        }
    } else {
        sum += v->u64;
    }
    return sum;
}

static uint64_t touch_file(const gguf_file *f) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        for (uint64_t j = 0; j < f->kv[i].key.len; j++)
            sum += (uint8_t)f->kv[i].key.data[j];
        sum += touch_value(&f->kv[i].value);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        for (uint64_t j = 0; j < t->name.len; j++)
            sum += (uint8_t)t->name.data[j];
        sum += t->data[0] + t->data[t->size - 1];
    }
    return sum;
}

static int contains(const char *haystack, const char *needle) {
    return needle == NULL || strstr(haystack, needle) != NULL;
}

/* Parses `b` expecting `want`, *out NULL, and a message containing `s1` and `s2`. */
static void expect_fail_at(const char *what, int line, const wbuf *b, er_status want, const char *s1,
                           const char *s2) {
    uint8_t *copy;
    gguf_file *f = (gguf_file *)&f; /* not NULL: the parser must reset it */
    er_status st = parse_copy(b->p, b->n, &copy, &f);
    const char *msg = er_last_error();
    CHECK(st == want, "[%s, line %d] status %s, expected %s (message: %s)", what, line,
          er_status_name(st), er_status_name(want), msg);
    CHECK(f == NULL, "[%s, line %d] *out not NULL on failure", what, line);
    CHECK(msg[0] != '\0', "[%s, line %d] empty error message", what, line);
    CHECK(contains(msg, "mem.gguf"), "[%s, line %d] message does not name the file: %s", what, line, msg);
    CHECK(contains(msg, s1) && contains(msg, s2), "[%s, line %d] message lacks '%s'/'%s': %s", what, line,
          s1 ? s1 : "", s2 ? s2 : "", msg);
    if (st == ER_OK)
        gguf_close(f);
    free(copy);
}

#define EXPECT_FAIL(what, b, want, s1, s2) expect_fail_at(what, __LINE__, b, want, s1, s2)

static void expect_ok_at(const char *what, int line, const wbuf *b) {
    uint8_t *copy;
    gguf_file *f = NULL;
    er_status st = parse_copy(b->p, b->n, &copy, &f);
    CHECK(st == ER_OK && f != NULL, "[%s, line %d] status %s: %s", what, line, er_status_name(st),
          er_last_error());
    if (f)
        (void)touch_file(f);
    gguf_close(f);
    free(copy);
}

#define EXPECT_OK(what, b) expect_ok_at(what, __LINE__, b)

/* ---- the valid file ----------------------------------------------------------------- */

typedef struct tspec {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;
    uint64_t offset; /* set by build_valid */
    size_t size;
} tspec;

/* Infos in this order; data laid out in a different order (q8_0 first) to show that
 * offsets, not info order, place the data. The last region ends exactly at the end of
 * the file, so that every proper prefix is truncated. */
static tspec valid_tensors[] = {
    {"tok.f32", 2, {4, 3, 1, 1}, ER_TYPE_F32, 0, 48},
    {"w.f16", 1, {8, 1, 1, 1}, ER_TYPE_F16, 0, 16},
    {"w.bf16", 4, {2, 2, 2, 2}, ER_TYPE_BF16, 0, 32},
    {"w.q8_0", 2, {64, 2, 1, 1}, ER_TYPE_Q8_0, 0, 4 * 34},
};
enum { N_VALID_TENSORS = 4 };

static const char *const str_array[] = {"a", "", "xyz"};

/* A file with every value type. v3 gets general.alignment = `alignment`; v2 (or
 * alignment 0) gets none and so uses the default 32. */
static void build_valid(wbuf *b, uint32_t version, uint32_t alignment) {
    const int with_alignment = alignment != 0;
    const size_t align = with_alignment ? alignment : GGUF_DEFAULT_ALIGNMENT;
    w_header(b, version, N_VALID_TENSORS, 21 + (with_alignment ? 1 : 0));
    w_kv_str(b, "general.architecture", "llama");
    if (with_alignment)
        w_kv_u32(b, "general.alignment", alignment);
    w_key(b, "t.u8", GGUF_TYPE_UINT8);
    w_u8(b, 200);
    w_key(b, "t.i8", GGUF_TYPE_INT8);
    w_u8(b, (uint8_t)(int8_t)-100);
    w_key(b, "t.u16", GGUF_TYPE_UINT16);
    w_u16(b, 60000);
    w_key(b, "t.i16", GGUF_TYPE_INT16);
    w_u16(b, (uint16_t)(int16_t)-30000);
    w_kv_u32(b, "t.u32", 4000000000u);
    w_key(b, "t.i32", GGUF_TYPE_INT32);
    w_u32(b, (uint32_t)(int32_t)-2000000000);
    w_key(b, "t.f32", GGUF_TYPE_FLOAT32);
    w_f32(b, 1.5f);
    w_key(b, "t.bool", GGUF_TYPE_BOOL);
    w_u8(b, 1);
    w_kv_str(b, "t.string", "h\xc3\xa9llo");
    w_key(b, "t.u64", GGUF_TYPE_UINT64);
    w_u64(b, ((uint64_t)1 << 63) + 5);
    w_key(b, "t.i64", GGUF_TYPE_INT64);
    w_u64(b, (uint64_t)(-((int64_t)1 << 62)));
    w_key(b, "t.f64", GGUF_TYPE_FLOAT64);
    w_f64(b, -3.25);
    w_kv_str(b, "t.empty_string", "");
    /* arrays of scalars */
    w_key(b, "a.i32", GGUF_TYPE_ARRAY);
    w_u32(b, GGUF_TYPE_INT32);
    w_u64(b, 3);
    w_u32(b, 1);
    w_u32(b, (uint32_t)-2);
    w_u32(b, 3);
    w_key(b, "a.f32", GGUF_TYPE_ARRAY);
    w_u32(b, GGUF_TYPE_FLOAT32);
    w_u64(b, 2);
    w_f32(b, 0.5f);
    w_f32(b, -1.25f);
    w_key(b, "a.u64", GGUF_TYPE_ARRAY);
    w_u32(b, GGUF_TYPE_UINT64);
    w_u64(b, 2);
    w_u64(b, 7);
    w_u64(b, UINT64_MAX);
    w_key(b, "a.bool", GGUF_TYPE_ARRAY);
    w_u32(b, GGUF_TYPE_BOOL);
    w_u64(b, 2);
    w_u8(b, 0);
    w_u8(b, 1);
    w_key(b, "a.empty", GGUF_TYPE_ARRAY);
    w_u32(b, GGUF_TYPE_UINT8);
    w_u64(b, 0);
    /* array of strings */
    w_key(b, "a.str", GGUF_TYPE_ARRAY);
    w_u32(b, GGUF_TYPE_STRING);
    w_u64(b, 3);
    for (int i = 0; i < 3; i++)
        w_str(b, str_array[i]);
    /* nested: [[i16 10, -20], [string "s"], [[u8 7]]] */
    w_key(b, "a.nested", GGUF_TYPE_ARRAY);
    w_u32(b, GGUF_TYPE_ARRAY);
    w_u64(b, 3);
    w_u32(b, GGUF_TYPE_INT16);
    w_u64(b, 2);
    w_u16(b, 10);
    w_u16(b, (uint16_t)(int16_t)-20);
    w_u32(b, GGUF_TYPE_STRING);
    w_u64(b, 1);
    w_str(b, "s");
    w_u32(b, GGUF_TYPE_ARRAY);
    w_u64(b, 1);
    w_u32(b, GGUF_TYPE_UINT8);
    w_u64(b, 1);
    w_u8(b, 7);

    /* data layout: w.q8_0, tok.f32, w.bf16, w.f16 (the last at the end of the file) */
    static const int order[N_VALID_TENSORS] = {3, 0, 2, 1};
    uint64_t at = 0;
    for (int k = 0; k < N_VALID_TENSORS; k++) {
        tspec *t = &valid_tensors[order[k]];
        t->offset = at;
        at = (at + t->size + align - 1) / align * align;
    }
    const tspec *last = &valid_tensors[order[N_VALID_TENSORS - 1]];
    const size_t data_size = (size_t)(last->offset + last->size);
    for (int i = 0; i < N_VALID_TENSORS; i++) {
        const tspec *t = &valid_tensors[i];
        w_tensor(b, t->name, t->n_dims, t->ne, t->type, t->offset);
    }
    w_pad(b, align);
    const size_t data_start = b->n;
    w_data(b, 1, data_size);
    /* tok.f32 holds 0, 1, ..., 11 */
    for (int i = 0; i < 12; i++) {
        float x = (float)i;
        memcpy(b->p + data_start + valid_tensors[0].offset + 4 * (size_t)i, &x, 4);
    }
}

static void check_int(const gguf_file *f, const char *key, enum gguf_value_type type, int ok, int64_t want) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    int64_t got = 0;
    CHECK(kv != NULL, "key %s not found", key);
    if (!kv)
        return;
    CHECK(kv->value.type == type, "key %s has type %s, expected %s", key, gguf_type_name(kv->value.type),
          gguf_type_name(type));
    CHECK(gguf_value_as_int(&kv->value, &got) == (ok != 0), "key %s: as_int success %d", key, !ok);
    if (ok)
        CHECK(got == want, "key %s = %lld, expected %lld", key, (long long)got, (long long)want);
}

static void check_float(const gguf_file *f, const char *key, enum gguf_value_type type, double want) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    double got = 0;
    CHECK(kv != NULL && kv->value.type == type, "key %s missing or of the wrong type", key);
    if (!kv)
        return;
    CHECK(gguf_value_as_float(&kv->value, &got) && got == want, "key %s = %g, expected %g", key, got, want);
}

static void check_valid(const gguf_file *f, const uint8_t *buf, size_t size, uint32_t version,
                        uint64_t alignment, int has_alignment_kv) {
    int64_t iv;
    double fv;
    CHECK(f->base == buf && f->size == size, "base/size");
    CHECK(f->version == version, "version %u", f->version);
    CHECK(f->n_kv == (has_alignment_kv ? 22u : 21u), "n_kv %llu", (unsigned long long)f->n_kv);
    CHECK(f->alignment == alignment, "alignment %llu, expected %llu", (unsigned long long)f->alignment,
          (unsigned long long)alignment);
    CHECK(f->data_offset % alignment == 0 && f->data_offset <= size, "data_offset %llu",
          (unsigned long long)f->data_offset);

    const gguf_kv *arch = gguf_find_kv(f, "general.architecture");
    CHECK(arch && arch->value.type == GGUF_TYPE_STRING && gguf_string_eq(arch->value.str, "llama"),
          "general.architecture");
    CHECK(gguf_find_kv(f, "general.architectur") == NULL && gguf_find_kv(f, "nope") == NULL,
          "a missing key is found");

    check_int(f, "t.u8", GGUF_TYPE_UINT8, 1, 200);
    check_int(f, "t.i8", GGUF_TYPE_INT8, 1, -100);
    check_int(f, "t.u16", GGUF_TYPE_UINT16, 1, 60000);
    check_int(f, "t.i16", GGUF_TYPE_INT16, 1, -30000);
    check_int(f, "t.u32", GGUF_TYPE_UINT32, 1, 4000000000LL);
    check_int(f, "t.i32", GGUF_TYPE_INT32, 1, -2000000000LL);
    check_int(f, "t.bool", GGUF_TYPE_BOOL, 1, 1);
    check_int(f, "t.u64", GGUF_TYPE_UINT64, 0, 0); /* above INT64_MAX: refused */
    check_int(f, "t.i64", GGUF_TYPE_INT64, 1, -((int64_t)1 << 62));
    check_int(f, "t.f32", GGUF_TYPE_FLOAT32, 0, 0); /* a float is not an int */
    check_int(f, "t.string", GGUF_TYPE_STRING, 0, 0);
    check_float(f, "t.f32", GGUF_TYPE_FLOAT32, 1.5);
    check_float(f, "t.f64", GGUF_TYPE_FLOAT64, -3.25);
    check_float(f, "t.i8", GGUF_TYPE_INT8, -100.0); /* ints widen to float */
    const gguf_kv *kv = gguf_find_kv(f, "t.u64");
    CHECK(kv && kv->value.u64 == ((uint64_t)1 << 63) + 5, "t.u64 raw value");
    CHECK(kv && !gguf_value_as_float(&kv->value, &fv), "t.u64 as float should fail (out of int64 range)");

    kv = gguf_find_kv(f, "t.string");
    CHECK(kv && kv->value.type == GGUF_TYPE_STRING && gguf_string_eq(kv->value.str, "h\xc3\xa9llo") &&
              kv->value.str.len == 6,
          "t.string");
    CHECK(kv && (const uint8_t *)kv->value.str.data > buf && (const uint8_t *)kv->value.str.data < buf + size,
          "strings are views into the buffer");
    kv = gguf_find_kv(f, "t.empty_string");
    CHECK(kv && kv->value.type == GGUF_TYPE_STRING && kv->value.str.len == 0, "t.empty_string");
    CHECK(kv && !gguf_value_as_float(&kv->value, &fv), "a string is not a float");

    kv = gguf_find_kv(f, "a.i32");
    CHECK(kv && kv->value.type == GGUF_TYPE_ARRAY && kv->value.arr.type == GGUF_TYPE_INT32 && kv->value.arr.n == 3,
          "a.i32 shape");
    if (kv) {
        CHECK(gguf_array_int(&kv->value, 0, &iv) && iv == 1, "a.i32[0]");
        CHECK(gguf_array_int(&kv->value, 1, &iv) && iv == -2, "a.i32[1]");
        CHECK(gguf_array_int(&kv->value, 2, &iv) && iv == 3, "a.i32[2]");
        CHECK(gguf_array_float(&kv->value, 1, &fv) && fv == -2.0, "a.i32[1] as float");
        CHECK(!gguf_array_int(&kv->value, 3, &iv), "a.i32[3] is out of range");
        CHECK(!gguf_array_int(&kv->value, UINT64_MAX, &iv), "a.i32[2^64-1] is out of range");
        CHECK(!gguf_value_as_int(&kv->value, &iv), "an array is not an int");
    }
    kv = gguf_find_kv(f, "a.f32");
    CHECK(kv && kv->value.type == GGUF_TYPE_ARRAY && kv->value.arr.type == GGUF_TYPE_FLOAT32 && kv->value.arr.n == 2,
          "a.f32 shape");
    if (kv) {
        CHECK(gguf_array_float(&kv->value, 0, &fv) && fv == 0.5, "a.f32[0]");
        CHECK(gguf_array_float(&kv->value, 1, &fv) && fv == -1.25, "a.f32[1]");
        CHECK(!gguf_array_int(&kv->value, 0, &iv), "a.f32[0] is not an int");
        CHECK(!gguf_array_float(&kv->value, 2, &fv), "a.f32[2] is out of range");
    }
    kv = gguf_find_kv(f, "a.u64");
    CHECK(kv && kv->value.arr.type == GGUF_TYPE_UINT64 && kv->value.arr.n == 2, "a.u64 shape");
    if (kv) {
        CHECK(gguf_array_int(&kv->value, 0, &iv) && iv == 7, "a.u64[0]");
        CHECK(!gguf_array_int(&kv->value, 1, &iv), "a.u64[1] = 2^64-1 does not fit an int64");
    }
    kv = gguf_find_kv(f, "a.bool");
    CHECK(kv && kv->value.arr.type == GGUF_TYPE_BOOL && kv->value.arr.n == 2, "a.bool shape");
    if (kv)
        CHECK(gguf_array_int(&kv->value, 0, &iv) && iv == 0 && gguf_array_int(&kv->value, 1, &iv) && iv == 1,
              "a.bool values");
    kv = gguf_find_kv(f, "a.empty");
    CHECK(kv && kv->value.arr.type == GGUF_TYPE_UINT8 && kv->value.arr.n == 0, "a.empty");
    if (kv)
        CHECK(!gguf_array_int(&kv->value, 0, &iv), "a.empty[0] is out of range");

    kv = gguf_find_kv(f, "a.str");
    CHECK(kv && kv->value.arr.type == GGUF_TYPE_STRING && kv->value.arr.n == 3 && kv->value.arr.strs != NULL,
          "a.str shape");
    if (kv && kv->value.arr.strs) {
        for (int i = 0; i < 3; i++)
            CHECK(gguf_string_eq(kv->value.arr.strs[i], str_array[i]), "a.str[%d]", i);
        CHECK(!gguf_array_int(&kv->value, 0, &iv), "a string array has no int elements");
    }

    kv = gguf_find_kv(f, "a.nested");
    CHECK(kv && kv->value.arr.type == GGUF_TYPE_ARRAY && kv->value.arr.n == 3 && kv->value.arr.items != NULL,
          "a.nested shape");
    if (kv && kv->value.arr.items) {
        const gguf_value *items = kv->value.arr.items;
        CHECK(items[0].type == GGUF_TYPE_ARRAY && items[0].arr.type == GGUF_TYPE_INT16 && items[0].arr.n == 2,
              "a.nested[0] shape");
        CHECK(gguf_array_int(&items[0], 0, &iv) && iv == 10, "a.nested[0][0]");
        CHECK(gguf_array_int(&items[0], 1, &iv) && iv == -20, "a.nested[0][1]");
        CHECK(items[1].type == GGUF_TYPE_ARRAY && items[1].arr.type == GGUF_TYPE_STRING && items[1].arr.n == 1 &&
                  items[1].arr.strs && gguf_string_eq(items[1].arr.strs[0], "s"),
              "a.nested[1]");
        CHECK(items[2].type == GGUF_TYPE_ARRAY && items[2].arr.type == GGUF_TYPE_ARRAY && items[2].arr.n == 1 &&
                  items[2].arr.items,
              "a.nested[2] shape");
        if (items[2].arr.items) {
            const gguf_value *inner = &items[2].arr.items[0];
            CHECK(inner->type == GGUF_TYPE_ARRAY && inner->arr.type == GGUF_TYPE_UINT8 && inner->arr.n == 1 &&
                      gguf_array_int(inner, 0, &iv) && iv == 7,
                  "a.nested[2][0][0]");
        }
        CHECK(!gguf_array_int(&kv->value, 0, &iv), "an array of arrays has no int elements");
    }

    CHECK(f->n_tensors == N_VALID_TENSORS, "n_tensors %llu", (unsigned long long)f->n_tensors);
    for (int i = 0; i < N_VALID_TENSORS && (uint64_t)i < f->n_tensors; i++) {
        const tspec *want = &valid_tensors[i];
        const gguf_tensor *t = &f->tensors[i];
        CHECK(gguf_string_eq(t->name, want->name), "tensor %d name", i);
        CHECK(gguf_find_tensor(f, want->name) == t, "gguf_find_tensor(%s)", want->name);
        CHECK(t->n_dims == (int)want->n_dims, "%s n_dims %d", want->name, t->n_dims);
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            CHECK(t->ne[d] == (int64_t)want->ne[d], "%s ne[%d] = %lld", want->name, d, (long long)t->ne[d]);
        CHECK(t->type == want->type, "%s type %u", want->name, t->type);
        CHECK(t->offset == want->offset, "%s offset %llu", want->name, (unsigned long long)t->offset);
        CHECK(t->offset % alignment == 0, "%s offset aligned", want->name);
        CHECK(t->size == want->size, "%s size %zu, expected %zu", want->name, t->size, want->size);
        CHECK(t->data == buf + f->data_offset + want->offset, "%s data pointer", want->name);
        CHECK((size_t)(t->data - buf) % alignment == 0, "%s data aligned in the file", want->name);
    }
    CHECK(gguf_find_tensor(f, "w.f1") == NULL && gguf_find_tensor(f, "w.f166") == NULL &&
              gguf_find_tensor(f, "") == NULL,
          "a missing tensor is found");
    const gguf_tensor *tok = gguf_find_tensor(f, "tok.f32");
    if (tok) {
        float x[12];
        memcpy(x, tok->data, sizeof x);
        int ok = 1;
        for (int i = 0; i < 12; i++)
            ok &= x[i] == (float)i;
        CHECK(ok, "tok.f32 data");
    }
    const gguf_tensor *last = gguf_find_tensor(f, "w.f16");
    CHECK(last && last->data + last->size == buf + size, "the last tensor ends the file");
}

static void test_valid(void) {
    static const struct {
        uint32_t version, alignment_kv; /* 0: no general.alignment */
        uint64_t alignment;
    } cases[] = {{3, 64, 64}, {2, 0, 32}, {3, 0, 32}, {2, 64, 64}, {3, 256, 256}, {3, 32, 32}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        wbuf b = {0};
        uint8_t *copy;
        gguf_file *f = NULL;
        build_valid(&b, cases[c].version, cases[c].alignment_kv);
        er_status st = parse_copy(b.p, b.n, &copy, &f);
        CHECK(st == ER_OK && f != NULL, "valid v%u file, alignment %llu: %s: %s", cases[c].version,
              (unsigned long long)cases[c].alignment, er_status_name(st), er_last_error());
        if (f) {
            CHECK(f->mapping == NULL, "gguf_parse must not set mapping");
            check_valid(f, copy, b.n, cases[c].version, cases[c].alignment, cases[c].alignment_kv != 0);
            (void)touch_file(f);
        }
        gguf_close(f);
        free(copy);
        w_free(&b);
    }

    /* header only: no metadata, no tensors; NULL name; alignment 1 */
    wbuf b = {0};
    w_header(&b, 3, 0, 0);
    EXPECT_OK("header only", &b);
    gguf_file *f = NULL;
    CHECK(gguf_parse(b.p, b.n, NULL, &f) == ER_OK && f && f->n_kv == 0 && f->n_tensors == 0 &&
              f->alignment == GGUF_DEFAULT_ALIGNMENT,
          "header only, NULL name");
    gguf_close(f);
    w_free(&b);

    /* no tensors: the file may end before the padded data section */
    w_header(&b, 3, 0, 1);
    w_kv_u32(&b, "general.alignment", 1024);
    EXPECT_OK("no tensors, alignment past the end", &b);
    w_free(&b);

    /* alignment 1: data immediately after the infos, odd offsets allowed */
    w_header(&b, 3, 2, 1);
    w_kv_u32(&b, "general.alignment", 1);
    w_tensor(&b, "a", 1, (const uint64_t[]){3}, ER_TYPE_I8, 0);
    w_tensor(&b, "b", 1, (const uint64_t[]){1}, ER_TYPE_I8, 3);
    w_data(&b, 1, 4);
    {
        uint8_t *copy;
        f = NULL;
        er_status st = parse_copy(b.p, b.n, &copy, &f);
        CHECK(st == ER_OK && f, "alignment 1: %s", er_last_error());
        if (f) {
            CHECK(f->alignment == 1 && f->tensors[1].offset == 3 && f->tensors[1].data == copy + b.n - 1,
                  "alignment 1 offsets");
        }
        gguf_close(f);
        free(copy);
    }
    w_free(&b);

    /* a large but legal shape (the whole tensor is 4 bytes of I8 * 1 ... fits) and every
     * known type with a block-aligned row */
    for (uint32_t type = 0; type < ER_TYPE_COUNT; type++) {
        const er_type_traits *tr = er_type_get(type);
        if (!tr)
            continue;
        w_header(&b, 3, 1, 0);
        w_tensor(&b, "t", 2, (const uint64_t[]){(uint64_t)tr->block_size * 2, 3}, type, 0);
        w_data(&b, 32, tr->type_size * 6);
        uint8_t *copy;
        f = NULL;
        er_status st = parse_copy(b.p, b.n, &copy, &f);
        CHECK(st == ER_OK && f && f->tensors[0].size == tr->type_size * 6, "type %s: %s", tr->name,
              er_last_error());
        gguf_close(f);
        free(copy);
        w_free(&b);
    }

    /* bad arguments */
    f = (gguf_file *)&f;
    CHECK(gguf_parse(NULL, 10, "x", &f) == ER_ERR_INVALID_ARG && f == NULL, "NULL data with a size");
    CHECK(gguf_parse((const uint8_t *)"GGUF", 4, "x", NULL) == ER_ERR_INVALID_ARG, "NULL out");
    f = (gguf_file *)&f;
    CHECK(gguf_parse(NULL, 0, "x", &f) == ER_ERR_FORMAT && f == NULL, "NULL data, size 0");
    gguf_close(NULL);
}

/* ---- truncation: every prefix of a valid file fails cleanly ------------------------ */

static void truncations_of(const wbuf *b, const char *what) {
    int n_bad_status = 0, n_bad_out = 0, n_bad_msg = 0;
    for (size_t len = 0; len < b->n; len++) {
        uint8_t *copy;
        gguf_file *f = (gguf_file *)&f;
        er_status st = parse_copy(b->p, len, &copy, &f);
        const char *msg = er_last_error();
        /* a truncation says where: a byte offset, or how many bytes are left */
        const int useful = strstr(msg, "mem.gguf") &&
                           (strstr(msg, "offset") || strstr(msg, "bytes left") || strstr(msg, "remain"));
        if (st != ER_ERR_FORMAT && n_bad_status++ < 5)
            CHECK(0, "%s cut to %zu bytes: status %s (%s)", what, len, er_status_name(st), msg);
        if (f != NULL && n_bad_out++ < 5)
            CHECK(0, "%s cut to %zu bytes: *out not NULL", what, len);
        if (st != ER_OK && !useful && n_bad_msg++ < 5)
            CHECK(0, "%s cut to %zu bytes: message without a position: '%s'", what, len, msg);
        if (st == ER_OK)
            gguf_close(f);
        free(copy);
    }
    CHECK(n_bad_status == 0 && n_bad_out == 0 && n_bad_msg == 0, "%s: %zu truncations", what, b->n);
}

static void test_truncation(void) {
    wbuf b = {0};
    build_valid(&b, 3, 64);
    truncations_of(&b, "v3 file");
    /* the truncation inside the data names the tensor and says "outside the file" */
    b.n--;
    EXPECT_FAIL("last byte cut", &b, ER_ERR_FORMAT, "'w.f16'", "outside the file");
    w_free(&b);
    build_valid(&b, 2, 0);
    truncations_of(&b, "v2 file");
    w_free(&b);
}

/* ---- hostile headers and metadata --------------------------------------------------- */

static void test_header(void) {
    wbuf b = {0};
    w_bytes(&b, "GGUX", 4);
    w_u32(&b, 3);
    w_u64(&b, 0);
    w_u64(&b, 0);
    EXPECT_FAIL("bad magic", &b, ER_ERR_FORMAT, "magic", NULL);
    w_free(&b);
    w_bytes(&b, "FUGG", 4);
    EXPECT_FAIL("reversed magic, short", &b, ER_ERR_FORMAT, "magic", NULL);
    w_free(&b);
    w_bytes(&b, "GGU", 3);
    EXPECT_FAIL("3 bytes", &b, ER_ERR_FORMAT, "offset 0", NULL);
    w_free(&b);

    w_header(&b, 1, 0, 0);
    EXPECT_FAIL("version 1", &b, ER_ERR_UNSUPPORTED, "version 1", NULL);
    w_free(&b);
    w_header(&b, 4, 0, 0);
    EXPECT_FAIL("version 4", &b, ER_ERR_FORMAT, "version 4", NULL);
    w_free(&b);
    w_header(&b, 0, 0, 0);
    EXPECT_FAIL("version 0", &b, ER_ERR_FORMAT, "version 0", NULL);
    w_free(&b);
    w_header(&b, 0xFFFFFFFFu, 0, 0);
    EXPECT_FAIL("version 0xFFFFFFFF", &b, ER_ERR_FORMAT, "version 4294967295", NULL);
    w_free(&b);
    /* a big-endian file reads as version 0x03000000 */
    w_header(&b, 0x03000000u, 0, 0);
    EXPECT_FAIL("big-endian version", &b, ER_ERR_FORMAT, "version", NULL);
    w_free(&b);

    static const uint64_t huge[] = {(uint64_t)1 << 63, UINT64_MAX, (uint64_t)1 << 32, 1000};
    for (int i = 0; i < 4; i++) {
        w_header(&b, 3, 0, huge[i]);
        w_kv_u32(&b, "k", 1); /* a few real bytes after the header */
        EXPECT_FAIL("huge n_kv", &b, ER_ERR_FORMAT, "metadata pairs", NULL);
        w_free(&b);
        w_header(&b, 3, huge[i], 1);
        w_kv_u32(&b, "k", 1);
        EXPECT_FAIL("huge n_tensors", &b, ER_ERR_FORMAT, "tensors", NULL);
        w_free(&b);
    }
}

static void test_metadata(void) {
    wbuf b = {0};
    static const uint64_t huge_len[] = {UINT64_MAX, (uint64_t)1 << 63, (uint64_t)1 << 32, 1000};

    /* huge key length, huge string value length */
    for (int i = 0; i < 4; i++) {
        w_header(&b, 3, 0, 1);
        w_u64(&b, huge_len[i]);
        w_data(&b, 1, 64);
        EXPECT_FAIL("huge key length", &b, ER_ERR_FORMAT, "length", "offset 24");
        w_free(&b);
        w_header(&b, 3, 0, 1);
        w_key(&b, "s", GGUF_TYPE_STRING);
        w_u64(&b, huge_len[i]);
        w_data(&b, 1, 64);
        EXPECT_FAIL("huge string length", &b, ER_ERR_FORMAT, "length", "offset");
        w_free(&b);
        w_header(&b, 3, 0, 1);
        w_key(&b, "as", GGUF_TYPE_ARRAY);
        w_u32(&b, GGUF_TYPE_STRING);
        w_u64(&b, 2);
        w_str(&b, "ok");
        w_u64(&b, huge_len[i]);
        w_data(&b, 1, 64);
        EXPECT_FAIL("huge length of an array string", &b, ER_ERR_FORMAT, "length", "offset");
        w_free(&b);
    }

    /* huge array counts of every element kind: must fail before allocating */
    static const struct {
        enum gguf_value_type type;
        uint64_t n;
    } arrays[] = {
        {GGUF_TYPE_UINT64, (uint64_t)1 << 62}, {GGUF_TYPE_UINT64, UINT64_MAX},
        {GGUF_TYPE_UINT8, UINT64_MAX},         {GGUF_TYPE_UINT8, 65},
        {GGUF_TYPE_STRING, (uint64_t)1 << 62}, {GGUF_TYPE_STRING, UINT64_MAX / 8 + 1},
        {GGUF_TYPE_ARRAY, (uint64_t)1 << 62},  {GGUF_TYPE_ARRAY, UINT64_MAX / 12 + 1},
        {GGUF_TYPE_FLOAT64, (uint64_t)1 << 61}, {GGUF_TYPE_BOOL, (uint64_t)1 << 40},
    };
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        w_header(&b, 3, 0, 1);
        w_key(&b, "big", GGUF_TYPE_ARRAY);
        w_u32(&b, (uint32_t)arrays[i].type);
        w_u64(&b, arrays[i].n);
        w_data(&b, 1, 64);
        EXPECT_FAIL("huge array count", &b, ER_ERR_FORMAT, "'big'", "claims");
        w_free(&b);
    }
    /* ... and inside a nested array */
    w_header(&b, 3, 0, 1);
    w_key(&b, "nest", GGUF_TYPE_ARRAY);
    w_u32(&b, GGUF_TYPE_ARRAY);
    w_u64(&b, 2);
    w_u32(&b, GGUF_TYPE_INT32);
    w_u64(&b, 1);
    w_u32(&b, 5);
    w_u32(&b, GGUF_TYPE_UINT64);
    w_u64(&b, (uint64_t)1 << 62);
    w_data(&b, 1, 64);
    EXPECT_FAIL("huge nested array count", &b, ER_ERR_FORMAT, "'nest'", "claims");
    w_free(&b);

    /* unknown value types */
    static const uint32_t bad_types[] = {GGUF_TYPE_COUNT, 14, 255, 0x80000000u, 0xFFFFFFFFu};
    for (int i = 0; i < 5; i++) {
        w_header(&b, 3, 0, 2);
        w_kv_u32(&b, "fine", 1);
        w_key(&b, "weird", (enum gguf_value_type)bad_types[i]);
        w_u64(&b, 0);
        EXPECT_FAIL("unknown value type", &b, ER_ERR_FORMAT, "'weird'", "unknown value type");
        w_free(&b);
        w_header(&b, 3, 0, 1);
        w_key(&b, "weird_array", GGUF_TYPE_ARRAY);
        w_u32(&b, bad_types[i]);
        w_u64(&b, 1);
        w_u64(&b, 0);
        EXPECT_FAIL("unknown array element type", &b, ER_ERR_FORMAT, "'weird_array'", "unknown element type");
        w_free(&b);
        w_header(&b, 3, 0, 1);
        w_key(&b, "weird_inner", GGUF_TYPE_ARRAY);
        w_u32(&b, GGUF_TYPE_ARRAY);
        w_u64(&b, 1);
        w_u32(&b, bad_types[i]);
        w_u64(&b, 1);
        w_u64(&b, 0);
        EXPECT_FAIL("unknown nested element type", &b, ER_ERR_FORMAT, "'weird_inner'", "unknown element type");
        w_free(&b);
    }

    /* nesting: GGUF_MAX_ARRAY_DEPTH levels of arrays are fine, one more is not */
    for (int levels = 1; levels <= GGUF_MAX_ARRAY_DEPTH + 2; levels++) {
        w_header(&b, 3, 0, 1);
        w_key(&b, "deep", GGUF_TYPE_ARRAY);
        for (int l = 0; l < levels - 1; l++) {
            w_u32(&b, GGUF_TYPE_ARRAY);
            w_u64(&b, 1);
        }
        w_u32(&b, GGUF_TYPE_UINT8);
        w_u64(&b, 1);
        w_u8(&b, 42);
        if (levels <= GGUF_MAX_ARRAY_DEPTH) {
            uint8_t *copy;
            gguf_file *f = NULL;
            er_status st = parse_copy(b.p, b.n, &copy, &f);
            CHECK(st == ER_OK && f, "%d nested arrays: %s", levels, er_last_error());
            if (f) {
                const gguf_value *v = &f->kv[0].value;
                int depth = 1;
                while (v->type == GGUF_TYPE_ARRAY && v->arr.type == GGUF_TYPE_ARRAY && v->arr.n == 1 && v->arr.items) {
                    v = &v->arr.items[0];
                    depth++;
                }
                int64_t iv;
                CHECK(depth == levels && gguf_array_int(v, 0, &iv) && iv == 42, "%d nested arrays: walked %d",
                      levels, depth);
            }
            gguf_close(f);
            free(copy);
        } else {
            EXPECT_FAIL("arrays nested too deep", &b, ER_ERR_FORMAT, "'deep'", "nested deeper");
        }
        w_free(&b);
    }
    /* a deep nest that is also wide (fails after allocating: checks the cleanup) */
    w_header(&b, 3, 0, 1);
    w_key(&b, "wide", GGUF_TYPE_ARRAY);
    w_u32(&b, GGUF_TYPE_ARRAY);
    w_u64(&b, 3);
    w_u32(&b, GGUF_TYPE_STRING);
    w_u64(&b, 2);
    w_str(&b, "x");
    w_str(&b, "y");
    w_u32(&b, GGUF_TYPE_ARRAY);
    w_u64(&b, 1);
    w_u32(&b, GGUF_TYPE_INT8);
    w_u64(&b, 1);
    w_u8(&b, 1);
    w_u32(&b, GGUF_TYPE_ARRAY);
    w_u64(&b, 1);
    w_u32(&b, GGUF_TYPE_STRING);
    w_u64(&b, 1);
    w_u64(&b, 1000); /* string longer than the file */
    w_bytes(&b, "z", 1);
    EXPECT_FAIL("nested string too long", &b, ER_ERR_FORMAT, "length 1000", NULL);
    w_free(&b);

    /* a long key is cut in messages, so that what follows it still fits */
    {
        char key[3000];
        memset(key, 'k', sizeof key - 1);
        key[sizeof key - 1] = '\0';
        w_header(&b, 3, 0, 1);
        w_key(&b, key, (enum gguf_value_type)77);
        w_data(&b, 1, 16);
        EXPECT_FAIL("long key, unknown type", &b, ER_ERR_FORMAT, "kkkk'", "unknown value type 77");
        w_free(&b);
        w_header(&b, 3, 0, 1);
        w_key(&b, key, GGUF_TYPE_ARRAY);
        w_u32(&b, 99);
        w_u64(&b, 0);
        EXPECT_FAIL("long key, unknown element type", &b, ER_ERR_FORMAT, "kkkk'", "unknown element type 99");
        w_free(&b);
        w_header(&b, 3, 0, 2);
        w_kv_u32(&b, key, 1);
        w_kv_u32(&b, key, 2);
        EXPECT_FAIL("long key, duplicate", &b, ER_ERR_FORMAT, "duplicate metadata key 'kkkk", NULL);
        CHECK(strlen(er_last_error()) < 400, "long duplicate key message: %zu bytes", strlen(er_last_error()));
        w_free(&b);
    }

    /* empty key; duplicate keys */
    w_header(&b, 3, 0, 2);
    w_kv_u32(&b, "ok", 1);
    w_kv_u32(&b, "", 2);
    EXPECT_FAIL("empty key", &b, ER_ERR_FORMAT, "empty key", "offset");
    w_free(&b);
    w_header(&b, 3, 0, 3);
    w_kv_u32(&b, "dup.key", 1);
    w_kv_str(&b, "other", "x");
    w_kv_str(&b, "dup.key", "again");
    EXPECT_FAIL("duplicate key", &b, ER_ERR_FORMAT, "duplicate", "'dup.key'");
    w_free(&b);
    /* a key that is a prefix of another is not a duplicate */
    w_header(&b, 3, 0, 2);
    w_kv_u32(&b, "dup", 1);
    w_kv_u32(&b, "dup.key", 1);
    EXPECT_OK("prefix keys", &b);
    w_free(&b);
}

/* ---- hostile tensor infos ----------------------------------------------------------- */

/* one tensor "bad.t" with the given dims and type at `offset`, and `data` bytes of data */
static void one_tensor(wbuf *b, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset, size_t data) {
    w_header(b, 3, 2, 1);
    w_kv_str(b, "general.architecture", "llama");
    w_tensor(b, "good.t", 1, (const uint64_t[]){8}, ER_TYPE_F32, 0);
    w_tensor(b, "bad.t", n_dims, ne, type, offset);
    w_data(b, 32, data);
}

static void test_tensors(void) {
    wbuf b = {0};
    const uint64_t ne5[5] = {2, 2, 2, 2, 2};
    one_tensor(&b, 0, ne5, ER_TYPE_F32, 32, 64);
    EXPECT_FAIL("n_dims 0", &b, ER_ERR_FORMAT, "'bad.t'", "0 dimensions");
    w_free(&b);
    one_tensor(&b, 5, ne5, ER_TYPE_F32, 32, 256);
    EXPECT_FAIL("n_dims 5", &b, ER_ERR_FORMAT, "'bad.t'", "5 dimensions");
    w_free(&b);
    one_tensor(&b, 0xFFFFFFFFu, ne5, ER_TYPE_F32, 32, 256);
    EXPECT_FAIL("n_dims 2^32-1", &b, ER_ERR_FORMAT, "'bad.t'", "dimensions");
    w_free(&b);
    one_tensor(&b, 4, ne5, ER_TYPE_F32, 32, 96);
    EXPECT_OK("n_dims 4", &b);
    w_free(&b);

    /* zero and overflowing dimensions */
    static const uint64_t bad_ne[][4] = {
        {0, 1, 1, 1},
        {4, 0, 1, 1},
        {4, 4, 4, 0},
        {(uint64_t)1 << 32, (uint64_t)1 << 32, 1, 1},
        {(uint64_t)1 << 62, 2, 1, 1},
        {UINT64_MAX, 1, 1, 1},
        {(uint64_t)1 << 63, 1, 1, 1},
        {65536, 65536, 65536, 65536},
        {3, (uint64_t)1 << 21, (uint64_t)1 << 21, (uint64_t)1 << 21},
    };
    for (size_t i = 0; i < sizeof bad_ne / sizeof bad_ne[0]; i++) {
        one_tensor(&b, 4, bad_ne[i], ER_TYPE_F32, 32, 64);
        EXPECT_FAIL("bad dimension", &b, ER_ERR_FORMAT, "'bad.t'", "dimension");
        w_free(&b);
    }

    /* element counts that fit but whose byte size does not fit in 64 bits (or in the file):
     * the size must not wrap around to something small */
    static const struct {
        uint64_t ne[4];
        uint32_t type;
    } big[] = {
        {{(uint64_t)1 << 62, 1, 1, 1}, ER_TYPE_F32},         /* 2^64 bytes: wraps to 0 */
        {{(uint64_t)1 << 31, (uint64_t)1 << 31, 1, 1}, ER_TYPE_F32},
        {{(uint64_t)1 << 61, 2, 1, 1}, ER_TYPE_F64},         /* 2^65 bytes */
        {{(uint64_t)1 << 62, 1, 1, 1}, ER_TYPE_I64},
        {{((uint64_t)1 << 61) + 1, 1, 1, 1}, ER_TYPE_F64},   /* 2^64 + 8 bytes: wraps to 8 */
        {{(uint64_t)1 << 62, 1, 1, 1}, ER_TYPE_F16},         /* 2^63 bytes: fits, but not the file */
        {{(uint64_t)1 << 32, 1 << 20, 1 << 10, 1}, ER_TYPE_Q8_K},
    };
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        one_tensor(&b, 4, big[i].ne, big[i].type, 32, 64);
        EXPECT_FAIL("byte size overflow", &b, ER_ERR_FORMAT, "'bad.t'", NULL);
        w_free(&b);
    }

    /* unknown type ids: ggml's removed Q4_2/Q4_3 (4, 5) and ids past the table */
    static const uint32_t bad_type[] = {4, 5, 16 + 100, 99, 31, ER_TYPE_COUNT, 0xFFFFFFFFu};
    for (size_t i = 0; i < sizeof bad_type / sizeof bad_type[0]; i++) {
        one_tensor(&b, 1, (const uint64_t[]){32}, bad_type[i], 32, 256);
        EXPECT_FAIL("unknown type id", &b, ER_ERR_FORMAT, "'bad.t'", "unknown type id");
        w_free(&b);
    }

    /* a row that is not a whole number of blocks */
    one_tensor(&b, 2, (const uint64_t[]){33, 2}, ER_TYPE_Q8_0, 32, 256);
    EXPECT_FAIL("Q8_0 row of 33", &b, ER_ERR_FORMAT, "'bad.t'", "block size");
    w_free(&b);
    one_tensor(&b, 1, (const uint64_t[]){255}, ER_TYPE_Q4_K, 32, 256);
    EXPECT_FAIL("Q4_K row of 255", &b, ER_ERR_FORMAT, "'bad.t'", "block size");
    w_free(&b);
    one_tensor(&b, 2, (const uint64_t[]){32, 2}, ER_TYPE_Q8_0, 32, 100);
    EXPECT_OK("Q8_0 row of 32", &b);
    w_free(&b);

    /* data out of bounds: "bad.t" is 8 F32 = 32 bytes; the data section holds 64 */
    static const uint64_t bad_offset[] = {
        96, 64, 64 + 32 * 1000, (uint64_t)1 << 40, UINT64_MAX - 31, ((uint64_t)1 << 63) + 32, UINT64_MAX - 63,
    };
    for (size_t i = 0; i < sizeof bad_offset / sizeof bad_offset[0]; i++) {
        one_tensor(&b, 1, (const uint64_t[]){8}, ER_TYPE_F32, bad_offset[i], 64);
        EXPECT_FAIL("offset out of bounds", &b, ER_ERR_FORMAT, "'bad.t'", "outside the file");
        w_free(&b);
    }
    one_tensor(&b, 1, (const uint64_t[]){8}, ER_TYPE_F32, 32, 63);
    EXPECT_FAIL("offset + size one past the end", &b, ER_ERR_FORMAT, "'bad.t'", "outside the file");
    w_free(&b);
    one_tensor(&b, 1, (const uint64_t[]){9}, ER_TYPE_F32, 32, 64);
    EXPECT_FAIL("size one element too long", &b, ER_ERR_FORMAT, "'bad.t'", "outside the file");
    w_free(&b);
    one_tensor(&b, 1, (const uint64_t[]){8}, ER_TYPE_F32, 32, 64);
    EXPECT_OK("exactly at the end", &b);
    w_free(&b);
    /* tensors but no data section at all: the padding runs past the end */
    w_header(&b, 3, 1, 0);
    w_tensor(&b, "t", 1, (const uint64_t[]){1}, ER_TYPE_I8, 0);
    EXPECT_FAIL("no data section", &b, ER_ERR_FORMAT, "data section", "past the end");
    w_free(&b);

    /* misaligned offsets */
    one_tensor(&b, 1, (const uint64_t[]){4}, ER_TYPE_F32, 16, 64);
    EXPECT_FAIL("misaligned offset", &b, ER_ERR_FORMAT, "'bad.t'", "alignment");
    w_free(&b);
    one_tensor(&b, 1, (const uint64_t[]){4}, ER_TYPE_F32, 33, 128);
    EXPECT_FAIL("odd offset", &b, ER_ERR_FORMAT, "'bad.t'", "alignment");
    w_free(&b);
    w_header(&b, 3, 1, 1);
    w_kv_u32(&b, "general.alignment", 64);
    w_tensor(&b, "t64", 1, (const uint64_t[]){4}, ER_TYPE_F32, 32);
    w_data(&b, 64, 128);
    EXPECT_FAIL("offset aligned to 32, not 64", &b, ER_ERR_FORMAT, "'t64'", "alignment 64");
    w_free(&b);

    /* general.alignment of the wrong type, zero, not a power of two */
    static const enum gguf_value_type align_types[] = {GGUF_TYPE_UINT64, GGUF_TYPE_INT32, GGUF_TYPE_UINT16,
                                                       GGUF_TYPE_STRING, GGUF_TYPE_FLOAT32};
    for (int i = 0; i < 5; i++) {
        w_header(&b, 3, 0, 1);
        w_key(&b, "general.alignment", align_types[i]);
        if (align_types[i] == GGUF_TYPE_STRING)
            w_str(&b, "32");
        else if (align_types[i] == GGUF_TYPE_UINT64)
            w_u64(&b, 32);
        else if (align_types[i] == GGUF_TYPE_UINT16)
            w_u16(&b, 32);
        else if (align_types[i] == GGUF_TYPE_FLOAT32)
            w_f32(&b, 32.0f);
        else
            w_u32(&b, 32);
        EXPECT_FAIL("general.alignment type", &b, ER_ERR_FORMAT, "general.alignment", "type");
        w_free(&b);
    }
    static const uint32_t bad_align[] = {0, 3, 48, 100, 0xFFFFFFFFu, 0x80000001u};
    for (int i = 0; i < 6; i++) {
        w_header(&b, 3, 0, 1);
        w_kv_u32(&b, "general.alignment", bad_align[i]);
        EXPECT_FAIL("general.alignment value", &b, ER_ERR_FORMAT, "general.alignment", "power of two");
        w_free(&b);
    }
    /* the largest u32 power of two: the data section would start past this small file */
    w_header(&b, 3, 1, 1);
    w_kv_u32(&b, "general.alignment", 0x80000000u);
    w_tensor(&b, "t", 1, (const uint64_t[]){1}, ER_TYPE_I8, 0);
    w_data(&b, 1, 64);
    EXPECT_FAIL("alignment 2^31", &b, ER_ERR_FORMAT, "data section", "past the end");
    w_free(&b);

    /* duplicate and empty tensor names */
    w_header(&b, 3, 3, 0);
    w_tensor(&b, "same", 1, (const uint64_t[]){8}, ER_TYPE_F32, 0);
    w_tensor(&b, "other", 1, (const uint64_t[]){8}, ER_TYPE_F32, 32);
    w_tensor(&b, "same", 1, (const uint64_t[]){8}, ER_TYPE_F32, 64);
    w_data(&b, 32, 96);
    EXPECT_FAIL("duplicate tensor", &b, ER_ERR_FORMAT, "duplicate", "'same'");
    w_free(&b);
    w_header(&b, 3, 2, 0);
    w_tensor(&b, "ok", 1, (const uint64_t[]){8}, ER_TYPE_F32, 0);
    w_tensor(&b, "", 1, (const uint64_t[]){8}, ER_TYPE_F32, 32);
    w_data(&b, 32, 64);
    EXPECT_FAIL("empty tensor name", &b, ER_ERR_FORMAT, "empty name", "offset");
    w_free(&b);
    /* a huge tensor name length */
    w_header(&b, 3, 1, 0);
    w_u64(&b, UINT64_MAX);
    w_data(&b, 1, 64);
    EXPECT_FAIL("huge tensor name length", &b, ER_ERR_FORMAT, "tensor name", "length");
    w_free(&b);
    /* a long tensor name is cut in the message, which stays a bounded single line */
    {
        char name[3000];
        memset(name, 'n', sizeof name - 1);
        name[sizeof name - 1] = '\0';
        w_header(&b, 3, 1, 0);
        w_tensor(&b, name, 1, (const uint64_t[]){8}, 99, 0);
        w_data(&b, 32, 32);
        EXPECT_FAIL("long tensor name", &b, ER_ERR_FORMAT, "nnnnnnnn", "unknown type id");
        CHECK(strlen(er_last_error()) < 1024 && !strchr(er_last_error(), '\n'), "long name message");
        w_free(&b);
    }
}

/* ---- random corruption -------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t xorshift64(void) {
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static void test_corruption(void) {
    wbuf b = {0};
    build_valid(&b, 3, 64);
    uint8_t *mutated = malloc(b.n);
    if (!mutated)
        abort();
    int n_ok = 0, n_err = 0, n_bad = 0;
    enum { ITERATIONS = 4000 };
    static const uint8_t interesting[] = {0x00, 0xFF, 0x7F, 0x80, 0x01, 0x40, 0x20, 0x0D};
    for (int it = 0; it < ITERATIONS; it++) {
        memcpy(mutated, b.p, b.n);
        size_t size = b.n;
        const int n_flips = 1 + (int)(xorshift64() % 8);
        for (int k = 0; k < n_flips; k++) {
            const size_t at = (size_t)(xorshift64() % size);
            switch (xorshift64() % 4) {
            case 0: mutated[at] ^= (uint8_t)(1u << (xorshift64() % 8)); break;
            case 1: mutated[at] = (uint8_t)xorshift64(); break;
            case 2: mutated[at] = interesting[xorshift64() % sizeof interesting]; break;
            default: /* a whole u64 (a count, length or offset) set to an extreme */
                if (at + 8 <= size) {
                    const uint64_t v = (xorshift64() & 1) ? UINT64_MAX - (xorshift64() % 4) : (xorshift64() % 4) << 60;
                    memcpy(mutated + at, &v, 8);
                }
                break;
            }
        }
        if (xorshift64() % 8 == 0)
            size = (size_t)(xorshift64() % size);
        uint8_t *copy;
        gguf_file *f = (gguf_file *)&f;
        er_status st = parse_copy(mutated, size, &copy, &f);
        if (st == ER_OK) {
            n_ok++;
            if (!f)
                n_bad++;
            else
                (void)touch_file(f);
            gguf_close(f);
        } else {
            n_err++;
            if (f != NULL || er_last_error()[0] == '\0' || (st != ER_ERR_FORMAT && st != ER_ERR_UNSUPPORTED)) {
                if (n_bad < 5)
                    CHECK(0, "corruption %d: status %s, out %p, message '%s'", it, er_status_name(st), (void *)f,
                          er_last_error());
                n_bad++;
            }
        }
        free(copy);
    }
    CHECK(n_bad == 0, "%d bad results out of %d corruptions", n_bad, ITERATIONS);
    CHECK(n_err > ITERATIONS / 4 && n_ok > 0, "corruptions: %d parsed, %d refused", n_ok, n_err);
    free(mutated);
    w_free(&b);
}

/* ---- files on disk ------------------------------------------------------------------ */

static void test_open(void) {
    gguf_file *f = (gguf_file *)&f;
    clear_error();
    er_status st = gguf_open("tests/data/no-such-file.gguf", &f);
    CHECK(st == ER_ERR_IO && f == NULL, "nonexistent: %s", er_status_name(st));
    CHECK(strstr(er_last_error(), "no-such-file.gguf") != NULL, "nonexistent message: %s", er_last_error());

    f = (gguf_file *)&f;
    clear_error();
    st = gguf_open("tests/data", &f);
    CHECK(st == ER_ERR_IO && f == NULL, "directory: %s", er_status_name(st));
    CHECK(strstr(er_last_error(), "tests/data") != NULL && strstr(er_last_error(), "regular file") != NULL,
          "directory message: %s", er_last_error());
    CHECK(gguf_open(NULL, &f) == ER_ERR_INVALID_ARG && gguf_open("x", NULL) == ER_ERR_INVALID_ARG,
          "NULL arguments");

    char path[] = "/tmp/er_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd >= 0) {
        f = (gguf_file *)&f;
        clear_error();
        st = gguf_open(path, &f);
        CHECK(st == ER_ERR_FORMAT && f == NULL, "empty file: %s", er_status_name(st));
        CHECK(strstr(er_last_error(), path) != NULL && strstr(er_last_error(), "empty") != NULL,
              "empty file message: %s", er_last_error());

        /* a valid file, mapped: the result owns the mapping */
        wbuf b = {0};
        build_valid(&b, 3, 64);
        CHECK(write(fd, b.p, b.n) == (ssize_t)b.n, "write");
        f = NULL;
        st = gguf_open(path, &f);
        CHECK(st == ER_OK && f && f->mapping != NULL && f->size == b.n, "valid temp file: %s", er_last_error());
        if (f)
            check_valid(f, f->base, f->size, 3, 64, 1);
        gguf_close(f);
        /* cut inside the tensor data */
        CHECK(ftruncate(fd, (off_t)(b.n - 10)) == 0, "ftruncate");
        f = (gguf_file *)&f;
        clear_error();
        st = gguf_open(path, &f);
        CHECK(st == ER_ERR_FORMAT && f == NULL && strstr(er_last_error(), path) &&
                  strstr(er_last_error(), "outside the file"),
              "truncated temp file: %s: %s", er_status_name(st), er_last_error());
        w_free(&b);
        close(fd);
        unlink(path);
    }

    f = NULL;
    st = gguf_open(TEST_DATA "stories260K.gguf", &f);
    CHECK(st == ER_OK && f, "stories260K.gguf: %s", er_last_error());
    if (!f)
        return;
    const gguf_kv *arch = gguf_find_kv(f, "general.architecture");
    CHECK(arch && arch->value.type == GGUF_TYPE_STRING && gguf_string_eq(arch->value.str, "llama"),
          "stories260K architecture");
    int64_t n_layer = 0;
    const gguf_kv *kv = gguf_find_kv(f, "llama.block_count");
    CHECK(kv && gguf_value_as_int(&kv->value, &n_layer) && n_layer == 5, "stories260K block_count %lld",
          (long long)n_layer);
    CHECK(f->version == 3 && f->n_tensors > 0 && f->alignment == 32, "stories260K header");
    kv = gguf_find_kv(f, "tokenizer.ggml.tokens");
    CHECK(kv && kv->value.type == GGUF_TYPE_ARRAY && kv->value.arr.type == GGUF_TYPE_STRING &&
              kv->value.arr.n == 512 && gguf_string_eq(kv->value.arr.strs[1], "<s>"),
          "stories260K vocabulary");
    const gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    CHECK(t && t->type == ER_TYPE_F32 && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 512 &&
              t->size == 64 * 512 * 4,
          "stories260K token_embd.weight");
    uint64_t end = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const uint64_t e = f->data_offset + f->tensors[i].offset + f->tensors[i].size;
        end = e > end ? e : end;
    }
    CHECK(end <= f->size, "stories260K tensors inside the file");
    (void)touch_file(f);

    /* truncated copies of the real file, cut in the header, metadata, infos and data */
    const size_t cuts[] = {0, 23, 24, 100, 5000, (size_t)f->data_offset - 1, (size_t)f->data_offset,
                           (size_t)f->data_offset + 1000, f->size / 2, f->size - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        uint8_t *copy;
        gguf_file *g = (gguf_file *)&g;
        st = parse_copy(f->base, cuts[i], &copy, &g);
        CHECK(st == ER_ERR_FORMAT && g == NULL && er_last_error()[0], "stories260K cut at %zu: %s", cuts[i],
              er_status_name(st));
        if (cuts[i] > (size_t)f->data_offset)
            CHECK(strstr(er_last_error(), "outside the file") != NULL, "stories260K cut at %zu: %s", cuts[i],
                  er_last_error());
        free(copy);
    }
    gguf_close(f);
}

void test_gguf(void) {
    test_valid();
    test_truncation();
    test_header();
    test_metadata();
    test_tensors();
    test_corruption();
    test_open();
}
