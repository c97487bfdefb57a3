"""Fitting: constraints R1-R3, search boxes, both methods seeded, repetitions, LOO."""

from __future__ import annotations

import random
import time
from dataclasses import replace

import numpy as np
import pytest

from parlschedd.energy.estimator import EnergyTimeModel, parameter_names
from parlschedd.energy.fitting import (PENALTY, DESettings, Fit, GASettings, Generation, Problem, _seeds, best_of,
                                       energy_bounds, energy_cost, feasible, fit_once, fit_repeated, from_ratio,
                                       leave_one_out, predict, project_time, ratio_bounds, time_bounds)
from parlschedd.energy.metrics import nrmse
from parlschedd.energy.model import EnergyParams, TimeParams, energy, timing

QUICK_GA = GASettings(individuals=40, generations=15)
QUICK_DE = DESettings(time_individuals=30, time_generations=20, energy_individuals=40, energy_generations=15)


@pytest.fixture(scope="module")
def problem(hpmoon, measured):
    return Problem.from_measurements(hpmoon, measured)


def test_constraints_r1_r2_r3(tiny):
    ok = EnergyParams(np.array([100.0, 50.0]), np.array([10.0, 5.0]), np.array(80.0), np.array(4.0))
    assert feasible(tiny, ok)
    idle_not_below_active = EnergyParams(ok.pow, np.array([100.0, 5.0]), ok.pow_master, ok.pow_switch)
    over_tdp = EnergyParams(np.array([151.0, 50.0]), ok.pow_idle, ok.pow_master, ok.pow_switch)
    master_hot = EnergyParams(ok.pow, ok.pow_idle, np.array(91.0), ok.pow_switch)  # 1.5 * 60 = 90
    switch_hot = EnergyParams(ok.pow, ok.pow_idle, ok.pow_master, np.array(6.5))  # 1.5 * 4 = 6
    assert not any(feasible(tiny, e) for e in (idle_not_below_active, over_tdp, master_hot, switch_hot))


def test_infeasible_energy_genes_cost_the_penalty(tiny):
    tp = TimeParams(np.array([1e9, 4e9]), np.array(0.25), np.array(0.5))
    nsp = np.array([2, 3])
    p = Problem(tiny, nsp, np.array([9.5, 17.5]), np.array([0.4, 0.5]))
    cost = energy_cost(p, tp, timing(tiny, tp, nsp))
    genes = np.array([[100, 50, 10, 5, 80, 4], [100, 50, 100, 5, 80, 4]], dtype=float)
    c = cost(genes)
    assert c[0] < 1 and c[1] == PENALTY


def test_ratio_reparametrisation_makes_every_box_point_feasible(hpmoon):
    rng = np.random.default_rng(0)
    b = ratio_bounds(hpmoon)
    corners = rng.integers(0, 2, (500, len(b)))  # the faces too: every Pow at its lower bound was infeasible
    x = np.vstack([rng.uniform(b[:, 0], b[:, 1], (500, len(b))), b[np.arange(len(b)), corners], b[:, 0], b[:, 1]])
    assert feasible(hpmoon, EnergyParams.from_vector(from_ratio(x))).all()
    assert energy_bounds(hpmoon)[:6, 1].tolist() == (1.5 * hpmoon.tdp_w).tolist()


def test_time_box_contains_physically_plausible_cycles(problem):
    b = time_bounds(problem)
    assert b.shape == (8, 2) and np.all(b[:, 0] == 0)
    assert b[6, 1] == pytest.approx(problem.time_s.min() / 5)
    # node1.gpu alone must do NSp = 1 in 428 s: 150 * 222 rounds * W / 706 MHz
    w_nsp1 = 428.193 * 706e6 / (150 * 222)
    assert w_nsp1 < b[0, 1]


@pytest.mark.parametrize("method, settings", [("ga", {"ga": QUICK_GA}), ("de", {"de": QUICK_DE})])
def test_both_methods_are_seeded_and_beat_a_random_guess(problem, method, settings):
    state = random.getstate()
    a = fit_once(problem, method, 7, **settings)
    b = fit_once(problem, method, 7, **settings)
    assert random.getstate() == state  # DEAP's global random is restored
    np.testing.assert_array_equal(a.vector, b.vector)
    assert a.nrmse_time < 0.5 and a.nrmse_energy < 0.5
    assert feasible(problem.cluster, a.energy_params)


