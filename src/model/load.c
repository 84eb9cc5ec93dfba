/*
 * load.c - er_model_load: GGUF metadata -> model_config, tensors -> weight views.
 *
 * Every hyperparameter comes from the metadata under the architecture's prefix
 * ("qwen3.block_count", ...), with llama.cpp's defaults where a key is optional, so that
 * every size of a family loads without code changes; what differs by architecture comes
 * from its row of the architecture table (arch.c), and the layer's tensors from that
 * table's tensor list. Every shape is checked here, once, so that no forward pass has to.
 */
#define _POSIX_C_SOURCE 200809L

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "core/cpus.h"
#include "io/hf.h"
#include "model/model.h"
#include "quant/convert.h"

/* Sizes beyond these are refused: they keep every buffer size product far from
 * overflow and catch hostile metadata early. */
enum { MAX_DIM = 1 << 20, MAX_LAYERS = 4096, MAX_HEADS = 4096, MAX_VOCAB = 1 << 24 };

typedef struct loader {
    er_model *m;
    const char *path;
    const char *arch; /* metadata prefix */
} loader;

static er_status get_int(const loader *ld, const char *suffix, int required, int64_t def,
                         int64_t lo, int64_t hi, int64_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch, suffix);
    const gguf_kv *kv = gguf_find_kv(ld->m->file, key);
    if (!kv) {
        if (required)
            return er_fail(ER_ERR_FORMAT, "%s: missing metadata key '%s'", ld->path, key);
        *out = def;
        return ER_OK;
    }
    if (!gguf_value_as_int(&kv->value, out))
        return er_fail(ER_ERR_FORMAT, "%s: metadata key '%s' has type %s, expected an integer",
                       ld->path, key, gguf_type_name(kv->value.type));
    if (*out < lo || *out > hi)
        return er_fail(ER_ERR_FORMAT, "%s: metadata key '%s' is %lld, outside [%lld, %lld]",
                       ld->path, key, (long long)*out, (long long)lo, (long long)hi);
    return ER_OK;
}

static er_status get_float(const loader *ld, const char *suffix, double def, double *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch, suffix);
    const gguf_kv *kv = gguf_find_kv(ld->m->file, key);
    *out = def;
    if (kv && !gguf_value_as_float(&kv->value, out))
        return er_fail(ER_ERR_FORMAT, "%s: metadata key '%s' has type %s, expected a number",
                       ld->path, key, gguf_type_name(kv->value.type));
    if (!isfinite(*out))
        return er_fail(ER_ERR_FORMAT, "%s: metadata key '%s' is not finite", ld->path, key);
    return ER_OK;
}

static int32_t token_id_or_none(const gguf_file *f, const char *key, int64_t n_vocab) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    int64_t id;
    if (!kv || !gguf_value_as_int(&kv->value, &id) || id < 0 || id >= n_vocab)
        return -1;
    return (int32_t)id;
}

