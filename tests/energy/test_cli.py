"""`parlschedctl model ...` end to end on the real shared files, outputs in tmp_path."""

from __future__ import annotations

import fcntl
import importlib
import json
import re
import os
import pty
import resource
import shlex
import shutil
import signal
import stat
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from parlschedctl.cli import cli
from parlschedctl.model import MAX_NSP, NspRange, _cell
from parlschedd.cpulist import format_cpulist
from parlschedd.energy.measurements import load_measurements
from tests.conftest import NOBODY, in_child_as, read_terminal, wait_for
from tests.energy.conftest import CLUSTER_YAML, MEASUREMENTS_CSV
from tests.energy.test_measure import SLEEP
from tests.host.test_rapl import fake_powercap

QUICK = ["--generations", "12", "--seed", "3"]


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def params(tmp_path_factory):
    out = tmp_path_factory.mktemp("fit") / "params.json"
    r = run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(MEASUREMENTS_CSV), "--repeat", "2",
            "--out", str(out), *QUICK)
    assert r.exit_code == 0, r.output
    assert "NRMSE best of 2 (de)" in r.output and "Powidle[node3.cpu]" in r.output
    return out


def test_fit_json_and_file(params):
    doc = json.loads(params.read_text())
    assert doc["format"] == "parlsched-energy-time/1" and len(doc["model"]["parameters"]) == 22
    assert len(doc["model"]["repetitions"]) == 2 and doc["fit"]["baseline_nrmse"]["time"] > 0
    seconds = [r["seconds"] for r in doc["model"]["repetitions"]]
    assert all(s > 0 for s in seconds) and doc["fit"]["fit_seconds"] == pytest.approx(sum(seconds), abs=2e-3)


def test_a_fit_worse_than_the_mean_is_flagged(params, tmp_path):
    """A 1-node, 1-CPU cluster fitted to the HPMoon data (NRMSE of energy near 3) was
    reported as any other fit."""
    one = tmp_path / "one-cpu.yaml"
    one.write_text(yaml.safe_dump({**yaml.safe_load(CLUSTER_YAML.read_text()), "nodes": [{"name": "n1", "devices": [
        {"name": "cpu", "kind": "cpu", "compute_units": 1, "frequency_hz": 2.1e9, "tdp_w": 85}]}]}))
    r = run("model", "fit", "--cluster", str(one), "--data", str(MEASUREMENTS_CSV), "--json", *QUICK)
    assert r.exit_code == 0, r.output
    fit = json.loads(r.stdout)["fit"]
    assert fit["nrmse"]["energy"] >= 1 and "energy" in fit["worse_than_mean"]
    said = (f"warning: {MEASUREMENTS_CSV}: the fit's NRMSE of energy is {fit['nrmse']['energy']:.3f} (>= 1): its "
            "predictions are no better than the mean of the measured energies")
    assert said in r.stderr and said in fit["notes"][-1], "the JSON says what stderr does (a review)"
    assert json.loads(params.read_text())["fit"]["worse_than_mean"] == []
    assert json.loads(params.read_text())["fit"]["notes"] == []


def test_fit_json_to_stdout_with_ga(tmp_path):
    r = run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(MEASUREMENTS_CSV), "--method", "ga",
            "--json", *QUICK)
    doc = json.loads(r.stdout)
    assert doc["model"]["method"] == "ga" and doc["fit"]["nrmse"]["time"] < 1
    assert r.stderr.startswith("parlschedctl model: fit 1/1 done, "), "progress off a terminal: a line a fit"


def test_fit_loo_reports_the_leave_one_out_error_in_text_and_json(tmp_path):
    """``model fit --loo`` fits once more per configuration, without it, and reports
    how well those fits predict the configuration left out: a line of the text, and
    in --json the NRMSE with the held-out predictions it is of. Eight of the 32 NSp
    (every fourth), so that the nine fits of each run take a few seconds."""
    lines = MEASUREMENTS_CSV.read_text().splitlines()
    few = tmp_path / "every-fourth.csv"
    few.write_text("\n".join([lines[0], *lines[1::4]]) + "\n")
    args = ["model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(few), *QUICK]
    text, as_json = run(*args, "--loo"), run(*args, "--loo", "--json")
    assert text.exit_code == 0 and as_json.exit_code == 0, text.output + as_json.output
    fit = json.loads(as_json.stdout)["fit"]
    held_out = fit["leave_one_out"]
    measured = load_measurements(few)
    assert list(measured.nsp) == [1, 5, 9, 13, 17, 21, 25, 29]
    assert len(held_out["time_s"]) == len(held_out["energy_wh"]) == 8
    for predicted, actual, error in ((held_out["time_s"], measured.time_s, held_out["nrmse_time"]),
                                     (held_out["energy_wh"], measured.energy_wh, held_out["nrmse_energy"])):
        assert error == pytest.approx(np.sqrt(np.mean((np.array(predicted) - actual) ** 2)) / np.std(actual))
    assert (held_out["nrmse_time"], held_out["nrmse_energy"]) != (fit["nrmse"]["time"], fit["nrmse"]["energy"])
    said = re.search(r"^leave-one-out NRMSE: +(time .*)$", text.stdout, re.M)
    assert said and said[1] == (f"time {held_out['nrmse_time']:.3f}, energy {held_out['nrmse_energy']:.3f}"), \
        "the same seed: the same figures"
    labels = [line.split(" time ")[0] for line in text.stdout.splitlines() if "NRMSE" in line and " time " in line]
    assert len(labels) == 4 and len({len(label) for label in labels}) == 1, "the figures aligned"
    assert re.search(r"^fitted in \d+\.\d s, leave-one-out in \d+\.\d s more$", text.stdout, re.M), text.stdout  # not hidden
    without = run(*args)
    assert "leave_one_out" not in json.loads(run(*args, "--json").stdout)["fit"]
    assert "leave-one-out" not in without.stdout and re.search(r"^fitted in \d+\.\d s$", without.stdout, re.M)


def test_predict(params):
    r = run("model", "predict", "--params", str(params), "--nsp", "1-4,32", "--json")
    rows = json.loads(r.output)["predictions"]
    assert [p["nsp"] for p in rows] == [1, 2, 3, 4, 32] and all(p["time_s"] > 0 and p["energy_wh"] > 0 for p in rows)
    text = run("model", "predict", "--params", str(params)).output.splitlines()
    assert len(text) == 33 and text[0].split() == ["nsp", "time_s", "energy_wh"]


@pytest.mark.parametrize("x, width, spec", [(-4.7e303, 10, ".1f"), (4.7e303, 8, "+.1f"), (-4.7e303, 8, "+.1f"),
                                             (4.7e303, 10, ".2f")])
def test_a_number_too_wide_for_its_column_fits_it_signed_too(x, width, spec):
    """The exponent form left no room for a sign: validate's signed columns (+.1f) and
    any negative number came out one character too wide."""
    shown = _cell(x, width, spec)
    assert len(shown) == width and float(shown) == pytest.approx(x, rel=1e-1), shown


def test_huge_predictions_keep_the_table_s_columns(params, tmp_path):
    """A hand-edited W=1e308 printed times 300 digits wide in fixed point, and the
    columns after them went with them."""
    doc = json.loads(params.read_text())
    name = next(k for k in doc["model"]["parameters"] if k.startswith("W["))
    doc["model"]["parameters"][name] = 1e308
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps(doc))
    r = run("model", "predict", "--params", str(huge), "--nsp", "1-3,32")
    lines = r.output.splitlines()
    assert r.exit_code == 0 and {len(line) for line in lines} == {len(lines[0])}, r.output
    times = [float(line.split()[1]) for line in lines[1:]]
    predicted = json.loads(run("model", "predict", "--params", str(huge), "--nsp", "1-3,32", "--json").stdout)
    assert times == pytest.approx([p["time_s"] for p in predicted["predictions"]], rel=1e-3)
    assert any("e+" in line for line in lines)
    said = run("model", "recommend", "--params", str(huge), "--nsp", "1-3,32").stdout  # a 650-digit line before
    assert re.search(r"predicted \S+e\+\d+ s", said) and max(map(len, said.splitlines())) < 300, said


def test_huge_errors_keep_validate_s_summary_in_its_columns(params, tmp_path):
    """A hand-edited T_master=1e150 printed the NRMSE, and the largest error, 150 digits
    wide in fixed point: the energy column went off the table."""
    doc = json.loads(params.read_text())
    doc["model"]["parameters"]["T_master"] = 1e150
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps(doc))
    r = run("model", "validate", "--params", str(huge), "--data", str(MEASUREMENTS_CSV))
    summary = r.output.splitlines()[:5]
    assert r.exit_code == 0 and {len(line) for line in summary[:4]} == {len(summary[0])}, r.output
    assert "e+" in summary[1] and len(summary[4]) < 80, summary


def test_predictions_that_overflow_are_refused(params, tmp_path):
    """Parameters near the largest float (accepted by the loader) overflow a predicted
    time (the table failed on a TypeError); predict then showed n/a with exit 0, as for
    an energy never fitted, where recommend refused the same file."""
    doc = json.loads(params.read_text())
    doc["model"]["parameters"] = {k: 1.7e308 if k.startswith(("W[", "T_")) else v
                                  for k, v in doc["model"]["parameters"].items()}
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps(doc))
    r = run("model", "predict", "--params", str(huge), "--nsp", "1,2", "--json")
    assert r.exit_code == 1 and json.loads(r.stdout)["error"]["code"] == "invalid_input"
    assert f"{huge}: its parameters overflow the predictions at nsp 1-2 (fit again)" in r.stderr
    r = run("model", "recommend", "--params", str(huge), "--objective", "energy")
    assert r.exit_code == 1 and "no candidate's predicted energy is a finite number" in r.output  # not "inf Wh"
    # validate showed "undefined: ... the measured runtimes ... have none [no spread]", and n/a for the energy
    r = run("model", "validate", "--params", str(huge), "--data", str(MEASUREMENTS_CSV), "--json")
    assert r.exit_code == 1 and json.loads(r.stdout)["error"]["code"] == "invalid_input"
    assert f"{huge}: its parameters overflow the predictions at nsp " in r.stderr


def test_plot_and_validate_refuse_what_overflows_as_predict_does(params, tmp_path):
    """plot drew a figure without the model's line from parameters predict refuses, its
    title saying the measured runtimes had no spread; a baseline whose parameters
    overflow gave validate numpy's warnings and the same false reason."""
    doc = json.loads(params.read_text())
    doc["model"]["parameters"]["T_master"] = 1e308
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps(doc))
    out = tmp_path / "fig.png"
    r = run("model", "plot", "--params", str(huge), "--data", str(MEASUREMENTS_CSV), "--out", str(out))
    assert r.exit_code == 1 and f"{huge}: its parameters overflow the predictions at nsp " in r.output, r.output
    assert not out.exists()
    doc = json.loads(params.read_text())
    node = next(iter(doc["baseline"]["theta_s"]))
    doc["baseline"]["theta_s"][node] = 1e308
    huge.write_text(json.dumps(doc))
    for args in (("validate", "--json"), ("plot", "--out", str(out))):
        r = CliRunner().invoke(cli, ["model", args[0], "--params", str(huge), "--data", str(MEASUREMENTS_CSV),
                                     *args[1:]], catch_exceptions=False)
        assert r.exit_code == 1 and f"{huge}: its baseline's parameters overflow the baseline's predictions at nsp " \
            in r.stderr, r.output
        assert "RuntimeWarning" not in r.stderr and not out.exists()


def test_a_huge_generations_count_is_no_overflow(tmp_path):
    """run.generations above 2**63 ended a fit, once done, in an OverflowError's
    traceback (the baseline's workload, an int64 array times it); below, the product
    wrapped around to negative workloads, and the baseline's fit changed with g, which
    its theta absorbs."""
    cluster = yaml.safe_load(CLUSTER_YAML.read_text())
    out = {}
    for g in (1000, 10**29):
        cluster["run"]["generations"] = g
        cluster["run"]["global_migrations"] = 10
        path = tmp_path / f"g{g}.yaml"
        path.write_text(yaml.safe_dump(cluster))
        r = run("model", "fit", "--cluster", str(path), "--data", str(MEASUREMENTS_CSV), "--json", *QUICK)
        assert r.exit_code == 0, r.output
        out[g] = json.loads(r.stdout)["fit"]["baseline_nrmse"]
    assert out[10**29] == pytest.approx(out[1000], rel=1e-6)


def test_inputs_nested_without_end_are_refused_in_a_line(tmp_path):
    """A cluster or parameters file of lists nested 3000 deep ended in a RecursionError's
    traceback."""
    params, cluster = tmp_path / "deep.json", tmp_path / "deep.yaml"
    params.write_text('{"format": ' + "[" * 3000 + "]" * 3000 + "}")
    cluster.write_text("nodes: " + "[" * 3000 + "]" * 3000 + "\n")
    r = run("model", "predict", "--params", str(params))
    assert r.exit_code == 1 and r.stderr == (f"parlschedctl model: {params}: not a parameters file: nested too deeply "
                                             "(lists or objects inside one another hundreds of levels down)\n")
    r = run("model", "fit", "--cluster", str(cluster), "--data", str(MEASUREMENTS_CSV))
    assert r.exit_code == 1 and f"{cluster}: <file>: not valid YAML: nested too deeply" in r.stderr


