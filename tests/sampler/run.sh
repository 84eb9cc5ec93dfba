#!/usr/bin/env bash
# run.sh BUILD_DIR - the sampler against llama.cpp and the examples under valgrind, from
# the repository root:  tests/sampler/run.sh build
#   1. penalties (repetition, frequency, presence) vs llama.cpp's sampler (llama-cpp-python)
#   2. build/examples/stream under valgrind (memcheck, leak check) on stories260K
#   3. the same seed gives the same text: twice, and with 1 and 2 threads (CLI)
# Ends with "N passed, M failed"; exit status 0 iff nothing failed.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
B=$1
here=$(cd "$(dirname "$0")" && pwd)
STORIES=tests/data/stories260K.gguf
n_pass=0
n_fail=0
pass() { n_pass=$((n_pass + 1)); echo "ok   $1"; }
fail() { n_fail=$((n_fail + 1)); echo "FAIL $1: $2"; }

venv=$("$here/../oracle/venv.sh")
if out=$("$venv/bin/python" "$here/test_penalties.py" "$B" 2>&1); then
    pass "penalties agree with llama.cpp ($(echo "$out" | grep 'bit for bit'))"
else
    fail "penalties vs llama.cpp" "$(echo "$out" | grep -E 'FAIL|Error' | head -5)"
fi

if command -v valgrind >/dev/null; then
    for ex in "$B/examples/stream -m $STORIES -n 16 --seed 7" "$B/examples/chat -m $STORIES -n 8 --seed 3"; do
        if log=$(echo "hello" | valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect,possible \
                 --suppressions="$here/valgrind.supp" $ex 2>&1 >/dev/null); then
            pass "valgrind clean: ${ex%% -m*}"
        else
            fail "valgrind ${ex%% -m*}" "$(echo "$log" | grep -E 'ERROR SUMMARY|definitely|Invalid' | head -3)"
        fi
    done
else
    echo "skip valgrind (not installed)"
fi

args=(run -m "$STORIES" -p "Once upon a time" -n 48 --seed 1234 --temp 0.9 --top-k 20 --top-p 0.95 --min-p 0.02
      --repeat-penalty 1.1 --repeat-last-n 32 --presence-penalty 0.1 --frequency-penalty 0.1)
a=$("$B/edgerunner" "${args[@]}" -t 1 2>&1)
b=$("$B/edgerunner" "${args[@]}" -t 1 2>&1)
c=$("$B/edgerunner" "${args[@]}" -t 2 2>&1)
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ]; then
    pass "same seed, same text across runs and thread counts"
else
    fail "seeded run" "'$a' / '$b' / '$c'"
fi
d=$("$B/edgerunner" "${args[@]}" --seed 99 -t 1 2>&1)
if [ "$d" != "$a" ]; then pass "another seed, another text"; else fail "seed" "--seed 99 gave the same text"; fi

echo "$n_pass passed, $n_fail failed"
[ "$n_fail" -eq 0 ]
