"""What a fit reports beside its parameters: notes on its data, and its NRMSE summary."""

from __future__ import annotations

import numpy as np
import pytest

from parlschedd.energy.baseline import BaselineModel
from parlschedd.energy.cluster import NspError, parse_cluster
from parlschedd.energy.estimator import EnergyTimeModel
from parlschedd.energy.fit_report import Evidence, FitSummary, Nrmse, check_fittable, fit_notes, summarise_fit
from parlschedd.energy.fitting import LeaveOneOut
from parlschedd.energy.metrics import nrmse
from tests.energy.conftest import TINY, measurements

NAN = float("nan")


def test_a_fit_needs_two_configurations_each_with_individuals(tiny):
    """tiny: 16 individuals."""
    check_fittable(tiny, measurements([1, 2], [5, 4]), "m.csv")
    with pytest.raises(ValueError, match="^m.csv: 1 configuration measured; a fit needs at least 2$"):
        check_fittable(tiny, measurements([1], [5]), "m.csv")
    with pytest.raises(NspError, match="^m.csv: nsp 17 above the cluster's run.individuals"):
        check_fittable(tiny, measurements([1, 17], [5, 4]), "m.csv")


def test_no_note_when_every_phase_has_more_configurations_than_parameters(tiny):
    """tiny: 4 time parameters (2 devices, T_com, T_master), 6 energy parameters."""
    nsp = list(range(1, 8))
    assert fit_notes(tiny, measurements(nsp, [9.0] * 7, [1.0] * 7), "m.csv") == []


