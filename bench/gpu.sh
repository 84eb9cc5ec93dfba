#!/usr/bin/env bash
# The one GPU script: on the H200 machine, builds with CUDA for sm_90, makes the
# random-weight Qwen3-0.6B files, checks the CUDA backend against the CPU reference,
# then times each file with `edgerunner bench` (which itself refuses wrong tokens).
# Usage (through the device tool, with .whl carried: the gguf wheel):
#   bash bench/gpu.sh [TYPES=Q8_0,F16]
# Writes logs and JSON to $OUT (or ./gpu-out).
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
TYPES=${1:-Q8_0,F16}
models=/tmp/er-models
export PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv | tee "$OUT/gpu.txt"
make -j16 CUDA=1 all > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
grep -h "registers\|spill" build/src/backend/cuda/*.log | sort | uniq -c | sort -rn | head -5
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl &&
        export PYTHONPATH=/tmp/site
fi
python3 bench/make_random_qwen3.py "$models" --types "$TYPES" > "$OUT/models.txt" || exit 1
mapfile -t files < "$OUT/models.txt"

python3 bench/check_cuda.py build/edgerunner tests/data/stories260K.gguf "${files[@]}" 2>&1 | tee "$OUT/check.log"

for f in tests/data/stories260K.gguf "${files[@]}"; do
    b=$(basename "$f" .gguf)
    build/edgerunner bench -m "$f" --backend cuda -n 128 --runs 5 --json > "$OUT/bench-$b.json" 2> "$OUT/bench-$b.err"
    echo "== $b"; cat "$OUT/bench-$b.json" | python3 -c 'import json,sys; d=json.load(sys.stdin); print({k: d[k] for k in ("decode_tok_s","ttft_ms","prefill_tok_s","load_ms","rss_after_load_mib","gpu_used_mib","gpu_weights_mib","kv_cache_mib")})' 2>/dev/null || { cat "$OUT/bench-$b.json" "$OUT/bench-$b.err" | tail -5; }
done
