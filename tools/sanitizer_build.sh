#!/usr/bin/env bash
# Configures and builds the sanitizer tree: clang, ASan + UBSan (a UB report stops the program),
# every library instrumented for libFuzzer's coverage, no -march=native, no CUDA. The fuzzers
# (tools/fuzz.sh) and CI's sanitized tests share it, so the libraries compile once for both.
# usage: tools/sanitizer_build.sh TARGET...     e.g. tools/sanitizer_build.sh fuzzers sanitized_tests
# DLS_FUZZ_BUILD names the tree (default build-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$#" -gt 0 ] || { echo "sanitizer_build.sh: name the targets to build, e.g. fuzzers sanitized_tests" >&2; exit 2; }
build="${DLS_FUZZ_BUILD:-build-fuzz}"
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDLS_FUZZ=ON -DDLS_WITH_CUDA=OFF -DDLS_NATIVE=OFF >/dev/null
cmake --build "$build" -j2 --target "$@"
