"""The load-balancing game on hand-computed cases."""

import numpy as np
import pytest

from parlschedd.sim.background import Background
from parlschedd.sim.game import (
    Machine, Threads, deviation_gains, is_nash, loads, lower_bound, makespan,
    optimal_makespan, poa_bound, utilities,
)

M = Machine(speeds=np.array([1.0, 2.0]), domain_of_core=np.array([0, 1]), penalty=0.5)
T = Threads(np.array([1.0, 2.0, 3.0]), home=np.array([0, 0, 1]))


@pytest.mark.parametrize("n_cores, n_domains, domains", [
    (4, 2, [[0, 1], [2, 3]]),
    (5, 2, [[0, 1, 2], [3, 4]]),
    (4, 3, [[0, 1], [2], [3]]),
    (6, 4, [[0, 1], [2], [3, 4], [5]]),
    (3, 3, [[0], [1], [2]]),
])
def test_uniform_machine_has_as_many_domains_as_asked(n_cores, n_domains, domains):
    """Contiguous domains whose sizes differ by at most one. Cutting every ceil(m / d)
    cores gave fewer domains when d does not divide m: 4 cores in 3 domains were two of
    two, 6 in 4 were three of two, and a simulated 3-node machine had 2 nodes."""
    assert Machine.uniform(n_cores, n_domains).domains == domains


@pytest.mark.parametrize("n_domains", [0, 5])
def test_uniform_machine_refuses_a_domain_without_a_core(n_domains):
    with pytest.raises(ValueError, match="domains"):
        Machine.uniform(4, n_domains)


def test_loads_and_utilities_by_hand():
    cpus = np.array([0, 1, 1])
    # core 0: 1.0 / 1 ; core 1: (2.0 * 1.5 remote + 3.0) / 2 = 3.0
    np.testing.assert_allclose(loads(M, T, cpus, np.zeros(2)), [1.0, 3.0])
    np.testing.assert_allclose(utilities(M, T, cpus, np.zeros(2)), [1.0, 2 / 3, 1.0])
    assert makespan(M, T, cpus, np.array([0.5, 0.0])) == 3.0


def test_lower_bound_by_hand():
    # max((6 + 1) / 3, 3 / 2)
    assert lower_bound(M, T, np.array([1.0, 0.0])) == 7 / 3


def test_lower_bound_keeps_background_on_its_core():
    """Background counted as movable work gave 4 here, where no placement beats 6 (the
    background alone), so even the optimum's ratio to the bound was 1.5."""
    m, t = Machine.uniform(4), Threads(np.ones(4))
    bg = np.array([6.0, 6.0, 0.0, 0.0])
    assert lower_bound(m, t, bg) == optimal_makespan(m, t, bg) == 6.0
    # water filling: core 1 alone to 2, above core 0's background of 1: both to 5 / 2
    assert lower_bound(Machine.uniform(2), Threads(np.ones(4)), np.array([1.0, 0.0])) == 2.5
    # the heaviest thread on the core where it finishes first: (4 + 0) / 2
    assert lower_bound(M, Threads(np.array([4.0])), np.array([0.0, 0.0])) == 2.0


def test_lower_bound_is_below_every_optimum():
    rng = np.random.default_rng(4)
    for _ in range(60):
        m = Machine(rng.uniform(0.5, 2.0, 3), np.array([0, 0, 1]))
        t = Threads(rng.uniform(0.2, 3.0, rng.integers(1, 5)))
        bg = rng.choice([0.0, 0.5, 4.0], 3)
        assert lower_bound(m, t, bg) <= optimal_makespan(m, t, bg) + 1e-9


def test_an_idle_thread_earns_nothing_and_is_indifferent():
    """A thread of no weight alone on a core had utility 0 / 0 (NaN), and NaN gains
    made every placement fail the Nash check, where equilibria exist (Prop 5.1)."""
    m, t, bg = Machine.uniform(3), Threads(np.array([1.0, 1.0, 0.0])), np.zeros(3)
    np.testing.assert_array_equal(utilities(m, t, np.array([0, 1, 2]), bg), [1.0, 1.0, 0.0])
    assert all(is_nash(m, t, np.array([0, 1, x]), bg) for x in range(3))
    assert not is_nash(m, t, np.array([0, 0, 2]), bg)


def test_nash_detection():
    m = Machine.uniform(2)
    t = Threads(np.array([1.0, 1.0]))
    assert is_nash(m, t, np.array([0, 1]), np.zeros(2))
    assert not is_nash(m, t, np.array([0, 0]), np.zeros(2))
    gains = deviation_gains(m, t, np.array([0, 0]), np.zeros(2))
    np.testing.assert_allclose(gains, [[1.0, 2.0], [1.0, 2.0]])


def test_optimal_makespan_by_exhaustive_search():
    m = Machine.uniform(2)
    t = Threads(np.array([3.0, 2.0, 2.0, 1.0]))
    assert optimal_makespan(m, t, np.zeros(2)) == 4.0
    assert poa_bound(2) == 4 / 3


def test_background_kinds():
    assert Background(4).at(0).sum() == 0
    nu = Background(4, "non-uniform", cores=2, load=3.0)
    np.testing.assert_array_equal(nu.at(0), [3, 3, 0, 0])
    np.testing.assert_array_equal(nu.at(1000), [3, 3, 0, 0])
    tv = Background(4, "time-varying", cores=1, load=2.0, period=10)
    assert tv.at(5)[0] == 2.0 and tv.at(15)[0] == 0.0 and tv.at(25)[0] == 2.0


def test_a_background_that_cannot_switch_is_refused_when_made():
    """A time-varying background of period 0 divided by zero at its first step, deep
    in a simulation; refused when made now, as the other bad fields are."""
    with pytest.raises(ValueError, match="period"):
        Background(4, "time-varying", cores=1, load=2.0, period=0)


def test_a_machine_whose_domains_are_not_numbered_from_zero_is_refused():
    """Domain labels index per-domain arrays (the free threads' placement, the first
    CPU of each domain): a machine labelled {0, 2} placed threads by the wrong row or
    out of bounds. Refused when made, saying what the labels must be."""
    with pytest.raises(ValueError, match="0, 1, ..."):
        Machine(np.ones(4), np.array([0, 0, 2, 2]))
    assert Machine(np.ones(4), np.array([1, 1, 0, 0])).domains == [[2, 3], [0, 1]]
