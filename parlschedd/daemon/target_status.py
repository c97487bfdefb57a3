"""A target as ``status`` shows it (and ``attach`` replies with it): its entry in the
reply's JSON, from the engine's state of the target. The server adds the daemon's own
fields, and ``status_cache.py`` keeps the encoded replies."""

from __future__ import annotations

from collections.abc import Mapping

from parlschedd.daemon.cpuset import placed_on
from parlschedd.daemon.names import rename
from parlschedd.daemon.target import DomainCpus, Target


def describe(target: Target, now: float | None, *, rescan_s: float, proc_root: str, every_cpu: DomainCpus,
             handed_over: Mapping[int, int]) -> dict:
    """The target as ``status`` shows it. Names are the only thing the period does
    not read, so they are re-read here, when shown, at most once per ``rescan_s`` and
    RENAMES_PER_ROUND at a time (``names.rename``: a name of a target of N threads is
    at most N / RENAMES_PER_ROUND rounds old). ``every_cpu``: every CPU of every
    domain, where a target whose cpuset has none of them is placed; ``handed_over``:
    the threads handed over to someone else (tid -> start time)."""
    if now is not None and now - target.named_at >= rescan_s:
        rename(target, proc_root)
        target.named_at = now
    r = target.current()
    rows = zip(r.tids.tolist(), r.cpu.tolist(), r.domain.tolist(), r.utility.tolist(), r.pinned.tolist())
    return {
        "pid": target.pid, "name": target.name, "mode": target.mode, "uid": target.uid,
        "descendants": target.descendants,  # its descendants' threads are its own: each thread's "pid" says whose
        "thread_filter": target.thread_filter.pattern if target.thread_filter else None,  # attach --threads, a rule's threads
        "rule": target.rule,  # the index of the config rule that attached it; None: attached by a client
        "cpus": sorted(c for d in placed_on(target.cpus, every_cpu) for c in d),  # where its cpuset lets it be placed
        "migrations": target.migrations, "threads_ignored": len(target.ignored),
        "threads_handed_over": sum(tid in handed_over for tid in target.ignored),
        "threads_adopted": target.adopted,  # every thread managed since attach, those gone too (run counts them)
        # the time ("t") of the newest history sample this view shows (None: none yet), and which history
        # (its start on the daemon's clock, as the history reply says it: another after a restart or a
        # detach): run reads the samples after it for threads that came and went after its last view
        "history_t": target.history.newest_shown_t if target.history else None,
        "history_started": target.history.shown_started if target.history else None,
        "threads": [
            {"tid": tid, "pid": target.threads[tid].process, "name": target.threads[tid].name, "cpu": None if cpu < 0 else cpu,
             "domain": None if dom < 0 else dom, "utility": None if u != u else u, "pinned": pinned,
             "free": pinned and cpu < 0}
            for tid, cpu, dom, u, pinned in rows
        ],
    }
