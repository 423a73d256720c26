#!/bin/bash
# The engine's step time alone and beside busy neighbours (docs/simulator.md, "Control plane"):
# `dilaserve profile` (TP 1, canvases 32 and 64, batches 1 and 8, median of 21 steps) pinned to
# core 0 or free, with a spin loop on the other core, on the same core, one or two unpinned, and
# unpinned neighbours that are busy part of the time (BUSY ms on, IDLE ms asleep: bursty
# control-plane threads). Run it on a quiet machine (nothing else on the cores).
# Usage: tools/engine_contention_probe.sh [OUT_DIR]   env: REPEAT=2 DILASERVE=build/tools/dilaserve
set -u
cd "$(dirname "$0")/.."
bin=${DILASERVE:-$(pwd)/build/tools/dilaserve}
out=${1:-engine-contention}
mkdir -p "$out"
export OPENBLAS_NUM_THREADS=1
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; pids=(); }
trap stop EXIT
prof() { # TAG [taskset prefix]
  $2 "$bin" profile --tp 1 --block 8 --lengths 32,64 --batches 1,8 --reps 21 --out "$out/$1.yaml" > /dev/null 2>&1
  python3 - "$1" "$out/$1.yaml" <<'PY'
import re, sys
tag, f = sys.argv[1:]
v = [re.search(r"kind: (\w+), batch: (\d+), query_rows: \d+, key_rows: (\d+), seconds: ([0-9.e-]+)", l).groups()
     for l in open(f) if "kind: re" in l]
print(f"{tag:<24}", " ".join(f"{k[0][:3]}{k[1]}x{k[2]}={1e3 * float(k[3]):.3f}" for k in v))
PY
}
spin() { $1 bash -c 'while :; do :; done' & pids+=($!); }
duty() { # PREFIX BUSY_MS IDLE_MS
  $1 python3 -c '
import sys, time
busy, idle = float(sys.argv[1]) / 1e3, float(sys.argv[2]) / 1e3
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < busy:
        pass
    time.sleep(idle)' "$2" "$3" & pids+=($!)
}
echo "step times in ms (refresh/reuse, batch x canvas)"
for ((rep = 1; rep <= ${REPEAT:-2}; rep++)); do
  prof alone-pinned "taskset -c 0"
  prof alone-free ""
  spin "taskset -c 1"; sleep 0.5; prof spin-other-core "taskset -c 0"; stop
  spin "taskset -c 0"; sleep 0.5; prof spin-same-core "taskset -c 0"; stop
  spin ""; sleep 0.5; prof free+1spin ""; stop
  spin ""; spin ""; sleep 0.5; prof free+2spin ""; stop
  duty "" 1 1; duty "" 1 1; sleep 0.5; prof free+2x50%-1ms ""; stop
  duty "" 0.2 0.2; duty "" 0.2 0.2; sleep 0.5; prof free+2x50%-0.2ms ""; stop
  for _ in 1 2 3 4; do duty "" 0.2 0.6; done; sleep 0.5; prof free+4x25%-0.2ms ""; stop
  duty "taskset -c 1" 0.2 0.2; sleep 0.5; prof 50%-other-core "taskset -c 0"; stop
done
