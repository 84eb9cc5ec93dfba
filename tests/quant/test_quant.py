#!/usr/bin/env python3
"""Oracle tests of the quantized types, the quantizer and `edgerunner quantize`.

Usage: $PY tests/quant/test_quant.py BUILD_DIR      (PY=$(tests/oracle/venv.sh)/bin/python)
Needs BUILD_DIR/edgerunner and BUILD_DIR/tests/quant_tool (make all). Prints one line per
check, then "N passed, M failed" (exit 0 iff M == 0).

Oracles: the gguf package (numpy dequantization and Q8_0 quantization, written by the
llama.cpp authors), and llama.cpp itself through llama-cpp-python: ggml's C quantizer and
dequantizer (libggml-base, through ctypes), llama.cpp's model quantizer (llama_model_quantize,
for which type each tensor gets) and its inference (greedy ids and logits on our files).

Checks:
  dequant   our dequantization == numpy's == ggml's, bit for bit, for every type, on blocks
            from our quantizer, random blocks with scales over the whole f16 range
            (0, +-smallest subnormal, smallest normal, 65504, inf, NaN) and all-min/all-max
            codes (NaN compared as NaN).
  q8_0      our Q8_0 quantizer == the gguf package's, byte for byte.
  act       the CPU fast path's activation quantizers (Q8_0, Q8_1, Q8_K; scalar and AVX2) ==
            the function llama.cpp's CPU backend calls for them (ggml-cpu's type traits'
            from_float: on x86 the AVX2 quantize_row_q8_0/_q8_1, which round half to even and
            multiply by 127/amax, unlike ggml's reference; quantize_row_q8_K_ref for Q8_K),
            byte for byte, on exact .5 ties, near ties (k * d / 2), zeros, negative maxima,
            extremes, infinities and subnormals; and the data tells rounding rules apart.
  dot       our AVX2 dot products on those activations == llama.cpp's vec_dot, bit for bit for
            the 32-element types (same integer sums, same float order); the K types within
            1e-6 of max |dot| (their float order differs).
  rms       quantize -> dequantize of N(0, 1) data: RMS error ours vs ggml's quantizer (and
            the gguf package's where it has one); ours must be no worse, per type.
  types     `edgerunner quantize` picks, tensor by tensor, the type llama.cpp's quantizer picks
            (pure single types, and the Q4_K_M/Q4_K_S/Q5_K_M/Q5_K_S mixes; with fallbacks).
  metadata  every metadata pair is copied (nested arrays, all value types), file_type and
            quantization_version set as llama.cpp sets them; the file parses with gguf-py.
  weights   RMS error of each quantized file's weights vs the F32 originals: ours vs llama.cpp's
            file of the same type (no worse).
  run       our engine runs every quantized file; llama.cpp loads it and its prompt logits agree
            with ours (bound per type: llama.cpp rounds activations to F16/BF16/8 bits; a
            misread layout gives errors of order 1); greedy ids: equal to ours over 16 tokens
            where both compute the same function (F32), agreement reported for the others
            (on 8-bit activations a single flipped code, after an ulp of difference in another
            op, makes a new draw of the rounding noise: qwen3 Q8_0, bit for bit through
            position 17, diverges at step 6 where llama.cpp's margin is 0.19).
  run-avx2  the Q4_0, Q4_1 and K-quant files' prompt logits again on the AVX2 kernels
            (EDGERUNNER_CPU_ISA=avx2, what a CPU without AVX-512 VNNI runs): within the run
            bound of llama.cpp's.
  info      `edgerunner info` reports the type mix and bits per weight of a mixed file.
"""
import ctypes
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
sys.dont_write_bytecode = True

import gguf  # noqa: E402
from gguf import GGMLQuantizationType as QT, GGML_QUANT_SIZES  # noqa: E402

import models  # noqa: E402
import test_oracles as oracle  # noqa: E402  (llama.cpp helpers and the engine runner)

QUANT_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
# byte offsets of the f16 scales in a block (random bytes elsewhere are valid codes)
SCALE_OFFSETS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q2_K": [80, 82],
                 "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}
SPECIAL_F16 = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x8400, 0x3C00, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00]

# file targets: (name, llama.cpp ftype, pure)
TARGETS = [("F32", 0, True), ("F16", 1, True), ("BF16", 32, True), ("Q8_0", 7, True), ("Q4_0", 2, True),
           ("Q4_1", 3, True), ("Q5_0", 8, True), ("Q5_1", 9, True), ("Q2_K", 10, True), ("Q3_K", 12, True),
           ("Q4_K", 15, True), ("Q5_K", 17, True), ("Q6_K", 18, True), ("Q4_K_M", 15, False),
           ("Q4_K_S", 14, False), ("Q5_K_M", 17, False), ("Q5_K_S", 16, False)]
