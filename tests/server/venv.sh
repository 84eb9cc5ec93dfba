#!/usr/bin/env bash
# Builds (once) and prints the path of the small Python virtual environment of the server
# tests: the official OpenAI and Anthropic clients and httpx (raw SSE framing). Kept apart
# from the oracle venv (tests/oracle/venv.sh) so that changing these pins never rebuilds
# torch and llama.cpp. Keyed by the pins, under ~/.cache/edgerunner, reused across runs.
#
# Usage: PY=$(tests/server/venv.sh)/bin/python
set -euo pipefail

exec "$(dirname "$0")/../venv.sh" server "openai==3.57.0 anthropic==2.14.0 httpx==0.28.1"