static er_status read_config(loader *ld) {
    er_model *m = ld->m;
    model_config *c = &m->view.config;
    er_status st;
    const gguf_kv *arch = gguf_find_kv(m->file, "general.architecture");
    if (!arch || arch->value.type != GGUF_TYPE_STRING)
        return er_fail(ER_ERR_FORMAT, "%s: missing string metadata key 'general.architecture'", ld->path);
    m->arch = arch_find(arch->value.str.data, arch->value.str.len);
    if (!m->arch) {
        char names[128];
        arch_names(names, sizeof names);
        return er_fail(ER_ERR_UNSUPPORTED, "%s: architecture '%.*s' is not supported (supported: %s)", ld->path,
                       (int)(arch->value.str.len > 64 ? 64 : arch->value.str.len), arch->value.str.data, names);
    }
    ld->arch = m->arch->name;
    double eps, base, scale = 1.0;
    if ((st = get_int(ld, "embedding_length", 1, 0, 1, MAX_DIM, &c->n_embd)) != ER_OK ||
        (st = get_int(ld, "block_count", 1, 0, 1, MAX_LAYERS, &c->n_layer)) != ER_OK ||
        (st = get_int(ld, "feed_forward_length", 1, 0, 1, MAX_DIM, &c->n_ff)) != ER_OK ||
        (st = get_int(ld, "context_length", 1, 0, 1, INT32_MAX, &c->n_ctx_train)) != ER_OK ||
        (st = get_int(ld, "attention.head_count", 1, 0, 1, MAX_HEADS, &c->n_head)) != ER_OK ||
        (st = get_int(ld, "attention.head_count_kv", 0, c->n_head, 1, c->n_head, &c->n_head_kv)) != ER_OK)
        return st;
    if (c->n_head % c->n_head_kv != 0)
        return er_fail(ER_ERR_FORMAT, "%s: %lld attention heads are not a multiple of %lld KV heads",
                       ld->path, (long long)c->n_head, (long long)c->n_head_kv);
    const int64_t default_head_dim = c->n_embd % c->n_head == 0 ? c->n_embd / c->n_head : 0;
    if ((st = get_int(ld, "attention.key_length", default_head_dim == 0, default_head_dim, 1, MAX_DIM / 4, &c->head_dim)) != ER_OK ||
        (st = get_int(ld, "attention.value_length", 0, c->head_dim, 1, MAX_DIM / 4, &c->head_dim_v)) != ER_OK ||
        (st = get_int(ld, "rope.dimension_count", 0, c->head_dim, 2, c->head_dim, &c->n_rot)) != ER_OK)
        return st;
    if (c->n_rot > 1024)
        return er_fail(ER_ERR_UNSUPPORTED, "%s: %lld rotated dimensions per head; at most 1024 are supported", ld->path, (long long)c->n_rot);
    if (c->n_rot % 2 != 0)
        return er_fail(ER_ERR_FORMAT, "%s: %s.rope.dimension_count is odd (%lld)", ld->path, ld->arch, (long long)c->n_rot);
    if (c->n_head * c->head_dim > MAX_DIM || c->n_head * c->head_dim_v > MAX_DIM)
        return er_fail(ER_ERR_FORMAT, "%s: attention width %lld x %lld is too large", ld->path,
                       (long long)c->n_head, (long long)c->head_dim);
    if ((st = get_float(ld, "attention.layer_norm_rms_epsilon", 1e-5, &eps)) != ER_OK ||
        (st = get_float(ld, "rope.freq_base", 10000.0, &base)) != ER_OK)
        return st;
    /* the forward pass uses them as floats: a base that overflows or vanishes there rotates
     * nothing, an epsilon of 1e300 zeroes every activation (greedy printed "0 0 0 ...") */
    if (!(eps >= 0 && eps < 1))
        return er_fail(ER_ERR_FORMAT, "%s: %s.attention.layer_norm_rms_epsilon is %g, outside [0, 1)", ld->path,
                       ld->arch, eps);
    if (!(base > 0 && base <= FLT_MAX && (float)base > 0))
        return er_fail(ER_ERR_FORMAT, "%s: %s.rope.freq_base is %g, not a positive float", ld->path, ld->arch, base);

    /* RoPE scaling: none, linear (positions divided by the factor) or longrope (Phi-3:
     * per-dimension divisors, the rope_factors_long/short tensors bound below, and cos and
     * sin multiplied by rope.scaling.attn_factor). Llama 3's scaling needs no type: its
     * divisors are the rope_freqs tensor. */
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", ld->arch);
    const gguf_kv *scaling = gguf_find_kv(m->file, key);
    if (scaling && scaling->value.type == GGUF_TYPE_STRING && !gguf_string_eq(scaling->value.str, "none") &&
        !gguf_string_eq(scaling->value.str, "longrope")) {
        if (!gguf_string_eq(scaling->value.str, "linear"))
            return er_fail(ER_ERR_UNSUPPORTED, "%s: RoPE scaling '%.*s' is not supported (none, linear, longrope are)",
                           ld->path, (int)(scaling->value.str.len > 32 ? 32 : scaling->value.str.len), scaling->value.str.data);
        if ((st = get_float(ld, "rope.scaling.factor", 1.0, &scale)) != ER_OK)
            return st;
    } else if ((st = get_float(ld, "rope.scale_linear", 1.0, &scale)) != ER_OK) {
        return st;
    }
    double attn_factor;
    if ((st = get_float(ld, "rope.scaling.attn_factor", 1.0, &attn_factor)) != ER_OK ||
        (st = get_int(ld, "rope.scaling.original_context_length", 0, c->n_ctx_train, 1, INT32_MAX, &c->n_ctx_orig)) !=
            ER_OK)
        return st;
    if (!(attn_factor > 0 && attn_factor <= 1e3))
        return er_fail(ER_ERR_FORMAT, "%s: %s.rope.scaling.attn_factor is %g, outside (0, 1000]", ld->path, ld->arch,
                       attn_factor);
    if (scale <= 0)
        return er_fail(ER_ERR_FORMAT, "%s: RoPE scaling factor %g is not positive", ld->path, scale);
    if (!(1.0 / scale <= FLT_MAX && (float)(1.0 / scale) > 0)) /* 1e-300: infinite angles, NaN logits */
        return er_fail(ER_ERR_FORMAT, "%s: RoPE scaling factor %g: its inverse, the position scale, is not a "
                       "positive float", ld->path, scale);

    c->norm_eps = (float)eps;
    c->rope_base = (float)base;
    c->rope_pos_scale = (float)(1.0 / scale);
    c->rope_attn_factor = (float)attn_factor;
    c->rope_neox = m->arch->rope_neox;
    c->features = m->arch->features;
    if (c->features & ER_FEAT_EMBD_SCALE)
        c->embd_scale = sqrtf((float)c->n_embd);
    /* Gemma-3 needs its window; elsewhere a window in the file (Mistral, Phi-3) slides every
     * layer, and 0 means none (Phi-4's converter writes 0) */
    const int swa_required = (c->features & ER_FEAT_SLIDING_WINDOW) != 0;
    if ((st = get_int(ld, "attention.sliding_window", swa_required, 0, swa_required, INT32_MAX, &c->n_swa)) != ER_OK)
        return st;
    if (c->n_swa > 0) {
        /* Gemma-3's sliding layers have their own base and no linear scaling (llama.cpp:
         * rope_freq_scale_train_swa = 1; transformers scales only the global layers); where
         * every layer slides, the model's own RoPE applies */
        c->features |= ER_FEAT_SLIDING_WINDOW;
        c->rope_base_swa = m->arch->swa_period > 0 ? m->arch->rope_base_swa : c->rope_base;
        c->rope_pos_scale_swa = m->arch->swa_period > 0 ? 1.0f : c->rope_pos_scale;
    }
    return m->arch->check ? m->arch->check(c, ld->path) : ER_OK;
}