def test_missing_energies_are_named_and_the_energy_phase_fits_the_others(tiny):
    energy = [1.0, NAN, 1.0, 1.0, NAN, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert fit_notes(tiny, measurements(list(range(1, 11)), [9.0] * 10, energy), "m.csv") == [
        "m.csv: no energy for nsp 2, 5; the energy phase fits the other 8"]


def test_too_few_energies_fit_time_only(tiny):
    notes = fit_notes(tiny, measurements(list(range(1, 7)), [9.0] * 6, [1.0] + [NAN] * 5), "m.csv")
    assert notes == ["m.csv: energy measured for 1 NSp, the energy phase needs 2; fitting time only"]


def test_a_phase_with_no_more_configurations_than_parameters_is_a_warning(tiny):
    notes = fit_notes(tiny, measurements([1, 2, 3, 4, 5], [9.0] * 5, [1.0, 1.0, 1.0, NAN, NAN]), "m.csv")
    assert notes == [
        "m.csv: no energy for nsp 4, 5; the energy phase fits the other 3",
        "warning: m.csv: 3 configurations with energy for 6 energy parameters; the fit is underdetermined and its "
        "error says nothing of its predictions: measure more configurations"]
    notes = fit_notes(tiny, measurements([1, 2, 3, 4], [9.0] * 4), "m.csv")
    assert notes[1:] == [
        "warning: m.csv: 4 configurations with time for 4 time parameters; the fit is underdetermined and its "
        "error says nothing of its predictions: measure more configurations"]


@pytest.fixture(scope="module")
def fitted_tiny():
    cluster = parse_cluster(TINY, "tiny")
    m = measurements([1, 2, 3, 4], [10.0, 6.0, 5.0, 5.5], [1.0, 0.8, 0.7, 0.75])
    model = EnergyTimeModel(cluster, "de", repeat=2, random_state=1, generations=5).fit(m.nsp, m.time_s, m.energy_wh)
    return model, BaselineModel(cluster).fit(m.nsp, m.time_s, m.energy_wh), m


def test_the_summary_gives_the_best_and_mean_repetition_and_the_baseline(fitted_tiny):
    model, base, m = fitted_tiny
    s = summarise_fit(model, base, m, "m.csv")
    reps = model.repetitions_.fits
    assert (s.data, s.best.time, s.best.energy) == ("m.csv", model.nrmse_time_, model.nrmse_energy_)
    assert s.mean.time == pytest.approx(np.mean([f.nrmse_time for f in reps]))
    assert s.mean.energy == pytest.approx(np.mean([f.nrmse_energy for f in reps]))
    bt, be = base.predict(m.nsp)
    assert (s.baseline.time, s.baseline.energy) == (float(nrmse(bt, m.time_s)), float(nrmse(be, m.energy_wh)))
    assert s.fit_seconds == round(sum(model.repetition_seconds_), 3)
    assert s.leave_one_out is None and s.leave_one_out_nrmse is None
    assert s.to_dict() == {"data": "m.csv", "nrmse": {"time": s.best.time, "energy": s.best.energy},
                           "nrmse_mean": {"time": s.mean.time, "energy": s.mean.energy},
                           "baseline_nrmse": {"time": s.baseline.time, "energy": s.baseline.energy},
                           "fit_seconds": s.fit_seconds, "worse_than_mean": s.worse_than_mean}


def test_the_summary_without_energies_has_none_for_them(fitted_tiny):
    cluster, m = fitted_tiny[0].cluster, fitted_tiny[2]
    model = EnergyTimeModel(cluster, "de", random_state=1, generations=5).fit(m.nsp, m.time_s)
    lo = LeaveOneOut(np.array([9.0, 6.5, 5.0, 5.0]), np.array([NAN] * 4), 0.25, NAN)
    s = summarise_fit(model, BaselineModel(cluster).fit(m.nsp, m.time_s), measurements([1, 2, 3, 4], m.time_s), "t.csv",
                      lo)
    assert [e.energy for e in (s.best, s.mean, s.baseline, s.leave_one_out_nrmse)] == [None] * 4


def test_the_summary_carries_leave_one_out(fitted_tiny):
    model, base, m = fitted_tiny
    lo = LeaveOneOut(np.array([9.0, 6.5, 5.0, 5.0]), np.array([1.0, NAN, 0.7, 0.7]), 0.25, 0.5)
    s = summarise_fit(model, base, m, "m.csv", lo)
    assert (s.leave_one_out_nrmse.time, s.leave_one_out_nrmse.energy) == (0.25, 0.5)
    d = s.to_dict()["leave_one_out"]
    assert d["nrmse_time"] == 0.25 and d["nrmse_energy"] == 0.5 and d["time_s"] == [9.0, 6.5, 5.0, 5.0]
    assert d["energy_wh"][0] == 1.0 and np.isnan(d["energy_wh"][1])  # null once written (store.json_safe)


def test_an_undefined_nrmse_is_nan_and_one_not_fitted_is_none(fitted_tiny):
    """Energies without spread were None, as if none had been fitted (and the
    baseline's NaN): a text could not say which."""
    cluster, m = fitted_tiny[0].cluster, fitted_tiny[2]
    flat = measurements([1, 2, 3, 4], m.time_s, [0.8] * 4)
    model = EnergyTimeModel(cluster, "de", random_state=1, generations=5).fit(flat.nsp, flat.time_s, flat.energy_wh)
    lo = LeaveOneOut(np.array([9.0, 6.5, 5.0, 5.0]), np.array([0.8] * 4), 0.25, NAN)
    s = summarise_fit(model, BaselineModel(cluster).fit(flat.nsp, flat.time_s, flat.energy_wh), flat, "m.csv", lo)
    assert all(np.isnan(e.energy) for e in (s.best, s.mean, s.baseline, s.leave_one_out_nrmse))


def test_a_fit_no_better_than_the_mean_is_a_warning():
    """NRMSE >= 1 (a 1-node, 1-CPU cluster fitted to the HPMoon data: energy 2.858) was
    reported as any other fit."""
    def summary(time: float, energy: float | None) -> FitSummary:
        return FitSummary("m.csv", Nrmse(time, energy), Nrmse(time, energy), Nrmse(0.5, 0.5), 1.0)

    poor = summary(1.0, 2.858)
    assert poor.worse_than_mean == ["time", "energy"] and poor.to_dict()["worse_than_mean"] == ["time", "energy"]
    assert poor.poor_fit_notes() == [
        "warning: m.csv: the fit's NRMSE of time is 1.000 (>= 1): its predictions are no better than the mean of the "
        "measured runtimes; check that the cluster description (nodes, devices, compute units) is the machine that "
        "was measured",
        "warning: m.csv: the fit's NRMSE of energy is 2.858 (>= 1): its predictions are no better than the mean of "
        "the measured energies; check that the cluster description (nodes, devices, compute units) is the machine "
        "that was measured"]
    for fine in (summary(0.999, 0.2), summary(0.1, None), summary(NAN, NAN)):  # NaN: undefined, said elsewhere
        assert fine.worse_than_mean == [] and fine.poor_fit_notes() == []


def test_a_poor_fit_s_warning_names_what_its_evidence_shows():
    """Every NRMSE >= 1 was told to check the cluster description, whatever the cause."""
    evidence = Evidence(at_upper=("W[n1.a]",), at_zero=("Pow[n1.a]", "Pow[n1.b]"),
                        underdetermined=(("energy", 3, 6),), budget="--generations 5")
    poor = FitSummary("m.csv", Nrmse(1.5, 2.0), Nrmse(1.5, 2.0), Nrmse(0.5, 0.5), 1.0, evidence=evidence)
    time_note, energy_note = poor.poor_fit_notes()
    assert time_note.endswith("runtimes; W[n1.a] sit at their upper bound: the runtimes are longer than the cluster's "
                              "devices would take (fewer compute units or slower clocks than the cluster file says?); "
                              "a larger search than --generations 5 may find a better fit")
    assert energy_note.endswith("energies; Pow[n1.a], Pow[n1.b] sit at 0 W: the energies are less than the runtimes "
                                "need (runtimes in ms, not s? energies in kWh?); 3 configurations for 6 energy "
                                "parameters leave the fit underdetermined; a larger search than --generations 5 may "
                                "find a better fit")


def test_powers_at_their_bound_after_an_underdetermined_time_fit_name_it_first():
    """Two runs of real data: the time fit gave most of each migration to the master and
    the switch, which draw a few watts, so the powers sat at 1.5 x TDP, and the warning
    blamed the units, which the mean power's own check had found right (review)."""
    evidence = Evidence(at_upper=("Pow[n1.a]",), at_zero=(), underdetermined=(("time", 2, 11),), budget=None)
    poor = FitSummary("m.csv", Nrmse(0.5, 19.4), Nrmse(0.5, 19.4), Nrmse(0.5, 0.5), 1.0, evidence=evidence)
    energy_note = poor.poor_fit_notes()[-1]
    assert ("Pow[n1.a] sit at their bound, 1.5 x TDP: the energies are more than the cluster's TDPs can give over "
            "the fitted times (the time fit, underdetermined, may have given the runtimes to the master and the "
            "switch, which draw little; or energies in J, not Wh?)") in energy_note


def test_a_mean_power_far_outside_the_cluster_s_is_a_unit_warning(tiny):
    """tiny: 1.5 x (100 + 50 + 60 + 4) W = 321 W at most; energies in J or runtimes in
    ms were fitted without a word, to powers pinned at a bound."""
    nsp = list(range(1, 8))
    joules = fit_notes(tiny, measurements(nsp, [9.0] * 7, [1.0] * 5 + [3600.0] * 2), "m.csv")
    assert joules == ["warning: m.csv: nsp 6-7: energy_wh x 3600 / time_s is a mean power of 1.44e+06 W, over "
                      "10 x the most the cluster draws (321 W, 1.5 x every TDP): energies in J rather than Wh "
                      "(divide them by 3600), or the cluster file's tdp_w in kW rather than W?"]
    ms = fit_notes(tiny, measurements(nsp, [9.0, 9000.0, 9.0, 9000.0, 9.0, 9.0, 9.0], [1.0] * 7), "m.csv")
    assert ms == ["warning: m.csv: nsp 2,4: energy_wh x 3600 / time_s is a mean power of 0.4 W, under 1/100 of the "
                  "most the cluster draws (321 W, 1.5 x every TDP): runtimes in ms rather than s, energies in kWh "
                  "rather than Wh, or the cluster file's tdp_w in mW rather than W?"]
    assert fit_notes(tiny, measurements(nsp, [9.0] * 7, [1.0] * 7), "m.csv") == []  # 400 W: within reach
