"""Algorithm 1 of the spec: the simulated dynamic distribution of subpopulations.

Every idle device asks for a new subpopulation, so the device that has computed least
so far (the first row of the list L, kept sorted by accumulated time with a stable sort)
receives the next one. Run for NSp subpopulations, this gives each device's count
NSp_ij and T_evo, the largest accumulated time (the last row of L).

The simulation is vectorised over any leading batch shape (parameter sets times
configurations): L is held as two arrays in list order, the accumulated times and the
device ids, and each of the at most max(NSp) steps adds T1 to column 0 of every batch
row still distributing and re-sorts each row stably, exactly as lines 4-12 do. Ties
therefore resolve as in the paper's list: the device that just received work stays
ahead of devices with the same accumulated time, and at the start devices are taken
in cluster order.
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
    flat = t1.reshape(-1, devices)
    rows = np.arange(flat.shape[0])
    order = np.tile(np.arange(devices), (flat.shape[0], 1))  # device id at each list position
    total = np.zeros_like(flat)  # accumulated time at each list position
    counts = np.zeros(flat.shape, dtype=np.int64)
    for step in range(int(nsp.max(initial=0))):
        active = step < nsp
        first = order[:, 0]
        total[:, 0] += np.where(active, flat[rows, first], 0.0)
        counts[rows, first] += active
        resort = np.argsort(total, axis=1, kind="stable")
        total = np.take_along_axis(total, resort, axis=1)
        order = np.take_along_axis(order, resort, axis=1)
    return total[:, -1].reshape(batch), counts.reshape(*batch, devices)