def test_energy_parameters_outside_the_constraints_are_refused_by_name(params, tmp_path):
    """R1-R3 (Powidle < Pow <= 1.5 TDP; master and switch <= 1.5 TDP), which a fit
    keeps, were not checked in a file: Powidle 1e6 W (TDP 225 W) predicted 60749 Wh."""
    doc = json.loads(params.read_text())
    values = doc["model"]["parameters"]
    node = doc["cluster"]["nodes"][0]
    gpu, tdp = f"{node['name']}.{node['devices'][0]['name']}", node["devices"][0]["tdp_w"]
    edited = tmp_path / "edited.json"
    for changes, said in (({f"Powidle[{gpu}]": 1e6}, f"Powidle[{gpu}] 1e+06 W above Pow[{gpu}] {values[f'Pow[{gpu}]']:g} W (R1)"),
                          ({f"Pow[{gpu}]": 2 * tdp}, f"Pow[{gpu}] {2 * tdp:g} W above 1.5 x its TDP, {1.5 * tdp:g} W (R1)"),
                          ({"Pow_switch": 1.7e308}, "Pow_switch 1.7e+308 W above 1.5 x its TDP")):
        edited.write_text(json.dumps({**doc, "model": {**doc["model"], "parameters": {**values, **changes}}}))
        r = run("model", "predict", "--params", str(edited), "--nsp", "1-2")
        assert r.exit_code == 1 and r.stdout == "", r.output
        assert r.stderr.startswith(f"parlschedctl model: {edited}: malformed parameters: model: parameters outside "
                                   "the model's constraints: ") and said in r.stderr, r.stderr


def test_a_variant_is_fitted_and_shown_beside_the_papers_model_and_named_wherever_it_is_read(params, tmp_path):
    """The spec: a variant of the model is "reported beside the paper's model, never
    instead of it". `fit --master-power whole-run` reported the variant's errors as
    the model's, and predict, validate, recommend and plot never said which model
    they used (review). The paper's eq. 7 is fitted beside it; every reader names it."""
    out = tmp_path / "whole-run.json"
    r = run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(MEASUREMENTS_CSV), "--master-power",
            "whole-run", "--out", str(out), *QUICK)
    assert r.exit_code == 0, r.output
    assert "NRMSE best of 1 (de, whole-run variant of eq. 7):" in r.stdout
    assert re.search(r"fitted in \d+\.\d s, the paper's eq\. 7 in \d+\.\d s more", r.stdout)
    assert re.search(r"the paper's eq\. 7, best of 1: +time 0\.\d+, energy 0\.\d+", r.stdout)
    doc = json.loads(out.read_text())
    assert doc["model"]["master_power"] == "whole-run" and set(doc["fit"]["paper_nrmse"]) == {"time", "energy"}
    named = "energy model: the whole-run variant of eq. 7"
    for args in (["predict"], ["validate", "--data", str(MEASUREMENTS_CSV)], ["recommend", "--objective", "energy"]):
        assert named in run("model", *args, "--params", str(out)).stdout
        assert json.loads(run("model", *args, "--params", str(out), "--json").stdout)["master_power"] == "whole-run"
    paper = run("model", "predict", "--params", str(params), "--json")
    assert json.loads(paper.stdout)["master_power"] == "migration"
    assert "variant" not in run("model", "predict", "--params", str(params)).stdout
    assert "paper_nrmse" not in json.loads(params.read_text())["fit"]


def test_validate(params):
    r = run("model", "validate", "--params", str(params), "--data", str(MEASUREMENTS_CSV), "--json")
    models = json.loads(r.output)["models"]
    assert set(models) == {"proposed", "baseline", "baseline_stored"}
    assert round(models["baseline_stored"]["nrmse_time"], 3) == 0.213
    assert len(models["proposed"]["per_nsp"]) == 32
    text = run("model", "validate", "--params", str(params), "--data", str(MEASUREMENTS_CSV)).output.splitlines()
    assert text[0].split() == ["model", "NRMSE", "time", "NRMSE", "energy"] and "proposed" in text[1]
    header, *rows = text[text.index("") + 2:]  # the per-NSp errors, as the interfaces page says: not only the largest
    assert header.split() == ["nsp", "proposed", "baseline", "stored", "proposed", "baseline", "stored"] and len(rows) == 32
    first = models["proposed"]["per_nsp"][0]
    assert rows[0].split()[:2] == ["1", f"{first['time_rel_error'] * 100:+.1f}"]


def test_an_output_that_cannot_be_written_fails_before_the_work(params, tmp_path):
    """A fit of minutes was computed, then lost on a raw "[Errno 2]"."""
    r = run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(MEASUREMENTS_CSV), "--repeat", "20",
            "--out", str(tmp_path / "no" / "params.json"))
    assert r.exit_code == 1 and f"{tmp_path / 'no' / 'params.json'}: cannot write: no directory {tmp_path / 'no'}" in r.output
    r = run("model", "plot", "--params", str(params), "--data", str(MEASUREMENTS_CSV), "--out", str(tmp_path))
    assert r.exit_code == 2  # click: a directory is not a file to write
    (tmp_path / "file").write_text("")
    r = run("model", "plot", "--params", str(params), "--data", str(MEASUREMENTS_CSV), "--out", str(tmp_path / "file" / "x.png"))
    assert r.exit_code == 1 and f"cannot write: {tmp_path / 'file'} is not a directory" in r.output


def test_plot_out_of_no_figure_format_is_a_usage_error_listing_the_formats(params, tmp_path):
    """--out fig.foo failed (exit 1) where the interfaces page makes a wrong option a
    usage error (exit 2), before any work; no suffix is a PNG, as plot's and run --plot's."""
    out = tmp_path / "fig.foo"
    r = run("model", "plot", "--params", str(tmp_path / "not-read.json"), "--data", str(MEASUREMENTS_CSV),
            "--out", str(out))
    assert r.exit_code == 2 and not out.exists() and "not-read.json" not in r.stderr
    assert f"Invalid value for '--out': {out}: cannot write a .foo figure; use one of " in r.stderr, r.stderr
    assert ".png, " in r.stderr and ".svg" in r.stderr
    for name in ("F.PNG", "fig"):
        r = run("model", "plot", "--params", str(params), "--data", str(MEASUREMENTS_CSV), "--out", str(tmp_path / name))
        assert r.exit_code == 0 and (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_plot_writes_a_png(params, tmp_path):
    out = tmp_path / "fig.png"
    r = run("model", "plot", "--params", str(params), "--data", str(MEASUREMENTS_CSV), "--out", str(out))
    assert r.exit_code == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 1000 and height > 400


def test_a_figure_format_whose_program_is_missing_is_one_line(params, tmp_path, monkeypatch):
    """--out f.pgf was offered, then a traceback: matplotlib's "xelatex not found". It is
    a usage error before any work now, as run --plot's and plot's."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no TeX here, whatever the machine has
    out = tmp_path / "f.pgf"
    r = run("model", "plot", "--params", str(params), "--data", str(MEASUREMENTS_CSV), "--out", str(out))
    assert r.exit_code == 2 and not out.exists()
    assert (f"Invalid value for '--out': {out}: cannot write a .pgf figure: it needs xelatex (matplotlib's "
            "pgf.texsystem), which is not on the PATH" in r.stderr), r.stderr
    r = run("model", "plot", "--params", str(params), "--data", str(MEASUREMENTS_CSV), "--out", str(tmp_path / "f.x"))
    assert r.exit_code == 2 and ".svg" in r.stderr and ".pgf" not in r.stderr  # not offered where it cannot be written


@pytest.mark.parametrize("goal", ["time", "energy", "edp"])
def test_recommend(params, goal):
    r = run("model", "recommend", "--params", str(params), "--objective", goal, "--json")
    doc = json.loads(r.output)
    predicted = json.loads(run("model", "predict", "--params", str(params), "--json").output)["predictions"]
    key = {"time": lambda p: p["time_s"], "energy": lambda p: p["energy_wh"],
           "edp": lambda p: p["time_s"] * p["energy_wh"]}[goal]
    assert doc["nsp"] == min(predicted, key=key)["nsp"]
    # the error the advice rests on (the text's "its time NRMSE ..."), for scripts too
    fitted = json.loads(params.read_text())["fit"]["nrmse"]
    assert doc["nrmse"] == {q: fitted[q] for q in {"time": ["time"], "energy": ["energy"], "edp": ["time", "energy"]}[goal]}


def test_failures_exit_1_with_the_file_named(tmp_path, params):
    bad = tmp_path / "bad.csv"
    bad.write_text("nsp,time_s_mean\n1,x\n")
    r = CliRunner().invoke(cli, ["model", "validate", "--params", str(params), "--data", str(bad)])
    assert r.exit_code == 1 and f"{bad}:2: column time_s_mean: not a number" in r.output
    cut = tmp_path / "cut.csv"  # cut off in a row, as an interrupted copy leaves it: validate took it, exit 0
    cut.write_bytes(MEASUREMENTS_CSV.read_bytes()[:1500])
    r = CliRunner().invoke(cli, ["model", "validate", "--params", str(params), "--data", str(cut)])
    assert r.exit_code == 1 and f"{cut}:13: 12 cells for 15 columns" in r.output, r.output
    r = CliRunner().invoke(cli, ["model", "predict", "--params", str(bad)])
    assert r.exit_code == 1 and "not valid JSON" in r.output
    r = CliRunner().invoke(cli, ["model", "predict", "--params", str(CLUSTER_YAML)])  # said what, not what to give
    assert r.exit_code == 1 and "not valid JSON: Expecting value; --params takes the file `model fit --out` writes" \
        in r.output, r.output


def test_usage_errors_exit_2(params):
    assert CliRunner().invoke(cli, ["model", "predict", "--params", str(params), "--nsp", "5-2"]).exit_code == 2
    individuals = json.loads(params.read_text())["cluster"]["run"]["individuals"]
    for command in (["predict"], ["recommend", "--objective", "energy"]):  # empty subpopulations, or a huge range
        for nsp in (f"1-{individuals + 1}", "1-100000000"):
            r = CliRunner().invoke(cli, ["model", *command, "--params", str(params), "--nsp", nsp])
            assert r.exit_code == 2, r.output
        assert f"above {individuals} (the cluster's run.individuals)" in CliRunner().invoke(
            cli, ["model", *command, "--params", str(params), "--nsp", f"1-{individuals + 1}"]).output
    r = CliRunner().invoke(cli, ["model", "predict", "--params", str(params), "--nsp", str(individuals)])
    assert r.exit_code == 0  # one individual each is still a run
    assert CliRunner().invoke(cli, ["model", "fit", "--cluster", "x"]).exit_code == 2


def test_an_nsp_without_individuals_is_refused_naming_the_limit_as_other_nsp_errors_are_quoted(params):
    """--nsp 1-5000 said "5000 subpopulations of 3840 individuals", the largest value
    given, not the limit nor the others above it; and the option was --nsp there but
    '--nsp' in the other refusals of --nsp."""
    individuals = json.loads(params.read_text())["cluster"]["run"]["individuals"]
    r = run("model", "predict", "--params", str(params), "--nsp", f"2,{individuals + 1}-5000")
    assert r.exit_code == 2
    assert (f"Invalid value for '--nsp': nsp {individuals + 1}-5000 above {individuals} (the cluster's "
            f"run.individuals): each subpopulation needs at least one individual; give NSp <= {individuals}") \
        in " ".join(r.stderr.split()), r.stderr
    r = run("model", "predict", "--params", str(params), "--nsp", "0-3")
    assert r.exit_code == 2 and "Invalid value for '--nsp'" in r.stderr


def test_a_default_span_above_max_nsp_is_refused_as_nsp_is(params, tmp_path):
    """--nsp stops at MAX_NSP, the file's run.subpopulations did not: [1, 200000] ran
    for minutes without a word. Refused now, naming the file and --nsp."""
    doc = json.loads(params.read_text())
    wide = tmp_path / "wide.json"
    for span in ([MAX_NSP + 1, MAX_NSP + 1], [1, 200_000]):  # the first is quick to predict: a refusal is seen at once
        doc["cluster"]["run"].update(individuals=400_000, subpopulations=span)
        wide.write_text(json.dumps(doc))
        for command in (["predict"], ["recommend"]):
            r = run("model", *command, "--params", str(wide))
            assert r.exit_code == 1 and r.stderr == (
                f"parlschedctl model: {wide}: run.subpopulations {span} goes above {MAX_NSP} subpopulations, too many "
                "to predict in reasonable time; ask for the NSp wanted with --nsp (e.g. --nsp 1-32)\n"), r.output
    r = run("model", "predict", "--params", str(wide), "--nsp", "1-3")
    assert r.exit_code == 0, r.output


def test_nsp_range_type():
    t = NspRange()
    assert t.convert("1-3,8,2", None, None) == (1, 2, 3, 8)
    assert t.convert(" 1-2 , 4", None, None) == (1, 2, 4)


@pytest.mark.parametrize("part", ["1-", "+3", "1_000", "\u0663", "1-\u0664", "-3", "1--3", "1 - 3", "", "9" * 5000])
def test_nsp_is_n_or_n_m_in_ascii_digits_and_nothing_else(params, part):
    """int() read "1-" as 1 and took "+3", "1_000" and other scripts' digits."""
    r = CliRunner().invoke(cli, ["model", "predict", "--params", str(params), "--nsp", f"2,{part}"])
    assert r.exit_code == 2 and f"{part!r} is not N or N-M (e.g. 1-32)" in r.output, r.output


def test_measure_then_fit_time_only(tmp_path):
    root = fake_powercap(tmp_path / "powercap", {})
    out = tmp_path / "m.csv"
    r = CliRunner().invoke(cli, ["model", "measure", "--nsp", "1-6", "--out", str(out), "--powercap-root", str(root),
                                 "--", *SLEEP])
    assert r.exit_code == 0, r.output
    assert "no readable RAPL zones" in r.output and "wrote" in r.output
    lines = out.read_text().splitlines()
    assert lines[0] == "nsp,time_s_r1,energy_wh_r1,time_s_mean,energy_wh_mean" and lines[1].endswith(",")
    cluster = tmp_path / "c.yaml"
    cluster.write_text(CLUSTER_YAML.read_text().replace("[1, 32]", "[1, 6]"))
    params = tmp_path / "p.json"
    r = CliRunner().invoke(cli, ["model", "fit", "--cluster", str(cluster), "--data", str(out), "--json",
                                 "--master-power", "whole-run", "--out", str(params), *QUICK])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output[r.output.index("{"):])
    assert doc["fit"]["nrmse"]["energy"] is None and len(doc["model"]["parameters"]) == 8
    assert "paper_nrmse" not in doc["fit"]  # no energy model, no variant of one: nothing fitted beside it
    predicted = run("model", "predict", "--params", str(params), "--json").stdout
    assert json.loads(predicted)["master_power"] is None


