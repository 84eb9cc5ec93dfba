/*
 * cuda.h - the CUDA backend as the registry sees it: one ops table (backend.h). Its
 * files: upload.c (weights to the device), context.c, step.c (the forward pass: the
 * captured decode step and the prefill), generate.c (the greedy loop on the device),
 * profile.c (development only), and the kernels in the .cu files (kernels.h).
 */
#ifndef ER_BACKEND_CUDA_CUDA_H
#define ER_BACKEND_CUDA_CUDA_H

#include "backend/backend.h"

extern const backend_ops cuda_ops;

#endif
