#!/usr/bin/env bash
# One-command GPU check for the CUDA backend (docs/cuda.md), for whoever has an NVIDIA GPU:
#   1. configure and build the CUDA backend, its tests and the step benchmark;
#   2. run the `gpu` tests (kernel parity, whole-model parity, TP=2 when two GPUs exist);
#   3. benchmark a LLaDA-8B-shaped model with random bf16 weights at prompt lengths
#      512/1024/2048, gen 256, block 32: refresh and dual-cache reuse steps at batch 1 and 8,
#      each beside the roofline from the GEMM peak and copy bandwidth measured in the same run;
#   4. print the table and write a measured step-cost profile for the simulator;
#   5. co-running (run before step 3's benchmark, the two are independent): a 2,048-token
#      refresh timed alone and beside a loop of reuse steps (batch 1/4/8) on a second stream,
#      the slowdown the simulator's co_run models need;
#   6. checkpoints: a full-depth LLaDA-8B-shaped random bf16 checkpoint (16 GB in 5 GB shards,
#      dilaserve write-random-checkpoint) loaded through the serving loader onto the GPU and
#      stepped (bench-checkpoint --device cuda), and a 2-layer Dream-7B-shaped one (GQA, QKV bias,
#      the logit shift) stepped the same way; the `gpu` tests of step 2 include test_cuda_dream,
#      Dream on the CUDA backend against the CPU goldens of tests/golden/parity.
# Budget, measured on one H200 (2026-12-04, --prebuilt): steps 2-5 in 28 s, step 6 in 68 s
# (writing 19 GB of checkpoints included); building takes longer than all of it. Usage:
#   tools/gpu_check.sh [--prebuilt] [build-dir]   (default: build-gpu; OUT=<dir> for the outputs)
# --prebuilt skips step 1 on a machine without the project's Debian packages: build-dir then holds
# what tools/gpu_bundle.sh packed on a machine that has them (executables, CTest files, libraries).
# Environment: JOBS (build parallelism, default nproc), DEVICE (benchmark device, default 0),
# DLS_GPU_CHECK_CKPT (where step 6 writes its checkpoints, default OUT/ckpt), MEMCHECK (test
# programs to run again under compute-sanitizer memcheck, last).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prebuilt=0
if [ "${1:-}" = --prebuilt ]; then prebuilt=1; shift; fi
case "${1:-}" in -*) echo "gpu_check: unknown flag '$1' (usage: tools/gpu_check.sh [--prebuilt] [build-dir])" >&2; exit 2 ;; esac
BUILD=${1:-$ROOT/build-gpu}
OUT=${OUT:-$BUILD/gpu_check}
JOBS=${JOBS:-$(nproc)}
DEVICE=${DEVICE:-0}
mkdir -p "$OUT"
start=$(date +%s)
stamp() { echo "[gpu_check +$(( $(date +%s) - start ))s] $*"; }

stamp "GPU(s):"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "  (nvidia-smi unavailable)"

if [ "$prebuilt" = 1 ]; then
  source "$ROOT/tools/gpu_bundle_env.sh" "$BUILD" || exit 1
else
  generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  stamp "configure $BUILD"
  cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DDLS_WITH_CUDA=ON -DDLS_NATIVE=OFF \
    | tee "$OUT/configure.log" | grep -E "CUDA backend|NCCL" || true
  if ! grep -q "DiLaServe CUDA backend: ON" "$OUT/configure.log"; then
    echo "gpu_check: CMake did not enable the CUDA backend (is nvcc at /usr/local/cuda/bin or on PATH?)" >&2
    exit 1
  fi

  stamp "build (-j$JOBS)"
  cmake --build "$BUILD" -j "$JOBS" --target dls_gpu_cuda bench_cuda_step bench_cuda_corun test_cuda_kernels test_cuda_model test_cuda_tp \
    test_cuda_dream test_runtime_devices dilaserve
fi

