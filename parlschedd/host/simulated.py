"""A simulated host behind the engine's seam (the simulated adapters beside the real ones in
host/): real threads on a NUMA machine this one is not.

The engine measures through a :class:`~parlschedd.host.base.Counters` and moves threads
through an :class:`~parlschedd.host.base.Actuator` (``host/base.py``). Here both act on
a :class:`SimHost`: a :class:`~parlschedd.sim.game.Machine` (cores, their speeds, their
domains) with a kernel's affinity table over its CPUs, so the real
:class:`~parlschedd.daemon.engine.Engine` can drive the real threads of a real process
(found through /proc, as always) on, say, two domains of four cores, which this host
(one NUMA node) cannot give.

- The actuator is the real :class:`~parlschedd.host.affinity.Pinner`, the daemon's own
  (:meth:`SimHost.pinner`): only its kernel is simulated. :class:`SimHost` is an
  :class:`~parlschedd.host.affinity.AffinityKernel` whose table keeps the masks the
  Pinner asks for (a thread cannot be set on a CPU this host lacks), with the kernel's
  rules: a mask is narrowed to the thread's cpuset, and one with no CPU of it is
  refused (InvalidMask). A change of the cpuset (:meth:`SimHost.set_cpuset`) gives
  each thread what the new cpuset allows of the mask it asked for (Linux 6.2+), or,
  on a kernel that does not keep the asked mask (``keeps_asked_mask=False``: before
  6.2), the whole new cpuset. Every CPU of the machine is online, so hotplug plays
  no part. Thread identity (exited, or a tid that names another thread) is the real
  one, checked by the Pinner on the real threads (/proc, pidfds) as on any host.
- :class:`SimCounters` gives each thread a cumulative count that grows at the rate the
  simulator's game (``game.utilities``) gives it where its mask puts it now: a mask of
  one CPU runs there, a wider one where the kernel would put it (``place_free``, each
  thread on the least loaded core its mask holds). Time is ``clock``: the one whose
  readings the test passes to ``Engine.tick``, so that the engine's rates (counter
  difference / time difference) are exactly the game's.

What is simulated is only what this host lacks: CPUs, their speeds and a PMU. The
kernel's affinity table is simulated with them because its CPUs are those CPUs;
what the daemon does with that table (save, pin, tell drift, restore) is not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from parlschedd.cpulist import format_cpulist
from parlschedd.host import procfs
from parlschedd.host.affinity import Pinner
from parlschedd.host.base import CounterSource
from parlschedd.host.errors import InvalidMask, ThreadGone
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
    """The simulated machine: its CPUs, each thread's mask on them (the
    :class:`~parlschedd.host.affinity.AffinityKernel` of the :meth:`pinner`), and the
    work each counted thread has done.

    ``cpuset``: the CPUs every thread may use (None: all of the machine's; changed by
    :meth:`set_cpuset`); ``keeps_asked_mask``: whether a cpuset change keeps the mask
    each thread asked for (Linux 6.2+, the default) or gives it the whole cpuset (before);
    ``weight``: each thread's demand in the game (``Threads.weights``), 1 unless given
    (every thread's memory is in domain 0, the game's default home: a machine with a
    remote-access penalty charges it elsewhere);
    ``background``: per-core load nobody places (``Background.at``); ``scale``: counts
    per unit of work (a speed-1 core alone does 1e9 "instructions" a second).
    """

    def __init__(self, machine: Machine, clock: Callable[[], float], *, cpuset: frozenset[int] | None = None,
                 weight: Mapping[int, float] | None = None, background: np.ndarray | None = None,
                 scale: float = 1e9, proc_root: str = procfs.PROC_ROOT, keeps_asked_mask: bool = True) -> None:
        self.machine = machine
        self.clock = clock
        self.every = frozenset(range(machine.n_cores))
        self._check_cpuset(cpuset)
        self.cpuset = cpuset
        self.weight = dict(weight or {})
        self.background = np.zeros(machine.n_cores) if background is None else np.asarray(background, dtype=np.float64)
        self.scale = scale
        self.proc_root = proc_root
        self.keeps_asked_mask = keeps_asked_mask
        # each thread's mask as asked (Linux 6.2+ keeps sched_setaffinity's request), or as
        # the kernel set it (before: the request narrowed to the cpuset, the whole cpuset
        # at a change of it); a thread never set: every CPU
        self.asked: dict[int, frozenset[int]] = {}
        self.set_log: list[tuple[int, frozenset[int], frozenset[int]]] = []  # (tid, asked, got) of every set
        self.work: dict[int, float] = {}  # counted threads: cumulative count
        self._at = clock()

    def pinner(self) -> Pinner:
        """The daemon's Pinner on this machine's affinity table (threads' identities in
        ``proc_root``, as ever)."""
        return Pinner(kernel=self, allowed=self.allowed, proc_root=self.proc_root)

    # -- the kernel's affinity table ------------------------------------------------

    def allowed(self, tid: int) -> frozenset[int] | None:
        """The CPUs ``tid``'s cpuset allows (None: every CPU), as ``cgroups.task_cpus``."""
        return self.cpuset

    def set_cpuset(self, cpuset: frozenset[int] | None) -> None:
        """Change every thread's cpuset (None: all of the machine's CPUs), as a write of
        cpuset.cpus does: each thread then has what the new cpuset allows of the mask
        it asked for, or the whole cpuset when it allows none of it; before Linux 6.2
        (``keeps_asked_mask`` False) the whole cpuset, whatever it asked."""
        self._check_cpuset(cpuset)
        self.accrue()  # the work done on the old masks up to now
        self.cpuset = cpuset
        if not self.keeps_asked_mask:
            whole = cpuset or self.every
            self.asked = dict.fromkeys(self.asked, whole)

    def _check_cpuset(self, cpuset: frozenset[int] | None) -> None:
        if cpuset is not None and not (cpuset and cpuset <= self.every):
            raise ValueError(f"cpuset {format_cpulist(cpuset)!r} is not a non-empty set of the machine's CPUs "
                             f"{format_cpulist(self.every)}")

    def get_affinity(self, tid: int) -> frozenset[int]:
        """sched_getaffinity: what the thread asked for that its cpuset allows (never
        asked: all CPUs), or the whole cpuset when it allows none of it."""
        allowed = self.cpuset or self.every
        return self.asked.get(tid, self.every) & allowed or allowed

    def set_affinity(self, tid: int, cpus: frozenset[int]) -> None:
        """sched_setaffinity: InvalidMask (EINVAL) when the cpuset allows none of ``cpus``.
        Before Linux 6.2 only the part the cpuset allows is kept."""
        allowed = self.cpuset or self.every
        if not cpus & allowed:
            raise InvalidMask(f"CPUs {format_cpulist(cpus)} outside the allowed set of tid {tid}", tid=tid)
        self.accrue()  # the work done on the old mask up to now
        self.asked[tid] = frozenset(cpus) if self.keeps_asked_mask else frozenset(cpus) & allowed
        self.set_log.append((tid, frozenset(cpus), self.get_affinity(tid)))

    def thread_cpus_allowed(self, tid: int) -> frozenset[int]:
        """The mask as set: the one sched_getaffinity reads, every CPU being online."""
        return self.get_affinity(tid)

    def online_cpus(self) -> frozenset[int]:
        return self.every

    def possible_cpus(self) -> frozenset[int]:
        return self.every

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