static const gguf_tensor *find_tensor(const loader *ld, const char *name, int optional, er_status *st) {
    const gguf_tensor *t = gguf_find_tensor(ld->m->file, name);
    *st = ER_OK;
    if (!t && !optional)
        *st = er_fail(ER_ERR_FORMAT, "%s: tensor '%s' not found", ld->path, name);
    return t;
}

static er_status bind_weight(loader *ld, const char *name, int64_t n_in, int64_t n_out, int optional,
                             er_weight *out) {
    er_status st;
    const gguf_tensor *t = find_tensor(ld, name, optional, &st);
    memset(out, 0, sizeof *out);
    if (!t)
        return st;
    if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != 1 || t->ne[3] != 1)
        return er_fail(ER_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                       ld->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)n_in, (long long)n_out);
    const er_type_traits *traits = er_type_get(t->type);
    if (!traits->dot_f32)
        return er_fail(ER_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which this build cannot compute with (supported weight types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K)",
                       ld->path, name, traits->name);
    /* kernels load blocks and floats directly: the data must be 4-byte aligned, which any
     * GGUF with the usual alignment (32) gives */
    if ((uintptr_t)t->data % 4 != 0)
        return er_fail(ER_ERR_UNSUPPORTED, "%s: tensor '%s' data at file offset %llu is not 4-byte aligned",
                       ld->path, name, (unsigned long long)(t->data - ld->m->file->base));
    out->data = t->data;
    out->type = t->type;
    out->traits = traits;
    out->n_in = n_in;
    out->n_out = n_out;
    out->row_size = er_type_row_size(traits, n_in);
    return ER_OK;
}

