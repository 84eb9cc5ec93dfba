#!/usr/bin/env python3
"""Hugging Face folders (issue 22): the engine loads what `save_pretrained` writes and gives
transformers' logits; `edgerunner convert` writes a GGUF that llama.cpp runs like the one
llama.cpp's own convert_hf_to_gguf.py writes from the same folder.

Usage: $PY tests/oracle/test_hf.py BUILD_DIR [NAME...]   (PY: tests/oracle/venv.sh's python;
       NAME: qwen3, qwen2, llama, gemma3; all by default)

Models: seeded random weights (make_arch_models.py's gains, so that logits are not flat) at
small shapes with GQA and head_dim != hidden / heads, one per architecture:
  qwen3   Qwen3ForCausalLM, the real Qwen3 tokenizer (vocab 151,936 as the real model's
          config pads it), tied embeddings
  qwen2   Qwen2ForCausalLM (Q/K/V biases), the Qwen3 tokenizer, saved in shards of 20 MB
          (model.safetensors.index.json)
  llama   LlamaForCausalLM, the real Llama-3 tokenizer, Llama 3.1's RoPE scaling (original
          context shrunk to 32, so the 40-token prompt passes it)
  gemma3  Gemma3ForCausalLM, 6 layers (5 sliding with window 4, 1 global with linear RoPE
          scaling 8); a Gemma tokenizer made here (gemma_tokenizer: no real one can be
          fetched): a 512-piece SentencePiece BPE trained on tests/data's GPL text with
          Gemma's settings, tokenizer.model for llama.cpp's converter (which reads only
          that for Gemma) and the tokenizer.json, tokenizer_config.json and
          chat_template.jinja transformers 5's GemmaTokenizer converts it to, for the engine
each saved in F32 and in BF16. The reference is transformers in float32 on the folder's own
weights (for BF16: the rounded weights, widened), logits at every prompt position.

Checks, one line each:
  logits   engine (-m DIR, the reference backend and the fast path with an F32 cache) vs
           transformers: max|ours - ref| / max|ref| <= 1e-4 (test_oracles.py's engine bound)
  tokens   (F32 folders) the prompt and the GPL text tokenized by the engine from the
           folder's tokenizer.json == HF tokenizers'
  convert  (F32 folders) llama.cpp on `edgerunner convert DIR` vs llama.cpp on
           convert_hf_to_gguf.py's output: the same tensor names, shapes and types, the
           same values of the metadata keys that matter, the same tokens of the prompt and
           the GPL text (BOS as each file says), and logits within 1e-6
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True

import make_arch_models as A  # noqa: E402 -- build_model, init_weights, hf_logits, convert_all
import test_oracles as T  # noqa: E402 -- report, rel_err, engine runners, llama.cpp
from test_oracles import report, rel_err  # noqa: E402

SHARED = os.environ.get("ER_SHARED_DATA") or os.path.join(HERE, "..", "..", "..", "shared", "data")
if not os.path.isdir(SHARED):
    SHARED = "/work/shared/data"
TOKDIR = os.path.join(SHARED, "tokenizers")

from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM,  # noqa: E402
                          Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

ENGINE_BOUND = T.ENGINE_BOUND
CONVERT_BOUND = 1e-6
N_CTX = 128
PROMPT = "Hello world! The quick brown fox jumps over 123 lazy dogs; ça va? 東京"

SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
             intermediate_size=128, rms_norm_eps=1e-6, max_position_embeddings=256)
MODELS = {
    "qwen3": dict(cls=Qwen3ForCausalLM, cfg=Qwen3Config, seed=3, embd_std=0.03, head_gain=1.0, out_norm_gain=25.0,
                  tokenizer="qwen3", kw=dict(SMALL, vocab_size=151936, tie_word_embeddings=True, bos_token_id=151643,
                                             eos_token_id=151645)),
    "qwen2": dict(cls=Qwen2ForCausalLM, cfg=Qwen2Config, seed=4, embd_std=1.0, head_gain=6.0, out_norm_gain=1.0,
                  tokenizer="qwen3", shard="20MB",
                  kw=dict(SMALL, head_dim=None, vocab_size=151936, tie_word_embeddings=False)),
    "llama": dict(cls=LlamaForCausalLM, cfg=LlamaConfig, seed=5, embd_std=1.0, head_gain=6.0, out_norm_gain=1.0,
                  tokenizer="llama3",
                  kw=dict(SMALL, num_attention_heads=4, head_dim=48, vocab_size=128256, tie_word_embeddings=False,
                          bos_token_id=128000, eos_token_id=128001,
                          rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 32})),
    # Gemma's special ids (config.json's, as the vocabulary has them: see gemma_tokenizer)
    "gemma3": dict(A.GEMMA3, seed=6, tokenizer="gemma", prompt=PROMPT + " <start_of_turn>user\nHi<end_of_turn>",
                   kw=dict(A.GEMMA3["kw"], rope_parameters=A.gemma3_rope(A.LINEAR8), pad_token_id=0, eos_token_id=1,
                           bos_token_id=2)),
}

# Gemma's tokenizer, made here (no Gemma tokenizer.model can be fetched): a SentencePiece BPE
# trained on tests/data's GPL text, Gemma's settings (byte fallback, identity normalizer, no
# dummy prefix, digits split, <pad> <eos> <bos> <unk> = 0..3, <mask> a control piece,
# <start_of_turn> <end_of_turn> user-defined ones), vocab_size the model's (512)
GPL_TEXT = os.path.join(HERE, "..", "data", "gpl-3.0.txt")
GEMMA_TEMPLATE = ("{{ bos_token }}{% for message in messages %}<start_of_turn>"
                  "{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
                  "{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}"
                  "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def gemma_tokenizer(out, n_vocab):
    """A Gemma tokenizer folder: tokenizer.model (what llama.cpp's converter reads) and the
    tokenizer.json, tokenizer_config.json and chat_template.jinja transformers' GemmaTokenizer
    converts it to and saves (what the engine reads), with add_bos_token and Gemma-3's chat
    template shape. transformers 5 no longer writes tokenizer_config.json's
    added_tokens_decoder; Gemma's own folders (written by transformers 4) have it, and the
    converter takes the added tokens' types from it, so it is written here as 4 wrote it."""
    import io
    import sentencepiece as spm
    from transformers import GemmaTokenizer
    os.makedirs(out)
    with open(GPL_TEXT, encoding="utf-8") as f:
        lines = f.read().splitlines()
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, model_type="bpe", vocab_size=n_vocab, byte_fallback=True,
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>",
        unk_piece="<unk>", control_symbols=["<mask>"], user_defined_symbols=["<start_of_turn>", "<end_of_turn>"],
        normalization_rule_name="identity", add_dummy_prefix=False, remove_extra_whitespaces=False,
        split_digits=True, allow_whitespace_only_pieces=True, character_coverage=1.0, num_threads=1, minloglevel=2)
    with open(os.path.join(out, "tokenizer.model"), "wb") as f:
        f.write(model.getvalue())
    tok = GemmaTokenizer.from_pretrained(out, add_bos_token=True)
    tok.chat_template = GEMMA_TEMPLATE
    tok.save_pretrained(out)
    assert len(tok) == n_vocab, len(tok)
    path = os.path.join(out, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["added_tokens_decoder"] = {str(i): t.__getstate__() for i, t in sorted(tok.added_tokens_decoder.items())}
    del cfg["vocab_file"]  # the path it was read from here
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
    return out


def build(name, spec, outdir, tokdir):
    """Saves the F32 and BF16 folders, each with the tokenizer files of tokdir; returns
    {dtype: (dir, reference model)}."""
    kw = {k: v for k, v in spec["kw"].items() if v is not None}
    torch.manual_seed(spec["seed"])
    model = A.build_model(dict(spec, kw=kw))
    A.init_weights(model, spec)
    out = {}
    for dtype in ("F32", "BF16"):
        d = os.path.join(outdir, f"{name}-{dtype}")
        m = model if dtype == "F32" else A.build_model(dict(spec, kw=kw))
        if dtype == "BF16":
            m.load_state_dict(model.state_dict())
            m = m.to(torch.bfloat16)
        m.save_pretrained(d, max_shard_size=spec.get("shard", "50GB"))
        if dtype == "BF16":  # the reference: float32 arithmetic on the rounded weights, in a fresh
            rounded = {k: v.float() for k, v in m.state_dict().items()}  # model: .float() would keep
            m = A.build_model(dict(spec, kw=kw))  # the RoPE inverse frequencies rounded to BF16 too
            m.load_state_dict(rounded)
        for f in os.listdir(tokdir):
            shutil.copy(os.path.join(tokdir, f), d)
        out[dtype] = (d, m)
    return out


def prompt_ids(spec, tokdir):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(tokdir, "tokenizer.json"))
    return tok.encode(spec.get("prompt", PROMPT), add_special_tokens=False).ids


