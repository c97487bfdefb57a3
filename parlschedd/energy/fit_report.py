"""What a fit reports beside its parameters: the notes on the measurements it is given
(energies missing, mean powers no cluster of its TDPs draws, no more configurations
than parameters) and its summary (the NRMSE of the best and of the mean repetition, of
the baseline and of leave-one-out, and what a poor fit's parameters show of its cause).

Pure: the caller prints the notes and the summary, and stores ``FitSummary.to_dict()``
in the parameters file (store.params_document).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from parlschedd.cpulist import format_cpulist
from parlschedd.energy.baseline import BaselineModel
from parlschedd.energy.cluster import Cluster, check_measured
from parlschedd.energy.estimator import EnergyTimeModel, parameter_names
from parlschedd.energy.fitting import TDP_MARGIN, DESettings, GASettings, LeaveOneOut, energy_bounds, time_bounds
from parlschedd.energy.measurements import MIN_ENERGY_ROWS, Measurements
from parlschedd.energy.validation import model_errors


def check_fittable(cluster: Cluster, m: Measurements, source: str) -> None:
    """ValueError naming ``source`` when ``m`` cannot be fitted at all: an NSp above the
    cluster's individuals (cluster.check_measured), or fewer than two configurations."""
    check_measured(cluster.run, m.nsp, source)
    if len(m.nsp) < 2:
        raise ValueError(f"{source}: {len(m.nsp)} configuration measured; a fit needs at least 2")


def fit_notes(cluster: Cluster, m: Measurements, source: str) -> list[str]:
    """What a user should know of ``m`` (read from ``source``) before a fit: energies
    missing, mean powers that suggest a unit mistake, and phases with no more
    configurations than parameters. A warning begins with "warning: "."""
    return [*_energy_notes(m, source), *implausible_power(cluster, m, source), *_underdetermined(cluster, m, source)]


# How far outside the powers the model can fit a measured mean power is a unit mistake,
# not a cluster drawing more or less than thought: above FAR x the most it draws (every
# power at its bound, 1.5 x TDP, R1-R3), or below 1 / POWER_FLOOR of it. The model's own
# lower bound, every idle power 0, would never be crossed; a running cluster draws far
# more than 1 % of its TDPs.
FAR = 10
POWER_FLOOR = 100


def implausible_power(cluster: Cluster, m: Measurements, source: str) -> list[str]:
    """A warning naming the configurations whose mean power (energy_wh x 3600 / time_s)
    is far outside what the model can fit, with the unit mistake each side suggests:
    energies in J (x 3600) or TDPs in kW (/ 1000), runtimes in ms, energies in kWh or
    TDPs in mW (x 1000). A cluster file's wrong unit puts every configuration past one
    side: told of the data alone, a user whose measurements were right was sent to
    check them. Said by fit and by validate (whose NRMSE of runtimes in ms came
    without a word of why)."""
    most = TDP_MARGIN * (cluster.tdp_w.sum() + cluster.master_tdp_w + cluster.switch_tdp_w)
    with np.errstate(invalid="ignore"):
        power = m.energy_wh * 3600 / m.time_s  # NaN where no energy: neither side
    reach = f"the most the cluster draws ({most:.3g} W, {TDP_MARGIN:g} x every TDP)"
    sides = [(power > FAR * most, f"over {FAR} x {reach}", "energies in J rather than Wh (divide them by 3600), or the "
              "cluster file's tdp_w in kW rather than W?"),
             (power < most / POWER_FLOOR, f"under 1/{POWER_FLOOR} of {reach}",
              "runtimes in ms rather than s, energies in kWh rather than Wh, or the cluster file's tdp_w in mW "
              "rather than W?")]
    return [f"warning: {source}: nsp {format_cpulist(m.nsp[where].tolist())}: energy_wh x 3600 / time_s is a mean "
            f"power of {np.median(power[where]):.3g} W, {side}: {mistake}" for where, side, mistake in sides if where.any()]


def _energy_notes(m: Measurements, source: str) -> list[str]:
    """Which configurations the energy phase fits: all, all but some, or none (too few)."""
    rows = np.isfinite(m.energy_wh)
    if not m.has_energy:
        return [f"{source}: energy measured for {np.count_nonzero(rows)} NSp, the energy phase needs "
                f"{MIN_ENERGY_ROWS}; fitting time only"]
    if not rows.all():
        missing = ", ".join(str(int(k)) for k in m.nsp[~rows])
        return [f"{source}: no energy for nsp {missing}; the energy phase fits the other {np.count_nonzero(rows)}"]
    return []


