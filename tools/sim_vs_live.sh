#!/bin/bash
# The simulator against the live runtime, for every policy, on the same requests.
#
# 1. `dilaserve profile` measures this machine's engine steps into one profile for both sides.
# 2. A live cluster (configs/local.yaml with ONE device slot, so the head, the node's actors
#    and the client have the other core) is started on it. Before the comparison, on requests
#    of their own: 30 lone requests (200 ms apart), then the calibration
#    (tools/sim_vs_live_calibrate.py): 400 requests at once, then Poisson arrivals at CAL_RATES
#    req/s, CAL_SECONDS s each,
#    around which it reads every process's and the engine thread's CPU (/proc) and the group's
#    steps, engine time and the profile's prediction (`status`).
# 3. `dilaserve bench` replays the first DURATION s of the Azure code trace open loop at each
#    load (relative to the capacity it measures), each policy in turn on the same arrivals,
#    prompts and answers from the shipped eval set, SLO = SLO_SCALE x solo latency (the profile
#    plus the path overhead the head measured at startup, which the simulator counts too),
#    while every process's CPU is sampled each second (cpu-samples.jsonl; reported, not used).
#    Then the profile is measured again (cpu-after.yaml): how far the machine drifted.
# 4. `dilaserve sim` replays the bench's arrivals.csv (the same requests, their token counts)
#    at the same loads and capacity on a one-device cluster file with that profile, the shipped
#    tau curve, and a control plane (docs/simulator.md, "Control plane") from the calibration:
#      step_ms    = the group's step wall time minus its engine time, per step (messaging),
#      cpu_ms     = the head's CPU per request, on one core,
#      group_ms   = what a burst of 400 requests at once took beyond its steps, per request, measured
#                   under each policy set (their decisions between steps differ; GROUP=0: off),
#      contention = per calibration rate, the group's busy fraction and its engine time over
#                   the profile's prediction for the same steps (on by default; CONTENTION=0: off),
#      request_ms = the lone requests' mean live latency minus the simulator's for them alone.
#    No figure comes from the comparison's own runs: every point is a prediction. The run's
#    own step excess and head CPU are printed next to them for reference.
#
# Usage: tools/sim_vs_live.sh [OUT_DIR]
#   env: LOADS="0.1 0.3 0.5 0.8 1.0 1.5 2.0" DURATION=300 SLO_SCALE=2 TRACE=../shared/traces/azure_llm_2023_code.csv
#        DILASERVE=build/tools/dilaserve CAL_RATES="25 75 150 300 600" CAL_SECONDS=8 WINDOW_MS=100 CONTENTION=1 GROUP=1
#        SIM_ONLY=1: only step 4, on the files an earlier run left in OUT_DIR
#        REPEAT=N: replay the bench N times on the same arrivals (the first run's capacity) and
#        compare the simulator with the median of the live runs (one live run is noisy: the same
#        decisions run twice differ by up to a third in mean latency, docs/simulator.md)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bin=${DILASERVE:-$root/build/tools/dilaserve}
out=${1:-sim-vs-live}
loads=${LOADS:-0.1 0.3 0.5 0.8 1.0 1.5 2.0}
duration=${DURATION:-300}
slo_scale=${SLO_SCALE:-2}
trace=${TRACE:-$root/../shared/traces/azure_llm_2023_code.csv}
policies=static,deadline,migration,dilaserve
# Calibration rates (req/s): from a tenth to twice the capacity this machine's bench measures
# (294-310 req/s so far), the range of the comparison's loads; 8 s of arrivals each (200 to
# 4,800 requests, about 1.5 minutes in all).
CAL_RATES=${CAL_RATES:-25 75 150 300 600}
CAL_SECONDS=${CAL_SECONDS:-8}
# The window (ms) over which the simulator measures a group's busy fraction for the contention
# model: about ten of the profile's batch-8 steps (10-13 ms each), so the fraction resolves
# steps, and short next to a run (781 arrivals take 1.3 s at load 2.0).
window_ms=${WINDOW_MS:-100}
repeat=${REPEAT:-1}
[[ "$repeat" =~ ^[1-9][0-9]*$ ]] || { echo "sim_vs_live: REPEAT must be a positive integer, got '$repeat'" >&2; exit 2; }
contention=${CONTENTION:-1}   # 0: the simulator without the contention model (measured worse since 2026-12-06, docs/simulator.md)
group=${GROUP:-1}             # 0: without the group's time per request between steps (group_ms)
[ -f "$trace" ] || trace=$root/configs/sim/traces/azure_llm_2023_code_first400.csv
mkdir -p "$out"
out=$(cd "$out" && pwd)
state="$out/state"
[ -n "${SIM_ONLY:-}" ] || rm -rf "$state" "$out"/live "$out"/live[0-9]* "$out/calibration"
export OPENBLAS_NUM_THREADS=1 DILASERVE_STATE_DIR="$state"
# Every live step as a line of $out/steps-live/<group>.csv (calibration included; the bench's
# client.csv says when each run was), to set against the simulator's steps.
[ -n "${SIM_ONLY:-}" ] || { rm -rf "$out/steps-live"; mkdir -p "$out/steps-live"; }
export DILASERVE_STEP_LOG="$out/steps-live"

