/*
 * profile.h - development only: kernel-by-kernel timing of the CUDA backend for
 * `bench --profile` (backend_ops.profile). Not part of the forward pass: it captures
 * the step and the prefill into graphs as they run and times their kernels one by one.
 */
#ifndef ER_BACKEND_CUDA_PROFILE_H
#define ER_BACKEND_CUDA_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "edgerunner.h"

/* Times the decode step at position pos (the graph, the host's view of it, and each
 * kernel alone) and, when n_tokens > 0, a prefill of tokens at position 0 (which
 * overwrites the cache); writes text tables into report. */
er_status cuda_profile(void *ctx, int64_t pos, const int32_t *tokens, int64_t n_tokens, char *report, size_t cap);

#endif
