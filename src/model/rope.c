/*
 * rope.c - the RoPE tables a context hands to its backend (model.h): built once per
 * context, so that the CPU reference, the fast path and the GPU rotate by the same
 * floats (and no backend computes angles of its own).
 */
#include <math.h>

#include "model/model.h"

void model_rope_table(const model_config *c, float base, float pos_scale, const float *freq_divisors, int64_t n_ctx,
                      float *cs) {
    const int64_t half = c->n_rot / 2;
    double inv_freq[512]; /* (half): the loader refuses n_rot > 1024 */
    for (int64_t i = 0; i < half; i++)
        inv_freq[i] = pow((double)base, -2.0 * (double)i / (double)c->n_rot);
    for (int64_t pos = 0; pos < n_ctx; pos++, cs += 2 * half)
        for (int64_t i = 0; i < half; i++) {
            /* angles in double: exact to float for any position */
            double theta = (double)pos * (double)pos_scale * inv_freq[i];
            if (freq_divisors)
                theta /= freq_divisors[i];
            cs[2 * i] = (float)cos(theta) * c->rope_attn_factor;
            cs[2 * i + 1] = (float)sin(theta) * c->rope_attn_factor;
        }
}
