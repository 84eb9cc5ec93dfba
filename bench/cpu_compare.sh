#!/usr/bin/env bash
# cpu_compare.sh - EdgeRunner vs llama.cpp on the CPU, side by side in one run.
#
# Builds (once, cached in ~/.cache/edgerunner/llama-bench-<version>) llama.cpp's
# llama-bench from the llama-cpp-python sdist (the same llama.cpp the oracle tests use),
# then alternates `edgerunner bench` and `llama-bench` on the same GGUF, same thread
# counts, REPS times each, and prints the medians and the ratios (machines are shared
# and noisy: only a same-run ratio means anything).
#
# Usage: bench/cpu_compare.sh MODEL.gguf [THREADS="1 2"] [REPS=3]
#   env: ER=build/edgerunner  TG=32  PP="64 512"
#        LLAMA_ISA=native (default: llama.cpp's kernels for this CPU, AVX-512 where present)
#        LLAMA_ISA=avx2   (llama.cpp restricted to AVX2/FMA/F16C, the ISA EdgeRunner uses)
#   bench/cpu_compare.sh --build-only     just build llama-bench
set -euo pipefail

VERSION=0.3.36
cache="${XDG_CACHE_HOME:-$HOME/.cache}/edgerunner"
LLAMA_ISA=${LLAMA_ISA:-native}
src_dir="$cache/llama-bench-$VERSION"
case "$LLAMA_ISA" in
    native) dir="$src_dir"; isa_flags="-DGGML_NATIVE=ON" ;;
    avx2) dir="$src_dir-avx2"
          isa_flags="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON" ;;
    *) echo "LLAMA_ISA must be native or avx2" >&2; exit 2 ;;
esac
LB="$dir/build/bin/llama-bench"

build_llama_bench() {
    [ -x "$LB" ] && return 0
    mkdir -p "$src_dir" "$dir"
    ( cd "$src_dir"
      if [ ! -d src ]; then
          python3 -m pip download --quiet --no-binary llama-cpp-python --no-deps "llama-cpp-python==$VERSION" -d dl >&2
          mkdir -p src && tar -xzf dl/llama_cpp_python-$VERSION.tar.gz -C src --strip-components=1
      fi )
    ( cd "$dir"
      # native: llama.cpp tuned for this CPU, as a user building it would get
      cmake -S "$src_dir/src/vendor/llama.cpp" -B build -DCMAKE_BUILD_TYPE=Release $isa_flags \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
            -DLLAMA_BUILD_TOOLS=ON -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF >&2
      cmake --build build --target llama-bench -j"$(nproc)" >&2 )
}

if [ "${1:-}" = "--build-only" ]; then
    build_llama_bench
    echo "$LB"
    exit 0
fi

MODEL=${1:?usage: cpu_compare.sh MODEL.gguf [THREADS] [REPS]}
THREADS=${2:-"1 2"}
REPS=${3:-3}
ER=${ER:-build/edgerunner}
TG=${TG:-32}
PP=${PP:-"64 512"}
build_llama_bench

med() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for t in $THREADS; do
    for r in $(seq "$REPS"); do
        # ours: decode tg (from a 1-token prompt, as llama-bench's tg), then each pp
        "$ER" bench -m "$MODEL" -t "$t" -n "$TG" -pp 0 --runs 3 --warmup 1 --json |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["decode_tok_s"]["median"])' >> "$tmp/er-tg-$t"
        for p in $PP; do
            "$ER" bench -m "$MODEL" -t "$t" -n 1 -pp "$p" --runs 3 --warmup 1 --json > "$tmp/j"
            python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["prefill_tok_s"])' "$tmp/j" >> "$tmp/er-pp$p-$t"
            python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rss_peak_mib"])' "$tmp/j" >> "$tmp/er-rss-$t"
        done
        # llama.cpp: the same tests; no extra buffer types (AMX repacking), as the oracle tests
        pargs=$(echo $PP | tr ' ' ',')
        # --repack 0: the repacked (AMX/extra buffer) path of this llama.cpp segfaults on this
        # CPU, as in the oracle tests (use_extra_bufts=False); the plain CPU kernels run.
        "$LB" -m "$MODEL" -t "$t" -p "$pargs" -n "$TG" -r 3 --repack 0 -o csv > "$tmp/lb.csv" 2>/dev/null
        python3 - "$tmp/lb.csv" "$tmp" "$t" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for r in rows:
    np_, ng = int(r["n_prompt"]), int(r["n_gen"])
    name = f"lb-tg-{sys.argv[3]}" if ng else f"lb-pp{np_}-{sys.argv[3]}"
    open(f"{sys.argv[2]}/{name}", "a").write(r["avg_ts"] + "\n")
PY
    done
done
printf '%-8s %-8s %12s %12s %7s\n' threads test edgerunner llama.cpp ratio
for t in $THREADS; do
    for test in tg $(for p in $PP; do echo "pp$p"; done); do
        e=$(med < "$tmp/er-$test-$t"); l=$(med < "$tmp/lb-$test-$t")
        printf '%-8s %-8s %12.2f %12.2f %7.2f\n' "$t" "$test$([ $test = tg ] && echo $TG)" "$e" "$l" "$(echo "$e / $l" | bc -l)"
    done
    echo "peak RSS (edgerunner, -t $t): $(med < "$tmp/er-rss-$t") MiB"
done
