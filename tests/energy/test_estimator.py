"""EnergyTimeModel, the estimator around fitting.py, against the spec's equations
(shared/spec/energy-time-model.md): its parameters named and ordered as eqs. 8 and 9,
a model read by name predicting eqs. 1-7 by hand, its fit errors as eqs. 15-17 define
them on the real HPMoon data, and the exact words of each refusal. test_fitting.py
shows the fit itself (seeding, best repetition, repetitions timed); test_model.py the
equations on arrays of parameters."""

from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parlschedd.energy.cluster import parse_cluster
from parlschedd.energy.estimator import EnergyTimeModel, parameter_names
from parlschedd.energy.fitting import DESettings, GASettings
from tests.energy.conftest import TINY

# test_model.py's hand-computed parameters of the TINY cluster, by name (eqs. 8, 9).
BY_HAND = {"W[n1.a]": 1e9, "W[n1.b]": 4e9, "T_com": 0.25, "T_master": 0.5,
           "Pow[n1.a]": 100.0, "Pow[n1.b]": 50.0, "Powidle[n1.a]": 10.0, "Powidle[n1.b]": 5.0,
           "Pow_master": 80.0, "Pow_switch": 4.0}
TIME_NAMES = ["W[n1.a]", "W[n1.b]", "T_com", "T_master"]


def read(cluster, parameters, **options):
    """A model as a parameters file's "model" section gives it."""
    d = {"method": "de", "repeat": 1, "random_state": None, "rounding": "floor", "master_power": "migration",
         "parameters": parameters, "nrmse_time": 0.1, "nrmse_energy": 0.2, **options}
    return EnergyTimeModel.from_dict(cluster, d)


def refused(call) -> str:
    with pytest.raises(ValueError) as raised:
        call()
    return str(raised.value)


@pytest.fixture(scope="module")
def on_hpmoon(hpmoon, measured):
    """Three short fits to the real HPMoon measurements (NSp 1..32, runtimes and
    energies), the best of them kept; the GA, whose short fits take a tenth of DE's."""
    return EnergyTimeModel(hpmoon, method="ga", repeat=3, random_state=5, generations=2).fit(
        measured.nsp, measured.time_s, measured.energy_wh)


def test_parameter_names_are_eq_8_then_eq_9(tiny):
    """c_TW = (W per device, T_com, T_master) (eq. 8), then c_E = (Pow per device,
    Powidle per device, Pow_master, Pow_switch) (eq. 9), devices in the cluster's order;
    a time-only model has c_TW alone."""
    assert parameter_names(tiny) == list(BY_HAND)
    assert parameter_names(tiny, with_energy=False) == TIME_NAMES


def test_the_paper_s_cluster_has_22_parameters_8_of_them_for_time(hpmoon):
    """Spec, "Fitting": 3 worker nodes with a GPU and a CPU each give 8 genes in c_TW
    and 14 in c_E, named after the devices of the shared cluster file."""
    names = parameter_names(hpmoon)
    assert len(names) == 22 and names[:8] == parameter_names(hpmoon, with_energy=False)
    assert names[:8] == ["W[node1.gpu]", "W[node1.cpu]", "W[node2.gpu]", "W[node2.cpu]", "W[node3.gpu]",
                         "W[node3.cpu]", "T_com", "T_master"]
    assert names[8] == "Pow[node1.gpu]" and names[14] == "Powidle[node1.gpu]" and names[-2:] == ["Pow_master",
                                                                                                 "Pow_switch"]


def test_a_model_read_by_name_predicts_eqs_4_and_7_by_hand(tiny):
    """The parameters given in reverse order (a file sorted by a tool) are each read by
    name: T_cluster = NGm (T_master + T_com + T_evo) = 9.5 s and 17.5 s at NSp 2 and 3
    (eq. 4), E_cluster = NGm (Pow_master T_master + Pow_switch T_com + sum E_ij) =
    2 * 641 J and 2 * 881 J (eqs. 6 and 7, in Wh), as test_model.py computes them."""
    model = read(tiny, dict(reversed(BY_HAND.items())))
    time_s, energy_wh = model.predict(np.array([2, 3]))
    assert time_s.tolist() == [9.5, 17.5]
    np.testing.assert_allclose(energy_wh, np.array([2 * 641, 2 * 881]) / 3600)
    assert model.parameters() == BY_HAND and list(model.parameters()) == list(BY_HAND)


