/*
 * hf.c - a Hugging Face folder read as a GGUF file (see hf.h): the builder of the
 * in-memory gguf_file, config.json -> metadata, SafeTensors tensors -> GGUF tensors.
 * The tokenizer files are hf_tokenizer.c's.
 *
 * Both tables below follow llama.cpp's convert_hf_to_gguf.py (conversion/llama.py,
 * qwen.py, gemma.py) and its gguf-py tensor map for these four architectures.
 */
#define _POSIX_C_SOURCE 200809L

#include "io/hf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fp16.h"
#include "core/status.h"
#include "io/hf_build.h"
#include "io/mapfile.h"
#include "io/safetensors.h"
#include "quant/types.h"

enum { MAX_CONFIG_BYTES = 1 << 24, MAX_TOKENIZER_BYTES = 1 << 28, JSON_DEPTH = 32 };

/* ---- the file being built ------------------------------------------------------------- */

er_status hf_own(hf_build *b, void *p, void (*release)(void *)) {
    if (!p)
        return ER_OK;
    if (b->n_owned == b->cap_owned) {
        const size_t cap = b->cap_owned ? 2 * b->cap_owned : 16;
        hf_owned *grown = realloc(b->owned, cap * sizeof *grown);
        if (!grown) {
            release(p);
            return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", b->dir);
        }
        b->owned = grown;
        b->cap_owned = cap;
    }
    b->owned[b->n_owned++] = (hf_owned){p, release};
    return ER_OK;
}

er_status hf_alloc(hf_build *b, size_t size, void **out) {
    *out = malloc(size ? size : 1);
    if (!*out)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory for %zu bytes", b->dir, size);
    return hf_own(b, *out, free);
}

er_status hf_strdup(hf_build *b, const char *s, const char **out) {
    void *p;
    er_status st = hf_alloc(b, strlen(s) + 1, &p);
    if (st == ER_OK)
        memcpy(p, s, strlen(s) + 1);
    *out = p;
    return st;
}

er_status hf_kv(hf_build *b, const char *key, gguf_value value) {
    if (b->n_kv == b->cap_kv) {
        const size_t cap = b->cap_kv ? 2 * b->cap_kv : 32;
        gguf_kv *grown = realloc(b->kv, cap * sizeof *grown);
        if (!grown) {
            if (value.type == GGUF_TYPE_ARRAY)
                free(value.arr.strs);
            return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", b->dir);
        }
        b->kv = grown;
        b->cap_kv = cap;
    }
    b->kv[b->n_kv++] = (gguf_kv){{key, strlen(key)}, value};
    return ER_OK;
}

er_status hf_kv_u32(hf_build *b, const char *key, uint32_t v) {
    return hf_kv(b, key, (gguf_value){.type = GGUF_TYPE_UINT32, .u64 = v});
}
er_status hf_kv_f32(hf_build *b, const char *key, double v) {
    return hf_kv(b, key, (gguf_value){.type = GGUF_TYPE_FLOAT32, .f64 = (float)v});
}
er_status hf_kv_bool(hf_build *b, const char *key, int v) {
    return hf_kv(b, key, (gguf_value){.type = GGUF_TYPE_BOOL, .u64 = v != 0});
}
er_status hf_kv_str(hf_build *b, const char *key, const char *s, size_t len) {
    return hf_kv(b, key, (gguf_value){.type = GGUF_TYPE_STRING, .str = {s, len}});
}

static void release_doc(void *d) { json_doc_free(d); }
static void release_shard(void *f) { safetensors_close(f); }

/* DIR/name, at most `limit` bytes, into a malloc'd buffer with a NUL after its n bytes;
 * *text NULL (and ER_OK) when the file does not exist and `optional`. */
