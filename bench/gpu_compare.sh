#!/usr/bin/env bash
# gpu_compare.sh - EdgeRunner vs llama.cpp (CUDA) on the GPU machine, same files, one run.
#
# The GPU machine has no network, so the work is split in two:
#   bench/gpu_compare.sh prepare   (here) copies the llama.cpp sources of the
#                                  llama-cpp-python sdist (what the oracles use), trimmed
#                                  to what a CUDA build needs, and a Qwen3 vocabulary GGUF
#                                  into .gpu-carry/ (ignored by git; carry it to the device)
#   bench/gpu_compare.sh build     (here, optional) builds a static llama-bench into
#                                  .gpu-carry/bin (llama-batched-bench into .gpu-carry/lbb,
#                                  llama-server into .gpu-carry/ls), so the GPU machine
#                                  need not compile them
#   bench/gpu_compare.sh run       (on the GPU machine) builds llama-bench with CUDA for
#                                  sm_90 unless .gpu-carry/bin has it, makes random Qwen3-0.6B Q8_0 and Q4_0 files with
#                                  that vocabulary (llama.cpp refuses files without one),
#                                  runs `llama-bench -ngl 99 -fa 1 -p 512 -n 128` and
#                                  `edgerunner bench --backend cuda` on each and prints one
#                                  table. SIZE="0.6b 1.7b 4b 8b" (one or more of
#                                  make_random_qwen3.py's sizes), TYPES, MODELS=list-file
#                                  (files made earlier), N (our -n; by default 128, 64 at
#                                  4B, 32 from 8B: the CPU reference checks every token).
#                                  BASELINE=path/to/edgerunner also times an earlier build
#                                  in the same run (the row "before"). DEPTHS="4096 16384"
#                                  appends decode at those context depths for every file
#                                  (bench/gpu_depth.sh, STEPS tokens, 256 by default).
# Device call: carry [".gpu-carry", "build/edgerunner", ".whl"] (the gguf wheel, see gpu.sh),
# or with a prebuilt llama-bench [".gpu-carry/bin/llama-bench.xz", ".gpu-carry/qwen3-vocab.gguf", ...].
set -euo pipefail
VERSION=0.3.36
CARRY=.gpu-carry

prepare() {
    mkdir -p "$CARRY"
    grep -qx "/$CARRY/" .git/info/exclude 2>/dev/null || echo "/$CARRY/" >> .git/info/exclude
    local dl
    dl=$(mktemp -d)
    python3 -m pip download --quiet --no-binary llama-cpp-python --no-deps "llama-cpp-python==$VERSION" -d "$dl"
    tar -xzf "$dl"/llama_cpp_python-$VERSION.tar.gz -C "$dl"
    rm -rf "$CARRY/llama.cpp"
    cp -r "$dl"/llama_cpp_python-$VERSION/vendor/llama.cpp "$CARRY/llama.cpp"
    # what a CUDA build of llama-bench does not need (the carried tree must stay < 64 MiB)
    local l="$CARRY/llama.cpp"
    mkdir -p "$dl/keep" && cp "$l/scripts/ui-assets.cmake" "$dl/keep/" # llama-server's UI step
    rm -rf "$l"/{models,docs,media,examples,gguf-py,tests,.devops,scripts,grammars,prompts,benches,conversion}
    mkdir -p "$l/scripts" && cp "$dl/keep/ui-assets.cmake" "$l/scripts/"
    for b in blas cann et hexagon hip metal musa opencl openvino rpc sycl virtgpu vulkan webgpu zdnn zendnn; do
        rm -rf "$l/ggml/src/ggml-$b"
    done
    find "$l/tools" -mindepth 1 -maxdepth 1 ! -name llama-bench ! -name batched-bench ! -name mtmd ! -name ui \
        ! -name server ! -name CMakeLists.txt -exec rm -rf {} +
    printf 'llama_add_compile_flags()\n%s\n' "$(printf 'add_subdirectory(%s)\n' llama-bench batched-bench mtmd ui server)" \
        > "$l/tools/CMakeLists.txt"
    local vocab
    vocab=$(ls "${XDG_CACHE_HOME:-$HOME/.cache}"/edgerunner/tokenizer-*/qwen3.gguf 2>/dev/null | head -1)
    [ -n "$vocab" ] || { echo "no Qwen3 vocabulary GGUF: run tests/tokenizer/run.sh build first" >&2; exit 1; }
    cp "$vocab" "$CARRY/qwen3-vocab.gguf"
    rm -rf "$dl"
    du -sh "$CARRY"
}

