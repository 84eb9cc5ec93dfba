/*
 * cli.h - what the `edgerunner` subcommands share: one file per subcommand, each an
 * int cmd_NAME(argc, argv) returning the process exit code (0, or 1 after printing one
 * line on stderr).
 */
#ifndef ER_CLI_H
#define ER_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "edgerunner.h"

int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_serve(int argc, char **argv); /* tools/server/serve.c */

/* bench's lines of the usage (`edgerunner --help`, `edgerunner bench --help`) */
extern const char cli_bench_usage[];

/* From now on a SIGBUS (the mapped model file truncated under us) prints one line naming
 * `path` on stderr and exits 1. Called by each subcommand before it maps a model file. */
void cli_catch_sigbus(const char *path);

/* Print "edgerunner: WHAT" (or the last library error) on stderr; return 1. */
int cli_fail(const char *what);

int cli_fail_status(er_status st);

/* Parse an integer in [lo, hi]; 0 on a malformed or out-of-range value. */
int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* "cpu" or "cuda"; 0 on anything else. */
int cli_parse_backend(const char *s, er_backend *out);

/* "f32" or "f16" (llama.cpp's names for -ctk / -ctv); 0 on anything else. */
int cli_parse_kv_type(const char *s, er_kv_type *out);

/* The model and context flags of run, chat, perplexity, bench and serve:
 *   -m/--model PATH  -c/--ctx-size N  -b/--batch-size N  -t/--threads N
 *   -ctk/--cache-type-k f32|f16  -ctv/--cache-type-v f32|f16 (default: the library's)
 *   --backend cpu|cuda  --reference (or EDGERUNNER_REFERENCE=1: the plain-C kernels)
 *   --type T (er_model_params.type: quantize the weights while loading) */
typedef struct cli_model_opts {
    const char *path;
    int64_t n_ctx, n_ctx_min, n_batch, n_threads;
    int reference;
    er_kv_type type_k, type_v;
    er_model_params model;
} cli_model_opts;

/* `edgerunner bench --parallel B` (bench_parallel.c): B sequences of npp prompt tokens,
 * then ntg tokens each, decoded together; 0, or 1 after printing why. */
int bench_parallel(const cli_model_opts *mo, int64_t n_par, int64_t npp, int64_t ntg, int json);

/* Defaults: the library's, with n_ctx (0: the library's own) no lower than n_ctx_min. */
void cli_model_opts_init(cli_model_opts *o, int64_t n_ctx, int64_t n_ctx_min);
/* 1: `flag` is one of these and was parsed (*took_value: whether `value` was used);
 * 0: not one of these (*took_value untouched); -1: a bad or missing value (the message
 * is printed, prefixed with `cmd`). */
int cli_parse_model_opt(const char *cmd, const char *flag, const char *value, cli_model_opts *o, int *took_value);
/* The context parameters these flags ask for. */
er_context_params cli_model_opts_context(const cli_model_opts *o);
/* After the context is made: says on stderr when -t asked for more threads than the
 * CPUs this process may use (the library caps it to them). */
void cli_warn_threads(const cli_model_opts *o, const er_context *ctx);

/* The sampler flags every generating subcommand takes:
 *   --temp T  --top-k K  --top-p P  --min-p P  --repeat-penalty R  --repeat-last-n N
 *   --presence-penalty X  --frequency-penalty X  --seed S
 * Defaults: the library's (temperature 1.0, top-k 40, top-p 0.9, min-p 0, repeat penalty
 * 1.0 over the last 64 tokens); --temp 0 is greedy; --repeat-last-n -1 means the whole
 * context; --seed -1 (the default) picks a seed from the clock. */
typedef struct cli_sampling {
    er_sampler_params params;
    int64_t repeat_last_n; /* -1: the context size */
    int64_t seed;          /* -1: from the clock */
} cli_sampling;

void cli_sampling_init(cli_sampling *s);
/* 1: `flag` is a sampler flag and `value` was parsed; 0: not a sampler flag; -1: a bad
 * value (the message is printed, prefixed with `cmd`). */
int cli_parse_sampling(const char *cmd, const char *flag, const char *value, cli_sampling *s);
/* The sampler parameters, with -1 values resolved for a context of n_ctx tokens. */
er_sampler_params cli_sampling_resolve(const cli_sampling *s, int64_t n_ctx);

/* The ids of text[0..len) in a malloc'd *ids (free it), *n_ids of them, sized by the
 * count er_tokenize reports rather than by len: a hostile vocabulary makes a byte many
 * ids. ER_ERR_NO_MEMORY without a library message when the buffer cannot grow. */
er_status cli_tokenize(const er_vocab *vocab, const char *text, int64_t len, int flags, int32_t **ids, int64_t *n_ids);

/* `--` at argv[i] ends the options, as getopt's: for the subcommands that take no
 * operands, 0 when nothing follows it, else 1 after printing the one line. */
int cli_no_operands(const char *cmd, int argc, char **argv, int i);

/* "1,2,3" or "1 2 3" -> a malloc'd array of ids; returns the count, or -1. */
int64_t cli_parse_ids(const char *s, int32_t **out);

/* The whole of a file ("-": standard input) in a malloc'd buffer with a NUL after it;
 * NULL (and errno set) on failure. */
char *cli_read_file(const char *path, size_t *len);

#endif
