"""A target and what is known of its threads: the state the engine keeps per target.

A :class:`Target` is one attached process (with ``descendants``, its descendants too);
:class:`ThreadState` is what is known of one of its threads from adoption on, and the
:class:`Roster` holds the per-period numbers of all of them as arrays aligned on their
tids, so the period works on whole arrays, and does a period's arithmetic on them
(rates from counter readings, the rows a placement moves). What is kept, and that
arithmetic: the engine adopts, reads, pins and drops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from parlschedd.arrays import BoolArray, FloatArray, IntArray
from parlschedd.daemon.exec_watch import ExecWatch, Masks
from parlschedd.daemon.history import History
from parlschedd.host import procfs
from parlschedd.learning.scheduler import TwoLevelScheduler
from parlschedd.patterns import Pattern

DomainCpus = tuple[tuple[int, ...], ...]  # per domain (the engine's indices), some of its CPUs


@dataclass
class ThreadState:
    """What is known of a thread from its adoption on; its per-period numbers live in
    the target's :class:`Roster`."""

    tid: int
    start_time: int
    name: str
    first_value: float  # the counter at adoption
    first_time: float
    process: int = 0  # its process (thread group id): status's "pid", which tells a descendant's threads apart
    refusal_said: bool = False  # a pin the kernel refused was logged at warning level once


@dataclass
class Roster:
    """A target's per-period numbers as arrays aligned on its tids (sorted), so the
    period works on whole arrays instead of one Python object per thread. ``cpu`` is
    -1 where no single CPU is ours to name: a free thread (``pinned``, to its whole
    domain), or one not pinned by us (a refused pin); of an observed target, the CPU
    the thread last ran on, and ``domain`` that CPU's (the kernel's placement, not the
    scheduler's model of one); ``domain`` is -1 before the thread's first period, and
    of an observed thread last seen on a CPU of no domain."""

    tids: IntArray
    last: FloatArray      # counter value at the last read
    since: FloatArray     # monotonic time of that read
    utility: FloatArray   # NaN: not measured
    cpu: IntArray
    domain: IntArray
    pinned: BoolArray

    @classmethod
    def empty(cls) -> Roster:
        return cls.aligned(np.empty(0, dtype=np.int64), None, {})

    @classmethod
    def aligned(cls, tids: IntArray, old: Roster | None, threads: dict[int, ThreadState],
                reborn: set[int] | frozenset[int] = frozenset()) -> Roster:
        """A roster for ``tids``: rows of threads ``old`` knew are carried over, new
        threads start from their adoption reading, as do those ``reborn`` (a tid the
        kernel gave a new thread since: ``old``'s row is the dead one's)."""
        n = tids.size
        roster = cls(tids, np.empty(n), np.empty(n), np.full(n, np.nan), np.full(n, -1, dtype=np.int64),
                     np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=bool))
        known = np.zeros(n, dtype=bool)
        if old is not None and old.tids.size:
            at = np.searchsorted(old.tids, tids).clip(max=old.tids.size - 1)
            known = old.tids[at] == tids
            if reborn:
                known &= ~np.isin(tids, list(reborn))
            rows = at[known]
            for name in ("last", "since", "utility", "cpu", "domain", "pinned"):
                getattr(roster, name)[known] = getattr(old, name)[rows]
        for i in np.flatnonzero(~known).tolist():
            th = threads[int(tids[i])]
            roster.last[i], roster.since[i] = th.first_value, th.first_time
        return roster

    def read(self, values: FloatArray, now: float) -> int:
        """Each row's utility over the period from its counter reading ``values``
        (NaN: not read) at ``now``: the counter's increase over the time since its last
        reading (spec, Level 2 step 1, u~_i(k)). A row not read has a NaN utility (not
        measured) and keeps its last reading, so that its next rate spans both periods.
        A row whose clock did not advance (a thread adopted in this period, read at
        its adoption and again now, both stamped ``now``) has a NaN utility too and
        takes this reading as its last: the period's reads come at about the same
        offset from their stamps, and its adoption's reading came earlier, so a rate
        from it would count the time between the two reads in a period whose stamps
        leave it out (about 1% of a 0.1 s period at 64 busy threads, review).
        Returns how many rows were not read."""
        measured = ~np.isnan(values)
        elapsed = now - self.since
        self.utility = np.divide(values - self.last, elapsed, out=np.full(values.size, np.nan),
                                 where=measured & (elapsed > 0))
        np.copyto(self.last, values, where=measured)
        np.copyto(self.since, now, where=measured)
        return values.size - int(np.count_nonzero(measured))

    def to_move(self, cpus: IntArray, domains: IntArray) -> IntArray:
        """The rows whose placement ``cpus`` and ``domains`` (the scheduler's, -1: a
        free thread, its whole domain) changes: another core, a row not pinned (a new
        thread, a refused pin tried again), or a free thread in another domain."""
        return np.flatnonzero((cpus != self.cpu) | ~self.pinned | ((cpus < 0) & (domains != self.domain)))


