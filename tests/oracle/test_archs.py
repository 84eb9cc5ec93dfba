#!/usr/bin/env python3
"""Independent-oracle tests of the architectures and RoPE variants of issue 24: Phi-3
(fused QKV and gate|up, partial rotary, longrope), Mistral's sliding window, Llama with
llama3 and linear RoPE scaling, Gemma-3's sliding and global layers.

Usage: $PY tests/oracle/test_archs.py BUILD_DIR      (PY=$(tests/oracle/venv.sh)/bin/python)

The models are small seeded-random Hugging Face models converted by llama.cpp's own
convert_hf_to_gguf.py (make_arch_models.py; converter.sh fetches the converter), so both the
files and the references come from outside the engine. Checks, one line each, then
"N passed, M failed" (exit 0 iff M == 0):
  guard    the prompt (80 tokens) is longer than each window and each original context, so
           that the window and the scaling act at all.
  matters  transformers' logits move by more than MATTERS_MIN when the window or the RoPE
           scaling is taken out of the same weights, or got wrong as an engine might (the
           short factors for the long, longrope without its attention factor, Gemma-3's global
           layer windowed, its linear scaling on the sliding layers too): an engine that
           ignores or misreads the feature cannot pass. A failing logits check also names the
           variant the engine computes, if it is one of these.
  export   llama.cpp's logits on the converted file vs transformers, all positions (so that a
           failure below is the engine's, not the converter's). Where llama.cpp computes no
           window (Phi-3: it turns Phi-3's window off; Mistral: it has none for arch llama),
           it is compared with transformers without the window, which is what it computes.
  logits   engine (--dump-logits, one batched prefill: the fast path's blocked prompt
           attention runs on 2 full 32-token blocks and a 16-token tail) vs transformers with
           every feature, on the CPU reference (--reference), the fast path with an F32 KV
           cache (-ctk f32 -ctv f32) and with its default F16 cache.
  greedy   32 greedy ids of the engine (fast path, default cache) == llama.cpp's where
           llama.cpp computes the same model, else == transformers' (Phi-3 and Mistral windows).
Every engine and llama.cpp run gets a 256-token context: above the original 32 of the
longrope model, so both pick the long factors, as transformers does for any sequence
longer than 32.

Metric: as test_oracles.py, err = max over positions of max|ours - ref| / max|ref|.

Measured (2 cores, AVX2; the engine at a77cab3, ref / fast32 / fast, and llama.cpp's export):
  phi3          7.8e-7 / 6.1e-7 / 1.8e-4    llama.cpp 6.9e-7 (windowless)
  phi3-longrope 7.0e-7 / 6.6e-7 / 2.4e-4    llama.cpp 1.4e-6
  mistral       5.7e-7 / 5.8e-7 / 1.7e-4    llama.cpp 6.3e-7 (windowless)
  llama3-rope   7.1e-7 / 6.9e-7 / 2.6e-4    llama.cpp 7.1e-7
  llama-linear  5.7e-7 / 5.7e-7 / 1.8e-4    llama.cpp 4.9e-7
  gemma3        2.2e-6 / 1.5e-6 / 8.4e-4    llama.cpp 6.2e-4 (its F16 GELU)
  gemma3-linear 1.5e-6 / 1.2e-6 / 7.5e-4    llama.cpp 7.7e-4
  matters: 0.18 (gemma3-linear no-scaling) to 1.4 (gemma3 no-window), all >> 2e-2.
  greedy margins (the oracle's top1-top2, min over 32 steps): 0.13 to 0.24.
Before the engine had them (1ee683a) this file failed as it should: gemma3-linear (the
sliding layers' RoPE scaled too), phi3 and phi3-longrope (phi3 refused), mistral (the window
ignored: the engine was transformers' windowless model to 7e-7).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # importing the helpers must not litter the tree

import test_oracles as T  # noqa: E402 -- report(), the llama.cpp and engine runners, the bounds
from test_oracles import report, rel_err  # noqa: E402

# Engine bounds, as test_oracles.py justifies them: 1e-4 for the F32 reference and the fast
# path with an F32 cache (both compute in float32 on F32 weights: only summation order and
# libm differ, measured ~1e-6 there); the F16 KV cache rounds K and V to 11 bits, bound 2e-3.
ENGINE_BOUND = T.ENGINE_BOUND
FAST_F16_CACHE_BOUND = T.FAST_F16_CACHE_DEFAULT
# llama.cpp on F32 files vs transformers (test_oracles.py's F32 export bound), except where
# llama.cpp's CPU GELU (a lookup table of F16: GGML_GELU_FP16 in ggml-cpu/vec.h) rounds the
# FFN's activations to 11 bits: Gemma-3 gets test_oracles.py's F16 bound.
EXPORT_BOUND = T.EXPORT_BOUND["F32"]
EXPORT_BOUND_F16_GELU = T.EXPORT_BOUND["F16"]
# A feature "matters" when turning it off moves transformers' logits by more than 10x the
# loosest engine bound: an engine without it fails every logits check by a wide margin.
MATTERS_MIN = 10 * FAST_F16_CACHE_BOUND


def llama_prompt_logits(path, ids, n_ctx):
    """llama.cpp's logits at every prompt position, one batch (logits_all)."""
    llm = T.llama_model(path, n_ctx, logits_all=True)
    llm.eval(ids)
    out = np.array(llm.scores[:len(ids)], dtype=np.float32)
    del llm
    return out


def load(path, n):
    return np.fromfile(path, dtype="<f4").reshape(n, -1)


