/*
 * kernels.h - C launchers of the CUDA kernels (defined in the .cu files beside this).
 *
 * Every launcher enqueues on `stream` and returns at once; none synchronises, so the
 * whole decode step can be captured in one CUDA graph. Positions and token ids live in
 * device memory (cuda_step_state) so that one captured step serves every position.
 *
 * The weights' layout on the device (made once at upload) is that of their type, each
 * described in wtypes.cuh: quants w (n_out, cuda_row_bytes) and, for the types with
 * scales, d (n_out, cuda_scale_row_bytes).
 */
#ifndef ER_BACKEND_CUDA_KERNELS_H
#define ER_BACKEND_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/wtypes.cuh"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuda_weight {
    int type;           /* enum cuda_wtype */
    int64_t n_in;
    int64_t n_out;
    void *w;            /* (n_out, cuda_row_bytes(type, n_in)) bytes: the quants, or the elements */
    void *d;            /* (n_out, cuda_scale_row_bytes(type, n_in)) bytes: the scales, or NULL */
    /* The next rows of a stacked matrix whose parts have different types (a Q4_K_M file's
     * Q6_K attn_v under Q4_K attn_q and attn_k), or NULL: cuda_matvec (MV_STORE, MV_ADD,
     * MV_NORM_STORE) and cuda_gemm run each part into its rows of y. Host memory. */
    const struct cuda_weight *next;
} cuda_weight;

/* Device-resident state of the decode loop. */
typedef struct cuda_step_state {
    unsigned long long argmax_key; /* (ordered logit << 32) | (0xffffffff - token): max wins */
    int32_t token;                 /* the token the next step feeds */
    int32_t pos;                   /* its position */
    int32_t n_out;                 /* tokens written to out_ids */
} cuda_step_state;

/* What a matvec does before and after its dot products. */
enum cuda_matvec_mode {
    MV_STORE = 0,       /* y = W x */
    MV_ADD = 1,         /* y += W x (residual) */
    MV_NORM_STORE = 2,  /* y = W rmsnorm(x) */
    MV_NORM_SWIGLU = 3, /* y[i] = silu(W[i] xn) * W[n_out/2 + i] xn, xn = rmsnorm(x); y has n_out/2 */
    MV_NORM_ARGMAX = 4, /* y = W rmsnorm(x), and the argmax folded into state->argmax_key */
    MV_NORM_GEGLU = 5,  /* MV_NORM_SWIGLU with gelu (tanh approximation, cpu_geglu) for silu: Gemma-3 */
    /* The handoff of a gated FFN's hidden vector already quantized (cuda_matvec_q8_handoff):
     * gate|up stores y as the int8 input of down's matvec (cuda_q8_handoff_bytes), which
     * down then copies instead of quantizing it. */
    MV_NORM_SWIGLU_Q8 = 6, /* MV_NORM_SWIGLU, y quantized for MV_ADD_Q8 of the same weight type */
    MV_ADD_Q8 = 7,         /* MV_ADD, x quantized by MV_NORM_SWIGLU_Q8 */
};

/* One token: y (n_out, or n_out/2 for the gated modes) from x (n_in). norm_w (n_in) for the NORM modes. */
/* A stacked matrix of several types (w->next): rows of each part into their rows of y;
 * cudaErrorInvalidValue for MV_NORM_SWIGLU, MV_NORM_GEGLU and MV_NORM_ARGMAX, whose rows
 * pair up or compete across the parts. */
cudaError_t cuda_matvec(const cuda_weight *w, int mode, const float *x, const float *norm_w, float eps,
                        float *y, cuda_step_state *state, cudaStream_t stream);
/* Matrices of more than `bytes` take the streaming kernel (matvec.cu); 0 restores the
 * default (one slice per multiprocessor too large for shared memory, 64 KB; 120K weights
 * for the types of cuda_wtype_int8_dot while int8 is on). For the unit tests, which run every
 * shape both ways. */
void cuda_matvec_set_stream_min(size_t bytes);
/* Tests: 3 forces three rows a warp and pass on every ungated streamed matrix of int8
 * input (k_matvec_stream), 0 two, 1 the rule (matvec.cu), -1 EDGERUNNER_CUDA_STREAM_R3. */
