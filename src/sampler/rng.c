/* rng.c - xoshiro256** seeded by splitmix64 (see rng.h). */
#include "sampler/rng.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void rng_seed(er_rng *rng, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64(&x); /* never all zero: splitmix64 is a bijection of distinct inputs */
}

uint64_t rng_next(er_rng *rng) {
    uint64_t *s = rng->s;
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rng_uniform(er_rng *rng) { return (double)(rng_next(rng) >> 11) * 0x1.0p-53; }
