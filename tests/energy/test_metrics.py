from __future__ import annotations

import numpy as np
import pytest

from parlschedd.energy.metrics import fit_distance, nrmse, objective, relative_errors, rmse, rsd


def test_rmse_and_nrmse_by_hand():
    measured = np.array([1.0, 3.0])  # population std 1
    assert rmse(np.array([2.0, 3.0]), measured) == pytest.approx(np.sqrt(0.5))
    assert nrmse(np.array([2.0, 3.0]), measured) == pytest.approx(np.sqrt(0.5))
    assert relative_errors(np.array([2.0, 3.0]), measured).tolist() == [1.0, 0.0]


def test_rsd_eq17_uses_the_sample_std_over_repetitions():
    values = np.array([[1.0, 10.0], [3.0, 10.0]])
    np.testing.assert_allclose(rsd(values), [np.std([1, 3], ddof=1) / 2 * 100, 0.0])
    assert np.isnan(rsd(np.array([[0.0], [0.0]]))[0])


def test_best_fit_distance_and_time_only():
    assert fit_distance(np.array([0.3]), np.array([0.4]))[0] == pytest.approx(0.5)
    assert fit_distance(np.array([0.3]), np.array([np.nan]))[0] == pytest.approx(0.3)


def test_objectives():
    t, e = np.array([2.0, 4.0]), np.array([3.0, 1.0])
    assert objective("edp", t, e).tolist() == [6.0, 4.0]
    assert objective("energy", t, e).tolist() == [3.0, 1.0]
    with pytest.raises(ValueError):
        objective("cost", t, e)
