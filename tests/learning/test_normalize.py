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


def test_normalise_clips_keeps_nan_and_sharpens():
    r = normalise(np.array([1.0, 4.0, np.nan, 8.0]), np.array([4.0, 4.0, 4.0, 4.0]), 2.0)
    np.testing.assert_allclose(r[[0, 1, 3]], [0.0625, 1.0, 1.0])
    assert np.isnan(r[2])


def test_zero_scale_gives_zero_reward():
    assert normalise(np.array([0.0]), np.array([0.0]))[0] == 0.0


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="unknown normalisation"):
        update_scale(np.zeros(1), np.zeros(1), 1.0, "median")
