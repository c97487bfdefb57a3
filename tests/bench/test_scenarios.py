"""bench/scenarios.py's statistics: the confidence interval the verdict reads."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from scenarios import median_ci, verdict  # noqa: E402


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
