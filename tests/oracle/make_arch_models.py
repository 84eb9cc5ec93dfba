#!/usr/bin/env python3
"""Builds the architecture oracle models of test_archs.py: small seeded-random Hugging Face
models (Phi-3, Mistral, Llama with llama3 and linear RoPE scaling, Gemma-3), saved with
save_pretrained and converted to F32 GGUF by llama.cpp's own convert_hf_to_gguf.py
(converter.sh fetches it), plus the transformers logits and greedy ids they are judged by.

Usage: make_arch_models.py OUTDIR CONVERTER_DIR [NAME...]
       (CONVERTER_DIR: what converter.sh prints; writes OUTDIR/manifest.json and the files it
       lists, for every model or the NAMEs given)

Per model NAME:
  OUTDIR/NAME/               the save_pretrained folder (+ tokenizer.model), the converter's input
  OUTDIR/NAME.gguf           the converter's output (Mistral: + the window key, see below)
  OUTDIR/NAME.ref.f32        transformers logits, float32 LE, (n_prompt, n_vocab), all positions
  OUTDIR/NAME.VARIANT.f32    the same weights with one feature turned off or got wrong (MODELS'
                             variants): proves the feature moves the logits (test_archs.py)
For the models whose window llama.cpp does not apply, the manifest also holds transformers'
32-token greedy continuation (argmax of a full forward at every step) and its top1-top2 margins.

Why the converter and not a writer of our own (make_models.py): what is tested here is mostly
metadata and tensors that only the converter defines (Phi-3's fused attn_qkv and ffn_up,
rope.dimension_count from partial_rotary_factor, rope_factors_long/short and
rope.scaling.attn_factor, rope_freqs from the llama3 parameters, Gemma-3's norm offsets and
freq_base_swa); a file written by us would only test our reading of our own writing.

Where llama.cpp does not follow transformers (reported by the tests, not papered over):
  - Phi-3: the converter writes phi3.attention.sliding_window, but llama.cpp turns Phi-3's
    window off ("Phi SWA is currently disabled", src/models/phi3.cpp).
  - Mistral: the converter writes no window at all for MistralForCausalLM (arch llama), and
    llama.cpp's llama never reads one. The engine reads llama.attention.sliding_window, so
    this builder adds that key to the converted file (copy_with_kv, as gguf-py's
    gguf_new_metadata.py copies a file); nothing else in the file is touched.
  So for those two, llama.cpp is checked against transformers *without* the window (what it
  computes), and the engine against transformers with it.

Vocabulary: the converter reads the tokenizer with sentencepiece from tokenizer.model (Phi-3
always; Llama/Mistral and Gemma-3 when the file is there). spm_model_bytes() writes that file
from the 512-token SentencePiece vocabulary of tests/data/stories260K.gguf, so the models are
small (logits of 80 x 512) and no tokenizer has to be fetched. The tests feed token ids.

Weights are not HF's init (near-flat logits, tie-prone greedy): as make_models.py, matrices
N(0, gain^2/fan_in), embeddings N(0, embd_std^2), norm weights N(1, 0.1^2) (Gemma's norms are
stored as offsets from 1: N(0, 0.1^2)). Everything is seeded: files are identical every run.
"""
import json
import os
import struct
import subprocess
import sys
import threading

import numpy as np
import torch
import gguf
from transformers.utils import logging as hf_logging
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, Phi3Config, Phi3ForCausalLM)

hf_logging.set_verbosity_error()  # e.g. its advice on longrope's `factor`: we follow Phi-3's configs
hf_logging.disable_progress_bar()

HERE = os.path.dirname(os.path.abspath(__file__))
STORIES = os.path.join(HERE, "..", "data", "stories260K.gguf")
N_VOCAB = 512
# 80 = two full 32-token blocks of the fast path's prompt attention and a ragged 16-token
# tail; longer than every window and every original context below (test_archs.py asserts it)
N_PROMPT = 80
PROMPT_SEED = 2024
N_GREEDY = 32
# The context every engine and llama.cpp run gets: above Phi-3's original 32, so both pick
# the long factors, as transformers does for any sequence longer than 32.
N_CTX = 256

