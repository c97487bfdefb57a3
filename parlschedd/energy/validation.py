"""The errors of fitted models against measurements: NRMSE of time and energy (eqs. 15,
16) and the relative error of each configuration, for the proposed model, the baseline
fitted beside it, and the baseline's predictions stored in the measurements if any.

Pure: the caller prints ``Validation`` or dumps ``Validation.to_dict()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from parlschedd.energy.cluster import check_measured
from parlschedd.energy.measurements import Measurements, energy_rows
from parlschedd.energy.metrics import nrmse, relative_errors
from parlschedd.energy.store import Fitted


@dataclass(frozen=True)
class ModelErrors:
    """One model's errors on the configurations ``nsp``. NaN where undefined: an NRMSE
    of measurements without spread, the energy error of a configuration without a
    measured or a predicted energy."""

    nrmse_time: float
    nrmse_energy: float | None  # None: fewer than MIN_ENERGY_ROWS configurations with both energies
    nsp: np.ndarray
    time_rel_error: np.ndarray
    energy_rel_error: np.ndarray

    @property
    def largest_time_error(self) -> tuple[int, float]:
        """The NSp with the largest runtime error in magnitude (the first if tied), and
        that signed relative error."""
        i = int(np.argmax(np.abs(self.time_rel_error)))
        return int(self.nsp[i]), float(self.time_rel_error[i])

    def to_dict(self) -> dict[str, Any]:
        """NaN is left to the writer (store.json_safe)."""
        return {"nrmse_time": self.nrmse_time, "nrmse_energy": self.nrmse_energy,
                "per_nsp": [{"nsp": int(k), "time_rel_error": a, "energy_rel_error": b} for k, a, b in
                            zip(self.nsp, self.time_rel_error.tolist(), self.energy_rel_error.tolist(), strict=True)]}


def model_errors(time_s: np.ndarray, energy_wh: np.ndarray, m: Measurements) -> ModelErrors:
    """The errors of predictions (NaN where none: a stored baseline may lack some) on the
    configurations of ``m``; each NRMSE is over those with a prediction (and, for
    energy, a measurement)."""
    rows = energy_rows(np.where(np.isfinite(energy_wh), m.energy_wh, np.nan))
    timed = np.isfinite(time_s)
    return ModelErrors(
        nrmse_time=float(nrmse(time_s[timed], m.time_s[timed])) if timed.any() else float("nan"),
        nrmse_energy=None if rows is None else float(nrmse(energy_wh[rows], m.energy_wh[rows])),
        nsp=m.nsp, time_rel_error=relative_errors(time_s, m.time_s),
        energy_rel_error=relative_errors(energy_wh, m.energy_wh))


@dataclass(frozen=True)
class Validation:
    """The errors of every model, by name: ``proposed``, ``baseline`` and, when the
    measurements carry the baseline's stored predictions, ``baseline_stored``."""

    data: str
    models: dict[str, ModelErrors]

    def to_dict(self) -> dict[str, Any]:
        return {"data": self.data, "models": {name: errors.to_dict() for name, errors in self.models.items()}}


def validate(fitted: Fitted, m: Measurements, source: str) -> Validation:
    """The errors of ``fitted`` on ``m`` (read from ``source``); NspError when ``m``
    has an NSp above the cluster's individuals."""
    check_measured(fitted.cluster.run, m.nsp, source)
    predictions = {"proposed": fitted.model.predict(m.nsp), "baseline": fitted.baseline.predict(m.nsp)}
    if m.baseline_time_s is not None:
        stored_e = m.baseline_energy_wh if m.baseline_energy_wh is not None else np.full(len(m.nsp), np.nan)
        predictions["baseline_stored"] = (m.baseline_time_s, stored_e)
    return Validation(source, {name: model_errors(t, e, m) for name, (t, e) in predictions.items()})
