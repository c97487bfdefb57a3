"""Benchmark: where the CPU time of one daemon period goes (issue 3's fixed cost).

A real parlschedd, run with a CPU-time stopwatch (``time.thread_time_ns``) around each
step of its period, manages a real process of N mostly sleeping threads at T_CPU =
0.1 s; the daemon's whole CPU time per period (schedstat, as in overhead.py) is the
baseline the steps are shares of. The steps nest: ``Engine.tick`` holds the rest but
the loop's own work (the wake-up, the socket, the status snapshot), ``Engine._step``
holds the counter reads, the learning step, the pins and the history.

    sudo .venv/bin/python bench/period_profile.py [--threads 16,1024] [--window 10]

Prints a table per size and writes bench/results/period_profile.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from harness import machine, stamp, start_daemon, start_idle_target, stop_daemon
from overhead import PERIOD_S, cpu_seconds
from parlschedctl import client

STEPS = {  # module: (class, method) pairs timed in the daemon, in the order shown
    "parlschedd.daemon.engine": [("Engine", "tick"), ("Engine", "_unchanged"), ("Engine", "_refresh"),
                                 ("Engine", "_step"), ("Engine", "_pin")],
    "parlschedd.host.procfs": [("ProcessHandle", "alive"), ("ProcessHandle", "thread_count"),
                               ("ProcessHandle", "tids"), ("ThreadExits", "any_exited")],
    "parlschedd.host.perf": [("CounterSet", "read_many")],
    "parlschedd.learning.scheduler": [("TwoLevelScheduler", "step")],
    "parlschedd.daemon.history": [("History", "record")],
}


def run_child(out: str, argv: list[str]) -> None:
    """The daemon with a stopwatch around each step; the samples go to ``out`` at exit."""
    import atexit
    import importlib

    samples: dict[str, list[tuple[float, int]]] = defaultdict(list)  # (monotonic s, CPU ns)

    def timed(label: str, f):
        def wrapper(*args, **kwargs):
            start = time.thread_time_ns()
            try:
                return f(*args, **kwargs)
            finally:
                samples[label].append((time.monotonic(), time.thread_time_ns() - start))
        return wrapper

    for module, steps in STEPS.items():
        mod = importlib.import_module(module)
        for cls_name, name in steps:
            cls = getattr(mod, cls_name, None)
            raw = None if cls is None else cls.__dict__.get(name)
            if raw is None:
                continue  # not in this version of the daemon (the tool also profiles older commits)
            f = raw.__func__ if isinstance(raw, staticmethod) else raw
            w = timed(f"{cls_name}.{name}", f)
            setattr(cls, name, staticmethod(w) if isinstance(raw, staticmethod) else w)
    atexit.register(lambda: Path(out).write_text(json.dumps(samples)))
    from parlschedd.__main__ import main as daemon_main

    sys.argv = ["parlschedd", *argv]
    daemon_main()


def profile(n: int, window: float) -> dict:
    target = start_idle_target(n)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "samples.json"
            proc, sock = start_daemon(Path(tmp), f"period_s: {PERIOD_S}\ndomain_period_s: 4.0\n",
                                      command=[sys.executable, __file__, "--child", str(out)])
            try:
                client.request(sock, "attach", pid=target.pid, timeout=60)
                time.sleep(3.0)  # adoption and the first periods are not what is measured
                s0, t0, m0 = client.request(sock, "status"), cpu_seconds(proc.pid), time.monotonic()
                time.sleep(window)
                s1, t1, m1 = client.request(sock, "status"), cpu_seconds(proc.pid), time.monotonic()
            finally:
                if not stop_daemon(proc):
                    raise RuntimeError("the profiled daemon did not stop on SIGTERM; no samples")
            samples = json.loads(out.read_text())
    finally:
        target.kill()
        target.wait()
    periods = s1["daemon"]["loop"]["periods"] - s0["daemon"]["loop"]["periods"]
    if periods <= 0:
        raise RuntimeError(f"the daemon's period count did not advance in {window} s")
    total_us = (t1 - t0) / periods * 1e6
    steps = {}
    for label, timed in samples.items():
        ns = sorted(cpu for when, cpu in timed if m0 <= when <= m1)  # CLOCK_MONOTONIC is system-wide
        if not ns:
            continue
        steps[label] = {"calls_per_period": round(len(ns) / periods, 2), "median_us": ns[len(ns) // 2] / 1e3,
                        "mean_us": sum(ns) / len(ns) / 1e3}
    return {"threads": n, "periods": periods, "total_us_per_period": total_us, "steps": steps}


def table(row: dict) -> str:
    lines = [f"{row['threads']} threads: {row['total_us_per_period']:.0f} us of CPU per period (schedstat, the baseline)",
             "| step | calls/period | median us | mean us | mean share of the period |", "|---|---|---|---|---|"]
    order = [f"{c}.{m}" for steps in STEPS.values() for c, m in steps]
    for label in sorted(row["steps"], key=order.index):
        s = row["steps"][label]
        share = s["mean_us"] * s["calls_per_period"] / row["total_us_per_period"]
        lines.append(f"| {label} | {s['calls_per_period']:.2f} | {s['median_us']:.1f} | {s['mean_us']:.1f} | {share:.0%} |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        run_child(sys.argv[2], sys.argv[3:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="16,1024")
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "period_profile.json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("period_profile.py: run as root (the daemon needs it)")
    rows = []
    for n in (int(s) for s in args.threads.split(",")):
        print(f"profiling {n} threads for {args.window:g} s ...", file=sys.stderr, flush=True)
        rows.append(profile(n, args.window))
        print(table(rows[-1]) + "\n")
    out = {"benchmark": "period_profile", "date": stamp(),
           "machine": machine(),
           "period_s": PERIOD_S, "window_s": args.window, "rows": rows, "tables": [table(r) for r in rows]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