def test_each_parameter_reaches_its_own_term_of_eq_7(tiny):
    """Swapping T_com and T_master leaves eq. 4's sum, 9.5 s, but eq. 7 charges
    Pow_master * T_master + Pow_switch * T_com = 80 * 0.25 + 4 * 0.5 = 22 J instead of
    41 J per migration; giving the devices 50 W and 75 W (b's most under R1: 1.5 x its
    TDP of 50 W) puts 50 W on the device busy for 4 s at NSp 3 and 75 W on the one busy
    for 8 s: 50 * 4 + 10 * 4 + 75 * 8 = 840 J."""
    swapped = {**BY_HAND, "T_com": 0.5, "T_master": 0.25}
    time_s, energy_wh = read(tiny, swapped).predict(np.array([2]))
    assert time_s.tolist() == [9.5]
    np.testing.assert_allclose(energy_wh, [2 * (600 + 22) / 3600])
    devices = {**BY_HAND, "Pow[n1.a]": 50.0, "Pow[n1.b]": 75.0}
    np.testing.assert_allclose(read(tiny, devices).predict(np.array([3]))[1], [2 * (840 + 41) / 3600])


def test_the_model_s_options_are_the_ones_it_predicts_with(tiny):
    """master_power "whole-run" charges the master and the switch between migrations:
    (80 + 4) * (0.5 + 0.25 + 4) = 399 J instead of 41 J at NSp 2 (spec, "Known traps").
    rounding: with one device of one unit, N = 16, alpha = 1, g / NGm = 2, W / F = 1 s
    and NSp 3, PE = floor(16 / 3) = 5 or ceil = 6 evaluations (eq. 2), T1 = 10 s or
    12 s (eq. 1), the one device takes all three subpopulations (eq. 3, Algorithm 1):
    T_cluster = 2 * (0.75 + 30) = 61.5 s or 2 * (0.75 + 36) = 73.5 s (eq. 4)."""
    whole_run = read(tiny, BY_HAND, master_power="whole-run")
    np.testing.assert_allclose(whole_run.predict(np.array([2]))[1], [2 * (600 + 399) / 3600])
    one = copy.deepcopy(TINY)
    one["run"]["crossover_probability"] = 1.0
    one["nodes"][0]["devices"] = [{"name": "a", "kind": "cpu", "compute_units": 1, "frequency_hz": 1e9,
                                   "tdp_w": 100}]
    single = parse_cluster(one, "one device")
    params = {"W[n1.a]": 1e9, "T_com": 0.25, "T_master": 0.5}
    assert read(single, params).predict(np.array([3]))[0].tolist() == [61.5]
    assert read(single, params, rounding="ceil").predict(np.array([3]))[0].tolist() == [73.5]
    assert read(single, params, rounding="exact").predict(np.array([3]))[0].tolist() == [73.5]  # ceil(5.33)


FINITE = st.floats(0, 1e12, allow_nan=False, allow_infinity=False)


def power(most: float) -> st.SearchStrategy[float]:
    return st.floats(0, most, allow_nan=False, allow_infinity=False)


@st.composite
def energy_parameters(draw: st.DrawFn) -> list[float]:
    """c_E of TINY within R1-R3: each Pow up to 1.5 x its TDP (100 W, 50 W), Powidle
    at most Pow, the master's (60 W) and the switch's (4 W) up to 1.5 x theirs."""
    pows = [draw(power(1.5 * tdp)) for tdp in (100, 50)]
    idles = [p * draw(st.floats(0, 1)) for p in pows]
    return pows + idles + [draw(power(90)), draw(power(6))]


@settings(max_examples=60, deadline=None)
@given(st.lists(FINITE, min_size=4, max_size=4), energy_parameters(), st.booleans())
def test_to_dict_and_from_dict_give_back_the_same_model(times, energies, with_energy):
    """Any finite non-negative parameters (the energy's within R1-R3), with or without
    energy: a model read from its own to_dict has the same parameters in the same order
    and predicts the same; a model read (not fitted here) says so: one repetition of
    0 s, the best, no RSD."""
    tiny = parse_cluster(TINY, "tiny")
    names = parameter_names(tiny, with_energy)
    model = read(tiny, dict(zip(names, times + energies, strict=False)), nrmse_energy=None if not with_energy else 0.2)
    d = model.to_dict()
    again = EnergyTimeModel.from_dict(tiny, d)
    assert again.parameters() == model.parameters() and list(again.parameters()) == names
    nsp = np.arange(1, 17)
    np.testing.assert_array_equal(np.asarray(again.predict(nsp)), np.asarray(model.predict(nsp)))
    assert d["repetitions"] == [{"nrmse_time": 0.1, "nrmse_energy": 0.2 if with_energy else None, "seconds": 0.0}]
    assert d["best_repetition"] == 0 and d["rsd_percent"] == {}
    assert (d["nrmse_energy"] is None) is (not with_energy)