def check_tokens(build_dir, name, d, tokdir, text, tmp):
    from tokenizers import Tokenizer
    want = Tokenizer.from_file(os.path.join(tokdir, "tokenizer.json")).encode(text, add_special_tokens=False).ids
    path = os.path.join(tmp, "text.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    r = subprocess.run([os.path.join(build_dir, "edgerunner"), "tokenize", "-m", d, "--ids", "--no-bos", "-f", path],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    got = [int(x) for x in r.stdout.split()] if r.returncode == 0 else []
    k = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
    report(got == want, f"tokens  {name:12s} tokenizer.json vs HF tokenizers, prompt + GPL text: "
           + (f"identical ({len(want)} ids)" if got == want else
              f"differ at id {k}: ours {got[k:k + 6]} want {want[k:k + 6]} {r.stderr.strip()[:200]}"))


def check_logits(build_dir, name, d, model, ids, n_vocab, tmp):
    ref = A.hf_logits(model, ids)
    for what, flags in (("ref", ["--reference"]), ("fast32", ["-ctk", "f32", "-ctv", "f32"])):
        label = f"logits  {name:12s} {what:6s}"
        try:
            ours = T.engine_logits(build_dir, d, ids, n_vocab, tmp, ["-c", str(N_CTX)] + flags)
        except Exception as e:  # noqa: BLE001 -- any failure is this check's
            report(False, f"{label}: {e}")
            continue
        err, pos = rel_err(ours, ref)
        report(bool(np.isfinite(ours).all()) and err <= ENGINE_BOUND,
               f"{label} engine vs transformers: err {err:.2e} (bound {ENGINE_BOUND:.0e}, worst pos {pos}, "
               f"max|ref| {np.abs(ref).max():.2f})")


# metadata keys whose values must agree between the two converters (where both write them);
# not tokenizer.ggml.scores: tokenizer.json keeps none, so ours rank the tokens by their first
# merge while the converter copies tokenizer.model's (same order, other numbers); the llama.cpp
# tokens check below judges them
KEYS_THAT_MATTER = ("general.architecture", "context_length", "embedding_length", "feed_forward_length",
                    "block_count", "attention.head_count", "attention.head_count_kv", "attention.key_length",
                    "attention.value_length", "attention.layer_norm_rms_epsilon", "rope.freq_base",
                    "rope.dimension_count", "rope.scaling.type", "rope.scaling.factor", "attention.sliding_window",
                    "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                    "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                    "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id", "tokenizer.ggml.mask_token_id",
                    "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", "tokenizer.ggml.add_space_prefix",
                    "tokenizer.chat_template")


# llama.cpp's converter names a pre-tokenizer by the hash of its tokens on a check text, we by
# its split regex: shared/data's Llama-3 tokenizer.json hashes as "smaug-bpe", whose regex in
# llama.cpp is Llama-3's ("same as llama3", llama-vocab.cpp); the tokens check above is the
# judge of our choice
PRE_ALIASES = {("llama-bpe", "smaug-bpe")}


def gguf_summary(path):
    """(the metadata keys that matter, {tensor: (dims, type)}) of a GGUF file, read here
    with struct: gguf-py's GGUFReader takes over a minute on a file with a 150k-token
    vocabulary (it builds every string of every array), this a second. Arrays longer
    than 64 are compared by their length and a digest of their items."""
    import hashlib
    import struct
    import gguf
    with open(path, "rb") as f:
        data = f.read()
    at = 0

    def take(fmt):
        nonlocal at
        v = struct.unpack_from("<" + fmt, data, at)
        at += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal at
        n = take("Q")
        at += n
        return data[at - n:at].decode("utf-8", "replace")

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            items = [value(et) for _ in range(n)]
            if n > 64:
                return ("array", n, hashlib.sha256(repr(items).encode()).hexdigest())
            return items
        return take(scalar[t])

    assert data[:4] == b"GGUF", path
    at = 4
    take("I")  # version
    n_tensors, n_kv = take("Q"), take("Q")
    fields = {}
    for _ in range(n_kv):
        k = string()
        fields[k] = value(take("I"))
    tensors = {}
    for _ in range(n_tensors):
        name = string()
        dims = tuple(take("Q") for _ in range(take("I")))
        tensors[name] = (dims, gguf.GGMLQuantizationType(take("I")).name)
        take("Q")  # offset
    arch = fields["general.architecture"]
    keys = {}
    for k in KEYS_THAT_MATTER:
        full = k if k.startswith(("general.", "tokenizer.")) else f"{arch}.{k}"
        if full in fields:
            v = fields[full]
            keys[k] = [round(x, 6) if isinstance(x, float) else x for x in v] if isinstance(v, list) else \
                round(v, 6) if isinstance(v, float) else v
    return keys, tensors


def check_convert(build_dir, name, d, theirs, ids, text, tmp):
    ours = os.path.join(tmp, f"{name}.ours.gguf")
    label = f"convert {name:12s}"
    r = subprocess.run([os.path.join(build_dir, "edgerunner"), "convert", d, ours], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        report(False, f"{label} edgerunner convert failed: {r.stderr.strip()}")
        return
    (ok_keys, ok_tensors), (th_keys, th_tensors) = gguf_summary(ours), gguf_summary(theirs)
    diff_k = sorted(k for k in set(ok_keys) | set(th_keys) if ok_keys.get(k) != th_keys.get(k)
                    and not (k == "tokenizer.ggml.pre" and (ok_keys.get(k), th_keys.get(k)) in PRE_ALIASES))
    report(not diff_k, f"{label} metadata keys that matter: " + ("identical" if not diff_k else
           "differ: " + ", ".join(f"{k} ours {str(ok_keys.get(k))[:60]} theirs {str(th_keys.get(k))[:60]}"
                                  for k in diff_k)))
    report(ok_tensors == th_tensors, f"{label} tensor names, shapes, types: " + ("identical" if ok_tensors == th_tensors
           else f"ours only {sorted(set(ok_tensors.items()) - set(th_tensors.items()))[:4]} theirs only "
                f"{sorted(set(th_tensors.items()) - set(ok_tensors.items()))[:4]}"))
    try:
        a = T.llama_model(ours, N_CTX, logits_all=True)
        ta = a.tokenize(text.encode(), add_bos=True)  # BOS as the file's add_bos_token says
        a.eval(ids)
        la = np.array(a.scores[:len(ids)], dtype=np.float32)
        del a
        b = T.llama_model(theirs, N_CTX, logits_all=True)
        tb = b.tokenize(text.encode(), add_bos=True)
        b.eval(ids)
        lb = np.array(b.scores[:len(ids)], dtype=np.float32)
        del b
    except Exception as e:  # noqa: BLE001
        report(False, f"{label} llama.cpp: {e}")
        return
    k = next((i for i in range(min(len(ta), len(tb))) if ta[i] != tb[i]), min(len(ta), len(tb)))
    report(ta == tb, f"{label} llama.cpp tokens of prompt + GPL text on ours vs on theirs: " +
           (f"identical ({len(ta)} ids)" if ta == tb else f"differ at id {k}: ours {ta[k:k + 6]} theirs {tb[k:k + 6]}"))
    err, pos = rel_err(la, lb)
    report(err <= CONVERT_BOUND, f"{label} llama.cpp on ours vs on convert_hf_to_gguf.py's: err {err:.2e} "
           f"(bound {CONVERT_BOUND:.0e}, worst pos {pos})")


def main():
    if len(sys.argv) < 2 or any(n not in MODELS for n in sys.argv[2:]):
        sys.exit(f"usage: test_hf.py BUILD_DIR [NAME...]   (NAME: {', '.join(MODELS)}; all by default)")
    build_dir = os.path.abspath(sys.argv[1])
    names = sys.argv[2:] or list(MODELS)
    t0 = time.time()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    conv = subprocess.run([os.path.join(HERE, "converter.sh")], check=True, stdout=subprocess.PIPE,
                          text=True).stdout.strip()
    print("metric: err = max over positions of max|ours - ref| / max|ref|", flush=True)
    with open(GPL_TEXT, encoding="utf-8") as f:
        gpl = f.read()
    with tempfile.TemporaryDirectory(prefix="er-hf-") as tmp:
        tokdirs = {"qwen3": os.path.join(TOKDIR, "qwen3"), "llama3": os.path.join(TOKDIR, "llama3")}
        if "gemma3" in names:
            tokdirs["gemma"] = gemma_tokenizer(os.path.join(tmp, "gemma-tokenizer"), MODELS["gemma3"]["kw"]["vocab_size"])
        folders = {name: build(name, MODELS[name], tmp, tokdirs[MODELS[name]["tokenizer"]]) for name in names}
        A.convert_all([(folders[name]["F32"][0], os.path.join(tmp, f"{name}.theirs.gguf")) for name in names], conv)
        print(f"models built and converted in {time.time() - t0:.1f}s", flush=True)
        for name in names:
            spec = MODELS[name]
            n_vocab = spec["kw"]["vocab_size"]
            ids = prompt_ids(spec, tokdirs[spec["tokenizer"]])  # the logits' prompt
            text = spec.get("prompt", PROMPT) + "\n\n" + gpl  # the tokenizers'
            for dtype, (d, model) in folders[name].items():
                label = f"{name}-{dtype}"
                if dtype == "F32":
                    check_tokens(build_dir, label, d, tokdirs[spec["tokenizer"]], text, tmp)
                check_logits(build_dir, label, d, model, ids, n_vocab, tmp)
            check_convert(build_dir, name, folders[name]["F32"][0], os.path.join(tmp, f"{name}.theirs.gguf"), ids, text,
                          tmp)
    return T.summary(t0)


if __name__ == "__main__":
    sys.exit(main())
