#!/usr/bin/env bash
# Fetches (once) and prints the folder of llama.cpp's own Hugging Face -> GGUF converter:
# convert_hf_to_gguf.py with its conversion/ package and gguf-py, taken from the sdist of
# the llama-cpp-python that the oracle venv pins (venv.sh), so that the converter is the
# one of the llama.cpp the oracles run. sentencepiece (the converter reads tokenizer.model
# with it, and imports it before any other vocabulary) goes into site/ beside it, not into
# the shared venv. Cached under ~/.cache/edgerunner, keyed by the versions, built under a
# lock; a fresh machine fetches it in about a minute.
#
# Usage: CONV=$(tests/oracle/converter.sh)
#        PYTHONPATH=$CONV/site $PY $CONV/llama.cpp/convert_hf_to_gguf.py DIR --outfile X.gguf --outtype f32
# (the converter puts its own gguf-py first on sys.path by itself)
set -euo pipefail

VERSION=0.3.36 # llama-cpp-python, as pinned in venv.sh
SPM=sentencepiece==0.2.3
key=$(printf '%s %s' "$VERSION" "$SPM" | sha256sum | cut -c1-12)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/edgerunner"
dir="$cache/llama-convert-$VERSION-$key"
py="$("$(dirname "$0")/venv.sh")/bin/python"

mkdir -p "$cache"
exec 9>"$dir.lock"
flock 9
if [ ! -f "$dir/.complete" ]; then
    rm -rf "$dir"
    echo "converter: fetching llama-cpp-python $VERSION sdist and $SPM into $dir" >&2
    dl=$(mktemp -d)
    trap 'rm -rf "$dl"' EXIT
    "$py" -m pip download --quiet --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$dl" >&2
    tar -xzf "$dl/llama_cpp_python-$VERSION.tar.gz" -C "$dl"
    src="$dl/llama_cpp_python-$VERSION/vendor/llama.cpp"
    mkdir -p "$dir/llama.cpp"
    cp -r "$src/convert_hf_to_gguf.py" "$src/conversion" "$src/gguf-py" "$src/LICENSE" "$dir/llama.cpp/"
    "$py" -m pip install --quiet --no-deps --target "$dir/site" "$SPM" >&2
    touch "$dir/.complete"
fi
echo "$dir"
