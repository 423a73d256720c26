#!/usr/bin/env python3
"""Checks `dilaserve sim-suite --json` results against the robustness targets
(docs/performance.md, "Workload suite"): for every workload, dilaserve against static at
every load. Prints one line per workload and each failed target; exit 1 if any fails.

usage: check_targets.py results.json [--policy dilaserve] [--baseline static] [--on-miss serve]
"""
import argparse
import json
import sys
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--policy", default="dilaserve")
    ap.add_argument("--baseline", default="static")
    ap.add_argument("--on-miss", default="serve")
    ap.add_argument("--trace-workload", default="azure-code/trace")
    a = ap.parse_args()
    rows = json.load(open(a.results))["results"]
    by = defaultdict(dict)  # workload -> (policy, load) -> row
    for r in rows:
        if r.get("on_miss", "serve") != a.on_miss:
            continue
        by[r["workload"]][(r["policy"], r["load"])] = r
    failed = 0
    print(f"{'workload':24} {'load@60':>7} {'d_att':>6} {'d_mean':>7} {'worst_mean':>10} {'worst_p99':>9} {'d_acc':>6} {'best_d':>6}  verdict")
    for w in sorted(by):
        t = by[w]
        loads = sorted(l for (p, l) in t if p == a.baseline and (a.policy, l) in t)
        bad = []
        worst_mean = worst_p99 = 0.0
        d_acc = 0.0
        best = -1e9
        for l in loads:
            s, d = t[(a.baseline, l)], t[(a.policy, l)]
            rm = d["mean_latency_s"] / s["mean_latency_s"]
            rp = d["p99_latency_s"] / s["p99_latency_s"]
            worst_mean, worst_p99 = max(worst_mean, rm), max(worst_p99, rp)
            d_acc = min(d_acc, d["accuracy"] - s["accuracy"])
            best = max(best, d["slo_attainment"] - s["slo_attainment"])
            if rm > 1.0:
                bad.append(f"mean {rm:.2f}x static at load {l}")
            if rp > 1.1:
                bad.append(f"p99 {rp:.2f}x static at load {l}")
            if d["accuracy"] < s["accuracy"] - 0.01:
                bad.append(f"accuracy -{100 * (s['accuracy'] - d['accuracy']):.2f} points at load {l}")
        at = next((l for l in loads if t[(a.baseline, l)]["slo_attainment"] <= 0.6), None)
        da = dm = float("nan")
        if at is None:
            bad.append("static never <= 60 % in the load range")
        else:
            s, d = t[(a.baseline, at)], t[(a.policy, at)]
            da = 100 * (d["slo_attainment"] - s["slo_attainment"])
            dm = 100 * (1 - d["mean_latency_s"] / s["mean_latency_s"])
            if da < 30:
                bad.append(f"+{da:.1f} points at load {at} (< 30)")
            if dm < 30:
                bad.append(f"mean latency -{dm:.1f} % at load {at} (< 30 %)")
        if w == a.trace_workload and 100 * best < 50:
            bad.append(f"best gain +{100 * best:.1f} points (< 50)")
        failed += bool(bad)
        print(f"{w:24} {str(at):>7} {da:6.1f} {dm:6.1f}% {worst_mean:9.2f}x {worst_p99:8.2f}x {100 * d_acc:6.2f} {100 * best:6.1f}  "
              + ("ok" if not bad else "FAIL: " + "; ".join(bad)))
    print(f"{failed} of {len(by)} workloads miss a target")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
