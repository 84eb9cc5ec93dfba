/*
 * step.c - the CUDA backend's forward pass: the decode step (captured once as a CUDA
 * graph) and the prefill, and decode (backend_ops.decode) choosing between them.
 *
 * Decode step (one CUDA graph, 5 kernels per layer + 3; 7 with post-norms):
 *   embed(state.token) ; per layer: matvec qkv (RMSNorm folded in) ; fused Q/K norm +
 *   RoPE + KV write + attention ; matvec wo (+= residual) ; matvec gate|up with SwiGLU
 *   (RMSNorm of the residual folded in) ; matvec down (+= residual) ; output head
 *   (RMSNorm folded in) with the argmax ; commit (token -> out_ids, pos + 1). The
 *   large matrices stream through k_matvec_ring (matvec.cu), whose loads of a matrix's
 *   weights start before the previous kernel ends. A resident kernel that ran wo,
 *   gate|up, down and the next qkv as one chain measured no faster anywhere once the
 *   ring took gate|up (docs/perf-log.md, fifty-first session), and went. wo ran inside
 *   the attention kernel (its product added into an accumulator beside the residual)
 *   until the twenty-fourth session: with wo's matvec on the int8 input it was faster
 *   apart, measured on the H200 (docs/perf-log.md; edgerunner bench -n 128,
 *   alternated), Qwen3-0.6B decode folded / apart: Q8_0 1,903-1,918 / 2,030-2,042
 *   tok/s, Q4_0 2,077-2,200 / 2,247-2,249 (larger wo were always faster apart).
 * Where gate|up and down both take the ring (cuda_matvec_q8_handoff: Qwen3-8B), gate|up
 * stores the hidden vector already quantized for down, which copies its input rather
 * than quantizing it (MV_NORM_SWIGLU_Q8, MV_ADD_Q8; off with EDGERUNNER_CUDA_Q8_HANDOFF=0):
 * 8B Q4_0 decode +0.9 to +1.5% on an H100, Q8_0 level (docs/perf-log.md).
 * Everything the step needs (token, position) lives in device memory, so the same
 * graph is replayed for every token and the host waits only once per generation.
 * From position split_min on (CUDA_SPLIT_MIN, internal.h) a second graph is replayed:
 * its attention is split over the context (flash-decoding: many blocks per head and a
 * merge kernel, then wo as a matvec), which at long contexts the cluster per head, one
 * round of loads after another, is far from the bandwidth. The host knows each step's
 * position, so it picks the graph per launch.
 *
 * Prefill (more than a few tokens) runs layer by layer over the whole batch: each
 * matrix product is one tensor-core GEMM (gemm.cu) that reads the weights in their
 * device layout and rounds them to F16 on the way in (F16 inputs, F32 sums and
 * outputs, as llama.cpp's cuBLAS path does); attention runs from the cache.
 *
 * Batches of several sequences (decode_batch) run the prefill's kernels with each
 * token's position and sequence read from device arrays (cuda_batch_rows): its K and V
 * into its sequence's rows of the layer's cache (n_seq blocks per layer, sequence 0's
 * those of decode), its attention over them (a block per query), and every matrix as
 * cuda_gemm_batch, split over K by the weight's shape alone: a token's numbers do not
 * depend on what else the batch holds. A decode step (one token of each of n sequences,
 * all asking for logits) replays a graph captured per n.
 *
 * The features of backend.h this implements (the ops table in cuda.c says so), in the
 * order of cpu_forward:
 *   Q/K/V biases (Qwen2), Q/K norms, sliding windows: in the attention kernels, from the
 *     layer's attention parameters (cuda_layer_attn: biases, norms, window, RoPE table);
 *   scaled embeddings (Gemma-3): in the embedding lookup;
 *   post-norms (Gemma-3): wo and down store their product (cc->post) and
 *     cuda_add_rmsnorm adds it, normalized, to the residual (one more kernel after
 *     each of the two matrices);
 *   GeGLU (Gemma-3): gate|up's matvec (MV_NORM_GEGLU) and the prefill's cuda_glu;
 *   a tied output head: the output shares token_embd's memory (upload.c).
 */
#define _POSIX_C_SOURCE 200809L

#include <string.h>

#include "backend/cuda/internal.h"