static er_status read_text(hf_build *b, const char *name, int optional, size_t limit, char **text, size_t *n) {
    er_status st = ER_OK;
    char path[4096];
    *text = NULL;
    *n = 0;
    snprintf(path, sizeof path, "%s/%s", b->dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (optional && errno == ENOENT)
            return ER_OK;
        return er_fail(ER_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size > limit) {
        st = er_fail(ER_ERR_IO, "%s: not a regular file of at most %zu bytes", path, limit);
        goto done;
    }
    const size_t len = (size_t)sb.st_size;
    if (!(*text = malloc(len + 1))) {
        st = er_fail(ER_ERR_NO_MEMORY, "%s: out of memory for %zu bytes", path, len);
        goto done;
    }
    if (fread(*text, 1, len, f) != len) {
        free(*text);
        *text = NULL;
        st = er_fail(ER_ERR_IO, "%s: short read", path);
        goto done;
    }
    (*text)[len] = '\0';
    *n = len;
done:
    fclose(f);
    return st;
}

er_status hf_read_json(hf_build *b, const char *name, int optional, const json_doc **out) {
    char path[4096], *text;
    size_t n;
    json_doc *doc = NULL;
    *out = NULL;
    er_status st = read_text(b, name, optional, strcmp(name, "tokenizer.json") ? MAX_CONFIG_BYTES : MAX_TOKENIZER_BYTES,
                             &text, &n);
    if (st != ER_OK || !text)
        return st;
    snprintf(path, sizeof path, "%s/%s", b->dir, name);
    if ((st = json_doc_parse(text, n, path, JSON_DEPTH, &doc)) == ER_OK && (st = hf_own(b, doc, release_doc)) == ER_OK)
        *out = doc;
    free(text);
    return st;
}

er_status hf_read_text(hf_build *b, const char *name, int optional, const char **out, size_t *n) {
    char *text;
    er_status st = read_text(b, name, optional, MAX_CONFIG_BYTES, &text, n);
    *out = text;
    return st == ER_OK ? hf_own(b, text, free) : st;
}

/* ---- config.json ---------------------------------------------------------------------- */

enum hf_arch_flags {
    HF_PERMUTE_QK = 1u << 0,   /* llama: Q/K rows to the interleaved RoPE pairing */
    HF_GEMMA = 1u << 1,        /* norms stored as w - 1; pre/post FFN norms; GELU */
    HF_QKV_BIAS = 1u << 2,     /* Q/K/V projections have biases */
};

typedef struct hf_arch {
    const char *hf_name; /* config.json architectures[0] */
    const char *arch;    /* general.architecture */
    unsigned flags;
} hf_arch;

static const hf_arch hf_archs[] = {
    {"LlamaForCausalLM", "llama", HF_PERMUTE_QK},
    {"Qwen2ForCausalLM", "qwen2", HF_QKV_BIAS},
    {"Qwen3ForCausalLM", "qwen3", 0},
    {"Gemma3ForCausalLM", "gemma3", HF_GEMMA},
};

/* The shape the tensors are checked and permuted by. */
typedef struct hf_shape {
    int64_t n_layer, n_head, n_head_kv, head_dim, n_embd;
} hf_shape;

typedef struct config_reader {
    hf_build *b;
    const json_doc *doc;
    const char *arch;
    char path[4096]; /* DIR/config.json, for messages */
} config_reader;

/* config[key] as an integer; absent or null: def, or an error when required. */
static er_status cfg_int(const config_reader *c, const json_node *obj, const char *key, int required, int64_t def,
                         int64_t lo, int64_t hi, int64_t *out) {
    const json_node *n = json_doc_get(c->doc, obj, key);
    *out = def;
    if (!n || n->kind == JSON_NULL) {
        if (required)
            return er_fail(ER_ERR_FORMAT, "%s: missing integer '%s'", c->path, key);
        return ER_OK;
    }
    if (n->kind != JSON_INT)
        return er_fail(ER_ERR_FORMAT, "%s: '%s' is not an integer", c->path, key);
    if (n->i < lo || n->i > hi)
        return er_fail(ER_ERR_FORMAT, "%s: '%s' is %lld, outside [%lld, %lld]", c->path, key, (long long)n->i,
                       (long long)lo, (long long)hi);
    *out = n->i;
    return ER_OK;
}

static er_status cfg_float(const config_reader *c, const json_node *obj, const char *key, double def, double *out) {
    const json_node *n = json_doc_get(c->doc, obj, key);
    *out = def;
    if (!n || n->kind == JSON_NULL)
        return ER_OK;
    if (n->kind != JSON_INT && n->kind != JSON_FLOAT)
        return er_fail(ER_ERR_FORMAT, "%s: '%s' is not a number", c->path, key);
    if (!isfinite(n->f))
        return er_fail(ER_ERR_FORMAT, "%s: '%s' is not finite", c->path, key);
    *out = n->f;
    return ER_OK;
}

/* A string member, or `def` when absent or null. */
static const char *cfg_str(const config_reader *c, const json_node *obj, const char *key, const char *def) {
    const json_node *n = json_doc_get(c->doc, obj, key);
    return n && n->kind == JSON_STRING ? json_doc_str(c->doc, n) : def;
}

static int cfg_true(const config_reader *c, const json_node *obj, const char *key) {
    const json_node *n = json_doc_get(c->doc, obj, key);
    return n && n->kind == JSON_BOOL && n->i;
}

/* "{arch}.suffix", owned by the file. */
static er_status arch_key(const config_reader *c, const char *suffix, const char **out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", c->arch, suffix);
    return hf_strdup(c->b, key, out);
}

static er_status put_u32(const config_reader *c, const char *suffix, int64_t v) {
    const char *key;
    er_status st = arch_key(c, suffix, &key);
    return st != ER_OK ? st : hf_kv_u32(c->b, key, (uint32_t)v);
}

static er_status put_f32(const config_reader *c, const char *suffix, double v) {
    const char *key;
    er_status st = arch_key(c, suffix, &key);
    return st != ER_OK ? st : hf_kv_f32(c->b, key, v);
}

/* The RoPE factors of Llama 3.1's scaling, as the converter computes them: the inverse
 * frequencies in float32 as torch does, the wavelength tests in double. */
static er_status llama3_rope_freqs(const config_reader *c, const json_node *rope, double base, int64_t head_dim,
                                   float **out) {
    double factor, low, high, old_ctx;
    er_status st;
    if ((st = cfg_float(c, rope, "factor", 8.0, &factor)) != ER_OK ||
        (st = cfg_float(c, rope, "low_freq_factor", 1.0, &low)) != ER_OK ||
        (st = cfg_float(c, rope, "high_freq_factor", 4.0, &high)) != ER_OK ||
        (st = cfg_float(c, rope, "original_max_position_embeddings", 8192.0, &old_ctx)) != ER_OK)
        return st;
    if (!(factor > 0) || !(high > low) || !(low > 0) || !(old_ctx > 0))
        return er_fail(ER_ERR_FORMAT, "%s: llama3 RoPE scaling needs factor > 0 and high_freq_factor > "
                       "low_freq_factor > 0", c->path);
    float *freqs; /* (head_dim / 2) */
    if ((st = hf_alloc(c->b, (size_t)(head_dim / 2) * sizeof *freqs, (void **)&freqs)) != ER_OK)
        return st;
    const double low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
    for (int64_t i = 0; i < head_dim / 2; i++) {
        const float inv_freq = 1.0f / powf((float)base, (float)(2 * i) / (float)head_dim);
        const double wavelen = 2 * 3.14159265358979323846 / (double)inv_freq;
        double f = 1.0;
        if (wavelen > low_wavelen) {
            f = factor;
        } else if (wavelen >= high_wavelen) {
            const double smooth = (old_ctx / wavelen - low) / (high - low);
            f = 1.0 / ((1.0 - smooth) / factor + smooth);
        }
        freqs[i] = (float)f;
    }
    *out = freqs;
    return ER_OK;
}

/* Gemma-3's layers: every sixth global (the arch table's period), the others sliding. */
static er_status check_gemma3_layers(const config_reader *c, const json_node *cfg, int64_t n_layer) {
    const json_node *types = json_doc_get(c->doc, cfg, "layer_types");
    int64_t period;
    er_status st;
    if (types && types->kind == JSON_ARRAY) {
        int64_t il = 0;
        for (const json_node *t = json_doc_first(c->doc, types); t; t = json_doc_next(c->doc, t), il++)
            if (json_doc_is(c->doc, t, il % 6 == 5 ? "sliding_attention" : "full_attention") ||
                (!json_doc_is(c->doc, t, "sliding_attention") && !json_doc_is(c->doc, t, "full_attention")))
                return er_fail(ER_ERR_UNSUPPORTED, "%s: layer_types[%lld] is '%.32s': only Gemma-3's pattern (five "
                               "sliding layers, then one full) is supported", c->path, (long long)il,
                               json_doc_str(c->doc, t));
        if (il != n_layer)
            return er_fail(ER_ERR_FORMAT, "%s: layer_types has %lld entries for %lld layers", c->path, (long long)il,
                           (long long)n_layer);
        return ER_OK;
    }
    if ((st = cfg_int(c, cfg, "sliding_window_pattern", 0, 6, 1, 1 << 20, &period)) != ER_OK)
        return st;
    if (period != 6)
        return er_fail(ER_ERR_UNSUPPORTED, "%s: sliding_window_pattern %lld: only 6 is supported", c->path,
                       (long long)period);
    return ER_OK;
}

/* RoPE: base, and linear or llama3 scaling, from rope_parameters (transformers 5) or
 * rope_theta + rope_scaling (earlier); for Gemma-3, of the global layers. */
static er_status read_rope(config_reader *c, const json_node *cfg, int gemma, int64_t head_dim, float **freqs) {
    const json_doc *d = c->doc;
    const json_node *rope = json_doc_get(d, cfg, "rope_parameters"), *swa = NULL;
    er_status st;
    if (!rope || rope->kind != JSON_OBJECT)
        rope = json_doc_get(d, cfg, "rope_scaling");
    if (gemma && json_doc_get(d, rope, "full_attention")) {
        swa = json_doc_get(d, rope, "sliding_attention");
        rope = json_doc_get(d, rope, "full_attention");
    }
    if (rope && rope->kind != JSON_OBJECT)
        rope = NULL;
    double base, base_swa;
    if ((st = cfg_float(c, cfg, "rope_theta", 10000.0, &base)) != ER_OK ||
        (st = cfg_float(c, rope, "rope_theta", base, &base)) != ER_OK ||
        (st = put_f32(c, "rope.freq_base", base)) != ER_OK)
        return st;
    if (gemma) {
        if ((st = cfg_float(c, cfg, "rope_local_base_freq", 10000.0, &base_swa)) != ER_OK ||
            (st = cfg_float(c, swa, "rope_theta", base_swa, &base_swa)) != ER_OK)
            return st;
        if (base_swa != 10000.0 || (swa && strcmp(cfg_str(c, swa, "rope_type", "default"), "default") != 0))
            return er_fail(ER_ERR_UNSUPPORTED, "%s: the sliding layers' RoPE must be unscaled with base 10000, as "
                           "in every Gemma-3", c->path);
        if ((st = put_f32(c, "rope.freq_base_swa", base_swa)) != ER_OK)
            return st;
    }
    const char *type = cfg_str(c, rope, "rope_type", cfg_str(c, rope, "type", "default"));
    *freqs = NULL;
    if (!strcmp(type, "default"))
        return ER_OK;
    if (!strcmp(type, "linear")) {
        double factor;
        const char *key;
        if ((st = cfg_float(c, rope, "factor", 1.0, &factor)) != ER_OK)
            return st;
        if (!(factor > 0))
            return er_fail(ER_ERR_FORMAT, "%s: linear RoPE scaling factor %g is not positive", c->path, factor);
        return (st = arch_key(c, "rope.scaling.type", &key)) != ER_OK ? st
               : (st = hf_kv_str(c->b, key, "linear", 6)) != ER_OK      ? st
                                                                         : put_f32(c, "rope.scaling.factor", factor);
    }
    if (!strcmp(type, "llama3") && !gemma)
        return llama3_rope_freqs(c, rope, base, head_dim, freqs);
    return er_fail(ER_ERR_UNSUPPORTED, "%s: RoPE scaling '%.32s' is not supported (default, linear%s are)", c->path,
                   type, gemma ? "" : ", llama3");
}

/* What the architecture cannot compute is refused here, not silently ignored. */
static er_status check_unsupported(const config_reader *c, const json_node *cfg, const hf_arch *a) {
    const char *act = cfg_str(c, cfg, a->flags & HF_GEMMA ? "hidden_activation" : "hidden_act",
                              a->flags & HF_GEMMA ? "gelu_pytorch_tanh" : "silu");
    if (strcmp(act, a->flags & HF_GEMMA ? "gelu_pytorch_tanh" : "silu") != 0)
        return er_fail(ER_ERR_UNSUPPORTED, "%s: activation '%.32s' is not supported for %s", c->path, act, a->hf_name);
    if (!(a->flags & HF_QKV_BIAS) && (cfg_true(c, cfg, "attention_bias") || cfg_true(c, cfg, "mlp_bias")))
        return er_fail(ER_ERR_UNSUPPORTED, "%s: attention_bias/mlp_bias are not supported for %s", c->path, a->hf_name);
    if (!(a->flags & HF_GEMMA) && cfg_true(c, cfg, "use_sliding_window"))
        return er_fail(ER_ERR_UNSUPPORTED, "%s: use_sliding_window is not supported for %s", c->path, a->hf_name);
    const json_node *cap1 = json_doc_get(c->doc, cfg, "attn_logit_softcapping"),
                    *cap2 = json_doc_get(c->doc, cfg, "final_logit_softcapping");
    if ((cap1 && cap1->kind != JSON_NULL) || (cap2 && cap2->kind != JSON_NULL))
        return er_fail(ER_ERR_UNSUPPORTED, "%s: logit soft-capping is not supported", c->path);
    return ER_OK;
}

/* config.json -> general.* and {arch}.* keys; the shape, and Llama 3's RoPE factors. */
static er_status read_config(hf_build *b, const hf_arch **arch_out, hf_shape *s, float **rope_freqs) {
    config_reader cr = {b, NULL, NULL, {0}};
    config_reader *c = &cr;
    er_status st;
    snprintf(c->path, sizeof c->path, "%s/config.json", b->dir);
    if ((st = hf_read_json(b, "config.json", 0, &c->doc)) != ER_OK)
        return st;
    const json_node *cfg = json_doc_root(c->doc);
    const json_node *archs = json_doc_get(c->doc, cfg, "architectures");
    const json_node *first = json_doc_first(c->doc, archs);
    if (!archs || archs->kind != JSON_ARRAY || !first || first->kind != JSON_STRING)
        return er_fail(ER_ERR_FORMAT, "%s: missing 'architectures' (an array of strings)", c->path);
    const hf_arch *a = NULL;
    for (size_t i = 0; i < sizeof hf_archs / sizeof hf_archs[0]; i++)
        if (json_doc_is(c->doc, first, hf_archs[i].hf_name))
            a = &hf_archs[i];
    if (!a)
        return er_fail(ER_ERR_UNSUPPORTED, "%s: architecture '%.64s' is not supported (LlamaForCausalLM, "
                       "Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM are)", c->path,
                       json_doc_str(c->doc, first));
    *arch_out = a;
    c->arch = a->arch;
    const int gemma = (a->flags & HF_GEMMA) != 0;
    int64_t n_ctx, n_ff, head_dim, n_vocab, window = 0, bos, eos;
    if ((st = check_unsupported(c, cfg, a)) != ER_OK ||
        (st = cfg_int(c, cfg, "hidden_size", 1, 0, 1, 1 << 20, &s->n_embd)) != ER_OK ||
        (st = cfg_int(c, cfg, "num_hidden_layers", 1, 0, 1, 4096, &s->n_layer)) != ER_OK ||
        (st = cfg_int(c, cfg, "intermediate_size", 1, 0, 1, 1 << 20, &n_ff)) != ER_OK ||
        (st = cfg_int(c, cfg, "max_position_embeddings", 1, 0, 1, INT32_MAX, &n_ctx)) != ER_OK ||
        (st = cfg_int(c, cfg, "num_attention_heads", 1, 0, 1, 4096, &s->n_head)) != ER_OK ||
        (st = cfg_int(c, cfg, "num_key_value_heads", 0, s->n_head, 1, s->n_head, &s->n_head_kv)) != ER_OK ||
        (st = cfg_int(c, cfg, "head_dim", 0, s->n_embd / s->n_head, 1, 1 << 18, &head_dim)) != ER_OK ||
        (st = cfg_int(c, cfg, "vocab_size", 1, 0, 1, 1 << 24, &n_vocab)) != ER_OK ||
        (st = cfg_int(c, cfg, "bos_token_id", 0, -1, -1, n_vocab - 1, &bos)) != ER_OK)
        return st;
    /* eos_token_id may be a list (Llama 3.1): the first is the one GGUF keeps */
    const json_node *eos_node = json_doc_get(c->doc, cfg, "eos_token_id");
    if (eos_node && eos_node->kind == JSON_ARRAY)
        eos_node = json_doc_first(c->doc, eos_node);
    eos = eos_node && eos_node->kind == JSON_INT && eos_node->i >= 0 && eos_node->i < n_vocab ? eos_node->i : -1;
    if (head_dim < 1 || head_dim % 2 != 0)
        return er_fail(ER_ERR_FORMAT, "%s: head_dim %lld is not a positive even number", c->path, (long long)head_dim);
    s->head_dim = head_dim;
    const json_node *head_dim_node = json_doc_get(c->doc, cfg, "head_dim");
    const int has_head_dim = head_dim_node && head_dim_node->kind == JSON_INT;
    b->n_vocab = n_vocab;
    b->bos_id = (int32_t)bos;
    b->eos_id = (int32_t)eos;
    double eps;
    const char *name = strrchr(b->dir, '/') && strrchr(b->dir, '/')[1] ? strrchr(b->dir, '/') + 1 : b->dir;
    if ((st = cfg_float(c, cfg, "rms_norm_eps", 1e-6, &eps)) != ER_OK ||
        (st = hf_kv_str(b, "general.architecture", a->arch, strlen(a->arch))) != ER_OK ||
        (st = hf_kv_str(b, "general.name", name, strlen(name))) != ER_OK ||
        (st = put_u32(c, "vocab_size", n_vocab)) != ER_OK || (st = put_u32(c, "context_length", n_ctx)) != ER_OK ||
        (st = put_u32(c, "embedding_length", s->n_embd)) != ER_OK ||
        (st = put_u32(c, "feed_forward_length", n_ff)) != ER_OK ||
        (st = put_u32(c, "block_count", s->n_layer)) != ER_OK ||
        (st = put_u32(c, "attention.head_count", s->n_head)) != ER_OK ||
        (st = put_u32(c, "attention.head_count_kv", s->n_head_kv)) != ER_OK ||
        /* as the converter: only a head_dim of the config's own (the loader's default is
         * hidden / heads, as llama.cpp's) */
        (has_head_dim && (st = put_u32(c, "attention.key_length", head_dim)) != ER_OK) ||
        (has_head_dim && (st = put_u32(c, "attention.value_length", head_dim)) != ER_OK) ||
        (st = put_f32(c, "attention.layer_norm_rms_epsilon", eps)) != ER_OK ||
        (!strcmp(a->arch, "llama") && (st = put_u32(c, "rope.dimension_count", head_dim)) != ER_OK) ||
        (st = read_rope(c, cfg, gemma, head_dim, rope_freqs)) != ER_OK)
        return st;
    if (gemma) {
        int64_t scalar;
        if ((st = cfg_int(c, cfg, "sliding_window", 1, 0, 1, INT32_MAX, &window)) != ER_OK ||
            (st = cfg_int(c, cfg, "query_pre_attn_scalar", 0, head_dim, 1, INT32_MAX, &scalar)) != ER_OK ||
            (st = check_gemma3_layers(c, cfg, s->n_layer)) != ER_OK)
            return st;
        if (scalar != head_dim)
            return er_fail(ER_ERR_UNSUPPORTED, "%s: query_pre_attn_scalar %lld != head_dim %lld (Gemma-3 27B's "
                           "attention scale) is not supported", c->path, (long long)scalar, (long long)head_dim);
        if ((st = put_u32(c, "attention.sliding_window", window)) != ER_OK)
            return st;
    }
    return ER_OK;
}

/* ---- tensors -------------------------------------------------------------------------- */

enum { T_PERMUTE_Q = 1, T_PERMUTE_K = 2 };

/* Hugging Face's names of one layer's tensors ("model.layers.N." + hf) -> "blk.N." + gguf;
 * a row with `only` applies to architectures with one of those flags, `never` to none. */
static const struct {
    const char *hf, *gguf;
    unsigned transform, only, never;
} layer_names[] = {
    {"input_layernorm.weight", "attn_norm.weight", 0, 0, 0},
    {"self_attn.q_proj.weight", "attn_q.weight", T_PERMUTE_Q, 0, 0},
    {"self_attn.k_proj.weight", "attn_k.weight", T_PERMUTE_K, 0, 0},
    {"self_attn.v_proj.weight", "attn_v.weight", 0, 0, 0},
    {"self_attn.o_proj.weight", "attn_output.weight", 0, 0, 0},
    {"self_attn.q_proj.bias", "attn_q.bias", 0, HF_QKV_BIAS, 0},
    {"self_attn.k_proj.bias", "attn_k.bias", 0, HF_QKV_BIAS, 0},
    {"self_attn.v_proj.bias", "attn_v.bias", 0, HF_QKV_BIAS, 0},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", 0, 0, 0},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", 0, 0, 0},
    {"post_attention_layernorm.weight", "ffn_norm.weight", 0, 0, HF_GEMMA},
    {"post_attention_layernorm.weight", "post_attention_norm.weight", 0, HF_GEMMA, 0},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight", 0, HF_GEMMA, 0},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight", 0, HF_GEMMA, 0},
    {"mlp.gate_proj.weight", "ffn_gate.weight", 0, 0, 0},
    {"mlp.up_proj.weight", "ffn_up.weight", 0, 0, 0},
    {"mlp.down_proj.weight", "ffn_down.weight", 0, 0, 0},
};

