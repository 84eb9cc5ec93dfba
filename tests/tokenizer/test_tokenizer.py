#!/usr/bin/env python3
"""Tokenizer, chat template and text CLI tests against independent references.

Usage: $PY tests/tokenizer/test_tokenizer.py BUILD_DIR   (PY=$(tests/oracle/venv.sh)/bin/python)

One line per check, then "N passed, M failed" (exit 0 iff M == 0):
  vectors    llama.cpp's tokenizer test vectors (qwen2, llama-bpe, gpt-2, llama-spm, phi-3):
             every case's ids identical (no BOS, no special-token parsing)
  corpus     Hugging Face tokenizers with the real Qwen3 and Llama-3 tokenizer.json on the
             corpus of corpus.py (>= 5 MB), the engine reading each from a GGUF and from
             the tokenizer.json folder itself: identical ids for every document; and the ids
             decode back to the text (to its NFC form for Qwen3, whose normalizer is NFC);
             also Gemma-3's SentencePiece-style tokenizer.json (make_gemma_tokenizer.py builds
             it from the Gemma-3 GGUF's vocabulary: the real file is not reachable here),
             which the engine reads as a SentencePiece vocabulary
  special    with --special, control tokens in text become tokens exactly as Hugging Face
             parses them; without it they stay text (the corpus holds such text)
  bos        BOS as each file asks: Llama-3 and SentencePiece add it, Qwen3 does not
  long       100 KB pre-tokens (one repeated letter, digits, spaces): identical ids, fast
  template   jinja2 (transformers' render_jinja_template: apply_chat_template's environment)
             with the real Qwen3, Llama-3 and Phi-3 templates on conversations with system
             prompts, several turns, tool calls, thinking on and off: identical strings;
             synthetic templates for the engine's filters, tests, loops, macros, whitespace
  unsupported an unsupported construct fails with a message that names it
  hostile    vocab metadata that is inconsistent fails with a message, never a crash
  chat       `chat` on stories260K (no template: ChatML) and on a random-weight model with
             the real Qwen3 vocabulary and template: each reply equals `run -p` on the full
             rendered conversation, i.e. feeding only the new part of each turn into the
             KV cache gives what re-reading the whole conversation gives
  speed      English text, ours and Hugging Face on one core, MB/s (>= 10 MB/s required)

The vocab GGUF files are built from shared/data/tokenizers by make_vocab_gguf.py into
~/.cache/edgerunner/tokenizer-KEY (KEY: a hash of the inputs), once per machine.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True

SHARED = os.environ.get("ER_SHARED_DATA") or os.path.join(ROOT, "..", "shared", "data")
if not os.path.isdir(SHARED):
    SHARED = "/work/shared/data"
VECTORS = os.path.join(SHARED, "vocab-tests")
TOKDIR = os.path.join(SHARED, "tokenizers")
STORIES = os.path.join(ROOT, "tests", "data", "stories260K.gguf")

results = []


def report(ok, line):
    results.append(bool(ok))
    print(("PASS " if ok else "FAIL ") + line, flush=True)


def run(args, input=None, check=False):
    r = subprocess.run(args, input=input, capture_output=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))}: exit {r.returncode}: {r.stderr.decode(errors='replace')[:500]}")
    return r


def build_vocabs():
    import make_vocab_gguf
    h = hashlib.sha256()
    for p in [os.path.join(HERE, "make_vocab_gguf.py")] + [os.path.join(TOKDIR, m, f) for m in ("qwen3", "llama3")
                                                           for f in ("tokenizer.json", "tokenizer_config.json")]:
        h.update(open(p, "rb").read())
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "edgerunner",
                         "tokenizer-" + h.hexdigest()[:12])
    os.makedirs(cache, exist_ok=True)
    files = {"qwen3": os.path.join(cache, "qwen3.gguf"), "llama3": os.path.join(cache, "llama3.gguf"),
             "qwen3-tiny": os.path.join(cache, "qwen3-tiny.gguf")}
    specs = {"qwen3": ("qwen3", "qwen2", "qwen3", "<|endoftext|>", False),
             "llama3": ("llama3", "llama-bpe", "llama", None, False),
             "qwen3-tiny": ("qwen3", "qwen2", "qwen3", "<|endoftext|>", True)}
    for name, path in files.items():
        if not os.path.exists(path):
            d, pre, arch, bos, tiny = specs[name]
            tmp = path + f".tmp{os.getpid()}"
            make_vocab_gguf.build(os.path.join(TOKDIR, d), pre, arch, tmp, bos, tiny)
            os.replace(tmp, path)
    return files


def tokenize_batch(exe, gguf, texts, special=False, bos=False):
    """ids of each text through one `tokenize --batch` process."""
    args = [exe, "tokenize", "-m", gguf, "--ids", "--batch", "-f", "-"]
    if special:
        args.append("--special")
    if not bos:
        args.append("--no-bos")
    r = run(args, input="\0".join(texts).encode("utf-8"), check=True)
    lines = r.stdout.decode().split("\n")
    return [[int(x) for x in lines[i].split()] for i in range(len(texts))]


def detokenize_batch(exe, gguf, ids_list):
    r = run([exe, "tokenize", "-m", gguf, "--decode", "--batch", "-f", "-"],
            input="\n".join(" ".join(map(str, ids)) for ids in ids_list).encode(), check=True)
    return r.stdout.split(b"\0")[:len(ids_list)]


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


# ------------------------------------------------------------------------------- checks

def check_vectors(exe, vocabs):
    for name, gguf in [("qwen2", vocabs["qwen3"]), ("llama-bpe", vocabs["llama3"]),
                       ("gpt-2", os.path.join(VECTORS, "ggml-vocab-gpt-2.gguf")),
                       ("llama-spm", os.path.join(VECTORS, "ggml-vocab-llama-spm.gguf")),
                       ("phi-3", os.path.join(VECTORS, "ggml-vocab-phi-3.gguf"))]:
        base = os.path.join(VECTORS, f"ggml-vocab-{name}.gguf")
        with open(base + ".inp", encoding="utf-8", newline="") as f:
            texts = f.read().split("\n__ggml_vocab_test__\n")[:-1]
        with open(base + ".out", encoding="utf-8") as f:
            expected = [[int(x) for x in line.split()] for line in f.read().split("\n")[:len(texts)]]
        got = tokenize_batch(exe, gguf, texts)
        bad = [i for i in range(len(texts)) if got[i] != expected[i]]
        detail = "" if not bad else f"; first mismatch {texts[bad[0]]!r}: expected {expected[bad[0]]}, got {got[bad[0]]}"
        report(not bad, f"vectors {name}: {len(texts) - len(bad)}/{len(texts)} identical{detail}")


def gemma_tokenizer_dir():
    """make_gemma_tokenizer.py's folder from the Gemma-3 GGUF (tools/get_model.sh gemma3),
    cached beside it; built once (about a minute)."""
    import make_gemma_tokenizer
    gguf = subprocess.run([os.path.join(HERE, "..", "..", "tools", "get_model.sh"), "gemma3"], check=True,
                          capture_output=True, text=True).stdout.strip()
    h = hashlib.sha256(open(os.path.join(HERE, "make_gemma_tokenizer.py"), "rb").read())
    out = os.path.join(os.path.dirname(gguf), "gemma3-tokenizer-" + h.hexdigest()[:12])
    if not os.path.exists(os.path.join(out, ".complete")):
        make_gemma_tokenizer.build(gguf, out)
        open(os.path.join(out, ".complete"), "w").close()
    return out


def check_corpus(exe, vocabs, docs):
    """Each tokenizer twice: from the GGUF metadata make_vocab_gguf.py writes, and read by the
    engine straight from the tokenizer.json folder (io/hf_tokenizer.c, issue 22); Gemma-3's
    from its folder only."""
    from tokenizers import Tokenizer
    size = sum(len(d.encode("utf-8")) for d in docs)
    for name in ("qwen3", "llama3", "gemma3"):
        folder = gemma_tokenizer_dir() if name == "gemma3" else os.path.join(TOKDIR, name)
        tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        tok.encode_special_tokens = True  # special tokens in text are text, as without --special
        ref = [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)]
        sources = [(f"{name} tokenizer.json", folder)] + ([(name, vocabs[name])] if name in vocabs else [])
        for label, source in sources:
            check_corpus_one(exe, label, source, tok, ref, docs, size, nfc=name == "qwen3")


def check_corpus_one(exe, label, source, tok, ref, docs, size, nfc):
    got = tokenize_batch(exe, source, docs)
    bad = [i for i in range(len(docs)) if got[i] != ref[i]]
    detail = ""
    if bad:
        i = bad[0]
        k = first_diff(got[i], ref[i])
        detail = (f"; document {i} differs at id {k}: expected {ref[i][max(0, k - 2):k + 4]} "
                  f"{[tok.id_to_token(x) for x in ref[i][max(0, k - 2):k + 4]]}, got {got[i][max(0, k - 2):k + 4]}")
    n_ids = sum(len(r) for r in ref)
    report(not bad, f"corpus {label}: {len(docs) - len(bad)}/{len(docs)} documents ({size / 1e6:.2f} MB, "
                    f"{n_ids} ids) identical to Hugging Face tokenizers{detail}")
    # decode(encode(x)) == x (Qwen3 normalizes to NFC first: the round trip gives NFC(x))
    back = detokenize_batch(exe, source, got)
    want = [(tok.normalizer.normalize_str(d) if nfc else d).encode("utf-8") for d in docs]
    bad = [i for i in range(len(docs)) if back[i] != want[i]]
    report(not bad, f"roundtrip {label}: decode(encode(x)) == {'NFC(x)' if nfc else 'x'} for "
                    f"{len(docs) - len(bad)}/{len(docs)} documents" + (f"; first bad: {bad[0]}" if bad else ""))


SPECIAL_TEXTS = [
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "a<|endoftext|>b <|im_end|><|im_end|>x",
    "<think>reasoning</think>answer <tool_call>{}</tool_call>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<|reserved_special_token_5|> <|eot_id|>text<|eot_id|>",
    "partial <|im_start <|eot_id <|>",
]


def check_special(exe, vocabs):
    from tokenizers import Tokenizer
    for name in ("qwen3", "llama3"):
        tok = Tokenizer.from_file(os.path.join(TOKDIR, name, "tokenizer.json"))
        for parse in (True, False):
            tok.encode_special_tokens = not parse
            ref = [e.ids for e in tok.encode_batch(SPECIAL_TEXTS, add_special_tokens=False)]
            got = tokenize_batch(exe, vocabs[name], SPECIAL_TEXTS, special=parse)
            bad = [i for i in range(len(ref)) if ref[i] != got[i]]
            report(not bad, f"special {name} {'--special' if parse else 'plain'}: {len(ref) - len(bad)}/{len(ref)} identical"
                            + (f"; {SPECIAL_TEXTS[bad[0]]!r}: expected {ref[bad[0]]}, got {got[bad[0]]}" if bad else ""))


def check_bos(exe, vocabs):
    cases = [("llama3", vocabs["llama3"], "Hello", [128000, 9906]),
             ("qwen3", vocabs["qwen3"], "Hello", [9707]),
             ("stories260K", STORIES, "Once upon a time", [1, 403, 407, 261, 378]),
             ("llama-spm", os.path.join(VECTORS, "ggml-vocab-llama-spm.gguf"), "Hello world", [1, 15043, 3186])]
    for name, gguf, text, want in cases:
        got = tokenize_batch(exe, gguf, [text], bos=True)[0]
        report(got == want, f"bos {name}: {text!r} -> {got} (expected {want})")
    # the plain listing: ids and pieces
    r = run([exe, "tokenize", "-m", STORIES, "Once upon"])
    report(r.returncode == 0 and r.stdout.decode() == "     1 -> '<s>'\n   403 -> ' Once'\n   407 -> ' upon'\n",
           f"tokenize listing: {r.stdout.decode()!r}")


def check_long(exe, vocabs):
    from tokenizers import Tokenizer
    texts = ["a" * 100_000, "7" * 100_000, " " * 100_000, "ab" * 50_000, "\n" * 50_000 + "x", "é" * 50_000,
             "😀" * 25_000, "!" * 100_000]
    for name in ("qwen3", "llama3"):
        tok = Tokenizer.from_file(os.path.join(TOKDIR, name, "tokenizer.json"))
        ref = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
        t0 = time.perf_counter()
        got = tokenize_batch(exe, vocabs[name], texts)
        dt = time.perf_counter() - t0
        bad = [i for i in range(len(texts)) if got[i] != ref[i]]
        # the time is shown, not asserted (tests never assert timings; the machine is shared)
        report(not bad, f"long {name}: {len(texts) - len(bad)}/{len(texts)} 50-100 KB single pre-tokens "
                        f"identical, {dt:.2f} s for all (one process)")


def check_templates(exe, vocabs):
    from transformers.utils.chat_template_utils import _alias_reasoning_fields, render_jinja_template
    from conversations import SYNTHETIC, UNSUPPORTED, cases
    models = {"qwen3": vocabs["qwen3"], "llama3": vocabs["llama3"], "phi3": os.path.join(VECTORS, "ggml-vocab-phi-3.gguf")}
    configs = {m: json.load(open(os.path.join(TOKDIR, m, "tokenizer_config.json"), encoding="utf-8"))
               for m in ("qwen3", "llama3")}
    import gguf
    phi = gguf.GGUFReader(models["phi3"]).fields
    phi_tokens = phi["tokenizer.ggml.tokens"]
    configs["phi3"] = {"chat_template": bytes(phi["tokenizer.chat_template"].parts[-1]).decode(),
                       "bos_token": bytes(phi_tokens.parts[phi_tokens.data[1]]).decode(),
                       "eos_token": bytes(phi_tokens.parts[phi_tokens.data[32000]]).decode()}
    with tempfile.TemporaryDirectory() as tmp:
        for model, gguf_path in models.items():
            cfg = configs[model]
            special = {k: cfg[k] for k in ("bos_token", "eos_token") if isinstance(cfg.get(k), str)}
            n_ok = n_all = 0
            first_bad = None
            for i, (name, key, v) in enumerate(cases()):
                if key != "model" and model != "qwen3":
                    continue  # the synthetic templates do not depend on the model
                tmpl = cfg["chat_template"] if key == "model" else SYNTHETIC[key]
                extra = {k: x for k, x in v.items() if k not in ("messages", "tools", "add_generation_prompt")}
                try:
                    ref = render_jinja_template([v["messages"]], tools=v["tools"], chat_template=tmpl,
                                                add_generation_prompt=v["add_generation_prompt"], **special, **extra)[0][0]
                except Exception as e:  # a template that raises must fail in both
                    ref = None
                ours = dict(v, messages=_alias_reasoning_fields([dict(m) for m in v["messages"]]), documents=None)
                jpath = os.path.join(tmp, f"{i}.json")
                with open(jpath, "w", encoding="utf-8") as f:
                    json.dump(ours, f, ensure_ascii=False)
                args = [exe, "chat", "-m", gguf_path, "--render-json", jpath]
                if key != "model":
                    tpath = jpath + ".jinja"
                    with open(tpath, "w", encoding="utf-8") as f:
                        f.write(tmpl)
                    args += ["--template", tpath]
                r = run(args)
                got = r.stdout.decode("utf-8") if r.returncode == 0 else None
                n_all += 1
                if got == ref:
                    n_ok += 1
                elif first_bad is None:
                    first_bad = f"; first difference in {name}: expected {ref!r:.300}, got {got!r:.300} {r.stderr.decode()[:200]}"
            report(n_ok == n_all, f"template {model}: {n_ok}/{n_all} renderings identical to jinja2{first_bad or ''}")
        for src, construct in UNSUPPORTED.items():
            tpath = os.path.join(tmp, "bad.jinja")
            with open(tpath, "w") as f:
                f.write(src)
            jpath = os.path.join(tmp, "vars.json")
            with open(jpath, "w") as f:
                f.write('{"messages": [], "x": 1, "y": [1]}')
            r = run([exe, "chat", "-m", vocabs["qwen3"], "--render-json", jpath, "--template", tpath])
            err = r.stderr.decode()
            report(r.returncode == 1 and construct in err and "line 1" in err,
                   f"unsupported {src!r}: exit {r.returncode}, {err.strip()!r}")


def check_hostile(exe, tmp):
    import gguf
    cases = {
        "missing merge token": dict(tokens=["a", "b", "ab"], merges=["a c"]),
        "missing merge result": dict(tokens=["a", "b"], merges=["a b"]),
        "merge without space": dict(tokens=["a", "b", "ab"], merges=["ab"]),
        "empty vocabulary": dict(tokens=[], merges=[]),
        "bos out of range": dict(tokens=["a", "b"], merges=[], bos=7),
        "token types too short": dict(tokens=["a", "b"], merges=[], types=[1]),
        "bad token type": dict(tokens=["a", "b"], merges=[], types=[1, 9]),
    }
    for name, c in cases.items():
        path = os.path.join(tmp, name.replace(" ", "_") + ".gguf")
        w = gguf.GGUFWriter(path, "gpt2")
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("gpt-2")
        w.add_array("tokenizer.ggml.tokens", c["tokens"])
        if c["merges"]:
            w.add_token_merges(c["merges"])
        if "types" in c:
            w.add_token_types(c["types"])
        if "bos" in c:
            w.add_bos_token_id(c["bos"])
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        r = run([exe, "tokenize", "-m", path, "--ids", "ab"])
        err = r.stderr.decode().strip()
        report(r.returncode == 1 and err.startswith("edgerunner: ") and "tokenizer" in err,
               f"hostile {name}: exit {r.returncode}, {err!r}")


def chat_session(exe, model, turns, n_predict):
    """Runs `chat --verbose` on the turns; returns (process, [(ids in the cache before the
    reply, reply ids)], [fed chunks]) rebuilt from its [rewind N] [feed ...] [reply ...] lines."""
    r = run([exe, "chat", "-m", model, "-n", str(n_predict), "-t", "1", "--temp", "0", "--verbose"],
            input=("\n".join(turns) + "\n/exit\n").encode())
    seq, replies, feeds, rewinds = [], [], [], []
    for line in r.stderr.decode().splitlines():
        if not line.startswith("[") or not line.endswith("]"):
            continue
        what, *ids = line[1:-1].split()
        ids = [int(x) for x in ids]
        if what == "rewind":
            rewinds.append(ids[0])
            seq = seq[:ids[0]]
        elif what == "feed":
            feeds.append(ids)
            seq += ids
        elif what == "reply":
            replies.append((list(seq), ids))
            seq += ids
    return r, replies, feeds, rewinds


def check_chat_model(exe, name, model, turns, n_predict, eog):
    """Each reply equals `run --prompt-ids` on everything the cache held before it: feeding
    only each turn's new part (and rewinding where the template re-renders) is the same as
    re-reading the whole conversation. The printed text is the replies' text."""
    r, replies, feeds, rewinds = chat_session(exe, model, turns, n_predict)
    ok = r.returncode == 0 and len(replies) == len(turns)
    detail = f"exit {r.returncode} {r.stderr.decode()[-300:]!r}" if not ok else ""
    for prompt, reply in replies if ok else []:
        out = run([exe, "run", "-m", model, "--prompt-ids", ",".join(map(str, prompt)), "-n", str(n_predict),
                   "--ids", "-t", "1", "--temp", "0"], check=True)
        ref = [int(x) for x in out.stdout.split()]
        cut = next((k for k, t in enumerate(ref) if t in eog), len(ref))  # chat stops at any end-of-generation token
        if ref[:cut] != reply:
            ok, detail = False, f"reply {reply} but run on the same {len(prompt)} ids gives {ref}"
            break
    if ok:
        texts = detokenize_batch(exe, model, [reply for _, reply in replies])
        ok = r.stdout == b"".join(t + b"\n" for t in texts)
        detail = "" if ok else f"printed {r.stdout[:200]!r}, replies decode to {texts!r:.200}"
    if ok and len(rewinds) > 1:
        ok = all(k > 0 for k in rewinds[1:])
        detail = f"cache kept {rewinds[1:]} tokens at the later turns"
    report(ok, f"chat {name}: {len(turns)} turns, each reply == run on the whole conversation; {detail}")
    return feeds


