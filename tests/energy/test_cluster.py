"""Cluster YAML: the real file loads; every error names the file and the key path."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import yaml

from parlschedd.energy.cluster import (MAX_FILE_BYTES, MAX_NSP, ClusterError, NspError, check_measured, cluster_to_dict, load_cluster,
                                      nsp_candidates, parse_cluster, without_individuals)
from tests.energy.conftest import CLUSTER_YAML, TINY


def test_the_shared_cluster(hpmoon):
    assert hpmoon.run.individuals == 3840 and hpmoon.run.global_migrations == 5
    assert hpmoon.device_labels == ("node1.gpu", "node1.cpu", "node2.gpu", "node2.cpu", "node3.gpu", "node3.cpu")
    assert hpmoon.compute_units.tolist() == [13, 24, 15, 16, 15, 32]
    assert hpmoon.frequency_hz[0] == 706e6  # written 706.0e6, a string to YAML 1.1
    assert hpmoon.node_of_device.tolist() == [0, 0, 1, 1, 2, 2]
    assert hpmoon.master_tdp_w == 80 and hpmoon.switch_tdp_w == 5


def test_round_trip_through_dict(hpmoon):
    assert parse_cluster(cluster_to_dict(hpmoon)) == hpmoon


def test_every_error_is_reported_with_its_key_path(tmp_path):
    bad = copy.deepcopy(TINY)
    bad["run"]["generations"] = 5  # not divisible by NGm = 2
    bad["nodes"][0]["devices"][1]["compute_units"] = 0
    bad["nodes"][0]["devices"][0]["frequency_hz"] = "fast"
    bad["nodes"][0]["devices"][1]["tdp_w"] = "nan"
    del bad["switch"]["tdp_w"]
    bad["colour"] = "blue"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(ClusterError) as err:
        load_cluster(path)
    keys = dict(err.value.errors)
    assert str(path) in str(err.value)
    assert "must divide generations" in keys["run.global_migrations"]
    assert "integer >= 1, got 0" in keys["nodes[0].devices[1].compute_units"]
    assert "must be a number, got 'fast'" in keys["nodes[0].devices[0].frequency_hz"]
    assert "must be a number" in keys["nodes[0].devices[1].tdp_w"]
    assert keys["switch.tdp_w"] == "is required"
    assert keys["colour"] == "unknown key; expected one of master, nodes, run, switch"


def test_a_misspelt_key_anywhere_is_an_error_with_its_key_path():
    """Only the top level was checked: subpopulation: [1, 8] left the default [1, 32] in
    force, and a misspelt key in master or in a device was dropped without a word."""
    bad = copy.deepcopy(TINY)
    bad["run"]["subpopulation"] = bad["run"].pop("subpopulations")
    bad["master"]["cpu_thread"] = 8
    bad["switch"]["tdp"] = 5
    bad["nodes"][0]["device"] = []
    bad["nodes"][0]["devices"][1]["frequency"] = 3e9
    with pytest.raises(ClusterError) as err:
        parse_cluster(bad)
    assert [e for e in err.value.errors if e[1].startswith("unknown key")] == [
        ("run.subpopulation", "unknown key; expected one of crossover_probability, generations, global_migrations, "
                              "individuals, subpopulations"),
        ("master.cpu_thread", "unknown key; expected one of cpu_threads, frequency_hz, tdp_w"),
        ("switch.tdp", "unknown key; expected one of tdp_w"),
        ("nodes[0].device", "unknown key; expected one of devices, name"),
        ("nodes[0].devices[1].frequency", "unknown key; expected one of compute_units, frequency_hz, kind, name, tdp_w"),
    ]


def test_a_tdp_of_zero_is_refused_where_it_would_break_the_fit():
    """tdp_w: 0 passed, then the GA crashed (ZeroDivisionError in a zero-width bound)
    and DE's power parameters had nowhere to go."""
    bad = copy.deepcopy(TINY)
    bad["nodes"][0]["devices"][0]["tdp_w"] = 0
    bad["switch"]["tdp_w"] = 0
    bad["master"]["tdp_w"] = -5
    with pytest.raises(ClusterError) as err:
        parse_cluster(bad)
    keys = dict(err.value.errors)
    assert keys["nodes[0].devices[0].tdp_w"] == "must be a number > 0, got 0"
    assert keys["switch.tdp_w"] == "must be a number > 0, got 0" and keys["master.tdp_w"].endswith("got -5")