void cuda_matvec_set_stream_rows(int mode);
/* Tests: 1 sends the streamed Q8_0/Q4_0 matrices of int8 input whose rows are whole steps
 * of 32 chunks to k_matvec_ring where its shared memory fits (not Q4_0 at 3 rows a pass:
 * matvec.cu's ring_takes), 0 to k_matvec_stream, -1 the default (the ring unless
 * EDGERUNNER_CUDA_RING=0). */
void cuda_matvec_set_ring(int on);
/* Tests: 0 has k_matvec_ring take one 16-byte unit of each row a lane and step everywhere,
 * 1 two where the rows are whole steps of them (matvec.cu's ring_units), -1 the default
 * (two unless EDGERUNNER_CUDA_RING_WIDE=0). */
void cuda_matvec_set_ring_wide(int on);
/* Whether the matvecs of the types of cuda_wtype_int8_dot (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K; the
 * K types also unless EDGERUNNER_CUDA_MV_INT8_K=0) may multiply the input
 * quantized to int8 per block of 32 (d = max |x| / 127, q = round(x / d), as the batch
 * GEMM's int8 tensor cores and the CPU fast path quantize it) instead of in f32: yes
 * unless EDGERUNNER_CUDA_MV_INT8=0 (read once); cuda_matvec_set_int8 overrides it (the
 * unit tests run both; a decode step graph keeps what it was captured with), on < 0 goes
 * back to the default. */
void cuda_matvec_set_int8(int on);
int cuda_matvec_int8(void);
/* Whether w's matvec in this mode (enum cuda_matvec_mode) takes the int8 input: where
 * cuda_matvec_int8 allows it, the head and every matrix large enough to stream
 * (matvec.cu says why). */
int cuda_matvec_takes_int8(const cuda_weight *w, int mode);
/* Whether w's matvec in this mode streams through k_matvec_ring (on 16-byte aligned
 * buffers, as the step's). */
int cuda_matvec_takes_ring(const cuda_weight *w, int mode);
/* Whether a layer's gate|up (SwiGLU) and down hand the hidden vector over quantized
 * (MV_NORM_SWIGLU_Q8 then MV_ADD_Q8): while it is on (by default; off with
 * EDGERUNNER_CUDA_Q8_HANDOFF=0 or cuda_matvec_set_q8_handoff), where both take
 * k_matvec_ring, in one type, and gate|up's blocks own whole blocks of 32 outputs
 * without a pass more than its rows take (matvec.cu). */
int cuda_matvec_q8_handoff(const cuda_weight *gate_up, const cuda_weight *down);
/* Tests: 1 turns the quantized handoff on, 0 off, -1 back to EDGERUNNER_CUDA_Q8_HANDOFF. */
void cuda_matvec_set_q8_handoff(int on);
/* Bytes of the quantized hidden vector of n elements (a multiple of 32): n int8 and n / 32
 * blocks, as down's matvec stages its input, 16-byte aligned. */
size_t cuda_q8_handoff_bytes(int64_t n);

/* x (n_embd) = row state->token of the embedding matrix times scale (Gemma-3's
 * embd_scale, else 1); resets the argmax key. */
cudaError_t cuda_embed_state(const cuda_weight *embd, float scale, cuda_step_state *state, float *x,
                             cudaStream_t stream);
/* x (n_tokens, n_embd) = rows tokens[i] (device array) times scale */
cudaError_t cuda_embed_tokens(const cuda_weight *embd, float scale, const int32_t *tokens, int n_tokens, float *x,
                              cudaStream_t stream);

/* Busy-waits about `ns` nanoseconds on the device: lets the host queue up what follows,
 * so that events around later kernels time the kernels, not the launches. */
cudaError_t cuda_spin(long long ns, cudaStream_t stream);

/* After the output head: token = argmax, out_ids[n_out++] = token, pos++. */
cudaError_t cuda_commit(cuda_step_state *state, int32_t *out_ids, cudaStream_t stream);

