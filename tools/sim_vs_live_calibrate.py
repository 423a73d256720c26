#!/usr/bin/env python3
"""The control plane's CPU demand and the engine's slowdown on a live cluster, measured at
constant arrival rates BEFORE tools/sim_vs_live.sh's comparison (docs/simulator.md,
"Control plane"), on requests of their own (Poisson arrivals, token counts from trace rows
after the comparison's window).

Per rate R it runs `dilaserve bench --capacity R --load 1` with policy static on N = R x SECONDS
requests and reads around it:
  - every thread of the head and the node: CPU time (/proc/PID/task/TID/stat, utime + stime)
    and the engine thread's time on a CPU and waiting on a run queue (/proc/.../schedstat);
  - the bench client's CPU time (its rusage, wait4);
  - the groups' steps, engine time, the profile's prediction and step wall time (`status`).
The engine thread is the node's thread with the most CPU over the run (its worker, a detached
actor; its name is recorded).

Before the rates it sends BURST requests at once (the bench's capacity burst) and measures
  group_ms        what that burst took beyond its steps' wall time, per request: the group's
                  time on anything but a step while requests wait (used by the simulator);
  group_ms_by_policy
                  the same for each of --group-policies, the burst sent again under each set
                  (one timed run, its client's window against the steps' wall time): the sets
                  decide differently between steps (used by the simulator, per set).
It writes calibration.json with that, per rate what was measured, and
  step_ms         what each step took beyond the engine's own time (the messaging around it),
                  over all the runs (used by the simulator);
  slowdown        per run: the group's busy fraction (step wall time / wall time) and its
                  engine time over the profile's prediction for the same steps: the points of
                  the simulator's control_plane.contention (used);
and, reported to show what the control plane asks of the cores (not used by the simulator):
  base_cores      the control plane's CPU with no requests (head + node without the engine),
                  over IDLE seconds before the first rate;
  request_cpu_ms, step_cpu_ms
                  the least-squares split of the rest of the non-engine CPU (head, node
                  without the engine, client) over the runs into a part per request and a
                  part per engine step (messaging between the group and its worker).
Per run it also reports what that excess is made of: the engine thread's time waiting for a
core over its time on one (schedstat), and its time on a core over the profile.
"""
import argparse, csv, json, os, random, subprocess, sys, time

HZ = os.sysconf("SC_CLK_TCK")


