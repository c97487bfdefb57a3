"""The baseline model of the paper's eq. 5 (the authors' earlier work, [33]).

It differs from the proposed model in exactly the three ways the paper lists:

1. node granularity: node i is one compute resource with C_i = sum of its devices'
   compute units and one fitted time per round of evaluations, theta_i;
2. the workload of each node is known in advance, not simulated: subpopulations are
   dealt to devices round-robin in cluster order (the master's first hand-out, one
   subpopulation per device) and summed per node; the runtime is the slowest node's,
   T_cluster = NGm * (T_master + T_com) + max_i g * NSp_i * ceil(SS_p / C_i) * theta_i;
3. no crossover factor: every individual of a subpopulation is evaluated (PE = SS_p).

Parameters come from linear regression. The max of eq. 5 makes the time model linear
only once the slowest node of every configuration is known, so the fit alternates:
given the slowest nodes, a bounded least-squares solve for (T_master + T_com, theta);
given theta, the slowest nodes; until the slowest nodes stop changing. With the times
fixed, the energy (eq. 7 at node level: active and idle power per node and a constant
master/switch overhead energy) is linear in its parameters and is one more bounded
least-squares solve. Energy data determine only each node's active minus idle power,
the sum of the idle powers and the overhead (E = sum_i (Pow_i - Powidle_i) T_i +
sum_i Powidle_i max_i T_i + overhead): the split of the idle sum among nodes is one of
many equally good ones, so the reported ``pow_w`` and ``pow_idle_w`` are not each a
node's measured power.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import lsq_linear

from parlschedd.energy.cluster import Cluster
from parlschedd.energy.fitting import TDP_MARGIN
from parlschedd.energy.measurements import energy_rows
from parlschedd.energy.model import JOULES_PER_WH, number, subpopulation_size

MAX_ROUNDS = 100


@dataclass(frozen=True)
class BaselineParams:
    theta: np.ndarray  # (nodes,) seconds per round of evaluations of one generation
    overhead_s: float  # T_master + T_com per migration
    pow: np.ndarray  # (nodes,) W
    pow_idle: np.ndarray  # (nodes,) W
    overhead_j: float  # NGm * (Pow_master T_master + Pow_switch T_com), J per run


def node_workload(c: Cluster, nsp: np.ndarray, rounding: str = "floor") -> np.ndarray:
    """g * NSp_i * ceil(SS_p / C_i): generations x rounds of evaluations per node, (K, nodes)."""
    nodes = len(c.nodes)
    owner = c.node_of_device
    per_node = np.array([[np.count_nonzero(owner[np.arange(k) % len(owner)] == i) for i in range(nodes)]
                         for k in np.asarray(nsp)])
    units = np.array([sum(d.compute_units for d in n.devices) for n in c.nodes], dtype=float)
    rounds = np.ceil(subpopulation_size(c.run, nsp, rounding)[:, None] / units[None, :])
    return float(c.run.generations) * per_node * rounds  # floats: g times an int64 array wrapped past 2**63


def _node_times(x: np.ndarray, theta: np.ndarray) -> np.ndarray:
    return x * theta[None, :]


def fit_time(c: Cluster, x: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, float]:
    """Alternating bounded least squares for eq. 5 (module docstring).

    It starts from theta_i = median(T / x_i), each node alone explaining the runtimes.
    A node that is the slowest in no configuration is not constrained by the data and
    keeps its previous theta (a zero would make it never the slowest, a false fixed
    point)."""
    ngm = c.run.global_migrations
    rows = np.arange(len(t))
    theta = np.median(t[:, None] / np.maximum(x, 1.0), axis=0)
    slowest = np.argmax(_node_times(x, theta), axis=1)
    best: tuple[float, np.ndarray, float] | None = None
    for _ in range(MAX_ROUNDS):
        used = np.unique(slowest)
        design = np.zeros((len(t), 1 + len(used)))
        design[:, 0] = ngm
        design[rows, 1 + np.searchsorted(used, slowest)] = x[rows, slowest]
        sol = lsq_linear(design, t, bounds=(0.0, np.inf)).x
        theta = theta.copy()
        theta[used] = sol[1:]
        overhead = float(sol[0])
        err = float(np.sum((ngm * overhead + _node_times(x, theta).max(axis=1) - t) ** 2))
        if best is None or err < best[0]:
            best = (err, theta, overhead)
        moved = np.argmax(_node_times(x, theta), axis=1)
        if np.array_equal(moved, slowest):
            break
        slowest = moved
    return best[1], best[2]


def predict_time(c: Cluster, p: BaselineParams, x: np.ndarray) -> np.ndarray:
    """Eq. 5."""
    return c.run.global_migrations * p.overhead_s + _node_times(x, p.theta).max(axis=1)


def _energy_design(x: np.ndarray, theta: np.ndarray) -> np.ndarray:
    times = _node_times(x, theta)
    idle = times.max(axis=1, keepdims=True) - times
    return np.column_stack([times, idle, np.ones(len(x))])


def predict_energy(p: BaselineParams, x: np.ndarray) -> np.ndarray:
    """Node-level eq. 7 in Wh."""
    coef = np.concatenate([p.pow, p.pow_idle, [p.overhead_j]])
    return _energy_design(x, p.theta) @ coef / JOULES_PER_WH


class BaselineModel:
    """The eq. 5 baseline as an estimator: ``BaselineModel(cluster).fit(nsp, t, e)``."""

    def __init__(self, cluster: Cluster, rounding: str = "floor") -> None:
        self.cluster = cluster
        self.rounding = rounding

    def fit(self, nsp: np.ndarray, time_s: np.ndarray, energy_wh: np.ndarray | None = None) -> BaselineModel:
        nsp, time_s = np.asarray(nsp), np.asarray(time_s, dtype=float)
        if nsp.shape != time_s.shape or nsp.ndim != 1 or len(nsp) < 2:
            raise ValueError("nsp and time_s must be 1-D of the same length >= 2")
        x = node_workload(self.cluster, nsp, self.rounding)
        theta, overhead = fit_time(self.cluster, x, time_s)
        nodes = len(self.cluster.nodes)
        pow_, idle, overhead_j = np.full(nodes, np.nan), np.full(nodes, np.nan), float("nan")
        rows = energy_rows(energy_wh)  # energies not measured are left out
        if rows is not None:
            tdp = TDP_MARGIN * np.array([sum(d.tdp_w for d in n.devices) for n in self.cluster.nodes])
            upper = np.concatenate([tdp, tdp, [np.inf]])
            sol = lsq_linear(_energy_design(x, theta)[rows], np.asarray(energy_wh)[rows] * JOULES_PER_WH,
                             bounds=(np.zeros_like(upper), upper)).x
            pow_, idle, overhead_j = sol[:nodes], sol[nodes:2 * nodes], float(sol[-1])
        self.params_ = BaselineParams(theta, overhead, pow_, idle, overhead_j)
        return self

    def predict(self, nsp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Runtime (s) and energy (Wh; NaN when fitted without energies) per NSp."""
        if not hasattr(self, "params_"):
            raise RuntimeError("BaselineModel is not fitted; call fit() first")
        x = node_workload(self.cluster, np.asarray(nsp), self.rounding)
        return predict_time(self.cluster, self.params_, x), predict_energy(self.params_, x)

    def to_dict(self) -> dict[str, Any]:
        p = self.params_
        names = [n.name for n in self.cluster.nodes]

        def per_node(a: np.ndarray) -> dict[str, float | None]:
            return {n: (None if np.isnan(v) else float(v)) for n, v in zip(names, a, strict=True)}

        return {"rounding": self.rounding, "theta_s": per_node(p.theta), "overhead_s": p.overhead_s,
                "pow_w": per_node(p.pow), "pow_idle_w": per_node(p.pow_idle),
                "overhead_j": None if np.isnan(p.overhead_j) else p.overhead_j}

    @classmethod
    def from_dict(cls, cluster: Cluster, d: dict[str, Any]) -> BaselineModel:
        names = [n.name for n in cluster.nodes]

        def arr(key: str) -> np.ndarray:
            """Per node of the cluster; a node missing is a KeyError naming both keys, one
            the cluster does not have a ValueError naming it."""
            m = d[key]
            if not isinstance(m, dict):
                raise ValueError(f"{key}: must be an object of node name: value, got {m!r}")
            if missing := [n for n in names if n not in m]:
                raise KeyError(f"{key}.{missing[0]}")
            if unknown := [n for n in m if n not in names]:
                raise ValueError(f"{key}: node(s) {', '.join(unknown)} not in the file's cluster")
            return np.array([_not_negative(m[n], f"{key}.{n}") for n in names])

        model = cls(cluster, d["rounding"])
        model.params_ = BaselineParams(arr("theta_s"), _not_negative(d["overhead_s"], "overhead_s", nullable=False),
                                       arr("pow_w"), arr("pow_idle_w"), _not_negative(d["overhead_j"], "overhead_j"))
        return model


def _not_negative(value: Any, where: str, nullable: bool = True) -> float:
    """A baseline parameter of a parameters file (model.number): times and powers are
    finite and >= 0, as the fit bounds them. Read as given, a hand-edited -1 or null
    section made validate print negative runtimes or Python's words, and exit 0."""
    x = number(value, where, nullable)
    if not (math.isnan(x) or (math.isfinite(x) and x >= 0)):
        raise ValueError(f"{where}: must be finite and >= 0, got {value!r}")
    return x
