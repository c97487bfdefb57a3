"""Telling an exec from another thread apart from threads that merely ended.

An exec from a thread other than the main one ends every other thread and gives the
thread that exec'd the main tid and start time (the kernel's de_thread). Every handle
the daemon keys by tid (its identity fd, its pidfd, a schedstat counter) then follows
that thread, but a perf counter stays with the old main thread, which is gone and
counts no more, and the main tid now carries the mask the daemon last set on the thread
that exec'd. From outside, the moment looks like the process's other threads ending
while the main one runs on, as a thread pool's end does. Two facts tell them apart:

- the main tid's mask changed at that moment to one the daemon set on a thread that
  went: that thread carried it through the exec;
- with a perf counter, once the main tid has run ``EXEC_RUN_NS`` of CPU time since
  (schedstat, which is per tid), the counter either moved (the same thread) or not at
  all (a gone thread's counter never moves again).

Pure: the engine reads the masks, counters and CPU times and acts on the answers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

EXEC_RUN_NS = 10_000_000  # CPU time the main tid must run before its counter's silence proves a new thread

Masks = tuple[frozenset[int], frozenset[int]]  # a thread's (original, last set) masks


@dataclass
class ExecWatch:
    """Started when every other thread of the process went while the main one stayed and
    its mask did not tell: until the main tid runs, whether it is still the same thread
    is not known. ``went`` holds the masks of the threads that went (those the daemon
    had adopted)."""

    run_ns: int  # the main tid's CPU time when the watch began
    counted: float  # its counter then
    went: Mapping[int, Masks]

    def verdict(self, counted: float, run_ns: int) -> bool | None:
        """True: the main tid is another thread (its counter is silent while it runs);
        False: the same thread (its counter moved); None: not known yet. A read of an
        interval the PMU did not count (NaN, multiplexing) tells nothing; a watch begun
        on one starts from the first read that counts."""
        if math.isnan(counted):
            return None
        if math.isnan(self.counted):
            self.counted, self.run_ns = counted, run_ns
            return None
        if counted != self.counted:
            return False
        if run_ns - self.run_ns >= EXEC_RUN_NS:
            return True
        return None


def original_after_exec(went: Mapping[int, Masks], mask: frozenset[int],
                        fallback: frozenset[int]) -> frozenset[int] | None:
    """The original mask of the thread that exec'd and is the main thread now, whose
    mask is ``mask``: the original of the thread that went with that mask last set.
    Several such threads with different originals cannot be told apart: ``fallback``
    (the process's own mask). None when no thread that went had that mask: someone else
    set it (the new program, an administrator), and the thread is theirs."""
    originals = _originals(went, mask)
    if not originals:
        return None
    return originals.pop() if len(originals) == 1 else fallback


def carried(went: Mapping[int, Masks], mask: frozenset[int]) -> bool:
    """Whether ``mask`` is one last set on a thread that went: a main tid whose mask
    changed to it is that thread now."""
    return bool(_originals(went, mask))


def _originals(went: Mapping[int, Masks], mask: frozenset[int]) -> set[frozenset[int]]:
    """The original masks of the threads that went with ``mask`` last set on them."""
    return {original for original, current in went.values() if current == mask}
