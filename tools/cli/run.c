/* run.c - `edgerunner run`: generation from token ids or a text prompt, greedy (--temp 0)
 * or sampled (the sampler flags of cli.h; defaults: temperature 1.0, top-k 40, top-p 0.9). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

typedef struct run_state {
    const er_model *model;
    int print_ids;
    int64_t n_printed;
    er_detokenizer *detok; /* text output: whole UTF-8 characters only */
} run_state;

static int print_token(int32_t token, void *user) {
    run_state *rs = user;
    char piece[256];
    const char *text;
    int64_t n_text;
    if (!rs->print_ids && rs->detok && er_detokenizer_push(rs->detok, token, &text, &n_text) == ER_OK) {
        fwrite(text, 1, (size_t)n_text, stdout);
        rs->n_printed++;
        fflush(stdout);
        return 0;
    }
    int64_t n = rs->print_ids ? -1 : er_token_to_piece(rs->model, token, piece, sizeof piece);
    if (n < 0)
        printf(rs->n_printed ? " %d" : "%d", token);
    else
        fwrite(piece, 1, (size_t)n, stdout);
    rs->n_printed++;
    fflush(stdout);
    return 0;
}

int cmd_run(int argc, char **argv) {
    const char *ids_arg = NULL, *dump_path = NULL, *prompt_text = NULL;
    int64_t n_predict = -1;
    int print_ids = 0, ignore_eos = 0, n_given = 0, parse_special = 0, perf = 0;
    cli_model_opts mo;
    cli_model_opts_init(&mo, 0, 0);
    cli_sampling sampling;
    cli_sampling_init(&sampling);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes_value = 1, parsed;
        if (!strcmp(a, "--")) {
            if (cli_no_operands("run", argc, argv, i))
                return 1;
            break;
        }
        if ((parsed = cli_parse_model_opt("run", a, v, &mo, &takes_value)) != 0) {
            if (parsed < 0)
                return 1;
        } else if (!strcmp(a, "--ids")) {
            print_ids = 1;
            takes_value = 0;
        } else if (!strcmp(a, "--ignore-eos")) {
            ignore_eos = 1;
            takes_value = 0;
        } else if (!strcmp(a, "--special")) {
            parse_special = 1;
            takes_value = 0;
        } else if (!strcmp(a, "--perf")) {
            perf = 1;
            takes_value = 0;
        } else if (!v) {
            fprintf(stderr, "edgerunner: run: %s needs a value\n", a);
            return 1;
        } else if ((parsed = cli_parse_sampling("run", a, v, &sampling)) != 0) {
            if (parsed < 0)
                return 1;
        } else if (!strcmp(a, "--prompt-ids")) {
            ids_arg = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            prompt_text = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (!cli_parse_i64(v, -1, INT32_MAX, &n_predict))
                return cli_fail("run: -n wants an integer >= -1");
            n_given = 1;
        } else if (!strcmp(a, "--dump-logits")) {
            dump_path = v;
        } else {
            fprintf(stderr, "edgerunner: run: unknown option '%s'\n", a);
            return 1;
        }
        i += takes_value;
    }
    if (!mo.path)
        return cli_fail("run: -m MODEL is required");
    if (!ids_arg == !prompt_text)
        return cli_fail("run: give the prompt as -p TEXT or as --prompt-ids ID,ID,...");

    int rc = 1;
    er_status st;
    er_model *model = NULL;
    er_context *ctx = NULL;
    er_sampler *sampler = NULL;
    int32_t *prompt = NULL;
    float *logits = NULL;
    FILE *dump = NULL;
    int64_t n_prompt = ids_arg ? cli_parse_ids(ids_arg, &prompt) : 0;
    if (ids_arg && n_prompt < 0) {
        cli_fail("run: --prompt-ids wants a comma-separated list of non-negative token ids");
        goto done;
    }
    const er_context_params cp = cli_model_opts_context(&mo);
    cli_catch_sigbus(mo.path);
    if ((st = er_model_load(mo.path, &mo.model, &model)) != ER_OK ||
        (st = er_context_create(model, &cp, &ctx)) != ER_OK) {
        rc = cli_fail_status(st);
        goto done;
    }
    cli_warn_threads(&mo, ctx);
    if (prompt_text) { /* BOS as the model asks (add_bos_token); special tokens only with --special */
        const er_vocab *vocab = er_model_vocab(model);
        const int64_t len = (int64_t)strlen(prompt_text);
        if (!vocab) {
            cli_fail("run: the model file has no tokenizer; use --prompt-ids");
            goto done;
        }
        if ((st = cli_tokenize(vocab, prompt_text, len, ER_TOKENIZE_ADD_SPECIAL | (parse_special ? ER_TOKENIZE_PARSE_SPECIAL : 0),
                               &prompt, &n_prompt)) != ER_OK) {
            rc = st == ER_ERR_NO_MEMORY ? cli_fail("run: out of memory") : cli_fail_status(st);
            goto done;
        }
        if (n_prompt == 0) {
            cli_fail("run: the prompt is empty");
            goto done;
        }
    }
    if (dump_path) {
        const int64_t n_vocab = er_model_n_vocab(model);
        logits = malloc((size_t)n_prompt * (size_t)n_vocab * sizeof *logits);
        if (!logits) {
            cli_fail("run: out of memory for the logits");
            goto done;
        }
        if ((st = er_context_decode(ctx, prompt, n_prompt, logits)) != ER_OK) {
            rc = cli_fail_status(st);
            goto done;
        }
        dump = fopen(dump_path, "wb");
        if (!dump || fwrite(logits, sizeof *logits, (size_t)(n_prompt * n_vocab), dump) != (size_t)(n_prompt * n_vocab) ||
            fclose(dump) != 0) {
            dump = NULL;
            fprintf(stderr, "edgerunner: run: cannot write %s: %s\n", dump_path, strerror(errno));
            goto done;
        }
        dump = NULL;
        if (!n_given) {
            rc = 0;
            goto done;
        }
        er_context_rewind(ctx, 0);
    }

    run_state rs = {model, print_ids, 0, NULL};
    if (!print_ids && er_model_vocab(model) && (st = er_detokenizer_create(er_model_vocab(model), 0, &rs.detok)) != ER_OK) {
        rc = cli_fail_status(st);
        goto done;
    }
    const er_sampler_params sp = cli_sampling_resolve(&sampling, er_context_n_ctx(ctx));
    if ((st = er_sampler_create(&sp, er_model_n_vocab(model), &sampler)) != ER_OK) {
        er_detokenizer_free(rs.detok);
        rc = cli_fail_status(st);
        goto done;
    }
    er_generate_params gp = {n_predict < 0 ? INT64_MAX : n_predict, ignore_eos};
    int64_t n_generated = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    st = er_generate(ctx, prompt, n_prompt, &gp, sampler, print_token, &rs, &n_generated);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (perf && st == ER_OK) /* the prompt's pass and the generation, without the load */
        fprintf(stderr, "perf: %" PRId64 " prompt tokens, %" PRId64 " generated in %.3f ms\n", n_prompt, n_generated,
                1e3 * (double)(t1.tv_sec - t0.tv_sec) + 1e-6 * (double)(t1.tv_nsec - t0.tv_nsec));
    const char *tail;
    int64_t n_tail;
    if (rs.detok && er_detokenizer_flush(rs.detok, &tail, &n_tail) == ER_OK)
        fwrite(tail, 1, (size_t)n_tail, stdout);
    er_detokenizer_free(rs.detok);
    if (rs.n_printed || (print_ids && st == ER_OK))
        printf("\n");
    if (st != ER_OK) {
        rc = cli_fail_status(st);
        goto done;
    }
    if (n_generated < gp.n_predict && er_context_n_past(ctx) >= er_context_n_ctx(ctx))
        fprintf(stderr, "edgerunner: stopped: the context of %lld tokens is full\n", (long long)er_context_n_ctx(ctx));
    rc = 0;
done:
    if (dump)
        fclose(dump);
    free(logits);
    free(prompt);
    er_sampler_free(sampler);
    er_context_free(ctx);
    er_model_free(model);
    return rc;
}
