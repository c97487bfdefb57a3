"""Algorithm 1: hand-checked cases and agreement with a literal transcription."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from parlschedd.energy.distribution import distribute


def literal_algorithm_1(t1: list[float], nsp: int) -> tuple[float, list[int]]:
    """Lines 2-14 of Algorithm 1, with a Python list and a stable sort, as printed."""
    counts = [0] * len(t1)
    rows = [[j, 0.0] for j in range(len(t1))]
    while nsp > 0:
        j = rows[0][0]
        rows[0][1] += t1[j]
        rows.sort(key=lambda r: r[1])
        nsp -= 1
        counts[j] += 1
    return rows[-1][1], counts


def test_two_equal_devices_alternate_with_the_latest_ahead_on_ties():
    # d0 gets 4; d1 gets 4 and, tied with d0, stays first (stable sort); d1 gets 8.
    t_evo, counts = distribute(np.array([4.0, 4.0]), 3)
    assert t_evo == 8.0 and counts.tolist() == [1, 2]


def test_fast_device_takes_more_subpopulations():
    # times 1 and 3: d0 1, d1 3, d0 2, d0 3, then the tie at 3 goes to d0 (just updated) -> 4
    t_evo, counts = distribute(np.array([1.0, 3.0]), 5)
    assert counts.tolist() == [4, 1] and t_evo == 4.0


def test_first_devices_in_cluster_order_and_unused_devices():
    t_evo, counts = distribute(np.array([5.0, 1.0, 2.0]), 2)
    assert counts.tolist() == [1, 1, 0] and t_evo == 5.0


def test_batched_rows_with_different_nsp_are_independent():
    t1 = np.array([[[4.0, 4.0]] * 3, [[1.0, 3.0]] * 3])  # (2 param sets, 3 configs, 2 devices)
    nsp = np.array([1, 3, 5])
    t_evo, counts = distribute(t1, nsp)
    assert t_evo.shape == (2, 3) and counts.shape == (2, 3, 2)
    assert t_evo.tolist() == [[4.0, 8.0, 12.0], [1.0, 3.0, 4.0]]
    assert counts.sum(axis=-1).tolist() == [[1, 3, 5], [1, 3, 5]]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6).map(float), min_size=1, max_size=6), st.integers(0, 40))
def test_matches_the_literal_algorithm_including_ties(t1, nsp):
    t_evo, counts = distribute(np.array(t1), nsp)
    ref_evo, ref_counts = literal_algorithm_1(t1, nsp)
    assert counts.tolist() == ref_counts
    assert t_evo == ref_evo
