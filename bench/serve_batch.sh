#!/usr/bin/env bash
# serve_batch.sh [BIN] [MODEL] [SERVE FLAGS...] - continuous batching and the prefix cache of `edgerunner
# serve` on the CPU, from the repository root (see serve_batch.py for what is measured):
#   bench/serve_batch.sh build/edgerunner   # SmolLM2-135M by default (tools/get_model.sh)
#   bench/serve_batch.sh build/edgerunner "$(tools/get_model.sh)" -t 1   # flags for serve
# Prints the figures; exits 1 only when a concurrent text differs from its text alone.
set -euo pipefail
BIN=${1:-build/edgerunner}
MODEL=${2:-$(tools/get_model.sh smollm2)}
shift $(($# < 2 ? $# : 2))
PY=$(tests/server/venv.sh)/bin/python
exec "$PY" bench/serve_batch.py "$BIN" "$MODEL" "$@"
