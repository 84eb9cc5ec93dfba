/*
 * context.c - a context of the CUDA backend: the KV cache (F32, F16 or Q8_0), the activations and
 * scratch of one batch in one allocation, a stream, and the model layer's RoPE tables
 * copied to the device (a second one where sliding-window layers have their own base).
 */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>

#include "backend/cuda/internal.h"

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

cuda_attn_params cuda_layer_attn(const cuda_context *cc, int64_t il) {
    const model_config *c = &cc->cm->m->config;
    cuda_attn_params p;
    p.n_head = (int)c->n_head;
    p.n_head_kv = (int)c->n_head_kv;
    p.head_dim = (int)c->head_dim;
    p.head_dim_v = (int)c->head_dim_v;
    p.n_rot = (int)c->n_rot;
    p.rope_neox = c->rope_neox;
    p.eps = c->norm_eps;
    p.q_norm = cc->cm->layers[il].q_norm;
    p.k_norm = cc->cm->layers[il].k_norm;
    p.rope_cs = (const float2 *)(cc->cm->m->layers[il].swa ? cc->rope_cs_swa : cc->rope_cs);
    p.n_ctx = cc->n_ctx;
    p.window = cc->cm->m->layers[il].swa ? (int)c->n_swa : 0;
    p.qkv_bias = cc->cm->layers[il].qkv_bias;
    p.kv_type = cc->kv_type;
    return p;
}

void cuda_context_free(void *ctx) {
    cuda_context *cc = ctx;
    if (!cc)
        return;
    if (cc->step)
        cudaGraphExecDestroy(cc->step);
    if (cc->step_long)
        cudaGraphExecDestroy(cc->step_long);
    for (int i = 0; i < CUDA_BATCH_GRAPHS; i++)
        if (cc->batch_graphs[i].exec)
            cudaGraphExecDestroy(cc->batch_graphs[i].exec);
    cudaFreeHost(cc->batch_logits);
    cudaFree(cc->gemm.part);
    cudaFree(cc->gemm.xq);
    cudaFree(cc->att.part);
    cudaFree(cc->att.ticket);
    if (cc->stream)
        cudaStreamDestroy(cc->stream);
    cudaFreeHost(cc->logits_host);
    cudaFreeHost(cc->batch_host);
    cudaFree(cc->k_cache);
    cudaFree(cc->v_cache);
    cudaFree(cc->arena);
    free(cc);
}

/* The device cache type of er_type cache types k and v (cuda_ops.kv_types), or a message
 * for the pairs the kernels do not take. */
static er_status kv_type_of(const model_view *m, uint32_t k, uint32_t v, int *out) {
    if (k != v)
        return er_fail(ER_ERR_UNSUPPORTED, "%s: the CUDA backend keeps K and V in one type (-ctk %s, -ctv %s)", m->path,
                       er_type_get(k)->name, er_type_get(v)->name);
    if (k == ER_TYPE_Q8_0 && m->config.head_dim % 32 != 0)
        return er_fail(ER_ERR_UNSUPPORTED, "%s: a q8_0 KV cache on the CUDA backend needs a head size that is a "
                       "multiple of 32 (this model's is %lld)", m->path, (long long)m->config.head_dim);
    *out = k == ER_TYPE_Q8_0 ? CUDA_KV_Q8_0 : k == ER_TYPE_F16 ? CUDA_KV_F16 : CUDA_KV_F32;
    return ER_OK;
}

/* The environment variable `name` where set to a number >= 0, else fallback. */
static int64_t env_int(const char *name, int64_t fallback) {
    const char *env = getenv(name);
    char *end = NULL;
    const long long v = env ? strtoll(env, &end, 10) : -1;
    return env && end != env && *end == '\0' && v >= 0 ? (int64_t)v : fallback;
}

