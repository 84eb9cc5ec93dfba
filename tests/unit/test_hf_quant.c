/*
 * test_hf_quant.c - er_model_params.type on a Hugging Face folder written here (a Qwen3
 * of 2 layers, width 256, F32): the converted weights are the model's own memory, and the
 * folder's mapping is not held resident beside them. The resident size of the mapping is
 * read from /proc/self/smaps; the same measure on a load without `type` after a decode
 * (every weight read from the mapping) shows that it sees the pages.
 * (That the converted bytes are `edgerunner quantize`'s is tests/cli/run.sh's check.)
 * Each of the three models also runs test_reference_threads (the CPU reference's logits
 * bit-identical on 1 to 4 threads).
 */
#define _DEFAULT_SOURCE /* mkdtemp */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "edgerunner.h"
#include "test.h"

enum { N_EMBD = 256, N_FF = 256, N_VOCAB = 64, HEAD_DIM = 64, N_HEAD = 4, N_HEAD_KV = 2, N_LAYER = 2 };

/* Writes model.safetensors: every tensor of the model, F32, pseudo-random; its size. */
static size_t write_weights(const char *dir) {
    static const struct {
        const char *name;
        int64_t rows, cols; /* cols 0: a vector */
    } layer[] = {
        {"input_layernorm.weight", N_EMBD, 0},
        {"post_attention_layernorm.weight", N_EMBD, 0},
        {"self_attn.q_norm.weight", HEAD_DIM, 0},
        {"self_attn.k_norm.weight", HEAD_DIM, 0},
        {"self_attn.q_proj.weight", N_HEAD * HEAD_DIM, N_EMBD},
        {"self_attn.k_proj.weight", N_HEAD_KV * HEAD_DIM, N_EMBD},
        {"self_attn.v_proj.weight", N_HEAD_KV * HEAD_DIM, N_EMBD},
        {"self_attn.o_proj.weight", N_EMBD, N_HEAD * HEAD_DIM},
        {"mlp.gate_proj.weight", N_FF, N_EMBD},
        {"mlp.up_proj.weight", N_FF, N_EMBD},
        {"mlp.down_proj.weight", N_EMBD, N_FF},
    };
    char header[8192], name[128], path[512];
    size_t len = 0, offset = 0;
    len += (size_t)snprintf(header + len, sizeof header - len, "{");
    for (int il = -1; il < N_LAYER; il++) {
        const size_t n = il < 0 ? 2 : sizeof layer / sizeof layer[0];
        for (size_t i = 0; i < n; i++) {
            const int64_t rows = il < 0 ? (i ? N_EMBD : N_VOCAB) : layer[i].rows, cols = il < 0 ? (i ? 0 : N_EMBD) : layer[i].cols;
            if (il < 0)
                snprintf(name, sizeof name, "%s", i ? "model.norm.weight" : "model.embed_tokens.weight");
            else
                snprintf(name, sizeof name, "model.layers.%d.%s", il, layer[i].name);
            const size_t bytes = (size_t)(rows * (cols ? cols : 1)) * 4;
            if (cols)
                len += (size_t)snprintf(header + len, sizeof header - len, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],"
                                        "\"data_offsets\":[%zu,%zu]}", offset ? "," : "", name, (long long)rows,
                                        (long long)cols, offset, offset + bytes);
            else
                len += (size_t)snprintf(header + len, sizeof header - len, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld],"
                                        "\"data_offsets\":[%zu,%zu]}", offset ? "," : "", name, (long long)rows, offset,
                                        offset + bytes);
            offset += bytes;
        }
    }
    len += (size_t)snprintf(header + len, sizeof header - len, "}");
    while (len % 8)
        header[len++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    const uint64_t hlen = len;
    uint32_t state = 12345;
    fwrite(&hlen, 8, 1, f);
    fwrite(header, 1, len, f);
    for (size_t i = 0; i < offset / 4; i++) {
        state = state * 1664525u + 1013904223u;
        const float v = ((float)(state >> 8) / 16777216.0f - 0.5f) * 0.2f;
        fwrite(&v, 4, 1, f);
    }
    fclose(f);
    return 8 + len + offset;
}

long test_resident_kb(const char *file) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[1024];
    long kb = 0, v;
    int in_file = 0;
    while (f && fgets(line, sizeof line, f)) {
        const size_t n = strlen(line);
        if (n > 1 && strchr(line, '-') && strchr(line, ':') && line[0] != ' ' && !strstr(line, "kB"))
            in_file = n > strlen(file) + 1 && !strncmp(line + n - 1 - strlen(file), file, strlen(file));
        else if (in_file && sscanf(line, "Rss: %ld kB", &v) == 1)
            kb += v;
    }
    if (f)
        fclose(f);
    return kb;
}

void test_hf_quant(void) {
    char dir[] = "/tmp/er-hfq-XXXXXX", path[600];
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp failed");
        return;
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *cfg = fopen(path, "w");
    fprintf(cfg, "{\"architectures\": [\"Qwen3ForCausalLM\"], \"hidden_size\": %d, \"num_hidden_layers\": %d, "
                 "\"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, \"intermediate_size\": %d, "
                 "\"max_position_embeddings\": 64, \"vocab_size\": %d, \"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": true, "
                 "\"rope_theta\": 10000.0}", N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF, N_VOCAB);
    fclose(cfg);
    const long file_kb = (long)(write_weights(dir) / 1024);
    const int32_t prompt[2] = {1, 2};
    static const char *const types[] = {NULL, "Q8_0", "q4_k_m"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        er_model_params mp = er_model_default_params();
        er_model *m = NULL;
        er_context *ctx = NULL;
        mp.type = types[i];
        er_status st = er_model_load(dir, &mp, &m);
        CHECK(st == ER_OK, "load %s: %s", types[i] ? types[i] : "(none)", er_last_error());
        if (st == ER_OK && er_context_create(m, NULL, &ctx) == ER_OK)
            CHECK(er_context_decode(ctx, prompt, 2, NULL) == ER_OK, "decode: %s", er_last_error());
        if (st == ER_OK) { /* the reference's threads on a Qwen3 (Q/K norms; K-quants in q4_k_m) */
            int32_t ids[20];
            char name[64];
            for (int k = 0; k < 20; k++)
                ids[k] = (int32_t)(1 + k * 7 % (N_VOCAB - 1));
            snprintf(name, sizeof name, "Qwen3 folder %s", types[i] ? types[i] : "f32");
            test_reference_threads(m, name, ids, 20, 4);
        }
        const long kb = test_resident_kb("/model.safetensors");
        if (types[i])
            CHECK(kb * 8 < file_kb, "type %s: %ld kB of the %ld kB folder still resident", types[i], kb, file_kb);
        else
            CHECK(kb * 2 > file_kb, "without a type, %ld kB of the %ld kB mapping resident: the measure sees nothing",
                  kb, file_kb);
        er_context_free(ctx);
        er_model_free(m);
    }
    er_model_params mp = er_model_default_params();
    er_model *m = NULL;
    mp.type = "Q9_9";
    er_status st = er_model_load(dir, &mp, &m);
    CHECK(st == ER_ERR_INVALID_ARG && !m && strstr(er_last_error(), "unknown type 'Q9_9'") &&
          strstr(er_last_error(), dir), "an unknown type: %d '%s'", (int)st, er_last_error());
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
}
