"""Benchmark: what one period's work costs after the daemon has slept (issue 3).

The daemon sleeps between periods (T_CPU = 0.1 s) and then runs a short burst. This
measures how the CPU time of that burst depends on how long the process slept before
it, against the same burst run back to back (gap 0, the baseline of the same run):
the part of a small target's overhead (bench/overhead.py at 16 threads) that is the
machine waking up cold rather than work the daemon could leave out.

The burst is the quiet period of a 16-thread target, in the daemon's own order and
with its own code: the fstat(2) of the task directory that checks no thread came or
went, one counter read per thread (``CounterSet.read_many``), and the scheduler step
with the daemon's default learning parameters on the machine's CPUs as one domain.
Each part is timed with the thread's CPU clock; the median over ``--reps`` bursts per
gap is reported.

    sudo .venv/bin/python bench/cold_start.py [--threads 16] [--reps 100]

Prints a table and writes bench/results/cold_start.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from harness import machine, stamp, start_idle_target
from parlschedd.config import DAEMON_LEARNING
from parlschedd.host.perf import CounterSet, detect_source
from parlschedd.learning.scheduler import TwoLevelScheduler

GAPS_S = (0.0, 0.0001, 0.001, 0.01, 0.1)
PARTS = ("fstat task dir", "counter reads", "scheduler step")


def burst(task_fd: int, counters: CounterSet, tids: list[int], scheduler: TwoLevelScheduler,
          last: np.ndarray) -> list[int]:
    """One quiet period's work; the CPU ns of each of PARTS."""
    clock = time.thread_time_ns
    t0 = clock()
    os.fstat(task_fd)
    t1 = clock()
    values, _ = counters.read_many(tids)
    t2 = clock()
    scheduler.step(np.asarray(tids), values - last)
    t3 = clock()
    last[:] = values
    return [t1 - t0, t2 - t1, t3 - t2]


def measure(threads: int, reps: int) -> tuple[str, list[dict]]:
    target = start_idle_target(threads)
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{target.pid}/task"))
        task_fd = os.open(f"/proc/{target.pid}/task", os.O_RDONLY | os.O_DIRECTORY)
        source = detect_source()
        scheduler = TwoLevelScheduler([sorted(os.sched_getaffinity(0))], DAEMON_LEARNING, domain_every=40)
        with CounterSet(source) as counters:
            for tid in tids:
                counters.open(tid)
            last = counters.read_many(tids)[0]
            for _ in range(50):  # past the joins: the steady period
                burst(task_fd, counters, tids, scheduler, last)
            rows = []
            for gap in GAPS_S:
                print(f"gap {gap * 1e3:g} ms ...", file=sys.stderr, flush=True)
                spent = []
                for _ in range(reps):
                    if gap:
                        time.sleep(gap)
                    spent.append(burst(task_fd, counters, tids, scheduler, last))
                med = np.median(np.array(spent), axis=0) / 1e3
                rows.append({"gap_ms": gap * 1e3, **{p: float(m) for p, m in zip(PARTS, med)},
                             "total_us": float(np.median(np.sum(spent, axis=1)) / 1e3)})
        os.close(task_fd)
    finally:
        target.kill()
        target.wait()
    base = rows[0]["total_us"]
    for r in rows:
        r["ratio_to_back_to_back"] = r["total_us"] / base
    return source.value, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--reps", type=int, default=100, help="bursts per gap")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "cold_start.json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("cold_start.py: run as root (perf counters on another process's threads)")
    source, rows = measure(args.threads, args.reps)
    lines = ["| idle gap before the burst | " + " | ".join(f"{p} us" for p in PARTS)
             + " | burst us (median) | ratio to back to back |", "|---" * (len(PARTS) + 3) + "|"]
    for r in rows:
        lines.append(f"| {r['gap_ms']:g} ms | " + " | ".join(f"{r[p]:.1f}" for p in PARTS)
                     + f" | {r['total_us']:.1f} | {r['ratio_to_back_to_back']:.1f} |")
    table = "\n".join(lines)
    print(f"{args.threads} threads, counter source {source}\n{table}")
    out = {"benchmark": "cold_start", "date": stamp(),
           "machine": machine(),
           "load_average": [round(x, 2) for x in os.getloadavg()],
           "threads": args.threads, "reps": args.reps, "counter_source": source, "rows": rows, "table": table}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
