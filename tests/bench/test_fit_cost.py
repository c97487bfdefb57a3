"""bench/fit_cost.py: one short real run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_a_short_run_times_both_phases_and_grows_with_the_configurations(tmp_path: Path) -> None:
    out = tmp_path / "fit_cost.json"
    done = subprocess.run([sys.executable, str(BENCH / "fit_cost.py"), "--sizes", "8,300", "--generations", "3",
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    small, large = json.loads(out.read_text())["rows"]
    assert (small["configurations"], large["configurations"]) == (8, 300)
    assert all(r["time_generation_s"] > 0 and r["energy_generation_s"] > 0 for r in (small, large))
    assert small["ratio_to_first"] == 1.0 and large["ratio_to_first"] > 1  # Algorithm 1 over NSp up to 300
    assert "| 300 |" in done.stdout
