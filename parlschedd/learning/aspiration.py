"""Level 1 of PaRLSched: aspiration learning over domains (NUMA nodes).

shared/spec/parlsched.md, "Level 1" (Table I of the paper), steps 2-5, vectorised over
threads. ``alpha`` holds each thread's current domain index.

Utilities are rates of counters that only grow, so >= 0 (the scheduler takes any other
as not measured). A window in which a thread did no work (idle throughout: a worker
blocked on a queue) is not measured either (``TwoLevelScheduler._level1``): its rho,
b and bbar stay as they were, so it is never unsatisfied for sleeping, and a thread
idle from the start has no aspiration, no better reply and no weight in its domain's
mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parlschedd.arrays import BoolArray, FloatArray, IntArray



@dataclass(frozen=True)
class Benchmarks:
    """The lower (b) and upper (bbar) benchmarks of every thread, b < bbar."""

    lower: FloatArray
    upper: FloatArray


def update_aspiration(rho: FloatArray, utility: FloatArray, nu: float) -> FloatArray:
    """Step 2: rho(tau+1) = rho(tau) + nu * (u~(tau) - rho(tau))."""
    return rho + nu * (utility - rho)


def update_benchmarks(rho_next: FloatArray, bench: Benchmarks, eta: float) -> Benchmarks:
    """Step 3, the three branches, with eta > 1:

    - rho >= bbar:       bbar = rho,       b = rho / eta   (raise both)
    - b <= rho < bbar:   unchanged
    - rho < b:           bbar = eta * rho, b = rho         (lower both)
    """
    raise_ = rho_next >= bench.upper
    lower_ = rho_next < bench.lower
    upper = np.where(raise_, rho_next, np.where(lower_, eta * rho_next, bench.upper))
    lower = np.where(raise_, rho_next / eta, np.where(lower_, rho_next, bench.lower))
    return Benchmarks(lower=lower, upper=upper)


def domain_means(rho: FloatArray, alpha: IntArray, n_domains: int) -> FloatArray:
    """Mean aspiration of the threads in each domain, over the threads that have one
    (finite rho); NaN for a domain with none."""
    known = np.isfinite(rho)
    counts = np.bincount(alpha[known], minlength=n_domains).astype(np.float64)
    sums = np.bincount(alpha[known], weights=rho[known], minlength=n_domains)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / counts, np.nan)


def better_replies(rho: FloatArray, alpha: IntArray, n_domains: int, gamma: float,
                   open_domains: BoolArray | None = None) -> BoolArray:
    """Step 4: BR_i = {a' : rho_i < gamma * mean rho of the threads in a'}, as a mask.

    Two choices the spec leaves open, made here:
    - a thread's own domain is never in its set: moving there is staying, and the
      paper's step 5 speaks of "any other action" (alternative NUMA nodes);
    - an empty domain is in every set: nothing is known of it, and an idle NUMA node is
      free capacity. It is still only taken through step 5's rules (an unsatisfied
      thread, or exploration with probability zeta), one thread per step.
    Threads without an aspiration yet (NaN) get an empty set. A domain ``open_domains``
    says is closed (none of its CPUs is one the threads may use: a cpuset bound to
    another NUMA node) is in no set: J_NUMA is the domains a thread can run in, and a
    move to a closed one would be refused by the kernel, the thread left where it was.
    """
    means = domain_means(rho, alpha, n_domains)
    with np.errstate(invalid="ignore"):
        br = (rho[:, None] < gamma * means[None, :]) | np.isnan(means)[None, :]
    br &= np.isfinite(rho)[:, None]
    if open_domains is not None:
        br &= open_domains[None, :]
    br[np.arange(rho.shape[0]), alpha] = False
    return br


def choose_mover(
    rho_next: FloatArray,
    lower_before: FloatArray,
    br: BoolArray,
    zeta: float,
    rng: np.random.Generator,
) -> tuple[int, int] | None:
    """Step 5: who moves where, at most one thread per step.

    An unsatisfied thread (rho(tau+1) < b(tau)) wants to move; a satisfied one wants to
    with probability zeta. A thread with an empty better-reply set stays. Among those
    that want to move, one picked uniformly at random moves to a uniformly random domain
    of its set. Returns (thread index, new domain) or None.
    """
    unsatisfied = rho_next < lower_before
    explores = rng.random(rho_next.shape[0]) < zeta
    wants = (unsatisfied | explores) & br.any(axis=1)
    candidates = np.flatnonzero(wants)
    if candidates.size == 0:
        return None
    mover = int(rng.choice(candidates))
    return mover, int(rng.choice(np.flatnonzero(br[mover])))
