#!/usr/bin/env python3
"""The simulator against the live runtime step by step, from one tools/sim_vs_live.sh run.

Live groups write every step to OUT/steps-live/<group>.csv (DILASERVE_STEP_LOG); the bench's
client.csv says when each (policy, load) run was, so the steps are cut by run. The simulator
writes OUT/sim-TAG/steps.csv (`sim --step-log`, run = POLICY@LOAD). Per run this prints each
side's step count, mean batch, share of steps with a refresh, mean step time and mean profile
prediction, and the refreshes the live group planned (what its profile prediction counts) against
those its engine ran; then, by batch size and refresh, the live engine's time over the profile's
prediction and the live step's time beyond its engine time (what the profile does not see),
over all runs of a policy.

Usage: tools/sim_vs_live_steps.py OUT_DIR [--sim-tag model]
"""
import argparse
import csv
import glob
import statistics
import sys
from collections import defaultdict


def read_steps(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            for r in csv.DictReader(f):
                rows.append({k: (v if k == "run" else float(v)) for k, v in r.items()})
    return rows


def summary(steps):
    if not steps:
        return None
    n = len(steps)
    return {
        "n": n,
        "batch": statistics.mean(s["batch"] for s in steps),
        "refresh": sum(1 for s in steps if s["refreshes"] > 0) / n,
        "planned": sum(s["refreshes"] for s in steps),
        "ran": sum(s["ran_refreshes"] for s in steps),
        "wall_ms": 1e3 * statistics.mean(s["wall_s"] for s in steps),
        "pred_ms": 1e3 * statistics.mean(s["predicted_s"] for s in steps),
        "busy_s": sum(s["wall_s"] for s in steps),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--sim-tag", default="model")
    a = ap.parse_args()
    live_paths = glob.glob(f"{a.out}/steps-live/*.csv")
    if not live_paths:
        sys.exit(f"sim_vs_live_steps: no live step logs in {a.out}/steps-live (run tools/sim_vs_live.sh on this version)")
    try:
        sim = read_steps([f"{a.out}/sim-{a.sim_tag}/steps.csv"])
        with open(f"{a.out}/live/client.csv") as f:
            windows = [(r["policy"], round(float(r["load"]), 4), float(r["start_unix_s"]), float(r["end_unix_s"]))
                       for r in csv.DictReader(f)]
    except (FileNotFoundError, KeyError) as e:
        sys.exit(f"sim_vs_live_steps: {e} (run tools/sim_vs_live.sh on this version)")
    live = read_steps(live_paths)
    live_runs = defaultdict(list)
    for s in live:
        for pol, load, t0, t1 in windows:
            if t0 <= s["start_s"] <= t1:
                live_runs[(pol, load)].append(s)
                break
    sim_runs = defaultdict(list)
    for s in sim:
        pol, load = s["run"].split("@")
        sim_runs[(pol, round(float(load), 4))].append(s)

    print(f"{'policy':<10} {'load':>5} | {'steps':>11} | {'mean batch':>11} | {'refresh %':>11} | "
          f"{'step ms':>13} | {'profile ms':>13} | {'busy s':>11} | {'refreshes planned / ran':>23}")
    print(f"{'':<10} {'':>5} | {'live   sim':>11} | {'live   sim':>11} | {'live   sim':>11} | "
          f"{'live    sim':>13} | {'live    sim':>13} | {'live   sim':>11} | {'live           sim':>23}")
    for key in sorted(live_runs, key=lambda k: (k[0], k[1])):
        lv, sv = summary(live_runs[key]), summary(sim_runs.get(key, []))
        if not sv:
            continue
        print(f"{key[0]:<10} {key[1]:>5} | {lv['n']:5d} {sv['n']:5d} | {lv['batch']:5.2f} {sv['batch']:5.2f} | "
              f"{100 * lv['refresh']:5.1f} {100 * sv['refresh']:5.1f} | {lv['wall_ms']:6.3f} {sv['wall_ms']:6.3f} | "
              f"{lv['pred_ms']:6.3f} {sv['pred_ms']:6.3f} | {lv['busy_s']:5.3f} {sv['busy_s']:5.3f} | "
              f"{lv['planned']:5.0f} / {lv['ran']:5.0f}   {sv['planned']:5.0f}")

    print("\nlive steps of every run by batch size and refresh: engine / profile, and step time beyond the engine")
    by = defaultdict(list)
    for (pol, _), steps in live_runs.items():
        for s in steps:
            by[(pol, int(s["batch"]), s["refreshes"] > 0)].append(s)
    print(f"{'policy':<10} {'batch':>5} {'refresh':>7} {'steps':>6} | {'engine/profile':>14} | {'beyond engine ms':>16}")
    for key in sorted(by):
        steps = by[key]
        if len(steps) < 20:
            continue
        ratio = sum(s["engine_s"] for s in steps) / max(1e-12, sum(s["predicted_s"] for s in steps))
        beyond = 1e3 * statistics.mean(s["wall_s"] - s["engine_s"] for s in steps)
        print(f"{key[0]:<10} {key[1]:>5} {'yes' if key[2] else 'no':>7} {len(steps):>6} | {ratio:14.3f} | {beyond:16.3f}")


if __name__ == "__main__":
    main()