sed -e 's/devices: {kind: cpu, count: 2}/devices: {kind: cpu, count: 1}/' \
    -e 's/^    groups: \[2\].*/    groups: [1]/' \
    -e "s|path: ../models/tiny-llada|path: $root/models/tiny-llada|" \
    -e "s|quality: quality/|quality: $root/configs/quality/|" \
    -e "s|api_keys_file: local-api-keys|api_keys_file: $root/configs/local-api-keys|" \
    -e 's/^  port: 6390/  port: 0/' configs/local.yaml > "$out/cluster-live.yaml"
grep -q 'count: 1}' "$out/cluster-live.yaml" && grep -q 'groups: \[1\]' "$out/cluster-live.yaml" &&
  grep -q 'port: 0' "$out/cluster-live.yaml" || { echo "sim_vs_live: configs/local.yaml changed shape" >&2; exit 1; }

# One profile for both sides: the live groups derive deadlines from it and the simulator steps
# with it. Measured at the canvas lengths of the eval prompts (16 tokens) with answers of 16 and
# 48, up to the batch a group runs (engine.max_batch 8).
if [ -z "${SIM_ONLY:-}" ]; then
echo "== profile (engine steps of this machine)"
"$bin" profile --tp 1 --block 8 --lengths 32,64 --batches 1,2,4,8 --reps 9 --out "$out/cpu.yaml" > "$out/profile.log"
sed -i "s|^  quality: \(.*\)|  profile: $out/cpu.yaml\n  quality: \1|" "$out/cluster-live.yaml"
grep -q "profile: $out/cpu.yaml" "$out/cluster-live.yaml" || { echo "sim_vs_live: cannot set the profile" >&2; exit 1; }

echo "== live: $policies at loads $loads ($duration s of $(basename "$trace"))"
"$bin" up "$out/cluster-live.yaml" --slo-scale "$slo_scale" > "$out/up.log"
trap '"$bin" down > /dev/null 2>&1 || true' EXIT
# Lone requests, 200 ms apart: the latency outside any group with nothing queued.
head -n 30 models/tiny-llada/eval.jsonl |
  python3 -c 'import sys, json; [print(json.dumps({k: v for k, v in json.loads(l).items() if k in ("prompt", "gen_length")})) for l in sys.stdin]' \
  > "$out/lone.jsonl"
"$bin" submit --file "$out/lone.jsonl" --rate 5 --json --timeout 120 > "$out/lone.json"
pid_of() { python3 -c "import json,sys;print([p['pid'] for p in json.load(open(sys.argv[1]))['processes'] if p['role']==sys.argv[2]][0])" "$state/cluster.json" "$1"; }
head_pid=$(pid_of head)
node_pid=$(pid_of node)
# The contention model's coefficients, on requests of their own before the comparison
# (tools/sim_vs_live_calibrate.py): the control plane's CPU per request and per step, and the
# engine's slowdown against it.
echo "== calibration: Poisson arrivals at $CAL_RATES req/s, $CAL_SECONDS s each"
python3 tools/sim_vs_live_calibrate.py --bin "$bin" --head-pid "$head_pid" --node-pid "$node_pid" --trace "$trace" \
  --skip 1000 --rates $CAL_RATES --seconds "$CAL_SECONDS" --slo-scale "$slo_scale" --out "$out/calibration" \
  --group-policies static deadline migration dilaserve | tee "$out/calibration.log"
cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }
served_now() { "$bin" status --json | python3 -c 'import json, sys; r = json.load(sys.stdin)["requests"]; print(r["finished"] + r["failed"])'; }
# The head's CPU per request over the comparison's runs (all of them, REPEAT included): its CPU
# ticks and the requests it served between the two readings.
served0=$(served_now)
cpu0=$(cpu_of "$head_pid")
# shellcheck disable=SC2086
"$bin" bench --trace "$trace" --duration "$duration" --load $loads --policies static deadline migration dilaserve \
  --slo-scale "$slo_scale" --out "$out/live" > "$out/bench.log" &
bench_pid=$!
# Every process's CPU per second during the comparison (measured, not used by the model).
python3 tools/sim_vs_live_calibrate.py --sample "head=$head_pid,node=$node_pid,client=$bench_pid" "$out/cpu-samples.jsonl" &
sampler_pid=$!
wait "$bench_pid" || { kill "$sampler_pid"; cat "$out/bench.log"; exit 1; }
kill "$sampler_pid"
cat "$out/bench.log"
# The same arrivals again (the first run's capacity fixes their times), for the live median.
capacity=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["capacity_rps"])' "$out/live/bench.json")
for i in $(seq 2 "$repeat"); do
  echo "== live run $i of $repeat (capacity $capacity req/s, as the first)"
  # shellcheck disable=SC2086
  "$bin" bench --trace "$trace" --duration "$duration" --load $loads --policies static deadline migration dilaserve \
    --slo-scale "$slo_scale" --capacity "$capacity" --out "$out/live$i" > "$out/bench$i.log" || { cat "$out/bench$i.log"; exit 1; }
done
cpu1=$(cpu_of "$head_pid")
served1=$(served_now)
"$bin" status --json > "$out/status.json"
"$bin" down > /dev/null
trap - EXIT
# The same profile again: how far the machine itself drifted over the run.
"$bin" profile --tp 1 --block 8 --lengths 32,64 --batches 1,2,4,8 --reps 9 --out "$out/cpu-after.yaml" > "$out/profile-after.log"
echo "$cpu0 $cpu1 $served0 $served1" > "$out/head_cpu_ticks"
fi
read -r cpu0 cpu1 served0 served1 < "$out/head_cpu_ticks"
ticks=$(getconf CLK_TCK)

echo "== simulator: the same requests, loads and capacity"
python3 - "$out" "$out/cpu.yaml" "$root/configs/quality/tiny-llada.json" "$cpu0" "$cpu1" "$ticks" \
  "$bin" "$slo_scale" "$window_ms" "$contention" "$group" "${served0:-}" "${served1:-}" $loads <<'EOF'
import json, os, subprocess, sys
out, profile, quality, cpu0, cpu1, ticks, binary, slo, WINDOW_MS, CONTENTION, GROUP, served0, served1 = sys.argv[1:14]
CONTENTION, GROUP = CONTENTION == "1", GROUP == "1"
loads = [float(x) for x in sys.argv[14:]]
bench = json.load(open(f"{out}/live/bench.json"))
import glob, statistics
# One live run, or the median of the repeated ones (REPEAT) with their range.
live_runs = [json.load(open(f))["results"] for f in [f"{out}/live/results.json"] + sorted(glob.glob(f"{out}/live[0-9]*/results.json"))]
live = {}
for key in {(r["policy"], r["load"]) for r in live_runs[0]}:
    runs = [next(r for r in run if (r["policy"], r["load"]) == key) for run in live_runs]
    live[key] = {"slo_attainment": statistics.median(r["slo_attainment"] for r in runs),
                 "mean_latency_s": statistics.median(r["mean_latency_s"] for r in runs),
                 "tokens_per_step": statistics.median(r["tokens_per_step"] for r in runs),
                 "att_range": (min(r["slo_attainment"] for r in runs), max(r["slo_attainment"] for r in runs)),
                 "mean_range": (min(r["mean_latency_s"] for r in runs), max(r["mean_latency_s"] for r in runs))}
