"""The per-period work of the daemon, over the host adapters.

Each ``tick``: refresh every target's threads (adopt new ones, drop exited ones),
read counters into utilities (counter delta / monotonic time delta), step the
target's TwoLevelScheduler, and pin the threads whose CPU changed. The chain is
counters -> rates -> scheduler -> pin plan; the clock is passed in, so tests drive it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import structlog

from parlschedd.config import Config
from parlschedd.daemon.history import History
from parlschedd.host import procfs
from parlschedd.host.affinity import get_affinity
from parlschedd.host.base import Actuator, Counters
from parlschedd.host.errors import AccessDenied, HostError, InvalidMask, ThreadGone, TooManyFiles
from parlschedd.learning.scheduler import TwoLevelScheduler
from parlschedd.patterns import Pattern, PatternError, compile_pattern

log = structlog.get_logger("parlschedd.engine")


class EngineError(Exception):
    """A refused request; ``code`` is the protocol's error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class ThreadState:
    tid: int
    start_time: int
    name: str
    last_value: float
    last_time: float
    utility: float = float("nan")
    cpu: int | None = None
    domain: int | None = None
    pinned: bool = False


@dataclass
class Target:
    pid: int
    name: str
    uid: int
    observe: bool
    thread_filter: Pattern | None
    descendants: bool
    handle: procfs.ProcessHandle
    scheduler: TwoLevelScheduler
    threads: dict[int, ThreadState] = field(default_factory=dict)
    ignored: set[int] = field(default_factory=set)  # tids the thread filter left out
    migrations: int = 0  # affinity changes made
    base_mask: frozenset[int] | None = None  # the main thread's mask at attach
    rule: int | None = None  # index of the config rule that matched, None if attached by hand
    history: History | None = None

    @property
    def mode(self) -> str:
        return "observe" if self.observe else "pin"


