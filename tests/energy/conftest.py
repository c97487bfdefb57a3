"""Shared inputs: the real HPMoon data read in place, a hand-computable cluster, and
measurements and a fitted model's stand-in built from a few numbers."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from parlschedd.energy.cluster import load_cluster, parse_cluster
from parlschedd.energy.measurements import Measurements, load_measurements

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from shared import ENERGY_DATA as DATA  # noqa: E402  (beside the checkout, or the repository it was cloned from)
CLUSTER_YAML = DATA / "cluster-hpmoon.yaml"
MEASUREMENTS_CSV = DATA / "hpmoon_v3_measurements.csv"

# One node, two devices: 2 units at 1 GHz and 4 units at 2 GHz; N = 16, g = 4, NGm = 2,
# alpha = 0.5. Small enough to compute the model by hand (test_model.py).
TINY = {
    "run": {"individuals": 16, "generations": 4, "global_migrations": 2, "crossover_probability": 0.5,
            "subpopulations": [1, 4]},
    "master": {"tdp_w": 60},
    "switch": {"tdp_w": 4},
    "nodes": [{"name": "n1", "devices": [
        {"name": "a", "kind": "gpu", "compute_units": 2, "frequency_hz": 1e9, "tdp_w": 100},
        {"name": "b", "kind": "cpu", "compute_units": 4, "frequency_hz": 2e9, "tdp_w": 50}]}],
}


def measurements(nsp: list[int], time_s: list[float], energy_wh: list[float] | None = None,
                 baseline_time_s: np.ndarray | None = None) -> Measurements:
    """Measurements of the NSp given: means only (no repetitions), energies NaN when none
    are given, and a stored baseline's times when given."""
    energy = np.full(len(nsp), np.nan) if energy_wh is None else np.array(energy_wh, dtype=float)
    empty = np.empty((len(nsp), 0))
    return Measurements(np.array(nsp), np.array(time_s, dtype=float), energy, empty, empty, baseline_time_s)


class StubModel:
    """A fitted model's stand-in: predicts the given times and energies for NSp 1, 2, 3,
    ... (row nsp - 1), and has the fit errors a fitted model carries."""

    def __init__(self, time_s: list[float], energy_wh: list[float], nrmse_time: float = 0.1,
                 nrmse_energy: float = 0.2) -> None:
        self.time_s, self.energy_wh = np.array(time_s), np.array(energy_wh)
        self.nrmse_time_, self.nrmse_energy_ = nrmse_time, nrmse_energy

    def predict(self, nsp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.time_s[nsp - 1], self.energy_wh[nsp - 1]


@pytest.fixture(scope="session")
def hpmoon():
    return load_cluster(CLUSTER_YAML)


@pytest.fixture(scope="session")
def measured():
    return load_measurements(MEASUREMENTS_CSV)


@pytest.fixture
def tiny():
    return parse_cluster(TINY, "tiny")
