/*
 * gguf_write.c - GGUF writer (see gguf_write.h).
 *
 * Everything before the data section is sized and laid out when it is written (begin):
 * tensor offsets are the running sum of the tensor sizes, each rounded up to the
 * alignment. Writes go through stdio with a large buffer; the first failing write is
 * remembered and reported by every later call, so callers may check only at the end.
 *
 * The file is written under a temporary name beside the target and renamed over it only
 * once complete and fsync'ed: a failure, a kill or a crash leaves the target as it was
 * (at worst a stray temporary file after a kill), never half written under its name.
 */
#define _POSIX_C_SOURCE 200809L

#include "io/gguf_write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/status.h"
#include "quant/types.h"

typedef struct wkv {
    char *key; /* owned, NUL-terminated */
    size_t key_len;
    gguf_value value; /* strings/arrays are views, except own_str */
    char *own_str;    /* owned string value, or NULL */
} wkv;

typedef struct wtensor {
    char *name; /* owned */
    size_t name_len;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint32_t type;
    size_t size;
    uint64_t offset; /* from the start of the data section */
} wtensor;

struct gguf_writer {
    wkv *kv;
    uint64_t n_kv, cap_kv;
    wtensor *tensors;
    uint64_t n_tensors, cap_tensors;
    /* while writing */
    FILE *f;
    char *path;     /* the target, replaced by finish */
    char *tmp_path; /* what f writes, beside path; removed unless renamed */
    uint64_t alignment;
    uint64_t pos;       /* bytes written so far */
    uint64_t n_written; /* tensors written */
    int failed;         /* a write failed: errno_saved says why */
    int errno_saved;
};

static const size_t scalar_size[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = 1,   [GGUF_TYPE_INT8] = 1,   [GGUF_TYPE_UINT16] = 2, [GGUF_TYPE_INT16] = 2,
    [GGUF_TYPE_UINT32] = 4,  [GGUF_TYPE_INT32] = 4,  [GGUF_TYPE_FLOAT32] = 4, [GGUF_TYPE_BOOL] = 1,
    [GGUF_TYPE_UINT64] = 8,  [GGUF_TYPE_INT64] = 8,  [GGUF_TYPE_FLOAT64] = 8,
};

er_status gguf_writer_create(gguf_writer **out) {
    if (!out)
        return er_fail(ER_ERR_INVALID_ARG, "gguf_writer_create: NULL out");
    *out = calloc(1, sizeof **out);
    if (!*out)
        return er_fail(ER_ERR_NO_MEMORY, "gguf writer: out of memory");
    return ER_OK;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w)
        return;
    if (w->f) { /* begun, never finished: the target was never touched */
        fclose(w->f);
        unlink(w->tmp_path);
    }
    for (uint64_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].own_str);
    }
    for (uint64_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->kv);
    free(w->tensors);
    free(w->path);
    free(w->tmp_path);
    free(w);
}

static wkv *find_kv(gguf_writer *w, const char *key, size_t len) {
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (w->kv[i].key_len == len && memcmp(w->kv[i].key, key, len) == 0)
            return &w->kv[i];
    return NULL;
}

static er_status check_value(const gguf_value *v, int depth) {
    if ((unsigned)v->type >= GGUF_TYPE_COUNT)
        return er_fail(ER_ERR_INVALID_ARG, "gguf writer: unknown value type %d", (int)v->type);
    if (v->type != GGUF_TYPE_ARRAY)
        return ER_OK;
    if (depth >= GGUF_MAX_ARRAY_DEPTH || (unsigned)v->arr.type >= GGUF_TYPE_COUNT)
        return er_fail(ER_ERR_INVALID_ARG, "gguf writer: array nested too deep or of unknown element type");
    if (v->arr.n > 0 && ((v->arr.type == GGUF_TYPE_STRING && !v->arr.strs) ||
                         (v->arr.type == GGUF_TYPE_ARRAY && !v->arr.items) ||
                         (v->arr.type != GGUF_TYPE_STRING && v->arr.type != GGUF_TYPE_ARRAY && !v->arr.raw)))
        return er_fail(ER_ERR_INVALID_ARG, "gguf writer: array value without its elements");
    if (v->arr.type == GGUF_TYPE_ARRAY)
        for (uint64_t i = 0; i < v->arr.n; i++) {
            er_status st = check_value(&v->arr.items[i], depth + 1);
            if (st != ER_OK)
                return st;
        }
    return ER_OK;
}