static const struct {
    const char *hf, *gguf;
} global_names[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

/* The GGUF name of HF tensor `name` into out (cap bytes) and its transform; 0 when the
 * name is not one of the architecture's. */
static int map_name(const hf_arch *a, const hf_shape *s, const char *name, char *out, size_t cap,
                    unsigned *transform) {
    *transform = 0;
    for (size_t i = 0; i < sizeof global_names / sizeof global_names[0]; i++)
        if (!strcmp(name, global_names[i].hf)) {
            snprintf(out, cap, "%s", global_names[i].gguf);
            return 1;
        }
    static const char prefix[] = "model.layers.";
    if (strncmp(name, prefix, sizeof prefix - 1) != 0)
        return 0;
    const char *p = name + sizeof prefix - 1;
    int64_t il = 0;
    if (*p < '0' || *p > '9')
        return 0;
    while (*p >= '0' && *p <= '9' && il < s->n_layer)
        il = il * 10 + (*p++ - '0');
    if (*p++ != '.' || il >= s->n_layer)
        return 0;
    for (size_t i = 0; i < sizeof layer_names / sizeof layer_names[0]; i++)
        if (!strcmp(p, layer_names[i].hf) && (!layer_names[i].only || (a->flags & layer_names[i].only)) &&
            !(a->flags & layer_names[i].never)) {
            snprintf(out, cap, "blk.%lld.%s", (long long)il, layer_names[i].gguf);
            *transform = a->flags & HF_PERMUTE_QK ? layer_names[i].transform : 0;
            return 1;
        }
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* Adds a tensor of the file: name copied, data a view (owned elsewhere). */
static er_status add_tensor(hf_build *b, const char *name, int n_dims, const int64_t *ne, uint32_t type,
                            const uint8_t *data, size_t size) {
    const char *owned_name;
    er_status st = hf_strdup(b, name, &owned_name);
    if (st != ER_OK)
        return st;
    if (b->n_tensors == b->cap_tensors) {
        const size_t cap = b->cap_tensors ? 2 * b->cap_tensors : 64;
        gguf_tensor *grown = realloc(b->tensors, cap * sizeof *grown);
        if (!grown)
            return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", b->dir);
        b->tensors = grown;
        b->cap_tensors = cap;
    }
    gguf_tensor *t = &b->tensors[b->n_tensors++];
    memset(t, 0, sizeof *t);
    t->name = (gguf_string){owned_name, strlen(owned_name)};
    t->n_dims = n_dims;
    for (int i = 0; i < GGUF_MAX_DIMS; i++)
        t->ne[i] = i < n_dims ? ne[i] : 1;
    t->type = type;
    t->size = size;
    t->data = data;
    return ER_OK;
}

/* Rows of a Q or K matrix reordered per head from Hugging Face's RoPE pairing (i, i + d/2)
 * to the interleaved (2i, 2i + 1): row 2i + j of a head is row j * d/2 + i (llama.cpp's
 * permute: reshape (n_head, 2, d/2, n_in), swap axes 1 and 2). */
static void permute_rows(const uint8_t *in, uint8_t *out, int64_t n_rows, int64_t n_head, size_t row_size) {
    const int64_t d = n_rows / n_head, half = d / 2;
    for (int64_t h = 0; h < n_head; h++)
        for (int64_t i = 0; i < half; i++)
            for (int64_t j = 0; j < 2; j++)
                memcpy(out + (size_t)(h * d + 2 * i + j) * row_size, in + (size_t)(h * d + j * half + i) * row_size,
                       row_size);
}

/* One SafeTensors tensor under its GGUF name: 1-D to F32 (Gemma's norms + 1); matrices as
 * views, or copies where permuted or not 4-byte aligned (the kernels load floats). */
static er_status convert_tensor(hf_build *b, const hf_arch *a, const hf_shape *s, const char *shard,
                                const st_tensor *t, const char *gguf_name, unsigned transform) {
    uint32_t type;
    er_status st;
    switch (t->dtype) {
    case ST_F32: type = ER_TYPE_F32; break;
    case ST_F16: type = ER_TYPE_F16; break;
    case ST_BF16: type = ER_TYPE_BF16; break;
    default:
        return er_fail(ER_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (F32, F16 and BF16 are supported)", shard,
                       t->name, safetensors_dtype_name(t->dtype));
    }
    if (t->n_dims != 1 && t->n_dims != 2)
        return er_fail(ER_ERR_FORMAT, "%s: tensor '%s' has %d dimensions, expected 1 or 2", shard, t->name, t->n_dims);
    const int64_t ne[2] = {t->shape[t->n_dims - 1], t->n_dims == 2 ? t->shape[0] : 1};
    if (ne[0] == 0 || ne[1] == 0)
        return er_fail(ER_ERR_FORMAT, "%s: tensor '%s' is empty", shard, t->name);
    if (t->n_dims == 1) {
        const float shift = (a->flags & HF_GEMMA) && ends_with(t->name, "norm.weight") ? 1.0f : 0.0f;
        float *v; /* (ne[0]) */
        if ((st = hf_alloc(b, (size_t)ne[0] * sizeof *v, (void **)&v)) != ER_OK)
            return st;
        for (int64_t i = 0; i < ne[0]; i++) {
            uint16_t h;
            uint32_t bits;
            if (type == ER_TYPE_F32) {
                memcpy(&bits, t->data + 4 * i, 4);
                v[i] = er_bits_to_f32(bits);
            } else {
                memcpy(&h, t->data + 2 * i, 2);
                v[i] = type == ER_TYPE_F16 ? er_f16_to_f32(h) : er_bf16_to_f32(h);
            }
            v[i] += shift;
        }
        return add_tensor(b, gguf_name, 1, ne, ER_TYPE_F32, (const uint8_t *)v, (size_t)ne[0] * sizeof *v);
    }
    const size_t row_size = t->size / (size_t)ne[1];
    const int64_t n_head = transform == T_PERMUTE_Q ? s->n_head : s->n_head_kv;
    if (transform && (ne[1] % (2 * n_head) != 0))
        return er_fail(ER_ERR_FORMAT, "%s: tensor '%s' has %lld rows, not a multiple of 2 x %lld heads", shard, t->name,
                       (long long)ne[1], (long long)n_head);
    if (!transform && (uintptr_t)t->data % 4 == 0)
        return add_tensor(b, gguf_name, 2, ne, type, t->data, t->size);
    uint8_t *copy; /* (ne[1], row_size) */
    if ((st = hf_alloc(b, t->size, (void **)&copy)) != ER_OK)
        return st;
    if (transform)
        permute_rows(t->data, copy, ne[1], n_head, row_size);
    else
        memcpy(copy, t->data, t->size);
    return add_tensor(b, gguf_name, 2, ne, type, copy, t->size);
}

/* The shards: model.safetensors, or the files model.safetensors.index.json names, each
 * opened once; names[i] is shards[i]'s file name. Every tensor the index lists must be in
 * the shard it names. */
static er_status open_shards(hf_build *b, st_file ***shards, const char ***names, size_t *n_shards) {
    char path[4096];
    const json_doc *index;
    er_status st;
    *n_shards = 0;
    if ((st = hf_read_json(b, "model.safetensors.index.json", 1, &index)) != ER_OK)
        return st;
    const json_node *map = index ? json_doc_get(index, json_doc_root(index), "weight_map") : NULL;
    if (index && (!map || map->kind != JSON_OBJECT || map->len == 0))
        return er_fail(ER_ERR_FORMAT, "%s/model.safetensors.index.json: missing object 'weight_map'", b->dir);
    const size_t cap = map ? map->len : 1;
    if ((st = hf_alloc(b, cap * sizeof **shards, (void **)shards)) != ER_OK ||
        (st = hf_alloc(b, cap * sizeof **names, (void **)names)) != ER_OK)
        return st;
    const json_node *e = map ? json_doc_first(index, map) : NULL;
    do {
        const char *file = map ? json_doc_str(index, e) : "model.safetensors";
        if (map && (e->kind != JSON_STRING || !*file || strchr(file, '/') || file[0] == '.' || strlen(file) != e->len))
            return er_fail(ER_ERR_FORMAT, "%s/model.safetensors.index.json: weight_map['%.200s'] is not a file name "
                           "in the folder", b->dir, json_doc_key(index, e));
        size_t i = 0;
        while (i < *n_shards && strcmp((*names)[i], file) != 0)
            i++;
        if (i == *n_shards) {
            snprintf(path, sizeof path, "%s/%s", b->dir, file);
            if ((st = safetensors_open(path, &(*shards)[i])) != ER_OK ||
                (st = hf_own(b, (*shards)[i], release_shard)) != ER_OK)
                return st;
            (*names)[(*n_shards)++] = file;
        }
        if (map && !safetensors_find((*shards)[i], json_doc_key(index, e)))
            return er_fail(ER_ERR_FORMAT, "%s/model.safetensors.index.json: tensor '%.200s' is not in %s, the shard "
                           "it names", b->dir, json_doc_key(index, e), file);
    } while (map && (e = json_doc_next(index, e)) != NULL);
    return ER_OK;
}

static er_status read_tensors(hf_build *b, const hf_arch *a, const hf_shape *s, const float *rope_freqs) {
    st_file **shards = NULL;
    const char **names = NULL;
    size_t n_shards = 0;
    char path[4096], gguf_name[128];
    er_status st;
    if ((st = open_shards(b, &shards, &names, &n_shards)) != ER_OK)
        return st;
    b->shards = shards;
    b->n_shards = n_shards;
    for (size_t i = 0; i < n_shards; i++) {
        snprintf(path, sizeof path, "%s/%s", b->dir, names[i]);
        for (size_t k = 0; k < shards[i]->n_tensors; k++) {
            const st_tensor *t = &shards[i]->tensors[k];
            unsigned transform;
            if (ends_with(t->name, "rotary_emb.inv_freq"))
                continue; /* a buffer transformers recomputes; so does the RoPE table */
            if (!map_name(a, s, t->name, gguf_name, sizeof gguf_name, &transform))
                return er_fail(ER_ERR_UNSUPPORTED, "%s: tensor '%.200s' is not one of %s's", path, t->name, a->hf_name);
            for (size_t j = 0; j < b->n_tensors; j++)
                if (gguf_string_eq(b->tensors[j].name, gguf_name))
                    return er_fail(ER_ERR_FORMAT, "%s: tensor '%.200s' appears twice in the folder", path, t->name);
            if ((st = convert_tensor(b, a, s, path, t, gguf_name, transform)) != ER_OK)
                return st;
        }
    }
    if (rope_freqs) {
        const int64_t ne[1] = {s->head_dim / 2};
        if ((st = add_tensor(b, "rope_freqs.weight", 1, ne, ER_TYPE_F32, (const uint8_t *)rope_freqs,
                             (size_t)ne[0] * sizeof(float))) != ER_OK)
            return st;
    }
    return ER_OK;
}

/* ---- the folder ------------------------------------------------------------------------ */

static void release_owned(void *p) {
    hf_build *b = p;
    for (size_t i = b->n_owned; i-- > 0;)
        b->owned[i].release(b->owned[i].p);
    free(b->owned);
    free(b);
}

static void drop_shard_pages(void *owner, const uint8_t *p, size_t n) {
    const hf_build *b = owner;
    for (size_t i = 0; i < b->n_shards; i++)
        io_drop_pages(b->shards[i]->mapping, b->shards[i]->size, p ? p : b->shards[i]->base, p ? n : b->shards[i]->size);
}

er_status hf_open(const char *dir, unsigned flags, gguf_file **out) {
    er_status st;
    gguf_file *f = NULL;
    hf_build *b = calloc(1, sizeof *b);
    *out = NULL;
    if (!b)
        return er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", dir);
    b->bos_id = b->eos_id = -1;
    const char *owned_dir;
    const hf_arch *a = NULL;
    hf_shape shape = {0};
    float *rope_freqs = NULL;
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/config.json", dir);
    const int has_config = stat(path, &sb) == 0;
    b->dir = dir;
    if ((st = hf_strdup(b, dir, &owned_dir)) != ER_OK)
        goto fail;
    b->dir = owned_dir;
    if (!(flags & HF_TOKENIZER_ONLY) || has_config) {
        if ((st = read_config(b, &a, &shape, &rope_freqs)) != ER_OK)
            goto fail;
    }
    if (!(flags & HF_TOKENIZER_ONLY) && (st = read_tensors(b, a, &shape, rope_freqs)) != ER_OK)
        goto fail;
    if ((st = hf_tokenizer(b)) != ER_OK)
        goto fail;
    f = calloc(1, sizeof *f);
    if (!f) {
        st = er_fail(ER_ERR_NO_MEMORY, "%s: out of memory", dir);
        goto fail;
    }
    f->version = 3;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    f->kv = b->kv;
    f->n_kv = b->n_kv;
    f->tensors = b->tensors;
    f->n_tensors = b->n_tensors;
    f->owner = b;
    f->owner_free = release_owned;
    f->owner_drop_pages = drop_shard_pages;
    *out = f;
    return ER_OK;
fail:
    for (size_t i = 0; i < b->n_kv; i++)
        if (b->kv[i].value.type == GGUF_TYPE_ARRAY)
            free(b->kv[i].value.arr.strs);
    free(b->kv);
    free(b->tensors);
    release_owned(b);
    return st;
}

er_status hf_open_any(const char *path, unsigned flags, gguf_file **out) {
    struct stat sb;
    if (path && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return hf_open(path, flags, out);
    return gguf_open(path, out);
}
