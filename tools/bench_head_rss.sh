#!/usr/bin/env bash
# Head memory per request served: starts configs/local.yaml (ports 0, its own state dir),
# submits BATCHES batches of BATCH requests one batch after the other, and prints the head's
# RSS and directory rows after each. The growth from the first batch to the last, divided
# by the requests in between, is the head's memory per request (the first batch also pays
# for warm-up and for BATCH requests in flight at once).
#
#   tools/bench_head_rss.sh [BATCHES] [BATCH] [KEEP]
# KEEP: retention.finished_requests (default 1000); "none" omits the retention key (for a
# binary that predates it). DILASERVE selects the binary (default build/tools/dilaserve).
set -euo pipefail
cd "$(dirname "$0")/.."
batches=${1:-6}
batch=${2:-1000}
keep=${3:-1000}
bin=${DILASERVE:-build/tools/dilaserve}
work=$(mktemp -d)
state="$work/state"
cleanup() { "$bin" down --state-dir "$state" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

# The copy lives elsewhere, so paths relative to configs/ are made absolute.
sed -e 's/port: 6390/port: 0/' -e "s|path: ../models/tiny-llada.*|path: $PWD/models/tiny-llada|" \
  -e "s,^\(  *\)\(quality\|profile\): \([^/ ][^ ]*\),\1\2: $PWD/configs/\3," \
  configs/local.yaml > "$work/cluster.yaml"
if [ "$keep" != none ]; then
  printf 'retention:\n  finished_requests: %s\n  finished_age_s: 0\n' "$keep" >> "$work/cluster.yaml"
fi
python3 - "$batch" "$work/prompts.jsonl" <<'PY'
import itertools, json, sys
n, out = int(sys.argv[1]), sys.argv[2]
rows = [json.loads(l) for l in open("models/tiny-llada/eval.jsonl")]
with open(out, "w") as f:
    for r in itertools.islice(itertools.cycle(rows), n):
        f.write(json.dumps({"prompt": r["prompt"]}) + "\n")
PY
"$bin" up "$work/cluster.yaml" --state-dir "$state" >/dev/null
head_pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["processes"][0]["pid"])' "$state/cluster.json")
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$head_pid/status"; }
echo "binary $bin, retention ${keep}, $batches x $batch requests"
printf '%8s %10s %12s %10s\n' batch served head_rss_kb dir_rows
first=""
for b in $(seq 1 "$batches"); do
  "$bin" submit --state-dir "$state" --file "$work/prompts.jsonl" --json --timeout 600 >/dev/null
  rows=$("$bin" actors --state-dir "$state" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
  rss=$(rss_kb)
  [ -z "$first" ] && first=$rss
  printf '%8d %10d %12d %10d\n' "$b" $((b * batch)) "$rss" "$rows"
done
served=$(( (batches - 1) * batch ))
python3 -c "import sys; f,l,n=map(int,sys.argv[1:]); print(f'head RSS growth after the first batch: {l-f} KB over {n} requests = {1024*(l-f)/n:.0f} bytes/request')" \
  "$first" "$rss" "$served"
