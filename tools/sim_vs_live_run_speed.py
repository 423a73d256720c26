#!/usr/bin/env python3
"""The simulator against the live runtime at each live run's own engine speed: a diagnostic.

tools/sim_vs_live.sh predicts every (policy, load) run from figures measured before the
comparison. On the 2-core VMs the engine's speed itself moves by up to 2x within minutes (docs/
simulator.md), so a miss may be the model's or the machine's. This replays the same requests
with the engine of each (policy, load) run running at the speed the live groups measured in that
run: their engine time over the profile's prediction for the same steps (the step logs of
OUT/steps-live, cut by the runs of every live*/client.csv), the median over the REPEAT runs,
as a constant contention factor in place of the calibrated one (deadlines are the profile's, as
live). Everything else is the prediction's cluster file. It uses the comparison's own
measurements, so it is not a prediction: it separates the model's error from the machine's drift.

Usage: tools/sim_vs_live_run_speed.py OUT_DIR [--bin build/tools/dilaserve] [--slo-scale 2]
"""
import argparse
import bisect
import csv
import glob
import json
import os
import re
import statistics
import subprocess
import sys
from collections import defaultdict


def run_windows(out):
    """(policy, load) -> [(start, end)] over every live run directory."""
    windows = defaultdict(list)
    for path in sorted(glob.glob(f"{out}/live*/client.csv")):
        with open(path) as f:
            for r in csv.DictReader(f):
                windows[(r["policy"], round(float(r["load"]), 4))].append(
                    (float(r["start_unix_s"]), float(r["end_unix_s"])))
    return windows


def engine_speed(out, windows):
    """(policy, load) -> median over its runs of sum(engine_s) / sum(predicted_s)."""
    sums = defaultdict(lambda: [0.0, 0.0])  # (policy, load, run index) -> [engine, predicted]
    spans = [(key, i, t0, t1) for key, ws in windows.items() for i, (t0, t1) in enumerate(ws)]
    spans.sort(key=lambda s: s[2])
    starts = [s[2] for s in spans]
    for path in glob.glob(f"{out}/steps-live/*.csv"):
        with open(path) as f:
            for r in csv.DictReader(f):
                t = float(r["start_s"])
                i = bisect.bisect_right(starts, t) - 1
                if i < 0 or t > spans[i][3]:
                    continue  # between runs: the calibration, the capacity burst
                key, run = spans[i][0], spans[i][1]
                acc = sums[(key, run)]
                acc[0] += float(r["engine_s"])
                acc[1] += float(r["predicted_s"])
    per_key = defaultdict(list)
    for (key, _), (eng, pred) in sums.items():
        if pred > 0:
            per_key[key].append(eng / pred)
    return {key: statistics.median(v) for key, v in per_key.items()}


def with_constant_speed(cluster_text, factor):
    line = f"contention: {{window_ms: 100, slowdown: [{{busy: 0, factor: {factor:.4f}}}, {{busy: 1, factor: {factor:.4f}}}]}}"
    if "contention:" in cluster_text:
        return re.sub(r"contention: \{window_ms: [^\[]*\[[^\]]*\]\}", line, cluster_text)
    return cluster_text.replace("group_ms:", line + ", group_ms:", 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--bin", default="build/tools/dilaserve")
    ap.add_argument("--slo-scale", default="2", help="the comparison's SLO_SCALE")
    a = ap.parse_args()
    try:
        comparison = json.load(open(f"{a.out}/comparison.json"))
        bench = json.load(open(f"{a.out}/live/bench.json"))
    except FileNotFoundError as e:
        sys.exit(f"sim_vs_live_run_speed: {e} (run tools/sim_vs_live.sh first)")
    windows = run_windows(a.out)
    if not glob.glob(f"{a.out}/steps-live/*.csv"):
        sys.exit(f"sim_vs_live_run_speed: no live step logs in {a.out}/steps-live")
    speed = engine_speed(a.out, windows)
    slo = a.slo_scale
    results = {}
    work = f"{a.out}/run-speed"
    os.makedirs(work, exist_ok=True)
    for row in comparison:
        key = (row["policy"], round(float(row["load"]), 4))
        if key not in speed:
            continue
        base = open(f"{a.out}/cluster-sim-model-{row['policy']}.yaml").read()
        path = f"{work}/{row['policy']}-{row['load']}.yaml"
        with open(path, "w") as f:
            f.write(with_constant_speed(base, speed[key]))
        cmd = [a.bin, "sim", "--cluster", path, "--trace", f"{a.out}/live/arrivals.csv", "--rate",
               str(bench["capacity_rps"]), "--slo-scale", slo, "--json", "--policies", row["policy"],
               "--load", str(row["load"])]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(f"sim_vs_live_run_speed: {' '.join(cmd)}: {res.stderr.strip()}")
        results[key] = json.loads(res.stdout)["results"][0]

    print("live: the median of the runs; sim at the run's own engine speed (engine / profile, median of the runs)")
    print(f"{'policy':<10} {'load':>5} {'speed':>6} | {'live att':>8} {'sim att':>8} {'diff':>7} | "
          f"{'live mean':>9} {'sim mean':>9} {'ratio':>6} | ok   | prediction ok")
    ok_n = pred_n = 0
    for row in comparison:
        key = (row["policy"], round(float(row["load"]), 4))
        if key not in results:
            continue
        r = results[key]
        d = 100 * (r["slo_attainment"] - row["live_attainment"])
        ratio = r["mean_latency_s"] / row["live_mean_s"]
        ok = abs(d) <= 5 and abs(ratio - 1) <= 0.15
        ok_n += ok
        pred_n += bool(row["within_target"])
        print(f"{row['policy']:<10} {row['load']:5.2f} {speed[key]:6.3f} | {100 * row['live_attainment']:7.1f}% "
              f"{100 * r['slo_attainment']:7.1f}% {d:+6.1f} | {1e3 * row['live_mean_s']:7.2f}ms "
              f"{1e3 * r['mean_latency_s']:7.2f}ms {ratio:6.2f} | {'yes' if ok else 'NO ':<4} | "
              f"{'yes' if row['within_target'] else 'NO'}")
    print(f"{ok_n} of {len(results)} points within 5 points and 15 % at each run's own engine speed "
          f"({pred_n} as predicted)")


if __name__ == "__main__":
    main()
