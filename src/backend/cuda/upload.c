/*
 * upload.c - the model's weights to the device, once per model: the layer's matrices
 * stacked where one kernel reads them together (wq|wk|wv, w_gate|w_up), the quantized
 * types repacked on the device into the layouts of wtypes.cuh, the norms and biases as
 * F32 vectors, all of it in one allocation. Each chunk of a weight's rows is released to
 * the model layer once copied (model_view.release), which drops its pages of the file: a
 * run's peak host memory stays far below the file's size.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/internal.h"

enum { UPLOAD_CHUNK_BYTES = 16 << 20 };

er_status cuda_alloc(void **p, size_t bytes, const char *what) {
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
void *cuda_arena_take(uint8_t *arena, size_t *used, size_t bytes) {
    const size_t at = *used;
    *used += (bytes + 255) & ~(size_t)255;
    return arena ? arena + at : NULL;
}

/* n_parts host vectors of n[i] floats, one after the other in one device vector *out;
 * NULL when the first is NULL (a vector the model lacks). */
static er_status upload_vectors(cuda_model *cm, int n_parts, const float *const *host, const int64_t *n, float **out) {
    er_status st = ER_OK;
    int64_t total = 0;
    *out = NULL;
    if (!host[0])
        return ER_OK;
    for (int i = 0; i < n_parts; i++)
        total += n[i];
    *out = cuda_arena_take(cm->arena, &cm->arena_used, (size_t)total * sizeof(float));
    for (int i = 0, at = 0; *out && i < n_parts; at += (int)n[i], i++)
        CUDA_TRY(cudaMemcpy(*out + at, host[i], (size_t)n[i] * sizeof(float), cudaMemcpyHostToDevice));
    return ER_OK;
fail:
    return st;
}

static er_status upload_vector(cuda_model *cm, const float *host, int64_t n, float **out) {
    return upload_vectors(cm, 1, &host, &n, out);
}

/* Uploads n_parts host matrices with the same row length as one stacked matrix; the
 * blocks of the types that the upload repacks (RAW in wtypes.cuh) are repacked on the
 * device through a small staging buffer, the others copied. Parts of different types
 * (the _K_M recipes give some layers a Q6_K attn_v) become runs of one type each, chained
 * through cuda_weight.next into more[] (n_parts - 1 entries), where the caller's kernels
 * allow it (more != NULL); without, a message names the two tensors. */
