/*
 * registry.c - which backends this build has: the one file that knows whether the CUDA
 * backend was compiled in (ER_HAVE_CUDA, set by the Makefile when nvcc is found).
 */
#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#ifdef ER_HAVE_CUDA
#include "backend/cuda/cuda.h"
#endif

const backend_ops *backend_get(enum backend_kind kind) {
    switch (kind) {
    case BACKEND_CPU_REFERENCE: return &cpu_reference_ops;
    case BACKEND_CPU: return &cpu_fast_ops;
#ifdef ER_HAVE_CUDA
    case BACKEND_CUDA: return &cuda_ops;
#else
    case BACKEND_CUDA: return NULL;
#endif
    }
    return NULL;
}

int er_cuda_available(void) {
    const backend_ops *cuda = backend_get(BACKEND_CUDA);
    return cuda && cuda->available();
}

const char *er_feature_name(unsigned feature) {
    switch (feature) {
    case ER_FEAT_QKV_BIAS: return "Q/K/V biases";
    case ER_FEAT_QK_NORM: return "Q/K norms";
    case ER_FEAT_POST_NORMS: return "post-attention and post-FFN norms";
    case ER_FEAT_GEGLU: return "GeGLU";
    case ER_FEAT_SLIDING_WINDOW: return "sliding-window attention";
    case ER_FEAT_EMBD_SCALE: return "scaled embeddings";
    case ER_FEAT_TIED_OUTPUT: return "an output head tied to the embeddings";
    }
    return "an unknown feature";
}