def threads(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                s = f.read()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run_ns, wait_ns, _ = (int(x) for x in f.read().split())
        except FileNotFoundError:
            continue  # the thread ended
        comm = s[s.index("(") + 1:s.rindex(")")]
        fields = s[s.rindex(")") + 2:].split()
        out[tid] = {"comm": comm, "cpu_s": (int(fields[11]) + int(fields[12])) / HZ,
                    "run_s": run_ns / 1e9, "wait_s": wait_ns / 1e9}
    return out


def machine_busy_s():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / HZ  # all but idle and iowait


def status(binary):
    st = json.loads(subprocess.run([binary, "status", "--json"], check=True, capture_output=True, text=True).stdout)
    keys = ("steps", "engine_s", "predicted_s", "step_wall_s")
    out = {k: sum(g[k] for g in st["groups"]) for k in keys}
    # The per-step overhead each group's SLOs count (fixed when it started); with one group, its own.
    out["slo_step_overhead_s"] = max((g.get("slo_step_overhead_s", 0.0) for g in st["groups"]), default=0.0)
    # The path overhead per request the head measured at startup, which its deadlines count.
    out["slo_request_overhead_ms"] = st.get("slo_request_overhead_ms", 0.0)
    return out


def delta(a, b):
    return {t: {k: b[t][k] - a[t][k] for k in ("cpu_s", "run_s", "wait_s")} | {"comm": b[t]["comm"]}
            for t in b if t in a}


def sample(spec, path, interval):
    """--sample: every INTERVAL s, each process's CPU (and the engine's run and wait) until killed."""
    procs = dict(x.split("=") for x in spec.split(","))
    with open(path, "w") as f:
        while True:
            line = {"t": time.monotonic(), "machine_busy_s": machine_busy_s()}
            for role, pid in procs.items():
                try:
                    line[role] = threads(int(pid))
                except FileNotFoundError:
                    pass
            f.write(json.dumps(line) + "\n")
            f.flush()
            time.sleep(interval)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--sample":
        return sample(sys.argv[2], sys.argv[3], 1.0)
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--head-pid", type=int, required=True)
    ap.add_argument("--node-pid", type=int, required=True)
    ap.add_argument("--trace", required=True, help="token counts from its rows after --skip")
    ap.add_argument("--skip", type=int, default=1000, help="trace rows the comparison may use")
    ap.add_argument("--rates", type=float, nargs="+", required=True)
    ap.add_argument("--seconds", type=float, required=True, help="of arrivals per rate")
    ap.add_argument("--idle", type=float, default=5.0)
    ap.add_argument("--burst", type=int, default=400, help="requests at once (the bench's capacity burst)")
    ap.add_argument("--slo-scale", default="2")
    ap.add_argument("--group-policies", nargs="+", default=["static"],
                    help="policy sets whose time between steps is measured on the burst")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = [l.strip() for l in open(a.trace)][1:]
    rows = rows[a.skip:] if len(rows) > a.skip + 100 else rows
    procs = {"head": a.head_pid, "node": a.node_pid}

    snap = {r: threads(p) for r, p in procs.items()}
    t0 = time.monotonic()
    time.sleep(a.idle)
    snap1 = {r: threads(p) for r, p in procs.items()}
    idle_s = time.monotonic() - t0
    idle_cpu = sum(v["cpu_s"] for r in procs for v in delta(snap[r], snap1[r]).values())
    base_cores = idle_cpu / idle_s

    # The group's own time between steps: BURST requests at once (twice: the bench's capacity
    # burst, then its one run at a load that sends them within a millisecond). The client
    # times the first burst (capacity = requests / wall); both bursts are the same requests,
    # so half the steps' wall time is the first burst's. What the burst took beyond its steps
    # is time the group spent on anything but a step while requests were queued.
    burst_trace = f"{a.out}/burst.csv"
    with open(burst_trace, "w") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n" +
                "\n".join(f"{i * 1e-3:.6f},{rows[i % len(rows)].split(',', 1)[1]}" for i in range(a.burst)) + "\n")
    st0 = status(a.bin)
    slo_step_ms = 1e3 * st0["slo_step_overhead_s"]
    slo_request_ms = st0["slo_request_overhead_ms"]
    res = subprocess.run([a.bin, "bench", "--trace", burst_trace, "--duration", str(a.burst), "--load", "1000",
                          "--capacity-requests", str(a.burst), "--policies", "static", "--warmup", "0",
                          "--slo-scale", a.slo_scale, "--timeout", "120", "--out", f"{a.out}/burst"],
                         capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit("calibration: the burst failed: " + res.stderr[-2000:])
    st1 = status(a.bin)
    capacity = json.load(open(f"{a.out}/burst/bench.json"))["capacity_rps"]
    burst_wall = a.burst / capacity
    burst_step_wall = (st1["step_wall_s"] - st0["step_wall_s"]) / 2
    group_ms = 1e3 * max(0.0, burst_wall - burst_step_wall) / a.burst
    print(f"  burst of {a.burst}: {capacity:.1f} req/s ({burst_wall:.3f} s), steps' wall {burst_step_wall:.3f} s "
          f"({(st1['steps'] - st0['steps']) / 2:.0f} steps): {group_ms:.4f} ms per request outside steps", flush=True)
    # The same burst under each policy set: from its first send to its last answer (the client's
    # window) against the steps' wall time meanwhile.
    group_by_policy = {}
    for pol in a.group_policies:
        st0 = status(a.bin)
        res = subprocess.run([a.bin, "bench", "--trace", burst_trace, "--duration", str(a.burst), "--load", "1000",
                              "--capacity", str(capacity), "--policies", pol, "--warmup", "0",
                              "--slo-scale", a.slo_scale, "--timeout", "120", "--out", f"{a.out}/burst-{pol}"],
                             capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(f"calibration: the burst under {pol} failed: " + res.stderr[-2000:])
        st1 = status(a.bin)
        with open(f"{a.out}/burst-{pol}/client.csv") as f:
            row = next(csv.DictReader(f))
        wall = float(row["end_unix_s"]) - float(row["start_unix_s"])
        steps_wall = st1["step_wall_s"] - st0["step_wall_s"]
        group_by_policy[pol] = 1e3 * max(0.0, wall - steps_wall) / a.burst
        print(f"  burst of {a.burst} under {pol}: {wall:.3f} s, steps' wall {steps_wall:.3f} s "
              f"({st1['steps'] - st0['steps']:.0f} steps): {group_by_policy[pol]:.4f} ms per request outside steps",
              flush=True)

    runs = []
    rng = random.Random(14)  # issue 14; any fixed seed: the same arrivals every calibration
    for rate in a.rates:
        n = max(20, round(rate * a.seconds))
        trace = f"{a.out}/poisson-{rate:g}.csv"
        t, lines = 0.0, []
        for i in range(n):
            lines.append(f"{t:.6f},{rows[i % len(rows)].split(',', 1)[1]}")
            t += rng.expovariate(1.0)
        with open(trace, "w") as f:
            f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(lines) + "\n")
        st0 = status(a.bin)
        p0 = {r: threads(p) for r, p in procs.items()}
        m0, w0 = machine_busy_s(), time.monotonic()
        cmd = [a.bin, "bench", "--trace", trace, "--duration", str(t + 1), "--load", "1", "--capacity", str(rate),
               "--policies", "static", "--warmup", "0", "--slo-scale", a.slo_scale, "--timeout", "120", "--json"]
        with open(f"{a.out}/bench-{rate:g}.json", "w") as f:
            child = subprocess.Popen(cmd, stdout=f, stderr=subprocess.DEVNULL)
            _, rc, ru = os.wait4(child.pid, 0)
        wall = time.monotonic() - w0
        m1 = machine_busy_s()
        p1 = {r: threads(p) for r, p in procs.items()}
        st1 = status(a.bin)
        if rc != 0:
            sys.exit(f"calibration: bench at {rate:g} req/s failed ({rc})")
        d = {r: delta(p0[r], p1[r]) for r in procs}
        eng_tid = max(d["node"], key=lambda tid: d["node"][tid]["cpu_s"])
        eng = d["node"][eng_tid]
        head = sum(v["cpu_s"] for v in d["head"].values())
        node_other = sum(v["cpu_s"] for tid, v in d["node"].items() if tid != eng_tid)
        client = ru.ru_utime + ru.ru_stime
        g = {k: st1[k] - st0[k] for k in st0}
        non_engine = head + node_other + client
        runs.append({"rate_rps": rate, "requests": n, "wall_s": wall, "steps": g["steps"],
                     "head_cpu_s": head, "node_cpu_s_without_engine": node_other, "client_cpu_s": client,
                     "non_engine_cores": non_engine / wall,
                     "machine_busy_cores": (m1 - m0) / wall,
                     "engine_thread": eng["comm"], "engine_run_s": eng["run_s"], "engine_wait_s": eng["wait_s"],
                     "engine_slowdown": (eng["run_s"] + eng["wait_s"]) / max(1e-9, eng["run_s"]),
                     "engine_s": g["engine_s"], "predicted_s": g["predicted_s"], "step_wall_s": g["step_wall_s"],
                     "engine_run_over_predicted": eng["run_s"] / max(1e-9, g["predicted_s"]),
                     "engine_s_over_predicted": g["engine_s"] / max(1e-9, g["predicted_s"])})
        r = runs[-1]
        print(f"  {rate:7.1f} req/s: {n} requests in {wall:5.1f} s, {g['steps']} steps; non-engine CPU "
              f"{r['non_engine_cores']:.3f} cores (head {head:.2f} s, node {node_other:.2f} s, client {client:.2f} s); "
              f"engine run {eng['run_s']:.2f} s wait {eng['wait_s']:.2f} s (x{r['engine_slowdown']:.3f}), "
              f"run / profile {r['engine_run_over_predicted']:.3f}, engine_s / profile {r['engine_s_over_predicted']:.3f}; "
              f"machine {r['machine_busy_cores']:.2f} cores busy", flush=True)

    # non-engine CPU - base x wall = request_cpu x requests + step_cpu x steps (least squares).
    y = [r["head_cpu_s"] + r["node_cpu_s_without_engine"] + r["client_cpu_s"] - base_cores * r["wall_s"] for r in runs]
    x1 = [r["requests"] for r in runs]
    x2 = [r["steps"] for r in runs]
    s11 = sum(v * v for v in x1); s22 = sum(v * v for v in x2); s12 = sum(u * v for u, v in zip(x1, x2))
    b1 = sum(u * v for u, v in zip(x1, y)); b2 = sum(u * v for u, v in zip(x2, y))
    det = s11 * s22 - s12 * s12
    req_cpu, step_cpu = ((b1 * s22 - b2 * s12) / det, (b2 * s11 - b1 * s12) / det) if det > 0 else (sum(y) / sum(x1), 0.0)
    if step_cpu < 0 or req_cpu < 0:  # not separable from these runs: all of it per request
        req_cpu, step_cpu = sum(y) / sum(x1), 0.0
    steps = sum(r["steps"] for r in runs)
    step_ms = 1e3 * sum(r["step_wall_s"] - r["engine_s"] for r in runs) / max(1, steps)
    result = {"group_ms": group_ms, "group_ms_by_policy": group_by_policy, "burst": {"requests": a.burst, "capacity_rps": capacity, "wall_s": burst_wall,
                                              "step_wall_s": burst_step_wall},
              "base_cores": base_cores, "idle_s": idle_s, "request_cpu_ms": 1e3 * req_cpu, "step_cpu_ms": 1e3 * step_cpu,
              "step_ms": step_ms, "slo_step_ms": slo_step_ms, "slo_request_ms": slo_request_ms, "runs": runs,
              # the contention model's points: busy fraction, engine time over the profile
              "slowdown": sorted((r["step_wall_s"] / r["wall_s"], r["engine_s_over_predicted"]) for r in runs)}
    for r, yy in zip(runs, y):
        r["non_engine_cpu_fit_residual_s"] = yy - req_cpu * r["requests"] - step_cpu * r["steps"]
    json.dump(result, open(f"{a.out}/calibration.json", "w"), indent=2)
    print(f"  base {base_cores:.4f} cores; {1e3 * req_cpu:.4f} ms CPU per request, {1e3 * step_cpu:.4f} ms per step; "
          f"messaging {step_ms:.4f} ms per step")


if __name__ == "__main__":
    main()
