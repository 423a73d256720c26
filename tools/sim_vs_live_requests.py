#!/usr/bin/env python3
"""The simulator against the live runtime request by request, from one tools/sim_vs_live.sh run.

Both sides write requests.csv (`bench --out`, `sim --out`): the same requests in the same arrival
order. For each policy and load this prints the live and simulated mean latency, the median of
the per-request ratio, the steps each side charged the same requests (the simulator's work), and
where the difference sits: requests that arrived alone against those that arrived in a burst
(another arrival within GAP_MS before them).

Usage: tools/sim_vs_live_requests.py OUT_DIR [--sim-tag model] [--gap-ms 1]
"""
import argparse
import csv
import statistics
import sys
from collections import defaultdict


def load(path):
    runs = defaultdict(list)
    with open(path) as f:
        for row in csv.DictReader(f):
            key = (row["policy"], round(float(row["load"]), 4))
            runs[key].append((int(row["index"]), float(row["arrival_s"]), float(row["latency_s"]),
                              int(row["steps"]), row["slo_met"] == "1"))
    for rows in runs.values():
        rows.sort()
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--sim-tag", default="model")
    ap.add_argument("--gap-ms", type=float, default=1.0,
                    help="an arrival within this many ms after the previous one counts as part of a burst")
    a = ap.parse_args()
    try:
        live = load(f"{a.out}/live/requests.csv")
        sim = load(f"{a.out}/sim-{a.sim_tag}/requests.csv")
    except FileNotFoundError as e:
        sys.exit(f"sim_vs_live_requests: {e.filename} is missing (run tools/sim_vs_live.sh on this version)")
    print(f"{'policy':<10} {'load':>5} {'n':>5} | {'live ms':>8} {'sim ms':>8} {'med ratio':>9} | "
          f"{'steps live':>10} {'sim':>6} | {'alone: live/sim ms':>19} | {'burst: live/sim ms':>19}")
    for key in sorted(live):
        if key not in sim:
            continue
        lv, sv = live[key], sim[key]
        if len(lv) != len(sv):
            print(f"{key}: {len(lv)} live requests against {len(sv)} simulated; skipped")
            continue
        both = [(l, s) for l, s in zip(lv, sv) if l[2] >= 0 and s[2] >= 0]
        if not both:
            continue
        ratio = statistics.median(l[2] / s[2] for l, s in both if s[2] > 0)
        groups = {"alone": [], "burst": []}
        prev = None
        for l, s in both:
            burst = prev is not None and (l[1] - prev) * 1e3 <= a.gap_ms
            groups["burst" if burst else "alone"].append((l[2], s[2]))
            prev = l[1]

        def pair(g):
            if not g:
                return f"{'-':>19}"
            return f"{1e3 * statistics.mean(x for x, _ in g):8.2f} / {1e3 * statistics.mean(y for _, y in g):8.2f}"

        print(f"{key[0]:<10} {key[1]:>5} {len(both):>5} | {1e3 * statistics.mean(l[2] for l, _ in both):8.2f} "
              f"{1e3 * statistics.mean(s[2] for _, s in both):8.2f} {ratio:9.2f} | "
              f"{statistics.mean(l[3] for l, _ in both):10.2f} {statistics.mean(s[3] for _, s in both):6.2f} | "
              f"{pair(groups['alone'])} | {pair(groups['burst'])}")


if __name__ == "__main__":
    main()