/* The factor of the embedding lookup. */
static float embd_scale(const model_config *c) { return c->features & ER_FEAT_EMBD_SCALE ? c->embd_scale : 1.0f; }

/* The gated FFN's matvec mode. */
static int glu_mode(const model_config *c) { return c->features & ER_FEAT_GEGLU ? MV_NORM_GEGLU : MV_NORM_SWIGLU; }

er_status cuda_enqueue_step(cuda_context *cc, int split) {
    er_status st = ER_OK;
    const cuda_model *cm = cc->cm;
    const model_config *c = &cm->m->config;
    const size_t layer_kv = cc->kv_layer_stride;
    const int n_embd = (int)c->n_embd;
    CUDA_TRY(cuda_embed_state(&cm->token_embd, embd_scale(c), cc->state, cc->x, cc->stream));
    for (int64_t il = 0; il < c->n_layer; il++) {
        const cuda_layer *l = &cm->layers[il];
        const cuda_attn_params ap = cuda_layer_attn(cc, il);
        uint8_t *kc = cc->k_cache + il * layer_kv, *vc = cc->v_cache + il * layer_kv;
        CUDA_TRY(cuda_matvec(&l->qkv, MV_NORM_STORE, cc->x, l->attn_norm, c->norm_eps, cc->qkv, cc->state,
                             cc->stream));
        if (split)
            CUDA_TRY(cuda_attention_decode_split(&ap, cc->qkv, kc, vc, cc->state, cc->attn_part, cc->n_split, cc->attn,
                                                 cc->stream));
        else
            CUDA_TRY(cuda_attention_decode(&ap, cc->qkv, kc, vc, cc->state, cc->attn, cc->stream));
        if (l->post_attn_norm) {
            CUDA_TRY(cuda_matvec(&l->wo, MV_STORE, cc->attn, NULL, 0.0f, cc->post, cc->state, cc->stream));
            CUDA_TRY(cuda_add_rmsnorm(cc->post, l->post_attn_norm, 1, n_embd, c->norm_eps, cc->x, cc->stream));
        } else {
            CUDA_TRY(cuda_matvec(&l->wo, MV_ADD, cc->attn, NULL, 0.0f, cc->x, cc->state, cc->stream));
        }
        /* h handed to down already quantized where that is on (cuda_matvec_q8_handoff) */
        const int q8 =
            !l->post_ffn_norm && glu_mode(c) == MV_NORM_SWIGLU && cuda_matvec_q8_handoff(&l->gate_up, &l->down);
        CUDA_TRY(cuda_matvec(&l->gate_up, q8 ? MV_NORM_SWIGLU_Q8 : glu_mode(c), cc->x, l->ffn_norm, c->norm_eps, cc->h,
                             cc->state, cc->stream));
        if (l->post_ffn_norm) {
            CUDA_TRY(cuda_matvec(&l->down, MV_STORE, cc->h, NULL, 0.0f, cc->post, cc->state, cc->stream));
            CUDA_TRY(cuda_add_rmsnorm(cc->post, l->post_ffn_norm, 1, n_embd, c->norm_eps, cc->x, cc->stream));
        } else {
            CUDA_TRY(cuda_matvec(&l->down, q8 ? MV_ADD_Q8 : MV_ADD, cc->h, NULL, 0.0f, cc->x, cc->state, cc->stream));
        }
    }
    CUDA_TRY(cuda_matvec(&cm->output, MV_NORM_ARGMAX, cc->x, cm->output_norm, c->norm_eps, cc->logits, cc->state,
                         cc->stream));
    CUDA_TRY(cuda_commit(cc->state, cc->out_ids, cc->stream));
    return ER_OK;
fail:
    return st;
}

er_status cuda_step_graph(cuda_context *cc, int64_t pos, cudaGraphExec_t *out) {
    er_status st = ER_OK;
    cudaGraph_t graph = NULL;
    const int split = pos >= cc->split_min;
    cudaGraphExec_t *exec = split ? &cc->step_long : &cc->step;
    if (!*exec) {
        CUDA_TRY(cudaStreamBeginCapture(cc->stream, cudaStreamCaptureModeThreadLocal));
        st = cuda_enqueue_step(cc, split);
        {
            cudaError_t e = cudaStreamEndCapture(cc->stream, &graph);
            if (st != ER_OK)
                goto fail;
            CUDA_TRY(e);
        }
        CUDA_TRY(cudaGraphInstantiate(exec, graph, 0));
    }
    *out = *exec;
fail:
    if (graph)
        cudaGraphDestroy(graph);
    return st;
}

