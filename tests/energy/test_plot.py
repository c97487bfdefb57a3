"""The model's figure (the paper's Figure 3), drawn from the real shared measurements
and inspected as matplotlib holds it, not as pixels."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from parlschedd.energy.measurements import load_measurements
from parlschedd.energy.plot import draw_figure3
from tests.energy.conftest import MEASUREMENTS_CSV


def time_only_csv(tmp_path, empty: bool):
    """The shared measurements without energies: the columns dropped, or left empty
    (a machine without RAPL, as `model measure` writes it there)."""
    lines = [line.split(",") for line in MEASUREMENTS_CSV.read_text().splitlines()]
    energy = [i for i, name in enumerate(lines[0]) if "energy" in name]
    if empty:
        rows = [lines[0]] + [["" if i in energy else c for i, c in enumerate(row)] for row in lines[1:]]
    else:
        rows = [[c for i, c in enumerate(row) if i not in energy] for row in lines]
    path = tmp_path / ("empty-energy.csv" if empty else "time-only.csv")
    path.write_text("\n".join(",".join(row) for row in rows) + "\n")
    return load_measurements(path)


def predictions(m, energy: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Stand-in predictions: the measured means, 5% off (NaN energies for a model
    fitted on time only)."""
    return m.time_s * 1.05, m.energy_wh * 1.05 if energy else np.full(len(m.nsp), np.nan)


@pytest.mark.parametrize("empty", [False, True])
def test_time_only_data_draws_the_time_panel_alone(tmp_path, empty):
    """An empty energy panel was drawn beside the runtimes, with a full legend of
    lines that were not there, and no word of why."""
    m = time_only_csv(tmp_path, empty)
    fig = draw_figure3(m, predictions(m, energy=False), predictions(m, energy=False), title="t")
    assert [ax.get_ylabel() for ax in fig.axes] == ["Runtime (s)"]
    assert "Proposed model" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_measured_energies_draw_both_panels(measured):
    fig = draw_figure3(measured, predictions(measured), predictions(measured))
    assert [ax.get_ylabel() for ax in fig.axes] == ["Runtime (s)", "Energy consumption (W·h)"]


def legend(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_an_extrapolating_figure_shades_the_nsp_the_model_was_fitted_on(measured):
    """Fitted on NSp 1-5 and drawn over 1-32, the figure did not show where the fit
    ends and extrapolation begins."""
    fig = draw_figure3(measured, predictions(measured), predictions(measured), fitted_on=(1, 5))
    for ax in fig.axes:
        assert "fitted on NSp 1-5" in legend(ax)
        (span,) = [p for p in ax.patches if p.get_label() == "fitted on NSp 1-5"]
        assert span.get_x() <= 1 and 5 <= span.get_x() + span.get_width() < 6
    fig = draw_figure3(measured, predictions(measured), predictions(measured))
    assert not any(label.startswith("fitted on") for ax in fig.axes for label in legend(ax))


def test_a_single_measured_nsp_shows_each_model_s_prediction(tmp_path):
    """A line of one point draws nothing: the figure of one configuration showed the
    measured dot alone, under a legend naming the models' lines."""
    lines = MEASUREMENTS_CSV.read_text().splitlines()
    one = tmp_path / "one.csv"
    one.write_text("\n".join(lines[:2]) + "\n")
    m = load_measurements(one)
    fig = draw_figure3(m, predictions(m), predictions(m))
    for ax in fig.axes:
        models = [line for line in ax.get_lines() if "model" in str(line.get_label()).lower()]
        assert len(models) == 3
        assert all(line.get_marker() not in ("None", "", None) for line in models), [line.get_marker() for line in models]


def test_a_run_without_energy_costs_the_band_only_its_configuration(tmp_path):
    """One repetition's energy empty (RAPL's counter did not move) left the energy
    panel without its min-max band for every configuration."""
    lines = MEASUREMENTS_CSV.read_text().splitlines()
    header = lines[0].split(",")
    row = lines[3].split(",")
    row[header.index("energy_wh_r2")] = ""
    row[header.index("energy_wh_mean")] = ""  # of the four runs left, as model measure writes it
    holed = tmp_path / "holed.csv"
    holed.write_text("\n".join([*lines[:3], ",".join(row), *lines[4:]]) + "\n")
    m = load_measurements(holed)
    fig = draw_figure3(m, predictions(m), predictions(m))
    for ax in fig.axes:
        assert "Measured (min-max)" in legend(ax), ax.get_ylabel()


def test_a_model_fitted_on_runtimes_alone_names_no_energy_line(measured):
    """Plotted against measured energies, a model fitted on runtimes alone (NaN
    energies) gave an energy panel whose legend named the two models' lines, which
    were not drawn (a review)."""
    fig = draw_figure3(measured, predictions(measured, energy=False), predictions(measured, energy=False))
    runtime, energy = fig.axes
    assert {"Proposed model", "Baseline model (refitted)"} <= set(legend(runtime))
    assert not {"Proposed model", "Baseline model (refitted)"} & set(legend(energy))
    assert "Baseline model [33] (stored)" in legend(energy) and energy.get_title() == ""  # the file's own predictions
    unstored = dataclasses.replace(measured, baseline_time_s=None, baseline_energy_wh=None)
    runtime, energy = draw_figure3(unstored, predictions(measured, energy=False),
                                   predictions(measured, energy=False), fitted_on=(1, 5)).axes
    assert energy.get_title() == "no model fitted to these" and runtime.get_title() == ""
    assert "fitted on NSp 1-5" in legend(runtime) and "fitted on NSp 1-5" not in legend(energy)


@pytest.mark.parametrize("count, each", [(32, True), (256, False)])
def test_many_measured_nsp_get_matplotlib_s_ticks_not_one_each(tmp_path, count, each):
    """Every measured NSp had a tick, a label and a grid line: at 256 the labels ran
    into a black bar and the grid greyed the panels (a review). Up to MOST_TICKS each
    has its own; beyond, a few integer ticks."""
    rows = "\n".join(f"{k},{100 + k}" for k in range(1, count + 1))
    path = tmp_path / "many.csv"
    path.write_text(f"nsp,time_s_r1\n{rows}\n")
    m = load_measurements(path)
    fig = draw_figure3(m, predictions(m, energy=False), predictions(m, energy=False))
    ticks = fig.axes[0].get_xticks()
    if each:
        assert list(ticks) == list(range(1, count + 1))
    else:
        assert len(ticks) <= 12 and all(float(t).is_integer() for t in ticks)