# Builds llama-bench here instead (static, CUDA for sm_90; about 90 minutes on 2 cores),
# into $CARRY/bin, so that the GPU machine's time is not spent compiling it.
build() {
    local b=${XDG_CACHE_HOME:-$HOME/.cache}/edgerunner/llama-cuda-build-$VERSION
    cmake -S "$CARRY/llama.cpp" -B "$b" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF > "$b.cmake.log"
    cmake --build "$b" --target llama-bench llama-batched-bench llama-server -j"$(nproc)" > "$b.build.log"
    mkdir -p "$CARRY/bin" "$CARRY/lbb"
    cp "$b/bin/llama-bench" "$CARRY/bin/" && strip "$CARRY/bin/llama-bench"
    xz -T0 -6 -f "$CARRY/bin/llama-bench" # 70 MB -> 41 MB: under the device's carry limit
    # llama-batched-bench (bench/gpu_batched.sh) apart: both would pass the 64 MiB limit
    cp "$b/bin/llama-batched-bench" "$CARRY/lbb/" && strip "$CARRY/lbb/llama-batched-bench"
    xz -T0 -6 -f "$CARRY/lbb/llama-batched-bench"
    # llama-server (bench/serve_compare.sh) apart too, with the shared libraries our
    # server links (libmicrohttpd, jansson and GnuTLS's chain) for a machine without them
    mkdir -p "$CARRY/ls"
    cp "$b/bin/llama-server" "$CARRY/ls/" && strip "$CARRY/ls/llama-server"
    xz -T0 -6 -f "$CARRY/ls/llama-server"
    local libs
    libs=$(mktemp -d)
    mkdir "$libs/serverlibs"
    ldd build/edgerunner | awk '/libmicrohttpd|libjansson|libgnutls|libp11|libidn2|libunistring|libtasn1|libnettle|libhogweed|libgmp|libffi/ {print $3}' |
        xargs -I{} cp -L {} "$libs/serverlibs/"
    tar -cJf "$CARRY/ls/serverlibs.tar.xz" -C "$libs" serverlibs
    rm -rf "$libs"
    du -sh "$CARRY/bin/llama-bench.xz" "$CARRY/lbb/llama-batched-bench.xz" "$CARRY/ls/"*
}

# With PROFILE set, the step's kernel table from a bench log, to stderr. A run that failed
# has none: that must not stop the script (set -e) before its FAIL row is printed.
show_profile() {
    if [ -n "${PROFILE:-}" ]; then
        grep -A12 "step at" "$1" >&2 || true
    fi
}