static er_status upload_matrix(cuda_model *cm, const er_weight *const *parts, const char *const *names, int n_parts,
                               cuda_weight *out, cuda_weight *more, void *staging) {
    er_status st = ER_OK;
    cuda_weight *run = out; /* the run of one type that parts[i] goes into */
    int n_runs = 0;
    for (int i = 0; i < n_parts; i++) {
        const er_weight *p = parts[i];
        const int type = cuda_wtype_from_er(p->type);
        if (type < 0)
            return er_fail(ER_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which the CUDA backend does not run (it runs" CUDA_WTYPE_NAMES ")",
                           cm->m->path, names[i], p->traits->name);
        if (p->n_in != parts[0]->n_in)
            return er_fail(ER_ERR_UNSUPPORTED, "%s: tensors '%s' and '%s' differ in row length; the CUDA backend stacks them",
                           cm->m->path, names[0], names[i]);
        if (i == 0 || type != run->type) {
            if (i > 0 && !more)
                return er_fail(ER_ERR_UNSUPPORTED, "%s: tensors '%s' (%s) and '%s' (%s) differ in type; the CUDA backend "
                               "stacks them into one matrix of one type", cm->m->path, names[0], parts[0]->traits->name,
                               names[i], p->traits->name);
            if (i > 0) {
                run->next = &more[n_runs - 1];
                run = &more[n_runs - 1];
            }
            memset(run, 0, sizeof *run);
            run->type = type;
            run->n_in = p->n_in;
            n_runs++;
        }
        run->n_out += p->n_out;
        if (p->n_in > INT32_MAX / 4 || run->n_out > INT32_MAX || p->row_size > UPLOAD_CHUNK_BYTES)
            return er_fail(ER_ERR_UNSUPPORTED, "%s: tensor '%s' is too large for the CUDA kernels", cm->m->path, names[i]);
        /* the run's memory, once its last part is known */
        const int last = i + 1 == n_parts || cuda_wtype_from_er(parts[i + 1]->type) != type;
        const size_t rb = cuda_row_bytes(type, p->n_in), sb = cuda_scale_row_bytes(type, p->n_in);
        if (last) {
            /* + 16 bytes: the matvec kernels copy whole aligned 16-byte units around a slice */
            run->w = cuda_arena_take(cm->arena, &cm->arena_used, (size_t)run->n_out * rb + 16);
            if (sb)
                run->d = cuda_arena_take(cm->arena, &cm->arena_used, (size_t)run->n_out * sb + 16);
            if (cm->arena)
                cm->weight_bytes += cuda_matrix_bytes(type, run->n_out, run->n_in);
        }
    }
    if (!cm->arena)
        return ER_OK; /* sizing pass */
    /* the data, part by part into its run */
    run = out;
    int64_t row0 = 0; /* of parts[i] in its run */
    for (int i = 0; i < n_parts; i++) {
        const er_weight *p = parts[i];
        if (i > 0 && cuda_wtype_from_er(p->type) != run->type) {
            run = (cuda_weight *)run->next;
            row0 = 0;
        }
        const int type = run->type;
        const size_t rb = cuda_row_bytes(type, p->n_in), sb = cuda_scale_row_bytes(type, p->n_in);
        /* a chunk of rows at a time, each released once copied (a cudaMemcpy from pageable
         * memory returns once it has read its source), so that the file's weights are never
         * all resident on the host at once */
        const int64_t chunk = (int64_t)(UPLOAD_CHUNK_BYTES / p->row_size); /* >= 1: checked above */
        for (int64_t r = 0; r < p->n_out; r += chunk) {
            const int64_t rows = p->n_out - r < chunk ? p->n_out - r : chunk;
            const uint8_t *src = p->data + (size_t)r * p->row_size;
            uint8_t *qs = (uint8_t *)run->w + (size_t)(row0 + r) * rb;
            if (!cuda_wtype_repack_bytes(type)) { /* the file's rows are the device's */
                CUDA_TRY(cudaMemcpy(qs, src, (size_t)rows * p->row_size, cudaMemcpyHostToDevice));
            } else {
                uint8_t *d = sb ? (uint8_t *)run->d + (size_t)(row0 + r) * sb : NULL;
                CUDA_TRY(cudaMemcpy(staging, src, (size_t)rows * p->row_size, cudaMemcpyHostToDevice));
                CUDA_TRY(cuda_repack(type, staging, rows, p->n_in, qs, d, 0));
            }
            if (cm->m->release)
                cm->m->release(cm->m->release_owner, src, (size_t)rows * p->row_size);
        }
        row0 += p->n_out;
    }
    CUDA_TRY(cudaDeviceSynchronize());
    return ER_OK;
fail:
    return st;
}

void cuda_model_free(void *dev) {
    cuda_model *cm = dev;
    if (!cm)
        return;
    cudaFree(cm->arena);
    free(cm->layers);
    free(cm);
}

size_t cuda_model_bytes(const void *dev) { return dev ? ((const cuda_model *)dev)->weight_bytes : 0; }

/* Parts of one stacked matrix (see upload_matrix) named "blk.<il>.<suffix>", or
 * "<suffix>" when il < 0. */
static er_status upload_named(cuda_model *cm, int64_t il, int n_parts, const er_weight *const *parts,
                              const char *const *suffixes, cuda_weight *out, cuda_weight *more, void *staging) {
    char names[3][96];
    const char *nm[3] = {names[0], names[1], names[2]};
    for (int i = 0; i < n_parts && i < 3; i++) {
        if (il < 0)
            snprintf(names[i], sizeof names[i], "%s", suffixes[i]);
        else
            snprintf(names[i], sizeof names[i], "blk.%lld.%s", (long long)il, suffixes[i]);
    }
    return upload_matrix(cm, parts, nm, n_parts, out, more, staging);
}

