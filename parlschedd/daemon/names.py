"""Thread names, re-read a bounded share at a time.

A thread's name is read when it is adopted, and the period never reads it again; but a
thread names itself after it starts (pthread_setname_np), and a process that execs
changes its comm. Names are re-read later, in turns: when ``status`` shows them and
every rescan_s for a target with a thread filter (``rename``: the engine's ``refilter``
then leaves out the managed threads whose name no longer matches), and those of the
threads a filter left out (``refilter``), RENAMES_PER_ROUND threads a round at most.
"""

from __future__ import annotations

from parlschedd.daemon.target import Target
from parlschedd.daemon.turns import in_turn
from parlschedd.host import procfs
from parlschedd.host.errors import HostError

RENAMES_PER_ROUND = 128  # thread names re-read per rescan_s (for status, for a thread filter's refilter), about 4 ms


def rename(target: Target, proc_root: str) -> None:
    """Re-read the names of up to RENAMES_PER_ROUND of ``target``'s threads, taking
    turns in tid order: a child that execs, or a thread that names itself after
    adoption, changes its comm. One read costs about 30 us, so all 1024 threads at
    once held the status reply (and the next period) back by 30 ms. (The target's
    own name, which an exec changes, the engine's ``resync`` reads every rescan_s.)"""
    batch, target.renamed_last = in_turn(target.threads, target.renamed_last, RENAMES_PER_ROUND)
    for tid in batch:
        try:
            target.threads[tid].name = procfs.comm(tid, proc_root)
        except HostError:
            pass  # gone: the next period drops it
