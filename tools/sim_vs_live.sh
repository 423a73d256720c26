#!/bin/bash
# The simulator against the live runtime on the same requests (DESIGN.md section 5).
#
# 1. `dilaserve profile` measures this machine's engine steps (TP 1, the canvas lengths below);
# 2. a live cluster (configs/local.yaml with ONE device slot, so the head, the node's actors
#    and the client have the other core) serves N prompts of the shipped eval set at each
#    rate, open loop, with `dilaserve submit --rate`;
# 3. `dilaserve sim` replays the same arrivals (evenly spaced at the rate, as submit sends
#    them) with the same answer lengths on a one-device cluster file that uses that profile,
#    policy `static` (FCFS and a fixed tau, which is what the live group's step loop does).
# The simulator's tokens per step is the live run's (committed tokens / steps at the lowest
# rate), so the comparison isolates the timing: step costs, batching and queueing.
#
# Usage: tools/sim_vs_live.sh [OUT_DIR]   (env: RATES="50 100 200 300", N=300, DILASERVE=...)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bin=${DILASERVE:-$root/build/tools/dilaserve}
out=${1:-sim-vs-live}
rates=${RATES:-50 100 200 300}
n=${N:-300}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export OPENBLAS_NUM_THREADS=1 DILASERVE_STATE_DIR="$out/state"

sed -e 's/devices: {kind: cpu, count: 2}/devices: {kind: cpu, count: 1}/' \
    -e 's/^    groups: \[2\].*/    groups: [1]/' \
    -e "s|path: ../models/tiny-llada|path: $root/models/tiny-llada|" \
    -e "s|quality: quality/|quality: $root/configs/quality/|" \
    -e 's/^  port: 6390/  port: 0/' configs/local.yaml > "$out/cluster-live.yaml"
grep -q 'count: 1}' "$out/cluster-live.yaml" && grep -q 'groups: \[1\]' "$out/cluster-live.yaml" &&
  grep -q 'port: 0' "$out/cluster-live.yaml" || { echo "sim_vs_live: configs/local.yaml changed shape" >&2; exit 1; }
head -n "$n" models/tiny-llada/eval.jsonl |
  python3 -c 'import sys, json; [print(json.dumps({"prompt": json.loads(l)["prompt"]})) for l in sys.stdin]' \
  > "$out/prompts.jsonl"

echo "== profile (engine steps of this machine)"
"$bin" profile --tp 1 --lengths 24,32 --batches 1,2,4,8 --reps 9 --out "$out/cpu.yaml"

echo "== live: $n requests per rate"
"$bin" up "$out/cluster-live.yaml" > "$out/up.log"
trap '"$bin" down > /dev/null 2>&1 || true' EXIT
for r in $rates; do
  "$bin" submit --file "$out/prompts.jsonl" --rate "$r" --timeout 300 --json > "$out/live_$r.json"
done
"$bin" down > /dev/null
trap - EXIT

echo "== simulator: the same arrivals and answer lengths"
python3 - "$out" $rates <<'EOF'
import json, sys
out, rates = sys.argv[1], [int(r) for r in sys.argv[2:]]
live = {r: json.load(open(f"{out}/live_{r}.json"))["results"] for r in rates}
low = live[rates[0]]
tps = sum(x["tokens"] for x in low) / sum(x["steps"] for x in low)
with open(f"{out}/quality.yaml", "w") as f:
    f.write(f"source: live run at {rates[0]} req/s, committed tokens / steps (sim_vs_live.sh)\n"
            f"points:\n  - {{tau: 0.9, accuracy: 1.0, tokens_per_step: {tps:.4f}}}\n")
with open(f"{out}/cluster-sim.yaml", "w") as f:
    f.write("name: local-cpu-1slot\n"
            "engine: {block_length: 8, threshold: 0.9, max_batch: 8}\nmax_canvas: 64\n"
            "nodes:\n  - {name: cpu, devices: {kind: cpu, count: 1}, groups: [1]}\n"
            "scheduler: {profile: cpu.yaml, quality: quality.yaml, token_budget: 8192, max_active: 64, tau_min: 0.9}\n")
for r in rates:
    with open(f"{out}/trace_{r}.csv", "w") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for i, x in enumerate(live[r]):
            f.write(f"{i / r:.6f},{len(x['prompt'])},{x['tokens']}\n")
EOF
printf "%6s | %26s | %26s | %s\n" "rate" "live mean / p50 / p99 ms" "sim mean / p50 / p99 ms" "live - sim (mean)"
for r in $rates; do
  "$bin" sim --cluster "$out/cluster-sim.yaml" --trace "$out/trace_$r.csv" --rate "$r" --load 1 \
    --slo-scale 2 --policies static --json > "$out/sim_$r.json"
  python3 - "$out/live_$r.json" "$out/sim_$r.json" "$r" <<'EOF'
import json, statistics, sys
live = json.load(open(sys.argv[1]))
lat = sorted(x["latency_ms"] for x in live["results"])
lm = statistics.mean(lat)
s = json.load(open(sys.argv[2]))["results"][0]
sm, sp50, sp99 = 1e3 * s["mean_latency_s"], 1e3 * s["p50_latency_s"], 1e3 * s["p99_latency_s"]
print(f"{sys.argv[3]:>6} | {lm:8.2f} {live['summary']['latency_p50_ms']:8.2f} {live['summary']['latency_p99_ms']:8.2f} |"
      f" {sm:8.2f} {sp50:8.2f} {sp99:8.2f} | {lm - sm:+.2f} ms ({lm / sm:.2f}x)")
EOF
done
