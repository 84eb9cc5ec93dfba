/*
 * rng.h - the sampler's random numbers: xoshiro256** (Blackman and Vigna), seeded by
 * splitmix64. Integer arithmetic only, so a seed gives the same stream on every platform;
 * er_rng_uniform() takes the top 53 bits: a double exactly k * 2^-53, k in [0, 2^53).
 */
#ifndef ER_SAMPLER_RNG_H
#define ER_SAMPLER_RNG_H

#include <stdint.h>

typedef struct er_rng {
    uint64_t s[4];
} er_rng;

void rng_seed(er_rng *rng, uint64_t seed);
uint64_t rng_next(er_rng *rng);
double rng_uniform(er_rng *rng); /* [0, 1) */

#endif
