#!/usr/bin/env bash
# What the head's write-ahead log costs and how fast a killed head comes back, on this machine.
# 1. Head CPU per request and submit throughput with the log (`head.wal: true`, the default)
#    against without (`head.wal: false`): the shipped model's eval set submitted all at once,
#    REPS times per mode, alternating; one line per run, then the medians.
# 2. Recovery: KILLS times, SIGKILL the head of a running cluster (idle, then with requests in
#    flight) and read from the logs how long until the watchdog's new head listens and until the
#    node has joined it again; then the medians.
#   usage: tools/bench_wal.sh [BUILD_DIR] [REPS] [KILLS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
reps=${2:-5}
kills=${3:-5}
bin=$build/tools/dilaserve
work=$(mktemp -d)
trap 'for s in "$work"/st-*; do [ -d "$s" ] && $bin down --state-dir "$s" >/dev/null 2>&1 || true; done; rm -rf "$work"' EXIT
model=$(pwd)/models/tiny-llada
for mode in wal nowal; do
  sed -e "s#../models/tiny-llada#$model#" -e 's/port: 6390/port: 0/' -e "s#: quality/#: $(pwd)/configs/quality/#" -e 's/port: 8000/port: 0/' \
    -e "s#api_keys_file: local-api-keys#api_keys_file: $(pwd)/configs/local-api-keys#" \
    configs/local.yaml > "$work/$mode.yaml"
  [ "$mode" = nowal ] && sed -i "/^head:/,/^[a-z]/ s/^  port: 0\$/  port: 0\n  wal: false/" "$work/$mode.yaml"
done
grep -q 'wal: false' "$work/nowal.yaml"
ticks=$(getconf CLK_TCK)
cpu_ms() { awk -v t="$ticks" '{print ($14 + $15) * 1000 / t}' "/proc/$1/stat"; }
head_of() { python3 -c "import json,sys;print([p['pid'] for p in json.load(open(sys.argv[1]))['processes'] if p['role']=='head'][0])" "$1/cluster.json"; }
med() { python3 -c "import statistics,sys;print(statistics.median(map(float,sys.argv[1:])))" $1; }
declare -A cpu rps
n=$(wc -l < models/tiny-llada/eval.jsonl)
for ((i = 0; i < reps; ++i)); do
  for mode in wal nowal; do
    st=$work/st-$mode-$i
    $bin up "$work/$mode.yaml" --state-dir "$st" >/dev/null 2>&1
    head=$(head_of "$st")
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
for mode in wal nowal; do
  echo "median $mode: head CPU $(med "${cpu[$mode]}") ms/request, $(med "${rps[$mode]}") req/s"
done

# Recovery. Log lines carry UTC milliseconds; a kill is stamped by the watchdog's line.
st=$work/st-recovery
$bin up "$work/wal.yaml" --state-dir "$st" >/dev/null 2>&1
stamp() { python3 -c "
import datetime,sys
t=datetime.datetime.strptime(sys.argv[1], '%Y-%m-%dT%H:%M:%S.%f')
print(f'{t.timestamp()*1000:.0f}')" "$1"; }
declare restart_ms='' rejoin_ms=''
for ((k = 0; k < kills; ++k)); do
  busy=""
  if ((k % 2 == 1)); then
    # Requests in flight across the kill: the submit reconnects and re-attaches them.
    $bin submit --file models/tiny-llada/eval.jsonl --rate 200 --json --state-dir "$st" > "$work/sub-$k.json" 2>&1 &
    busy=$!
    until $bin status --json --state-dir "$st" 2>/dev/null |
        python3 -c "import json,sys;sys.exit(0 if json.load(sys.stdin)['requests']['in_flight']>=10 else 1)" 2>/dev/null; do
      kill -0 "$busy" 2>/dev/null || break  # it finished before 10 were in flight: an idle kill
    done
    kill -0 "$busy" 2>/dev/null || { wait "$busy"; busy=""; }
  fi
  joins_before=$(grep -c "joined cluster" "$st/logs/node0.log")
  kill -9 "$(head_of "$st")"
  # The node logs one "joined cluster" line per join: wait for the next one.
  until [ "$(grep -c "joined cluster" "$st/logs/node0.log")" -gt "$joins_before" ]; do sleep 0.05; done
  [ -n "$busy" ] && wait "$busy"
  killed=$(grep "restarting it with --recover" "$st/logs/head.log" | tail -1 | cut -c1-23)
  listening=$(grep "recovered cluster" "$st/logs/head.log" | tail -1 | cut -c1-23)
  joined=$(grep "joined cluster" "$st/logs/node0.log" | tail -1 | cut -c1-23)
  r=$(( $(stamp "$listening") - $(stamp "$killed") ))
  j=$(( $(stamp "$joined") - $(stamp "$killed") ))
  extra=""
  [ -n "$busy" ] && extra=", $(python3 -c "import json,sys;s=json.load(open(sys.argv[1]))['summary'];print(f\"{s['ok']}/{s['requests']} answered\")" "$work/sub-$k.json")"
  echo "kill $k ($([ -n "$busy" ] && echo busy || echo idle)): new head listening after $r ms, node joined after $j ms$extra"
  restart_ms+="$r "
  rejoin_ms+="$j "
done
recovered=$(grep "recovered .* requests in flight" "$st/logs/head.log" | sed 's/.*recovered \([0-9]*\) requests.*/\1/' | tr '\n' ' ')
echo "requests recovered per restart: $recovered"
echo "median recovery: head listening $(med "$restart_ms") ms, node joined $(med "$rejoin_ms") ms after the kill"
