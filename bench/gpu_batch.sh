#!/usr/bin/env bash
# gpu_batch.sh - the CUDA batch path on the GPU machine in one call: its checks (the GEMM
# suite against doubles, the batch suite against the CPU reference, check_cuda.py), the
# four layer matrices through the batch GEMM per layer, then bench/gpu_batched.sh against
# llama-batched-bench on random Qwen3 Q8_0 files. The fifth session's calls, kept.
#
# Usage (on the GPU machine, from the repository root):
#   bench/gpu_batch.sh ER_DIR LLAMA_BATCHED_BENCH VOCAB_GGUF
#     ER_DIR: edgerunner (a SERVER=0 build: that machine has no libmicrohttpd), unit_tests
#     and gpu_matvec_bench (its build line is in bench/gpu_matvec_bench.c)
#   SIZES="0.6b 8b"  BS="1 8 32 64"  T_LAYER="8 64"  ENV_B="EDGERUNNER_CUDA_MMQ=0"
#   (a variant of ours timed beside the default at B = 8 and 64; empty: none)
# Carry .whl (the gguf wheel) for bench/make_random_qwen3.py. Logs go to $OUT (gpu-out).
# The checks run before any timing; a failed GEMM suite stops the script there.
set -uo pipefail
[ $# -eq 3 ] || { sed -n 2,15p "$0"; exit 2; }
ER_DIR=$1 LBB=$2 VOCAB=$3
OUT=${OUT:-gpu-out} SIZES=${SIZES:-0.6b 8b} BS=${BS:-1 8 32 64} T_LAYER=${T_LAYER:-8 64}
ENV_B=${ENV_B-EDGERUNNER_CUDA_MMQ=0}
mkdir -p "$OUT"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
t0=$(date +%s)
models=/tmp/gpu-batch-models
files=()
for s in $SIZES; do
    python3 bench/make_random_qwen3.py "$models/$s" --size "$s" --types Q8_0 --vocab "$VOCAB" \
        --edgerunner "$ER_DIR/edgerunner" > "$OUT/model-$s.txt" 2> "$OUT/model-$s.err" &
done
# the suites beside the files' writing (CPU-bound); timings only after both
"$ER_DIR/unit_tests" cuda_gemm > "$OUT/unit-cuda-gemm.txt" 2>&1 &
"$ER_DIR/unit_tests" batch > "$OUT/unit-batch.txt" 2>&1
wait
for s in $SIZES; do
    [ -s "$OUT/model-$s.txt" ] || { echo "no $s file: $(tail -1 "$OUT/model-$s.err")"; exit 1; }
    files+=("$(head -1 "$OUT/model-$s.txt")")
done
echo "files and suites ready at $(($(date +%s) - t0)) s"
tail -1 "$OUT/unit-batch.txt"
grep -E "FAIL|int8|checks" "$OUT/unit-cuda-gemm.txt" | tail -4
grep -q "^ok .*cuda_gemm" "$OUT/unit-cuda-gemm.txt" || { echo "cuda_gemm failed: nothing timed"; exit 1; }
python3 bench/check_cuda.py -ctk f16 -ctv f16 "$ER_DIR/edgerunner" "${files[0]}" 2>&1 | tail -1

# per layer: qkv + wo + gate_up + down of each size's shapes (n_embd n_ff q_dim kv_dim n_layer)
declare -A shape=([0.6b]="1024 3072 2048 1024 28" [1.7b]="2048 6144 2048 1024 28" [4b]="2560 9728 4096 1024 36"
                  [8b]="4096 12288 4096 1024 36")
for s in $SIZES; do
    [ -n "${shape[$s]:-}" ] || continue
    for T in $T_LAYER; do
        # shellcheck disable=SC2086
        echo "$s T=$T: $("$ER_DIR/gpu_matvec_bench" Q8_0 ${shape[$s]} "$T" 2>&1 | tail -1)"
    done
done

BS="$BS" bash bench/gpu_batched.sh "$ER_DIR/edgerunner" "$LBB" "${files[@]}"
if [ -n "$ENV_B" ]; then
    for f in "${files[@]}"; do
        for b in 8 64; do
            printf '%s %s B=%s: ' "$ENV_B" "$(basename "$f")" "$b"
            env "$ENV_B" "$ER_DIR/edgerunner" bench -m "$f" --backend cuda --parallel "$b" -npp 128 -ntg 128 2>&1 |
                grep -E '^\| +[0-9]|FAIL' || echo "(no result)"
        done
    done
fi
echo "done at $(($(date +%s) - t0)) s"
