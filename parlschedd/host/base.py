"""The seam between the scheduler and the world: what it measures and what it moves.

The engine measures through a :class:`Counters` and moves through an :class:`Actuator`;
the real ones (:class:`~parlschedd.host.perf.CounterSet`,
:class:`~parlschedd.host.affinity.Pinner`) call the kernel. The simulator
(``parlschedd.host.simulated``) puts the real engine, with the real threads it finds in
/proc, on a machine this one is not (more CPUs, NUMA domains of other speeds): its
:class:`~parlschedd.host.simulated.SimCounters` count what the simulator's game gives each
thread where it is placed, and the actuator is the real Pinner in both, given the
simulated machine (:class:`~parlschedd.host.simulated.SimHost`) as its kernel
(:class:`~parlschedd.host.affinity.AffinityKernel`): only the affinity table it
reads and writes is simulated, not what the Pinner does with it. The simulator's own
loop (``parlschedd.sim.simulator``) drives the same
:class:`~parlschedd.learning.scheduler.TwoLevelScheduler` without the engine, and
through this seam the engine makes the same decisions (``tests/host/test_simulated.py``).
Every adapter raises :class:`~parlschedd.host.errors.ThreadGone` for a thread that no
longer exists, which the engine treats as "drop this thread", never as a failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from parlschedd.cpulist import format_cpulist, parse_cpulist
from parlschedd.host.errors import HostError

if TYPE_CHECKING:
    import numpy as np


class CounterSource(StrEnum):
    """Where a thread's progress counter comes from, best first.

    The value is what ``status`` reports as ``counter_source``.
    """

    INSTRUCTIONS = "perf:instructions"  # retired instructions (PMU), the paper's utility
    TASK_CLOCK = "perf:task-clock"  # ns of CPU time, software event, no PMU needed
    SCHEDSTAT = "schedstat"  # ns of CPU time from /proc, no perf_event_open at all


@dataclass(frozen=True)
class Drift:
    """Adopted threads whose mask is no longer the one we set (``Actuator.drifted``)."""

    narrowed: list[int]    # by the kernel, to a cpuset that shrank: placed again inside it
    overridden: list[int]  # by someone else: theirs now


@dataclass(frozen=True)
class RestoreReport:
    """Outcome of putting every adopted thread back on its original mask."""

    restored: tuple[int, ...] = ()
    gone: tuple[int, ...] = ()  # exited, or the tid now names another thread
    failed: tuple[tuple[int, str], ...] = ()  # (tid, reason)
    kept: tuple[int, ...] = ()  # set by someone else since our last pin: left as they set it


@dataclass(slots=True)
class PinRecord:
    """What the Pinner knows of one thread: its identity and both masks. ``current``
    and ``asked`` change in place (a pin is the daemon's hot path), and ``original``
    after an exec (``Pinner.set_original``)."""

    start_time: int  # with the tid, the thread's identity (procfs stat field 22)
    original: frozenset[int]  # the mask found at adoption, restored at the end
    current: frozenset[int]  # the mask the thread has, as we set it or the kernel made it of ours
    # The mask our last sched_setaffinity set (None: none yet, so the first pin writes
    # even a mask the thread already shows). The kernel keeps it (Linux 6.2+:
    # user_cpus_ptr) and gives the thread what its cpuset allows of it, again each time
    # the cpuset changes, so a grown cpuset gives it back (before 6.2: the whole cpuset).
    asked: frozenset[int] | None = None
    # Read from the last run's state file, which saves a thread's masks at adoption and
    # not at each pin: ``current`` may be older than the last run's last pin.
    recovered: bool = False

    @property
    def wanted(self) -> frozenset[int]:
        """The mask last asked for."""
        return self.current if self.asked is None else self.asked

    def to_json(self) -> dict[str, Any]:
        """What a restart needs: the next daemon restores every thread, then adopts it
        afresh (so ``asked`` is not saved: its first pin writes again)."""
        return {
            "start_time": self.start_time,
            "original": format_cpulist(self.original),
            "current": format_cpulist(self.current),
        }

    @classmethod
    def from_json(cls, data: Any) -> PinRecord:
        """The record :meth:`to_json` wrote; ValueError for anything else."""
        if not (isinstance(data, Mapping) and type(data.get("start_time")) is int
                and isinstance(data.get("original"), str) and isinstance(data.get("current"), str)):
            raise ValueError(f"not a thread record: {data!r:.80}")
        original, current = parse_cpulist(data["original"]), parse_cpulist(data["current"])
        if not original or not current:  # no thread runs on no CPU: "" is a damaged record, not a mask to put back
            raise ValueError(f"not a thread record, a mask is empty: {data!r:.80}")
        return cls(data["start_time"], original, current, recovered=True)


class Counters(Protocol):
    """Per-thread cumulative progress counters.

    ``read`` returns a monotone-ish cumulative value (instructions, or ns of CPU time
    for the two time sources) counted from ``open``, or from thread start for
    schedstat; only differences between two reads are meaningful, so the caller divides
    the difference by the monotonic time between them to get a rate.
    """

    source: CounterSource

    def open(self, tid: int) -> None:
        """Start counting ``tid``; ThreadGone if it does not exist."""

    def read(self, tid: int) -> float:
        """The cumulative value for an opened ``tid``."""

    def read_many(self, tids: Sequence[int]) -> tuple[np.ndarray, list[int]]:
        """``read`` for many tids at once (the period's hot path): their values (NaN for
        a failed read) and the tids that no longer exist."""

    def close(self, tid: int) -> None:
        """Stop counting ``tid`` and free what it held; unknown tids are ignored."""

    def close_all(self) -> None:
        """Close every counter (the daemon's exit)."""


class Actuator(Protocol):
    """Places threads on CPUs and can always put them back where they were."""

    def adopt(self, tid: int, start_time: int, original: frozenset[int] | None = None,
              cpuset: frozenset[int] | None = None) -> None:
        """Remember the thread's current mask as its original (once per identity), or
        ``original`` when the caller knows better (a mask inherited from a thread we
        pinned); ``cpuset``: its process's, when the caller has read it."""

    def mask_of(self, tid: int) -> frozenset[int]:
        """The thread's mask as the kernel it acts on reads it (sched_getaffinity, or a
        simulated machine's table): every mask the engine compares with its own pins is
        read here, never from another table. HostError (ThreadGone) when it is gone."""

    def original_of(self, tid: int, mask: frozenset[int], cpuset: frozenset[int] | None) -> frozenset[int]:
        """The mask to restore for a thread found with ``mask`` in ``cpuset``."""

    @property
    def records(self) -> Mapping[int, PinRecord]:
        """The adopted threads: each one's identity, original mask and the mask set last."""

    def pin_many(self, moves: Sequence[tuple[int, frozenset[int]]]) -> list[bool | HostError]:
        """Restrict adopted threads to CPUs, a batch at once: per move True when the mask
        changed, False when it had it already, or the HostError that stopped it."""

    def drifted(self, tids: Iterable[int]) -> Drift:
        """Which of ``tids`` the kernel (a shrunk cpuset) or someone else re-pinned
        since our last pin."""

    def reassign(self, tid: int, original: frozenset[int]) -> None:
        """Keep ``original`` to restore for a tid that names another thread of the same
        identity now (after an exec from a non-main thread); its mask now is ours."""

    def set_original(self, tid: int, original: frozenset[int]) -> None:
        """Restore ``original`` at the end in place of the mask found at adoption."""

    def release(self, tid: int) -> None:
        """Forget a thread someone else re-pinned, leaving its mask as they set it."""

    def restore(self, tid: int) -> bool:
        """Put the original mask back and forget the thread; False if never adopted."""

    def give_back(self, tid: int, start_time: int, original: frozenset[int]) -> None:
        """Put ``original`` on a thread not ours to place that carries a mask we set."""

    def pinned_by_last_run(self, tid: int, mask: frozenset[int]) -> bool:
        """Whether ``mask`` on ``tid`` has the shape of a pin the last run made (a
        recovered actuator's question, before it restores)."""

    def restore_all(self) -> RestoreReport:
        """Restore every adopted thread; never raises for a single thread."""

    def to_json(self) -> dict[str, Any]:
        """The records, as the state file keeps them for a restart to restore."""

    def from_saved(self, data: Any, placements: Iterable[frozenset[int]]) -> Actuator:
        """An actuator on this one's host holding the records a previous run saved
        (``to_json``): what crash recovery restores."""