/* Copies a 1-D tensor of n elements to F32 at *arena and advances it. */
static er_status bind_vector(loader *ld, const char *name, int64_t n, int optional, float **arena,
                             const float **out) {
    er_status st;
    const gguf_tensor *t = find_tensor(ld, name, optional, &st);
    *out = NULL;
    if (!t)
        return st;
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
        return er_fail(ER_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld]",
                       ld->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)n);
    const er_type_traits *traits = er_type_get(t->type);
    if (!traits->to_f32)
        return er_fail(ER_ERR_UNSUPPORTED, "%s: tensor '%s' has unsupported type %s", ld->path, name, traits->name);
    traits->to_f32(t->data, *arena, n);
    /* cheap here, where every 1-D tensor is converted anyway (the matrices are too large
     * to scan at load: a NaN there shows up as non-finite logits, which generation refuses) */
    for (int64_t i = 0; i < n; i++)
        if (!isfinite((*arena)[i]))
            return er_fail(ER_ERR_FORMAT, "%s: tensor '%s' element %lld is %g: not finite", ld->path, name, (long long)i,
                           (double)(*arena)[i]);
    *out = *arena;
    *arena += n;
    return ER_OK;
}

/* A matrix of the layer table (arch.h): one er_weight, or a fused tensor whose row ranges
 * become the consecutive er_weight fields from `field` on. */
static er_status bind_matrix(loader *ld, const char *name, const model_config *c, const layer_tensor *t, void *field) {
    er_weight *parts = field, fused;
    int64_t n_out = 0;
    int n_parts = 0;
    for (; n_parts < 3 && t->n_out[n_parts] != DIM_NONE; n_parts++)
        n_out += arch_dim_size(c, t->n_out[n_parts]);
    er_status st = bind_weight(ld, name, arch_dim_size(c, t->n_in), n_out, 0, n_parts == 1 ? parts : &fused);
    if (st != ER_OK || n_parts == 1)
        return st;
    for (int i = 0, row0 = 0; i < n_parts; i++) {
        parts[i] = fused;
        parts[i].n_out = arch_dim_size(c, t->n_out[i]);
        parts[i].data = fused.data + (size_t)row0 * fused.row_size;
        row0 += (int)parts[i].n_out;
    }
    return ER_OK;
}

/* An optional vector of n_rot / 2 RoPE divisors (the angles are divided by them), which
 * must be positive: rope_freqs (Llama 3), rope_factors_long/short (Phi-3's longrope). */
static er_status bind_divisors(loader *ld, const char *name, float **arena, const float **out) {
    const int64_t n = ld->m->view.config.n_rot / 2;
    er_status st = bind_vector(ld, name, n, 1, arena, out);
    for (int64_t i = 0; st == ER_OK && *out && i < n; i++)
        if (!((*out)[i] > 0))
            return er_fail(ER_ERR_FORMAT, "%s: tensor '%s' element %lld is %g: not positive", ld->path, name,
                           (long long)i, (double)(*out)[i]);
    return st;
}