run() {
    OUT=${OUT:-gpu-out}
    mkdir -p "$OUT"
    if [ -d .whl ]; then
        python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
    fi
    local lb=$CARRY/bin/llama-bench
    if [ ! -x "$lb" ] && [ -f "$lb.xz" ]; then # carried compressed (the carry limit is 64 MiB)
        xz -dc "$lb.xz" > /tmp/llama-bench && chmod +x /tmp/llama-bench && lb=/tmp/llama-bench
    fi
    # a llama.cpp built here links NCCL and cuBLAS; the GPU machine may have them only in
    # Python packages (nvidia-nccl-cu13, nvidia-cublas): add the folders of whatever is missing
    if [ -x "$lb" ]; then
        local site lib found
        site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
        for lib in $(ldd "$lb" | awk '/not found/ {print $1}'); do
            found=$(find "$site" -name "$lib" 2>/dev/null | head -1)
            [ -n "$found" ] && export LD_LIBRARY_PATH=$(dirname "$found")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        done
    fi
    if [ ! -x "$lb" ]; then
        cmake -S "$CARRY/llama.cpp" -B /tmp/lcpp -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
            -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
            -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF > "$OUT/cmake.log" 2>&1
        cmake --build /tmp/lcpp --target llama-bench -j"$(nproc)" > "$OUT/build-llamacpp.log" 2>&1 || {
            tail -20 "$OUT/build-llamacpp.log"; exit 1; }
        lb=/tmp/lcpp/bin/llama-bench
    fi
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
    # MODELS: a file listing GGUF paths made earlier (bench/make_random_qwen3.py), else
    # random Qwen3 files of SIZE (0.6b) in TYPES are made here
    if [ -n "${MODELS:-}" ]; then
        cp "$MODELS" "$OUT/models.txt"
    else
        : > "$OUT/models.txt"
        for size in ${SIZE:-0.6b}; do
            python3 bench/make_random_qwen3.py /tmp/cmp --size "$size" --types "${TYPES:-Q8_0,Q4_0}" \
                --vocab "$CARRY/qwen3-vocab.gguf" --edgerunner build/edgerunner >> "$OUT/models.txt"
        done
    fi
    printf '| model | engine | decode tg128 tok/s | prefill pp512 tok/s | TTFT ms | GPU MiB (weights + KV) | of copy |\n|---|---|---|---|---|---|---|\n' | tee "$OUT/compare.md"
    local n
    while read -r f; do
        b=$(basename "$f" .gguf)
        "$lb" -m "$f" -ngl 99 -fa 1 -p 512 -n 128 -o json > "$OUT/llamacpp-$b.json" 2> "$OUT/llamacpp-$b.err" || true
        # N: our greedy tokens per run; fewer for larger files (by name: qwen3-SIZE-...),
        # where the CPU reference that checks them cost up to a second a token on the GPU
        # machine's 16 cores (before 6703697 and 4114cdd, which made its decode 2.2-3.6x
        # faster on a 2-core VM: not yet measured there, so the counts stay)
        case "$b" in
        *-4b-*) n=${N:-64} ;;
        *-8b-* | *-14b-* | *-32b-*) n=${N:-32} ;;
        *) n=${N:-128} ;;
        esac
        build/edgerunner bench -m "$f" --backend cuda -n "$n" -pp 512 --runs 5 --json ${PROFILE:+--profile} > "$OUT/ours-$b.json" 2> "$OUT/ours-$b.err" ||
            true # a refused run is the table's FAIL row, not the end of the table
        show_profile "$OUT/ours-$b.err"
        if [ -n "${BASELINE:-}" ]; then # an earlier build, timed in the same run (the row "before")
            "$BASELINE" bench -m "$f" --backend cuda -n "$n" -pp 512 --runs 5 --json ${PROFILE:+--profile} > "$OUT/before-$b.json" 2> "$OUT/before-$b.err" || true
            show_profile "$OUT/before-$b.err"
        fi
        python3 - "$b" "$OUT/llamacpp-$b.json" "$OUT/ours-$b.json" ${BASELINE:+"$OUT/before-$b.json"} <<'PY' | tee -a "$OUT/compare.md"
import json, sys
name, lj, oj = sys.argv[1:4]
tg = pp = None
try:
    for r in json.load(open(lj)):
        if r.get("n_gen") == 128 and r.get("n_prompt") == 0: tg = r["avg_ts"]
        if r.get("n_prompt") == 512 and r.get("n_gen") == 0: pp = r["avg_ts"]
except Exception:
    pass
f = lambda v: f"{v:.0f}" if v else "?"
print(f"| {name} | llama.cpp CUDA (-fa 1) | {f(tg)} | {f(pp)} | | | |")
for label, path in [("EdgeRunner-C (cuda)", oj)] + [("EdgeRunner-C (before)", p) for p in sys.argv[4:]]:
    try:
        o = json.load(open(path))
        d, p = o["decode_tok_s"]["median"], o["prefill_tok_s"]
        rd = f" ({d / tg:.2f}x)" if tg else ""
        rp = f" ({p / pp:.2f}x)" if pp else ""
        mem = f'{o["gpu_used_mib"]:.0f} ({o["gpu_weights_mib"]:.0f} + {o["kv_cache_mib"]:.0f})'
        frac = f'{100 * o["bandwidth_fraction"]:.1f}%' if "bandwidth_fraction" in o else ""
        print(f'| {name} | {label} | {d:.0f}{rd} | {p:.0f}{rp} | {o["ttft_ms"]:.3f} | {mem} | {frac} |')
    except Exception:
        print(f"| {name} | {label} | FAIL (see {path}) | | | | |")
PY
    done < "$OUT/models.txt"
    if [ -n "${DEPTHS:-}" ]; then # decode after a context, every file (gpu_depth.sh says how)
        echo | tee -a "$OUT/compare.md"
        # shellcheck disable=SC2046
        LB=$lb DEPTHS=$DEPTHS STEPS=${STEPS:-256} VARIANTS=split bench/gpu_depth.sh build/edgerunner $(cat "$OUT/models.txt") |
            tee -a "$OUT/compare.md"
    fi
}

case "${1:-}" in
prepare) prepare ;;
build) build ;;
run) run ;;
*) echo "usage: bench/gpu_compare.sh prepare|build|run" >&2; exit 2 ;;
esac