/* The KV cache's element types (-ctk/-ctv; K and V of a context have the same one). One
 * layer's K or V cache, n_ctx rows of kv_dim = n_head_kv * head_dim elements, is
 *   CUDA_KV_F32   (n_ctx, kv_dim) float
 *   CUDA_KV_F16   (n_ctx, kv_dim) half: each element rounded to nearest even, 2^-11
 *                 relative at most (as the CPU fast path's F16 cache and llama.cpp's)
 *   CUDA_KV_Q8_0  (n_ctx, kv_dim) int8 quants, then (n_ctx, kv_dim / 32) half scales:
 *                 llama.cpp's block_q8_0 values (32 consecutive elements of a head share
 *                 d = amax / 127; q = round(x / d)), each element within d / 2 = amax / 254
 *                 of its value; scales apart from the quants so that every load is
 *                 aligned. Needs head_dim % 32 == 0.
 * The values are those of the CPU's caches of the same type (from_f32_q8_0_ref), so that
 * both backends attend over the same numbers. */
enum cuda_kv_type { CUDA_KV_F32 = 0, CUDA_KV_F16 = 1, CUDA_KV_Q8_0 = 2 };

/* Bytes of n elements of a cache of kv_type: their values, and (Q8_0) their scales */
static inline size_t cuda_kv_value_bytes(int kv_type, size_t n) {
    return kv_type == CUDA_KV_F32 ? 4 * n : kv_type == CUDA_KV_F16 ? 2 * n : n;
}
static inline size_t cuda_kv_scale_bytes(int kv_type, size_t n) { return kv_type == CUDA_KV_Q8_0 ? n / 32 * 2 : 0; }

/* Bytes of one layer's K or V cache (see enum cuda_kv_type), rounded up to 256 so that
 * every layer starts aligned (a Q8_0 layer of n elements has 17 n / 16 bytes). */
static inline size_t cuda_kv_layer_bytes(int kv_type, int64_t n_ctx, int64_t kv_dim) {
    const size_t n = (size_t)n_ctx * (size_t)kv_dim;
    return (cuda_kv_value_bytes(kv_type, n) + cuda_kv_scale_bytes(kv_type, n) + 255) & ~(size_t)255;
}

typedef struct cuda_attn_params {
    int n_head, n_head_kv, head_dim, head_dim_v, n_rot, rope_neox;
    float eps;
    const float *q_norm, *k_norm; /* (head_dim) each, or NULL */
    const float2 *rope_cs;        /* (n_ctx, n_rot / 2) cos and sin of every angle */
    int64_t n_ctx;
    int window; /* sliding window: the token at pos attends to rows max(0, pos - window + 1) .. pos
                 * (cpu_attention_window); 0: every row 0..pos */
    const float *qkv_bias; /* (n_head*hd + 2*n_head_kv*hd) Qwen2's Q|K|V biases, added to qkv before the
                            * norms and RoPE (as cpu_forward), or NULL */
    int kv_type;           /* enum cuda_kv_type of both caches; their layout needs n_ctx above */
} cuda_attn_params;

/* Decode, fused: from qkv (n_head*hd + 2*n_head_kv*hd) of the token at state->pos:
 * the Q/K/V biases, Q/K RMSNorm, RoPE, K/V written to the caches (one layer's, in
 * p->kv_type) at pos, then
 * attention over j0..pos (j0 = max(0, pos - window + 1), or 0 without a window) by a
 * cluster of 8 blocks per head; the result into out (n_head * head_dim_v). */
cudaError_t cuda_attention_decode(const cuda_attn_params *p, const float *qkv, void *k_cache, void *v_cache,
                                  const cuda_step_state *state, float *out, cudaStream_t stream);
/* Decode over a long context (flash-decoding): what cuda_attention_decode does, by
 * n_split blocks per head, each over its share of the keys, their states into
 * part (n_head, n_split, head_dim + 2) floats, merged into out by a second kernel. */
cudaError_t cuda_attention_decode_split(const cuda_attn_params *p, const float *qkv, void *k_cache, void *v_cache,
                                        const cuda_step_state *state, float *part, int n_split, float *out,
                                        cudaStream_t stream);
/* The most blocks per head cuda_attention_decode_split takes. */
enum { CUDA_ATT_SPLIT_MAX = 128 };
/* Blocks per head for cuda_attention_decode_split: as many as are resident on the device
 * at once, in [1, CUDA_ATT_SPLIT_MAX]. */
