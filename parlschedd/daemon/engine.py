"""The per-period work of the daemon, over the host adapters.

Each ``tick``: refresh every target's threads when any may have come or gone (adopt
new ones, drop exited ones; see ``_unchanged``), read counters into utilities (counter
delta / monotonic time delta, ``Roster.read``), step the target's TwoLevelScheduler, and
pin the threads whose CPU changed (``Roster.to_move``). The chain is counters -> rates ->
scheduler -> pin plan, all but the reads on plain arrays (the pins follow through the
host adapters); the clock is passed in, so tests drive it. Each target's scheduler
works on the CPUs its cpuset allows in each domain, read at attach and every rescan_s
(``cpuset.py``).

Beside it, each in a module of its own: a target's state (``target.py``), its cpuset
(``cpuset.py``), an exec from a thread other than the main one (``exec_watch.py`` tells
it, ``exec_handling.py`` reads and acts), thread names re-read in turns (``names.py``)
and the target as ``status`` shows it (``target_status.py``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

import numpy as np
import structlog

from parlschedd.arrays import IntArray
from parlschedd.config import Config
from parlschedd.daemon import protocol, target_status
from parlschedd.daemon.cpuset import follow_cpuset, placed_on, read_cpuset
from parlschedd.daemon.exec_handling import (carried_original, check_exec, count_afresh, exec_went, masks_that_went,
                                              reassign_original, settle_exec, watch_exec)
from parlschedd.daemon.exec_watch import Masks, carried
from parlschedd.daemon.history import History
from parlschedd.daemon import names
from parlschedd.daemon.target import DomainCpus, Roster, Target, ThreadState
from parlschedd.daemon.turns import in_turn
from parlschedd.host import cgroups, procfs
from parlschedd.host.affinity import AllowedCpus
from parlschedd.host.base import Actuator, Counters, PinRecord
from parlschedd.host.errors import HostError, Overridden, ThreadGone, TooManyFiles
from parlschedd.learning.scheduler import TwoLevelScheduler
from parlschedd.patterns import PatternError, compile_pattern
from parlschedd.topology import online_cpus
from parlschedd.words import n_threads

log = structlog.get_logger("parlschedd.engine")

GONE_KEPT = 64  # exited targets remembered, to say why a later request finds them gone
HISTORIES_KEPT = 4  # the last exited targets whose history is kept, for a plot of a run that ended
RELEASE_LISTINGS = 3  # listings at a release for threads born with our mask (_give_back_born)
# targets a non-root user may have attached at once: 600 of one user's processes took
# three quarters of the daemon's periods (root and the config rules have no bound)
USER_TARGETS = 64
OBSERVED_PER_PERIOD = 128  # observe mode: the threads whose CPU is read each period, in turns (_ran_elsewhere)


def _not_yours(pid: int, owner: int, uid: int) -> EngineError:
    return EngineError("permission_denied", f"process {pid} belongs to uid {owner}, not to you (uid {uid}); "
                                            "only its owner or root may manage it")


@dataclass(frozen=True)
class Gone:
    """A target that exited: who it was, to say why a later request finds it gone, and
    its last periods (the last HISTORIES_KEPT exited targets'; None for the older) for
    ``history``: ``parlschedctl run`` ends with CMD, as the target does."""

    uid: int
    start_time: int
    most_threads: int
    name: str
    observe: bool
    history: History | None


class EngineError(protocol.ProtocolError):
    """A request the engine refuses (a pid not attached, not the caller's, ...)."""


class Engine:
    """Targets and their threads; no sockets, no signals, no sleeping."""

    def __init__(self, config: Config, domains: list[list[int]], counters: Counters, pinner: Actuator,
                 proc_root: str = procfs.PROC_ROOT, on_change: Callable[[], None] = lambda: None,
                 persist: Callable[[], bool] = lambda: True, allowed: AllowedCpus = cgroups.task_cpus,
                 sysfs: str = "/sys") -> None:
        self.config = config
        self.domains = domains
        self.allowed = allowed  # the CPUs a process's cpuset allows (None: unrestricted)
        self._every_cpu: DomainCpus = tuple(tuple(d) for d in domains)  # a target's without a cpuset
        self.counters = counters
        self.pinner = pinner
        self.proc_root, self.sysfs = proc_root, sysfs
        self._births_trusted: bool | None = None  # procfs.birth_mark_is_the_kernels, checked once
        self.targets: dict[int, Target] = {}
        self.on_change = on_change  # called when the set of targets or adopted threads changed
        self.persist = persist  # writes the adopted threads' original masks; False when it could not
        self._unsaved: set[int] = set()  # tids adopted since the last persist: not pinned before it
        self._single = {c: frozenset({c}) for d in domains for c in d}  # pin masks, made once
        self._whole = [frozenset(d) for d in domains]  # a free thread's mask: its domain
        self._usable = frozenset(self._single)  # every CPU of the domains
        self._domain_of = np.full(max(self._usable, default=0) + 2, -1, dtype=np.int64)  # by CPU; [-1]: none
        for a, cpus in enumerate(domains):
            self._domain_of[cpus] = a
        self.placements = frozenset([*self._single.values(), *self._whole])  # every mask we pin to (the state file's)
        self._schedulers_made = 0
        self.read_errors = 0  # periods a live thread was not measured: a failed read, or a PMU group multiplexed out throughout
        self._gone: dict[int, Gone] = {}  # targets that exited, by pid, oldest first
        # threads someone else re-pinned (_hand_over): tid -> start time; in the state file,
        # so that a target attached again after a restart leaves them alone too
        self.handed_over: dict[int, int] = {}
        # processes a config rule matches, detached by hand, that the rules do not attach
        # again while they live (RuleMatcher): pid -> start time; in the state file, so
        # that they stay detached across a restart
        self.left_alone: dict[int, int] = {}

    # -- requests ---------------------------------------------------------------------

    def attach(self, pid: int, now: float, *, observe: bool = False, threads: str | None = None,
               descendants: bool = False, uid: int | None = None, rule: int | None = None) -> Target:
        """Start managing ``pid``. ``uid`` is the caller's (None: trusted, e.g. a config
        rule); a non-root caller may attach only its own processes."""
        try:  # first: a request that cannot be right is said so whatever the pid
            pattern = compile_pattern(threads) if threads else None
        except PatternError as exc:
            raise EngineError("bad_request", f"invalid threads regex: {protocol.clip(str(exc), 200)}") from None  # room for RE2's hint
        try:
            handle = procfs.ProcessHandle(pid, self.proc_root)
        except ThreadGone:
            raise EngineError("no_such_process", f"no process with pid {pid}{self._thread_hint(pid)}") from None
        try:
            owner = procfs.process_uids(pid, self.proc_root).owner
            stat = procfs.process_stat(pid, self.proc_root)
            name = stat.comm
            if uid not in (None, 0) and uid != owner:  # before already_attached: no leak of who is managed
                raise _not_yours(pid, owner, uid)
            if pid in self.targets:
                raise EngineError("already_attached", f"process {pid} is already attached; to change its mode, "
                                                      f"thread filter or descendants, detach it and attach it again")
            if uid not in (None, 0) and sum(t.caller == uid for t in self.targets.values()) >= USER_TARGETS:
                raise EngineError("too_many_targets", f"uid {uid} has {USER_TARGETS} targets attached, the most a "
                                                      "user may: detach one first")
            if stat.exited:
                raise EngineError("no_such_process", f"process {pid} has exited (a zombie its parent has not reaped)")
            if stat.kernel_thread:
                raise EngineError("bad_request", f"process {pid} ({name}) is a kernel thread; parlschedd manages user processes")
            manager = self._manager_of(pid)
            if manager is not None and uid not in (None, 0, self.targets[manager].uid):  # as not_attached: no leak
                raise EngineError("already_attached", f"process {pid} is already managed, as a descendant of another "
                                                      "user's target, which root or that user may detach")
            if manager is not None:
                raise EngineError("already_attached", f"process {pid} is already managed, as a descendant of {manager}; "
                                                      f"detach {manager} first to attach it alone")
        except ThreadGone:
            handle.close()
            raise EngineError("no_such_process", f"process {pid} exited") from None
        except BaseException:
            handle.close()
            raise
        cpuset, cpus = read_cpuset(pid, self.allowed, self._every_cpu) or (None, self._every_cpu)  # unread: the rescan retries
        target = Target(pid, name, owner, observe, pattern, descendants, handle, self._scheduler(pid, cpus),
                        procfs.ThreadExits(self.proc_root),
                        cpuset=cpuset, cpus=cpus, rule=rule, caller=None if uid in (None, 0) else uid,
                        history=History(self.config.history_periods, now))
        self.targets[pid] = target
        self._gone.pop(pid, None)  # a reused pid: the exit recorded is another process's
        self.on_change()  # a new target shows even before it has a thread
        try:
            checked = procfs.start_time_now()
            self._refresh(target, now)
            target.known_before = checked
        except BaseException:  # a bug: refused whole, not left half attached and failing every period
            self._release(target, keep_hand_overs=True)  # the threads someone else set stay theirs
            raise
        if not target.threads and (not handle.alive() or self._exiting(pid)):  # it ended while being attached
            self._release(target, keep_hand_overs=True)
            raise EngineError("no_such_process", f"process {pid} exited")
        by_rule = {} if rule is None else {"rule": f"targets[{rule}]"}  # which rule took it, when one did
        log.info("attached", pid=pid, name=name, mode=target.mode, threads=len(target.threads), **by_rule)
        return target

    def relearn(self) -> int:
        """After a reload: the targets whose scheduler runs on other learning parameters
        or another T_NUMA / T_CPU ratio than the config's start learning afresh with the
        new ones (what they learned is on the old terms); their threads stay where
        they are until the next period places them, each in the domain it runs in
        (``_ran_elsewhere``). Returns how many. Every target's history keeps the new
        history_periods."""
        fresh = 0
        for target in self.targets.values():
            if target.history is not None:
                target.history.resize(self.config.history_periods)
            s = target.scheduler
            if (s.params, s.domain_every) != (self.config.learning, self.config.domain_every):
                target.scheduler = self._scheduler(target.pid, target.cpus)
                fresh += 1
        return fresh

    def _scheduler(self, pid: int, cpus: DomainCpus) -> TwoLevelScheduler:
        """A scheduler on the config's terms over ``cpus``, the target's CPUs in each
        domain (``cpuset_domains``), drawing from a stream of the seed its own: the
        n-th made since the start, so a seeded config replays the same decisions from
        run to run for the same attaches, while no two targets share draws. A domain
        without such a CPU is closed to it (Level 1 never moves a thread there: every
        pin would be refused and the thread's utility credited to a domain it never
        runs in). With none in any domain, every CPU of every domain, as before
        cpusets were read, and a warning: pins are refused where the cpuset is not."""
        if not any(cpus):
            log.warning("the target's cpuset has none of the daemon's CPUs; its scheduler uses every domain",
                        pid=pid, domains=self.domains)
        self._schedulers_made += 1
        return TwoLevelScheduler(placed_on(cpus, self._every_cpu), self.config.learning, self.config.domain_every,
                                 stream=self._schedulers_made)

    def forget_unclaimed_hand_overs(self) -> None:
        """After a restart, once the targets of the last run are attached again: the
        threads handed over whose target was not (it exited, a rule stopped matching)
        are no one's to keep any more."""
        claimed = set().union(*(t.ignored for t in self.targets.values()))
        for tid in set(self.handed_over) - claimed:
            del self.handed_over[tid]

    def detach(self, pid: int, uid: int | None = None, *, again: bool = False, reason: str = "asked by a client") -> int:
        """Stop managing ``pid`` and restore its threads; returns how many were restored.
        ``again``: it is attached again at once (a rule's settings changed), so the
        threads handed over to someone else stay theirs. ``reason``: said in the log."""
        restored = self._release(self.target_of(pid, uid), keep_hand_overs=again)
        log.info("detached", pid=pid, restored=restored, reason=reason)
        return restored

    def target_of(self, pid: int, uid: int | None) -> Target:
        """The target ``pid`` when ``uid`` (None, 0: anyone) may detach it, else the
        refusal (``not_attached``)."""
        target = self.targets.get(pid)
        if target is None or (uid not in (None, 0) and uid != target.uid):
            raise self.not_attached(pid, uid)
        return target

    def not_attached(self, pid: int, uid: int | None) -> EngineError:
        """The refusal for a request about ``pid``, which no target of ``uid``'s is,
        with the reason when one is known: ``pid`` names a thread, not a process, or
        the process exited and was dropped, or it is a descendant another target
        manages. That it was managed is said only to root and to its owner, as status
        shows it only to them; another user's process is refused as attach refuses it."""
        owner = procfs.owner(pid, self.proc_root)
        if uid not in (None, 0) and owner not in (None, uid):  # not whether it is managed: no leak
            return _not_yours(pid, owner, uid)
        message = f"process {pid} is not attached"
        gone = self._gone_of(pid, uid)
        hint = self._thread_hint(pid)
        manager_pid = None if hint else self._manager_of(pid)  # a thread is managed with its process
        manager = None if manager_pid is None else self.targets[manager_pid]
        if gone is not None:
            message += f": it exited, and parlschedd dropped it ({n_threads(gone.most_threads)} managed at most)"
        elif manager is not None and uid in (None, 0, manager.uid):
            message += f"; it is managed as a descendant of {manager.pid}; detach {manager.pid} to release it"
        elif manager is not None and owner == uid:  # the caller's own process: that it is managed, not by whom
            message += "; it is managed as a descendant of another user's target, which root or that user may detach"
        elif not hint and owner is None:
            message += ": there is no such process"
        elif not hint:
            message += " (parlschedctl status lists the targets)"
        return EngineError("not_attached", message + hint)

    def _gone_of(self, pid: int, uid: int | None) -> Gone | None:
        """The target ``pid`` that exited, if it was ``uid``'s (None, 0: anyone's) and
        ``pid`` names no other process since."""
        gone = self._gone.get(pid)
        if gone is None or uid not in (None, 0, gone.uid) or self.start_time(pid) not in (None, gone.start_time):
            return None
        return gone

    def history_of(self, pid: int, uid: int | None) -> tuple[Target | Gone, bool]:
        """What a ``history`` request of ``uid``'s (None, 0: anyone) about ``pid`` is
        served from, and whether it exited: the target, else the one that exited while
        its history is kept."""
        target = self.targets.get(pid)
        if target is not None and uid in (None, 0, target.uid):
            return target, False
        gone = None if target is not None else self._gone_of(pid, uid)
        if gone is None:
            raise self.not_attached(pid, uid)
        if gone.history is None:
            refusal = self.not_attached(pid, uid)
            raise EngineError(refusal.code, f"{refusal}; its history is no longer kept "
                                            f"(the last {HISTORIES_KEPT} exited targets' are)")
        return gone, True

    def _thread_hint(self, pid: int) -> str:
        """'; PID is a thread of process P ...' when ``pid`` is a thread id, not a
        process's, else ''. Not a leak: any user may read a thread's Tgid in /proc."""
        try:
            group = procfs.thread_group(pid, self.proc_root)
        except (HostError, ValueError):
            return ""
        if group == pid:
            return ""
        return f"; {pid} is a thread of process {group}: name the process (--threads REGEX picks threads by name)"

    def _exiting(self, pid: int) -> bool:
        """Whether process ``pid`` is ending or gone: one whose last thread is in its exit
        is adopted with no thread, and its pidfd polls readable only once it is a zombie
        (`run -- /bin/false` was attached with none, 1 time in 5)."""
        try:
            return procfs.process_stat(pid, self.proc_root).exiting
        except HostError:
            return True

    def start_time(self, pid: int) -> int | None:
        """The process's start time, None when there is no such process."""
        try:
            return procfs.process_start_time(pid, self.proc_root)
        except HostError:
            return None

    def detach_all(self, keep_hand_overs: bool = False) -> int:
        """Detach every target; how many threads were restored. ``keep_hand_overs``:
        the daemon stops, and the next run keeps leaving those threads alone. A defect
        of ours in one target's release is logged and the others are released still
        (it ended the daemon's stop with every later target left pinned); what it left
        the pinner's restore_all puts back."""
        restored = 0
        for target in list(self.targets.values()):
            try:
                restored += self._release(target, keep_hand_overs)
            except Exception:
                log.exception("target not released whole: internal error", pid=target.pid)
        return restored

    # -- the period -------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """One period: adopt and drop threads in every target, write the originals of
        the threads just adopted, then measure, learn and pin. A thread is never pinned
        before its original mask is on disk, so a daemon killed at any point leaves a
        state file that restores every thread it changed; while the write fails, the
        threads it would cover stay as they are."""
        live = []
        checked = procfs.start_time_now()
        for target in list(self.targets.values()):
            try:
                if not self._unchanged(target, now):
                    if not target.handle.alive():
                        self._drop_exited(target)
                        continue
                    self._refresh(target, now)
                target.known_before = checked
                live.append(target)
            except Exception as exc:  # a bug must cost one target's period, never the daemon
                target.known_before = None  # not known whole: a recovery counts its births from the save
                self._period_failed(target, exc)
        if self._unsaved and self.persist():
            self._unsaved.clear()
        for target in live:
            try:
                self._step(target, now)
                target.failing = None
            except Exception as exc:
                self._period_failed(target, exc)

    @staticmethod
    def _period_failed(target: Target, exc: Exception) -> None:
        """Logged with its traceback when it is new; the same failure again in the next
        periods (out of file descriptors: each period of the target fails alike until
        the limit is raised) only at debug level. The same is the same error raised at
        the same place: the same message from another line is another bug."""
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        at = "" if tb is None else f" at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
        failure = f"{type(exc).__name__}: {exc}{at}"
        if failure == target.failing:
            log.debug("period failed for target again", pid=target.pid, error=failure)
            return
        target.failing = failure
        log.exception("period failed for target", pid=target.pid)

    def resync(self, now: float) -> None:
        """Notice a target's cpuset that changed (``follow_cpuset``), and the pinned
        threads whose mask changed under us. Those the kernel narrowed (a cpuset that
        shrank) count as unpinned, so the next period pins them again inside what is
        now allowed, and ``status`` never shows a CPU the thread is not on. Those
        someone else re-pinned are left to them (``_hand_over``). The target's name is
        read again (an exec, a rename): the metrics' name label went by the one a
        ``status`` last read, and changed when someone asked for one."""
        self._each_target(self._resync, now)

    def _each_target(self, step: Callable[[Target, float], None], now: float) -> None:
        """``step`` for every target; a bug costs that target's turn, not the others'."""
        for target in list(self.targets.values()):
            try:
                step(target, now)
            except Exception:
                log.exception("rescan failed for target", pid=target.pid, step=step.__name__)

    def _resync(self, target: Target, now: float) -> None:
        if not self._owned_as_before(target):
            return
        if target.caller is not None:
            self._let_go_of_others_threads(target)
        try:
            target.name = procfs.comm(target.pid, self.proc_root)
        except HostError:
            pass  # exited: the period drops it
        if follow_cpuset(target, self.allowed, self._every_cpu):  # it learns afresh on the CPUs allowed now
            target.scheduler = self._scheduler(target.pid, target.cpus)
        if target.observe:
            return
        r = target.current()
        rows = np.flatnonzero(r.pinned)
        drift = self.pinner.drifted(r.tids[rows].tolist())
        if drift.narrowed:
            log.info("cpuset narrowed pinned threads, placing them inside it", pid=target.pid, tids=drift.narrowed)
            rows = np.flatnonzero(np.isin(r.tids, drift.narrowed))
            r.pinned[rows] = False
            r.cpu[rows] = -1
        for tid in drift.overridden:
            if not self._exec_carried(target, tid, now):
                self._hand_over(target, tid)

    def _owned_as_before(self, target: Target) -> bool:
        """Follow a change of the process's owner (setuid(2), an exec of a setuid
        program): requests and ``status`` go by its owner now, and a target a non-root
        user attached that is no longer that user's is detached, its threads restored:
        the user went on placing (and seeing) a process that had become root's, and
        its new owner could neither see nor detach it. False when it was detached."""
        owner = procfs.owner(target.pid, self.proc_root)
        if owner is None or owner == target.uid:
            return True  # exited: the period drops it
        if target.caller is not None and owner != target.caller:
            self.detach(target.pid, reason=f"its owner changed to uid {owner}: no longer the uid {target.caller}'s "
                                           "that attached it")
            return False
        log.info("target's owner changed", pid=target.pid, uid=owner, was=target.uid)
        target.uid = owner
        self.on_change()
        return True

    def _let_go_of_others_threads(self, target: Target) -> None:
        """A user's target keeps only that user's threads, as its adoption took them: a
        thread that changed its uid since (setresuid(2) is per thread; a descendant
        that exec'd a setuid program between two listings) is restored and let go,
        then left out by the next listing, which adoption's check makes an ignored
        thread. It stayed pinned, and shown to the user, for good (review)."""
        for tid in list(target.threads):
            owner = procfs.owner(tid, self.proc_root)
            if owner not in (None, target.caller):  # None: gone, the period drops it
                log.info("thread's owner changed, let go", pid=target.pid, tid=tid, uid=owner)
                self._drop_thread(target, tid)

    def refilter(self, now: float) -> None:
        """Adopt the threads a thread filter left out whose name matches it now: a
        thread names itself after it starts (pthread_setname_np), so the name seen at
        its first listing need not be the one it runs under. Called every rescan_s, a
        read of /proc per left-out thread; threads handed over to someone else stay
        theirs, and a tid that now names a thread of another process is left alone.
        RENAMES_PER_ROUND threads a round at most, taking turns (``names.rename``'s cost).
        The other way too: a managed thread whose name (re-read in turns, ``names.rename``)
        no longer matches gets its original mask back and is left out."""
        self._each_target(self._refilter, now)

    def _refilter(self, target: Target, now: float) -> None:
        if target.thread_filter is None:
            return
        names.rename(target, self.proc_root)
        for tid in [t for t, th in target.threads.items() if target.thread_filter.search(th.name) is None]:
            self._leave_out(target, tid)
        processes = {target.pid, *target.others}  # as listed last
        batch, target.refiltered_last = in_turn(target.ignored.difference(self.handed_over), target.refiltered_last,
                                                names.RENAMES_PER_ROUND)
        for tid in batch:
            try:
                if target.thread_filter.search(procfs.comm(tid, self.proc_root)) is None:
                    continue  # most left out still do not match: one read for them
                group = procfs.thread_group(tid, self.proc_root)
            except (HostError, ValueError):
                continue  # gone: the next listing forgets it
            if group not in processes or self._manager_of(tid) is not None:
                continue
            if group == tid and self._exited_process(tid):
                continue  # a zombie's main thread, left out for that (_let_zombie_go), whose name may match
            target.ignored.discard(tid)
            target.exits.remove(tid)  # _adopt watches it again, or forgets it if it cannot manage it
            self._adopt(target, tid, now, new=False, process=group)
            target.most_threads = max(target.most_threads, len(target.threads))
            if tid in target.threads:
                log.info("thread renamed to match the thread filter, adopted", pid=target.pid, tid=tid)

    def _leave_out(self, target: Target, tid: int) -> None:
        """A managed thread renamed out of the thread filter: restored, and left out as
        a thread whose name never matched (watched for its exit, adopted again if it
        takes a matching name)."""
        self._drop_thread(target, tid)
        try:
            target.exits.add(tid)  # watched as every ignored thread is, also one someone else set
        except ThreadGone:  # gone: nothing to watch or leave out
            target.ignored.discard(tid)
            self.handed_over.pop(tid, None)
            return
        if tid not in target.ignored:  # else someone else's mask, found at the restore: theirs
            target.ignored.add(tid)
            log.info("thread renamed out of the thread filter, left out", pid=target.pid, tid=tid)
        self._note_left_main(target, tid)

    def _step(self, target: Target, now: float) -> None:
        """counters -> rates -> scheduler -> pins, for one target's period."""
        if target.exec_watches:
            for main in list(target.exec_watches):
                self._check_exec(target, main, now)
        r = target.current()
        values, gone = self.counters.read_many(r.tids.tolist())
        if gone:
            values = values[~np.isin(r.tids, gone)]
            for tid in gone:
                self._drop_thread(target, tid)
            r = target.current()
        if not r.tids.size:
            return
        self.read_errors += r.read(values, now)
        ran = self._ran_elsewhere(target, r)
        placement = target.scheduler.step(r.tids, r.utility, ran)
        cpus, domains = placement.cpus, placement.domains
        if target.observe:  # the kernel's placement, shown and drawn as it is
            r.cpu = ran
            domains = self._domain_of[np.minimum(ran, self._domain_of.size - 1)]
        else:
            moved = r.to_move(cpus, domains)
            held = self._unsaved.union(target.exec_watches) if self._unsaved or target.exec_watches else ()
            if moved.size and held:  # originals not yet on disk; main threads being watched
                moved = moved[~np.isin(r.tids[moved], list(held))]
            if moved.size:
                self._pin(target, r, moved, cpus, domains, now)
        r.domain = domains  # the scheduler hands out a copy
        target.history.record(now, r.tids, r.utility, r.cpu, r.domain)

    def _pin(self, target: Target, r: Roster, rows: IntArray, cpus: IntArray, domains: IntArray, now: float) -> None:
        """Pin the threads at ``rows`` of the roster on ``cpus[rows]``, in one batch; a
        CPU of -1 (a free thread) is its whole domain, where the kernel balances it."""
        tids, chosen = r.tids[rows].tolist(), cpus[rows].tolist()
        masks = [self._single[c] if c >= 0 else self._whole[d] for c, d in zip(chosen, domains[rows].tolist())]
        records = self.pinner.records
        before = [records.get(tid) for tid in tids]  # a thread found gone loses its record in pin_many
        outcomes = self.pinner.pin_many(list(zip(tids, masks)))
        for i, tid, cpu, outcome, record in zip(rows.tolist(), tids, chosen, outcomes, before):
            if isinstance(outcome, bool):
                target.migrations += outcome
                if outcome and r.pinned[i]:  # the row's placement until now, one of ours (``_ours``)
                    left, d = int(r.cpu[i]), int(r.domain[i])
                    if left >= 0 or d >= 0:
                        target.moved_from.add(self._single[left] if left >= 0 else self._whole[d])
                r.cpu[i], r.pinned[i] = cpu, True
            elif isinstance(outcome, ThreadGone):
                self._drop_thread(target, tid, record)
            elif isinstance(outcome, Overridden):
                if not self._exec_carried(target, tid, now):
                    self._hand_over(target, tid)
            else:  # retried every period; a warning once per thread (a core outside its cpuset is
                # drawn again and again while the thread learns nothing, an idle one never)
                th = target.threads[tid]
                (log.debug if th.refusal_said else log.warning)("pin refused", tid=tid, cpu=cpu, error=str(outcome))
                th.refusal_said = True
                r.pinned[i] = False
                r.cpu[i] = -1  # not where we put it; /proc's last CPU may predate a cpuset change

    def _ran_elsewhere(self, target: Target, r: Roster) -> IntArray | None:
        """The CPU each thread last ran on where the scheduler did not place it, -1
        elsewhere; None when every thread ran where it was placed (the usual period: no
        read). In observe mode no thread was placed; in pin mode, a thread new this
        period, one whose pin the kernel refused (a core outside its cpuset) or one that
        waits for its original to be saved ran where the kernel put it. The scheduler
        credits the period's utility to that core, not to the one it drew (spec, Level
        2, step 1: the utility "on the core it ran on"), so a refused core loses ground
        to the cores the thread may use instead of being drawn as often as before; a
        new thread joins the domain it runs in, and so does every thread of a scheduler
        made afresh (a cpuset that changed, a reload), rather than being dealt out
        over the domains again.

        In observe mode every thread ran where the kernel put it. One read costs tens
        of microseconds (all 1024 threads' took half a CPU), so beyond
        OBSERVED_PER_PERIOD threads they are read in turns, each new one at once, and
        the others keep the CPU last read: the kernel seldom moves a thread that runs
        well where it is. A scheduler made afresh (a cpuset that changed, which moves
        threads; a reload) has every thread's read once."""
        fresh = target.scheduler.periods == 0
        if not target.observe and not target.exec_watches and not fresh and r.pinned.all():
            return None
        ran = np.full(r.tids.size, -1, dtype=np.int64)
        if target.observe:
            ran[:] = r.cpu
            known = (r.cpu >= 0) & (not fresh)
            batch, target.observed_last = in_turn(r.tids[known].tolist(), target.observed_last, OBSERVED_PER_PERIOD)
            rows = np.flatnonzero(~known | np.isin(r.tids, batch))
        elif fresh:  # one pinned to a core runs there: /proc's last CPU may predate the pin
            on_core = r.pinned & (r.cpu >= 0)
            ran[on_core] = r.cpu[on_core]
            rows = np.flatnonzero(~on_core)
        else:  # a watched main thread is left where it is meanwhile
            rows = np.flatnonzero(~r.pinned | np.isin(r.tids, list(target.exec_watches)))
        ran[rows] = [self._running_on(tid) for tid in r.tids[rows].tolist()]
        return ran

    def _running_on(self, tid: int) -> int:
        try:
            return procfs.thread_stat(tid, self.proc_root).processor
        except HostError:
            return -1

    # -- threads ----------------------------------------------------------------------

    def _pids(self, target: Target) -> list[int]:
        """The target's process and, with descendants, theirs: for a non-root caller
        only those it owns, as it may attach only its own (a setuid child, or one a
        root service started, is not the caller's to place). Never the daemon's own,
        which a target it was started under holds (pinning its own loop helps no one;
        attaching it by pid is refused). Nor one detached by hand that a rule matches
        (``left_alone``), nor those below it: detached, it was taken back by the tree
        within a period, while detach said it was left alone until it exited."""
        if not target.descendants:
            return [target.pid]
        try:
            found = procfs.descendants(target.pid, self.proc_root, pruned=self._still_left_alone())
        except ThreadGone:
            return [target.pid]
        me = os.getpid()
        found = [p for p in found if p != me]
        if target.caller is not None:
            found = [p for p in found if procfs.owner(p, self.proc_root) == target.caller]
        return [target.pid, *found]

    def _still_left_alone(self) -> set[int]:
        """The processes detached by hand that a rule matches and that still run (a pid
        that exited may be another process's before the rules' rescan forgets it)."""
        return {pid for pid, started in self.left_alone.items() if self.start_time(pid) == started}

    def _refresh(self, target: Target, now: float) -> None:
        """Adopt the target's new threads and drop those gone: one directory listing
        per process; a thread's name is read once, when it is new."""
        births = self._birth_mark() if target.descendants else None
        seen: set[int] = set()
        listed: dict[int, set[int]] = {}  # each process's threads listed now
        exited = target.exits.exited()  # before the listing: a tid both exited and listed was reused
        for pid in self._pids(target):
            try:
                tids = target.handle.tids() if pid == target.pid else procfs.list_tids(pid, self.proc_root)
            except ThreadGone:
                continue
            listed[pid] = set(tids)
            for tid in exited.intersection(tids):
                self._forget_reused(target, tid, pid)
            for tid in sorted(set(tids).difference(target.threads, target.ignored)):
                if self._manager_of(tid) is None:  # one target per thread: its saved mask is the real original
                    self._adopt(target, tid, now, process=pid)
            seen.update(tids)
        for tid in set(target.threads).difference(seen):
            self._drop_thread(target, tid)
        # after the drops: a thread that ended and one that started since the last
        # listing never ran together
        target.most_threads = max(target.most_threads, len(target.threads))
        for tid in target.ignored.difference(seen):
            target.exits.remove(tid)
            self.handed_over.pop(tid, None)
        target.ignored &= seen
        if target.unadopted:  # only those listed still, and not adopted since
            target.unadopted = {tid: said for tid, said in target.unadopted.items() if tid in seen}
        for main, tids in listed.items():
            others = target.others.get(main)
            if others and main in tids and not others & tids:
                self._after_the_others_went(target, main, others, now)
        target.others = {main: {t for t in tids if t != main and (t in target.threads or t in target.ignored)}
                         for main, tids in listed.items()}
        target.ignored_masks = self._masks_of(main for main in listed if main in target.ignored and not target.observe)
        target.went.clear()
        target.births_at = births if seen <= target.threads.keys() | target.ignored else None
        target.listed_at = now
        target.moved_from.clear()  # a thread born before those moves is listed now

    def _masks_of(self, tids: Iterable[int]) -> dict[int, frozenset[int]]:
        masks = {}
        for tid in tids:
            try:
                masks[tid] = self.pinner.mask_of(tid)
            except HostError:
                pass  # gone: the next listing drops it
        return masks

    def _forget_reused(self, target: Target, tid: int, process: int) -> None:
        """``tid``'s thread exited and the tid is listed again in ``process``: a new
        thread took it, and is adopted as new. Not the process's leader while it is
        not reaped: its tid is the process's id, which no other task gets while the
        process holds it, and its pidfd polls readable while it is a zombie (a process
        not reaped yet, or, on Linux 6.9-6.14, a leader whose other threads run on).
        A leader that was reaped is a new process on the pid (with descendants: one
        taken by another in the tree within a period), whether its main thread was
        adopted or left out (``ThreadExits.reaped``). A leader not reaped whose process
        has no thread left is a zombie its parent has not waited for: let go, and left
        out until its pid goes or is reaped and reused (``_let_zombie_go``)."""
        if tid == process and not target.exits.reaped(tid):
            if tid in target.threads:
                self._let_zombie_go(target, tid)
            return
        target.ignored.discard(tid)
        target.exits.remove(tid)
        self.handed_over.pop(tid, None)
        if tid in target.threads:
            self._drop_thread(target, tid)
            # the roster's row and the scheduler's state are the old thread's: the new
            # one starts from its adoption reading (its rate was the new count less the
            # old one's) and learns afresh. The row stays until the period realigns:
            # till then its pin is still one of ours to the listing (``_ours``)
            target.reborn.add(tid)
            target.scheduler.forget([tid])

    def _let_zombie_go(self, target: Target, leader: int) -> None:
        """A process of the target that exited, its threads all gone, still lists its
        main thread until its parent's wait(2): that thread was shown as managed and
        pinned, and drawn a core every period, for as long (a review). It is dropped and
        counted as left out, its exit still watched by the pidfd opened at adoption (a
        new one could name a new process on the pid by now; a zombie's polls readable,
        so the tree is listed every period until it is reaped, as it was). A zombie met
        by an adoption is left out the same way (``_adopt``)."""
        if self._exited_process(leader):  # else a leader that ended alone (pthread_exit): its process runs on
            self._drop_thread(target, leader, keep_watch=True)
            target.ignored.add(leader)

    def _exited_process(self, pid: int) -> bool:
        """Whether process ``pid`` has exited and awaits its parent's wait(2) (a zombie
        whose threads are all gone; ``procfs.Stat.exited``)."""
        try:
            return procfs.process_stat(pid, self.proc_root).exited
        except (HostError, ValueError):
            return False  # gone: the next listing drops it

    def _unchanged(self, target: Target, now: float) -> bool:
        """The process has exactly the threads we know (adopted or ignored), so the
        period needs neither the liveness check nor the listing: as many threads as the
        task directory's link count says, and none of them exited (they all would if
        the process had). A listing was a fifth of a quiet period at 1024 threads
        (procfs builds an entry per thread: 1.9 ms of 8.6,
        bench/results/period_profile-8131649.json). Counted first, then polled: a
        birth before the count changes it unless an exit before it hides it, and that
        exit is then seen by the poll.

        With descendants, a new process can appear anywhere below the target, so it
        is not counted but known unborn: no pid was allocated in the daemon's pid
        namespace (which holds every task it can see) since the last listing and no
        task was added to or released from the host's count (``procfs.birth_mark``),
        none of the target's threads exited, and that listing saw no thread the
        target does not watch (one another target manages; a tree holding an exited
        process its parent has not reaped, whose pidfd polls readable, is listed
        every period). What the mark can miss, a full listing every
        rescan_s catches: a task whose pid was taken before the mark was read but that
        showed in /proc only after the listing, while a release elsewhere evened out
        the count before the next read; a pid given by clone3's set_tid (a checkpoint
        restore) or after a write to ns_last_pid; a process reparented into the tree
        from outside it (a pid namespace's init below the target adopting orphans);
        in a non-root caller's tree, where only its own processes are listed, one that
        changed owner without a birth (a setuid exec: let go; another's that became its
        own: adopted), as the target's own owner is read again every rescan_s (and its
        threads' owners, ``_let_go_of_others_threads``). Listed every period, a user's
        tree of 300 sleeping processes cost the daemon 39.9% of a core against 4.0% for
        root's (bench/results/tree_cost-before.json)."""
        known = len(target.threads) + len(target.ignored)
        if not known or target.went:  # went: dropped since the listing, see _refresh
            return False
        if target.descendants:
            return (target.births_at is not None and now - target.listed_at < self.config.rescan_s
                    and self._birth_mark() == target.births_at and not target.exits.any_exited())
        try:
            count = target.handle.thread_count()
        except HostError:
            return False  # the listing reports what happened
        return count == known and not target.exits.any_exited()

    @property
    def births_seen(self) -> bool:
        """Whether this /proc tells a birth on the host (``procfs.birth_mark``): not in a
        fake /proc without it, nor where /proc/loadavg is hidden (a unit's
        ProcSubset=pid) or is not the kernel's; every period then lists every
        --descendants target's tree. Status says which."""
        if self._births_trusted is None:
            self._births_trusted = procfs.birth_mark_is_the_kernels(self.proc_root)
        return self._births_trusted

    def _birth_mark(self) -> tuple[int, int] | None:
        """``procfs.birth_mark``, or None where it cannot be trusted (``births_seen``)."""
        if not self.births_seen:
            return None
        try:
            return procfs.birth_mark(self.proc_root)
        except (HostError, ValueError):
            return None

    def _manager_of(self, tid: int) -> int | None:
        """The pid of the target that manages ``tid``, if one does. A thread is adopted
        by the first target that reaches it (a process attached by hand and also a
        descendant of another target): a second adoption would save our own pin as
        the thread's original mask."""
        return next((t.pid for t in self.targets.values() if tid in t.threads), None)

    def _adopt(self, target: Target, tid: int, now: float, *, process: int, new: bool = True) -> None:
        """Manage ``tid``. ``new``: first seen at this listing, so a mask we set on the
        thread that created it may be what it carries (``_inherited_original``); a
        thread left out until now has had its own mask back since, and keeps it."""
        target.exits.add(tid)  # first: the pidfd then names the thread whose start time is read
        try:
            name = procfs.comm(tid, self.proc_root)
            start = procfs.thread_start_time(tid, self.proc_root)
            if self.handed_over.get(tid) == start:  # theirs since before a restart
                target.ignored.add(tid)
                return
            if target.caller is not None and procfs.process_uids(tid, self.proc_root).owner != target.caller:
                target.ignored.add(tid)  # another user's thread in the caller's process (setresuid(2) is per thread)
                return
            if target.thread_filter and not target.thread_filter.search(name):
                target.ignored.add(tid)
                original = None if target.observe else self._inherited_original(target, tid)
                if original is not None:  # born of a thread we pinned: our mask, inherited
                    self.pinner.give_back(tid, start, original)
                return
            self.counters.open(tid)
            value = self.counters.read(tid)
            if not target.observe:
                original = self._inherited_original(target, tid) if new else None
                # a descendant's thread may be in another cpuset: the pinner reads its own
                self.pinner.adopt(tid, start, original, cpuset=target.cpuset if process == target.pid else None)
                self._unsaved.add(tid)
        except ThreadGone:
            if tid == process and self._exited_process(tid):  # watched since before the read: its pidfd, not a new one's
                target.ignored.add(tid)  # listed till reaped; tried again each listing otherwise (_let_zombie_go)
                return
            self._not_adopted(target, tid)
            return
        except TooManyFiles as exc:
            self._not_adopted(target, tid, logging.ERROR, "out of file descriptors, thread not managed", exc)
            return
        except HostError as exc:
            self._not_adopted(target, tid, logging.WARNING, "cannot manage thread", exc)
            return
        target.unadopted.pop(tid, None)
        target.threads[tid] = ThreadState(tid, start, name, value, now, process=process)
        target.adopted += 1
        target.stale = True
        self.on_change()

    def _not_adopted(self, target: Target, tid: int, level: int | None = None, event: str = "",
                     exc: HostError | None = None) -> None:
        """Undo a failed adoption; ``event`` is logged at ``level`` the first time the
        thread fails so, for this reason (each period tries it again: the same failure
        said again at debug level)."""
        self.counters.close(tid)
        target.exits.remove(tid)
        if level is None:
            return
        failure = f"{event}: {exc}"
        said = target.unadopted.get(tid) == failure
        target.unadopted[tid] = failure
        log.log(logging.DEBUG if said else level, event, pid=target.pid, tid=tid, error=str(exc))

    def _inherited_original(self, target: Target, tid: int) -> frozenset[int] | None:
        """For a thread born after attach whose mask is one the daemon set on its
        creator (a core, or a free thread's whole domain): the target's own mask, to
        restore instead of ours."""
        if target.base_mask is None:
            target.base_mask = self.pinner.mask_of(target.pid)
            target.base_original = self.pinner.original_of(target.pid, target.base_mask, target.cpuset)
            return None
        mask = self.pinner.mask_of(tid)
        return target.base_original if mask != target.base_mask and mask in self._ours(target) else None

    def _ours(self, target: Target) -> set[frozenset[int]]:
        """The masks we have set on ``target``'s threads, as they are now and as they were
        before the moves since the last listing (a thread born in the period its creator
        was moved inherited the mask it had before: taken for the thread's own, it was
        restored to our pin), and what the target's cpuset and the CPUs online make of
        them as sched_getaffinity reads them (a thread born of a free thread whose
        domain is wider than the cpuset inherits the narrowed mask; one born while a CPU
        of the domain is offline reads the rest)."""
        r = target.roster
        free = r.pinned & (r.cpu < 0)
        ours = {self._single[cpu] for cpu in r.cpu[r.pinned & ~free].tolist()}
        ours.update(self._whole[d] for d in r.domain[free & (r.domain >= 0)].tolist())
        records = self.pinner.records  # a row not pinned (a refused pin) may still carry an earlier pin of ours
        ours.update(rec.current for t in r.tids[~r.pinned].tolist()
                    if (rec := records.get(t)) is not None and rec.asked is not None and rec.current != rec.original)
        ours.update(target.moved_from)  # a creator's mask before our last move of it
        allowed = frozenset(c for cpus in target.cpus for c in cpus) & online_cpus(self.sysfs)
        if allowed != self._usable:
            ours.update(narrowed for m in list(ours) if (narrowed := m & allowed))
        return ours

    def _give_back_born(self, target: Target, known: set[int], ours: set[frozenset[int]]) -> None:
        """At a release: the threads born since the last listing of a thread we pinned
        carry our mask (``ours``), and no period comes to adopt them; they get the
        target's own mask back, as ``_inherited_original`` gives it. Listed again until
        none is found: one born of such a thread before it got its mask back has ours
        too (RELEASE_LISTINGS times at most, against a target that never stops)."""
        base = target.base_mask
        ours = ours - {base}
        if base is None or target.base_original is None or not ours:
            return
        for _ in range(RELEASE_LISTINGS):
            born = []
            for pid in self._pids(target):
                try:
                    born += [t for t in procfs.list_tids(pid, self.proc_root) if t not in known]
                except HostError:
                    continue  # gone
            known.update(born)
            given = 0
            for tid in born:
                try:
                    if self.pinner.mask_of(tid) in ours and self._manager_of(tid) is None:
                        self.pinner.give_back(tid, procfs.thread_start_time(tid, self.proc_root), target.base_original)
                        given += 1
                except HostError:
                    pass  # gone
            if not given:
                return

    def _drop_thread(self, target: Target, tid: int, record: PinRecord | None = None, keep_watch: bool = False) -> bool:
        """Stop managing ``tid`` and put its original mask back; True when it was
        restored. Dropped is not always exited: a descendant process can leave the tree
        (its parent exited), and descendants outlive a target process that exits, so
        each thread is restored if it still runs (the pinner's identity check makes that
        a no-op for a tid that exited or names another thread now). Its masks
        (``record``, when the pinner already let it go) are kept until the next listing
        in ``went``, where an exec from it is told by them. ``keep_watch``: its exit
        still watched, as a thread left out is."""
        record = record or self.pinner.records.get(tid)
        target.went[tid] = None if record is None else (record.original, record.current)
        target.threads.pop(tid, None)
        if not keep_watch:
            target.exits.remove(tid)
        target.stale = True
        self.counters.close(tid)
        self._unsaved.discard(tid)
        restored = False
        if not target.observe:
            try:
                restored = self.pinner.restore(tid)
            except ThreadGone:
                pass
            except Overridden:  # set by someone else since the last rescan_s
                self._theirs(target, tid, None if record is None else record.start_time)
            except HostError as exc:
                log.warning("original mask not restored", pid=target.pid, tid=tid, error=str(exc))
        log.debug("thread dropped", pid=target.pid, tid=tid, restored=restored)
        self.on_change()
        return restored

    def _hand_over(self, target: Target, tid: int) -> None:
        """Someone else set the thread's mask (taskset, an administrator, the program
        itself): it is theirs. The thread is neither placed any more nor restored at
        detach, which would undo their change; it counts as ignored until it exits, or
        until the target is detached, across daemon restarts too."""
        self.pinner.release(tid)
        th = target.threads.pop(tid, None)
        self.counters.close(tid)
        self._unsaved.discard(tid)
        target.stale = True
        self._theirs(target, tid, None if th is None else th.start_time)
        self._note_left_main(target, tid)
        self.on_change()

    def _note_left_main(self, target: Target, tid: int) -> None:
        """A process's main thread left to itself since the last listing (handed over,
        or renamed out of the filter): its mask now, as a listing notes those of the
        main threads left out (``ignored_masks``), so that an exec from a thread we
        pinned, which carries our pin onto the main tid, is told by a change of it
        (``_after_the_others_went``); until the next listing there was none to compare."""
        if tid in target.others and not target.observe:
            try:
                target.ignored_masks[tid] = self.pinner.mask_of(tid)
            except HostError:
                pass  # gone: the next listing drops it

    def _theirs(self, target: Target, tid: int, start: int | None) -> None:
        """The thread's mask is someone else's: counted as ignored, and kept (by
        ``start``, its identity) as handed over until it exits or the target is detached."""
        if start is not None:
            self.handed_over[tid] = start
        target.ignored.add(tid)
        log.info("affinity set outside parlschedd, the thread is left as it was set", pid=target.pid, tid=tid)

    def _release(self, target: Target, keep_hand_overs: bool = False) -> int:
        """Restore the target's threads and stop managing it; how many were restored.
        The threads handed over to someone else are theirs to keep as they are."""
        ours = set() if target.observe else self._ours(target)
        known = {*target.threads, *target.ignored}
        for main in [] if target.observe else [m for m in target.others if m in target.threads]:
            settle_exec(target, main, self.pinner, self.proc_root)
        restored = sum(self._drop_thread(target, tid) for tid in list(target.threads))
        self._give_back_born(target, known, ours)
        for tid in () if keep_hand_overs else target.ignored:
            self.handed_over.pop(tid, None)
        self.targets.pop(target.pid, None)
        target.handle.close()
        target.exits.close()
        self.on_change()
        return restored

    def _drop_exited(self, target: Target) -> None:
        self._gone[target.pid] = Gone(target.uid, target.handle.start_time, target.most_threads, target.name,
                                      target.observe, target.history)
        while len(self._gone) > GONE_KEPT:
            del self._gone[next(iter(self._gone))]
        if len(self._gone) > HISTORIES_KEPT:  # the one that leaves the last HISTORIES_KEPT
            pid = list(self._gone)[-HISTORIES_KEPT - 1]
            self._gone[pid] = replace(self._gone[pid], history=None)
        self._release(target)
        log.info("target dropped", pid=target.pid, reason="exited")

    # -- an exec from a thread other than the main one (see exec_handling.py) ---------

    def _after_the_others_went(self, target: Target, main: int, others: set[int], now: float) -> None:
        """Every other thread of one of the target's processes went (``others``) and its
        main one stayed: an exec, from the main thread or from another, or threads that
        ended. Told at once when the main tid's mask changed since the last listing to
        one we set on a thread that went (that thread carried it through the exec);
        else, with perf counters, by an :class:`ExecWatch`. A mask someone else set is
        left to ``resync``."""
        went = masks_that_went(target, others, self.pinner.records)
        if main not in target.threads:  # left out by the filter, or someone else's
            before = target.ignored_masks.get(main)
            if before is not None and main in target.ignored:
                self._give_back_carried(target, main, before, went)
            return
        if not target.observe:
            try:
                mask = self.pinner.mask_of(main)
            except HostError:
                return  # gone: the next period drops it
            if mask != self.pinner.records[main].current:
                if carried(went, mask):
                    self._main_replaced(target, main, went, now)
                return
        watch_exec(target, main, went, self.counters, self.proc_root)

    def _exec_carried(self, target: Target, main: int, now: float) -> bool:
        """A main thread found with a mask that is not ours, when the others of its
        process are gone since the last listing: an exec between that listing and now,
        if the mask is one we set on one of them (then it is handled as such, True).
        Else someone else set it (False). Runs only when a mask is found changed."""
        went = exec_went(target, main, self.pinner, self.proc_root)
        if went is None:
            return False
        self._main_replaced(target, main, went, now)
        return True

    def _check_exec(self, target: Target, main: int, now: float) -> None:
        """Settle ``main``'s :class:`ExecWatch` (``check_exec``): a main tid found to be
        the thread that exec'd is treated as such."""
        went = check_exec(target, main, self.counters, self.proc_root)
        if went is not None:
            self._main_replaced(target, main, went, now)

    def _main_replaced(self, target: Target, main: int, went: Mapping[int, Masks], now: float) -> None:
        """The main tid is now the thread that exec'd: it gets the original mask of the
        thread it was (``original_after_exec``; a mask none of them had is someone
        else's, and the thread theirs), and is counted afresh. Its row stays pinned
        where that thread was (our mask is still on it, and a thread it starts inherits
        ours) until the next period places it."""
        log.info("a main thread is another thread since an exec", pid=target.pid, tid=main)
        mask = None
        if not target.observe:
            try:
                mask = reassign_original(target, main, went, self.pinner)
                if mask is None:
                    self._hand_over(target, main)
                    return
            except HostError:
                return  # gone: the next period drops it
            self._unsaved.add(main)  # placed again once the new original is on disk
            if main == target.pid:
                self._rebase(target, self.pinner.records[main].original)
            self.on_change()
        if not count_afresh(target, main, mask, now, self.counters, self.proc_root, self._whole):
            self._drop_thread(target, main)

    def _rebase(self, target: Target, original: frozenset[int]) -> None:
        """The target's main thread is the one that exec'd, with ``original``: a thread
        the new program starts inherits its mask, so that is the target's own mask now
        (``_inherited_original``; they got the old main thread's). The process's other
        threads were all born after the exec (it ended the others), and those adopted
        before it was told, with the old one as their inherited original, get the new
        (also one whose own mask was the old original: the two cannot be told apart)."""
        old, target.base_original = target.base_original, original
        records = self.pinner.records
        for tid, th in target.threads.items():
            if th.process == target.pid and tid != target.pid and (rec := records.get(tid)) and rec.original == old:
                self.pinner.set_original(tid, original)  # a thread gone with the exec: dropped at the next listing
                self._unsaved.add(tid)

    def _give_back_carried(self, target: Target, main: int, before: frozenset[int], went: dict[int, Masks]) -> None:
        """A main thread not ours to place (the filter leaves it out, or someone else
        set its mask) whose mask changed since the last listing (``before``) to one we
        set on a thread that went: that thread exec'd and is the main tid now, with our
        mask. It gets that thread's original back, and is left alone."""
        try:
            mask, original = carried_original(target, main, went, self.pinner)
            if original is not None and mask != before:
                self.pinner.give_back(main, procfs.thread_start_time(main, self.proc_root), original)
                self.handed_over.pop(main, None)  # not the thread someone else set any more
        except HostError as exc:
            log.debug("mask not given back after an exec", pid=target.pid, tid=main, error=str(exc))

    # -- views ------------------------------------------------------------------------

    def describe(self, target: Target, now: float | None = None) -> dict:
        """The target as ``status`` shows it (``target_status.describe``); ``now``:
        when it is shown, for the names re-read then (None: as they are)."""
        return target_status.describe(target, now, rescan_s=self.config.rescan_s, proc_root=self.proc_root,
                                      every_cpu=self._every_cpu, handed_over=self.handed_over)
