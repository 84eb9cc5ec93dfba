#!/usr/bin/env bash
# The one GPU script: on the H200 machine, builds with CUDA for sm_90, makes the
# random-weight Qwen3-0.6B files, checks the CUDA backend against the CPU reference,
# then times each file with `edgerunner bench` (which itself refuses wrong tokens).
# Usage (through the device tool, with .whl carried: the gguf wheel; carry build/edgerunner
# and build/unit_tests too to skip the build):
#   bash bench/gpu.sh [TYPES=Q8_0,F16]
# Writes logs and JSON to $OUT (or ./gpu-out).
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
TYPES=${1:-Q8_0,F16}
models=/tmp/er-models
export PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv | tee "$OUT/gpu.txt"
# a build carried from the development machine is used when it runs here
if ! ldd build/edgerunner 2>/dev/null | grep -q "not found" && build/edgerunner --help > /dev/null 2>&1; then
    echo "using the carried build"
else
    make -j16 CUDA=1 SERVER=0 all > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
fi
grep -h "registers\|spill" build/src/backend/cuda/*.log | sort | uniq -c | sort -rn | head -5
# the kernels against a double-precision host computation (tests/unit/test_cuda.c)
[ -x build/unit_tests ] || make -j16 CUDA=1 SERVER=0 build/unit_tests > "$OUT/build-tests.log" 2>&1
build/unit_tests cuda 2>&1 | tail -3 | tee "$OUT/unit-cuda.txt"
build/unit_tests cuda_gemm 2>&1 | tail -3 | tee -a "$OUT/unit-cuda.txt"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl &&
        export PYTHONPATH=/tmp/site
fi
[ -x build/calibrate ] || nvcc -arch=sm_90 -O3 -std=c++17 -o build/calibrate bench/calibrate.cu
build/calibrate 2>&1 | tee "$OUT/calibrate.txt"
python3 bench/make_random_qwen3.py "$models" --types "$TYPES" > "$OUT/models.txt" || exit 1
mapfile -t files < "$OUT/models.txt"

[ -z "${NO_CHECK:-}" ] && python3 bench/check_cuda.py build/edgerunner tests/data/stories260K.gguf "${files[@]}" 2>&1 | tee "$OUT/check.log"

nvidia-smi dmon -s pc -d 1 > "$OUT/dmon.txt" 2>&1 &
for f in tests/data/stories260K.gguf "${files[@]}"; do
    b=$(basename "$f" .gguf)
    build/edgerunner bench -m "$f" --backend cuda -n 128 -pp 512 --runs 5 --json ${PROFILE:+--profile} > "$OUT/bench-$b.json" 2> "$OUT/bench-$b.err"
    [ -n "${PROFILE:-}" ] && grep -A9 "step at\|prefill of" "$OUT/bench-$b.err"
    nvidia-smi --query-gpu=clocks.sm --format=csv,noheader
    echo "== $b"; cat "$OUT/bench-$b.json" | python3 -c 'import json,sys; d=json.load(sys.stdin); print({k: d[k] for k in ("decode_tok_s","ttft_ms","prefill_tok_s","load_ms","rss_after_load_mib","gpu_used_mib","gpu_weights_mib","kv_cache_mib")})' 2>/dev/null || { cat "$OUT/bench-$b.json" "$OUT/bench-$b.err" | tail -5; }
done
kill %1 2>/dev/null; head -2 "$OUT/dmon.txt"; grep -v "^#" "$OUT/dmon.txt" | tail -6
