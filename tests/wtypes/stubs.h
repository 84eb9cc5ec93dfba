/* stubs.h - host stand-ins for the CUDA intrinsics that wtypes.cuh's device part uses, so
 * that check.cpp can run it on a machine without a GPU (run.sh). Each does what the PTX
 * instruction does on the values the kernels give it; not a general emulation. */
#include <stdint.h>
#include <string.h>
#include <math.h>
#include "core/fp16.h"
#define __device__
#define __host__
#define __forceinline__ inline
typedef struct { uint16_t x; } __half;
typedef struct { uint16_t x, y; } __half2;
struct uint4 { uint32_t x, y, z, w; };
struct float4 { float x, y, z, w; };
struct int4 { int x, y, z, w; };
struct float2 { float x, y; };
static inline float2 make_float2(float a, float b) { return {a, b}; }
static inline float __half2float(__half h) { return er_f16_to_f32(h.x); }
static inline __half __ushort_as_half(uint16_t u) { return {u}; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(uint32_t i) { float f; memcpy(&f, &i, 4); return f; }
static inline uint32_t __byte_perm(uint32_t a, uint32_t b, uint32_t s) {
    uint8_t bytes[8]; memcpy(bytes, &a, 4); memcpy(bytes + 4, &b, 4);
    uint32_t r = 0; for (int k = 0; k < 4; k++) r |= (uint32_t)bytes[(s >> (4 * k)) & 7] << (8 * k);
    return r;
}
static inline float2 __half22float2(__half2 h) { return {er_f16_to_f32(h.x), er_f16_to_f32(h.y)}; }
static inline uint16_t h_op(uint16_t a, uint16_t b, int mul) {
    const float x = er_f16_to_f32(a), y = er_f16_to_f32(b);
    return er_f32_to_f16(mul ? x * y : x - y); /* exact in float, then one rounding, as the device's F16 op */
}
static inline __half2 __hsub2(__half2 a, __half2 b) { return {h_op(a.x, b.x, 0), h_op(a.y, b.y, 0)}; }
static inline __half2 __hmul2(__half2 a, __half2 b) { return {h_op(a.x, b.x, 1), h_op(a.y, b.y, 1)}; }
static inline __half2 __half2half2(__half h) { return {h.x, h.x}; }
static inline __half2 __float2half2_rn(float f) { uint16_t h = er_f32_to_f16(f); return {h, h}; }
template <typename T> static inline T __ldg(const T *p) { return *p; }
static inline int __dp4a(int a, int b, int c) {
    for (int k = 0; k < 4; k++) c += (int8_t)(a >> (8 * k)) * (int8_t)(b >> (8 * k));
    return c;
}
/* dp4a.u32.s32: a's bytes unsigned, b's signed (common.cuh's dp4a_us) */
static inline int dp4a_us(uint32_t a, int b, int c) {
    for (int k = 0; k < 4; k++) c += (int)((a >> (8 * k)) & 0xffu) * (int8_t)(b >> (8 * k));
    return c;
}
/* per-byte subtraction, each byte modulo 256 (as the device's) */
static inline uint32_t __vsub4(uint32_t a, uint32_t b) {
    uint32_t r = 0;
    for (int k = 0; k < 4; k++) r |= (((a >> (8 * k)) - (b >> (8 * k))) & 0xffu) << (8 * k);
    return r;
}
static inline float dot4(float4 a, float b0, float b1, float b2, float b3) { return fmaf(a.x, b0, fmaf(a.y, b1, fmaf(a.z, b2, a.w * b3))); }
static inline uint32_t half2_bits(float lo, float hi) { return (uint32_t)er_f32_to_f16(lo) | (uint32_t)er_f32_to_f16(hi) << 16; }
