"""Benchmark: the daemon's own cost per managed thread per period (issue 3).

For targets of 16, 256 and 1024 threads at T_CPU = 0.1 s: a real parlschedd manages a
real process whose threads mostly sleep; its CPU time (utime + stime) over a window,
divided by periods and threads, and its RSS. The floor is measured in this same run,
in this process: one counter read per thread per period plus as many
sched_setaffinity calls as the daemon made (its reported migrations), nothing else;
and beside it, for reference, the same floor with the wake-up of each burst.

    sudo .venv/bin/python bench/overhead.py [--window 10] [--sizes 16,256,1024] [--rounds 3] [--paper] [--observe]

Each size is measured in ``--rounds`` rounds (a fresh daemon and target, then the
floor) and the table gives the medians, with the range of the ratio: on a VM one
round's figures swing by 2x from the next's. Prints a table and writes
bench/results/overhead.json (the daemon's default learning parameters) or, with
--paper, bench/results/overhead-paper.json (the paper's: every thread pinned to one
core, so about half the threads move each period on 2 CPUs), or, with --observe,
bench/results/overhead-observe.json (attached in observe mode: no pins, the CPU each
thread ran on read from /proc in turns).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

from harness import cpu_seconds, machine, stamp, start_daemon, start_idle_target, stop_daemon
from parlschedctl import client
from parlschedd.host.base import CounterSource
from parlschedd.host.perf import CounterSet, raise_fd_limit

PERIOD_S = 0.1


PAPER = "learning: {eps: 0.05, free: false, reward: thread}\n"  # the paper's Level 2: every thread on one core


def measure_daemon(n: int, window: float, extra: str, observe: bool = False) -> dict:
    target = start_idle_target(n)
    try:
        return measure_target(target, window, extra, observe)
    finally:
        target.kill()
        target.wait()


def measure_target(target, window: float, extra: str, observe: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        proc, sock = start_daemon(Path(tmp), f"period_s: {PERIOD_S}\ndomain_period_s: 4.0\n" + extra)
        try:
            client.request(sock, "attach", pid=target.pid, observe=observe, timeout=60)
            time.sleep(3.0)  # adoption and the first learning periods settle
            p = psutil.Process(proc.pid)
            s0, t0 = client.request(sock, "status"), cpu_seconds(proc.pid)
            time.sleep(window)
            s1, t1 = client.request(sock, "status"), cpu_seconds(proc.pid)
            rss = p.memory_info().rss
            fds = p.num_fds()
        finally:
            stop_daemon(proc)
    tids = [int(t) for t in os.listdir(f"/proc/{target.pid}/task")]
    periods = s1["daemon"]["loop"]["periods"] - s0["daemon"]["loop"]["periods"]
    if periods <= 0:
        raise RuntimeError(f"the daemon's period count did not advance in {window} s (status: {s1['daemon']['loop']})")
    migrations = s1["targets"][0]["migrations"] - s0["targets"][0]["migrations"]
    managed = len(s1["targets"][0]["threads"])
    cpu = t1 - t0
    floor, woken = measure_floor(s1["daemon"]["counter_source"], tids, periods, migrations)
    us = cpu / periods / managed * 1e6
    return {"threads": managed, "periods": periods, "migrations_per_period": migrations / periods,
            "daemon_us_per_thread_period": us, "floor_us_per_thread_period": floor,
            "ratio_to_floor": us / floor, "floor_with_wakeup_us_per_thread_period": woken,
            "ratio_to_floor_with_wakeup": us / woken, "rss_mib": rss / 2**20, "fds": fds,
            "loop_mean_ms": s1["daemon"]["loop"]["mean_ms"], "loop_max_ms": s1["daemon"]["loop"]["max_ms"],
            "counter_source": s1["daemon"]["counter_source"]}


def spread(calls: int, periods: int) -> list[int]:
    """``calls`` over ``periods`` as evenly as whole calls go: 7 in 10 periods are
    seven periods of one call, not none in each (the floor made 0.7 migrations a
    period into no pin at all)."""
    return [calls * (i + 1) // periods - calls * i // periods for i in range(periods)]


def measure_floor(source: str, tids: list[int], periods: int, migrations: int) -> tuple[float, float]:
    """CPU us per thread per period of the bare syscalls, at the daemon's cadence (one
    burst every T_CPU, so caches are as cold as the daemon's): a counter read per
    thread and as many sched_setaffinity calls as the daemon made (``spread``). Then
    the same with the wake-up that starts each burst (the sleep's return), which the
    daemon's figure counts and the floor does not: the issue's floor is the reads
    and pins alone, so its verdict stays on the first figure."""
    cpus = sorted(os.sched_getaffinity(0))
    originals = {t: os.sched_getaffinity(t) for t in tids}
    with CounterSet(CounterSource(source)) as counters:
        for t in tids:
            counters.open(t)
        spent, k = 0.0, 0
        deadline, began = time.monotonic(), time.process_time()
        for pins in spread(migrations, periods):
            deadline += PERIOD_S
            time.sleep(max(0.0, deadline - time.monotonic()))
            start = time.process_time()
            for t in tids:
                counters.read(t)
            for _ in range(pins):
                t = tids[k % len(tids)]
                os.sched_setaffinity(t, {cpus[k % len(cpus)]})
                k += 1
            spent += time.process_time() - start
        woken = time.process_time() - began
    for t, mask in originals.items():
        os.sched_setaffinity(t, mask)
    return spent / periods / len(tids) * 1e6, woken / periods / len(tids) * 1e6


def summarise(rounds: list[dict]) -> dict:
    """One row per size from its rounds: the median of each figure (of the ratio taken
    round by round, the daemon and its floor measured back to back), with the ratio's
    range, since on a VM one round's floor alone swings by 2x."""
    ratios = [r["ratio_to_floor"] for r in rounds]
    row = {key: float(np.median([r[key] for r in rounds]))
           for key in ("daemon_us_per_thread_period", "floor_us_per_thread_period", "ratio_to_floor",
                       "floor_with_wakeup_us_per_thread_period", "ratio_to_floor_with_wakeup",
                       "migrations_per_period", "rss_mib", "loop_mean_ms")}
    row.update(threads=rounds[0]["threads"], fds=rounds[0]["fds"], counter_source=rounds[0]["counter_source"],
               loop_max_ms=max(r["loop_max_ms"] for r in rounds), ratio_min=min(ratios), ratio_max=max(ratios),
               rounds=rounds)
    return row


def table(rows: list[dict]) -> str:
    lines = ["| threads | daemon us/thread/period | floor us/thread/period | ratio: median of the rounds' ratios (min-max) "
             "| floor with its wake-up us (median of the rounds' ratios) | migrations/period | RSS MiB | fds (round 1) "
             "| loop mean / max of the rounds ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['threads']} | {r['daemon_us_per_thread_period']:.1f} | {r['floor_us_per_thread_period']:.1f} | "
                     f"{r['ratio_to_floor']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) | "
                     f"{r['floor_with_wakeup_us_per_thread_period']:.1f} ({r['ratio_to_floor_with_wakeup']:.2f}) | "
                     f"{r['migrations_per_period']:.1f} | {r['rss_mib']:.1f} | {r['fds']} | "
                     f"{r['loop_mean_ms']:.2f} / {r['loop_max_ms']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=10.0, help="seconds measured per size and round")
    ap.add_argument("--sizes", default="16,256,1024")
    ap.add_argument("--rounds", type=int, default=3,
                    help="daemon-and-floor measurements per size; the table shows their medians")
    ap.add_argument("--paper", action="store_true",
                    help="the paper's learning parameters instead of the daemon's defaults (writes overhead-paper.json)")
    ap.add_argument("--observe", action="store_true",
                    help="attach in observe mode (no pins; writes overhead-observe.json)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    name = "overhead-paper.json" if args.paper else "overhead-observe.json" if args.observe else "overhead.json"
    args.out = args.out or Path(__file__).parent / "results" / name
    if os.geteuid() != 0:
        sys.exit("overhead.py: run as root (the daemon needs it)")
    if args.rounds < 1:
        sys.exit("overhead.py: --rounds must be at least 1")
    raise_fd_limit()
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        rounds = []
        for k in range(args.rounds):
            print(f"measuring {n} threads for {args.window:g} s, round {k + 1} of {args.rounds} ...",
                  file=sys.stderr, flush=True)
            rounds.append(measure_daemon(n, args.window, PAPER if args.paper else "", args.observe))
        rows.append(summarise(rounds))
    text = table(rows)
    print(text)
    out = {"benchmark": "overhead", "date": stamp(),
           "machine": machine(),
           "period_s": PERIOD_S, "window_s": args.window, "rounds": args.rounds,
           "learning": "paper" if args.paper else "daemon defaults", "mode": "observe" if args.observe else "pin",
           "targets": {"ratio_to_floor": 3.0, "us_per_thread_period": 10.0},
           "rows": rows, "table": text}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
