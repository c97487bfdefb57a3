"""Thread affinity: the sched_{get,set}affinity syscalls and a save-set-restore Pinner.

The Pinner reaches the kernel's affinity table only through an :class:`AffinityKernel`:
this host's (:class:`LinuxAffinity`, the functions below) in the daemon, a simulated
machine's in ``parlschedd.host.simulated``; the Pinner itself is the same in both.

On Linux ``os.sched_setaffinity(tid, ...)`` acts on the single thread ``tid``
(sched_setaffinity(2) takes a thread id), so each thread of a target is placed on its
own. The kernel intersects a new mask with the thread's cpuset and fails with EINVAL
when nothing is left, which is reported as InvalidMask.
"""

from __future__ import annotations

import errno
import functools
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

import structlog

from parlschedd.host import cgroups, procfs
from parlschedd.host.base import Drift, PinRecord, RestoreReport
from parlschedd.cpulist import format_cpulist, parse_cpulist
from parlschedd.host.errors import HostError, InvalidMask, Overridden, ThreadGone, as_host_error, translated
from parlschedd.topology import online_cpus

log = structlog.get_logger(__name__)

STATE_VERSION = 1

T = TypeVar("T")


def keeps_asked_mask(release: str) -> bool:
    """Whether a kernel of ``release`` (uname -r) keeps the mask a thread asked for
    when its cpuset changes, giving it what the cpuset allows of that mask (Linux 6.2,
    commit 8f9ea86fdf99 "sched: Always preserve the user requested cpumask"). Before,
    any update of a cpuset gives each of its tasks the whole cpuset. A release that
    does not start with MAJOR.MINOR is taken for a modern kernel."""
    match = re.match(r"(\d+)\.(\d+)", release)
    return match is None or (int(match[1]), int(match[2])) >= (6, 2)


@functools.cache
def running_kernel_keeps_asked_mask() -> bool:
    """:func:`keeps_asked_mask` of the running kernel (read once)."""
    return keeps_asked_mask(os.uname().release)


@functools.cache
def possible_cpus(sysfs: str = "/sys") -> frozenset[int]:
    """Every CPU this kernel may ever bring online (the largest mask a thread can ask
    for); the CPUs counted by os.cpu_count where sysfs does not say."""
    try:
        return parse_cpulist(Path(sysfs, "devices/system/cpu/possible").read_text())
    except (OSError, ValueError):
        return frozenset(range(os.cpu_count() or 1))


def get_affinity(tid: int) -> frozenset[int]:
    """The CPUs thread ``tid`` may run on: its mask as sched_getaffinity(2) gives it,
    the mask's CPUs that are online. A mask of offline CPUs alone (its CPU was
    unplugged, and the thread has not run since: the kernel moves it at its next
    wake-up) reads empty there; it is read whole from /proc instead, since no one can
    set an empty mask and an empty read would pass for a mask someone else set."""
    with translated("sched_getaffinity", tid=tid):
        mask = frozenset(os.sched_getaffinity(tid))
    return mask or procfs.thread_cpus_allowed(tid)


_SETAFFINITY_ERRORS = {errno.EINVAL: InvalidMask}


def set_affinity(tid: int, cpus: Iterable[int]) -> None:
    """Restrict thread ``tid`` to ``cpus`` (the daemon's hot path: a plain ``except``)."""
    try:
        os.sched_setaffinity(tid, cpus)
    except OSError as exc:
        raise as_host_error(exc, "sched_setaffinity", tid=tid, overrides=_SETAFFINITY_ERRORS) from exc


def _due(record: PinRecord, cpus: frozenset[int]) -> bool:
    """Whether pinning to ``cpus`` needs a write: not when we last asked for it and
    the thread has it, or the part its cpuset allows."""
    return record.asked != cpus or not record.current <= cpus


def _theirs(tid: int, mask: frozenset[int]) -> Overridden:
    return Overridden(f"tid {tid} was set to CPUs {format_cpulist(mask)} by someone else", tid=tid)


AllowedCpus = Callable[[int], "frozenset[int] | None"]


