#!/usr/bin/env bash
# Fault suite: a two-node cluster serves a replay of the shipped model's eval prompts at the
# Azure trace's arrival times while one fault is injected, and every request's outcome is
# counted (accepted, answered, explicitly failed, lost). One fresh cluster per fault.
#
#   tools/chaos.sh [--short] [--cases LIST] [--rate R] [--dead-after-ms MS] [--build DIR] [--out DIR]
#
# --short runs the partition case alone (CTest's `chaos` label). Heartbeats are the cluster
# file's defaults (every 500 ms, DEAD after 3000 ms) unless --dead-after-ms is given.
# node1 runs in a network namespace of its own, joined to the head over a veth pair that this
# script creates (addresses only on those two interfaces) and removes at the end, also on
# failure. Needs root. Exit status: 0 every case met its target, 1 some case did not,
# 2 setup error, 77 skipped (not root, no network namespaces).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build
OUT=
RATE=20
SHORT=0
CASES=
DEAD_AFTER_MS=
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --short) SHORT=1 ;;
    --cases) CASES=$2; shift ;;
    --rate) RATE=$2; shift ;;
    --dead-after-ms) DEAD_AFTER_MS=$2; shift ;;
    --build) BUILD=$2; shift ;;
    --out) OUT=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "chaos: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
ALL_CASES="node-kill node-stop head-kill-restart head-stop partition slow-link"
[ -n "$CASES" ] || { [ $SHORT = 1 ] && CASES="partition" || CASES=$ALL_CASES; }
for c in $CASES; do
  case " $ALL_CASES " in *" $c "*) ;; *) echo "chaos: unknown case '$c' (known: $ALL_CASES)" >&2; exit 2 ;; esac
done
DLS=$BUILD/tools/dilaserve
[ -x "$DLS" ] || { echo "chaos: $DLS not built (cmake --build $BUILD --target dilaserve)" >&2; exit 2; }

