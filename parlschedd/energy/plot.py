"""Measured vs predicted runtime and energy per NSp, like the paper's Figure 3."""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402

from matplotlib.ticker import MaxNLocator  # noqa: E402

from parlschedd.energy.measurements import Measurements  # noqa: E402
from parlschedd.plots import save_figure  # noqa: E402

MOST_TICKS = 40  # measured NSp each given a tick, up to this many; beyond, matplotlib's integer ticks


def figure3(path: str | Path, m: Measurements, proposed: tuple[np.ndarray, np.ndarray],
            baseline: tuple[np.ndarray, np.ndarray], title: str = "",
            fitted_on: tuple[int, int] | None = None, energy_fitted_on: tuple[int, int] | None = None) -> None:
    """Write :func:`draw_figure3` to ``path``."""
    save_figure(draw_figure3(m, proposed, baseline, title, fitted_on, energy_fitted_on), path)


def draw_figure3(m: Measurements, proposed: tuple[np.ndarray, np.ndarray],
                 baseline: tuple[np.ndarray, np.ndarray], title: str = "",
                 fitted_on: tuple[int, int] | None = None,
                 energy_fitted_on: tuple[int, int] | None = None) -> plt.Figure:
    """Two panels (runtime, energy): measured means with the min-max of repetitions,
    the proposed model, the refitted baseline, and the baseline's stored predictions
    when the measurements carry them. Returned unsaved, so that what it draws can be
    checked without reading pixels.

    Measurements without a single energy (no energy columns, or all empty: a machine
    without RAPL) get the runtime panel alone: an energy panel would be an empty frame
    under a legend of lines that are not there.

    ``fitted_on``, the smallest and largest NSp the model was fitted on, is shaded
    when given (the caller gives it when some NSp drawn are outside): beyond it the
    model extrapolates, and a curve drawn across both looks equally trustworthy. The
    energy panel shades ``energy_fitted_on`` instead where it is given: the NSp whose
    energy was measured, which the energy was fitted on."""
    panels = [(0, "Runtime (s)", m.time_s, m.time_reps, m.baseline_time_s)]
    if np.isfinite(m.energy_wh).any():
        panels.append((1, "Energy consumption (W·h)", m.energy_wh, m.energy_reps, m.baseline_energy_wh))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.6), constrained_layout=True,
                             squeeze=False)
    for i, label, measured, reps, stored in panels:
        ax = axes[0, i]
        models = [(proposed[i], "-", 2.0, "tab:blue", "Proposed model", "s"),
                  (baseline[i], "--", 1.5, "tab:orange", "Baseline model (refitted)", "^"),
                  (stored, ":", 1.5, "tab:red", "Baseline model [33] (stored)", "v")]
        # a model with nothing to draw here (its energy not fitted: NaN) is not named in the legend (a review)
        drawn = [model for model in models if model[0] is not None and np.isfinite(model[0]).any()]
        span = energy_fitted_on if i == 1 and energy_fitted_on is not None else fitted_on
        if span is not None and np.isfinite(proposed[i]).any():  # the range the model drawn was fitted on
            a, b = span
            ax.axvspan(a - 0.4, b + 0.4, color="tab:green", alpha=0.12, lw=0,
                       label=f"fitted on NSp {a}-{b}" if a < b else f"fitted on NSp {a}")
        if np.isfinite(reps).any():
            ax.fill_between(m.nsp, *_spread(reps), color="0.85", label="Measured (min-max)")
        ax.plot(m.nsp, measured, "ko", ms=4, label="Experimental data (mean)")
        for values, style, width, color, name, marker in drawn:
            ax.plot(m.nsp, values, style, color=color, lw=width, label=name, **_lone(marker, m.nsp))
        if not drawn:
            ax.set_title("no model fitted to these", fontsize=9)
        ax.set_xlabel("Number of subpopulations")
        ax.set_ylabel(label)
        if len(m.nsp) <= MOST_TICKS:
            ax.set_xticks(m.nsp)
        else:  # a tick and a grid line each: at 256 NSp the labels ran into a black bar (a review)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(axis="x", labelsize=7)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


def _lone(marker: str, nsp: np.ndarray) -> dict[str, str]:
    """A model's line drawn over one NSp as a hollow ``marker`` (the measured dot shows
    through): a line of one point draws nothing, and a figure of one measured NSp
    showed the measurement alone under a legend of the models' lines."""
    return {"marker": marker, "mfc": "none"} if len(nsp) == 1 else {}


def _spread(reps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per configuration, the least and the most of the repetitions that measured one
    (NaN, a gap in the band, where none did): the band was left out whole when one run
    had no energy, though such a run costs only itself (measurements.py)."""
    with warnings.catch_warnings():  # nanmin's "All-NaN slice": the gap is meant
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmin(reps, axis=1), np.nanmax(reps, axis=1)
