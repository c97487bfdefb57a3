"""A bounded in-memory history of each target: one sample per period.

The samples live in a few arrays a target, written in place period after period: a
ring of the periods' times and of where each period's rows are, and one flat ring of
rows (a thread's tid, utility, CPU and domain: 12 bytes). A period recorded allocates
nothing once the rings are as large as they need be: samples held as objects of their
own (four small numpy arrays a period, kept 600 periods, each a malloc'd block among
the period's short-lived ones) were the lead for the daemon's heap growing under churn
(bench/results/heap_churn*.json). Memory is bounded by capacity x 20 bytes and 12
bytes a row for at most four times the rows held and a period's most. Served over the
socket (``history``) for ``parlschedctl plot``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

# a thread's row in a period, in the narrow dtypes that keep the ring's memory bound
ROW = np.dtype([("tid", np.int32), ("utility", np.float32), ("cpu", np.int16), ("domain", np.int16)])
FIRST_PERIODS = 64  # the periods' ring starts this long (or capacity, if less) and doubles up to capacity
FIRST_ROWS = 1024


def shown(t: float) -> float:
    """``t`` as the ``history`` reply and ``status``'s ``history_t`` give it: the same
    rounding, so that a client compares them exactly."""
    return round(t, 4)


@dataclass(frozen=True)
class Sample:
    """One period of a target: its threads and their utility and placement."""

    t: float                       # seconds since the target was attached
    tids: NDArray[np.int32]
    utility: NDArray[np.float32]   # NaN: not measured this period
    cpu: NDArray[np.int16]
    domain: NDArray[np.int16]

    @property
    def shown_t(self) -> float:
        return shown(self.t)

    def as_json(self) -> dict:
        return {
            "t": self.shown_t,
            "tids": self.tids.tolist(),
            "utility": [None if u != u else float(u) for u in self.utility.tolist()],
            "cpu": self.cpu.tolist(),
            "domain": self.domain.tolist(),
        }


class History:
    """The last ``capacity`` periods of one target, for ``history`` and its plot.

    Period k of those held is at ``(head + k) % len(self._t)`` of the periods' ring;
    its rows are ``_rows[_at[i]:_at[i] + _n[i]]``, written one period after another
    round the rows' ring, each period's rows in one piece (a period that does not fit
    before the ring's end starts again at 0)."""

    def __init__(self, capacity: int, started: float) -> None:
        self.capacity = capacity
        self.started = started
        self.recorded = 0
        self._t = np.empty(min(capacity, FIRST_PERIODS), dtype=np.float64)
        self._at = np.empty(self._t.size, dtype=np.int64)
        self._n = np.empty(self._t.size, dtype=np.int32)
        self._rows = np.empty(FIRST_ROWS, dtype=ROW)
        self._head = 0
        self._len = 0
        self._end = 0  # where the next period's rows go if they fit there

    @property
    def periods(self) -> int:
        """How many periods the ring holds."""
        return self._len

    @property
    def dropped(self) -> int:
        """How many of the periods recorded the ring no longer holds: a figure of a
        history with any dropped is not of the whole run."""
        return self.recorded - self._len

    @property
    def shown_started(self) -> float:
        """Which history this is, as ``history``'s ``started`` and ``status``'s
        ``history_started`` give it: its start on the daemon's clock."""
        return round(self.started, 6)

    @property
    def newest_shown_t(self) -> float | None:
        """The newest period's ``t`` as shown (None: none yet)."""
        return shown(float(self._t[self._slot(self._len - 1)])) if self._len else None

    def resize(self, capacity: int) -> None:
        """Keep the last ``capacity`` periods from now on (a reload's history_periods),
        the newest of those kept so far among them; a smaller ring gives back what the
        periods dropped held."""
        self.capacity = capacity
        if self._len > capacity:
            self._head, self._len = self._slot(self._len - capacity), capacity
            self._move(capacity, max(FIRST_ROWS, self._rows_held()))

    def record(self, now: float, tids: ArrayLike, utility: ArrayLike, cpu: ArrayLike, domain: ArrayLike) -> None:
        tids = np.asarray(tids)
        n = tids.size
        self.recorded += 1
        if self._len == self.capacity:
            self._head = (self._head + 1) % self._t.size
            self._len -= 1
        elif self._len == self._t.size:
            self._move(min(2 * self._t.size, self.capacity), self._rows.size)
        at = self._place(n)
        rows = self._rows[at:at + n]
        rows["tid"], rows["utility"], rows["cpu"], rows["domain"] = tids, utility, cpu, domain
        i = self._slot(self._len)
        self._t[i], self._at[i], self._n[i] = now - self.started, at, n
        self._len += 1
        self._end = at + n

    def last(self, n: int | None = None) -> list[Sample]:
        """The last ``n`` samples (all when None), oldest first: arrays of their own,
        which the ring's next periods do not change."""
        first = 0 if n is None else max(self._len - n, 0)
        return [self._sample(k) for k in range(first, self._len)]

    def _slot(self, k: int) -> int:
        return (self._head + k) % self._t.size

    def _sample(self, k: int) -> Sample:
        i = self._slot(k)
        rows = self._rows[self._at[i]:self._at[i] + self._n[i]]
        return Sample(float(self._t[i]), rows["tid"].copy(), rows["utility"].copy(), rows["cpu"].copy(),
                      rows["domain"].copy())

    def _place(self, n: int) -> int:
        """Where ``n`` rows go: after the newest period's, or at 0 if they do not fit
        before the ring's end, without touching the rows of a period held; in a larger
        ring, the periods held moved to its start, if neither place is free."""
        if not self._len:
            if n <= self._rows.size:
                return 0
        else:
            oldest = self._at[self._head]
            if oldest <= self._end:  # the rows held are [oldest, _end): free after them, and before them
                if self._end + n <= self._rows.size:
                    return self._end
                if n < oldest:  # strictly: the rows held then wrap round, and end before the oldest's start
                    return 0
            elif self._end + n < oldest:  # they wrap round: free between the newest's end and the oldest's start
                return self._end
        return self._grow_rows(n)

    def _grow_rows(self, n: int) -> int:
        """Room for ``n`` rows after those of the periods held, in a larger ring."""
        used = self._rows_held()
        self._move(self._t.size, max(2 * self._rows.size, 2 * (used + n)))
        return used

    def _order(self) -> NDArray[np.intp]:
        """The periods held, oldest first, as slots of the periods' ring."""
        return (self._head + np.arange(self._len)) % self._t.size

    def _rows_held(self) -> int:
        return int(self._n[self._order()].sum())

    def _move(self, periods: int, rows: int) -> None:
        """The periods held into rings of ``periods`` periods and ``rows`` rows, from
        the start of each. Their rows are in one piece from the oldest's start, or in
        two if they wrapped round: the periods whose rows start before the oldest's
        have theirs from 0."""
        order = self._order()
        at, n = self._at[order], self._n[order]
        first = int(at[0]) if self._len else 0
        before, used = int(n[at >= first].sum()), int(n.sum())
        moved = np.empty(rows, dtype=ROW)
        moved[:before] = self._rows[first:first + before]
        moved[before:used] = self._rows[:used - before]
        t = np.empty(periods, dtype=self._t.dtype)
        t[:self._len] = self._t[order]
        self._at = np.empty(periods, dtype=self._at.dtype)
        self._at[:self._len] = np.cumsum(n) - n
        self._n = np.empty(periods, dtype=self._n.dtype)
        self._n[:self._len] = n
        self._t, self._rows, self._head, self._end = t, moved, 0, used
