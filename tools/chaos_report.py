#!/usr/bin/env python3
"""The fault suite's accounting (tools/chaos.sh): one case's outcome from the replay's
`submit --json` output and the cluster's logs, a one-line summary, and the final table.

  case  --name N --dir D --fault T --heal T [--note S]   JSON line on stdout
  line                                                     one case (JSON on stdin) in words
  table --results FILE                                     the table; exit 1 if a target is missed
  rejoined --log HEAD_LOG --fault T --heal T --nodes N [--if-dead]
                                                           exit 0 once every node of N registered
                                                           its groups after the heal (--if-dead:
                                                           or none of them was marked DEAD)

Counts (the replay's and, around a node fault, the bursts'): accepted = sent to the head over a
live connection; answered = an answer; failed = an
explicit error answer; lost = accepted and neither answered nor failed before the client's
deadline (the last send + the grace), or left without an answer because the client lost the
head. Times come from the head's log (UTC, ms) against the script's clock."""
import argparse
import datetime
import json
import re
import sys

DETECT_TARGET_MS = 3000  # the target: a partitioned node is detected within 3 s
STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}) \[([^\]]+)\] (.*)$")


def log_events(path):
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        m = STAMP.match(line)
        if m:
            t = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp()
            out.append((t, m.group(2), m.group(3)))
    return out


def first_after(events, t0, who, pattern):
    rx = re.compile(pattern)
    for t, w, msg in events:
        if t >= t0 and w == who and rx.search(msg):
            return t, msg
    return None, None


def rejoin_time(events, heal, nodes):
    """When the last of `nodes` (comma-separated) registered its groups again after the heal;
    None while one has not."""
    back = [first_after(events, heal, "supervisor", rf"^node '{n}' now has [1-9]\d* groups")[0]
            for n in nodes.split(",") if n]
    return max(back) if back and all(t is not None for t in back) else None


def rejoined(a):
    events = log_events(a.log)
    if a.if_dead and not any(first_after(events, a.fault, "head", rf"^node '{n}' is DEAD")[0] is not None
                             for n in a.nodes.split(",") if n):
        return 0
    return 0 if rejoin_time(events, a.heal, a.nodes) is not None else 1


