#!/usr/bin/env bash
# Builds (once) and prints the path of the Python virtual environment that holds the
# independent oracles: transformers + CPU torch (reference forward pass), gguf (reference
# GGUF writer and Q8_0 quantizer), llama-cpp-python (llama.cpp itself, built from its
# sdist), and sentencepiece + protobuf (test_hf.py trains a SentencePiece tokenizer.model and
# has transformers convert it to tokenizer.json; sentencepiece 0.2.3's model_pb2 needs
# protobuf >= 7.36.1). The environment lives outside the clone, keyed by the pinned versions, so that
# it is built once per machine and reused; a fresh machine rebuilds it (about 10 minutes).
#
# Usage: PY=$(tests/oracle/venv.sh)/bin/python
set -euo pipefail

PINS="torch==2.15.0 transformers==5.24.0 gguf==0.19.0 numpy==2.4.6 llama-cpp-python==0.3.36 sentencepiece==0.2.3 protobuf==7.36.2"
# llama.cpp is compiled here; tests, examples and servers are not needed.
CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF" \
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    exec "$(dirname "$0")/../venv.sh" oracle "$PINS"