class Engine:
    """Targets and their threads; no sockets, no signals, no sleeping."""

    def __init__(self, config: Config, domains: list[list[int]], counters: Counters, pinner: Actuator,
                 proc_root: str = procfs.PROC_ROOT, on_change: Callable[[], None] = lambda: None) -> None:
        self.config = config
        self.domains = domains
        self.counters = counters
        self.pinner = pinner
        self.proc_root = proc_root
        self.targets: dict[int, Target] = {}
        self.on_change = on_change  # called when the set of adopted threads changed
        self._single = {c: frozenset({c}) for d in domains for c in d}  # pin masks, made once
        self.read_errors = 0  # counter reads that failed for a thread still there

    # -- requests ---------------------------------------------------------------------

    def attach(self, pid: int, now: float, *, observe: bool = False, threads: str | None = None,
               descendants: bool = False, uid: int | None = None, rule: int | None = None) -> Target:
        """Start managing ``pid``. ``uid`` is the caller's (None: trusted, e.g. a config
        rule); a non-root caller may attach only its own processes."""
        try:
            handle = procfs.ProcessHandle(pid, self.proc_root)
        except ThreadGone:
            raise EngineError("no_such_process", f"no process with pid {pid}") from None
        try:
            owner = procfs.process_uids(pid, self.proc_root).real
            name = procfs.comm(pid, self.proc_root)
            if uid not in (None, 0) and uid != owner:  # before already_attached: no leak of who is managed
                raise EngineError("permission_denied", f"process {pid} belongs to uid {owner}, not to you (uid {uid})")
            if pid in self.targets:
                raise EngineError("already_attached", f"process {pid} is already attached")
            pattern = compile_pattern(threads) if threads else None
        except ThreadGone:
            handle.close()
            raise EngineError("no_such_process", f"process {pid} exited") from None
        except PatternError as exc:
            handle.close()
            raise EngineError("bad_request", f"invalid threads regex: {exc}") from None
        except BaseException:
            handle.close()
            raise
        scheduler = TwoLevelScheduler(self.domains, self.config.learning, self.config.domain_every)
        target = Target(pid, name, owner, observe, pattern, descendants, handle, scheduler, rule=rule,
                        history=History(self.config.history_periods, now))
        self.targets[pid] = target
        self._refresh(target, now)
        log.info("attached", pid=pid, name=name, mode=target.mode, threads=len(target.threads))
        return target

    def detach(self, pid: int, uid: int | None = None) -> int:
        """Stop managing ``pid`` and restore its threads; returns how many were restored."""
        target = self.targets.get(pid)
        if target is None or (uid not in (None, 0) and uid != target.uid):
            raise EngineError("not_attached", f"process {pid} is not attached")
        restored = self._release(target)
        log.info("detached", pid=pid, restored=restored)
        return restored

    def rename(self) -> None:
        """Re-read thread names (a child that execs changes its comm after adoption);
        called at the rescan interval, not every period."""
        for target in list(self.targets.values()):
            for th in list(target.threads.values()):
                try:
                    th.name = procfs.comm(th.tid, self.proc_root)
                except HostError:
                    pass  # gone: the next period drops it

    def detach_all(self) -> int:
        return sum(self._release(t) for t in list(self.targets.values()))

    # -- the period -------------------------------------------------------------------

    def tick(self, now: float) -> None:
        for target in list(self.targets.values()):
            try:
                if not target.handle.alive():
                    self._drop_target(target, "exited")
                    continue
                self._refresh(target, now)
                self._step(target, now)
            except Exception:  # a bug must cost one target's period, never the daemon
                log.exception("period failed for target", pid=target.pid)

    def _step(self, target: Target, now: float) -> None:
        """counters -> rates -> scheduler -> pins, for one target's period."""
        order = list(target.threads)
        values, gone = self.counters.read_many(order)
        if gone:
            lost = set(gone)
            values = values[[i for i, tid in enumerate(order) if tid not in lost]]
            for tid in gone:
                self._drop_thread(target, tid)
        states = list(target.threads.values())
        if not states:
            return
        last = np.array([th.last_value for th in states])
        since = np.array([th.last_time for th in states])
        failed = np.isnan(values)
        self.read_errors += int(failed.sum())
        with np.errstate(invalid="ignore", divide="ignore"):
            utility = np.where(failed | (now <= since), np.nan, (values - last) / (now - since))
        values = np.where(failed, last, values)
        tids = np.array([th.tid for th in states], dtype=np.int64)
        placement = target.scheduler.step(tids, utility)
        for th, value, u, cpu, dom in zip(states, values.tolist(), utility.tolist(),
                                          placement.cpus.tolist(), placement.domains.tolist()):
            th.last_value, th.last_time, th.utility, th.domain = value, now, u, dom
            if target.observe:
                th.cpu = self._running_on(th.tid)
            elif cpu != th.cpu or not th.pinned:
                self._pin(target, th, cpu)
        target.history.record(now, tids, utility, [-1 if th.cpu is None else th.cpu for th in states],
                              placement.domains)

    def _pin(self, target: Target, th: ThreadState, cpu: int) -> None:
        try:
            target.migrations += self.pinner.pin(th.tid, self._single[cpu])
        except ThreadGone:
            self._drop_thread(target, th.tid)
            return
        except (InvalidMask, AccessDenied) as exc:
            # retried every period; said once per thread, at the change, not each time
            (log.warning if th.pinned else log.debug)("pin refused", tid=th.tid, cpu=cpu, error=str(exc))
            th.pinned = False
            th.cpu = None  # not where we put it; /proc's last CPU may predate a cpuset change
            return
        th.cpu, th.pinned = cpu, True

    def _running_on(self, tid: int) -> int | None:
        try:
            return procfs.thread_stat(tid, self.proc_root).processor
        except HostError:
            return None

    # -- threads ----------------------------------------------------------------------

    def _pids(self, target: Target) -> list[int]:
        if not target.descendants:
            return [target.pid]
        try:
            return [target.pid, *procfs.descendants(target.pid, self.proc_root)]
        except ThreadGone:
            return [target.pid]

    def _refresh(self, target: Target, now: float) -> None:
        """Adopt the target's new threads and drop those gone. Each period costs one
        directory listing per process; a thread's name is read once, when it is new."""
        seen: set[int] = set()
        for pid in self._pids(target):
            try:
                tids = procfs.list_tids(pid, self.proc_root)
            except ThreadGone:
                continue
            seen.update(tids)
            for tid in tids:
                if tid not in target.threads and tid not in target.ignored:
                    self._adopt(target, tid, now)
        for tid in set(target.threads) - seen:
            self._drop_thread(target, tid)
        target.ignored &= seen

    def _adopt(self, target: Target, tid: int, now: float) -> None:
        try:
            name = procfs.comm(tid, self.proc_root)
            if target.thread_filter and not target.thread_filter.search(name):
                target.ignored.add(tid)
                return
            start = procfs.thread_start_time(tid, self.proc_root)
            self.counters.open(tid)
            value = self.counters.read(tid)
            if not target.observe:
                self.pinner.adopt(tid, start, self._inherited_original(target, tid))
        except ThreadGone:
            self.counters.close(tid)
            return
        except TooManyFiles as exc:
            self.counters.close(tid)
            log.error("out of file descriptors, thread not managed", tid=tid, error=str(exc))
            return
        except HostError as exc:
            self.counters.close(tid)
            log.warning("cannot manage thread", tid=tid, error=str(exc))
            return
        target.threads[tid] = ThreadState(tid, start, name, value, now)
        self.on_change()

    def _inherited_original(self, target: Target, tid: int) -> frozenset[int] | None:
        """For a thread born after attach whose mask is one the daemon set on its
        creator: the target's own mask, to restore instead of ours."""
        if target.base_mask is None:
            target.base_mask = get_affinity(target.pid)
            return None
        mask = get_affinity(tid)
        ours = {self._single[th.cpu] for th in target.threads.values() if th.pinned and th.cpu is not None}
        return target.base_mask if mask != target.base_mask and mask in ours else None

    def _drop_thread(self, target: Target, tid: int) -> None:
        target.threads.pop(tid, None)
        self.counters.close(tid)
        if not target.observe:
            self.pinner.forget(tid)
        log.debug("thread dropped", pid=target.pid, tid=tid)
        self.on_change()

    def _release(self, target: Target) -> int:
        restored = 0
        for tid in list(target.threads):
            if not target.observe:
                try:
                    self.pinner.restore(tid)
                    restored += 1
                except HostError as exc:
                    log.debug("restore skipped", tid=tid, error=str(exc))
            self._drop_thread(target, tid)
        self.targets.pop(target.pid, None)
        target.handle.close()
        self.on_change()
        return restored

    def _drop_target(self, target: Target, why: str) -> None:
        for tid in list(target.threads):
            self._drop_thread(target, tid)
        self.targets.pop(target.pid, None)
        target.handle.close()
        log.info("target dropped", pid=target.pid, reason=why)
        self.on_change()

    # -- views ------------------------------------------------------------------------

    def describe(self, target: Target) -> dict:
        return {
            "pid": target.pid, "name": target.name, "mode": target.mode, "uid": target.uid,
            "migrations": target.migrations,
            "threads": [
                {"tid": t.tid, "name": t.name, "cpu": t.cpu, "domain": t.domain,
                 "utility": None if t.utility != t.utility else t.utility, "pinned": t.pinned}
                for t in sorted(target.threads.values(), key=lambda t: t.tid)
            ],
        }
