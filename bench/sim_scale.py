"""Benchmark: PaRLSched at scale in the simulator (issue 2).

1024 threads, 256 cores in 4 domains, heavy-tailed weights (1 + Lomax), non-uniform
background load on the first cores, a remote-access penalty for threads placed away
from their memory. Per method (parlsched with the spec's default parameters, with the
daemon's now and before, tuned three ways; the kernel-like balancer, the same balancer
confined to home domains, round-robin and random pinning): makespan / lower bound over time,
periods until it stays within 1.10 of the bound (the median over all seeds, a seed that
never settles counting as never, and how many seeds settled by period 300), migrations,
and the scheduler's own CPU cost per thread per period, all measured in this run.

    .venv/bin/python bench/sim_scale.py [--periods 600] [--seeds 5] [--tail 3.0]
    .venv/bin/python bench/sim_scale.py --first-seed 5 --seeds 80 --only 'free|daemon defaults\)|home' \
        --out bench/results/sim_scale-heldout.json     # the held-out seeds

Prints a table and writes bench/results/sim_scale.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from harness import machine, stamp
from parlschedd.config import DAEMON_LEARNING
from parlschedd.learning.params import LearningParams
from parlschedd.sim.background import Background
from parlschedd.sim.baselines import HomeDomainBalancer, KernelBalancer, RandomPinning, RoundRobin
from parlschedd.sim.game import Machine, Threads
from parlschedd.sim.simulator import ParlschedPolicy, Workload, simulate

THREADS, CORES, DOMAINS = 1024, 256, 4
DOMAIN_EVERY = 40
SHARP5 = LearningParams(eps=0.3, lam=0.001, decay=0.99, normalise="thread", sharpness=5.0)
PARAMS = {
    "parlsched (spec defaults)": LearningParams(),
    "parlsched (tuned)": LearningParams(eps=0.7, lam=0.001, decay=0.99),
    # Chosen on held-out seeds 5-24 (17/20 within 1.10 by period 300, against 10/20 for
    # "tuned"): each thread normalised by its own running maximum, sharpened, so light
    # threads learn as fast as heavy ones and a crowded core is reinforced little.
    "parlsched (thread, sharpness 5)": SHARP5,
    # The same with the daemon's "free" action (the kernel balances a free thread inside
    # its domain): 79/80 held-out seeds 5-84 with gamma 0.9 or 0.7.
    "parlsched (thread, sharpness 5, free)": replace(SHARP5, free=True),
    # The daemon's defaults: the row above with gamma 0.7 (a domain must look clearly
    # better before a thread leaves for it), picked after gamma 0.9 missed seed 3;
    # the held-out seeds do not tell the two apart (79/80 each).
    "parlsched (daemon defaults)": DAEMON_LEARNING,
    # The daemon's defaults until 2026-12-03: every thread rewarded by the target's total.
    "parlsched (earlier daemon defaults: eps 0.2, free, reward target)": LearningParams(eps=0.2, free=True, reward="target"),
}
MARKS = (0, 10, 50, 100, 200, 300)
TARGET_PERIODS = 300  # issue 2: within 1.10 of the bound in at most this many periods


def scenario(seed: int, tail: float) -> tuple[Machine, Workload, Background]:
    rng = np.random.default_rng(seed)
    machine = Machine.uniform(CORES, DOMAINS, penalty=0.2)
    weights = 1.0 + rng.pareto(tail, THREADS)
    home = np.arange(THREADS) * DOMAINS // THREADS
    background = Background(CORES, "non-uniform", cores=CORES // 16, load=2.0)
    return machine, Workload(Threads(weights, home)), background


def core_cost_us(params: LearningParams, machine: Machine, periods: int) -> float:
    """CPU microseconds per thread per period of TwoLevelScheduler.step alone."""
    policy = ParlschedPolicy(machine, params, DOMAIN_EVERY)
    rng = np.random.default_rng(1)
    keys = np.arange(THREADS, dtype=np.int64)
    u = rng.random(THREADS)
    policy.scheduler.step(keys, u)
    start = time.process_time()
    for _ in range(periods):
        policy.scheduler.step(keys, u * rng.random(THREADS))
    return (time.process_time() - start) / periods / THREADS * 1e6


def run(periods: int, seeds: range, tail: float, only: re.Pattern[str]) -> dict:
    results: dict[str, dict] = {}
    for seed in seeds:
        print(f"seed {seed} ...", file=sys.stderr, flush=True)
        machine, workload, background = scenario(seed, tail)
        methods = {name: ParlschedPolicy(machine, replace(p, seed=seed), DOMAIN_EVERY) for name, p in PARAMS.items()}
        methods |= {
            "kernel-like balancer": KernelBalancer(machine),
            "kernel-like, home domains": HomeDomainBalancer(machine),
            "round-robin": RoundRobin(CORES),
            "random": RandomPinning(CORES, np.random.default_rng(seed)),
        }
        for name, policy in methods.items():
            if not only.search(name):
                continue
            trace = simulate(policy, machine, workload, background, periods, noise=0.05, rng=np.random.default_rng(seed))
            r = results.setdefault(name, {"ratio": [], "within_1.10": [], "ratio_end": [], "migrations_last": []})
            r["ratio"].append(trace.ratio.tolist())
            r["within_1.10"].append(trace.periods_to_within(1.10))
            r["ratio_end"].append(round(float(trace.ratio[-100:].mean()), 4))  # per seed, the last 100 periods
            r["migrations_last"].append(int(trace.migrations[-50:].mean()))
    machine, workload, background = scenario(0, tail)
    for name, p in PARAMS.items():
        if name in results:
            results[name]["core_us_per_thread"] = core_cost_us(p, machine, 200)
    return results


def settle_text(within: list[int | None]) -> str:
    """The column "periods to <=1.10": the median over all seeds, a seed that never
    settled counting as never (later than any number), so "never" when the median seed
    never settled; then how many seeds settled by TARGET_PERIODS."""
    periods = np.array([np.inf if w is None else w for w in within], dtype=float)
    median = float(np.median(periods))
    by_target = int(np.sum(periods <= TARGET_PERIODS))
    return f"{'never' if np.isinf(median) else f'{median:g}'} ({by_target}/{len(within)} seeds by {TARGET_PERIODS})"


def table(results: dict, periods: int) -> str:
    marks = [m for m in MARKS if m < periods] + [periods - 1]
    head = "| method | " + " | ".join(f"ratio@{m}" for m in marks) + " | periods to <=1.10 (median of all seeds) | migrations/period (end) | core us/thread/period |"
    lines = [head, "|" + "---|" * (len(marks) + 4)]
    for name, r in results.items():
        ratio = np.median(np.array(r["ratio"]), axis=0)
        w_txt = settle_text(r["within_1.10"])
        cost = f"{r['core_us_per_thread']:.2f}" if "core_us_per_thread" in r else "-"
        lines.append(
            f"| {name} | " + " | ".join(f"{ratio[m]:.3f}" for m in marks)
            + f" | {w_txt} | {int(np.median(r['migrations_last']))} | {cost} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--periods", type=int, default=600)
    ap.add_argument("--seeds", type=int, default=5, help="how many seeds")
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    ap.add_argument("--only", default="", help="regex: run only the methods whose name matches")
    ap.add_argument("--tail", type=float, default=3.0, help="Lomax shape of the weights (smaller: heavier tail)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "sim_scale.json")
    args = ap.parse_args()
    started = time.time()
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    results = run(args.periods, seeds, args.tail, re.compile(args.only))
    text = table(results, args.periods)
    print(text)
    summary = {
        "benchmark": "sim_scale",
        "machine": {**machine(), "python": platform.python_version()},
        "date": stamp(),
        "setup": {"threads": THREADS, "cores": CORES, "domains": DOMAINS, "domain_every": DOMAIN_EVERY,
                  "weights": f"1 + Lomax({args.tail})", "background": f"non-uniform, load 2.0 on the first {CORES // 16} cores",
                  "remote_penalty": 0.2, "noise": "lognormal sigma 0.05", "periods": args.periods, "seeds": [seeds.start, seeds.stop - 1],
                  "params": {k: asdict(v) for k, v in PARAMS.items()}},
        "targets": {"within_1.10_periods": TARGET_PERIODS, "core_us_per_thread": 5.0},
        "results": {k: {kk: vv for kk, vv in v.items() if kk != "ratio"} | {"ratio_median": np.median(np.array(v["ratio"]), axis=0).round(4).tolist()} for k, v in results.items()},
        "table": text,
        "wall_s": round(time.time() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"\nwrote {args.out} in {summary['wall_s']} s")


if __name__ == "__main__":
    main()