def test_measure_reads_rapl(tmp_path):
    root = fake_powercap(tmp_path / "powercap", {"intel-rapl:0": (0, 10**12)})
    counter = root / "intel-rapl:0" / "energy_uj"
    bump = [sys.executable, "-c", f"p = {str(counter)!r}; v = int(open(p).read()); open(p, 'w').write(str(v + 36_000_000))"]
    out = tmp_path / "m.csv"
    r = CliRunner().invoke(cli, ["model", "measure", "--nsp", "1-2", "--repeat", "2", "--out", str(out),
                                 "--powercap-root", str(root), "--", *bump])
    assert r.exit_code == 0 and "no {nsp}" in r.output
    assert out.read_text().splitlines()[1].split(",")[-1] == "0.01"


def test_a_rapl_counter_that_did_not_move_leaves_the_energy_empty_and_says_which_run(tmp_path):
    """It wrote 0 Wh, which fit and validate then refused (must be a positive number)."""
    root = fake_powercap(tmp_path / "powercap", {"intel-rapl:0": (5, 10**12)})  # nothing bumps it
    out = tmp_path / "m.csv"
    r = CliRunner().invoke(cli, ["model", "measure", "--nsp", "1-2", "--repeat", "2", "--out", str(out),
                                 "--powercap-root", str(root), "--", *SLEEP])
    assert r.exit_code == 0, r.output
    for nsp, repetition in ((1, 1), (1, 2), (2, 1), (2, 2)):
        assert (f"warning: nsp {nsp}, run {repetition}: the RAPL energy counters under {root} did not move"
                in r.stderr), r.stderr
    header, *rows = (line.split(",") for line in out.read_text().splitlines())
    assert [[cell for name, cell in zip(header, row, strict=True) if name.startswith("energy")] for row in rows] \
        == [["", "", ""]] * 2
    m = load_measurements(out)
    assert m.nsp.tolist() == [1, 2] and not m.has_energy


def test_a_rapl_zone_gone_during_a_measurement_leaves_the_energy_empty_from_then_on(tmp_path):
    """The read error ended the measurement with a one-line error and left its
    .partial file behind, unsaid; the runs go on now, timed, with the energy empty
    from that run on and each such run saying why."""
    root = fake_powercap(tmp_path / "powercap", {"intel-rapl:0": (0, 10**12)})
    counter = root / "intel-rapl:0" / "energy_uj"
    step = ("import os, sys; p = sys.argv[1]\n"
            "if sys.argv[2] == '2': os.unlink(p)\n"
            "elif os.path.exists(p): v = int(open(p).read()); open(p, 'w').write(str(v + 36_000_000))\n")
    out = tmp_path / "m.csv"
    out.write_text("kept until the measurement is whole\n")
    r = CliRunner().invoke(cli, ["model", "measure", "--nsp", "1-3", "--out", str(out), "--powercap-root",
                                 str(root), "--", sys.executable, "-c", step, str(counter), "{nsp}"])
    assert r.exit_code == 0, r.output
    for nsp in (2, 3):
        assert (f"warning: nsp {nsp}, run 1: the RAPL energy counters under {root} could not be read ({counter}: "
                "No such file or directory), so nothing was measured" in r.stderr), r.stderr
    assert "did not move" not in r.stderr and "warning: nsp 1" not in r.stderr
    m = load_measurements(out)
    assert m.nsp.tolist() == [1, 2, 3] and np.all(m.time_s > 0)
    assert out.read_text().splitlines()[1].split(",")[-1] == "0.01"
    assert [row.split(",")[-1] for row in out.read_text().splitlines()[2:]] == ["", ""]
    assert not list(tmp_path.glob("m.csv.*"))


def test_a_fit_without_a_seed_says_the_one_drawn_and_keeps_it(tmp_path):
    """Without --seed a fit could not be made again: random_state null in the file,
    no seed said. The seed drawn is said and kept; --seed with it fits the same."""
    args = ["model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(MEASUREMENTS_CSV), "--generations", "12"]
    first = run(*args, "--out", str(tmp_path / "a.json"))
    said = re.search(r"seed (\d+) drawn; --seed \1 fits the same again", first.stderr)
    assert said, first.stderr
    kept = json.loads((tmp_path / "a.json").read_text())["model"]
    assert kept["random_state"] == int(said.group(1))
    again = run(*args, "--seed", said.group(1), "--out", str(tmp_path / "b.json"))
    assert "drawn" not in again.stderr
    assert json.loads((tmp_path / "b.json").read_text())["model"]["parameters"] == kept["parameters"]


def test_one_fit_reports_no_spread_of_its_parameters():
    """--repeat 1 wrote an RSD of 0.0 for each parameter: "perfectly stable", of a
    spread never measured. null, as the text leaves its column out."""
    doc = json.loads(run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(MEASUREMENTS_CSV), *QUICK,
                         "--json").stdout)
    rsd = doc["model"]["rsd_percent"]
    assert len(rsd) == 22 and set(rsd.values()) == {None}


def test_progress_goes_to_a_terminals_stderr_with_json_on_stdout(tmp_path):
    """Progress is for people, on stderr when it is a terminal (a real pseudo-terminal
    here), with --json too: a fit of 20 repetitions was two minutes of silence. Stdout
    keeps one JSON document."""
    controller, terminal = os.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "parlschedctl", "model", "fit", "--cluster", str(CLUSTER_YAML),
                             "--data", str(MEASUREMENTS_CSV), "--repeat", "2", *QUICK, "--json"],
                            stdout=subprocess.PIPE, stderr=terminal, stdin=subprocess.DEVNULL)
    os.close(terminal)
    shown = read_terminal(controller)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and json.loads(out)["format"] == "parlsched-energy-time/1"
    assert b"fit 0/2" in shown and b"fit 2/2" in shown, shown


def test_progress_off_a_terminal_is_a_line_as_each_fit_ends():
    """Off a terminal (a batch job's log, 2>log) a fit of 20 repetitions wrote nothing
    for minutes, a stuck job not told from a running one (a review): a whole line as
    each fit ends, with the time so far; stdout keeps the JSON alone."""
    r = run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(MEASUREMENTS_CSV), "--repeat", "2",
            "--seed", "1", *QUICK, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["format"] == "parlsched-energy-time/1"
    said = [re.sub(r", \d+ s$", ", N s", line) for line in r.stderr.splitlines()]
    assert said == ["parlschedctl model: fit 1/2 done, N s", "parlschedctl model: fit 2/2 done, N s"], r.stderr


NOTE_EVERY_TIME = ("import sys, parlschedctl.model as m; m.LONG_FITS_S = m.ESTIMATE_AFTER_S = 0.0; "
                   "from parlschedctl.__main__ import main; sys.argv[0] = 'parlschedctl'; main()")  # any cost noted
NOTE = (r"parlschedctl model: note: fit{then} may take up to \d+ s more: {fits} of up to {most} generations of the "
        r"time phase at [0-9.e-]+ s each{besides}; --generations caps the generations, and fewer measured "
        r"configurations, or smaller NSp, make each cheaper")


def test_progress_off_a_terminal_says_where_a_long_fit_is_and_what_the_fits_may_cost(monkeypatch):
    """A CSV of 1500 configurations took hours a fit (a review): off a terminal it said
    nothing till the first fit ended, and never what the wait would be. Here the
    thresholds are 0 (a line each generation, a note for any cost) on the shared data's
    quick fit: a line for each generation of each phase, in order, between the lines of
    the fits done, and the note once, when the time phase's second generation has told
    the cost of one (the first evaluates the initial population too)."""
    monkeypatch.setattr("parlschedctl.model.LOG_EVERY_S", 0.0)
    monkeypatch.setattr("parlschedctl.model.ESTIMATE_AFTER_S", 0.0)
    monkeypatch.setattr("parlschedctl.model.LONG_FITS_S", 0.0)
    r = run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(MEASUREMENTS_CSV), "--repeat", "2",
            "--seed", "1", "--generations", "3", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["format"] == "parlsched-energy-time/1"
    lines = r.stderr.splitlines()
    assert re.fullmatch(NOTE.format(then="", fits="2 fits", most=3, besides=", the energy phase besides"), lines[1]), lines
    said = [re.sub(r", \d+ s$", ", N s", line) for line in lines[:1] + lines[2:]]
    assert said == [*(f"parlschedctl model: fit 1/2 running: {phase} phase, generation {n} of at most 3, N s"
                      for phase in ("time", "energy") for n in (1, 2, 3)),
                    "parlschedctl model: fit 1/2 done, N s",
                    *(f"parlschedctl model: fit 2/2 running: {phase} phase, generation {n} of at most 3, N s"
                      for phase in ("time", "energy") for n in (1, 2, 3)),
                    "parlschedctl model: fit 2/2 done, N s"], r.stderr


def test_the_cost_note_reckons_every_stage_once_and_no_energy_phase_where_none_is_fitted(tmp_path):
    """Each stage of fit (the fit, the paper's eq. 7 beside a variant, leave-one-out)
    gave its own note, the first leaving the others' cost out; a time-only fit's note
    spoke of an energy phase (a review). Any cost noted here (the thresholds 0)."""
    r = subprocess.run([sys.executable, "-c", NOTE_EVERY_TIME, "model", "fit", "--cluster", str(CLUSTER_YAML),
                        "--data", str(MEASUREMENTS_CSV), "--repeat", "2", "--master-power", "whole-run", "--loo",
                        "--generations", "3", "--seed", "1"], capture_output=True, text=True, timeout=300)
    notes = [line for line in r.stderr.splitlines() if "note:" in line]
    assert r.returncode == 0 and len(notes) == 1, r.stderr
    assert re.fullmatch(NOTE.format(then=", then the fit of the paper's eq. 7 and leave-one-out,", fits="36 fits",
                                    most=3, besides=", the energy phase besides"), notes[0]), notes
    time_only = tmp_path / "time.csv"
    time_only.write_text("".join(f"{row.split(',')[0]},{row.split(',')[11]}\n"  # nsp, time_s_mean
                                 for row in MEASUREMENTS_CSV.read_text().splitlines()))
    r = subprocess.run([sys.executable, "-c", NOTE_EVERY_TIME, "model", "fit", "--cluster", str(CLUSTER_YAML),
                        "--data", str(time_only), "--generations", "3", "--seed", "1"],
                       capture_output=True, text=True, timeout=300)
    notes = [line for line in r.stderr.splitlines() if "note:" in line]
    assert r.returncode == 0 and len(notes) == 1 and re.fullmatch(NOTE.format(then="", fits="1 fit", most=3, besides=""),
                                                                  notes[0]), r.stderr


