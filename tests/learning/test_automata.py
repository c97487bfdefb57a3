"""Level 2 rules (shared/spec/parlsched.md, "Level 2")."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parlschedd.learning import automata


def test_uniform_covers_only_the_domain_cores():
    x = automata.uniform(np.array([2, 4]), 4)
    np.testing.assert_allclose(x, [[0.5, 0.5, 0, 0], [0.25] * 4])


def test_reinforce_moves_towards_the_chosen_core_by_eps_times_reward():
    x = np.array([[0.5, 0.5]])
    out = automata.reinforce(x, np.array([1]), np.array([0.5]), eps=0.2)
    # x + 0.2 * 0.5 * (e_1 - x) = [0.45, 0.55]
    np.testing.assert_allclose(out, [[0.45, 0.55]])


def test_reinforce_with_no_measurement_leaves_the_row():
    x = np.array([[0.3, 0.7], [0.5, 0.5]])
    out = automata.reinforce(x, np.array([0, 0]), np.array([np.nan, 1.0]), eps=0.5)
    np.testing.assert_allclose(out[0], x[0])
    np.testing.assert_allclose(out[1], [0.75, 0.25])


def test_perturb_mixes_in_uniform_over_valid_cores_only():
    x = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    sigma = automata.perturb(x, automata.uniform(np.array([3, 2]), 3), lam=0.3)
    np.testing.assert_allclose(sigma, [[0.8, 0.1, 0.1], [0.15, 0.85, 0.0]])


@settings(max_examples=200, deadline=None)
@given(
    widths=st.lists(st.integers(1, 6), min_size=1, max_size=8),
    eps=st.floats(0.001, 1.0),
    lam=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_x_and_sigma_stay_probability_vectors(widths, eps, lam, seed):
    rng = np.random.default_rng(seed)
    width = np.array(widths)
    x = automata.uniform(width, 6)
    for _ in range(20):
        sigma = automata.perturb(x, automata.uniform(width, 6), lam)
        beta = automata.draw(sigma, rng)
        assert (beta < width).all(), "drew a core outside the domain"
        x = automata.reinforce(x, beta, rng.random(width.size) * 3 - 1, eps)  # rewards outside [0,1] are clipped
        for m in (x, automata.perturb(x, automata.uniform(width, 6), lam)):
            np.testing.assert_allclose(m.sum(axis=1), 1.0)
            assert (m >= -1e-15).all()
            assert (m[~automata.valid_columns(width, 6)] == 0).all()


def test_draw_follows_the_distribution():
    rng = np.random.default_rng(7)
    sigma = np.tile([0.1, 0.6, 0.3], (20000, 1))
    counts = np.bincount(automata.draw(sigma, rng), minlength=3) / 20000
    np.testing.assert_allclose(counts, [0.1, 0.6, 0.3], atol=0.015)


@pytest.mark.parametrize("eps", [0.05, 0.5])
def test_a_core_that_always_rewards_wins(eps):
    rng = np.random.default_rng(3)
    width = np.array([4])
    x = automata.uniform(width, 4)
    for _ in range(3000):
        beta = automata.draw(automata.perturb(x, automata.uniform(width, 4), 0.02), rng)
        x = automata.reinforce(x, beta, np.where(beta == 2, 1.0, 0.1), eps)
    assert x[0].argmax() == 2 and x[0, 2] > 0.8
