/*
 * generate.c - the generation loop: er_generate_greedy and er_generate (with a sampler).
 *
 * One loop serves both: pick the next token (argmax, or the sampler), stop at EOS (not
 * reported), report it, stop when the callback asks, n_predict is reached or the context
 * is full, else feed it. Where the backend has a device-side greedy loop
 * (backend_ops.generate_greedy: CUDA) and the choice is greedy straight after the prompt,
 * that loop runs instead, with the same stops and the same n_past afterwards.
 *
 * Logits that are not all finite are an error (ER_ERR_FORMAT), checked before each
 * choice: the output head has no mask, so a NaN or an infinity means the numbers broke
 * (a NaN weight, metadata the load checks could not catch), and argmax would pass over
 * it silently (a model whose every logit was NaN printed "0 0 0 ..." and exited 0).
 */
#include <math.h>

#include "core/status.h"
#include "model/model.h"
#include "sampler/sampler.h"

/* The first index of the largest value (NaN never wins; a NaN at 0 gives 0). Two
 * passes: the maximum over 8 independent lanes, which the compiler vectorises, then
 * its first occurrence; the one-pass loop's compare-and-branch on every element took
 * 490 us for Qwen3's 151,936 logits, half of a GPU step (measured), this about 20. */
int32_t er_argmax(const float *logits, int64_t n_vocab) {
    if (n_vocab <= 0)
        return 0;
    float lane_max[8];
    for (int k = 0; k < 8; k++)
        lane_max[k] = logits[0];
    int64_t i = 0;
    for (; i + 8 <= n_vocab; i += 8)
        for (int k = 0; k < 8; k++)
            lane_max[k] = logits[i + k] > lane_max[k] ? logits[i + k] : lane_max[k];
    float best = lane_max[0];
    for (int k = 1; k < 8; k++)
        best = lane_max[k] > best ? lane_max[k] : best;
    for (; i < n_vocab; i++)
        best = logits[i] > best ? logits[i] : best;
    for (i = 0; i < n_vocab; i++)
        if (logits[i] == best)
            return (int32_t)i;
    return 0;
}

/* One more pass over the row, vectorised like er_argmax's first (x - x is 0 for a finite
 * x, NaN otherwise): 13 us for Qwen3's 151,936 logits just written (60 us from DRAM),
 * under 0.1% of a CPU decode step even of SmolLM2-135M (29 ms on 2 cores; measured). The
 * loop that names the culprit runs only on failure. */
static er_status check_logits(const er_context *ctx) {
    const float *x = ctx->logits;
    const int64_t n = ctx->model->view.config.n_vocab;
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0}, sum = 0.0f;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            lane[k] += x[i + k] - x[i + k];
    for (; i < n; i++)
        sum += x[i] - x[i];
    for (int k = 0; k < 8; k++)
        sum += lane[k];
    if (sum == 0.0f)
        return ER_OK;
    for (i = 0; i < n - 1 && isfinite(x[i]); i++)
        ;
    return er_fail(ER_ERR_FORMAT, "%s: the logits of position %lld are not finite (token %lld: %g); the model's "
                   "weights or metadata are broken", ctx->model->path, (long long)(ctx->n_pos[0] - 1), (long long)i,
                   (double)x[i]);
}

typedef struct accept_then_call {
    er_sampler *sampler;
    er_token_callback on_token;
    void *user;
} accept_then_call;

static int accept_then_call_cb(int32_t token, void *user) {
    accept_then_call *a = user;
    if (a->sampler)
        er_sampler_accept(a->sampler, token);
    return a->on_token ? a->on_token(token, a->user) : 0;
}

/* Generates from the logits the context holds. after_prompt: they are those of a
 * prompt decoded just now (the device-side loop starts only from there). */
