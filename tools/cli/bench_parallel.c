/*
 * bench_parallel.c - `edgerunner bench --parallel B`: B sequences decoded together in one
 * context, as llama.cpp's `llama-batched-bench -npp 128 -ntg 128 -npl B`: every
 * sequence's prompt of npp tokens (as many whole prompts per batch as n_batch holds),
 * then ntg steps of one token per sequence, each step one er_context_decode_batch.
 *
 * Columns as llama-batched-bench prints them: PP, TG, B, N_KV (every token held), T_PP and
 * S_PP (the prompts: time, tokens/s), T_TG and S_TG (the generation: time, B * TG / T_TG),
 * T and S (both). The times are those spent in er_context_decode_batch, as
 * llama-batched-bench times its llama_decode calls: the logits copied to the host (kept
 * in the context's buffer, as llama.cpp keeps them) are inside, the greedy argmax of
 * each row on the host, which checks the ids, is outside. Before any number, the greedy
 * ids of the first and last sequence must equal those they give alone, in a one-sequence
 * context whose batches hold only them (batch invariance); else FAIL and no number, exit
 * 1. Prompts are token ids spread over the vocabulary, different for each sequence.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int32_t prompt_id(int64_t seq, int64_t i, int64_t n_vocab) {
    return (int32_t)(1 + (seq * 7919 + i * 104729) % (n_vocab - 1));
}

typedef struct batch_buf {
    int32_t *tokens, *seq; /* (n_batch) */
    int64_t *pos;          /* (n_batch) */
    int8_t *want;          /* (n_batch) */
    int64_t n;
    double seconds; /* spent in er_context_decode_batch */
} batch_buf;

static void add(batch_buf *b, int32_t token, int64_t seq, int64_t pos, int want) {
    b->tokens[b->n] = token;
    b->seq[b->n] = (int32_t)seq;
    b->pos[b->n] = pos;
    b->want[b->n] = (int8_t)want;
    b->n++;
}

/* One er_context_decode_batch of what b holds; its time added to b->seconds. */
static er_status decode(er_context *ctx, batch_buf *b) {
    const er_batch eb = {b->n, b->tokens, b->seq, b->pos, b->want};
    const double t0 = now_s();
    const er_status st = er_context_decode_batch(ctx, &eb, NULL); /* rows read in place */
    b->seconds += now_s() - t0;
    b->n = 0;
    return st;
}

/* Sequence seq alone: its prompt in one context of its own (whole, n_batch holds it),
 * then n greedy ids, each batch holding only this sequence, as a server's request alone
 * (CUDA's one-sequence decode runs other kernels, with other roundings). */
static er_status run_alone(er_model *model, er_context_params cp, int64_t seq, int64_t npp, int64_t n, batch_buf *b,
                           int32_t *ids) {
    er_context *ctx = NULL;
    const int64_t n_vocab = er_model_n_vocab(model);
    cp.n_seq_max = 1;
    er_status st = er_context_create(model, &cp, &ctx);
    for (int64_t i = 0; i < npp; i++)
        add(b, prompt_id(seq, i, n_vocab), 0, i, i == npp - 1);
    if (st == ER_OK)
        st = decode(ctx, b);
    for (int64_t g = 0; st == ER_OK && g < n; g++) {
        ids[g] = er_argmax(er_context_batch_logits(ctx, 0), n_vocab);
        if (g + 1 < n) {
            add(b, ids[g], 0, npp + g, 1);
            st = decode(ctx, b);
        }
    }
    b->n = 0; /* the prompt, where the context could not be made */
    er_context_free(ctx);
    return st;
}

