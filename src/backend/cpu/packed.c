/*
 * packed.c - the fast path's packed copy of a model's weights (packed.h): the packing,
 * and one copy per model shared by its fast contexts (a server's, a bench's alone and
 * batched ones), counted by reference under a lock.
 */
#define _DEFAULT_SOURCE /* madvise */

#include "backend/cpu/packed.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/status.h"
#include "quant/types.h"

/* Row r of a block_q4_Kx8 (packed.h) from the fields of a Q4_K or Q5_K block */
static void pack_k4_row(int r, uint16_t d, uint16_t dmin, const uint8_t *scales, const uint8_t *qs,
                        block_q4_Kx8 *out) {
    out->d[r] = d;
    out->dmin[r] = dmin;
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++)
        get_scale_min_k4(j, scales, &sc[j], &m[j]);
    for (int j = 0; j < 8; j++)
        out->scl[j][r] = (uint8_t)((sc[j] & 0xF) | (m[j] & 0xF) << 4);
    for (int p = 0; p < 4; p++)
        out->sch[p][r] = (uint8_t)(sc[2 * p] >> 4 | (m[2 * p] >> 4) << 2 | (sc[2 * p + 1] >> 4) << 4 |
                                   (m[2 * p + 1] >> 4) << 6);
    for (int p = 0; p < 4; p++)
        for (int c = 0; c < 8; c++)
            memcpy(out->qs[p][c][r], qs + 32 * p + 4 * c, 4);
}

/* Block b of rows 8g .. 8g + 7 of Q4_K rows, as block_q4_Kx8 (packed.h) */
static void pack_q4_K(const uint8_t *src, size_t row_size, int64_t g, int64_t b, block_q4_Kx8 *out) {
    for (int r = 0; r < 8; r++) {
        const block_q4_K *in = (const block_q4_K *)(src + (size_t)(8 * g + r) * row_size) + b;
        pack_k4_row(r, in->d, in->dmin, in->scales, in->qs, out);
    }
}

/* Block b of rows 8g .. 8g + 7 of Q5_K rows, as block_q5_Kx8 (packed.h) */
static void pack_q5_K(const uint8_t *src, size_t row_size, int64_t g, int64_t b, block_q5_Kx8 *out) {
    for (int r = 0; r < 8; r++) {
        const block_q5_K *in = (const block_q5_K *)(src + (size_t)(8 * g + r) * row_size) + b;
        pack_k4_row(r, in->d, in->dmin, in->scales, in->qs, &out->q4);
        for (int c = 0; c < 8; c++)
            memcpy(out->qh[c][r], in->qh + 4 * c, 4);
    }
}

/* Block b of rows 8g .. 8g + 7 of Q2_K rows, as block_q2_Kx8 (packed.h) */
static void pack_q2_K(const uint8_t *src, size_t row_size, int64_t g, int64_t b, block_q2_Kx8 *out) {
    for (int r = 0; r < 8; r++) {
        const block_q2_K *in = (const block_q2_K *)(src + (size_t)(8 * g + r) * row_size) + b;
        out->d[r] = in->d;
        out->dmin[r] = in->dmin;
        for (int j = 0; j < 16; j++)
            out->sc[j][r] = in->scales[j];
        for (int c = 0; c < 8; c++)
            for (int h = 0; h < 2; h++)
                memcpy(out->qs[h][c][r], in->qs + 32 * h + 4 * c, 4);
    }
}

/* Block b of rows 8g .. 8g + 7 of Q3_K rows, as block_q3_Kx8 (packed.h) */
static void pack_q3_K(const uint8_t *src, size_t row_size, int64_t g, int64_t b, block_q3_Kx8 *out) {
    for (int r = 0; r < 8; r++) {
        const block_q3_K *in = (const block_q3_K *)(src + (size_t)(8 * g + r) * row_size) + b;
        out->d[r] = in->d;
        uint8_t sc[16];
        for (int j = 0; j < 16; j++)
            sc[j] = (uint8_t)q3_K_scale(in->scales, j);
        for (int k = 0; k < 8; k++)
            out->scl[k][r] = (uint8_t)((sc[2 * k] & 0xF) | (sc[2 * k + 1] & 0xF) << 4);
        for (int q = 0; q < 4; q++)
            out->sch[q][r] = (uint8_t)(sc[4 * q] >> 4 | (sc[4 * q + 1] >> 4) << 2 | (sc[4 * q + 2] >> 4) << 4 |
                                       (sc[4 * q + 3] >> 4) << 6);
        for (int c = 0; c < 8; c++) {
            for (int h = 0; h < 2; h++)
                memcpy(out->qs[h][c][r], in->qs + 32 * h + 4 * c, 4);
            memcpy(out->hm[c][r], in->hmask + 4 * c, 4);
        }
    }
}

