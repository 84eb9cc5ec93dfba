#!/usr/bin/env bash
# Runs the independent-oracle tests (transformers + llama.cpp) against the engine in BUILD_DIR.
# Usage: tests/oracle/run.sh BUILD_DIR      (exit status 0 iff every check passes)
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
venv=$("$here/venv.sh")
exec "$venv/bin/python" "$here/test_oracles.py" "$1"