def check_guards(m, n_prompt):
    name = f"guard   {m['name']:13s}"
    if m["window"] is not None:
        report(n_prompt > m["window"], f"{name} prompt {n_prompt} tokens > window {m['window']}")
    if m["orig_ctx"] is not None:
        report(n_prompt > m["orig_ctx"], f"{name} prompt {n_prompt} tokens > original context {m['orig_ctx']}")


def check_matters(m, ref, n_prompt):
    for vname, path in m["variants"].items():
        err, pos = rel_err(load(path, n_prompt), ref)
        report(err > MATTERS_MIN, f"matters {m['name']:13s} transformers with vs {vname}: differ by {err:.2e} "
               f"(must be > {MATTERS_MIN:.0e}, largest at pos {pos})")


def check_export(m, ref, ids, n_ctx):
    """llama.cpp vs what transformers computes for the model llama.cpp implements."""
    want = ref if m["llama_cpp_window"] else load(m["variants"]["no-window"], len(ids))
    what = "reference" if m["llama_cpp_window"] else "reference without the window (llama.cpp has none here)"
    name = f"export  {m['name']:13s}"
    try:
        lc = llama_prompt_logits(m["gguf"], ids, n_ctx)
    except Exception as e:  # noqa: BLE001 -- any failure is this check's failure
        report(False, f"{name} llama.cpp: {e}")
        return
    err, pos = rel_err(lc, want)
    bound = EXPORT_BOUND_F16_GELU if m["llama_cpp_f16_gelu"] else EXPORT_BOUND
    report(err <= bound, f"{name} llama.cpp vs {what}: err {err:.2e} (bound {bound:.0e}"
           + (", llama.cpp's F16 GELU" if m["llama_cpp_f16_gelu"] else "") + f", worst pos {pos})")


def check_logits(m, ref, ids, n_vocab, build, tmp, n_ctx):
    ctx = ["-c", str(n_ctx)]
    for path, flags, bound in (("ref", ["--reference"], ENGINE_BOUND),
                               ("fast32", ["-ctk", "f32", "-ctv", "f32"], ENGINE_BOUND),
                               ("fast", [], FAST_F16_CACHE_BOUND)):
        name = f"logits  {m['name']:13s} {path:6s}"
        try:
            ours = T.engine_logits(build, m["gguf"], ids, n_vocab, tmp, ctx + flags)
        except Exception as e:  # noqa: BLE001
            report(False, f"{name}: {e}")
            continue
        if not np.isfinite(ours).all():
            report(False, f"{name}: non-finite logits")
            continue
        err, pos = rel_err(ours, ref)
        line = (f"{name} engine vs reference: err {err:.2e} (bound {bound:.0e}, worst pos {pos}, "
                f"max|ref| {np.abs(ref).max():.2f})")
        if err > bound:  # where it starts (a window shows from position `window` on, a RoPE
            per = np.abs(ours - ref).max(axis=1) / np.abs(ref).max()  # error from position 1)
            first = int(np.argmax(per > bound))
            agree = int((ours.argmax(1) == ref.argmax(1)).sum())
            line += f"\n      first position over the bound: {first}; argmax agrees at {agree}/{len(ids)} positions"
            for vname, vpath in m["variants"].items():  # what the engine computes instead
                verr, _ = rel_err(ours, load(vpath, len(ids)))
                if verr <= bound:
                    line += f"\n      the engine computes transformers' {vname} model (err {verr:.2e})"
        report(err <= bound, line)


def check_greedy(m, ids, n, build, n_ctx):
    name = f"greedy  {m['name']:13s}"
    ctx = ["-c", str(n_ctx)]
    if m["llama_cpp_window"]:
        try:
            want, margins = T.llama_greedy(m["gguf"], ids, n, n_ctx)
        except Exception as e:  # noqa: BLE001
            report(False, f"{name} llama.cpp: {e}")
            return
        T.greedy_vs(name, build, m["gguf"], ids, n, want, margins, "llama.cpp", ctx)
    else:
        T.greedy_vs(name, build, m["gguf"], ids, n, m["hf_greedy"], m["hf_margins"], "transformers", ctx)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: test_archs.py BUILD_DIR")
    build = os.path.abspath(sys.argv[1])
    t0 = time.time()
    conv = subprocess.run([os.path.join(HERE, "converter.sh")], check=True, stdout=subprocess.PIPE,
                          text=True).stdout.strip()
    import make_arch_models
    print("metric: err = max over positions of max|ours - ref| / max|ref|", flush=True)
    with tempfile.TemporaryDirectory(prefix="er-archs-") as tmp:
        man = make_arch_models.main(os.path.join(tmp, "models"), conv)
        print(f"models built and converted in {time.time() - t0:.1f}s", flush=True)
        ids, n_vocab, n_ctx = man["prompt_ids"], man["n_vocab"], man["n_ctx"]
        have_engine = os.access(os.path.join(build, "edgerunner"), os.X_OK)
        if not have_engine:
            report(False, f"engine: {build}/edgerunner not found or not executable")
        for m in man["models"]:
            ref = load(m["ref"], len(ids))
            check_guards(m, len(ids))
            check_matters(m, ref, len(ids))
            check_export(m, ref, ids, n_ctx)
            if have_engine:
                check_logits(m, ref, ids, n_vocab, build, tmp, n_ctx)
                check_greedy(m, ids, man["n_greedy"], build, n_ctx)
    return T.summary(t0)


if __name__ == "__main__":
    sys.exit(main())
