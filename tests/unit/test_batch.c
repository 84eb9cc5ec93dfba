/*
 * test_batch.c - several sequences in one context (er_context_decode_batch) on
 * stories260K, on the CPU reference, the fast path and (where a device is present) CUDA:
 * each sequence's logits are bit-identical alone and in any batch, prefixes copied
 * between sequences reproduce them, removal frees positions, and hostile batches fail
 * with a message, changing nothing. CUDA's batches also match the CPU reference's logits
 * within the rounding of its F16 GEMM inputs.
 *
 * "Alone" is one context of one sequence: er_context_decode on the CPU (whose batches run
 * the same kernels), on CUDA batches holding only that sequence (its one-sequence decode
 * runs other kernels: matrix-vector products with other roundings).
 *
 * stories260K's heads of 8 dims take CUDA's block-per-query attention; a model of its
 * vocabulary with heads of 64 (random weights, written here) takes the attention with
 * shares of the keys (k_attention_batch_f16).
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "edgerunner.h"
#include "io/gguf_write.h"
#include "quant/types.h" /* ER_TYPE_F32 */
#include "test.h"
#ifdef ER_HAVE_CUDA
#include "backend/cuda/kernels.h" /* cuda_gemm_set_mmq */
#endif

#define STORIES TEST_DATA "stories260K.gguf"

enum { N_SEQ = 3, N_GEN = 8, N_CTX = 96, MAX_PROMPT = 64 };

/* The three paths under test. */
enum { FAST = 0, REFERENCE = 1, CUDA = 2 };
static const char *const path_name[] = {"fast path", "reference", "CUDA"};

/* Three prompts: short, long enough for the fast path's f32 matmul (>= 32 tokens), and
 * in between; ids from the vocabulary's ordinary range. */
static int64_t prompt_len[N_SEQ] = {3, 40, 10};

static int32_t prompt_token(int s, int64_t i) { return (int32_t)(3 + (s * 131 + i * 37) % 500); }

static er_context *make_context(er_model *m, int path, int n_seq) {
    er_context_params cp = er_context_default_params();
    cp.n_ctx = N_CTX;
    cp.n_batch = 128;
    cp.reference = path == REFERENCE;
    cp.n_seq_max = n_seq;
    er_context *ctx = NULL;
    CHECK(er_context_create(m, &cp, &ctx) == ER_OK, "context of %d sequences: %s", n_seq, er_last_error());
    return ctx;
}

/* Sequence s alone in its own context: the prompt in one call, then N_GEN greedy tokens
 * one at a time; logits (N_GEN + 1, n_vocab): the prompt's last, then every step's. */
static er_status feed_ids(er_context *ctx, int path, const int32_t *ids, int64_t pos, int64_t n, int64_t n_vocab,
                          float *out);

static void run_alone(er_model *m, int path, int s, float *logits) {
    const int64_t n_vocab = er_model_n_vocab(m);
    er_context *ctx = make_context(m, path, 1);
    int32_t ids[MAX_PROMPT];
    for (int64_t i = 0; i < prompt_len[s]; i++)
        ids[i] = prompt_token(s, i);
    CHECK(ctx && feed_ids(ctx, path, ids, 0, prompt_len[s], n_vocab, logits) == ER_OK, "alone: %s", er_last_error());
    for (int g = 0; ctx && g <= N_GEN; g++) {
        const int32_t next = er_argmax(logits + g * n_vocab, n_vocab);
        if (g < N_GEN)
            CHECK(feed_ids(ctx, path, &next, prompt_len[s] + g, 1, n_vocab, logits + (g + 1) * n_vocab) == ER_OK,
                  "alone, step %d: %s", g, er_last_error());
    }
    er_context_free(ctx);
}

/* The batch being built: tokens of several sequences, logits asked on some. */
typedef struct batch_buf {
    int32_t tokens[256], seq[256];
    int64_t pos[256];
    int8_t want[256];
    er_batch b;
} batch_buf;

static void batch_add(batch_buf *bb, int32_t token, int32_t seq, int64_t pos, int want) {
    const int64_t i = bb->b.n_tokens++;
    bb->tokens[i] = token;
    bb->seq[i] = seq;
    bb->pos[i] = pos;
    bb->want[i] = (int8_t)want;
}