@pytest.mark.parametrize("changes, said", [
    ({"T_com": -1.0}, "parameters T_com must be finite and >= 0"),
    ({"W[n1.b]": math.nan, "Pow_master": math.inf, "Pow[n1.a]": -1e-300},
     "parameters W[n1.b], Pow[n1.a], Pow_master must be finite and >= 0"),
    ({"W[n1.c]": 1.0}, "parameters do not match the cluster: unknown W[n1.c]"),
])
def test_parameters_a_model_cannot_predict_with_are_refused_by_name(tiny, changes, said):
    """Negative, NaN or infinite parameters predict nothing: each named, in the order
    of eqs. 8 and 9; a name the cluster has no device for is named alone."""
    assert refused(lambda: read(tiny, {**BY_HAND, **changes})) == said


def test_zero_parameters_are_taken(tiny):
    """The bound is >= 0: a fit that found no overhead (T_com = 0) is a model."""
    zeros = dict.fromkeys(BY_HAND, 0.0)
    assert read(tiny, zeros).predict(np.array([1]))[0].tolist() == [0.0]


def test_one_energy_parameter_makes_all_of_them_required(tiny):
    """A file with c_TW and a single name of c_E is not a time-only model missing
    nothing: the other energy parameters are named missing."""
    params = {n: BY_HAND[n] for n in TIME_NAMES} | {"Pow_master": 80.0}
    assert refused(lambda: read(tiny, params)) == ("parameters do not match the cluster: missing Pow[n1.a], "
                                                   "Pow[n1.b], Powidle[n1.a], Powidle[n1.b], Pow_switch")
    time_only = read(tiny, {n: BY_HAND[n] for n in TIME_NAMES}, nrmse_energy=None)
    assert time_only.energy_params_ is None and math.isnan(time_only.nrmse_energy_)
    assert np.isnan(time_only.predict(np.array([2, 3]))[1]).all()


@pytest.mark.parametrize("option, value, said", [
    ("method", "pso", "method must be one of de, ga, got 'pso'"),
    ("rounding", "round", "rounding must be one of floor, exact, ceil, got 'round'"),
    ("master_power", "always", "master_power must be one of migration, whole-run, got 'always'"),
    ("repeat", 0, "repeat must be an integer >= 1, got 0"),
    ("repeat", 2.5, "repeat must be an integer >= 1, got 2.5"),
    ("generations", 0, "generations must be an integer >= 1, got 0"),
    ("generations", "100", "generations must be an integer >= 1, got '100'"),
    ("repeat", True, "repeat must be an integer >= 1, got True"),
    ("generations", True, "generations must be an integer >= 1, got True"),
    ("random_state", -1, "random_state must be an integer >= 0, got -1"),
    ("random_state", "abc", "random_state must be an integer >= 0, got 'abc'"),
    ("random_state", 1.5, "random_state must be an integer >= 0, got 1.5"),
])
def test_options_out_of_their_choices_are_refused_before_any_work(tiny, option, value, said):
    """The same words whether the option is read from a file or given to fit, and fit
    refuses before fitting anything (no fit_ is left behind)."""
    assert refused(lambda: read(tiny, BY_HAND, **{option: value})) == said
    model = EnergyTimeModel(tiny, **{option: value})
    assert refused(lambda: model.fit(np.array([1, 2]), np.array([1.0, 2.0]))) == said
    assert not hasattr(model, "fit_")


@pytest.mark.parametrize("nsp, time_s, energy_wh, said", [
    ([1], [1.0], None, "nsp and time_s must be 1-D arrays of the same length >= 2"),
    ([1, 2, 3], [1.0, 2.0], None, "nsp and time_s must be 1-D arrays of the same length >= 2"),
    ([[1, 2]], [[1.0, 2.0]], None, "nsp and time_s must be 1-D arrays of the same length >= 2"),
    ([0, 2], [1.0, 2.0], None, "nsp must be >= 1 and runtimes > 0"),
    ([1, 2], [1.0, 0.0], None, "nsp must be >= 1 and runtimes > 0"),
    ([1, 2], [1.0, -2.0], None, "nsp must be >= 1 and runtimes > 0"),
    ([1, 2], [1.0, 2.0], [1.0], "energy_wh must have the shape of nsp"),
])
def test_measurements_that_cannot_be_fitted_are_refused(tiny, nsp, time_s, energy_wh, said):
    """Fewer than two configurations, unequal lengths, an NSp below 1, a runtime not
    above 0, energies not one per NSp: refused with what they must be."""
    model = EnergyTimeModel(tiny, generations=2)
    assert refused(lambda: model.fit(np.array(nsp), np.array(time_s), energy_wh)) == said


