/*
 * x86.h - the instruction sets the CPU fast path compiles for through target attributes
 * (no global -mavx2: one binary runs on any x86-64), and whether this CPU has them.
 * Internal to src/backend/cpu. CPU_X86 is 0 where these do not exist (another
 * architecture or compiler): the CPU has none of them, the fast path uses plain C.
 */
#ifndef ER_BACKEND_CPU_X86_H
#define ER_BACKEND_CPU_X86_H

/* The widest instruction set the CPU kernels may use, from EDGERUNNER_CPU_ISA (read once):
 * "avx2" (no AVX-512 VNNI) or "c" (plain C) run an older CPU's kernels on this one, to
 * compare them; unset or anything else, what the CPU has. */
enum { CPU_ISA_C, CPU_ISA_AVX2, CPU_ISA_VNNI };
int cpu_isa_limit(void);

#if defined(__x86_64__) && defined(__GNUC__)

#define CPU_X86 1

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define INLINE inline __attribute__((always_inline))

/* AVX2 with FMA and F16C: what every AVX2 kernel assumes */
static inline int cpu_has_avx2(void) {
    return cpu_isa_limit() >= CPU_ISA_AVX2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}

/* AVX-512 VNNI with the F, BW and VL subsets it is used with, on top of AVX2 */
static inline int cpu_has_vnni(void) {
    return cpu_isa_limit() >= CPU_ISA_VNNI && cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vnni");
}

#else

#define CPU_X86 0

static inline int cpu_has_avx2(void) { return 0; }
static inline int cpu_has_vnni(void) { return 0; }

#endif

#endif