def check_chat(exe, vocabs):
    # stories260K has no template: ChatML; its replies end at EOS (2) or after -n tokens
    check_chat_model(exe, "stories260K (ChatML fallback)", STORIES, ["Once upon a time", "Tom had a dog.", "The end"], 16, {2})
    # the real Qwen3 template and vocabulary on random weights (noise text, but the ids are what count);
    # the user's "<|im_end|>" must stay text
    turns = ["Hello there", "What is 2+2? <|im_end|> is text here", "Thanks!"]
    feeds = check_chat_model(exe, "qwen3 template", vocabs["qwen3-tiny"], turns, 10, {151643, 151645})
    plain = tokenize_batch(exe, vocabs["qwen3"], [turns[1]])[0]
    report(plain in feeds and 151645 not in plain, f"chat: the user's text is tokenized without special tokens: {plain}")
    # greedy: a sampled reply (random seed per process) may itself hold a newline
    r = run([exe, "chat", "-m", STORIES, "-n", "8", "--temp", "0"], input=b"hello\n/reset\nhello\n/exit\nignored\n")
    out, half = r.stdout, len(r.stdout) // 2
    report(r.returncode == 0 and len(out) > 0 and out[:half] == out[half:] and out.endswith(b"\n") and
           "reset" in r.stderr.decode(),
           f"chat /reset starts afresh (same reply to the same first turn), /exit ends: {out!r:.200}")