class AffinityKernel(Protocol):
    """What the :class:`Pinner` asks of the kernel about threads' masks: the whole of
    its side of the affinity table. :class:`LinuxAffinity` is this host's kernel; a
    simulated machine (:class:`~parlschedd.host.simulated.SimHost`) is another, whose CPUs
    this host lacks. Whether a thread is still the one adopted is not asked here: it is
    always proven on the real thread (/proc, pidfds)."""

    @property
    def keeps_asked_mask(self) -> bool:
        """Whether a cpuset change keeps the mask a thread asked for, giving it what the
        new cpuset allows of it (Linux 6.2+), rather than the whole cpuset (before):
        :func:`keeps_asked_mask`. Read by :meth:`Pinner._by_kernel` to tell the
        kernel's masks from someone else's."""

    def get_affinity(self, tid: int) -> frozenset[int]:
        """The thread's mask as sched_getaffinity gives it (:func:`get_affinity`)."""

    def set_affinity(self, tid: int, cpus: frozenset[int]) -> None:
        """sched_setaffinity (:func:`set_affinity`): InvalidMask when the thread's
        cpuset allows none of ``cpus``."""

    def thread_cpus_allowed(self, tid: int) -> frozenset[int]:
        """The thread's mask as set, offline CPUs included (/proc's Cpus_allowed_list)."""

    def online_cpus(self) -> frozenset[int]:
        """The CPUs online now."""

    def possible_cpus(self) -> frozenset[int]:
        """Every CPU the kernel may ever bring online (:func:`possible_cpus`)."""


@dataclass(frozen=True, slots=True)
class LinuxAffinity:
    """The :class:`AffinityKernel` of this host: the syscalls, /proc under
    ``proc_root`` and sysfs under ``sysfs``. The pin's and the drift read's calls
    (``get_affinity``, ``set_affinity``) are the module's functions themselves, not
    wrappers: the daemon's period pays no extra call for the seam.
    ``keeps_asked_mask``: the running kernel's (its release, read once), unless given."""

    sysfs: str = "/sys"
    proc_root: str = procfs.PROC_ROOT
    keeps_asked_mask: bool = field(default_factory=running_kernel_keeps_asked_mask)

    get_affinity = staticmethod(get_affinity)
    set_affinity = staticmethod(set_affinity)

    def thread_cpus_allowed(self, tid: int) -> frozenset[int]:
        return procfs.thread_cpus_allowed(tid, self.proc_root)

    def online_cpus(self) -> frozenset[int]:
        return online_cpus(self.sysfs)

    def possible_cpus(self) -> frozenset[int]:
        return possible_cpus(self.sysfs)


def _bare(exc: HostError) -> HostError:
    """``exc`` without its traceback and the exceptions it was raised from or during:
    each of their tracebacks holds the frames they passed, pin_many's among them with
    the outcomes that keep ``exc``, a cycle per failed move for the collector (a soak
    run counted hundreds waiting). Only its message is used."""
    exc.__cause__ = exc.__context__ = None
    return exc.with_traceback(None)