/* y (n, ldy) (+)= cc->xh w: the prefill's GEMM, or with `batch` a batch's
 * (cuda_gemm_batch, split over K, so that a token's row does not depend on the batch) */
static cudaError_t gemm_xh(cuda_context *cc, const cuda_weight *w, int n, float *y, int64_t ldy, int accumulate,
                           int batch) {
    return batch ? cuda_gemm_batch(w, cc->xh, n, y, ldy, accumulate, &cc->gemm, cc->stream)
                 : cuda_gemm(w, cc->xh, n, y, ldy, accumulate, cc->stream);
}

/* x (n, n_embd) += cc->xh w, or += rmsnorm(cc->xh w) * post_norm where the layer has one;
 * `batch` as gemm_xh. */
static er_status residual(cuda_context *cc, const cuda_weight *w, const float *post_norm, int n, int batch) {
    er_status st = ER_OK;
    const model_config *c = &cc->cm->m->config;
    if (!post_norm) {
        CUDA_TRY(gemm_xh(cc, w, n, cc->x, c->n_embd, 1, batch));
    } else {
        CUDA_TRY(gemm_xh(cc, w, n, cc->post, c->n_embd, 0, batch));
        CUDA_TRY(cuda_add_rmsnorm(cc->post, post_norm, n, (int)c->n_embd, c->norm_eps, cc->x, cc->stream));
    }
    return ER_OK;
fail:
    return st;
}

/* The layers over n tokens whose ids are at tokens (device): a prompt at positions pos0..
 * of sequence 0 (br NULL: the prefill's GEMMs and tensor-core attention), or a batch of
 * several sequences, each token at its own position and sequence (br: cuda_gemm_batch,
 * RoPE and attention by cuda_batch_rows). */
static er_status enqueue_layers(cuda_context *cc, const int32_t *tokens, int n, int64_t pos0,
                                const cuda_batch_rows *br) {
    er_status st = ER_OK;
    const cuda_model *cm = cc->cm;
    const model_config *c = &cm->m->config;
    const int64_t q_dim = c->n_head * c->head_dim, kv_dim = c->n_head_kv * c->head_dim, n_embd = c->n_embd;
    const int batch = br != NULL, gelu = (c->features & ER_FEAT_GEGLU) != 0;
    /* a batch (cc->fuse_epilogues): each RMSNorm but the first and the GLU in the epilogue
     * of the GEMM before it (cuda_gemm_batch_epi), 3 kernels a layer fewer */
    const int fused = batch && cc->fuse_epilogues;
    CUDA_TRY(cuda_embed_tokens(&cm->token_embd, embd_scale(c), tokens, n, cc->x, cc->stream));
    if (fused)
        CUDA_TRY(cuda_rmsnorm(cc->x, cm->layers[0].attn_norm, n, (int)n_embd, c->norm_eps, cc->xh, cc->stream));
    for (int64_t il = 0; il < c->n_layer; il++) {
        const cuda_layer *l = &cm->layers[il];
        const cuda_attn_params ap = cuda_layer_attn(cc, il);
        uint8_t *kc = cc->k_cache + il * cc->kv_layer_stride, *vc = cc->v_cache + il * cc->kv_layer_stride;
        /* x += attention(rmsnorm(x) Wqkv) Wo ; x += glu(rmsnorm(x) Wgate|up) Wdown; with
         * post-norms each product is normalized before it is added */
        if (!fused)
            CUDA_TRY(cuda_rmsnorm(cc->x, l->attn_norm, n, (int)n_embd, c->norm_eps, cc->xh, cc->stream));
        CUDA_TRY(gemm_xh(cc, &l->qkv, n, cc->qkv, q_dim + 2 * kv_dim, 0, batch));
        if (batch) {
            CUDA_TRY(cuda_qk_rope_store_batch(&ap, cc->qkv, n, br, kc, vc, cc->stream));
            CUDA_TRY(cuda_attention_batch(&ap, cc->qkv, n, br, kc, vc, cc->xh, &cc->att, cc->stream));
        } else {
            CUDA_TRY(cuda_qk_rope_store(&ap, cc->qkv, n, (int)pos0, kc, vc, cc->stream));
            CUDA_TRY(cuda_attention_prefill(&ap, cc->qkv, n, (int)pos0, kc, vc, cc->xh, cc->stream));
        }
        if (fused) {
            /* x += o Wo, xh = rmsnorm(x); xh = glu(xh Wgate|up); x += xh Wdown, xh = the
             * next layer's rmsnorm(x) (after the last: the head's, on its rows) */
            const float *next_norm = il + 1 < c->n_layer ? cm->layers[il + 1].attn_norm : NULL;
            const cuda_gemm_epi wo = {CUDA_EPI_NORM, cc->x, n_embd, 1, l->ffn_norm, c->norm_eps, 0, cc->xh};
            const cuda_gemm_epi gu = {CUDA_EPI_GLU, NULL, 0, 0, NULL, 0.0f, gelu, cc->xh};
            const cuda_gemm_epi down = {next_norm ? CUDA_EPI_NORM : CUDA_EPI_STORE, cc->x, n_embd, 1, next_norm,
                                        c->norm_eps, 0, cc->xh};
            CUDA_TRY(cuda_gemm_batch_epi(&l->wo, cc->xh, n, &wo, &cc->gemm, cc->stream));
            CUDA_TRY(cuda_gemm_batch_epi(&l->gate_up, cc->xh, n, &gu, &cc->gemm, cc->stream));
            CUDA_TRY(cuda_gemm_batch_epi(&l->down, cc->xh, n, &down, &cc->gemm, cc->stream));
            continue;
        }
        if ((st = residual(cc, &l->wo, l->post_attn_norm, n, batch)) != ER_OK)
            return st;
        CUDA_TRY(cuda_rmsnorm(cc->x, l->ffn_norm, n, (int)n_embd, c->norm_eps, cc->xh, cc->stream));
        CUDA_TRY(gemm_xh(cc, &l->gate_up, n, cc->gu, 2 * c->n_ff, 0, batch));
        CUDA_TRY(cuda_glu(cc->gu, n, (int)c->n_ff, gelu, cc->xh, cc->stream));
        if ((st = residual(cc, &l->down, l->post_ffn_norm, n, batch)) != ER_OK)
            return st;
    }
    return ER_OK;
fail:
    return st;
}

