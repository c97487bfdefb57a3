"""Benchmark: the energy-time model on the shared HPMoon data (issue 4).

Per fitting method (de, the default; ga, the paper's): 20 seeded two-phase fits, NRMSE of
time and energy of the best (closest to (0, 0), as the paper picks it) and mean +- std
over the 20, the RSD of every parameter (eq. 17), and the wall and CPU time of one fit
and of all 20. Beside them: the "whole-run" variant of eq. 7 (master and switch powered
all the time), the eq. 5 baseline refitted by linear regression, the baseline's stored
predictions, and leave-one-out errors (fit on 31 configurations, predict the 32nd).

    .venv/bin/python bench/energy_fit.py [--repeat 20] [--seed 0] [--methods de,ga] [--no-loo]

Prints a table and writes bench/results/energy_fit.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from parlschedd.energy.baseline import BaselineModel
from parlschedd.energy.cluster import Cluster, load_cluster
from parlschedd.energy.estimator import EnergyTimeModel, parameter_names
from parlschedd.energy.fitting import Problem, leave_one_out
from parlschedd.energy.measurements import Measurements, load_measurements
from parlschedd.energy.validation import model_errors
from harness import machine, stamp
from shared import ENERGY_DATA as DATA

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "energy_fit.json"
TARGETS = {"best_nrmse_time": 0.081, "best_nrmse_energy": 0.091, "one_fit_s": 10.0, "twenty_fits_s": 120.0}


def clocked(fn, *args, **kwargs):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - wall, time.process_time() - cpu


def repeated(cluster: Cluster, m: Measurements, method: str, master_power: str, repeat: int, seed: int) -> dict:
    """The fits as `model fit --repeat` makes them: the estimator, which also times each."""
    model = EnergyTimeModel(cluster, method, repeat, seed, master_power=master_power)
    _, wall, cpu = clocked(model.fit, m.nsp, m.time_s, m.energy_wh,
                           progress=lambda done, total: print(f"  {method} ({master_power}) fit {done}/{total}",
                                                              file=sys.stderr, flush=True))
    reps = model.repetitions_
    t = np.array([f.nrmse_time for f in reps.fits])
    e = np.array([f.nrmse_energy for f in reps.fits])
    best = reps.fits[reps.best]
    one = np.array(model.repetition_seconds_)
    return {
        "method": method, "master_power": master_power, "repeat": repeat, "seed": seed,
        "best": {"nrmse_time": best.nrmse_time, "nrmse_energy": best.nrmse_energy},
        "mean": {"nrmse_time": float(t.mean()), "nrmse_energy": float(e.mean())},
        "std": {"nrmse_time": float(t.std(ddof=1)), "nrmse_energy": float(e.std(ddof=1))},
        "min_time": float(t.min()), "min_energy": float(e.min()),
        "best_parameters": dict(zip(parameter_names(cluster), best.vector.tolist(), strict=True)),
        "rsd_percent": dict(zip(parameter_names(cluster), reps.rsd.tolist(), strict=True)),
        "one_fit_wall_s": {"median": float(np.median(one)), "max": float(one.max())},
        "all_fits_wall_s": wall, "all_fits_cpu_s": cpu,
        "repetitions": [{"nrmse_time": f.nrmse_time, "nrmse_energy": f.nrmse_energy, "seconds": s}
                        for f, s in zip(reps.fits, model.repetition_seconds_, strict=True)],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default="de,ga")
    ap.add_argument("--no-loo", action="store_true")
    args = ap.parse_args()

    cluster = load_cluster(DATA / "cluster-hpmoon.yaml")
    m = load_measurements(DATA / "hpmoon_v3_measurements.csv")
    problem = Problem.from_measurements(cluster, m)
    runs = [repeated(cluster, m, method, "migration", args.repeat, args.seed) for method in args.methods.split(",")]
    runs.append(repeated(cluster, m, "de", "whole-run", args.repeat, args.seed))

    base = BaselineModel(cluster).fit(m.nsp, m.time_s, m.energy_wh)
    baselines = {name: {"nrmse_time": errors.nrmse_time, "nrmse_energy": errors.nrmse_energy} for name, errors in (
        ("refitted_eq5", model_errors(*base.predict(m.nsp), m)),
        ("stored_[33]", model_errors(m.baseline_time_s, m.baseline_energy_wh, m)))}
    loo = None
    if not args.no_loo:
        out, wall, _ = clocked(leave_one_out, problem, "de", args.seed)
        rel_t = np.abs(out.time_s - m.time_s) / m.time_s
        rel_e = np.abs(out.energy_wh - m.energy_wh) / m.energy_wh
        loo = {"method": "de", "nrmse_time": out.nrmse_time, "nrmse_energy": out.nrmse_energy,
               "mean_abs_rel_error_time": float(rel_t.mean()), "mean_abs_rel_error_energy": float(rel_e.mean()),
               "max_abs_rel_error_time": float(rel_t.max()), "max_abs_rel_error_energy": float(rel_e.max()),
               "wall_s": wall, "time_s": out.time_s.tolist(), "energy_wh": out.energy_wh.tolist()}

    result = {
        "date": stamp(),
        "machine": {**machine(), "python": platform.python_version(), "load_average_at_end": os.getloadavg()},
        "targets": TARGETS, "fits": runs, "baselines": baselines, "leave_one_out": loo,
        "paper": {"best": [0.081, 0.091], "mean": [0.089, 0.139], "std": [0.012, 0.031], "pso": [0.104, 0.113],
                  "baseline": [0.213, 0.256]},
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")

    print(f"{'model / method':<32} {'best T':>7} {'best E':>7} {'mean T':>13} {'mean E':>13} {'1 fit s':>8}"
          f" {'20 fits s':>10} {'CPU s':>7}")
    for r in runs:
        name = f"proposed {r['method']} ({r['master_power']})"
        print(f"{name:<32} {r['best']['nrmse_time']:>7.3f} {r['best']['nrmse_energy']:>7.3f} "
              f"{r['mean']['nrmse_time']:>6.3f}+-{r['std']['nrmse_time']:.3f} "
              f"{r['mean']['nrmse_energy']:>6.3f}+-{r['std']['nrmse_energy']:.3f} "
              f"{r['one_fit_wall_s']['median']:>8.2f} {r['all_fits_wall_s']:>10.1f} {r['all_fits_cpu_s']:>7.1f}")
    for name, b in baselines.items():
        print(f"{'baseline ' + name:<32} {b['nrmse_time']:>7.3f} {b['nrmse_energy']:>7.3f}")
    print(f"{'paper: proposed GA':<32} {0.081:>7.3f} {0.091:>7.3f} {0.089:>6.3f}+-0.012 {0.139:>6.3f}+-0.031")
    if loo:
        print(f"leave-one-out (de): NRMSE time {loo['nrmse_time']:.3f}, energy {loo['nrmse_energy']:.3f}; "
              f"mean |rel. error| {loo['mean_abs_rel_error_time'] * 100:.1f}% / "
              f"{loo['mean_abs_rel_error_energy'] * 100:.1f}% ({loo['wall_s']:.0f} s)")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
