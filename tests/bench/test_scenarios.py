"""bench/scenarios.py: the confidence interval the verdict reads, the work sizes
calibrated to the machine's speed, and what a run under the daemon records."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from scenarios import (  # noqa: E402
    PROBE, PROBE_MIN_S, PROBE_RUNS, WorkSizes, calibrate, mean_utility, median_ci, placement_stats, run_once,
    time_command, verdict, workload_cmd,
)
from tests.conftest import needs_root, start_daemon  # noqa: E402


@pytest.mark.parametrize("n", [5, 9, 15])
def test_the_median_interval_covers_as_often_as_it_says(n: int) -> None:
    """On skewed noise (lognormal, like wall times) of known median 1.0: the share of
    samples whose interval holds the median is the stated coverage."""
    rng = np.random.default_rng(7)
    trials = 2000
    hits, coverage = 0, None
    for sample in rng.lognormal(0.0, 0.5, size=(trials, n)):
        lo, hi, coverage = median_ci(sample.tolist())
        hits += lo <= 1.0 <= hi
    assert coverage >= (0.93 if n == 5 else 0.95)
    assert abs(hits / trials - coverage) < 0.02


def test_the_interval_is_made_of_order_statistics() -> None:
    assert median_ci([5.0, 1.0, 4.0, 2.0, 3.0]) == (1.0, 5.0, 0.9375)  # 5 pairs: the range
    lo, hi, coverage = median_ci([float(x) for x in range(15)])
    assert (lo, hi) == (3.0, 11.0) and coverage == pytest.approx(0.96484375)


def _row(name: str, median: float, ci: tuple[float, float]) -> dict:
    return {"name": name, "cpu_availability": name.split("-")[-1], "gain_median_pct": median,
            "gain_median_ci_pct": list(ci)}


def test_the_verdict_names_only_rows_whose_whole_interval_is_below_minus_2() -> None:
    rows = [_row("cpu-small-uniform", -3.0, (-9.0, -2.1)),      # median and interval below -2
            _row("mem-small-nonuniform", -9.8, (-18.2, +1.8)),  # median below, interval reaches above
            _row("cpu-large-nonuniform", +6.0, (+4.0, +8.0)),
            _row("cpu-large-timevarying", +4.0, (-1.0, +9.0))]
    v = verdict(rows)
    assert v["worse_than_2pct_beyond_noise"] == ["cpu-small-uniform"]
    assert v["worst_scenario"] == "mem-small-nonuniform" and not v["no_scenario_worse_than_2pct"]
    assert v["mean_gain_nonuniform_timevarying_pct"] == pytest.approx(0.07, abs=0.005)  # (-9.8 + 6 + 4) / 3
    assert not v["mean_gain_target_5pct_met"]


def test_fixed_sizes_are_those_of_the_runs_before_calibration() -> None:
    sizes = WorkSizes.scaled(2.5)
    assert (sizes.cpu_events, sizes.mem_total_mib) == (12500, 80 * 1024)
    assert "--events=12500" in workload_cmd("cpu", 4, sizes.of("cpu"))
    assert "--memory-total-size=81920M" in workload_cmd("mem", 4, sizes.of("mem"))


class LinearMachine:
    """A stand-in for timing sysbench (not installed for the fast tests): the run's time
    is a start-up plus its size over the workload's rate; records each command."""

    def __init__(self, rates: dict[str, float], startup_s: float = 0.01) -> None:
        self.rates, self.startup_s, self.cmds = rates, startup_s, []

    def __call__(self, cmd: list[str]) -> float:
        self.cmds.append(cmd)
        wl = "cpu" if cmd[1] == "cpu" else "mem"
        flag = "--events=" if wl == "cpu" else "--memory-total-size="
        size = int(next(a for a in cmd if a.startswith(flag))[len(flag):].rstrip("M"))
        return self.startup_s + size / self.rates[wl]


def test_calibrated_sizes_make_the_reference_run_last_the_target() -> None:
    machine = LinearMachine({"cpu": 2336.0, "mem": 10300.0})
    sizes, measured = calibrate(4.0, timer=machine)
    for wl in ("cpu", "mem"):
        assert machine.startup_s + sizes.of(wl) / machine.rates[wl] == pytest.approx(4.0, rel=0.02)
        assert measured[wl]["probe_median_s"] >= PROBE_MIN_S
    threads = 2 * len(os.sched_getaffinity(0))  # the medium availability
    assert all(f"--threads={threads}" in cmd for cmd in machine.cmds)
    assert measured["target_s"] == 4.0