/* The entry for key (added at the end when new), its old owned string freed. */
static er_status entry(gguf_writer *w, const char *key, size_t len, wkv **out) {
    if (w->f)
        return er_fail(ER_ERR_INVALID_ARG, "gguf writer: metadata set after the header was written");
    wkv *e = find_kv(w, key, len);
    if (!e) {
        if (w->n_kv == w->cap_kv) {
            const uint64_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
            wkv *grown = realloc(w->kv, cap * sizeof *grown);
            if (!grown)
                return er_fail(ER_ERR_NO_MEMORY, "gguf writer: out of memory for metadata");
            w->kv = grown;
            w->cap_kv = cap;
        }
        e = &w->kv[w->n_kv];
        memset(e, 0, sizeof *e);
        e->key = malloc(len + 1);
        if (!e->key)
            return er_fail(ER_ERR_NO_MEMORY, "gguf writer: out of memory for metadata");
        memcpy(e->key, key, len);
        e->key[len] = '\0';
        e->key_len = len;
        w->n_kv++;
    }
    free(e->own_str);
    e->own_str = NULL;
    *out = e;
    return ER_OK;
}

er_status gguf_writer_set(gguf_writer *w, gguf_string key, const gguf_value *value) {
    wkv *e;
    er_status st;
    if (!w || !value || (!key.data && key.len))
        return er_fail(ER_ERR_INVALID_ARG, "gguf_writer_set: NULL argument");
    if ((st = check_value(value, 0)) != ER_OK || (st = entry(w, key.data, (size_t)key.len, &e)) != ER_OK)
        return st;
    e->value = *value;
    return ER_OK;
}

er_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) {
    gguf_value value;
    memset(&value, 0, sizeof value);
    value.type = GGUF_TYPE_UINT32;
    value.u64 = v;
    return gguf_writer_set(w, (gguf_string){key, strlen(key)}, &value);
}

er_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *s) {
    wkv *e;
    er_status st;
    if (!w || !key || !s)
        return er_fail(ER_ERR_INVALID_ARG, "gguf_writer_set_str: NULL argument");
    if ((st = entry(w, key, strlen(key), &e)) != ER_OK)
        return st;
    e->own_str = strdup(s);
    if (!e->own_str)
        return er_fail(ER_ERR_NO_MEMORY, "gguf writer: out of memory");
    memset(&e->value, 0, sizeof e->value);
    e->value.type = GGUF_TYPE_STRING;
    e->value.str.data = e->own_str;
    e->value.str.len = strlen(s);
    return ER_OK;
}

void gguf_writer_remove(gguf_writer *w, const char *key) {
    wkv *e = w && !w->f ? find_kv(w, key, strlen(key)) : NULL;
    if (!e)
        return;
    free(e->key);
    free(e->own_str);
    const uint64_t i = (uint64_t)(e - w->kv);
    memmove(e, e + 1, (size_t)(w->n_kv - i - 1) * sizeof *e);
    w->n_kv--;
}

