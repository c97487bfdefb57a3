"""A bounded in-memory history of each target: one sample per period.

A ring (deque with maxlen) of per-period samples, each a few small numpy arrays, so
memory is bounded by capacity x (threads x 12 bytes + the arrays' fixed few hundred)
whatever the run length. Served over
the socket (``history``) for ``parlschedctl plot``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray


@dataclass(frozen=True)
class Sample:
    """One period of a target: its threads and their utility and placement, in the
    narrow dtypes that keep the ring's memory bound."""

    t: float                       # seconds since the target was attached
    tids: NDArray[np.int32]
    utility: NDArray[np.float32]   # NaN: not measured this period
    cpu: NDArray[np.int16]
    domain: NDArray[np.int16]

    @property
    def shown_t(self) -> float:
        """``t`` as the ``history`` reply and ``status``'s ``history_t`` give it: the
        same rounding, so that a client compares them exactly."""
        return round(self.t, 4)

    def as_json(self) -> dict:
        return {
            "t": self.shown_t,
            "tids": self.tids.tolist(),
            "utility": [None if u != u else float(u) for u in self.utility.tolist()],
            "cpu": self.cpu.tolist(),
            "domain": self.domain.tolist(),
        }


class History:
    """The last ``capacity`` periods of one target, for ``history`` and its plot."""

    def __init__(self, capacity: int, started: float) -> None:
        self.samples: deque[Sample] = deque(maxlen=capacity)
        self.started = started
        self.recorded = 0

    @property
    def dropped(self) -> int:
        """How many of the periods recorded the ring no longer holds: a figure of a
        history with any dropped is not of the whole run."""
        return self.recorded - len(self.samples)

    @property
    def shown_started(self) -> float:
        """Which history this is, as ``history``'s ``started`` and ``status``'s
        ``history_started`` give it: its start on the daemon's clock."""
        return round(self.started, 6)

    def resize(self, capacity: int) -> None:
        """Keep the last ``capacity`` periods from now on (a reload's history_periods),
        the newest of those kept so far among them."""
        if capacity != self.samples.maxlen:
            self.samples = deque(self.samples, maxlen=capacity)

    def record(self, now: float, tids: ArrayLike, utility: ArrayLike, cpu: ArrayLike, domain: ArrayLike) -> None:
        self.recorded += 1
        self.samples.append(Sample(
            now - self.started,
            np.asarray(tids, dtype=np.int32),
            np.asarray(utility, dtype=np.float32),
            np.asarray(cpu, dtype=np.int16),
            np.asarray(domain, dtype=np.int16),
        ))

    def last(self, n: int | None = None) -> list[Sample]:
        """The last ``n`` samples (all when None), oldest first: a list of their own,
        which the ring's next samples do not change."""
        samples = list(self.samples)
        return samples if n is None else samples[-n:]
