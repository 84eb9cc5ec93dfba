#!/usr/bin/env python3
"""Random-weight qwen2 and gemma3 GGUF files for bench/check_cuda.py (the CUDA backend
against the CPU reference), made by the oracle tests' own builders, so the files are the
ones whose CPU logits are already checked against transformers and llama.cpp:

  qwen2-hd32-F32.gguf, qwen2-hd32-Q8_0.gguf
        tests/models/check_qwen2.py's Qwen2ForCausalLM (make_models.py's writer with the
        bias tensors): 2 layers, 4/2 heads of 32 (Q/K/V biases, NeoX RoPE, tied head);
        its prompts take the CUDA-core prefill attention
  qwen2-hd128-Q8_0.gguf
        the same recipe with n_embd 512: 4/2 heads of 128 (Qwen2-7B's head size): the
        tensor-core prefill attention, and the decode attention with wo (Q8_0) folded in,
        the kernels Qwen3 runs
  gemma3.gguf
        tests/oracle/make_arch_models.py's gemma3 through llama.cpp's converter: 6 layers,
        5 sliding (window 4, RoPE base 1e4) and 1 global (1e6), 4/2 heads of 32, scaled
        embeddings, pre- and post-norms, GeGLU, tied head
  gemma3-hd256.gguf
        the same with Gemma-3-270M's heads: 4/1 of 256 (the kernels' 8 dims per lane)

Vocabulary: stories260K's 512 SentencePiece tokens (all of them: ids are fed directly).
Every file is seeded: the same bytes on every run. About 11 MB in all.

Usage: PY=$(tests/oracle/venv.sh)/bin/python; CONV=$(tests/oracle/converter.sh)
       $PY bench/make_random_archs.py OUTDIR $CONV      (prints the files' paths, one a line)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "oracle"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models"))
sys.dont_write_bytecode = True

import check_qwen2  # noqa: E402,F401 -- registers make_models.ARCHS["qwen2"] and the bias tensors
import make_arch_models as mam  # noqa: E402
import make_models as mm  # noqa: E402


def write_qwen2(outdir, name, hidden, types):
    """make_models' qwen2 (as check_qwen2.py builds it) with hidden_size `hidden` (4 heads),
    written in each of `types`; returns the paths."""
    spec = mm.ARCHS["qwen2"]
    saved = spec["kw"]
    spec["kw"] = dict(saved, hidden_size=hidden)
    try:
        model = mm.build_model("qwen2")
    finally:
        spec["kw"] = saved
    model.config.head_dim = model.config.hidden_size // model.config.num_attention_heads
    vocab = mm.stories_vocab()
    paths = []
    for tname in types:
        path = os.path.join(outdir, f"{name}-{tname}.gguf")
        mm.write_gguf(path, "qwen2", model, tname, vocab)
        paths.append(path)
    return paths


def main(outdir, conv_dir):
    os.makedirs(outdir, exist_ok=True)
    paths = write_qwen2(outdir, "qwen2-hd32", 128, ("F32", "Q8_0"))
    paths += write_qwen2(outdir, "qwen2-hd128", 512, ("Q8_0",))
    mam.MODELS["gemma3-hd256"] = dict(mam.MODELS["gemma3"], kw=dict(mam.GEMMA3["kw"], head_dim=256,
                                                                      num_key_value_heads=1,
                                                                      query_pre_attn_scalar=256), variants={})
    manifest = mam.main(os.path.join(outdir, "gemma3-work"), conv_dir, ["gemma3", "gemma3-hd256"])
    for m in manifest["models"]:
        dst = os.path.join(outdir, os.path.basename(m["gguf"]))
        os.replace(m["gguf"], dst)
        paths.append(dst)
    print("\n".join(paths))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: make_random_archs.py OUTDIR CONVERTER_DIR   (CONVERTER_DIR: tests/oracle/converter.sh's)")
    main(sys.argv[1], sys.argv[2])
