"""Models' errors against measurements: NRMSE, per-NSp relative errors, the models compared."""

from __future__ import annotations

import numpy as np
import pytest

from parlschedd.energy.cluster import NspError
from parlschedd.energy.store import Fitted
from parlschedd.energy.validation import model_errors, validate
from tests.energy.conftest import StubModel, measurements

NAN = float("nan")


def test_errors_by_hand():
    m = measurements([1, 2], [10.0, 20.0], [1.0, 3.0])  # population std 5 and 1
    e = model_errors(np.array([11.0, 17.0]), np.array([1.5, 2.0]), m)
    assert e.nrmse_time == pytest.approx(np.sqrt((1 + 9) / 2) / 5)
    assert e.nrmse_energy == pytest.approx(np.sqrt((0.25 + 1) / 2) / 1)
    np.testing.assert_allclose(e.time_rel_error, [0.1, -0.15])
    np.testing.assert_allclose(e.energy_rel_error, [0.5, -1 / 3])
    assert e.largest_time_error == (2, pytest.approx(-0.15))
    assert e.to_dict() == {"nrmse_time": e.nrmse_time, "nrmse_energy": e.nrmse_energy, "per_nsp": [
        {"nsp": 1, "time_rel_error": e.time_rel_error[0], "energy_rel_error": 0.5},
        {"nsp": 2, "time_rel_error": e.time_rel_error[1], "energy_rel_error": e.energy_rel_error[1]}]}


def test_energy_is_scored_only_where_measured_and_predicted():
    m = measurements([1, 2, 3], [10.0, 20.0, 30.0], [1.0, 3.0, NAN])
    e = model_errors(np.array([10.0, 20.0, 30.0]), np.array([1.0, NAN, 2.0]), m)
    assert e.nrmse_energy is None  # one configuration with both: fewer than MIN_ENERGY_ROWS
    assert e.energy_rel_error[0] == 0 and np.isnan(e.energy_rel_error[1:]).all()
    both = model_errors(np.array([10.0, 20.0, 30.0]), np.array([1.0, 4.0, 2.0]), m)
    assert both.nrmse_energy == pytest.approx(np.sqrt(1 / 2) / 1)  # over nsp 1 and 2


def test_time_is_scored_only_where_predicted():
    """A stored baseline may lack a prediction: its time NRMSE was NaN, shown as
    undefined "because the runtimes have no spread", though they had."""
    m = measurements([1, 2, 3], [10.0, 20.0, 30.0], [NAN, NAN, NAN])
    e = model_errors(np.array([11.0, NAN, 27.0]), np.full(3, NAN), m)
    assert e.nrmse_time == pytest.approx(np.sqrt((1 + 9) / 2) / 10)  # over nsp 1 and 3: population std 10
    assert np.isnan(model_errors(np.full(3, NAN), np.full(3, NAN), m).nrmse_time)  # no prediction at all


def test_measurements_without_spread_have_an_undefined_nrmse():
    e = model_errors(np.array([300.0, 310.0]), np.array([NAN, NAN]), measurements([1, 2], [300.0, 300.0], [NAN, NAN]))
    assert np.isnan(e.nrmse_time) and e.nrmse_energy is None


def test_validate_compares_the_proposed_model_the_baseline_and_the_stored_baseline(tiny):
    fitted = Fitted(tiny, StubModel([11.0, 19.0], [1.0, 3.0]), StubModel([12.0, 22.0], [NAN, NAN]), {})
    m = measurements([1, 2], [10.0, 20.0], [1.0, 3.0])
    report = validate(fitted, m, "m.csv")
    assert report.data == "m.csv" and list(report.models) == ["proposed", "baseline"]
    assert report.models["proposed"].nrmse_energy == 0 and report.models["baseline"].nrmse_energy is None
    stored = validate(fitted, measurements([1, 2], [10.0, 20.0], [1.0, 3.0], np.array([10.0, 21.0])), "m.csv")
    assert list(stored.models) == ["proposed", "baseline", "baseline_stored"]
    assert stored.models["baseline_stored"].time_rel_error.tolist() == [0.0, 0.05]
    assert stored.models["baseline_stored"].nrmse_energy is None  # no stored energies
    d = report.to_dict()
    assert d["data"] == "m.csv" and list(d["models"]) == ["proposed", "baseline"]
    assert d["models"]["proposed"] == report.models["proposed"].to_dict()


def test_validate_refuses_measured_nsp_without_individuals(tiny):
    fitted = Fitted(tiny, StubModel([1.0, 1.0], [NAN, NAN]), StubModel([1.0, 1.0], [NAN, NAN]), {})
    with pytest.raises(NspError, match="^m.csv: nsp 17 above the cluster's run.individuals"):
        validate(fitted, measurements([1, 17], [10.0, 20.0], [NAN, NAN]), "m.csv")
