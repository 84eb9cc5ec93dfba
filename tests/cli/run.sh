#!/usr/bin/env bash
# run.sh BINARY - end-to-end tests of the edgerunner command line, from the repo root:
#   tests/cli/run.sh build/edgerunner
#   tests/cli/run.sh build/debug/edgerunner     (ASan + UBSan build)
#
# The contract checked: on any error the binary exits with status 1 exactly (not a signal,
# not a sanitizer's exit code), prints exactly one line on stderr starting with
# "edgerunner:", and prints nothing on stdout. Hostile GGUF files are written with
# python3's struct into a temporary directory. Every invocation runs under `timeout 20`,
# so a hang is a failure. Prints one line per check, then "N passed, M failed".
set -u

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
    echo "usage: $0 BINARY (run from the repository root)" >&2
    exit 2
fi
BIN=$1
STORIES=tests/data/stories260K.gguf
if [ ! -f "$STORIES" ]; then
    echo "$0: $STORIES not found (run from the repository root)" >&2
    exit 2
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/er_cli.XXXXXX") || exit 2
trap 'rm -rf "$TMP"' EXIT

# Sanitizer reports must not look like an ordinary failure: ASan and UBSan exit with 1 by
# default, so give them their own codes; stderr is also searched for their reports.
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=0:exitcode=86:detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=0:print_stacktrace=1:exitcode=87
export LSAN_OPTIONS=exitcode=88

n_pass=0
n_fail=0
pass() {
    n_pass=$((n_pass + 1))
    echo "ok    $1"
}
fail() {
    n_fail=$((n_fail + 1))
    echo "FAIL  $1: $2"
    if [ -s "$TMP/err" ]; then
        head -c 2000 "$TMP/err" | cat -v | sed 's/^/      stderr: /'
    fi
}

