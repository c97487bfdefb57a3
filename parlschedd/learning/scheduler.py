"""The two-level PaRLSched scheduler: per-thread utilities in, placements out.

Pure code: no I/O, no clock. The daemon and the simulator both call ``step`` once per
T_CPU period with the utility each thread achieved during the period just ended and get
back the CPU each thread should run on next. Level 2 (automata) runs every step, Level 1
(aspiration) every ``domain_every`` steps on the mean utility of that window, and only
when there is more than one domain the threads may use (shared/spec/parlsched.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from parlschedd.arrays import BoolArray, FloatArray, IntArray
from parlschedd.learning import aspiration, automata
from parlschedd.learning.normalize import normalise, update_scale
from parlschedd.learning.params import LearningParams

FREE = -1  # Placement.cpus of a thread left to the kernel inside its domain (LearningParams.free)


@dataclass(frozen=True)
class Placement:
    """The decision of one step, aligned with the keys passed in."""

    keys: IntArray
    cpus: IntArray     # FREE: the whole domain, the kernel balances the thread there
    domains: IntArray
    domain_move: int | None  # key of the thread that changed domain this step, if any


class TwoLevelScheduler:
    """PaRLSched over a fixed set of domains (lists of CPU ids).

    A domain is given only the CPUs its threads may use (the daemon passes each
    target's cpuset within each domain), so Level 2 never draws a core the kernel
    would refuse. A domain left with none is closed: it keeps its index (the caller's
    domain numbers stay meaningful) but no thread joins it, is moved to it or is ever
    placed in it; J_NUMA of the spec is the open domains. At least one must be open.

    Threads are identified by integer keys chosen by the caller (tids in the daemon).
    A key seen for the first time joins; a key absent from a step has left and is
    forgotten. ``stream`` picks one of the seed's independent random streams (the
    daemon gives each target its own: with a seed set, targets would otherwise all draw
    the same numbers); None is the seed's own stream.
    """

    def __init__(self, domains: Sequence[Sequence[int]], params: LearningParams, domain_every: int,
                 stream: int | None = None) -> None:
        if not any(len(d) for d in domains):
            raise ValueError("at least one domain needs a CPU")
        if domain_every < 1:
            raise ValueError("domain_every must be >= 1")
        self.params = params
        self.domain_every = domain_every
        self.rng = np.random.default_rng(np.random.SeedSequence(params.seed, spawn_key=() if stream is None else (stream,)))
        extra = 1 if params.free else 0  # the "free" action sits after a domain's cores
        width = max(len(d) for d in domains) + extra
        self.domain_cpus = np.full((len(domains), width), FREE, dtype=np.int64)  # padding is never drawn
        for a, cpus in enumerate(domains):
            self.domain_cpus[a, : len(cpus)] = cpus
        self.domain_width = np.array([len(d) + extra if len(d) else 0 for d in domains], dtype=np.int64)
        self.open = self.domain_width > 0  # a closed domain has no CPU of the threads'
        self.n_open = int(np.count_nonzero(self.open))  # with one, Level 1 stays quiet (spec, "Domains")
        self._uniform = automata.uniform(self.domain_width, width)  # per domain, for the perturbation
        self._domain_of_cpu = {int(c): a for a, cpus in enumerate(domains) for c in cpus}
        self.periods = 0
        self._reset_threads()

    # -- state -------------------------------------------------------------------------

    def _reset_threads(self) -> None:
        cols = self.domain_cpus.shape[1]
        self.keys = np.empty(0, dtype=np.int64)          # sorted
        self.alpha = np.empty(0, dtype=np.int64)         # domain index
        self.beta = np.empty(0, dtype=np.int64)          # core index inside the domain
        self.x = np.empty((0, cols), dtype=np.float64)   # Level 2 nominal strategies
        self.scale = np.empty(0, dtype=np.float64)       # utility normalisers
        self.rho = np.empty(0, dtype=np.float64)         # aspiration levels (NaN: none yet)
        self.bench = aspiration.Benchmarks(np.empty(0), np.empty(0))
        self.window_sum = np.empty(0, dtype=np.float64)  # Level 1 utility accumulators
        self.window_n = np.empty(0, dtype=np.int64)

    @property
    def n_domains(self) -> int:
        return int(self.domain_cpus.shape[0])

    @property
    def cpus(self) -> IntArray:
        """The CPU each known thread is placed on, aligned with ``self.keys``."""
        return self.domain_cpus[self.alpha, self.beta]

    def _take(self, rows: IntArray) -> None:
        self.keys, self.alpha, self.beta = self.keys[rows], self.alpha[rows], self.beta[rows]
        self.x, self.rho, self.scale = self.x[rows], self.rho[rows], self.scale[rows]
        self.bench = aspiration.Benchmarks(self.bench.lower[rows], self.bench.upper[rows])
        self.window_sum, self.window_n = self.window_sum[rows], self.window_n[rows]

    def forget(self, keys: Sequence[int]) -> None:
        """Forget ``keys`` before the next step, where a key given again joins afresh:
        the kernel gave a dead thread's tid to a new one, whose strategies, aspiration
        and benchmarks start over (spec, "Level 2": x_i uniform at the start)."""
        self._take(np.flatnonzero(~np.isin(self.keys, np.asarray(keys, dtype=np.int64))))

    def _align(self, keys: IntArray, ran_on: IntArray | None) -> None:
        """Forget threads that left, add those that joined; keeps ``self.keys`` sorted."""
        self._take(np.flatnonzero(np.isin(self.keys, keys)))
        new = np.setdiff1d(keys, self.keys)
        if new.size == 0:
            return
        alpha = self._join_domains(new, keys, ran_on)
        x = self._initial(alpha)
        beta = automata.draw(x, self.rng)
        nan = np.full(new.size, np.nan)
        keys_all = np.concatenate([self.keys, new])
        order = np.argsort(keys_all, kind="stable")
        self.keys = keys_all
        self.alpha = np.concatenate([self.alpha, alpha])
        self.beta = np.concatenate([self.beta, beta])
        self.x = np.concatenate([self.x, x])
        self.rho = np.concatenate([self.rho, nan])
        self.scale = np.concatenate([self.scale, np.zeros(new.size)])
        self.bench = aspiration.Benchmarks(
            np.concatenate([self.bench.lower, nan]), np.concatenate([self.bench.upper, nan])
        )
        self.window_sum = np.concatenate([self.window_sum, np.zeros(new.size)])
        self.window_n = np.concatenate([self.window_n, np.zeros(new.size, dtype=np.int64)])
        self._take(order)

    def _initial(self, alpha: IntArray) -> FloatArray:
        """Fresh Level 2 strategies in domains ``alpha``: uniform over the cores (spec),
        or with ``free_prior`` on the free action and the rest uniform over the cores."""
        width = self.domain_width[alpha]
        x = automata.uniform(width, self.domain_cpus.shape[1])
        if self.params.free:  # a thread is only in an open domain, so width - 1 >= 1 cores before "free"
            cores = width - 1
            x = (x > 0) * ((1.0 - self.params.free_prior) / cores)[:, None]
            x[np.arange(alpha.size), cores] = self.params.free_prior
        return x

    def _join_domains(self, new: IntArray, keys: IntArray, ran_on: IntArray | None) -> IntArray:
        """A joining thread starts in the domain it was last seen running in, else in
        the least populated open domain (ties to the lowest index). A CPU outside every
        domain's given CPUs (one the threads may not use) names no domain."""
        counts = np.where(self.open, np.bincount(self.alpha, minlength=self.n_domains), np.iinfo(np.int64).max)
        alpha = np.empty(new.size, dtype=np.int64)
        seen = dict(zip(keys.tolist(), ran_on.tolist())) if ran_on is not None else {}
        for i, key in enumerate(new.tolist()):
            a = self._domain_of_cpu.get(int(seen.get(key, -1)))
            if a is None:
                a = int(np.argmin(counts))
            alpha[i] = a
            counts[a] += 1
        return alpha

    # -- the step ------------------------------------------------------------------------

    def step(self, keys: IntArray, utility: FloatArray, ran_on: IntArray | None = None) -> Placement:
        """One T_CPU period.

        keys:    thread keys measured this period (unique).
        utility: each thread's utility over the period (NaN: not measured; a
                 negative or infinite one is taken as not measured: the spec's
                 utilities are rates of work, u >= 0).
        ran_on:  optional CPU each thread actually ran on (observe mode, or a pin the
                 kernel refused; -1: not known); Level 2 reinforces that core when it
                 is in the thread's domain (Level 2 step 1: the utility "on the core it
                 ran on"). A thread that ran outside its domain learns nothing from the
                 period at either level: its utility was earned in another domain,
                 under no core of its strategy.
        """
        keys = np.asarray(keys, dtype=np.int64)
        utility = np.asarray(utility, dtype=np.float64)
        if keys.shape != utility.shape:
            raise ValueError("keys must be aligned with utility")
        ran = None if ran_on is None else np.asarray(ran_on, dtype=np.int64)
        fresh = None  # the threads that joined this step, when any did
        if keys.size == self.keys.size and np.array_equal(keys, self.keys):  # the usual period
            where: IntArray | slice = slice(None)
            u = utility
        else:
            if np.unique(keys).size != keys.size:
                raise ValueError("keys must be unique")
            known_before = self.keys
            self._align(keys, ran)
            where = np.searchsorted(self.keys, keys)
            fresh = ~np.isin(self.keys, known_before)
            u = np.full(self.keys.size, np.nan)
            u[where] = utility
        finite = (u >= 0) & (u < np.inf)  # NaN compares False
        if not finite.all():  # an infinite utility would make an infinite, never decaying scale: no more reward;
            u = np.where(finite, u, np.nan)  # a negative one would raise b above bbar at Level 1 (step 3)
        learned = finite if fresh is None else finite & ~fresh  # a new thread's last period was not ours
        if ran is not None:
            learned = learned & ~self._observe_ran_on(np.arange(keys.size) if fresh is None else where, ran)
        earned = u
        if self.params.reward == "target":  # Level 2 only: each thread that ran earns the target's total;
            earned = np.where(u > 0, u[learned].sum(), np.nan)  # one that did not learned nothing, as with its own

        self.scale = update_scale(self.scale, earned, self.params.decay, self.params.normalise)
        draws = u > 0 if fresh is None else (u > 0) | fresh  # a thread new this step has no core of ours to keep
        self._level2(normalise(np.where(learned, earned, np.nan), self.scale, self.params.sharpness), draws)
        self.window_sum += np.where(learned, u, 0.0)
        self.window_n += learned
        self.periods += 1
        mover = None
        if self.n_open > 1 and self.periods % self.domain_every == 0:
            mover = self._level1()
        return Placement(
            keys=keys,
            cpus=self.cpus[where],
            domains=self.alpha[where].copy(),  # a copy: Level 1 changes alpha in place
            domain_move=None if mover is None else int(self.keys[mover]),
        )

    def _observe_ran_on(self, where: IntArray, ran: IntArray) -> BoolArray:
        """Take each thread's core to be the one it ran on, when that is in its domain;
        returns the rows (of ``self.keys``) that ran outside their domain."""
        row = self.domain_cpus[self.alpha[where]]
        hit = row == ran[:, None]
        inside = hit.any(axis=1) & (ran >= 0)
        ok = inside & (row[np.arange(where.size), self.beta[where]] != FREE)  # free stays free
        self.beta[where[ok]] = hit[ok].argmax(axis=1)
        away = np.zeros(self.keys.size, dtype=bool)
        away[where] = (ran >= 0) & ~inside
        return away

    def _level2(self, reward: FloatArray, draws: BoolArray) -> None:
        """Steps 2 and 3 for every thread; only the ``draws``, those that ran in the
        period (u > 0) and those new this step, draw their next core. One that did not run
        (idle, u = 0, or not measured) keeps its core, or stays free: it learned
        nothing, and a draw would move it for nothing (a pool of 300 parked threads was
        re-pinned about 40 times a period, every one of them drawing a core with the
        perturbation's and the strategy's odds; the spec does not say what a thread
        that never runs does)."""
        p = self.params
        self.x = automata.reinforce(self.x, self.beta, reward, p.eps)
        sigma = automata.perturb(self.x, self._uniform[self.alpha], p.lam)
        if draws.all():
            self.beta = automata.draw(sigma, self.rng)
        else:
            rows = np.flatnonzero(draws)
            self.beta[rows] = automata.draw(sigma[rows], self.rng)

    def _level1(self) -> int | None:
        """Aspiration step on the window's mean utility; moves at most one thread."""
        p = self.params
        # a thread idle throughout the window (no work, u = 0) is not measured: its
        # aspiration would fall by (1 - nu) every window, below b each time (step 3's
        # lowering sets b = rho), and the thread be unsatisfied (step 5) and take the
        # window's one move for as long as it sleeps
        measured = self.window_sum > 0
        mean_u = np.where(measured, self.window_sum / np.maximum(self.window_n, 1), np.nan)
        first = measured & np.isnan(self.rho)
        self.rho = np.where(first, mean_u, self.rho)
        lower = np.where(first, mean_u / p.eta, self.bench.lower)
        upper = np.where(first, mean_u, self.bench.upper)
        rho_before = self.rho
        rho_next = np.where(measured, aspiration.update_aspiration(self.rho, mean_u, p.nu), self.rho)
        bench = aspiration.update_benchmarks(rho_next, aspiration.Benchmarks(lower, upper), p.eta)
        br = aspiration.better_replies(rho_before, self.alpha, self.n_domains, p.gamma, self.open)
        choice = aspiration.choose_mover(rho_next, lower, br, p.zeta, self.rng)
        self.rho, self.bench = rho_next, bench
        self.window_sum[:] = 0.0
        self.window_n[:] = 0
        if choice is None:
            return None
        i, a = choice
        self.alpha[i] = a
        self.x[i] = self._initial(np.array([a]))[0]
        sigma = automata.perturb(self.x[[i]], self._uniform[[a]], p.lam)  # step 3 as for every thread
        self.beta[i] = automata.draw(sigma, self.rng)[0]
        return i
