#!/usr/bin/env bash
# gpu_depth.sh - decode speed after a context of N tokens on the GPU machine: EdgeRunner-C
# against llama.cpp (`llama-bench -fa 1 -p 0 -n 128 -d N`, F16 KV cache on both sides),
# same files, one run.
#
# Ours: `edgerunner run --backend cuda --temp 0 --perf` after a prompt of N ids, with
# -n 1 and with -n 1 + STEPS; decode tok/s = STEPS / the difference of the two --perf
# times (the prompt's pass cancels; the load is not in them). Each VARIANTS entry
# (LABEL or LABEL:VAR=value,VAR=value) is a column, run with those environment
# variables; the default compares the split attention (the default from position
# CUDA_SPLIT_MIN on) with the cluster kernel alone (EDGERUNNER_CUDA_SPLIT_MIN=1000000000).
#
# Not `edgerunner bench -d`: its guard runs the scalar CPU reference over the whole
# context, which at 16k tokens of Qwen3-0.6B takes minutes on the GPU machine's 16 cores.
# The split attention's numbers are checked instead by `unit_tests cuda` (against
# double-precision host attention up to 16,384 positions) and by bench/check_cuda.py with
# EDGERUNNER_CUDA_SPLIT_MIN=0 (every decode step split, against the CPU reference).
#
# Usage (on the GPU machine): LB=path/to/llama-bench DEPTHS="0 4096 16384" STEPS=512 \
#     bench/gpu_depth.sh build/edgerunner FILE.gguf ...      (a markdown table on stdout)
# llama-bench loads only files with a tokenizer (make_random_qwen3.py --vocab); where it
# gives no figure the column says "?" and stderr says why.
set -uo pipefail
er=$1
shift
lb_err=$(mktemp) # llama-bench's stderr, for the reason when it gives no figure
trap 'rm -f "$lb_err"' EXIT
DEPTHS=${DEPTHS:-0 4096 16384}
STEPS=${STEPS:-512}
LB=${LB:-}
VARIANTS=${VARIANTS:-split cluster:EDGERUNNER_CUDA_SPLIT_MIN=1000000000}

# milliseconds of the prompt's pass and n greedy tokens: file, prompt of `depth` ids
# (small ids: a 32k-token prompt stays under the 128 KiB limit of one argument), n, then
# the environment (VAR=value,VAR=value or empty)
gen_ms() {
    local f=$1 depth=$2 n=$3 envs=$4 ids
    ids=$(python3 -c "import sys; d = int(sys.argv[1]); print(','.join(str(10 + i % 90) for i in range(max(d, 1))))" "$depth")
    # shellcheck disable=SC2086
    env ${envs//,/ } "$er" run -m "$f" --backend "${BACKEND:-cuda}" --temp 0 --ignore-eos --ids --perf \
        -c $((depth + n + 8)) --prompt-ids "$ids" -n "$n" 2>&1 > /dev/null |
        awk '/^perf:/ {print $(NF - 1); ok = 1} END {if (!ok) print "FAIL"}'
}

ours_tps() { # file depth envs
    local a b
    a=$(gen_ms "$1" "$2" 1 "$3")
    b=$(gen_ms "$1" "$2" $((STEPS + 1)) "$3")
    if [ "$a" = FAIL ] || [ "$b" = FAIL ]; then echo FAIL; return; fi
    python3 -c "import sys; print(f'{1e3 * int(sys.argv[3]) / (float(sys.argv[2]) - float(sys.argv[1])):.0f}')" "$a" "$b" "$STEPS"
}

head="| model | depth | llama.cpp tg128"
sep="|---|---|---"
for v in $VARIANTS; do
    head="$head | ours (${v%%:*})"
    sep="$sep|---"
done
echo "$head | first / llama.cpp |"
echo "$sep|---|"
for f in "$@"; do
    b=$(basename "$f" .gguf)
    for d in $DEPTHS; do
        lc="?"
        if [ -n "$LB" ]; then
            lc=$("$LB" -m "$f" -ngl 99 -fa 1 -p 0 -n 128 -d "$d" -r 3 -o json 2> "$lb_err" |
                python3 -c "import json, sys; r = json.load(sys.stdin); print(f'{r[0][\"avg_ts\"]:.0f}')" 2> /dev/null || echo "?")
            # why there is no figure (a file without the tokenizer, a missing library), on stderr
            [ "$lc" = "?" ] && echo "gpu_depth.sh: llama-bench gave no figure: $(grep -i error "$lb_err" | tail -1)" >&2
        fi
        row="| $b | $d | $lc"
        first=""
        for v in $VARIANTS; do
            envs=""
            [[ $v == *:* ]] && envs=${v#*:}
            t=$(ours_tps "$f" "$d" "$envs")
            row="$row | $t"
            [ -z "$first" ] && first=$t
        done
        ratio=$(python3 -c "import sys
try: print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}x')
except Exception: print('')" "$first" "$lc")
        echo "$row | $ratio |"
    done
done
