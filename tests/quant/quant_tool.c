/*
 * quant_tool.c - the engine's reference quantizer and dequantizer on raw files, for the
 * Python oracle tests (tests/quant/test_quant.py). Built as BUILD/tests/quant_tool.
 *
 *   quant_tool dequant TYPE IN OUT   IN: raw blocks of TYPE; OUT: float32 LE values
 *   quant_tool quant TYPE IN OUT     IN: float32 LE values; OUT: raw blocks of TYPE
 *   quant_tool act IMPL FMT IN OUT   the CPU fast path's activation quantizer (kernels.h):
 *                                    IMPL scalar or avx2, FMT Q8_0, Q8_1 or Q8_K;
 *                                    IN: float32 LE values; OUT: raw FMT blocks
 *   quant_tool dot IMPL TYPE N W A OUT   the fast path's dot products (kernels.h): W rows of
 *                                    N weights of TYPE, A one row of N activations in the
 *                                    type's activation format; OUT: float32 LE, one per row
 *
 * TYPE is a type name of the table (Q4_0, Q6_K, ...). Exit 0, 1 with a message, or 3 when
 * IMPL is avx2 and this CPU (or build) has no AVX2 kernels.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "quant/types.h"

static unsigned char *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        unsigned char *grown = realloc(buf, cap *= 2);
        if (!grown)
            free(buf);
        buf = grown;
    }
    fclose(f);
    *size = n;
    return buf;
}

static int write_all(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    const int ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok;
}

/* act IMPL FMT IN OUT: the row of a weight type whose activations are in FMT */
static int act(const char *impl, const char *fmt, const char *in_path, const char *out_path) {
    static const struct {
        const char *fmt;
        uint32_t weight;
    } via[] = {{"Q8_0", ER_TYPE_Q8_0}, {"Q8_1", ER_TYPE_Q4_1}, {"Q8_K", ER_TYPE_Q4_K}};
    const cpu_kernels *k = NULL;
    int known = 0;
    for (size_t i = 0; i < sizeof via / sizeof via[0]; i++)
        if (!strcmp(fmt, via[i].fmt)) {
            known = !strcmp(impl, "scalar") || !strcmp(impl, "avx2");
            k = !strcmp(impl, "scalar") ? cpu_kernels_ref(via[i].weight) : cpu_kernels_avx2(via[i].weight);
        }
    if (!known) {
        fprintf(stderr, "quant_tool: act scalar|avx2 Q8_0|Q8_1|Q8_K IN OUT\n");
        return 1;
    }
    if (!k) {
        fprintf(stderr, "quant_tool: no %s kernels on this CPU\n", impl);
        return 3;
    }
    const int64_t block = er_type_get(k->vec_dot_type)->block_size;
    size_t size;
    unsigned char *in = read_all(in_path, &size);
    if (!in || size % ((size_t)block * sizeof(float)) != 0) {
        fprintf(stderr, "quant_tool: %s: unreadable, or not whole blocks of %lld floats\n", in_path, (long long)block);
        free(in);
        return 1;
    }
    const int64_t n = (int64_t)(size / sizeof(float));
    const size_t out_size = cpu_act_row_size(k, n);
    float *x = malloc(size ? size : 1);
    void *out = malloc(out_size ? out_size : 1);
    int rc = 1;
    if (x && out) {
        memcpy(x, in, size);
        memset(out, 0, out_size ? out_size : 1);
        k->quantize_row(x, out, n);
        rc = write_all(out_path, out, out_size) ? 0 : 1;
    }
    if (rc)
        fprintf(stderr, "quant_tool: out of memory, or cannot write %s\n", out_path);
    free(in);
    free(x);
    free(out);
    return rc;
}