class Pinner:
    """The real :class:`~parlschedd.host.base.Actuator`.

    ``adopt`` saves a thread's mask once, ``pin_many`` changes each only when the target mask
    differs from the last one set, ``restore`` puts the original back exactly. Before
    every write the thread's start time is compared with the adopted one, so a tid
    reused by another thread (after exit, or across a daemon restart) is never touched.
    A vanished thread raises ThreadGone after its record is dropped and a debug line is
    logged; it is an expected event, not an error.

    ``kernel``: the affinity table it reads and writes (:class:`AffinityKernel`; by
    default this host's, a :class:`LinuxAffinity` on ``sysfs`` and ``proc_root``:
    ``sysfs`` is only the default's). Thread identities are read in ``proc_root``
    whatever the kernel. ``allowed(tid)`` gives the CPUs the thread may use (default:
    its cpuset; None when unrestricted); ``records`` seeds the state, as
    :meth:`from_json` does after a restart; ``placements``: the masks a daemon pins
    threads to (each CPU alone, each domain whole), by which a record of the last run
    tells its pins from someone else's masks (:meth:`_ours_to_restore`; None: any mask
    counts as its pin). Not thread-safe; the daemon loop owns it.
    """

    def __init__(
        self,
        *,
        allowed: AllowedCpus = cgroups.task_cpus,
        proc_root: str = procfs.PROC_ROOT,
        sysfs: str | None = None,
        kernel: AffinityKernel | None = None,
        records: Mapping[int, PinRecord] | None = None,
        placements: Iterable[frozenset[int]] | None = None,
    ) -> None:
        if kernel is None:
            kernel = LinuxAffinity("/sys" if sysfs is None else sysfs, proc_root)
        elif sysfs is not None:
            raise TypeError("sysfs is the default kernel's: pass it to the kernel given")
        self._kernel = kernel
        self._allowed = allowed
        self._proc_root = proc_root
        self._records: dict[int, PinRecord] = dict(records or {})
        self._placements = None if placements is None else frozenset(placements)
        self._handles: dict[int, procfs.ThreadHandle] = {}  # identity proofs, not state

    @property
    def records(self) -> Mapping[int, PinRecord]:
        """Read-only view of the adopted threads."""
        return MappingProxyType(self._records)

    def adopt(self, tid: int, start_time: int, original: frozenset[int] | None = None,
              cpuset: frozenset[int] | None = None) -> None:
        """Save the thread's current mask as its original (:meth:`original_of`), once per
        (tid, start_time); ``cpuset``: the CPUs its cpuset allows, when the caller has
        read them (else they are read here if they matter).

        The mask is read before the identity check, so a thread replaced in between is
        caught rather than recorded under the wrong identity. ``original`` overrides the
        mask to restore: a thread created by a pinned thread inherits a mask that is
        ours, not its owner's.
        """
        known = self._records.get(tid)
        if known is not None and known.start_time == start_time:
            return
        mask = self._kernel.get_affinity(tid)
        self._close_handle(tid)
        self._check_identity(tid, start_time)
        self._records[tid] = PinRecord(start_time, self.original_of(tid, mask, cpuset) if original is None else original,
                                       mask)

    def mask_of(self, tid: int) -> frozenset[int]:
        """The thread's mask as this Pinner's kernel reads it."""
        return self._kernel.get_affinity(tid)

    def original_of(self, tid: int, mask: frozenset[int], cpuset: frozenset[int] | None) -> frozenset[int]:
        """The original to restore for thread ``tid``, found with ``mask`` (as
        :func:`get_affinity` read it) in ``cpuset``: its process's, as the caller last
        read it (the engine, once a rescan; None: unrestricted or unread). Any mask
        narrower than every CPU and other than ``cpuset`` has the thread's own cpuset
        read here (the caller's may be older than a change, or another process's).

        A mask that is the whole of the thread's cpuset is most likely no one's
        request: the thread follows its cpuset. Restoring that snapshot would be a
        request (the kernel keeps one, Linux 6.2+), so a cpuset that grows later would
        leave the thread on the CPUs of the moment, where a thread never pinned gets the
        new ones; every possible CPU, which the kernel narrows to the cpuset, is restored
        instead. A thread that asked for exactly its cpuset cannot be told from one that
        follows it (the kernel does not show a request), and comes back wider when the
        cpuset grows.

        sched_getaffinity gives only a mask's online CPUs, so while a possible CPU is
        offline (SMT off, a VM with spare CPU slots, a CPU unplugged for now) the mask
        as set (/proc) is the original: the read would leave that CPU out for good,
        and could not tell a thread never pinned from one pinned to exactly the online
        CPUs (where the first needs no walk of the cgroups)."""
        every = self._kernel.possible_cpus()
        if mask >= every:
            return mask
        if self._kernel.online_cpus() != every:
            try:
                mask = self._kernel.thread_cpus_allowed(tid)
            except HostError:  # gone: the identity check that follows says so
                return mask
            if mask >= every:
                return mask
        if mask != cpuset:
            try:
                cpuset = self._allowed(tid)
            except (HostError, ValueError):  # an unreadable cpuset: the mask as found
                return mask
        return every if cpuset is not None and mask == cpuset else mask

    def pin_many(self, moves: Sequence[tuple[int, frozenset[int]]]) -> list[bool | HostError]:
        """Restrict adopted threads to CPUs (each move's ``cpus`` ∩ its allowed CPUs),
        one outcome per move: True when a syscall changed the mask, False when it
        already had it, or the HostError that stopped it: InvalidMask when no allowed
        CPU is in ``cpus``, ThreadGone when the thread is gone or the tid names another
        thread, Overridden when someone else set its mask since we did (nothing is
        written). KeyError for a tid never adopted.

        The identity of every thread about to move is proven by one batched check
        (:func:`~parlschedd.host.procfs.exited`: a single poll(2) where the kernel has
        thread pidfds) just before the writes, instead of one read per thread. The
        kernel itself intersects a mask with the thread's cpuset and fails with EINVAL
        only when nothing is left, so the allowed set is read (two cgroup files) only
        on that slow path, not on every pin of the daemon's period.
        """
        outcomes: list[bool | HostError] = [False] * len(moves)
        due = [i for i, (tid, cpus) in enumerate(moves) if _due(self._records[tid], cpus)]
        gone = self._exited([moves[i][0] for i in due])
        for i in due:
            tid, cpus = moves[i]
            try:
                if tid in gone:
                    raise ThreadGone(f"tid {tid} has exited or names another thread", tid=tid)
                self._check_ours(tid)
                self._set(tid, cpus)
            except ThreadGone as exc:
                self._gone(tid)
                outcomes[i] = _bare(exc)
            except HostError as exc:
                outcomes[i] = _bare(exc)
            else:
                record = self._records[tid]
                record.current = record.asked = cpus
                outcomes[i] = True
        return outcomes

    def drifted(self, tids: Iterable[int]) -> Drift:
        """Which of the adopted ``tids`` no longer have the mask we last set, and who
        changed it (:meth:`_by_kernel`): the kernel, whose mask then becomes the
        record's current, or someone else. A thread that keeps part of what we asked
        (a cpuset narrower than a domain's mask, as a v1 cpuset makes of it at the pin
        or later) is not reported: there is nothing to place again, and reporting it
        had it pinned and reported again at every rescan.

        One sched_getaffinity per thread, so the daemon calls this every rescan_s, not
        every period. A thread gone in between is skipped; the next period drops it.
        """
        drift = Drift([], [])
        for tid in tids:
            record = self._records[tid]
            try:
                mask = self._kernel.get_affinity(tid)
                if mask == record.current:
                    continue
                kept = self._by_kernel(tid, record, mask)
            except HostError:
                continue
            if kept is None:
                drift.overridden.append(tid)
                continue
            record.current = mask
            if not kept:
                drift.narrowed.append(tid)
        return drift

    def _by_kernel(self, tid: int, record: PinRecord, mask: frozenset[int]) -> bool | None:
        """Whether the kernel made ``mask`` of the mask we last asked for: a cgroup v1
        cpuset that changes gives each task what it allows of that mask (True: the
        thread has part or all of ours, a grown cpuset gives it back), or the whole
        cpuset when it allows none of it (False). Before Linux 6.2 (a kernel whose
        ``keeps_asked_mask`` is False) any change of the cpuset gives the whole
        cpuset, whatever we asked (False too: placed again).
        None for any other mask: someone set it (taskset, an administrator, the program
        itself), and it is theirs; before 6.2 a mask someone sets to the whole cpuset
        cannot be told from the kernel's and is taken for it.

        CPU hotplug changes a read with no one acting (sched_getaffinity gives a mask's
        online CPUs): a thread whose mask as set (/proc, offline CPUs included) is the
        one we asked for, or before our first pin its original, has it still, whatever
        part of it is online (the whole of it, which ``get_affinity`` reads once none
        of its CPUs is online, as a domain unplugged CPU by CPU; or its original's CPU
        back online, for a thread adopted while it was offline). A cpuset that the
        kernel narrows at a hotplug (a v1 child cpuset) narrows the mask as set too: the
        cpuset decides then, and someone's mask equal to what it kept of ours passes
        for the kernel's."""
        if mask == record.wanted:
            return True
        whole = self._kernel.thread_cpus_allowed(tid)
        if whole == record.wanted or (record.asked is None and whole == record.original):
            return True
        allowed = self._allowed(tid)
        if allowed is None:
            return None
        kept = record.wanted & allowed
        if kept and mask == kept:
            return True
        if mask == allowed and not (kept and self._kernel.keeps_asked_mask):
            return False
        return None

    def reassign(self, tid: int, original: frozenset[int]) -> None:
        """The adopted ``tid`` names another thread of the same identity now (an exec
        from a thread other than the main one gives it the main tid and start time):
        ``original`` is the mask to restore, and the mask it has now the one last set.
        Raises KeyError for a tid never adopted, ThreadGone when it is gone."""
        record = self._records[tid]
        self._records[tid] = PinRecord(record.start_time, original, self._guarded(tid, self._kernel.get_affinity))

    def give_back(self, tid: int, start_time: int, original: frozenset[int]) -> None:
        """Put ``original`` on a thread that is not ours to place but carries a mask we
        set (one a pinned thread created), its identity checked before the write as
        :meth:`adopt` and :meth:`restore` do: adopted with ``original``, restored at once."""
        self.adopt(tid, start_time, original)
        self.restore(tid)

    def set_original(self, tid: int, original: frozenset[int]) -> None:
        """Restore ``original`` at the end, in place of the mask found at adoption;
        what was set since is unchanged (a mask someone sets later is still theirs).
        KeyError for a tid never adopted."""
        self._records[tid].original = original

    def release(self, tid: int) -> None:
        """Forget a thread without touching its mask: someone else set it since we did,
        and putting our record's original back would undo their change."""
        self._records.pop(tid, None)
        self._close_handle(tid)

    def _check_ours(self, tid: int) -> None:
        """Overridden unless the thread's mask is the one we set or the kernel's
        narrowing of it: a move never writes over a mask someone else set since."""
        record = self._records[tid]
        mask = self._kernel.get_affinity(tid)
        if mask != record.current:
            if self._by_kernel(tid, record, mask) is None:
                raise _theirs(tid, mask)
            record.current = mask

    def _set(self, tid: int, cpus: frozenset[int]) -> None:
        try:
            self._kernel.set_affinity(tid, cpus)
        except InvalidMask:
            allowed = self._allowed(tid)
            target = frozenset() if allowed is None else cpus & allowed
            if not target:
                raise InvalidMask(f"CPUs {format_cpulist(cpus)} outside the allowed set of tid {tid}", tid=tid) from None
            self._kernel.set_affinity(tid, target)

    def _exited(self, tids: list[int]) -> set[int]:
        """Which of ``tids`` are gone or now name another thread; handles are opened
        (with the start-time check) on a thread's first move."""
        gone: set[int] = set()
        for tid in tids:
            if tid not in self._handles:
                try:
                    self._handles[tid] = procfs.ThreadHandle(tid, self._records[tid].start_time, self._proc_root)
                except ThreadGone:
                    gone.add(tid)
        return gone | procfs.exited(self._handles[tid] for tid in tids if tid not in gone)

    def restore(self, tid: int) -> bool:
        """Put the original mask back and forget the thread; False (and nothing done)
        when it was not adopted. Overridden (and nothing written) when someone else set
        the thread's mask since our last pin: it is theirs, as it is to a move.

        The syscall is made even when the thread shows its original mask: the kernel
        may hold another request for it (a cpuset narrowed since). When the original no
        longer intersects the cpuset (it shrank), the kernel takes no mask that holds
        none of the allowed CPUs, so the thread gets the original and the allowed set
        together: it runs where it may now, and on its original CPUs again when the
        cpuset grows back (Linux 6.2+ keeps a thread's requested
        mask across cpuset changes; before, it gets the whole cpuset). The exact
        original cannot be requested then; nor, where no cpuset applies, when every CPU
        of it is offline: the thread gets it and the online CPUs.
        """
        record = self._records.get(tid)
        if record is None:
            return False
        try:
            self._restore(tid, record)
        finally:
            self._records.pop(tid, None)
            self._close_handle(tid)
        return True

    def _restore(self, tid: int, record: PinRecord) -> None:
        self._guarded(tid, lambda t: self._check_identity(t, record.start_time))
        kernel = self._kernel
        mask = self._guarded(tid, kernel.get_affinity)
        if not self._ours_to_restore(tid, record, mask):
            raise _theirs(tid, mask)
        try:
            self._guarded(tid, lambda t: kernel.set_affinity(t, record.original))
        except InvalidMask:
            allowed = self._guarded(tid, self._allowed)
            if allowed is None:  # no cpuset applies: every CPU of the original is offline
                widened = record.original | kernel.online_cpus()
                log.warning("original mask offline, widening", tid=tid, cpus=format_cpulist(widened))
            else:
                widened = record.original | allowed
                log.warning("original mask outside cpuset, widening", tid=tid, cpus=format_cpulist(widened))
            self._guarded(tid, lambda t: kernel.set_affinity(t, widened))

    def _ours_to_restore(self, tid: int, record: PinRecord, mask: frozenset[int]) -> bool:
        """Whether ``mask`` is the thread's original or one we set: the mask we last
        set, or what the kernel made of it (:meth:`_by_kernel`). A record of the last
        run knows only the mask at adoption, so there any mask a daemon pins to (a CPU
        alone, a domain whole, or what the thread's cpuset allows of a domain) counts
        as that run's pin: a mask of another shape someone else set while no daemon ran,
        but one CPU or a whole domain set so cannot be told from the last run's pin."""
        if mask in (record.current, record.original):
            return True
        if not record.recovered:
            return self._by_kernel(tid, record, mask) is not None
        return self.pinned_by_last_run(tid, mask)

    def pinned_by_last_run(self, tid: int, mask: frozenset[int]) -> bool:
        """Whether ``mask`` on ``tid`` has the shape of the last run's pins (the
        placements it was given): a CPU alone, a domain whole, or what the thread's
        cpuset allows of one. Without placements, any mask counts."""
        if self._placements is None or mask in self._placements:
            return True
        allowed = self._allowed(tid)
        return allowed is not None and any(mask == p & allowed for p in self._placements)

    def restore_all(self) -> RestoreReport:
        """Restore every adopted thread and report which were restored, gone, kept as
        someone else set them, or failed."""
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
            except Exception as exc:  # a defect of ours in one thread's restore must not leave the others pinned
                log.exception("original mask not restored: internal error", tid=tid)
                failed.append((tid, f"internal error: {type(exc).__name__}: {exc}"))
            else:
                restored.append(tid)
        return RestoreReport(tuple(restored), tuple(gone), tuple(failed), tuple(kept))

    def to_json(self) -> dict[str, Any]:
        """The state as a JSON-ready dict, for :func:`~parlschedd.host.state.write_state`."""
        threads = {str(tid): rec.to_json() for tid, rec in sorted(self._records.items())}
        return {"version": STATE_VERSION, "threads": threads}

    @classmethod
    def from_json(cls, data: Any, **kwargs: Any) -> Pinner:
        """A Pinner holding the records of :meth:`to_json` (``kwargs`` as for __init__).
        ValueError when ``data`` is not that state at all; a thread's record that cannot
        be read is skipped with a warning, not the others: each is the only saved
        original of its thread."""
        if not isinstance(data, Mapping) or data.get("version") != STATE_VERSION:
            version = data.get("version") if isinstance(data, Mapping) else None
            raise ValueError(f"not a pinner state of version {STATE_VERSION} (version {version!r})")
        threads = data.get("threads")
        if not isinstance(threads, Mapping):
            raise ValueError(f"the pinner state's threads are not an object: {threads!r:.80}")
        records = {}
        for tid, rec in threads.items():
            try:
                if not (tid.isascii() and tid.isdigit() and len(tid) < 9 and 0 < int(tid) <= procfs.PID_MAX_LIMIT):
                    raise ValueError(f"not a thread id: {tid!r:.40}")
                records[int(tid)] = PinRecord.from_json(rec)
            except ValueError as exc:
                log.warning("state file: a thread's saved mask is unreadable, skipped", tid=f"{tid:.40}", error=str(exc))
        return cls(records=records, **kwargs)

    def from_saved(self, data: Any, placements: Iterable[frozenset[int]]) -> Pinner:
        """A Pinner on this one's host (its kernel, cpuset and /proc readers) holding the
        records a previous run saved (:meth:`from_json`): what crash recovery restores."""
        return self.from_json(data, kernel=self._kernel, allowed=self._allowed, proc_root=self._proc_root,
                              placements=placements)

    def _check_identity(self, tid: int, start_time: int) -> None:
        """ThreadGone unless ``tid`` is still the thread started at ``start_time``. The
        first check opens a ThreadHandle; later ones only re-read it (hot path)."""
        handle = self._handles.get(tid)
        if handle is None:
            self._handles[tid] = procfs.ThreadHandle(tid, start_time, self._proc_root)
        else:
            handle.check()

    def _close_handle(self, tid: int) -> None:
        handle = self._handles.pop(tid, None)
        if handle is not None:
            handle.close()

    def _guarded(self, tid: int, step: Callable[[int], T]) -> T:
        """Run ``step(tid)``; if the thread is gone, drop its record, log, re-raise."""
        try:
            return step(tid)
        except ThreadGone:
            self._gone(tid)
            raise

    def _gone(self, tid: int) -> None:
        self._records.pop(tid, None)
        self._close_handle(tid)
        log.debug("thread gone", tid=tid)
