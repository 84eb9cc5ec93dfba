#!/usr/bin/env bash
# Runs the independent-oracle tests (transformers + llama.cpp) against the engine in BUILD_DIR:
# test_oracles.py (Qwen3 and Llama in every weight type, files written by make_models.py)
# and test_archs.py (Phi-3, Mistral, Gemma-3 and the RoPE variants, files written by
# llama.cpp's own converter) and test_hf.py (Hugging Face folders loaded and converted, against
# transformers and llama.cpp's converter). Each runs whatever the others report.
# Usage: tests/oracle/run.sh BUILD_DIR      (exit status 0 iff every check passes)
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
venv=$("$here/venv.sh")
status=0
"$venv/bin/python" "$here/test_oracles.py" "$1" || status=1
"$venv/bin/python" "$here/test_archs.py" "$1" || status=1
"$venv/bin/python" "$here/test_hf.py" "$1" || status=1
exit $status
