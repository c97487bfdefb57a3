"""The eq. 5 baseline: static node workloads, and linear regression that recovers known parameters."""

from __future__ import annotations

import numpy as np
import pytest

from parlschedd.energy.baseline import BaselineModel, BaselineParams, node_workload, predict_energy, predict_time


def test_node_workload_deals_subpopulations_round_robin_to_devices(hpmoon):
    x = node_workload(hpmoon, np.array([1, 3, 7])) / hpmoon.run.generations
    # nsp 1: node1 gets 1 of ceil(3840/37) = 104 rounds; nsp 3: node1 two, node2 one of ceil(1280/..)
    assert x[0].tolist() == [104, 0, 0]
    assert x[1].tolist() == [2 * 35, 1 * 42, 0]
    assert x[2].tolist() == [3 * 15, 2 * 18, 2 * 12]  # nsp 7: SS_p = 548, C = 37, 31, 47


def test_fit_recovers_parameters_of_data_it_generated(hpmoon):
    truth = BaselineParams(np.array([0.03, 0.05, 0.02]), 4.0, np.array([200.0, 150.0, 230.0]),
                           np.array([160.0, 130.0, 170.0]), 20000.0)
    nsp = np.arange(1, 33)
    x = node_workload(hpmoon, nsp)
    t, e = predict_time(hpmoon, truth, x), predict_energy(truth, x)
    fitted = BaselineModel(hpmoon).fit(nsp, t, e)
    bt, be = fitted.predict(nsp)
    np.testing.assert_allclose(bt, t, rtol=1e-6)
    np.testing.assert_allclose(be, e, rtol=1e-5)


def test_on_the_shared_data_and_time_only(hpmoon, measured):
    full = BaselineModel(hpmoon).fit(measured.nsp, measured.time_s, measured.energy_wh)
    t_only = BaselineModel(hpmoon).fit(measured.nsp, measured.time_s)
    t, e = full.predict(measured.nsp)
    assert np.all(t > 0) and np.all(e > 0)
    assert np.all(np.isnan(t_only.predict(measured.nsp)[1]))
    again = BaselineModel.from_dict(hpmoon, full.to_dict()).predict(measured.nsp)
    np.testing.assert_allclose(again[0], t)


def test_predict_before_fit_fails(hpmoon):
    with pytest.raises(RuntimeError, match="not fitted"):
        BaselineModel(hpmoon).predict(np.array([1]))
