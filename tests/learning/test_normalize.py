import numpy as np
import pytest

from parlschedd.learning.normalize import normalise, update_scale


def test_global_scale_is_the_decayed_running_max_over_threads():
    s = update_scale(np.zeros(3), np.array([1.0, 4.0, np.nan]), 0.5, "global")
    np.testing.assert_allclose(s, [4.0] * 3)
    s = update_scale(s, np.array([1.0, 1.0, 1.0]), 0.5, "global")
    np.testing.assert_allclose(s, [2.0] * 3)


def test_thread_scale_is_per_thread():
    s = update_scale(np.array([2.0, 2.0]), np.array([1.0, 8.0]), 1.0, "thread")
    np.testing.assert_allclose(s, [2.0, 8.0])


def test_thread_scale_decays_each_threads_own_peak():
    """Per-thread divisors with the shipped config's decay 0.99 (config/parlschedd.yaml):
    max(0.99 * previous, this period's utility), thread by thread, by hand:

    - 100 then 50:  max(99, 50) = 99 (the peak decays, a lower utility does not set it);
    - 100 then 99.5: max(99, 99.5) = 99.5 (a utility above the decayed peak replaces it);
    - 0 then 0.25: 0.25 (a first small utility is its own divisor, so it earns the full 1);
    - 0 then NaN: 0 (no measurement, no peak);
    - 2 then NaN: 1.98 (an unmeasured thread's peak still decays).
    Then ten periods without a measurement take 100 to 100 * 0.99**10 = 90.4382075...
    """
    scale = np.array([100.0, 100.0, 0.0, 0.0, 2.0])
    s = update_scale(scale, np.array([50.0, 99.5, 0.25, np.nan, np.nan]), 0.99, "thread")
    np.testing.assert_allclose(s, [99.0, 99.5, 0.25, 0.0, 1.98])
    s = np.array([100.0])
    for _ in range(10):
        s = update_scale(s, np.array([np.nan]), 0.99, "thread")
    np.testing.assert_allclose(s, [90.4382075008804])


def test_normalise_clips_keeps_nan_and_sharpens():
    r = normalise(np.array([1.0, 4.0, np.nan, 8.0]), np.array([4.0, 4.0, 4.0, 4.0]), 2.0)
    np.testing.assert_allclose(r[[0, 1, 3]], [0.0625, 1.0, 1.0])
    assert np.isnan(r[2])


def test_zero_scale_gives_zero_reward():
    assert normalise(np.array([0.0]), np.array([0.0]))[0] == 0.0


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="unknown normalisation"):
        update_scale(np.zeros(1), np.zeros(1), 1.0, "median")