COMMON = dict(vocab_size=N_VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=None)


def longrope_factors(n):
    """Deterministic factors shaped like Phi-3.5's: short near 1, long growing with the dim."""
    x = np.arange(n) / (n - 1)
    return [float(v) for v in 1.0 + 0.5 * x], [float(v) for v in 1.0 + 15.0 * x ** 2]


SHORT, LONG = longrope_factors(12)  # rope dims 24 (partial 0.75 of head_dim 32) / 2


LINEAR8 = {"rope_type": "linear", "factor": 8.0}


def gemma3_rope(full=None, sliding=None):
    return {"full_attention": dict(full or {"rope_type": "default"}, rope_theta=1000000.0),
            "sliding_attention": dict(sliding or {"rope_type": "default"}, rope_theta=10000.0)}


# Tied head: as make_models.py's Qwen3, a small embedding (0.03, times sqrt(64) at the input)
# keeps the input token from dominating the residual (with 0.125 greedy repeated one token
# forever); the final norm's gain of 25 restores logits of std ~6.
GEMMA3 = dict(
    cls=Gemma3ForCausalLM, cfg=Gemma3TextConfig, embd_std=0.03, head_gain=1.0, out_norm_gain=25.0, norm_offset=1.0,
    kw=dict(hidden_size=64, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
            head_dim=32, intermediate_size=128, rms_norm_eps=1e-6, max_position_embeddings=256,
            sliding_window=4, query_pre_attn_scalar=32, tie_word_embeddings=True,
            layer_types=["sliding_attention"] * 5 + ["full_attention"], rope_parameters=gemma3_rope(), **COMMON),
    window=4, llama_cpp_window=True, orig_ctx=None, llama_cpp_f16_gelu=True)