HF_SPEED = """
import sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
text = open(sys.argv[2], encoding="utf-8").read()
lines = text.splitlines(keepends=True)
docs = ["".join(lines[i:i + 100]) for i in range(0, len(lines), 100)]
tok.encode(docs[0], add_special_tokens=False)
t0 = time.perf_counter()
for d in docs:
    tok.encode(d, add_special_tokens=False)
print(len(text.encode("utf-8")) / 1e6 / (time.perf_counter() - t0))
"""


def check_speed(exe, vocabs, tmp):
    """The same 10 MB of English through both, each pinned to one core (taskset -c 0)."""
    from corpus import english_text
    text = english_text(10_000_000)
    path = os.path.join(tmp, "english.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    mb = len(text.encode("utf-8")) / 1e6
    for name in ("llama3", "qwen3"):
        r = run(["taskset", "-c", "0", exe, "tokenize", "-m", vocabs[name], "--no-bos", "--bench", "-f", path], check=True)
        ours = float(r.stderr.decode().split("MB/s")[0].split()[-1])
        r = run(["taskset", "-c", "0", sys.executable, "-c", HF_SPEED, os.path.join(TOKDIR, name, "tokenizer.json"), path],
                check=True)
        hf = float(r.stdout.decode().split()[-1])
        report(ours >= 10.0, f"speed {name}: ours {ours:.1f} MB/s, Hugging Face tokenizers {hf:.1f} MB/s "
                             f"({mb:.1f} MB of English text, one core; HF one encode() per 100 lines: it slows down on one 10 MB string)")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    exe = os.path.join(os.path.abspath(sys.argv[1]), "edgerunner")
    os.environ.setdefault("RAYON_NUM_THREADS", "2")
    t0 = time.time()
    vocabs = build_vocabs()
    import corpus
    docs = [d for part in corpus.build().values() for d in part]
    with tempfile.TemporaryDirectory() as tmp:
        for check in (lambda: check_vectors(exe, vocabs), lambda: check_corpus(exe, vocabs, docs),
                      lambda: check_special(exe, vocabs), lambda: check_bos(exe, vocabs),
                      lambda: check_long(exe, vocabs), lambda: check_templates(exe, vocabs),
                      lambda: check_hostile(exe, tmp), lambda: check_chat(exe, vocabs),
                      lambda: check_speed(exe, vocabs, tmp)):
            try:
                check()
            except Exception as e:  # a crash in one check is a failure, the others still run
                import traceback
                traceback.print_exc()
                report(False, f"check raised {type(e).__name__}: {e}")
    n_fail = results.count(False)
    print(f"({time.time() - t0:.0f} s)")
    print(f"{len(results) - n_fail} passed, {n_fail} failed")
    sys.exit(1 if n_fail else 0)


if __name__ == "__main__":
    main()
