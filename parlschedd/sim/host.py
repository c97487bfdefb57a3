"""A simulated host behind the engine's seam: real threads on a NUMA machine this one is not.

The engine measures through a :class:`~parlschedd.host.base.Counters` and moves threads
through an :class:`~parlschedd.host.base.Actuator` (``host/base.py``). Here both act on
a :class:`SimHost`: a :class:`~parlschedd.sim.game.Machine` (cores, their speeds, their
domains) with a kernel's affinity table over its CPUs, so the real
:class:`~parlschedd.daemon.engine.Engine` can drive the real threads of a real process
(found through /proc, as always) on, say, two domains of four cores, which this host
(one NUMA node) cannot give.

- :class:`SimActuator` keeps the masks the engine asks for in the host's table (a
  thread cannot be set on a CPU this host lacks), with the kernel's rules: a mask is
  narrowed to the thread's cpuset, and one with no CPU of it is refused (InvalidMask).
  Thread identity (exited, or a tid that names another thread) is checked in /proc.
- :class:`SimCounters` gives each thread a cumulative count that grows at the rate the
  simulator's game (``game.utilities``) gives it where its mask puts it now: a mask of
  one CPU runs there, a wider one where the kernel would put it (``place_free``, each
  thread on the least loaded core its mask holds). Time is ``clock``: the one whose
  readings the test passes to ``Engine.tick``, so that the engine's rates (counter
  difference / time difference) are exactly the game's.

What is simulated is only what this host lacks: CPUs, their speeds and a PMU. The
kernel's affinity table is simulated with them because its CPUs are those CPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from parlschedd.cpulist import format_cpulist
from parlschedd.host import procfs
from parlschedd.host.affinity import Pinner
from parlschedd.host.base import CounterSource, Drift, PinRecord, RestoreReport
from parlschedd.host.errors import HostError, InvalidMask, Overridden, ThreadGone
from parlschedd.learning.scheduler import FREE
from parlschedd.sim.game import Machine, Threads, utilities
from parlschedd.sim.simulator import place_free


class Clock:
    """Monotonic time the test moves: pass ``now`` to ``Engine.tick``."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


class SimHost:
    """The simulated machine: its CPUs, each thread's mask on them, and the work each
    counted thread has done.

    ``cpuset``: the CPUs every thread may use (None: all of the machine's);
    ``weight``: each thread's demand in the game (``Threads.weights``), 1 unless given
    (every thread's memory is in domain 0, the game's default home: a machine with a
    remote-access penalty charges it elsewhere);
    ``background``: per-core load nobody places (``Background.at``); ``scale``: counts
    per unit of work (a speed-1 core alone does 1e9 "instructions" a second).
    """

    def __init__(self, machine: Machine, clock: Callable[[], float], *, cpuset: frozenset[int] | None = None,
                 weight: Mapping[int, float] | None = None, background: np.ndarray | None = None,
                 scale: float = 1e9, proc_root: str = procfs.PROC_ROOT) -> None:
        self.machine = machine
        self.clock = clock
        self.every = frozenset(range(machine.n_cores))
        if cpuset is not None and not (cpuset and cpuset <= self.every):
            raise ValueError(f"cpuset {format_cpulist(cpuset)!r} is not a non-empty set of the machine's CPUs "
                             f"{format_cpulist(self.every)}")
        self.cpuset = cpuset
        self.weight = dict(weight or {})
        self.background = np.zeros(machine.n_cores) if background is None else np.asarray(background, dtype=np.float64)
        self.scale = scale
        self.proc_root = proc_root
        self.asked: dict[int, frozenset[int]] = {}  # sched_setaffinity's requests (Linux 6.2+ keeps them)
        self.set_log: list[tuple[int, frozenset[int], frozenset[int]]] = []  # (tid, asked, got) of every set
        self.work: dict[int, float] = {}  # counted threads: cumulative count
        self._at = clock()

    # -- the kernel's affinity table ------------------------------------------------

    def allowed(self, tid: int) -> frozenset[int] | None:
        """The CPUs ``tid``'s cpuset allows (None: every CPU), as ``cgroups.task_cpus``."""
        return self.cpuset

    def get_affinity(self, tid: int) -> frozenset[int]:
        """sched_getaffinity: what the thread asked for that its cpuset allows (never
        asked: all CPUs), or the whole cpuset when it allows none of it."""
        allowed = self.cpuset or self.every
        return self.asked.get(tid, self.every) & allowed or allowed

    def set_affinity(self, tid: int, cpus: frozenset[int]) -> None:
        """sched_setaffinity: InvalidMask (EINVAL) when the cpuset allows none of ``cpus``."""
        if not cpus & (self.cpuset or self.every):
            raise InvalidMask(f"CPUs {format_cpulist(cpus)} outside the allowed set of tid {tid}", tid=tid)
        self.accrue()  # the work done on the old mask up to now
        self.asked[tid] = frozenset(cpus)
        self.set_log.append((tid, frozenset(cpus), self.get_affinity(tid)))

    # -- work -----------------------------------------------------------------------

    def rates(self, tids: Sequence[int]) -> np.ndarray:
        """Counts per second of each of ``tids`` (counted threads) on its mask now: the
        game's utility of the placement, a thread of a wider mask where the kernel
        would put it (``place_free``)."""
        if not tids:
            return np.empty(0)
        masks = [self.get_affinity(t) for t in tids]
        allowed = np.zeros((len(tids), self.machine.n_cores), dtype=bool)
        for i, mask in enumerate(masks):
            allowed[i, sorted(mask)] = True
        cpus = np.array([min(m) if len(m) == 1 else FREE for m in masks], dtype=np.int64)
        threads = Threads(np.array([self.weight.get(t, 1.0) for t in tids]))
        placed = place_free(self.machine, threads, cpus, np.zeros(len(tids), dtype=np.int64), self.background, allowed)
        return self.scale * utilities(self.machine, threads, placed, self.background)

    def accrue(self) -> None:
        """Add to each counted thread the work its placement did since the last time."""
        now = self.clock()
        if now > self._at and self.work:
            tids = list(self.work)
            for tid, rate in zip(tids, self.rates(tids).tolist()):
                self.work[tid] += rate * (now - self._at)
        self._at = max(self._at, now)

    def exists(self, tid: int) -> bool:
        try:
            procfs.thread_start_time(tid, self.proc_root)
        except ThreadGone:
            return False
        return True


