#!/usr/bin/env python3
"""Builds a vocab-only GGUF (tokenizer metadata, no tensors) from a Hugging Face
tokenizer.json + tokenizer_config.json, the way llama.cpp's convert_hf_to_gguf.py does:

  tokenizer.ggml.model       "gpt2" (byte-level BPE)
  tokenizer.ggml.pre         given (qwen2 for Qwen2/Qwen3, llama-bpe for Llama-3)
  tokenizer.ggml.tokens      the vocabulary in id order, added tokens included; ids with no
                             token become "[PAD<id>]" (type UNUSED)
  tokenizer.ggml.token_type  NORMAL; added tokens CONTROL when special or when they look
                             special (<|...|>), else USER_DEFINED (Qwen3's <think>)
  tokenizer.ggml.merges      "left right", by rank
  special ids, add_bos_token (only when tokenizer_config.json says), chat_template

Usage: make_vocab_gguf.py TOKENIZER_DIR PRE ARCH OUT.gguf [--bos TOKEN] [--tiny-model]
  --bos: the BOS token when tokenizer_config.json names none but the model config does,
         as Qwen3's config.json does with <|endoftext|>
  --tiny-model: also write seeded random weights at qwen3 shapes (1 layer, width 64,
         F16 embeddings tied to the output), so that the file runs: a chat test model with
         the real vocabulary and template
"""
import argparse
import json
import os

import gguf


def looks_special(text):
    # convert_hf_to_gguf.py does_token_look_special
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
            or (text.startswith("<unused") and text.endswith(">")))


def add_tiny_qwen3(w, n_vocab):
    """Random weights at qwen3 shapes: 1 layer, n_embd 64, 2 heads of 32, 1 KV head, FFN 128."""
    import numpy as np
    rng = np.random.default_rng(4)
    n_embd, n_head, n_head_kv, head_dim, n_ff = 64, 2, 1, 32, 128
    w.add_block_count(1)
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(1000000.0)
    w.add_layer_norm_rms_eps(1e-6)

    def mat(rows, cols, scale=None):
        return (rng.standard_normal((rows, cols)) * (scale or cols ** -0.5)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    # as tests/oracle/make_models.py: a small tied embedding keeps greedy decoding from
    # repeating the input token; the final norm's gain restores the logit scale
    w.add_tensor("token_embd.weight", mat(n_vocab, n_embd, 0.03).astype(np.float16))
    w.add_tensor("output_norm.weight", norm(n_embd) * 20.0)
    w.add_tensor("blk.0.attn_norm.weight", norm(n_embd))
    w.add_tensor("blk.0.attn_q.weight", mat(n_head * head_dim, n_embd))
    w.add_tensor("blk.0.attn_k.weight", mat(n_head_kv * head_dim, n_embd))
    w.add_tensor("blk.0.attn_v.weight", mat(n_head_kv * head_dim, n_embd))
    w.add_tensor("blk.0.attn_output.weight", mat(n_embd, n_head * head_dim))
    w.add_tensor("blk.0.attn_q_norm.weight", norm(head_dim))
    w.add_tensor("blk.0.attn_k_norm.weight", norm(head_dim))
    w.add_tensor("blk.0.ffn_norm.weight", norm(n_embd))
    w.add_tensor("blk.0.ffn_gate.weight", mat(n_ff, n_embd))
    w.add_tensor("blk.0.ffn_up.weight", mat(n_ff, n_embd))
    w.add_tensor("blk.0.ffn_down.weight", mat(n_embd, n_ff))


def build(tok_dir, pre, arch, out, bos=None, tiny_model=False):
    tj = json.load(open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8"))
    cfg = json.load(open(os.path.join(tok_dir, "tokenizer_config.json"), encoding="utf-8"))
    model = tj["model"]
    assert model["type"] == "BPE", model["type"]
    vocab = dict(model["vocab"])
    added = {t["id"]: t for t in tj["added_tokens"]}
    for i, t in added.items():
        vocab[t["content"]] = i
    by_id = {i: t for t, i in vocab.items()}
    n = max(by_id) + 1
    tokens, types = [], []
    for i in range(n):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            t = added[i]
            tokens.append(t["content"])
            types.append(gguf.TokenType.CONTROL if t["special"] or looks_special(t["content"])
                         else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]

    w = gguf.GGUFWriter(out, arch)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)

    def token_id(name):
        v = cfg.get(name)
        if isinstance(v, dict):
            v = v.get("content")
        return vocab.get(v) if v else None

    bos_id = token_id("bos_token") if token_id("bos_token") is not None else vocab.get(bos) if bos else None
    if bos_id is not None:
        w.add_bos_token_id(bos_id)
    if token_id("eos_token") is not None:
        w.add_eos_token_id(token_id("eos_token"))
    if token_id("pad_token") is not None:
        w.add_pad_token_id(token_id("pad_token"))
    if "add_bos_token" in cfg:
        w.add_add_bos_token(bool(cfg["add_bos_token"]))
    if cfg.get("chat_template"):
        w.add_chat_template(cfg["chat_template"])
    if tiny_model:
        add_tiny_qwen3(w, n)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tok_dir")
    ap.add_argument("pre")
    ap.add_argument("arch")
    ap.add_argument("out")
    ap.add_argument("--bos")
    ap.add_argument("--tiny-model", action="store_true")
    a = ap.parse_args()
    build(a.tok_dir, a.pre, a.arch, a.out, a.bos, a.tiny_model)


if __name__ == "__main__":
    main()
