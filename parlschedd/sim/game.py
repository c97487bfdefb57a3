"""The load-balancing game of the paper's Section V (shared/spec/parlsched.md, "Guarantees").

m cores with speeds s_j, threads with weights w_i, load of core j
l_j = (sum_{i on j} w_i + background_j) / s_j, makespan L = max_j l_j, and the utility of
thread i, its share of the core in proportion to weight, u_i = w_i / l_{beta_i}.
A thread whose memory lives in another domain than the core's costs (1 + penalty) times
its weight there (the remote-access penalty of the simulator).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from parlschedd.arrays import FloatArray, IntArray


@dataclass(frozen=True)
class Machine:
    """Cores with speeds, grouped into domains; ``penalty`` is the remote-access cost."""

    speeds: FloatArray
    domain_of_core: IntArray
    penalty: float = 0.0

    def __post_init__(self) -> None:
        labels = np.unique(self.domain_of_core)
        if not np.array_equal(labels, np.arange(labels.size)):  # they index per-domain arrays
            raise ValueError(f"domains must be numbered 0, 1, ... without a gap, got {labels.tolist()}")

    @classmethod
    def uniform(cls, n_cores: int, n_domains: int = 1, penalty: float = 0.0) -> Machine:
        """Identical cores in ``n_domains`` contiguous domains whose sizes differ by at
        most one (core j in domain floor(j * d / m)): exactly as many domains as asked,
        where cutting every ceil(m / d) cores left the last ones out."""
        if not 1 <= n_domains <= n_cores:
            raise ValueError(f"{n_domains} domains of {n_cores} cores: each needs a core")
        return cls(np.ones(n_cores), np.arange(n_cores) * n_domains // n_cores, penalty)

    @property
    def n_cores(self) -> int:
        return int(self.speeds.size)

    @property
    def domains(self) -> list[list[int]]:
        """CPU lists per domain, the form the scheduler takes."""
        return [np.flatnonzero(self.domain_of_core == a).tolist() for a in np.unique(self.domain_of_core)]


@dataclass(frozen=True)
class Threads:
    """Weights (demand) and the home domain of each thread's memory."""

    weights: FloatArray
    home: IntArray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.home is None:
            object.__setattr__(self, "home", np.zeros(self.weights.size, dtype=np.int64))


def effective_weights(machine: Machine, threads: Threads, cpus: IntArray) -> FloatArray:
    remote = machine.domain_of_core[cpus] != threads.home
    return threads.weights * (1.0 + machine.penalty * remote)


def loads(machine: Machine, threads: Threads, cpus: IntArray, background: FloatArray) -> FloatArray:
    """l_j for every core."""
    work = np.bincount(cpus, weights=effective_weights(machine, threads, cpus), minlength=machine.n_cores)
    return (work + background) / machine.speeds


def utilities(machine: Machine, threads: Threads, cpus: IntArray, background: FloatArray) -> FloatArray:
    """u_i = w_i / l_{beta_i}: the work thread i completes per unit time."""
    return threads.weights / loads(machine, threads, cpus, background)[cpus]


def makespan(machine: Machine, threads: Threads, cpus: IntArray, background: FloatArray) -> float:
    return float(loads(machine, threads, cpus, background).max())


def lower_bound(machine: Machine, threads: Threads, background: FloatArray) -> float:
    """max(sum w / sum s, max w / max s), background work counted as unmovable weight."""
    total = (threads.weights.sum() + background.sum()) / machine.speeds.sum()
    return float(max(total, threads.weights.max() / machine.speeds.max()))


def deviation_gains(machine: Machine, threads: Threads, cpus: IntArray, background: FloatArray) -> FloatArray:
    """Matrix (threads x cores): the utility thread i would get by moving alone to core j,
    divided by its utility now. Column beta_i is 1."""
    w_eff_here = effective_weights(machine, threads, cpus)
    work = np.bincount(cpus, weights=w_eff_here, minlength=machine.n_cores) + background
    remote = machine.domain_of_core[None, :] != threads.home[:, None]
    w_eff_there = threads.weights[:, None] * (1.0 + machine.penalty * remote)
    work_there = work[None, :] + w_eff_there
    rows = np.arange(cpus.size)
    work_there[rows, cpus] = work[cpus]
    u_there = threads.weights[:, None] * machine.speeds[None, :] / work_there
    u_here = u_there[rows, cpus]
    return u_there / u_here[:, None]


def is_nash(machine: Machine, threads: Threads, cpus: IntArray, background: FloatArray, tol: float = 1e-9) -> bool:
    """A pure Nash equilibrium: no thread gains by moving alone (Prop 5.1)."""
    return bool((deviation_gains(machine, threads, cpus, background) <= 1.0 + tol).all())


def optimal_makespan(machine: Machine, threads: Threads, background: FloatArray) -> float:
    """L* by exhaustive search over all m^n placements (small games only)."""
    n, m = threads.weights.size, machine.n_cores
    if m**n > 2_000_000:
        raise ValueError(f"exhaustive search over {m}^{n} placements is too large")
    all_cpus = np.array(list(itertools.product(range(m), repeat=n)), dtype=np.int64)
    remote = machine.domain_of_core[all_cpus] != threads.home[None, :]
    w_eff = threads.weights[None, :] * (1.0 + machine.penalty * remote)
    onehot = all_cpus[:, :, None] == np.arange(m)[None, None, :]
    work = (w_eff[:, :, None] * onehot).sum(axis=1) + background[None, :]
    return float((work / machine.speeds[None, :]).max(axis=1).min())


def poa_bound(n_cores: int) -> float:
    """Prop 5.2, identical cores: L <= 2m / (m + 1) * L* at any pure Nash equilibrium."""
    return 2.0 * n_cores / (n_cores + 1)
