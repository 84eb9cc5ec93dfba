#!/usr/bin/env python3
"""The tokenizer test corpus: at least 5 MB of varied text from what is on the machine,
plus generated text aimed at the tokenizer's edges. Deterministic: the same machine gives
the same corpus (files are taken in sorted order, the generator is seeded).

Parts (each a list of documents; a document is at most ~8 KB, cut at line ends):
  man        manual pages in every language installed (/usr/share/man/*/man*), troff source
  messages   translated program messages (gettext catalogs in /usr/share/locale), ~190 languages
  code       C headers (/usr/include) and Python sources (the standard library)
  docs       READMEs and changelogs (/usr/share/doc)
  generated  random Unicode from every plane, emoji (ZWJ sequences, flags, skin tones),
             combining marks in every order (NFC), Hangul jamo, white-space runs of every
             kind, very long words and numbers, contractions in all cases, CRLF, ...

Usage: corpus.py OUT    (writes the documents NUL-separated, and prints sizes)
No document contains NUL (the separator of edgerunner tokenize --batch).
"""
import gettext
import glob
import gzip
import os
import random
import sys

DOC_BYTES = 8000


def read_text(path):
    try:
        with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
            data = f.read(400_000)
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None


def chunks(text, limit=DOC_BYTES):
    """Cut text into documents of at most ~limit bytes at line ends."""
    out, cur, size = [], [], 0
    for line in text.splitlines(keepends=True):
        n = len(line.encode("utf-8"))
        if cur and size + n > limit:
            out.append("".join(cur))
            cur, size = [], 0
        cur.append(line)
        size += n
    if cur:
        out.append("".join(cur))
    return [d.replace("\0", "") for d in out if d.strip("\0")]


def take(paths, budget, per_file=60_000):
    docs, total = [], 0
    for p in paths:
        if total >= budget:
            break
        t = read_text(p)
        if not t:
            continue
        t = t[:per_file]
        for d in chunks(t):
            docs.append(d)
            total += len(d.encode("utf-8"))
    return docs


def man_pages(budget):
    langs = sorted(d for d in os.listdir("/usr/share/man") if not d.startswith("man")) if os.path.isdir("/usr/share/man") else []
    docs = []
    per_lang = budget // (len(langs) + 1)
    for lang in langs + [""]:
        paths = sorted(glob.glob(f"/usr/share/man/{lang}/man*/*.gz" if lang else "/usr/share/man/man*/*.gz"))
        docs += take(paths, per_lang, per_file=20_000)
    return docs