# name: cls, cfg, seed, init gains, config, and the facts the tests use:
#   window: the sliding window (tokens, the query's own included), None if none
#   llama_cpp_window: llama.cpp applies that window (False: it computes without it)
#   orig_ctx: the context past which the RoPE scaling acts (prompt must be longer)
#   variants: name -> config changes that turn one feature off, or get it wrong in a way an
#       engine might (logits must move: test_archs.py's "matters"; a failing engine is also
#       compared with each, to say which one it computes)
#   add_kv: keys added to the converted file (Mistral's window, see the header)
#   llama_cpp_f16_gelu: llama.cpp's CPU GELU is a lookup table of F16 (GGML_GELU_FP16 in
#       ggml-cpu/vec.h): its input and output are rounded to 11 bits, so llama.cpp's logits
#       get the F16 bound against transformers (test_archs.py)
MODELS = {
    # Phi-3 with a window shorter than the prompt, full rotary, GQA 4:2 (llama.cpp's phi3
    # needs n_head * head_dim == n_embd, so head_dim is hidden/heads here)
    "phi3": dict(
        cls=Phi3ForCausalLM, cfg=Phi3Config, seed=2, embd_std=1.0, head_gain=6.0, out_norm_gain=1.0,
        kw=dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=256, rms_norm_eps=1e-5, max_position_embeddings=256,
                original_max_position_embeddings=256, sliding_window=16, tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **COMMON),
        window=16, llama_cpp_window=False, orig_ctx=None,
        variants={"no-window": dict(sliding_window=None)}),
    # Phi-4-mini's RoPE: partial rotary 0.75 (24 of 32 dims) with longrope; max 256 over an
    # original 32 (attention factor sqrt(1 + ln 8 / ln 32) = 1.265); no window (the
    # converter writes 0, Phi-4's "none")
    "phi3-longrope": dict(
        cls=Phi3ForCausalLM, cfg=Phi3Config, seed=9, embd_std=1.0, head_gain=6.0, out_norm_gain=1.0,
        kw=dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=256, rms_norm_eps=1e-5, max_position_embeddings=256,
                original_max_position_embeddings=32, sliding_window=None, tie_word_embeddings=False,
                rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
                                 "short_factor": SHORT, "long_factor": LONG}, **COMMON),
        window=None, llama_cpp_window=True, orig_ctx=32,
        variants={"no-scaling": dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                      "partial_rotary_factor": 0.75}),
                  "short-factors": dict(rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                                         "partial_rotary_factor": 0.75,
                                                         "short_factor": SHORT, "long_factor": SHORT}),
                  # a mistake to tell apart: the long factors without the attention factor
                  "no-attn-factor": dict(rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                                          "partial_rotary_factor": 0.75, "attention_factor": 1.0,
                                                          "short_factor": SHORT, "long_factor": LONG})}),
    # Mistral: window 8, head_dim 48 != 128/4, GQA 4:2
    "mistral": dict(
        cls=MistralForCausalLM, cfg=MistralConfig, seed=1, embd_std=1.0, head_gain=6.0, out_norm_gain=1.0,
        kw=dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                head_dim=48, intermediate_size=256, rms_norm_eps=1e-5, max_position_embeddings=256,
                sliding_window=8, tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **COMMON),
        window=8, llama_cpp_window=False, orig_ctx=None,
        variants={"no-window": dict(sliding_window=None)},
        add_kv={"llama.attention.sliding_window": (8, gguf.GGUFValueType.UINT32)}),
    # Llama 3.1's RoPE with its original context shrunk to 32: wavelengths < 8 kept, > 32
    # divided by 8, between smoothed (the converter writes rope_freqs.weight)
    "llama3-rope": dict(
        cls=LlamaForCausalLM, cfg=LlamaConfig, seed=10, embd_std=1.0, head_gain=6.0, out_norm_gain=1.0,
        kw=dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                head_dim=48, intermediate_size=256, rms_norm_eps=1e-5, max_position_embeddings=256,
                tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 32}, **COMMON),
        window=None, llama_cpp_window=True, orig_ctx=32,
        variants={"no-scaling": dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0})}),
    # linear RoPE scaling, factor 8 over a 256 context: an original 32
    "llama-linear": dict(
        cls=LlamaForCausalLM, cfg=LlamaConfig, seed=1, embd_std=1.0, head_gain=6.0, out_norm_gain=1.0,
        kw=dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                head_dim=48, intermediate_size=256, rms_norm_eps=1e-5, max_position_embeddings=256,
                tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 8.0}, **COMMON),
        window=None, llama_cpp_window=True, orig_ctx=32,
        variants={"no-scaling": dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0})}),
    # Gemma-3 as the 1B: 6 layers = 5 sliding (window 4, RoPE base 10000) + 1 global (layer 5,
    # base 1e6), no scaling; head_dim 32 != 64/4, GQA 4:2, tied head; query_pre_attn_scalar =
    # head_dim (llama.cpp's attention scale for every size but 27B)
    "gemma3": dict(GEMMA3, seed=9, variants={"no-window": dict(sliding_window=N_CTX),
                                             # a mistake to tell apart: the global layer windowed too
                                             "all-sliding": dict(layer_types=["sliding_attention"] * 6)}),
    # Gemma-3 as the 4B and up: the global layer's RoPE scaled linearly by 8, the sliding
    # layers' not (transformers: rope_parameters per layer type; llama.cpp: freq_scale_swa 1)
    # (factor 8 over a 256 context: an original 32)
    "gemma3-linear": dict(
        GEMMA3, seed=1, orig_ctx=32, kw=dict(GEMMA3["kw"], rope_parameters=gemma3_rope(LINEAR8)),
        variants={"no-scaling": dict(rope_parameters=gemma3_rope()),
                  # not a feature but a mistake to tell apart: the scaling on the sliding layers too
                  "scaled-swa-too": dict(rope_parameters=gemma3_rope(LINEAR8, LINEAR8))}),
}


def prompt_ids():
    """N_PROMPT fixed ids in [3, 512): no UNK (0), BOS (1) or EOS (2)."""
    rng = np.random.default_rng(PROMPT_SEED)
    return [int(x) for x in rng.integers(3, N_VOCAB, size=N_PROMPT)]


# ---------------------------------------------------------------- tokenizer.model

def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num, wire, payload):
    key = _varint(num << 3 | wire)
    if wire == 0:
        return key + _varint(payload)
    if wire == 5:
        return key + struct.pack("<f", payload)
    return key + _varint(len(payload)) + payload  # wire 2: length-delimited