er_status cuda_enqueue_prefill(cuda_context *cc, int64_t T, int64_t pos0, float *logits_all) {
    er_status st = ER_OK;
    const cuda_model *cm = cc->cm;
    const model_config *c = &cm->m->config;
    const int64_t n_embd = c->n_embd;
    const int n = (int)T;
    if ((st = enqueue_layers(cc, cc->tokens, n, pos0, NULL)) != ER_OK)
        return st;
    if (logits_all) {
        CUDA_TRY(cuda_rmsnorm(cc->x, cm->output_norm, n, (int)n_embd, c->norm_eps, cc->xh, cc->stream));
        CUDA_TRY(cuda_gemm(&cm->output, cc->xh, n, logits_all, c->n_vocab, 0, cc->stream));
    }
    /* the last token: logits and the argmax the generation loop starts from */
    CUDA_TRY(cudaMemsetAsync(cc->state, 0, sizeof(unsigned long long), cc->stream));
    CUDA_TRY(cuda_matvec(&cm->output, MV_NORM_ARGMAX, cc->x + (T - 1) * n_embd, cm->output_norm, c->norm_eps,
                         cc->logits, cc->state, cc->stream));
    return ER_OK;
fail:
    return st;
}

/* A prefill of T <= n_batch tokens at pos0, waited for; logits_all: host (T, n_vocab) or NULL. */
static er_status prefill_batch(cuda_context *cc, const int32_t *tokens, int64_t T, int64_t pos0, float *logits_all) {
    er_status st = ER_OK;
    const size_t bytes = (size_t)T * (size_t)cc->cm->m->config.n_vocab * sizeof(float);
    float *all = NULL; /* (T, n_vocab) on the device */
    CUDA_TRY(cudaMemcpyAsync(cc->tokens, tokens, (size_t)T * sizeof(int32_t), cudaMemcpyHostToDevice, cc->stream));
    if (logits_all && (st = cuda_alloc((void **)&all, bytes, "the logits of every prompt token")) != ER_OK)
        goto fail;
    if ((st = cuda_enqueue_prefill(cc, T, pos0, all)) != ER_OK)
        goto fail;
    if (all)
        CUDA_TRY(cudaMemcpyAsync(logits_all, all, bytes, cudaMemcpyDeviceToHost, cc->stream));
    CUDA_TRY(cudaStreamSynchronize(cc->stream));
fail:
    cudaFree(all);
    return st;
}