int cuda_attention_split_count(const cuda_attn_params *p);

/* Prefill: qkv (n_tokens, q + 2 kv) of tokens at pos0.. : biases + Q/K norm + RoPE in
 * place on q, K/V (with their biases) to the caches. */
cudaError_t cuda_qk_rope_store(const cuda_attn_params *p, float *qkv, int n_tokens, int pos0, void *k_cache,
                               void *v_cache, cudaStream_t stream);
/* Prefill attention: out (n_tokens, n_head * head_dim_v) f16 (the next GEMM's input),
 * token t at pos0 + t attends to cache rows 0..pos0+t, or with a window to rows
 * max(0, pos0 + t - window + 1) .. pos0 + t; q read from qkv (already normed and rotated). */
cudaError_t cuda_attention_prefill(const cuda_attn_params *p, const float *qkv, int n_tokens, int pos0,
                                   const void *k_cache, const void *v_cache, uint16_t *out, cudaStream_t stream);

/* Where the tokens of a batch of several sequences go (decode_batch): token t is at
 * position pos[t] of sequence seq[t], whose rows of a layer's cache begin seq_bytes *
 * seq[t] bytes after the layer's (each sequence's rows laid out as one context's). */
typedef struct cuda_batch_rows {
    const int32_t *pos; /* (n_tokens) device */
    const int32_t *seq; /* (n_tokens) device */
    size_t seq_bytes;
} cuda_batch_rows;

/* cuda_qk_rope_store for a batch of several sequences (br): each token at its own
 * position, its K and V into its sequence's rows of the layer's caches. */
cudaError_t cuda_qk_rope_store_batch(const cuda_attn_params *p, float *qkv, int n_tokens, const cuda_batch_rows *br,
                                     void *k_cache, void *v_cache, cudaStream_t stream);
/* The batch attention's scratch: the states of each share of a query's keys, for up to
 * CUDA_ATT_BATCH_TOKENS tokens a launch (cuda_attention_batch_part_floats of them), and a
 * ticket per token and KV head, (CUDA_ATT_BATCH_TOKENS, n_head_kv) zeroed once (each
 * launch leaves them 0). */
enum { CUDA_ATT_BATCH_TOKENS = 128, CUDA_ATT_BATCH_SPLIT = 16 };
typedef struct cuda_attn_scratch {
    float *part;          /* (CUDA_ATT_BATCH_TOKENS, n_head, CUDA_ATT_BATCH_SPLIT, head_dim + 2) */
    unsigned int *ticket; /* (CUDA_ATT_BATCH_TOKENS, n_head_kv) */
} cuda_attn_scratch;
/* Floats of cuda_attn_scratch.part for these heads; 0 where cuda_attention_batch takes
 * a block per query head and needs no scratch (caches other than F16, heads other than
 * 64, 128 or 256 dims, more than 8 query heads per KV head). */
size_t cuda_attention_batch_part_floats(const cuda_attn_params *p);
/* Attention of a batch of several sequences: out (n_tokens, n_head * head_dim_v) f16,
 * token t over rows 0..br->pos[t] (or its window) of sequence br->seq[t], whose sums run
 * in one order whatever else the batch holds (batch invariance). With scratch (part and
 * ticket) where cuda_attention_batch_part_floats allows it, a block per KV head of a token
 * and share of its keys (the shares fixed by its key count), K and V read once for the
 * heads that share them; else (scratch NULL) a block per query head, a key per warp at a
 * time. */
cudaError_t cuda_attention_batch(const cuda_attn_params *p, const float *qkv, int n_tokens, const cuda_batch_rows *br,
                                 const void *k_cache, const void *v_cache, uint16_t *out,
                                 const cuda_attn_scratch *scratch, cudaStream_t stream);

/* y (n_rows, n) f16 = rmsnorm(x) * w */
cudaError_t cuda_rmsnorm(const float *x, const float *w, int n_rows, int n, float eps, uint16_t *y,
                         cudaStream_t stream);
/* y (n_rows, n) f16 = rmsnorm(x[rows[i]]) * w: the rows of x (device indices) gathered */
cudaError_t cuda_rmsnorm_rows(const float *x, const int32_t *rows, const float *w, int n_rows, int n, float eps,
                              uint16_t *y, cudaStream_t stream);