def spm_model_bytes():
    """A SentencePiece ModelProto (sentencepiece_model.proto) with stories260K's pieces,
    scores and types (GGUF token types are SentencePiece's piece types): BPE, byte fallback,
    unk/bos/eos 0/1/2. Written by hand: the message is three fields, and the protobuf
    package is not otherwise needed."""
    f = gguf.GGUFReader(STORIES).fields
    tokens = list(f["tokenizer.ggml.tokens"].contents())
    scores = [float(x) for x in f["tokenizer.ggml.scores"].contents()]
    types = [int(x) for x in f["tokenizer.ggml.token_type"].contents()]
    assert len(tokens) == N_VOCAB and types[:3] == [2, 3, 3], (len(tokens), types[:3])
    out = b""
    for t, s, ty in zip(tokens, scores, types):  # repeated SentencePiece pieces = 1
        out += _field(1, 2, _field(1, 2, t.encode()) + _field(2, 5, s) + _field(3, 0, ty))
    trainer = (_field(3, 0, 2) + _field(4, 0, N_VOCAB) + _field(35, 0, 1)  # BPE, vocab_size, byte_fallback
               + _field(40, 0, 0) + _field(41, 0, 1) + _field(42, 0, 2))  # unk, bos, eos ids
    normalizer = _field(1, 2, b"identity") + _field(3, 0, 1) + _field(4, 0, 0) + _field(5, 0, 1)
    return out + _field(2, 2, trainer) + _field(3, 2, normalizer)


# ---------------------------------------------------------------- models

def build_model(spec, **changes):
    kw = dict(spec["kw"], **changes)
    cfg = spec["cfg"](**kw)
    cfg._attn_implementation = "eager"
    return spec["cls"](cfg).float().eval()


def init_weights(model, spec):
    off = spec.get("norm_offset", 0.0)  # Gemma stores RMSNorm weights as w - 1
    g = torch.Generator().manual_seed(spec["seed"])
    with torch.no_grad():
        for name, p in model.named_parameters():  # a tied head appears once (embed_tokens)
            if p.ndim == 1:
                gain = spec["out_norm_gain"] if name == "model.norm.weight" else 1.0
                p.copy_((1.0 + 0.1 * torch.randn(p.shape, generator=g)) * gain - off)
            elif name == "model.embed_tokens.weight":
                p.copy_(torch.randn(p.shape, generator=g) * spec["embd_std"])
            else:
                gain = spec["head_gain"] if name == "lm_head.weight" else 1.0
                p.copy_(torch.randn(p.shape, generator=g) * (gain / p.shape[1] ** 0.5))


def variant(model, spec, changes):
    """The same weights in a model built from the config with `changes`."""
    m = build_model(spec, **changes)
    m.load_state_dict(model.state_dict())
    return m


def hf_logits(model, ids):
    with torch.no_grad():
        out = model(torch.tensor([ids], dtype=torch.long), use_cache=False)
    return out.logits[0].float().numpy().astype(np.float32)


def hf_greedy(model, ids, n):
    """Greedy argmax, a full forward over the whole sequence per step (no cache to trust),
    and the top1-top2 margin at each step."""
    seq, out, margins = list(ids), [], []
    for _ in range(n):
        lg = hf_logits(model, seq)[-1]
        tok = int(np.argmax(lg))
        top2 = np.partition(lg, -2)[-2:]
        out.append(tok)
        margins.append(float(top2[1] - top2[0]))
        seq.append(tok)
    return out, margins


# ---------------------------------------------------------------- conversion