skip() { echo "chaos: skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces and veth pairs (CI runs as root)"
command -v ip >/dev/null || skip "no 'ip' command (install iproute2)"

# -- durations (seconds) ------------------------------------------------------------------
FAULT_S=10          # how long a partition, a stopped process or a slow link lasts
HEAD_STOP_S=5       # a stopped head: past the nodes' BASP timeout (dead_after + 1 s = 4 s)
LOAD_S=30           # the replay; the fault starts once requests are being answered
GRACE_S=30          # after the last send, how long an unanswered request may still take
REJOIN_S=30         # after the heal and the replay, how long the nodes may take to register again
                    # (a heartbeat grace and a join: runs measured 0.03-0.6 s)
BURST_N=240         # requests in the burst before a node fault (about 1-2 s of queued work here)
[ $SHORT = 1 ] && LOAD_S=22

[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/dls-chaos.XXXXXX)
mkdir -p "$OUT"
RESULTS=$OUT/results.jsonl
: > "$RESULTS"
NS=dlsc$$n1                 # node1's namespace
VH=dlsc$$h                  # the veth end in the head's (root) namespace
VN=dlsc$$n                  # the end inside $NS
SUB=$(( $$ % 200 + 20 ))
HEAD_IP=10.213.$SUB.1
NODE_IP=10.213.$SUB.2
EXTRA_PIDS=()               # processes this script started outside `up` (a restarted node)
STATE=

log() { printf '%s chaos: %s\n' "$(date -u +%H:%M:%S)" "$*"; }
now() { date +%s.%N; }

stop_cluster() {
  [ -n "$STATE" ] || return 0
  if [ -f "$STATE/cluster.json" ]; then
    # A stopped process cannot hear `down`.
    for pid in $(python3 -c 'import json,sys; [print(p["pid"]) for p in json.load(open(sys.argv[1]))["processes"]]' \
                   "$STATE/cluster.json" 2>/dev/null); do kill -CONT "$pid" 2>/dev/null; done
    timeout 60 "$DLS" down --state-dir "$STATE" > "$STATE/down.log" 2>&1 || log "down: $(tail -1 "$STATE/down.log")"
  fi
  # Only while the pid is still one of ours (a child of this shell running dilaserve or timeout).
  for pid in "${EXTRA_PIDS[@]}"; do
    if [ "$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ')" = "$$" ]; then
      kill -CONT "$pid" 2>/dev/null; kill -TERM "$pid" 2>/dev/null  # `timeout` passes TERM on to its command
      for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null
  done
  EXTRA_PIDS=()
  STATE=
}
cleanup() {
  stop_cluster
  ip netns del "$NS" 2>/dev/null
  ip link del "$VH" 2>/dev/null
  return 0
}
trap cleanup EXIT
trap 'exit 2' INT TERM

# -- the network ----------------------------------------------------------------------------
if ! ip netns add "$NS" 2>"$OUT/netns.err"; then
  skip "cannot create a network namespace: $(head -1 "$OUT/netns.err")"
fi
if ! ip link add "$VH" type veth peer name "$VN" 2>"$OUT/veth.err"; then
  skip "cannot create a veth pair: $(head -1 "$OUT/veth.err")"
fi
ip link set "$VN" netns "$NS" &&
  ip addr add "$HEAD_IP/30" dev "$VH" && ip link set "$VH" up &&
  ip -n "$NS" addr add "$NODE_IP/30" dev "$VN" && ip -n "$NS" link set "$VN" up && ip -n "$NS" link set lo up ||
  { echo "chaos: cannot configure the veth pair" >&2; exit 2; }
# The slow link: netem delay when the kernel has it, else a tbf rate limit (sch_netem is a module
# some kernels, such as this VM's, do not ship).
SLOW_KIND=none
if ip netns exec "$NS" tc qdisc add dev "$VN" root netem delay 1ms 2>"$OUT/netem.err"; then
  SLOW_KIND=netem
elif ip netns exec "$NS" tc qdisc add dev "$VN" root tbf rate 1mbit burst 16kb latency 100ms 2>"$OUT/tbf.err"; then
  SLOW_KIND=tbf
fi
ip netns exec "$NS" tc qdisc del dev "$VN" root 2>/dev/null
log "namespace $NS: node1 at $NODE_IP, head at $HEAD_IP ($VH); slow link by ${SLOW_KIND}$(
  [ $SLOW_KIND = netem ] || echo " (netem: $(head -1 "$OUT/netem.err"))")"

# -- the cluster file and the load ----------------------------------------------------------
CFG=$OUT/chaos-2node.yaml
cat > "$CFG" <<EOF
# configs/local-2node.yaml with node1 behind the veth pair.
name: chaos-2node
auth:
  token: chaos-token-$$-$RANDOM
head:
  host: $HEAD_IP
  port: 0
nodes:
  - name: node0
    host: 127.0.0.1
    devices: {kind: cpu, count: 2}
    groups: [2]
  - name: node1
    host: $NODE_IP
    devices: {kind: cpu, count: 2}
    groups: [1, 1]
model:
  path: $ROOT/models/tiny-llada
engine: {gen_length: 16, block_length: 8, commit: threshold, threshold: 0.9, cache: dual, refresh_interval: 4, max_batch: 8}
scheduler: {policy: static, quality: $ROOT/configs/quality/tiny-llada.json}
launch:
  command: "ip netns exec $NS {command}"
caf:
  scheduler: {policy: sharing, max-threads: 2}
EOF
[ -z "$DEAD_AFTER_MS" ] || echo "heartbeat: {interval_ms: 500, dead_after_ms: $DEAD_AFTER_MS}" >> "$CFG"
LOAD=$OUT/load.jsonl
# The whole Azure code trace where the workspace has it, else the excerpt the repository ships
# (its first 400 arrivals; the replay starts it over past its end). CHAOS_TRACE picks another.
TRACE=${CHAOS_TRACE:-$ROOT/../shared/traces/azure_llm_2023_code.csv}
[ -f "$TRACE" ] || TRACE=$ROOT/configs/sim/traces/azure_llm_2023_code_first400.csv
log "trace: $TRACE"
python3 "$ROOT/tools/trace_replay.py" --trace "$TRACE" \
  --prompts "$ROOT/models/tiny-llada/eval.jsonl" --rate "$RATE" --seconds "$LOAD_S" > "$LOAD" ||
  { echo "chaos: cannot build the replay" >&2; exit 2; }
