#!/usr/bin/env python3
"""Seeds for fuzz_jinja (make fuzz-jinja): each real template (the chat_template of the
tokenizer_config.json files given) and each synthetic template of tests/tokenizer, with a
conversation as its variables, written as fuzz_jinja reads them: template, NUL, JSON.

Usage: jinja_seeds.py CORPUS_DIR [tokenizer_config.json ...]   (the system python3 is enough)
"""
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tokenizer"))
sys.dont_write_bytecode = True
from conversations import CONVERSATIONS, SYNTHETIC, TIME_TOOL, WEATHER_TOOL  # noqa: E402


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    templates = list(SYNTHETIC.values())
    for path in sys.argv[2:]:
        template = json.load(open(path, encoding="utf-8")).get("chat_template")
        if isinstance(template, str):
            templates.append(template)
    variables = [{"messages": CONVERSATIONS[name], "tools": [WEATHER_TOOL, TIME_TOOL] if "tool" in name else None,
                  "add_generation_prompt": True, "enable_thinking": False}
                 for name in ("system", "multi_turn", "think_history", "tool_call_dict")]
    n = 0
    for t in templates:
        for v in variables:
            seed = t.encode("utf-8") + b"\0" + json.dumps(v, ensure_ascii=False).encode("utf-8")
            with open(os.path.join(out, "seed-" + hashlib.sha1(seed).hexdigest()), "wb") as f:
                f.write(seed)
            n += 1
    print(f"{n} seeds from {len(templates)} templates in {out}")


if __name__ == "__main__":
    main()
