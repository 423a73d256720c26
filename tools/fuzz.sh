#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/, clang, ASan + UBSan) in build-fuzz and runs each one for
# SECONDS (default 15), one after another on one core, starting from the committed seeds in fuzz/corpus/NAME.
# Fails on the first crash, sanitizer report, leak, timeout or out-of-memory; the input that
# caused it is left as build-fuzz/findings/NAME/crash-* (or leak-*, timeout-*, oom-*).
# DLS_FUZZ_RUNS=N also stops each harness after N executions (for long campaigns).
# usage: tools/fuzz.sh [SECONDS] [NAME...]     e.g. DLS_FUZZ_RUNS=10000000 tools/fuzz.sh 600 fuzz_canvas
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
seconds="${1:-15}"
case "$seconds" in ''|*[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;; esac
shift || true
build="${DLS_FUZZ_BUILD:-build-fuzz}"

CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDLS_FUZZ=ON -DDLS_WITH_CUDA=OFF -DDLS_NATIVE=OFF >/dev/null
cmake --build "$build" -j2 --target fuzzers

names=("$@")
[ "${#names[@]}" -gt 0 ] || names=(fuzz_cluster_config fuzz_safetensors fuzz_model_config fuzz_tokenizer_json
                                   fuzz_chat_template fuzz_canvas fuzz_kv_wire fuzz_submit_line fuzz_wal fuzz_http_request
                                   fuzz_peer_snapshot)
# A single input taking over 10 s is a hang; 2 GiB RSS is far above any sane parse of a few KB.
# The timeout is wall-clock: a long campaign at nice 19 beside builds is starved for seconds at a
# time, so it may raise it (DLS_FUZZ_INPUT_TIMEOUT_S) rather than report the starvation.
per_input_timeout_s="${DLS_FUZZ_INPUT_TIMEOUT_S:-10}"
rss_limit_mb=2048
# ASan records the stack of every allocation and free in a depot that never shrinks, and with
# its default of 30 frames storing them took a third of fuzz_cluster_config's time after half an
# hour (perf; 28 % at 10 frames). Over its first half hour, beside the same exact CI, the harness
# averaged 1,245 executions a second at 10 frames against 804 at 30. Ten frames still locate an
# allocation in a report; detection itself is unchanged.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:malloc_context_size=10}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
for name in "${names[@]}"; do
  seeds="fuzz/corpus/${name#fuzz_}"
  [ -d "$seeds" ] || { echo "fuzz.sh: no seed corpus $seeds for $name" >&2; exit 2; }
  # New inputs go to a scratch corpus so the committed seeds stay as they are.
  work="$build/corpus/$name"
  findings="$build/findings/$name"
  mkdir -p "$work" "$findings"
  log="$build/findings/$name.log"
  echo "fuzz.sh: $name for ${seconds} s"
  # One plain libFuzzer process is one core; -jobs=1 would only add a supervisor process that
  # writes fuzz-0.log into the current directory.
  if ! "$build/fuzz/$name" -max_total_time="$seconds" -timeout="$per_input_timeout_s" \
       -rss_limit_mb="$rss_limit_mb" -runs="${DLS_FUZZ_RUNS:--1}" -print_final_stats=1 -artifact_prefix="$findings/" \
       "$work" "$seeds" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzz.sh: $name FAILED; the input is in $findings/" >&2
    exit 1
  fi
  grep -E '^stat::number_of_executed_units|^stat::average_exec_per_sec' "$log" | tr '\n' ' '
  echo
done
echo "fuzz.sh: ${#names[@]} harnesses, ${seconds} s each, no finding"
