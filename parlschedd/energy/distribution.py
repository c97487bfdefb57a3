"""Algorithm 1 of the spec: the simulated dynamic distribution of subpopulations.

Every idle device asks for a new subpopulation, so the device that has computed least
so far (the first row of the list L, kept sorted by accumulated time with a stable sort)
receives the next one. Run for NSp subpopulations, this gives each device's count
NSp_ij and T_evo, the largest accumulated time (the last row of L).

The device that has computed least is the one whose next subpopulation starts first:
device j's m-th starts at (m - 1) * T1_j. So the NSp subpopulations go to the NSp
earliest of all these start times, and with s the NSp-th earliest, device j receives
every one of its own that starts at s or before. ``_by_start_times`` finds s among a
few start times per device around where the NSp-th must fall (a window; those before it
are counted), for every row at once, with no step per subpopulation: a fit's time phase
runs Algorithm 1 for every individual and configuration, and stepping through NSp up
to 1500 cost hours a fit (bench/results/fit_cost-f208a58.json). Where the cut falls in
a tie (start times equal, or within TIE of each other, where the sums of the simulation
could order them either way), which device gets the last subpopulations depends on the
stable sort's order, so those rows are simulated step by step (``_simulate``), and so
are those the window is not for: a device whose time is not positive and finite
(zero, negative, inf, NaN); NSp below the number of devices (a tie at time 0); times
so far apart that their rates overflow; a T_evo past HUGE, where the simulation's sum
may overflow to inf and the product not. There the first row of L is the device with
the least accumulated time and, among devices tied on that time, the one that received
work most recently (the stable sort keeps the device just updated ahead of its
equals), and among devices that never received work, the first in cluster order.
"""

from __future__ import annotations

import numpy as np

TIE = 1e-9  # start times closer than this, relative, are settled by the simulation
HUGE = 1e300  # T_evo past it is the simulation's (see the module docstring)
WINDOW_ELEMENTS = 1 << 20  # start times in the windows of the rows done at a time: (D + 4) x D a row


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
    nsp = nsp.astype(np.int64)  # unsigned, -nsp wrapped round in _simulate's order
    flat = t1.reshape(-1, devices)
    t_evo, counts = np.zeros(len(flat)), np.zeros(flat.shape, dtype=np.int64)
    settled = np.zeros(len(flat), dtype=bool)
    windowed = np.flatnonzero((nsp >= devices) & np.all(np.isfinite(flat) & (flat > 0), axis=1))
    chunk = max(1, WINDOW_ELEMENTS // (devices * (devices + 4)))
    for lo in range(0, len(windowed), chunk):
        rows = windowed[lo:lo + chunk]
        t_evo[rows], counts[rows], settled[rows] = _by_start_times(flat[rows], nsp[rows])
    if not settled.all():
        rest = ~settled
        t_evo[rest], counts[rest] = _simulate(flat[rest], nsp[rest])
    return t_evo.reshape(batch), counts.reshape(*batch, devices)


def _by_start_times(t1: np.ndarray, nsp: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t_evo, counts, settled) of (rows, D) positive finite times and NSp >= D from the
    NSp-th earliest start time s, where a row's window settles it (see the module
    docstring).

    With H = sum_j 1 / T1_j, the number of start times at or before x lies between
    x * H and x * H + D, so s lies in [(NSp - D) / H, NSp / H]: each device's window
    starts below that (its earlier start times are counted) and holds D + 4 of its
    start times, which reach past the next start time after s. Both are checked
    rather than trusted to rounding, with the cut not in a tie."""
    rows, d = t1.shape
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # extreme times: not settled, simulated
        rate = (1.0 / t1).sum(axis=1)
        first = np.floor((nsp - d)[:, None] / (rate[:, None] * t1)) - 1  # (rows, D): start times before the window
        settled = np.all(np.isfinite(first), axis=1)
        first = np.where(settled[:, None], np.maximum(first, 0), 0)
        starts = (first[:, :, None] + np.arange(d + 4)) * t1[:, :, None]  # (rows, D, D + 4)
        ordered = np.sort(starts.reshape(rows, -1), axis=1)
        at = nsp - first.sum(axis=1) - 1  # s's place among the windows' start times
        settled &= (at >= 0) & (at < ordered.shape[1] - 1)
        at = np.clip(at, 0, ordered.shape[1] - 2).astype(np.intp)
        s, after = ordered[np.arange(rows), at], ordered[np.arange(rows), at + 1]
        settled &= after - s > TIE * after  # not in a tie
        settled &= np.all((first == 0) | ((first - 1) * t1 < s[:, None]), axis=1)  # those before come before s
        settled &= np.all(starts[:, :, -1] >= after[:, None], axis=1)  # the windows reach past s
        counts = first.astype(np.int64) + np.count_nonzero(starts <= s[:, None, None], axis=2)
        t_evo = (counts * t1).max(axis=1)
    return t_evo, counts, settled & (t_evo < HUGE)


def _simulate(t1: np.ndarray, nsp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1 step by step for (rows, D) times: (t_evo, counts). Rows are
    processed longest-NSp first so the rows still distributing at a step are a prefix."""
    by_nsp = np.argsort(-nsp, kind="stable")
    flat = t1[by_nsp]
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
        with np.errstate(over="ignore"):  # a sum past the float's range is inf, as Algorithm 1's
            tot[rows, pick] += flat[rows, pick]
        counts[rows, pick] += 1
        last[rows, pick] = step
    unsort = np.argsort(by_nsp)
    return total.max(axis=1)[unsort], counts[unsort]