er_status cuda_context_create(const model_view *m, void *dev, const backend_ctx_params *p, void **out) {
    er_status st = ER_OK;
    const model_config *c = &m->config;
    const int64_t q_dim = c->n_head * c->head_dim, kv_dim = c->n_head_kv * c->head_dim;
    const int64_t n_ctx = p->n_ctx, n_batch = p->n_batch;
    int kv_type = CUDA_KV_F32;
    *out = NULL;
    if ((st = kv_type_of(m, p->type_k, p->type_v, &kv_type)) != ER_OK)
        return st;
    cuda_context *cc = calloc(1, sizeof *cc);
    if (!cc)
        return er_fail(ER_ERR_NO_MEMORY, "out of memory");
    cc->cm = dev;
    cc->n_ctx = n_ctx;
    cc->n_batch = n_batch;
    cc->kv_type = kv_type;
    cc->n_seq = p->n_seq > 1 ? p->n_seq : 1;
    cc->kv_layer_bytes = cuda_kv_layer_bytes(kv_type, n_ctx, kv_dim);
    cc->kv_layer_stride = (size_t)cc->n_seq * cc->kv_layer_bytes;
    cc->split_min = env_int("EDGERUNNER_CUDA_SPLIT_MIN", CUDA_SPLIT_MIN);
    {
        const cuda_attn_params ap = cuda_layer_attn(cc, 0); /* the shape, alike in every layer */
        /* EDGERUNNER_CUDA_N_SPLIT (1 to CUDA_ATT_SPLIT_MAX) overrides the blocks per KV head,
         * for measurements. */
        const int64_t n_env = env_int("EDGERUNNER_CUDA_N_SPLIT", -1);
        const int64_t n_split = n_env >= 0 ? n_env : cuda_attention_split_count(&ap);
        cc->n_split = (int)(n_split < 1 ? 1 : n_split > CUDA_ATT_SPLIT_MAX ? CUDA_ATT_SPLIT_MAX : n_split);
        /* the fused epilogues: not with post-norms, nor rows k_split_norm does not take */
        cc->fuse_epilogues = env_int("EDGERUNNER_CUDA_FUSE", 1) != 0 && cuda_gemm_epi_norm_fits(c->n_embd);
        for (int64_t il = 0; il < c->n_layer; il++)
            cc->fuse_epilogues = cc->fuse_epilogues && !cc->cm->layers[il].post_attn_norm &&
                                 !cc->cm->layers[il].post_ffn_norm;
        cc->att_part_floats = env_int("EDGERUNNER_CUDA_BATCH_ATTN", 1) ? cuda_attention_batch_part_floats(&ap) : 0;
    }
    /* cuda_gemm_batch's shares of K, for up to 256 tokens a pass (its largest product, every
     * part's rows; the layers' matrices even unsplit, for the fused epilogues), and its
     * quantized inputs of a whole batch (the widest) */
    {
        const cuda_layer *l = &((const cuda_model *)dev)->layers[0];
        const cuda_weight *ws[5] = {&l->qkv, &l->wo, &l->gate_up, &l->down, &((const cuda_model *)dev)->output};
        const int64_t pass = n_batch < 256 ? n_batch : 256;
        for (int i = 0; i < 5; i++) {
            const int n_split = cuda_gemm_split_count(ws[i]);
            int64_t rows = 0;
            for (const cuda_weight *w = ws[i]; w; w = w->next)
                rows += w->n_out;
            const int layer_matrix = i < 4; /* ws[4], the head, needs part only where it splits */
            if ((n_split > 1 || layer_matrix) && (size_t)(n_split * rows * pass) > cc->gemm.part_floats)
                cc->gemm.part_floats = (size_t)(n_split * rows * pass);
            if (cuda_gemm_xq_bytes(n_batch, ws[i]->n_in) > cc->gemm.xq_bytes)
                cc->gemm.xq_bytes = cuda_gemm_xq_bytes(n_batch, ws[i]->n_in);
        }
    }
    const size_t f = sizeof(float);
    const size_t kv_bytes = (size_t)c->n_layer * cc->kv_layer_stride;
    const size_t rope_bytes = (size_t)(n_ctx * (c->n_rot / 2) * 2) * f;
    if ((st = cuda_alloc((void **)&cc->k_cache, kv_bytes, "the K cache")) != ER_OK ||
        (st = cuda_alloc((void **)&cc->v_cache, kv_bytes, "the V cache")) != ER_OK)
        goto fail;
    /* the rest in one allocation, carved twice: first to add up the sizes */
    for (int pass = 0; pass < 2; pass++) {
        size_t used = 0;
        uint8_t *a = cc->arena;
        cc->x = cuda_arena_take(a, &used, (size_t)(n_batch * c->n_embd) * f);
        cc->qkv = cuda_arena_take(a, &used, (size_t)(n_batch * (q_dim + 2 * kv_dim)) * f);
        cc->attn = cuda_arena_take(a, &used, (size_t)q_dim * f);
        cc->attn_part = cuda_arena_take(a, &used, (size_t)(c->n_head * cc->n_split * (c->head_dim + 2)) * f);
        /* h: the FFN's hidden vector in f32, or handed to down quantized (cuda_matvec_q8_handoff) */
        const size_t h_bytes = (size_t)c->n_ff * f, hq_bytes = cuda_q8_handoff_bytes(c->n_ff);
        cc->h = cuda_arena_take(a, &used, h_bytes > hq_bytes ? h_bytes : hq_bytes);
        cc->post = cuda_arena_take(a, &used, (size_t)(n_batch * c->n_embd) * f);
        cc->gu = cuda_arena_take(a, &used, (size_t)(n_batch * 2 * c->n_ff) * f);
        cc->xh = cuda_arena_take(a, &used, (size_t)(n_batch * max64(max64(c->n_embd, q_dim), c->n_ff)) * 2);
        cc->logits = cuda_arena_take(a, &used, (size_t)(cc->n_seq * c->n_vocab) * f);
        cc->batch = cuda_arena_take(a, &used, (size_t)(4 * n_batch) * sizeof(int32_t));
        cc->rope_cs = cuda_arena_take(a, &used, rope_bytes);
        cc->rope_cs_swa = p->rope_cs[1] ? cuda_arena_take(a, &used, rope_bytes) : cc->rope_cs;
        cc->tokens = cuda_arena_take(a, &used, (size_t)n_batch * sizeof(int32_t));
        cc->out_ids = cuda_arena_take(a, &used, (size_t)(n_ctx + 1) * sizeof(int32_t));
        cc->state = cuda_arena_take(a, &used, sizeof(cuda_step_state));
        if (pass == 0 && (st = cuda_alloc((void **)&cc->arena, used, "activations and scratch")) != ER_OK)
            goto fail;
    }
    CUDA_TRY(cudaMemcpy(cc->rope_cs, p->rope_cs[0], rope_bytes, cudaMemcpyHostToDevice));
    if (p->rope_cs[1])
        CUDA_TRY(cudaMemcpy(cc->rope_cs_swa, p->rope_cs[1], rope_bytes, cudaMemcpyHostToDevice));
    CUDA_TRY(cudaMallocHost((void **)&cc->logits_host, (size_t)c->n_vocab * f));
    CUDA_TRY(cudaMallocHost((void **)&cc->batch_host, (size_t)(4 * n_batch) * sizeof(int32_t)));
    CUDA_TRY(cudaMemset(cc->state, 0, sizeof(cuda_step_state)));
    CUDA_TRY(cudaStreamCreateWithFlags(&cc->stream, cudaStreamNonBlocking));
    *out = cc;
    return ER_OK;
fail:
    cuda_context_free(cc);
    return st;
}

