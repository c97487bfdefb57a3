"""The NSp to run: the candidate with the best predicted runtime, energy or energy-delay
product (metrics.OBJECTIVES), and those predicted so close to it (NEAR_BEST) that the
model cannot tell them apart.

Pure: the caller prints ``Recommendation`` or dumps ``Recommendation.to_dict()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from parlschedd.energy.estimator import EnergyTimeModel
from parlschedd.energy.metrics import objective

NEAR_BEST = 0.01  # candidates predicted this close to the best (relative) are named beside it


class NeedsEnergy(ValueError):
    """An objective other than time asked of a model fitted without energies."""


class NoFinitePrediction(ValueError):
    """Every candidate's prediction overflows (parameters near the largest float)."""


@dataclass(frozen=True)
class Recommendation:
    objective: str
    nsp: int
    time_s: float  # predicted for nsp
    energy_wh: float  # predicted for nsp; NaN if fitted without energies
    near_best: tuple[int, ...]  # the other candidates within NEAR_BEST of the best
    # The fit's NRMSE (on the runs it was fitted to) of each quantity the objective
    # depends on: how far apart predictions must be for the model to tell them apart.
    nrmse: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        """NaN is left to the writer (store.json_safe)."""
        return {"objective": self.objective, "nsp": self.nsp, "time_s": self.time_s, "energy_wh": self.energy_wh,
                "near_best": list(self.near_best), "near_best_within": NEAR_BEST, "nrmse": self.nrmse}


def recommend(model: EnergyTimeModel, goal: str, candidates: np.ndarray) -> Recommendation:
    """The best of ``candidates`` (NSp values) for ``goal``, one of metrics.OBJECTIVES,
    among those with a finite prediction; NeedsEnergy when ``goal`` is not time and
    ``model`` has no energies, NoFinitePrediction when none has one."""
    t, e = model.predict(candidates)
    if goal != "time" and np.all(np.isnan(e)):
        raise NeedsEnergy(f"fitted without energies; {goal} cannot be predicted")
    with np.errstate(over="ignore"):  # edp multiplies two predictions: inf too where they overflow it
        value = objective(goal, t, e)
    value = np.where(np.isfinite(value), value, np.nan)  # an overflowed prediction ranks no candidate
    if np.all(np.isnan(value)):
        raise NoFinitePrediction(f"no candidate's predicted {goal} is a finite number")
    best = int(np.nanargmin(value))
    near = tuple(int(k) for k, v in zip(candidates, value, strict=True)
                 if k != candidates[best] and v <= value[best] * (1 + NEAR_BEST))
    errors = {"time": model.nrmse_time_, "energy": model.nrmse_energy_}
    depends_on = ("time", "energy") if goal == "edp" else (goal,)
    return Recommendation(goal, int(candidates[best]), float(t[best]), float(e[best]), near,
                          nrmse={q: errors[q] for q in depends_on})