def test_without_long_generations_the_note_comes_from_the_first_fit(monkeypatch):
    """Fits whose time phase never ran ESTIMATE_AFTER_S (the paper's GA, 1000 quick
    repetitions: half an hour in all) gave no note (a review): the first fit's time
    reckons the rest."""
    monkeypatch.setattr("parlschedctl.model.ESTIMATE_AFTER_S", 3600.0)
    monkeypatch.setattr("parlschedctl.model.LONG_FITS_S", 0.0)
    r = run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(MEASUREMENTS_CSV), "--repeat", "3",
            "--method", "ga", "--generations", "3", "--seed", "1")
    assert r.exit_code == 0
    notes = [line for line in r.stderr.splitlines() if "note:" in line]
    assert len(notes) == 1 and re.fullmatch(
        r"parlschedctl model: note: fit may take about \d+ s more: 2 fits at \d+ s each, as the first took; "
        r"--generations caps .*", notes[0]), r.stderr
    assert r.stderr.index("fit 1/3 done") < r.stderr.index("note:") < r.stderr.index("fit 2/3 done")


def test_a_long_fit_says_what_it_may_cost_on_a_line_of_its_own_on_a_terminal():
    """On a terminal the note came in the middle of the progress line redrawn in place;
    it is a line of its own, and the progress goes on below it, cut to the terminal's
    width (a narrow one wrapped it, each redraw leaving a line behind: a review)."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 30, 0, 0))
    proc = subprocess.Popen([sys.executable, "-c", NOTE_EVERY_TIME, "model", "fit", "--cluster", str(CLUSTER_YAML),
                             "--data", str(MEASUREMENTS_CSV), "--repeat", "2", "--generations", "400", "--seed", "1"],
                            stdout=subprocess.DEVNULL, stderr=terminal)
    os.close(terminal)
    text = read_terminal(controller).decode()
    assert proc.wait(timeout=60) == 0
    assert text.count("note:") == 1
    assert re.search(r"\r\x1b\[Kfit 0/2[^\r]*\r\nparlschedctl model: note: fit may take up to", text), text
    redraws = [part for part in text.split("\r\x1b[K") if part.startswith("fit ")]
    assert len(redraws) > 2 and all(len(part.split("\r")[0]) <= 29 for part in redraws), redraws
    assert any(part.startswith("fit 0/2 · time phase") for part in redraws), redraws


def test_inputs_a_review_broke_give_one_line_errors_or_valid_json(params, tmp_path):
    """Each gave a traceback, a message without the file, invalid JSON or nonsense."""
    lines = MEASUREMENTS_CSV.read_text().splitlines()
    bom = tmp_path / "bom.csv"  # as a spreadsheet saves it
    bom.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode() + b"\n")
    assert run("model", "validate", "--params", str(params), "--data", str(bom)).exit_code == 0
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\x00\x01\xff\xfe")
    for option, path in (("--data", binary), ("--params", binary)):
        args = ["validate", "--params", str(params), "--data", str(path)] if option == "--data" \
            else ["predict", "--params", str(path)]
        r = CliRunner().invoke(cli, ["model", *args])
        assert r.exit_code == 1 and f"{path}" in r.output and "not UTF-8 text" in r.output, r.output
    one = tmp_path / "one.csv"
    one.write_text("\n".join(lines[:2]) + "\n")
    r = CliRunner().invoke(cli, ["model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(one), *QUICK])
    assert r.exit_code == 1 and f"{one}: 1 configuration measured; a fit needs at least 2" in r.output
    r = CliRunner().invoke(cli, ["model", "validate", "--params", str(params), "--data", str(one), "--json"])
    assert r.exit_code == 0
    validated = json.loads(r.output)
    assert validated["models"]["proposed"]["nrmse_time"] is None  # no spread: undefined, and valid JSON
    assert validated["notes"] == [WHY_TIME]  # null said why, as the text does (it is also n/a's null)
    assert json.loads(run("model", "validate", "--params", str(params), "--data", str(MEASUREMENTS_CSV),
                          "--json").output)["notes"] == []
    doc = json.loads(params.read_text())
    name = next(iter(doc["model"]["parameters"]))
    for value in (float("nan"), -1e7, 10**400):
        broken = tmp_path / "broken.json"
        doc["model"]["parameters"][name] = value
        broken.write_text(json.dumps(doc))
        for command in ("predict", "recommend"):
            r = CliRunner().invoke(cli, ["model", command, "--params", str(broken)])
            assert r.exit_code == 1 and f"{broken}: malformed parameters" in r.output, (value, r.output)
    broken.write_text(json.dumps({k: v for k, v in doc.items() if k != "cluster"}))
    r = CliRunner().invoke(cli, ["model", "predict", "--params", str(broken)])
    assert r.exit_code == 1 and f"{broken}: malformed parameters: missing key 'cluster'" in r.output, r.output
    r = CliRunner().invoke(cli, ["model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(MEASUREMENTS_CSV),
                                 "--seed", "-1"])
    assert r.exit_code == 2 and "--seed" in r.output


def test_a_malformed_params_file_names_the_key_at_fault(params, tmp_path):
    """"baseline": {} said "missing key 'rounding'" (of which section?), and "T_com":
    "abc" said "could not convert string to float: 'abc'" (which parameter?)."""
    broken = tmp_path / "broken.json"
    cases = {"baseline": ({}, "missing key 'baseline.rounding'"),
             "baseline.theta_s": ({}, "missing key 'baseline.theta_s.node1'"),
             "baseline.overhead_s": ("abc", "baseline.overhead_s: must be a number, got 'abc'"),
             "model.parameters.T_com": ("abc", "model.parameters.T_com: must be a number, got 'abc'"),
             "baseline.theta_s.node1": (True, "baseline.theta_s.node1: must be a number, got True"),
             "baseline.overhead_j": ("1.5", "baseline.overhead_j: must be a number, got '1.5'"),
             "model.method": (None, "missing key 'model.method'"),
             # read as given: negative runtimes in validate, Python's "argument of type 'NoneType' is not iterable"
             "baseline.theta_s.node2": (-1.0, "baseline: theta_s.node2: must be finite and >= 0, got -1.0"),
             "baseline.pow_w": ("none", "baseline: pow_w: must be an object of node name: value, got 'none'"),
             "baseline.pow_idle_w.node9": (1.0, "baseline: pow_idle_w: node(s) node9 not in the file's cluster")}
    for key, (value, said) in cases.items():
        doc = json.loads(params.read_text())
        *path, last = key.split(".")
        section = doc
        for k in path:
            section = section[k]
        if value is None:
            del section[last]
        else:
            section[last] = value
        broken.write_text(json.dumps(doc))
        r = run("model", "predict", "--params", str(broken))
        assert r.exit_code == 1 and f"{broken}: malformed parameters: {said}" in r.stderr, (key, r.stderr)


def test_measure_keeps_the_configurations_run_before_a_failure(tmp_path):
    """The third configuration fails: the first two are in the CSV (all were lost
    before), and an --out that cannot be written fails before anything runs."""
    out = tmp_path / "m.csv"
    script = "import sys; sys.exit(int(sys.argv[1]) >= 3)"
    r = CliRunner().invoke(cli, ["model", "measure", "--nsp", "1-4", "--out", str(out), "--powercap-root",
                                 str(tmp_path / "none"), "--", sys.executable, "-c", script, "{nsp}"])
    assert r.exit_code == 1 and f"{out} keeps the 2 configurations measured before it" in r.output, r.output
    assert [line.split(",")[0] for line in out.read_text().splitlines()[1:]] == ["1", "2"]
    # again into that file: it was replaced by the configurations of the failed run; they go beside it
    before = out.read_text()
    r = CliRunner().invoke(cli, ["model", "measure", "--nsp", "2-4", "--out", str(out), "--powercap-root",
                                 str(tmp_path / "none"), "--", sys.executable, "-c", script, "{nsp}"])
    [partial] = tmp_path.glob("m.csv.*.partial")
    assert r.exit_code == 1 and f"{partial} keeps the 1 configuration measured before it ({out} is as it was)" \
        in r.output, r.output
    assert out.read_text() == before and partial.read_text().splitlines()[1].startswith("2,")
    partial.unlink()
    out.chmod(0o640)
    r = CliRunner().invoke(cli, ["model", "measure", "--nsp", "1-2", "--repeat", "2", "--out", str(out),
                                 "--powercap-root", str(tmp_path / "none"), "--", sys.executable, "-c", script, "{nsp}"])
    assert r.exit_code == 0 and f"wrote {out}: 2 configurations x 2" in r.output, r.output
    assert out.read_text().startswith("nsp,time_s_r1,time_s_r2,") and not list(tmp_path.glob("*.partial"))
    assert stat.S_IMODE(out.stat().st_mode) == 0o640, "written as any --out is, its mode kept"
    r = CliRunner().invoke(cli, ["model", "measure", "--nsp", "1", "--repeat", "1001", "--out", str(out), "--", "true"])
    assert r.exit_code == 2 and "1001 is not in the range 1<=x<=1000" in r.output  # a traceback for 7 TiB before
    marker = tmp_path / "ran"
    r = CliRunner().invoke(cli, ["model", "measure", "--nsp", "1", "--out", str(tmp_path / "no" / "m.csv"),
                                 "--powercap-root", str(tmp_path / "none"), "--", "touch", str(marker)])
    assert r.exit_code == 1 and f"{tmp_path / 'no' / 'm.csv'}: cannot write: no directory" in r.output
    assert not marker.exists()


def test_measure_interrupted_says_what_out_keeps(tmp_path):
    """Ctrl-C during the second configuration said "Aborted!" alone, not that --out
    holds the first, complete."""
    out = tmp_path / "m.csv"
    script = "import sys, time; time.sleep(60 if sys.argv[1] == '2' else 0)"
    ctl = subprocess.Popen([sys.executable, "-m", "parlschedctl", "model", "measure", "--nsp", "1-3", "--out", str(out),
                            "--powercap-root", str(tmp_path / "none"), "--", sys.executable, "-c", script, "{nsp}"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not out.exists() and time.monotonic() < deadline:  # the first configuration is written
        time.sleep(0.05)
    ctl.send_signal(signal.SIGINT)
    _, err = ctl.communicate(timeout=60)
    assert ctl.returncode == 1 and f"interrupted; {out} keeps the 1 configuration measured before it" in err, err
    assert [line.split(",")[0] for line in out.read_text().splitlines()[1:]] == ["1"]


def test_measure_stopped_by_sigterm_ends_the_command_s_processes_and_says_what_out_keeps(tmp_path):
    """SIGTERM killed parlschedctl alone, and the command ran on: it is ended too
    (SIGTERM, then SIGKILL), with the processes it started (a child it waits for, as a
    shell or a launcher does, ran on after the command had died of the SIGTERM), and
    what --out keeps is said."""
    out, pid_file, err_file = tmp_path / "m.csv", tmp_path / "pids", tmp_path / "err"
    script = ("import os, subprocess, sys\nif sys.argv[1] == '2':\n"
              "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              f"    open({str(pid_file)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
              "    child.wait()")
    with err_file.open("w") as err:  # not a pipe: the command's child, running on, would hold it open
        ctl = subprocess.Popen([sys.executable, "-m", "parlschedctl", "model", "measure", "--nsp", "1-3", "--out",
                                str(out), "--powercap-root", str(tmp_path / "none"), "--", sys.executable, "-c", script,
                                "{nsp}"], stdout=subprocess.DEVNULL, stderr=err)
    assert wait_for(lambda: pid_file.exists() and len(pid_file.read_text().split()) == 2, timeout=60)
    command, its_child = map(int, pid_file.read_text().split())
    ctl.send_signal(signal.SIGTERM)
    assert ctl.wait(timeout=60) == 1
    assert f"interrupted; {out} keeps the 1 configuration measured before it" in err_file.read_text()
    assert wait_for(lambda: not os.path.exists(f"/proc/{command}") or _zombie(command)), "the command ran on"
    assert wait_for(lambda: not os.path.exists(f"/proc/{its_child}") or _zombie(its_child)), "its child ran on"


def test_a_second_sigterm_ends_the_command_and_its_children_at_once(tmp_path):
    """A second SIGTERM hurries the end on: SIGKILL to every process at once, not after
    the 2 s grace (each here ignores SIGTERM, so only the SIGKILL ends them). Raised as
    an exception, one that came while the tree was listed left all of it running (a
    launcher and its 300 workers, in a review); that window is too narrow to hit here,
    and a handler that only sets a flag leaves none."""
    out, pid_file = tmp_path / "m.csv", tmp_path / "pids"
    script = ("import os, signal, subprocess, sys\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']) for _ in range(3)]\n"
              f"open({str(pid_file)!r}, 'w').write(' '.join(str(p) for p in [os.getpid(), *(k.pid for k in kids)]))\n"
              "[k.wait() for k in kids]")
    ctl = subprocess.Popen([sys.executable, "-m", "parlschedctl", "model", "measure", "--nsp", "1", "--out", str(out),
                            "--powercap-root", str(tmp_path / "none"), "--", sys.executable, "-c", script],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert wait_for(lambda: pid_file.exists() and len(pid_file.read_text().split()) == 4, timeout=60)
    pids = [int(p) for p in pid_file.read_text().split()]
    ctl.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    ctl.send_signal(signal.SIGTERM)
    asked = time.monotonic()
    assert ctl.wait(timeout=60) == 1
    assert time.monotonic() - asked < 1.5, "the grace of 2 s waited out"
    assert wait_for(lambda: all(not os.path.exists(f"/proc/{p}") or _zombie(p) for p in pids)), "left running"


def test_measure_whose_stderr_reader_left_still_writes_what_it_measured(tmp_path):
    """Its progress lines, on stderr off a terminal too, failed on a pipe whose reader
    had left (`2>&1 | head -2`, `|& less` quit), and that ended the measurement; so did
    its notes and warnings (here: CMD without {nsp}, a RAPL counter that never moves)."""
    out = tmp_path / "m.csv"
    root = fake_powercap(tmp_path / "powercap", {"intel-rapl:0": (5, 10**12)})
    r, w = os.pipe()
    os.close(r)  # the reader left before the first line
    try:
        ctl = subprocess.run([sys.executable, "-m", "parlschedctl", "model", "measure", "--nsp", "1-3", "--out", str(out),
                              "--powercap-root", str(root), "--", "true"], stdout=subprocess.DEVNULL, stderr=w, timeout=60)
    finally:
        os.close(w)
    assert ctl.returncode == 0
    assert [line.split(",")[0] for line in out.read_text().splitlines()[1:]] == ["1", "2", "3"]


def test_measure_says_which_run_starts_and_what_it_measured_off_a_terminal_too(tmp_path):
    """A progress line updated in place on a terminal ran into the command's output
    ("run 0/4hello"), and off a terminal (a log file) a measurement of hours said
    nothing till its end."""
    out = tmp_path / "m.csv"
    root = fake_powercap(tmp_path / "powercap", {"intel-rapl:0": (0, 10**12)})
    counter = root / "intel-rapl:0" / "energy_uj"
    bump = (f"import sys; print('hello', sys.argv[1]); p = {str(counter)!r}; v = int(open(p).read()); "
            "open(p, 'w').write(str(v + 3_600_000))")
    r = CliRunner().invoke(cli, ["model", "measure", "--nsp", "1,3", "--repeat", "2", "--out", str(out),
                                 "--powercap-root", str(root), "--", sys.executable, "-c", bump, "{nsp}"])
    assert r.exit_code == 0, r.output
    lines = [line for line in r.stderr.splitlines() if line.startswith("run ")]
    said = [re.sub(r"\d+\.\d{3} s", "S s", line) for line in lines]
    command = f"{sys.executable} -c {shlex.quote(bump)}"
    assert said == [f"run 1/4 (nsp 1, 1 of 2): {command} 1", "run 1/4: S s, 0.001 Wh",
                    f"run 2/4 (nsp 1, 2 of 2): {command} 1", "run 2/4: S s, 0.001 Wh",
                    f"run 3/4 (nsp 3, 1 of 2): {command} 3", "run 3/4: S s, 0.001 Wh",
                    f"run 4/4 (nsp 3, 2 of 2): {command} 3", "run 4/4: S s, 0.001 Wh"], r.stderr
    assert "\r" not in r.stderr


def _zombie(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_measure_says_which_rapl_zones_it_could_not_read(tmp_path):
    """A package zone whose counter cannot be read was left out in silence: its
    package's energy uncounted, or, with none readable, no word of why."""
    root = fake_powercap(tmp_path / "powercap", {"intel-rapl:0": (0, 10**12), "intel-rapl:1": (0, 10**12)})
    (root / "intel-rapl:1" / "energy_uj").unlink()
    (root / "intel-rapl:1" / "energy_uj").mkdir()
    r = CliRunner().invoke(cli, ["model", "measure", "--nsp", "1", "--out", str(tmp_path / "m.csv"), "--powercap-root",
                                 str(root), "--", "true"])
    assert r.exit_code == 0 and ("warning: RAPL zones not read under " f"{root} (intel-rapl:1: Is a directory): their "
                                 "packages' energy is not counted") in r.output, r.output