def test_missing_nodes_and_run():
    with pytest.raises(ClusterError) as err:
        parse_cluster({"master": {"tdp_w": 1}, "switch": {"tdp_w": 1}})
    assert {"run", "nodes"} <= dict(err.value.errors).keys()


@pytest.mark.parametrize("text, key, message", [
    ("", "<file>", "empty (nothing but blanks or comments): a cluster description is a mapping with the keys run, "
                   "master, switch and nodes"),
    ("# run: ...\n\n", "<file>", "empty (nothing but blanks or comments)"),
    ("- run\n- nodes\n", "<top>", "must be a mapping with the keys run, master, switch and nodes, got a list"),
    ("cluster.yaml\n", "<top>", "must be a mapping with the keys run, master, switch and nodes, got the text "
                                "'cluster.yaml'"),
    ("42\n", "<top>", "got the number 42"),
    ("null\n", "<file>", "empty"),
])
def test_a_file_that_is_no_mapping_is_one_error_without_python_s_words(tmp_path, text, key, message):
    """An empty file gave '<top>: must be a mapping, got NoneType; master.tdp_w: is
    required; ...': a Python type name, then every key it lacks."""
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    with pytest.raises(ClusterError) as err:
        load_cluster(path)
    assert len(err.value.errors) == 1 and err.value.errors[0][0] == key and message in err.value.errors[0][1]
    assert str(err.value).startswith(f"{path}: {key}: ") and "Type" not in str(err.value)


def test_a_mapping_without_sections_names_each_one_it_needs():
    with pytest.raises(ClusterError) as err:
        parse_cluster({})
    assert [key for key, _ in err.value.errors] == ["run", "master.tdp_w", "switch.tdp_w", "nodes"]