static er_status bind_weights(loader *ld) {
    er_model *m = ld->m;
    model_view *v = &m->view;
    model_config *c = &v->config;
    er_status st;
    char name[96];

    const gguf_tensor *embd = find_tensor(ld, "token_embd.weight", 0, &st);
    if (!embd)
        return st;
    if (embd->ne[1] > MAX_VOCAB)
        return er_fail(ER_ERR_FORMAT, "%s: vocabulary of %lld tokens is too large", ld->path, (long long)embd->ne[1]);
    c->n_vocab = embd->ne[1];
    if ((st = bind_weight(ld, "token_embd.weight", c->n_embd, c->n_vocab, 0, &v->token_embd)) != ER_OK ||
        (st = bind_weight(ld, "output.weight", c->n_embd, c->n_vocab, 1, &v->output)) != ER_OK)
        return st;
    if (!v->output.data) {
        v->output = v->token_embd;
        c->features |= ER_FEAT_TIED_OUTPUT;
    }

    /* the F32 arena: output_norm, the three kinds of RoPE divisors, and every vector of
     * every layer */
    size_t n_floats = (size_t)c->n_embd + 3 * ((size_t)c->n_rot / 2);
    for (size_t i = 0; i < arch_n_layer_tensors; i++) {
        const layer_tensor *t = &arch_layer_tensors[i];
        if (!t->is_matrix && (t->feature & ~c->features) == 0)
            n_floats += (size_t)c->n_layer * (size_t)arch_dim_size(c, t->n_in);
    }
    v->layers = calloc((size_t)c->n_layer, sizeof *v->layers);
    m->f32_arena = malloc(n_floats * sizeof(float));
    if (!v->layers || !m->f32_arena)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory for %lld layers", ld->path, (long long)c->n_layer);
    float *arena = m->f32_arena;

    if ((st = bind_vector(ld, "output_norm.weight", c->n_embd, 0, &arena, &v->output_norm)) != ER_OK ||
        (st = bind_divisors(ld, "rope_freqs.weight", &arena, &m->rope_freqs)) != ER_OK ||
        (st = bind_divisors(ld, "rope_factors_long.weight", &arena, &m->rope_long)) != ER_OK ||
        (st = bind_divisors(ld, "rope_factors_short.weight", &arena, &m->rope_short)) != ER_OK)
        return st;
    for (int64_t il = 0; il < c->n_layer; il++) {
        layer_weights *l = &v->layers[il];
        for (size_t i = 0; i < arch_n_layer_tensors; i++) {
            const layer_tensor *t = &arch_layer_tensors[i];
            if ((t->feature & ~c->features) || (t->layout_on & ~m->arch->layout) || (t->layout_off & m->arch->layout))
                continue;
            snprintf(name, sizeof name, "blk.%lld.%s", (long long)il, t->name);
            void *field = (uint8_t *)l + t->offset;
            st = t->is_matrix ? bind_matrix(ld, name, c, t, field) : bind_vector(ld, name, arch_dim_size(c, t->n_in), 0, &arena, field);
            if (st != ER_OK)
                return st;
        }
        /* Gemma-3: the last layer of each period is global (llama.cpp: set_swa_pattern);
         * with no period, every layer slides where the model has a window */
        const int period = m->arch->swa_period;
        l->swa = (c->features & ER_FEAT_SLIDING_WINDOW) && (period == 0 || il % period < period - 1);
    }
    return ER_OK;
}

er_model_params er_model_default_params(void) {
    er_model_params p = {ER_BACKEND_CPU, NULL};
    return p;
}

/* Bytes of tensor t in type `type`. */
static size_t converted_size(const gguf_tensor *t, uint32_t type) {
    return er_type_row_size(er_type_get(type), t->ne[0]) * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

/* er_model_params.type: the weights converted as `edgerunner quantize` converts them (the
 * same plan and rows, quant/convert.h), into one buffer the model owns; each tensor then
 * points into it and the pages of the file or folder it came from are dropped, so that the
 * weights are not held twice. */
static er_status quantize_weights(er_model *m, const char *type) {
    enum { ALIGN = 32 };
    gguf_file *f = m->file;
    const quant_mix *mix = quant_mix_find(type);
    if (!mix)
        return er_fail(ER_ERR_INVALID_ARG, "%s: unknown type '%.40s' (types: %s)", m->path, type, quant_mix_names());
    uint32_t *types = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *types); /* (n_tensors) */
    if (!types)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", m->path);
    er_status st = quant_plan(f, mix, 0, m->path, types, NULL);
    size_t total = 0;
    for (uint64_t i = 0; st == ER_OK && i < f->n_tensors; i++)
        if (types[i] != f->tensors[i].type)
            total += (converted_size(&f->tensors[i], types[i]) + ALIGN - 1) / ALIGN * ALIGN;
    if (st == ER_OK && total && !(m->quant_arena = malloc(total)))
        st = er_fail(ER_ERR_NO_MEMORY, "%s: out of memory for %zu bytes of %s weights", m->path, total, mix->name);
    uint8_t *next = m->quant_arena;
    const int n_threads = (int)er_usable_cpus();
    for (uint64_t i = 0; st == ER_OK && i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (types[i] == t->type)
            continue;
        if (!quant_convert_rows(er_type_get(t->type), er_type_get(types[i]), t->data, next, t->ne[0],
                                t->ne[1] * t->ne[2] * t->ne[3], n_threads)) {
            st = er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", m->path);
            break;
        }
        gguf_drop_range(f, t->data, t->size);
        t->data = next;
        t->size = converted_size(t, types[i]);
        t->type = types[i];
        next += (t->size + ALIGN - 1) / ALIGN * ALIGN;
    }
    free(types);
    return st;
}

