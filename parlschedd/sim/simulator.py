"""The simulated machine, stepped one T_CPU period at a time.

Each step: the policy decides a placement from what it observes, the game gives each
thread its utility for that placement (with optional multiplicative measurement noise),
and the step is recorded. PaRLSched runs here through the very scheduler object the
daemon drives (``ParlschedPolicy`` wraps ``TwoLevelScheduler``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from parlschedd.arrays import BoolArray, FloatArray, IntArray
from parlschedd.learning.params import LearningParams
from parlschedd.learning.scheduler import FREE, TwoLevelScheduler
from parlschedd.sim.background import Background
from parlschedd.sim.game import Machine, Threads, lower_bound, makespan, utilities



@dataclass(frozen=True)
class Observation:
    """What a policy may look at before a step. ``utility`` is what each thread measured
    during the previous step (NaN before the first) and ``ran_on`` the CPU it ran on
    (before the first step, a CPU of its home domain: where the kernel first ran it and
    its memory was first touched); ``threads`` and ``background`` are the oracle view
    only the kernel-like balancer uses."""

    step: int
    keys: IntArray
    utility: FloatArray
    ran_on: IntArray
    threads: Threads
    background: FloatArray


class Policy(Protocol):
    def decide(self, obs: Observation) -> IntArray: ...


class ParlschedPolicy:
    """PaRLSched in the simulator: keys and measured utilities in, CPUs out. Threads
    the scheduler leaves free (``LearningParams.free``) are placed as the kernel would:
    see :func:`place_free`."""

    def __init__(self, machine: Machine, params: LearningParams, domain_every: int) -> None:
        self.machine = machine
        self.scheduler = TwoLevelScheduler(machine.domains, params, domain_every)

    def decide(self, obs: Observation) -> IntArray:
        placement = self.scheduler.step(obs.keys, obs.utility, obs.ran_on)
        return place_free(self.machine, obs.threads, placement.cpus, placement.domains, obs.background)


def place_free(machine: Machine, threads: Threads, cpus: IntArray, domains: IntArray, background: FloatArray,
               allowed: BoolArray | None = None) -> IntArray:
    """The cores the kernel gives the FREE threads: heaviest first, each on the least
    loaded core (runnable load / speed) of its domain, after the pinned threads and the
    background; pinned threads keep their cores. ``allowed`` (threads x cores): the
    cores each FREE thread's mask holds, when that is not its domain (a mask the
    kernel narrowed to a cpuset, or one over several domains: ``host.simulated``)."""
    free = np.flatnonzero(cpus == FREE)
    if free.size == 0:
        return cpus
    out = cpus.copy()
    work = np.asarray(background, dtype=np.float64).copy()
    pinned = cpus >= 0
    np.add.at(work, cpus[pinned], threads.weights[pinned])
    for i in free[np.argsort(-threads.weights[free], kind="stable")].tolist():
        cores = np.flatnonzero(machine.domain_of_core == domains[i] if allowed is None else allowed[i])
        j = int(cores[np.argmin(work[cores] / machine.speeds[cores])])
        out[i] = j
        work[j] += threads.weights[i]
    return out


@dataclass(frozen=True)
class Workload:
    """Threads whose weights may change: ``changes`` holds (step, new weights) pairs,
    in any order."""

    threads: Threads
    changes: Sequence[tuple[int, FloatArray]] = ()

    def at(self, step: int) -> Threads:
        """The threads with the weights of the latest change at or before ``step``
        (by step, not by place in the list; of two at one step, the one listed last)."""
        latest, weights = None, self.threads.weights
        for when, w in self.changes:
            if when <= step and (latest is None or when >= latest):
                latest, weights = when, w
        return Threads(weights, self.threads.home)


@dataclass(frozen=True)
class Trace:
    """Per-step record of a run."""

    makespan: FloatArray
    bound: FloatArray
    mean_utility: FloatArray
    migrations: IntArray

    @property
    def ratio(self) -> FloatArray:
        return self.makespan / self.bound

    def periods_to_within(self, factor: float, hold: int = 10) -> int | None:
        """First step from which the ratio's running median over ``hold`` steps stays
        at or below ``factor`` for the rest of the run; None if never."""
        r = self.ratio
        if r.size < hold:
            return None
        med = np.array([np.median(r[max(0, k - hold + 1) : k + 1]) for k in range(r.size)])
        bad = np.flatnonzero(med > factor)
        first = 0 if bad.size == 0 else int(bad[-1]) + 1
        return first if first < r.size else None


def first_cpus(machine: Machine, threads: Threads) -> IntArray:
    """Where threads start before any policy acts: spread round-robin over the cores of
    each thread's home domain."""
    cpus = np.empty(threads.weights.size, dtype=np.int64)
    for a, domain in enumerate(machine.domains):
        members = np.flatnonzero(threads.home == a)
        cpus[members] = np.asarray(domain)[np.arange(members.size) % len(domain)]
    return cpus


def simulate(
    policy: Policy,
    machine: Machine,
    workload: Workload,
    background: Background,
    steps: int,
    noise: float = 0.0,
    rng: np.random.Generator | None = None,
) -> Trace:
    rng = rng if rng is not None else np.random.default_rng(0)
    n = workload.threads.weights.size
    keys = np.arange(n, dtype=np.int64)
    measured = np.full(n, np.nan)
    cpus_before = first_cpus(machine, workload.threads)
    trace = {k: np.empty(steps) for k in ("makespan", "bound", "mean_utility")}
    migrations = np.empty(steps, dtype=np.int64)
    for k in range(steps):
        threads, bg = workload.at(k), background.at(k)
        cpus = np.asarray(policy.decide(Observation(k, keys, measured, cpus_before, threads, bg)), dtype=np.int64)
        u = utilities(machine, threads, cpus, bg)
        measured = u * rng.lognormal(0.0, noise, n) if noise > 0 else u
        trace["makespan"][k] = makespan(machine, threads, cpus, bg)
        trace["bound"][k] = lower_bound(machine, threads, bg)
        trace["mean_utility"][k] = u.mean()
        migrations[k] = int((cpus != cpus_before).sum())
        cpus_before = cpus
    return Trace(migrations=migrations, **trace)