def test_a_probe_too_short_on_a_fast_machine_is_doubled_until_it_lasts() -> None:
    machine = LinearMachine({"cpu": 100 * PROBE.cpu_events, "mem": 1000.0})  # the cpu probe takes 1/100 s
    sizes, measured = calibrate(2.0, workloads=("cpu",), timer=machine)
    probes = [int(c[3].removeprefix("--events=")) for c in machine.cmds]
    doublings = next(n for n in range(20) if machine.startup_s + 2**n / 100 >= PROBE_MIN_S)
    assert probes == sorted(probes) and probes[-1] == PROBE.cpu_events * 2**doublings
    assert len(probes) == (doublings + 1) * PROBE_RUNS
    assert sizes.cpu_events == pytest.approx(2.0 * 100 * PROBE.cpu_events, rel=0.02)
    assert sizes.mem_total_mib == PROBE.mem_total_mib and "mem" not in measured  # not asked: not run


def test_time_command_times_a_real_process_and_fails_with_it() -> None:
    assert 0.2 <= time_command(["sleep", "0.2"]) < 5.0
    with pytest.raises(subprocess.CalledProcessError):
        time_command(["false"])


def _history(*periods: tuple[list[int], list[int | None], list[float | None]], source: str = "perf:task-clock") -> dict:
    """A history reply of process 100 as the daemon sends one: per period the tids,
    their CPUs and their utilities."""
    return {"ok": True, "pid": 100, "counter_source": source,
            "samples": [{"t": float(i), "tids": t, "cpu": c, "utility": u} for i, (t, c, u) in enumerate(periods)]}


def test_placement_counts_the_workers_only() -> None:
    """The main thread (tid = pid) waits for the workers: its CPU and moves do not count;
    neither does a worker without a CPU in a period."""
    h = _history(([100, 101, 102], [0, 0, 1], [0.0, 5e8, 5e8]),          # balanced: one worker per CPU
                 ([100, 101, 102], [1, 0, 0], [0.0, 4e8, 6e8]),          # both on CPU 0: imbalanced; 102 moved
                 ([100, 101, 102], [0, None, 1], [0.0, None, 9e8]))      # 101 has no CPU; 102 moved back
    stats = placement_stats(h, [0, 1])
    assert stats == {"imbalanced_share": 0.5, "moves_per_period": 1.0}  # 2 periods with 2 workers; 2 moves / 2
    assert mean_utility(h) == pytest.approx((0.5 + 0.5 + 0.9) / 3)  # per period, in CPU share


def test_the_utility_is_in_the_unit_of_the_figures_axis() -> None:
    """Instructions per second in billions, as the plots show them; a source the units
    table does not know, as the daemon gave it; no worker's utility, none."""
    h = _history(([100, 101], [0, 1], [None, 2.0e9]), source="perf:instructions")
    assert mean_utility(h) == 2.0
    assert mean_utility(_history(([100, 101], [0, 1], [None, 7.0]), source="other")) == 7.0
    assert mean_utility(_history(([100, 101], [0, 1], [3.0, None]))) is None


THREADS = "import threading, time\n" \
    "ts = [threading.Thread(target=lambda: [time.sleep(0.01) for _ in range(150)]) for _ in range(3)]\n" \
    "[t.start() for t in ts]; [t.join() for t in ts]\n"


@needs_root
@pytest.mark.parametrize("kept", [None, 8])
def test_a_b_run_reads_the_daemon_s_history_once_the_target_exited(tmp_path: Path, capsys, kept: int | None) -> None:
    """A real daemon, a real process of three worker threads: the B run's record holds
    the periods the daemon kept of it (asked once, after the run, whether or not the
    daemon has noticed the exit yet), and the history itself where asked for; when the
    daemon kept fewer periods than the run had, the benchmark says so. CPU time as the
    utility (task-clock), as on a machine without a PMU, so the figure is a CPU share."""
    config = "period_s: 0.05\ndomain_period_s: 0.5\nutility: task-clock\n"
    d = start_daemon(tmp_path, config + (f"history_periods: {kept}\n" if kept else ""))
    try:
        sc = {"cpu_availability": "uniform", "cmd": [sys.executable, "-c", THREADS]}
        rec = run_once(sc, "B", d.socket, 1.0, keep_history=True, daemon_pid=d.proc.pid)
    finally:
        d.stop()
    assert rec["rc"] == 0 and rec["wall_s"] >= 1.5
    assert rec["history"]["pid"] > 0  # exited, or not noticed yet: the periods are there either way
    assert rec["periods"] == len(rec["history"]["samples"])
    assert rec["periods"] == kept if kept else rec["periods"] >= 10  # 1.5 s of 0.05 s periods
    assert ("holds only its last 8 periods" in capsys.readouterr().err) == bool(kept)
    assert {len(s["tids"]) for s in rec["history"]["samples"]} >= {4}  # the main thread and three workers
    assert rec["daemon_utility"] is not None and 0.0 < rec["daemon_utility"] < 0.5  # threads that mostly sleep
    assert rec["moves_per_period"] >= 0 and rec["daemon_cpu_pct"] >= 0
