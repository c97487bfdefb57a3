"""Utility normalisation into [0, 1] for the Level 2 reward.

The spec asks for u^ in [0, 1] so that the strategy stays a probability vector; the
original code divided by a constant. Here the divisor is a running maximum that adapts
to the machine and the counter (instructions/s and CPU-ns/s differ by orders of
magnitude), with a slow decay so that it follows a workload whose peak falls:

- ``global``: one maximum over all threads (the spec's suggested default);
- ``thread``: each thread's own maximum, so that a light thread on its best core is
  rewarded as fully as a heavy one (weights differ by orders of magnitude in real
  programs, and a global maximum leaves light threads almost no reinforcement).

``sharpness`` p >= 1 maps the ratio r to r**p: reinforcement concentrates on the cores
that did nearly as well as the best, which speeds convergence (bench/sim_scale.py).
"""

from __future__ import annotations

import numpy as np

from parlschedd.arrays import FloatArray

MODES = ("global", "thread")


def update_scale(scale: FloatArray, utility: FloatArray, decay: float, mode: str) -> FloatArray:
    """The new per-thread divisors: max(decay * previous, this period's utility), over
    all threads (``global``) or per thread (``thread``). NaN utilities are ignored."""
    u = np.where(np.isfinite(utility), utility, 0.0)
    if mode == "global":
        peak = max(float(scale.max(initial=0.0)) * decay, float(u.max(initial=0.0)))
        return np.full(scale.shape, peak)
    if mode == "thread":
        return np.maximum(scale * decay, u)
    raise ValueError(f"unknown normalisation {mode!r}; expected one of {MODES}")


def normalise(utility: FloatArray, scale: FloatArray, sharpness: float = 1.0) -> FloatArray:
    """(u / scale) ** sharpness clipped into [0, 1]; NaN stays NaN (no measurement)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(scale > 0.0, utility / scale, 0.0)
    r = np.where(np.isfinite(utility), np.clip(r, 0.0, 1.0), np.nan)
    return r**sharpness
