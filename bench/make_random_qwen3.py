#!/usr/bin/env python3
"""Writes random-weight GGUF files with the exact tensor layout of Qwen3-0.6B (or another
Qwen3 size), for speed runs where no real weights can be had. Speed does not depend on the
values; the values are scaled so that activations stay O(1) and the greedy argmax has
clear margins (so that a correctness check between backends is meaningful).

Usage: make_random_qwen3.py OUTDIR [--types Q8_0,Q4_0,F16,Q4_K_M] [--size 0.6b] [--seed 1]
                            [--edgerunner build/edgerunner] [--threads N]
F32, F16, Q8_0, Q4_0, Q6_K and the mixes Q4_K_M and Q5_K_M (llama.cpp's per-tensor types:
a Q6_K head, Q6_K attn_v and ffn_down in some layers) are written directly, random codes
and scales (fast, also at 8B); every other type `edgerunner quantize` takes (Q4_1, Q5_0,
Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, the _K_S mixes) is quantized by our own quantizer from the
same weights written as F16 first (a temporary file beside the output; about a minute per
0.6B file on 16 cores).
Needs numpy and the `gguf` package (carried as a wheel to machines without network).
"""
import argparse
import os
import subprocess

import numpy as np
import gguf

SIZES = {  # n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff (Qwen3 configs)
    "0.6b": (1024, 28, 16, 8, 128, 3072),
    "1.7b": (2048, 28, 16, 8, 128, 6144),
    "4b": (2560, 36, 32, 8, 128, 9728),
    "8b": (4096, 36, 32, 8, 128, 12288),
    "14b": (5120, 40, 40, 8, 128, 17408),
    "32b": (5120, 64, 64, 8, 128, 25600),
}
N_VOCAB = 151936
QK = 32


