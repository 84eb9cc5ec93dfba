#!/usr/bin/env python3
"""Builds the oracle test models: small seeded-random Qwen3 and Llama models in Hugging Face
transformers, exported to GGUF (F32, F16, BF16, Q8_0) exactly as llama.cpp's
convert_hf_to_gguf.py lays them out, plus the reference logits of each file.

Usage: make_models.py OUTDIR      (writes OUTDIR/manifest.json and the files it lists)

Outputs, per arch in {qwen3, llama} and type in {F32, F16, BF16, Q8_0}:
  OUTDIR/{arch}-{type}.gguf       the model
  OUTDIR/{arch}-{type}.ref.f32    reference logits, float32 LE, (n_prompt, n_vocab) row-major
The reference of an F32 file is the original transformers model. The reference of any other
type is the same transformers model with every weight replaced by the weight read back from
that GGUF file and dequantized (gguf.quants.dequantize; q/k un-permuted for llama), so a
correct engine that computes in float32 on dequantized weights matches every type to float32
rounding: the comparison isolates the engine's arithmetic from the quantization error.

Weights are not HF's init (std 0.02 gives near-flat logits and tie-prone greedy decoding):
matrices are N(0, gain^2/fan_in), embeddings N(0, embd_std^2), norm weights N(1, 0.1^2)
(times out_norm_gain for the final norm). Logits then have a std of about 6-7, and the seeds
below were picked (by scanning a dozen) so that llama.cpp's 32-token greedy decode has a
top1-top2 margin of at least ~0.1 at every step and does not collapse into one repeated
token. Qwen3 is tied: a small embedding (0.03) keeps the input token from dominating the
residual (which made greedy repeat it forever); the final norm gain restores the logit scale.
Everything is seeded: the files are identical on every run.
"""
import json
import os
import sys

import numpy as np
import torch
import gguf
from gguf import GGMLQuantizationType as QT
from gguf import LlamaFileType as FT

# Importing transformers at module level is slow; it is done once here for all models.
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
# the real trained model copied into the repository (tests/data/README.md)
STORIES = os.path.join(HERE, "..", "data", "stories260K.gguf")
N_VOCAB = 512
N_PROMPT = 16
PROMPT_SEED = 1234

TYPES = {  # name: (tensor type of 2-D weights, general.file_type)
    "F32": (QT.F32, FT.ALL_F32),
    "F16": (QT.F16, FT.MOSTLY_F16),
    "BF16": (QT.BF16, FT.MOSTLY_BF16),
    "Q8_0": (QT.Q8_0, FT.MOSTLY_Q8_0),
}

ARCHS = {
    # Qwen3: head_dim 64 != hidden/heads 32, GQA 4:2, q/k norm, NeoX rope, tied embeddings.
    "qwen3": dict(
        cls=Qwen3ForCausalLM, cfg=Qwen3Config, seed=11, embd_std=0.03, head_gain=1.0, out_norm_gain=20.0,
        kw=dict(vocab_size=N_VOCAB, hidden_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                intermediate_size=256, rms_norm_eps=1e-6, max_position_embeddings=256,
                tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                bos_token_id=1, eos_token_id=2, pad_token_id=None)),
    # Llama: head_dim 32, GQA 4:2, interleaved rope in GGUF (q/k permuted), untied head.
    "llama": dict(
        cls=LlamaForCausalLM, cfg=LlamaConfig, seed=8, embd_std=1.0, head_gain=6.0, out_norm_gain=1.0,
        kw=dict(vocab_size=N_VOCAB, hidden_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                intermediate_size=256, rms_norm_eps=1e-5, max_position_embeddings=256,
                tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                bos_token_id=1, eos_token_id=2, pad_token_id=None)),
}

# HF parameter name suffix -> GGUF tensor name suffix (per block)
BLOCK_MAP = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def prompt_ids():
    """16 fixed ids in [3, 512): no UNK (0), BOS (1) or EOS (2)."""
    rng = np.random.default_rng(PROMPT_SEED)
    return [int(x) for x in rng.integers(3, N_VOCAB, size=N_PROMPT)]


def gguf_name(hf_name):
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    parts = hf_name.split(".")
    assert parts[:2] == ["model", "layers"], hf_name
    return f"blk.{parts[2]}.{BLOCK_MAP['.'.join(parts[3:])]}"


def permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py LlamaModel.permute: HF rotate-half -> GGUF interleaved pairs."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def unpermute(w, n_head, n_head_kv):
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def build_model(arch):
    spec = ARCHS[arch]
    cfg = spec["cfg"](**spec["kw"])
    cfg._attn_implementation = "eager"
    torch.manual_seed(spec["seed"])
    model = spec["cls"](cfg).float().eval()
    g = torch.Generator().manual_seed(spec["seed"])
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied head appears once (as embed_tokens)
            if p.ndim == 1:
                gain = spec["out_norm_gain"] if name == "model.norm.weight" else 1.0
                p.copy_((1.0 + 0.1 * torch.randn(p.shape, generator=g)) * gain)
            elif name == "model.embed_tokens.weight":
                p.copy_(torch.randn(p.shape, generator=g) * spec["embd_std"])
            else:
                gain = spec["head_gain"] if name == "lm_head.weight" else 1.0
                p.copy_(torch.randn(p.shape, generator=g) * (gain / p.shape[1] ** 0.5))
    return model


