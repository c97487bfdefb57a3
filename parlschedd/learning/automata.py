"""Level 2 of PaRLSched: perturbed learning automata over the cores of a domain.

shared/spec/parlsched.md, "Level 2" (Table II of the paper). Every function works on
all threads at once: row i of a strategy matrix is thread i's probability vector over
the cores of its current domain, padded with zeros up to the widest domain. ``width``
holds the number of valid columns of each row: |J_CPU(alpha_i)|, plus one when the
scheduler adds the "free" action after the cores (LearningParams.free), which the
perturbation's uniform share then covers as it covers each core.
"""

from __future__ import annotations

import numpy as np

from numpy.typing import NDArray

from parlschedd.arrays import FloatArray, IntArray


def valid_columns(width: IntArray, columns: int) -> NDArray[np.bool_]:
    """Mask of each thread's valid columns: its domain's cores, and "free" when the
    scheduler has it (``width`` counts it)."""
    return np.arange(columns)[None, :] < width[:, None]


def uniform(width: IntArray, columns: int) -> FloatArray:
    """The uniform strategy over each thread's domain: the start and the reset on a
    domain change ("x_i restarts uniform over the cores of the new domain"). A width of
    0 (a domain closed to the threads: no core of theirs) gives a row of zeros, which
    no thread is ever given."""
    return valid_columns(width, columns) / np.maximum(width, 1)[:, None].astype(np.float64)


def reinforce(x: FloatArray, chosen: IntArray, reward: FloatArray, eps: float) -> FloatArray:
    """Step 2, first line: x(k+1) = x(k) + eps * u^(k) * (e_beta(k) - x(k)).

    ``reward`` is the utility normalised into [0, 1], so each row stays a probability
    vector (a convex combination of x and a unit vector). A NaN reward (no measurement
    this period) leaves the row unchanged.
    """
    step = eps * np.fmin(np.fmax(reward, 0.0), 1.0)  # fmax(NaN, 0) is 0: no step
    new = x * (1.0 - step)[:, None]
    rows = np.arange(x.shape[0])
    new[rows, chosen] += step
    return new


def perturb(x: FloatArray, uniform_rows: FloatArray, lam: float) -> FloatArray:
    """Step 2, second line: sigma = (1 - lambda) x + lambda / |J| over the valid columns
    (the cores, and "free" when the scheduler has it).

    ``uniform_rows`` is :func:`uniform` of each thread's domain; the scheduler keeps one
    per domain, so the period does not rebuild it."""
    return (1.0 - lam) * x + lam * uniform_rows


def draw(sigma: FloatArray, rng: np.random.Generator) -> IntArray:
    """Step 3: one core index per row drawn from its distribution (inverse CDF, one
    uniform number per thread)."""
    cdf = np.cumsum(sigma, axis=1)
    u = rng.random(sigma.shape[0]) * cdf[:, -1]
    return (cdf[:, :-1] <= u[:, None]).sum(axis=1)  # the last column bounds the index