RUN_TARGETS = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
               "Q6_K", "Q4_K_M", "Q5_K_M"]
# llama.cpp prompt logits vs ours on the same file: max |diff| / max |ours|. llama.cpp computes
# in F32 for F32 weights, rounds activations to F16/BF16 for F16/BF16 weights, and to 8 bits
# for the quantized types exactly as our fast path does (the act and dot checks): there the
# two agree bit for bit until some other op (norm, attention, SiLU: their float order differs
# by an ulp, 4e-7 on F32 files) moves a product across a .5 boundary and one 8-bit code
# flips; from that position on the rounding noise is a new draw. Measured: 0 (bit for bit)
# on 10 of the 24 quantized files, else 4e-7 (K types' dot order) or 9.6e-4..2.3e-2 (after a
# flip; the worst, qwen3 Q4_K_M); bound 5e-2, 2.2x the worst (it was 1e-1). A misread layout
# gives errors of order 1.
LOGITS_BOUND = {"F32": 1e-5, "F16": 2e-3, "BF16": 2e-2}
# the files whose matrices packed_avx2.c multiplies: run again on the AVX2 kernels
AVX2_TARGETS = ("Q4_0", "Q4_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q4_K_M", "Q5_K_M")
LOGITS_BOUND_QUANT = 5e-2
N_GREEDY = 16

results = []


def report(ok, line):
    results.append(ok)
    print(("PASS " if ok else "FAIL ") + line, flush=True)


# ---------------------------------------------------------------- ggml (llama.cpp's C code)

_ggml = None


def ggml():
    global _ggml
    if _ggml is None:
        import llama_cpp
        lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
        lib.ggml_quantize_chunk.restype = ctypes.c_size_t
        lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                            ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        lib.ggml_quantize_init.argtypes = [ctypes.c_int]
        _ggml = lib
    return _ggml