@dataclass
class Target:
    """One attached process (with ``descendants``, its tree): its threads, its
    scheduler, and what the engine remembers between periods to adopt, drop and
    place them."""

    pid: int
    name: str
    uid: int
    observe: bool
    thread_filter: Pattern | None
    descendants: bool
    handle: procfs.ProcessHandle
    scheduler: TwoLevelScheduler
    exits: procfs.ThreadExits  # the adopted and the ignored threads, watched for exit
    threads: dict[int, ThreadState] = field(default_factory=dict)
    roster: Roster = field(default_factory=Roster.empty)
    stale: bool = False  # threads joined or left since the roster was aligned
    reborn: set[int] = field(default_factory=set)  # tids given to new threads since: rows not carried over
    ignored: set[int] = field(default_factory=set)  # tids the thread filter left out, someone else re-pinned, or zombies
    migrations: int = 0  # affinity changes made
    most_threads: int = 0  # the most threads managed at once: what an exit is described by
    adopted: int = 0  # threads managed (observed) since attach, each adoption once: status's threads_adopted
    base_mask: frozenset[int] | None = None  # the main thread's mask at attach
    base_original: frozenset[int] | None = None  # what a thread given base_mask back gets (Pinner.original_of)
    # what the process's cpuset allows, as last read (attach, every rescan_s; None:
    # every CPU, or unread): its own threads' adoptions take it (pinner.adopt)
    cpuset: frozenset[int] | None = None
    cpus: DomainCpus = ()  # each domain's CPUs its cpuset allows, as last read: its scheduler's domains
    rule: int | None = None  # index of the config rule that matched, None if attached by hand
    caller: int | None = None  # the non-root uid that attached it: only its own descendants are managed
    history: History | None = None
    named_at: float = float("-inf")  # when thread names were last re-read
    renamed_last: int = 0  # the last tid of the last round of name re-reads (they go in tid order)
    refiltered_last: int = 0  # the same, for the names of the threads the filter left out
    observed_last: int = 0  # the same, for the CPUs the threads of an observed target last ran on
    # per process of the target (its own, and with descendants theirs), by its main tid:
    others: dict[int, set[int]] = field(default_factory=dict)  # its other known threads at the last listing
    ignored_masks: dict[int, frozenset[int]] = field(default_factory=dict)  # an ignored main tid's mask then
    exec_watches: dict[int, ExecWatch] = field(default_factory=dict)  # while one is set, that thread is not moved
    went: dict[int, Masks | None] = field(default_factory=dict)  # dropped since the listing: masks, if adopted
    # with descendants: procfs.birth_mark read before the last listing, when that
    # listing saw only threads this target watches (else None: list every period)
    births_at: tuple[int, int] | None = None
    listed_at: float = float("-inf")  # when it was last listed (Engine._refresh)
    # the last moment (boot clock ticks, procfs.start_time_now) before which every thread
    # born is known, adopted or not: checked then by a listing or a count. In the state
    # file: after a crash, an unrecorded thread born since came of a thread it pinned
    known_before: int | None = None
    # masks of ours that our pins replaced since that listing: a thread born before such
    # a move inherited the mask its creator had then (Engine._ours)
    moved_from: set[frozenset[int]] = field(default_factory=set)
    # what the log was told, so that a failure repeated every period is told once: the
    # listed threads not adopted, by tid, and why; the last period's failure, if any
    unadopted: dict[int, str] = field(default_factory=dict)
    failing: str | None = None

    @property
    def mode(self) -> str:
        return "observe" if self.observe else "pin"

    def processes(self) -> set[int]:
        """Its process and those of its threads (with descendants, its tree's that have
        threads it manages)."""
        return {self.pid, *(th.process for th in self.threads.values() if th.process)}

    def current(self) -> Roster:
        """The roster, realigned first if threads joined or left."""
        if self.stale:
            tids = np.fromiter(sorted(self.threads), dtype=np.int64, count=len(self.threads))
            self.roster = Roster.aligned(tids, self.roster, self.threads, self.reborn)
            self.stale = False
            self.reborn.clear()
        return self.roster
