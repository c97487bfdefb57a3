from __future__ import annotations

import numpy as np
import pytest

from parlschedd.energy.metrics import fit_distance, nrmse, objective, relative_errors, rmse, rsd


def test_rmse_and_nrmse_by_hand():
    """Eqs. 10 and 15 on errors of +3 and -1: RMSE = sqrt((9 + 1) / 2) = sqrt(5), which
    differs from the mean absolute error (2) and the mean error (1). The measurements 1
    and 5 have population std 2 (the sample std would be 2 sqrt 2), so NRMSE = sqrt(5) / 2
    (a product would give 2 sqrt 5). Relative errors: 3 / 1 = 3 and -1 / 5 = -0.2."""
    predicted, measured = np.array([4.0, 4.0]), np.array([1.0, 5.0])
    assert rmse(predicted, measured) == pytest.approx(np.sqrt(5.0))
    assert nrmse(predicted, measured) == pytest.approx(np.sqrt(5.0) / 2.0)
    np.testing.assert_allclose(relative_errors(predicted, measured), [3.0, -0.2])


def test_rsd_eq17_uses_the_sample_std_over_repetitions():
    values = np.array([[1.0, 10.0], [3.0, 10.0]])
    np.testing.assert_allclose(rsd(values), [np.std([1, 3], ddof=1) / 2 * 100, 0.0])
    assert np.isnan(rsd(np.array([[0.0], [0.0]]))[0])
    assert np.isnan(rsd(np.array([[2.0, 5.0]]))).all(), "one fit: no spread known, not 0"


def test_best_fit_distance_and_time_only():
    assert fit_distance(np.array([0.3]), np.array([0.4]))[0] == pytest.approx(0.5)
    assert fit_distance(np.array([0.3]), np.array([np.nan]))[0] == pytest.approx(0.3)


def test_objectives():
    t, e = np.array([2.0, 4.0]), np.array([3.0, 1.0])
    assert objective("edp", t, e).tolist() == [6.0, 4.0]
    assert objective("energy", t, e).tolist() == [3.0, 1.0]
    with pytest.raises(ValueError):
        objective("cost", t, e)
