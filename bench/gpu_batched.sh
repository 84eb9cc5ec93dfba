#!/usr/bin/env bash
# gpu_batched.sh - batched decode on the GPU machine: `edgerunner bench --parallel B` beside
# llama.cpp's `llama-batched-bench` on the same files, one run.
#
# Usage (on the GPU machine): bench/gpu_batched.sh EDGERUNNER LLAMA_BATCHED_BENCH FILE...
#   BS="1 8 32 64"   batch sizes; NPP=128, NTG=128 (prompt and generated tokens a sequence)
# llama-batched-bench comes from `bench/gpu_compare.sh prepare` then `build` (here; carry
# .gpu-carry/lbb/llama-batched-bench.xz, xz -dc it there). Files: bench/make_random_qwen3.py.
# Both sides report S_TG, B * NTG over the time in their decode calls, with an F16 KV cache
# and flash attention; ours prints a row only after the first and last sequence's greedy
# ids equal their ids alone (batch invariance), else FAIL.
set -uo pipefail
[ $# -ge 3 ] || { sed -n 2,12p "$0"; exit 1; }
ER=$1 LBB=$2
shift 2
BS=${BS:-1 8 32 64} NPP=${NPP:-128} NTG=${NTG:-128}
largest=0
for b in $BS; do [ "$b" -gt "$largest" ] && largest=$b; done
for f in "$@"; do
    echo "## $(basename "$f")"
    for b in $BS; do
        printf 'EdgeRunner-C B=%s: ' "$b"
        "$ER" bench -m "$f" --backend cuda --parallel "$b" -npp "$NPP" -ntg "$NTG" 2>&1 | grep -E '^\| +[0-9]|FAIL' || echo "(no result)"
    done
    # one sequence's cells per B * (NPP + NTG), rounded up (a unified cache is not asked for)
    "$LBB" -m "$f" -ngl 99 -fa on -c $(( largest * (NPP + NTG + 16) )) -b 2048 -ub 512 -npp "$NPP" -ntg "$NTG" \
        -npl "$(echo $BS | tr ' ' ',')" 2>&1 | grep -E '^\|'
done
