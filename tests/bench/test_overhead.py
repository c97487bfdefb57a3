"""bench/overhead.py: how its rounds become a row, and one short real run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
from overhead import spread, summarise, table  # noqa: E402


def _round(daemon: float, floor: float, loop_max: float) -> dict:
    return {"threads": 16, "fds": 59, "counter_source": "perf:task-clock", "daemon_us_per_thread_period": daemon,
            "floor_us_per_thread_period": floor, "ratio_to_floor": daemon / floor, "migrations_per_period": 2.0,
            "floor_with_wakeup_us_per_thread_period": floor + 4.0, "ratio_to_floor_with_wakeup": daemon / (floor + 4.0),
            "rss_mib": 46.0, "loop_mean_ms": 0.5, "loop_max_ms": loop_max}


def test_a_row_is_the_median_of_its_rounds_with_the_ratio_taken_round_by_round() -> None:
    rounds = [_round(30.0, 10.0, 7.0), _round(45.0, 9.0, 12.0), _round(20.0, 8.0, 6.0)]
    row = summarise(rounds)
    assert row["daemon_us_per_thread_period"] == 30.0
    assert row["floor_us_per_thread_period"] == 9.0
    assert row["ratio_to_floor"] == 3.0  # the median of 3.0, 5.0, 2.5: not 30 / 9
    assert (row["ratio_min"], row["ratio_max"]) == (2.5, 5.0)
    assert row["loop_max_ms"] == 12.0  # the worst period of any round
    assert row["rounds"] == rounds  # every round kept in the JSON
    assert row["floor_with_wakeup_us_per_thread_period"] == 13.0
    assert "| 16 | 30.0 | 9.0 | 3.00 (2.50-5.00) | 13.0 (2.14) |" in table([row])  # 2.14: its ratio too is taken round by round


@pytest.mark.parametrize(("calls", "periods"), [(7, 10), (0, 5), (10, 10), (33, 10), (1, 100)])
def test_the_floor_pins_as_often_as_the_daemon_did_spread_evenly(calls: int, periods: int) -> None:
    per_period = spread(calls, periods)
    assert len(per_period) == periods and sum(per_period) == calls
    assert max(per_period) - min(per_period) <= 1


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the daemon needs root")
def test_a_short_run_measures_a_real_daemon_in_each_round(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    done = subprocess.run([sys.executable, str(BENCH / "overhead.py"), "--sizes", "4", "--rounds", "2",
                           "--window", "0.5", "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    (row,) = result["rows"]
    assert row["threads"] == 4 and len(row["rounds"]) == 2
    assert all(r["periods"] >= 3 and r["daemon_us_per_thread_period"] > 0 for r in row["rounds"])
    assert row["ratio_min"] <= row["ratio_to_floor"] <= row["ratio_max"]
    assert "round 2 of 2" in done.stderr
