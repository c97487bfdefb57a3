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
    if mode == "global":  # fmax ignores NaN: an unmeasured thread leaves the peak alone
        peak = max(float(scale.max(initial=0.0)) * decay, float(np.fmax.reduce(utility, initial=0.0)))
        return np.full(scale.shape, peak)
    if mode == "thread":
        return np.fmax(scale * decay, np.fmax(utility, 0.0))
    raise ValueError(f"unknown normalisation {mode!r}; expected one of {MODES}")


def normalise(utility: FloatArray, scale: FloatArray, sharpness: float = 1.0) -> FloatArray:
    """(u / scale) ** sharpness clipped into [0, 1]; NaN stays NaN (no measurement)."""
    r = np.divide(utility, scale, out=np.where(np.isfinite(utility), 0.0, np.nan), where=scale > 0.0)
    r = np.minimum(np.maximum(r, 0.0, out=r), 1.0, out=r)  # NaN passes through both
    return r if sharpness == 1.0 else r**sharpness
