#!/usr/bin/env bash
# Head CPU per request, side by side for one or more dilaserve binaries (say, before and after
# a change): the shipped model's eval set (REQS requests, repeated as needed) submitted at once
# to configs/local.yaml (mutual TLS and the write-ahead log on, as shipped), REPS runs per
# binary, alternating. Head CPU is utime + stime from /proc/PID/stat around the submit. Prints
# every run, then per binary the median and the submits per second one core of head CPU would
# sustain at that cost (1000 / median ms): the node, not the head, bounds what this machine
# serves, so that rate is derived, not observed.
#   usage: tools/bench_head_cpu.sh REPS REQS BIN [BIN...]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=$1 reqs=$2
shift 2
work=$(mktemp -d)
trap 'for s in "$work"/st-*; do [ -d "$s" ] && "$1" down --state-dir "$s" >/dev/null 2>&1 || true; done; rm -rf "$work"' EXIT
model=$(pwd)/models/tiny-llada
sed -e "s#../models/tiny-llada#$model#" -e 's/port: 6390/port: 0/' -e "s#: quality/#: $(pwd)/configs/quality/#" \
  -e 's/port: 8000/port: 0/' -e "s#api_keys_file: local-api-keys#api_keys_file: $(pwd)/configs/local-api-keys#" \
  configs/local.yaml > "$work/local.yaml"
n_eval=$(wc -l < models/tiny-llada/eval.jsonl)
: > "$work/load.jsonl"
while [ "$(wc -l < "$work/load.jsonl")" -lt "$reqs" ]; do cat models/tiny-llada/eval.jsonl >> "$work/load.jsonl"; done
head -n "$reqs" "$work/load.jsonl" > "$work/reqs.jsonl"
ticks=$(getconf CLK_TCK)
cpu_ms() { awk -v t="$ticks" '{print ($14 + $15) * 1000 / t}' "/proc/$1/stat"; }
declare -A cpu
for ((i = 0; i < reps; ++i)); do
  for bin in "$@"; do
    st=$work/st-$i-$(echo "$bin" | md5sum | cut -c1-8)
    "$bin" up "$work/local.yaml" --state-dir "$st" >/dev/null 2>&1
    head_pid=$(python3 -c "import json,sys;print([p['pid'] for p in json.load(open(sys.argv[1]))['processes'] if p['role']=='head'][0])" "$st/cluster.json")
    c0=$(cpu_ms "$head_pid")
    out=$("$bin" submit --file "$work/reqs.jsonl" --json --state-dir "$st")
    c1=$(cpu_ms "$head_pid")
    "$bin" down --state-dir "$st" >/dev/null
    failed=$(printf '%s' "$out" | python3 -c "import json,sys;print(json.load(sys.stdin)['summary']['failed'])")
    per=$(python3 -c "print(f'{($c1 - $c0) / $reqs:.3f}')")
    echo "run $i $bin: head CPU $per ms/request ($reqs requests, $failed failed)"
    cpu[$bin]+="$per "
  done
done
for bin in "$@"; do
  python3 - "$bin" ${cpu[$bin]} <<'PY'
import statistics, sys
v = list(map(float, sys.argv[2:]))
m = statistics.median(v)
print(f"median {sys.argv[1]}: head CPU {m:.3f} ms/request -> {1000 / m:.0f} submits/s per core of head CPU")
PY
done
echo "($n_eval eval prompts, repeated to $reqs requests)"