er_status gguf_writer_add_tensor(gguf_writer *w, gguf_string name, int n_dims, const int64_t *ne, uint32_t type) {
    if (!w || !ne || (!name.data && name.len))
        return er_fail(ER_ERR_INVALID_ARG, "gguf_writer_add_tensor: NULL argument");
    const int nl = (int)(name.len > 200 ? 200 : name.len);
    if (w->f)
        return er_fail(ER_ERR_INVALID_ARG, "gguf writer: tensor '%.*s' added after the header was written", nl, name.data);
    const er_type_traits *t = er_type_get(type);
    if (!t)
        return er_fail(ER_ERR_INVALID_ARG, "gguf writer: tensor '%.*s' has unknown type %u", nl, name.data, type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return er_fail(ER_ERR_INVALID_ARG, "gguf writer: tensor '%.*s' has %d dimensions", nl, name.data, n_dims);
    uint64_t n = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 0 || (ne[d] > 0 && n > (UINT64_MAX >> 2) / (uint64_t)ne[d]))
            return er_fail(ER_ERR_INVALID_ARG, "gguf writer: tensor '%.*s' has a bad shape", nl, name.data);
        n *= (uint64_t)ne[d];
    }
    if (ne[0] % t->block_size != 0)
        return er_fail(ER_ERR_INVALID_ARG, "gguf writer: tensor '%.*s': row length %lld is not a multiple of the %s block size %lld",
                       nl, name.data, (long long)ne[0], t->name, (long long)t->block_size);
    if (n / (uint64_t)t->block_size > SIZE_MAX / t->type_size)
        return er_fail(ER_ERR_INVALID_ARG, "gguf writer: tensor '%.*s' is too large", nl, name.data);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (w->tensors[i].name_len == name.len && memcmp(w->tensors[i].name, name.data, (size_t)name.len) == 0)
            return er_fail(ER_ERR_INVALID_ARG, "gguf writer: duplicate tensor name '%.*s'", nl, name.data);
    if (w->n_tensors == w->cap_tensors) {
        const uint64_t cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
        wtensor *grown = realloc(w->tensors, cap * sizeof *grown);
        if (!grown)
            return er_fail(ER_ERR_NO_MEMORY, "gguf writer: out of memory for tensor infos");
        w->tensors = grown;
        w->cap_tensors = cap;
    }
    wtensor *wt = &w->tensors[w->n_tensors];
    memset(wt, 0, sizeof *wt);
    wt->name = malloc((size_t)name.len + 1);
    if (!wt->name)
        return er_fail(ER_ERR_NO_MEMORY, "gguf writer: out of memory for tensor infos");
    memcpy(wt->name, name.data, (size_t)name.len);
    wt->name[name.len] = '\0';
    wt->name_len = (size_t)name.len;
    wt->n_dims = n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        wt->ne[d] = d < n_dims ? ne[d] : 1;
    wt->type = type;
    wt->size = (size_t)(n / (uint64_t)t->block_size) * t->type_size;
    w->n_tensors++;
    return ER_OK;
}

size_t gguf_writer_tensor_size(const gguf_writer *w, uint64_t i) {
    return w && i < w->n_tensors ? w->tensors[i].size : 0;
}

/* ---- serialization ------------------------------------------------------------------ */

static void put(gguf_writer *w, const void *p, size_t n) {
    if (w->failed || n == 0)
        return;
    if (fwrite(p, 1, n, w->f) != n) {
        w->failed = 1;
        w->errno_saved = errno;
        return;
    }
    w->pos += n;
}

static void put_u32(gguf_writer *w, uint32_t v) { put(w, &v, 4); } /* x86-64, arm64: little-endian */
static void put_u64(gguf_writer *w, uint64_t v) { put(w, &v, 8); }
static void put_str(gguf_writer *w, const char *s, uint64_t len) {
    put_u64(w, len);
    put(w, s, (size_t)len);
}

static void put_zeros(gguf_writer *w, uint64_t n) {
    static const uint8_t zeros[256];
    while (n > 0) {
        const size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        put(w, zeros, k);
        n -= k;
    }
}

static void put_scalar(gguf_writer *w, const gguf_value *v) {
    uint8_t b[8];
    switch (v->type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_BOOL: b[0] = (uint8_t)v->u64; break;
    case GGUF_TYPE_INT8: b[0] = (uint8_t)(int8_t)v->i64; break;
    case GGUF_TYPE_UINT16: { uint16_t x = (uint16_t)v->u64; memcpy(b, &x, 2); break; }
    case GGUF_TYPE_INT16: { int16_t x = (int16_t)v->i64; memcpy(b, &x, 2); break; }
    case GGUF_TYPE_UINT32: { uint32_t x = (uint32_t)v->u64; memcpy(b, &x, 4); break; }
    case GGUF_TYPE_INT32: { int32_t x = (int32_t)v->i64; memcpy(b, &x, 4); break; }
    case GGUF_TYPE_UINT64: memcpy(b, &v->u64, 8); break;
    case GGUF_TYPE_INT64: memcpy(b, &v->i64, 8); break;
    case GGUF_TYPE_FLOAT32: { float x = (float)v->f64; memcpy(b, &x, 4); break; } /* exact: read from f32 */
    case GGUF_TYPE_FLOAT64: memcpy(b, &v->f64, 8); break;
    default: return;
    }
    put(w, b, scalar_size[v->type]);
}

