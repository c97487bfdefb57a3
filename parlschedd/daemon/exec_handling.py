"""The engine's side of an exec from a thread other than the main one.

``exec_watch.py`` tells such an exec from threads that merely ended, on what it is
given; these functions read what it needs (the masks of the threads that went, the
main tid's mask, its counter and CPU time) and carry out what an exec changes: the
main tid gets the original mask of the thread it is now, and is counted afresh. What
an exec means for the thread's management, the engine decides: it hands the thread
over to someone else, or drops it, when these functions say so.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import structlog

from parlschedd.daemon.exec_watch import ExecWatch, Masks, carried, original_after_exec
from parlschedd.daemon.target import Target
from parlschedd.host import procfs
from parlschedd.host.base import Actuator, Counters, CounterSource, PinRecord
from parlschedd.host.errors import HostError

log = structlog.get_logger("parlschedd.engine")


def masks_that_went(target: Target, others: set[int], records: Mapping[int, PinRecord]) -> dict[int, Masks]:
    """The (original, last set) masks of those of ``others`` we had adopted: kept in
    ``target.went`` when dropped since the listing, still in the pinner's ``records``
    when the next listing is yet to drop them."""
    went: dict[int, Masks] = {}
    for tid in others:
        masks = target.went.get(tid)
        if masks is None and tid in records:
            masks = (records[tid].original, records[tid].current)
        if masks is not None:
            went[tid] = masks
    return went


def exec_went(target: Target, main: int, pinner: Actuator, proc_root: str) -> dict[int, Masks] | None:
    """The masks of the threads that went with an exec that carried one of our
    masks onto ``main`` (the others of its process all gone since the last listing,
    and ``main`` showing a mask we set on one of them); None when there was none."""
    others = target.others.get(main)
    if not others:
        return None
    try:
        if others & set(procfs.list_tids(main, proc_root)):
            return None
        mask = pinner.mask_of(main)
    except HostError:
        return None
    went = masks_that_went(target, others, pinner.records)
    return went if carried(went, mask) else None


def carried_original(target: Target, main: int, went: Mapping[int, Masks],
                     pinner: Actuator) -> tuple[frozenset[int], frozenset[int] | None]:
    """The main tid's mask now, and the original of the thread that went with that
    mask last set (``original_after_exec``; None: none went with it)."""
    mask = pinner.mask_of(main)
    return mask, original_after_exec(went, mask, target.base_original or mask)


def watch_exec(target: Target, main: int, went: Mapping[int, Masks], counters: Counters, proc_root: str) -> None:
    """Begin an :class:`ExecWatch` on ``main``, whose mask did not tell whether it is
    still the same thread; ``went``: the masks of the threads that went. Not with
    schedstat counters, which cannot tell."""
    if counters.source == CounterSource.SCHEDSTAT:
        return  # read by tid: it counts the main tid, whichever thread that is
    try:
        run_ns = procfs.thread_schedstat(main, proc_root).run_ns
        counted = counters.read(main)
    except HostError:
        return  # gone: the next period drops it
    target.exec_watches[main] = ExecWatch(run_ns, counted, went)


def check_exec(target: Target, main: int, counters: Counters, proc_root: str) -> Mapping[int, Masks] | None:
    """Settle an :class:`ExecWatch` once the main tid's counter and CPU time tell: the
    masks of the threads that went when the main tid is the thread that exec'd (the
    engine then treats it so), else None. Checked before the period reads the
    counters, so that a main thread counted afresh (or handed over) is read (or left
    out) like any other. A counter in error (the read fails while the thread runs)
    cannot tell: the watch ends."""
    watch = target.exec_watches[main]
    if main not in target.threads:
        del target.exec_watches[main]
        return None
    try:
        verdict = watch.verdict(counters.read(main), procfs.thread_schedstat(main, proc_root).run_ns)
    except HostError:
        del target.exec_watches[main]  # gone (the period drops it), or a counter in error
        return None
    if verdict is not None:
        del target.exec_watches[main]
    return watch.went if verdict else None


def reassign_original(target: Target, main: int, went: Mapping[int, Masks], pinner: Actuator) -> frozenset[int] | None:
    """Give the main tid, now the thread that exec'd, the original mask of the thread
    it was (``carried_original``) to restore; its mask now, or None when none of the
    threads that went had that mask: someone else set it, and the thread is theirs.
    Raises HostError when it is gone."""
    mask, original = carried_original(target, main, went, pinner)
    if original is None:
        return None
    pinner.reassign(main, original)
    return mask


def count_afresh(target: Target, main: int, mask: frozenset[int] | None, now: float, counters: Counters,
                 proc_root: str, whole: list[frozenset[int]]) -> bool:
    """Count the main tid afresh (a perf counter stays with the thread that went) and
    read its name again. In pin mode ``mask`` is our mask it carried, and its row stays
    pinned where that puts it (on its CPU, or free in its domain: ``whole``, each
    domain's CPUs) until the next period places it. False, logged, when it cannot be
    counted: the engine drops it."""
    counters.close(main)
    try:
        counters.open(main)
        counted = counters.read(main)
        target.threads[main].name = procfs.comm(main, proc_root)
    except HostError as exc:
        log.warning("main thread not counted after an exec", pid=target.pid, tid=main, error=str(exc))
        return False
    r = target.current()
    row = int(np.searchsorted(r.tids, main))
    r.last[row], r.since[row] = counted, now
    if mask is None:  # observe mode: the CPU last read was the thread's that went; read the new one's at once
        r.cpu[row] = -1
    else:  # pin mode
        r.cpu[row] = next(iter(mask)) if len(mask) == 1 else -1  # a whole domain: free
        r.domain[row] = next((d for d, cpus in enumerate(whole) if mask <= cpus), r.domain[row])
    return True


def settle_exec(target: Target, main: int, pinner: Actuator, proc_root: str) -> None:
    """At a release: a main thread that an exec since the last listing left with a
    mask we set on the thread that exec'd (not the one we last set on main) gets
    that thread's original to restore (as the engine's ``_main_replaced`` gives it),
    instead of being left with our mask as one someone else set."""
    record = pinner.records.get(main)
    went = None if record is None else exec_went(target, main, pinner, proc_root)
    if went is None:
        return
    try:  # a mask as last set: threads that ended, or an exec from main itself (as the engine's _after_the_others_went)
        mask, original = carried_original(target, main, went, pinner)
        if original is not None and mask != record.current:
            pinner.reassign(main, original)
    except HostError:
        pass  # gone
