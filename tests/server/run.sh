#!/usr/bin/env bash
# run.sh BINARY [--asan] - the tests of `edgerunner serve`, from the repository root:
#   tests/server/run.sh build/edgerunner
#   tests/server/run.sh build/debug/edgerunner --asan   (AddressSanitizer + UBSan build)
# toolcall_test (C): the <tool_call> parser on text no test model writes.
# test_server.py: every endpoint through the official openai and anthropic clients and
# raw httpx, hostile requests, the API key, slots and the queue. test_load.py: 64
# clients, 1,000 requests, a tenth leaving mid-stream, RSS, then SIGTERM under load.
# The clients live in their own small cached venv (tests/server/venv.sh). Each script
# runs under a timeout, so a hang is a failure.
set -euo pipefail

if [ $# -lt 1 ] || [ ! -x "$1" ]; then
    echo "usage: $0 BINARY [--asan] (run from the repository root)" >&2
    exit 2
fi
BIN=$1
shift
PY=$(tests/server/venv.sh)/bin/python
export PYTHONPATH=tests/server
# a sanitizer report makes the server exit non-zero, which the tests check
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=0:exitcode=86:detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=0:print_stacktrace=1:exitcode=87
export LSAN_OPTIONS=exitcode=88
"$(dirname "$BIN")"/tests/server/toolcall_test
timeout 900 "$PY" tests/server/test_server.py "$BIN"
timeout 900 "$PY" tests/server/test_load.py "$BIN" "$@"
timeout 300 "$PY" tests/server/test_page.py "$BIN"
