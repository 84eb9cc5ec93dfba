/*
 * quantize.c - `edgerunner quantize IN.gguf OUT.gguf TYPE`: rewrites a GGUF with its weights
 * in TYPE, a single type or one of llama.cpp's mixes (src/quant/mix.h says which tensor
 * gets what). Every metadata pair is copied in order; general.file_type and
 * general.quantization_version are set as llama.cpp's quantizer sets them; tensors that are
 * not weights (norms, rope_freqs) are copied unchanged. Weights are converted row by row
 * (to_f32, then the type's reference quantizer from_f32) on -t threads, by quant/convert.h,
 * which er_model_params.type (-m X --type TYPE) uses too: the same bytes.
 *
 * Weights that are already quantized are only re-quantized with --allow-requantize (as in
 * llama.cpp: quantizing twice compounds the error).
 *
 * `edgerunner convert DIR OUT.gguf [TYPE]` is the same rewrite of a Hugging Face folder
 * (io/hf.h reads it as the GGUF llama.cpp's converter would write); without TYPE every
 * tensor keeps the type the folder has it in (1-D tensors are F32). `quantize` takes a
 * folder as IN too.
 *
 * OUT is replaced only by a whole file (the writer's temporary file, renamed when done):
 * a failure, Ctrl-C or kill -9 leaves an existing OUT as it was; OUT must be absent or a
 * regular file.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "core/cpus.h"
#include "io/gguf.h"
#include "io/gguf_write.h"
#include "io/hf.h"
#include "quant/convert.h"

static int usage_error(const char *cmd, const char *what) {
    /* one line, as every error of the command line */
    fprintf(stderr, "edgerunner: %s: %s (usage: edgerunner %s; TYPE: %s)\n", cmd, what,
            strcmp(cmd, "convert") ? "quantize IN.gguf OUT.gguf TYPE [-t N] [--allow-requantize]"
                                   : "convert DIR OUT.gguf [TYPE] [-t N]",
            quant_mix_names());
    return 1;
}

/* general.file_type of a file whose weights all have one type (llama.cpp's converter
 * writes it for its --outtype), or -1 when they do not. */
static int64_t uniform_file_type(const gguf_file *in) {
    static const struct {
        uint32_t type, file_type;
    } plain[] = {{ER_TYPE_F32, 0}, {ER_TYPE_F16, 1}, {ER_TYPE_BF16, 32}};
    int64_t seen = -1;
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const gguf_tensor *t = &in->tensors[i];
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(t->name.len < 127 ? t->name.len : 127), t->name.data);
        if (!quant_mix_is_weight(name, t->n_dims))
            continue;
        if (seen >= 0 && seen != t->type)
            return -1;
        seen = t->type;
    }
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (seen == plain[i].type)
            return plain[i].file_type;
    return -1;
}

