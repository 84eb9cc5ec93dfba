#!/usr/bin/env bash
# gpu_ab.sh - several builds of edgerunner timed against each other on the GPU machine,
# in one call: random Qwen3-0.6B files of each type (with the Qwen3 vocabulary), then
# `edgerunner bench --backend cuda -n 128 --profile` of every binary on every file,
# alternating binaries, ROUNDS times. Prints one line per run: decode tok/s (median of
# 5; FAIL when the ids were wrong), prefill pp512 tok/s (median of 5) and the captured
# step's time; the kernel tables of the first round go to $OUT/ab-profiles.txt, the logs
# to /tmp/ab-logs (few files come back from the device).
# Usage (device call; carry the binaries, .whl and .gpu-carry/qwen3-vocab.gguf):
#   TYPES=Q8_0,Q4_0 ROUNDS=2 bash bench/gpu_ab.sh build/edgerunner .gpu-carry/bin/edgerunner-head ...
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT" /tmp/ab-logs
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
TYPES=${TYPES:-Q8_0,Q4_0}
models=/tmp/ab-models-$TYPES.txt # made once per machine
[ -f "$models" ] ||
    python3 bench/make_random_qwen3.py /tmp/ab --types "$TYPES" --vocab .gpu-carry/qwen3-vocab.gguf > "$models" || exit 1
for round in $(seq "${ROUNDS:-2}"); do
    while read -r f; do
        for exe in "$@"; do
            log="/tmp/ab-logs/$(basename "$exe")-$(basename "$f" .gguf)-$round"
            "$exe" bench -m "$f" --backend cuda -n 128 --runs 5 --json --profile > "$log.json" 2> "$log.err"
            tok=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.0f\tpp512 %.0f" % (d["decode_tok_s"]["median"], d["prefill_tok_s"]))' "$log.json" 2>/dev/null || echo FAIL)
            step=$(grep -o "graph [0-9.]* us" "$log.err" | head -1)
            printf '%s\t%s\t%s\t%s\n' "$(basename "$f" .gguf)" "$(basename "$exe")" "$tok" "$step"
            if [ "$round" = 1 ]; then
                { echo "== $(basename "$exe") $(basename "$f" .gguf)"; grep -A9 "step at" "$log.err"; } >> "$OUT/ab-profiles.txt"
            fi
        done
    done < "$models"
done