static er_status generate(er_context *ctx, const er_generate_params *params, er_sampler *sampler, int after_prompt,
                          er_token_callback on_token, void *user, int64_t *n_generated) {
    er_status st = ER_OK;
    int64_t n_gen = 0;
    const model_config *c = &ctx->model->view.config;
    accept_then_call a = {sampler, on_token, user};
    if (after_prompt && ctx->ops->generate_greedy && (!sampler || er_sampler_is_greedy(sampler))) {
        /* The device loop takes each step's argmax on the device and reports a chunk's
         * tokens before the host sees any logits: only the prompt's logits (before) and
         * the last step's (after) are checked here, not the steps in between. */
        const backend_greedy g = {params->n_predict, c->eos, params->ignore_eos};
        if (params->n_predict > 0 && (st = check_logits(ctx)) != ER_OK)
            goto done;
        st = ctx->ops->generate_greedy(ctx->bctx, ctx->n_pos[0], &g, accept_then_call_cb, &a, &n_gen, &ctx->n_pos[0],
                                       ctx->logits);
        if (st == ER_OK && n_gen > 0)
            st = check_logits(ctx);
    } else {
        while (n_gen < params->n_predict) {
            int32_t token;
            if ((st = check_logits(ctx)) != ER_OK)
                break;
            if (sampler) {
                if ((st = er_sampler_sample(sampler, ctx->logits, &token)) != ER_OK)
                    break;
            } else {
                token = er_argmax(ctx->logits, c->n_vocab);
            }
            if (!params->ignore_eos && token == c->eos)
                break;
            n_gen++;
            if (accept_then_call_cb(token, &a) != 0 || n_gen == params->n_predict || ctx->n_pos[0] >= ctx->n_ctx)
                break;
            if ((st = er_context_decode(ctx, &token, 1, NULL)) != ER_OK)
                break;
        }
    }
done:
    if (n_generated)
        *n_generated = n_gen;
    return st;
}

er_status er_generate_greedy(er_context *ctx, const int32_t *prompt, int64_t n_prompt,
                             const er_generate_params *params, er_token_callback on_token, void *user,
                             int64_t *n_generated) {
    er_status st;
    if (n_generated)
        *n_generated = 0;
    if (!ctx || !params || params->n_predict < 0)
        return er_fail(ER_ERR_INVALID_ARG, "er_generate_greedy: %s", !ctx ? "NULL context" : !params ? "NULL params" : "negative n_predict");
    if ((st = er_context_decode(ctx, prompt, n_prompt, NULL)) != ER_OK)
        return st;
    return generate(ctx, params, NULL, 1, on_token, user, n_generated);
}

er_status er_generate(er_context *ctx, const int32_t *prompt, int64_t n_prompt, const er_generate_params *params,
                      er_sampler *sampler, er_token_callback on_token, void *user, int64_t *n_generated) {
    er_status st;
    if (n_generated)
        *n_generated = 0;
    if (!ctx || !params || params->n_predict < 0 || n_prompt < 0 || (n_prompt > 0 && !prompt))
        return er_fail(ER_ERR_INVALID_ARG, "er_generate: %s",
                       !ctx ? "NULL context" : !params ? "NULL params" : params->n_predict < 0 ? "negative n_predict" : n_prompt < 0 ? "negative n_prompt" : "NULL prompt");
    const int64_t n_vocab = ctx->model->view.config.n_vocab;
    if (sampler && sampler->n_vocab != n_vocab)
        return er_fail(ER_ERR_INVALID_ARG, "er_generate: the sampler is for %lld tokens, the model has %lld",
                       (long long)sampler->n_vocab, (long long)n_vocab);
    if (n_prompt > 0) {
        if ((st = er_context_decode(ctx, prompt, n_prompt, NULL)) != ER_OK)
            return st;
        for (int64_t i = 0; sampler && i < n_prompt; i++)
            er_sampler_accept(sampler, prompt[i]);
    } else if (!er_context_logits(ctx)) {
        return er_fail(ER_ERR_INVALID_ARG, "er_generate: no prompt, and the context holds no logits to continue from");
    }
    return generate(ctx, params, sampler, n_prompt > 0, on_token, user, n_generated);
}