int bench_parallel(const cli_model_opts *mo, int64_t n_par, int64_t npp, int64_t ntg, int json) {
    int rc = 1;
    er_status st;
    er_model *model = NULL;
    er_context *ctx = NULL;
    er_context_params cp = cli_model_opts_context(mo);
    cp.n_ctx = npp + ntg + 1;
    cp.n_seq_max = (int)n_par;
    if (cp.n_batch == 0) /* whole prompts: as many as 2,048 tokens hold, at least one */
        cp.n_batch = n_par * npp < 2048 ? n_par * npp : npp > 2048 ? npp : 2048 / npp * npp;
    if (cp.n_batch < (n_par > npp ? n_par : npp)) /* a whole prompt, or one token of each sequence */
        cp.n_batch = n_par > npp ? n_par : npp;
    batch_buf b = {0};
    int32_t *ids = NULL;        /* (n_par, ntg + 1) the batched run's greedy ids */
    int32_t *alone = NULL;      /* (ntg + 1) one sequence's ids alone */
    if ((st = er_model_load(mo->path, &mo->model, &model)) != ER_OK || (st = er_context_create(model, &cp, &ctx)) != ER_OK) {
        rc = cli_fail_status(st);
        goto done;
    }
    const int64_t n_vocab = er_model_n_vocab(model), n_batch = er_context_n_batch(ctx);
    b.tokens = malloc((size_t)n_batch * sizeof(int32_t));
    b.seq = malloc((size_t)n_batch * sizeof(int32_t));
    b.pos = malloc((size_t)n_batch * sizeof(int64_t));
    b.want = malloc((size_t)n_batch);
    ids = malloc((size_t)(n_par * (ntg + 1)) * sizeof(int32_t));
    alone = malloc((size_t)(ntg + 1) * sizeof(int32_t));
    if (!b.tokens || !b.seq || !b.pos || !b.want || !ids || !alone) {
        cli_fail("bench: out of memory");
        goto done;
    }

    /* the prompts, whole ones per batch; each sequence's first id from its logits */
    for (int64_t s = 0, first = 0; st == ER_OK && s < n_par; s++) {
        for (int64_t i = 0; i < npp; i++)
            add(&b, prompt_id(s, i, n_vocab), s, i, i == npp - 1);
        if (s < n_par - 1 && b.n + npp <= n_batch)
            continue;
        if ((st = decode(ctx, &b)) == ER_OK)
            for (int64_t k = first; k <= s; k++)
                ids[k * (ntg + 1)] = er_argmax(er_context_batch_logits(ctx, k - first), n_vocab);
        first = s + 1;
    }
    const double t_pp = b.seconds;
    /* ntg steps of one token per sequence, as llama-batched-bench counts them */
    for (int64_t g = 1; st == ER_OK && g <= ntg; g++) {
        for (int64_t s = 0; s < n_par; s++)
            add(&b, ids[s * (ntg + 1) + g - 1], s, npp + g - 1, 1);
        if ((st = decode(ctx, &b)) == ER_OK)
            for (int64_t s = 0; s < n_par; s++)
                ids[s * (ntg + 1) + g] = er_argmax(er_context_batch_logits(ctx, s), n_vocab);
    }
    const double t_tg = b.seconds - t_pp;
    if (st != ER_OK) {
        rc = cli_fail_status(st);
        goto done;
    }
    for (int64_t s = 0; s < n_par; s += n_par - 1 > 0 ? n_par - 1 : 1) {
        if ((st = run_alone(model, cp, s, npp, ntg + 1, &b, alone)) != ER_OK) {
            rc = cli_fail_status(st);
            goto done;
        }
        if (memcmp(alone, ids + s * (ntg + 1), (size_t)(ntg + 1) * sizeof(int32_t)) != 0) {
            printf("FAIL: sequence %" PRId64 "'s greedy ids in a batch of %" PRId64 " differ from its ids alone\n", s,
                   n_par);
            goto done;
        }
    }
    const double pp_tps = (double)(n_par * npp) / t_pp, tg_tps = (double)(n_par * ntg) / t_tg;
    const double all_tps = (double)(n_par * (npp + ntg)) / (t_pp + t_tg);
    if (json)
        printf("{\"pp\": %" PRId64 ", \"tg\": %" PRId64 ", \"b\": %" PRId64 ", \"n_kv\": %" PRId64
               ", \"t_pp\": %.3f, \"s_pp\": %.2f, \"t_tg\": %.3f, \"s_tg\": %.2f, \"t\": %.3f, \"s\": %.2f, "
               "\"threads\": %d}\n",
               npp, ntg, n_par, n_par * (npp + ntg), t_pp, pp_tps, t_tg, tg_tps, t_pp + t_tg, all_tps,
               er_context_n_threads(ctx));
    else
        printf("|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |\n"
               "| %5" PRId64 " | %6" PRId64 " | %4" PRId64 " | %6" PRId64 " | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | "
               "%8.2f |\n(%d threads; the first and last sequence's greedy ids equal their ids alone)\n",
               npp, ntg, n_par, n_par * (npp + ntg), t_pp, pp_tps, t_tg, tg_tps, t_pp + t_tg, all_tps,
               er_context_n_threads(ctx));
    rc = 0;
done:
    free(b.tokens);
    free(b.seq);
    free(b.pos);
    free(b.want);
    free(ids);
    free(alone);
    er_context_free(ctx);
    er_model_free(model);
    return rc;
}
