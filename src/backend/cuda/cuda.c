/*
 * cuda.c - host side of the CUDA backend: upload, contexts, prefill, the captured
 * decode step and the greedy loop on the device.
 *
 * Decode step (one CUDA graph, 4 kernels per layer + 3):
 *   embed(state.token) ; per layer: matvec qkv (RMSNorm folded in) ; fused Q/K norm +
 *   RoPE + KV write + attention + wo (its product added into an accumulator beside the
 *   residual) ; matvec gate|up with SwiGLU (RMSNorm of residual + accumulator folded
 *   in) ; matvec down (+= residual + accumulator, which it clears) ; output head
 *   (RMSNorm folded in) with the argmax ; commit (token -> out_ids, pos + 1). Where
 *   wo is not Q8_0 or Q4_0 (see enqueue_step), or of a shape the attention kernel
 *   cannot fold in, it runs as a matvec of its own (5 kernels per layer).
 * Everything the step needs (token, position) lives in device memory, so the same
 * graph is replayed for every token and the host waits only once per generation.
 *
 * Prefill (more than a few tokens) runs layer by layer over the whole batch: each
 * matrix product is one tensor-core GEMM (gemm.cu) that reads the weights in their
 * device layout and rounds them to F16 on the way in (F16 inputs, F32 sums and
 * outputs, as llama.cpp's cuBLAS path does); attention runs from the cache.
 */
#define _POSIX_C_SOURCE 200809L

#include "backend/cuda/cuda.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/ops.h"
#include "backend/cuda/kernels.h"
#include "core/status.h"
#include "model/model.h"

/* Prompts of at most this many tokens go through the decode graph one token at a
 * time: cheaper than dequantizing every matrix for a GEMM. */
enum { SMALL_PROMPT = 4, UPLOAD_CHUNK_BYTES = 16 << 20 };

#define CUDA_TRY(call)                                                                                      \
    do {                                                                                                    \
        cudaError_t e_ = (call);                                                                            \
        if (e_ != cudaSuccess) {                                                                            \
            st = er_fail(ER_ERR_DEVICE, "CUDA: %s: %s (%s:%d)", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
            goto fail;                                                                                      \
        }                                                                                                   \
    } while (0)

typedef struct cuda_layer {
    cuda_weight qkv;     /* (q_dim + 2 kv_dim, n_embd): wq, wk, wv stacked */
    cuda_weight wo;      /* (n_embd, q_dim) */
    cuda_weight gate_up; /* (2 n_ff, n_embd): w_gate, w_up stacked */
    cuda_weight down;    /* (n_embd, n_ff) */
    float *attn_norm;    /* (n_embd) */
    float *ffn_norm;     /* (n_embd) */
    float *q_norm;       /* (head_dim) or NULL */
    float *k_norm;       /* (head_dim) or NULL */
} cuda_layer;

struct cuda_model {
    const er_model *model;
    cuda_weight token_embd; /* (n_vocab, n_embd) */
    cuda_weight output;     /* (n_vocab, n_embd); shares token_embd's memory when tied */
    float *output_norm;     /* (n_embd) */
    float *rope_freqs;      /* (n_rot / 2) or NULL */
    cuda_layer *layers;     /* (n_layer) */
    uint8_t *arena;         /* every weight above, in one allocation (see arena_take) */
    size_t arena_used;
    size_t weight_bytes;
};

struct cuda_context {
    cuda_model *cm;
    int64_t n_ctx, n_batch;
    cudaStream_t stream;
    float *k_cache;          /* (n_layer, n_ctx, kv_dim) */
    float *v_cache;          /* (n_layer, n_ctx, kv_dim) */
    float *x;                /* (n_batch, n_embd) residual stream */
    float *qkv;              /* (n_batch, q_dim + 2 kv_dim) */
    float *attn;             /* (q_dim) decode: attention output, where wo is not folded into attention */
    unsigned long long *acc; /* (n_embd) decode: attention output times wo, fixed-point, not yet in x */
    float *h;                /* (n_ff) decode: SwiGLU output */
    float *gu;               /* (n_batch, 2 n_ff) prefill: gate | up */
    uint16_t *xh;            /* (n_batch, max(n_embd, q_dim, n_ff)) f16 prefill: the input of the next GEMM */
    float *logits;           /* (n_vocab) of the last token */
    float *logits_host;      /* (n_vocab) pinned: a copy from pageable memory takes much longer */
    float *rope_cs;          /* (n_ctx, n_rot / 2, 2) cos, sin of every RoPE angle */
    uint8_t *arena;          /* every buffer above but the caches, in one allocation */
    int32_t *tokens;         /* (n_batch) */
    int32_t *out_ids;        /* (n_ctx + 1) generated ids */
    cuda_step_state *state;  /* (1) */
    cudaGraphExec_t step;    /* the decode step, captured at first use */
};

static int cuda_type_of(uint32_t er_type) {
    switch (er_type) {
    case ER_TYPE_F32: return CUDA_W_F32;
    case ER_TYPE_F16: return CUDA_W_F16;
    case ER_TYPE_BF16: return CUDA_W_BF16;
    case ER_TYPE_Q8_0: return CUDA_W_Q8_0;
    case ER_TYPE_Q4_0: return CUDA_W_Q4_0;
    }
    return -1;
}

static int has_scales(int t) { return t == CUDA_W_Q8_0 || t == CUDA_W_Q4_0; }

int er_cuda_available(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

size_t cuda_device_bytes_in_use(void) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        return 0;
    return total_b - free_b;
}

static er_status dalloc(void **p, size_t bytes, const char *what) {
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *p = NULL;
        return er_fail(ER_ERR_DEVICE, "CUDA: cannot allocate %zu bytes for %s: %s", bytes, what, cudaGetErrorString(e));
    }
    return ER_OK;
}