/* Every weight into the arena (or, with no arena yet, only its size: see cuda_arena_take). */
static er_status upload_all(cuda_model *cm, void *staging) {
    static const char *const qkv_names[] = {"attn_q.weight", "attn_k.weight", "attn_v.weight"};
    static const char *const gate_up_names[] = {"ffn_gate.weight", "ffn_up.weight"};
    static const char *const wo_name[] = {"attn_output.weight"}, *const down_name[] = {"ffn_down.weight"};
    static const char *const embd_name[] = {"token_embd.weight"}, *const output_name[] = {"output.weight"};
    er_status st = ER_OK;
    const model_view *m = cm->m;
    const model_config *c = &m->config;
    const er_weight *embd[] = {&m->token_embd}, *output[] = {&m->output};
    if ((st = upload_named(cm, -1, 1, embd, embd_name, &cm->token_embd, NULL, staging)) != ER_OK)
        return st;
    if (c->features & ER_FEAT_TIED_OUTPUT)
        cm->output = cm->token_embd;
    else if ((st = upload_named(cm, -1, 1, output, output_name, &cm->output, NULL, staging)) != ER_OK)
        return st;
    if ((st = upload_vector(cm, m->output_norm, c->n_embd, &cm->output_norm)) != ER_OK)
        return st;
    for (int64_t il = 0; il < c->n_layer; il++) {
        const layer_weights *lw = &m->layers[il];
        cuda_layer *l = &cm->layers[il];
        const er_weight *qkv[] = {&lw->wq, &lw->wk, &lw->wv}, *gate_up[] = {&lw->w_gate, &lw->w_up};
        const er_weight *wo[] = {&lw->wo}, *down[] = {&lw->w_down};
        /* the biases stacked as wq|wk|wv are: one vector beside qkv's rows */
        const float *bias[] = {lw->bq, lw->bk, lw->bv};
        const int64_t bias_n[] = {c->n_head * c->head_dim, c->n_head_kv * c->head_dim, c->n_head_kv * c->head_dim_v};
        if ((st = upload_named(cm, il, 3, qkv, qkv_names, &l->qkv, l->qkv_more, staging)) != ER_OK ||
            (st = upload_named(cm, il, 1, wo, wo_name, &l->wo, NULL, staging)) != ER_OK ||
            (st = upload_named(cm, il, 2, gate_up, gate_up_names, &l->gate_up, NULL, staging)) != ER_OK ||
            (st = upload_named(cm, il, 1, down, down_name, &l->down, NULL, staging)) != ER_OK ||
            (st = upload_vector(cm, lw->attn_norm, c->n_embd, &l->attn_norm)) != ER_OK ||
            (st = upload_vector(cm, lw->ffn_norm, c->n_embd, &l->ffn_norm)) != ER_OK ||
            (st = upload_vector(cm, lw->q_norm, c->head_dim, &l->q_norm)) != ER_OK ||
            (st = upload_vector(cm, lw->k_norm, c->head_dim, &l->k_norm)) != ER_OK ||
            (st = upload_vectors(cm, 3, bias, bias_n, &l->qkv_bias)) != ER_OK ||
            (st = upload_vector(cm, lw->post_attn_norm, c->n_embd, &l->post_attn_norm)) != ER_OK ||
            (st = upload_vector(cm, lw->post_ffn_norm, c->n_embd, &l->post_ffn_norm)) != ER_OK)
            return st;
    }
    return ER_OK;
}

er_status cuda_model_upload(const model_view *m, void **out) {
    er_status st = ER_OK;
    const model_config *c = &m->config;
    void *staging = NULL;
    *out = NULL;
    if (c->head_dim_v != c->head_dim || c->head_dim > 256)
        return er_fail(ER_ERR_UNSUPPORTED, "%s: the CUDA backend needs head_dim == head_dim_v <= 256 (got %lld, %lld)",
                       m->path, (long long)c->head_dim, (long long)c->head_dim_v);
    cuda_model *cm = calloc(1, sizeof *cm);
    if (!cm)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", m->path);
    cm->m = m;
    cm->layers = calloc((size_t)c->n_layer, sizeof *cm->layers);
    if (!cm->layers) {
        st = er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", m->path);
        goto fail;
    }
    if ((st = cuda_alloc(&staging, UPLOAD_CHUNK_BYTES, "the upload staging buffer")) != ER_OK)
        goto fail;
    if ((st = upload_all(cm, staging)) != ER_OK ||
        (st = cuda_alloc((void **)&cm->arena, cm->arena_used, "the weights")) != ER_OK)
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
