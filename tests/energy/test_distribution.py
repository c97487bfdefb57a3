"""Algorithm 1: hand-checked cases and agreement with a literal transcription, by start
times and by the simulation."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parlschedd.energy.distribution import _by_start_times, distribute
from parlschedd.energy.model import waves


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


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(1e-3, 1e3), min_size=1, max_size=7), st.integers(0, 3000))
def test_matches_the_literal_algorithm_on_any_times(t1, nsp):
    """Times of fitted parameters, where start times seldom tie: the counts are the
    literal algorithm's; T_evo too but for the last bits (the simulation adds T1 up
    where the start times multiply it)."""
    t_evo, counts = distribute(np.array(t1), nsp)
    ref_evo, ref_counts = literal_algorithm_1(t1, nsp)
    assert counts.tolist() == ref_counts
    assert t_evo == pytest.approx(ref_evo, rel=1e-12)


def test_start_times_settle_the_rows_of_a_fit_and_leave_ties_and_zero_times_to_the_simulation(hpmoon):
    """The rows of a fit's time phase (random devices' times, NSp 1..1500) are settled
    from the start times without stepping, but for NSp below the number of devices (a
    tie at time 0); a tie at the cut (times 1 and 3, NSp 5: the 5th and 6th start at 3)
    and a device of zero time are left to the simulation, which settles them as the
    literal algorithm does."""
    rng = np.random.default_rng(0)
    nsp = np.arange(1, 1501)
    t1 = rng.uniform(0.5, 2.0, (8, 1, 6)) * waves(hpmoon, nsp)[None]
    _, counts, settled = _by_start_times(t1.reshape(-1, 6), np.tile(nsp, 8))
    assert settled.reshape(8, -1)[:, 5:].all() and not settled.reshape(8, -1)[:, :5].any()
    assert np.array_equal(counts[settled].reshape(8, -1, 6), distribute(t1, nsp)[1][:, 5:])
    ties = np.array([[1.0, 3.0], [1.0, 3.0], [2.0, 0.0]])
    assert _by_start_times(ties, np.array([4, 5, 9]))[2].tolist() == [True, False, False]
    for row, k in zip(ties.tolist(), (4, 5, 9), strict=True):
        assert distribute(np.array(row), k)[1].tolist() == literal_algorithm_1(row, k)[1]


@pytest.mark.parametrize("t1, nsp", [([1.6342664862384688e307], 11), ([1e-310], 1), ([1e-310, 1.0], 7),
                                     ([1e-308, 1e-308], 5), ([1e-300, 1e300], 10), ([1e305, 1e305], 10000),
                                     ([5e-324, 2.0, 3.0], 40)])
def test_extreme_times_are_the_literal_algorithms_without_a_warning(t1, nsp):
    """Times near the float's ends (a review): the product of a count and a time stayed
    finite where the literal algorithm's sum overflowed to inf, and rates and products
    past the float's range warned; those rows are the simulation's, as the literal."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t_evo, counts = distribute(np.array(t1), nsp)
    ref_evo, ref_counts = literal_algorithm_1(t1, nsp)
    assert counts.tolist() == ref_counts and (t_evo == ref_evo or t_evo == pytest.approx(ref_evo, rel=1e-12))


def test_unsigned_nsp_counts_as_signed():
    """An unsigned NSp wrapped round in the simulation's order (-nsp), which handed one
    row's subpopulations to another (a review)."""
    t1 = np.array([[1.0, 0.0], [1.0, 0.0]])  # a zero time: simulated
    expected = distribute(t1, np.array([0, 3]))
    for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
        got = distribute(t1, np.array([0, 3], dtype=dtype))
        assert got[1].tolist() == expected[1].tolist() == [[0, 0], [1, 2]] and got[0].tolist() == expected[0].tolist()
