"""Equations 1-7 on the hand-computed TINY cluster of conftest.py.

NSp = 2: SS_p = 8, PE = 4, rounds ceil(4/2) = 2 and ceil(4/4) = 1; with W = (1e9, 4e9)
cycles a round takes 1 s and 2 s, so T1 = (4/2) * (2 * 1, 1 * 2) = (4, 4) s (eq. 1).
Algorithm 1 gives one subpopulation each: T_evo = 4, T_cluster = 2 * (0.5 + 0.25 + 4) = 9.5.
NSp = 3: SS_p = floor(16/3) = 5, PE = 2.5, the same rounds and T1; counts (1, 2), T_evo = 8,
T_cluster = 17.5.
Energy (eqs. 6, 7) with Pow = (100, 50), Powidle = (10, 5), Pow_master 80, Pow_switch 4:
NSp = 2: 100*4 + 50*4 = 600 J per migration, + 80*0.5 + 4*0.25 = 41 -> 2 * 641 J.
NSp = 3: 100*4 + 10*(8-4) + 50*8 = 840, + 41 -> 2 * 881 J.
"""

from __future__ import annotations

import numpy as np
import pytest

from parlschedd.energy.model import (EnergyParams, TimeParams, energy, evaluations, subpopulation_size, timing,
                                     waves)

TP = TimeParams(np.array([1e9, 4e9]), np.array(0.25), np.array(0.5))
EP = EnergyParams(np.array([100.0, 50.0]), np.array([10.0, 5.0]), np.array(80.0), np.array(4.0))


def test_subpopulation_size_rounding(tiny):
    """N = 16: NSp 9 gives 1.78, where floor, round and ceil all differ (16 / 5 = 3.2
    alone let a floor changed to round pass)."""
    nsp = np.array([5, 9])
    assert subpopulation_size(tiny.run, nsp, "floor").tolist() == [3.0, 1.0]
    assert subpopulation_size(tiny.run, nsp, "exact").tolist() == pytest.approx([3.2, 16 / 9])
    assert subpopulation_size(tiny.run, nsp, "ceil").tolist() == [4.0, 2.0]
    with pytest.raises(ValueError, match="rounding"):
        subpopulation_size(tiny.run, nsp, "round")


def test_evaluations_and_rounds(tiny):
    nsp = np.array([2, 3])
    assert evaluations(tiny.run, nsp).tolist() == [4.0, 2.5]  # eq. 2
    assert waves(tiny, nsp).tolist() == [[2.0, 1.0], [2.0, 1.0]]


def test_time_equations_by_hand(tiny):
    t = timing(tiny, TP, np.array([2, 3]))
    assert t.t1.tolist() == [[4.0, 4.0], [4.0, 4.0]]  # eq. 1
    assert t.counts.tolist() == [[1, 1], [1, 2]]  # Algorithm 1
    assert t.t_dev.tolist() == [[4.0, 4.0], [4.0, 8.0]]  # eq. 3
    assert t.t_evo.tolist() == [4.0, 8.0]
    assert t.runtime.tolist() == [9.5, 17.5]  # eq. 4


def test_energy_equations_by_hand(tiny):
    t = timing(tiny, TP, np.array([2, 3]))
    np.testing.assert_allclose(energy(tiny, t, TP, EP), np.array([2 * 641, 2 * 881]) / 3600)


def test_whole_run_variant_charges_master_and_switch_between_migrations(tiny):
    t = timing(tiny, TP, np.array([2]))
    # (80 + 4) * (0.5 + 0.25 + 4) = 399 instead of 41
    np.testing.assert_allclose(energy(tiny, t, TP, EP, "whole-run"), [2 * (600 + 399) / 3600])
    with pytest.raises(ValueError, match="master_power"):
        energy(tiny, t, TP, EP, "sometimes")


def test_vectorised_over_parameter_sets_equals_one_by_one(hpmoon):
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, (7, 8)) * np.array([3e7] * 6 + [3, 3])
    e = rng.uniform(0, 1, (7, 14)) * 100
    nsp = np.arange(1, 33)
    tb = timing(hpmoon, TimeParams.from_vector(x), nsp)
    eb = energy(hpmoon, tb, TimeParams.from_vector(x), EnergyParams.from_vector(e))
    assert tb.runtime.shape == eb.shape == (7, 32)
    for i in range(7):
        ti = timing(hpmoon, TimeParams.from_vector(x[i]), nsp)
        np.testing.assert_allclose(tb.runtime[i], ti.runtime)
        np.testing.assert_allclose(eb[i], energy(hpmoon, ti, TimeParams.from_vector(x[i]),
                                                 EnergyParams.from_vector(e[i])))


def test_chromosome_order_round_trips():
    x = np.arange(8.0)
    assert TimeParams.from_vector(x).w.tolist() == [0, 1, 2, 3, 4, 5]
    np.testing.assert_array_equal(TimeParams.from_vector(x).to_vector(), x)
    y = np.arange(14.0)
    ep = EnergyParams.from_vector(y)
    assert ep.pow_idle.tolist() == [6, 7, 8, 9, 10, 11] and float(ep.pow_switch) == 13
    np.testing.assert_array_equal(ep.to_vector(), y)
