/*
 * context.c - contexts (KV cache + scratch, allocated once), decode and greedy generation.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/fast.h"
#include "backend/cpu/threadpool.h"
#include "backend/cuda/cuda.h"
#include "core/status.h"
#include "model/model.h"

enum { DEFAULT_N_CTX = 4096, DEFAULT_N_BATCH = 512 };

er_context_params er_context_default_params(void) {
    er_context_params p = {0, 0, 0, 0, ER_KV_DEFAULT, ER_KV_DEFAULT};
    return p;
}

/* calloc of a * b * c elements of `size` bytes, NULL on overflow or exhaustion */
static void *alloc_elems(int64_t a, int64_t b, int64_t c, size_t size) {
    size_t n;
    if (a <= 0 || b <= 0 || c <= 0 || __builtin_mul_overflow((size_t)a, (size_t)b, &n) ||
        __builtin_mul_overflow(n, (size_t)c, &n) || __builtin_mul_overflow(n, size, &n))
        return NULL;
    return calloc(n / size, size);
}

static float *alloc_floats(int64_t a, int64_t b, int64_t c) { return alloc_elems(a, b, c, sizeof(float)); }

/* The cache type (enum er_type) that `asked` means for this context: F16 only on the CPU
 * fast path (ER_KV_DEFAULT too, as llama.cpp); the reference path stays the exact F32
 * oracle and the CUDA backend has only an F32 cache, so asking them for F16 fails. */
