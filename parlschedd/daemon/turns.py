"""Per-thread work done a bounded share at a time, every thread in turn.

Some per-thread reads cost tens of microseconds each (a /proc file the kernel builds
on each read), so over a thousand threads they would hold a period back for tens of
ms: thread names (``names.py``) and, in observe mode, the CPU each thread last ran on
(the engine's ``_ran_elsewhere``) are read for a share of the threads each round.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable


def in_turn(tids: Iterable[int], last: int, share: int) -> tuple[list[int], int]:
    """Up to ``share`` of ``tids`` in tid order after ``last`` (the last tid of the
    round before), wrapping round, and the last of these: a bounded share of some
    per-thread work each round, every thread in turn however the set changes."""
    ordered = sorted(tids)
    if not ordered:
        return [], last
    after = bisect.bisect_right(ordered, last)
    batch = (ordered[after:] + ordered[:after])[:share]
    return batch, batch[-1]
