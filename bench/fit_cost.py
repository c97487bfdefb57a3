"""Benchmark: what one fit of the energy-time model costs against the measured
configurations it is fitted to (issue 4's model; review F4: a CSV of 1500 configurations
took hours a fit with nothing said).

Algorithm 1 runs in every evaluation of the time phase, over each configuration's NSp,
so a generation's cost grows with the number of configurations times their NSp. On the
shared HPMoon cluster with synthetic measurements at NSp 1..n, one default fit (de) is
run with its generations capped (``--generations``) and each generation timed through
the fit's own ``on_generation``; the table gives a generation of each phase, the full
default budget (1000 time, 300 energy generations: at most, as differential evolution
stops once converged) projected from them, and that as a ratio to the shared data's 32
configurations measured in the same run.

    .venv/bin/python bench/fit_cost.py [--sizes 32,200,1500] [--generations 10]

Prints a table and writes bench/results/fit_cost.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from parlschedd.energy.cluster import load_cluster
from parlschedd.energy.fitting import DESettings, Generation, Problem, fit_once
from harness import machine, stamp
from shared import ENERGY_DATA as DATA

OUT = Path(__file__).resolve().parent / "results" / "fit_cost.json"
BUDGET = DESettings()


def timed_fit(p: Problem, generations: int, seed: int) -> dict[str, float]:
    """Seconds a generation of each phase takes, from the fit's own reports: after its
    first, which evaluates the initial population too; with it where the phase
    converged after one."""
    told: list[tuple[float, Generation]] = []
    fit_once(p, "de", seed, de=DESettings().with_generations(generations),
             on_generation=lambda g: told.append((time.perf_counter(), g)))
    per: dict[str, float] = {}
    for phase in ("time", "energy"):
        at = [(t, g.done) for t, g in told if g.phase == phase]
        (t0, _), (t1, d1), (tn, dn) = at[0], at[1], at[-1]
        per[phase] = (tn - t1) / (dn - d1) if dn > d1 else (tn - t0) / dn
    return per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="32,100,200,500,1500,3840",
                        help="measured configurations, NSp 1..n, up to the HPMoon run's 3840 individuals")
    parser.add_argument("--generations", type=int, default=10, help="generations of each phase run and timed (>= 2)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if args.generations < 2:
        parser.error("--generations must be at least 2: the first evaluates the initial population too")
    sizes = [int(n) for n in args.sizes.split(",")]
    cluster = load_cluster(DATA / "cluster-hpmoon.yaml")
    if max(sizes) > cluster.run.individuals:  # subpopulations of no one: model fit refuses such NSp
        parser.error(f"--sizes up to the cluster's {cluster.run.individuals} individuals")
    rng = np.random.default_rng(0)
    measured_on, measured_at = machine(), stamp()
    rows = []
    for n in sizes:
        nsp = np.arange(1, n + 1)
        p = Problem(cluster, nsp, 300 + 100 * rng.random(n), 60 + 10 * rng.random(n))
        print(f"  {n} configurations: {args.generations} generations of each phase", flush=True)
        per = timed_fit(p, args.generations, seed=0)
        full = per["time"] * BUDGET.time_generations + per["energy"] * BUDGET.energy_generations
        rows.append({"configurations": n, "time_generation_s": per["time"], "energy_generation_s": per["energy"],
                     "default_fit_s": full})
    base = rows[0]
    for row in rows:
        row["ratio_to_first"] = row["default_fit_s"] / base["default_fit_s"]
    print(f"\n| configurations (NSp 1..n) | time phase s/generation | energy phase s/generation | "
          f"default fit, at most ({BUDGET.time_generations}+{BUDGET.energy_generations} generations) | "
          f"ratio to {base['configurations']} |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['configurations']} | {r['time_generation_s']:.4f} | {r['energy_generation_s']:.4f} | "
              f"{r['default_fit_s'] / 60:.1f} min | {r['ratio_to_first']:.0f}x |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": measured_on, "measured_at": measured_at,
                                    "generations_timed": args.generations, "rows": rows}, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
