#!/usr/bin/env python3
"""One line per `dilaserve sim-suite --json` result file: dilaserve against static over the
whole suite (the gain and mean-latency cut at each workload's first load where static <= 60 %,
how many (workload, load) points have a worse mean or a p99 above 1.1x static, the code trace's
best gain, the worst accuracy difference). Used for the variant and sensitivity tables in
docs/policies.md.

usage: suite_summary.py [--on-miss serve] NAME=results.json | results.json ...
"""
import argparse
import os
import json
from collections import defaultdict


def summary(path, on_miss, policy="dilaserve", base="static"):
    t = defaultdict(dict)
    for r in json.load(open(path))["results"]:
        if r.get("on_miss", "serve") == on_miss:
            t[r["workload"]][(r["policy"], r["load"])] = r
    gains, cuts = [], []
    worst_p99 = worst_mean = 0.0
    p99_fail = mean_fail = points = 0
    code = float("nan")
    acc = 0.0
    for w in sorted(t):
        loads = sorted(l for (p, l) in t[w] if p == base and (policy, l) in t[w])
        for l in loads:
            s, d = t[w][(base, l)], t[w][(policy, l)]
            points += 1
            worst_p99 = max(worst_p99, d["p99_latency_s"] / s["p99_latency_s"])
            worst_mean = max(worst_mean, d["mean_latency_s"] / s["mean_latency_s"])
            p99_fail += d["p99_latency_s"] > 1.1 * s["p99_latency_s"]
            mean_fail += d["mean_latency_s"] > s["mean_latency_s"]
            acc = min(acc, d["accuracy"] - s["accuracy"])
        at = next((l for l in loads if t[w][(base, l)]["slo_attainment"] <= 0.6), None)
        if at is not None:
            s, d = t[w][(base, at)], t[w][(policy, at)]
            gains.append(100 * (d["slo_attainment"] - s["slo_attainment"]))
            cuts.append(100 * (1 - d["mean_latency_s"] / s["mean_latency_s"]))
        if w.startswith("azure-code"):
            code = max(100 * (t[w][(policy, l)]["slo_attainment"] - t[w][(base, l)]["slo_attainment"]) for l in loads)
    g = sorted(gains)
    return (f"gain at static<=60%: min {min(g):+.1f} median {g[len(g) // 2]:+.1f} points ({sum(x >= 30 for x in g)}/{len(g)} >= 30) | "
            f"mean cut there: min {min(cuts):.1f} % ({sum(x >= 30 for x in cuts)}/{len(cuts)} >= 30 %) | "
            f"mean > static at {mean_fail}/{points} (worst {worst_mean:.2f}x) | p99 > 1.1x at {p99_fail}/{points} "
            f"(worst {worst_p99:.2f}x) | code best {code:+.1f} | accuracy worst {100 * acc:+.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--on-miss", default="serve")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    for f in a.files:
        name, _, path = f.partition("=")
        if not path:  # a bare file: named by its file name (sim-suite --sweep writes KEY@FACTOR.json)
            path, name = name, os.path.basename(name).removesuffix(".json")
        print(f"{name:10} {summary(path, a.on_miss)}")


if __name__ == "__main__":
    main()
