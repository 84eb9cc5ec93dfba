#!/usr/bin/env python3
"""A tiny Hugging Face Qwen3 folder (config.json, model.safetensors in F32) for the CLI and
server tests: one layer of width W (2 heads of W/2, 1 KV head, FFN W), tied embeddings,
deterministic weights; with TOKENIZER_DIR its tokenizer.json and tokenizer_config.json are
copied in (the Qwen3 tokenizer: 151,936 rows), else 16 rows and no tokenizer.

Usage: make_hf_folder.py DIR W [TOKENIZER_DIR]
"""
import json
import os
import struct
import sys

d, w = sys.argv[1], int(sys.argv[2])
tok = sys.argv[3] if len(sys.argv) > 3 else None
n_vocab = 151936 if tok else 16  # the Qwen3 tokenizer's rows, as the real config pads them
cfg = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": w, "num_hidden_layers": 1, "num_attention_heads": 2,
       "num_key_value_heads": 1, "head_dim": w // 2, "intermediate_size": w, "max_position_embeddings": 64,
       "vocab_size": n_vocab, "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "hidden_act": "silu",
       "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
json.dump(cfg, open(f"{d}/config.json", "w"))
h = w // 2
shapes = {"model.embed_tokens.weight": [n_vocab, w], "model.norm.weight": [w],
          "model.layers.0.input_layernorm.weight": [w], "model.layers.0.post_attention_layernorm.weight": [w],
          "model.layers.0.self_attn.q_proj.weight": [w, w], "model.layers.0.self_attn.k_proj.weight": [h, w],
          "model.layers.0.self_attn.v_proj.weight": [h, w], "model.layers.0.self_attn.o_proj.weight": [w, w],
          "model.layers.0.self_attn.q_norm.weight": [h], "model.layers.0.self_attn.k_norm.weight": [h],
          "model.layers.0.mlp.gate_proj.weight": [w, w], "model.layers.0.mlp.up_proj.weight": [w, w],
          "model.layers.0.mlp.down_proj.weight": [w, w]}
header, data = {}, b""
for name, shape in shapes.items():
    n = 1
    for x in shape:
        n *= x
    vals = [1.0] * n if len(shape) == 1 else [((i * 7919) % 13 - 6) / 10 for i in range(n)]
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + 4 * n]}
    data += struct.pack(f"<{n}f", *vals)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
open(f"{d}/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + data)
if tok:
    import shutil
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok, f), d)
