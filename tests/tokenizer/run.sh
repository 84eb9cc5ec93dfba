#!/usr/bin/env bash
# Runs the tokenizer, chat template and text CLI tests against the engine in BUILD_DIR
# (references: llama.cpp's vectors, Hugging Face tokenizers, jinja2 via transformers).
# Usage: tests/tokenizer/run.sh BUILD_DIR      (last line "N passed, M failed"; exit 0 iff M == 0)
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
venv=$("$here/../oracle/venv.sh")
exec "$venv/bin/python" "$here/test_tokenizer.py" "$1"