/* An array body (element type, count, elements), as after an ARRAY tag. */
static void put_array(gguf_writer *w, const gguf_value *v) {
    put_u32(w, (uint32_t)v->arr.type);
    put_u64(w, v->arr.n);
    if (v->arr.type == GGUF_TYPE_STRING)
        for (uint64_t i = 0; i < v->arr.n; i++)
            put_str(w, v->arr.strs[i].data, v->arr.strs[i].len);
    else if (v->arr.type == GGUF_TYPE_ARRAY)
        for (uint64_t i = 0; i < v->arr.n; i++)
            put_array(w, &v->arr.items[i]);
    else /* packed little-endian elements, as stored in the file */
        put(w, v->arr.raw, (size_t)v->arr.n * scalar_size[v->arr.type]);
}

static void put_value(gguf_writer *w, const gguf_value *v) {
    if (v->type == GGUF_TYPE_STRING)
        put_str(w, v->str.data, v->str.len);
    else if (v->type == GGUF_TYPE_ARRAY)
        put_array(w, v);
    else
        put_scalar(w, v);
}

static er_status io_error(gguf_writer *w, const char *what) {
    return er_fail(ER_ERR_IO, "%s: %s at byte offset %llu: %s", w->path, what, (unsigned long long)w->pos,
                   strerror(w->errno_saved));
}

/* The target must be absent or a regular file: rename replaces a directory entry of any
 * kind (a FIFO, a device such as /dev/full, a symbolic link rather than what it points
 * to), and what is not a model file is not ours to replace. */
static er_status check_target(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0 || S_ISREG(sb.st_mode))
        return ER_OK; /* absent (or unreachable: creating the temporary file says why) */
    const char *kind = S_ISDIR(sb.st_mode)                          ? "a directory"
                       : S_ISLNK(sb.st_mode)                        ? "a symbolic link"
                       : S_ISFIFO(sb.st_mode)                       ? "a FIFO"
                       : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device"
                                                                    : "not a regular file";
    return er_fail(ER_ERR_INVALID_ARG, "%s: is %s; the output must be a new or regular file (it is never replaced)",
                   path, kind);
}

/* w->f: a new file beside w->path (rename does not cross file systems), created with
 * O_EXCL and mode 0666 less the umask, as fopen would create the target (mkstemp's 0600
 * would make the model unreadable to other users). */
static er_status create_temp(gguf_writer *w) {
    const size_t cap = strlen(w->path) + 48;
    struct timespec ts;
    int fd = -1;
    if (!(w->tmp_path = malloc(cap)))
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", w->path);
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec;
    for (int attempt = 0; fd < 0 && attempt < 100; attempt++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        snprintf(w->tmp_path, cap, "%s.%ld-%06x.tmp", w->path, (long)getpid(), (unsigned)(x >> 40));
        fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0)
        return er_fail(ER_ERR_IO, "%s: cannot create %s: %s", w->path, w->tmp_path, strerror(errno));
    if (!(w->f = fdopen(fd, "wb"))) {
        const int e = errno;
        close(fd);
        unlink(w->tmp_path);
        return er_fail(ER_ERR_IO, "%s: cannot open %s: %s", w->path, w->tmp_path, strerror(e));
    }
    return ER_OK;
}

