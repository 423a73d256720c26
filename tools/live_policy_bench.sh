#!/bin/bash
# The policies side by side on one running cluster: configs/local-2node.yaml (head and two
# nodes on this machine), all eval prompts of the shipped model submitted at once with one SLO,
# each policy in turn (`dilaserve policy set`), REPS rounds; prints the median of each figure.
# Usage: tools/live_policy_bench.sh [SLO_MS...]   (default 500 1000; REPS=3,
#        POLICIES="static deadline dilaserve", DLS_BIN=path of the dilaserve binary)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="${DLS_BIN:-$root/build/tools/dilaserve}"
out=$(mktemp -d /tmp/dls-live-bench-XXXXXX)
trap '"$bin" down --state-dir "$out/state" > /dev/null 2>&1 || true; rm -rf "$out"' EXIT
reps=${REPS:-3}
slos=("$@"); [ ${#slos[@]} -eq 0 ] && slos=(500 1000)
sed -e "s|path: ../models/tiny-llada|path: $root/models/tiny-llada|" \
    -e "s|quality: quality/|quality: $root/configs/quality/|" \
    -e 's/^  port: 6391/  port: 0/' "$root/configs/local-2node.yaml" > "$out/cluster.yaml"
python3 - "$root/models/tiny-llada/eval.jsonl" "$out/prompts.jsonl" <<'PY'
import json, sys
with open(sys.argv[2], "w") as f:
    for line in open(sys.argv[1]):
        p = json.loads(line)
        f.write(json.dumps({"prompt": p["prompt"], "valid": p.get("valid", [p.get("answer")])}) + "\n")
PY
export OPENBLAS_NUM_THREADS=1
"$bin" up "$out/cluster.yaml" --state-dir "$out/state" > "$out/up.log"
# Steps of all groups together, from the cluster's status.
group_steps() {
  "$bin" status --json --state-dir "$out/state" | python3 -c 'import json,sys; print(sum(g.get("steps",0) for g in json.load(sys.stdin)["groups"]))'
}
printf "%-8s %-10s %10s %12s %12s %10s %8s %8s\n" slo_ms policy attain mean_ms p50_ms accuracy tok/step steps
for slo in "${slos[@]}"; do
  for p in ${POLICIES:-static deadline dilaserve}; do
    "$bin" policy set "$p" --state-dir "$out/state" > /dev/null
    for r in $(seq "$reps"); do
      before=$(group_steps)
      "$bin" submit --file "$out/prompts.jsonl" --slo-ms "$slo" --state-dir "$out/state" --json --timeout 300 \
        > "$out/run-$slo-$p-$r.json"
      echo $(( $(group_steps) - before )) > "$out/steps-$slo-$p-$r"
    done
    python3 - "$slo" "$p" "$out"/run-"$slo"-"$p"-*.json <<'PY'
import json, statistics, sys
slo, policy, files = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = []
for f in files:
    j = json.load(open(f))
    steps = int(open(f.replace("/run-", "/steps-")[:-len(".json")]).read())
    lat = [r["latency_ms"] for r in j["results"]]
    s = j["summary"]
    rows.append((s["slo_attainment"], sum(lat) / len(lat), s["latency_p50_ms"], s["accuracy"], s["tokens_per_step"], steps))
m = [statistics.median(c) for c in zip(*rows)]
print(f"{slo:<8} {policy:<10} {m[0]:10.3f} {m[1]:12.1f} {m[2]:12.1f} {m[3]:10.4f} {m[4]:8.2f} {m[5]:8.0f}")
PY
  done
done
