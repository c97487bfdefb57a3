"""PARAMS.json written and read back by store.py itself, real files in tmp_path: the
round trip, NaN as null, a file replaced whole, and what load_params tells the user
about a file it cannot use, naming the file (and the line, or the byte) at fault.
test_cli.py shows the same errors through `parlschedctl model`; here each is the
module's own, word for word."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parlschedd.energy.baseline import BaselineModel
from parlschedd.energy.cluster import ClusterError, load_cluster, parse_cluster
from parlschedd.energy.estimator import EnergyTimeModel
from parlschedd.energy.measurements import MeasurementsError, load_measurements
from parlschedd.energy.store import FORMAT, MAX_FILE_BYTES, Fitted, ParamsError, json_safe, load_params, params_document, save_params
from tests.energy.conftest import TINY

NSP = np.array([3, 1, 4, 2])  # not in order: the file keeps the NSp fitted on ascending
TIME_S = np.array([17.5, 20.0, 12.0, 9.5])
ENERGY_WH = np.array([0.5, 1.0, 0.45, 0.4])
REWRITE = "(write the file with `model fit --out`)"


@pytest.fixture(scope="module")
def tiny_cluster():
    return parse_cluster(TINY, "tiny")


@pytest.fixture(scope="module")
def fitted(tiny_cluster):
    """A model and a baseline fitted to the same four runs of the TINY cluster."""
    model = EnergyTimeModel(tiny_cluster, method="ga", generations=3, random_state=0).fit(NSP, TIME_S, ENERGY_WH)
    return model, BaselineModel(tiny_cluster).fit(NSP, TIME_S, ENERGY_WH)


@pytest.fixture
def saved(tmp_path, tiny_cluster, fitted):
    """The parameters file of ``fitted``, with an extra section, in tmp_path."""
    path = tmp_path / "params.json"
    save_params(path, params_document(tiny_cluster, *fitted, {"fit": {"fit_seconds": 1.5}}))
    return path


def edited(saved, change) -> str:
    """Write the saved document changed by ``change(doc)`` beside it; its path."""
    doc = json.loads(saved.read_text())
    change(doc)
    out = saved.with_name("edited.json")
    out.write_text(json.dumps(doc))
    return str(out)


def refusal(path) -> str:
    with pytest.raises(ParamsError) as raised:
        load_params(path)
    assert isinstance(raised.value, ValueError)  # callers catch ValueError
    return str(raised.value)


def test_a_saved_fit_reads_back_as_the_same_model(saved, tiny_cluster, fitted):
    """load_params gives the cluster, the model's parameters and predictions, the
    baseline's predictions and any extra section as they were saved; the NSp fitted on
    come back ascending."""
    model, baseline = fitted
    back = load_params(saved)
    assert back.cluster == tiny_cluster
    assert back.model.parameters() == model.parameters()
    assert (back.model.method, back.model.rounding, back.model.master_power) == ("ga", "floor", "migration")
    nsp = np.arange(1, 17)
    np.testing.assert_array_equal(back.model.predict(nsp), model.predict(nsp))
    np.testing.assert_array_equal(back.baseline.predict(nsp), baseline.predict(nsp))
    assert back.extra == {"fit": {"fit_seconds": 1.5}}
    assert back.fitted_nsp == (1, 2, 3, 4)


def test_the_file_is_standard_json_with_the_format_first(saved, tiny_cluster, fitted):
    """Two-space indented JSON ending in a newline, the format named first; exactly
    the document given, so another reader (jq, a spreadsheet) reads what was saved."""
    text = saved.read_text()
    document = params_document(tiny_cluster, *fitted, {"fit": {"fit_seconds": 1.5}})
    assert text == json.dumps(json_safe(document), indent=2) + "\n"
    assert next(iter(json.loads(text))) == "format" and json.loads(text)["format"] == FORMAT == "parlsched-energy-time/1"


def test_nan_and_infinity_are_written_as_null_and_read_back(tmp_path, tiny_cluster):
    """A fit to runtimes only: its NRMSE of energy (NaN) and the baseline's powers
    (NaN) are null in the file, never the NaN other JSON readers refuse; read back they
    are NaN again, and the energies predicted are NaN."""
    model = EnergyTimeModel(tiny_cluster, method="ga", generations=3, random_state=0).fit(NSP, TIME_S)
    baseline = BaselineModel(tiny_cluster).fit(NSP, TIME_S)
    path = tmp_path / "time-only.json"
    save_params(path, params_document(tiny_cluster, model, baseline, {"fit": {"loo": math.inf}}))
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    doc = json.loads(text)
    assert doc["model"]["nrmse_energy"] is None and doc["baseline"]["pow_w"] == {"n1": None}
    assert doc["fit"] == {"loo": None}
    back = load_params(path)
    assert math.isnan(back.model.nrmse_energy_) and back.model.energy_params_ is None
    assert np.isnan(back.model.predict(np.array([1, 2]))[1]).all()
    assert np.isnan(back.baseline.predict(np.array([1, 2]))[1]).all()


def test_json_safe_turns_each_non_finite_float_into_none_at_any_depth():
    """NaN, inf and -inf become None in dicts, lists and tuples (tuples become lists,
    as JSON has them); other values, finite floats, ints, bools, text, None, are kept;
    the value given is not changed."""
    value = {"a": math.nan, "b": [1.5, math.inf, (2, -math.inf)], "c": {"d": {"e": math.nan}}, "f": True,
             "g": "NaN", "h": None, "i": 0.0}
    assert json_safe(value) == {"a": None, "b": [1.5, None, [2, None]], "c": {"d": {"e": None}}, "f": True,
                                "g": "NaN", "h": None, "i": 0.0}
    assert math.isnan(value["a"]) and value["b"][2] == (2, -math.inf)


JSON_LIKE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.sampled_from(["", "NaN", "x"]),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
    | st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
    max_leaves=8)


@settings(max_examples=100, deadline=None)
@given(JSON_LIKE)
def test_json_safe_output_is_standard_json_and_keeps_what_is_finite(value):
    """Whatever nesting of numbers, text, lists, tuples and objects: the result dumps
    as standard JSON (allow_nan=False does not raise), and it reads back as the value
    given with every non-finite float as None."""

    def expected(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: expected(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [expected(x) for x in v]
        return v

    assert json.loads(json.dumps(json_safe(value), allow_nan=False)) == expected(value)


def test_saving_replaces_the_old_file_whole(saved, tiny_cluster, fitted):
    """A shorter document over a longer file leaves none of the old one behind, and
    a document that cannot be written (a set is no JSON) fails before the old file is
    touched: it is still there as it was, and no temporary file is left beside it."""
    long_text = saved.read_text() + " " * 10_000
    saved.write_text(long_text)
    save_params(saved, params_document(tiny_cluster, *fitted))
    assert load_params(saved).extra == {}
    kept = saved.read_text()
    with pytest.raises(TypeError):
        save_params(saved, {**params_document(tiny_cluster, *fitted), "fit": {1, 2}})
    assert saved.read_text() == kept and [p.name for p in saved.parent.iterdir()] == ["params.json"]


def test_a_parameters_file_given_as_the_cluster_or_the_measurements_is_said_to_be_one(saved):
    """--cluster params.json was ten "unknown key" errors; --data params.json said
    "unknown column(s) {"."""
    with pytest.raises(ClusterError) as e:
        load_cluster(saved)
    assert e.value.errors == [("<file>", "a parameters file, as `model fit --out` writes (given with --params), not "
                                         "a cluster description: --cluster takes the cluster's YAML file")]
    with pytest.raises(MeasurementsError) as err:
        load_measurements(saved)
    assert str(err.value) == (f"{saved}: not a measurements CSV: it is JSON, as the parameters `model fit --out` "
                              "writes (given with --params); --data takes the CSV of measured runs (header "
                              "nsp,time_s_r1,...)")


def test_a_missing_file_or_a_directory_is_named_with_the_system_s_reason(tmp_path):
    """The path given, then what the system said: nothing else to read there."""
    assert refusal(tmp_path / "none.json") == f"{tmp_path / 'none.json'}: cannot read: No such file or directory"
    assert refusal(tmp_path) == f"{tmp_path}: cannot read: Is a directory"


def test_a_truncated_file_names_the_line_where_it_stops(saved):
    """Cut in half, as an interrupted copy leaves it: the JSON error is at the line
    where the text stops, and the user is told what --params takes."""
    text = saved.read_text()
    cut = text[: len(text) // 2]
    saved.write_text(cut)
    said = refusal(saved)
    line = cut.count("\n") + 1
    assert said.startswith(f"{saved}:{line}: not valid JSON: ")
    assert said.endswith("; --params takes the file `model fit --out` writes")


def test_an_empty_file_is_not_valid_json_at_line_1(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    assert refusal(empty) == (f"{empty}:1: not valid JSON: Expecting value; --params takes the file "
                              "`model fit --out` writes")


def test_a_file_larger_than_any_parameters_file_is_refused_by_its_size(tmp_path):
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:
        fh.truncate(MAX_FILE_BYTES + 1)
    assert refusal(huge) == (f"{huge}: larger than 16 MiB: not a parameters file (`model fit --out` writes 8 KB "
                             "for 6 devices)")


def test_a_corrupt_byte_is_named_by_its_line(saved):
    """A byte that is not UTF-8 in the middle of the file: refused naming its line,
    not as a JSON error somewhere after it."""
    data = bytearray(saved.read_bytes())
    at = len(data) // 3
    data[at] = 0xFF
    saved.write_bytes(bytes(data))
    line = data[:at].count(b"\n") + 1
    assert refusal(saved) == (f"{saved}:{line}: not UTF-8 text (byte 0xff): not a parameters file; --params takes "
                              "the file `model fit --out` writes")


def test_a_key_written_twice_is_refused(saved):
    """json keeps the last of two silently: a value pasted into a file edited by hand
    was read, or ignored, unseen (the cluster's YAML refuses its repeated keys)."""
    text = saved.read_text()
    saved.write_text(text.replace('"T_com": ', '"T_com": 100.0, "T_com": ', 1))
    assert refusal(saved) == (f"{saved}: the key 'T_com' is written twice in one object (json reads the last alone): "
                              "keep the one meant")


def test_a_parameters_file_of_another_version_says_so(tmp_path):
    """It was "not a parameters file of format parlsched-energy-time/1", as for any JSON."""
    other = tmp_path / "newer.json"
    other.write_text(json.dumps({"format": "parlsched-energy-time/2"}))
    assert refusal(other) == (f"{other}: a parameters file of format 'parlsched-energy-time/2', which this parlsched "
                              "does not read (it reads parlsched-energy-time/1): written by another version; fit again "
                              "with this one")


@pytest.mark.parametrize("document", [[], 3, "params", {}, {"format": "parlsched-energy-time"},
                                      {"format": None, "cluster": {}}])
def test_json_that_is_not_a_parameters_file_says_which_format_it_wants(tmp_path, document):
    """Valid JSON of another kind: refused as a whole, before any section is read."""
    other = tmp_path / "other.json"
    other.write_text(json.dumps(document))
    assert refusal(other) == (f"{other}: not a parameters file of format parlsched-energy-time/1 "
                              "(write one with `model fit --out`)")


@pytest.mark.parametrize("section, key, said", [
    (None, "model", "missing key 'model'"),
    (None, "baseline", "missing key 'baseline'"),
    ("model", "parameters", "missing key 'model.parameters'"),
    ("model", "nrmse_time", "missing key 'model.nrmse_time'"),
    ("model", "rounding", "missing key 'model.rounding'"),
    ("baseline", "overhead_s", "missing key 'baseline.overhead_s'"),
])
def test_a_missing_key_is_named_by_its_path_in_the_file(saved, section, key, said):
    """A section missing, or a key of a section: the key path in the file, not the
    bare key (a section's own name is not doubled: 'model', not 'model.model')."""
    def drop(doc):
        del (doc if section is None else doc[section])[key]

    path = edited(saved, drop)
    assert refusal(path) == f"{path}: malformed parameters: {said} {REWRITE}"


@pytest.mark.parametrize("value, kind", [([], "a list"), (None, "nothing (null)"), ("de", "the text 'de'"),
                                         (3, "the number 3")])
@pytest.mark.parametrize("section", ["model", "baseline"])
def test_a_section_that_is_not_an_object_is_said_to_be_one(saved, section, value, kind):
    """"model": [] said "model: list indices must be integers or slices, not str" and
    "model": null "'NoneType' object is not subscriptable": Python's words about the
    reader, not the file's."""
    path = edited(saved, lambda doc: doc.__setitem__(section, value))
    assert refusal(path) == f"{path}: malformed parameters: {section}: must be an object, got {kind} {REWRITE}"


def test_a_bad_cluster_section_is_named_with_its_key_path(saved):
    """The cluster inside the file is read as a cluster file is, its errors prefixed
    with the file and "cluster"."""
    path = edited(saved, lambda doc: doc["cluster"]["run"].__setitem__("individuals", -5))
    assert refusal(path) == f"{path}: cluster: run.individuals: must be an integer >= 1, got -5"
    path = edited(saved, lambda doc: doc.pop("cluster"))
    assert refusal(path) == f"{path}: malformed parameters: missing key 'cluster' {REWRITE}"


def test_a_value_of_the_wrong_kind_is_named_by_section(saved):
    """A model option out of its choices, a count that is no count: the section, then
    the estimator's own words."""
    path = edited(saved, lambda doc: doc["model"].__setitem__("repeat", 0))
    assert refusal(path) == f"{path}: malformed parameters: model: repeat must be an integer >= 1, got 0"
    path = edited(saved, lambda doc: doc["model"]["parameters"].__setitem__("T_com", "1"))
    assert refusal(path) == f"{path}: malformed parameters: model.parameters.T_com: must be a number, got '1'"


def test_the_nsp_fitted_on_are_read_ascending_and_may_be_absent(saved):
    """fitted_nsp is kept ascending whatever order the file gives; a file written
    before it was recorded has none, and then nothing is known to be extrapolated."""
    path = edited(saved, lambda doc: doc.__setitem__("fitted_nsp", [4, 1, 16, 2]))
    assert load_params(path).fitted_nsp == (1, 2, 4, 16)
    path = edited(saved, lambda doc: doc.pop("fitted_nsp"))
    back = load_params(path)
    assert back.fitted_nsp is None and back.extrapolated(np.array([1, 100])) is None
    assert "fitted_nsp" not in back.extra


@pytest.mark.parametrize("value", [[], [0, 1], [1, True], [1, 2.0], "1-4", {"1": 2}, 4])
def test_a_fitted_nsp_that_is_not_a_list_of_nsp_is_refused(saved, value):
    """An empty list, an NSp below 1, a bool (an int to Python, no NSp to the user), a
    float, text or an object: refused with what it must be and what it is."""
    path = edited(saved, lambda doc: doc.__setitem__("fitted_nsp", value))
    assert refusal(path) == (f"{path}: fitted_nsp: must be a non-empty list of integers >= 1 (the NSp the model "
                             f"was fitted on), got {value!r} {REWRITE}")


def test_a_fitted_nsp_above_the_individuals_names_each_and_the_limit(saved):
    """TINY has 16 individuals: NSp 17 and 20 have empty subpopulations; 16 is taken."""
    path = edited(saved, lambda doc: doc.__setitem__("fitted_nsp", [20, 1, 17, 16]))
    assert refusal(path) == (f"{path}: fitted_nsp: nsp 17,20 above cluster.run.individuals (16): each "
                             "subpopulation needs at least one individual, so the NSp fitted on are at most 16 "
                             f"{REWRITE}")
    path = edited(saved, lambda doc: doc.__setitem__("fitted_nsp", [1, 16]))
    assert load_params(path).fitted_nsp == (1, 16)


def test_extrapolated_is_outside_the_fitted_range_ends_included(saved):
    """Fitted on 2, 3 and 5: 1 and 6 are extrapolated, 2 and 5 (the ends) and 4 (a
    gap inside the range) are not."""
    back = load_params(saved)
    fitted = Fitted(back.cluster, back.model, back.baseline, {}, (2, 3, 5))
    assert fitted.extrapolated(np.array([1, 2, 4, 5, 6])).tolist() == [True, False, False, False, True]
    assert fitted.extrapolated([1, 6]).tolist() == [True, True]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 64), min_size=1, max_size=8, unique=True), st.lists(st.integers(1, 100), max_size=10))
def test_extrapolated_is_not_between_the_least_and_greatest_fitted(fitted_on, asked):
    """Any NSp fitted on, any NSp asked for: extrapolated exactly where it is below the
    least or above the greatest NSp fitted on."""
    fitted = Fitted(None, None, None, {}, tuple(sorted(fitted_on)))  # type: ignore[arg-type]
    got = fitted.extrapolated(np.array(asked, dtype=int))
    assert got.tolist() == [not (min(fitted_on) <= k <= max(fitted_on)) for k in asked]
