"""in_turn: a bounded share of the threads each round, every thread in turn."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from parlschedd.daemon.turns import in_turn


def test_a_round_takes_the_share_after_the_last_and_wraps_round() -> None:
    assert in_turn([5, 1, 3, 9], 0, 2) == ([1, 3], 3)
    assert in_turn([5, 1, 3, 9], 3, 2) == ([5, 9], 9)
    assert in_turn([5, 1, 3, 9], 9, 3) == ([1, 3, 5], 5)


def test_a_last_tid_that_left_the_set_resumes_after_its_place() -> None:
    assert in_turn([10, 20, 30], 15, 1) == ([20], 20)


def test_no_threads_keep_the_last() -> None:
    assert in_turn([], 7, 4) == ([], 7)


@given(st.sets(st.integers(1, 1000), min_size=1, max_size=50), st.integers(1, 10))
def test_rounds_over_a_fixed_set_reach_every_thread(tids: set[int], share: int) -> None:
    seen: set[int] = set()
    last = 0
    for _ in range(-(-len(tids) // share)):
        batch, last = in_turn(tids, last, share)
        assert len(batch) == min(share, len(tids))
        seen.update(batch)
    assert seen == tids