status = json.load(open(f"{out}/status.json"))
# The comparison's own figures, reported next to the calibration's but not used by the model:
# what every step took beyond the profile's prediction over the run, and the head's CPU per
# request.
groups = status["groups"]
run_steps = max(1, sum(g["steps"] for g in groups))
run_step_excess_ms = 1e3 * sum(g["step_wall_s"] - g["predicted_s"] for g in groups) / run_steps
run_engine_over_profile = sum(g["engine_s"] for g in groups) / max(1e-9, sum(g["predicted_s"] for g in groups))
cal = json.load(open(f"{out}/calibration/calibration.json"))
if served1:
    served = int(served1) - int(served0)
else:
    # Files of a run before the served counts were recorded: its ticks span the first bench only
    # and this count every run, so with REPEAT the figure reads low by about that factor.
    served = status["requests"]["finished"] + status["requests"]["failed"] - sum(r["requests"] for r in cal["runs"])
run_head_cpu_ms = 1e3 * (float(cpu1) - float(cpu0)) / float(ticks) / max(1, served)

# The control plane from the calibration before the comparison (tools/sim_vs_live_calibrate.py):
#   step_ms  what each step took beyond the engine's own time (messaging), per step;
#   cpu_ms   the head's CPU per request (its FIFO server, one core);
#   contention: per calibration rate, the group's busy fraction (step wall / wall) and its
#   engine time over the profile's prediction for the same steps.
cal_runs = cal["runs"]
step_ms = cal["step_ms"]
# The per-step overhead the live group's deadlines count (its idle round trip, fixed at start).
slo_step_ms = cal.get("slo_step_ms", step_ms)
# The path overhead per request the live head measured at startup: its deadlines count it.
slo_request_ms = cal.get("slo_request_ms", 0.0)
GROUP_MS = cal.get("group_ms", 0.0) if GROUP else 0.0
group_ms = GROUP_MS
group_by = cal.get("group_ms_by_policy", {})
cpu_ms = 1e3 * sum(r["head_cpu_s"] for r in cal_runs) / sum(r["requests"] for r in cal_runs)
cont_points = []
for u, f in sorted((min(1.0, r["step_wall_s"] / r["wall_s"]), r["engine_s"] / r["predicted_s"]) for r in cal_runs):
    if not cont_points or round(u, 4) > round(cont_points[-1][0], 4):  # the parser wants busy to increase
        cont_points.append((u, f))
contention = (f"{{window_ms: {WINDOW_MS}, slowdown: ["
              + ", ".join(f"{{busy: {u:.4f}, factor: {f:.4f}}}" for u, f in cont_points) + "]}")

# The tau curve was measured over the whole eval set; the bench's requests are a sample of it
# with their own mix of tasks, so its tokens per step at the reference tau is taken from the
# live run of `static` at the lowest load, and the other points are scaled by the same factor.
low = min(loads)
points = json.load(open(quality))
ref = next(p for p in points if p["threshold"] == 0.9)
tps_scale = live[("static", low)]["tokens_per_step"] / ref["tokens_per_step"]
with open(f"{out}/quality-sim.yaml", "w") as f:
    f.write(f"source: {quality}, tokens per step x {tps_scale:.4f} (live static at load {low:g}; sim_vs_live.sh)\npoints:\n")
    for p in points:
        tau = 1.0 if p["threshold"] is None else p["threshold"]
        tps = 1.0 if p["threshold"] is None else min(p["block_length"], max(1.0, p["tokens_per_step"] * tps_scale))
        # The blocks' measured step counts, where eval wrote them: the simulator draws each block's
        # steps from them, and engine.refresh_interval turns the long blocks' steps into refreshes.
        spread = (f", block_length: {p['block_length']}, block_steps: {p['block_steps']}"
                  if p.get("block_steps") and p["threshold"] is not None else "")
        f.write(f"  - {{tau: {tau}, accuracy: {p['accuracy']}, tokens_per_step: {tps:.4f}{spread}}}\n")

# The live cluster's engine settings that decide the steps: the block, the reference tau, the
# batch, the cache and its refreshes inside a block.
import yaml
live_engine = yaml.safe_load(open(f"{out}/cluster-live.yaml"))["engine"]
engine_keys = ("block_length", "threshold", "max_batch", "cache", "refresh_interval")
engine_text = "{" + ", ".join(f"{k}: {live_engine[k]}" for k in engine_keys if k in live_engine) + "}"