static void batch_clear(batch_buf *bb) {
    bb->b = (er_batch){0, bb->tokens, bb->seq, bb->pos, bb->want};
}

/* n ids at positions pos.. of a one-sequence context, the last one's logits into out:
 * er_context_decode, or on CUDA one batch of sequence 0. */
static er_status feed_ids(er_context *ctx, int path, const int32_t *ids, int64_t pos, int64_t n, int64_t n_vocab,
                          float *out) {
    if (path != CUDA) {
        const er_status st = er_context_decode(ctx, ids, n, NULL);
        if (st == ER_OK)
            memcpy(out, er_context_logits(ctx), (size_t)n_vocab * sizeof(float));
        return st;
    }
    batch_buf bb;
    batch_clear(&bb);
    for (int64_t i = 0; i < n; i++)
        batch_add(&bb, ids[i], 0, pos + i, i == n - 1);
    return er_context_decode_batch(ctx, &bb.b, out);
}

/* All three in one context, joining at different steps (sequence 1's prompt comes while
 * 0 generates, 2's a step later), each step one batch; every row of got (N_SEQ, N_GEN +
 * 1, n_vocab) as run_alone fills it. */
static void run_batched(er_model *m, int path, float *got) {
    const int64_t n_vocab = er_model_n_vocab(m);
    er_context *ctx = make_context(m, path, N_SEQ);
    float *out = malloc((size_t)(N_SEQ * n_vocab) * sizeof(float)); /* (N_SEQ, n_vocab) */
    batch_buf bb;
    int step_of[N_SEQ] = {0, 1, 2}; /* the step each sequence's prompt goes in */
    int n_done[N_SEQ] = {0};        /* logits rows kept per sequence */
    int32_t next[N_SEQ] = {0};
    for (int step = 0; ctx && step < N_GEN + 3; step++) {
        batch_clear(&bb);
        for (int s = 0; s < N_SEQ; s++) {
            if (step == step_of[s])
                for (int64_t i = 0; i < prompt_len[s]; i++)
                    batch_add(&bb, prompt_token(s, i), s, i, i == prompt_len[s] - 1);
            else if (step > step_of[s] && n_done[s] <= N_GEN)
                batch_add(&bb, next[s], s, er_context_seq_pos(ctx, s), 1);
        }
        if (bb.b.n_tokens == 0)
            break;
        CHECK(er_context_decode_batch(ctx, &bb.b, out) == ER_OK, "step %d: %s", step, er_last_error());
        int row = 0;
        for (int64_t i = 0; i < bb.b.n_tokens; i++) {
            if (!bb.want[i])
                continue;
            const int s = bb.seq[i];
            float *dst = got + ((size_t)s * (N_GEN + 1) + (size_t)n_done[s]) * (size_t)n_vocab;
            memcpy(dst, out + row++ * n_vocab, (size_t)n_vocab * sizeof(float));
            next[s] = er_argmax(dst, n_vocab);
            n_done[s]++;
        }
    }
    free(out);
    er_context_free(ctx);
}

/* Each sequence's logits alone and batched, bit for bit. Where reference_of is not NULL
 * (CUDA): against the CPU reference's (N_SEQ, N_GEN + 1, n_vocab), within tol of the
 * largest, row by row while both chose the same greedy ids (after a tie broken the other
 * way they are fed different ids). */