@pytest.mark.parametrize("repeat", ["1001", str(2**63)])
def test_fit_repeat_is_bounded(repeat):
    """--repeat 2**63 ended in numpy's OverflowError traceback, nothing on stdout under
    --json; 10**9 filled memory with seeds before the first fit (review)."""
    r = run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(MEASUREMENTS_CSV), "--repeat", repeat,
            "--json")
    assert r.exit_code == 2 and "1<=x<=1000" in r.stderr
    assert json.loads(r.stdout)["error"]["code"] == "usage"


def _raised_in_an_extensions_init() -> ImportError:
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise ImportError("initialization failed") from exc
    except ImportError as exc:
        return exc


@pytest.mark.parametrize("raised", [KeyboardInterrupt, _raised_in_an_extensions_init],
                         ids=["in Python code", "in an extension's init"])
def test_an_interrupt_while_the_model_commands_load_gives_json_too(monkeypatch, raised):
    """The model commands are imported when asked for (numpy and scipy, a second): a
    Ctrl-C in that second was click's "Aborted!" with nothing on stdout, where one a
    moment later gave --json's error object (review); in an extension module's init
    (scipy's) it comes as an ImportError it caused, which was a traceback. The import
    is made to raise each."""
    import_module = importlib.import_module
    interrupted = []

    def interrupt_once(name: str, *args):
        if name == "parlschedctl.model" and not interrupted:
            interrupted.append(name)
            raise raised()
        return import_module(name, *args)

    monkeypatch.setattr(importlib, "import_module", interrupt_once)
    r = CliRunner().invoke(cli, ["model", "predict", "--params", "p.json", "--json"])
    assert interrupted and r.exit_code == 1, r.output
    assert json.loads(r.stdout) == {"error": {"code": "interrupted", "message": "interrupted"}}
    assert r.stderr == "parlschedctl model: interrupted\n"