def case(a):
    r = {"case": a.name}
    if a.note:
        r["note"] = a.note
    try:
        out = json.load(open(f"{a.dir}/submit.json"))
        summary, results = out["summary"], out["results"]
    except (OSError, ValueError, KeyError):
        r["error"] = "the replay printed no results: " + open(f"{a.dir}/submit.err", errors="replace").read()[-300:]
        return r
    sent = summary.get("sent", len(results))
    # The bursts sent before a node fault and as it begins (tools/chaos.sh) count like the
    # replay: nothing of them may be lost either. Latency and accuracy stay the replay's.
    counted = list(results)
    for name, key in (("burst", "burst"), ("burst-during", "burst_during")):
        try:
            burst = json.load(open(f"{a.dir}/{name}.json"))
            sent += burst["summary"].get("sent", len(burst["results"]))
            r[key] = len(burst["results"])
            counted += burst["results"]
        except OSError:
            pass
        except (ValueError, KeyError):
            r["error"] = f"the {name} printed no results: " + open(f"{a.dir}/{name}.err", errors="replace").read()[-300:]
            return r
    outcomes = [x.get("outcome") for x in counted]
    r["accepted"] = sent
    r["answered"] = outcomes.count("answered")
    r["failed"] = outcomes.count("failed")
    r["lost"] = outcomes.count("no answer")
    r["not_sent"] = outcomes.count("not sent")
    if "error" in summary:
        r["client_error"] = summary["error"]
    errors = {}
    for x in counted:
        if x.get("outcome") == "failed":
            errors[x.get("error", "")] = errors.get(x.get("error", ""), 0) + 1
    if errors:
        r["errors"] = errors
    graded = [x for x in results if "correct" in x]
    if graded:
        r["accuracy"] = round(sum(x["correct"] for x in graded) / len(graded), 3)
    r["moved_answered"] = sum(1 for x in counted if x.get("outcome") == "answered" and x.get("moves", 0) > 0)
    lat = sorted(x["latency_ms"] for x in results if x.get("outcome") == "answered")
    if lat:
        r["latency_p50_ms"] = round(lat[len(lat) // 2], 1)
        r["latency_p99_ms"] = round(lat[min(len(lat) - 1, int(0.99 * (len(lat) - 1) + 0.5))], 1)
    head = log_events(f"{a.dir}/head.log")
    # Detection is a node fault's measure; after a head fault the head marks the nodes it could
    # not hear while it was away (nodes_dead below).
    t, msg = first_after(head, a.fault, "head", r"^node 'node1' is DEAD")
    if t is not None and not a.name.startswith("head-"):
        r["detect_ms"] = round((t - a.fault) * 1000)
        r["dead_reason"] = msg.split(": ", 1)[-1]
    t, msg = first_after(head, a.fault, "supervisor", r"^node 'node1' lost \d+ groups; re-placing (\d+)")
    if t is not None:
        r["replaced"] = int(re.search(r"re-placing (\d+)", msg).group(1))
    back = rejoin_time(head, a.heal, a.nodes)
    if back is not None:
        r["rejoin_ms"] = round((back - a.heal) * 1000)
    r["must_rejoin"] = a.nodes
    nodes_lost = sorted({m.group(1) for _, w, msg in head for m in [re.match(r"node '(\w+)' is DEAD", msg)]
                         if m and w == "head"})
    if nodes_lost:
        r["nodes_dead"] = nodes_lost
    return r


# What each case must show beyond "nothing lost".
def verdict(r):
    if "error" in r:
        return "FAIL", [r["error"]]
    why = []
    if r["lost"]:
        why.append(f"{r['lost']} requests lost")
    name = r["case"]
    if name in ("partition", "node-stop", "node-kill"):
        if "detect_ms" not in r:
            why.append("node1 never marked DEAD")
        elif r["detect_ms"] > DETECT_TARGET_MS:
            why.append(f"detected after {r['detect_ms']} ms > {DETECT_TARGET_MS} ms")
    # A slow link need not cost the node its membership; if it did, the node must come back.
    must_rejoin = r.get("must_rejoin") and (name != "slow-link" or r.get("nodes_dead"))
    if must_rejoin and "rejoin_ms" not in r:
        why.append(f"{r.get('must_rejoin', 'node1')} did not all come back")
    if name == "partition" and r.get("replaced", 0) == 0:
        why.append("no request was re-placed (none on node1 when it was cut off)")
    return ("PASS" if not why else "FAIL"), why


def fmt(r, key, unit=""):
    return f"{r[key]}{unit}" if key in r else "-"


def line(r):
    v, why = verdict(r)
    if "error" in r:
        return f"{r['case']}: FAIL: {r['error']}"
    return (f"{r['case']}: accepted {r['accepted']}, answered {r['answered']}, failed {r['failed']}, lost {r['lost']}"
            f"; detected {fmt(r, 'detect_ms', ' ms')}, re-placed {fmt(r, 'replaced')}, rejoined {fmt(r, 'rejoin_ms', ' ms')}"
            f" after heal: {v}" + (" (" + "; ".join(why) + ")" if why else ""))


def table(a):
    rows = [json.loads(x) for x in open(a.results) if x.strip()]
    print("| fault | accepted | answered | failed | lost | detected (ms) | re-placed | moved+answered | rejoined after heal (ms) | p50 / p99 (ms) | accuracy | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    worst = 0
    for r in rows:
        v, why = verdict(r)
        if v == "FAIL":
            worst = 1
        name = r["case"] + (f" ({r['note']})" if r.get("note") else "")
        if "error" in r:
            print(f"| {name} | - | - | - | - | - | - | - | - | - | - | {v}: {'; '.join(why)} |")
            continue
        lat = f"{fmt(r, 'latency_p50_ms')} / {fmt(r, 'latency_p99_ms')}"
        failed = str(r["failed"]) + (" (" + "; ".join(f"{n}: {e}" for e, n in r["errors"].items()) + ")" if r.get("errors") else "")
        print(f"| {name} | {r['accepted']} | {r['answered']} | {failed} | {r['lost']} | {fmt(r, 'detect_ms')} | "
              f"{fmt(r, 'replaced')} | {r['moved_answered']} | {fmt(r, 'rejoin_ms')} | {lat} | {fmt(r, 'accuracy')} | "
              f"{v}{': ' + '; '.join(why) if why else ''} |")
    return worst


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("case")
    c.add_argument("--name", required=True)
    c.add_argument("--dir", required=True)
    c.add_argument("--fault", type=float, required=True)
    c.add_argument("--heal", type=float, required=True)
    c.add_argument("--note", default="")
    c.add_argument("--nodes", default="node1", help="nodes that must register again after the heal")
    sub.add_parser("line")
    t = sub.add_parser("table")
    t.add_argument("--results", required=True)
    j = sub.add_parser("rejoined")
    j.add_argument("--log", required=True)
    j.add_argument("--fault", type=float, required=True)
    j.add_argument("--heal", type=float, required=True)
    j.add_argument("--nodes", default="node1")
    j.add_argument("--if-dead", action="store_true")
    a = p.parse_args()
    if a.cmd == "rejoined":
        sys.exit(rejoined(a))
    if a.cmd == "case":
        print(json.dumps(case(a)))
    elif a.cmd == "line":
        print(line(json.loads(sys.stdin.read())))
    else:
        sys.exit(table(a))


if __name__ == "__main__":
    main()
