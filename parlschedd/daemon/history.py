"""A bounded in-memory history of each target: one sample per period.

The periods are kept in chunks of up to CHUNK_PERIODS each: a chunk's times, where
each period's rows end, and its rows (a thread's tid, utility, CPU and domain: 12
bytes), all written in place as periods come and never changed after, so that the
samples a ``history`` request takes are views that later periods leave as they were
and that share the history's memory. A chunk is made once in CHUNK_PERIODS periods,
for its first period's threads in each. Samples held as objects of their own (four
small numpy arrays a period, kept 600 periods, each a malloc'd block among the
period's short-lived ones) grew the daemon's heap under churn by some 11 KiB a minute
(bench/results/heap_churn-2a14d2c.json; with the chunks, heap_churn.json: flat).
Memory is bounded by the last capacity + CHUNK_PERIODS periods (20 bytes each, and 12
a row, at most twice over; the chunk being filled, up to CHUNK_PERIODS periods of its
first period's threads). Served over the socket (``history``) for ``parlschedctl
plot``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

# a thread's row in a period, in the narrow dtypes that keep the history's memory bound
ROW = np.dtype([("tid", np.int32), ("utility", np.float32), ("cpu", np.int16), ("domain", np.int16)])
CHUNK_PERIODS = 64


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

    def as_json(self) -> dict:
        return {
            "t": shown(self.t),
            "tids": self.tids.tolist(),
            "utility": [None if u != u else float(u) for u in self.utility.tolist()],
            "cpu": self.cpu.tolist(),
            "domain": self.domain.tolist(),
        }


class _Chunk:
    """Up to ``periods`` consecutive periods. Only appended to: what a period wrote is
    not written again (the rows move to a larger array when they outgrow theirs, and
    the old one stays as it was for the views into it)."""

    def __init__(self, periods: int, rows: int) -> None:
        self.t = np.empty(periods, dtype=np.float64)
        self.ends = np.empty(periods, dtype=np.int64)
        self.rows = np.empty(rows, dtype=ROW)
        self.periods = 0
        self.used = 0

    @property
    def full(self) -> bool:
        return self.periods == self.t.size

    def append(self, t: float, threads: int, columns: tuple[ArrayLike, ...]) -> None:
        """One more period, its rows as ROW's columns (checked to be ``threads`` long);
        nothing held changes if they do not fit ROW's dtypes (or memory runs out): what
        is written before the period is counted lies past what is held."""
        end = self.used + threads
        rows = self.rows if end <= self.rows.size else _copy(self.rows, self.used, max(2 * self.rows.size, end))
        written = rows[self.used:end]
        for name, values in zip(ROW.names, columns):
            written[name] = values
        if self.periods + 1 == self.t.size and rows.size > 2 * end:  # full, sized for more threads than it held
            rows = _copy(rows, end, end)
        self.t[self.periods], self.ends[self.periods] = t, end
        self.rows, self.periods, self.used = rows, self.periods + 1, end

    def sample(self, k: int) -> Sample:
        start = self.ends[k - 1] if k else 0
        rows = self.rows[start:self.ends[k]]
        rows.flags.writeable = False  # the history's own memory
        return Sample(float(self.t[k]), rows["tid"], rows["utility"], rows["cpu"], rows["domain"])


class History:
    """The last ``capacity`` periods of one target, for ``history`` and its plot."""

    def __init__(self, capacity: int, started: float) -> None:
        self.capacity = capacity
        self.started = started
        self.recorded = 0
        self._chunks: deque[_Chunk] = deque()
        self._skip = 0  # the oldest chunk's periods no longer held
        self.periods = 0  # how many periods are held

    @property
    def dropped(self) -> int:
        """How many of the periods recorded the history no longer holds: a figure of a
        history with any dropped is not of the whole run."""
        return self.recorded - self.periods

    @property
    def shown_started(self) -> float:
        """Which history this is, as ``history``'s ``started`` and ``status``'s
        ``history_started`` give it: its start on the daemon's clock."""
        return round(self.started, 6)

    @property
    def newest_shown_t(self) -> float | None:
        """The newest period's ``t`` as shown (None: none yet)."""
        if not self.periods:
            return None
        newest = self._chunks[-1]
        return shown(float(newest.t[newest.periods - 1]))

    def resize(self, capacity: int) -> None:
        """Keep the last ``capacity`` periods from now on (a reload's history_periods),
        the newest of those kept so far among them; when fewer, in chunks of their own,
        so that the memory of the periods dropped goes with them."""
        if capacity < self.capacity:
            kept = History(capacity, self.started)
            for sample in self.last(capacity):
                kept._append(sample.t, sample.tids.size, (sample.tids, sample.utility, sample.cpu, sample.domain))
            self._chunks, self._skip, self.periods = kept._chunks, kept._skip, kept.periods
        self.capacity = capacity

    def record(self, now: float, tids: ArrayLike, utility: ArrayLike, cpu: ArrayLike, domain: ArrayLike) -> None:
        """One more period: its threads' ``tids`` and, row for row, their utility, CPU
        and domain. A ValueError when they are not one value a thread each, numpy's
        error when a list's values do not fit ROW's dtypes (an array's are cast, as
        numpy casts), and nothing changed either way."""
        columns = (tids, utility, cpu, domain)
        if np.ndim(tids) != 1:
            raise ValueError(f"history: tids of shape {np.shape(tids)}, not one tid a thread")
        threads = len(tids)  # type: ignore[arg-type]
        for name, values in zip(ROW.names[1:], columns[1:]):
            if np.shape(values) != (threads,):
                raise ValueError(f"history: {name} of shape {np.shape(values)}, not one value for each of {threads} "
                                 "threads")
        self._append(float(now - self.started), threads, columns)
        self.recorded += 1

    def last(self, n: int | None = None) -> list[Sample]:
        """The last ``n`` samples (all when None), oldest first: views that the
        history's next periods leave as they are."""
        want = self.periods if n is None else min(n, self.periods)
        samples: list[Sample] = []
        for chunk in reversed(self._chunks):
            first = chunk.periods - min(want - len(samples), chunk.periods)  # the oldest's skipped are past want
            samples.extend(chunk.sample(k) for k in range(chunk.periods - 1, first - 1, -1))
            if len(samples) == want:
                break
        return samples[::-1]

    def _append(self, t: float, threads: int, columns: tuple[ArrayLike, ...]) -> None:
        if self._chunks and not self._chunks[-1].full:
            self._chunks[-1].append(t, threads, columns)
        else:  # a chunk sized for this period's threads in each of its periods
            periods = min(CHUNK_PERIODS, self.capacity)
            chunk = _Chunk(periods, threads * periods)
            chunk.append(t, threads, columns)
            self._chunks.append(chunk)
        self.periods += 1
        self._drop_past_capacity()

    def _drop_past_capacity(self) -> None:
        while self.periods > self.capacity:
            self._skip += 1
            self.periods -= 1
            if self._skip == self._chunks[0].periods:
                self._chunks.popleft()
                self._skip = 0


def _copy(rows: NDArray, keep: int, size: int) -> NDArray:
    """The first ``keep`` of ``rows`` in a new array of ``size`` rows."""
    copied = np.empty(size, dtype=ROW)
    copied[:keep] = rows[:keep]
    return copied
