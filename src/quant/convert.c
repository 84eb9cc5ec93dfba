/*
 * convert.c - quant_plan and quant_convert_rows (see convert.h).
 *
 * Rows are independent: each thread converts a contiguous range of rows with its own F32
 * row buffer, so the bytes written do not depend on the thread count.
 */
#define _POSIX_C_SOURCE 200809L

#include "quant/convert.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

/* ---- the plan ---------------------------------------------------------------------------- */

static int64_t meta_int(const gguf_file *f, const char *arch, const char *suffix, int64_t def) {
    char key[160];
    int64_t v;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const gguf_kv *kv = gguf_find_kv(f, key);
    return kv && gguf_value_as_int(&kv->value, &v) ? v : def;
}

/* Tensor i's name, NUL-terminated, into buf (room for the longest name). */
static const char *tensor_name(const gguf_file *f, uint64_t i, char *buf) {
    memcpy(buf, f->tensors[i].name.data, (size_t)f->tensors[i].name.len);
    buf[f->tensors[i].name.len] = '\0';
    return buf;
}

er_status quant_plan(const gguf_file *f, const quant_mix *mix, int allow_requant, const char *path, uint32_t *types,
                     int *n_fallback) {
    size_t longest = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        longest = f->tensors[i].name.len > longest ? (size_t)f->tensors[i].name.len : longest;
    char *name = malloc(longest + 1);
    if (!name)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", path);

    /* what the recipe needs to know about the model */
    quant_model_desc desc = {0, 0, 1, 0};
    char arch[64] = "";
    const gguf_kv *akv = gguf_find_kv(f, "general.architecture");
    if (akv && akv->value.type == GGUF_TYPE_STRING)
        snprintf(arch, sizeof arch, "%.*s", (int)(akv->value.str.len < 63 ? akv->value.str.len : 63), akv->value.str.data);
    desc.n_layer = meta_int(f, arch, "block_count", 0);
    desc.llama_70b = !strcmp(arch, "llama") && desc.n_layer == 80 &&
                     meta_int(f, arch, "attention.head_count", 0) != meta_int(f, arch, "attention.head_count_kv", 0);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        tensor_name(f, i, name);
        if (strstr(name, "attn_v.weight"))
            desc.n_attn_v++;
        if (!strcmp(name, "output.weight"))
            desc.tied = 0;
    }

    er_status st = ER_OK;
    if (n_fallback)
        *n_fallback = 0;
    for (uint64_t i = 0; i < f->n_tensors && st == ER_OK; i++) {
        const gguf_tensor *t = &f->tensors[i];
        int fell_back = 0;
        tensor_name(f, i, name);
        types[i] = quant_mix_tensor_type(mix, &desc, name, t->n_dims, t->ne, t->type, &fell_back);
        if (n_fallback)
            *n_fallback += fell_back;
        if (types[i] == t->type)
            continue;
        const er_type_traits *from = er_type_get(t->type), *to = er_type_get(types[i]);
        if (!from->to_f32 || !to->from_f32)
            st = er_fail(ER_ERR_UNSUPPORTED, "%s: tensor '%s': cannot convert %s to %s", path, name, from->name, to->name);
        else if (!allow_requant && t->type != ER_TYPE_F32 && t->type != ER_TYPE_F16 && t->type != ER_TYPE_BF16)
            st = er_fail(ER_ERR_UNSUPPORTED, "%s: tensor '%s' is already %s; re-quantizing it to %s loses accuracy "
                         "(edgerunner quantize --allow-requantize does it anyway)", path, name, from->name, to->name);
    }
    free(name);
    return st;
}

/* ---- the rows ---------------------------------------------------------------------------- */

/* Rows [row0, row1) of one tensor: dequantize each to f32, quantize to the new type. */
typedef struct convert_job {
    const er_type_traits *from, *to;
    const uint8_t *in;
    uint8_t *out;
    int64_t n_per_row, row0, row1;
    size_t in_row, out_row;
    float *buf; /* (n_per_row) */
} convert_job;

static void *convert_job_run(void *arg) {
    const convert_job *j = arg;
    for (int64_t r = j->row0; r < j->row1; r++) {
        j->from->to_f32(j->in + (size_t)r * j->in_row, j->buf, j->n_per_row);
        j->to->from_f32(j->buf, j->out + (size_t)r * j->out_row, j->n_per_row);
    }
    return NULL;
}

int quant_convert_rows(const er_type_traits *from, const er_type_traits *to, const uint8_t *in, uint8_t *out,
                       int64_t n_per_row, int64_t n_rows, int n_threads) {
    convert_job jobs[QUANT_MAX_THREADS];
    pthread_t tid[QUANT_MAX_THREADS];
    int started[QUANT_MAX_THREADS] = {0}, ok = 1;
    if (n_threads > QUANT_MAX_THREADS)
        n_threads = QUANT_MAX_THREADS;
    if (n_threads > n_rows)
        n_threads = (int)n_rows;
    if (n_threads < 1)
        n_threads = 1;
    for (int t = 0; t < n_threads; t++) {
        jobs[t] = (convert_job){from, to, in, out, n_per_row, n_rows * t / n_threads, n_rows * (t + 1) / n_threads,
                                er_type_row_size(from, n_per_row), er_type_row_size(to, n_per_row),
                                malloc((size_t)n_per_row * sizeof(float))};
        if (!jobs[t].buf)
            ok = 0;
    }
    for (int t = 1; ok && t < n_threads; t++)
        started[t] = pthread_create(&tid[t], NULL, convert_job_run, &jobs[t]) == 0;
    if (ok) {
        convert_job_run(&jobs[0]);
        for (int t = 1; t < n_threads; t++) {
            if (started[t])
                pthread_join(tid[t], NULL);
            else
                convert_job_run(&jobs[t]); /* no thread: do its share here */
        }
    }
    for (int t = 0; t < n_threads; t++)
        free(jobs[t].buf);
    return ok;
}