static void test_invariance(er_model *m, int path, const float *reference_of, float *alone_out) {
    const int64_t n_vocab = er_model_n_vocab(m);
    const size_t per_seq = (size_t)(N_GEN + 1) * (size_t)n_vocab;
    float *alone = malloc(N_SEQ * per_seq * sizeof(float)), *batched = calloc(N_SEQ * per_seq, sizeof(float));
    for (int s = 0; s < N_SEQ; s++)
        run_alone(m, path, s, alone + s * per_seq);
    run_batched(m, path, batched);
    for (int s = 0; s < N_SEQ; s++)
        CHECK(!memcmp(alone + s * per_seq, batched + s * per_seq, per_seq * sizeof(float)),
              "%s: sequence %d (a %lld-token prompt, %d greedy steps) has the same logits alone and batched",
              path_name[path], s, (long long)prompt_len[s], N_GEN);
    if (reference_of) {
        double worst = 0.0, largest = 0.0;
        int rows = 0;
        for (int s = 0; s < N_SEQ; s++) {
            for (int g = 0; g <= N_GEN; g++) {
                const float *got = batched + s * per_seq + (size_t)g * n_vocab, *ref = reference_of + s * per_seq + (size_t)g * n_vocab;
                for (int64_t i = 0; i < n_vocab; i++) {
                    const double d = fabs((double)got[i] - (double)ref[i]);
                    worst = d > worst || isnan(d) ? d : worst;
                    largest = fabs((double)ref[i]) > largest ? fabs((double)ref[i]) : largest;
                }
                rows++;
                if (er_argmax(got, n_vocab) != er_argmax(ref, n_vocab))
                    break;
            }
        }
        CHECK(worst <= 2e-2 * largest, "%s batched against the CPU reference: largest difference %.3g of %.3g (%d rows)",
              path_name[path], worst, largest, rows);
        printf("  batch: CUDA logits within %.2e of the largest against the CPU reference (%d of %d rows)\n",
               worst / largest, rows, N_SEQ * (N_GEN + 1));
    }
    if (alone_out)
        memcpy(alone_out, alone, N_SEQ * per_seq * sizeof(float));
    free(alone);
    free(batched);
}

/* The server feeds a long prompt in chunks: chunks of 32 or more tokens give the logits
 * of one call (each row's products do not depend on the others). */
static void test_chunks(er_model *m, int path) {
    const int64_t n_vocab = er_model_n_vocab(m);
    int32_t ids[MAX_PROMPT];
    float *one = malloc((size_t)n_vocab * sizeof(float)), *two = malloc((size_t)n_vocab * sizeof(float));
    for (int64_t i = 0; i < MAX_PROMPT; i++)
        ids[i] = prompt_token(1, i);
    er_context *whole = make_context(m, path, 1), *chunked = make_context(m, path, 1);
    CHECK(feed_ids(whole, path, ids, 0, MAX_PROMPT, n_vocab, one) == ER_OK &&
              feed_ids(chunked, path, ids, 0, 32, n_vocab, two) == ER_OK &&
              feed_ids(chunked, path, ids + 32, 32, 32, n_vocab, two) == ER_OK,
          "decode: %s", er_last_error());
    CHECK(!memcmp(one, two, (size_t)n_vocab * sizeof(float)),
          "%s: a 64-token prompt in two chunks of 32 gives the logits of one call", path_name[path]);
    free(one);
    free(two);
    er_context_free(whole);
    er_context_free(chunked);
}

/* Feeds tokens [from, to) of prompt 1 to sequence seq in one batch, the last one's
 * logits into out. */
static er_status feed(er_context *ctx, int32_t seq, int64_t from, int64_t to, float *out) {
    batch_buf bb;
    batch_clear(&bb);
    for (int64_t i = from; i < to; i++)
        batch_add(&bb, prompt_token(1, i), seq, i, i == to - 1);
    return er_context_decode_batch(ctx, &bb.b, out);
}

/* A prefix copied to another sequence, and a sequence cut back and fed again, give the
 * logits of the sequence computed whole, fed in the same chunks (36 then 4). */
static void test_copy_remove(er_model *m, int path) {
    const int64_t n_vocab = er_model_n_vocab(m);
    const size_t bytes = (size_t)n_vocab * sizeof(float);
    er_context *ctx = make_context(m, path, N_SEQ);
    float *ref = malloc(bytes), *out = malloc(bytes);
    CHECK(feed(ctx, 0, 0, 36, out) == ER_OK && feed(ctx, 0, 36, 40, ref) == ER_OK, "prompt: %s", er_last_error());
    CHECK(er_context_seq_copy(ctx, 0, 2, 36) == ER_OK && er_context_seq_pos(ctx, 2) == 36, "copy 36: %s",
          er_last_error());
    CHECK(feed(ctx, 2, 36, 40, out) == ER_OK && !memcmp(ref, out, bytes),
          "%s: a copied 36-token prefix plus the last 4 gives the logits of the whole prompt",
          path_name[path]);
    CHECK(er_context_seq_remove(ctx, 2, 0) == ER_OK && er_context_seq_pos(ctx, 2) == 0 &&
              er_context_seq_pos(ctx, 0) == 40,
          "removing sequence 2 leaves sequence 0");
    CHECK(er_context_seq_remove(ctx, 0, 36) == ER_OK && er_context_seq_pos(ctx, 0) == 36, "cut back to 36");
    CHECK(feed(ctx, 0, 36, 40, out) == ER_OK && !memcmp(ref, out, bytes), "the last four again give the same logits");
    free(ref);
    free(out);
    er_context_free(ctx);
}

