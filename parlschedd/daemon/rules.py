"""The config rules (``targets:``): which processes they match, attached and detached
as those come and go (at start, every ``rescan_s`` and at a reload), and the matches
they leave alone."""

from __future__ import annotations

import os
from collections.abc import Container

import structlog

from parlschedd import config as config_mod
from parlschedd.daemon.matching import CMDLINE_READ, matched
from parlschedd.daemon.engine import Engine, EngineError, Target
from parlschedd.host import procfs
from parlschedd.host.errors import HostError

log = structlog.get_logger("parlschedd")


class RuleMatcher:
    """Attaches what the rules match and detaches what they no longer match; reads
    processes under ``proc_root`` and cgroups under ``cgroup_root``."""

    def __init__(self, proc_root: str, cgroup_root: str) -> None:
        self.proc_root, self.cgroup_root = proc_root, cgroup_root
        # matches whose attach failed on a bug, left alone while they live (pid -> start
        # time): retried each rescan, one would log a traceback every rescan_s and hold
        # up the rest. Not in the state file, unlike the engine's left_alone: a restart
        # (an upgrade) tries them again.
        self.failed: dict[int, int] = {}
        # processes that talked to the control socket (pid -> start time), never matched
        # while they live: a client is not a workload, and `parlschedctl run`'s command
        # line holds its CMD's, which a name rule meant for CMD would match too (nor is
        # a parlschedctl process, before its first request: ``_is_client``).
        self.clients: dict[int, int] = {}
        # the daemon's ancestors a rule with descendants matches, never attached: the tree
        # of one holds the daemon, and of PID 1 (a name found only in its command line)
        # every process on the host. pid -> (start time, the rule's index): said once
        # while that rule matches it, again when another does (a reload).
        self.ancestors_matched: dict[int, tuple[int, int]] = {}

    def note_client(self, pid: int, engine: Engine) -> None:
        """Remember a peer of the control socket (SO_PEERCRED's pid; 0 from another
        pid namespace's view is none), once per process."""
        if pid > 0 and pid not in self.clients and (started := engine.start_time(pid)) is not None:
            self.clients[pid] = started

    def rescan(self, engine: Engine, rules: tuple[config_mod.TargetRule, ...], now: float) -> None:
        """Attach the processes the rules match, but while they live those detached by
        hand (``engine.left_alone``), those whose attach failed on a bug (``failed``)
        and the control socket's clients (``clients``)."""
        for pid, started in list(self.clients.items()):
            if engine.start_time(pid) != started:
                del self.clients[pid]  # exited: its pid may come back as a workload
        if not rules and not any(t.rule is not None for t in engine.targets.values()):
            self.ancestors_matched.clear()
            return
        wanted: dict[int, int] = {}
        for i, rule in enumerate(rules):
            for pid in self.matching(rule, attached=engine.targets) - self.clients.keys():
                wanted.setdefault(pid, i)
        for pid in [p for p in self.ancestors_matched if p not in wanted]:
            del self.ancestors_matched[pid]  # no rule matches it now: a match again is said again
        for left_alone in (engine.left_alone, self.failed):  # first: a pid that exited names no holder
            for pid, started in list(left_alone.items()):
                if engine.start_time(pid) != started:
                    del left_alone[pid]  # exited: its pid may come back as another process
        for pid, target in list(engine.targets.items()):
            if target.rule is None:
                continue
            if pid not in wanted or not _as_rule_says(target, rules[wanted[pid]]):
                why = ("its rule's observe, threads or descendants changed: attached again as it says" if pid in wanted
                       else "no config rule matches it any more")
                engine.detach(pid, again=pid in wanted, reason=why)  # restored; attached again below when a rule still wants it
            elif self._claimed_by_ancestor(pid, engine, rules, wanted):  # matched before its parent was: the parent's now
                engine.detach(pid, reason="an ancestor the rules manage with its descendants, or one detached by "
                                          "hand, holds it")
            else:
                target.rule = wanted[pid]  # the same settings, perhaps at another place in a reloaded config
        new = [pid for pid in wanted if pid not in engine.targets and pid not in engine.left_alone
               and pid not in self.failed and pid != os.getpid()]
        ancestors = self._daemons_ancestors() if any(rules[wanted[p]].descendants for p in new) else set()
        for pid in sorted(new, key=lambda p: (engine.start_time(p) or 0, p)):  # oldest first: a job before its children
            if self._is_client(pid) or self._run_by_client(pid) or self._claimed_by_ancestor(pid, engine, rules, wanted):
                continue
            if rules[wanted[pid]].descendants and pid in ancestors:
                self._ancestor_matched(pid, wanted[pid], engine)
                continue
            rule = rules[wanted[pid]]
            try:
                engine.attach(pid, now, observe=rule.observe, threads=rule.threads,
                              descendants=rule.descendants, rule=wanted[pid])
            except (EngineError, HostError) as exc:  # one process that could not be attached, not the rescan
                log.debug("rule match not attached", pid=pid, reason=str(exc))
            except Exception:  # a bug: that process, once, not the rescan
                log.exception("rule match not attached, left alone while it lives", pid=pid)
                self.failed[pid] = engine.start_time(pid) or 0

    def _claimed_by_ancestor(self, pid: int, engine: Engine, rules: tuple[config_mod.TargetRule, ...],
                             wanted: dict[int, int]) -> bool:
        """Whether an ancestor of ``pid`` holds it: a target with descendants (whose next
        listing adopts it), or a process detached by hand that a rule with descendants
        matches, whose tree is let go with it. A rule that matched each process of a job
        made its children targets of their own: one of two, depending on when it
        forked, and both again within rescan_s of a detach of the job that the rule
        matched. (A rule without descendants manages each process apart: so does it
        after a detach by hand of one of them.)"""
        # a non-root user's descendants target holds only that user's processes: not these
        holders = {p for p, t in engine.targets.items() if t.descendants and t.caller is None}
        holders.update(p for p in engine.left_alone if p in wanted and rules[wanted[p]].descendants)
        return bool(holders) and any(p in holders for p in procfs.ancestors(pid, self.proc_root))

    def _daemons_ancestors(self) -> set[int]:
        """The processes the daemon runs under, up to PID 1 (read each rescan: an
        ancestor that exits hands the daemon to another). PID 1 always: the ancestor of
        every process of its namespace, also of a daemon entered into it from outside
        (nsenter), whose parent is then none (ppid 0)."""
        return {1, *procfs.ancestors(os.getpid(), self.proc_root)} - {0}

    def _ancestor_matched(self, pid: int, rule: int, engine: Engine) -> None:
        said = (engine.start_time(pid) or 0, rule)
        if self.ancestors_matched.get(pid) == said:
            return
        self.ancestors_matched[pid] = said
        log.warning("config rule matches a process parlschedd runs under, left alone while it lives: with "
                    "descendants it would take in the daemon"
                    + (" and every process on the host" if pid == 1 else "")
                    + f"; narrow targets[{rule}] or set its descendants: false",
                    pid=pid, rule=f"targets[{rule}]")

    def _is_client(self, pid: int) -> bool:
        """A parlschedctl process, which a rescan may see before its first request
        makes it one of ``clients`` (still importing, for a tenth of a second)."""
        try:
            return procfs.runs(procfs.cmdline(pid, self.proc_root, limit=CMDLINE_READ), "parlschedctl")
        except HostError:
            return False

    def _run_by_client(self, pid: int) -> bool:
        """A process a parlschedctl process started (`run`'s CMD), which it attaches
        itself, on its terms: a rescan between CMD's exec and run's attach took it as
        the rule's (a `run --observe`'s CMD pinned), and run said CMD was never
        managed. The rules match it once that parent is gone (it was reparented). Not
        the children of any client of the socket: a job launcher that asks the
        daemon's status may start the jobs a rule is meant for."""
        try:
            return self._is_client(procfs.process_stat(pid, self.proc_root).ppid)
        except HostError:
            return False

    def first_matching(self, rules: tuple[config_mod.TargetRule, ...], pid: int) -> int | None:
        """The index of the first of ``rules`` that matches process ``pid``, or None (a
        detach's question, of a target: ``pid``'s names read alone, not every process's)."""
        return next((i for i, rule in enumerate(rules) if self.matching(rule, among={pid}, attached={pid})), None)

    def matching(self, rule: config_mod.TargetRule, among: set[int] | None = None,
                 attached: Container[int] = ()) -> set[int]:
        """The processes ``rule`` matches: of ``among`` alone when given, else of all
        (``attached``: ``matched``'s)."""
        return matched(rule, self.proc_root, self.cgroup_root, among, attached)


def _as_rule_says(target: Target, rule: config_mod.TargetRule) -> bool:
    """Whether a rule's target is managed as ``rule`` says (a reload may change it)."""
    threads = target.thread_filter.pattern if target.thread_filter else None
    return (target.observe, threads, target.descendants) == (rule.observe, rule.threads, rule.descendants)
