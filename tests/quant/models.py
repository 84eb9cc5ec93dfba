"""Seeded random F32 GGUF models for the quantization tests (numpy + gguf only: no torch).

Two models, both with the stories260K vocabulary (512 SentencePiece tokens):
  qwen3  tied embeddings, every row length a multiple of 256 (n_embd 256, n_ff 512), so every
         type applies to every weight;
  llama  untied output head, n_embd 192 (a multiple of 32, not of 256): the K types must
         fall back (as llama.cpp does) on every weight whose rows are 192 long.
Weights follow tests/oracle/make_models.py's recipe (matrices N(0, 1/fan_in), norms
N(1, 0.1^2), a small tied embedding and a strong final norm for qwen3) so that greedy
decoding has clear margins. The metadata also carries one pair of every GGUF value type,
nested arrays included (optionally: llama.cpp refuses those), to check that the quantizer
copies metadata faithfully.
"""
import os

import numpy as np
import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
STORIES = os.path.join(HERE, "..", "data", "stories260K.gguf")
N_VOCAB = 512

ARCHS = {
    "qwen3": dict(n_embd=256, n_layer=4, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, tied=True, seed=3,
                  embd_std=0.03, out_norm_gain=20.0, head_gain=1.0, eps=1e-6, rope_base=1000000.0),
    "llama": dict(n_embd=192, n_layer=4, n_head=6, n_head_kv=2, head_dim=32, n_ff=512, tied=False, seed=7,
                  embd_std=1.0, out_norm_gain=1.0, head_gain=6.0, eps=1e-5, rope_base=10000.0),
}


def stories_vocab():
    f = gguf.GGUFReader(STORIES).fields
    tokens = list(f["tokenizer.ggml.tokens"].contents())
    scores = [float(x) for x in f["tokenizer.ggml.scores"].contents()]
    types = [int(x) for x in f["tokenizer.ggml.token_type"].contents()]
    assert len(tokens) == N_VOCAB, len(tokens)
    return f["tokenizer.ggml.model"].contents(), tokens, scores, types


def tensors(arch):
    """(name, float32 array in GGML row-major order (n_out, n_in)) in the converter's order."""
    s = ARCHS[arch]
    rng = np.random.default_rng(s["seed"])
    e, q, kv, ff = s["n_embd"], s["n_head"] * s["head_dim"], s["n_head_kv"] * s["head_dim"], s["n_ff"]

    def mat(n_out, n_in, gain=1.0):
        return (rng.standard_normal((n_out, n_in)) * (gain / n_in ** 0.5)).astype(np.float32)

    def norm(n, gain=1.0):
        return ((1.0 + 0.1 * rng.standard_normal(n)) * gain).astype(np.float32)

    out = [("token_embd.weight", (rng.standard_normal((N_VOCAB, e)) * s["embd_std"]).astype(np.float32))]
    for il in range(s["n_layer"]):
        p = f"blk.{il}."
        out += [(p + "attn_norm.weight", norm(e)), (p + "attn_q.weight", mat(q, e)), (p + "attn_k.weight", mat(kv, e)),
                (p + "attn_v.weight", mat(kv, e)), (p + "attn_output.weight", mat(e, q))]
        if arch == "qwen3":
            out += [(p + "attn_q_norm.weight", norm(s["head_dim"])), (p + "attn_k_norm.weight", norm(s["head_dim"]))]
        out += [(p + "ffn_norm.weight", norm(e)), (p + "ffn_gate.weight", mat(ff, e)), (p + "ffn_up.weight", mat(ff, e)),
                (p + "ffn_down.weight", mat(e, ff))]
    out.append(("output_norm.weight", norm(e, s["out_norm_gain"])))
    if not s["tied"]:
        out.append(("output.weight", mat(N_VOCAB, e, s["head_gain"])))
    return out


def write(path, arch, nested=False):
    """nested: also nested arrays (which gguf-py and we read, but llama.cpp refuses)."""
    s = ARCHS[arch]
    w = gguf.GGUFWriter(path, arch)
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(f"edgerunner-quant-{arch}")
    w.add_block_count(s["n_layer"])
    w.add_context_length(256)
    w.add_embedding_length(s["n_embd"])
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_rope_freq_base(s["rope_base"])
    w.add_layer_norm_rms_eps(s["eps"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if arch == "llama":
        w.add_vocab_size(N_VOCAB)
        w.add_rope_dimension_count(s["head_dim"])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    # one pair of every value type, for the metadata copy check (llama.cpp ignores them)
    V = gguf.GGUFValueType
    w.add_key_value("test.u8", 200, V.UINT8)
    w.add_key_value("test.i8", -100, V.INT8)
    w.add_key_value("test.u16", 60000, V.UINT16)
    w.add_key_value("test.i16", -30000, V.INT16)
    w.add_key_value("test.i32", -2000000000, V.INT32)
    w.add_key_value("test.u64", 2 ** 63 + 5, V.UINT64)
    w.add_key_value("test.i64", -2 ** 62, V.INT64)
    w.add_key_value("test.f64", 1.0 / 3.0, V.FLOAT64)
    w.add_key_value("test.bool", True, V.BOOL)
    w.add_key_value("test.empty_str", "", V.STRING)
    w.add_key_value("test.f32_array", [0.5, -1.25, 3e-8], V.ARRAY, V.FLOAT32)
    w.add_key_value("test.str_array", ["x", "", "déf"], V.ARRAY, V.STRING)
    if nested:
        w.add_key_value("test.nested", [[1, 2, 3], [7], [4, 5]], V.ARRAY, V.ARRAY)
        w.add_key_value("test.nested_str", [["a", "bc"], ["déf"]], V.ARRAY, V.ARRAY)
    tok_model, tokens, scores, types = stories_vocab()
    w.add_tokenizer_model(tok_model)
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    for name, arr in tensors(arch):
        w.add_tensor(name, arr, raw_dtype=gguf.GGMLQuantizationType.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def prompt_ids(n=16, seed=1234):
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(3, N_VOCAB, size=n)]