@pytest.mark.parametrize("method, settings, most", [("ga", {"ga": QUICK_GA}, (15, 15)),
                                                    ("de", {"de": QUICK_DE}, (20, 15))])
def test_a_fit_tells_each_generation_of_each_phase_and_finds_the_same(problem, method, settings, most):
    """A fit of 1500 configurations took hours a repetition with nothing said inside one
    (a review): each generation is told, from 0 as a phase starts, so that a caller can
    show where it is and time it; being told changes nothing of the search."""
    told: list[Generation] = []
    fit = fit_once(problem, method, 7, on_generation=told.append, **settings)
    np.testing.assert_array_equal(fit.vector, fit_once(problem, method, 7, **settings).vector)
    for phase, at_most in zip(("time", "energy"), most, strict=True):
        done = [g.done for g in told if g.phase == phase]
        assert done == list(range(len(done))) and 1 < len(done) <= at_most + 1, (phase, done)
        assert {g.most for g in told if g.phase == phase} == {at_most}
    assert [g.phase for g in told] == sorted(g.phase for g in told)[::-1]  # every time one, then every energy one


def test_estimator_repetitions_rsd_and_round_trip(hpmoon, measured):
    est = EnergyTimeModel(hpmoon, "de", repeat=3, random_state=1, generations=15)
    assert est.fit(measured.nsp, measured.time_s, measured.energy_wh) is est
    fits = est.repetitions_.fits
    best = min(fits, key=lambda f: np.hypot(f.nrmse_time, f.nrmse_energy))
    assert est.nrmse_time_ == best.nrmse_time
    assert list(est.rsd_) == parameter_names(hpmoon) and len(est.rsd_) == 22
    t, e = est.predict(np.array([1, 16, 32]))
    assert t.shape == e.shape == (3,)
    again = EnergyTimeModel.from_dict(hpmoon, est.to_dict())
    np.testing.assert_allclose(again.predict(np.array([1, 16, 32]))[1], e)


def test_the_fitting_core_reads_no_clock_and_the_estimator_times_each_repetition(hpmoon, problem, measured,
                                                                                monkeypatch):
    """fitting.py says it is pure, yet timed each fit itself (Fit.seconds). The
    estimator, which runs the repetitions, times them: `fit` shows fit_seconds and each
    repetition's "seconds" from it."""

    def no_clock() -> float:
        raise AssertionError("the pure fitting core read the clock")

    monkeypatch.setattr(time, "perf_counter", no_clock)
    for method, settings in (("ga", {"ga": QUICK_GA}), ("de", {"de": QUICK_DE})):
        fit_repeated(problem, method, 2, 0, **settings)
    ticks = iter(range(0, 100, 2))  # every repetition takes 2 s by this clock
    monkeypatch.setattr(time, "perf_counter", lambda: float(next(ticks)))
    est = EnergyTimeModel(hpmoon, "de", repeat=3, random_state=1, generations=5)
    est.fit(measured.nsp, measured.time_s, measured.energy_wh)
    assert est.repetition_seconds_ == (2.0, 2.0, 2.0)
    assert [r["seconds"] for r in est.to_dict()["repetitions"]] == [2.0, 2.0, 2.0]


def test_time_only_fit(hpmoon, measured):
    est = EnergyTimeModel(hpmoon, generations=10, random_state=0).fit(measured.nsp, measured.time_s)
    t, e = est.predict(measured.nsp)
    assert est.energy_params_ is None and np.isnan(est.nrmse_energy_) and np.all(np.isnan(e))
    assert len(est.parameters()) == 8


def test_estimator_validates(hpmoon, measured):
    with pytest.raises(RuntimeError, match="not fitted"):
        EnergyTimeModel(hpmoon).predict(np.array([1]))
    with pytest.raises(ValueError, match="method"):
        EnergyTimeModel(hpmoon, method="pso").fit(measured.nsp, measured.time_s)
    with pytest.raises(ValueError, match="same length"):
        EnergyTimeModel(hpmoon).fit(measured.nsp, measured.time_s[:-1])


def test_leave_one_out_predicts_every_configuration(hpmoon, measured):
    p = Problem.from_measurements(hpmoon, measured)
    p = Problem(hpmoon, p.nsp[:8], p.time_s[:8], p.energy_wh[:8])
    settings = DESettings(10, 8, 20, 8)
    out = leave_one_out(p, "de", 0, de=settings)
    assert out.time_s.shape == (8,) and np.all(out.time_s > 0) and np.isfinite(out.nrmse_energy)
    k = 3  # its prediction is that of a fit on the other seven, with the seed leave_one_out gave it
    rest = fit_repeated(p.without(k), "de", 1, _seeds(0, 8)[k], de=settings)
    t, e = predict(p, rest.fits[rest.best], p.nsp[k:k + 1])
    assert (out.time_s[k], out.energy_wh[k]) == (t[0], e[0])


