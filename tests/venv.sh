#!/usr/bin/env bash
# Builds (once) and prints the path of a cached Python virtual environment holding the
# pinned packages PINS: ~/.cache/edgerunner/NAME-venv-<hash of PINS>, so that changing a
# pin makes a new one and a machine builds each once. Built under a lock (parallel test
# runs wait for one build); a build cut short is redone (.complete marks a whole one).
# The caller's environment reaches pip (tests/oracle/venv.sh passes llama.cpp's CMake
# options that way).
#
# Usage: tests/venv.sh NAME "PINS"      (tests/oracle/venv.sh, tests/server/venv.sh)
set -euo pipefail

name=$1
pins=$2
key=$(printf '%s' "$pins" | sha256sum | cut -c1-12)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/edgerunner"
venv="$cache/$name-venv-$key"

mkdir -p "$cache"
exec 9>"$cache/$name-venv-$key.lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
    rm -rf "$venv"
    echo "$name venv: building $venv ($pins)" >&2
    python3 -m venv "$venv" >&2
    "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
    "$venv/bin/python" -m pip install --quiet $pins >&2
    touch "$venv/.complete"
fi
echo "$venv"
