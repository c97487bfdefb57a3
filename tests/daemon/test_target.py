"""parlschedd/daemon/target.py on its own: a target's roster, whose rows follow their
threads as threads join and leave, and the realignment ``Target.current`` does once
they did. target.py reads nothing of /proc: a Target's process handle, exit watch and
scheduler are the engine's (tests/daemon/test_engine.py attaches real processes) and
stay None here."""

from __future__ import annotations

import numpy as np
import pytest

from parlschedd.daemon.target import Roster, Target, ThreadState

COLUMNS = ("last", "since", "utility", "cpu", "domain", "pinned")


def _threads(*tids: int) -> dict[int, ThreadState]:
    """Threads adopted with a counter reading of ten times their tid, at tid + 0.5 s."""
    return {tid: ThreadState(tid, 0, f"t{tid}", first_value=tid * 10.0, first_time=tid + 0.5) for tid in tids}


def _marked(roster: Roster) -> Roster:
    """``roster`` with a value of its own in every column of every row, none of them
    a new row's."""
    t = roster.tids
    roster.last[:], roster.since[:], roster.utility[:] = t * 100.0, t * 1000.0, t / 10
    roster.cpu[:], roster.domain[:], roster.pinned[:] = t % 7, t % 3, True
    return roster


def _target(observe: bool = False) -> Target:
    return Target(pid=1, name="t", uid=0, observe=observe, thread_filter=None, descendants=False,
                  handle=None, scheduler=None, exits=None)  # type: ignore[arg-type]


def test_an_empty_roster_has_every_column_empty_and_of_its_kind() -> None:
    r = Roster.empty()
    assert {name: getattr(r, name).size for name in ("tids", *COLUMNS)} == dict.fromkeys(("tids", *COLUMNS), 0)
    assert (r.tids.dtype, r.cpu.dtype, r.domain.dtype, r.pinned.dtype) == (np.int64, np.int64, np.int64, np.bool_)


def test_a_new_row_reads_from_the_adoption_and_is_neither_measured_nor_placed() -> None:
    r = Roster.aligned(np.array([3, 9]), None, _threads(3, 9))
    assert r.last.tolist() == [30.0, 90.0] and r.since.tolist() == [3.5, 9.5]
    assert np.isnan(r.utility).all() and r.cpu.tolist() == r.domain.tolist() == [-1, -1]
    assert r.pinned.tolist() == [False, False]
    assert (r.cpu.dtype, r.domain.dtype, r.pinned.dtype) == (np.int64, np.int64, np.bool_)


def test_every_column_of_a_known_thread_follows_it_to_its_new_row() -> None:
    """Threads 2 left and 8 joined: 4 and 6 move up a row with all six of their
    numbers, so no thread's reading is paired with another's."""
    threads = _threads(2, 4, 6, 8)
    old = _marked(Roster.aligned(np.array([2, 4, 6]), None, threads))
    new = Roster.aligned(np.array([4, 6, 8]), old, threads)
    for name in COLUMNS:
        assert getattr(new, name)[:2].tolist() == getattr(old, name)[1:].tolist(), name
    assert (new.last[2], new.since[2], new.cpu[2], new.domain[2], bool(new.pinned[2])) == (80.0, 8.5, -1, -1, False)


@pytest.mark.parametrize("new_tids", [[1, 5], [30, 40], [1, 20, 30]], ids=["all below", "all above", "around"])
def test_tids_below_or_above_every_known_one_start_afresh(new_tids: list[int]) -> None:
    """A tid sorted before the first known one, or after the last, is a new thread
    too (not the first or last row's, and no index past the end)."""
    threads = _threads(10, 20, *new_tids)
    old = _marked(Roster.aligned(np.array([10, 20]), None, threads))
    new = Roster.aligned(np.array(new_tids), old, threads)
    assert new.last.tolist() == [2000.0 if t == 20 else t * 10.0 for t in new_tids]
    assert new.cpu.tolist() == [20 % 7 if t == 20 else -1 for t in new_tids]


