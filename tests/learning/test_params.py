"""LearningParams and its RANGES: each parameter's interval, end by end, as the
docstring states it, and the one message a refused set of parameters gives
(test_config.py shows the config's own words, which read the same table)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parlschedd.learning.params import RANGES, LearningParams, in_range

# The intervals of LearningParams' docstring (spec: shared/spec/parlsched.md,
# "Parameters"), written out independently of RANGES: (low, low taken, high, high taken).
STATED = {
    "eps": (0.0, False, 1.0, True),         # (0, 1]
    "lam": (0.0, True, 1.0, True),          # [0, 1]
    "nu": (0.0, False, 1.0, True),          # (0, 1]
    "zeta": (0.0, True, 1.0, True),         # a probability
    "gamma": (0.0, False, 1.0, True),       # (0, 1]
    "eta": (1.0, False, math.inf, False),   # > 1
    "decay": (0.0, False, 1.0, True),       # 1.0 keeps the all-time maximum
    "sharpness": (1.0, True, math.inf, False),  # p >= 1
    "free_prior": (0.0, True, 1.0, True),   # [0, 1]
}


def test_every_numeric_parameter_has_a_range_and_only_those():
    """RANGES covers the numeric fields of LearningParams, no more: a field without a
    range would go unchecked, a range without a field would fail every check."""
    numeric = {f.name for f in dataclasses.fields(LearningParams) if f.type == "float"}
    assert set(RANGES) == numeric == set(STATED)


@pytest.mark.parametrize("name", sorted(STATED))
def test_each_range_is_the_stated_interval_end_by_end(name):
    """At each end of the stated interval: the end itself is in the range exactly when
    the interval is closed there, a step past it is out, a step inside is in."""
    low, low_taken, high, high_taken = STATED[name]
    assert in_range(name, low) is low_taken
    assert in_range(name, math.nextafter(low, -math.inf)) is False
    assert in_range(name, math.nextafter(low, math.inf)) is True
    if math.isinf(high):
        assert in_range(name, 1e300) is True
        assert in_range(name, 10**400) is False  # no float holds it: refused, not an OverflowError
    else:
        assert in_range(name, high) is high_taken
        assert in_range(name, math.nextafter(high, math.inf)) is False
        assert in_range(name, math.nextafter(high, -math.inf)) is True


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(STATED)), value=st.floats(allow_nan=True, allow_infinity=True))
def test_in_range_is_membership_of_the_stated_interval(name, value):
    """For any float, NaN and infinities included: in_range is membership of the
    stated interval; NaN is in none, +inf in none (not even eta's and sharpness's,
    which have no upper end: a step size or exponent of inf is no number to learn with
    either, and comparing with inf refuses it)."""
    low, low_taken, high, high_taken = STATED[name]
    above_low = value >= low if low_taken else value > low
    below_high = value <= high if high_taken else value < high
    assert in_range(name, value) is (above_low and below_high)


def test_the_defaults_are_the_spec_s_starting_point_and_valid():
    """The spec's "good default set": eps 0.05, lambda 0.02, nu 0.1, zeta 0.05,
    gamma 0.9, eta 1.2; made without an error."""
    p = LearningParams()
    assert (p.eps, p.lam, p.nu, p.zeta, p.gamma, p.eta) == (0.05, 0.02, 0.1, 0.05, 0.9, 1.2)
    assert (p.normalise, p.reward, p.free, p.seed) == ("global", "thread", False, None)


@pytest.mark.parametrize("changes, said", [
    ({"eps": 0.0}, "eps"),
    ({"lam": -0.01}, "lam"),
    ({"nu": 1.5}, "nu"),
    ({"zeta": 1.01}, "zeta"),
    ({"gamma": 0.0}, "gamma"),
    ({"eta": 1.0}, "eta"),
    ({"decay": 0.0}, "decay"),
    ({"sharpness": 0.5}, "sharpness"),
    ({"free_prior": -0.5}, "free_prior"),
    ({"eps": math.nan}, "eps"),
    ({"eta": math.inf}, "eta"),
    ({"sharpness": math.inf}, "sharpness"),
    ({"lam": -math.inf}, "lam"),
    ({"normalise": "local"}, "normalise"),
    ({"reward": "team"}, "reward"),
    ({"reward": "team", "decay": 0.0, "zeta": 2.0, "eps": 2.0, "normalise": "Global"},
     "eps, zeta, decay, normalise, reward"),
])
def test_parameters_out_of_range_are_refused_naming_each(changes, said):
    """The whole message a caller sees: every parameter out of range named once, in
    the order of RANGES then normalise and reward (not alphabetically, not in the
    order given), and where to read the ranges. eta = inf and sharpness = inf were
    taken (their ranges have no upper end): update_benchmarks then made the benchmark
    inf * 0 = NaN for a thread whose utility was 0."""
    with pytest.raises(ValueError) as raised:
        LearningParams(**changes)
    assert str(raised.value) == f"learning parameters out of range: {said} (see LearningParams)"


@pytest.mark.parametrize("reward", ["thread", "target"])
def test_both_rewards_and_both_normalisations_are_taken(reward):
    """Every choice the docstring names is accepted, with the range ends that are
    closed (lam 0, zeta 1, sharpness 1, free_prior 0 and 1, decay 1)."""
    for normalise in ("global", "thread"):
        p = LearningParams(reward=reward, normalise=normalise, lam=0.0, zeta=1.0, sharpness=1.0, decay=1.0,
                           free_prior=0.0, eps=1.0, nu=1.0, gamma=1.0)
        assert (p.reward, p.normalise) == (reward, normalise)
    assert LearningParams(free_prior=1.0, free=True, seed=7).free_prior == 1.0


def test_a_refused_change_leaves_nothing_half_made():
    """dataclasses.replace with a bad value is refused as the constructor is: the
    frozen parameters in use cannot be edited into a bad set."""
    p = LearningParams()
    with pytest.raises(ValueError, match="out of range: gamma "):
        dataclasses.replace(p, gamma=1.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.gamma = 1.5  # type: ignore[misc]