class SimCounters:
    """The simulated PMU: a :class:`~parlschedd.host.base.Counters` whose count for a
    thread is the work the game gives it on the host, from ``open``."""

    source = CounterSource.INSTRUCTIONS

    def __init__(self, host: SimHost) -> None:
        self.host = host

    def open(self, tid: int) -> None:
        if tid in self.host.work:
            return
        if not self.host.exists(tid):
            raise ThreadGone(f"tid {tid} does not exist", tid=tid)
        self.host.accrue()  # the threads counted so far did their work alone until now
        self.host.work[tid] = 0.0

    def read(self, tid: int) -> float:
        self.host.accrue()
        return self.host.work[tid]

    def read_many(self, tids: Sequence[int]) -> tuple[np.ndarray, list[int]]:
        """As schedstat: an exited thread is listed gone and closed."""
        self.host.accrue()
        values = np.full(len(tids), np.nan)
        gone = []
        for i, tid in enumerate(tids):
            if not self.host.exists(tid):
                gone.append(tid)
                self.close(tid)
            elif tid in self.host.work:
                values[i] = self.host.work[tid]
        return values, gone

    def close(self, tid: int) -> None:
        if tid in self.host.work:
            self.host.accrue()  # the others shared the cores with it until now
            del self.host.work[tid]

    def close_all(self) -> None:
        self.host.accrue()
        self.host.work.clear()