def test_a_reading_gives_each_row_its_counters_increase_per_second_since_its_last() -> None:
    """Threads 3 and 9 (adopted reading 30 at 3.5 s and 90 at 9.5 s) read 50 and 150
    at 13.5 s: 20 over 10 s and 60 over 4 s. The readings become the rows' last."""
    r = Roster.aligned(np.array([3, 9]), None, _threads(3, 9))
    assert r.read(np.array([50.0, 150.0]), 13.5) == 0
    assert r.utility.tolist() == [2.0, 15.0]
    assert r.last.tolist() == [50.0, 150.0] and r.since.tolist() == [13.5, 13.5]


def test_a_row_not_read_is_not_measured_and_its_next_rate_spans_both_periods() -> None:
    r = Roster.aligned(np.array([3, 9]), None, _threads(3, 9))
    assert r.read(np.array([np.nan, 150.0]), 13.5) == 1
    assert np.isnan(r.utility[0]) and r.utility[1] == 15.0
    assert (r.last[0], r.since[0]) == (30.0, 3.5)  # as adopted
    assert r.read(np.array([70.0, 160.0]), 23.5) == 0
    assert r.utility.tolist() == [2.0, 1.0]  # 40 over the 20 s since 3.5 s; 10 over 10 s


def test_a_row_whose_clock_did_not_advance_is_not_measured() -> None:
    """A read at the time of the last (a period right after adoption) has no rate:
    NaN, never an infinity or a division by zero; the reading becomes the last, as the
    next period's read comes at the same offset from its stamp."""
    r = Roster.aligned(np.array([3]), None, _threads(3))
    with np.errstate(all="raise"):
        assert r.read(np.array([40.0]), 3.5) == 0
    assert np.isnan(r.utility[0]) and (r.last[0], r.since[0]) == (40.0, 3.5)
    r.read(np.array([70.0]), 23.5)
    assert r.utility.tolist() == [1.5]  # 30 over the 20 s since 3.5 s


def test_the_rows_to_move_are_those_placed_anew_unpinned_or_free_in_another_domain() -> None:
    """Rows: 0 stays on its core; 1 gets another core; 2 is not pinned yet (the same
    core drawn); 3 is free (-1) and stays in its domain; 4 is free and changes domain;
    5 goes from a core to free in its domain."""
    r = Roster.aligned(np.arange(6), None, _threads(*range(6)))
    r.cpu[:] = [0, 1, 2, -1, -1, 5]
    r.domain[:] = [0, 0, 0, 1, 1, 0]
    r.pinned[:] = [True, True, False, True, True, True]
    cpus = np.array([0, 3, 2, -1, -1, -1])
    domains = np.array([0, 0, 0, 1, 0, 0])
    assert r.to_move(cpus, domains).tolist() == [1, 2, 4, 5]


def test_a_targets_roster_is_realigned_only_once_its_threads_changed() -> None:
    """``current`` keeps the roster while the target is not stale, whatever its
    threads; once stale, it realigns on the threads in tid order (whatever order they
    were adopted in), carrying the known rows over, and is not stale any more."""
    target = _target()
    target.threads = _threads(7, 3)
    target.stale = True
    r = target.current()
    assert r.tids.tolist() == [3, 7] and r.tids.dtype == np.int64 and not target.stale
    _marked(r)
    target.threads.update(_threads(5))
    assert target.current() is r
    target.stale = True
    del target.threads[7]
    now = target.current()
    assert now.tids.tolist() == [3, 5] and now.last.tolist() == [300.0, 50.0] and not target.stale
    assert target.current() is now


def test_a_target_with_no_threads_left_has_an_empty_roster() -> None:
    target = _target()
    target.threads = _threads(4)
    target.stale = True
    target.current()
    target.threads.clear()
    target.stale = True
    assert target.current().tids.size == 0 and target.current().pinned.size == 0


@pytest.mark.parametrize("observe, mode", [(True, "observe"), (False, "pin")])
def test_a_targets_mode_is_said_as_status_says_it(observe: bool, mode: str) -> None:
    assert _target(observe).mode == mode
