"""Which processes a config rule (``targets:``) matches, read from /proc and the
cgroup tree: what the daemon's rescans attach and what config check warns of (a rule
that matches PID 1), without the engine."""

from __future__ import annotations

import os
from collections.abc import Container

from parlschedd import config as config_mod
from parlschedd.host import cgroups, procfs
from parlschedd.host.errors import HostError
from parlschedd.patterns import Pattern, compile_pattern

CMDLINE_MATCHED = 4096  # characters of a command line (its arguments joined by spaces) that name rules look at
# bytes of it read, enough for those characters (UTF-8: 4 bytes at most each); a user's
# command lines of 6 MB each, read whole, held every rescan for seconds
CMDLINE_READ = 4 * CMDLINE_MATCHED


def matched(rule: config_mod.TargetRule, proc_root: str, cgroup_root: str, among: set[int] | None = None,
            attached: Container[int] = ()) -> set[int]:
    """The processes ``rule`` matches: of ``among`` alone when given, else of all.
    ``attached``: the daemon's targets, whose command line is read through another
    thread when the main one ended (``procfs.cmdline``'s ``any_thread``)."""
    pids = among
    if rule.cgroup is not None:
        controllers, path = config_mod.split_cgroup(rule.cgroup)
        try:
            members = set(cgroups.cgroup_procs(path, controllers, cgroup_root))
        except HostError:
            members = set()
        pids = members if pids is None else pids & members
    if rule.name is not None:
        pattern = compile_pattern(rule.name)
        candidates = pids if pids is not None else _all_pids(proc_root)
        pids = {p for p in candidates if _name_matches(pattern, p, proc_root, p in attached)}
    return pids or set()


def _all_pids(proc_root: str) -> set[int]:
    return {int(p) for p in os.listdir(proc_root) if p.isdigit()}


def _name_matches(pattern: Pattern, pid: int, proc_root: str, attached: bool) -> bool:
    try:
        if pattern.search(procfs.comm(pid, proc_root)):
            return True
        argv = procfs.cmdline(pid, proc_root, limit=CMDLINE_READ, any_thread=attached)
        return bool(pattern.search(" ".join(argv)[:CMDLINE_MATCHED]))
    except HostError:
        return False
