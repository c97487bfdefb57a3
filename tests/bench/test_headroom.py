"""bench/headroom.py: the splits it tries, the pins it makes on a real process, and the
ceiling it reports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from headroom import cpu_of, pin_workers, splits, summarise, verdict  # noqa: E402

THREADS = r"""
import sys, threading, time
for _ in range(int(sys.argv[1])):
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("ready", flush=True)
time.sleep(60)
"""


def test_splits_avoid_share_and_crowd_the_hog_and_leave_a_worker_elsewhere() -> None:
    assert splits(2) == [1]
    assert splits(4) == [1, 2, 3]
    assert splits(8) == [1, 4, 7]
    assert splits(1) == []


def test_workers_past_k_go_round_robin_over_the_other_cpus() -> None:
    assert [cpu_of(i, 2, 0, [1, 2]) for i in range(6)] == [0, 0, 1, 2, 1, 2]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a split needs two usable CPUs")
def test_pin_workers_pins_every_thread_but_the_main_one_of_a_real_process() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    hog, others = cpus[0], cpus[1:]
    proc = subprocess.Popen([sys.executable, "-c", THREADS, "4"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert pin_workers(proc, 4, 3, hog, others) == 4
        tids = sorted(int(t) for t in os.listdir(f"/proc/{proc.pid}/task"))
        masks = {tid: os.sched_getaffinity(tid) for tid in tids}
        assert masks.pop(proc.pid) == set(cpus)  # the main thread is left alone
        assert sorted(len(m) for m in masks.values()) == [1, 1, 1, 1]
        assert sum(m == {hog} for m in masks.values()) == 3
        assert sum(m == {others[0]} for m in masks.values()) == 1
    finally:
        proc.kill()
        proc.wait()


def test_pin_workers_stops_when_the_process_ends_before_its_workers_appear() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert pin_workers(proc, 4, 1, 0, [1]) == 0


def _runs(walls: list[float], k: int | None = None) -> list[dict]:
    return [{"wall_s": w, "speed": 0.5, **({"pinned": 2} if k is not None else {})} for w in walls]


def test_the_ceiling_is_the_best_split_and_never_below_the_kernel() -> None:
    sc = {"name": "cpu-medium-nonuniform", "workload": "cpu", "threads": 4, "cmd": ["sysbench"]}
    row = summarise(sc, _runs([10.0, 10.0, 12.0]),
                    {1: _runs([11.0, 11.0, 13.2], 1), 3: _runs([9.0, 9.5, 10.8], 3)})
    assert row["best_on_hog_cpu"] == 3
    assert row["best_gain_median_pct"] == pytest.approx(10.0)  # gains 10, 5, 10 per round
    assert row["ceiling_pct"] == pytest.approx(10.0)
    losing = summarise({**sc, "name": "mem-medium-nonuniform", "workload": "mem"}, _runs([10.0, 10.0, 10.0]),
                       {1: _runs([12.0, 12.0, 12.0], 1)})
    assert losing["best_gain_median_pct"] == pytest.approx(-20.0)
    assert losing["ceiling_pct"] == 0.0  # the daemon can leave every thread free: the kernel's placement
    v = verdict([row, losing])
    assert v["mean_ceiling_pct"] == pytest.approx(5.0)
    assert v["by_workload"] == {"cpu": pytest.approx(10.0), "mem": 0.0}
    assert v["target_reachable_with_pins"]