def test_predict_refuses_what_it_cannot_predict(tiny):
    """Before fit (or from_dict): RuntimeError saying what to call; an NSp below 1 or
    a table of NSp: ValueError."""
    with pytest.raises(RuntimeError) as raised:
        EnergyTimeModel(tiny).predict(np.array([1]))
    assert str(raised.value) == "EnergyTimeModel is not fitted; call fit() first"
    model = read(tiny, BY_HAND)
    for nsp in ([0, 1], [[1, 2]], [-3]):
        assert refused(lambda nsp=nsp: model.predict(np.array(nsp))) == "nsp must be a 1-D array of integers >= 1"


def test_predictions_that_overflow_are_inf_without_a_warning(tiny):
    """Parameters near the largest float (a parameters file may hold them): T_master
    + T_com overflows eq. 4 and Pow_master * T_master eq. 7 to inf, and no
    RuntimeWarning reaches the user's terminal."""
    huge = {**BY_HAND, "T_com": 1.7e308, "T_master": 1.7e308}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        time_s, energy_wh = read(tiny, huge).predict(np.array([1, 2]))
    assert np.isinf(time_s).all() and np.isinf(energy_wh).all()


def test_energies_measured_at_fewer_than_two_nsp_fit_time_only(tiny):
    """One energy among NaNs is no energy phase: the model has c_TW alone, its NRMSE
    of energy is undefined (NaN) and its RSD names c_TW only."""
    model = EnergyTimeModel(tiny, method="ga", repeat=2, generations=3, random_state=0)
    model.fit(np.array([1, 2, 3, 4]), np.array([20.0, 9.5, 17.5, 12.0]), np.array([np.nan, 0.4, np.nan, np.nan]))
    assert model.energy_params_ is None and math.isnan(model.nrmse_energy_)
    assert list(model.parameters()) == TIME_NAMES == list(model.rsd_)


def test_the_nrmse_of_a_fit_is_eqs_15_and_16_of_its_own_predictions(on_hpmoon, measured):
    """On the real data: NRMSE_T = RMSE / std (population std, over NSp 1..32) of the
    runtimes predicted at the measured NSp (eq. 15), NRMSE_E likewise for energies
    (eq. 16); the model records the NSp it was fitted on, 1..32."""
    time_s, energy_wh = on_hpmoon.predict(measured.nsp)
    rmse_t = np.sqrt(np.mean((time_s - measured.time_s) ** 2))
    rmse_e = np.sqrt(np.mean((energy_wh - measured.energy_wh) ** 2))
    assert on_hpmoon.nrmse_time_ == pytest.approx(rmse_t / np.std(measured.time_s), rel=1e-12)
    assert on_hpmoon.nrmse_energy_ == pytest.approx(rmse_e / np.std(measured.energy_wh), rel=1e-12)
    assert on_hpmoon.fitted_nsp_ == tuple(range(1, 33))


def test_the_rsd_of_each_parameter_is_eq_17_over_the_repetitions(on_hpmoon, hpmoon):
    """RSD_p = std / mean * 100 of parameter p over the repetitions (eq. 17; the sample
    std of the r = 1..R fits), keyed by the parameter's name; the best repetition's
    parameters are the model's."""
    vectors = np.array([fit.vector for fit in on_hpmoon.repetitions_.fits])
    assert vectors.shape == (3, 22)
    names = parameter_names(hpmoon)
    for i, name in enumerate(names):
        mean = vectors[:, i].mean()
        if mean != 0:
            assert on_hpmoon.rsd_[name] == pytest.approx(vectors[:, i].std(ddof=1) / abs(mean) * 100, rel=1e-9)
    best = vectors[on_hpmoon.repetitions_.best]
    assert list(on_hpmoon.parameters().values()) == best.tolist()


def test_progress_is_told_each_repetition_as_it_ends(tiny):
    """progress(done, of) once per repetition, in order, so the CLI can show it."""
    calls = []
    EnergyTimeModel(tiny, method="ga", repeat=3, generations=2, random_state=0).fit(
        np.array([1, 2, 3]), np.array([20.0, 9.5, 17.5]), progress=lambda done, of: calls.append((done, of)))
    assert calls == [(1, 3), (2, 3), (3, 3)]


def test_generations_set_every_phase_s_budget(tiny):
    """No generations: each method's default budget; n: the GA's generations and both
    of DE's phases are n, the rest of each method's settings as they are."""
    assert EnergyTimeModel(tiny).settings() == {}
    s = EnergyTimeModel(tiny, generations=7).settings()
    assert s == {"ga": GASettings(generations=7),
                 "de": DESettings(time_generations=7, energy_generations=7)}