er_status gguf_writer_begin(gguf_writer *w, const char *path) {
    er_status st;
    if (!w || !path)
        return er_fail(ER_ERR_INVALID_ARG, "gguf_writer_begin: NULL argument");
    if (w->f || w->path)
        return er_fail(ER_ERR_INVALID_ARG, "gguf writer: begun twice");
    if ((st = check_target(path)) != ER_OK)
        return st;
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    const wkv *al = find_kv(w, "general.alignment", strlen("general.alignment"));
    if (al) {
        if (al->value.type != GGUF_TYPE_UINT32 || al->value.u64 == 0 || (al->value.u64 & (al->value.u64 - 1)))
            return er_fail(ER_ERR_INVALID_ARG, "%s: general.alignment must be a u32 power of two", path);
        w->alignment = al->value.u64;
    }
    uint64_t offset = 0;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        w->tensors[i].offset = offset;
        offset += (w->tensors[i].size + w->alignment - 1) / w->alignment * w->alignment;
    }
    w->path = strdup(path);
    if (!w->path)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", path);
    if ((st = create_temp(w)) != ER_OK)
        return st;
    setvbuf(w->f, NULL, _IOFBF, 1 << 20);
    put(w, "GGUF", 4);
    put_u32(w, 3);
    put_u64(w, w->n_tensors);
    put_u64(w, w->n_kv);
    for (uint64_t i = 0; i < w->n_kv; i++) {
        put_str(w, w->kv[i].key, w->kv[i].key_len);
        put_u32(w, (uint32_t)w->kv[i].value.type);
        put_value(w, &w->kv[i].value);
    }
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        put_str(w, t->name, t->name_len);
        put_u32(w, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++)
            put_u64(w, (uint64_t)t->ne[d]);
        put_u32(w, t->type);
        put_u64(w, t->offset);
    }
    put_zeros(w, (w->alignment - w->pos % w->alignment) % w->alignment);
    return w->failed ? io_error(w, "writing the header") : ER_OK;
}

er_status gguf_writer_write_tensor(gguf_writer *w, const void *data, size_t size) {
    if (!w || !w->f || (!data && size))
        return er_fail(ER_ERR_INVALID_ARG, "gguf_writer_write_tensor: no file begun");
    if (w->n_written >= w->n_tensors)
        return er_fail(ER_ERR_INVALID_ARG, "%s: more tensor data than the %llu tensors declared", w->path,
                       (unsigned long long)w->n_tensors);
    const wtensor *t = &w->tensors[w->n_written];
    if (size != t->size)
        return er_fail(ER_ERR_INVALID_ARG, "%s: tensor '%s' has %zu bytes, %zu given", w->path, t->name, t->size, size);
    put(w, data, size);
    put_zeros(w, (w->alignment - size % w->alignment) % w->alignment);
    w->n_written++;
    return w->failed ? io_error(w, "writing tensor data") : ER_OK;
}

er_status gguf_writer_finish(gguf_writer *w) {
    er_status st;
    if (!w || !w->f)
        return er_fail(ER_ERR_INVALID_ARG, "gguf_writer_finish: no file begun");
    if (w->n_written != w->n_tensors)
        return er_fail(ER_ERR_INVALID_ARG, "%s: %llu of %llu tensors written", w->path,
                       (unsigned long long)w->n_written, (unsigned long long)w->n_tensors);
    FILE *f = w->f;
    w->f = NULL;
    /* on the disk before the rename makes it the target: a crash then leaves the old file
     * or the whole new one (the rename itself is durable once the directory is synced,
     * which is left to the system) */
    if ((fflush(f) != 0 || fsync(fileno(f)) != 0) && !w->failed) {
        w->failed = 1;
        w->errno_saved = errno;
    }
    if (fclose(f) != 0 && !w->failed) {
        w->failed = 1;
        w->errno_saved = errno;
    }
    if (w->failed) {
        st = io_error(w, "closing");
        goto fail;
    }
    if ((st = check_target(w->path)) != ER_OK) /* again: the write may have taken minutes */
        goto fail;
    if (rename(w->tmp_path, w->path) != 0) {
        st = er_fail(ER_ERR_IO, "%s: cannot rename %s to it: %s", w->path, w->tmp_path, strerror(errno));
        goto fail;
    }
    return ER_OK;
fail:
    unlink(w->tmp_path);
    return st;
}