def _phases(cluster: Cluster, m: Measurements) -> list[tuple[str, int, int]]:
    """(phase, configurations it fits, its parameters) for time, and energy when fitted."""
    time_parameters = len(parameter_names(cluster, False))
    phases = [("time", len(m.nsp), time_parameters)]
    if m.has_energy:
        phases.append(("energy", int(np.count_nonzero(np.isfinite(m.energy_wh))),
                       len(parameter_names(cluster)) - time_parameters))
    return phases


def _underdetermined(cluster: Cluster, m: Measurements, source: str) -> list[str]:
    """With no more configurations than parameters a fit can match every one whatever
    the truth: its NRMSE (0.000) then says nothing of its predictions."""
    return [f"warning: {source}: {measured} configurations with {what} for {parameters} {what} parameters; the fit "
            "is underdetermined and its error says nothing of its predictions: measure more configurations"
            for what, measured, parameters in _too_few(cluster, m)]


def _too_few(cluster: Cluster, m: Measurements) -> list[tuple[str, int, int]]:
    """The phases (_phases) with no more configurations than parameters."""
    return [phase for phase in _phases(cluster, m) if phase[1] <= phase[2]]


# A parameter within this fraction of its search box's width from a bound sits at it.
AT_BOUND = 1e-3


@dataclass(frozen=True)
class Evidence:
    """What a poor fit shows of its cause: parameters pinned at a bound of their search
    box (fitting.time_bounds, energy_bounds: W_ij at 1.5 x the slowest the runtimes
    allow, powers at 1.5 x TDP, R1-R3 of the paper's eqs. 12-14), phases with no more configurations
    than parameters, and a search budget below the default."""

    at_upper: tuple[str, ...] = ()  # parameters at the upper bound of their box
    at_zero: tuple[str, ...] = ()  # active powers (Pow[...]) at 0 W, which no working device draws
    underdetermined: tuple[tuple[str, int, int], ...] = ()  # (phase, configurations, parameters)
    budget: str | None = None  # the search options below the defaults or the paper's 20 repeats, given or not


def _evidence(model: EnergyTimeModel, m: Measurements) -> Evidence:
    names = list(model.parameters())
    boxes = [time_bounds(model.problem_)] + ([energy_bounds(model.cluster)] if model.energy_params_ is not None else [])
    low, high = np.vstack(boxes).T
    value, margin = model.fit_.vector, AT_BOUND * (high - low)
    upper = tuple(n for n, v, hi, d in zip(names, value, high, margin, strict=True) if v >= hi - d)
    zero = tuple(n for n, v, lo, d in zip(names, value, low, margin, strict=True) if n.startswith("Pow[") and v <= lo + d)
    under = tuple(_too_few(model.cluster, m))
    default = {"ga": GASettings().generations, "de": min(DESettings().time_generations, DESettings().energy_generations)}
    cut = []
    if model.generations is not None and model.generations < default[model.method]:
        cut.append(f"--generations {model.generations}")
    if model.repeat < 20:  # the paper keeps the best of 20
        cut.append(f"--repeat {model.repeat}")
    return Evidence(upper, zero, under, ", ".join(cut) or None)


def _named(names: list[str], most: int = 3) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _advice(what: str, e: Evidence) -> list[str]:
    """Causes of a poor fit of ``what`` (time, energy) the evidence points to, most
    telling first; the cluster description when nothing is pinned."""
    mine = [n for n in e.at_upper if n.startswith("Pow") == (what == "energy")]  # Pow, Powidle, Pow_master, Pow_switch
    said = []
    if mine and what == "energy" and any(phase == "time" for phase, _, _ in e.underdetermined):
        # the units' check passed on 2 runs of real data: the time fit had put most of each migration in the
        # master's and the switch's times, which eq. 7 charges at their few watts (review)
        said.append(f"{_named(mine)} sit at their bound, {TDP_MARGIN:g} x TDP: the energies are more than the "
                    "cluster's TDPs can give over the fitted times (the time fit, underdetermined, may have given "
                    "the runtimes to the master and the switch, which draw little; or energies in J, not Wh?)")
    elif mine and what == "energy":
        said.append(f"{_named(mine)} sit at their bound, {TDP_MARGIN:g} x TDP: the energies are more than the "
                    "cluster's TDPs can give (energies in J, not Wh? tdp_w too low, or devices missing from the cluster file?)")
    elif mine:
        said.append(f"{_named(mine)} sit at their upper bound: the runtimes are longer than the cluster's devices "
                    "would take (fewer compute units or slower clocks than the cluster file says?)")
    if e.at_zero and what == "energy":
        said.append(f"{_named(list(e.at_zero))} sit at 0 W: the energies are less than the runtimes need "
                    "(runtimes in ms, not s? energies in kWh?)")
    if not said:
        said.append("check that the cluster description (nodes, devices, compute units) is the machine that was "
                    "measured")
    said += [f"{measured} configurations for {parameters} {phase} parameters leave the fit underdetermined"
             for phase, measured, parameters in e.underdetermined if phase == what]
    if e.budget:
        said.append(f"a larger search than {e.budget} may find a better fit")
    return said


