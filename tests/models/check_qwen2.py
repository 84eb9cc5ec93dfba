#!/usr/bin/env python3
"""The qwen2 architecture (Qwen2 / Qwen2.5: Q/K/V biases, NeoX RoPE, no Q/K norm) on a small
seeded-random Qwen2ForCausalLM, exported to GGUF F32 and Q8_0 as llama.cpp's converter lays
it out (tests/oracle/make_models.py, with the bias tensors added).

Usage: $PY tests/models/check_qwen2.py BUILD_DIR      (PY=$(tests/oracle/venv.sh)/bin/python)

Checks, then "N passed, M failed":
  export  llama.cpp's prompt logits on the F32 file agree with transformers (the file is
          faithful, so a failure below is the engine's)
  logits  engine prompt logits (--reference, one batched prefill) vs transformers on the
          file's (dequantized) weights, all 16 positions, F32 and Q8_0: worst error <= 1e-4
          of the largest logit (the bound of tests/oracle)
  greedy  32-token greedy decode of the F32 file (default fast path): engine == llama.cpp
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
sys.dont_write_bytecode = True

import make_models as mm  # noqa: E402
import test_oracles as to  # noqa: E402
from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: E402

mm.ARCHS["qwen2"] = dict(
    cls=Qwen2ForCausalLM, cfg=Qwen2Config, seed=5, embd_std=0.03, head_gain=1.0, out_norm_gain=20.0,
    kw=dict(vocab_size=mm.N_VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=256, rms_norm_eps=1e-6, max_position_embeddings=256,
            tie_word_embeddings=True, use_sliding_window=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            bos_token_id=1, eos_token_id=2, pad_token_id=None))
mm.BLOCK_MAP.update({"self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
                     "self_attn.v_proj.bias": "attn_v.bias"})
BOUND = 1e-4
EXPORT_BOUND = 1e-5


def main():
    build = sys.argv[1]
    ids = mm.prompt_ids()
    vocab = mm.stories_vocab()
    model = mm.build_model("qwen2")
    assert model.model.layers[0].self_attn.q_proj.bias is not None
    model.config.head_dim = model.config.hidden_size // model.config.num_attention_heads
    orig = {k: v.clone() for k, v in model.state_dict().items()}
    with tempfile.TemporaryDirectory() as tmp:
        for tname in ("F32", "Q8_0"):
            path = os.path.join(tmp, f"qwen2-{tname}.gguf")
            mm.write_gguf(path, "qwen2", model, tname, vocab)
            model.load_state_dict(mm.dequantized_state_dict(path, "qwen2", model))
            ref = mm.hf_logits(model, ids)
            model.load_state_dict(orig)
            if tname == "F32":
                lc = to.llama_prompt_logits(path, ids)
                err, _ = to.rel_err(lc, ref)
                to.report(err <= EXPORT_BOUND, f"export  qwen2 F32: llama.cpp vs transformers err {err:.2e} (bound {EXPORT_BOUND:g})")
            out = os.path.join(tmp, "logits.f32")
            subprocess.run([os.path.join(build, "edgerunner"), "run", "-m", path, "--prompt-ids", ",".join(map(str, ids)),
                            "--dump-logits", out, "--reference"], check=True, capture_output=True)
            ours = np.fromfile(out, dtype="<f4").reshape(len(ids), -1)
            err, _ = to.rel_err(ours, ref)
            to.report(err <= BOUND, f"logits  qwen2 {tname}: engine vs transformers err {err:.2e} over {len(ids)} "
                      f"positions (bound {BOUND:g})")
            if tname == "F32":
                to.compare_greedy("qwen2-F32", build, path, ids, to.N_GREEDY)
    n_fail = to.results.count(False)
    print(f"{len(to.results) - n_fail} passed, {n_fail} failed")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