def hf_logits(model, ids):
    with torch.no_grad():
        out = model(torch.tensor([ids], dtype=torch.long), use_cache=False)
    return out.logits[0].float().numpy().astype(np.float32)


def stories_vocab():
    f = gguf.GGUFReader(STORIES).fields
    tokens = list(f["tokenizer.ggml.tokens"].contents())
    scores = [float(x) for x in f["tokenizer.ggml.scores"].contents()]
    types = [int(x) for x in f["tokenizer.ggml.token_type"].contents()]
    ids = {k: int(f[f"tokenizer.ggml.{key}_token_id"].contents())
           for k, key in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"))}
    assert len(tokens) == N_VOCAB, len(tokens)
    return f["tokenizer.ggml.model"].contents(), tokens, scores, types, ids


def hf_to_gguf_tensors(model, arch):
    """(gguf name, float32 numpy array) in the converter's order, q/k permuted for llama."""
    cfg = model.config
    out = []
    for name, p in model.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue  # save_pretrained drops the tied head; llama.cpp reuses token_embd
        w = p.detach().float().numpy().copy()
        if arch == "llama" and name.endswith("q_proj.weight"):
            w = permute(w, cfg.num_attention_heads, cfg.num_attention_heads)
        elif arch == "llama" and name.endswith("k_proj.weight"):
            w = permute(w, cfg.num_attention_heads, cfg.num_key_value_heads)
        out.append((gguf_name(name), np.ascontiguousarray(w, dtype=np.float32)))
    return out


def write_gguf(path, arch, model, tname, vocab):
    cfg = model.config
    qtype, ftype = TYPES[tname]
    w = gguf.GGUFWriter(path, arch)
    # general.* as prepare_metadata() writes them
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(f"edgerunner-oracle-{arch}")
    # TextModel.set_gguf_parameters
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_key_length(cfg.head_dim)  # head_dim is in both configs
    w.add_value_length(cfg.head_dim)
    w.add_file_type(ftype)
    if arch == "llama":  # LlamaModel.set_gguf_parameters
        w.add_vocab_size(cfg.vocab_size)
        w.add_rope_dimension_count(cfg.head_dim)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    # tokenizer: the SentencePiece vocab of stories260K (512 tokens)
    tok_model, tokens, scores, types, ids = vocab
    w.add_tokenizer_model(tok_model)
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    if "bos" in ids:
        w.add_bos_token_id(ids["bos"])
    if "eos" in ids:
        w.add_eos_token_id(ids["eos"])
    if "unk" in ids:
        w.add_unk_token_id(ids["unk"])
    w.add_add_bos_token(False)  # tests feed exact ids
    for name, arr in hf_to_gguf_tensors(model, arch):
        # as in the converter: 1-D tensors and norms stay F32
        t = QT.F32 if (arr.ndim <= 1 or name.endswith("_norm.weight")) else qtype
        w.add_tensor(name, gguf.quants.quantize(arr, t), raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def dequantized_state_dict(path, arch, model):
    """The GGUF file's weights, dequantized and mapped back to HF names and layout."""
    cfg = model.config
    r = gguf.GGUFReader(path)
    by_name = {t.name: t for t in r.tensors}
    sd = {}
    for name, p in model.state_dict().items():
        gname = gguf_name(name)
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            gname = "token_embd.weight"
        t = by_name[gname]
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(p.shape)
        if arch == "llama" and name.endswith("q_proj.weight"):
            w = unpermute(w, cfg.num_attention_heads, cfg.num_attention_heads)
        elif arch == "llama" and name.endswith("k_proj.weight"):
            w = unpermute(w, cfg.num_attention_heads, cfg.num_key_value_heads)
        sd[name] = torch.from_numpy(np.ascontiguousarray(w))
    return sd


def main(outdir):
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    ids = prompt_ids()
    vocab = stories_vocab()
    manifest = {"prompt_ids": ids, "n_vocab": N_VOCAB, "files": []}
    for arch in ARCHS:
        model = build_model(arch)
        orig = {k: v.clone() for k, v in model.state_dict().items()}
        for tname in TYPES:
            gpath = os.path.join(outdir, f"{arch}-{tname}.gguf")
            rpath = os.path.join(outdir, f"{arch}-{tname}.ref.f32")
            write_gguf(gpath, arch, model, tname, vocab)
            sd = dequantized_state_dict(gpath, arch, model)
            if tname == "F32":  # round trip must be exact (permutation included)
                for k, v in sd.items():
                    assert torch.equal(v, orig[k]), f"{arch} F32 round trip differs at {k}"
                ref = hf_logits(model, ids)
            else:
                model.load_state_dict(sd)
                ref = hf_logits(model, ids)
                model.load_state_dict(orig)
            ref.astype("<f4").tofile(rpath)
            manifest["files"].append({"arch": arch, "type": tname, "gguf": gpath, "ref": rpath,
                                      "tied": bool(model.config.tie_word_embeddings)})
    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_models.py OUTDIR")
    m = main(sys.argv[1])
    print(f"wrote {len(m['files'])} models to {sys.argv[1]}")