er_status model_check_backend(const er_model *m, const backend_ops *ops) {
    const unsigned missing = m->view.config.features & ~ops->features;
    for (unsigned bit = 1; missing && bit < 1u << ER_FEAT_COUNT; bit <<= 1)
        if (missing & bit)
            return er_fail(ER_ERR_UNSUPPORTED, "%s: this %s model needs %s, which the %s backend does not implement yet "
                           "(use --backend cpu)", m->path, m->arch->name, er_feature_name(bit), ops->name);
    return ER_OK;
}

/* model_view.release: the pages of the file (or folder) that hold only [p, p + n) */
static void release_pages(void *file, const uint8_t *p, size_t n) { gguf_drop_range(file, p, n); }

/* Moves the weights to the device of a backend that keeps its own copy, which releases
 * each chunk of them as it is uploaded (model_view.release); the rest of the file's pages
 * are then dropped from memory (they stay mapped: metadata and vocabulary strings still
 * point into the file). Nothing on the host reads the weights after that: the device
 * embeds the tokens itself, and every 1-D tensor (norms, biases, RoPE divisors) was copied
 * to f32_arena at load. */
static er_status place_weights(er_model *m) {
    const backend_ops *ops = backend_get(m->backend == ER_BACKEND_CUDA ? BACKEND_CUDA : BACKEND_CPU);
    er_status st;
    if (!ops)
        return er_fail(ER_ERR_UNSUPPORTED, "%s: this build of EdgeRunner has no CUDA backend (built without nvcc, or with CUDA=0)", m->path);
    if (!ops->model_upload)
        return ER_OK;
    if (!ops->available())
        return er_fail(ER_ERR_DEVICE, "%s: no CUDA device is available", m->path);
    if ((st = model_check_backend(m, ops)) != ER_OK || (st = ops->model_upload(&m->view, &m->dev)) != ER_OK)
        return st;
    m->device = ops;
    gguf_drop_pages(m->file);
    return ER_OK;
}

/* One token per embedding row, as llama.cpp asks: it sizes token_embd and output by the
 * vocabulary (n_vocab = vocab.n_tokens()) and refuses any other shape ("tensor
 * 'token_embd.weight' has wrong shape"), fewer tokens than rows included; its converter
 * pads a vocabulary to the rows with [PAD<id>] tokens. More tokens than rows would be
 * ids that cannot be embedded; fewer, rows the model can generate but no text stands for.
 * A tokenizer we do not know (VOCAB_NONE) has no tokens to compare: ids only. */
static er_status check_vocab_size(const er_model *m) {
    const int64_t n_tokens = m->vocab.n_tokens, n_rows = m->view.config.n_vocab;
    if (m->vocab.kind == VOCAB_NONE || n_tokens == n_rows)
        return ER_OK;
    return er_fail(ER_ERR_FORMAT, "%s: the vocabulary has %lld tokens but token_embd.weight has %lld rows (%s); "
                   "they must be equal", m->path, (long long)n_tokens, (long long)n_rows,
                   n_tokens > n_rows ? "ids without an embedding" : "rows without a token");
}

er_status er_model_load(const char *path, const er_model_params *params, er_model **out) {
    er_status st;
    const er_model_params p = params ? *params : er_model_default_params();
    if (!path || !out)
        return er_fail(ER_ERR_INVALID_ARG, "er_model_load: NULL %s", path ? "out" : "path");
    *out = NULL;
    er_model *m = calloc(1, sizeof *m);
    if (!m)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", path);
    loader ld = {m, path, NULL};
    if (p.backend != ER_BACKEND_CPU && p.backend != ER_BACKEND_CUDA) {
        st = er_fail(ER_ERR_INVALID_ARG, "er_model_load: unknown backend %d", (int)p.backend);
        goto fail;
    }
    m->backend = p.backend;
    m->path = strdup(path);
    if (!m->path) {
        st = er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", path);
        goto fail;
    }
    if ((st = hf_open_any(path, 0, &m->file)) != ER_OK || (p.type && (st = quantize_weights(m, p.type)) != ER_OK) ||
        (st = read_config(&ld)) != ER_OK ||
        (st = bind_weights(&ld)) != ER_OK || (st = vocab_load(m->file, path, &m->vocab)) != ER_OK ||
        (st = check_vocab_size(m)) != ER_OK)
        goto fail;
    m->view.path = m->path;
    m->view.release = release_pages;
    m->view.release_owner = m->file;
    m->view.config.bos = token_id_or_none(m->file, "tokenizer.ggml.bos_token_id", m->view.config.n_vocab);
    m->view.config.eos = token_id_or_none(m->file, "tokenizer.ggml.eos_token_id", m->view.config.n_vocab);
    if ((st = place_weights(m)) != ER_OK)
        goto fail;
    *out = m;
    return ER_OK;
fail:
    er_model_free(m);
    return st;
}

