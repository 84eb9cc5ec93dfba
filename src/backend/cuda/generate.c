/*
 * generate.c - the greedy loop on the device (backend_ops.generate_greedy).
 *
 * Chunks of steps run without the host: each replay of the step graph feeds the token
 * the previous step chose (its argmax, kept on the device) and chooses the next; each
 * chunk's ids come back at once, so EOS or the callback stop generation between
 * chunks. The device keeps one token pending (the argmax of the last step, not yet
 * fed); a chunk after the first starts by committing that same token again, so its id 0
 * is skipped. Steps computed past the stop are forgotten by setting n_past as the host
 * loop would.
 */
#include "backend/cuda/internal.h"

enum { CHUNK = 32 };

/* The argmax of the last logits computed (by decode or a previous chunk) is token 0;
 * then n_steps steps, each feeding the previous token at pos_last_fed + 1, + 2, ... and
 * producing the next. ids (host, n_steps + 1) receives the tokens. Waits once, at the
 * end. */
static er_status run_chunk(cuda_context *cc, int64_t pos_last_fed, int64_t n_steps, int32_t *ids) {
    er_status st = ER_OK;
    const int32_t pos_and_count[2] = {(int32_t)pos_last_fed, 0}; /* state->pos, state->n_out */
    CUDA_TRY(cudaMemcpyAsync(&cc->state->pos, pos_and_count, sizeof pos_and_count, cudaMemcpyHostToDevice, cc->stream));
    CUDA_TRY(cuda_commit(cc->state, cc->out_ids, cc->stream));
    for (int64_t i = 0; i < n_steps; i++) { /* step i feeds the token at pos_last_fed + 1 + i */
        cudaGraphExec_t step;
        if ((st = cuda_step_graph(cc, pos_last_fed + 1 + i, &step)) != ER_OK)
            return st;
        CUDA_TRY(cudaGraphLaunch(step, cc->stream));
    }
    CUDA_TRY(cudaMemcpyAsync(ids, cc->out_ids, (size_t)(n_steps + 1) * sizeof(int32_t), cudaMemcpyDeviceToHost,
                             cc->stream));
    CUDA_TRY(cudaStreamSynchronize(cc->stream));
    return ER_OK;
fail:
    return st;
}

er_status cuda_generate_greedy(void *ctx, int64_t n_past, const backend_greedy *g, er_token_callback on_token,
                               void *user, int64_t *n_generated, int64_t *n_past_after, float *logits_last) {
    cuda_context *cc = ctx;
    er_status st = ER_OK;
    int32_t ids[CHUNK + 1];
    int64_t n_gen = 0, last_fed = n_past - 1;
    int first = 1, hit_eos = 0, stop = 0;
    *n_generated = 0;
    while (!stop && n_gen < g->n_predict) {
        int64_t steps = g->n_predict - n_gen - first;
        steps = steps < CHUNK ? steps : CHUNK;
        steps = steps < cc->n_ctx - 1 - last_fed ? steps : cc->n_ctx - 1 - last_fed;
        if (!first && steps <= 0)
            break; /* the context is full */
        if ((st = run_chunk(cc, last_fed, steps, ids)) != ER_OK)
            return st;
        for (int64_t i = first ? 0 : 1; i <= steps && !stop; i++) {
            if (!g->ignore_eos && ids[i] == g->eos) {
                hit_eos = stop = 1;
                break;
            }
            n_gen++;
            stop = (on_token && on_token(ids[i], user) != 0) || n_gen == g->n_predict;
        }
        last_fed += steps;
        first = 0;
    }
    /* fed: the prompt and every generated token but the last (all of them at EOS) */
    *n_past_after = n_past + (hit_eos ? n_gen : n_gen > 0 ? n_gen - 1 : 0);
    *n_generated = n_gen;
    return cuda_copy_logits(cc, logits_last);
}
