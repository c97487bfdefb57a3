"""Background: what it refuses when made (and the words it says), and the per-core
load ``at`` gives at each step for each kind (test_game.py shows one step of each)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parlschedd.sim.background import Background


@pytest.mark.parametrize("fields, said", [
    ({"kind": "bursty"}, "unknown background kind 'bursty'"),
    ({"kind": "Uniform"}, "unknown background kind 'Uniform'"),
    ({"cores": -1}, "background cores out of range"),
    ({"cores": 5}, "background cores out of range"),
    ({"kind": "time-varying", "period": -3}, "background period must be at least 1 step, got -3"),
    ({"kind": "non-uniform", "cores": 2, "load": 1.0, "period": 0},
     "background period must be at least 1 step, got 0"),
])
def test_a_background_that_cannot_be_is_refused_with_what_is_wrong(fields, said):
    """Each bad field is a ValueError when the background is made, with the words the
    caller sees (the whole message): a kind is matched exactly, the loaded cores are
    0..n_cores, and a period below 1 is refused whatever the kind."""
    with pytest.raises(ValueError) as raised:
        Background(4, **fields)
    assert str(raised.value) == said


def test_the_range_of_cores_includes_none_and_all():
    """cores = 0 (nothing loaded) and cores = n_cores (every core) are both taken, and a
    period of 1 is the shortest there is."""
    assert Background(4, "non-uniform", cores=0, load=2.0).at(0).tolist() == [0.0] * 4
    assert Background(4, "non-uniform", cores=4, load=2.0).at(0).tolist() == [2.0] * 4
    assert Background(4, "time-varying", cores=1, load=2.0, period=1).at(0).tolist() == [2.0, 0, 0, 0]


def test_uniform_means_nothing_else_runs_whatever_its_load_says():
    """kind="uniform" is no background at all: cores and load given beside it do not
    put work on any core, at any step."""
    bg = Background(4, "uniform", cores=3, load=5.0)
    for step in (0, 1, 99, 100, 12345):
        assert bg.at(step).tolist() == [0.0] * 4


def test_time_varying_is_on_for_period_steps_then_off_for_as_many():
    """Period 3: steps 0, 1, 2 on, 3, 4, 5 off, 6 on again; the load lands on the
    first ``cores`` cores only."""
    bg = Background(3, "time-varying", cores=2, load=0.5, period=3)
    seen = [bg.at(step).tolist() for step in range(8)]
    on, off = [0.5, 0.5, 0.0], [0.0, 0.0, 0.0]
    assert seen == [on, on, on, off, off, off, on, on]


def test_each_step_gets_an_array_of_its_own():
    """The caller (place_free) may add to the array it is given; that must not leak
    into the next step's background."""
    bg = Background(2, "non-uniform", cores=1, load=1.0)
    first = bg.at(0)
    first += 10.0
    assert bg.at(1).tolist() == [1.0, 0.0]


@settings(max_examples=200, deadline=None)
@given(n_cores=st.integers(1, 8), data=st.data(), load=st.floats(0, 100, allow_nan=False),
       period=st.integers(1, 20), step=st.integers(0, 10_000))
def test_at_is_the_load_on_the_first_cores_exactly_when_on(n_cores, data, load, period, step):
    """For every kind: the result has one float64 per core; the first ``cores`` carry
    ``load`` and the rest nothing when the background is on, and every core nothing
    when it is off. Non-uniform is always on, uniform never, time-varying exactly
    when ``step // period`` is even."""
    cores = data.draw(st.integers(0, n_cores))
    kind = data.draw(st.sampled_from(["uniform", "non-uniform", "time-varying"]))
    bg = Background(n_cores, kind, cores=cores, load=load, period=period)
    got = bg.at(step)
    assert got.shape == (n_cores,) and got.dtype == np.float64
    on = {"uniform": False, "non-uniform": True, "time-varying": (step // period) % 2 == 0}[kind]
    expected = [load if (on and core < cores) else 0.0 for core in range(n_cores)]
    assert got.tolist() == expected


@settings(max_examples=100, deadline=None)
@given(period=st.integers(1, 50), start=st.integers(0, 1000))
def test_time_varying_is_on_half_of_any_two_periods(period, start):
    """Over any 2 * period consecutive steps, wherever they start, a time-varying
    background is on for exactly ``period`` of them (the on and off phases are equally
    long)."""
    bg = Background(1, "time-varying", cores=1, load=1.0, period=period)
    assert sum(bg.at(step)[0] for step in range(start, start + 2 * period)) == period
