#!/usr/bin/env bash
# run.sh BUILD_DIR - builds and runs check.cpp: wtypes.cuh's device part (the layouts of
# the weight types, their repack, chunk dots, the int8 mma's codes and the GEMM
# conversion) on the host against the CPU reference, so that machines without a GPU (CI)
# check them; the kernels themselves are tested on the GPU (tests/unit/test_cuda.c).
# BUILD_DIR holds the libedgerunner.a of a build without CUDA (make test passes
# build/debug, with CXXFLAGS for its sanitizers), for its quantizers; needs g++. The
# device part is cut out of wtypes.cuh as text (between "#ifdef __CUDACC__ ... The device
# part" and "#endif /* __CUDACC__ */") and compiled as C++ over stubs.h's host versions
# of the intrinsics.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$root/src/backend/cuda/wtypes.cuh" "$tmp/wtypes_host.h" <<'PY'
import sys
s = open(sys.argv[1]).read()
a = s.index("#ifdef __CUDACC__\n/* ---- The device part")
b = s.index("#endif /* __CUDACC__ */")
host = s[:a].replace("#ifdef __CUDACC__\n#define CUDA_WT_FN static constexpr __host__ __device__ __forceinline__\n"
                     "#else\n#define CUDA_WT_FN static inline\n#endif", "#define CUDA_WT_FN static constexpr inline")
dev = s[a:b].replace('#include "backend/cuda/common.cuh"', "").replace("#ifdef __CUDACC__\n", "", 1)
open(sys.argv[2], "w").write('#include "stubs.h"\n' + host + dev + "#endif\n")
PY
g++ -std=c++17 -O1 -w ${CXXFLAGS:-} -I"$here" -I"$tmp" -I"$root/src" -I"$root/include" -o "$tmp/check" \
    "$here/check.cpp" "$build/libedgerunner.a" -lm -lpthread
"$tmp/check"
