#!/usr/bin/env bash
# Builds (once) and prints the path of the small Python virtual environment of the server
# tests: the official OpenAI and Anthropic clients and httpx (raw SSE framing). Kept apart
# from the oracle venv (tests/oracle/venv.sh) so that changing these pins never rebuilds
# torch and llama.cpp. Keyed by the pins, under ~/.cache/edgerunner, reused across runs.
#
# Usage: PY=$(tests/server/venv.sh)/bin/python
set -euo pipefail

PINS="openai==3.57.0 anthropic==2.14.0 httpx==0.28.1"
key=$(printf '%s' "$PINS" | sha256sum | cut -c1-12)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/edgerunner"
venv="$cache/server-venv-$key"

mkdir -p "$cache"
exec 9>"$cache/server-venv-$key.lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
    rm -rf "$venv"
    echo "server venv: building $venv ($PINS)" >&2
    python3 -m venv "$venv" >&2
    "$venv/bin/python" -m pip install --quiet $PINS >&2
    touch "$venv/.complete"
fi
echo "$venv"