/* y (n_rows, n_ff) f16 = act(gu[:, :n_ff]) * gu[:, n_ff:] for gu (n_rows, 2 n_ff): act is
 * silu (SwiGLU), or with `gelu` GELU's tanh approximation (GeGLU, Gemma-3) */
cudaError_t cuda_glu(const float *gu, int n_rows, int n_ff, int gelu, uint16_t *y, cudaStream_t stream);
/* x (n_rows, n) += rmsnorm(y) * w for y (n_rows, n): Gemma-3's post-norms, the attention's
 * or the FFN's output normalized before the residual add (decode: n_rows = 1, in the
 * step graph: it waits for the previous kernel as the matvecs do) */
cudaError_t cuda_add_rmsnorm(const float *y, const float *w, int n_rows, int n, float eps, float *x,
                             cudaStream_t stream);
/* Prefill GEMM on the tensor cores: y (n_tokens, ldy)[:, :n_out] = x (n_tokens, n_in) f16
 * . w^T, or += it when accumulate; w's elements are rounded to F16, sums are F32. */
cudaError_t cuda_gemm(const cuda_weight *w, const uint16_t *x, int n_tokens, float *y, int64_t ldy, int accumulate,
                      cudaStream_t stream);
/* cuda_gemm on Hopper's warpgroup tensor cores (gemm_wg.cu), for one part of w (w->next
 * is not followed), block_tokens (128 or 256) tokens a block: the same F16 weights and F32
 * sums, summed in another order. Only where cuda_gemm_wg_fits (Q8_0, Q4_0, Q4_K, Q5_K or
 * Q6_K, n_in a multiple of 64 and of the type's block, n_out of 128, a build for sm_90a).
 * cuda_gemm takes it where cuda_gemm_wg_tokens gives a block's tokens (0: it does not fit,
 * or fewer than CUDA_GEMM_WG_MIN_TOKENS tokens). */
enum { CUDA_GEMM_WG_MIN_TOKENS = 65 };
int cuda_gemm_wg_fits(const cuda_weight *w, int n_tokens);
int cuda_gemm_wg_tokens(const cuda_weight *w, int n_tokens);
cudaError_t cuda_gemm_wg(const cuda_weight *w, const uint16_t *x, int n_tokens, float *y, int64_t ldy, int accumulate,
                         int block_tokens, cudaStream_t stream);
/* The prefill's choice (tests, measurements): 0 never the warpgroup GEMM, 1 where
 * cuda_gemm_wg_tokens says, 128 or 256: wherever it fits, that many tokens a block; -1 as
 * EDGERUNNER_CUDA_WGMMA says (the same values; unset: 1). */
void cuda_gemm_set_wg(int mode);
/* What a batch GEMM works in (device memory): the shares of K of cuda_gemm_split_count
 * (part, for at least one token; larger batches go through in passes), and for the int8
 * tensor cores the batch's input quantized beforehand (xq: n_tokens n_in int8, then
 * n_tokens n_in / 32 float scales), or NULL (quantized inside the GEMM). */
typedef struct cuda_gemm_scratch {
    float *part;
    size_t part_floats;
    void *xq;
    size_t xq_bytes;
} cuda_gemm_scratch;
/* Bytes of cuda_gemm_scratch.xq for n_tokens of n_in elements: a block of 32's quants,
 * scale and sum (cuda_quantize_x). */
static inline size_t cuda_gemm_xq_bytes(int64_t n_tokens, int64_t n_in) { return (size_t)(n_tokens * n_in / 32 * 40); }
/* cuda_gemm for a batch of several sequences' tokens: K split into the shares of
 * cuda_gemm_split_count(w), each share's sums into s->part, then added in share order, so
 * that a token's row of y is the same whatever else the batch holds, and a batch of a
 * few tokens still keeps every SM busy (without a split: one block per 64 rows, each
 * over all of K). */
cudaError_t cuda_gemm_batch(const cuda_weight *w, const uint16_t *x, int n_tokens, float *y, int64_t ldy,
                            int accumulate, const cuda_gemm_scratch *s, cudaStream_t stream);
