/*
 * sampler.h - the sampler's state (public API and the order of its stages in
 * edgerunner.h). Everything is sized at creation: sampling a token allocates nothing.
 */
#ifndef ER_SAMPLER_SAMPLER_H
#define ER_SAMPLER_SAMPLER_H

#include <stdint.h>

#include "edgerunner.h"
#include "sampler/rng.h"

typedef struct sampler_cand {
    double p;      /* unnormalized probability, once computed */
    float logit;   /* after the penalties */
    int32_t id;
} sampler_cand;

struct er_sampler {
    er_sampler_params params;
    int64_t n_vocab;
    er_rng rng;
    int32_t *hist;      /* (params.repeat_last_n) ring of the last accepted tokens */
    int64_t n_hist;     /* tokens in the ring, <= repeat_last_n */
    int64_t hist_next;  /* where the next accepted token goes */
    int32_t *counts;    /* (n_vocab) all zero between calls: occurrences in the window */
    sampler_cand *cand; /* (n_vocab) candidates of the token being sampled */
};

#endif