def messages(budget):
    docs = []
    dirs = sorted(glob.glob("/usr/share/locale/*/LC_MESSAGES"))
    per_lang = max(budget // max(len(dirs), 1), 4000)
    for d in dirs:
        texts, size = [], 0
        for mo in sorted(glob.glob(d + "/*.mo")):
            try:
                with open(mo, "rb") as f:
                    cat = gettext.GNUTranslations(f)._catalog
            except Exception:
                continue
            for k in sorted(cat, key=str):
                v = cat[k]
                if isinstance(v, str) and v and isinstance(k, str) and k:
                    texts.append(v)
                    size += len(v.encode("utf-8"))
            if size >= per_lang:
                break
        if texts:
            docs += chunks("\n".join(texts))
    return docs


def code(budget):
    c = sorted(glob.glob("/usr/include/**/*.h", recursive=True))
    py = sorted(glob.glob(os.path.dirname(os.__file__) + "/**/*.py", recursive=True))
    return take(c, budget // 2, per_file=30_000) + take(py, budget // 2, per_file=30_000)


def docs_part(budget):
    paths = sorted(glob.glob("/usr/share/doc/**/README*", recursive=True) +
                   glob.glob("/usr/share/doc/**/*.md", recursive=True) +
                   glob.glob("/usr/share/doc/**/changelog*.gz", recursive=True))
    return take(paths, budget, per_file=20_000)


def random_char(rng):
    r = rng.random()
    if r < 0.3:
        lo, hi = 0x20, 0x7F
    elif r < 0.5:
        lo, hi = 0x80, 0x800
    elif r < 0.8:
        lo, hi = 0x800, 0x10000
    elif r < 0.95:
        lo, hi = 0x10000, 0x30000
    else:
        lo, hi = 0x30000, 0x110000
    while True:
        c = rng.randrange(lo, hi)
        if not 0xD800 <= c < 0xE000 and c != 0:
            return chr(c)


SPACES = [" ", "\t", "\n", "\r", "\r\n", "\v", "\f", "\u00a0", "\u1680", "\u2000", "\u2009", "\u200a",
          "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u0085", "\u200b", "\u180e", "\ufeff"]
EMOJI = ["\U0001F600", "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466", "\U0001F44D\U0001F3FD",
         "\U0001F1FA\U0001F1F8", "\u2764\uFE0F", "\U0001F3F3\uFE0F\u200D\U0001F308", "\u0031\uFE0F\u20E3",
         "\U0001F9D1\u200D\U0001F4BB", "\U0001F47E", "\u2705", "\U0001FAE0"]
COMBINING = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u0323", "\u0327", "\u0328", "\u031b",
             "\u0345", "\u05b0", "\u0651", "\u093c", "\u0e48", "\u1dfa", "\u16ff0", "\u20d7", "\u3099", "\u309a"]
BASES = ["a", "e", "i", "o", "u", "A", "E", "O", "c", "n", "s", "z", "\u03b1", "\u03c9", "\u0430", "\u0627",
         "\u0915", "\u304b", "\u30cf", "\u1100", "\uac00", "\u0041\u030a", "\u212b", "\u2126"]
WORDS = ["the", "don't", "I'M", "we'RE", "they'Ve", "it'll", "she'D", "'s", "'T", "x'K", "O'Neil",
         "über", "naïve", "façade", "日本語", "中文字符", "한국어", "русский", "ελληνικά", "עברית",
         "العربية", "हिन्दी", "ไทย", "1234567", "3.14159", "1,000,000", "٣٤٥", "०१२", "Ⅻ", "½",
         "C++", "a->b", "x==y", "foo_bar", "camelCase", "HTTP/1.1", "https://example.com/a?b=c",
         "<|im_start|>", "<|endoftext|>", "<think>", "</think>", "<s>", "</s>", "<|eot_id|>"]


def generated(rng, budget):
    docs, total = [], 0
    kinds = ["random", "mixed", "combining", "spaces", "emoji", "long", "hangul"]
    i = 0
    while total < budget:
        kind = kinds[i % len(kinds)]
        i += 1
        parts = []
        if kind == "random":
            parts = [random_char(rng) for _ in range(rng.randrange(50, 1500))]
        elif kind == "mixed":
            for _ in range(rng.randrange(20, 300)):
                r = rng.random()
                parts.append(rng.choice(WORDS) if r < 0.6 else rng.choice(SPACES) if r < 0.9 else random_char(rng))
                parts.append(rng.choice([" ", " ", " ", "", "\n", "  ", ", ", ". "]))
        elif kind == "combining":
            for _ in range(rng.randrange(20, 200)):
                parts.append(rng.choice(BASES) + "".join(rng.choice(COMBINING) for _ in range(rng.randrange(0, 4))))
                if rng.random() < 0.3:
                    parts.append(" ")
        elif kind == "spaces":
            for _ in range(rng.randrange(10, 100)):
                parts.append("".join(rng.choice(SPACES) for _ in range(rng.randrange(1, 12))))
                parts.append(rng.choice(WORDS + ["", "!", "?!", "...", "-", "\u00bf"]))
        elif kind == "emoji":
            for _ in range(rng.randrange(10, 200)):
                parts.append(rng.choice(EMOJI) + rng.choice(["", "", " ", "\n", "a", "1"]))
        elif kind == "long":
            r = rng.random()
            n = rng.randrange(1000, 30000)
            if r < 0.25:
                parts = [rng.choice("aqxz") * n]
            elif r < 0.5:
                parts = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))]
            elif r < 0.75:
                parts = ["".join(rng.choice("0123456789") for _ in range(n))]
            else:
                parts = [rng.choice([" ", "\n", "\t", "!", "=", "\u3000"]) * n + "end"]
        elif kind == "hangul":
            for _ in range(rng.randrange(20, 300)):
                parts.append(chr(0x1100 + rng.randrange(19)) + chr(0x1161 + rng.randrange(21)) +
                             (chr(0x11A8 + rng.randrange(27)) if rng.random() < 0.5 else "") + rng.choice(["", " "]))
        d = "".join(parts).replace("\0", "")
        docs.append(d)
        total += len(d.encode("utf-8"))
    return docs


def english_text(n_bytes):
    """English prose and documentation for the speed test: READMEs and manuals from
    /usr/share/doc, English program messages (the msgids of the gettext catalogs), English
    manual pages; repeated up to n_bytes."""
    parts, total = [], 0
    paths = sorted(glob.glob("/usr/share/doc/**/README*", recursive=True) + glob.glob("/usr/share/doc/**/*.md", recursive=True))
    for d in take(paths, n_bytes // 3, per_file=50_000):
        parts.append(d)
        total += len(d.encode("utf-8"))
    seen = set()
    for mo in sorted(glob.glob("/usr/share/locale/de/LC_MESSAGES/*.mo")):
        try:
            with open(mo, "rb") as f:
                cat = gettext.GNUTranslations(f)._catalog
        except Exception:
            continue
        for k in cat:
            if isinstance(k, str) and k and k not in seen and total < 2 * n_bytes // 3:
                seen.add(k)
                parts.append(k + "\n")
                total += len(k.encode("utf-8")) + 1
    for d in take(sorted(glob.glob("/usr/share/man/man*/*.gz")), n_bytes - total, per_file=50_000):
        parts.append(d)
        total += len(d.encode("utf-8"))
    text = "".join(parts).replace("\0", "")
    while text and len(text.encode("utf-8")) < n_bytes:
        text += text
    return text.encode("utf-8")[:n_bytes].decode("utf-8", errors="ignore")


def build():
    """Returns {part name: [documents]}."""
    rng = random.Random(20261129)
    return {
        "man": man_pages(1_600_000),
        "messages": messages(1_600_000),
        "code": code(1_000_000),
        "docs": docs_part(500_000),
        "generated": generated(rng, 700_000),
    }


def main():
    parts = build()
    with open(sys.argv[1], "wb") as f:
        f.write(b"\0".join(d.encode("utf-8") for docs in parts.values() for d in docs))
    for name, docs in parts.items():
        print(f"{name}: {len(docs)} documents, {sum(len(d.encode('utf-8')) for d in docs) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