static er_status kv_type(er_kv_type asked, const char *which, const er_model *model, int reference, uint32_t *out) {
    if (asked != ER_KV_DEFAULT && asked != ER_KV_F32 && asked != ER_KV_F16)
        return er_fail(ER_ERR_INVALID_ARG, "er_context_create: %s %d is not an er_kv_type", which, (int)asked);
    const char *f32_only = model->cuda ? "the CUDA backend" : reference ? "the reference path" : NULL;
    if (asked == ER_KV_F16 && f32_only)
        return er_fail(ER_ERR_UNSUPPORTED, "er_context_create: %s keeps its KV cache in F32; %s F16 is not supported",
                       f32_only, which);
    *out = asked == ER_KV_F32 || f32_only ? ER_TYPE_F32 : ER_TYPE_F16;
    return ER_OK;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

er_status er_context_create(er_model *model, const er_context_params *params, er_context **out) {
    er_status st = ER_OK;
    if (!model || !out)
        return er_fail(ER_ERR_INVALID_ARG, "er_context_create: NULL %s", model ? "out" : "model");
    *out = NULL;
    er_context_params p = params ? *params : er_context_default_params();
    const model_config *c = &model->config;
    if (p.n_ctx < 0 || p.n_batch < 0 || p.n_threads < 0)
        return er_fail(ER_ERR_INVALID_ARG, "er_context_create: negative n_ctx, n_batch or n_threads");
    if (p.n_ctx == 0)
        p.n_ctx = c->n_ctx_train < DEFAULT_N_CTX ? c->n_ctx_train : DEFAULT_N_CTX;
    if (p.n_batch == 0)
        p.n_batch = DEFAULT_N_BATCH;
    if (p.n_batch > p.n_ctx)
        p.n_batch = p.n_ctx;
    if (p.n_threads == 0) {
        long n_cpu = sysconf(_SC_NPROCESSORS_ONLN);
        p.n_threads = n_cpu < 1 ? 1 : n_cpu > 64 ? 64 : (int)n_cpu;
    }

    uint32_t type_k, type_v;
    if ((st = kv_type(p.type_k, "type_k", model, p.reference, &type_k)) != ER_OK ||
        (st = kv_type(p.type_v, "type_v", model, p.reference, &type_v)) != ER_OK)
        return st;

    er_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return er_fail(ER_ERR_NO_MEMORY, "er_context_create: out of memory");
    ctx->model = model;
    ctx->type_k = type_k;
    ctx->type_v = type_v;
    ctx->n_ctx = p.n_ctx;
    ctx->n_batch = p.n_batch;
    ctx->n_threads = p.n_threads;
    ctx->reference = p.reference != 0;
    ctx->logits = alloc_floats(c->n_vocab, 1, 1);
    if (!ctx->logits) {
        st = er_fail(ER_ERR_NO_MEMORY, "er_context_create: out of memory");
        goto fail;
    }
    if (model->cuda) {
#ifdef ER_HAVE_CUDA
        if ((st = cuda_context_create(model->cuda, p.n_ctx, p.n_batch, &ctx->cuda)) != ER_OK)
            goto fail;
#endif
        *out = ctx;
        return ER_OK;
    }
    const int64_t kv_dim = c->n_head_kv * c->head_dim;
    const int64_t v_dim = c->n_head_kv * c->head_dim_v;
    ctx->k_cache = alloc_elems(c->n_layer, p.n_ctx, kv_dim, er_type_get(type_k)->type_size);
    ctx->v_cache = alloc_elems(c->n_layer, p.n_ctx, v_dim, er_type_get(type_v)->type_size);
    ctx->k_cur = alloc_floats(p.n_batch, kv_dim, 1);
    ctx->v_cur = alloc_floats(p.n_batch, v_dim, 1);
    ctx->x = alloc_floats(p.n_batch, c->n_embd, 1);
    ctx->xn = alloc_floats(p.n_batch, c->n_embd, 1);
    ctx->q = alloc_floats(p.n_batch, c->n_head, c->head_dim);
    ctx->attn = alloc_floats(p.n_batch, c->n_head, c->head_dim_v);
    ctx->gate = alloc_floats(p.n_batch, c->n_ff, 1);
    ctx->up = alloc_floats(p.n_batch, c->n_ff, 1);
    ctx->scores = alloc_floats(p.n_threads, p.n_ctx, 1);
    ctx->row = alloc_floats(p.n_threads, max64(max64(c->n_embd, c->n_ff), c->n_head * c->head_dim_v), 1);
    if (!ctx->k_cache || !ctx->v_cache || !ctx->k_cur || !ctx->v_cur || !ctx->x || !ctx->xn || !ctx->q ||
        !ctx->attn || !ctx->gate || !ctx->up || !ctx->scores || !ctx->row) {
        st = er_fail(ER_ERR_NO_MEMORY, "er_context_create: cannot allocate a %lld-token KV cache and scratch for %s",
                     (long long)p.n_ctx, model->path);
        goto fail;
    }
    if (!ctx->reference) {
        const int64_t max_in = max64(max64(c->n_embd, c->n_ff), c->n_head * c->head_dim_v);
        if ((st = cpu_pool_create(p.n_threads, &ctx->pool)) != ER_OK)
            goto fail;
        const size_t act_size = (cpu_fast_act_size(p.n_batch, max_in, cpu_pool_size(ctx->pool)) + 63) / 64 * 64;
        const size_t attn_bytes = (size_t)cpu_pool_size(ctx->pool) * cpu_fast_attn_scratch_floats(p.n_ctx, c->head_dim) *
                                  sizeof(float);
        if (!(ctx->attn_scratch = aligned_alloc(64, attn_bytes)) || !(ctx->act = aligned_alloc(64, act_size))) {
            st = er_fail(ER_ERR_NO_MEMORY, "er_context_create: cannot allocate activation scratch for %s",
                         model->path);
            goto fail;
        }
    }
    *out = ctx;
    return ER_OK;
fail:
    er_context_free(ctx);
    return st;
}

void er_context_free(er_context *ctx) {
    if (!ctx)
        return;
#ifdef ER_HAVE_CUDA
    cuda_context_free(ctx->cuda);
#endif
    free(ctx->k_cache);
    free(ctx->v_cache);
    free(ctx->k_cur);
    free(ctx->v_cur);
    free(ctx->x);
    free(ctx->xn);
    free(ctx->q);
    free(ctx->attn);
    free(ctx->gate);
    free(ctx->up);
    free(ctx->scores);
    free(ctx->row);
    free(ctx->logits);
    cpu_pool_free(ctx->pool);
    free(ctx->act);
    free(ctx->attn_scratch);
    free(ctx);
}

int64_t er_context_n_ctx(const er_context *ctx) { return ctx ? ctx->n_ctx : 0; }
int64_t er_context_n_past(const er_context *ctx) { return ctx ? ctx->n_past : 0; }
const float *er_context_logits(const er_context *ctx) { return ctx && ctx->has_logits ? ctx->logits : NULL; }

er_status er_context_decode(er_context *ctx, const int32_t *tokens, int64_t n_tokens, float *logits_all) {
    if (!ctx || !tokens || n_tokens <= 0)
        return er_fail(ER_ERR_INVALID_ARG, "er_context_decode: %s", !ctx ? "NULL context" : !tokens ? "NULL tokens" : "no tokens");
    const int64_t n_vocab = ctx->model->config.n_vocab;
    for (int64_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return er_fail(ER_ERR_INVALID_ARG, "token %lld (id %d) is outside the vocabulary [0, %lld)",
                           (long long)i, tokens[i], (long long)n_vocab);
    if (n_tokens > ctx->n_ctx - ctx->n_past)
        return er_fail(ER_ERR_CONTEXT_FULL, "%lld tokens do not fit: %lld of the context's %lld are used",
                       (long long)n_tokens, (long long)ctx->n_past, (long long)ctx->n_ctx);
    if (ctx->cuda) {
#ifdef ER_HAVE_CUDA
        er_status st = cuda_decode(ctx->cuda, tokens, n_tokens, ctx->n_past, logits_all, ctx->logits);
        if (st != ER_OK)
            return st;
        ctx->n_past += n_tokens;
#endif
    } else {
        for (int64_t i = 0; i < n_tokens; i += ctx->n_batch) {
            const int64_t n = n_tokens - i < ctx->n_batch ? n_tokens - i : ctx->n_batch;
            model_forward(ctx, tokens + i, n, logits_all ? logits_all + i * n_vocab : NULL);
            ctx->n_past += n;
        }
    }
    ctx->has_logits = 1;
    return ER_OK;
}

er_status er_context_rewind(er_context *ctx, int64_t n_past) {
    if (!ctx || n_past < 0 || n_past > ctx->n_past)
        return er_fail(ER_ERR_INVALID_ARG, "er_context_rewind: position %lld is outside [0, %lld]",
                       (long long)n_past, ctx ? (long long)ctx->n_past : 0LL);
    ctx->n_past = n_past;
    ctx->has_logits = 0;
    return ER_OK;
}

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

#ifdef ER_HAVE_CUDA
/* The greedy loop on the GPU: chunks of steps run without the host, and each chunk's
 * ids come back at once, so EOS or the callback stop generation between chunks. The
 * device keeps one token pending (the argmax of the last step, not yet fed); a chunk
 * after the first starts by committing that same token again, so its id 0 is skipped.
 * Steps computed past the stop are forgotten by setting n_past as the CPU loop would. */
static er_status generate_cuda(er_context *ctx, const er_generate_params *params, er_token_callback on_token,
                               void *user, int64_t *n_generated) {
    enum { CHUNK = 32 };
    er_status st = ER_OK;
    int32_t ids[CHUNK + 1];
    const int32_t eos = ctx->model->config.eos;
    const int64_t n_prompt_end = ctx->n_past;
    int64_t n_gen = 0, last_fed = n_prompt_end - 1;
    int first = 1, hit_eos = 0, stop = 0;
    while (!stop && n_gen < params->n_predict) {
        int64_t steps = params->n_predict - n_gen - first;
        steps = steps < CHUNK ? steps : CHUNK;
        steps = steps < ctx->n_ctx - 1 - last_fed ? steps : ctx->n_ctx - 1 - last_fed;
        if (!first && steps <= 0)
            break; /* the context is full */
        if ((st = cuda_generate(ctx->cuda, last_fed, steps, ids)) != ER_OK)
            return st;
        for (int64_t i = first ? 0 : 1; i <= steps && !stop; i++) {
            if (!params->ignore_eos && ids[i] == eos) {
                hit_eos = stop = 1;
                break;
            }
            n_gen++;
            stop = (on_token && on_token(ids[i], user) != 0) || n_gen == params->n_predict;
        }
        last_fed += steps;
        first = 0;
    }
    /* fed: the prompt and every generated token but the last (all of them at EOS) */
    ctx->n_past = n_prompt_end + (hit_eos ? n_gen : n_gen > 0 ? n_gen - 1 : 0);
    if ((st = cuda_read_logits(ctx->cuda, ctx->logits)) != ER_OK)
        return st;
    if (n_generated)
        *n_generated = n_gen;
    return ER_OK;
}
#endif

er_status er_generate_greedy(er_context *ctx, const int32_t *prompt, int64_t n_prompt,
                             const er_generate_params *params, er_token_callback on_token, void *user,
                             int64_t *n_generated) {
    er_status st;
    int64_t n_gen = 0;
    if (n_generated)
        *n_generated = 0;
    if (!ctx || !params || params->n_predict < 0)
        return er_fail(ER_ERR_INVALID_ARG, "er_generate_greedy: %s", !ctx ? "NULL context" : !params ? "NULL params" : "negative n_predict");
    if ((st = er_context_decode(ctx, prompt, n_prompt, NULL)) != ER_OK)
        return st;
    const int32_t eos = ctx->model->config.eos;
#ifdef ER_HAVE_CUDA
    if (ctx->cuda)
        return generate_cuda(ctx, params, on_token, user, n_generated);
#endif
    while (n_gen < params->n_predict) {
        int32_t token = er_argmax(ctx->logits, ctx->model->config.n_vocab);
        if (!params->ignore_eos && token == eos)
            break;
        n_gen++;
        if ((on_token && on_token(token, user) != 0) || n_gen == params->n_predict || ctx->n_past >= ctx->n_ctx)
            break;
        if ((st = er_context_decode(ctx, &token, 1, NULL)) != ER_OK)
            break;
    }
    if (n_generated)
        *n_generated = n_gen;
    return st;
}
