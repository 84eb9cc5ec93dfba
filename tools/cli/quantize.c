/*
 * quantize.c - `edgerunner quantize IN.gguf OUT.gguf TYPE`: rewrites a GGUF with its weights
 * in TYPE, a single type or one of llama.cpp's mixes (src/quant/mix.h says which tensor
 * gets what). Every metadata pair is copied in order; general.file_type and
 * general.quantization_version are set as llama.cpp's quantizer sets them; tensors that are
 * not weights (norms, rope_freqs) are copied unchanged. Weights are converted row by row
 * (to_f32, then the type's reference quantizer from_f32) on -t threads.
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
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "core/cpus.h"
#include "io/gguf.h"
#include "io/gguf_write.h"
#include "io/hf.h"
#include "quant/mix.h"
#include "quant/types.h"

enum { MAX_THREADS = 64 };

/* Rows [row0, row1) of one tensor: dequantize each to f32, quantize to the new type. */
typedef struct convert_job {
    const er_type_traits *from, *to;
    const uint8_t *in;
    uint8_t *out;
    int64_t n_per_row, row0, row1;
    size_t in_row, out_row;
    float *buf; /* (n_per_row) */
} convert_job;

static void *convert_rows(void *arg) {
    const convert_job *j = arg;
    for (int64_t r = j->row0; r < j->row1; r++) {
        j->from->to_f32(j->in + (size_t)r * j->in_row, j->buf, j->n_per_row);
        j->to->from_f32(j->buf, j->out + (size_t)r * j->out_row, j->n_per_row);
    }
    return NULL;
}

/* Converts a whole tensor with up to n_threads threads; 0 on out-of-memory. */
static int convert(const er_type_traits *from, const er_type_traits *to, const uint8_t *in, uint8_t *out,
                   int64_t n_per_row, int64_t n_rows, int n_threads) {
    convert_job jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = {0}, ok = 1;
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
        started[t] = pthread_create(&tid[t], NULL, convert_rows, &jobs[t]) == 0;
    if (ok) {
        convert_rows(&jobs[0]);
        for (int t = 1; t < n_threads; t++) {
            if (started[t])
                pthread_join(tid[t], NULL);
            else
                convert_rows(&jobs[t]); /* no thread: do its share here */
        }
    }
    for (int t = 0; t < n_threads; t++)
        free(jobs[t].buf);
    return ok;
}

static int64_t meta_int(const gguf_file *f, const char *arch, const char *suffix, int64_t def) {
    char key[160];
    int64_t v;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const gguf_kv *kv = gguf_find_kv(f, key);
    return kv && gguf_value_as_int(&kv->value, &v) ? v : def;
}

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
            if (!cli_parse_i64(argv[++i], 1, MAX_THREADS, &n_threads))
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
    if (n_threads < 1 || n_threads > MAX_THREADS)
        n_threads = n_threads < 1 ? 1 : MAX_THREADS;
    const quant_mix *mix = pos[2] ? quant_mix_find(pos[2]) : NULL; /* NULL: every tensor keeps its type */
    if (pos[2] && !mix) {
        char what[96];
        snprintf(what, sizeof what, "unknown type '%.40s'", pos[2]);
        return usage_error(cmd, what);
    }

    gguf_file *in = NULL;
    gguf_writer *w = NULL;
    uint32_t *types = NULL;
    char **names = NULL;
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

    /* what the recipe needs to know about the model */
    quant_model_desc desc = {0, 0, 1, 0};
    char arch[64] = "";
    const gguf_kv *akv = gguf_find_kv(in, "general.architecture");
    if (akv && akv->value.type == GGUF_TYPE_STRING)
        snprintf(arch, sizeof arch, "%.*s", (int)(akv->value.str.len < 63 ? akv->value.str.len : 63), akv->value.str.data);
    desc.n_layer = meta_int(in, arch, "block_count", 0);
    desc.llama_70b = !strcmp(arch, "llama") && desc.n_layer == 80 &&
                     meta_int(in, arch, "attention.head_count", 0) != meta_int(in, arch, "attention.head_count_kv", 0);

    types = calloc(in->n_tensors ? in->n_tensors : 1, sizeof *types);
    names = calloc(in->n_tensors ? in->n_tensors : 1, sizeof *names);
    if (!types || !names) {
        cli_fail("out of memory");
        goto done;
    }
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const gguf_tensor *t = &in->tensors[i];
        names[i] = malloc((size_t)t->name.len + 1);
        if (!names[i]) {
            cli_fail("out of memory");
            goto done;
        }
        memcpy(names[i], t->name.data, (size_t)t->name.len);
        names[i][t->name.len] = '\0';
        if (strstr(names[i], "attn_v.weight"))
            desc.n_attn_v++;
        if (!strcmp(names[i], "output.weight"))
            desc.tied = 0;
    }

    if ((st = gguf_writer_create(&w)) != ER_OK)
        goto fail_status;
    for (uint64_t i = 0; i < in->n_kv; i++)
        if ((st = gguf_writer_set(w, in->kv[i].key, &in->kv[i].value)) != ER_OK)
            goto fail_status;
    const int64_t file_type = mix ? (int64_t)mix->file_type : uniform_file_type(in);
    if ((mix && (st = gguf_writer_set_u32(w, "general.quantization_version", 2)) != ER_OK) ||
        (file_type >= 0 && (st = gguf_writer_set_u32(w, "general.file_type", (uint32_t)file_type)) != ER_OK))
        goto fail_status;

    int n_fallback = 0;
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const gguf_tensor *t = &in->tensors[i];
        int fell_back = 0;
        types[i] = mix ? quant_mix_tensor_type(mix, &desc, names[i], t->n_dims, t->ne, t->type, &fell_back) : t->type;
        n_fallback += fell_back;
        const er_type_traits *from = er_type_get(t->type), *to = er_type_get(types[i]);
        if (types[i] != t->type) {
            if (!from->to_f32 || !to->from_f32) {
                fprintf(stderr, "edgerunner: %s: tensor '%s': cannot convert %s to %s\n", cmd, names[i], from->name,
                        to->name);
                goto done;
            }
            if (!allow_requant && t->type != ER_TYPE_F32 && t->type != ER_TYPE_F16 && t->type != ER_TYPE_BF16) {
                fprintf(stderr, "edgerunner: %s: tensor '%s' is already %s; re-quantizing it to %s loses "
                                "accuracy (pass --allow-requantize to do it anyway)\n", cmd, names[i], from->name, to->name);
                goto done;
            }
        }
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
        fprintf(stderr, "[%4" PRIu64 "/%4" PRIu64 "] %-32s %-5s -> %-5s\n", i + 1, in->n_tensors, names[i],
                er_type_get(t->type)->name, er_type_get(types[i])->name);
        if (types[i] == t->type) {
            st = gguf_writer_write_tensor(w, t->data, t->size);
        } else {
            uint8_t *out = malloc(out_size ? out_size : 1);
            if (!out || !convert(er_type_get(t->type), er_type_get(types[i]), t->data, out, t->ne[0], n / t->ne[0],
                                 (int)n_threads)) {
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
    if (names)
        for (uint64_t i = 0; i < in->n_tensors; i++)
            free(names[i]);
    free(names);
    free(types);
    gguf_close(in);
    return rc;
}

int cmd_quantize(int argc, char **argv) { return rewrite("quantize", argc, argv); }
int cmd_convert(int argc, char **argv) { return rewrite("convert", argc, argv); }
