"""The proposed energy-time model, equations (1)-(7) of shared/spec/energy-time-model.md.

Pure numpy, vectorised: parameters carry any leading batch shape (one row per GA
individual, say), configurations are a vector of NSp values, and every result has shape
(*batch, configs) or (*batch, configs, devices). Units: seconds, watts, and watt-hours
for energy (the shared data's unit), so (7) is divided by 3600.

Rounding of the subpopulation size (a known trap): N / NSp is not an integer for many
NSp. ``SUBPOP_SIZES`` names the choices; the default ``"floor"`` gives each of the NSp
subpopulations N // NSp individuals, as an integer division would (an assumption: the
application's own split is not in its published sources), which leaves up to NSp - 1
individuals out (4 at NSp 7 of N = 3840; on the shared data it changes one wave count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from parlschedd.energy.cluster import Cluster, RunSettings
from parlschedd.energy.distribution import distribute
from parlschedd.kinds import is_number

SUBPOP_SIZES = ("floor", "exact", "ceil")
MASTER_POWER = ("migration", "whole-run")
PAPERS_MASTER_POWER = "migration"  # eq. 7; "whole-run" is a variant
JOULES_PER_WH = 3600.0


class NotANumber(ValueError):
    """A value of a fitted model's section of a parameters file that should be a number
    and is not; its message starts with the value's key path in the section."""


def number(value: Any, where: str, nullable: bool = False) -> float:
    """``value`` of a section of a parameters file (at key path ``where``) as a float,
    NaN for null where ``nullable``. NotANumber otherwise: float() took "1.5" and True,
    and its "could not convert string to float: 'abc'" did not say which of 22
    parameters."""
    if value is None and nullable:
        return math.nan
    if not is_number(value):
        raise NotANumber(f"{where}: must be a number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class TimeParams:
    """The time/workload chromosome c_TW (the paper's eq. 8; the spec's "Fitting"): W_ij
    cycles per evaluation, T_com, T_master."""

    w: np.ndarray  # (..., D)
    t_com: np.ndarray  # (...)
    t_master: np.ndarray  # (...)

    @classmethod
    def from_vector(cls, x: np.ndarray) -> TimeParams:
        """Split (..., D + 2) genes in the order of c_TW (the paper's eq. 8)."""
        x = np.asarray(x, dtype=float)
        return cls(x[..., :-2], x[..., -2], x[..., -1])

    def to_vector(self) -> np.ndarray:
        return np.concatenate([self.w, self.t_com[..., None], self.t_master[..., None]], axis=-1)


@dataclass(frozen=True)
class EnergyParams:
    """The energy chromosome c_E (the paper's eq. 9; the spec's "Fitting"): active and
    idle power per device, master, switch (W)."""

    pow: np.ndarray  # (..., D)
    pow_idle: np.ndarray  # (..., D)
    pow_master: np.ndarray  # (...)
    pow_switch: np.ndarray  # (...)

    @classmethod
    def from_vector(cls, x: np.ndarray) -> EnergyParams:
        """Split (..., 2D + 2) genes in the order of c_E (the paper's eq. 9)."""
        x = np.asarray(x, dtype=float)
        d = (x.shape[-1] - 2) // 2
        return cls(x[..., :d], x[..., d:2 * d], x[..., -2], x[..., -1])

    def to_vector(self) -> np.ndarray:
        return np.concatenate([self.pow, self.pow_idle, self.pow_master[..., None], self.pow_switch[..., None]],
                              axis=-1)


@dataclass(frozen=True)
class Timing:
    """The time side of the model for every parameter set and configuration."""

    t1: np.ndarray  # (..., K, D) eq. 1
    counts: np.ndarray  # (..., K, D) NSp_ij from Algorithm 1
    t_dev: np.ndarray  # (..., K, D) eq. 3
    t_evo: np.ndarray  # (..., K) Algorithm 1
    runtime: np.ndarray  # (..., K) eq. 4


def subpopulation_size(run: RunSettings, nsp: np.ndarray, rounding: str = "floor") -> np.ndarray:
    """SS_p = N / NSp, rounded as named (see the module docstring)."""
    nsp = np.asarray(nsp, dtype=float)
    exact = run.individuals / nsp
    if rounding == "exact":
        return exact
    if rounding == "floor":
        return np.floor(exact)
    if rounding == "ceil":
        return np.ceil(exact)
    raise ValueError(f"rounding must be one of {', '.join(SUBPOP_SIZES)}, got {rounding!r}")


def evaluations(run: RunSettings, nsp: np.ndarray, rounding: str = "floor") -> np.ndarray:
    """PE = SS_p * alpha (eq. 2): offspring evaluated per subpopulation and generation."""
    return subpopulation_size(run, nsp, rounding) * run.crossover_probability


def waves(cluster: Cluster, nsp: np.ndarray, rounding: str = "floor") -> np.ndarray:
    """ceil(PE / C_ij) of eq. 1: rounds of parallel evaluations, shape (K, D)."""
    pe = evaluations(cluster.run, nsp, rounding)
    return np.ceil(pe[:, None] / cluster.compute_units[None, :])


def timing(cluster: Cluster, params: TimeParams, nsp: np.ndarray, rounding: str = "floor") -> Timing:
    """Eqs. 1, 3 and 4 with Algorithm 1, for every parameter set and NSp."""
    run = cluster.run
    per_wave = params.w / cluster.frequency_hz  # seconds per round of evaluations, (..., D)
    t1 = (run.generations / run.global_migrations) * waves(cluster, nsp, rounding) * per_wave[..., None, :]
    t_evo, counts = distribute(t1, np.asarray(nsp))
    t_dev = counts * t1
    overhead = (params.t_master + params.t_com)[..., None]
    return Timing(t1, counts, t_dev, t_evo, run.global_migrations * (overhead + t_evo))


def energy(cluster: Cluster, t: Timing, time_params: TimeParams, params: EnergyParams,
           master_power: str = "migration") -> np.ndarray:
    """E_cluster in Wh (eqs. 6 and 7).

    ``master_power="migration"`` is the paper's eq. 7, which charges the master and the
    switch only during T_master and T_com. ``"whole-run"`` is a variant (reported beside
    the paper's, never instead): the master and the switch draw their power during the
    whole time between two migrations, T_master + T_com + T_evo, as they do in reality.
    """
    devices = params.pow[..., None, :] * t.t_dev + params.pow_idle[..., None, :] * (t.t_evo[..., None] - t.t_dev)
    tm, tc = time_params.t_master[..., None], time_params.t_com[..., None]
    pm, ps = params.pow_master[..., None], params.pow_switch[..., None]
    if master_power == "migration":
        overhead = pm * tm + ps * tc
    elif master_power == "whole-run":
        overhead = (pm + ps) * (tm + tc + t.t_evo)
    else:
        raise ValueError(f"master_power must be one of {', '.join(MASTER_POWER)}, got {master_power!r}")
    return cluster.run.global_migrations * (overhead + devices.sum(axis=-1)) / JOULES_PER_WH