count=$("$BUILD/gpu/cuda/bench_cuda_step" --count)
if [ "$count" -lt 1 ]; then
  echo "gpu_check: no usable CUDA device on this machine; the gpu tests would only report SKIPPED" >&2
  exit 2
fi
stamp "$count CUDA device(s)"

stamp "gpu tests"
tests_rc=0
ctest --test-dir "$BUILD" -L cuda --output-on-failure --timeout 180 2>&1 | tee "$OUT/ctest.log" || tests_rc=$?

stamp "co-running"
corun_rc=0
timeout 150 "$BUILD/gpu/cuda/bench_cuda_corun" --device "$DEVICE" --refresh-prompt 2048 --reuse-prompt 1024 \
  --batches 1,4,8 --reps 7 2>&1 | tee "$OUT/corun.txt" || corun_rc=$?

stamp "benchmark"
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i "$DEVICE" 2>/dev/null | head -1 | tr ' ' '_' || true)
profile="$OUT/step_cost_${gpu_name:-cuda}_llada8b.yaml"
bench_rc=0
timeout 200 "$BUILD/gpu/cuda/bench_cuda_step" --device "$DEVICE" --prompts 512,1024,2048 --gen 256 --block 32 \
  --batches 1,8 --reps 9 --breakdown --profile "$profile" 2>&1 | tee "$OUT/bench.txt" || bench_rc=$?

stamp "checkpoints"
# A LLaDA-8B-shaped bf16 checkpoint at full depth, sharded as save_pretrained shards it, and a
# 2-layer Dream-7B-shaped one, through the serving loader onto the GPU and stepped.
ckpt_rc=0
ckpt="${DLS_GPU_CHECK_CKPT:-$OUT/ckpt}"
"$BUILD/tools/dilaserve" write-random-checkpoint --shape llada-8b "$ckpt/llada-8b" 2>&1 | tee "$OUT/checkpoint.txt" \
  && timeout 300 "$BUILD/tools/dilaserve" bench-checkpoint "$ckpt/llada-8b" --device cuda:"$DEVICE" --prompt 992 \
       --block 32 --reps 5 2>&1 | tee -a "$OUT/checkpoint.txt" || ckpt_rc=$?
"$BUILD/tools/dilaserve" write-random-checkpoint --shape dream-7b --layers 2 "$ckpt/dream-7b-2l" 2>&1 \
  | tee -a "$OUT/checkpoint.txt" \
  && timeout 300 "$BUILD/tools/dilaserve" bench-checkpoint "$ckpt/dream-7b-2l" --device cuda:"$DEVICE" --prompt 992 \
       --block 32 --reps 5 2>&1 | tee -a "$OUT/checkpoint.txt" || ckpt_rc=$?
rm -rf "$ckpt"

# Optional, last: named gpu test programs again under compute-sanitizer's memcheck, e.g.
# MEMCHECK="test_cuda_dream" (it slows kernels by 10-100x, so only what changed).
memcheck_rc=0
for t in ${MEMCHECK:-}; do
  stamp "memcheck $t"
  exe=$(find "$BUILD/tests" -name "$t" -type f -perm -u+x -print -quit)
  [ -n "$exe" ] || { echo "gpu_check: no test program $t under $BUILD/tests" | tee -a "$OUT/memcheck.txt"; memcheck_rc=1; continue; }
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 1 "$exe" 2>&1 | tee -a "$OUT/memcheck.txt" || memcheck_rc=$?
done

stamp "done: tests rc=$tests_rc, benchmark rc=$bench_rc, co-running rc=$corun_rc, checkpoints rc=$ckpt_rc, memcheck rc=$memcheck_rc"
echo "outputs: $OUT (ctest.log, bench.txt, $(basename "$profile"), corun.txt, checkpoint.txt${MEMCHECK:+, memcheck.txt})"
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ] && [ "$corun_rc" -eq 0 ] && [ "$ckpt_rc" -eq 0 ] && [ "$memcheck_rc" -eq 0 ]
