"""The eq. 5 baseline: static node workloads, and linear regression that recovers known parameters."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from parlschedd.energy.baseline import (BaselineModel, BaselineParams, fit_time, node_workload, predict_energy,
                                        predict_time)
from parlschedd.energy.cluster import parse_cluster
from tests.energy.conftest import TINY


def test_node_workload_deals_subpopulations_round_robin_to_devices(hpmoon):
    x = node_workload(hpmoon, np.array([1, 3, 7])) / hpmoon.run.generations
    # nsp 1: node1 gets 1 of ceil(3840/37) = 104 rounds; nsp 3: node1 two, node2 one of ceil(1280/..)
    assert x[0].tolist() == [104, 0, 0]
    assert x[1].tolist() == [2 * 35, 1 * 42, 0]
    assert x[2].tolist() == [3 * 15, 2 * 18, 2 * 12]  # nsp 7: SS_p = 548, C = 37, 31, 47


def test_time_and_energy_are_eq5_and_node_level_eq7_by_hand(tiny):
    """predict_time is eq. 5 and predict_energy eq. 7 at node level (module docstring),
    checked on a 2-node workload computed by hand. theta = (2, 3) s per round and
    x = [[10, 5], [4, 8]] rounds give node times [[20, 15], [8, 24]] s, slowest 20 and 24:

    - time: NGm * overhead_s + slowest = 2 * 1.5 + (20, 24) = (23, 27) s;
    - energy: active Pow_i * T_i, idle Powidle_i * (slowest - T_i), plus overhead_j:
      row 0: 100*20 + 50*15 + 10*0 + 20*5 + 3600 = 6450 J = 6450/3600 Wh;
      row 1: 100*8 + 50*24 + 10*16 + 20*0 + 3600 = 5760 J = 1.6 Wh.
    """
    p = BaselineParams(np.array([2.0, 3.0]), 1.5, np.array([100.0, 50.0]), np.array([10.0, 20.0]), 3600.0)
    x = np.array([[10.0, 5.0], [4.0, 8.0]])
    np.testing.assert_allclose(predict_time(tiny, p, x), [23.0, 27.0])
    np.testing.assert_allclose(predict_energy(p, x), [6450.0 / 3600.0, 1.6])


def test_fit_recovers_the_parameters_of_data_from_the_equations(hpmoon):
    """Runtimes and energies written out here from eqs. 5 and 7 (not with the module's
    own design matrices), fitted: the fit must give back the parameters they came from.

    theta = (0.03, 0.025, 0.04) makes each of the three nodes the slowest for some NSp
    in 1..32, so every theta is constrained by the runtimes. Node-level eq. 7 is
    sum_i (Pow_i - Powidle_i) T_i + (sum_i Powidle_i) max_i T_i + overhead_j: the
    energies fix Pow_i - Powidle_i (40, 20, 60 W), the sum of the idle powers (460 W) and
    overhead_j, not Pow_i and Powidle_i one by one, so those combinations are compared.
    """
    theta, overhead_s = np.array([0.03, 0.025, 0.04]), 4.0
    pow_, idle, overhead_j = np.array([200.0, 150.0, 230.0]), np.array([160.0, 130.0, 170.0]), 20000.0
    nsp = np.arange(1, 33)
    node_s = node_workload(hpmoon, nsp) * theta  # T_i, whole run
    slowest = node_s.max(axis=1)
    assert set(np.argmax(node_s, axis=1).tolist()) == {0, 1, 2}  # every node's theta is seen
    t = hpmoon.run.global_migrations * overhead_s + slowest
    e = ((pow_ * node_s).sum(axis=1) + (idle * (slowest[:, None] - node_s)).sum(axis=1) + overhead_j) / 3600.0
    fitted = BaselineModel(hpmoon).fit(nsp, t, e)
    p = fitted.params_
    np.testing.assert_allclose(p.theta, theta, rtol=1e-6)
    assert p.overhead_s == pytest.approx(overhead_s, rel=1e-6)
    np.testing.assert_allclose(p.pow - p.pow_idle, pow_ - idle, rtol=1e-5)
    assert p.pow_idle.sum() == pytest.approx(idle.sum(), rel=1e-5)
    assert p.overhead_j == pytest.approx(overhead_j, rel=1e-5)
    bt, be = fitted.predict(nsp)
    np.testing.assert_allclose(bt, t, rtol=1e-6)
    np.testing.assert_allclose(be, e, rtol=1e-5)


def test_fit_time_keeps_the_round_with_the_least_squared_error():
    """When the alternation does not settle, fit_time returns the round whose eq. 5
    runtimes have the least squared error, not the last round (nor the one that
    predicts least). NGm = 2, two nodes, rounds of evaluations x (A, B) = (3, 2), (4, 2),
    (3, 3), (6, 3) and runtimes t = 14, 26, 24, 20. By hand:

    - start: theta = medians of t / x = (5.583, 7.5), node times A (16.75, 22.33, 16.75,
      33.5), B (15, 15, 22.5, 22.5): slowest A, A, B, A;
    - round 1: A's rows (3, 14), (4, 26), (6, 20) give theta_A = 9/7 and 2 o = 101/7,
      B's row (3, 24) theta_B = 67/21; B is then the slowest on every row, predictions
      437/21, 437/21, 24, 24, squared error 39386/441 = 89.31;
    - round 2: all rows on B, (2, 14), (2, 26), (3, 24), (3, 20): theta_B = 2, o = 8
      (theta_A kept at 9/7); slowest B, A, B, A, predictions 20, 148/7, 22, 166/7,
      squared error 3792/49 = 77.39, the least;
    - round 3: A on rows 1, 3 and B on rows 0, 2: theta = (16/13, 20/13), o = 8
      (normal equations); slowest A, A, B, A as in round 1, predictions 256/13, 272/13,
      268/13, 304/13 (the smallest of the three rounds), squared error 13704/169 = 81.09;
    - round 1's slowest nodes again: the three rounds repeat until MAX_ROUNDS (100), and
      the last one is round 1's.
    """
    two_nodes = copy.deepcopy(TINY)
    a, b = two_nodes["nodes"][0]["devices"]
    two_nodes["nodes"] = [{"name": "A", "devices": [a]}, {"name": "B", "devices": [b]}]
    cluster = parse_cluster(two_nodes, "two nodes")
    assert cluster.run.global_migrations == 2
    x = np.array([[3.0, 2.0], [4.0, 2.0], [3.0, 3.0], [6.0, 3.0]])
    theta, overhead = fit_time(cluster, x, np.array([14.0, 26.0, 24.0, 20.0]))
    np.testing.assert_allclose(theta, [9 / 7, 2.0], rtol=1e-6)
    assert overhead == pytest.approx(8.0, rel=1e-6)


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
