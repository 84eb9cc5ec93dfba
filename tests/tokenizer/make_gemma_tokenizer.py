#!/usr/bin/env python3
"""A Gemma-3 tokenizer folder (tokenizer.json + tokenizer_config.json) built from the
vocabulary of the Gemma-3 GGUF (tools/get_model.sh gemma3), for the tests: the real
tokenizer.json is not reachable from these machines (no PyPI package ships it).

It is built the way transformers' GemmaConverter turns tokenizer.model into tokenizer.json,
with the `tokenizers` library: a BPE model over every token by id, byte_fallback, unk
<unk>; the merges are every split of a normal token into two normal tokens, ranked by the
token's SentencePiece score (highest first) as transformers' SentencePieceExtractor ranks
them; normalizer Replace(' ', U+2581), no pre-tokenizer; control tokens as special added
tokens, user-defined ones as added tokens. tokenizer_config.json: the special tokens,
add_bos_token and the chat template of the GGUF (when it has one).

Usage: make_gemma_tokenizer.py GGUF OUT_DIR
"""
import json
import os
import sys

import gguf
from tokenizers import AddedToken, Tokenizer, decoders, normalizers
from tokenizers.models import BPE

NORMAL, CONTROL, USER_DEFINED, BYTE = 1, 3, 4, 6


def build(path, out):
    r = gguf.GGUFReader(path)
    f = r.fields
    tokens = f["tokenizer.ggml.tokens"].contents()
    scores = f["tokenizer.ggml.scores"].contents()
    types = f["tokenizer.ggml.token_type"].contents()
    vocab = {t: i for i, t in enumerate(tokens)}
    normal = {t for t, ty in zip(tokens, types) if ty == NORMAL}
    merges = []
    for t in normal:
        for k in range(1, len(t)):
            if t[:k] in normal and t[k:] in normal:
                merges.append((-scores[vocab[t]], vocab[t[:k]], vocab[t[k:]], t[:k], t[k:]))
    merges.sort()
    tok = Tokenizer(BPE(vocab, [(m[3], m[4]) for m in merges], unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == CONTROL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t, ty in zip(tokens, types) if ty == USER_DEFINED])
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    name = lambda key: tokens[int(f[key].contents())]  # noqa: E731
    cfg = {"bos_token": name("tokenizer.ggml.bos_token_id"), "eos_token": name("tokenizer.ggml.eos_token_id"),
           "unk_token": name("tokenizer.ggml.unknown_token_id"), "pad_token": name("tokenizer.ggml.padding_token_id"),
           "add_bos_token": True, "add_eos_token": False}
    if "tokenizer.chat_template" in f:
        cfg["chat_template"] = f["tokenizer.chat_template"].contents()
    json.dump(cfg, open(os.path.join(out, "tokenizer_config.json"), "w"), ensure_ascii=False)
    return len(tokens), len(merges)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: make_gemma_tokenizer.py GGUF OUT_DIR")
    print("%d tokens, %d merges" % build(sys.argv[1], sys.argv[2]))