/* Block b of rows 8g .. 8g + 7 of Q6_K rows, as block_q6_Kx8 (packed.h) */
static void pack_q6_K(const uint8_t *src, size_t row_size, int64_t g, int64_t b, block_q6_Kx8 *out) {
    for (int r = 0; r < 8; r++) {
        const block_q6_K *in = (const block_q6_K *)(src + (size_t)(8 * g + r) * row_size) + b;
        out->d[r] = in->d;
        for (int j = 0; j < 16; j++)
            out->sc[j][r] = in->scales[j];
        for (int h = 0; h < 2; h++)
            for (int c = 0; c < 8; c++) {
                for (int a = 0; a < 2; a++)
                    memcpy(out->ql[h][a][c][r], in->ql + 64 * h + 32 * a + 4 * c, 4);
                memcpy(out->qh[h][c][r], in->qh + 32 * h + 4 * c, 4);
            }
    }
}

void cpu_pack_rows(uint32_t type, const uint8_t *src, size_t row_size, int64_t n_out, int64_t n_in, uint8_t *dst) {
    if (type == ER_TYPE_Q2_K || type == ER_TYPE_Q3_K || type == ER_TYPE_Q4_K || type == ER_TYPE_Q5_K ||
        type == ER_TYPE_Q6_K) {
        const int64_t nb = n_in / QK_K;
        for (int64_t g = 0; g < n_out / 8; g++)
            for (int64_t b = 0; b < nb; b++) {
                if (type == ER_TYPE_Q2_K)
                    pack_q2_K(src, row_size, g, b, (block_q2_Kx8 *)dst + g * nb + b);
                else if (type == ER_TYPE_Q3_K)
                    pack_q3_K(src, row_size, g, b, (block_q3_Kx8 *)dst + g * nb + b);
                else if (type == ER_TYPE_Q4_K)
                    pack_q4_K(src, row_size, g, b, (block_q4_Kx8 *)dst + g * nb + b);
                else if (type == ER_TYPE_Q5_K)
                    pack_q5_K(src, row_size, g, b, (block_q5_Kx8 *)dst + g * nb + b);
                else
                    pack_q6_K(src, row_size, g, b, (block_q6_Kx8 *)dst + g * nb + b);
            }
        return;
    }
    const int64_t nb = n_in / QK8_0;
    _Static_assert(QK4_0 == QK8_0 && QK4_1 == QK8_0, "one block length");
    for (int64_t g = 0; g < n_out / 8; g++)
        for (int64_t b = 0; b < nb; b++)
            for (int r = 0; r < 8; r++) {
                const uint8_t *row = src + (size_t)(8 * g + r) * row_size;
                if (type == ER_TYPE_Q4_0) {
                    const block_q4_0 *in = (const block_q4_0 *)row + b;
                    block_q4_0x8 *out = (block_q4_0x8 *)dst + g * nb + b;
                    out->d[r] = in->d;
                    for (int c = 0; c < 4; c++)
                        memcpy(out->qs[c][r], in->qs + 4 * c, 4);
                } else if (type == ER_TYPE_Q4_1) {
                    const block_q4_1 *in = (const block_q4_1 *)row + b;
                    block_q4_1x8 *out = (block_q4_1x8 *)dst + g * nb + b;
                    out->d[r] = in->d;
                    out->m[r] = in->m;
                    for (int c = 0; c < 4; c++)
                        memcpy(out->qs[c][r], in->qs + 4 * c, 4);
                } else {
                    const block_q8_0 *in = (const block_q8_0 *)row + b;
                    block_q8_0x8 *out = (block_q8_0x8 *)dst + g * nb + b;
                    out->d[r] = in->d;
                    for (int c = 0; c < 8; c++)
                        memcpy(out->qs[c][r], in->qs + 4 * c, 4);
                }
            }
}

/* Q8_0 activations stored unsigned (x + 128, the top bit flipped): the operand vpdpbusd
 * takes unsigned (packed.h) */
static void quantize_row_q8_0u(const float *x, void *y, int64_t n) {
    cpu_kernels_get(ER_TYPE_Q8_0)->quantize_row(x, y, n);
    block_q8_0 *b = y;
    for (int64_t i = 0; i < n / QK8_0; i++)
        for (int j = 0; j < QK8_0; j++)
            b[i].qs[j] = (int8_t)((uint8_t)b[i].qs[j] ^ 0x80);
}

static const cpu_kernels packed_q8_0 = {"vnni packed", ER_TYPE_Q8_0, quantize_row_q8_0u, NULL};

const cpu_kernels *cpu_packed_kernels(uint32_t type) {
    /* Q4_0, Q4_1, Q2_K..Q6_K: their table's Q8_0, Q8_1, Q8_K activations, as they are */
    if (type == ER_TYPE_Q8_0)
        return &packed_q8_0;
    return type == ER_TYPE_Q4_0 || type == ER_TYPE_Q4_1 || type == ER_TYPE_Q2_K || type == ER_TYPE_Q3_K ||
                   type == ER_TYPE_Q4_K || type == ER_TYPE_Q5_K || type == ER_TYPE_Q6_K
               ? cpu_kernels_get(type)
               : NULL;
}

/* One model's packed copy. */
typedef struct packed_model {
    const model_view *src;  /* the model's own view (the key) */
    model_view view;        /* src's, its packable weights with .packed set */
    layer_weights *layers;  /* (n_layer) view.layers */
    uint8_t *bytes;         /* every packed weight one after another, each 64-byte aligned */
    int refs;
    struct packed_model *next;
} packed_model;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static packed_model *models; /* under lock */