/* The model's weights share one allocation: cudaMalloc rounds every allocation up to
 * whole 2 MiB pages, which over the 200-odd tensors of Qwen3-0.6B wasted about 190 MiB
 * of device memory (measured). The upload runs twice: first with no arena, only adding
 * up the sizes, then into the arena. Slices are 256-byte aligned. */
static void *arena_take(uint8_t *arena, size_t *used, size_t bytes) {
    const size_t at = *used;
    *used += (bytes + 255) & ~(size_t)255;
    return arena ? arena + at : NULL;
}

static er_status upload_vector(cuda_model *cm, const float *host, int64_t n, float **out) {
    er_status st = ER_OK;
    *out = NULL;
    if (!host)
        return ER_OK;
    *out = arena_take(cm->arena, &cm->arena_used, (size_t)n * sizeof(float));
    if (*out)
        CUDA_TRY(cudaMemcpy(*out, host, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    return ER_OK;
fail:
    return st;
}

/* Uploads n_parts host matrices with the same type and row length as one stacked
 * matrix; Q8_0 and Q4_0 blocks are repacked on the device through a small staging
 * buffer. */
static er_status upload_matrix(cuda_model *cm, const er_weight *const *parts, const char *const *names, int n_parts,
                               cuda_weight *out, void *staging) {
    er_status st = ER_OK;
    const int type = cuda_type_of(parts[0]->type);
    memset(out, 0, sizeof *out);
    int64_t n_out = 0;
    for (int i = 0; i < n_parts; i++) {
        const int ti = cuda_type_of(parts[i]->type);
        if (ti < 0)
            return er_fail(ER_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which the CUDA backend does not run (F32, F16, BF16, Q8_0, Q4_0)",
                           cm->model->path, names[i], parts[i]->traits->name);
        if (ti != type || parts[i]->n_in != parts[0]->n_in)
            return er_fail(ER_ERR_UNSUPPORTED, "%s: tensors '%s' and '%s' differ in type or row length; the CUDA backend stacks them",
                           cm->model->path, names[0], names[i]);
        n_out += parts[i]->n_out;
    }
    const int64_t n_in = parts[0]->n_in;
    if (n_in > INT32_MAX / 4 || n_out > INT32_MAX)
        return er_fail(ER_ERR_UNSUPPORTED, "%s: tensor '%s' is too large for the CUDA kernels", cm->model->path, names[0]);
    out->type = type;
    out->n_in = n_in;
    out->n_out = n_out;
    const size_t rb = cuda_row_bytes(type, n_in);
    /* + 16 bytes: the matvec kernels copy whole aligned 16-byte units around a slice */
    out->w = arena_take(cm->arena, &cm->arena_used, (size_t)n_out * rb + 16);
    if (has_scales(type))
        out->d = arena_take(cm->arena, &cm->arena_used, (size_t)n_out * (size_t)(n_in / 32) * 2 + 16);
    if (!cm->arena)
        return ER_OK; /* sizing pass */
    cm->weight_bytes += (size_t)n_out * rb + (has_scales(type) ? (size_t)n_out * (size_t)(n_in / 32) * 2 : 0);
    int64_t row0 = 0;
    for (int i = 0; i < n_parts; i++) {
        const er_weight *p = parts[i];
        if (!has_scales(type)) {
            CUDA_TRY(cudaMemcpy((uint8_t *)out->w + (size_t)row0 * rb, p->data, (size_t)p->n_out * p->row_size,
                                cudaMemcpyHostToDevice));
        } else {
            const int64_t chunk = (int64_t)(UPLOAD_CHUNK_BYTES / p->row_size);
            for (int64_t r = 0; r < p->n_out; r += chunk) {
                const int64_t rows = p->n_out - r < chunk ? p->n_out - r : chunk;
                CUDA_TRY(cudaMemcpy(staging, p->data + (size_t)r * p->row_size, (size_t)rows * p->row_size,
                                    cudaMemcpyHostToDevice));
                uint8_t *qs = (uint8_t *)out->w + (size_t)(row0 + r) * rb;
                uint16_t *d = (uint16_t *)out->d + (size_t)(row0 + r) * (size_t)(n_in / 32);
                CUDA_TRY(type == CUDA_W_Q8_0 ? cuda_repack_q8_0(staging, rows, n_in, qs, d, 0)
                                             : cuda_repack_q4_0(staging, rows, n_in, qs, d, 0));
            }
        }
        row0 += p->n_out;
    }
    CUDA_TRY(cudaDeviceSynchronize());
    return ER_OK;
fail:
    return st;
}

void cuda_model_free(cuda_model *cm) {
    if (!cm)
        return;
    cudaFree(cm->arena);
    free(cm->layers);
    free(cm);
}

size_t cuda_model_weight_bytes(const cuda_model *cm) { return cm ? cm->weight_bytes : 0; }

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Every weight into the arena (or, with no arena yet, only its size: see arena_take). */
static er_status upload_all(cuda_model *cm, void *staging) {
    er_status st = ER_OK;
    const er_model *m = cm->model;
    const model_config *c = &m->config;
    char names[4][96];
    {
        const er_weight *embd[1] = {&m->token_embd};
        const char *embd_name[1] = {"token_embd.weight"};
        if ((st = upload_matrix(cm, embd, embd_name, 1, &cm->token_embd, staging)) != ER_OK)
            return st;
    }
    if (m->output.data == m->token_embd.data) {
        cm->output = cm->token_embd;
    } else {
        const er_weight *outw[1] = {&m->output};
        const char *out_name[1] = {"output.weight"};
        if ((st = upload_matrix(cm, outw, out_name, 1, &cm->output, staging)) != ER_OK)
            return st;
    }
    if ((st = upload_vector(cm, m->output_norm, c->n_embd, &cm->output_norm)) != ER_OK ||
        (st = upload_vector(cm, m->rope_freqs, c->n_rot / 2, &cm->rope_freqs)) != ER_OK)
        return st;
    for (int64_t il = 0; il < c->n_layer; il++) {
        const layer_weights *lw = &m->layers[il];
        cuda_layer *l = &cm->layers[il];
        const char *nm[3] = {names[0], names[1], names[2]};
#define NAMES3(a, b, c_)                                                      \
    (snprintf(names[0], sizeof names[0], "blk.%lld." a, (long long)il),      \
     snprintf(names[1], sizeof names[1], "blk.%lld." b, (long long)il),      \
     snprintf(names[2], sizeof names[2], "blk.%lld." c_, (long long)il))
        const er_weight *qkv[3] = {&lw->wq, &lw->wk, &lw->wv};
        NAMES3("attn_q.weight", "attn_k.weight", "attn_v.weight");
        if ((st = upload_matrix(cm, qkv, nm, 3, &l->qkv, staging)) != ER_OK)
            return st;
        const er_weight *wo[1] = {&lw->wo};
        NAMES3("attn_output.weight", "", "");
        if ((st = upload_matrix(cm, wo, nm, 1, &l->wo, staging)) != ER_OK)
            return st;
        const er_weight *gu[2] = {&lw->w_gate, &lw->w_up};
        NAMES3("ffn_gate.weight", "ffn_up.weight", "");
        if ((st = upload_matrix(cm, gu, nm, 2, &l->gate_up, staging)) != ER_OK)
            return st;
        const er_weight *down[1] = {&lw->w_down};
        NAMES3("ffn_down.weight", "", "");
        if ((st = upload_matrix(cm, down, nm, 1, &l->down, staging)) != ER_OK)
            return st;
#undef NAMES3
        if ((st = upload_vector(cm, lw->attn_norm, c->n_embd, &l->attn_norm)) != ER_OK ||
            (st = upload_vector(cm, lw->ffn_norm, c->n_embd, &l->ffn_norm)) != ER_OK ||
            (st = upload_vector(cm, lw->q_norm, c->head_dim, &l->q_norm)) != ER_OK ||
            (st = upload_vector(cm, lw->k_norm, c->head_dim, &l->k_norm)) != ER_OK)
            return st;
    }
    return ER_OK;
}

er_status cuda_model_create(const er_model *m, cuda_model **out) {
    er_status st = ER_OK;
    const model_config *c = &m->config;
    void *staging = NULL;
    *out = NULL;
    if (!er_cuda_available())
        return er_fail(ER_ERR_DEVICE, "%s: no CUDA device is available", m->path);
    if (c->head_dim_v != c->head_dim || c->head_dim > 256)
        return er_fail(ER_ERR_UNSUPPORTED, "%s: the CUDA backend needs head_dim == head_dim_v <= 256 (got %lld, %lld)",
                       m->path, (long long)c->head_dim, (long long)c->head_dim_v);
    cuda_model *cm = calloc(1, sizeof *cm);
    if (!cm)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", m->path);
    cm->model = m;
    cm->layers = calloc((size_t)c->n_layer, sizeof *cm->layers);
    if (!cm->layers) {
        st = er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", m->path);
        goto fail;
    }
    if ((st = dalloc(&staging, UPLOAD_CHUNK_BYTES, "the upload staging buffer")) != ER_OK)
        goto fail;
    if ((st = upload_all(cm, staging)) != ER_OK ||
        (st = dalloc((void **)&cm->arena, cm->arena_used, "the weights")) != ER_OK)
        goto fail;
    cm->arena_used = 0;
    if ((st = upload_all(cm, staging)) != ER_OK)
        goto fail;
    cudaFree(staging);
    *out = cm;
    return ER_OK;
fail:
    cudaFree(staging);
    cuda_model_free(cm);
    return st;
}

static cuda_attn_params attn_params(const cuda_model *cm, int64_t il, int64_t n_ctx, const float *rope_cs) {
    const model_config *c = &cm->model->config;
    cuda_attn_params p;
    p.n_head = (int)c->n_head;
    p.n_head_kv = (int)c->n_head_kv;
    p.head_dim = (int)c->head_dim;
    p.head_dim_v = (int)c->head_dim_v;
    p.n_rot = (int)c->n_rot;
    p.rope_neox = c->rope_neox;
    p.eps = c->norm_eps;
    p.q_norm = cm->layers[il].q_norm;
    p.k_norm = cm->layers[il].k_norm;
    p.rope_cs = (const float2 *)rope_cs;
    p.n_ctx = n_ctx;
    return p;
}

/* The RoPE table, (n_ctx, n_rot / 2) pairs (cos, sin), with the CPU reference's own
 * rounding (cpu_rope_angles), so that both backends rotate by identical floats. */
static er_status upload_rope_table(cuda_context *cc) {
    er_status st = ER_OK;
    const model_config *c = &cc->cm->model->config;
    const int64_t half = c->n_rot / 2;
    float *host = malloc((size_t)(cc->n_ctx * half * 2) * sizeof(float));
    if (!host)
        return er_fail(ER_ERR_NO_MEMORY, "out of memory for the RoPE table");
    for (int64_t pos = 0; pos < cc->n_ctx; pos++)
        cpu_rope_angles(c, cc->cm->model->rope_freqs, pos, host + pos * half * 2);
    CUDA_TRY(cudaMemcpy(cc->rope_cs, host, (size_t)(cc->n_ctx * half * 2) * sizeof(float), cudaMemcpyHostToDevice));
fail:
    free(host);
    return st;
}

void cuda_context_free(cuda_context *cc) {
    if (!cc)
        return;
    if (cc->step)
        cudaGraphExecDestroy(cc->step);
    if (cc->stream)
        cudaStreamDestroy(cc->stream);
    cudaFreeHost(cc->logits_host);
    cudaFree(cc->k_cache);
    cudaFree(cc->v_cache);
    cudaFree(cc->arena);
    free(cc);
}

er_status cuda_context_create(cuda_model *cm, int64_t n_ctx, int64_t n_batch, cuda_context **out) {
    er_status st = ER_OK;
    const model_config *c = &cm->model->config;
    const int64_t q_dim = c->n_head * c->head_dim, kv_dim = c->n_head_kv * c->head_dim;
    *out = NULL;
    cuda_context *cc = calloc(1, sizeof *cc);
    if (!cc)
        return er_fail(ER_ERR_NO_MEMORY, "out of memory");
    cc->cm = cm;
    cc->n_ctx = n_ctx;
    cc->n_batch = n_batch;
    const size_t f = sizeof(float);
    const size_t kv_bytes = (size_t)c->n_layer * (size_t)n_ctx * (size_t)kv_dim * f;
    if ((st = dalloc((void **)&cc->k_cache, kv_bytes, "the K cache")) != ER_OK ||
        (st = dalloc((void **)&cc->v_cache, kv_bytes, "the V cache")) != ER_OK)
        goto fail;
    /* the rest in one allocation, carved twice: first to add up the sizes (see arena_take) */
    for (int pass = 0; pass < 2; pass++) {
        size_t used = 0;
        uint8_t *a = cc->arena;
        cc->x = arena_take(a, &used, (size_t)(n_batch * c->n_embd) * f);
        cc->qkv = arena_take(a, &used, (size_t)(n_batch * (q_dim + 2 * kv_dim)) * f);
        cc->attn = arena_take(a, &used, (size_t)q_dim * f);
        cc->acc = arena_take(a, &used, (size_t)c->n_embd * sizeof(unsigned long long));
        cc->h = arena_take(a, &used, (size_t)c->n_ff * f);
        cc->gu = arena_take(a, &used, (size_t)(n_batch * 2 * c->n_ff) * f);
        cc->xh = arena_take(a, &used, (size_t)(n_batch * max64(max64(c->n_embd, q_dim), c->n_ff)) * 2);
        cc->logits = arena_take(a, &used, (size_t)c->n_vocab * f);
        cc->rope_cs = arena_take(a, &used, (size_t)(n_ctx * (c->n_rot / 2) * 2) * f);
        cc->tokens = arena_take(a, &used, (size_t)n_batch * sizeof(int32_t));
        cc->out_ids = arena_take(a, &used, (size_t)(n_ctx + 1) * sizeof(int32_t));
        cc->state = arena_take(a, &used, sizeof(cuda_step_state));
        if (pass == 0 && (st = dalloc((void **)&cc->arena, used, "activations and scratch")) != ER_OK)
            goto fail;
    }
    if ((st = upload_rope_table(cc)) != ER_OK)
        goto fail;
    CUDA_TRY(cudaMallocHost((void **)&cc->logits_host, (size_t)c->n_vocab * f));
    CUDA_TRY(cudaMemset(cc->state, 0, sizeof(cuda_step_state)));
    CUDA_TRY(cudaMemset(cc->acc, 0, (size_t)c->n_embd * sizeof(unsigned long long))); /* each step leaves it 0 */
    CUDA_TRY(cudaStreamCreateWithFlags(&cc->stream, cudaStreamNonBlocking));
    *out = cc;
    return ER_OK;
fail:
    cuda_context_free(cc);
    return st;
}

/* Kernel timing for `bench --profile`: an event after each launch, tagged with the
 * kernel's role. */
enum { PROF_EMBED, PROF_QKV, PROF_ATTN, PROF_WO, PROF_GATE_UP, PROF_DOWN, PROF_HEAD, PROF_COMMIT, PROF_COUNT };
static const char *prof_names[PROF_COUNT] = {"embed", "qkv", "attention", "wo", "gate_up", "down", "head", "commit"};
/* and of a prefill */
enum { PP_EMBED, PP_ELEMENTWISE, PP_GEMM, PP_ROPE, PP_ATTN, PP_HEAD, PP_COUNT };
static const char *pp_names[PP_COUNT] = {"embed", "norm/swiglu", "gemm", "qk rope", "attention", "head"};
enum { PROF_MAX_EVENTS = 8192 };
typedef struct step_profile {
    cudaEvent_t ev[PROF_MAX_EVENTS];
    int role[PROF_MAX_EVENTS];
    int n;
} step_profile;

#define MARK(role_)                                                                      \
    do {                                                                                 \
        if (prof && prof->n < PROF_MAX_EVENTS) {                                         \
            CUDA_TRY(cudaEventRecord(prof->ev[prof->n], cc->stream));                    \
            prof->role[prof->n++] = (role_);                                             \
        }                                                                                \
    } while (0)

/* The kernels of one decode step, on cc->stream (captured into the step graph). */
static er_status enqueue_step(cuda_context *cc, step_profile *prof) {
    er_status st = ER_OK;
    const cuda_model *cm = cc->cm;
    const model_config *c = &cm->model->config;
    const size_t layer_kv = (size_t)cc->n_ctx * (size_t)(c->n_head_kv * c->head_dim);
    MARK(-1);
    CUDA_TRY(cuda_embed_state(&cm->token_embd, cc->state, cc->x, cc->stream));
    MARK(PROF_EMBED);
    for (int64_t il = 0; il < c->n_layer; il++) {
        const cuda_layer *l = &cm->layers[il];
        const cuda_attn_params ap = attn_params(cm, il, cc->n_ctx, cc->rope_cs);
        /* wo folded into the attention kernel: its output then waits in cc->acc until
         * gate_up reads x + acc and down folds it into x. Only where that measured faster
         * (Qwen3-0.6B on the H200, BENCHMARKS.md): Q8_0 1,720 against 1,661-1,674 tok/s,
         * Q4_0 1,958 against 1,904-1,909; the float types are not measured yet. */
        const int fold_wo = has_scales(l->wo.type) && cuda_attention_can_project(&ap, &l->wo);
        unsigned long long *acc = fold_wo ? cc->acc : NULL;
        CUDA_TRY(cuda_matvec(&l->qkv, MV_NORM_STORE, cc->x, l->attn_norm, c->norm_eps, cc->qkv, NULL, cc->state,
                             cc->stream));
        MARK(PROF_QKV);
        CUDA_TRY(cuda_attention_decode(&ap, cc->qkv, cc->k_cache + il * layer_kv, cc->v_cache + il * layer_kv, cc->state,
                                       cc->attn, acc ? &l->wo : NULL, acc, cc->stream));
        MARK(PROF_ATTN);
        if (!acc) {
            CUDA_TRY(cuda_matvec(&l->wo, MV_ADD, cc->attn, NULL, 0.0f, cc->x, NULL, cc->state, cc->stream));
            MARK(PROF_WO);
        }
        CUDA_TRY(cuda_matvec(&l->gate_up, MV_NORM_SWIGLU, cc->x, l->ffn_norm, c->norm_eps, cc->h, acc, cc->state,
                             cc->stream));
        MARK(PROF_GATE_UP);
        CUDA_TRY(cuda_matvec(&l->down, MV_ADD, cc->h, NULL, 0.0f, cc->x, acc, cc->state, cc->stream));
        MARK(PROF_DOWN);
    }
    CUDA_TRY(cuda_matvec(&cm->output, MV_NORM_ARGMAX, cc->x, cm->output_norm, c->norm_eps, cc->logits, NULL, cc->state,
                         cc->stream));
    MARK(PROF_HEAD);
    CUDA_TRY(cuda_commit(cc->state, cc->out_ids, cc->stream));
    MARK(PROF_COMMIT);
    return ER_OK;
fail:
    return st;
}

static er_status ensure_step_graph(cuda_context *cc) {
    er_status st = ER_OK;
    cudaGraph_t graph = NULL;
    if (cc->step)
        return ER_OK;
    CUDA_TRY(cudaStreamBeginCapture(cc->stream, cudaStreamCaptureModeThreadLocal));
    st = enqueue_step(cc, NULL);
    {
        cudaError_t e = cudaStreamEndCapture(cc->stream, &graph);
        if (st != ER_OK)
            goto fail;
        CUDA_TRY(e);
    }
    CUDA_TRY(cudaGraphInstantiate(&cc->step, graph, 0));
fail:
    if (graph)
        cudaGraphDestroy(graph);
    return st;
}

/* Y (T, ldy) = X (T, n_in) f16 @ W^T, or Y += it (accumulate: the residual) */
static er_status gemm(cuda_context *cc, const cuda_weight *w, const uint16_t *X, int64_t T, float *Y, int64_t ldy,
                      int accumulate, step_profile *prof) {
    er_status st = ER_OK;
    CUDA_TRY(cuda_gemm(w, X, (int)T, Y, ldy, accumulate, cc->stream));
    MARK(PP_GEMM);
    return ER_OK;
fail:
    return st;
}

static er_status prefill_batch(cuda_context *cc, const int32_t *tokens, int64_t T, int64_t pos0, float *logits_all,
                               step_profile *prof) {
    er_status st = ER_OK;
    const cuda_model *cm = cc->cm;
    const model_config *c = &cm->model->config;
    const int64_t q_dim = c->n_head * c->head_dim, kv_dim = c->n_head_kv * c->head_dim, n_embd = c->n_embd;
    const size_t layer_kv = (size_t)cc->n_ctx * (size_t)kv_dim;
    float *all = NULL;
    MARK(-1);
    CUDA_TRY(cudaMemcpyAsync(cc->tokens, tokens, (size_t)T * sizeof(int32_t), cudaMemcpyHostToDevice, cc->stream));
    CUDA_TRY(cuda_embed_tokens(&cm->token_embd, cc->tokens, (int)T, cc->x, cc->stream));
    MARK(PP_EMBED);
    for (int64_t il = 0; il < c->n_layer; il++) {
        const cuda_layer *l = &cm->layers[il];
        const cuda_attn_params ap = attn_params(cm, il, cc->n_ctx, cc->rope_cs);
        float *kc = cc->k_cache + il * layer_kv, *vc = cc->v_cache + il * layer_kv;
        CUDA_TRY(cuda_rmsnorm(cc->x, l->attn_norm, (int)T, (int)n_embd, c->norm_eps, cc->xh, cc->stream));
        MARK(PP_ELEMENTWISE);
        if ((st = gemm(cc, &l->qkv, cc->xh, T, cc->qkv, q_dim + 2 * kv_dim, 0, prof)) != ER_OK)
            goto fail;
        CUDA_TRY(cuda_qk_rope_store(&ap, cc->qkv, (int)T, (int)pos0, kc, vc, cc->stream));
        MARK(PP_ROPE);
        CUDA_TRY(cuda_attention_prefill(&ap, cc->qkv, (int)T, (int)pos0, kc, vc, cc->xh, cc->stream));
        MARK(PP_ATTN);
        if ((st = gemm(cc, &l->wo, cc->xh, T, cc->x, n_embd, 1, prof)) != ER_OK)
            goto fail;
        CUDA_TRY(cuda_rmsnorm(cc->x, l->ffn_norm, (int)T, (int)n_embd, c->norm_eps, cc->xh, cc->stream));
        MARK(PP_ELEMENTWISE);
        if ((st = gemm(cc, &l->gate_up, cc->xh, T, cc->gu, 2 * c->n_ff, 0, prof)) != ER_OK)
            goto fail;
        CUDA_TRY(cuda_swiglu(cc->gu, (int)T, (int)c->n_ff, cc->xh, cc->stream));
        MARK(PP_ELEMENTWISE);
        if ((st = gemm(cc, &l->down, cc->xh, T, cc->x, n_embd, 1, prof)) != ER_OK)
            goto fail;
    }
    if (logits_all) {
        const size_t bytes = (size_t)T * (size_t)c->n_vocab * sizeof(float);
        if ((st = dalloc((void **)&all, bytes, "the logits of every prompt token")) != ER_OK)
            goto fail;
        CUDA_TRY(cuda_rmsnorm(cc->x, cm->output_norm, (int)T, (int)n_embd, c->norm_eps, cc->xh, cc->stream));
        if ((st = gemm(cc, &cm->output, cc->xh, T, all, c->n_vocab, 0, prof)) != ER_OK)
            goto fail;
        CUDA_TRY(cudaMemcpyAsync(logits_all, all, bytes, cudaMemcpyDeviceToHost, cc->stream));
    }
    /* the last token: logits and the argmax the generation loop starts from */
    CUDA_TRY(cudaMemsetAsync(cc->state, 0, sizeof(unsigned long long), cc->stream));
    CUDA_TRY(cuda_matvec(&cm->output, MV_NORM_ARGMAX, cc->x + (T - 1) * n_embd, cm->output_norm, c->norm_eps,
                         cc->logits, NULL, cc->state, cc->stream));
    MARK(PP_HEAD);
    CUDA_TRY(cudaStreamSynchronize(cc->stream));
fail:
    cudaFree(all);
    return st;
}

/* dst (n_vocab) = the last token's logits, through the pinned buffer; waits. */
static er_status copy_logits(cuda_context *cc, float *dst) {
    er_status st = ER_OK;
    const size_t bytes = (size_t)cc->cm->model->config.n_vocab * sizeof(float);
    CUDA_TRY(cudaMemcpyAsync(cc->logits_host, cc->logits, bytes, cudaMemcpyDeviceToHost, cc->stream));
    CUDA_TRY(cudaStreamSynchronize(cc->stream));
    memcpy(dst, cc->logits_host, bytes);
    return ER_OK;
fail:
    return st;
}

er_status cuda_decode(cuda_context *cc, const int32_t *tokens, int64_t n, int64_t n_past, float *logits_all,
                      float *logits_last) {
    er_status st = ER_OK;
    const int64_t n_vocab = cc->cm->model->config.n_vocab;
    if (n <= SMALL_PROMPT) {
        if ((st = ensure_step_graph(cc)) != ER_OK)
            return st;
        for (int64_t i = 0; i < n; i++) {
            const cuda_step_state s = {0, tokens[i], (int32_t)(n_past + i), 0, 0};
            CUDA_TRY(cudaMemcpyAsync(cc->state, &s, sizeof s, cudaMemcpyHostToDevice, cc->stream));
            CUDA_TRY(cudaGraphLaunch(cc->step, cc->stream));
            if (logits_all && (st = copy_logits(cc, logits_all + i * n_vocab)) != ER_OK)
                return st;
        }
    } else {
        for (int64_t i = 0; i < n; i += cc->n_batch) {
            const int64_t T = n - i < cc->n_batch ? n - i : cc->n_batch;
            if ((st = prefill_batch(cc, tokens + i, T, n_past + i, logits_all ? logits_all + i * n_vocab : NULL, NULL)) !=
                ER_OK)
                return st;
        }
    }
    if (logits_last)
        return copy_logits(cc, logits_last);
    CUDA_TRY(cudaStreamSynchronize(cc->stream));
    return ER_OK;
fail:
    return st;
}

er_status cuda_generate(cuda_context *cc, int64_t pos_last_fed, int64_t n_steps, int32_t *ids) {
    er_status st = ER_OK;
    const int32_t pos_and_count[2] = {(int32_t)pos_last_fed, 0}; /* state->pos, state->n_out */
    if ((st = ensure_step_graph(cc)) != ER_OK)
        return st;
    CUDA_TRY(cudaMemcpyAsync(&cc->state->pos, pos_and_count, sizeof pos_and_count, cudaMemcpyHostToDevice, cc->stream));
    CUDA_TRY(cuda_commit(cc->state, cc->out_ids, cc->stream));
    for (int64_t i = 0; i < n_steps; i++)
        CUDA_TRY(cudaGraphLaunch(cc->step, cc->stream));
    CUDA_TRY(cudaMemcpyAsync(ids, cc->out_ids, (size_t)(n_steps + 1) * sizeof(int32_t), cudaMemcpyDeviceToHost,
                             cc->stream));
    CUDA_TRY(cudaStreamSynchronize(cc->stream));
    return ER_OK;
fail:
    return st;
}

er_status cuda_read_logits(cuda_context *cc, float *logits) { return copy_logits(cc, logits); }

static size_t weight_bytes(const cuda_weight *w) {
    return (size_t)w->n_out * cuda_row_bytes(w->type, w->n_in) + (w->d ? (size_t)w->n_out * (size_t)(w->n_in / 32) * 2 : 0);
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

/* Adds the time between consecutive events of prof to total_us[role of the later one]. */
static er_status profile_collect(const step_profile *prof, double *total_us, int *count) {
    er_status st = ER_OK;
    for (int i = 1; i < prof->n; i++) {
        float ms = 0.0f;
        CUDA_TRY(cudaEventElapsedTime(&ms, prof->ev[i - 1], prof->ev[i]));
        total_us[prof->role[i]] += 1e3 * ms;
        count[prof->role[i]]++;
    }
    return ER_OK;
fail:
    return st;
}

/* One line per role: launches, us and share per repetition, and GB/s where bytes[role]. */
static void profile_table(char *report, size_t cap, size_t len, const char *const *names, int n_roles,
                          const double *total_us, const int *count, const size_t *bytes, int reps) {
    double sum = 0.0;
    for (int k = 0; k < n_roles; k++)
        sum += total_us[k] / reps;
    for (int k = 0; k < n_roles && len < cap; k++) {
        if (count[k] == 0) /* a role this model's step does not launch (wo, when folded into attention) */
            continue;
        const double us = total_us[k] / reps;
        len += (size_t)snprintf(report + len, cap - len, "  %-11s %4d launches %8.1f us %5.1f%%", names[k],
                                count[k] / reps, us, 100.0 * us / sum);
        if (bytes && bytes[k] && len < cap)
            len += (size_t)snprintf(report + len, cap - len, "  %7.1f MB  %6.0f GB/s", (double)bytes[k] / 1e6,
                                    (double)bytes[k] / (us * 1e3));
        if (len < cap)
            len += (size_t)snprintf(report + len, cap - len, "\n");
    }
}

/* The events of a profile; the callers check the last one: NULL when any failed. */
static step_profile *profile_new(void) {
    step_profile *prof = calloc(1, sizeof *prof);
    for (int i = 0; prof && i < PROF_MAX_EVENTS; i++)
        if (cudaEventCreate(&prof->ev[i]) != cudaSuccess)
            break;
    return prof;
}

static void profile_free(step_profile *prof) {
    for (int i = 0; prof && i < PROF_MAX_EVENTS; i++)
        if (prof->ev[i])
            cudaEventDestroy(prof->ev[i]);
    free(prof);
}

er_status cuda_profile_step(cuda_context *cc, int64_t pos, int reps, char *report, size_t cap) {
    er_status st = ER_OK;
    step_profile *prof = profile_new();
    double total_us[PROF_COUNT] = {0}, graph_us = 0.0;
    size_t bytes[PROF_COUNT] = {0};
    int count[PROF_COUNT] = {0};
    cudaEvent_t g0 = NULL, g1 = NULL;
    float *host_logits = NULL; /* (n_vocab) */
    const model_config *c = &cc->cm->model->config;
    if (!prof || !prof->ev[PROF_MAX_EVENTS - 1]) {
        profile_free(prof);
        return er_fail(ER_ERR_NO_MEMORY, "out of memory for the profile's events");
    }
    CUDA_TRY(cudaEventCreate(&g0));
    CUDA_TRY(cudaEventCreate(&g1));
    if ((st = ensure_step_graph(cc)) != ER_OK)
        goto fail;
    for (int r = 0; r < reps; r++) {
        const cuda_step_state s = {0, 1, (int32_t)pos, 0, 0};
        CUDA_TRY(cudaMemcpyAsync(cc->state, &s, sizeof s, cudaMemcpyHostToDevice, cc->stream));
        /* kernel by kernel, queued behind a spin so that the events time the GPU */
        prof->n = 0;
        CUDA_TRY(cuda_spin(3000000, cc->stream));
        if ((st = enqueue_step(cc, prof)) != ER_OK)
            goto fail;
        CUDA_TRY(cudaStreamSynchronize(cc->stream));
        if ((st = profile_collect(prof, total_us, count)) != ER_OK)
            goto fail;
        /* the same step as the graph replays it */
        CUDA_TRY(cudaMemcpyAsync(cc->state, &s, sizeof s, cudaMemcpyHostToDevice, cc->stream));
        CUDA_TRY(cuda_spin(1000000, cc->stream));
        CUDA_TRY(cudaEventRecord(g0, cc->stream));
        CUDA_TRY(cudaGraphLaunch(cc->step, cc->stream));
        CUDA_TRY(cudaEventRecord(g1, cc->stream));
        CUDA_TRY(cudaStreamSynchronize(cc->stream));
        float ms = 0.0f;
        CUDA_TRY(cudaEventElapsedTime(&ms, g0, g1));
        graph_us += 1e3 * ms;
    }
    for (int64_t il = 0; il < c->n_layer; il++) {
        const cuda_layer *l = &cc->cm->layers[il];
        bytes[PROF_QKV] += weight_bytes(&l->qkv);
        bytes[PROF_WO] += weight_bytes(&l->wo);
        bytes[PROF_GATE_UP] += weight_bytes(&l->gate_up);
        bytes[PROF_DOWN] += weight_bytes(&l->down);
    }
    bytes[PROF_HEAD] = weight_bytes(&cc->cm->output);
    /* what a 1-token prompt costs the host (time to first token): the step launched and
     * waited for, then the logits copied to the host */
    double host_step_us = 0.0, host_logits_us = 0.0;
    if (!(host_logits = malloc((size_t)c->n_vocab * sizeof(float)))) {
        st = er_fail(ER_ERR_NO_MEMORY, "out of memory");
        goto fail;
    }
    for (int r = 0; r < reps; r++) {
        const cuda_step_state s = {0, 1, (int32_t)pos, 0, 0};
        const double t0 = now_us();
        CUDA_TRY(cudaMemcpyAsync(cc->state, &s, sizeof s, cudaMemcpyHostToDevice, cc->stream));
        CUDA_TRY(cudaGraphLaunch(cc->step, cc->stream));
        CUDA_TRY(cudaStreamSynchronize(cc->stream));
        const double t1 = now_us();
        if ((st = copy_logits(cc, host_logits)) != ER_OK)
            goto fail;
        host_step_us += t1 - t0;
        host_logits_us += now_us() - t1;
    }
    {
        const size_t len = (size_t)snprintf(report, cap,
                                            "step at position %lld: graph %.1f us (host: launched and waited %.1f us, "
                                            "logits to host %.1f us); kernels one by one:\n",
                                            (long long)pos, graph_us / reps, host_step_us / reps, host_logits_us / reps);
        profile_table(report, cap, len, prof_names, PROF_COUNT, total_us, count, bytes, reps);
    }
fail:
    profile_free(prof);
    free(host_logits);
    if (g0)
        cudaEventDestroy(g0);
    if (g1)
        cudaEventDestroy(g1);
    return st;
}

er_status cuda_profile_prefill(cuda_context *cc, const int32_t *tokens, int64_t n_tokens, int reps, char *report,
                               size_t cap) {
    er_status st = ER_OK;
    step_profile *prof = profile_new();
    double total_us[PP_COUNT] = {0}, plain_us = 0.0;
    int count[PP_COUNT] = {0};
    cudaEvent_t g0 = NULL, g1 = NULL;
    if (!prof || !prof->ev[PROF_MAX_EVENTS - 1]) {
        st = er_fail(ER_ERR_NO_MEMORY, "out of memory for the profile");
        goto fail;
    }
    if (n_tokens <= SMALL_PROMPT || n_tokens > cc->n_batch) {
        st = er_fail(ER_ERR_INVALID_ARG, "prefill profile: %lld tokens is outside (%d, %lld]", (long long)n_tokens,
                     SMALL_PROMPT, (long long)cc->n_batch);
        goto fail;
    }
    CUDA_TRY(cudaEventCreate(&g0));
    CUDA_TRY(cudaEventCreate(&g1));
    for (int r = 0; r < reps; r++) {
        prof->n = 0;
        CUDA_TRY(cuda_spin(3000000, cc->stream));
        if ((st = prefill_batch(cc, tokens, n_tokens, 0, NULL, prof)) != ER_OK ||
            (st = profile_collect(prof, total_us, count)) != ER_OK)
            goto fail;
        /* as `bench` runs it: launched as it goes, no events between the kernels */
        CUDA_TRY(cudaEventRecord(g0, cc->stream));
        if ((st = prefill_batch(cc, tokens, n_tokens, 0, NULL, NULL)) != ER_OK)
            goto fail;
        CUDA_TRY(cudaEventRecord(g1, cc->stream));
        CUDA_TRY(cudaStreamSynchronize(cc->stream));
        float ms = 0.0f;
        CUDA_TRY(cudaEventElapsedTime(&ms, g0, g1));
        plain_us += 1e3 * ms;
    }
    {
        const size_t len = (size_t)snprintf(report, cap, "prefill of %lld tokens: %.1f us; kernels one by one:\n",
                                            (long long)n_tokens, plain_us / reps);
        profile_table(report, cap, len, pp_names, PP_COUNT, total_us, count, NULL, reps);
    }
fail:
    profile_free(prof);
    if (g0)
        cudaEventDestroy(g0);
    if (g1)
        cudaEventDestroy(g1);
    return st;
}
