"""Algorithm 1 of the spec: the simulated dynamic distribution of subpopulations.

Every idle device asks for a new subpopulation, so the device that has computed least
so far (the first row of the list L, kept sorted by accumulated time with a stable sort)
receives the next one. Run for NSp subpopulations, this gives each device's count
NSp_ij and T_evo, the largest accumulated time (the last row of L).

The simulation is vectorised over any leading batch shape (parameter sets times
configurations). Instead of re-sorting L at every step, it uses what the stable sort
implies: the first row of L is the device with the least accumulated time and, among
devices tied on that time, the one that received work most recently (the stable sort
keeps the device just updated ahead of its equals), and among devices that never
received work, the first in cluster order. Rows are processed longest-NSp first so the
rows still distributing at a step are a prefix of the batch.
"""

from __future__ import annotations

import numpy as np


def distribute(t1: np.ndarray, nsp: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1 for every batch row.

    t1: (..., D) time of each device to evolve one subpopulation between two
        migrations (eq. 1); nsp: number of subpopulations, broadcastable to t1[..., 0].
    Returns (t_evo with shape (...), counts NSp_ij with shape (..., D), integers).
    """
    t1 = np.asarray(t1, dtype=float)
    batch, devices = t1.shape[:-1], t1.shape[-1]
    nsp = np.broadcast_to(np.asarray(nsp), batch).reshape(-1)
    if np.any(nsp < 0):
        raise ValueError("the number of subpopulations must be >= 0")
    by_nsp = np.argsort(-nsp, kind="stable")
    flat = t1.reshape(-1, devices)[by_nsp]
    total = np.zeros_like(flat)
    counts = np.zeros(flat.shape, dtype=np.int64)
    last = np.full(flat.shape, -1)  # step at which each device last received work
    steps = int(nsp.max(initial=0))
    # rows still distributing at each step (those with nsp > step), without a steps x rows matrix
    active = nsp.size - np.searchsorted(np.sort(nsp), np.arange(steps), side="right")
    all_rows = np.arange(len(flat))
    for step, n in enumerate(active.tolist()):
        tot, rows = total[:n], all_rows[:n]
        tied = tot == tot.min(axis=1, keepdims=True)
        pick = np.argmax(np.where(tied, last[:n], -2), axis=1)
        tot[rows, pick] += flat[rows, pick]
        counts[rows, pick] += 1
        last[rows, pick] = step
    unsort = np.argsort(by_nsp)
    return total.max(axis=1)[unsort].reshape(batch), counts[unsort].reshape(*batch, devices)