def ggml_quantize(name, x):
    """llama.cpp's quantizer (no importance matrix) on rows x (n_rows, n_per_row)."""
    t = QT[name]
    bs, ts = GGML_QUANT_SIZES[t]
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.zeros(x.size // bs * ts, dtype=np.uint8)
    ggml().ggml_quantize_init(int(t))
    n = ggml().ggml_quantize_chunk(int(t), x.ctypes.data, out.ctypes.data, 0, x.shape[0], x.shape[1], None)
    assert n == out.size, (n, out.size)
    return out


def ggml_dequantize(name, raw):
    bs, ts = GGML_QUANT_SIZES[QT[name]]
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    out = np.zeros(raw.size // ts * bs, dtype=np.float32)
    fn = getattr(ggml(), "dequantize_row_" + name.lower().replace("_k", "_K"))
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    fn(raw.ctypes.data, out.ctypes.data, out.size)
    return out


_ggml_cpu = None


def ggml_from_float(fmt):
    """llama.cpp's CPU activation quantizer for fmt: type_traits_cpu[fmt].from_float, the
    pointer ggml-cpu's matmul calls, and the exported name it is (for the report)."""
    global _ggml_cpu
    import llama_cpp
    if _ggml_cpu is None:
        ggml()  # libggml-base first
        _ggml_cpu = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-cpu.so"))
        _ggml_cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(ctypes.c_void_p)
        _ggml_cpu.ggml_cpu_init()  # its f16 tables: vec_dot reads scales through them
    ptr = _ggml_cpu.ggml_get_type_traits_cpu(int(QT[fmt]))[0]  # struct's first field: from_float
    names = {}
    for lib, name in ((_ggml_cpu, "quantize_row_" + fmt.lower().replace("_k", "_K")),
                      (_ggml_cpu, "quantize_row_" + fmt.lower().replace("_k", "_K") + "_generic"),
                      (ggml(), "quantize_row_" + fmt.lower().replace("_k", "_K") + "_ref")):
        try:
            names[ctypes.cast(getattr(lib, name), ctypes.c_void_p).value] = name
        except AttributeError:
            pass
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(ptr)
    return fn, names.get(ptr, hex(ptr))


def ggml_vec_dot(name, w, a, n):
    """llama.cpp's CPU dot product of each row of w (TYPE name, n per row) with activations a
    (bytes in the type's activation format): type_traits_cpu[name].vec_dot."""
    ggml_from_float(act_format(name))  # loads and initializes libggml-cpu
    fn = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t, ctypes.c_void_p,
                          ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                          ctypes.c_int)(_ggml_cpu.ggml_get_type_traits_cpu(int(QT[name]))[1])
    bs, ts = GGML_QUANT_SIZES[QT[name]]
    rs = n // bs * ts
    rows = w.size // rs
    out = np.zeros(rows, dtype=np.float32)
    s = ctypes.c_float()
    for r in range(rows):
        fn(n, ctypes.byref(s), 0, w.ctypes.data + r * rs, 0, a.ctypes.data, 0, 1)
        out[r] = s.value
    return out


def act_format(name):
    return "Q8_K" if name.endswith("_K") else "Q8_1" if name in ("Q4_1", "Q5_1") else "Q8_0"


def ggml_act_sizes(fmt):
    """(block size, bytes) of fmt as this ggml has them (gguf-py still has the old 40-byte Q8_1)."""
    ggml().ggml_type_size.restype = ctypes.c_size_t
    ggml().ggml_blck_size.restype = ctypes.c_int64
    return int(ggml().ggml_blck_size(int(QT[fmt]))), int(ggml().ggml_type_size(int(QT[fmt])))


def ggml_act(fn, fmt, x):
    bs, ts = ggml_act_sizes(fmt)
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.zeros(x.size // bs * ts, dtype=np.uint8)  # zeroed: Q8_K_ref leaves a zero block's bsums
    fn(x.ctypes.data, out.ctypes.data, x.size)
    return out


def ggml_act_ref(fmt, x):
    fn = getattr(ggml(), "quantize_row_" + fmt.lower().replace("_k", "_K") + "_ref")
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    return ggml_act(fn, fmt, x)


# ---------------------------------------------------------------- ours (quant_tool)

class Ours:
    def __init__(self, build, tmp):
        self.tool = os.path.join(build, "tests", "quant_tool")
        self.tmp = tmp

    def _run(self, op, name, data, out_dtype):
        src, dst = os.path.join(self.tmp, "qt.in"), os.path.join(self.tmp, "qt.out")
        data.tofile(src)
        subprocess.run([self.tool, op, name, src, dst], check=True)
        return np.fromfile(dst, dtype=out_dtype)

    def quantize(self, name, x):
        return self._run("quant", name, np.ascontiguousarray(x, dtype="<f4"), np.uint8)

    def dequantize(self, name, raw):
        return self._run("dequant", name, np.ascontiguousarray(raw, dtype=np.uint8), "<f4")

    def act(self, impl, fmt, x):
        """Our activation quantizer; None when impl (avx2) cannot run here."""
        src, dst = os.path.join(self.tmp, "qt.in"), os.path.join(self.tmp, "qt.out")
        np.ascontiguousarray(x, dtype="<f4").tofile(src)
        r = subprocess.run([self.tool, "act", impl, fmt, src, dst])
        if r.returncode == 3:
            return None
        r.check_returncode()
        return np.fromfile(dst, dtype=np.uint8)

    def dot(self, impl, name, n, w, a):
        """Our vec_dot of each row of w with a; None when impl (avx2) cannot run here."""
        paths = [os.path.join(self.tmp, p) for p in ("qt.w", "qt.a", "qt.out")]
        np.ascontiguousarray(w, dtype=np.uint8).tofile(paths[0])
        np.ascontiguousarray(a, dtype=np.uint8).tofile(paths[1])
        r = subprocess.run([self.tool, "dot", impl, name, str(n)] + paths)
        if r.returncode == 3:
            return None
        r.check_returncode()
        return np.fromfile(paths[2], dtype="<f4")


def same_bits(a, b):
    """Number of elements whose float32 bits differ (NaN == NaN)."""
    a, b = a.astype(np.float32), b.astype(np.float32)
    both_nan = np.isnan(a) & np.isnan(b)
    return int(((a.view(np.uint32) != b.view(np.uint32)) & ~both_nan).sum())


# ---------------------------------------------------------------- checks: kernels

def random_blocks(name, n_blocks, rng):
    bs, ts = GGML_QUANT_SIZES[QT[name]]
    raw = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
    scales = np.concatenate([np.array(SPECIAL_F16, dtype=np.uint16),
                             rng.integers(0, 0x7C00, size=n_blocks, dtype=np.uint16) |
                             (rng.integers(0, 2, size=n_blocks, dtype=np.uint16) << 15)])
    for off in SCALE_OFFSETS[name]:
        pick = scales[rng.integers(0, scales.size, size=n_blocks)]
        raw[:, off:off + 2] = pick.view(np.uint8).reshape(n_blocks, 2)
    # every special scale on every scale slot at least once, and extreme codes
    for i, h in enumerate(SPECIAL_F16):
        for off in SCALE_OFFSETS[name]:
            raw[i, off:off + 2] = np.array([h], dtype=np.uint16).view(np.uint8)
    code = np.ones(ts, dtype=bool)
    for off in SCALE_OFFSETS[name]:
        code[off:off + 2] = False
    raw[len(SPECIAL_F16), code] = 0x00
    raw[len(SPECIAL_F16) + 1, code] = 0xFF
    raw[len(SPECIAL_F16) + 2] = 0  # a zero block
    return raw


def check_dequant(ours, rng):
    for name in QUANT_TYPES:
        bs, ts = GGML_QUANT_SIZES[QT[name]]
        x = rng.standard_normal(64 * 256).astype(np.float32)
        quantized = ours.quantize(name, x).reshape(-1, ts)
        raw = np.concatenate([quantized, random_blocks(name, 400, rng)])
        mine = ours.dequantize(name, raw)
        with np.errstate(all="ignore"):  # inf and NaN scales
            ref = gguf.quants.dequantize(raw, QT[name]).reshape(-1)
        ggml_ref = ggml_dequantize(name, raw)
        bad_np, bad_ggml = same_bits(mine, ref), same_bits(mine, ggml_ref)
        n_nan = int(np.isnan(ref).sum())
        report(bad_np == 0 and bad_ggml == 0,
               f"dequant  {name:5s} {raw.shape[0]} blocks ({mine.size} values, {n_nan} NaN): bits differ from "
               f"numpy at {bad_np}, from ggml at {bad_ggml}")


def check_q8_0(ours, rng):
    x = (rng.standard_normal(4096 * 16) * np.repeat(10.0 ** rng.uniform(-6, 3, 4096 * 16 // 32), 32)).astype(np.float32)
    x[:32] = 0
    mine = ours.quantize("Q8_0", x)
    ref = gguf.quants.quantize(x.reshape(16, -1), QT.Q8_0).reshape(-1)
    report(np.array_equal(mine, ref), f"q8_0     our Q8_0 quantizer == gguf's on {x.size} values "
           f"(scales 1e-6..1e3, a zero block): {int((mine != ref).sum())} bytes differ")


def act_blocks(bs, rng, nan):
    """Activation rows for blocks of bs: each case a list of blocks (n = a multiple of 256)."""
    f32 = np.float32
    blocks = []

    def add(b):
        blocks.append(np.asarray(b, dtype=f32))

    for _ in range(64):  # exact ties: amax = 127 * 2^e, so 127 / amax = 1/d = 2^-e and v = k + 0.5
        e = int(rng.integers(-30, 12))
        b = (rng.integers(-127, 127, bs) + 0.5) * 2.0 ** e
        b[rng.integers(bs)] = (1 if rng.integers(2) else -1) * 127 * 2.0 ** e
        add(b)
    for _ in range(64):  # near ties: k * d / 2 for the block's d = amax / 127 (float32)
        amax = f32(10.0 ** rng.uniform(-8, 4))
        d = f32(amax / f32(127))
        b = rng.integers(-254, 255, bs).astype(f32) * d / f32(2)
        b[rng.integers(bs)] = amax * (1 if rng.integers(2) else -1)
        add(b)
    for _ in range(32):  # N(0, 1) times a scale
        add(rng.standard_normal(bs) * 10.0 ** rng.uniform(-6, 3))
    add(np.zeros(bs))
    add(np.full(bs, -0.0))
    b = np.zeros(bs); b[3] = 2.5; add(b)                    # one value
    b = rng.standard_normal(bs); b[7] = -9.0; add(b)         # negative maximum
    b = rng.standard_normal(bs); b[5], b[9] = 9.0, -9.0; add(b)   # +-max: the first one counts
    b = rng.standard_normal(bs); b[5], b[9] = -9.0, 9.0; add(b)
    b = rng.standard_normal(bs); b[0] = np.finfo(f32).max; add(b)  # extremes
    b = rng.standard_normal(bs) * 1e37; b[1] = -np.finfo(f32).max; add(b)
    add(rng.standard_normal(bs) * 65504 * 127 * 1.5)          # d beyond f16: inf scale
    add(rng.standard_normal(bs) * 1e30)
    b = rng.standard_normal(bs); b[2] = np.inf; add(b)        # infinities
    b = rng.standard_normal(bs); b[2], b[4] = -np.inf, np.inf; add(b)
    add(rng.standard_normal(bs) * 1e-40)                      # subnormals: 127 / amax = inf
    add(rng.integers(-3, 4, bs) * np.float32(1e-45))           # the smallest subnormals
    b = rng.standard_normal(bs) * 1e-41; b[0] = 1.2e-38; add(b)   # a normal max among subnormals
    add(rng.standard_normal(bs) * 1e-37)                      # normal, 127 / amax still inf
    add(rng.standard_normal(bs) * 5e-37)                      # 127 / amax just finite
    if nan:  # Q8_K only: nearest_int makes a NaN code 0 (Q8_0/Q8_1: not pinned)
        b = rng.standard_normal(bs); b[6] = np.nan; add(b)
    x = np.concatenate(blocks).astype(f32)
    pad = (-x.size) % 256
    return np.concatenate([x, rng.standard_normal(pad).astype(f32)]) if pad else x


def rounding_power(fmt, x):
    """How many codes of x other rounding rules would change: truncation toward zero and
    half away from zero, applied to ggml's own products (numpy, finite blocks only)."""
    b = x.reshape(-1, ggml_act_sizes(fmt)[0])
    a = np.abs(b)
    ok = np.isfinite(b).all(1) & (a.max(1) > 1e-36)
    b, a = b[ok], a[ok]
    with np.errstate(all="ignore"):
        if fmt == "Q8_K":
            first = a.argmax(1)
            scale = np.float32(-127) / b[np.arange(len(b)), first]
        else:
            scale = np.float32(127) / a.max(1)
        v = (b * scale[:, None].astype(np.float32)).astype(np.float32)
    rne = np.rint(v)
    return int((np.trunc(v) != rne).sum()), int((np.sign(v) * np.floor(np.abs(v) + 0.5) != rne).sum()), \
        int((np.abs(v - np.trunc(v)) == 0.5).sum())


def check_act(ours, rng):
    # ours are the x86 AVX2 build's quantizers: another build's from_float (NEON, generic)
    # rounds its own way, so there the comparison is only reported
    required = bool(_ggml_cpu_has("ggml_cpu_has_avx2"))
    for fmt in ("Q8_0", "Q8_1", "Q8_K"):
        bs, ts = ggml_act_sizes(fmt)
        x = act_blocks(bs, rng, nan=fmt == "Q8_K")
        fn, which = ggml_from_float(fmt)
        want = ggml_act(fn, fmt, x)
        ref = ggml_act_ref(fmt, x)
        n_trunc, n_away, n_ties = rounding_power(fmt, x)
        power = n_trunc > 0 and n_away > 0 and n_ties > 0
        for impl in ("scalar", "avx2"):
            mine = ours.act(impl, fmt, x)
            if mine is None:
                report(True, f"act      {fmt} {impl:6s}: no AVX2 on this CPU, skipped")
                continue
            bad = np.nonzero(mine != want)[0] if mine.size == want.size else np.arange(want.size)
            report((bad.size == 0 or not required) and power,
                   f"act      {fmt} {impl:6s} == llama.cpp's {which} on {x.size} values "
                   f"({x.size // bs} blocks, {n_ties} exact .5 ties): {bad.size} bytes differ"
                   + (f" (first in block {bad[0] // ts}, byte {bad[0] % ts})" if bad.size else "")
                   + ("" if required else " (reported: llama.cpp built without AVX2)"))
        n_ref = int((ref != want).sum())
        report(power, f"act      {fmt} the data tells rules apart: truncation would change {n_trunc} codes, "
               f"half away from zero {n_away}; ggml's reference quantizer differs from {which} in "
               f"{n_ref} bytes")


# Our AVX2 dot products that add in ggml's AVX2 order: per block, the i32 sums of 4 products
# in 8 lanes, converted and multiply-added with the product of the two scales, the lanes
# summed as hsum_float_8 (ggml-cpu/arch/x86/quants.c); Q4_1/Q5_1 add m * s in block order.
# The K types order their float work differently (measured: up to 4.3e-7 of max |dot|).
DOT_SAME_ORDER = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")
DOT_K_BOUND = 1e-6


def check_dots(ours, rng):
    """Our fast path's dot products vs llama.cpp's vec_dot on the same weight and activation
    bytes: bit for bit where both add in the same order."""
    n, rows = 4096, 64
    x = (rng.standard_normal(n) * np.where(rng.random(n) < 0.02, 30.0, 1.0)).astype(np.float32)
    ggml_avx2 = bool(_ggml_cpu_has("ggml_cpu_has_avx2"))
    for name in QUANT_TYPES:
        fmt = act_format(name)
        w = ggml_quantize(name, (rng.standard_normal((rows, n)) * 0.05).astype(np.float32))
        a = ggml_act(ggml_from_float(fmt)[0], fmt, x)
        theirs = ggml_vec_dot(name, w, a, n)
        mine = ours.dot("avx2", name, n, w, a)
        if mine is None:
            report(True, f"dot      {name:5s}: no AVX2 on this CPU, skipped")
            continue
        n_bits = int((mine.view(np.uint32) != theirs.view(np.uint32)).sum())
        rel = float(np.abs(mine.astype(np.float64) - theirs).max() / np.abs(theirs).max())
        if name in DOT_SAME_ORDER and ggml_avx2:
            report(n_bits == 0, f"dot      {name:5s} avx2 == llama.cpp's vec_dot bit for bit on {rows} rows of {n} "
                   f"({fmt} activations): {n_bits} differ (max {rel:.1e} of max |dot|)")
        else:
            report(rel <= DOT_K_BOUND, f"dot      {name:5s} avx2 vs llama.cpp's vec_dot on {rows} rows of {n}: "
                   f"max {rel:.1e} of max |dot| (bound {DOT_K_BOUND:.0e}: float order differs), {n_bits} rows differ")


def _ggml_cpu_has(fn):
    ggml_from_float("Q8_0")
    return getattr(_ggml_cpu, fn)()


def check_rms(ours, rng):
    n_rows, n_per_row = 256, 4096
    x = rng.standard_normal((n_rows, n_per_row)).astype(np.float32)
    table = []
    for name in QUANT_TYPES:
        t = QT[name]
        t0 = time.time()
        mine = ours.dequantize(name, ours.quantize(name, x)).reshape(x.shape)
        dt = time.time() - t0
        theirs = gguf.quants.dequantize(ggml_quantize(name, x), t).reshape(x.shape)
        rms = float(np.sqrt(np.mean((mine - x) ** 2)))
        rms_ggml = float(np.sqrt(np.mean((theirs - x) ** 2)))
        extra = ""
        try:
            gq = gguf.quants.dequantize(gguf.quants.quantize(x, t), t).reshape(x.shape)
            extra = f", gguf-py {np.sqrt(np.mean((gq - x) ** 2)):.6f}"
        except NotImplementedError:
            pass
        table.append((name, rms, rms_ggml))
        report(rms <= rms_ggml, f"rms      {name:5s} N(0,1) {x.size} values: ours {rms:.6f}, llama.cpp {rms_ggml:.6f}"
               f"{extra} (ratio {rms / rms_ggml:.4f}; our quantizer {x.size / dt / 1e6:.1f} M values/s)")
    return table


# ---------------------------------------------------------------- checks: files

def quiet_call(fn, *args):
    """Runs fn with stderr (llama.cpp's logging) sent to /dev/null."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        return fn(*args)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def llama_quantize(src, dst, ftype, pure):
    import llama_cpp
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = ftype
    p.pure = pure
    p.nthread = 2
    return quiet_call(llama_cpp.llama_model_quantize, src.encode(), dst.encode(), ctypes.byref(p))


def our_quantize(build, src, dst, target):
    r = subprocess.run([os.path.join(build, "edgerunner"), "quantize", src, dst, target, "-t", "2"],
                       capture_output=True, text=True, timeout=300)
    return r.returncode, (r.stderr.strip().splitlines() or [""])[-1]


def field_value(f):
    try:
        return f.contents()
    except Exception:  # noqa: BLE001 -- compare raw parts when gguf-py cannot decode
        return [bytes(p) for p in f.parts[f.data_offset:]] if hasattr(f, "data_offset") else None


def check_metadata(name, src, dst, ftype):
    a, b = gguf.GGUFReader(src).fields, gguf.GGUFReader(dst).fields
    diff = []
    for k, f in a.items():
        if k.startswith("GGUF.") or k in ("general.file_type", "general.quantization_version"):
            continue
        if k not in b or f.types != b[k].types or field_value(f) != field_value(b[k]):
            diff.append(k)
    extra = [k for k in b if k not in a and not k.startswith("GGUF.")]
    ft = b.get("general.file_type")
    qv = b.get("general.quantization_version")
    ok = not diff and not extra and ft is not None and ft.contents() == ftype and qv is not None and qv.contents() == 2
    report(ok, f"metadata {name}: {len(a) - 3} pairs copied (nested arrays, all value types); "
           f"file_type {ft.contents() if ft else None} (want {ftype}), quantization_version "
           f"{qv.contents() if qv else None}" + (f"; differ: {diff} extra: {extra}" if not ok else ""))


def tensor_map(path):
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


def weights_rms(path, originals):
    """Mean over quantized weights of RMS(dequantized - original) / RMS(original)."""
    errs = []
    for t in gguf.GGUFReader(path).tensors:
        if t.tensor_type == QT.F32 or t.name not in originals:
            continue
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        o = originals[t.name].reshape(-1)
        errs.append(np.sqrt(np.mean((w - o) ** 2)) / np.sqrt(np.mean(o ** 2)))
    return float(np.mean(errs)) if errs else 0.0


def rel_err(ours, ref):
    return float(np.abs(ours.astype(np.float64) - ref).max() / np.abs(ours).max())


def check_model(build, tmp, arch):
    src = os.path.join(tmp, f"{arch}-F32-in.gguf")
    models.write(src, arch)
    nested = os.path.join(tmp, f"{arch}-F32-nested.gguf")
    models.write(nested, arch, nested=True)
    for target, ftype in (("Q4_K_M", 15), ("Q8_0", 7)):
        path = os.path.join(tmp, f"{arch}-{target}-nested.gguf")
        rc, msg = our_quantize(build, nested, path, target)
        if rc != 0:
            report(False, f"metadata {arch} {target}: edgerunner quantize failed: {msg}")
        else:
            check_metadata(f"{arch} {target}", nested, path, ftype)
    originals = dict(models.tensors(arch))
    ids = models.prompt_ids()
    outs = {}
    for target, ftype, pure in TARGETS:
        ours_path = os.path.join(tmp, f"{arch}-{target}.gguf")
        ref_path = os.path.join(tmp, f"{arch}-{target}.llama.gguf")
        rc, msg = our_quantize(build, src, ours_path, target)
        if rc != 0:
            report(False, f"types    {arch} {target}: edgerunner quantize failed: {msg}")
            continue
        outs[target] = ours_path
        if llama_quantize(src, ref_path, ftype, pure) != 0:
            report(False, f"types    {arch} {target}: llama.cpp's quantizer failed")
            continue
        mine, theirs = tensor_map(ours_path), tensor_map(ref_path)
        differ = [f"{n}: {mine[n].tensor_type.name} vs {theirs[n].tensor_type.name}" for n in theirs
                  if n not in mine or mine[n].tensor_type != theirs[n].tensor_type]
        mix = sorted({t.tensor_type.name for t in mine.values()})
        report(not differ and len(mine) == len(theirs),
               f"types    {arch} {target:6s}: {len(mine)} tensors typed as llama.cpp's {'--pure ' if pure else ''}"
               f"quantizer types them ({'/'.join(mix)})" + (f"; differ: {differ[:4]}" if differ else ""))
        if target not in ("F32", "F16", "BF16") and not differ:
            e_ours, e_ref = weights_rms(ours_path, originals), weights_rms(ref_path, originals)
            report(e_ours <= e_ref, f"weights  {arch} {target:6s}: relative RMS error of the weights ours "
                   f"{e_ours:.5f}, llama.cpp {e_ref:.5f}")
    for target in RUN_TARGETS:
        if target not in outs:
            continue
        path = outs[target]
        name = f"run      {arch} {target:6s}"
        try:
            n_vocab = models.N_VOCAB
            # llama.cpp's context keeps an F32 KV cache (oracle.llama_model): ours too, so
            # that on F32 weights both compute the same function
            f32_cache = ["-ctk", "f32", "-ctv", "f32"]
            ours_logits = oracle.engine_logits(build, path, ids, n_vocab, tmp, f32_cache)
            ours_ids = oracle.engine_greedy(build, path, ids, N_GREEDY, f32_cache)
        except Exception as e:  # noqa: BLE001
            report(False, f"{name}: our engine failed: {e}")
            continue
        if not np.isfinite(ours_logits).all() or len(ours_ids) != N_GREEDY:
            report(False, f"{name}: our engine gave non-finite logits or {len(ours_ids)} ids")
            continue
        try:
            lc_logits = quiet_call(oracle.llama_prompt_logits, path, ids)
            lc_ids, margins = quiet_call(oracle.llama_greedy, path, ids, N_GREEDY)
        except Exception as e:  # noqa: BLE001
            report(False, f"{name}: llama.cpp cannot run our file: {e}")
            continue
        err = rel_err(ours_logits, lc_logits)
        bound = LOGITS_BOUND.get(target, LOGITS_BOUND_QUANT)
        agree = next((i for i in range(N_GREEDY) if ours_ids[i] != lc_ids[i]), N_GREEDY)
        exact = target == "F32"
        ok = err <= bound and (agree == N_GREEDY or not exact)
        line = (f"{name}: llama.cpp runs our file; prompt logits vs ours err {err:.1e} (bound {bound:.0e}); "
                f"greedy ids agree for {agree}/{N_GREEDY} tokens")
        line += (" (required: same function)" if exact else
                 " (reported: llama.cpp rounds activations)" if target in LOGITS_BOUND else
                 " (reported: a flipped 8-bit code redraws the rounding noise)")
        if agree < N_GREEDY:
            line += f"\n      llama.cpp: {' '.join(map(str, lc_ids))}\n      ours:      {' '.join(map(str, ours_ids))}"
        report(ok, line)
        if target in AVX2_TARGETS and oracle.AVX2:
            check_run_avx2(build, tmp, arch, target, path, ids, lc_logits, ours_logits, f32_cache)
    return outs


def check_run_avx2(build, tmp, arch, target, path, ids, lc_logits, ours_logits, extra):
    """The run check's logits on the AVX2 kernels (EDGERUNNER_CPU_ISA=avx2: what a CPU
    without AVX-512 VNNI runs, packed_avx2.c for Q4_0, Q4_1, Q2_K..Q6_K), against llama.cpp's; and
    whether they equal the default kernels' bit for bit (the packed kernels of both sets
    give the same bits; other matrices' kernels may differ)."""
    name = f"run-avx2 {arch} {target:6s}"
    env = dict(os.environ, EDGERUNNER_CPU_ISA="avx2")
    try:
        logits = oracle.engine_logits(build, path, ids, models.N_VOCAB, tmp, extra, env=env)
    except Exception as e:  # noqa: BLE001
        report(False, f"{name}: our engine failed: {e}")
        return
    err = rel_err(logits, lc_logits)
    same = np.array_equal(logits, ours_logits)
    report(err <= LOGITS_BOUND_QUANT, f"{name}: prompt logits vs llama.cpp's err {err:.1e} (bound "
           f"{LOGITS_BOUND_QUANT:.0e}); {'==' if same else '!='} the default kernels' bit for bit (reported)")


def check_info(build, path):
    r = subprocess.run([os.path.join(build, "edgerunner"), "info", "-m", path], capture_output=True, text=True)
    tensors = gguf.GGUFReader(path).tensors
    n = sum(int(t.n_elements) for t in tensors)
    nbytes = sum(int(t.n_bytes) for t in tensors)
    want_bpw = 8.0 * nbytes / n
    m = re.search(r"([0-9.]+) bits per weight", r.stdout)
    counts = {}
    for t in tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    listed = {k: int(v) for k, v in re.findall(r"\b(\w+): (\d+) tensors", r.stdout)}
    ok = r.returncode == 0 and m is not None and abs(float(m.group(1)) - want_bpw) < 1e-3 and listed == counts
    report(ok, f"info     {os.path.basename(path)}: {m.group(1) if m else '?'} bits per weight (want {want_bpw:.3f}), "
           f"types {listed} (want {counts})")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: test_quant.py BUILD_DIR")
    build = os.path.abspath(sys.argv[1])
    t0 = time.time()
    for exe in ("edgerunner", os.path.join("tests", "quant_tool")):
        if not os.access(os.path.join(build, exe), os.X_OK):
            print(f"FAIL {build}/{exe} not found (make all)")
            print("0 passed, 1 failed")
            return 1
    rng = np.random.default_rng(2024)
    with tempfile.TemporaryDirectory(prefix="er-quant-") as tmp:
        ours = Ours(build, tmp)
        check_dequant(ours, rng)
        check_q8_0(ours, rng)
        check_act(ours, rng)
        check_dots(ours, rng)
        check_rms(ours, rng)
        for arch in models.ARCHS:
            outs = check_model(build, tmp, arch)
            if arch == "qwen3" and "Q4_K_M" in outs:
                check_info(build, outs["Q4_K_M"])
    n_fail = results.count(False)
    print(f"({time.time() - t0:.1f}s)")
    print(f"{len(results) - n_fail} passed, {n_fail} failed")
    return 0 if n_fail == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