LAST_AT=$(tail -1 "$LOAD" | python3 -c 'import json,sys; print(json.load(sys.stdin)["at_s"])')
log "replay: $(wc -l < "$LOAD") requests over ${LAST_AT} s (Azure code trace gaps scaled to $RATE req/s)"

cli() { timeout 30 "$DLS" "$@" --state-dir "$STATE"; }
# pid_of ROLE NAME, from the state file `up` keeps (and its head watchdog rewrites).
pid_of() {
  python3 -c 'import json,sys
print([p["pid"] for p in json.load(open(sys.argv[1]))["processes"] if p["role"]==sys.argv[2] and p["name"]==sys.argv[3]][0])' \
    "$STATE/cluster.json" "$1" "$2"
}
has_role() { python3 -c 'import json,sys; sys.exit(not any(p["role"]==sys.argv[2] for p in json.load(open(sys.argv[1]))["processes"]))' \
               "$STATE/cluster.json" "$1"; }
# Waits (bounded) until the cluster has answered N requests; 2 if the replay (pid $2) ended first.
wait_answered() {
  local n=$1 deadline=$(( $(date +%s) + 60 ))
  while [ "$(date +%s)" -lt $deadline ]; do
    kill -0 "$2" 2>/dev/null || return 2
    local f
    f=$(cli status --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"]["finished"])' 2>/dev/null)
    [ -n "$f" ] && [ "$f" -ge "$n" ] && return 0
    sleep 0.2
  done
  return 1
}

# Waits (bounded, N s) until a request runs or waits on one of node1's groups.
wait_node1_busy() {
  local deadline=$(( $(date +%s) + $1 ))
  while [ "$(date +%s)" -lt $deadline ]; do
    cli status --json 2>/dev/null | python3 -c 'import json,sys
live = json.load(sys.stdin)["requests"]["live"]
sys.exit(not any(str(r.get("group", "")).startswith("node1/") for r in live))' 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# The burst again, sent as a fault that leaves node1 unreachable but not yet DEAD begins (a
# partition, a stopped process): the supervisor still places work there until it detects the
# fault, so node1 holds work to re-place even when the burst before the fault was done there
# before the probe saw any (CI, once: "node1 ran none of the burst within 20 s", nothing
# re-placed). Counted like the burst.
burst_during() {
  "$DLS" submit --file "$dir/burst.jsonl" --json --timeout $(( GRACE_S + FAULT_S + 30 )) \
    --state-dir "$STATE" > "$dir/burst-during.json" 2> "$dir/burst-during.err" &
  during=$!
  EXTRA_PIDS+=($during)
}

# -- one case -------------------------------------------------------------------------------
run_case() {
  local name=$1 dir=$OUT/$1
  rm -rf "$dir"; mkdir -p "$dir"
  STATE=$dir/state
  local t_fault= t_heal= note= during=
  log "[$name] starting the cluster"
  # A start that fails is not the fault under test; on a loaded machine a node's first connect
  # can time out, so one more try, said in the output.
  if ! timeout 120 "$DLS" up "$CFG" --state-dir "$STATE" > "$dir/up.log" 2>&1; then
    log "[$name] up failed, trying once more: $(tail -1 "$dir/up.log")"
    timeout 60 "$DLS" down --state-dir "$STATE" > /dev/null 2>&1
  fi
  if [ ! -f "$STATE/cluster.json" ] && ! timeout 120 "$DLS" up "$CFG" --state-dir "$STATE" > "$dir/up.log" 2>&1; then
    log "[$name] up failed: $(tail -2 "$dir/up.log" | tr '\n' ' ')"
    echo "{\"case\":\"$name\",\"error\":\"up failed\"}" >> "$RESULTS"
    stop_cluster
    return
  fi
  local submit= burst= try
  for try in 1 2; do
    log "[$name] replaying the load"
    timeout $(( ${LAST_AT%.*} + GRACE_S + 30 )) "$DLS" submit --file "$LOAD" --json --timeout $(( ${LAST_AT%.*} + GRACE_S )) \
      --state-dir "$STATE" > "$dir/submit.json" 2> "$dir/submit.err" &
    submit=$!
    EXTRA_PIDS+=($submit)
    wait_answered 20 $submit
    case $? in
      0) break ;;
      1) log "[$name] warning: fewer than 20 answers after 60 s"; break ;;
    esac
    # The client ended before the fault: it never got going (on a loaded machine its first
    # connect can time out). That is not the fault's outcome; one more try, said here.
    wait $submit
    log "[$name] the replay ended before the fault: $(tail -1 "$dir/submit.err")"
    [ $try = 1 ] || { echo "{\"case\":\"$name\",\"error\":\"the replay could not start: $(tail -1 "$dir/submit.err" | tr -d '"\\')\"}" >> "$RESULTS"; stop_cluster; return; }
  done
  local node1 head
  # node1's own pid as it told the head: `up` records the launch template's shell for it.
  node1=$(cli status --json | python3 -c 'import json,sys; print([n["pid"] for n in json.load(sys.stdin)["nodes"] if n["name"]=="node1"][0])')
  head=$(pid_of head head)
  [ -n "$node1" ] && [ "$node1" -gt 0 ] || { log "[$name] cannot read node1's pid from status"; node1=0; }
  # A node fault must find work on node1, or its requests have nothing to show: requests of the
  # tiny model finish in tens of ms, so between two replay arrivals node1 may hold none. A burst
  # of the longest requests the model takes (48 tokens, tau pinned at 1: about one token a step)
  # queues work on every group for a while, and the fault waits (bounded) until node1 runs some.
  if [ "${name#head-}" = "$name" ] && [ "$name" != slow-link ]; then
    python3 -c 'import json,sys
for i, l in enumerate(open(sys.argv[1])):
    if i == int(sys.argv[2]): break
    print(json.dumps({"prompt": json.loads(l)["prompt"], "gen_length": 48, "threshold": 1.0}))' \
      "$ROOT/models/tiny-llada/eval.jsonl" "$BURST_N" > "$dir/burst.jsonl"
    "$DLS" submit --file "$dir/burst.jsonl" --json --timeout $(( GRACE_S + FAULT_S + 30 )) \
      --state-dir "$STATE" > "$dir/burst.json" 2> "$dir/burst.err" &
    burst=$!
    EXTRA_PIDS+=($burst)
    wait_node1_busy 20 || log "[$name] warning: node1 ran none of the burst within 20 s"
  fi
  t_fault=$(now)
  case $name in
    node-kill)
      log "[$name] SIGKILL node1 (pid $node1); restarting it in its namespace after $FAULT_S s"
      kill -KILL "$node1"
      sleep $FAULT_S
      t_heal=$(now)
      ip netns exec "$NS" "$DLS" start --address "$HEAD_IP:$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["head_port"])' "$STATE/cluster.json")" \
        --token-file "$STATE/token" --node node1 --config "$CFG" --tls-dir "$STATE/tls" >> "$STATE/logs/node1.log" 2>&1 &
      EXTRA_PIDS+=($!) ;;
    node-stop)
      log "[$name] SIGSTOP node1 (pid $node1) for $FAULT_S s"
      kill -STOP "$node1"; burst_during; sleep $FAULT_S; t_heal=$(now); kill -CONT "$node1" ;;
    head-stop)
      log "[$name] SIGSTOP the head (pid $head) for $HEAD_STOP_S s"
      kill -STOP "$head"; sleep $HEAD_STOP_S; t_heal=$(now); kill -CONT "$head" ;;
    head-kill-restart)
      if has_role head-watchdog; then
        log "[$name] SIGKILL the head (pid $head); up's watchdog restarts it with --recover"
        kill -KILL "$head"
        t_heal=$(now)
      else
        log "[$name] SIGKILL the head (pid $head), then restart it by hand with --recover"
        kill -KILL "$head"
        t_heal=$(now)
        "$DLS" start --head --recover --config "$CFG" --state-dir "$STATE" --tls-dir "$STATE/tls" \
          >> "$STATE/logs/head.log" 2>&1 &
        EXTRA_PIDS+=($!)
      fi ;;
    partition)
      log "[$name] partition: $VN down for $FAULT_S s"
      ip -n "$NS" link set "$VN" down; burst_during; sleep $FAULT_S; t_heal=$(now); ip -n "$NS" link set "$VN" up
      log "[$name] healed" ;;
    slow-link)
      if [ $SLOW_KIND = netem ]; then
        note="netem delay 200ms 50ms"
        ip netns exec "$NS" tc qdisc add dev "$VN" root netem delay 200ms 50ms
      elif [ $SLOW_KIND = tbf ]; then
        note="tbf rate 64kbit (no netem in this kernel)"
        ip netns exec "$NS" tc qdisc add dev "$VN" root tbf rate 64kbit burst 4kb latency 2s
      else
        note="no netem or tbf qdisc: link not slowed"
      fi
      log "[$name] slow link for $FAULT_S s: $note"
      sleep $FAULT_S; t_heal=$(now); ip netns exec "$NS" tc qdisc del dev "$VN" root 2>/dev/null ;;
  esac
  log "[$name] waiting for the replay to end (at most $(( ${LAST_AT%.*} + GRACE_S + 30 )) s)"
  wait $submit
  local rc=$?
  [ $rc = 0 ] || log "[$name] submit exit $rc: $(tail -1 "$dir/submit.err")"
  if [ -n "$burst" ]; then
    wait $burst || log "[$name] burst submit exit $?: $(tail -1 "$dir/burst.err")"
  fi
  if [ -n "$during" ]; then
    wait $during || log "[$name] burst during the fault: submit exit $?: $(tail -1 "$dir/burst-during.err")"
  fi
  # The nodes that must come back: both after a head fault, node1 after a node fault (after a
  # slow link only if it cost node1 its membership). The replay can end before they are back
  # (it did in CI, a partition healed as its last requests were answered): wait for them,
  # bounded, so the verdict does not depend on which finished first.
  local nodes=node1 if_dead=
  case $name in head-*) nodes=node0,node1 ;; slow-link) if_dead=--if-dead ;; esac
  local back_by=$(( $(date +%s) + REJOIN_S ))
  until python3 "$ROOT/tools/chaos_report.py" rejoined --log "$STATE/logs/head.log" --fault "$t_fault" \
          --heal "${t_heal:-$t_fault}" --nodes "$nodes" $if_dead; do
    if [ "$(date +%s)" -ge $back_by ]; then log "[$name] $nodes not all back $REJOIN_S s after the heal"; break; fi
    sleep 0.5  # polling the head's log: nothing tells this script when a node registers
  done
  cp "$STATE/logs/"*.log "$dir/" 2>/dev/null
  python3 "$ROOT/tools/chaos_report.py" case --name "$name" --dir "$dir" --fault "$t_fault" --heal "${t_heal:-$t_fault}" \
    --nodes "$nodes" --note "$note" >> "$RESULTS"
  tail -1 "$RESULTS" | python3 "$ROOT/tools/chaos_report.py" line
  stop_cluster
}

for c in $CASES; do run_case "$c"; done
echo
python3 "$ROOT/tools/chaos_report.py" table --results "$RESULTS"
status=$?
log "results in $RESULTS"
exit $status