/* A batch decoded with logits NULL keeps its rows in the context (er_context_batch_logits),
 * the same as those copied out; none past the rows asked, none after a failed batch. */
static void test_kept_logits(er_model *m, int path) {
    const int64_t n_vocab = er_model_n_vocab(m);
    const size_t bytes = (size_t)n_vocab * sizeof(float);
    er_context *out_ctx = make_context(m, path, 2), *kept_ctx = make_context(m, path, 2);
    float *out = malloc(2 * bytes);
    batch_buf bb;
    batch_clear(&bb);
    batch_add(&bb, 5, 0, 0, 1);
    batch_add(&bb, 6, 0, 1, 0);
    batch_add(&bb, 7, 1, 0, 1);
    CHECK(er_context_decode_batch(out_ctx, &bb.b, out) == ER_OK && er_context_decode_batch(kept_ctx, &bb.b, NULL) == ER_OK,
          "decode: %s", er_last_error());
    CHECK(er_context_batch_logits(kept_ctx, 0) && er_context_batch_logits(kept_ctx, 1) &&
              !memcmp(er_context_batch_logits(kept_ctx, 0), out, bytes) &&
              !memcmp(er_context_batch_logits(kept_ctx, 1), out + n_vocab, bytes),
          "%s: the rows kept in the context are those copied out", path_name[path]);
    CHECK(!er_context_batch_logits(kept_ctx, 2) && !er_context_batch_logits(kept_ctx, -1) &&
              !er_context_batch_logits(out_ctx, 0) && !er_context_batch_logits(NULL, 0),
          "no row past those asked, nor of a batch copied out");
    batch_clear(&bb);
    batch_add(&bb, 5, 0, 7, 1);
    CHECK(er_context_decode_batch(kept_ctx, &bb.b, NULL) == ER_ERR_INVALID_ARG && !er_context_batch_logits(kept_ctx, 0),
          "no rows after a failed batch");
    free(out);
    er_context_free(out_ctx);
    er_context_free(kept_ctx);
}

/* Hostile batches and sequence calls: each fails with its status and a message, and the
 * positions the sequences hold stay as they were. */