er_status cuda_copy_logits(cuda_context *cc, float *dst) {
    er_status st = ER_OK;
    const size_t bytes = (size_t)cc->cm->m->config.n_vocab * sizeof(float);
    CUDA_TRY(cudaMemcpyAsync(cc->logits_host, cc->logits, bytes, cudaMemcpyDeviceToHost, cc->stream));
    CUDA_TRY(cudaStreamSynchronize(cc->stream));
    memcpy(dst, cc->logits_host, bytes);
    return ER_OK;
fail:
    return st;
}

er_status cuda_decode(void *ctx, const int32_t *tokens, int64_t n, int64_t n_past, float *logits_all,
                      float *logits_last) {
    cuda_context *cc = ctx;
    er_status st = ER_OK;
    const int64_t n_vocab = cc->cm->m->config.n_vocab;
    if (n <= CUDA_SMALL_PROMPT) {
        for (int64_t i = 0; i < n; i++) {
            const cuda_step_state s = {0, tokens[i], (int32_t)(n_past + i), 0};
            cudaGraphExec_t step;
            if ((st = cuda_step_graph(cc, n_past + i, &step)) != ER_OK)
                return st;
            CUDA_TRY(cudaMemcpyAsync(cc->state, &s, sizeof s, cudaMemcpyHostToDevice, cc->stream));
            CUDA_TRY(cudaGraphLaunch(step, cc->stream));
            if (logits_all && (st = cuda_copy_logits(cc, logits_all + i * n_vocab)) != ER_OK)
                return st;
        }
    } else {
        for (int64_t i = 0; i < n; i += cc->n_batch) {
            const int64_t T = n - i < cc->n_batch ? n - i : cc->n_batch;
            if ((st = prefill_batch(cc, tokens + i, T, n_past + i, logits_all ? logits_all + i * n_vocab : NULL)) != ER_OK)
                return st;
        }
    }
    return cuda_copy_logits(cc, logits_last);
fail:
    return st;
}

/* The forward pass of a batch of several sequences (n tokens, their ids, sequences and
 * positions in cc->batch), on cc->stream: each token's K and V in its sequence's rows and
 * its attention over them (cuda_batch_rows). */
static er_status enqueue_batch(cuda_context *cc, int n) {
    const int32_t *seq = cc->batch + cc->n_batch, *pos = cc->batch + 2 * cc->n_batch;
    const cuda_batch_rows br = {pos, seq, cc->kv_layer_bytes};
    return enqueue_layers(cc, cc->batch, n, 0, &br);
}

/* The output head of rows r0 .. r0 + m - 1 of the batch's asking tokens (m <= n_seq):
 * their logits into cc->logits' first m rows. */
static er_status enqueue_head(cuda_context *cc, int r0, int m) {
    er_status st = ER_OK;
    const cuda_model *cm = cc->cm;
    const model_config *c = &cm->m->config;
    CUDA_TRY(cuda_rmsnorm_rows(cc->x, cc->batch + 3 * cc->n_batch + r0, cm->output_norm, m, (int)c->n_embd,
                               c->norm_eps, cc->xh, cc->stream));
    CUDA_TRY(gemm_xh(cc, &cm->output, m, cc->logits, c->n_vocab, 0, 1));
    return ER_OK;
fail:
    return st;
}

/* The graph of a decode step of n tokens (forward pass and head), captured at its first
 * use; host launches of its ~13 kernels a layer took longer than the kernels (Qwen3-0.6B,
 * 8 sequences: 7.1 ms a step against ~2.8 ms of kernels, ncu). */
