#!/usr/bin/env bash
# Where a live trace replay's time goes, on the one-slot cluster of tools/sim_vs_live.sh
# (configs/local.yaml with one CPU device and one TP = 1 group): per `dilaserve bench` run
# (policy static unless POLICIES says otherwise, the same capacity for every run), the wall
# time, the group's steps, their wall and engine time, the time the group held requests with
# no step in flight (`idle_with_work_s`), its decisions' time, and the CPU seconds of the head,
# the node and the bench client. What is left of the wall time once the steps and the group's
# idle-with-work time are taken out is time in which the group had nothing to step; beside
# it, the idle time the arrivals alone force on a work-conserving server with the same step time.
#   usage: tools/live_time_split.sh OUT_DIR
#   env: LOADS="1.0 0.3" REPEAT=2 POLICIES=static DURATION=300 TRACE=../shared/traces/azure_llm_2023_code.csv
#        DILASERVE=build/tools/dilaserve
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bin=${DILASERVE:-$root/build/tools/dilaserve}
out=${1:?usage: tools/live_time_split.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -rf "$out/state"
trace=${TRACE:-$root/../shared/traces/azure_llm_2023_code.csv}
[ -f "$trace" ] || trace=$root/configs/sim/traces/azure_llm_2023_code_first400.csv
duration=${DURATION:-300}
repeat=${REPEAT:-2}
export OPENBLAS_NUM_THREADS=1 DILASERVE_STATE_DIR="$out/state"
sed -e 's/devices: {kind: cpu, count: 2}/devices: {kind: cpu, count: 1}/' \
    -e 's/^    groups: \[2\].*/    groups: [1]/' \
    -e "s|path: ../models/tiny-llada|path: $root/models/tiny-llada|" \
    -e "s|quality: quality/|quality: $root/configs/quality/|" \
    -e "s|api_keys_file: local-api-keys|api_keys_file: $root/configs/local-api-keys|" \
    -e 's/^  port: 6390/  port: 0/' configs/local.yaml > "$out/cluster.yaml"
grep -q 'count: 1}' "$out/cluster.yaml" && grep -q 'groups: \[1\]' "$out/cluster.yaml" ||
  { echo "live_time_split: configs/local.yaml changed shape" >&2; exit 1; }
"$bin" up "$out/cluster.yaml" --slo-scale 2 > "$out/up.log"
trap '"$bin" down > /dev/null 2>&1 || true' EXIT
pid_of() {
  python3 -c "import json,sys;print([p['pid'] for p in json.load(open(sys.argv[1]))['processes'] if p['role']==sys.argv[2]][0])" \
    "$out/state/cluster.json" "$1"
}
cpu_s() { awk '{print ($14 + $15) / 100}' "/proc/$1/stat"; }  # utime + stime, 10 ms ticks
head_pid=$(pid_of head)
node_pid=$(pid_of node)
group() {
  "$bin" status --json | python3 -c \
    "import json,sys;g=json.load(sys.stdin)['groups'][0];print(g['steps'],g['step_wall_s'],g['engine_s'],g['idle_with_work_s'],g['policy_s'])"
}
# Warm-up, which also measures the capacity every run below is scaled to.
"$bin" bench --trace "$trace" --duration "$duration" --load 1 --policies static --warmup 50 --slo-scale 2 \
  > "$out/warmup.txt" 2>&1
capacity=$(grep -o 'capacity [0-9][0-9.]*' "$out/warmup.txt" | head -1 | cut -d' ' -f2)
[ -n "$capacity" ] || { echo "live_time_split: no capacity in $out/warmup.txt" >&2; exit 1; }
echo "capacity $capacity req/s"
for ((i = 1; i <= repeat; i++)); do
  for policy in ${POLICIES:-static}; do
    for load in ${LOADS:-1.0 0.3}; do
      a=$(group) h0=$(cpu_s "$head_pid") n0=$(cpu_s "$node_pid") t0=$(date +%s.%N)
      /usr/bin/time -f "%U %S" -o "$out/client-time.txt" "$bin" bench --trace "$trace" --duration "$duration" \
        --load "$load" --capacity "$capacity" --policies "$policy" --warmup 0 --slo-scale 2 --json \
        > "$out/run$i-$policy-$load.json"
      t1=$(date +%s.%N) h1=$(cpu_s "$head_pid") n1=$(cpu_s "$node_pid") b=$(group)
      python3 - "$a" "$b" "$t0" "$t1" "$h0" "$h1" "$n0" "$n1" "$(cat "$out/client-time.txt")" \
        "$out/run$i-$policy-$load.json" "$policy" "$load" "$i" "$trace" "$duration" "$capacity" <<'PY'
import csv, datetime, json, sys
a, b, t0, t1, h0, h1, n0, n1, client, f, policy, load, i, trace, duration, capacity = sys.argv[1:]
steps, wall_steps, engine, idle, pol = [float(y) - float(x) for x, y in zip(a.split(), b.split())]
wall = float(t1) - float(t0)
r = json.load(open(f))["results"][0]
u, s = (float(x) for x in client.split())
# The arrivals as the bench scales them ((n - 1) / span = load x capacity), and the time a
# work-conserving server would have nothing to do on them if this run's step time were spread
# evenly over its requests: the idle time the trace's own gaps and late bursts force.
rows = list(csv.reader(open(trace)))[1:]
at = [datetime.datetime.fromisoformat(x[0].strip()[:26]) for x in rows]
t = [(x - at[0]).total_seconds() for x in at]
t = [x for x in t if x < float(duration)]
k = (len(t) - 1) / (t[-1] - t[0]) / (float(load) * float(capacity))
w = wall_steps / len(t)
finish = max(k * (t[j] - t[0]) + w * (len(t) - j) for j in range(len(t)))
forced = finish - wall_steps
print(f"run {i} {policy} load {load}: wall {wall:.2f} s, steps {steps:.0f} ({wall_steps:.3f} s, engine {engine:.3f} s), "
      f"idle with work {idle:.3f} s, nothing to step {wall - wall_steps - idle:.2f} s (the arrivals force {forced:.2f} s), "
      f"decisions {pol:.3f} s; "
      f"CPU head {float(h1) - float(h0):.2f} s, node {float(n1) - float(n0):.2f} s, client {u + s:.2f} s; "
      f"SLO {100 * r['slo_attainment']:.1f} %, mean {1e3 * r['mean_latency_s']:.1f} ms")
PY
    done
  done
done | tee "$out/split.log"
