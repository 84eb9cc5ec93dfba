#!/usr/bin/env bash
# Runs the quantization oracle tests (gguf-py numpy, ggml's C quantizer, llama.cpp) against
# the engine and tools in BUILD_DIR (needs BUILD_DIR/edgerunner and BUILD_DIR/tests/quant_tool).
# Usage: tests/quant/run.sh BUILD_DIR      (exit status 0 iff every check passes)
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
venv=$("$here/../oracle/venv.sh")
exec "$venv/bin/python" "$here/test_quant.py" "$1"
