#!/bin/bash
# The simulator against the live runtime, for every policy, on the same requests.
#
# 1. A live cluster (configs/local.yaml with ONE device slot, so the head, the node's actors
#    and the client have the other core) is started; `up` measures its engine steps into the
#    state directory's profile.yaml.
# 2. `dilaserve bench` replays the first DURATION s of the Azure code trace open loop at each
#    load (relative to the capacity it measures), each policy in turn on the same arrivals,
#    prompts and answers from the shipped eval set, SLO = SLO_SCALE x profiled solo latency.
#    Around it the head's CPU time is read from /proc; afterwards `status` gives each group's
#    step wall time and engine time.
# 3. `dilaserve sim` replays the bench's arrivals.csv (the same requests, their token counts)
#    at the same loads and capacity on a one-device cluster file with that profile, the shipped
#    tau curve, and a control plane (docs/simulator.md, "Control plane") of
#      step_ms    = the live groups' wall time per step minus the profile's prediction, over the run,
#      cpu_ms     = the head's CPU per request during the bench, on one core,
#      request_ms = the latency outside any group: 30 lone requests (200 ms apart, before the
#                   bench), their mean live latency minus the simulator's for them alone.
#    No figure is fitted to the comparison itself: every point is a prediction.
#
# Usage: tools/sim_vs_live.sh [OUT_DIR]
#   env: LOADS="0.1 0.3 0.5 0.8 1.0 1.5 2.0" DURATION=300 SLO_SCALE=2 TRACE=../shared/traces/azure_llm_2023_code.csv
#        DILASERVE=build/tools/dilaserve
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
[ -f "$trace" ] || trace=$root/configs/sim/traces/azure_llm_2023_code_first400.csv
mkdir -p "$out"
out=$(cd "$out" && pwd)
state="$out/state"
rm -rf "$state" "$out/live"
export OPENBLAS_NUM_THREADS=1 DILASERVE_STATE_DIR="$state"

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
head_pid=$(python3 -c "import json,sys;print([p['pid'] for p in json.load(open(sys.argv[1]))['processes'] if p['role']=='head'][0])" "$state/cluster.json")
cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }
cpu0=$(cpu_of "$head_pid")
# shellcheck disable=SC2086
"$bin" bench --trace "$trace" --duration "$duration" --load $loads --policies static deadline migration dilaserve \
  --slo-scale "$slo_scale" --out "$out/live" | tee "$out/bench.log"
cpu1=$(cpu_of "$head_pid")
"$bin" status --json > "$out/status.json"
"$bin" down > /dev/null
trap - EXIT
ticks=$(getconf CLK_TCK)

echo "== simulator: the same requests, loads and capacity"
python3 - "$out" "$out/cpu.yaml" "$root/configs/quality/tiny-llada.json" "$cpu0" "$cpu1" "$ticks" \
  "$bin" "$slo_scale" $loads <<'EOF'
import json, subprocess, sys
out, profile, quality, cpu0, cpu1, ticks, binary, slo = sys.argv[1:9]
loads = [float(x) for x in sys.argv[9:]]
bench = json.load(open(f"{out}/live/bench.json"))
live = {(r["policy"], r["load"]): r for r in json.load(open(f"{out}/live/results.json"))["results"]}
status = json.load(open(f"{out}/status.json"))
# What every step took beyond the profile's prediction, averaged over all the steps the groups
# ran: the messaging around the engine, and the engine running slower than when it was
# profiled (on a shared machine its share of the CPU changes). The groups' own moving
# estimate (step_overhead_s) is the same difference over the last few steps only.
groups = status["groups"]
step_ms = 1e3 * sum(g["step_wall_s"] - g["predicted_s"] for g in groups) / max(1, sum(g["steps"] for g in groups))
# Every request the head served: the capacity burst, the warm-up and every run.
served = status["requests"]["finished"] + status["requests"]["failed"]
cpu_ms = 1e3 * (float(cpu1) - float(cpu0)) / float(ticks) / max(1, served)

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
        f.write(f"  - {{tau: {tau}, accuracy: {p['accuracy']}, tokens_per_step: {tps:.4f}}}\n")

