"""The proposed model as a scikit-learn-like estimator.

    model = EnergyTimeModel(cluster, method="de", repeat=20, random_state=1)
    model.fit(nsp, time_s, energy_wh)      # validates, learns attributes ending in _
    time_s, energy_wh = model.predict(np.arange(1, 33))

``__init__`` only stores its arguments; ``fit`` runs the two-phase fitting of
fitting.py ``repeat`` times and keeps the best repetition (closest to (0, 0) in
(NRMSE_T, NRMSE_E)), with the RSD of every parameter (eq. 17) over the repetitions and
the wall-clock time of each (fitting.py, pure, reads no clock).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from parlschedd.energy.cluster import Cluster
from parlschedd.energy.fitting import (METHODS, DESettings, Fit, GASettings, OnGeneration, Problem, Progress,
                                       Repeated, best_of, predict, repetitions, violations)
from parlschedd.energy.measurements import energy_rows
from parlschedd.energy.model import MASTER_POWER, SUBPOP_SIZES, EnergyParams, TimeParams, number
from parlschedd.kinds import is_integer


def parameter_names(cluster: Cluster, with_energy: bool = True) -> list[str]:
    """Names of c_TW (eq. 8) then c_E (eq. 9), e.g. ``W[node1.gpu]``, ``Pow_master``."""
    labels = cluster.device_labels
    names = [f"W[{d}]" for d in labels] + ["T_com", "T_master"]
    if with_energy:
        names += [f"Pow[{d}]" for d in labels] + [f"Powidle[{d}]" for d in labels] + ["Pow_master", "Pow_switch"]
    return names


class EnergyTimeModel:
    """Runtime and energy of a distributed multi-population GA per NSp (eqs. 1-7)."""

    def __init__(self, cluster: Cluster, method: str = "de", repeat: int = 1, random_state: int | None = None,
                 rounding: str = "floor", master_power: str = "migration", generations: int | None = None) -> None:
        self.cluster = cluster
        self.method = method
        self.repeat = repeat
        self.random_state = random_state
        self.rounding = rounding
        self.master_power = master_power
        self.generations = generations  # None: each method's default budget

    def settings(self) -> dict[str, GASettings | DESettings]:
        if self.generations is None:
            return {}
        return {"ga": GASettings(generations=self.generations), "de": DESettings().with_generations(self.generations)}

    def _check_options(self) -> None:
        for name, value, allowed in (("method", self.method, METHODS), ("rounding", self.rounding, SUBPOP_SIZES),
                                     ("master_power", self.master_power, MASTER_POWER)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        for name, value, least in (("repeat", self.repeat, 1), ("generations", self.generations, 1),
                                   ("random_state", self.random_state, 0)):
            if value is None and name != "repeat":
                continue
            if not is_integer(value) or value < least:  # a file's "repeat": true is not 1
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")

    def fit(self, nsp: np.ndarray, time_s: np.ndarray, energy_wh: np.ndarray | None = None,
            progress: Progress | None = None, on_generation: OnGeneration | None = None) -> EnergyTimeModel:
        """Fit to measured means. ``energy_wh``: NaN where not measured, left out of the
        energy phase; None, or fewer than two measured, fits time only. ``progress`` is
        told as each repetition ends, ``on_generation`` as each generation of one does."""
        self._check_options()
        nsp, time_s = np.asarray(nsp), np.asarray(time_s, dtype=float)
        if nsp.ndim != 1 or nsp.shape != time_s.shape or len(nsp) < 2:
            raise ValueError("nsp and time_s must be 1-D arrays of the same length >= 2")
        if np.any(nsp < 1) or np.any(time_s <= 0):
            raise ValueError("nsp must be >= 1 and runtimes > 0")
        if energy_wh is not None:
            energy_wh = np.asarray(energy_wh, dtype=float)
            if energy_wh.shape != nsp.shape:
                raise ValueError("energy_wh must have the shape of nsp")
            energy_wh = energy_wh if energy_rows(energy_wh) is not None else None
        self.problem_ = Problem(self.cluster, nsp, time_s, energy_wh, self.rounding, self.master_power)
        self.fitted_nsp_ = tuple(sorted(int(k) for k in nsp))  # outside their range, predict() extrapolates
        rows = energy_rows(energy_wh)  # the energy phase's own range: its energies may cover fewer NSp
        self.energy_fitted_nsp_ = None if rows is None else tuple(sorted(int(k) for k in nsp[rows]))
        self.repetitions_, self.repetition_seconds_ = self._repeat(progress, on_generation)
        best = self.repetitions_.fits[self.repetitions_.best]
        self._set_best(best)
        names = parameter_names(self.cluster, best.energy_params is not None)
        self.rsd_ = dict(zip(names, self.repetitions_.rsd.tolist(), strict=True))
        return self

    def _repeat(self, progress: Progress | None,
                on_generation: OnGeneration | None) -> tuple[Repeated, tuple[float, ...]]:
        """The ``repeat`` fits and the wall-clock seconds of each, reported as each ends."""
        fits, seconds = [], []
        started = time.perf_counter()
        for fit in repetitions(self.problem_, self.method, self.repeat, self.random_state, on_generation,
                               **self.settings()):
            fits.append(fit)
            seconds.append(time.perf_counter() - started)
            if progress:
                progress(len(fits), self.repeat)
            started = time.perf_counter()  # the progress line is not the next fit's time
        return best_of(fits), tuple(seconds)

    def _set_best(self, best: Fit) -> None:
        self.fit_ = best
        self.energy_params_ = best.energy_params
        self.nrmse_time_, self.nrmse_energy_ = best.nrmse_time, best.nrmse_energy

    def predict(self, nsp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Predicted runtime (s) and energy (Wh; NaN if fitted on time only) per NSp;
        inf, without a warning, where one overflows (parameters near the largest float,
        which a parameters file may hold)."""
        if not hasattr(self, "fit_"):
            raise RuntimeError("EnergyTimeModel is not fitted; call fit() first")
        nsp = np.asarray(nsp)
        if nsp.ndim != 1 or np.any(nsp < 1):
            raise ValueError("nsp must be a 1-D array of integers >= 1")
        with np.errstate(over="ignore"):
            return predict(self.problem_, self.fit_, nsp)

    def parameters(self) -> dict[str, float]:
        """The fitted parameters by name (eqs. 8 and 9)."""
        names = parameter_names(self.cluster, self.energy_params_ is not None)
        return dict(zip(names, self.fit_.vector.tolist(), strict=True))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready parameters and fit summary (``from_dict`` reads it back)."""
        reps = self.repetitions_.fits if hasattr(self, "repetitions_") else (self.fit_,)
        seconds = getattr(self, "repetition_seconds_", (0.0,))  # (0.0,): read from a file, not fitted here
        return {
            "method": self.method, "repeat": self.repeat, "random_state": self.random_state,
            "rounding": self.rounding, "master_power": self.master_power, "generations": self.generations,
            "parameters": self.parameters(),
            "nrmse_time": self.nrmse_time_, "nrmse_energy": _none_if_nan(self.nrmse_energy_),
            "rsd_percent": {k: _none_if_nan(v) for k, v in getattr(self, "rsd_", {}).items()},
            "repetitions": [{"nrmse_time": f.nrmse_time, "nrmse_energy": _none_if_nan(f.nrmse_energy),
                             "seconds": round(s, 3)} for f, s in zip(reps, seconds, strict=True)],
            "best_repetition": self.repetitions_.best if hasattr(self, "repetitions_") else 0,
        }

    @classmethod
    def from_dict(cls, cluster: Cluster, d: dict[str, Any]) -> EnergyTimeModel:
        """A fitted model from ``to_dict`` output (parameters checked against the cluster)."""
        model = cls(cluster, d["method"], d["repeat"], d["random_state"], d["rounding"], d["master_power"],
                    d.get("generations"))
        model._check_options()
        values = d["parameters"]
        if not isinstance(values, dict):
            raise ValueError("parameters must be an object of name: value")
        energy_names = parameter_names(cluster)[len(parameter_names(cluster, False)):]
        with_energy = any(n in values for n in energy_names)  # else fitted on time only
        names = parameter_names(cluster, with_energy)
        _check_names(names, values)
        vector = np.array([number(values[n], f"parameters.{n}") for n in names])
        bad = [n for n, v in zip(names, vector.tolist(), strict=True) if not (math.isfinite(v) and v >= 0)]
        if bad:  # the model's times and powers are non-negative; NaN or inf predicts nothing
            raise ValueError(f"parameters {', '.join(bad)} must be finite and >= 0")
        n_time = len(cluster.devices) + 2
        tp = TimeParams.from_vector(vector[:n_time])
        ep = EnergyParams.from_vector(vector[n_time:]) if with_energy else None
        if ep is not None and (broken := violations(cluster, ep)):
            raise ValueError(f"parameters outside the model's constraints: {'; '.join(broken)}")
        model._set_best(Fit(tp, ep, _nan_if_none(d["nrmse_time"]), _nan_if_none(d.get("nrmse_energy"))))
        model.problem_ = Problem(cluster, np.array([], dtype=int), np.array([]), None, model.rounding,
                                 model.master_power)
        return model


def _check_names(names: list[str], values: dict[str, Any]) -> None:
    """ValueError naming the parameters of ``names`` missing from ``values`` and those of
    ``values`` not in ``names``. The order is not checked: a file sorted by a tool
    (``jq -S``) holds the same parameters, each read by its name."""
    missing = [n for n in names if n not in values]
    unknown = [n for n in values if n not in names]
    if missing or unknown:
        said = [f"missing {', '.join(missing)}"] if missing else []
        said += [f"unknown {', '.join(map(str, unknown))}"] if unknown else []
        raise ValueError(f"parameters do not match the cluster: {'; '.join(said)}")


def _none_if_nan(x: float) -> float | None:
    return None if x is None or np.isnan(x) else float(x)


def _nan_if_none(x: float | None) -> float:
    """An NRMSE as ``to_dict`` wrote it: null where it is undefined (energy not fitted, or
    measurements without spread: all runtimes equal), read back as NaN."""
    return float("nan") if x is None else float(x)


