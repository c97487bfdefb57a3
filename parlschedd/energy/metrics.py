"""Error metrics of the spec: RMSE (eqs. 10, 11), NRMSE (eqs. 15, 16), RSD (eq. 17)."""

from __future__ import annotations

import numpy as np


def rmse(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Root-mean-square error over the last axis (configurations), eqs. 10 and 11; inf,
    without numpy's warning on stderr, where the squares overflow (predictions of
    parameters edited by hand)."""
    with np.errstate(over="ignore"):
        return np.sqrt(np.mean((np.asarray(predicted) - np.asarray(measured)) ** 2, axis=-1))


def nrmse(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """RMSE divided by the population standard deviation of the measurements (eqs. 15, 16).

    The population std (ddof=0) is the one that reproduces the paper's 0.213 / 0.256
    for the stored baseline predictions (shared/data/energy-time/README.md). NaN when the
    measurements have no spread (one configuration, or all equal): undefined, not inf."""
    spread = np.std(measured)
    return rmse(predicted, measured) / spread if spread > 0 else np.full(np.shape(rmse(predicted, measured)), np.nan)


def relative_errors(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Signed per-configuration error, (predicted - measured) / measured."""
    return (np.asarray(predicted) - np.asarray(measured)) / np.asarray(measured)


def rsd(values: np.ndarray) -> np.ndarray:
    """Relative standard deviation in percent over repetitions (axis 0), eq. 17.

    The sample std (ddof=1) of the r = 1..20 fits; NaN where the mean is zero, and
    for a single fit, whose spread is not known (0 read as "perfectly stable")."""
    values = np.asarray(values, dtype=float)
    mean = values.mean(axis=0)
    std = values.std(axis=0, ddof=1) if len(values) > 1 else np.full_like(mean, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(mean != 0, std / np.abs(mean) * 100.0, np.nan)


def fit_distance(nrmse_time: np.ndarray, nrmse_energy: np.ndarray) -> np.ndarray:
    """Distance of (NRMSE_T, NRMSE_E) to (0, 0): how the paper picks the best fit.

    Without energy data (NaN) the time error alone decides."""
    return np.hypot(nrmse_time, np.nan_to_num(nrmse_energy, nan=0.0))


OBJECTIVES = ("time", "energy", "edp")


def objective(name: str, time_s: np.ndarray, energy_wh: np.ndarray) -> np.ndarray:
    """What ``recommend`` minimises: runtime, energy, or the energy-delay product (Wh s)."""
    if name == "time":
        return np.asarray(time_s)
    if name == "energy":
        return np.asarray(energy_wh)
    if name == "edp":
        return np.asarray(energy_wh) * np.asarray(time_s)
    raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {name!r}")
