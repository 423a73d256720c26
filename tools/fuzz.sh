#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/, clang, ASan + UBSan) in the sanitizer tree build-fuzz
# (tools/sanitizer_build.sh) and runs each one for SECONDS (default 15), one after another on one
# core, starting from the committed seeds in fuzz/corpus/NAME.
# Fails on the first crash, sanitizer report, leak, timeout or out-of-memory; the input that
# caused it is left as build-fuzz/findings/NAME/crash-* (or leak-*, timeout-*, oom-*).
# DLS_FUZZ_RUNS=N also stops each harness after N executions (for long campaigns).
# DLS_FUZZ_JOBS=N runs N harnesses at once, each still one process on one core (default 1; CI
# passes the core count, as nothing else runs beside it there).
# usage: tools/fuzz.sh [SECONDS] [NAME...]     e.g. DLS_FUZZ_RUNS=10000000 tools/fuzz.sh 600 fuzz_canvas
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
seconds="${1:-15}"
case "$seconds" in ''|*[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;; esac
shift || true
build="${DLS_FUZZ_BUILD:-build-fuzz}"
jobs="${DLS_FUZZ_JOBS:-1}"
case "$jobs" in ''|*[!0-9]*|0) echo "fuzz.sh: DLS_FUZZ_JOBS must be a whole number ≥ 1, got '$jobs'" >&2; exit 2 ;; esac

DLS_FUZZ_BUILD="$build" bash tools/sanitizer_build.sh fuzzers

names=("$@")
[ "${#names[@]}" -gt 0 ] || names=(fuzz_cluster_config fuzz_safetensors fuzz_model_config fuzz_tokenizer_json
                                   fuzz_chat_template fuzz_canvas fuzz_kv_wire fuzz_submit_line fuzz_wal fuzz_http_request
                                   fuzz_peer_snapshot fuzz_ucx_frame fuzz_ucx_seal)
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
# One harness from its seeds; returns non-zero on a finding, with the log's tail on stderr.
fuzz_one() {
  local name="$1"
  local seeds="fuzz/corpus/${name#fuzz_}"
  # New inputs go to a scratch corpus so the committed seeds stay as they are.
  local work="$build/corpus/$name"
  local findings="$build/findings/$name"
  mkdir -p "$work" "$findings"
  local log="$build/findings/$name.log"
  # One plain libFuzzer process is one core; -jobs=1 would only add a supervisor process that
  # writes fuzz-0.log into the current directory.
  if ! "$build/fuzz/$name" -max_total_time="$seconds" -timeout="$per_input_timeout_s" \
       -rss_limit_mb="$rss_limit_mb" -runs="${DLS_FUZZ_RUNS:--1}" -print_final_stats=1 -artifact_prefix="$findings/" \
       "$work" "$seeds" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzz.sh: $name FAILED; the input is in $findings/" >&2
    return 1
  fi
  echo "fuzz.sh: $name, ${seconds} s: $(grep -E '^stat::number_of_executed_units|^stat::average_exec_per_sec' "$log" | tr '\n' ' ')"
}

for name in "${names[@]}"; do
  [ -d "fuzz/corpus/${name#fuzz_}" ] || { echo "fuzz.sh: no seed corpus fuzz/corpus/${name#fuzz_} for $name" >&2; exit 2; }
done
# At most $jobs harnesses at a time; after a finding no other starts, and those running finish.
failed=0
running=0
for name in "${names[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
    [ "$failed" -eq 0 ] || break
  fi
  fuzz_one "$name" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
[ "$failed" -eq 0 ] || exit 1
echo "fuzz.sh: ${#names[@]} harnesses, ${seconds} s each, $jobs at a time, no finding"
