/*
 * cuda.h - the CUDA backend as the model layer sees it (plain C).
 *
 * A cuda_model holds the weights on the device (uploaded once, Q8_0 repacked); a
 * cuda_context holds the KV cache, the scratch, a stream and the captured graph of
 * one decode step. The greedy loop runs on the device: each step's argmax becomes the
 * next step's input without a round trip; only ids come back.
 */
#ifndef ER_BACKEND_CUDA_CUDA_H
#define ER_BACKEND_CUDA_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "edgerunner.h"

struct er_model;
typedef struct cuda_model cuda_model;
typedef struct cuda_context cuda_context;

er_status cuda_model_create(const struct er_model *model, cuda_model **out);
void cuda_model_free(cuda_model *cm);
size_t cuda_model_weight_bytes(const cuda_model *cm);

er_status cuda_context_create(cuda_model *cm, int64_t n_ctx, int64_t n_batch, cuda_context **out);
void cuda_context_free(cuda_context *cc);

/* Feeds n tokens at positions n_past.. . logits_all (host, (n, n_vocab)) when not NULL;
 * the last token's logits go to logits_last (host, n_vocab) and its argmax stays on
 * the device for cuda_generate. */
er_status cuda_decode(cuda_context *cc, const int32_t *tokens, int64_t n, int64_t n_past, float *logits_all,
                      float *logits_last);

/* The argmax of the last logits computed (by cuda_decode or a previous call) is token
 * 0; then n_steps steps, each feeding the previous token at pos_last_fed + 1, + 2, ...
 * and producing the next. ids (host, n_steps + 1) receives the tokens. Synchronises
 * once, at the end. */
er_status cuda_generate(cuda_context *cc, int64_t pos_last_fed, int64_t n_steps, int32_t *ids);

/* The logits (n_vocab) of the last step run, to host. */
er_status cuda_read_logits(cuda_context *cc, float *logits);

/* Times one decode step at position pos, kernel by kernel (queued behind a spin so
 * that the events time the GPU, not the launches) and as the graph, over `reps`
 * repetitions; writes a text table with achieved GB/s per weight kernel. */
er_status cuda_profile_step(cuda_context *cc, int64_t pos, int reps, char *report, size_t cap);

/* Times a prefill of tokens (n_tokens <= the context's batch) at position 0, kernel by
 * kernel and as it runs, over `reps` repetitions; writes a text table. Overwrites the
 * cache. */
er_status cuda_profile_prefill(cuda_context *cc, const int32_t *tokens, int64_t n_tokens, int reps, char *report,
                               size_t cap);

/* Bytes of device memory in use right now (cudaMemGetInfo), and the peak this process
 * has seen through the backend's own accounting. */
size_t cuda_device_bytes_in_use(void);

#endif