class SimActuator:
    """The :class:`~parlschedd.host.base.Actuator` on a :class:`SimHost`: the real
    :class:`~parlschedd.host.affinity.Pinner`'s save-set-restore, with the masks in the
    host's table. Masks changed outside the actuator (``SimHost.set_affinity`` by the
    test: someone's taskset) are told from the kernel's narrowing to a cpuset as the
    Pinner tells them; no CPU is ever offline here, so hotplug plays no part.
    ``placements``: as the Pinner's, the masks a daemon pins to (None: any)."""

    def __init__(self, host: SimHost, *, records: Mapping[int, PinRecord] | None = None,
                 placements: Iterable[frozenset[int]] | None = None) -> None:
        self.host = host
        self._records: dict[int, PinRecord] = dict(records or {})
        self._placements = None if placements is None else frozenset(placements)

    @property
    def records(self) -> Mapping[int, PinRecord]:
        return MappingProxyType(self._records)

    def adopt(self, tid: int, start_time: int, original: frozenset[int] | None = None,
              cpuset: frozenset[int] | None = None) -> None:
        known = self._records.get(tid)
        if known is not None and known.start_time == start_time:
            return
        mask = self.host.get_affinity(tid)
        self._check_identity(tid, start_time)
        self._records[tid] = PinRecord(start_time, self.original_of(tid, mask, cpuset) if original is None else original,
                                       mask)

    def original_of(self, tid: int, mask: frozenset[int], cpuset: frozenset[int] | None) -> frozenset[int]:
        """As the Pinner's: a mask that is the thread's whole cpuset is restored as
        every CPU (the thread follows its cpuset), any other as it was found."""
        if mask >= self.host.every:
            return mask
        if mask != cpuset:
            cpuset = self.host.allowed(tid)
        return self.host.every if cpuset is not None and mask == cpuset else mask

    def pin_many(self, moves: Sequence[tuple[int, frozenset[int]]]) -> list[bool | HostError]:
        outcomes: list[bool | HostError] = []
        for tid, cpus in moves:
            record = self._records[tid]
            if record.asked == cpus and record.current <= cpus:
                outcomes.append(False)
                continue
            try:
                self._check_identity(tid, record.start_time)
                mask = self.host.get_affinity(tid)
                if mask != record.current:
                    if self._by_kernel(tid, record, mask) is None:
                        raise Overridden(f"tid {tid} was set to CPUs {format_cpulist(mask)} by someone else", tid=tid)
                    record.current = mask
                self.host.set_affinity(tid, cpus)
            except ThreadGone as exc:
                self._records.pop(tid, None)
                outcomes.append(exc)
            except HostError as exc:
                outcomes.append(exc)
            else:
                record.current = record.asked = cpus
                outcomes.append(True)
        return outcomes

    def drifted(self, tids: Iterable[int]) -> Drift:
        drift = Drift([], [])
        for tid in tids:
            record = self._records[tid]
            mask = self.host.get_affinity(tid)
            if mask == record.current:
                continue
            kept = self._by_kernel(tid, record, mask)
            if kept is None:
                drift.overridden.append(tid)
                continue
            record.current = mask
            if not kept:
                drift.narrowed.append(tid)
        return drift

    def _by_kernel(self, tid: int, record: PinRecord, mask: frozenset[int]) -> bool | None:
        """As the Pinner's (a kernel that keeps the mask asked for, Linux 6.2+): True
        when ``mask`` is what the cpuset allows of the mask we asked for, False when it
        is the whole cpuset because it allows none of it, None when someone else set it."""
        if mask == record.wanted:
            return True
        allowed = self.host.allowed(tid)
        if allowed is None:
            return None
        kept = record.wanted & allowed
        if kept and mask == kept:
            return True
        if mask == allowed and not kept:
            return False
        return None

    def reassign(self, tid: int, original: frozenset[int]) -> None:
        record = self._records[tid]
        if not self.host.exists(tid):
            self._records.pop(tid, None)
            raise ThreadGone(f"tid {tid} has exited", tid=tid)
        self._records[tid] = PinRecord(record.start_time, original, self.host.get_affinity(tid))

    def release(self, tid: int) -> None:
        self._records.pop(tid, None)

    def restore(self, tid: int) -> bool:
        """As the Pinner's: the original back, or with the cpuset beside it when the
        cpuset allows none of it; Overridden (nothing written) for a mask someone else set."""
        record = self._records.pop(tid, None)
        if record is None:
            return False
        self._check_identity(tid, record.start_time)
        mask = self.host.get_affinity(tid)
        ours = mask in (record.current, record.original) or (
            self.pinned_by_last_run(tid, mask) if record.recovered else self._by_kernel(tid, record, mask) is not None)
        if not ours:
            raise Overridden(f"tid {tid} was set to CPUs {format_cpulist(mask)} by someone else", tid=tid)
        try:
            self.host.set_affinity(tid, record.original)
        except InvalidMask:
            self.host.set_affinity(tid, record.original | (self.host.allowed(tid) or self.host.every))
        return True

    def pinned_by_last_run(self, tid: int, mask: frozenset[int]) -> bool:
        if self._placements is None or mask in self._placements:
            return True
        allowed = self.host.allowed(tid)
        return allowed is not None and any(mask == p & allowed for p in self._placements)

    def restore_all(self) -> RestoreReport:
        restored: list[int] = []
        gone: list[int] = []
        kept: list[int] = []
        failed: list[tuple[int, str]] = []
        for tid in sorted(self._records):
            try:
                self.restore(tid)
            except ThreadGone:
                gone.append(tid)
            except Overridden:
                kept.append(tid)
            except HostError as exc:
                failed.append((tid, str(exc)))
            else:
                restored.append(tid)
        return RestoreReport(tuple(restored), tuple(gone), tuple(failed), tuple(kept))

    def to_json(self) -> dict[str, Any]:
        """The Pinner's state format."""
        return Pinner(records=self._records).to_json()

    def from_saved(self, data: Any, placements: Iterable[frozenset[int]]) -> SimActuator:
        """On the same host, the records a previous run saved, read as the Pinner reads them."""
        return SimActuator(self.host, records=Pinner.from_json(data).records, placements=placements)

    def _check_identity(self, tid: int, start_time: int) -> None:
        """ThreadGone unless ``tid`` is the thread started at ``start_time`` (in /proc)."""
        try:
            same = procfs.thread_start_time(tid, self.host.proc_root) == start_time
        except ThreadGone:
            same = False
        if not same:
            self._records.pop(tid, None)
            raise ThreadGone(f"tid {tid} has exited or names another thread", tid=tid)
