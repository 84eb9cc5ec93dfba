#!/usr/bin/env bash
# gpu_arch.sh - issue 18's architectures and KV cache types on the GPU machine, in one
# call: the CUDA kernel unit tests (biases, GeGLU, post-norms, scaled embeddings, attention
# with F32/F16/Q8_0 caches), then bench/check_cuda.py (CUDA against the CPU reference:
# logits of a prefill and of decode steps, 128 greedy ids) on stories260K and the random
# qwen2/gemma3 files of bench/make_random_archs.py, once per KV cache type; with
# QWEN3=1 also a random Qwen3-0.6B Q8_0 (make_random_qwen3.py, the real vocabulary), its
# check at F32 and F16 and `bench` at both (the decode speed of the F16 default against
# F32). Logs go to $OUT; one summary line per part on stdout.
# Usage (device call, from the repo root; carry the binaries, the models and .whl):
#   bash bench/gpu_arch.sh BIN_DIR MODEL_DIR      (BIN_DIR: edgerunner and unit_tests)
set -uo pipefail
OUT=${OUT:-gpu-out}
bin=$1
models=$2
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,clocks.sm,memory.used --format=csv,noheader
# the kernels against a double-precision host computation (tests/unit/test_cuda.c)
timeout 300 "$bin/unit_tests" cuda > "$OUT/unit-cuda.txt" 2>&1
grep -v "^  " "$OUT/unit-cuda.txt" | grep -iv "^ok\|passed" | head -40
tail -2 "$OUT/unit-cuda.txt" | head -1

files=("$models"/*.gguf)
for kv in f32 f16 q8_0; do
    # stories260K's heads have 8 dims: CUDA refuses a q8_0 cache for them (whole blocks of 32)
    extra=(tests/data/stories260K.gguf)
    [ "$kv" = q8_0 ] && extra=()
    python3 bench/check_cuda.py -ctk "$kv" -ctv "$kv" "$bin/edgerunner" ${extra[@]+"${extra[@]}"} "${files[@]}" \
        > "$OUT/check-$kv.log" 2>&1
    grep "^FAIL" "$OUT/check-$kv.log"
    echo "check_cuda $kv KV: $(tail -1 "$OUT/check-$kv.log")"
done
# the default (F16) cache end to end through bench's guard, on the largest head size
"$bin/edgerunner" bench -m "$models/gemma3-hd256.gguf" --backend cuda -n 64 --runs 2 > "$OUT/bench-gemma3.txt" 2>&1
echo "bench gemma3-hd256 (F16 KV): $(grep -m1 "FAIL\|decode" "$OUT/bench-gemma3.txt")"

if [ -n "${QWEN3:-}" ]; then
    if [ -d .whl ]; then
        python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
    fi
    vocab=()
    [ -f .gpu-carry/qwen3-vocab.gguf ] && vocab=(--vocab .gpu-carry/qwen3-vocab.gguf)
    q=$(python3 bench/make_random_qwen3.py /tmp/arch-qwen3 --types Q8_0 ${vocab[@]+"${vocab[@]}"} | head -1)
    for kv in f32 f16; do
        python3 bench/check_cuda.py -ctk "$kv" -ctv "$kv" "$bin/edgerunner" "$q" > "$OUT/check-qwen3-$kv.log" 2>&1
        grep "^FAIL" "$OUT/check-qwen3-$kv.log"
        echo "check_cuda qwen3-0.6b $kv KV: $(tail -1 "$OUT/check-qwen3-$kv.log")"
        "$bin/edgerunner" bench -m "$q" --backend cuda -n 128 --runs 3 -ctk "$kv" -ctv "$kv" -c 4096 \
            > "$OUT/bench-qwen3-$kv.txt" 2>&1
        echo "bench qwen3-0.6b Q8_0 $kv KV: $(grep -m1 "FAIL\|decode" "$OUT/bench-qwen3-$kv.txt")"
    done
fi
