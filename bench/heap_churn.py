"""Benchmark: the daemon's memory over time under process churn (issue 3's daemon, run
for days: it must not grow).

Two real parlschedd daemons (T_CPU = 0.1 s) run side by side for the same minutes: one
manages, attached with --descendants, a process that forks 4 children a second, each
with 3 threads that spin 50 ms and live about a second (the churn of a job that runs
short tasks); the other, the baseline, a process of 4 idle threads. Every ``--every``
seconds each daemon's [heap] (the Rss of its brk heap, /proc/PID/smaps: malloc's
arena, where a leak or fragmentation shows) and VmRSS are read. The figure is the
growth of [heap] after the first sample, each arm's, and the churn arm's less the
baseline's.

    sudo .venv/bin/python bench/heap_churn.py [--minutes 15] [--every 30]

Prints a table and writes bench/results/heap_churn.json.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from harness import machine, stamp, start_daemon, start_idle_target, stop_daemon
from parlschedctl import client

CONFIG = "period_s: 0.1\ntargets: []\n"

FORKER = r"""
import multiprocessing as mp, threading, time
def child():
    def work():
        end = time.monotonic() + 0.05
        while time.monotonic() < end:
            pass
        time.sleep(0.9)
    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads: t.start()
    for t in threads: t.join()
mp.set_start_method("fork")
live = []
while True:
    for _ in range(4):
        p = mp.Process(target=child); p.start(); live.append(p)
    time.sleep(1)
    for p in [p for p in live if not p.is_alive()]:
        p.join(); live.remove(p)
"""


def memory_kib(pid: int) -> tuple[int, int]:
    """The process's [heap] Rss and its RSS, in KiB."""
    process = psutil.Process(pid)
    heap = sum(m.rss for m in process.memory_maps() if m.path == "[heap]")
    return heap // 1024, process.memory_info().rss // 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "heap_churn.json")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a kill stops the daemons and targets too (the finally)

    arms = {"churn": {}, "baseline": {}}
    measured_on, measured_at = machine(), stamp()  # the code the daemons start with, not the checkout's at the end
    with tempfile.TemporaryDirectory(prefix="parlsched-heap-") as tmp:
        daemons, targets = [], []
        try:
            for name, arm in arms.items():
                where = Path(tmp) / name
                where.mkdir()
                daemon, sock = start_daemon(where, CONFIG)
                daemons.append(daemon)
                if name == "churn":
                    targets.append(subprocess.Popen([sys.executable, "-c", FORKER]))
                    time.sleep(0.5)
                else:
                    targets.append(start_idle_target(4))
                client.request(sock, "attach", pid=targets[-1].pid, descendants=name == "churn")
                arm.update(pid=daemon.pid, samples=[])
            started = time.monotonic()
            while (elapsed := time.monotonic() - started) <= args.minutes * 60:
                for arm in arms.values():
                    heap, rss = memory_kib(arm["pid"])
                    arm["samples"].append({"t_s": round(elapsed, 1), "heap_kib": heap, "rss_kib": rss})
                print(f"{elapsed:6.0f} s  " + "  ".join(f"{name}: [heap] {arm['samples'][-1]['heap_kib']} KiB, RSS "
                                                        f"{arm['samples'][-1]['rss_kib']} KiB"
                                                        for name, arm in arms.items()), file=sys.stderr, flush=True)
                time.sleep(args.every)
        finally:
            for target in targets:  # the forker's children live a second more: the daemon drops them
                target.kill()
                target.wait()
            for daemon in daemons:
                stop_daemon(daemon)

    rows = []
    for name, arm in arms.items():
        first, last = arm["samples"][0], arm["samples"][-1]
        rows.append({"arm": name, "minutes": round(last["t_s"] / 60, 1), "heap_first_kib": first["heap_kib"],
                     "heap_last_kib": last["heap_kib"], "heap_max_kib": max(s["heap_kib"] for s in arm["samples"]),
                     "heap_growth_kib": last["heap_kib"] - first["heap_kib"],
                     "rss_growth_kib": last["rss_kib"] - first["rss_kib"], "samples": arm["samples"]})
    churn, baseline = rows
    result = {"benchmark": "heap_churn", "date": measured_at, "machine": measured_on, "period_s": 0.1,
              "churn": "4 children a second, 3 threads each, ~1 s each, attached with --descendants",
              "heap_growth_beyond_baseline_kib": churn["heap_growth_kib"] - baseline["heap_growth_kib"], "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")

    print("| arm | minutes | [heap] first KiB | [heap] last KiB | [heap] max KiB | [heap] growth KiB | RSS growth KiB |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['arm']} | {r['minutes']} | {r['heap_first_kib']} | {r['heap_last_kib']} | {r['heap_max_kib']} | "
              f"{r['heap_growth_kib']} | {r['rss_growth_kib']} |")
    print(f"\nthe churn arm's [heap] growth beyond the baseline's: {result['heap_growth_beyond_baseline_kib']} KiB "
          f"({args.out})")


if __name__ == "__main__":
    main()
