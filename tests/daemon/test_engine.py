"""The engine's per-target arrays (Roster): rows follow their thread when threads join
and leave, so a thread's last counter reading is never paired with another's."""

from __future__ import annotations

import numpy as np

from parlschedd.daemon.engine import Roster, ThreadState


def test_aligned_carries_rows_over_and_starts_new_threads_from_adoption() -> None:
    threads = {tid: ThreadState(tid, 0, f"t{tid}", first_value=tid * 10.0, first_time=1.0) for tid in (1, 3, 4, 5)}
    old = Roster.aligned(np.array([1, 3, 5]), None, threads)
    old.last[:] = [100.0, 300.0, 500.0]
    old.since[:] = 2.0
    old.cpu[:] = [0, 1, 0]
    old.pinned[:] = [True, True, False]
    old.utility[:] = [1.0, 3.0, np.nan]
    new = Roster.aligned(np.array([3, 4, 5]), old, threads)  # 1 left, 4 joined
    assert new.tids.tolist() == [3, 4, 5]
    assert new.last.tolist() == [300.0, 40.0, 500.0]
    assert new.since.tolist() == [2.0, 1.0, 2.0]
    assert new.cpu.tolist() == [1, -1, 0]
    assert new.pinned.tolist() == [True, False, False]
    assert new.utility[0] == 3.0 and np.isnan(new.utility[1:]).all()
    assert new.domain.tolist() == [-1, -1, -1]


def test_aligned_from_empty_and_to_empty() -> None:
    threads = {7: ThreadState(7, 0, "t", first_value=5.0, first_time=0.5)}
    r = Roster.aligned(np.array([7]), Roster.empty(), threads)
    assert r.last.tolist() == [5.0] and r.cpu.tolist() == [-1]
    assert Roster.aligned(np.empty(0, dtype=np.int64), r, threads).tids.size == 0
