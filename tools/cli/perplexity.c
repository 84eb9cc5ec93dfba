/*
 * perplexity.c - `edgerunner perplexity`: perplexity of a model on a text file, with
 * llama.cpp's definition (tools/perplexity), so that numbers compare across engines:
 *
 *   the whole text is tokenized once (BOS first when the model asks for it) and cut into
 *   n_chunk = n_tokens / n_ctx chunks of n_ctx tokens (the tail is dropped); each chunk is
 *   evaluated from an empty KV cache, its first token replaced by BOS when the model adds
 *   one; only the second half is scored: the logits at positions first = n_ctx / 2 ..
 *   n_ctx - 2 predict tokens first + 1 .. n_ctx - 1, so every scored token has at least
 *   n_ctx / 2 tokens of context. PPL = exp(mean negative log-likelihood), the error is the
 *   standard error of that mean carried through exp (as llama.cpp prints it).
 *
 * Output: one line per chunk on stderr ("[i] running PPL"), then on stdout
 * "PPL = X +/- E (N tokens scored in C chunks of n_ctx)".
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* log p(tok) from raw logits: max-shifted, the sum of exponentials in double (llama.cpp's
 * log_softmax). */
static double log_prob(const float *logits, int64_t n_vocab, int32_t tok) {
    float max = logits[0];
    for (int64_t i = 1; i < n_vocab; i++)
        if (logits[i] > max)
            max = logits[i];
    double sum = 0.0;
    for (int64_t i = 0; i < n_vocab; i++)
        sum += expf(logits[i] - max);
    return (double)(logits[tok] - max) - log(sum);
}

int cmd_perplexity(int argc, char **argv) {
    const char *text_path = NULL;
    int64_t max_chunks = -1;
    cli_model_opts mo;
    cli_model_opts_init(&mo, 512, 4);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int parsed, took_value = 1;
        if (!strcmp(a, "--")) {
            if (cli_no_operands("perplexity", argc, argv, i))
                return 1;
            break;
        }
        if ((parsed = cli_parse_model_opt("perplexity", a, v, &mo, &took_value)) != 0) {
            if (parsed < 0)
                return 1;
        } else if (!v) {
            fprintf(stderr, "edgerunner: perplexity: %s needs a value\n", a);
            return 1;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            text_path = v;
        } else if (!strcmp(a, "--chunks")) {
            if (!cli_parse_i64(v, 1, INT32_MAX, &max_chunks))
                return cli_fail("perplexity: --chunks wants an integer >= 1");
        } else {
            fprintf(stderr, "edgerunner: perplexity: unknown option '%s'\n", a);
            return 1;
        }
        i += took_value;
    }
    const int64_t n_ctx = mo.n_ctx;
    if (!mo.path || !text_path)
        return cli_fail("perplexity: -m MODEL and -f TEXT are required");

    int rc = 1;
    er_status st;
    er_model *model = NULL;
    er_context *ctx = NULL;
    int32_t *tokens = NULL;
    float *logits = NULL;
    size_t len = 0;
    char *text = cli_read_file(text_path, &len);
    if (!text) {
        fprintf(stderr, "edgerunner: perplexity: cannot read %s: %s\n", text_path, strerror(errno));
        return 1;
    }
    er_context_params cp = cli_model_opts_context(&mo);
    cp.n_batch = mo.n_batch ? mo.n_batch : n_ctx; /* a whole chunk in one pass */
    cli_catch_sigbus(mo.path);
    if ((st = er_model_load(mo.path, &mo.model, &model)) != ER_OK ||
        (st = er_context_create(model, &cp, &ctx)) != ER_OK) {
        rc = cli_fail_status(st);
        goto done;
    }
    cli_warn_threads(&mo, ctx);
    const er_vocab *vocab = er_model_vocab(model);
    if (!vocab) {
        cli_fail("perplexity: the model file has no tokenizer");
        goto done;
    }
    int64_t n_tokens = 0;
    if ((st = cli_tokenize(vocab, text, (int64_t)len, ER_TOKENIZE_ADD_SPECIAL, &tokens, &n_tokens)) != ER_OK) {
        rc = st == ER_ERR_NO_MEMORY ? cli_fail("perplexity: out of memory") : cli_fail_status(st);
        goto done;
    }
    const int32_t bos = er_model_bos(model);
    const int add_bos = n_tokens > 0 && bos >= 0 && tokens[0] == bos; /* special tokens are not parsed in the text */
    int64_t n_chunk = n_tokens / n_ctx;
    if (max_chunks > 0 && n_chunk > max_chunks)
        n_chunk = max_chunks;
    if (n_chunk < 1) {
        fprintf(stderr, "edgerunner: perplexity: %s has %lld tokens; at least -c %lld are needed\n", text_path,
                (long long)n_tokens, (long long)n_ctx);
        goto done;
    }
    const int64_t n_vocab = er_model_n_vocab(model);
    if (!(logits = malloc((size_t)n_ctx * (size_t)n_vocab * sizeof *logits))) {
        cli_fail("perplexity: out of memory for the logits");
        goto done;
    }
    const int64_t first = n_ctx / 2;
    double nll = 0.0, nll2 = 0.0;
    int64_t count = 0;
    for (int64_t ic = 0; ic < n_chunk; ic++) {
        int32_t *chunk = tokens + ic * n_ctx;
        const int32_t saved = chunk[0];
        if (add_bos)
            chunk[0] = bos;
        if ((st = er_context_rewind(ctx, 0)) != ER_OK || (st = er_context_decode(ctx, chunk, n_ctx, logits)) != ER_OK) {
            rc = cli_fail_status(st);
            goto done;
        }
        chunk[0] = saved;
        for (int64_t j = first; j < n_ctx - 1; j++) {
            const double lp = -log_prob(logits + j * n_vocab, n_vocab, chunk[j + 1]);
            nll += lp;
            nll2 += lp * lp;
            count++;
        }
        fprintf(stderr, "[%lld] %.4f\n", (long long)(ic + 1), exp(nll / (double)count));
    }
    const double mean = nll / (double)count;
    const double var = count > 1 ? (nll2 / (double)count - mean * mean) / (double)(count - 1) : 0.0;
    const double ppl = exp(mean);
    printf("PPL = %.4f +/- %.5f (%lld tokens scored in %lld chunks of %lld)\n", ppl, ppl * sqrt(var > 0 ? var : 0),
           (long long)count, (long long)n_chunk, (long long)n_ctx);
    rc = 0;
done:
    free(logits);
    free(tokens);
    free(text);
    er_context_free(ctx);
    er_model_free(model);
    return rc;
}