def cluster_text(request_ms, group_ms=None):
    group_ms = GROUP_MS if group_ms is None else group_ms
    return ("name: local-cpu-1slot\n"
            f"engine: {engine_text}\nmax_canvas: 64\n"
            "nodes:\n  - {name: cpu, devices: {kind: cpu, count: 1}, groups: [1]}\n"
            f"scheduler: {{profile: {profile}, quality: {out}/quality-sim.yaml, slo_request_overhead_ms: {slo_request_ms:.4f}}}\n"
            f"control_plane: {{request_ms: {request_ms:.4f}, cpu_ms: {cpu_ms:.4f}, cores: 1, step_ms: {step_ms:.4f}, slo_step_ms: {slo_step_ms:.4f}, group_ms: {group_ms:.4f}"
            + (f", contention: {contention}" if CONTENTION else "") + "}\n")

def sim(request_ms, policies, run_loads, tag, group_ms=None):
    with open(f"{out}/cluster-sim-{tag}.yaml", "w") as f:
        f.write(cluster_text(request_ms, group_ms))
    cmd = [binary, "sim", "--cluster", f"{out}/cluster-sim-{tag}.yaml", "--trace", f"{out}/live/arrivals.csv",
           "--rate", str(bench["capacity_rps"]), "--slo-scale", slo, "--json", "--policies", *policies,
           "--load", *[str(l) for l in run_loads], "--out", f"{out}/sim-{tag}",
           "--step-log", f"{out}/sim-{tag}/steps.csv"]
    res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["results"]
    return {(r["policy"], r["load"]): r for r in res}

# request_ms: the lone requests' live latency against the simulator's for the same requests
# alone (5 s apart), with the figures above in place.
lone = json.load(open(f"{out}/lone.json"))["results"]
with open(f"{out}/lone.csv", "w") as f:
    f.write("TIMESTAMP,ContextTokens,GeneratedTokens,DecodedTokens\n")
    for i, (x, l) in enumerate(zip(lone, open(f"{out}/lone.jsonl"))):
        spec = json.loads(l)
        gen = spec.get("gen_length", 16)
        # The canvas holds all of gen; a decode ends with the block of the answer's EOS: the
        # tokens the answer committed are its decoded blocks.
        decoded = min(gen, x["tokens"]) if x.get("tokens", 0) > 0 else gen
        f.write(f"{5.0 * i},{len(spec['prompt'])},{gen},{decoded}\n")

def sim_lone():
    with open(f"{out}/cluster-sim-lone.yaml", "w") as f:
        f.write(cluster_text(0.0))
    cmd = [binary, "sim", "--cluster", f"{out}/cluster-sim-lone.yaml", "--trace", f"{out}/lone.csv", "--rate", "0.2",
           "--load", "1", "--slo-scale", slo, "--json", "--policies", "static"]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["results"][0]

live_lone_ms = sum(x["latency_ms"] for x in lone) / len(lone)
sim_lone_ms = 1e3 * sim_lone()["mean_latency_s"]
request_ms = max(0.0, live_lone_ms - sim_lone_ms)
# Each policy set with the time between steps its own burst took (calibration's
# group_ms_by_policy; a calibration without it: the one figure for all), its results and files
# gathered into sim-model/ for tools/sim_vs_live_requests.py and _steps.py.
POLICIES = ["static", "deadline", "migration", "dilaserve"]
group_by_policy = {p: (group_by.get(p, GROUP_MS) if GROUP else 0.0) for p in POLICIES}
simr = {}
os.makedirs(f"{out}/sim-model", exist_ok=True)
merged = {"requests.csv": [], "steps.csv": [], "results.csv": []}
for p in POLICIES:
    simr.update(sim(request_ms, [p], loads, f"model-{p}", group_by_policy[p]))
    for name, lines in merged.items():
        with open(f"{out}/sim-model-{p}/{name}") as f:
            rows_in = f.read().splitlines()
        lines.extend(rows_in if not lines else rows_in[1:])
