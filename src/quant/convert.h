/*
 * convert.h - a model's tensors converted to a quantize target (mix.h): which type each
 * tensor gets (quant_plan) and the rows converted (quant_convert_rows). One path for
 * `edgerunner quantize` / `convert`, which write the result to a file, and for
 * er_model_params.type, which quantizes while loading: the same plan on the same rows
 * gives the same bytes.
 */
#ifndef ER_QUANT_CONVERT_H
#define ER_QUANT_CONVERT_H

#include <stdint.h>

#include "io/gguf.h"
#include "quant/mix.h"
#include "quant/types.h"

enum { QUANT_MAX_THREADS = 64 };

/* The type of every tensor of `f` under `mix` into types (f->n_tensors); *n_fallback
 * (may be NULL) counts the weights whose row length forced a fallback type. A tensor that
 * changes type must be convertible, and must be F32, F16 or BF16 unless allow_requant (as
 * llama.cpp: quantizing twice compounds the error); else an error naming `path` and the
 * tensor. */
er_status quant_plan(const gguf_file *f, const quant_mix *mix, int allow_requant, const char *path, uint32_t *types,
                     int *n_fallback);

/* n_rows rows of n_per_row elements from type `from` (in) to type `to` (out): each row to
 * F32, then the type's reference quantizer, on up to n_threads threads (at most
 * QUANT_MAX_THREADS). Returns 0 when out of memory. */
int quant_convert_rows(const er_type_traits *from, const er_type_traits *to, const uint8_t *in, uint8_t *out,
                       int64_t n_per_row, int64_t n_rows, int n_threads);

#endif
