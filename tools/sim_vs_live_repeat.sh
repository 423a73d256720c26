#!/bin/bash
# How far the live cluster agrees with itself: the same `dilaserve bench` run (policy static,
# the same 781 requests of the Azure code trace, the same capacity) REPEAT times at each load,
# on the one-slot cluster and profile a tools/sim_vs_live.sh run left in RUN_DIR. Per run it
# prints the wall time, the group's steps, engine time, the profile's prediction for the same
# steps, step wall time and policy time (`status` before and after), and the latency figures.
# The spread between runs is the floor under any comparison with the simulator on this machine
# (docs/simulator.md, "Against the live runtime").
#
# Usage: tools/sim_vs_live_repeat.sh RUN_DIR
#   env: LOADS="2.0 0.1" REPEAT=2 DURATION=300 SLO_SCALE=2 TRACE=../shared/traces/azure_llm_2023_code.csv
#        DILASERVE=build/tools/dilaserve
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bin=${DILASERVE:-$root/build/tools/dilaserve}
run=$(cd "${1:?usage: tools/sim_vs_live_repeat.sh RUN_DIR}" && pwd)
loads=${LOADS:-2.0 0.1}
repeat=${REPEAT:-2}
duration=${DURATION:-300}
slo_scale=${SLO_SCALE:-2}
trace=${TRACE:-$root/../shared/traces/azure_llm_2023_code.csv}
[ -f "$trace" ] || trace=$root/configs/sim/traces/azure_llm_2023_code_first400.csv
capacity=$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['capacity_rps'])" "$run/live/bench.json")
out="$run/repeat"
rm -rf "$out"
mkdir -p "$out"
export OPENBLAS_NUM_THREADS=1 DILASERVE_STATE_DIR="$out/state"
"$bin" up "$run/cluster-live.yaml" --slo-scale "$slo_scale" > "$out/up.log"
trap '"$bin" down > /dev/null 2>&1 || true' EXIT
group() {
  "$bin" status --json | python3 -c \
    "import json,sys;g=json.load(sys.stdin)['groups'][0];print(g['steps'],g['engine_s'],g['predicted_s'],g['step_wall_s'],g['policy_s'])"
}
# Warm-up: 50 requests at once, as the bench's own warm-up.
"$bin" bench --trace "$trace" --duration "$duration" --load 1 --capacity "$capacity" --policies static --warmup 50 \
  --slo-scale "$slo_scale" --json > /dev/null
echo "capacity $capacity req/s (from $run/live/bench.json)"
for ((i = 1; i <= repeat; i++)); do
  for load in $loads; do
    a=$(group)
    t0=$(date +%s.%N)
    "$bin" bench --trace "$trace" --duration "$duration" --load "$load" --capacity "$capacity" --policies static \
      --warmup 0 --slo-scale "$slo_scale" --json > "$out/run$i-load$load.json"
    t1=$(date +%s.%N)
    b=$(group)
    python3 - "$load" "$a" "$b" "$t0" "$t1" "$out/run$i-load$load.json" "$i" <<'EOF'
import json, sys
load, a, b, t0, t1, f, i = sys.argv[1:]
d = [float(y) - float(x) for x, y in zip(a.split(), b.split())]
r = json.load(open(f))["results"][0]
print(f"run {i} load {load}: wall {float(t1) - float(t0):.2f} s, steps {d[0]:.0f}, engine {d[1]:.3f} s, "
      f"profile {d[2]:.3f} s, step wall {d[3]:.3f} s, policy {d[4]:.3f} s; SLO {100 * r['slo_attainment']:.1f}%, "
      f"mean {1e3 * r['mean_latency_s']:.1f} ms, p50 {1e3 * r['p50_latency_s']:.1f} ms, p90 {1e3 * r['p90_latency_s']:.1f} ms")
EOF
  done
done | tee "$out/repeat.log"