@dataclass(frozen=True)
class Nrmse:
    """The NRMSE of time and of energy (eqs. 15, 16): NaN where undefined (eq. 15
    divides by the spread of the measurements, and they have none), energy None where
    none was fitted. JSON has null for both."""

    time: float
    energy: float | None

    def to_dict(self) -> dict[str, float | None]:
        return {"time": self.time, "energy": self.energy}


@dataclass(frozen=True)
class FitSummary:
    """The errors of a fit on the measurements it was fitted to (``data``)."""

    data: str
    best: Nrmse  # the repetition kept
    mean: Nrmse  # over the repetitions
    baseline: Nrmse  # the baseline model of eq. 5, fitted to the same data
    fit_seconds: float  # wall-clock, all repetitions
    leave_one_out: LeaveOneOut | None = None
    # the paper's eq. 7 fitted to the same data when the kept model is a variant of it
    # (the spec: a variant is reported beside the paper's model, never instead of it)
    paper: Nrmse | None = None
    evidence: Evidence = field(default_factory=Evidence)  # for the advice of poor_fit_notes

    def to_dict(self) -> dict[str, Any]:
        """The ``fit`` part of the parameters file and of `model fit --json`; NaN is
        left to the writer (store.json_safe)."""
        d: dict[str, Any] = {"data": self.data, "nrmse": self.best.to_dict(), "nrmse_mean": self.mean.to_dict(),
                             "baseline_nrmse": self.baseline.to_dict(), "fit_seconds": self.fit_seconds,
                             "worse_than_mean": self.worse_than_mean}
        if self.paper is not None:
            d["paper_nrmse"] = self.paper.to_dict()
        if self.leave_one_out is not None:
            lo, errors = self.leave_one_out, self.leave_one_out_nrmse
            d["leave_one_out"] = {"nrmse_time": errors.time, "nrmse_energy": errors.energy,
                                  "time_s": lo.time_s.tolist(), "energy_wh": lo.energy_wh.tolist()}
        return d

    @property
    def worse_than_mean(self) -> list[str]:
        """The quantities (time, energy) the kept fit predicts no better than their mean
        would: NRMSE >= 1 (eq. 15 divides the RMSE by the spread of the measurements,
        which is the RMSE of predicting their mean for every NSp). Such a fit is most
        often of a cluster description that is not the machine measured."""
        errors = {"time": self.best.time, "energy": self.best.energy}
        return [what for what, error in errors.items() if error is not None and error >= 1]

    def poor_fit_notes(self) -> list[str]:
        """A warning for each quantity in ``worse_than_mean``, naming the data and the
        causes its ``evidence`` points to."""
        measured = {"time": "runtimes", "energy": "energies"}
        return [f"warning: {self.data}: the fit's NRMSE of {what} is {getattr(self.best, what):.3f} (>= 1): its predictions are "
                f"no better than the mean of the measured {measured[what]}; " + "; ".join(_advice(what, self.evidence))
                for what in self.worse_than_mean]

    @property
    def leave_one_out_nrmse(self) -> Nrmse | None:
        """The NRMSE of each configuration predicted by a fit to the others."""
        lo = self.leave_one_out
        return None if lo is None else Nrmse(lo.nrmse_time, None if self.best.energy is None else lo.nrmse_energy)


def summarise_fit(model: EnergyTimeModel, baseline: BaselineModel, m: Measurements, source: str,
                  leave_one_out: LeaveOneOut | None = None, paper: EnergyTimeModel | None = None) -> FitSummary:
    """The summary of ``model`` and ``baseline``, both fitted to ``m`` (read from
    ``source``), of ``leave_one_out`` when it was run, and of ``paper``, the paper's
    model fitted beside a variant."""
    reps = model.repetitions_.fits
    on_data = model_errors(*baseline.predict(m.nsp), m)
    fitted_energy = model.energy_params_ is not None
    return FitSummary(
        data=source,
        best=Nrmse(model.nrmse_time_, float(model.nrmse_energy_) if fitted_energy else None),
        mean=Nrmse(float(np.mean([f.nrmse_time for f in reps])),
                   float(np.mean([f.nrmse_energy for f in reps])) if fitted_energy else None),
        baseline=Nrmse(on_data.nrmse_time, on_data.nrmse_energy if fitted_energy else None),
        fit_seconds=round(sum(model.repetition_seconds_), 3),
        leave_one_out=leave_one_out,
        paper=None if paper is None else Nrmse(paper.nrmse_time_, float(paper.nrmse_energy_) if fitted_energy else None),
        evidence=_evidence(model, m))
