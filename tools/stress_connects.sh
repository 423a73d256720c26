#!/usr/bin/env bash
# Usage: tools/stress_connects.sh DILASERVE_BINARY N_STATUS [PARALLEL_LOOPS]
# The one-slot cluster of test_runtime_policy, 600 lax requests in the background, then N
# `status` calls back to back (each a new process and connection); counts the ones that fail.
set -u
DLS=$1; N=$2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d /tmp/dls-stress.XXXXXX)
# The one-slot cluster of test_runtime_policy (the YAML schema: docs/config.md).
cat > "$W/c.yaml" <<EOF
name: stress
auth: {token: stress-token-$$}
head: {host: 127.0.0.1, port: 0}
nodes: [{name: node0, host: 127.0.0.1, devices: {kind: cpu, count: 1}, groups: [1]}]
model: {path: $ROOT/models/tiny-llada}
engine: {gen_length: 48, block_length: 8, commit: quota, threshold: 0.9, cache: dual, refresh_interval: 4, max_batch: 1}
scheduler: {policy: deadline, quality: $ROOT/configs/quality/tiny-llada.json}
EOF
python3 - "$ROOT" "$W" <<'PY'
import json, sys
root, w = sys.argv[1], sys.argv[2]
with open(f"{w}/lax.jsonl", "w") as f:
    for i, l in enumerate(open(f"{root}/models/tiny-llada/eval.jsonl")):
        if i == 600: break
        f.write(json.dumps({"prompt": json.loads(l)["prompt"], "slo_ms": 3600000}) + "\n")
PY
$DLS up $W/c.yaml --state-dir $W/state > $W/up.log 2>&1 || { echo "up failed"; tail -3 $W/up.log; exit 2; }
$DLS submit --file $W/lax.jsonl --json --timeout 300 --state-dir $W/state > $W/sub.json 2> $W/sub.err &
sub=$!
P=${3:-1}
loop() {
  local f=0
  for i in $(seq 1 $N); do
    if ! timeout 30 $DLS status --json --state-dir $W/state > /dev/null 2> $W/st$1.err; then
      f=$((f+1)); echo "status $1/$i failed: $(tail -1 $W/st$1.err)"
    fi
  done
  echo "loop $1 failed $f"
}
pids=()
for j in $(seq 1 $P); do loop $j & pids+=($!); done
wait "${pids[@]}"
kill $sub 2>/dev/null; wait $sub 2>/dev/null
echo "sender-less hellos at the gate: $(grep -c "without a sender" $W/state/logs/head.log)"
$DLS down --state-dir $W/state > /dev/null 2>&1
echo "done: $P loops of $N"
rm -rf "$W"