cpu_gemm_fn cpu_gemm_packed(uint32_t type) {
    const cpu_gemm_fn vnni = cpu_gemm_packed_vnni(type);
    return vnni ? vnni : cpu_gemm_packed_avx2(type);
}

static int packable(const er_weight *w) { return cpu_gemm_packed(w->type) && w->n_out % 8 == 0 && w->data; }

static size_t packed_bytes(const er_weight *w) { return packable(w) ? ((size_t)w->n_out * w->row_size + 63) / 64 * 64 : 0; }

/* The weights of l that matmuls read (not the embedding table: the lookup reads rows). */
#define LAYER_MATS(l) {&(l)->wq, &(l)->wk, &(l)->wv, &(l)->wo, &(l)->w_gate, &(l)->w_up, &(l)->w_down}
enum { N_LAYER_MATS = 7 };

/* Packs w into *at (advanced past it) if it is packable; then m's pages of the file that
 * hold only w are dropped (model_view.release): the fast path reads only the copy, at
 * every token count; a reference context on the same model faults them back in. */
static void pack(const model_view *m, er_weight *w, uint8_t **at) {
    if (!packable(w))
        return;
    cpu_pack_rows(w->type, w->data, w->row_size, w->n_out, w->n_in, *at);
    w->packed = *at;
    *at += packed_bytes(w);
    if (m->release)
        m->release(m->release_owner, w->data, (size_t)w->n_out * w->row_size);
}

/* The packed copy is asked for in 2 MiB pages (transparent huge pages where the system
 * offers them on request, as Debian's default "madvise" does): a decode step streams all
 * of it, ~24,000 pages of 4 KiB for SmolLM2, more than the TLB holds. Measured (10 pairs,
 * bench --parallel 8 -npp 16 -ntg 128 -t 2, SmolLM2): median +2.2%; one sequence: 0%. */
enum { HUGE_PAGE = 2 << 20 };

static void packed_free(packed_model *p) {
    if (!p)
        return;
    free(p->layers);
    free(p->bytes);
    free(p);
}

/* A packed copy of m, or *out = NULL when nothing in it is packable. */
static er_status packed_create(const model_view *m, packed_model **out) {
    const int64_t n_layer = m->config.n_layer;
    size_t total = packed_bytes(&m->output);
    for (int64_t il = 0; il < n_layer; il++) {
        const er_weight *mats[N_LAYER_MATS] = LAYER_MATS(&m->layers[il]);
        for (int i = 0; i < N_LAYER_MATS; i++)
            total += packed_bytes(mats[i]);
    }
    *out = NULL;
    if (total == 0)
        return ER_OK;
    packed_model *p = calloc(1, sizeof *p);
    const size_t alloc = (total + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    if (!p || !(p->layers = malloc((size_t)n_layer * sizeof *p->layers)) ||
        !(p->bytes = aligned_alloc(HUGE_PAGE, alloc))) {
        packed_free(p);
        return er_fail(ER_ERR_NO_MEMORY, "%s: cannot allocate %.1f MiB for the CPU's packed weights", m->path,
                       (double)total / (1024.0 * 1024.0));
    }
#ifdef MADV_HUGEPAGE
    madvise(p->bytes, alloc, MADV_HUGEPAGE); /* a request: refused, the pages stay small */
#endif
    p->src = m;
    p->view = *m;
    p->view.layers = p->layers;
    memcpy(p->layers, m->layers, (size_t)n_layer * sizeof *p->layers);
    uint8_t *at = p->bytes;
    pack(m, &p->view.output, &at);
    for (int64_t il = 0; il < n_layer; il++) {
        er_weight *mats[N_LAYER_MATS] = LAYER_MATS(&p->layers[il]);
        for (int i = 0; i < N_LAYER_MATS; i++)
            pack(m, mats[i], &at);
    }
    p->refs = 1;
    *out = p;
    return ER_OK;
}

er_status cpu_packed_get(const model_view *m, const model_view **out) {
    const char *env = getenv("EDGERUNNER_CPU_PACK"); /* "0": the row-major kernels, to compare */
    *out = m;
    if (env && strcmp(env, "0") == 0)
        return ER_OK;
    er_status st = ER_OK;
    pthread_mutex_lock(&lock);
    packed_model *p = models;
    while (p && p->src != m)
        p = p->next;
    if (p) {
        p->refs++;
    } else if ((st = packed_create(m, &p)) == ER_OK && p) {
        p->next = models;
        models = p;
    }
    if (p)
        *out = &p->view;
    pthread_mutex_unlock(&lock);
    return st;
}

void cpu_packed_put(const model_view *view) {
    pthread_mutex_lock(&lock);
    packed_model **at = &models;
    while (*at && &(*at)->view != view)
        at = &(*at)->next;
    packed_model *p = *at;
    if (p && --p->refs == 0)
        *at = p->next;
    else
        p = NULL;
    pthread_mutex_unlock(&lock);
    packed_free(p);
}