static void test_hostile(er_model *m) {
    er_context *ctx = make_context(m, 0, 2);
    float *out = malloc((size_t)(4 * er_model_n_vocab(m)) * sizeof(float));
    batch_buf bb;
    batch_clear(&bb);
    batch_add(&bb, 5, 0, 0, 1);
    batch_add(&bb, 6, 1, 0, 1);
    CHECK(er_context_decode_batch(ctx, &bb.b, out) == ER_OK, "a good batch: %s", er_last_error());
    static const struct {
        int32_t token, seq;
        int64_t pos;
        er_status want;
        const char *msg, *what;
    } cases[] = {
        {5, 2, 1, ER_ERR_INVALID_ARG, "outside [0, 2)", "a sequence id past n_seq_max"},
        {5, -1, 1, ER_ERR_INVALID_ARG, "outside [0, 2)", "a negative sequence id"},
        {5, 0, 3, ER_ERR_INVALID_ARG, "next position is 1", "a position that skips one"},
        {5, 0, 0, ER_ERR_INVALID_ARG, "next position is 1", "a position already held"},
        {512, 0, 1, ER_ERR_INVALID_ARG, "outside the vocabulary", "a token outside the vocabulary"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        batch_clear(&bb);
        batch_add(&bb, 7, 1, 1, 0); /* a good token first: the bad one must undo nothing */
        batch_add(&bb, cases[i].token, cases[i].seq, cases[i].pos, 1);
        CHECK(er_context_decode_batch(ctx, &bb.b, out) == cases[i].want && strstr(er_last_error(), cases[i].msg) &&
                  er_context_seq_pos(ctx, 0) == 1 && er_context_seq_pos(ctx, 1) == 1,
              "%s: %s", cases[i].what, er_last_error());
    }
    batch_clear(&bb);
    batch_add(&bb, 5, 0, 1, 0);
    batch_add(&bb, 5, 1, 1, 0);
    batch_add(&bb, 5, 0, 2, 0);
    CHECK(er_context_decode_batch(ctx, &bb.b, out) == ER_ERR_INVALID_ARG && strstr(er_last_error(), "consecutive"),
          "a sequence's tokens split by another's: %s", er_last_error());
    batch_clear(&bb);
    batch_add(&bb, 5, 0, 1, 1);
    CHECK(er_context_decode_batch(ctx, NULL, out) == ER_ERR_INVALID_ARG && er_context_decode_batch(NULL, &bb.b, out) ==
                                                                              ER_ERR_INVALID_ARG,
          "NULL batch or context");
    batch_clear(&bb);
    for (int64_t i = 1; i < N_CTX + 1; i++)
        batch_add(&bb, 5, 0, i, 0);
    CHECK(er_context_decode_batch(ctx, &bb.b, out) == ER_ERR_CONTEXT_FULL && strstr(er_last_error(), "full") &&
              er_context_seq_pos(ctx, 0) == 1,
          "a sequence past n_ctx: %s", er_last_error());
    batch_clear(&bb);
    for (int64_t i = 0; i < 129; i++)
        batch_add(&bb, 5, 0, 1 + i, 0);
    CHECK(er_context_decode_batch(ctx, &bb.b, out) == ER_ERR_INVALID_ARG && strstr(er_last_error(), "n_batch"),
          "a batch over n_batch: %s", er_last_error());
    CHECK(er_context_seq_copy(ctx, 0, 0, 1) == ER_ERR_INVALID_ARG, "a copy onto itself");
    CHECK(er_context_seq_copy(ctx, 0, 1, 2) == ER_ERR_INVALID_ARG && strstr(er_last_error(), "holds 1"),
          "a copy of more than the source holds: %s", er_last_error());
    CHECK(er_context_seq_copy(ctx, 0, 5, 1) == ER_ERR_INVALID_ARG, "a copy to no sequence");
    CHECK(er_context_seq_remove(ctx, 1, 2) == ER_ERR_INVALID_ARG && er_context_seq_remove(ctx, 9, 0) == ER_ERR_INVALID_ARG,
          "removal past the end, or of no sequence");
    CHECK(er_context_seq_pos(ctx, 7) == -1 && er_context_n_seq(ctx) == 2, "positions of no sequence");
    er_context_params cp = er_context_default_params();
    er_context *none = NULL;
    cp.n_seq_max = -1;
    CHECK(er_context_create(m, &cp, &none) == ER_ERR_INVALID_ARG && !none, "a negative n_seq_max");
    cp.n_seq_max = ER_MAX_SEQ + 1;
    CHECK(er_context_create(m, &cp, &none) == ER_ERR_INVALID_ARG && !none && strstr(er_last_error(), "257"),
          "more sequences than ER_MAX_SEQ: %s", er_last_error());
    free(out);
    er_context_free(ctx);
}

/* stories260K's metadata and vocabulary with wider layers (a llama of 2 layers, n_embd
 * 256, 4 heads of 64 dims sharing 2 KV heads, n_ff 512) and random F32 weights, written
 * to path; 0 on failure. */
static int write_wide_model(const char *path) {
    enum { EMBD = 256, FF = 512, HEADS = 4, KV_HEADS = 2, HD = 64, LAYERS = 2, VOCAB = 512 };
    static const struct {
        const char *name;
        int64_t ne0, ne1; /* ne1 0: a vector */
    } layer[] = {{"attn_norm", EMBD, 0},         {"attn_q", EMBD, HEADS * HD},  {"attn_k", EMBD, KV_HEADS * HD},
                 {"attn_v", EMBD, KV_HEADS * HD}, {"attn_output", HEADS * HD, EMBD}, {"ffn_norm", EMBD, 0},
                 {"ffn_gate", EMBD, FF},         {"ffn_up", EMBD, FF},          {"ffn_down", FF, EMBD}};
    enum { N_LAYER_T = sizeof layer / sizeof layer[0] };
    gguf_file *f = NULL;
    gguf_writer *w = NULL;
    float *data = malloc((size_t)EMBD * FF * sizeof(float)); /* the largest tensor */
    char name[64];
    uint64_t rng = 0x2545f4914f6cdd1dull;
    int ok = data && gguf_open(STORIES, &f) == ER_OK && gguf_writer_create(&w) == ER_OK;
    for (uint64_t i = 0; ok && i < f->n_kv; i++)
        ok = gguf_writer_set(w, f->kv[i].key, &f->kv[i].value) == ER_OK;
    ok = ok && gguf_writer_set_u32(w, "llama.embedding_length", EMBD) == ER_OK &&
         gguf_writer_set_u32(w, "llama.feed_forward_length", FF) == ER_OK &&
         gguf_writer_set_u32(w, "llama.attention.head_count", HEADS) == ER_OK &&
         gguf_writer_set_u32(w, "llama.attention.head_count_kv", KV_HEADS) == ER_OK &&
         gguf_writer_set_u32(w, "llama.block_count", LAYERS) == ER_OK &&
         gguf_writer_set_u32(w, "llama.rope.dimension_count", HD) == ER_OK;
    /* tensors in file order: the embedding, the head, then each layer's */
    const int64_t embd_ne[2] = {EMBD, VOCAB}, norm_ne[1] = {EMBD};
    ok = ok && gguf_writer_add_tensor(w, (gguf_string){"token_embd.weight", 17}, 2, embd_ne, ER_TYPE_F32) == ER_OK &&
         gguf_writer_add_tensor(w, (gguf_string){"output_norm.weight", 18}, 1, norm_ne, ER_TYPE_F32) == ER_OK &&
         gguf_writer_add_tensor(w, (gguf_string){"output.weight", 13}, 2, embd_ne, ER_TYPE_F32) == ER_OK;
    for (int il = 0; ok && il < LAYERS; il++)
        for (int k = 0; ok && k < N_LAYER_T; k++) {
            const int64_t ne[2] = {layer[k].ne0, layer[k].ne1};
            const int len = snprintf(name, sizeof name, "blk.%d.%s.weight", il, layer[k].name);
            ok = gguf_writer_add_tensor(w, (gguf_string){name, (uint64_t)len}, ne[1] ? 2 : 1, ne, ER_TYPE_F32) ==
                 ER_OK;
        }
    ok = ok && gguf_writer_begin(w, path) == ER_OK;
    for (int t = 0; ok && t < 3 + LAYERS * N_LAYER_T; t++) {
        /* a vector: a norm near 1; a matrix: uniform with variance 1 / its input (the
         * embedding and head: 1) */
        const int k = t < 3 ? -1 : (t - 3) % N_LAYER_T;
        const int64_t ne0 = k < 0 ? EMBD : layer[k].ne0, ne1 = t == 1 ? 0 : k < 0 ? VOCAB : layer[k].ne1;
        const int64_t n = ne0 * (ne1 ? ne1 : 1);
        const float scale = ne1 ? (t < 3 ? 1.7f : 1.7f / sqrtf((float)ne0)) : 0.2f;
        for (int64_t i = 0; i < n; i++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            const float u = (float)(rng >> 40) / 8388608.0f - 1.0f; /* [-1, 1) */
            data[i] = ne1 ? scale * u : 1.0f + scale * u;
        }
        ok = gguf_writer_write_tensor(w, data, (size_t)n * sizeof(float)) == ER_OK;
    }
    ok = ok && gguf_writer_finish(w) == ER_OK;
    CHECK(ok, "writing a wide model of %s's vocabulary: %s", STORIES, er_last_error());
    gguf_writer_free(w);
    gguf_close(f);
    free(data);
    return ok;
}

void test_batch(void) {
    er_model *m = NULL;
    CHECK(er_model_load(STORIES, NULL, &m) == ER_OK, "load: %s", er_last_error());
    if (!m)
        return;
    const size_t all = (size_t)N_SEQ * (N_GEN + 1) * (size_t)er_model_n_vocab(m);
    float *reference_of = malloc(all * sizeof(float)); /* (N_SEQ, N_GEN + 1, n_vocab) the reference alone */
    for (int path = FAST; path <= REFERENCE; path++) {
        test_invariance(m, path, NULL, path == REFERENCE ? reference_of : NULL);
        test_chunks(m, path);
        test_copy_remove(m, path);
        test_kept_logits(m, path);
    }
    test_hostile(m);
    er_model_free(m);
    if (er_cuda_available()) {
        er_model_params mp = er_model_default_params();
        er_model *mc = NULL;
        mp.backend = ER_BACKEND_CUDA;
        CHECK(er_model_load(STORIES, &mp, &mc) == ER_OK, "load on CUDA: %s", er_last_error());
        if (mc) {
            test_invariance(mc, CUDA, reference_of, NULL);
            test_chunks(mc, CUDA);
            test_copy_remove(mc, CUDA);
            test_kept_logits(mc, CUDA);
        }
        er_model_free(mc);
        /* Q8_0 and Q4_0 weights: CUDA's batch GEMMs on the int8 tensor cores (mmq.cu,
         * their inputs quantized per block of 32), against the CPU reference of the same
         * weights. stories260K's rows of 64 take k_mmq; the ring (K % 128 == 0) is checked
         * against doubles in the cuda_gemm suite and end to end by `bench --parallel`'s
         * invariance */
        static const char *const int8_types[] = {"Q8_0", "Q4_0"};
        for (size_t ti = 0; ti < sizeof int8_types / sizeof int8_types[0]; ti++) {
            er_model *m8 = NULL;
            mp.type = int8_types[ti];
            mp.backend = ER_BACKEND_CPU;
            CHECK(er_model_load(STORIES, &mp, &m8) == ER_OK, "load as %s: %s", mp.type, er_last_error());
            if (m8)
                test_invariance(m8, REFERENCE, NULL, reference_of);
            er_model_free(m8);
            m8 = NULL;
            mp.backend = ER_BACKEND_CUDA;
            CHECK(er_model_load(STORIES, &mp, &m8) == ER_OK, "load as %s on CUDA: %s", mp.type, er_last_error());
#ifdef ER_HAVE_CUDA
            cuda_gemm_set_mmq(1);
#endif
            if (m8) {
                test_invariance(m8, CUDA, reference_of, NULL);
                test_chunks(m8, CUDA);
            }
#ifdef ER_HAVE_CUDA
            cuda_gemm_set_mmq(-1);
#endif
            er_model_free(m8);
        }
        /* heads of 64 (the attention with shares of the keys) and rows of 256 and 512 (the
         * int8 GEMMs' ring, and whole K super-blocks), in the int8 types, against the CPU
         * reference of the same weights */
        char path[] = "/tmp/er-test-wide-XXXXXX";
        const int fd = mkstemp(path);
        CHECK(fd >= 0, "mkstemp");
        static const char *const wide_types[] = {"Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K"};
        const int wide = fd >= 0 && write_wide_model(path);
        for (size_t ti = 0; wide && ti < sizeof wide_types / sizeof wide_types[0]; ti++) {
            er_model *wr = NULL, *wc = NULL;
            mp.type = wide_types[ti];
            mp.backend = ER_BACKEND_CPU;
            CHECK(er_model_load(path, &mp, &wr) == ER_OK, "load the wide model as %s: %s", mp.type, er_last_error());
            if (wr)
                test_invariance(wr, REFERENCE, NULL, reference_of);
            mp.backend = ER_BACKEND_CUDA;
            CHECK(er_model_load(path, &mp, &wc) == ER_OK, "load the wide model as %s on CUDA: %s", mp.type,
                  er_last_error());
#ifdef ER_HAVE_CUDA
            cuda_gemm_set_mmq(1);
#endif
            if (wr && wc)
                test_invariance(wc, CUDA, reference_of, NULL);
#ifdef ER_HAVE_CUDA
            cuda_gemm_set_mmq(-1);
#endif
            er_model_free(wr);
            er_model_free(wc);
        }
        if (fd >= 0) {
            close(fd);
            unlink(path);
        }
    }
    free(reference_of);
}