def q8_0_blocks(rng, n_out, n_in, std):
    """Random Q8_0 data: per-block scale d, int8 quants uniform in [-127, 127]."""
    blocks = np.empty((n_out, n_in // QK), dtype=[("d", "<f2"), ("qs", "i1", (QK,))])
    blocks["qs"] = rng.integers(-127, 128, size=(n_out, n_in // QK, QK), dtype=np.int8)
    # uniform int8 has std 73.6: d scales that to `std`, with a little spread per block
    blocks["d"] = (std / 73.6 * rng.uniform(0.5, 1.5, size=(n_out, n_in // QK))).astype("<f2")
    return blocks.view(np.uint8).reshape(n_out, n_in // QK * 34)


def q4_0_blocks(rng, n_out, n_in, std):
    """Random Q4_0 data: per-block scale d, nibbles uniform in [0, 15] (value d * (q - 8))."""
    blocks = np.empty((n_out, n_in // QK), dtype=[("d", "<f2"), ("qs", "u1", (QK // 2,))])
    blocks["qs"] = rng.integers(0, 256, size=(n_out, n_in // QK, QK // 2), dtype=np.uint8)
    # q - 8 uniform on [-8, 7] has std 4.61
    blocks["d"] = (std / 4.61 * rng.uniform(0.5, 1.5, size=(n_out, n_in // QK))).astype("<f2")
    return blocks.view(np.uint8).reshape(n_out, n_in // QK * 18)


def q6_k_blocks(rng, n_out, n_in, std):
    """Random Q6_K data: codes uniform in [0, 63], int8 sub-block scales in [-63, 63] (value
    d * sc * (q - 32): about zero mean)."""
    nb = n_out * (n_in // 256)
    raw = rng.integers(0, 256, size=(nb, 210), dtype=np.uint8)
    raw[:, 192:208] = rng.integers(-63, 64, size=(nb, 16)).astype(np.int8).view(np.uint8)
    # q - 32 has std 18.5, the scales an rms of 36.7
    d = (std / (18.5 * 36.7) * rng.uniform(0.5, 1.5, size=nb)).astype("<f2")
    raw[:, 208:210] = d.view(np.uint8).reshape(nb, 2)
    return raw.reshape(n_out, n_in // 256 * 210)


def q45_k_blocks(rng, n_out, n_in, std, bits):
    """Random Q4_K (bits 4) or Q5_K (5) data: codes uniform, each sub-block's 6-bit scale
    and minimum equal and dmin = d * (2^bits - 1) / 2, so that values d * sc * (q - mean)
    have zero mean."""
    nb, size = n_out * (n_in // 256), 144 if bits == 4 else 176
    raw = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    sc = rng.integers(0, 64, size=(nb, 8), dtype=np.uint8)  # scale j = minimum j
    raw[:, 4:8] = (sc[:, :4] | ((sc[:, 4:] >> 4) << 6))
    raw[:, 8:12] = (sc[:, :4] | ((sc[:, 4:] >> 4) << 6))
    raw[:, 12:16] = (sc[:, 4:] & 15) | ((sc[:, 4:] & 15) << 4)
    mean, q_std = ((1 << bits) - 1) / 2, (4.61 if bits == 4 else 9.23)
    d = std / (q_std * 36.5) * rng.uniform(0.5, 1.5, size=nb)  # 36.5: the scales' rms
    raw[:, 0:2] = d.astype("<f2").view(np.uint8).reshape(nb, 2)
    raw[:, 2:4] = (d * mean).astype("<f2").view(np.uint8).reshape(nb, 2)
    return raw.reshape(n_out, n_in // 256 * size)


K_TYPES = {  # written directly: fast enough for Qwen3-8B
    "Q6_K": (lambda rng, o, i, s: q6_k_blocks(rng, o, i, s), gguf.GGMLQuantizationType.Q6_K),
    "Q5_K": (lambda rng, o, i, s: q45_k_blocks(rng, o, i, s, 5), gguf.GGMLQuantizationType.Q5_K),
    "Q4_K": (lambda rng, o, i, s: q45_k_blocks(rng, o, i, s, 4), gguf.GGMLQuantizationType.Q4_K),
}
# llama.cpp's _K_M recipes (src/quant/mix.c) for a tied-output Qwen3: the head (token_embd)
# in Q6_K, attn_v and ffn_down in Q6_K in the layers use_more_bits picks, the rest the base
MIXES = {"Q4_K_M": ("Q4_K", 15), "Q5_K_M": ("Q5_K", 17), "Q6_K": ("Q6_K", 18)}


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensor_type(wtype, name, il, n_layer):
    """The type of one weight under wtype (a mix of MIXES, or one type)."""
    if wtype not in MIXES:
        return wtype
    base = MIXES[wtype][0]
    if name == "token_embd" or (name in ("attn_v", "ffn_down") and use_more_bits(il, n_layer)):
        return "Q6_K"
    return base


def matrix(rng, wtype, n_out, n_in, std):
    if wtype in K_TYPES:
        make, t = K_TYPES[wtype]
        return make(rng, n_out, n_in, std), t
    if wtype == "Q8_0":
        return q8_0_blocks(rng, n_out, n_in, std), gguf.GGMLQuantizationType.Q8_0
    if wtype == "Q4_0":
        return q4_0_blocks(rng, n_out, n_in, std), gguf.GGMLQuantizationType.Q4_0
    w = (rng.standard_normal((n_out, n_in), dtype=np.float32) * std)
    if wtype == "F16":
        return w.astype(np.float16), gguf.GGMLQuantizationType.F16
    return w, gguf.GGMLQuantizationType.F32


def copy_vocab(w, vocab_path):
    """tokenizer.* keys of vocab_path into writer w (bos/eos are written by the caller)."""
    r = gguf.GGUFReader(vocab_path)
    for key, f in r.fields.items():
        if not key.startswith("tokenizer.") or key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
            continue
        val = f.contents()
        if key == "tokenizer.ggml.tokens":
            val = list(val) + [f"[PAD{i}]" for i in range(len(val), N_VOCAB)]
        elif key == "tokenizer.ggml.token_type":
            val = list(val) + [int(gguf.TokenType.UNUSED)] * (N_VOCAB - len(val))
        sub = f.types[1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, val, f.types[0], sub_type=sub)


# written here; file_type of each
DIRECT = {"Q8_0": 7, "Q4_0": 2, "F16": 1, "F32": 0, **{k: v[1] for k, v in MIXES.items()}}


def write(path, size, wtype, seed, vocab=None, edgerunner=None, threads=None):
    if wtype not in DIRECT:
        # the same weights as F16, then our quantizer: the recipe's per-tensor types
        tmp = path + ".f16.tmp"
        write(tmp, size, "F16", seed, vocab)
        cmd = [edgerunner, "quantize", tmp, path, wtype] + (["-t", str(threads)] if threads else [])
        try:
            r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)}: {r.stderr.strip().splitlines()[-1:]}")
        finally:
            os.remove(tmp)
        return
    n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff = SIZES[size]
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "qwen3")
    w.add_name(f"random-qwen3-{size}-{wtype}")
    w.add_context_length(40960)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(DIRECT[wtype])
    w.add_bos_token_id(151643)
    w.add_eos_token_id(151645)
    if vocab:
        copy_vocab(w, vocab)

    def add(name, data, raw_dtype=None):
        if raw_dtype is None or raw_dtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, np.ascontiguousarray(data, dtype=np.float32))
        elif raw_dtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_dtype=raw_dtype)

    def norm(n, scale=1.0):
        return (scale * (1.0 + 0.1 * rng.standard_normal(n))).astype(np.float32)

    # the tied head: logits = embd . rmsnorm(x); a larger final norm spreads the logits
    embd, t = matrix(rng, tensor_type(wtype, "token_embd", -1, n_layer), N_VOCAB, n_embd, 0.05)
    add("token_embd.weight", embd, t)
    add("output_norm.weight", norm(n_embd, 3.0))
    for il in range(n_layer):
        p = f"blk.{il}."
        add(p + "attn_norm.weight", norm(n_embd))
        add(p + "ffn_norm.weight", norm(n_embd))
        add(p + "attn_q_norm.weight", norm(head_dim))
        add(p + "attn_k_norm.weight", norm(head_dim))
        for name, n_out, n_in in (("attn_q", n_head * head_dim, n_embd), ("attn_k", n_head_kv * head_dim, n_embd),
                                  ("attn_v", n_head_kv * head_dim, n_embd), ("attn_output", n_embd, n_head * head_dim),
                                  ("ffn_gate", n_ff, n_embd), ("ffn_up", n_ff, n_embd), ("ffn_down", n_embd, n_ff)):
            # residual branches are scaled down so the stream stays O(1) over the layers
            std = (0.5 if name in ("attn_output", "ffn_down") else 1.0) / np.sqrt(n_in)
            m, t = matrix(rng, tensor_type(wtype, name, il, n_layer), n_out, n_in, std)
            add(p + name + ".weight", m, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--types", default="Q8_0")
    ap.add_argument("--size", default="0.6b", choices=sorted(SIZES))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vocab", default=None, help="a vocabulary GGUF whose tokenizer.* keys to embed")
    ap.add_argument("--edgerunner", default="build/edgerunner", help="the binary that quantizes the other types")
    ap.add_argument("--threads", type=int, default=None, help="its -t (default: its own)")
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    for t in a.types.split(","):
        suffix = "-vocab" if a.vocab else ""
        path = os.path.join(a.outdir, f"qwen3-{a.size}-random-{t.lower()}{suffix}.gguf")
        write(path, a.size, t, a.seed, a.vocab, a.edgerunner, a.threads)
        print(path)


if __name__ == "__main__":
    main()