# invoke ARGS...: runs the binary; sets rc, and leaves stdout/stderr in $TMP/out, $TMP/err
invoke() {
    timeout 20 "$BIN" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

# why the last invocation does not look like a clean run ("" when it does)
sanitizer_problem() {
    if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error|UndefinedBehaviorSanitizer' "$TMP/err"; then
        echo "sanitizer report"
    elif [ "$rc" -eq 124 ]; then
        echo "timed out (hang?)"
    elif [ "$rc" -gt 128 ]; then
        echo "killed by signal $((rc - 128))"
    fi
}

# expect_error NAME PATTERN [stdout-blank] -- ARGS...: exit 1, one stderr line
# "edgerunner: ..." matching PATTERN (grep -E, case-insensitive), empty stdout (or only
# whitespace with stdout-blank)
expect_error() {
    local name=$1 pattern=$2 stdout_mode=empty
    shift 2
    if [ "$1" = stdout-blank ]; then
        stdout_mode=blank
        shift
    fi
    shift # --
    invoke "$@"
    local problem
    problem=$(sanitizer_problem)
    local n_lines n_records
    n_lines=$(wc -l <"$TMP/err")
    n_records=$(awk 'END { print NR }' "$TMP/err")
    if [ -n "$problem" ]; then
        fail "$name" "$problem (exit $rc)"
    elif [ "$rc" -ne 1 ]; then
        fail "$name" "exit status $rc, expected 1"
    elif [ "$n_lines" -ne 1 ] || [ "$n_records" -ne 1 ]; then
        fail "$name" "$n_records lines on stderr, expected exactly 1"
    elif ! head -n 1 "$TMP/err" | grep -q '^edgerunner: '; then
        fail "$name" "stderr does not start with 'edgerunner: '"
    elif ! grep -qiE -- "$pattern" "$TMP/err"; then
        fail "$name" "message does not match /$pattern/"
    elif [ "$stdout_mode" = empty ] && [ -s "$TMP/out" ]; then
        fail "$name" "stdout not empty: $(head -c 200 "$TMP/out")"
    elif [ "$stdout_mode" = blank ] && grep -q '[^[:space:]]' "$TMP/out"; then
        fail "$name" "stdout not blank: $(head -c 200 "$TMP/out")"
    else
        pass "$name"
    fi
}

# expect_ok NAME -- ARGS...: exit 0, no sanitizer report
expect_ok() {
    local name=$1
    shift 2
    invoke "$@"
    local problem
    problem=$(sanitizer_problem)
    if [ -n "$problem" ]; then
        fail "$name" "$problem (exit $rc)"
    elif [ "$rc" -ne 0 ]; then
        fail "$name" "exit status $rc, expected 0"
    else
        pass "$name"
        return 0
    fi
    return 1
}

# ---- hostile files ------------------------------------------------------------------
# gen.py writes the files and prints a manifest: "FILE<TAB>PATTERN<TAB>KIND" where KIND is
# "gguf" (the file itself is malformed: info and run both fail) or "model" (a valid GGUF
# that is not a loadable model: info succeeds, run fails).
cat >"$TMP/gen.py" <<'PY'
import os, struct, sys

out, stories_path = sys.argv[1], sys.argv[2]
manifest = []

def u32(v): return struct.pack('<I', v)
def u64(v): return struct.pack('<Q', v)
def s(b):
    b = b.encode() if isinstance(b, str) else b
    return u64(len(b)) + b
def header(n_tensors, n_kv, version=3, magic=b'GGUF'):
    return magic + u32(version) + u64(n_tensors) + u64(n_kv)
def kv_u32(k, v): return s(k) + u32(4) + u32(v)
def kv_str(k, v): return s(k) + u32(8) + s(v)
def info(name, ne, typ, off):
    return s(name) + u32(len(ne)) + b''.join(u64(x) for x in ne) + u32(typ) + u64(off)
def pad(b, a=32): return b + b'\0' * (-len(b) % a)
def tensor_file(infos, data_len, kvs=(), align=32):
    b = header(len(infos), len(kvs)) + b''.join(kvs) + b''.join(infos)
    return pad(b, align) + bytes(data_len)
def add(name, data, pattern, kind='gguf'):
    path = os.path.join(out, name + '.gguf')
    with open(path, 'wb') as f:
        f.write(data)
    manifest.append((path, pattern, kind))

F32, Q8_0 = 0, 8
good = info('good', [8], F32, 0)
junk = bytes(64)

add('empty', b'', 'empty')
add('magic', b'GGUX' + u32(3) + u64(0) + u64(0), 'magic')
add('short', b'GG', 'offset')
add('version1', header(0, 0, version=1), 'version 1')
add('version4', header(0, 0, version=4), 'version 4')
add('version_max', header(0, 0, version=0xFFFFFFFF), 'version 4294967295')
add('n_kv_2e63', header(0, 1 << 63) + junk, 'metadata pairs')
add('n_kv_max', header(0, (1 << 64) - 1) + junk, 'metadata pairs')
add('n_tensors_2e63', header(1 << 63, 0) + junk, 'tensors')
add('n_tensors_max', header((1 << 64) - 1, 0) + junk, 'tensors')
add('key_len_huge', header(0, 1) + u64((1 << 64) - 1) + junk, 'length')
add('string_len_huge', header(0, 1) + s('k') + u32(8) + u64(1 << 62) + junk, 'length')
add('array_count_huge', header(0, 1) + s('k') + u32(9) + u32(10) + u64(1 << 62) + junk, 'claims')
add('string_array_count_huge', header(0, 1) + s('k') + u32(9) + u32(8) + u64((1 << 64) - 1) + junk, 'claims')
add('value_type_unknown', header(0, 1) + s('k') + u32(13) + junk, 'unknown value type')
add('element_type_unknown', header(0, 1) + s('k') + u32(9) + u32(77) + u64(1) + junk, 'unknown element type')
deep = s('deep') + u32(9) + (u32(9) + u64(1)) * 9 + u32(0) + u64(1) + b'\x01'
add('arrays_too_deep', header(0, 1) + deep, 'nested deeper')
add('n_dims_0', tensor_file([good, s('bad') + u32(0) + u32(F32) + u64(32)], 64), "'bad'.*dimensions")
add('n_dims_5', tensor_file([good, info('bad', [2] * 5, F32, 32)], 256), "'bad'.*dimensions")
add('dim_zero', tensor_file([good, info('bad', [4, 0], F32, 32)], 64), "'bad'.*dimension")
add('dims_overflow', tensor_file([good, info('bad', [1 << 32, 1 << 32], F32, 32)], 64), "'bad'.*dimension")
add('bytes_overflow', tensor_file([good, info('bad', [1 << 62], F32, 32)], 64), "'bad'")
add('type_99', tensor_file([good, info('bad', [8], 99, 32)], 64), "'bad'.*unknown type")
add('type_4', tensor_file([good, info('bad', [32], 4, 32)], 64), "'bad'.*unknown type")
add('q8_0_row_33', tensor_file([good, info('bad', [33, 2], Q8_0, 32)], 256), "'bad'.*block size")
add('offset_past_end', tensor_file([good, info('bad', [8], F32, 1 << 40)], 64), "'bad'.*outside the file")
add('offset_near_2e64', tensor_file([good, info('bad', [8], F32, (1 << 64) - 32)], 64), "'bad'.*outside the file")
add('size_past_end', tensor_file([good, info('bad', [8], F32, 32)], 63), "'bad'.*outside the file")
add('no_data_section', header(1, 0) + good, 'past the end')
add('offset_misaligned', tensor_file([good, info('bad', [4], F32, 48)], 128), "'bad'.*alignment")
add('alignment_u64', header(0, 1) + s('general.alignment') + u32(10) + u64(32), 'general.alignment.*type')
add('alignment_zero', header(0, 1) + kv_u32('general.alignment', 0), 'power of two')
add('alignment_48', header(0, 1) + kv_u32('general.alignment', 48), 'power of two')
add('duplicate_key', header(0, 2) + kv_u32('k.dup', 1) + kv_u32('k.dup', 2), "duplicate.*'k.dup'")
add('duplicate_tensor', tensor_file([good, info('good', [8], F32, 32)], 64), "duplicate.*'good'")
add('empty_key', header(0, 1) + kv_u32('', 1), 'empty key')
add('empty_tensor_name', tensor_file([good, info('', [8], F32, 32)], 64), 'empty name')
# names with control characters still give exactly one line on stderr
add('newline_in_key', header(0, 1) + s('bad\nkey\r\x1b[2J') + u32(13) + junk, 'unknown value type')
add('newline_in_tensor_name', tensor_file([info('x\ny', [8], 99, 0)], 32), 'unknown type')

# the real model, cut short: in the header, metadata, tensor infos, padding, data
stories = open(stories_path, 'rb').read()
def data_offset(b):
    """start of the data section (an independent minimal GGUF walk)"""
    pos = 24
    n_tensors, n_kv = struct.unpack_from('<QQ', b, 8)
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    def skip_string(p): return p + 8 + struct.unpack_from('<Q', b, p)[0]
    def skip_value(p, t):
        if t == 8: return skip_string(p)
        if t == 9:
            et, n = struct.unpack_from('<IQ', b, p)
            p += 12
            for _ in range(n): p = skip_value(p, et)
            return p
        return p + sizes[t]
    align = 32
    for _ in range(n_kv):
        k0 = pos
        pos = skip_string(pos)
        key = b[k0 + 8:pos]
        t = struct.unpack_from('<I', b, pos)[0]
        if key == b'general.alignment': align = struct.unpack_from('<I', b, pos + 4)[0]
        pos = skip_value(pos + 4, t)
    for _ in range(n_tensors):
        pos = skip_string(pos)
        nd = struct.unpack_from('<I', b, pos)[0]
        pos += 4 + 8 * nd + 4 + 8
    return (pos + align - 1) // align * align
doff = data_offset(stories)
for cut in (3, 24, 1000, doff - 1, doff + 100, len(stories) // 2, len(stories) - 1):
    pattern = 'outside the file' if cut > doff else 'offset|bytes left|remain|past the end'
    add('stories_cut_%d' % cut, stories[:cut], pattern)

# valid GGUF files that are not models we can load: `info` works, `run` fails
add('arch_mamba', header(0, 1) + kv_str('general.architecture', 'mamba'), "'mamba'.*supported.*llama", 'model')
arch = s('general.architecture') + u32(8) + s('llama')
assert stories.count(arch) == 1
add('stories_arch_mamba', stories.replace(arch, s('general.architecture') + u32(8) + s('mamba')),
    "'mamba'.*supported.*llama", 'model')
add('arch_with_newline', header(0, 1) + kv_str('general.architecture', 'mam\nba'), 'supported', 'model')
add('no_arch', header(0, 1) + kv_str('general.name', 'x'), 'general.architecture', 'model')
blocks = s('llama.block_count') + u32(4) + u32(5)
assert stories.count(blocks) == 1
add('stories_block_count_huge', stories.replace(blocks, s('llama.block_count') + u32(4) + u32(1000000)),
    'block_count', 'model')
add('stories_block_count_6', stories.replace(blocks, s('llama.block_count') + u32(4) + u32(6)),
    "blk\\.5.*not found", 'model')
embd = s('llama.embedding_length') + u32(4) + u32(64)
assert stories.count(embd) == 1
add('stories_embedding_length_65', stories.replace(embd, s('llama.embedding_length') + u32(4) + u32(65)),
    'shape|embedding|multiple|head', 'model')

for path, pattern, kind in manifest:
    print('%s\t%s\t%s' % (path, pattern, kind))
PY

if ! python3 "$TMP/gen.py" "$TMP" "$STORIES" >"$TMP/manifest"; then
    echo "FAIL  generating hostile files with python3"
    echo "0 passed, 1 failed"
    exit 1
fi

while IFS=$'\t' read -r file pattern kind; do
    base=$(basename "$file" .gguf)
    if [ "$kind" = gguf ]; then
        expect_error "info on hostile $base" "$pattern" -- info -m "$file"
    else
        expect_ok "info on $base (valid GGUF, not a loadable model)" -- info -m "$file"
    fi
    expect_error "run on hostile $base" "$pattern" -- run -m "$file" --prompt-ids 1 -n 4 --temp 0 --ids
done <"$TMP/manifest"

# ---- paths that are not GGUF files ----------------------------------------------------
mkdir -p "$TMP/a_directory.gguf"
expect_error "info on a nonexistent file" "no-such-file" -- info -m "$TMP/no-such-file.gguf"
expect_error "run on a nonexistent file" "no-such-file" -- run -m "$TMP/no-such-file.gguf" --prompt-ids 1 -n 4 --temp 0 --ids
expect_error "info on a directory" "a_directory" -- info -m "$TMP/a_directory.gguf"
expect_error "run on a directory" "a_directory" -- run -m "$TMP/a_directory.gguf" --prompt-ids 1 -n 4 --temp 0 --ids

# ---- usage errors ---------------------------------------------------------------------
expect_error "run without -m" "-m" -- run --prompt-ids 1 -n 4 --temp 0 --ids
expect_error "info without -m" "-m" -- info
expect_error "run without --prompt-ids" "prompt-ids" -- run -m "$STORIES" -n 4
expect_error "run with -m but no value" "needs a value" -- run --prompt-ids 1 -m
expect_error "run with a malformed id list" "prompt-ids" -- run -m "$STORIES" --prompt-ids 1,x,3 -n 2
expect_error "run with a negative id" "prompt-ids" -- run -m "$STORIES" --prompt-ids -5 -n 2
expect_error "run with an id past INT32_MAX" "prompt-ids" -- run -m "$STORIES" --prompt-ids 99999999999 -n 2
expect_error "run with an unknown option" "unknown option" -- run -m "$STORIES" --bogus --prompt-ids 1
expect_error "run with -n not a number" "-n" -- run -m "$STORIES" --prompt-ids 1 -n many

invoke
if [ "$rc" -eq 1 ] && [ -z "$(sanitizer_problem)" ]; then pass "no command: exit 1"; else fail "no command" "exit status $rc"; fi
invoke frobnicate
if [ "$rc" -eq 1 ] && [ -z "$(sanitizer_problem)" ] && head -n 1 "$TMP/err" | grep -q "^edgerunner: .*frobnicate"; then
    pass "unknown command: exit 1"
else
    fail "unknown command" "exit status $rc"
fi

# ---- the real model -------------------------------------------------------------------
if expect_ok "info on stories260K" -- info -m "$STORIES"; then
    if grep -q llama "$TMP/out" && grep -q token_embd.weight "$TMP/out"; then
        pass "info output names llama and token_embd.weight"
    else
        fail "info output" "no 'llama' or 'token_embd.weight' in: $(head -c 300 "$TMP/out")"
    fi
fi

run_args=(run -m "$STORIES" --prompt-ids 1 -n 8 --temp 0 --ids)
if expect_ok "run stories260K -n 8" -- "${run_args[@]}"; then
    first=$(cat "$TMP/out")
    if [ "$(wc -l <"$TMP/out")" -eq 1 ] && echo "$first" | grep -qE '^[0-9]+( [0-9]+){7}$'; then
        pass "run prints 8 ids on one line ($first)"
    else
        fail "run output" "expected 8 ids on one line, got '$first'"
    fi
    bad_id=$(echo "$first" | tr ' ' '\n' | awk '$1 >= 512' | head -n 1)
    if [ -z "$bad_id" ]; then pass "generated ids are inside the vocabulary"; else fail "generated ids" "id $bad_id >= 512"; fi
    if expect_ok "run stories260K again" -- "${run_args[@]}"; then
        if [ "$(cat "$TMP/out")" = "$first" ]; then
            pass "the same run twice gives the same ids"
        else
            fail "determinism" "'$first' then '$(cat "$TMP/out")'"
        fi
    fi
    if expect_ok "run stories260K with one thread" -- "${run_args[@]}" -t 1; then
        if [ "$(cat "$TMP/out")" = "$first" ]; then
            pass "one thread gives the same ids"
        else
            fail "thread count changes the result" "'$first' then '$(cat "$TMP/out")'"
        fi
    fi
fi

expect_error "run with an id past the vocabulary" "vocabulary" stdout-blank -- run -m "$STORIES" --prompt-ids 1,100000 -n 4 --temp 0 --ids
expect_error "run with id = n_vocab" "vocabulary" stdout-blank -- run -m "$STORIES" --prompt-ids 512 -n 4 --temp 0 --ids
expect_error "run with a prompt longer than the context" "fit|context" stdout-blank -- run -m "$STORIES" -c 4 --prompt-ids 1,2,3,4,5,6 -n 4 --temp 0 --ids
expect_error "run with a negative temperature" "temp" -- run -m "$STORIES" --prompt-ids 1 -n 4 --temp -1

# ---- KV cache types (-ctk/-ctv, as llama.cpp) ------------------------------------------
expect_error "run with a bad -ctk" "run: -ctk wants f32, f16 or q8_0" -- run -m "$STORIES" --prompt-ids 1 -n 4 -ctk q4_0
expect_error "run with a bad --cache-type-v" "run: --cache-type-v wants f32, f16 or q8_0" -- run -m "$STORIES" --prompt-ids 1 -n 4 --cache-type-v F16
expect_error "run with -ctv but no value" "needs a value" -- run -m "$STORIES" --prompt-ids 1 -n 4 -ctv
expect_error "chat with a bad -ctv" "chat: -ctv wants f32, f16 or q8_0" -- chat -m "$STORIES" -ctv bf16
expect_error "perplexity with a bad -ctk" "perplexity: -ctk wants f32, f16 or q8_0" -- perplexity -m "$STORIES" -f "$STORIES" -ctk f8
expect_error "bench with a bad -ctk" "bench: -ctk wants f32, f16 or q8_0" -- bench -m "$STORIES" -ctk q4_0
expect_error "run with a q8_0 cache on the CPU fast path" "CPU backend does not keep a KV cache in Q8_0" -- run -m "$STORIES" --prompt-ids 1 -n 4 -ctk q8_0
# the reference rounds K and V through f16 or q8_0 (the oracle of those caches elsewhere)
expect_ok "run --reference -ctk q8_0 -ctv f16" -- run -m "$STORIES" --reference --prompt-ids 1 -n 8 --temp 0 --ids -ctk q8_0 -ctv f16
expect_error "bench --parallel 0" "bench: --parallel wants an integer in" -- bench -m "$STORIES" --parallel 0
expect_error "bench --parallel with -npp 0" "bench: -npp and -ntg want" -- bench -m "$STORIES" --parallel 2 -npp 0
if expect_ok "bench --parallel 3 (reference and fast path)" -- bench -m "$STORIES" --parallel 3 -npp 40 -ntg 8 --json; then
    if grep -q '"b": 3, "n_kv": 144' "$TMP/out" && "$BIN" bench -m "$STORIES" --parallel 2 -npp 8 -ntg 4 --reference |
        grep -q "greedy ids equal their ids alone"; then
        pass "bench --parallel prints its table after the invariance check"
    else
        fail "bench --parallel prints its table" "$(head -c 300 "$TMP/out")"
    fi
fi
# bench -d N: decode after a prompt of N seeded ids ((i + 1) * 2654435761 mod n_vocab), held
# to the reference's ids for that prompt (run --reference on the same ids here), cached
# under a name with the depth. bytes_per_token: the F32 weights a step reads (5 layers of
# 45,312 floats, the 512 x 64 head, one embedding row: 1,037,568 bytes) plus the F32 KV
# rows at depth 40 over 8 steps (5 layers x (40 + 7 / 2) rows x 2 x 32 floats: 55,680)
expect_error "bench -d with --prompt-ids" "bench: -d N makes the prompt" -- bench -m "$STORIES" -d 8 --prompt-ids 1,2
expect_error "bench -d -1" "bench: -d wants an integer in" -- bench -m "$STORIES" -d -1
if expect_ok "bench --help" -- bench --help && grep -q -- '-d N' "$TMP/out" && grep -q 'bytes_per_token' "$TMP/out"; then
    pass "bench --help names -d and bytes_per_token"
else
    fail "bench --help" "$(head -c 300 "$TMP/out")"
fi
mkdir -p "$TMP/cache"
depth_prompt=$(python3 -c 'print(",".join(str((i + 1) * 2654435761 % 512) for i in range(40)))')
depth_ids=$("$BIN" run -m "$STORIES" --reference --prompt-ids "$depth_prompt" -n 8 --temp 0 --ids --ignore-eos 2>/dev/null)
if XDG_CACHE_HOME=$TMP/cache expect_ok "bench -d 40 --reference --json" -- bench -m "$STORIES" -d 40 -n 8 --runs 1 \
    --warmup 0 -pp 0 --reference --json; then
    got_ids=$(python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d["depth"], d["prompt_tokens"], d["bytes_per_token"], *d["ids"])' "$TMP/out" 2>&1)
    if [ "$got_ids" = "40 40 1093248 $depth_ids" ] && ls "$TMP/cache/edgerunner/" | grep -q -- '-d40-n8-'; then
        pass "bench -d 40: the reference's ids after 40 seeded ids, depth and bytes_per_token in the JSON, cached by depth"
    else
        fail "bench -d 40" "got '$got_ids', want '40 40 1093248 $depth_ids'; cache: $(ls "$TMP/cache/edgerunner/")"
    fi
fi
ref_ids=$("$BIN" run -m "$STORIES" --reference --prompt-ids 1 -n 8 --temp 0 --ids 2>/dev/null)
default_ids=$("$BIN" run -m "$STORIES" --prompt-ids 1 -n 8 --temp 0 --ids 2>/dev/null)
if expect_ok "run -ctk f32 -ctv f32" -- run -m "$STORIES" --prompt-ids 1 -n 8 --temp 0 --ids -ctk f32 -ctv f32; then
    if [ "$(cat "$TMP/out")" = "$ref_ids" ]; then pass "an f32 cache gives the reference's ids"; else fail "an f32 cache gives the reference's ids" "'$(cat "$TMP/out")' vs '$ref_ids'"; fi
fi
if expect_ok "run --cache-type-k f16 --cache-type-v f16" -- run -m "$STORIES" --prompt-ids 1 -n 8 --temp 0 --ids --cache-type-k f16 --cache-type-v f16; then
    if [ "$(cat "$TMP/out")" = "$default_ids" ]; then pass "an f16 cache gives the default's ids"; else fail "an f16 cache gives the default's ids" "'$(cat "$TMP/out")' vs '$default_ids'"; fi
fi

# ---- quantize: OUT is replaced only by a whole file --------------------------------------
# (written under a temporary name beside OUT, fsync'ed, then renamed: src/io/gguf_write.h)
qdir=$TMP/quantize
mkdir -p "$qdir"
# only_files DIR NAME...: DIR holds exactly these names (no temporary file left behind)
only_files() {
    local dir=$1
    shift
    [ "$(cd "$dir" && ls -A | sort | tr '\n' ' ')" = "$(printf '%s\n' "$@" | sort | tr '\n' ' ')" ]
}
printf 'precious\n' >"$qdir/out.gguf"
cp "$qdir/out.gguf" "$TMP/precious"
# a file size limit (SIGXFSZ ignored) makes the write fail half way: EFBIG
(
    trap '' XFSZ
    ulimit -S -f 64
    exec timeout 20 "$BIN" quantize "$STORIES" "$qdir/out.gguf" Q8_0 >"$TMP/out" 2>"$TMP/err"
)
rc=$?
if [ -n "$(sanitizer_problem)" ] || [ "$rc" -ne 1 ] || ! tail -n 1 "$TMP/err" | grep -qE '^edgerunner: .*out\.gguf.*too large'; then
    fail "quantize failing mid-write" "exit $rc $(sanitizer_problem), last stderr line: $(tail -n 1 "$TMP/err")"
elif ! cmp -s "$qdir/out.gguf" "$TMP/precious"; then
    fail "quantize failing mid-write" "the existing output was changed"
elif ! only_files "$qdir" out.gguf; then
    fail "quantize failing mid-write" "files left behind: $(ls -A "$qdir" | tr '\n' ' ')"
else
    pass "quantize failing mid-write leaves the existing output byte for byte, and no temporary file"
fi
mkfifo "$qdir/fifo.gguf"
mkdir "$qdir/dir.gguf"
expect_error "quantize to a FIFO is refused" "fifo\.gguf.*FIFO" -- quantize "$STORIES" "$qdir/fifo.gguf" Q8_0
if [ -p "$qdir/fifo.gguf" ]; then pass "the FIFO is still there"; else fail "quantize to a FIFO" "the FIFO is gone"; fi
expect_error "quantize to a directory is refused" "dir\.gguf.*directory" -- quantize "$STORIES" "$qdir/dir.gguf" Q8_0
if [ -d "$qdir/dir.gguf" ]; then pass "the directory is still there"; else fail "quantize to a directory" "the directory is gone"; fi
if expect_ok "quantize over an existing file" -- quantize "$STORIES" "$qdir/out.gguf" Q8_0; then
    if only_files "$qdir" out.gguf fifo.gguf dir.gguf && "$BIN" info -m "$qdir/out.gguf" 2>/dev/null | grep -q 'Q8_0'; then
        pass "the output is replaced by the quantized model, and no temporary file is left"
    else
        fail "quantize over an existing file" "files: $(ls -A "$qdir" | tr '\n' ' ')"
    fi
fi
# kill -9 while it writes (its output has appeared, under whatever name): nothing under
# the final name. A 64 MiB F32 tensor (a sparse file) takes about 0.5 s on one thread;
# if quantize ever finishes before the kill, the check says so and passes.
python3 -c '
import struct, sys
def s(b): return struct.pack("<Q", len(b)) + b
h = b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + s(b"blk.0.ffn_up.weight") + struct.pack("<IQQIQ", 2, 4096, 4096, 0, 0)
h += bytes(-len(h) % 32)
with open(sys.argv[1], "wb") as f:
    f.write(h)
    f.truncate(len(h) + 4096 * 4096 * 4)
' "$qdir/big.gguf"
mkdir "$qdir/kill"
"$BIN" quantize "$qdir/big.gguf" "$qdir/kill/out.gguf" Q8_0 -t 1 >/dev/null 2>&1 &
qpid=$!
for _ in $(seq 500); do
    compgen -G "$qdir/kill/out.gguf*" >/dev/null && break
    kill -0 "$qpid" 2>/dev/null || break
    sleep 0.01
done
kill -9 "$qpid" 2>/dev/null
wait "$qpid" 2>/dev/null # (no "Killed" notice)
qrc=$?
if [ "$qrc" -ne 137 ]; then
    pass "quantize killed mid-write (vacuous: it finished first, exit $qrc)"
elif [ -e "$qdir/kill/out.gguf" ]; then
    fail "quantize killed mid-write" "a partial file is left under the final name"
else
    pass "quantize killed mid-write leaves nothing under the final name"
fi
rm -rf "$qdir"

# ---- threads: as many as the CPUs this process may use (taskset, cgroups), never more ---
if command -v taskset >/dev/null 2>&1 && taskset -c 0 true 2>/dev/null; then
    mkdir -p "$TMP/cache" # bench caches the reference ids there
    want=$(timeout 20 "$BIN" run -m "$STORIES" --prompt-ids 1 -n 8 --temp 0 --ids 2>/dev/null)
    if XDG_CACHE_HOME=$TMP/cache timeout 20 taskset -c 0 "$BIN" bench -m "$STORIES" -n 4 --runs 1 --warmup 0 \
        --warmup-seconds 0 -pp 0 --json >"$TMP/out" 2>"$TMP/err" && grep -q '"threads": 1,' "$TMP/out"; then
        pass "bench under taskset -c 0 uses 1 thread by default"
    else
        fail "bench under taskset -c 0" "$(grep -o '"threads": [0-9]*' "$TMP/out" || head -c 300 "$TMP/out")"
    fi
    timeout 20 taskset -c 0 "$BIN" run -m "$STORIES" --prompt-ids 1 -n 8 --temp 0 --ids -t 64 >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ "$rc" -eq 0 ] && [ -z "$(sanitizer_problem)" ] && [ "$(cat "$TMP/out")" = "$want" ] &&
        grep -q '^edgerunner: warning: -t 64 is more than the 1 CPU(s) this process may use; using 1 thread(s)$' "$TMP/err"; then
        pass "run -t 64 under taskset -c 0 says it uses 1 thread, and gives the same ids"
    else
        fail "run -t 64 under taskset -c 0" "exit $rc, ids '$(cat "$TMP/out")' vs '$want'"
    fi
else
    pass "threads under taskset (skipped: no usable taskset)"
fi

# ---- non-finite numbers: refused at load (metadata, 1-D tensors) or by generation ------
# (a NaN weight in output.weight's row 5 makes logit 5 NaN at every position; an epsilon
# of 3e38 is finite but zeroes every activation: greedy printed "0 0 0 ...")
out_off=$("$BIN" info -m "$STORIES" | awk '$1 == "output.weight" { print $NF }')
python3 - "$STORIES" "$TMP" "$out_off" <<'PY'
import struct, sys
src, out, off = sys.argv[1], sys.argv[2], int(sys.argv[3])
b = open(src, 'rb').read()
nan = bytearray(b)
nan[off + 4 * (5 * 64 + 7):off + 4 * (5 * 64 + 8)] = struct.pack('<f', float('nan'))
open(out + '/nan_output.gguf', 'wb').write(nan)
key = b'llama.attention.layer_norm_rms_epsilon'
at = b.index(key) + len(key)
assert struct.unpack_from('<I', b, at)[0] == 6  # f32
eps = bytearray(b)
eps[at + 4:at + 8] = struct.pack('<f', 3e38)
open(out + '/eps_huge.gguf', 'wb').write(eps)
PY
expect_error "greedy run on NaN logits" "logits of position 0 are not finite" -- run -m "$TMP/nan_output.gguf" --prompt-ids 1 -n 4 --temp 0 --ids
expect_error "sampled run on NaN logits" "logits of position 1 are not finite" -- run -m "$TMP/nan_output.gguf" --prompt-ids 1,2 -n 4 --seed 1 --ids
expect_error "run with a norm epsilon of 3e38" "layer_norm_rms_epsilon is 3" -- run -m "$TMP/eps_huge.gguf" --prompt-ids 1 -n 4 --temp 0 --ids

# ---- a model file truncated while a run has it mapped: SIGBUS, one line naming it -------
# A long run (a 65536-token context fills in minutes) is cut once it has printed a token
# (the model is loaded and read at every step); if it ever ends first, the check passes
# and says so.
cp "$STORIES" "$TMP/victim.gguf"
timeout 20 "$BIN" run -m "$TMP/victim.gguf" --prompt-ids 1 -n 1000000 -c 65536 --ignore-eos --temp 0 --ids -t 1 \
    >"$TMP/out" 2>"$TMP/err" &
bpid=$!
for _ in $(seq 1500); do # (its first token may be slow on a loaded machine)
    [ -s "$TMP/out" ] && break
    kill -0 "$bpid" 2>/dev/null || break
    sleep 0.01
done
: >"$TMP/victim.gguf"
wait "$bpid"
rc=$?
if [ "$rc" -eq 0 ]; then
    pass "a model truncated while in use (vacuous: the run ended first)"
elif [ -n "$(sanitizer_problem)" ] || [ "$rc" -ne 1 ]; then
    fail "a model truncated while in use" "exit $rc $(sanitizer_problem)"
elif [ "$(awk 'END { print NR }' "$TMP/err")" -ne 1 ] ||
    ! grep -qE "^edgerunner: .*victim\.gguf: the file was truncated or changed while in use \(SIGBUS\)" "$TMP/err"; then
    fail "a model truncated while in use" "stderr is not the one line naming the file"
else
    pass "a model truncated while in use: one line naming the file, exit 1"
fi

# The CUDA backend: a machine without a usable GPU (CI) gets one clear line and exit 1
# (the debug build has no CUDA backend and says so); with a GPU, the same ids as the CPU.
if "$BIN" run -m "$STORIES" --backend cuda --prompt-ids 1 -n 4 --temp 0 --ids >/dev/null 2>&1; then
    cpu_ids=$("$BIN" run -m "$STORIES" --prompt-ids 1 -n 16 --temp 0 --ids 2>/dev/null)
    gpu_ids=$("$BIN" run -m "$STORIES" --backend cuda --prompt-ids 1 -n 16 --temp 0 --ids 2>/dev/null)
    if [ "$cpu_ids" = "$gpu_ids" ]; then pass "run --backend cuda gives the CPU's ids"; else fail "run --backend cuda gives the CPU's ids" "$gpu_ids vs $cpu_ids"; fi
    expect_error "run --backend cuda with K and V of two types" "CUDA backend keeps K and V in one type" -- run -m "$STORIES" --backend cuda --prompt-ids 1 -n 4 -ctk f32 -ctv f16
    expect_error "run --backend cuda with a q8_0 cache of 8-dim heads" "multiple of 32" -- run -m "$STORIES" --backend cuda --prompt-ids 1 -n 4 -ctk q8_0 -ctv q8_0
else
    expect_error "run --backend cuda without a GPU" "CUDA" -- run -m "$STORIES" --backend cuda --prompt-ids 1 -n 4 --temp 0 --ids
fi
expect_error "run with an unknown backend" "backend" -- run -m "$STORIES" --backend tpu --prompt-ids 1 -n 4

# ---- hostile vocabularies (issue 23) ---------------------------------------------------
# vocab.py rewrites stories260K's tokenizer metadata (the tensors stay as they are) and
# writes vocab-only files: a mistyped key, vocabularies that make a byte many ids (no
# U+2581 token: a space is 3 byte tokens; Qwen2's NFC turns U+0958 into 2 characters),
# and vocabularies of another size than the 512 embedding rows.
cat >"$TMP/vocab.py" <<'PY'
import os, struct, sys

out, stories_path = sys.argv[1], sys.argv[2]

def u32(v): return struct.pack('<I', v)
def u64(v): return struct.pack('<Q', v)
def s(b):
    b = b.encode() if isinstance(b, str) else b
    return u64(len(b)) + b
def v_str(v): return u32(8) + s(v)
def v_strs(items): return u32(9) + u32(8) + u64(len(items)) + b''.join(s(x) for x in items)
def v_scalars(code, fmt, items): return u32(9) + u32(code) + u64(len(items)) + struct.pack('<%d%s' % (len(items), fmt), *items)

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
FMT = {4: 'I', 5: 'i', 6: 'f'}

def split(b):
    """(ordered {key: raw value}, n_tensors, raw tensor infos, data section) of a GGUF v3
    file aligned to 32 bytes (stories260K has no general.alignment)"""
    pos, kvs = 24, {}
    n_tensors, n_kv = struct.unpack_from('<QQ', b, 8)
    def skip_string(p): return p + 8 + struct.unpack_from('<Q', b, p)[0]
    def skip_value(p, t):
        if t == 8: return skip_string(p)
        if t == 9:
            et, n = struct.unpack_from('<IQ', b, p)
            p += 12
            for _ in range(n): p = skip_value(p, et)
            return p
        return p + SIZES[t]
    for _ in range(n_kv):
        k0 = pos
        pos = skip_string(pos)
        v0 = pos
        pos = skip_value(pos + 4, struct.unpack_from('<I', b, pos)[0])
        kvs[b[k0 + 8:v0].decode()] = b[v0:pos]
    t0 = pos
    for _ in range(n_tensors):
        pos = skip_string(pos)
        pos += 4 + 8 * struct.unpack_from('<I', b, pos)[0] + 4 + 8
    return kvs, n_tensors, b[t0:pos], b[(pos + 31) // 32 * 32:]

def decode_array(raw):
    et, n = struct.unpack_from('<IIQ', raw, 0)[1:]
    if et == 8:
        items, p = [], 16
        for _ in range(n):
            ln = struct.unpack_from('<Q', raw, p)[0]
            items.append(raw[p + 8:p + 8 + ln])
            p += 8 + ln
        return items
    return list(struct.unpack_from('<%d%s' % (n, FMT[et]), raw, 16))

def write(name, kvs, n_tensors=0, infos=b'', data=b''):
    b = b'GGUF' + u32(3) + u64(n_tensors) + u64(len(kvs))
    b += b''.join(s(k) + v for k, v in kvs.items()) + infos
    b += b'\0' * (-len(b) % 32) + data
    with open(os.path.join(out, name + '.gguf'), 'wb') as f:
        f.write(b)

stories = open(stories_path, 'rb').read()
kvs, n_tensors, infos, data = split(stories)
def model(name, **changes):
    k = dict(kvs)
    for key, v in changes.items():
        key = 'tokenizer.ggml.' + key
        if v is None:
            k.pop(key, None)
        else:
            k[key] = v
    write(name, k, n_tensors, infos, data)

# byte-level BPE: GPT-2's 256 byte characters, padded to the 512 rows, no merges
def byte_char(b):
    if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255:
        return chr(b)
    return chr(0x100 + sum(1 for x in range(b) if not (33 <= x <= 126 or 161 <= x <= 172 or 174 <= x <= 255)))
bpe = [byte_char(b) for b in range(256)]
bpe512 = bpe + ['[PAD%d]' % i for i in range(256, 512)]
qwen2 = dict(model=v_str('gpt2'), pre=v_str('qwen2'), tokens=v_strs(bpe512), scores=None,
             token_type=v_scalars(5, 'i', [1] * 512))

# 1. tokenizer.ggml.merges as an array of u32 (it was a NULL dereference)
merges_u32 = v_scalars(4, 'I', [1, 2])
write('vocab_merges_u32', {'tokenizer.ggml.model': v_str('gpt2'), 'tokenizer.ggml.tokens': v_strs(bpe),
                           'tokenizer.ggml.merges': merges_u32})
model('stories_merges_u32', merges=merges_u32, **{k: v for k, v in qwen2.items() if k != 'pre'})
# 2. a byte becomes more than one id: no U+2581 token; NFC expansion under qwen2
tokens = decode_array(kvs['tokenizer.ggml.tokens'])
assert tokens.count('\u2581'.encode()) == 1 and '\u2580'.encode() not in tokens
model('stories_no_space_token', tokens=v_strs([b'\xe2\x96\x80' if t == '\u2581'.encode() else t for t in tokens]))
write('vocab_qwen2_bytes', {'tokenizer.ggml.model': v_str('gpt2'), 'tokenizer.ggml.pre': v_str('qwen2'),
                            'tokenizer.ggml.tokens': v_strs(bpe)})
model('stories_qwen2_bytes', **qwen2)
# 3. fewer and more tokens than the 512 embedding rows
scores, types = decode_array(kvs['tokenizer.ggml.scores']), decode_array(kvs['tokenizer.ggml.token_type'])
model('stories_300_tokens', tokens=v_strs(tokens[:300]), scores=v_scalars(6, 'f', scores[:300]),
      token_type=v_scalars(5, 'i', types[:300]))
model('stories_600_tokens', tokens=v_strs(tokens + [b'[X%d]' % i for i in range(88)]),
      scores=v_scalars(6, 'f', scores + [0.0] * 88), token_type=v_scalars(5, 'i', types + [1] * 88))
PY
if python3 "$TMP/vocab.py" "$TMP" "$STORIES"; then
    pass "hostile vocabularies written"
else
    fail "hostile vocabularies" "vocab.py failed"
fi
V=$TMP
spaces="                                        " # 40: 124 ids with BOS, 3 per space and the prefix
deva=$(printf '\xe0\xa5\x98\xe0\xa5\x98\xe0\xa5\x98\xe0\xa5\x98') # U+0958 x 4: 12 bytes, 24 ids after NFC

# ids on one line: expect_ids NAME COUNT -- ARGS...
expect_ids() {
    local name=$1 want=$2
    shift 3
    if expect_ok "$name" -- "$@"; then
        local got
        got=$(wc -w <"$TMP/out")
        if [ "$got" -eq "$want" ]; then pass "$name gives $want ids"; else fail "$name" "$got ids, expected $want"; fi
    fi
}

expect_error "tokenize with merges stored as u32" "tokenizer.ggml.merges.*array of u32" -- tokenize -m "$V/vocab_merges_u32.gguf" ab
expect_error "run with merges stored as u32" "tokenizer.ggml.merges.*array of u32" -- run -m "$V/stories_merges_u32.gguf" -p ab -n 1
expect_error "chat with merges stored as u32" "tokenizer.ggml.merges.*array of u32" -- chat -m "$V/stories_merges_u32.gguf" -n 1 </dev/null
expect_ids "tokenize 40 spaces without a U+2581 token" 124 -- tokenize -m "$V/stories_no_space_token.gguf" --ids "$spaces"
expect_ids "tokenize U+0958 x 4 under qwen2 NFC" 24 -- tokenize -m "$V/vocab_qwen2_bytes.gguf" --ids "$deva"
expect_ids "run -p 40 spaces without a U+2581 token" 2 -- run -m "$V/stories_no_space_token.gguf" -p "$spaces" -n 2 --temp 0 --ids
expect_ids "run -p U+0958 x 4 under qwen2 NFC" 2 -- run -m "$V/stories_qwen2_bytes.gguf" -p "$deva" -n 2 --temp 0 --ids
printf '%s' "$spaces" >"$TMP/spaces.txt"
if expect_ok "perplexity on 40 spaces without a U+2581 token" -- perplexity -m "$V/stories_no_space_token.gguf" -f "$TMP/spaces.txt" -c 16; then
    if grep -q "in 7 chunks of 16" "$TMP/out"; then pass "perplexity sees the 124 ids"; else fail "perplexity" "$(cat "$TMP/out")"; fi
fi
printf '%s\n' "$spaces" >"$TMP/chat.txt"
expect_ok "chat on a line of 40 spaces without a U+2581 token" -- chat -m "$V/stories_no_space_token.gguf" -n 2 --temp 0 <"$TMP/chat.txt"
expect_error "run with 300 tokens for 512 embedding rows" "300 tokens.*512 rows" -- run -m "$V/stories_300_tokens.gguf" -p a -n 1
expect_error "run with 600 tokens for 512 embedding rows" "600 tokens.*512 rows" -- run -m "$V/stories_600_tokens.gguf" --prompt-ids 1 -n 1

# ---- -- ends the options ----------------------------------------------------------------
if expect_ok "tokenize -- -x" -- tokenize -m "$STORIES" --ids -- "-x"; then
    dashed=$(cat "$TMP/out")
    expect_ok "tokenize -p -x" -- tokenize -m "$STORIES" --ids -p "-x"
    if [ -n "$dashed" ] && [ "$(cat "$TMP/out")" = "$dashed" ]; then pass "-- TEXT is the text"; else fail "-- TEXT" "'$dashed' vs '$(cat "$TMP/out")'"; fi
fi
expect_ok "tokenize -- --ids (the text, not the flag)" -- tokenize -m "$STORIES" -- --ids
if grep -q -- "-> '" "$TMP/out"; then pass "-- --ids is tokenized as text"; else fail "-- --ids" "$(head -c 200 "$TMP/out")"; fi
expect_error "tokenize -- with two texts" "once" -- tokenize -m "$STORIES" -- a b
expect_ok "run -m M --prompt-ids 1 -n 1 --" -- run -m "$STORIES" --prompt-ids 1 -n 1 --temp 0 --ids --
expect_error "run with an operand after --" "unexpected argument 'x' after --" -- run -m "$STORIES" --prompt-ids 1 -- x
expect_ok "info -m M --" -- info -m "$STORIES" --
expect_error "info with an operand after --" "unexpected argument" -- info -- -m "$STORIES"
expect_error "perplexity with an operand after --" "unexpected argument" -- perplexity -m "$STORIES" -- -f x
expect_error "chat with an operand after --" "unexpected argument" -- chat -m "$STORIES" -- x
expect_error "bench with an operand after --" "unexpected argument" -- bench -m "$STORIES" -- x
expect_error "quantize -- with a missing input named -x" "\-x" -- quantize -- -x "$TMP/q.gguf" Q8_0

# ---- hostile chat templates and variables (chat --render-json) --------------------------
# A template comes from the model file: whatever it does ends in one line naming the
# construct and its line, never a signal (see tests/unit/test_chat.c for the full set).
render_case() { # NAME PATTERN TEMPLATE [VARIABLES]: expects an error matching PATTERN
    printf '%s' "$3" >"$TMP/t.jinja"
    printf '%s' "${4:-{\}}" >"$TMP/v.json"
    expect_error "$1" "$2" -- chat -m "$STORIES" --render-json "$TMP/v.json" --template "$TMP/t.jinja"
}
render_case "template: INT64_MIN // -1" "line 1: integer overflow in //" '{{ (-9223372036854775807-1) // -1 }}'
render_case "template: 30 KB of 1+1+..." "nested too deeply" "{{ 1$(printf '+1%.0s' $(seq 15000)) }}"
render_case "template: 20000 nested ifs" "nested too deeply" "$(printf '{%% if 1 %%}%.0s' $(seq 20000))x"
render_case "template: endless macro recursion" "line 2: .*nested too deeply" $'{% macro f() %}\n{{ f() }}{% endmacro %}{{ f() }}'
render_case "template: 300 MB string" "memory limit" "{{ 'a' * 300000000 }}"
render_case "template: 1 ** 2**63-1 is fast, 3 ** it overflows" "integer overflow in \\*\\*" '{{ 1 ** 9223372036854775807 }}{{ 3 ** 9223372036854775807 }}'
render_case "variables: an integer beyond int64" "integer beyond 64 bits" '{{ x }}' '{"x": 9223372036854775808}'
render_case "variables: a bad \\u escape" "bad escape" '{{ x }}' '{"x": "\u000g"}'
render_case "variables: a number with a leading zero" "bad number" '{{ x }}' '{"x": 01}'
printf '%s' '{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns }}' >"$TMP/t.jinja"
printf '{}' >"$TMP/v.json"
if expect_ok "template: a namespace holding itself prints" -- chat -m "$STORIES" --render-json "$TMP/v.json" --template "$TMP/t.jinja"; then
    if [ "$(cat "$TMP/out")" = "<Namespace {'a': <Namespace {...}>}>" ]; then pass "as Python prints it"; else fail "as Python prints it" "$(head -c 200 "$TMP/out")"; fi
fi

# Hugging Face folders (io/hf.c): a tiny valid Qwen3 folder runs; hostile ones fail with one line
HF=$TMP/hf
mkdir -p "$HF" "$TMP/hf256"
python3 tests/cli/make_hf_folder.py "$HF" 8
python3 tests/cli/make_hf_folder.py "$TMP/hf256" 256
expect_ok "folder: a tiny Qwen3 folder runs" -- run -m "$HF" --prompt-ids 1,2 -n 2 --ids --temp 0
expect_ok "folder: info" -- info -m "$HF"
cp -r "$HF" "$TMP/hf_bad"
head -c 300 "$HF/model.safetensors" >"$TMP/hf_bad/model.safetensors"
expect_error "folder: truncated model.safetensors" "model.safetensors: header length .* runs past the end" -- run -m "$TMP/hf_bad" --prompt-ids 1
cp "$HF/model.safetensors" "$TMP/hf_bad/"
sed 's/Qwen3ForCausalLM/FooForCausalLM/' "$HF/config.json" >"$TMP/hf_bad/config.json"
expect_error "folder: unknown architecture" "config.json: architecture 'FooForCausalLM' is not supported" -- run -m "$TMP/hf_bad" --prompt-ids 1
printf '\xff{}' >"$TMP/hf_bad/config.json"
expect_error "folder: config.json not UTF-8" "config.json: JSON: not UTF-8 at byte 0" -- info -m "$TMP/hf_bad"
sed 's/"default"/"yarn"/' "$HF/config.json" >"$TMP/hf_bad/config.json"
expect_error "folder: an unsupported RoPE scaling" "RoPE scaling 'yarn' is not supported" -- run -m "$TMP/hf_bad" --prompt-ids 1
cp "$HF/config.json" "$TMP/hf_bad/"
printf '{"weight_map": {"model.norm.weight": "../model.safetensors"}}' >"$TMP/hf_bad/model.safetensors.index.json"
expect_error "folder: an index naming a file outside the folder" "is not a file name in the folder" -- run -m "$TMP/hf_bad" --prompt-ids 1
printf '{"weight_map": {"model.nope.weight": "model.safetensors"}}' >"$TMP/hf_bad/model.safetensors.index.json"
expect_error "folder: an index naming a tensor its shard lacks" "'model.nope.weight' is not in model.safetensors" -- run -m "$TMP/hf_bad" --prompt-ids 1
rm "$TMP/hf_bad/model.safetensors.index.json"
expect_error "convert: OUT missing" "DIR and OUT are required" -- convert "$HF"
if expect_ok "convert: the folder to GGUF" -- convert "$HF" "$TMP/hf.gguf"; then
    "$BIN" run -m "$HF" --prompt-ids 1,2 -n 4 --ids --temp 0 >"$TMP/a" 2>/dev/null
    "$BIN" run -m "$TMP/hf.gguf" --prompt-ids 1,2 -n 4 --ids --temp 0 >"$TMP/b" 2>/dev/null
    if cmp -s "$TMP/a" "$TMP/b" && [ -s "$TMP/a" ]; then pass "convert: same ids from the GGUF as from the folder"; else fail "convert: same ids from the GGUF as from the folder" "$(cat "$TMP/a") vs $(cat "$TMP/b")"; fi
fi
# --type quantizes while loading: the very logits of `convert DIR OUT TYPE` then OUT (width 256: every weight in
# TYPE, no fallback; Q4_K_M also puts attn_v, ffn_down and the tied head in Q6_K)
for t in q8_0 Q4_K_M; do
    "$BIN" convert "$TMP/hf256" "$TMP/hf256.gguf" "$t" >/dev/null 2>&1
    "$BIN" run -m "$TMP/hf256.gguf" --prompt-ids 1,2,3,4,5 -n 1 --dump-logits "$TMP/la" >/dev/null 2>&1
    if expect_ok "folder --type $t: runs" -- run -m "$TMP/hf256" --type "$t" --prompt-ids 1,2,3,4,5 -n 1 --dump-logits "$TMP/lb"; then
        if cmp -s "$TMP/la" "$TMP/lb" && [ -s "$TMP/la" ]; then pass "folder --type $t: the logits of convert DIR OUT $t, bit for bit"; else fail "folder --type $t: the logits of convert DIR OUT $t" "differ"; fi
    fi
done
expect_error "folder --type: an unknown type" "unknown type 'q9_9' \\(types: F32 F16" -- run -m "$HF" --type q9_9 --prompt-ids 1
expect_error "--type on quantized weights" "is already Q._K; re-quantizing it to Q8_0" -- run -m "$TMP/hf256.gguf" --type q8_0 --prompt-ids 1

echo "$n_pass passed, $n_fail failed"
[ "$n_fail" -eq 0 ]
