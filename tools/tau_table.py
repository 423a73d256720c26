#!/usr/bin/env python3
"""Measure the shipped model's tau table with `dilaserve eval --json` and print it as Markdown.

Usage: tools/tau_table.py [--bin build/tools/dilaserve] [--model models/tiny-llada] [--n 800]
                          [--curve configs/quality/tiny-llada.json]
Rows: tau in {0.5, 0.7, 0.8, 0.9, 0.95} and one token per step; columns: cache none and dual,
overall and per task. The dual-cache rows are also written as a measured quality curve (a JSON
array of eval objects) that the simulator's quality model reads.
"""
import argparse
import json
import subprocess
import sys

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--bin", default="build/tools/dilaserve")
ap.add_argument("--model", default="models/tiny-llada")
ap.add_argument("--n", type=int, default=800)
ap.add_argument("--curve", default="configs/quality/tiny-llada.json")
args = ap.parse_args()

settings = [("0.5", ["--threshold", "0.5"]), ("0.7", ["--threshold", "0.7"]), ("0.8", ["--threshold", "0.8"]),
            ("0.9", ["--threshold", "0.9"]), ("0.95", ["--threshold", "0.95"]), ("one/step", ["--one-per-step"])]
results = {}
for cache in ("none", "dual"):
    for label, flags in settings:
        cmd = [args.bin, "eval", "--model", args.model, "--n", str(args.n), "--cache", cache, "--json"] + flags
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results[(cache, label)] = json.loads(out)
        print(f"measured cache={cache} {label}", file=sys.stderr)

tasks = sorted(results[("dual", "0.9")]["per_task"])
head = "| τ | cache | accuracy | tokens/step | steps | " + " | ".join(f"{t} acc | {t} tok/step" for t in tasks) + " | tokens/s |"
print(head)
print("|" + "---|" * (head.count("|") - 1))
for label, _ in settings:
    for cache in ("none", "dual"):
        r = results[(cache, label)]
        cells = [label, cache, f"{100 * r['accuracy']:.1f}%", f"{r['tokens_per_step']:.2f}", f"{r['steps']:.2f}"]
        for t in tasks:
            pt = r["per_task"][t]
            cells += [f"{100 * pt['accuracy']:.1f}%", f"{pt['tokens_per_step']:.2f}"]
        cells.append(f"{r['tokens_per_second']:.0f}")
        print("| " + " | ".join(cells) + " |")
curve = [results[("dual", label)] for label, _ in settings]
with open(args.curve, "w") as f:
    json.dump(curve, f, indent=1)
print(f"\nwrote {args.curve}", file=sys.stderr)
