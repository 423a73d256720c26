#!/usr/bin/env bash
# Head CPU per request and throughput with mutual TLS against plain TCP, side by side on the
# same machine: the shipped model's eval set submitted all at once, REPS times per transport,
# alternating. Prints one line per run and the medians.
#   usage: tools/bench_transport.sh [BUILD_DIR] [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
reps=${2:-5}
bin=$build/tools/dilaserve
work=$(mktemp -d)
trap 'for s in "$work"/st-*; do [ -d "$s" ] && $bin down --state-dir "$s" >/dev/null 2>&1 || true; done; rm -rf "$work"' EXIT
model=$(pwd)/models/tiny-llada
for mode in tls plain; do
  sed -e "s#../models/tiny-llada#$model#" -e 's/port: 6390/port: 0/' -e "s#: quality/#: $(pwd)/configs/quality/#" -e 's/port: 8000/port: 0/' \
    -e "s#api_keys_file: local-api-keys#api_keys_file: $(pwd)/configs/local-api-keys#" \
    configs/local.yaml > "$work/$mode.yaml"
  [ "$mode" = plain ] && sed -i 's/^  token: \(.*\)$/  token: \1\n  insecure: true/' "$work/$mode.yaml"
done
ticks=$(getconf CLK_TCK)
cpu_ms() { awk -v t="$ticks" '{print ($14 + $15) * 1000 / t}' "/proc/$1/stat"; }
declare -A cpu rps
for ((i = 0; i < reps; ++i)); do
  for mode in tls plain; do
    st=$work/st-$mode-$i
    $bin up "$work/$mode.yaml" --state-dir "$st" >/dev/null 2>&1
    head=$(python3 -c "import json,sys;print([p['pid'] for p in json.load(open(sys.argv[1]))['processes'] if p['role']=='head'][0])" "$st/cluster.json")
    n=$(wc -l < models/tiny-llada/eval.jsonl)
    c0=$(cpu_ms "$head")
    out=$($bin submit --file models/tiny-llada/eval.jsonl --json --state-dir "$st")
    c1=$(cpu_ms "$head")
    $bin down --state-dir "$st" >/dev/null
    per=$(python3 -c "print(f'{($c1 - $c0) / $n:.3f}')")
    thr=$(printf '%s' "$out" | python3 -c "import json,sys;print(f\"{json.load(sys.stdin)['summary']['throughput_rps']:.0f}\")")
    echo "run $i $mode: head CPU $per ms/request, $thr req/s ($n requests)"
    cpu[$mode]+="$per "
    rps[$mode]+="$thr "
  done
done
med() { python3 -c "import statistics,sys;print(statistics.median(map(float,sys.argv[1:])))" $1; }
for mode in tls plain; do
  echo "median $mode: head CPU $(med "${cpu[$mode]}") ms/request, $(med "${rps[$mode]}") req/s"
done