def convert_all(jobs, conv_dir, py=sys.executable, parallel=2):
    """Runs llama.cpp's converter on each (hf_dir, out_gguf), `parallel` at a time."""
    script = os.path.join(conv_dir, "llama.cpp", "convert_hf_to_gguf.py")
    env = dict(os.environ, PYTHONPATH=os.path.join(conv_dir, "site"), PYTHONDONTWRITEBYTECODE="1")
    pending, running = list(jobs), []
    while pending or running:
        while pending and len(running) < parallel:
            src, dst = pending.pop(0)
            # general.name is neutral: llama.cpp's vocabulary loader treats a name containing
            # "phi3" as Phi-3's own vocabulary and looks up its "<|endoftext|>" token
            p = subprocess.Popen([py, script, src, "--outfile", dst, "--outtype", "f32",
                                  "--model-name", "edgerunner-oracle"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            running.append((p, src))
        p, src = running.pop(0)
        log = p.communicate()[0]
        if p.returncode != 0:
            raise RuntimeError(f"convert_hf_to_gguf.py {src} failed ({p.returncode}):\n{log[-3000:]}")


def copy_with_kv(src, dst, add):
    """dst = src with the keys of `add` ({key: (value, GGUFValueType)}) added, everything else
    copied as is (as gguf-py's scripts/gguf_new_metadata.py copies a file)."""
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, arch=r.fields["general.architecture"].contents())
    for field in r.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by GGUFWriter itself
        assert field.name not in add, f"{src} already has {field.name}"
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    for key, (value, vtype) in add.items():
        w.add_key_value(key, value, vtype)
    for t in r.tensors:
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in r.tensors:
        w.write_tensor_data(t.data)
    w.close()


def main(outdir, conv_dir, names=None):
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    ids = prompt_ids()
    spm = spm_model_bytes()
    names = names or list(MODELS)
    models, jobs = {}, []
    for name in names:
        spec = MODELS[name]
        torch.manual_seed(spec["seed"])
        model = build_model(spec)
        init_weights(model, spec)
        hf_dir = os.path.join(outdir, name)
        model.save_pretrained(hf_dir)
        with open(os.path.join(hf_dir, "tokenizer.model"), "wb") as f:
            f.write(spm)
        raw = os.path.join(outdir, f"{name}.converted.gguf" if spec.get("add_kv") else f"{name}.gguf")
        jobs.append((hf_dir, raw))
        models[name] = model
    # the converters run (two at a time) while the references are computed below
    conv_err = []

    def run_conv():
        try:
            convert_all(jobs, conv_dir)
        except Exception as e:  # noqa: BLE001 -- re-raised below
            conv_err.append(e)
    th = threading.Thread(target=run_conv)
    th.start()
    manifest = {"prompt_ids": ids, "n_vocab": N_VOCAB, "n_ctx": N_CTX, "n_greedy": N_GREEDY, "models": []}
    for name in names:
        spec, model = MODELS[name], models[name]
        entry = {"name": name, "gguf": os.path.join(outdir, f"{name}.gguf"),
                 "ref": os.path.join(outdir, f"{name}.ref.f32"), "window": spec["window"],
                 "llama_cpp_window": spec["llama_cpp_window"], "orig_ctx": spec["orig_ctx"],
                 "llama_cpp_f16_gelu": spec.get("llama_cpp_f16_gelu", False), "variants": {}}
        hf_logits(model, ids).astype("<f4").tofile(entry["ref"])
        for vname, changes in spec["variants"].items():
            path = os.path.join(outdir, f"{name}.{vname}.f32")
            hf_logits(variant(model, spec, changes), ids).astype("<f4").tofile(path)
            entry["variants"][vname] = path
        if not spec["llama_cpp_window"]:  # the greedy oracle where llama.cpp's model differs
            entry["hf_greedy"], entry["hf_margins"] = hf_greedy(model, ids, N_GREEDY)
        manifest["models"].append(entry)
    th.join()
    if conv_err:
        raise conv_err[0]
    for name in names:
        spec = MODELS[name]
        if spec.get("add_kv"):
            raw = os.path.join(outdir, f"{name}.converted.gguf")
            copy_with_kv(raw, os.path.join(outdir, f"{name}.gguf"), spec["add_kv"])
            os.remove(raw)
    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: make_arch_models.py OUTDIR CONVERTER_DIR [NAME...]   (CONVERTER_DIR: converter.sh's)")
    m = main(sys.argv[1], sys.argv[2], sys.argv[3:] or None)
    print(f"wrote {len(m['models'])} models to {sys.argv[1]}")
