#!/usr/bin/env python3
"""Writes random-weight GGUF files with the exact tensor layout of Qwen3-0.6B (or another
Qwen3 size), for speed runs where no real weights can be had. Speed does not depend on the
values; the values are scaled so that activations stay O(1) and the greedy argmax has
clear margins (so that a correctness check between backends is meaningful).

Usage: make_random_qwen3.py OUTDIR [--types Q8_0,Q4_0,F16] [--size 0.6b] [--seed 1]
Needs numpy and the `gguf` package (carried as a wheel to machines without network).
"""
import argparse
import os

import numpy as np
import gguf

SIZES = {  # n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff (Qwen3 configs)
    "0.6b": (1024, 28, 16, 8, 128, 3072),
    "1.7b": (2048, 28, 16, 8, 128, 6144),
    "4b": (2560, 36, 32, 8, 128, 9728),
    "8b": (4096, 36, 32, 8, 128, 12288),
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


def matrix(rng, wtype, n_out, n_in, std):
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


def write(path, size, wtype, seed, vocab=None):
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
    w.add_file_type({"Q8_0": 7, "Q4_0": 2, "F16": 1, "F32": 0}[wtype])
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
    embd, t = matrix(rng, wtype, N_VOCAB, n_embd, 0.05)
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
            m, t = matrix(rng, wtype, n_out, n_in, std)
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
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    for t in a.types.split(","):
        suffix = "-vocab" if a.vocab else ""
        path = os.path.join(a.outdir, f"qwen3-{a.size}-random-{t.lower()}{suffix}.gguf")
        write(path, a.size, t, a.seed, a.vocab)
        print(path)


if __name__ == "__main__":
    main()
