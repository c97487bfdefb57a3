"""Level 1 rules (shared/spec/parlsched.md, "Level 1")."""

import numpy as np

from parlschedd.learning import aspiration
from parlschedd.learning.aspiration import Benchmarks


def test_aspiration_is_a_discounted_running_average():
    rho = aspiration.update_aspiration(np.array([10.0]), np.array([20.0]), nu=0.1)
    np.testing.assert_allclose(rho, [11.0])


def test_benchmarks_three_branches():
    eta = 2.0
    bench = Benchmarks(lower=np.array([5.0, 5.0, 5.0]), upper=np.array([10.0, 10.0, 10.0]))
    rho = np.array([12.0, 7.0, 4.0])  # above bbar, between, below b
    out = aspiration.update_benchmarks(rho, bench, eta)
    np.testing.assert_allclose(out.upper, [12.0, 10.0, 8.0])
    np.testing.assert_allclose(out.lower, [6.0, 5.0, 4.0])
    assert (out.lower < out.upper).all()


def test_benchmark_boundaries_belong_to_the_right_branch():
    """rho == bbar raises both benchmarks and rho == b leaves them unchanged (step 3's
    ">=" and "<"). With bbar != eta * b the branches give different benchmarks at the
    boundaries, so a ">" or "<=" would show: b = 4, bbar = 10, eta = 2.

    - rho = 10 == bbar, raise: bbar = 10, b = 10 / 2 = 5 (unchanged would keep b = 4);
    - rho = 4 == b, unchanged: bbar = 10, b = 4 (lowering would give bbar = 2 * 4 = 8).
    """
    bench = Benchmarks(lower=np.array([4.0, 4.0]), upper=np.array([10.0, 10.0]))
    out = aspiration.update_benchmarks(np.array([10.0, 4.0]), bench, eta=2.0)
    np.testing.assert_allclose(out.upper, [10.0, 10.0])
    np.testing.assert_allclose(out.lower, [5.0, 4.0])


def test_better_replies_with_gamma():
    rho = np.array([1.0, 3.0, 2.0])
    alpha = np.array([0, 1, 1])  # domain means: 1.0 and 2.5
    br = aspiration.better_replies(rho, alpha, 2, gamma=0.9)
    # thread 0: 1.0 < 0.9 * 2.5 -> domain 1 is better; its own domain never is
    assert br.tolist() == [[False, True], [False, False], [False, False]]
    br = aspiration.better_replies(rho, alpha, 2, gamma=0.3)
    assert not br.any()  # 1.0 < 0.75 is false: a small gamma demands a clearly better domain


def test_empty_domain_is_a_better_reply_for_everyone():
    rho = np.array([1.0, 4.0])
    alpha = np.array([0, 1])  # domain 2 is empty
    br = aspiration.better_replies(rho, alpha, 3, gamma=1.0)
    assert br[0].tolist() == [False, True, True]
    assert br[1].tolist() == [False, False, True]


def test_a_closed_domain_is_no_better_reply_even_empty():
    """A domain with no CPU the threads may use (outside their cpuset) is in no set,
    though it is empty and its mean therefore unknown."""
    rho = np.array([1.0, 4.0])
    alpha = np.array([0, 1])  # domains 2 and 3 are empty, 2 is closed
    br = aspiration.better_replies(rho, alpha, 4, gamma=1.0, open_domains=np.array([True, True, False, True]))
    assert br[0].tolist() == [False, True, False, True]
    assert br[1].tolist() == [False, False, False, True]


def test_unknown_aspiration_is_ignored_in_means_and_gets_no_replies():
    rho = np.array([1.0, np.nan, 3.0])
    alpha = np.array([0, 0, 1])
    means = aspiration.domain_means(rho, alpha, 3)
    assert means[0] == 1.0 and means[1] == 3.0 and np.isnan(means[2])
    assert not aspiration.better_replies(rho, alpha, 3, gamma=1.0)[1].any()


def test_unsatisfied_threads_move_satisfied_ones_explore_with_zeta():
    rng = np.random.default_rng(0)
    br = np.array([[False, True], [False, True]])
    rho = np.array([1.0, 10.0])
    lower = np.array([2.0, 5.0])  # thread 0 unsatisfied, thread 1 satisfied
    movers = [aspiration.choose_mover(rho, lower, br, zeta=0.0, rng=rng) for _ in range(50)]
    assert set(movers) == {(0, 1)}
    movers = [aspiration.choose_mover(rho, lower, br, zeta=1.0, rng=rng) for _ in range(200)]
    assert {m[0] for m in movers} == {0, 1}  # both want to move, one at a time


def test_no_move_with_empty_better_reply_set():
    rng = np.random.default_rng(0)
    br = np.zeros((2, 2), dtype=bool)
    assert aspiration.choose_mover(np.array([0.0, 0.0]), np.array([1.0, 1.0]), br, 1.0, rng) is None


def test_a_domain_exactly_gamma_times_better_is_no_better_reply():
    """Step 4's inequality is strict: rho_i < gamma * mean. At equality the other
    domain is not better (a "<=" would move threads between equal domains)."""
    rho = np.array([2.0, 2.0])
    alpha = np.array([0, 1])  # one thread a domain, means 2 and 2
    assert not aspiration.better_replies(rho, alpha, 2, gamma=1.0).any()
    lower = np.array([np.nextafter(2.0, 0.0), 2.0])  # thread 0 a hair below: domain 1 is better for it
    assert aspiration.better_replies(lower, alpha, 2, gamma=1.0).tolist() == [[False, True], [False, False]]


def test_a_thread_at_its_lower_benchmark_is_satisfied():
    """Step 5: unsatisfied is rho(tau+1) < b(tau), strictly; at b it stays (zeta 0)."""
    rng = np.random.default_rng(0)
    br = np.array([[False, True]])
    assert aspiration.choose_mover(np.array([2.0]), np.array([2.0]), br, zeta=0.0, rng=rng) is None
    assert aspiration.choose_mover(np.array([1.999]), np.array([2.0]), br, zeta=0.0, rng=rng) == (0, 1)


def test_the_new_domain_is_drawn_uniformly_from_the_better_replies():
    """Step 5: the mover's new domain is uniform over its set, not its first or last."""
    rng = np.random.default_rng(1)
    br = np.array([[False, True, True, True]])
    drawn = [aspiration.choose_mover(np.array([1.0]), np.array([2.0]), br, zeta=0.0, rng=rng)[1] for _ in range(600)]
    counts = np.bincount(drawn, minlength=4)
    assert counts[0] == 0 and all(150 <= c <= 250 for c in counts[1:])  # 200 each expected, sd 11.5: +-50 is 4.3 sd