@pytest.mark.slow
def test_full_budget_de_reaches_a_good_fit(problem):
    f = fit_once(problem, "de", 0)
    assert f.nrmse_time < 0.11 and f.nrmse_energy < 0.13


def test_projection_solves_scale_and_overhead_exactly(problem):
    truth = np.array([8.8e6, 9.9e7, 7.2e6, 1.3e8, 2.8e7, 2.4e8, 1.0, 1.5])
    t = timing(problem.cluster, TimeParams.from_vector(truth), problem.nsp).runtime
    exact = Problem(problem.cluster, problem.nsp, t)
    genes = np.concatenate([truth[:6] / 3.0, [0.4]])  # right relative speeds, wrong scale
    x, err = project_time(exact, genes)
    assert err[0] == pytest.approx(0.0, abs=1e-6)
    np.testing.assert_allclose(x[0, :6], truth[:6], rtol=1e-6)
    assert x[0, 6] + x[0, 7] == pytest.approx(2.5) and x[0, 6] == pytest.approx(0.4 * 2.5)


def test_the_best_of_the_repetitions_is_the_one_nearest_the_origin_not_the_first():
    """Fits at (NRMSE_T, NRMSE_E) (0.5, 0.5), (0.1, 0.2), (0.3, 0.05): the second is the
    nearest to (0, 0) (0.224; 0.707, 0.304), and no test saw --repeat keep the first."""
    params = TimeParams(np.array([1.0, 2.0]), np.array(0.1), np.array(0.2))
    fits = [Fit(params, None, t, e) for t, e in [(0.5, 0.5), (0.1, 0.2), (0.3, 0.05)]]
    assert best_of(fits).best == 1


def test_the_energy_phase_fits_and_scores_the_master_power_asked_for(problem):
    """--master-power whole-run: phase 2 minimises eq. 11 with that variant's energy, and
    the fit's NRMSE is of it (the paper's eq. 7 in either place fitted or scored the
    paper's model under the variant's name). Same seed, same time phase: each variant's
    fit is the better at its own energy."""
    rows = problem.energy_rows
    fits = {mp: fit_once(replace(problem, master_power=mp), "de", 7, de=QUICK_DE) for mp in ("migration", "whole-run")}

    def score(fit: Fit, mp: str) -> float:
        t = timing(problem.cluster, fit.time_params, problem.nsp)
        e = energy(problem.cluster, t, fit.time_params, fit.energy_params, mp)
        return float(nrmse(e[rows], problem.energy_wh[rows]))

    for mp, fit in fits.items():
        assert fit.nrmse_energy == pytest.approx(score(fit, mp), rel=1e-12)
    assert score(fits["whole-run"], "whole-run") < score(fits["migration"], "whole-run")
    assert score(fits["migration"], "migration") < score(fits["whole-run"], "migration")


def test_projection_keeps_the_overhead_at_least_zero(problem):
    """Runtimes that a line through them would meet below zero overhead (a negative
    intercept) get o = 0, not a negative T_master + T_com (the box's lower bound)."""
    truth = np.array([8.8e6, 9.9e7, 7.2e6, 1.3e8, 2.8e7, 2.4e8, 0.0, 0.0])
    t = timing(problem.cluster, TimeParams.from_vector(truth), problem.nsp).runtime
    shifted = Problem(problem.cluster, problem.nsp, t * 1.5 - 0.2 * t.min())  # slope up, intercept down
    x, _ = project_time(shifted, np.concatenate([truth[:6], [0.4]]))
    assert x[0, 6] == 0.0 and x[0, 7] == 0.0


@pytest.mark.parametrize("operator", ["crossover", "mutation"])
def test_the_ga_applies_its_crossover_and_mutation(problem, operator):
    """Each of the GA's operators takes part in the search: with its probability 0 the
    same seed finds another fit (an operator left out found the same, and the fit's
    loose NRMSE bounds did not tell)."""
    with_it = fit_once(problem, "ga", 7, ga=QUICK_GA)
    without = fit_once(problem, "ga", 7, ga=replace(QUICK_GA, **{operator: 0.0}))
    assert not np.array_equal(with_it.vector, without.vector)