def test_an_interrupt_during_a_fits_progress_is_said_on_a_line_of_its_own(tmp_path):
    """On a terminal the progress line is redrawn in place and not ended: the message
    ran on after it, "fit 0/50parlschedctl model: interrupted" (review)."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "parlschedctl", "model", "fit", "--cluster", str(CLUSTER_YAML),
                             "--data", str(MEASUREMENTS_CSV), "--repeat", "50"], stdout=subprocess.DEVNULL,
                            stderr=terminal, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(terminal)
    first = b""
    while b"fit 0/50" not in first:  # fitting
        first += os.read(controller, 1 << 16)
    proc.send_signal(signal.SIGINT)
    shown = (first + read_terminal(controller)).decode()
    assert proc.wait(timeout=60) == 1
    assert "\r\nparlschedctl model: interrupted; " in shown and "0/50parlschedctl" not in shown, shown


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_fit_interrupted_gives_json_and_leaves_no_file(tmp_path, signum):
    """Ctrl-C during fit --json said "Aborted!" and left stdout empty: no JSON; SIGTERM
    (a batch scheduler's time limit) ended it with nothing said (a review)."""
    out = tmp_path / "params.json"
    ctl = subprocess.Popen([sys.executable, "-m", "parlschedctl", "model", "fit", "--cluster", str(CLUSTER_YAML),
                            "--data", str(MEASUREMENTS_CSV), "--repeat", "50", "--out", str(out), "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(3)  # importing and reading done, fitting
    ctl.send_signal(signum)
    stdout, stderr = ctl.communicate(timeout=60)
    assert ctl.returncode == 1 and "parlschedctl model: interrupted" in stderr, stderr
    assert json.loads(stdout)["error"]["code"] == "interrupted"
    assert list(tmp_path.iterdir()) == []


def test_a_fit_whose_sigterm_was_ignored_runs_on():
    """Started with SIGTERM ignored (trap '' TERM, a supervisor's choice), a fit ran on
    through a SIGTERM until every model command took SIGTERM as Ctrl-C (a review)."""
    ctl = subprocess.Popen([sys.executable, "-m", "parlschedctl", "model", "fit", "--cluster", str(CLUSTER_YAML),
                            "--data", str(MEASUREMENTS_CSV), "--repeat", "3", *QUICK, "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
    time.sleep(2)
    ctl.send_signal(signal.SIGTERM)
    stdout, stderr = ctl.communicate(timeout=120)
    assert ctl.returncode == 0 and json.loads(stdout)["format"] == "parlsched-energy-time/1", stderr


def test_measure_leaves_an_existing_out_until_a_configuration_is_measured(tmp_path):
    """A typo in CMD cost the measurements already in --out (truncated at the start)."""
    out = tmp_path / "keep.csv"
    out.write_text(MEASUREMENTS_CSV.read_text())
    r = CliRunner().invoke(cli, ["model", "measure", "--nsp", "1-3", "--out", str(out), "--powercap-root",
                                 str(tmp_path / "none"), "--", str(tmp_path / "no-such-program"), "{nsp}"])
    assert r.exit_code == 1 and out.read_text() == MEASUREMENTS_CSV.read_text()
    assert f"nothing was measured, {out} was not written" in r.output


def test_measure_leaves_the_options_after_cmd_to_cmd(tmp_path):
    """Without --, CMD's own --out was taken as measure's: `true` ran and a file named
    x{nsp} was written."""
    out, seen = tmp_path / "m.csv", tmp_path / "args"
    script = f"import sys; open({str(seen)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')"
    r = CliRunner().invoke(cli, ["model", "measure", "--nsp", "1-2", "--out", str(out), "--powercap-root",
                                 str(tmp_path / "none"), sys.executable, "-c", script, "--out", "x{nsp}", "--nsp", "{nsp}"])
    assert r.exit_code == 0, r.output
    assert seen.read_text().splitlines() == ["--out x1 --nsp 1", "--out x2 --nsp 2"]
    assert [line.split(",")[0] for line in out.read_text().splitlines()[1:]] == ["1", "2"]
    r = CliRunner().invoke(cli, ["model", "measure", "--nsp", "1-2", "--repeats", "2", "--out", str(out), "--",
                                 "touch", str(seen)])  # a typo of ours is a usage error, not the command to run
    assert r.exit_code == 2 and "No such option '--repeats'" in r.output


def test_json_gives_times_and_energies_alike_unrounded(params):
    """Energies were rounded to 6 decimals and times were not: recommend's time was not
    predict's for the same NSp, and fit's NRMSE of energy not the one in its own model."""
    doc = json.loads(params.read_text())
    assert doc["fit"]["nrmse"]["energy"] == doc["model"]["nrmse_energy"]
    best = json.loads(run("model", "recommend", "--params", str(params), "--objective", "energy", "--json").output)
    predicted = {p["nsp"]: p for p in
                 json.loads(run("model", "predict", "--params", str(params), "--json").output)["predictions"]}
    assert (best["time_s"], best["energy_wh"]) == (predicted[best["nsp"]]["time_s"], predicted[best["nsp"]]["energy_wh"])


def test_recommend_names_the_candidates_the_model_cannot_tell_from_the_best(params):
    doc = json.loads(run("model", "recommend", "--params", str(params), "--json").output)
    predicted = {p["nsp"]: p["time_s"] for p in
                 json.loads(run("model", "predict", "--params", str(params), "--json").output)["predictions"]}
    best = predicted[doc["nsp"]]
    assert doc["near_best"] == [k for k, t in predicted.items() if k != doc["nsp"] and t <= best * 1.01]
    text = run("model", "recommend", "--params", str(params)).output
    assert ("the model cannot tell these apart" in text) == bool(doc["near_best"])


def test_recommend_names_many_candidates_in_ranges(params, tmp_path):
    """A model whose predictions are flat over thousands of NSp (here the fitted
    parameters with run.individuals raised, asked of NSp up to 2000) named each one:
    a line of 60 KB. Runs of consecutive NSp are ranges."""
    doc = json.loads(params.read_text())
    doc["cluster"]["run"]["individuals"] = 10**6
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps(doc))
    near = json.loads(run("model", "recommend", "--params", str(flat), "--nsp", "1-2000", "--json").stdout)["near_best"]
    assert len(near) > 100 and any(b == a + 1 for a, b in zip(near, near[1:]))
    text = run("model", "recommend", "--params", str(flat), "--nsp", "1-2000").stdout
    assert f"of it: nsp {format_cpulist(near)};" in text


def test_measured_nsp_without_individuals_are_refused(params, tmp_path):
    """fit, validate and plot took NSp above run.individuals (subpopulations of no one:
    a fit of NRMSE 0.63 / 2.13), which predict refuses."""
    small = tmp_path / "small.yaml"
    small.write_text(CLUSTER_YAML.read_text().replace("individuals: ", "individuals: 10  # was ", 1)
                     .replace("[1, 32]", "[1, 10]"))
    r = CliRunner().invoke(cli, ["model", "fit", "--cluster", str(small), "--data", str(MEASUREMENTS_CSV), *QUICK])
    assert r.exit_code == 1 and "nsp 11, 12" in r.output and "above the cluster's run.individuals (10)" in r.output
    doc = json.loads(params.read_text())
    doc["cluster"]["run"].update(individuals=10, subpopulations=[1, 10])
    doc["fitted_nsp"] = doc["energy_fitted_nsp"] = list(range(1, 11))  # a file fitted on more than 10 is refused as such
    narrow = tmp_path / "narrow.json"
    narrow.write_text(json.dumps(doc))
    for command in (["validate"], ["plot", "--out", str(tmp_path / "f.png")]):
        r = CliRunner().invoke(cli, ["model", *command, "--params", str(narrow), "--data", str(MEASUREMENTS_CSV)])
        assert r.exit_code == 1 and "above the cluster's run.individuals (10)" in r.output, r.output


def test_fit_out_may_not_be_an_input(tmp_path):
    data = tmp_path / "m.csv"
    data.write_text(MEASUREMENTS_CSV.read_text())
    r = CliRunner().invoke(cli, ["model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(data),
                                 "--out", str(data), *QUICK])
    assert r.exit_code == 1 and "is an input of this command" in r.output
    assert data.read_text() == MEASUREMENTS_CSV.read_text()


def test_plot_out_may_not_be_an_input(params, tmp_path):
    """--params params --out params wrote a PNG over the parameters (no suffix: PNG; an
    --out without one is now a usage error, so inputs named as figures stand in)."""
    bare = tmp_path / "params.png"
    bare.write_bytes(params.read_bytes())
    data = tmp_path / "m.svg"
    data.write_bytes(MEASUREMENTS_CSV.read_bytes())
    for out in (bare, data, tmp_path / "." / "params.png"):
        r = run("model", "plot", "--params", str(bare), "--data", str(data), "--out", str(out))
        assert r.exit_code == 1 and f"--out {out} is an input of this command" in r.stderr, r.output
    assert bare.read_bytes() == params.read_bytes() and data.read_bytes() == MEASUREMENTS_CSV.read_bytes()


def test_plot_title_gives_the_error_on_the_data_plotted(params, tmp_path, monkeypatch):
    """It gave the fit's NRMSE whatever the data (0.047 on a subset for 0.999 on all)."""
    from parlschedd.energy import plot as plot_mod

    lines = MEASUREMENTS_CSV.read_text().splitlines()
    subset, fitted = tmp_path / "every-4th.csv", tmp_path / "p.json"
    subset.write_text("\n".join([lines[0], *lines[4::4]]) + "\n")
    assert run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(subset), "--out", str(fitted),
               *QUICK).exit_code == 0
    titles = []
    monkeypatch.setattr(plot_mod, "figure3", lambda *args, title, **kw: titles.append(title))  # the title, not a PNG
    validated = json.loads(run("model", "validate", "--params", str(fitted), "--data", str(MEASUREMENTS_CSV),
                               "--json").stdout)["models"]["proposed"]["nrmse_time"]
    assert round(validated, 3) != round(json.loads(fitted.read_text())["fit"]["nrmse"]["time"], 3)
    assert run("model", "plot", "--params", str(fitted), "--data", str(MEASUREMENTS_CSV),
               "--out", str(tmp_path / "f.png")).exit_code == 0
    assert f"NRMSE time {validated:.3f}" in titles[0]


def test_plot_title_gives_the_energy_error_too_when_there_is_one(params, tmp_path, monkeypatch):
    """The title gave the runtime's NRMSE alone beside a panel of energies."""
    from parlschedd.energy import plot as plot_mod

    titles = []
    monkeypatch.setattr(plot_mod, "figure3", lambda *args, title, **kw: titles.append(title))
    proposed = json.loads(run("model", "validate", "--params", str(params), "--data", str(MEASUREMENTS_CSV),
                              "--json").stdout)["models"]["proposed"]
    assert run("model", "plot", "--params", str(params), "--data", str(MEASUREMENTS_CSV),
               "--out", str(tmp_path / "f.png")).exit_code == 0
    assert f"(NRMSE time {proposed['nrmse_time']:.3f}, energy {proposed['nrmse_energy']:.3f})" in titles[0]
    time_only = tmp_path / "time-only.csv"
    time_only.write_text("".join(",".join(line.split(",")[:6]) + "\n"  # nsp, time_s_r1..r5
                                 for line in MEASUREMENTS_CSV.read_text().splitlines()))
    assert run("model", "plot", "--params", str(params), "--data", str(time_only),
               "--out", str(tmp_path / "f.png")).exit_code == 0
    assert "energy" not in titles[1]


def test_one_missing_energy_costs_only_its_configuration(params, tmp_path):
    """One empty energy cell made the fit drop all 31 other energies ("fitting time
    only"); the energy phase now fits the NSp that have one, and validate scores them."""
    lines = MEASUREMENTS_CSV.read_text().splitlines()
    header = lines[0].split(",")
    energy_columns = [i for i, name in enumerate(header) if name.startswith("energy_wh")]
    cells = lines[5].split(",")  # nsp 5
    for i in energy_columns:
        cells[i] = ""
    holed = tmp_path / "holed.csv"
    holed.write_text("\n".join([*lines[:5], ",".join(cells), *lines[6:]]) + "\n")
    r = CliRunner().invoke(cli, ["model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(holed), "--json", *QUICK])
    assert r.exit_code == 0, r.output
    assert "no energy for nsp 5; the energy phase fits the other 31" in r.output
    doc = json.loads(r.output[r.output.index("{"):])
    assert len(doc["model"]["parameters"]) == 22 and 0 < doc["fit"]["nrmse"]["energy"] < 1
    assert doc["fit"]["baseline_nrmse"]["energy"] is not None
    r = run("model", "validate", "--params", str(params), "--data", str(holed), "--json")
    full = run("model", "validate", "--params", str(params), "--data", str(MEASUREMENTS_CSV), "--json")
    holed_e = json.loads(r.output)["models"]["proposed"]["nrmse_energy"]
    assert holed_e is not None and holed_e != json.loads(full.output)["models"]["proposed"]["nrmse_energy"]


def test_a_fit_with_no_more_configurations_than_parameters_is_called_underdetermined(tmp_path):
    """Energies for two NSp fitted 14 energy parameters to "NRMSE 0.000", and
    recommend then answered with confidence."""
    lines = MEASUREMENTS_CSV.read_text().splitlines()
    header = lines[0].split(",")
    rows = []
    for i, line in enumerate(lines[1:11]):  # nsp 1-10: more than the 8 time parameters
        cells = line.split(",")
        if i >= 3:  # energies for nsp 1-3 only: fewer than the 14 energy parameters
            cells = [c if not name.startswith("energy_wh") else "" for name, c in zip(header, cells, strict=True)]
        rows.append(",".join(cells))
    few = tmp_path / "few.csv"
    few.write_text("\n".join([lines[0], *rows]) + "\n")
    r = CliRunner().invoke(cli, ["model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(few), *QUICK, "--json"])
    assert r.exit_code == 0, r.output
    assert "3 configurations with energy for 14 energy parameters; the fit is underdetermined" in r.stderr
    assert "for 8 time parameters" not in r.stderr
    assert any("the fit is underdetermined" in note for note in json.loads(r.stdout)["fit"]["notes"])


def test_a_fit_to_runtimes_without_spread_is_a_file_the_other_commands_read(tmp_path):
    """Equal runtimes have no NRMSE (eq. 15 divides by their spread): fit wrote it as
    null, and predict, recommend and validate refused the file ("malformed parameters")."""
    data, fitted = tmp_path / "flat.csv", tmp_path / "flat.json"
    data.write_text("nsp,time_s_mean\n4,300\n8,300\n")
    assert run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(data), "--out", str(fitted),
               *QUICK).exit_code == 0
    assert json.loads(fitted.read_text())["model"]["nrmse_time"] is None
    for command in (["predict"], ["recommend"], ["validate", "--data", str(data)]):
        r = run("model", *command, "--params", str(fitted))
        assert r.exit_code == 0, r.output
    predicted = json.loads(run("model", "predict", "--params", str(fitted), "--nsp", "4,8", "--json").output)
    assert [p["time_s"] for p in predicted["predictions"]] == pytest.approx([300, 300])



WHY_TIME = ("undefined: NRMSE divides by the spread of the measured runtimes it is scored on, and they have none "
            "(one configuration, or all equal)")


def test_an_undefined_nrmse_is_said_to_be_undefined_and_why(tmp_path, monkeypatch):
    """Runtimes without spread have no NRMSE: the text said "nan" (recommend: "its time
    NRMSE nan on the runs it was fitted to", validate's table, fit's summary, plot's title)."""
    from parlschedd.energy import plot as plot_mod

    data, fitted = tmp_path / "flat.csv", tmp_path / "flat.json"
    data.write_text("nsp,time_s_mean\n4,300\n8,300\n")
    fit = run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(data), "--out", str(fitted), *QUICK)
    summary = fit.output[fit.output.index("NRMSE best"):]  # the parameters' RSD may be NaN (a mean of 0)
    assert "time undefined, energy n/a" in summary and WHY_TIME in summary and "nan" not in summary
    validated = run("model", "validate", "--params", str(fitted), "--data", str(data)).output
    assert validated.splitlines()[1].split() == ["proposed", "undefined", "n/a"] and WHY_TIME in validated
    assert "nan" not in validated
    recommended = run("model", "recommend", "--params", str(fitted)).output
    assert "(its time NRMSE undefined on the runs it was fitted to)" in recommended and WHY_TIME in recommended
    assert "nan" not in recommended
    out = run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(data), "--json", *QUICK).output
    assert json.loads(out[out.index("{"):])["fit"]["nrmse"] == {"time": None, "energy": None}  # JSON keeps null
    doc = json.loads(run("model", "validate", "--params", str(fitted), "--data", str(data), "--json").output)
    assert doc["models"]["proposed"]["nrmse_time"] is None
    titles = []
    monkeypatch.setattr(plot_mod, "figure3", lambda *args, title, **kw: titles.append(title))  # the title, not a PNG
    assert run("model", "plot", "--params", str(fitted), "--data", str(data), "--out", str(tmp_path / "f.png")).exit_code == 0
    assert "(NRMSE time undefined, runtimes without spread)" in titles[0]


def test_an_undefined_nrmse_of_energy_is_not_said_to_be_missing(tmp_path, monkeypatch):
    """Energies without spread: fit said "energy n/a" for the model, as if none was
    fitted, and "energy nan" for the baseline; validate "nan". Plot's title says why,
    as it does for runtimes."""
    from parlschedd.energy import plot as plot_mod

    data, fitted = tmp_path / "flat-energy.csv", tmp_path / "p.json"
    data.write_text("nsp,time_s_mean,energy_wh_mean\n4,300,10\n8,310,10\n16,320,10\n")
    fit = run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(data), "--out", str(fitted), *QUICK)
    summary = fit.output[fit.output.index("NRMSE best"):]
    assert summary.count("energy undefined") == 3 and "n/a" not in summary and "nan" not in summary
    assert "NRMSE divides by the spread of the measured energies it is scored on, and they have none" in summary
    validated = run("model", "validate", "--params", str(fitted), "--data", str(data)).output
    assert validated.splitlines()[1].split()[2] == "undefined" and "nan" not in validated
    titles = []
    monkeypatch.setattr(plot_mod, "figure3", lambda *args, title, **kw: titles.append(title))  # the title, not a PNG
    assert run("model", "plot", "--params", str(fitted), "--data", str(data), "--out", str(tmp_path / "f.png")).exit_code == 0
    assert "energy undefined, energies without spread)" in titles[0], titles




def run_unprivileged(*args: str) -> tuple[int, str]:
    """Exit code and output of the CLI in a forked child that cannot read a file of mode
    000: as root (who reads every file) it drops to nobody first. What `model plot`
    imports when it runs is imported here: nobody may not read the Python library (it
    is under /root where pyenv installs it)."""
    importlib.import_module("parlschedd.energy.plot")

    def invoke() -> list:
        result = CliRunner().invoke(cli, list(args))
        return [result.exit_code, result.output]

    return tuple(in_child_as(NOBODY, invoke))


def test_an_unreadable_input_fails_naming_the_file_as_a_missing_one_does(params, open_dir):
    """click's readable check made an unreadable input a usage error (exit 2, and no
    request was made) while a missing one failed (exit 1)."""
    ok = {".yaml": open_dir / "c.yaml", ".csv": open_dir / "m.csv", ".json": open_dir / "p.json"}
    bad = {ext: open_dir / f"unreadable{ext}" for ext in ok}
    for ext, source in ((".yaml", CLUSTER_YAML), (".csv", MEASUREMENTS_CSV), (".json", params)):
        for path, mode in ((ok[ext], 0o644), (bad[ext], 0o000)):
            shutil.copyfile(source, path)
            path.chmod(mode)
    out = open_dir / "out"  # where nobody may write
    out.mkdir()
    out.chmod(0o777)
    figure = str(out / "f.png")
    for args, unreadable in (
            (["fit", "--cluster", bad[".yaml"], "--data", ok[".csv"]], bad[".yaml"]),
            (["fit", "--cluster", ok[".yaml"], "--data", bad[".csv"]], bad[".csv"]),
            (["predict", "--params", bad[".json"]], bad[".json"]),
            (["validate", "--params", bad[".json"], "--data", ok[".csv"]], bad[".json"]),
            (["validate", "--params", ok[".json"], "--data", bad[".csv"]], bad[".csv"]),
            (["plot", "--params", bad[".json"], "--data", ok[".csv"], "--out", figure], bad[".json"]),
            (["plot", "--params", ok[".json"], "--data", bad[".csv"], "--out", figure], bad[".csv"]),
            (["recommend", "--params", bad[".json"]], bad[".json"])):
        code, output = run_unprivileged("model", *map(str, args))
        assert code == 1 and f"{unreadable}: " in output and "cannot read: Permission denied" in output, \
            (args, output)
    closed = open_dir / "powercap"  # measure: no readable zones, as when the root is absent
    closed.mkdir(mode=0o000)
    code, output = run_unprivileged("model", "measure", "--nsp", "1", "--out", str(out / "m.csv"),
                                    "--powercap-root", str(closed), "--", "true")
    assert code == 0 and f"no readable RAPL zones under {closed}" in output, output


def test_an_out_that_can_be_written_is_taken_though_it_cannot_be_read(params, open_dir):
    """click's readable check refused an existing write-only --out as a usage error
    (exit 2, "is not readable"); one that cannot be written fails naming it (exit 1)."""
    open_dir.chmod(0o777)  # fit and measure replace the file through a temporary one beside it
    shutil.copyfile(params, open_dir / "p.json")
    (open_dir / "p.json").chmod(0o644)
    outs = {name: open_dir / name for name in ("params.json", "fig.png", "m.csv")}
    commands = {"params.json": ["fit", "--cluster", str(CLUSTER_YAML), "--data", str(MEASUREMENTS_CSV), *QUICK],
                "fig.png": ["plot", "--params", str(open_dir / "p.json"), "--data", str(MEASUREMENTS_CSV)],
                "m.csv": ["measure", "--nsp", "1", "--powercap-root", str(open_dir / "none")]}
    for name, out in outs.items():
        args = [*commands[name], "--out", str(out)] + (["--", "true"] if name == "m.csv" else [])
        for mode in (0o222, 0o444, 0o000):
            out.write_text("")
            out.chmod(mode)
            code, output = run_unprivileged("model", *args)
            if mode == 0o222:  # written, not read
                assert code == 0 and f"wrote {out}" in output and out.stat().st_size > 0, (name, output)
            else:
                assert code == 1 and f"{out}: cannot write: permission denied" in output, (name, mode, output)


@pytest.fixture(scope="module")
def fitted_1_to_5(tmp_path_factory) -> tuple[Path, Path]:
    """The measurements of NSp 1-5 alone, and the parameters fitted on them."""
    tmp = tmp_path_factory.mktemp("fit-1-5")
    lines = MEASUREMENTS_CSV.read_text().splitlines()
    first, fitted = tmp / "nsp-1-5.csv", tmp / "p.json"
    first.write_text("\n".join(lines[:6]) + "\n")
    assert run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(first), "--out", str(fitted),
               *QUICK).exit_code == 0
    return first, fitted


def test_predictions_outside_the_fitted_nsp_are_said_to_be_extrapolated(params, fitted_1_to_5):
    """Fitted on NSp 1-5, predict and recommend answered for NSp 32 (56.6 s, measured
    174 s) as for the NSp they were fitted on, without a word."""
    _, fitted = fitted_1_to_5
    assert json.loads(fitted.read_text())["fitted_nsp"] == [1, 2, 3, 4, 5]
    r = run("model", "predict", "--params", str(fitted), "--nsp", "2-5,7,32", "--json")
    assert r.exit_code == 0
    rows = json.loads(r.stdout)["predictions"]
    assert [p["extrapolated"] for p in rows] == [p["time_extrapolated"] for p in rows] == [False] * 4 + [True] * 2
    assert f"warning: nsp 7,32 outside the NSp {fitted} was fitted on (1-5)" in r.stderr
    r = run("model", "recommend", "--params", str(fitted), "--json")
    doc = json.loads(r.stdout)
    assert doc["extrapolated_candidates"] == list(range(6, 33)) and doc["extrapolated"] == (doc["nsp"] > 5)
    assert f"warning: nsp 6-32 outside the NSp {fitted} was fitted on (1-5)" in r.stderr
    r = run("model", "predict", "--params", str(fitted), "--nsp", "1-5")
    assert r.exit_code == 0 and r.stderr == ""
    r = run("model", "predict", "--params", str(params), "--json")  # fitted on 1-32: all inside
    assert r.stderr == "" and not any(p["extrapolated"] for p in json.loads(r.stdout)["predictions"])


def test_a_recommendation_between_fitted_nsp_far_apart_is_said_to_be_interpolated(tmp_path):
    """Fitted on NSp 1-6 and 32, recommend chose NSp 13 (13.5% off the measured runtime;
    NSp 16 was 50% off) with "extrapolated": false and not a word. It names the
    nearest NSp fitted on, and warns when that is more than one away."""
    lines = MEASUREMENTS_CSV.read_text().splitlines()
    data, fitted = tmp_path / "gap.csv", tmp_path / "p.json"
    data.write_text("\n".join([*lines[:7], lines[32]]) + "\n")
    assert run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(data), "--out", str(fitted),
               *QUICK).exit_code == 0
    assert json.loads(fitted.read_text())["fitted_nsp"] == [1, 2, 3, 4, 5, 6, 32]
    r = run("model", "recommend", "--params", str(fitted), "--nsp", "13", "--json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["nsp"] == 13 and doc["extrapolated"] is False and doc["nearest_fitted_nsp"] == 6
    assert f"warning: nsp 13 was not measured in the runs {fitted} was fitted on, the nearest of which is nsp 6" \
           in r.stderr
    r = run("model", "recommend", "--params", str(fitted), "--nsp", "5-6", "--json")
    assert r.exit_code == 0 and r.stderr == "" and json.loads(r.stdout)["nearest_fitted_nsp"] in (5, 6)
    r = run("model", "recommend", "--params", str(fitted), "--nsp", "7", "--json")  # one beyond 6: no warning
    assert r.exit_code == 0 and r.stderr == "" and json.loads(r.stdout)["nearest_fitted_nsp"] == 6


def test_validate_and_plot_say_which_measured_nsp_are_extrapolated(params, fitted_1_to_5, tmp_path):
    """Fitted on NSp 1-5 and validated on 1-32, validate gave its NRMSE as the fit's
    (mostly of extrapolation) without a word; plot drew it so."""
    first, fitted = fitted_1_to_5
    said = f"warning: nsp 6-32 outside the NSp {fitted} was fitted on (1-5): its predictions there are extrapolated " \
           "and their errors say how far extrapolation goes"
    r = run("model", "validate", "--params", str(fitted), "--data", str(MEASUREMENTS_CSV), "--json")
    assert r.exit_code == 0 and said in r.stderr and json.loads(r.stdout)["extrapolated_nsp"] == list(range(6, 33))
    r = run("model", "plot", "--params", str(fitted), "--data", str(MEASUREMENTS_CSV), "--out", str(tmp_path / "f.png"))
    assert r.exit_code == 0 and said in r.stderr
    r = run("model", "validate", "--params", str(fitted), "--data", str(first), "--json")
    assert r.stderr == "" and json.loads(r.stdout)["extrapolated_nsp"] == []
    r = run("model", "validate", "--params", str(params), "--data", str(MEASUREMENTS_CSV), "--json")
    assert r.stderr == "" and json.loads(r.stdout)["extrapolated_nsp"] == []


def test_plot_marks_the_fitted_nsp_when_it_extrapolates(params, fitted_1_to_5, tmp_path, monkeypatch):
    from parlschedd.energy import plot as plot_mod

    _, fitted = fitted_1_to_5
    spans = []
    monkeypatch.setattr(plot_mod, "figure3", lambda *args, title, fitted_on=None, energy_fitted_on=None:
                        spans.append((fitted_on, energy_fitted_on)))
    for p in (fitted, params):
        assert run("model", "plot", "--params", str(p), "--data", str(MEASUREMENTS_CSV),
                   "--out", str(tmp_path / "f.png")).exit_code == 0
    assert spans == [((1, 5), (1, 5)), (None, None)]  # fitted on 1-32, the second draws nothing outside


@pytest.fixture(scope="module")
def energy_of_1_to_5(tmp_path_factory) -> Path:
    """Parameters fitted on the runtimes of NSp 1-32 and the energies of NSp 1-5 alone
    (the energy columns of the others left empty, as for runs without RAPL)."""
    tmp = tmp_path_factory.mktemp("energy-1-5")
    header, *rows = MEASUREMENTS_CSV.read_text().splitlines()
    names = header.split(",")
    energy = [i for i, name in enumerate(names) if name.startswith("energy_wh") or name == "baseline_energy_wh"]
    data = tmp / "energy-1-5.csv"
    data.write_text("\n".join([header] + [",".join("" if i in energy and int(row.split(",")[0]) > 5 else v
                                                    for i, v in enumerate(row.split(","))) for row in rows]) + "\n")
    fitted = tmp / "p.json"
    assert run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(data), "--out", str(fitted),
               *QUICK).exit_code == 0
    return fitted


def test_energy_fitted_on_fewer_nsp_is_said_to_be_extrapolated_there(energy_of_1_to_5, tmp_path, monkeypatch):
    """The energy phase fitted on NSp 1-5 and the file recorded fitted_nsp 1-32 alone:
    recommend --objective energy chose NSp 28 with "extrapolated": false, and predict
    showed energies there without a word (validated, their NRMSE was 0.12, not 0.00)."""
    from parlschedd.energy import plot as plot_mod

    doc = json.loads(energy_of_1_to_5.read_text())
    assert doc["fitted_nsp"] == list(range(1, 33)) and doc["energy_fitted_nsp"] == [1, 2, 3, 4, 5]
    said = f"warning: nsp 6,32 outside the NSp whose energy {energy_of_1_to_5} was fitted on (1-5): its energy " \
           "predictions there are extrapolated"
    r = run("model", "predict", "--params", str(energy_of_1_to_5), "--nsp", "4-6,32", "--json")
    assert r.exit_code == 0 and said in r.stderr and "outside the NSp " + str(energy_of_1_to_5) not in r.stderr
    rows = json.loads(r.stdout)["predictions"]
    assert [p["extrapolated"] for p in rows] == [p["energy_extrapolated"] for p in rows] == [False, False, True, True]
    assert [p["time_extrapolated"] for p in rows] == [False] * 4, "the runtime is fitted on 1-32 (a review)"
    for goal in ("energy", "edp"):
        r = run("model", "recommend", "--params", str(energy_of_1_to_5), "--objective", goal, "--json")
        best = json.loads(r.stdout)
        assert r.exit_code == 0 and best["extrapolated_candidates"] == list(range(6, 33))
        assert best["extrapolated"] == (best["nsp"] > 5) and "nsp 6-32 outside the NSp whose energy" in r.stderr
    r = run("model", "recommend", "--params", str(energy_of_1_to_5), "--objective", "time", "--json")
    assert r.stderr == "" and json.loads(r.stdout)["extrapolated_candidates"] == []  # the runtime is fitted on 1-32
    r = run("model", "validate", "--params", str(energy_of_1_to_5), "--data", str(MEASUREMENTS_CSV), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["extrapolated_nsp"] == list(range(6, 33))
    spans = []
    monkeypatch.setattr(plot_mod, "figure3", lambda *args, title, fitted_on=None, energy_fitted_on=None:
                        spans.append((fitted_on, energy_fitted_on)))
    assert run("model", "plot", "--params", str(energy_of_1_to_5), "--data", str(MEASUREMENTS_CSV),
               "--out", str(tmp_path / "f.png")).exit_code == 0
    assert spans == [((1, 32), (1, 5))]


def test_an_energy_fitted_nsp_beyond_fitted_nsp_is_refused(energy_of_1_to_5, tmp_path):
    doc = json.loads(energy_of_1_to_5.read_text())
    doc["fitted_nsp"] = [1, 2, 3]
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    r = run("model", "predict", "--params", str(edited))
    assert r.exit_code == 1 and r.stderr == (f"parlschedctl model: {edited}: energy_fitted_nsp: nsp 4-5 outside "
                                             "fitted_nsp (1-3): the energy is fitted on some of the runs the model "
                                             "was fitted on (write the file with `model fit --out`)\n")
    doc["energy_fitted_nsp"] = "1-5"
    edited.write_text(json.dumps(doc))
    r = run("model", "predict", "--params", str(edited))
    assert r.exit_code == 1 and f"{edited}: energy_fitted_nsp: must be a non-empty list of integers" in r.stderr


def test_a_params_file_without_fitted_nsp_is_read_as_before(params, tmp_path):
    """Files written before fitted_nsp was recorded: read, extrapolation unknown (null);
    a fitted_nsp that is not a list of NSp is refused naming the key."""
    doc = json.loads(params.read_text())
    del doc["fitted_nsp"]
    older = tmp_path / "older.json"
    older.write_text(json.dumps(doc))
    r = run("model", "predict", "--params", str(older), "--nsp", "1,40", "--json")
    assert r.exit_code == 0 and r.stderr == ""
    assert [(p["extrapolated"], p["time_extrapolated"], p["energy_extrapolated"])
            for p in json.loads(r.stdout)["predictions"]] == [(None, None, None)] * 2
    r = run("model", "recommend", "--params", str(older), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["extrapolated"] is None
    r = run("model", "validate", "--params", str(older), "--data", str(MEASUREMENTS_CSV), "--json")
    assert r.exit_code == 0 and r.stderr == "" and json.loads(r.stdout)["extrapolated_nsp"] is None
    doc["fitted_nsp"] = [1, "2"]
    older.write_text(json.dumps(doc))
    r = run("model", "predict", "--params", str(older))
    assert r.exit_code == 1 and f"{older}: fitted_nsp: must be a non-empty list of integers >= 1" in r.stderr


def test_a_fitted_nsp_above_the_individuals_is_refused_with_the_limit(params, tmp_path):
    """fitted_nsp [1, 2, 5000] with run.individuals 3840 was read: no model is fitted on
    empty subpopulations, and NSp up to 5000 were then not said to be extrapolated."""
    doc = json.loads(params.read_text())
    doc["fitted_nsp"] = [1, 2, 3841, 5000]
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    for command in (["predict", "--nsp", "1-3"], ["recommend"]):
        r = run("model", *command, "--params", str(edited))
        assert r.exit_code == 1 and r.stdout == ""
        assert r.stderr == (f"parlschedctl model: {edited}: fitted_nsp: nsp 3841,5000 above cluster.run.individuals "
                            "(3840): each subpopulation needs at least one individual, so the NSp fitted on are at "
                            "most 3840 (write the file with `model fit --out`)\n")
    doc["fitted_nsp"] = [1, 3840]
    edited.write_text(json.dumps(doc))
    assert run("model", "predict", "--params", str(edited), "--nsp", "1-3").exit_code == 0


def test_a_figure_cut_short_leaves_the_old_file_and_the_error_names_it(params, tmp_path):
    """Under ulimit -f 20 plot left a truncated PNG in place of the old file, and said
    "cannot write: File too large" without naming the file."""
    out = tmp_path / "fig.png"
    out.write_bytes(b"the old figure")
    limit = 20 * 1024  # the PNG is several times larger

    def ulimit_f() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    r = subprocess.run([sys.executable, "-m", "parlschedctl", "model", "plot", "--params", str(params),
                        "--data", str(MEASUREMENTS_CSV), "--out", str(out)],
                       preexec_fn=ulimit_f, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and f"{out}: cannot write: File too large" in r.stderr, r.stderr
    assert out.read_bytes() == b"the old figure" and [p.name for p in tmp_path.iterdir()] == ["fig.png"]


@pytest.mark.skipif(not os.access("/dev", os.W_OK) or not os.access("/dev/full", os.W_OK),
                    reason="--out /dev/full needs /dev writable (check_writable)")
def test_an_out_that_fails_when_written_is_named(tmp_path):
    """fit --out /dev/full said "cannot write: No space left on device", naming nothing."""
    r = run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(MEASUREMENTS_CSV), "--out", "/dev/full",
            *QUICK)
    assert r.exit_code == 1 and "/dev/full: cannot write: No space left on device" in r.stderr, r.output


def test_a_params_file_with_its_keys_sorted_is_the_same_model(params, tmp_path):
    """jq -S (keys sorted) made the file "malformed: parameters do not match the cluster"
    with both full lists of 22 names; a name really missing or unknown is named alone."""
    doc = json.loads(params.read_text())
    shuffled = tmp_path / "sorted.json"
    shuffled.write_text(json.dumps(doc, sort_keys=True))
    assert list(json.loads(shuffled.read_text())["model"]["parameters"])[0] == "Pow[node1.cpu]"
    r = run("model", "predict", "--params", str(shuffled), "--json")
    assert r.exit_code == 0 and r.stdout == run("model", "predict", "--params", str(params), "--json").stdout
    values = doc["model"]["parameters"]
    values["Pow[node9.gpu]"] = values.pop("Pow[node3.gpu]")
    del values["T_com"]
    shuffled.write_text(json.dumps(doc, sort_keys=True))
    r = run("model", "predict", "--params", str(shuffled))
    assert r.exit_code == 1, r.output
    assert r.stderr.strip().endswith("malformed parameters: model: parameters do not match the cluster: missing T_com, "
                                     "Pow[node3.gpu]; unknown Pow[node9.gpu]")
    doc["model"]["parameters"] = list(values)
    shuffled.write_text(json.dumps(doc))
    r = run("model", "predict", "--params", str(shuffled))
    assert r.exit_code == 1 and "malformed parameters: model: parameters must be an object of name: value" in r.stderr


def test_one_fit_shows_its_progress_from_the_start_and_no_rsd_column():
    """With --repeat 1 (the default) the progress line came only when the fit was done,
    and the table had an "RSD %" column with no values."""
    controller, terminal = pty.openpty()  # progress is shown on a terminal only
    proc = subprocess.Popen([sys.executable, "-m", "parlschedctl", "model", "fit", "--cluster", str(CLUSTER_YAML),
                             "--data", str(MEASUREMENTS_CSV), *QUICK], stdout=subprocess.PIPE, stderr=terminal,
                            text=True)
    os.close(terminal)
    stdout, _ = proc.communicate(timeout=120)
    shown = read_terminal(controller)
    lines = shown.decode().replace("\r\n", "\n").replace("\x1b[K", "").split("\r")  # a line end is \r\n there
    counts = [line for line in lines if "generations" not in line]  # the generations' redraws, if any
    assert proc.returncode == 0 and counts == ["", "fit 0/1", "fit 1/1\n"], shown
    assert stdout.splitlines()[0].split() == ["parameter", "value"] and "RSD" not in stdout
    with_rsd = run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(MEASUREMENTS_CSV), "--repeat", "2",
                   *QUICK).stdout
    assert with_rsd.splitlines()[0].split() == ["parameter", "value", "RSD", "%"]


def test_a_failure_with_json_is_an_error_object_on_stdout(tmp_path):
    """As the daemon's commands do with --json: a script reading stdout gets an object
    either way (it got nothing), and the message stays on stderr."""
    r = CliRunner().invoke(cli, ["model", "predict", "--params", str(tmp_path / "none.json"), "--json"])
    assert r.exit_code == 1
    error = json.loads(r.stdout)["error"]
    assert error["code"] == "io_error" and str(tmp_path / "none.json") in error["message"]
    assert error["message"] in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    r = CliRunner().invoke(cli, ["model", "recommend", "--params", str(bad), "--json"])
    assert r.exit_code == 1 and json.loads(r.stdout)["error"]["code"] == "invalid_input"
    r = CliRunner().invoke(cli, ["model", "recommend", "--params", str(bad)])
    assert r.exit_code == 1 and r.stdout == ""


def test_an_out_that_cannot_be_written_is_an_io_error_in_json(tmp_path):
    """fit --json --out nodir/x.json said invalid_input, though --out /dev/full said
    io_error: both are a file that cannot be written."""
    out = tmp_path / "nodir" / "x.json"
    r = run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(MEASUREMENTS_CSV), "--json", "--out",
            str(out), *QUICK)
    assert r.exit_code == 1
    error = json.loads(r.stdout)["error"]
    assert error["code"] == "io_error" and f"{out}: cannot write: no directory" in error["message"]
    r = run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(MEASUREMENTS_CSV), "--json", "--out",
            str(MEASUREMENTS_CSV), *QUICK)  # an input as --out is the user's mistake, not the file system's
    assert r.exit_code == 1 and json.loads(r.stdout)["error"]["code"] == "invalid_input"


