#!/usr/bin/env bash
# serve_compare.sh EDGERUNNER LLAMA_SERVER MODEL [SERVE FLAGS...] - the server level of
# issue 21: `edgerunner serve --parallel N` and llama.cpp's `llama-server -np N` (continuous
# batching) on the same GGUF file, one after the other, each driven by bench/serve_compare.py
# (S concurrent streamed greedy completions of N_GEN tokens, S in STREAMS): aggregate
# tokens/s and the median time to first token. Both listen on 127.0.0.1 only and are
# stopped here. On the GPU machine: BACKEND=cuda (default); llama-server and the shared
# libraries our server links come from `bench/gpu_compare.sh prepare` + `build` (carry
# .gpu-carry/ls; there: xz -dc llama-server.xz, tar -xJf serverlibs.tar.xz -C /tmp,
# LD_LIBRARY_PATH=/tmp/serverlibs:...). LLAMA_SERVER "-" times ours alone. Extra flags go
# to `edgerunner serve`.
#   STREAMS="1 8 32 64"  N_GEN=128  CTX=512 (positions per slot on both sides)
set -uo pipefail
[ $# -ge 3 ] || { sed -n 2,12p "$0"; exit 1; }
ER=$1 LS=$2 MODEL=$3
shift 3
STREAMS=${STREAMS:-1 8 32 64} N_GEN=${N_GEN:-128} CTX=${CTX:-512} BACKEND=${BACKEND:-cuda}
N=0
for s in $STREAMS; do [ "$s" -gt "$N" ] && N=$s; done
PORT=${PORT:-$((20000 + RANDOM % 20000))}
LOG=$(mktemp -d)
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$LOG"' EXIT

wait_up() { # the server answers /health within 300 s, else its log and exit 1
    for _ in $(seq 3000); do
        python3 -c "import urllib.request, sys; urllib.request.urlopen('http://127.0.0.1:$PORT/health', timeout=1)" \
            2>/dev/null && return 0
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.1
    done
    tail -20 "$1"; exit 1
}

echo "| server | streams | tok/s aggregate | TTFT ms (median) | tokens |"
echo "|---|---|---|---|---|"
"$ER" serve -m "$MODEL" --backend "$BACKEND" --host 127.0.0.1 --port "$PORT" --parallel "$N" -c "$CTX" "$@" \
    2> "$LOG/ours.log" &
PID=$!
wait_up "$LOG/ours.log"
python3 bench/serve_compare.py "http://127.0.0.1:$PORT" "EdgeRunner-C serve --parallel $N" "$STREAMS" "$N_GEN"
kill "$PID"; wait "$PID" 2>/dev/null
if [ "$LS" != "-" ]; then
    # llama-server's -c is the whole cache, shared out to its -np slots
    "$LS" -m "$MODEL" -ngl 99 -fa on --host 127.0.0.1 --port "$PORT" -np "$N" -c $((N * CTX)) > "$LOG/peer.log" 2>&1 &
    PID=$!
    wait_up "$LOG/peer.log"
    python3 bench/serve_compare.py "http://127.0.0.1:$PORT" "llama-server -np $N" "$STREAMS" "$N_GEN"
fi
