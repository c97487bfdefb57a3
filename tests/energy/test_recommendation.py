"""The best NSp for an objective, the candidates too close to it to tell apart, and the
fit errors that say how close that is."""

from __future__ import annotations

import numpy as np
import pytest

from parlschedd.energy.recommendation import NEAR_BEST, NeedsEnergy, recommend
from tests.energy.conftest import StubModel

NAN = float("nan")


CANDIDATES = np.array([1, 2, 3, 4])
MODEL = StubModel([100.0, 50.0, 50.4, 60.0], [1.0, 4.0, 2.0, 0.9])


def test_the_best_time_and_the_candidates_within_near_best_of_it():
    r = recommend(MODEL, "time", CANDIDATES)
    assert (r.objective, r.nsp, r.time_s, r.energy_wh) == ("time", 2, 50.0, 4.0)
    assert r.near_best == (3,) and NEAR_BEST == 0.01  # 50.4 <= 50 * 1.01
    assert r.nrmse == {"time": 0.1}


def test_energy_and_edp_cite_the_errors_they_depend_on():
    r = recommend(MODEL, "energy", CANDIDATES)
    assert (r.nsp, r.near_best, r.nrmse) == (4, (), {"energy": 0.2})
    r = recommend(MODEL, "edp", CANDIDATES)  # 100, 200, 100.8, 54
    assert (r.nsp, r.nrmse) == (4, {"time": 0.1, "energy": 0.2})


def test_only_the_candidates_asked_are_considered():
    assert recommend(MODEL, "time", np.array([1, 4])).nsp == 4


def test_a_model_without_energies_recommends_for_time_only():
    model = StubModel([100.0, 50.0], [NAN, NAN], nrmse_energy=NAN)
    r = recommend(model, "time", np.array([1, 2]))
    assert r.nsp == 2 and np.isnan(r.energy_wh)
    for goal in ("energy", "edp"):
        with pytest.raises(NeedsEnergy):
            recommend(model, goal, np.array([1, 2]))


def test_to_dict_is_the_json_document():
    r = recommend(MODEL, "time", CANDIDATES)
    assert r.to_dict() == {"objective": "time", "nsp": 2, "time_s": 50.0, "energy_wh": 4.0, "near_best": [3],
                           "near_best_within": 0.01, "nrmse": {"time": MODEL.nrmse_time_}}
