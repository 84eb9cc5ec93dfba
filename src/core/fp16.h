/*
 * fp16.h - IEEE half and bfloat16 to and from float, in portable C.
 *
 * These are the reference conversions (exact for every input, subnormals, infinities
 * and NaN included); SIMD paths use F16C and are checked against them.
 */
#ifndef ER_CORE_FP16_H
#define ER_CORE_FP16_H

#include <stdint.h>
#include <string.h>

static inline float er_bits_to_f32(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint32_t er_f32_to_bits(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

static inline float er_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) /* inf or NaN: keep the payload */
        return er_bits_to_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return er_bits_to_f32(sign);
        /* subnormal half: value = man * 2^-24, exact in float */
        float f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    return er_bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* Round to nearest even, as the hardware conversion and numpy do. */
static inline uint16_t er_f32_to_f16(float f) {
    uint32_t x = er_f32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t abs = x & 0x7fffffffu;
    if (abs > 0x7f800000u) /* NaN: quiet, keep the top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
    if (abs >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (abs < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        /* adding 0.5 makes the FPU round the mantissa into the low bits (RNE) */
        float r = er_bits_to_f32(abs) + 0.5f;
        return (uint16_t)(sign | (er_f32_to_bits(r) - 0x3f000000u));
    }
    uint32_t odd = (abs >> 13) & 1u;
    abs += 0xc8000fffu + odd; /* rebias exponent (-112 << 23) and round */
    return (uint16_t)(sign | (abs >> 13));
}

/* n halves at src to floats, and n floats to halves at dst; either may sit at any
 * alignment (file data, KV cache rows): memcpy, not uint16_t loads. */
static inline void er_f16_row_to_f32(const void *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, (const uint8_t *)src + 2 * i, 2);
        dst[i] = er_f16_to_f32(h);
    }
}

static inline void er_f32_row_to_f16(const float *src, void *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const uint16_t h = er_f32_to_f16(src[i]);
        memcpy((uint8_t *)dst + 2 * i, &h, 2);
    }
}

static inline float er_bf16_to_f32(uint16_t h) { return er_bits_to_f32((uint32_t)h << 16); }

static inline uint16_t er_f32_to_bf16(float f) {
    uint32_t x = er_f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: force quiet */
        return (uint16_t)((x >> 16) | 64u);
    return (uint16_t)((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

#endif
