"""The sampler's penalties against llama.cpp's (llama_sampler_init_penalties through
llama-cpp-python's ctypes bindings): for random logits, histories and settings, the
penalized logits must agree. Both sides compute in float; llama.cpp may be built with FMA
contraction, so agreement is required to 1 ulp-ish (rel 1e-6), and exact matches are
counted and reported.

Usage: python test_penalties.py BUILD_DIR   (prints "N passed, M failed")"""
import ctypes
import math
import random
import subprocess
import sys

import numpy as np
import llama_cpp as L


def llama_penalties(logits, history, last_n, rep, freq, pres):
    n = len(logits)
    smpl = L.llama_sampler_init_penalties(n, last_n, rep, freq, pres)
    for t in history:
        L.llama_sampler_accept(smpl, t)
    data = (L.llama_token_data * n)()
    for i, l in enumerate(logits):
        data[i].id, data[i].logit, data[i].p = i, float(l), 0.0
    arr = L.llama_token_data_array(data=ctypes.cast(data, L.llama_token_data_p), size=n, selected=-1, sorted=False)
    L.llama_sampler_apply(smpl, ctypes.byref(arr))
    out = np.empty(n, dtype=np.float32)
    for i in range(arr.size):
        out[data[i].id] = data[i].logit
    L.llama_sampler_free(smpl)
    return out


def ours(tool, logits, history, last_n, rep, freq, pres):
    text = f"{len(logits)} {last_n} {rep!r} {freq!r} {pres!r}\n{len(history)} {' '.join(map(str, history))}\n"
    text += "\n".join(repr(float(x)) if math.isfinite(x) else ("-inf" if x < 0 else "inf") for x in logits) + "\n"
    r = subprocess.run([tool], input=text, capture_output=True, text=True, check=True)
    return np.array([float(x) for x in r.stdout.split()], dtype=np.float32)


def main():
    tool = sys.argv[1] + "/tests/sampler_tool"
    rng = random.Random(1234)
    n_pass = n_fail = n_exact = n_vals = 0
    cases = []
    settings = [  # (last_n, repeat, freq, presence)
        (64, 1.1, 0.0, 0.0), (64, 1.3, 0.0, 0.0), (8, 1.5, 0.0, 0.0), (64, 1.0, 0.5, 0.0),
        (64, 1.0, 0.0, 0.7), (16, 1.2, 0.3, 0.4), (3, 0.8, -0.2, 0.1), (0, 1.3, 0.5, 0.5),
        (1000, 1.18, 0.05, 0.25), (64, 1.0, 0.0, 0.0),
    ]
    for n_vocab in (8, 100, 3000):
        for last_n, rep, freq, pres in settings:
            n_hist = rng.choice([1, 5, 40, 200, 1500])
            hot = rng.sample(range(n_vocab), min(n_vocab, 12))
            history = [rng.choice(hot) if rng.random() < 0.7 else rng.randrange(n_vocab) for _ in range(n_hist)]
            logits = np.array([rng.gauss(0, 3) for _ in range(n_vocab)], dtype=np.float32)
            logits[rng.randrange(n_vocab)] = 0.0
            if n_vocab > 8:
                logits[history[0] if history else 1] = -np.inf
            cases.append((f"n_vocab={n_vocab} last_n={last_n} rep={rep} freq={freq} pres={pres} hist={n_hist}",
                          logits, history, last_n, rep, freq, pres))
    for name, logits, history, last_n, rep, freq, pres in cases:
        want = llama_penalties(logits, history, last_n, rep, freq, pres)
        got = ours(tool, logits, history, last_n, rep, freq, pres)
        same_inf = np.array_equal(np.isinf(want), np.isinf(got))
        fin = np.isfinite(want)
        close = same_inf and np.allclose(got[fin], want[fin], rtol=1e-6, atol=1e-6)
        n_exact += int(np.sum(got == want))
        n_vals += len(want)
        changed = int(np.sum(got != logits))
        if close:
            n_pass += 1
        else:
            n_fail += 1
            i = int(np.argmax(np.abs(np.nan_to_num(got - want))))
            print(f"FAIL {name}: logit {i} is {got[i]!r}, llama.cpp {want[i]!r}")
            continue
        print(f"ok   {name}: {changed} logits penalized, agree with llama.cpp")
    print(f"penalized logits equal to llama.cpp's bit for bit: {n_exact} of {n_vals}")
    print(f"{n_pass} passed, {n_fail} failed")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