er_status cuda_seq_copy(void *ctx, int src, int dst, int64_t n) {
    cuda_context *cc = ctx;
    er_status st = ER_OK;
    const model_config *c = &cc->cm->m->config;
    const size_t kv_dim = (size_t)(c->n_head_kv * c->head_dim), n_elems = (size_t)n * kv_dim;
    /* a sequence's rows of a layer: the values of its (n_ctx, kv_dim) elements, then for
     * Q8_0 their scales (cuda_kv_layer_bytes) */
    const size_t scales_at = cuda_kv_value_bytes(cc->kv_type, (size_t)cc->n_ctx * kv_dim);
    const size_t value_bytes = cuda_kv_value_bytes(cc->kv_type, n_elems);
    const size_t scale_bytes = cuda_kv_scale_bytes(cc->kv_type, n_elems);
    for (int64_t il = 0; il < c->n_layer; il++) {
        uint8_t *caches[2] = {cc->k_cache + il * cc->kv_layer_stride, cc->v_cache + il * cc->kv_layer_stride};
        for (int k = 0; k < 2; k++) {
            const uint8_t *from = caches[k] + (size_t)src * cc->kv_layer_bytes;
            uint8_t *to = caches[k] + (size_t)dst * cc->kv_layer_bytes;
            CUDA_TRY(cudaMemcpyAsync(to, from, value_bytes, cudaMemcpyDeviceToDevice, cc->stream));
            if (scale_bytes)
                CUDA_TRY(cudaMemcpyAsync(to + scales_at, from + scales_at, scale_bytes, cudaMemcpyDeviceToDevice,
                                         cc->stream));
        }
    }
    CUDA_TRY(cudaStreamSynchronize(cc->stream));
fail:
    return st;
}

float *cuda_logits_buffer(void *ctx, int64_t n_rows) {
    cuda_context *cc = ctx;
    const size_t row = (size_t)cc->cm->m->config.n_vocab * sizeof(float);
    if (n_rows > cc->batch_logits_rows) {
        cudaFreeHost(cc->batch_logits);
        cc->batch_logits_rows = 0;
        if (cudaMallocHost((void **)&cc->batch_logits, (size_t)n_rows * row) != cudaSuccess) {
            cc->batch_logits = NULL;
            cudaGetLastError();
            er_fail(ER_ERR_NO_MEMORY, "CUDA: no page-locked host memory for %lld rows of logits (%.1f MiB)",
                    (long long)n_rows, (double)((size_t)n_rows * row) / 1048576.0);
            return NULL;
        }
        cc->batch_logits_rows = n_rows;
    }
    return cc->batch_logits;
}