/* quantize IN OUT TYPE, or convert DIR OUT [TYPE] (cmd "convert": TYPE optional) */
static int rewrite(const char *cmd, int argc, char **argv) {
    const int type_optional = !strcmp(cmd, "convert");
    const char *pos[3] = {NULL, NULL, NULL};
    int n_pos = 0, allow_requant = 0, operands_only = 0;
    int64_t n_threads = er_usable_cpus();
    for (int i = 0; i < argc; i++) {
        if (!operands_only && !strcmp(argv[i], "--")) {
            operands_only = 1; /* the end of options: IN or OUT may start with '-' */
        } else if (operands_only) {
            if (n_pos == 3)
                return usage_error(cmd, "too many arguments");
            pos[n_pos++] = argv[i];
        } else if (!strcmp(argv[i], "-t") && i + 1 < argc) {
            if (!cli_parse_i64(argv[++i], 1, QUANT_MAX_THREADS, &n_threads))
                return usage_error(cmd, "-t takes a thread count from 1 to 64");
        } else if (!strcmp(argv[i], "--allow-requantize")) {
            allow_requant = 1;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "edgerunner: %s: unknown option '%s'\n", cmd, argv[i]);
            return 1;
        } else if (n_pos < 3) {
            pos[n_pos++] = argv[i];
        } else {
            return usage_error(cmd, "too many arguments");
        }
    }
    if (n_pos != 3 && !(type_optional && n_pos == 2))
        return usage_error(cmd, type_optional ? "DIR and OUT are required" : "IN, OUT and TYPE are required");
    if (n_threads < 1 || n_threads > QUANT_MAX_THREADS)
        n_threads = n_threads < 1 ? 1 : QUANT_MAX_THREADS;
    const quant_mix *mix = pos[2] ? quant_mix_find(pos[2]) : NULL; /* NULL: every tensor keeps its type */
    if (pos[2] && !mix) {
        char what[96];
        snprintf(what, sizeof what, "unknown type '%.40s'", pos[2]);
        return usage_error(cmd, what);
    }

    gguf_file *in = NULL;
    gguf_writer *w = NULL;
    uint32_t *types = NULL;
    int rc = 1;
    cli_catch_sigbus(pos[0]);
    er_status st = hf_open_any(pos[0], 0, &in);
    if (st != ER_OK)
        return cli_fail_status(st);
    struct stat si, so; /* OUT is replaced when done: never by a quantized copy of IN itself */
    if (!strcmp(pos[0], pos[1]) ||
        (stat(pos[0], &si) == 0 && stat(pos[1], &so) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)) {
        fprintf(stderr, "edgerunner: %s: IN and OUT must be different files\n", cmd);
        goto done;
    }

    types = calloc(in->n_tensors ? in->n_tensors : 1, sizeof *types);
    if (!types) {
        cli_fail("out of memory");
        goto done;
    }
    int n_fallback = 0;
    for (uint64_t i = 0; i < in->n_tensors; i++)
        types[i] = in->tensors[i].type; /* without TYPE every tensor keeps its type */
    if (mix && (st = quant_plan(in, mix, allow_requant, pos[0], types, &n_fallback)) != ER_OK)
        goto fail_status;

    if ((st = gguf_writer_create(&w)) != ER_OK)
        goto fail_status;
    for (uint64_t i = 0; i < in->n_kv; i++)
        if ((st = gguf_writer_set(w, in->kv[i].key, &in->kv[i].value)) != ER_OK)
            goto fail_status;
    const int64_t file_type = mix ? (int64_t)mix->file_type : uniform_file_type(in);
    if ((mix && (st = gguf_writer_set_u32(w, "general.quantization_version", 2)) != ER_OK) ||
        (file_type >= 0 && (st = gguf_writer_set_u32(w, "general.file_type", (uint32_t)file_type)) != ER_OK))
        goto fail_status;

    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const gguf_tensor *t = &in->tensors[i];
        if ((st = gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, types[i])) != ER_OK)
            goto fail_status;
    }
    if ((st = gguf_writer_begin(w, pos[1])) != ER_OK)
        goto fail_status;

    uint64_t n_params = 0, bytes_in = 0, bytes_out = 0;
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const gguf_tensor *t = &in->tensors[i];
        const size_t out_size = gguf_writer_tensor_size(w, i);
        int64_t n = 1;
        for (int d = 0; d < t->n_dims; d++)
            n *= t->ne[d];
        fprintf(stderr, "[%4" PRIu64 "/%4" PRIu64 "] %-32.*s %-5s -> %-5s\n", i + 1, in->n_tensors, (int)t->name.len, t->name.data,
                er_type_get(t->type)->name, er_type_get(types[i])->name);
        if (types[i] == t->type) {
            st = gguf_writer_write_tensor(w, t->data, t->size);
        } else {
            uint8_t *out = malloc(out_size ? out_size : 1);
            if (!out || !quant_convert_rows(er_type_get(t->type), er_type_get(types[i]), t->data, out, t->ne[0],
                                            n / t->ne[0], (int)n_threads)) {
                free(out);
                cli_fail("out of memory");
                goto done;
            }
            st = gguf_writer_write_tensor(w, out, out_size);
            free(out);
        }
        if (st != ER_OK)
            goto fail_status;
        n_params += (uint64_t)n;
        bytes_in += t->size;
        bytes_out += out_size;
    }
    if ((st = gguf_writer_finish(w)) != ER_OK)
        goto fail_status;
    printf("%s: %s, %" PRIu64 " tensors: %.2f MiB (%.3f bits per weight) -> %.2f MiB (%.3f bits per weight)%s\n", pos[1],
           mix ? mix->name : "types kept", in->n_tensors, (double)bytes_in / 1048576.0, n_params ? 8.0 * (double)bytes_in / (double)n_params : 0.0,
           (double)bytes_out / 1048576.0, n_params ? 8.0 * (double)bytes_out / (double)n_params : 0.0,
           n_fallback ? " (some rows needed a fallback type)" : "");
    rc = 0;
    goto done;
fail_status:
    rc = cli_fail_status(st);
done:
    gguf_writer_free(w); /* begun but not finished: removes its temporary file, OUT is untouched */
    free(types);
    gguf_close(in);
    return rc;
}

int cmd_quantize(int argc, char **argv) { return rewrite("quantize", argc, argv); }
int cmd_convert(int argc, char **argv) { return rewrite("convert", argc, argv); }