/* What cuda_gemm_batch_epi makes of a batch's product P (n_tokens, n) of w (n: every
 * part's rows), once the shares of K are summed in order (as cuda_gemm_batch sums them):
 * a fused epilogue saves a kernel and the gap before it. Each is one fixed computation
 * per token, whatever the batch (the NORM's sum of squares is reduced over up to 1,024
 * threads, not cuda_rmsnorm's 256: a batch takes it for every token or for none). */
enum cuda_gemm_epi_kind {
    CUDA_EPI_STORE = 0, /* y (n_tokens, ldy) (+)= P, as cuda_gemm_batch */
    CUDA_EPI_GLU = 1,   /* h (n_tokens, n / 2) f16 = act(P[:, :n/2]) * P[:, n/2:] (gelu: GELU, else SiLU) */
    CUDA_EPI_NORM = 2   /* the residual y (n_tokens, n) += P, then h (n_tokens, n) f16 = rmsnorm(y) * norm_w;
                         * ldy == n, where cuda_gemm_epi_norm_fits(n) */
};
int cuda_gemm_epi_norm_fits(int64_t n);
typedef struct cuda_gemm_epi {
    int kind; /* enum cuda_gemm_epi_kind */
    float *y;
    int64_t ldy;
    int accumulate;
    const float *norm_w; /* (n) */
    float eps;
    int gelu;
    uint16_t *h;
} cuda_gemm_epi;
cudaError_t cuda_gemm_batch_epi(const cuda_weight *w, const uint16_t *x, int n_tokens, const cuda_gemm_epi *ep,
                                const cuda_gemm_scratch *s, cudaStream_t stream);
/* The shares of K for cuda_gemm_batch, from w's shape only (1: no split). */
int cuda_gemm_split_count(const cuda_weight *w);
/* Whether cuda_gemm_batch runs the types of cuda_wtype_int8_mma on the int8 tensor cores
 * (their inputs quantized per block of 32, as the CPU's dot) instead of F16 tiles: yes
 * unless EDGERUNNER_CUDA_MMQ=0; on < 0 goes back to that default. */
void cuda_gemm_set_mmq(int on);
/* Which batches of the int8 types take mmq.cu's few-token kernel rather than its ring (the
 * same bits): by type and size (max_t < 0, the default unless EDGERUNNER_CUDA_MMQ_FEW), else
 * those of up to max_t tokens (at most 4) of every type and size. */
void cuda_mmq_set_few(int max_t);
/* The int8 part of cuda_gemm_batch (mmq.cu): y (T, ldy) (+)= x w^T for n_split = 1, else
 * the sums of the n_split shares of K into as many planes of (T, ldy) floats at y. x
 * (T, n_in) F16, or its quants xq (T, n_in), scales xd and sums xs (T, n_in / 32) from
 * cuda_quantize_x (all NULL: quantized inside). */
cudaError_t cuda_mmq_tiles(const cuda_weight *w, const uint16_t *x, const int8_t *xq, const float *xd, const float *xs,
                           int T, float *y, int64_t ldy, int accumulate, int n_split, cudaStream_t stream);
/* Whether a batch of n_tokens is better quantized once before its int8 GEMMs. */
int cuda_mmq_prequantize(int n_tokens);
/* xq (n_tokens, K) int8, xd and xs (n_tokens, K / 32) float: x (n_tokens, K) F16 quantized
 * per block of 32 as the int8 GEMM quantizes inside, each block's scale d and its sum as
 * quantized (d times the sum of its quants: the offsets of Q4_K and Q5_K multiply it). */
cudaError_t cuda_quantize_x(const uint16_t *x, int n_tokens, int64_t K, int8_t *xq, float *xd, float *xs,
                            cudaStream_t stream);
/* The upload's repack on the device, for the types with cuda_wtype_repack_bytes > 0:
 * raw GGUF blocks (n_rows * n_in / block, of that many bytes each) -> the device layout,
 * quants qs and scales d. cudaErrorInvalidValue for the other types (a plain copy). */
cudaError_t cuda_repack(int type, const void *blocks, int64_t n_rows, int64_t n_in, uint8_t *qs, void *d,
                        cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