/* dot IMPL TYPE N W A OUT */
static int dot(const char *impl, const char *type, const char *n_str, const char *w_path, const char *a_path,
               const char *out_path) {
    const cpu_kernels *k = NULL;
    const er_type_traits *t = NULL;
    for (uint32_t id = 0; id < ER_TYPE_COUNT && !t; id++)
        if (er_type_get(id) && !strcmp(er_type_get(id)->name, type)) {
            t = er_type_get(id);
            k = !strcmp(impl, "avx2") ? cpu_kernels_avx2(id) : cpu_kernels_ref(id);
        }
    const int64_t n = atoll(n_str);
    if (!t || n <= 0 || n % t->block_size != 0 || (strcmp(impl, "scalar") && strcmp(impl, "avx2"))) {
        fprintf(stderr, "quant_tool: dot scalar|avx2 TYPE N W A OUT (N a multiple of the block size)\n");
        return 1;
    }
    if (!k) {
        fprintf(stderr, "quant_tool: no %s kernels for %s on this CPU\n", impl, type);
        return 3;
    }
    const size_t rs = er_type_row_size(t, n), as = cpu_act_row_size(k, n);
    size_t w_size, a_size;
    unsigned char *w = read_all(w_path, &w_size), *a = read_all(a_path, &a_size);
    int rc = 1;
    if (!w || !a || w_size % rs != 0 || a_size != as) {
        fprintf(stderr, "quant_tool: %s: not whole rows of %zu bytes, or %s: not %zu bytes\n", w_path, rs, a_path, as);
    } else {
        const size_t rows = w_size / rs;
        float *out = malloc(rows ? rows * sizeof(float) : 1);
        void *wa = malloc(w_size ? w_size : 1), *aa = malloc(as); /* aligned copies */
        if (out && wa && aa) {
            memcpy(wa, w, w_size);
            memcpy(aa, a, as);
            for (size_t r = 0; r < rows; r++)
                out[r] = k->vec_dot((const unsigned char *)wa + r * rs, aa, n);
            rc = write_all(out_path, out, rows * sizeof(float)) ? 0 : 1;
        }
        if (rc)
            fprintf(stderr, "quant_tool: out of memory, or cannot write %s\n", out_path);
        free(out);
        free(wa);
        free(aa);
    }
    free(w);
    free(a);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 8 && !strcmp(argv[1], "dot"))
        return dot(argv[2], argv[3], argv[4], argv[5], argv[6], argv[7]);
    if (argc == 6 && !strcmp(argv[1], "act"))
        return act(argv[2], argv[3], argv[4], argv[5]);
    if (argc != 5 || (strcmp(argv[1], "dequant") && strcmp(argv[1], "quant"))) {
        fprintf(stderr, "usage: quant_tool dequant|quant TYPE IN OUT, act IMPL FMT IN OUT, or dot IMPL TYPE N W A OUT\n");
        return 1;
    }
    const er_type_traits *t = NULL;
    for (uint32_t id = 0; id < ER_TYPE_COUNT && !t; id++) {
        const er_type_traits *c = er_type_get(id);
        if (c && !strcmp(c->name, argv[2]))
            t = c;
    }
    if (!t || !t->to_f32 || !t->from_f32) {
        fprintf(stderr, "quant_tool: no kernels for type '%s'\n", argv[2]);
        return 1;
    }
    size_t size;
    unsigned char *in = read_all(argv[3], &size);
    if (!in) {
        fprintf(stderr, "quant_tool: cannot read %s\n", argv[3]);
        return 1;
    }
    const int dequant = !strcmp(argv[1], "dequant");
    const size_t unit = dequant ? t->type_size : (size_t)t->block_size * sizeof(float);
    if (size % unit != 0) {
        fprintf(stderr, "quant_tool: %s: %zu bytes is not a whole number of %zu-byte blocks\n", argv[3], size, unit);
        free(in);
        return 1;
    }
    const int64_t n = (int64_t)(size / unit) * t->block_size;
    const size_t out_size = dequant ? (size_t)n * sizeof(float) : (size_t)(size / unit) * t->type_size;
    void *out = malloc(out_size ? out_size : 1);
    float *x = NULL;
    if (out && !dequant) { /* the input may be unaligned in the buffer: copy the floats */
        x = malloc(size ? size : 1);
        if (x)
            memcpy(x, in, size);
    }
    int rc = 1;
    if (!out || (!dequant && !x))
        fprintf(stderr, "quant_tool: out of memory\n");
    else {
        if (dequant)
            t->to_f32(in, out, n);
        else
            t->from_f32(x, out, n);
        rc = write_all(argv[4], out, out_size) ? 0 : 1;
        if (rc)
            fprintf(stderr, "quant_tool: cannot write %s\n", argv[4]);
    }
    free(in);
    free(out);
    free(x);
    return rc;
}