void er_model_free(er_model *m) {
    if (!m)
        return;
    if (m->device)
        m->device->model_free(m->dev);
    vocab_free(&m->vocab);
    gguf_close(m->file);
    free(m->view.layers);
    free(m->f32_arena);
    free(m->quant_arena);
    free(m->path);
    free(m);
}

int64_t er_model_n_vocab(const er_model *m) { return m ? m->view.config.n_vocab : 0; }
int64_t er_model_n_ctx_train(const er_model *m) { return m ? m->view.config.n_ctx_train : 0; }
int32_t er_model_bos(const er_model *m) { return m ? m->view.config.bos : -1; }
int32_t er_model_eos(const er_model *m) { return m ? m->view.config.eos : -1; }
const char *er_model_arch(const er_model *m) { return m && m->arch ? m->arch->name : ""; }

const er_vocab *er_model_vocab(const er_model *m) { return m && m->vocab.kind != VOCAB_NONE ? &m->vocab : NULL; }

int64_t er_token_to_piece(const er_model *m, int32_t id, char *buf, int64_t cap) {
    if (!m || cap < 0 || (!buf && cap > 0))
        return -1;
    return vocab_token_to_piece(&m->vocab, id, buf, cap);
}

void model_describe(const er_model *m, char *buf, size_t cap) {
    const model_config *c = &m->view.config;
    size_t len = (size_t)snprintf(buf, cap, "architecture %s: %lld layers, %lld heads (%lld KV) of %lld, "
                                  "embedding %lld, feed-forward %lld, vocabulary %lld",
                                  m->arch->name, (long long)c->n_layer, (long long)c->n_head, (long long)c->n_head_kv,
                                  (long long)c->head_dim, (long long)c->n_embd, (long long)c->n_ff, (long long)c->n_vocab);
    for (unsigned bit = 1; bit < 1u << ER_FEAT_COUNT && len < cap; bit <<= 1) {
        if (c->features & bit)
            len += (size_t)snprintf(buf + len, cap - len, "; %s", er_feature_name(bit));
        if (c->features & bit & ER_FEAT_SLIDING_WINDOW && len < cap)
            len += (size_t)snprintf(buf + len, cap - len, " (window %lld, %s)", (long long)c->n_swa,
                                    m->arch->swa_period > 0 ? "some layers global" : "every layer");
    }
    if (m->arch->layout & ARCH_FUSED_QKV && len < cap)
        len += (size_t)snprintf(buf + len, cap - len, "; fused Q/K/V");
    if (m->arch->layout & ARCH_FUSED_GATE_UP && len < cap)
        len += (size_t)snprintf(buf + len, cap - len, "; fused gate/up");
    if (len < cap)
        len += (size_t)snprintf(buf + len, cap - len, "; RoPE %s pairs over %lld of %lld dimensions, base %g",
                                c->rope_neox ? "NeoX" : "Llama", (long long)c->n_rot, (long long)c->head_dim,
                                (double)c->rope_base);
    if (c->rope_pos_scale != 1.0f && len < cap)
        len += (size_t)snprintf(buf + len, cap - len, ", linear scaling x%g", 1.0 / (double)c->rope_pos_scale);
    if (m->rope_freqs && len < cap)
        len += (size_t)snprintf(buf + len, cap - len, ", frequency factors (Llama 3)");
    if ((m->rope_long || m->rope_short) && len < cap)
        len += (size_t)snprintf(buf + len, cap - len, ", longrope (original context %lld, attention factor %g)",
                                (long long)c->n_ctx_orig, (double)c->rope_attn_factor);
}
