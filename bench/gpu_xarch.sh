#!/usr/bin/env bash
# Every architecture x every weight type on the GPU, against the CPU reference: each
# folder of bench/make_xarch_folders.py converted by `edgerunner convert` into F32, F16,
# BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, Q4_K_M and Q5_K_M, then
# bench/check_cuda.py on each (decode logits within 1e-4 with an F32 cache, prefill
# within 1e-2, 128 greedy ids identical) and, on F16, Q8_0 and Q4_K_M, with F16 and Q8_0
# caches (check_cuda.py's bounds). The architectures run side by side.
# Usage (device call; carry the folders, e.g. .gpu-carry/xarch, and build/edgerunner):
#   bash bench/gpu_xarch.sh build/edgerunner .gpu-carry/xarch
# Prints per architecture the count lines; logs in /tmp/xarch, summaries in $OUT/x-ARCH.txt.
set -u
EXE=$1 DIR=$2 OUT=${OUT:-gpu-out}
mkdir -p "$OUT" /tmp/xarch
one() {
    local a=$1 t kv
    mkdir -p /tmp/xarch/$a
    for t in F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K Q4_K_M Q5_K_M; do
        "$EXE" convert "$DIR/$a" /tmp/xarch/$a/$a-$t.gguf $t > /dev/null 2>> /tmp/xarch/$a.convert.err ||
            echo "FAIL convert $a $t"
    done
    python3 bench/check_cuda.py -ctk f32 -ctv f32 "$EXE" /tmp/xarch/$a/*.gguf > /tmp/xarch/$a.f32.txt 2>&1
    for kv in f16 q8_0; do
        python3 bench/check_cuda.py -ctk $kv -ctv $kv "$EXE" /tmp/xarch/$a/$a-{F16,Q8_0,Q4_K_M}.gguf > /tmp/xarch/$a.$kv.txt 2>&1
    done
    for kv in f32 f16 q8_0; do
        echo "$a, $kv cache: $(tail -1 /tmp/xarch/$a.$kv.txt)"
        grep -v "^PASS" /tmp/xarch/$a.$kv.txt | head -20
    done | tee "$OUT/x-$a.txt"
}
for a in $(ls "$DIR"); do one "$a" & done
wait
