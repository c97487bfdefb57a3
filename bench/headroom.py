"""The ceiling of issue 6's targets: how much any static placement of the worker threads
gains over the plain kernel in the loaded scenarios of bench/scenarios.py, measured on
this machine in one run.

For each non-uniform and time-varying scenario (the same commands and background hog as
bench/scenarios.py, the work sized the same way: calibrated to this machine's speed at
the start, or fixed with --scale) the workload runs under the plain kernel (K) and
with its worker threads pinned from their first instant to a split: k of them on the
hog's CPU, the others round-robin over the remaining CPUs, for each k of ``splits``
(avoid, share and crowd the hog). The arms are interleaved K S1 S2 S3, K S1 S2 S3, ...
for --reps rounds; the gain of a split in a round is 100 (K - S) / K, reported as the
median with its IQR and its distribution-free interval (scenarios.median_ci).

The best split is an oracle: it knows the hog's CPU and the split before the run, pays
nothing to explore, and is picked after the fact (the best of several noisy medians,
which biases it upward). So it bounds what parlschedd can gain with pins. The daemon
also has the kernel's own placement among a thread's actions ("free"), so a scenario's
ceiling is max(0, the best split's median gain), and the mean of the ceilings over the
scenarios is the most that the target "mean gain of at least 5% across the non-uniform
and time-varying scenarios" can reach here with these workloads.

Run as root (it pins the workload's threads):
    .venv/bin/python bench/headroom.py                      # the 12 loaded scenarios, 3 rounds
    .venv/bin/python bench/headroom.py --scenarios 'cpu-.*' --reps 5
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import machine  # noqa: E402
from scenarios import (  # noqa: E402
    RESULTS, add_work_arguments, median_ci, q, run_once, sized_matrix, usable_cpus,
)

LOADED = r"-(nonuniform|timevarying)$"


def splits(workers: int) -> list[int]:
    """How many workers share the hog's CPU in each arm: one (avoid it), half (the even
    split) and all but one (crowd it, the best for work-sharing threads: spec, "Measured
    headroom"). Every arm leaves at least one worker on another CPU."""
    return sorted({k for k in (1, workers // 2, workers - 1) if 1 <= k < workers})


def cpu_of(index: int, k: int, hog: int, others: list[int]) -> int:
    """The CPU of the index-th worker (in order of appearance) in split ``k``."""
    return hog if index < k else others[(index - k) % len(others)]


def pin_workers(proc: subprocess.Popen, workers: int, k: int, hog: int, others: list[int],
                poll_s: float = 0.001) -> int:
    """Pin each worker thread of ``proc`` (every thread but the main one) as it appears,
    until ``workers`` are pinned or the process ends; returns how many were pinned."""
    pinned: set[int] = set()
    task = f"/proc/{proc.pid}/task"
    while len(pinned) < workers and proc.poll() is None:
        try:
            tids = sorted(int(t) for t in os.listdir(task))
        except OSError:
            break
        for tid in tids:
            if tid == proc.pid or tid in pinned or len(pinned) == workers:
                continue
            try:
                os.sched_setaffinity(tid, {cpu_of(len(pinned), k, hog, others)})
            except ProcessLookupError:
                continue
            pinned.add(tid)
        time.sleep(poll_s)
    return len(pinned)


def summarise(sc: dict, kernel: list[dict], by_split: dict[int, list[dict]]) -> dict:
    """One scenario: each split's gains over the kernel round by round, the best split
    and the scenario's ceiling (max(0, best median): the daemon can always stay free)."""
    k_walls = [r["wall_s"] for r in kernel]
    arms = []
    for k, runs in by_split.items():
        gains = [100.0 * (a - r["wall_s"]) / a for a, r in zip(k_walls, runs)]
        lo, hi, coverage = median_ci(gains)
        speeds = [r["speed"] for r in runs if r.get("speed") is not None]
        arms.append({
            "on_hog_cpu": k, "median_s": round(statistics.median(r["wall_s"] for r in runs), 4),
            "gain_median_pct": round(statistics.median(gains), 2),
            "gain_iqr_pct": [round(q(gains, 0.25), 2), round(q(gains, 0.75), 2)],
            "gain_median_ci_pct": [round(lo, 2), round(hi, 2)], "gain_median_ci_coverage": round(coverage, 4),
            "speed": round(statistics.fmean(speeds), 3) if speeds else None,
            "pinned_min": min(r["pinned"] for r in runs), "runs": runs,
        })
    best = max(arms, key=lambda a: a["gain_median_pct"])
    speeds = [r["speed"] for r in kernel if r.get("speed") is not None]
    return {
        "name": sc["name"], "workload": sc["workload"], "threads": sc["threads"], "cmd": " ".join(sc["cmd"]),
        "kernel_median_s": round(statistics.median(k_walls), 4),
        "kernel_speed": round(statistics.fmean(speeds), 3) if speeds else None,
        "splits": arms, "best_on_hog_cpu": best["on_hog_cpu"], "best_gain_median_pct": best["gain_median_pct"],
        "ceiling_pct": max(0.0, best["gain_median_pct"]), "kernel_runs": kernel,
    }


def verdict(rows: list[dict], target_pct: float = 5.0) -> dict:
    ceilings = [r["ceiling_pct"] for r in rows]
    mean = statistics.fmean(ceilings)
    return {"scenarios": len(rows), "mean_ceiling_pct": round(mean, 2), "target_pct": target_pct,
            "target_reachable_with_pins": mean >= target_pct,
            "by_workload": {wl: round(statistics.fmean(r["ceiling_pct"] for r in rows if r["workload"] == wl), 2)
                            for wl in sorted({r["workload"] for r in rows})}}


def markdown(rows: list[dict]) -> str:
    out = ["| scenario | threads | kernel median s (speed) | split on hog's CPU: gain median % [IQR] (speed) | ceiling % |",
           "|---|---|---|---|---|"]
    for r in rows:
        arms = "; ".join(f"{a['on_hog_cpu']}: {a['gain_median_pct']:+.1f} [{a['gain_iqr_pct'][0]:+.1f}, "
                         f"{a['gain_iqr_pct'][1]:+.1f}] ({a['speed']})" for a in r["splits"])
        out.append(f"| {r['name']} | {r['threads']} | {r['kernel_median_s']:.3f} ({r['kernel_speed']}) | {arms} "
                   f"| {r['ceiling_pct']:+.1f} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3, help="rounds of all arms per scenario (default 3)")
    ap.add_argument("--scenarios", default=LOADED, help=f"regex on scenario names (default {LOADED!r})")
    add_work_arguments(ap)
    ap.add_argument("--toggle-s", type=float, default=1.0, help="on/off period of the time-varying hog")
    ap.add_argument("--tag", default="", help="write bench/results/headroom-TAG.json instead of headroom.json")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-ups (workload, hog)
    if os.geteuid() != 0:
        raise SystemExit("run as root: the oracle pins threads of the workload")
    cpus = usable_cpus()
    if len(cpus) < 2:
        raise SystemExit("needs two usable CPUs or more: a split puts workers beside the hog and elsewhere")
    hog, others = cpus[0], cpus[1:]  # scenarios.start_background pins the hog to the first usable CPU
    pattern = re.compile(args.scenarios)
    RESULTS.mkdir(parents=True, exist_ok=True)
    started, t_start, load_start = dt.datetime.now(dt.timezone.utc), time.monotonic(), os.getloadavg()
    matrix, work = sized_matrix(args, lambda s: bool(pattern.search(s["name"])) and s["cpu_availability"] != "uniform",
                                f"no loaded scenario matches {args.scenarios!r} (a split needs the hog)")
    rows = []
    for n, sc in enumerate(matrix, 1):
        kernel: list[dict] = []
        by_split: dict[int, list[dict]] = {k: [] for k in splits(sc["threads"])}
        for _ in range(args.reps):
            kernel.append(run_once(sc, "A", None, args.toggle_s, False))
            for k, runs in by_split.items():
                pin = lambda proc, k=k, sc=sc: {"pinned": pin_workers(proc, sc["threads"], k, hog, others)}  # noqa: E731
                runs.append({**run_once(sc, "A", None, args.toggle_s, False, during=pin), "mode": f"split-{k}"})
        row = summarise(sc, kernel, by_split)
        rows.append(row)
        print(f"[{n}/{len(matrix)}] {sc['name']}: kernel {row['kernel_median_s']:.3f}s, best {row['best_on_hog_cpu']} "
              f"on the hog's CPU {row['best_gain_median_pct']:+.1f}%, ceiling {row['ceiling_pct']:+.1f}% "
              f"({time.monotonic() - t_start:.0f} s)", file=sys.stderr, flush=True)
    result = {
        "benchmark": "headroom", "date": started.isoformat(timespec="seconds"),
        "machine": {**machine(), "usable_cpus": cpus, "hog_cpu": hog},
        "load_average": {"at_start": [round(x, 2) for x in load_start], "at_end": [round(x, 2) for x in os.getloadavg()]},
        "reps": args.reps, **work, "toggle_s": args.toggle_s,
        "duration_s": round(time.monotonic() - t_start, 1), "verdict": verdict(rows), "scenarios": rows,
    }
    out = RESULTS / (f"headroom-{args.tag}.json" if args.tag else "headroom.json")
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(rows))
    print()
    print(json.dumps(result["verdict"]), "duration", result["duration_s"], "s; wrote", out)


if __name__ == "__main__":
    main()