for name, lines in merged.items():
    with open(f"{out}/sim-model/{name}", "w") as f:
        f.write("\n".join(lines) + "\n")
json.dump({"capacity_rps": bench["capacity_rps"], "requests": bench["requests"], "step_ms": step_ms, "cpu_ms": cpu_ms,
           "request_ms": request_ms, "group_ms": group_ms, "group_ms_by_policy": group_by_policy, "contention": contention if CONTENTION else None, "served": served,
           "tokens_per_step_scale": tps_scale, "lone_live_ms": live_lone_ms, "lone_sim_ms": sim_lone_ms,
           "run_step_excess_ms": run_step_excess_ms, "run_engine_over_profile": run_engine_over_profile,
           "run_head_cpu_ms": run_head_cpu_ms}, open(f"{out}/control_plane.json", "w"), indent=2)
print(f"the comparison's own run (not used): steps {run_step_excess_ms:.3f} ms beyond the profile, engine x{run_engine_over_profile:.3f} "
      f"the profile, head {run_head_cpu_ms:.3f} ms CPU per request")
print(f"capacity {bench['capacity_rps']:.1f} req/s, {bench['requests']} requests per run; control plane (calibration): "
      f"step_ms {step_ms:.3f} (step wall minus engine time), cpu_ms {cpu_ms:.3f} (head CPU per request), "
      f"group_ms {group_ms:.3f} (burst beyond its steps, per request; by policy set "
      + ", ".join(f"{p} {v:.3f}" for p, v in group_by_policy.items()) + "), "
      f"contention {contention if CONTENTION else 'off'}, "
      f"request_ms {request_ms:.3f} (30 lone requests: live {live_lone_ms:.2f} ms, simulated {sim_lone_ms:.2f} ms); tau curve's tokens per step x {tps_scale:.3f}")
if len(live_runs) > 1:
    print(f"live: the median of {len(live_runs)} runs on the same arrivals (range in brackets)")
print(f"{'policy':<10} {'load':>5} | {'live att':>8} {'sim att':>8} {'diff':>7} | {'live mean':>9} {'sim mean':>9} {'ratio':>6} | ok")
rows, bad = [], 0
for p in ["static", "deadline", "migration", "dilaserve"]:
    for l in loads:
        a, b = live[(p, l)], simr[(p, l)]
        d = 100 * (b["slo_attainment"] - a["slo_attainment"])
        ratio = b["mean_latency_s"] / a["mean_latency_s"] if a["mean_latency_s"] > 0 else float("nan")
        ok = abs(d) <= 5 and abs(ratio - 1) <= 0.15
        bad += not ok
        rows.append({"policy": p, "load": l, "live_attainment": a["slo_attainment"], "sim_attainment": b["slo_attainment"],
                     "live_mean_s": a["mean_latency_s"], "sim_mean_s": b["mean_latency_s"], "within_target": ok,
                     "live_runs": len(live_runs), "live_attainment_range": a["att_range"], "live_mean_s_range": a["mean_range"]})
        spread = (f"  [{100 * a['att_range'][0]:.1f}-{100 * a['att_range'][1]:.1f}%, "
                  f"{1e3 * a['mean_range'][0]:.1f}-{1e3 * a['mean_range'][1]:.1f}ms]" if len(live_runs) > 1 else "")
        print(f"{p:<10} {l:5.2f} | {100 * a['slo_attainment']:7.1f}% {100 * b['slo_attainment']:7.1f}% {d:+6.1f} | "
              f"{1e3 * a['mean_latency_s']:7.2f}ms {1e3 * b['mean_latency_s']:7.2f}ms {ratio:6.2f} | {'yes' if ok else 'NO'}{spread}")
json.dump(rows, open(f"{out}/comparison.json", "w"), indent=2)
print(f"{len(rows) - bad} of {len(rows)} points within 5 points of attainment and 15 % of mean latency")
EOF
# The same comparison with each run's engine at the speed its own steps showed: how much of a
# miss is the machine's drift rather than the model (a diagnostic, not a prediction).
echo "== diagnostic: the simulator at each live run's own engine speed (not a prediction)"
python3 tools/sim_vs_live_run_speed.py "$out" --bin "$bin" --slo-scale "$slo_scale" | tail -n 1