def test_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(ClusterError, match="cannot read"):
        load_cluster(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("run: [1, 2\n")
    with pytest.raises(ClusterError, match="not valid YAML"):
        load_cluster(broken)
    latin1 = tmp_path / "latin1.yaml"  # Python's decoder said it with neither file nor line
    latin1.write_bytes(b"# the lab's cluster\n# caf\xe9\nrun: {}\n")
    with pytest.raises(ClusterError) as e:
        load_cluster(latin1)
    assert e.value.errors == [("line 2", "not UTF-8 text (byte 0xe9); save the file as UTF-8")]
    assert str(latin1) in str(e.value)
    huge = tmp_path / "huge.yaml"  # another file given by mistake: refused by its size, not parsed whole
    with open(huge, "wb") as fh:
        fh.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(ClusterError) as e:
        load_cluster(huge)
    assert e.value.errors == [("<file>", "larger than 1 MiB, more than any cluster description needs: is it the "
                                         "right file?")]


def test_a_number_written_with_its_unit_is_told_to_be_written_alone():
    """'2.1GHz' or '80 W' in a value: the key's name says the unit (frequency_hz, tdp_w)."""
    data = yaml.safe_load(CLUSTER_YAML.read_text())
    data["master"]["frequency_hz"], data["master"]["tdp_w"] = "2.1GHz", "80 W"
    data["nodes"][0]["devices"][0]["compute_units"] = "13 CUs"
    with pytest.raises(ClusterError) as e:
        parse_cluster(data, "c.yaml")
    assert e.value.errors == [
        ("master.tdp_w", "must be a number, got '80 W': write the number alone, in W as the key's name says"),
        ("master.frequency_hz", "must be a number, got '2.1GHz': write the number alone, in Hz as the key's name says"),
        ("nodes[0].devices[0].compute_units", "must be an integer, got '13 CUs': write the number alone")]


def test_a_number_yaml_1_1_loads_as_text_is_the_number_meant(tmp_path):
    """The daemon's config has the same rule (tests/test_config.py): text that YAML 1.2
    reads as a number (1e-3, 2.1e9; PyYAML, YAML 1.1, loads them as text) is that number.
    Other text is refused, also what float() took before (1_000, ' 80', infinity)."""
    written = {"frequency_hz: 1000000000.0": "frequency_hz: 1e9", "frequency_hz: 2000000000.0": "frequency_hz: 2.0e9",
               "tdp_w: 60": "tdp_w: 6E1", "tdp_w: 4\n": "tdp_w: 4.0e+0\n"}
    text = yaml.safe_dump(TINY)
    for number, exponent in written.items():
        assert number in text
        text = text.replace(number, exponent)
    path = tmp_path / "exponents.yaml"
    path.write_text(text)
    assert load_cluster(path) == parse_cluster(TINY)
    for raw in ("fast", "nan", "1_000", " 80", "infinity"):
        bad = copy.deepcopy(TINY)
        bad["master"]["tdp_w"] = raw
        with pytest.raises(ClusterError) as err:
            parse_cluster(bad)
        assert err.value.errors == [("master.tdp_w", f"must be a number, got {raw!r}")]


def test_names_crossover_and_span_that_would_break_a_fit_later_are_refused():
    """Each passed validation before: repeated names merged two parameter sets into one
    (a params file no command could read back), a crossover probability of 0 made the
    fit divide by zero, and a span above the population asked for empty subpopulations."""
    bad = copy.deepcopy(TINY)
    bad["nodes"].append(copy.deepcopy(bad["nodes"][0]))
    bad["nodes"][0]["devices"][1]["name"] = bad["nodes"][0]["devices"][0]["name"]
    bad["run"]["crossover_probability"] = 0
    bad["run"]["subpopulations"] = [1, bad["run"]["individuals"] + 1]
    with pytest.raises(ClusterError) as err:
        parse_cluster(bad)
    keys = dict(err.value.errors)
    node, device = bad["nodes"][0]["name"], bad["nodes"][0]["devices"][0]["name"]
    assert keys["nodes"] == f"the node name {node!r} appears 2 times; names must be unique"
    assert keys["nodes[0].devices"] == f"the device name {device!r} appears 2 times; names must be unique"
    assert keys["run.crossover_probability"] == "must be a number in (0, 1], got 0"
    assert "must not go above run.individuals" in keys["run.subpopulations"]


@pytest.mark.parametrize("span", [[True, 32], [True, True], [1, 2.0]])
def test_a_span_of_other_than_integers_is_refused(span):
    """[true, 32] was taken as NSp 1-32 and written back to the params file as
    [true, 32] (a bool is an int to isinstance), where compute_units: true is refused."""
    bad = copy.deepcopy(TINY)
    bad["run"]["subpopulations"] = span
    with pytest.raises(ClusterError) as err:
        parse_cluster(bad)
    assert dict(err.value.errors)["run.subpopulations"].startswith("must be [low, high] with 1 <= low <= high")


def test_devices_whose_labels_collide_are_refused_naming_both():
    """Node 'a.b' with device 'c' and node 'a' with device 'b.c' are both a.b.c, the
    name of their fitted parameters: fit kept one device's parameters for both, and
    wrote a params file predict refused."""
    bad = copy.deepcopy(TINY)
    bad["nodes"] = [{"name": "a.b", "devices": [{**TINY["nodes"][0]["devices"][0], "name": "c"}]},
                    {"name": "a", "devices": [{**TINY["nodes"][0]["devices"][1], "name": "b.c"}]}]
    with pytest.raises(ClusterError) as err:
        parse_cluster(bad)
    assert err.value.errors == [("nodes", "nodes[0].devices[0] (node 'a.b', device 'c') and nodes[1].devices[0] "
                                          "(node 'a', device 'b.c') have the same label 'a.b.c' (node.device), which "
                                          "names their fitted parameters: rename one")]
    bad["nodes"][1]["name"] = "a2"
    assert parse_cluster(bad).device_labels == ("a.b.c", "a2.b.c")


def test_a_default_span_above_the_individuals_is_said_to_be_the_default():
    """individuals: 20 without subpopulations said "run.subpopulations: ... got [1, 32]",
    a value the user never wrote."""
    bad = copy.deepcopy(TINY)
    bad["run"]["individuals"] = 20
    del bad["run"]["subpopulations"]
    with pytest.raises(ClusterError) as err:
        parse_cluster(bad)
    assert err.value.errors == [("run.subpopulations", "is not given, and its default [1, 32] goes above "
                                                       "run.individuals (20): set it, e.g. subpopulations: [1, 20]")]
    bad["run"]["individuals"] = 32
    assert parse_cluster(bad).run.subpopulations == (1, 32)


def test_an_empty_device_is_an_error_with_its_key_path():
    """A device {} was dropped without a word: the node had one device fewer than the
    file listed, and every fit and prediction was of another cluster."""
    bad = copy.deepcopy(TINY)
    bad["nodes"][0]["devices"].append({})
    with pytest.raises(ClusterError) as err:
        parse_cluster(bad)
    assert err.value.errors == [(f"nodes[0].devices[2].{key}", "is required")
                                for key in ("compute_units", "frequency_hz", "tdp_w")]
    bad["nodes"][0]["devices"][2] = None  # not a mapping: one error, not one per key
    with pytest.raises(ClusterError) as err:
        parse_cluster(bad)
    assert err.value.errors == [("nodes[0].devices[2]", "must be a mapping, got nothing (null)")]


def test_the_nsp_asked_for_default_to_the_run_s_span_and_each_needs_an_individual(tiny):
    """tiny: 16 individuals, subpopulations [1, 4]."""
    assert nsp_candidates(tiny.run).tolist() == [1, 2, 3, 4]
    assert nsp_candidates(tiny.run, (2, 16)).tolist() == [2, 16]  # one individual each is still a run
    assert without_individuals(tiny.run, [17, 3, 20]) == [17, 20]
    with pytest.raises(NspError) as err:
        nsp_candidates(tiny.run, (3, 17, 18))
    assert str(err.value) == ("nsp 17-18 above 16 (the cluster's run.individuals): each subpopulation needs at "
                              "least one individual; give NSp <= 16")


def test_the_default_nsp_stop_at_max_nsp_as_those_asked_for_do(tiny):
    wide = dataclasses.replace(tiny.run, individuals=10 * MAX_NSP, subpopulations=(1, MAX_NSP + 1))
    with pytest.raises(NspError) as err:
        nsp_candidates(wide)
    assert str(err.value) == (f"run.subpopulations [1, {MAX_NSP + 1}] goes above {MAX_NSP} subpopulations, too many "
                              "to predict in reasonable time; ask for the NSp wanted")
    assert nsp_candidates(wide, (1, 2)).tolist() == [1, 2]
    assert len(nsp_candidates(dataclasses.replace(wide, subpopulations=(1, MAX_NSP)))) == MAX_NSP


def test_measured_nsp_above_the_individuals_are_refused_naming_the_file(tiny):
    check_measured(tiny.run, [1, 16], "m.csv")
    with pytest.raises(NspError) as err:
        check_measured(tiny.run, [8, 17, 32], "m.csv")
    assert str(err.value) == ("m.csv: nsp 17, 32 above the cluster's run.individuals (16): "
                              "each subpopulation needs at least one individual")


def test_a_key_given_twice_is_refused_with_its_key_path_and_line(tmp_path):
    """PyYAML kept the last silently, where the daemon's config refuses it."""
    text = yaml.safe_dump(TINY, sort_keys=False).replace("    tdp_w: 50\n", "    tdp_w: 50\n    tdp_w: 5\n")
    path = tmp_path / "twice.yaml"
    path.write_text(text)
    line = text.splitlines().index("    tdp_w: 5") + 1
    with pytest.raises(ClusterError) as err:
        load_cluster(path)
    assert err.value.errors == [(f"line {line}", "not valid YAML: nodes[0].devices[1]: 'tdp_w' is given twice "
                                                 f"(first on line {line - 1}); keep one")]
    path.write_text(yaml.safe_dump(TINY, sort_keys=False) + "master: {tdp_w: 1}\n")
    with pytest.raises(ClusterError, match=r"line \d+: not valid YAML: 'master' is given twice \(first on line"):
        load_cluster(path)


def test_an_integer_too_large_for_a_float_is_an_error_with_its_key_path(tmp_path):
    """tdp_w: 1000...0 (400 digits) raised OverflowError from math.isfinite."""
    bad = copy.deepcopy(TINY)
    bad["nodes"][0]["devices"][0]["tdp_w"] = 10**400
    bad["run"]["individuals"] = 10**400
    path = tmp_path / "huge.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(ClusterError) as err:
        load_cluster(path)
    assert err.value.errors == [
        ("run.individuals", "must be an integer of at most 1.8e+308, got a larger one"),
        ("nodes[0].devices[0].tdp_w", "must be a number of at most 1.8e+308, got a larger one")]
    path.write_text(yaml.safe_dump(TINY).replace("tdp_w: 60", "tdp_w: " + "9" * 5000))  # more than int() converts
    with pytest.raises(ClusterError, match=r": line \d+: not valid YAML: an integer of 5000 digits"):
        load_cluster(path)


@pytest.mark.parametrize("value", ["75", "0", "-0.5", "1.01"])
def test_a_crossover_probability_outside_0_to_1_is_refused_with_the_interval_it_must_be_in(tmp_path, value):
    """75 (a percentage) was told "must be a number in [0.0, 1.0]", and 0, inside that
    interval, was refused as well."""
    text = CLUSTER_YAML.read_text()
    assert "crossover_probability: 0.75" in text
    path = tmp_path / "cluster.yaml"
    path.write_text(text.replace("crossover_probability: 0.75", f"crossover_probability: {value}"))
    with pytest.raises(ClusterError) as err:
        load_cluster(path)
    assert ("run.crossover_probability", f"must be a number in (0, 1], got {value}") in err.value.errors


@pytest.mark.parametrize("key, value, said", [
    ("nodes[0].devices[0].tdp_w", 1e9, "must be between 1 and 100000 W (1 W to 100 kW), got 1e+09: a TDP in mW "
                                       "rather than W, or mistyped? give it in watts"),
    ("nodes[0].devices[0].tdp_w", 0.001, "must be between 1 and 100000 W (1 W to 100 kW), got 0.001: a TDP in kW "
                                         "rather than W? give it in watts"),
    ("nodes[0].devices[1].frequency_hz", 1e15, "must be between 1e+07 and 1e+11 Hz (10 MHz to 100 GHz), got 1e+15: "
                                               "mistyped (an exponent too large?); 2.1 GHz is 2.1e9"),
    ("nodes[0].devices[1].frequency_hz", 1e5, "must be between 1e+07 and 1e+11 Hz (10 MHz to 100 GHz), got 100000: "
                                              "a clock in GHz, MHz or kHz rather than Hz? 2.1 GHz is 2.1e9"),
    ("nodes[0].devices[1].frequency_hz", 2.1, "got 2.1: a clock in GHz, MHz or kHz rather than Hz?"),
    # below 1 Hz: "must be a number >= 1.0", no range and no hint (review)
    ("nodes[0].devices[0].frequency_hz", 0.706, "must be between 1e+07 and 1e+11 Hz (10 MHz to 100 GHz), got 0.706: "
                                                "a clock in GHz, MHz or kHz rather than Hz?"),
    ("master.tdp_w", 2e5, "must be between 1 and 100000 W (1 W to 100 kW), got 200000: a TDP in mW"),
    ("switch.tdp_w", 0.0045, "got 0.0045: a TDP in kW rather than W?"),
    ("master.frequency_hz", 2100, "got 2100: a clock in GHz, MHz or kHz rather than Hz?"),
])
def test_a_tdp_or_clock_outside_any_machine_s_is_refused_with_the_range(tmp_path, key, value, said):
    """A device of 1e9 W or 0.001 W, or clocked at 1e15 Hz or 2.1 Hz (GHz written in
    frequency_hz), was taken, and a model fitted to it."""
    bad = copy.deepcopy(TINY)
    where = bad
    *parents, leaf = key.replace("[", ".").replace("]", "").split(".")
    for part in parents:
        where = where[int(part)] if part.isdigit() else where[part]
    where[leaf] = value
    path = tmp_path / "absurd.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(ClusterError) as err:
        load_cluster(path)
    assert str(err.value).startswith(f"{path}: {key}: ")
    assert len(err.value.errors) == 1 and err.value.errors[0][0] == key and said in err.value.errors[0][1]


def test_the_ends_of_the_physical_ranges_are_accepted():
    edge = copy.deepcopy(TINY)
    edge["master"].update(tdp_w=1, frequency_hz=10e6)
    edge["switch"]["tdp_w"] = 100e3
    edge["nodes"][0]["devices"][0].update(tdp_w=100e3, frequency_hz=100e9)
    cluster = parse_cluster(edge)
    assert cluster.master_tdp_w == 1 and cluster.frequency_hz[0] == 100e9


def test_a_cluster_built_in_code_with_numpy_values_takes_them_and_refuses_nan_and_inf():
    """parse_cluster of a dict a program built: numpy's numbers are numbers (the
    integers come back as Python ints), and numpy's NaN and inf are refused as
    Python's are."""
    good = copy.deepcopy(TINY)
    good["nodes"][0]["devices"][0]["compute_units"] = np.int64(good["nodes"][0]["devices"][0]["compute_units"])
    good["switch"]["tdp_w"] = np.float32(good["switch"]["tdp_w"])
    cluster = parse_cluster(good)
    assert type(cluster.nodes[0].devices[0].compute_units) is int
    for bad_value in (np.float32("nan"), np.float32("inf"), np.float64("-inf")):
        bad = copy.deepcopy(TINY)
        bad["switch"]["tdp_w"] = bad_value
        with pytest.raises(ClusterError) as err:
            parse_cluster(bad)
        assert "must be a number" in dict(err.value.errors)["switch.tdp_w"]
