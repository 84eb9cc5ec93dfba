#!/usr/bin/env python3
"""Random-weight Hugging Face folders of the four architectures CUDA runs, at shapes every
weight type takes (rows of 256: the K types' super-blocks), for bench/gpu_xarch.sh, which
converts each into every type and checks CUDA against the CPU reference.

The models are tests/oracle/test_hf.py's (its builders and seeds, whose CPU logits that
test checks against transformers), resized: n_embd 256, n_ff 512, vocabulary 512 (ids are
fed directly; no tokenizer), BF16 tensors; heads of 128 (qwen3, qwen2: the tensor-core
prefill and the folded wo), 64 (llama) and 256 (gemma3, with its window pattern). About
18 MB in all.

Usage: PY=$(tests/oracle/venv.sh)/bin/python; $PY bench/make_xarch_folders.py OUTDIR
"""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "oracle"))
import test_hf as H  # noqa: E402

DIMS = {
    "qwen3": dict(hidden_size=256, intermediate_size=512, num_attention_heads=2, num_key_value_heads=1, head_dim=128),
    "llama": dict(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2, head_dim=64),
    "qwen2": dict(hidden_size=256, intermediate_size=512, num_attention_heads=2, num_key_value_heads=1, head_dim=None),
    "gemma3": dict(hidden_size=256, intermediate_size=512, num_attention_heads=2, num_key_value_heads=1, head_dim=256,
                   query_pre_attn_scalar=256),
}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_xarch_folders.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        no_tokenizer = os.path.join(tmp, "tok")
        os.makedirs(no_tokenizer)
        for name, spec in H.MODELS.items():
            kw = dict(spec["kw"], vocab_size=512, bos_token_id=1, eos_token_id=2, **DIMS[name])
            folders = H.build(name, dict(spec, kw=kw), tmp, no_tokenizer)
            shutil.copytree(folders["BF16"][0], os.path.join(out, name), dirs_exist_ok=True)
            print(os.path.join(out, name))


if __name__ == "__main__":
    main()
