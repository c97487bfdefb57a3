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
    """u_i = w_i / l_{beta_i}: the work thread i completes per unit time; 0 for a
    thread of no weight (idle), also alone on an idle core (0 / 0)."""
    w = threads.weights
    return np.divide(w, loads(machine, threads, cpus, background)[cpus], out=np.zeros(w.size), where=w > 0)


def makespan(machine: Machine, threads: Threads, cpus: IntArray, background: FloatArray) -> float:
    return float(loads(machine, threads, cpus, background).max())


def lower_bound(machine: Machine, threads: Threads, background: FloatArray) -> float:
    """A makespan no placement beats, background work staying on its core; the
    largest of:

    - the threads' work poured into the cores' room above their background (water
      filling): the least L with sum_j max(0, L s_j - bg_j) = sum w, which is
      (sum w + sum bg) / sum s when every core's background is below that level;
    - the heaviest thread on the core where it would finish first, min_j (w_max + bg_j) / s_j;
    - the background alone, max_j bg_j / s_j.
    Counting background as movable work (the first form alone) put the bound below
    every placement's makespan where a core's background exceeds the level the threads
    fill to: 4 where the optimum is 6, four unit threads on four cores, 6 units of
    background on two of them.
    """
    s, bg, w = machine.speeds, background, threads.weights
    level = bg / s
    order = np.argsort(level, kind="stable")
    filled = (w.sum() + np.cumsum(bg[order])) / np.cumsum(s[order])  # the first k + 1 cores by level
    fits = np.append(filled[:-1] <= level[order][1:], True)  # the next core's background is above it
    water = filled[np.argmax(fits)]
    heaviest = ((w.max() if w.size else 0.0) + bg) / s
    return float(max(water, heaviest.min(), level.max()))


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
    earned = threads.weights[:, None] * machine.speeds[None, :]
    u_there = np.divide(earned, work_there, out=np.zeros_like(work_there), where=work_there > 0)
    u_here = u_there[rows, cpus]
    # a thread of no weight earns nothing anywhere: indifferent (1), not 0 / 0
    return np.divide(u_there, u_here[:, None], out=np.ones_like(u_there), where=u_here[:, None] > 0)


def is_nash(machine: Machine, threads: Threads, cpus: IntArray, background: FloatArray, tol: float = 1e-9) -> bool:
    """A pure Nash equilibrium: no thread gains by moving alone (the equilibria whose
    existence Prop 5.1 states, and whose makespan Prop 5.2 bounds)."""
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
