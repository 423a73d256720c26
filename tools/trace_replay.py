#!/usr/bin/env python3
"""Writes a `dilaserve submit --file` replay: the shipped model's eval prompts (cycled, with
their answers for accuracy) sent at the arrival times of a trace (Azure LLM inference trace
CSV: TIMESTAMP,ContextTokens,GeneratedTokens), its gaps scaled so that the whole trace's mean
rate becomes --rate. The trace has idle minutes between bursts; a gap longer than --max-gap-s
(after scaling) is cut to it, so that a short replay has load throughout (a fault suite needs
requests in flight when the fault comes). Only the arrival times are taken from the trace: the
tiny model's prompts and lengths are its own."""
import argparse
import csv
import datetime
import json
import sys


def arrivals(path):
    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            stamp = row["TIMESTAMP"]
            # Seven fractional digits; datetime reads at most six.
            if "." in stamp:
                head, frac = stamp.split(".", 1)
                stamp = head + "." + frac[:6]
            out.append(datetime.datetime.fromisoformat(stamp).timestamp())
    if len(out) < 2:
        sys.exit(f"{path}: fewer than two arrivals")
    out.sort()
    return [t - out[0] for t in out]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trace", required=True)
    p.add_argument("--prompts", required=True, help="JSONL with prompt (and answer, gen_length)")
    p.add_argument("--rate", type=float, required=True, help="mean requests per second of the replay")
    p.add_argument("--seconds", type=float, required=True, help="length of the replay")
    p.add_argument("--max-gap-s", type=float, default=1.0, help="longest gap of the replay, seconds")
    a = p.parse_args()
    if a.rate <= 0 or a.seconds <= 0 or a.max_gap_s <= 1 / a.rate:
        sys.exit("--rate and --seconds must be positive, and --max-gap-s longer than the mean gap 1/rate")
    raw = arrivals(a.trace)
    gaps = [b - x for x, b in zip(raw, raw[1:])]
    # The scale (trace seconds -> replay seconds) at which the cut gaps average 1/rate; the
    # mean cut gap grows with the scale, so bisect.
    lo, hi = 0.0, 1.0
    mean = lambda s: sum(min(g * s, a.max_gap_s) for g in gaps) / len(gaps)
    while mean(hi) < 1 / a.rate:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean(mid) < 1 / a.rate else (lo, mid)
    times = [0.0]
    for g in gaps:
        times.append(times[-1] + min(g * hi, a.max_gap_s))
    with open(a.prompts) as f:
        prompts = [json.loads(line) for line in f if line.strip()]
    keep = ("prompt", "answer", "valid", "gen_length")
    n = 0
    # Past the trace's end, it starts over after its mean gap.
    lap = times[-1] + 1 / a.rate
    while True:
        at = (n // len(times)) * lap + times[n % len(times)]
        if at > a.seconds:
            break
        line = {k: v for k, v in prompts[n % len(prompts)].items() if k in keep}
        line["at_s"] = round(at, 4)
        print(json.dumps(line))
        n += 1


if __name__ == "__main__":
    main()
