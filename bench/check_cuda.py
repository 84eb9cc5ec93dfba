#!/usr/bin/env python3
"""The CUDA backend against the CPU reference backend, on the GPU machine.

For each model: the logits of every position of a 96-token and a 16-token prompt (one
batched prefill on each backend; the CUDA prefill multiplies F16 on the tensor cores,
from 65 tokens on through the warpgroup GEMM where the matrix fits it) and of a 3-token
prompt (the CUDA decode kernels, one token at a time), compared as
max |cuda - cpu| / max |cpu|, with the argmax equal wherever the CPU's top two logits
are further apart than twice that bound; and the 128 greedy ids from prompt [1], which
must be identical (with an F16 or Q8_0 cache, or int8 activations: up to a tie within
the bound, see BOUNDS and INT8_BOUND). Prints one line per check, then "N passed, M failed".

Usage: check_cuda.py [-ctk T] [-ctv T] EDGERUNNER MODEL...
  -ctk/-ctv: the KV cache type (f32, f16 or q8_0; f32 unless given), on both backends:
  the CPU reference rounds K and V through the type asked for (src/backend/cpu/cpu.h),
  the oracle of CUDA's cache of that type. (CUDA takes one type for K and V.)
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

# Decode: both backends compute in FP32 from the same weights; only the order of the
# sums differs (warp-tree reductions, online softmax), which moves a logit by a few ulps
# of the largest activations: measured ~3e-6. 1e-4 leaves room for that and stays far
# below the 1e-2 that any real indexing or RoPE bug gives.
BOUND = 1e-4
# Prefill multiplies on the tensor cores with F16 inputs (weights and activations rounded
# to 11 significant bits, relative 2^-12 on average, F32 sums), as llama.cpp's cuBLAS
# path does; over 28 layers that compounds to about 1e-3 of the largest logit (measured
# on the H200, see BENCHMARKS.md). Its bound is therefore looser; the argmax must agree.
PREFILL_BOUND = 1e-2
# F16 and Q8_0 caches: both backends round K and V through the type with the same
# arithmetic (the kernels' rounding is checked bit for bit against the CPU's in
# tests/unit/test_cuda.c), so they attend over the same values except where their f32 K
# or V, a few 1e-6 apart, fall on two sides of a rounding boundary: one unit of the type
# there (F16: 2^-11 of the element; Q8_0: 1/127 of its 32-element block's largest, 16x
# more but rarer). Measured on the CPU by perturbing the reference's K and V by +-1e-6
# (relative) before the rounding, on the random qwen2/gemma3 files of
# bench/make_random_archs.py (3-64 tokens): F16 up to 2.7e-4 of the largest logit, Q8_0
# 0 or, where one boundary is crossed, up to 6.3e-3. Decode bounds: 1e-3 and 2e-2. In
# the prefill the F16 GEMMs move K and V by ~1e-3 (relative): perturbed that much, the
# rounding added up to 3.4e-3 (F16) and 1.8e-2 (Q8_0) and flipped an argmax at a near
# tie: prefill bounds 1e-2 and 5e-2, the argmax compared only where the top two are
# further apart than twice the bound. Q8_0's bounds are about its own distance from an
# F32 cache (1-2e-2 on these files): what this check catches there is a wrong row, block
# or scale (errors of the logits' own size); the rounding is test_cuda.c's. Greedy ids
# (decode, F32 arithmetic): expected identical with F16 (its 3e-4 is far below the
# files' top-two margins) and, on these files, with Q8_0, though a crossed boundary at a
# margin under ~1e-2 of the largest logit would legitimately change one: for F16 and Q8_0
# a divergence passes where the reference's logits of the two ids are within twice the
# decode bound (of the largest), as they were in a CPU stand-in for CUDA (the reference
# with K and V perturbed by 2e-6 before the rounding: gemma3-hd256, Q8_0, token 47).
BOUNDS = {"f32": (BOUND, PREFILL_BOUND), "f16": (1e-3, 1e-2), "q8_0": (2e-2, 5e-2)}  # (decode, prefill)
# The decode's head and layer matrices in Q4_0, Q8_0, Q4_K, Q5_K and Q6_K multiply int8 activations
# (src/backend/cuda/matvec.cu, unless EDGERUNNER_CUDA_MV_INT8=0): their input rounded per
# block of 32 to 1/254 of its block's largest, which moves the logits far more than the
# sums' order.
# The CPU fast path rounds its Q8_0 activations the same way (as llama.cpp does), and
# tests/oracle/test_oracles.py holds it to FAST_BOUND = 4e-2 of the largest logit against
# the F32 reference (twice the worst measured, 2.0e-2 on Qwen3-0.6B, 1.2e-2 on Llama); the
# same rounding gets the same bound here, for Q4_0 too (the rounding is the input's, the
# same whatever the weights), and the greedy ids may part at a tie within twice it (as
# bench's teacher-forced check allows the fast path 5e-2). A wrong block, scale or nibble
# moves logits by their own size. Files whose matrices are all of other types keep the
# bounds above; the prefill (its GEMMs, F16 tiles) keeps its own.
INT8_BOUND = 4e-2
# the types of those matrices (wtypes.cuh, cuda_wtype_int8_dot; Q8_0 was missing here since
# its matvecs took the int8 input, sixteenth session)
INT8_TYPES = ("Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K")
N_GREEDY = 128


def run(exe, args):
    r = subprocess.run([exe, "run"] + args, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip())
    return r.stdout


def logits(exe, model, backend, ids, tmp, kv):
    out = os.path.join(tmp, f"logits-{backend}.bin")
    # the CPU side is the reference path (exact f32); its default fast path rounds
    # activations to 8 bits for quantized weights
    extra = ["--reference"] if backend == "cpu" else []
    run(exe, ["-m", model, "--backend", backend, "--prompt-ids", ",".join(map(str, ids)), "--dump-logits", out] + extra
        + kv)
    return np.fromfile(out, dtype="<f4").reshape(len(ids), -1)


def model_info(exe, model):
    """(rows of token_embd.weight, whether CUDA's decode multiplies int8 activations: a
    layer matrix or the output head (token_embd when tied) in INT8_TYPES, see INT8_BOUND: whether
    the matrix streams is left to the bound, an upper one), from `edgerunner info` (no
    Python GGUF reader needed)."""
    out = subprocess.run([exe, "info", "-m", model], capture_output=True, text=True, check=True).stdout
    types, n_vocab = {}, None  # the 2-D tensors' types
    for line in out.splitlines():
        m = re.match(r"\s+(\S+)\s+(\w+)\s+\[(\d+), (\d+)\]", line)
        if m:
            types[m[1]] = m[2]
            n_vocab = int(m[4]) if m[1] == "token_embd.weight" else n_vocab
    if n_vocab is None:
        raise RuntimeError(f"{model}: no token_embd.weight in `edgerunner info`")
    head = "output.weight" if "output.weight" in types else "token_embd.weight"
    layer = (".attn_q.", ".attn_k.", ".attn_v.", ".attn_output.", ".ffn_gate.", ".ffn_up.", ".ffn_down.")
    int8 = os.environ.get("EDGERUNNER_CUDA_MV_INT8", "").strip() != "0" and any(
        t in INT8_TYPES for name, t in types.items() if name == head or any(k in name for k in layer))
    return n_vocab, int8


def parse_args(argv):
    """(-ctk/-ctv flags for both backends, their type, edgerunner, models)"""
    types = {"-ctk": "f32", "-ctv": "f32"}
    while argv and argv[0] in types:
        if len(argv) < 2 or argv[1] not in BOUNDS:
            sys.exit(f"check_cuda.py: {argv[0]} wants one of {', '.join(BOUNDS)}")
        types[argv[0]] = argv[1]
        argv = argv[2:]
    if len(argv) < 2:
        sys.exit(__doc__)
    # always explicit: the backends' defaults differ (CUDA f16, the reference f32)
    kv = ["-ctk", types["-ctk"], "-ctv", types["-ctv"]]
    # the looser of the two types' bounds (CUDA refuses two types, and says so)
    kv_type = max(types.values(), key=lambda t: BOUNDS[t])
    return kv, kv_type, argv[0], argv[1:]


def main():
    kv, kv_type, exe, models = parse_args(sys.argv[1:])
    n_pass = n_fail = 0

    def report(ok, line):
        nonlocal n_pass, n_fail
        n_pass += ok
        n_fail += not ok
        print(("PASS " if ok else "FAIL ") + line, flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            name = os.path.basename(model)
            rng = np.random.default_rng(7)
            try:
                n_vocab, int8 = model_info(exe, model)
            except Exception as e:  # noqa: BLE001
                report(False, f"{name}: {e}")
                continue
            # (decode, prefill) bounds, and whether greedy ids may part at a tie within the decode one
            bounds = (max(BOUNDS[kv_type][0], INT8_BOUND if int8 else 0.0), BOUNDS[kv_type][1])
            rounded = kv_type != "f32" or int8
            what = ("" if kv_type == "f32" else " " + kv_type + " KV") + (" int8 activations" if int8 else "")
            for n_prompt in (96, 16, 3):
                ids = [1] + [int(x) for x in rng.integers(3, n_vocab, n_prompt - 1)]
                try:
                    a = logits(exe, model, "cpu", ids, tmp, kv)
                    b = logits(exe, model, "cuda", ids, tmp, kv)
                    scale = float(np.abs(a).max())
                    err = float(np.abs(a - b).max() / scale)
                    # prompts of more than 4 tokens take the batched prefill (CUDA_SMALL_PROMPT in src/backend/cuda/internal.h)
                    bound = bounds[1 if n_prompt > 4 else 0]
                    top2 = np.sort(a, axis=1)[:, -2:]
                    decided = top2[:, 1] - top2[:, 0] > 2 * bound * scale  # argmax not within the bound of a tie
                    same_argmax = int((a.argmax(1) == b.argmax(1)).sum())
                    wrong = int((decided & (a.argmax(1) != b.argmax(1))).sum())
                    report(err <= bound and np.isfinite(b).all() and wrong == 0,
                           f"logits {name} {n_prompt}-token prompt{what}: err {err:.2e} "
                           f"(bound {bound:.0e}), argmax equal at {same_argmax}/{n_prompt} "
                           f"({int(decided.sum())} beyond the bound of a tie)")
                except Exception as e:  # noqa: BLE001 - report and go on
                    report(False, f"logits {name} {n_prompt}-token prompt: {e}")
            try:
                ids_cpu = run(exe, ["-m", model, "--reference", "--prompt-ids", "1", "-n", str(N_GREEDY), "--temp", "0",
                                   "--ids", "--ignore-eos"] + kv).split()
                ids_gpu = run(exe, ["-m", model, "--backend", "cuda", "--prompt-ids", "1", "-n", str(N_GREEDY), "--temp",
                                    "0", "--ids", "--ignore-eos"] + kv).split()
                first = next((i for i, (x, y) in enumerate(zip(ids_cpu, ids_gpu)) if x != y), None)
                ok = ids_cpu == ids_gpu and len(ids_cpu) == N_GREEDY
                label = f"greedy {name}{what}: {N_GREEDY} ids "
                if ok:
                    report(True, label + "identical")
                elif first is None:
                    report(False, label + f"cpu {len(ids_cpu)}, cuda {len(ids_gpu)} of them")
                else:
                    # an F16/Q8_0 cache or int8 activations may part at a near tie (see BOUNDS,
                    # INT8_BOUND): allowed only where the reference's own logits put the two
                    # choices within twice the decode bound
                    l = logits(exe, model, "cpu", [1] + [int(x) for x in ids_cpu[:first]], tmp, kv)[-1]
                    gap = float(l[int(ids_cpu[first])] - l[int(ids_gpu[first])]) / float(np.abs(l).max())
                    tie = rounded and gap <= 2 * bounds[0]
                    report(tie, label + f"differ from token {first} (cpu {ids_cpu[first:first+4]} cuda "
                           f"{ids_gpu[first:first+4]}), where the reference's logits of the two are {gap:.1e} of the "
                           f"largest apart" + (f": a tie within the{what} bound" if tie else ""))
            except Exception as e:  # noqa: BLE001
                report(False, f"greedy {name}: {e}")
    print(f"{n_pass} passed, {n_fail} failed")
    sys.exit(1 if n_fail else 0)


if __name__ == "__main__":
    main()
