/* info.c - `edgerunner info`: the metadata and tensor summary of a GGUF file. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "io/gguf.h"
#include "io/hf.h"
#include "model/model.h"
#include "quant/types.h"

static void print_value(const gguf_value *v, int depth) {
    switch (v->type) {
    case GGUF_TYPE_STRING: {
        const int n = (int)(v->str.len > 120 ? 120 : v->str.len);
        printf("\"");
        for (int i = 0; i < n; i++) {
            unsigned char ch = (unsigned char)v->str.data[i];
            if (ch == '\n')
                printf("\\n");
            else if (ch < 32 || ch == 127)
                printf("\\x%02x", ch);
            else
                putchar(ch);
        }
        printf(v->str.len > 120 ? "\"... (%" PRIu64 " bytes)" : "\"", v->str.len);
        break;
    }
    case GGUF_TYPE_ARRAY: {
        const uint64_t shown = v->arr.n < 8 ? v->arr.n : 8;
        printf("[%s x %" PRIu64 "] [", gguf_type_name(v->arr.type), v->arr.n);
        for (uint64_t i = 0; i < shown; i++) {
            gguf_value elem;
            int64_t iv;
            double fv;
            if (i)
                printf(", ");
            if (v->arr.type == GGUF_TYPE_STRING) {
                elem.type = GGUF_TYPE_STRING;
                elem.str = v->arr.strs[i];
                print_value(&elem, depth + 1);
            } else if (v->arr.type == GGUF_TYPE_ARRAY) {
                print_value(&v->arr.items[i], depth + 1);
            } else if (v->arr.type == GGUF_TYPE_FLOAT32 || v->arr.type == GGUF_TYPE_FLOAT64) {
                if (gguf_array_float(v, i, &fv))
                    printf("%g", fv);
            } else if (v->arr.type == GGUF_TYPE_UINT64) {
                uint64_t u;
                memcpy(&u, v->arr.raw + 8 * i, 8);
                printf("%" PRIu64, u);
            } else if (gguf_array_int(v, i, &iv)) {
                printf("%" PRId64, iv);
            }
        }
        printf(v->arr.n > shown ? ", ...]" : "]");
        break;
    }
    case GGUF_TYPE_FLOAT32:
    case GGUF_TYPE_FLOAT64: printf("%g", v->f64); break;
    case GGUF_TYPE_BOOL: printf(v->u64 ? "true" : "false"); break;
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_UINT64: printf("%" PRIu64, v->u64); break;
    default: printf("%" PRId64, v->i64); break;
    }
}

/* llama.cpp's names of general.file_type (enum llama_ftype) */
static const char *file_type_name(int64_t ftype) {
    static const struct { int64_t id; const char *name; } names[] = {
        {0, "F32"},     {1, "F16"},     {2, "Q4_0"},    {3, "Q4_1"},    {7, "Q8_0"},    {8, "Q5_0"},
        {9, "Q5_1"},    {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"}, {13, "Q3_K_L"}, {14, "Q4_K_S"},
        {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"}, {18, "Q6_K"},   {21, "Q2_K_S"}, {32, "BF16"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].id == ftype)
            return names[i].name;
    return "other";
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            if (cli_no_operands("info", argc, argv, i))
                return 1;
            break;
        }
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc)
            path = argv[++i];
        else {
            fprintf(stderr, "edgerunner: info: unknown option '%s'\n", argv[i]);
            return 1;
        }
    }
    if (!path)
        return cli_fail("info: -m MODEL is required");
    gguf_file *f = NULL;
    cli_catch_sigbus(path);
    er_status st = hf_open_any(path, 0, &f);
    if (st != ER_OK)
        return cli_fail_status(st);
    printf("file: %s\nGGUF version %u, %zu bytes, %" PRIu64 " metadata pairs, %" PRIu64
           " tensors, alignment %" PRIu64 ", data at byte %" PRIu64 "\n\nmetadata:\n",
           path, f->version, f->size, f->n_kv, f->n_tensors, f->alignment, f->data_offset);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        printf("  %.*s = ", (int)f->kv[i].key.len, f->kv[i].key.data);
        print_value(&f->kv[i].value, 0);
        printf("\n");
    }
    uint64_t n_params = 0, n_bytes = 0;
    uint64_t type_count[ER_TYPE_COUNT] = {0}, type_params[ER_TYPE_COUNT] = {0}, type_bytes[ER_TYPE_COUNT] = {0};
    printf("\ntensors:\n");
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        uint64_t ne = 1;
        char shape[96];
        int len = 0;
        for (int d = 0; d < t->n_dims; d++) {
            ne *= (uint64_t)t->ne[d];
            len += snprintf(shape + len, sizeof shape - (size_t)len, d ? ", %" PRId64 : "%" PRId64, t->ne[d]);
        }
        printf("  %-32.*s %-5s [%s] at %" PRIu64 "\n", (int)t->name.len, t->name.data, er_type_get(t->type)->name,
               shape, f->data_offset + t->offset);
        n_params += ne;
        n_bytes += t->size;
        type_count[t->type]++;
        type_params[t->type] += ne;
        type_bytes[t->type] += t->size;
    }
    printf("\n%" PRIu64 " parameters, %.2f MiB of tensor data, %.3f bits per weight\n", n_params,
           (double)n_bytes / (1024.0 * 1024.0), n_params ? 8.0 * (double)n_bytes / (double)n_params : 0.0);
    const gguf_kv *ft = gguf_find_kv(f, "general.file_type");
    int64_t ftype;
    if (ft && gguf_value_as_int(&ft->value, &ftype))
        printf("file type: %s (general.file_type %" PRId64 ")\n", file_type_name(ftype), ftype);
    /* the mix: a quantized model keeps norms in F32 and may give some weights more bits */
    printf("types:");
    for (int t = 0; t < ER_TYPE_COUNT; t++)
        if (type_count[t])
            printf(" %s: %" PRIu64 " tensors (%.1f%% of weights, %.3f bits/weight)", er_type_get((uint32_t)t)->name,
                   type_count[t], 100.0 * (double)type_params[t] / (double)n_params,
                   8.0 * (double)type_bytes[t] / (double)type_params[t]);
    printf("\n");
    gguf_close(f);
    /* what the engine makes of it: the architecture and the features it needs, or why it
     * cannot run it (a vocabulary-only file, an unsupported architecture) */
    er_model *model = NULL;
    char line[1024];
    if ((st = er_model_load(path, NULL, &model)) == ER_OK) {
        model_describe(model, line, sizeof line);
        printf("model: %s\n", line);
    } else {
        printf("model: not loadable: %s\n", er_last_error());
    }
    er_model_free(model);
    return 0;
}
