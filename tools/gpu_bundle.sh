#!/usr/bin/env bash
# Packs what tools/gpu_check.sh runs into one archive, for a GPU machine that has the CUDA driver
# and toolkit but none of the project's Debian packages and no network to install them:
#   - the check's executables from a build tree made with the check's flags (Release,
#     DLS_NATIVE=OFF, so no instruction of this CPU that the other lacks), stripped;
#   - the tree's CTestTestfile.cmake files, so `ctest -L cuda` runs there as here;
#   - every shared library they load that is neither glibc's, the compiler runtime's nor
#     CUDA's (the GPU machine brings its own driver, cuBLAS and NCCL), and UCX's transport modules.
# There, unpack it at the repository root and run `tools/gpu_check.sh --prebuilt` (see its header),
# or `source tools/gpu_bundle_env.sh build-gpu` before running its programs by hand.
# Usage: tools/gpu_bundle.sh [build-dir] [archive]   (defaults: build-gpu, gpu-bundle.tar.gz)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build-gpu}" && pwd)
ARCHIVE=${2:-$ROOT/gpu-bundle.tar.gz}
name=$(basename "$BUILD")

executables=(gpu/cuda/bench_cuda_step gpu/cuda/bench_cuda_corun tests/gpu_cuda/test_cuda_kernels
             tests/gpu_cuda/test_cuda_model tests/gpu_cuda/test_cuda_tp tests/gpu_cuda/test_cuda_dream
             tests/runtime/test_runtime_devices tools/dilaserve)
for e in "${executables[@]}"; do
  [ -x "$BUILD/$e" ] || { echo "gpu_bundle: $BUILD/$e is missing: build it first (see tools/gpu_check.sh)" >&2; exit 1; }
done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$name/lib"
for e in "${executables[@]}"; do
  mkdir -p "$stage/$name/$(dirname "$e")"
  strip -o "$stage/$name/$e" "$BUILD/$e"
done
(cd "$BUILD" && find . -name CTestTestfile.cmake -print0 | xargs -0 -I{} cp --parents {} "$stage/$name/")

# ucx_perftest, the reference of `dilaserve bench-migration`, where ucx-utils is installed.
if command -v ucx_perftest >/dev/null; then
  mkdir -p "$stage/$name/bin"
  cp "$(command -v ucx_perftest)" "$stage/$name/bin/"
  executables+=(bin/ucx_perftest)
fi

# Libraries the GPU machine has or must provide itself: the C and C++ runtimes (newer there
# serve older binaries) and CUDA's, which must match its driver.
system_lib='^(linux-vdso|ld-linux|libc\.|libm\.|libmvec\.|libdl\.|librt\.|libpthread\.|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas|libnccl|libnvidia)'
declare -A copied=()
for e in "${executables[@]}"; do
  while read -r lib path; do
    [[ "$lib" =~ $system_lib ]] && continue
    [ -n "${copied[$lib]:-}" ] && continue
    copied[$lib]=1
    cp -L "$path" "$stage/$name/lib/$lib"
  done < <(ldd "$stage/$name/$e" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
done
ucx_modules=/usr/lib/x86_64-linux-gnu/ucx
[ -d "$ucx_modules" ] && cp -rL "$ucx_modules" "$stage/$name/lib/ucx"

echo "$ROOT" > "$stage/$name/bundle_root"
tar -C "$stage" -czf "$ARCHIVE" "$name"
echo "gpu_bundle: $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1)): ${#executables[@]} executables, ${#copied[@]} libraries"