def scaled_measurements(out: Path, columns: str, factor: float) -> Path:
    """The measured data with the columns whose names start with ``columns`` times
    ``factor`` (a unit mistake), written to ``out``."""
    lines = MEASUREMENTS_CSV.read_text().splitlines()
    header = lines[0].split(",")
    rows = [",".join(f"{float(cell) * factor:g}" if name.startswith(columns) and cell else cell
                     for name, cell in zip(header, line.split(","), strict=True)) for line in lines[1:]]
    out.write_text("\n".join([lines[0], *rows]) + "\n")
    return out


def test_validate_says_a_units_mistake_as_fit_does(params, tmp_path):
    """Runtimes in ms: validate printed an NRMSE of 2.661 and a runtime error of -99.9%
    without a word of why, where fit on the same file warns of the units (review)."""
    ms = scaled_measurements(tmp_path / "ms.csv", "time_s", 1000)
    r = run("model", "validate", "--params", str(params), "--data", str(ms), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["models"]["proposed"]["nrmse_time"] > 1
    assert f"parlschedctl model: warning: {ms}: nsp 1-" in r.stderr
    assert "runtimes in ms rather than s" in r.stderr
    assert "warning" not in run("model", "validate", "--params", str(params), "--data", str(MEASUREMENTS_CSV)).stderr


def test_a_poor_fit_s_warning_gives_the_cause_its_parameters_show(tmp_path):
    """Energies in joules (x 3600) were told to "check that the cluster description ...
    is the machine that was measured", though every power sat at its bound, 1.5 x TDP."""
    joules = scaled_measurements(tmp_path / "joules.csv", "energy", 3600)
    r = run("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(joules), "--json", *QUICK)
    assert r.exit_code == 0, r.output
    warning = next(line for line in r.stderr.splitlines() if "NRMSE of energy" in line)
    assert "Pow[node1.gpu], Pow[node1.cpu], Pow[node2.gpu] and " in warning
    assert "sit at their bound, 1.5 x TDP: the energies are more than the cluster's TDPs can give (energies in J, " \
           "not Wh? tdp_w too low, or devices missing from the cluster file?)" in warning
    assert "cluster description" not in warning and "underdetermined" not in warning
    assert warning.endswith("a larger search than --generations 12, --repeat 1 may find a better fit")
    assert f"warning: {joules}: nsp 1-32: energy_wh x 3600 / time_s is a mean power of " in r.stderr
    assert "energies in J rather than Wh (divide them by 3600)" in r.stderr  # said before the fit, as a cause


def test_every_out_refuses_dash(params, tmp_path):
    """``--out -`` wrote a file named ``-``, where a reader takes ``-`` for stdout: each
    output option refuses it as a usage error naming --out."""
    for args in (["fit", "--cluster", str(CLUSTER_YAML), "--data", str(MEASUREMENTS_CSV)],
                 ["plot", "--params", str(params), "--data", str(MEASUREMENTS_CSV)],
                 ["measure", "--nsp", "1"]):
        extra = ["true"] if args[0] == "measure" else []
        r = subprocess.run([sys.executable, "-c", "from parlschedctl.cli import main; main()", "model", *args,
                            "--out", "-", *extra], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})  # this checkout's code
        assert r.returncode == 2 and "--out" in r.stderr and "'-' is not a file here: give a path" in r.stderr, \
            (args, r.stderr)
        assert not (tmp_path / "-").exists(), args


@pytest.mark.skipif(os.geteuid() != 0, reason="root passes the access check that /sys then refuses")
def test_a_write_refused_only_when_made_says_permission_denied_as_the_check_does(params):
    """root passes check_writable on /sys, whose write then fails: it said
    "cannot write: Permission denied", the check's words capitalised as strerror has them."""
    r = run("model", "plot", "--params", str(params), "--data", str(MEASUREMENTS_CSV), "--out", "/sys/x.png")
    assert r.exit_code == 1 and "/sys/x.png: cannot write: permission denied" in r.output, r.output


def _model(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from parlschedctl.cli import main; main()", "model", *args],
                          input=stdin, capture_output=True, text=True, timeout=60)  # a hang is the timeout's error


def _inputs(option: str, path: str) -> list[str]:
    """``option`` given ``path``, the other inputs the shared data's."""
    if option == "--params":
        return ["predict", "--params", path, "--nsp", "1-2"]
    inputs = {"--cluster": str(CLUSTER_YAML), "--data": str(MEASUREMENTS_CSV)} | {option: path}
    return ["fit", *(a for kv in inputs.items() for a in kv), "--repeat", "1", *QUICK]


@pytest.mark.parametrize("option", ["--cluster", "--data", "--params"])
def test_a_device_or_a_fifo_nobody_writes_given_as_an_input_is_refused_at_once(tmp_path, option):
    """`--cluster /dev/zero` read the device until the memory ran out (a MemoryError's
    traceback under a limit), and a FIFO without a writer held `fit` or `predict` up for
    good: a device is refused unread, an io_error naming the file; a FIFO nobody writes
    reads as an empty file."""
    proc = _model(*_inputs(option, "/dev/zero"), "--json")
    assert proc.returncode == 1, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "io_error" and "/dev/zero" in error["message"], error
    assert "not a regular file or a pipe (a device)" in error["message"]
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo, 0o600)
    proc = _model(*_inputs(option, fifo), "--json")
    assert proc.returncode == 1 and fifo in json.loads(proc.stdout)["error"]["message"], proc.stderr
    assert re.search(r"empty|Expecting value", proc.stderr), proc.stderr


def test_an_input_may_come_through_a_pipe(params):
    """--params /dev/stdin, --data <(ssh host cat m.csv): a pipe is read as the file."""
    from_file = _model("predict", "--params", str(params), "--nsp", "1-3", "--json")
    piped = _model("predict", "--params", "/dev/stdin", "--nsp", "1-3", "--json", stdin=params.read_text())
    assert piped.returncode == 0 and json.loads(piped.stdout) == json.loads(from_file.stdout), piped.stderr