static er_status batch_graph(cuda_context *cc, int n, cudaGraphExec_t *out) {
    er_status st = ER_OK;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    for (int i = 0; i < CUDA_BATCH_GRAPHS; i++)
        if (cc->batch_graphs[i].exec && cc->batch_graphs[i].n == n) {
            *out = cc->batch_graphs[i].exec;
            return ER_OK;
        }
    CUDA_TRY(cudaStreamBeginCapture(cc->stream, cudaStreamCaptureModeThreadLocal));
    st = enqueue_batch(cc, n);
    if (st == ER_OK)
        st = enqueue_head(cc, 0, n);
    {
        cudaError_t e = cudaStreamEndCapture(cc->stream, &graph);
        if (st != ER_OK)
            goto fail;
        CUDA_TRY(e);
    }
    CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0));
    {
        const int slot = cc->next_batch_graph;
        cc->next_batch_graph = (slot + 1) % CUDA_BATCH_GRAPHS;
        if (cc->batch_graphs[slot].exec)
            cudaGraphExecDestroy(cc->batch_graphs[slot].exec);
        cc->batch_graphs[slot].n = n;
        cc->batch_graphs[slot].exec = *out = exec;
    }
fail:
    if (graph)
        cudaGraphDestroy(graph);
    return st;
}

er_status cuda_decode_batch(void *ctx, const backend_batch *b, float *logits) {
    cuda_context *cc = ctx;
    er_status st = ER_OK;
    const int n = (int)b->n_tokens;
    const size_t row = (size_t)cc->cm->m->config.n_vocab * sizeof(float);
    /* batch_host (4, n_batch): ids, sequences, positions, the rows asking for logits */
    int32_t *ids = cc->batch_host, *seq = ids + cc->n_batch, *pos = seq + cc->n_batch, *rows = pos + cc->n_batch;
    int n_rows = 0;
    for (int i = 0; i < n; i++) {
        ids[i] = b->tokens[i];
        seq[i] = b->seq_ids[i];
        pos[i] = (int32_t)b->pos[i];
        if (b->logits[i])
            rows[n_rows++] = i;
    }
    if (!cc->gemm.part && cc->gemm.part_floats &&
        (st = cuda_alloc((void **)&cc->gemm.part, cc->gemm.part_floats * sizeof(float),
                         "the shares of the batch GEMMs")) != ER_OK)
        return st;
    if (!cc->gemm.xq && cc->gemm.xq_bytes &&
        (st = cuda_alloc(&cc->gemm.xq, cc->gemm.xq_bytes, "the batch GEMMs' quantized inputs")) != ER_OK)
        return st;
    if (!cc->att.part && cc->att_part_floats) {
        const size_t tickets = (size_t)CUDA_ATT_BATCH_TOKENS * (size_t)cc->cm->m->config.n_head_kv * sizeof(unsigned);
        if ((st = cuda_alloc((void **)&cc->att.part, cc->att_part_floats * sizeof(float),
                             "the batch attention's shares")) != ER_OK ||
            (st = cuda_alloc((void **)&cc->att.ticket, tickets, "the batch attention's tickets")) != ER_OK)
            return st;
        /* in cc->stream: cudaMemset's legacy stream is not ordered with it (non-blocking) */
        CUDA_TRY(cudaMemsetAsync(cc->att.ticket, 0, tickets, cc->stream));
    }
    CUDA_TRY(cudaMemcpyAsync(cc->batch, cc->batch_host, (size_t)(4 * cc->n_batch) * sizeof(int32_t),
                             cudaMemcpyHostToDevice, cc->stream));
    if (n_rows == n && n <= cc->n_seq) { /* a decode step: its graph */
        cudaGraphExec_t exec = NULL;
        if ((st = batch_graph(cc, n, &exec)) != ER_OK)
            return st;
        CUDA_TRY(cudaGraphLaunch(exec, cc->stream));
        CUDA_TRY(cudaMemcpyAsync(logits, cc->logits, (size_t)n * row, cudaMemcpyDeviceToHost, cc->stream));
    } else {
        if ((st = enqueue_batch(cc, n)) != ER_OK)
            return st;
        /* the output head over the rows asking, n_seq of them at a time (cc->logits' rows) */
        for (int r0 = 0; r0 < n_rows; r0 += cc->n_seq) {
            const int m = n_rows - r0 < cc->n_seq ? n_rows - r0 : cc->n_seq;
            if ((st = enqueue_head(cc, r0, m)) != ER_OK)
                return st;
            CUDA_TRY(cudaMemcpyAsync((uint8_t *)logits + (size_t)r0 * row, cc->logits, (size_t)m * row,
                                     cudaMemcpyDeviceToHost, cc->stream));
        }
    }
    CUDA_TRY(cudaStreamSynchronize(cc->stream));
fail:
    return st;
}