def cluster_text(request_ms):
    return ("name: local-cpu-1slot\n"
            "engine: {block_length: 8, threshold: 0.9, max_batch: 8}\nmax_canvas: 64\n"
            "nodes:\n  - {name: cpu, devices: {kind: cpu, count: 1}, groups: [1]}\n"
            f"scheduler: {{profile: {profile}, quality: {out}/quality-sim.yaml}}\n"
            f"control_plane: {{request_ms: {request_ms:.4f}, cpu_ms: {cpu_ms:.4f}, cores: 1, step_ms: {step_ms:.4f}}}\n")

def sim(request_ms, policies, run_loads, tag):
    with open(f"{out}/cluster-sim-{tag}.yaml", "w") as f:
        f.write(cluster_text(request_ms))
    cmd = [binary, "sim", "--cluster", f"{out}/cluster-sim-{tag}.yaml", "--trace", f"{out}/live/arrivals.csv",
           "--rate", str(bench["capacity_rps"]), "--slo-scale", slo, "--json", "--policies", *policies,
           "--load", *[str(l) for l in run_loads]]
    res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["results"]
    return {(r["policy"], r["load"]): r for r in res}

# request_ms: the lone requests' live latency against the simulator's for the same requests
# alone (5 s apart), with the figures above in place.
lone = json.load(open(f"{out}/lone.json"))["results"]
with open(f"{out}/lone.csv", "w") as f:
    f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    for i, (x, l) in enumerate(zip(lone, open(f"{out}/lone.jsonl"))):
        spec = json.loads(l)
        gen = spec.get("gen_length", 16)
        # A decode ends with the block of the answer's EOS (one token per character here).
        gen = min(gen, (len(x["text"]) // 8 + 1) * 8) if len(x["text"]) < gen else gen
        f.write(f"{5.0 * i},{len(spec['prompt'])},{gen}\n")

def sim_lone():
    with open(f"{out}/cluster-sim-lone.yaml", "w") as f:
        f.write(cluster_text(0.0))
    cmd = [binary, "sim", "--cluster", f"{out}/cluster-sim-lone.yaml", "--trace", f"{out}/lone.csv", "--rate", "0.2",
           "--load", "1", "--slo-scale", slo, "--json", "--policies", "static"]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["results"][0]

live_lone_ms = sum(x["latency_ms"] for x in lone) / len(lone)
sim_lone_ms = 1e3 * sim_lone()["mean_latency_s"]
request_ms = max(0.0, live_lone_ms - sim_lone_ms)
simr = sim(request_ms, ["static", "deadline", "migration", "dilaserve"], loads, "model")
json.dump({"capacity_rps": bench["capacity_rps"], "requests": bench["requests"], "step_ms": step_ms, "cpu_ms": cpu_ms,
           "request_ms": request_ms, "served": served, "tokens_per_step_scale": tps_scale,
           "lone_live_ms": live_lone_ms, "lone_sim_ms": sim_lone_ms}, open(f"{out}/control_plane.json", "w"), indent=2)
print(f"capacity {bench['capacity_rps']:.1f} req/s, {bench['requests']} requests per run; control plane: "
      f"step_ms {step_ms:.3f} (the groups' step wall minus the profile's time), cpu_ms {cpu_ms:.3f} (head CPU / {served} requests), "
      f"request_ms {request_ms:.3f} (30 lone requests: live {live_lone_ms:.2f} ms, simulated {sim_lone_ms:.2f} ms); tau curve's tokens per step x {tps_scale:.3f}")
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
                     "live_mean_s": a["mean_latency_s"], "sim_mean_s": b["mean_latency_s"], "within_target": ok})
        print(f"{p:<10} {l:5.2f} | {100 * a['slo_attainment']:7.1f}% {100 * b['slo_attainment']:7.1f}% {d:+6.1f} | "
              f"{1e3 * a['mean_latency_s']:7.2f}ms {1e3 * b['mean_latency_s']:7.2f}ms {ratio:6.2f} | {'yes' if ok else 'NO'}")
json.dump(rows, open(f"{out}/comparison.json", "w"), indent=2)
print(f"{len(rows) - bad} of {len(rows)} points within 5 points of attainment and 15 % of mean latency")
EOF
