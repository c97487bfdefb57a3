"""`parlschedctl model ...`: fit, query and validate the energy-time model (issue 4).

Thin: each command parses, calls parlschedd.energy, and prints. Exit codes: 0 success,
1 failure (one message on stderr saying what and where), 2 usage error. Progress of long
work goes to stderr when it is a terminal, with --json too (stdout keeps the JSON).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import secrets
import shlex
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import numpy as np

from parlschedd.cpulist import format_cpulist
from parlschedd.energy import recommendation, validation
from parlschedd.energy.baseline import BaselineModel
from parlschedd.energy.cluster import (MAX_NSP, ClusterError, NspError, check_measured, load_cluster,
                                      nsp_candidates)
from parlschedd.energy.estimator import EnergyTimeModel
from parlschedd.energy.fit_report import (FitSummary, Nrmse, check_fittable, fit_notes, implausible_power,
                                         summarise_fit)
from parlschedd.energy.fitting import METHODS, Generation, Problem, leave_one_out
from parlschedd.energy.measure import Measured, MeasureError, Run, measure
from parlschedd.energy.measurements import Measurements, MeasurementsError, load_measurements, write_measurements
from parlschedd.energy.metrics import OBJECTIVES
from parlschedd.energy.model import MASTER_POWER, PAPERS_MASTER_POWER, SUBPOP_SIZES
from parlschedd.energy.store import Fitted, ParamsError, json_safe, load_params, params_document, save_params
from parlschedd.host.rapl import POWERCAP_ROOT, package_zones
from parlschedd.words import counted, duration
from parlschedctl.render import clip, terminal_size
from parlschedctl.outputs import (FILE, OUT_FILE, CannotWrite, check_figure, check_writable, figure_suffix, is_terminal,
                                  print_json, writing)

FAILURES = (ClusterError, MeasurementsError, ParamsError, MeasureError, ValueError, OSError)
# Files are replaced whole (atomicfile), so Ctrl-C leaves none half-written.
INTERRUPTED = "interrupted; an --out file is as it was, or written whole"
MAX_FITS = 1000  # fit --repeat: 2**63 was a traceback, 10**9 filled memory with seeds before the first fit
# Progress of fits (FitProgress): a note of their cost when it may pass LONG_FITS_S, taken
# once a time phase's generations have run ESTIMATE_AFTER_S (else as the first fit ends);
# a line at most every LOG_EVERY_S off a terminal, a redraw at most every REDRAW_EVERY_S on one
LONG_FITS_S = 300.0
ESTIMATE_AFTER_S = 2.0
LOG_EVERY_S = 60.0
REDRAW_EVERY_S = 0.25
_progress = {"open": False}  # a progress line on stderr not ended: a message after it starts a line of its own


_NSP_PART = re.compile(r"([0-9]+)(?:-([0-9]+))?")


def _nsp_part(part: str) -> tuple[int, int] | None:
    """(N, M) of one part of --nsp, ``N-M`` or ``N`` (N-N) in ASCII digits; None for
    anything else rather than a guess at what was meant: an open range "1-" has no end
    to take (it was read as 1), and "+3", "1_000" or other scripts' digits, which int()
    takes, are not how a count is written on a command line."""
    m = _NSP_PART.fullmatch(part.strip())
    try:
        return (int(m[1]), int(m[2] or m[1])) if m else None
    except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits())
        return None


class NspRange(click.ParamType):
    """NSp values: ``1-32``, ``8`` or a comma list of both, e.g. ``1,2,4-8``."""

    name = "NSP"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[int, ...]:
        if isinstance(value, tuple):
            return value
        found: set[int] = set()
        for part in str(value).split(","):
            bounds = _nsp_part(part)
            if bounds is None:
                self.fail(f"{part!r} is not N or N-M (e.g. 1-32)", param, ctx)
            a, b = bounds
            if a < 1 or b < a:
                self.fail(f"{part!r}: need 1 <= N <= M", param, ctx)
            if b > MAX_NSP:
                self.fail(f"{part!r}: above {MAX_NSP} subpopulations", param, ctx)
            found.update(range(a, b + 1))
        return tuple(sorted(found))


NSP = NspRange()


def _candidates(fitted: Fitted, nsp: tuple[int, ...] | None, params_path: str) -> np.ndarray:
    """The NSp asked for (default: the cluster's run.subpopulations); a usage error
    above run.individuals, and a failure naming the file when its run.subpopulations
    go above MAX_NSP."""
    try:
        return nsp_candidates(fitted.cluster.run, nsp)
    except NspError as exc:
        if not nsp:  # the file's span, not an option given
            raise ValueError(f"{params_path}: {exc} with --nsp (e.g. --nsp 1-32)") from exc
        # A list of names, which click quotes ('--nsp') as in its other refusals of --nsp
        raise click.BadParameter(str(exc), param_hint=["--nsp"]) from exc


def _extrapolated(fitted: Fitted, ks: np.ndarray, params_path: str,
                  then: str = "may be far off; measure some of them and fit again",
                  energy: bool = True) -> list[bool] | None:
    """Per NSp in ``ks``, whether the model extrapolates there (store.Fitted.extrapolated;
    with ``energy``, the runtime or the energy), with a warning on stderr naming those
    NSp and saying what ``then``; None for a parameters file that does not record the
    NSp it was fitted on. The energy's NSp are warned of apart: fitted on the runs with
    a measured energy, it may extrapolate where the runtime does not."""
    outside = fitted.extrapolated(ks)
    if outside is None:
        return None
    _warn_outside(ks[outside], fitted.fitted_nsp, f"the NSp {params_path} was fitted on", "its predictions", then)
    if energy and fitted.energy_fitted_nsp is not None:
        energy_only = fitted.extrapolated(ks, energy=True) & ~outside
        _warn_outside(ks[energy_only], fitted.energy_fitted_nsp, f"the NSp whose energy {params_path} was fitted on",
                      "its energy predictions", then)
        outside |= energy_only
    return outside.tolist()


def _warn_outside(nsp: np.ndarray, fitted_on: tuple[int, ...], range_of: str, whose: str, then: str) -> None:
    if nsp.size:
        click.echo(f"parlschedctl model: warning: nsp {format_cpulist(nsp.tolist())} outside {range_of} "
                   f"({fitted_on[0]}-{fitted_on[-1]}): {whose} there are extrapolated and {then}", err=True)


def _nsp_where(ks: np.ndarray, outside: list[bool]) -> list[int]:
    """The NSp of ``ks`` that ``_extrapolated`` marked."""
    return [int(k) for k, x in zip(ks, outside, strict=True) if x]


def _measured_outside(fitted: Fitted, m: Measurements, params_path: str) -> list[int] | None:
    """The measured NSp the model extrapolates to (None: not recorded), warned of: their
    errors measure how far the model extrapolates, not how well it fits, and a user
    reading validate's NRMSE as the fit's would trust it too much or too little."""
    ks = np.unique(m.nsp)
    outside = _extrapolated(fitted, ks, params_path, then="their errors say how far extrapolation goes, not how "
                                                          "well the model fits; fit with them to use those NSp")
    return None if outside is None else _nsp_where(ks, outside)


def fails_cleanly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Library errors become one line on stderr and exit 1; with --json also an error
    object on stdout, as the daemon's commands give one (code ``io_error`` for a file
    that cannot be read or written, ``interrupted`` for Ctrl-C or SIGTERM, else
    ``invalid_input``). Ctrl-C was click's "Aborted!" with nothing on stdout, which a
    script reading --json could not parse; SIGTERM (a batch scheduler's time limit,
    timeout(1)) ended a fit with nothing said at all (a review)."""

    def code(exc: BaseException) -> str:
        if isinstance(exc, KeyboardInterrupt):
            return "interrupted"
        unreadable = isinstance(exc, OSError) or isinstance(exc.__cause__, OSError)
        return "io_error" if unreadable or isinstance(exc, CannotWrite) else "invalid_input"

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        previous = signal.getsignal(signal.SIGTERM)
        if previous is not signal.SIG_IGN:  # ignored (trap '' TERM, a supervisor's choice): the fit runs on, as it should
            signal.signal(signal.SIGTERM, _stop_on_sigterm)
        try:
            return fn(*args, **kwargs)
        except (*FAILURES, KeyboardInterrupt) as exc:
            said = INTERRUPTED if isinstance(exc, KeyboardInterrupt) else _said(exc)
            if _progress["open"]:  # it was written on the line of "fit 3/20"
                click.echo(err=True)
                _progress["open"] = False
            if kwargs.get("as_json"):
                try:
                    print_json({"error": {"code": code(exc), "message": said}})
                except OSError:  # stdout itself failed (a full disk, /dev/full): the line below says so
                    pass
            click.echo(f"parlschedctl model: {said}", err=True)
            sys.exit(1)
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)  # None: set in C

    return wrapper


def _stop_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM ends a model command as Ctrl-C does: said, with the --json error object;
    a measurement's command's processes with it, and what --out keeps said (it killed
    parlschedctl alone, the command ran on)."""
    raise KeyboardInterrupt


def _said(exc: Exception) -> str:
    """An OSError as 'PATH: reason' (its str is '[Errno 2] No such file or directory: PATH')."""
    if isinstance(exc, OSError) and exc.strerror:
        where = exc.filename if exc.filename is not None else "cannot write the output"  # stdout
        return f"{where}: {exc.strerror}"
    return str(exc)


def _not_an_input(out_path: str, *inputs: str) -> None:
    for given in inputs:
        if Path(out_path).resolve() == Path(given).resolve():
            raise ValueError(f"--out {out_path} is an input of this command; writing there would replace it")


class FitProgress:
    """Progress of ``total`` fits (repetitions, or leave-one-out's fits) on stderr, with
    --json too (stdout keeps the JSON for scripts, stderr the messages for people).

    On a terminal, a line redrawn in place (cut to its width) as each fit ends, shown
    at 0 at once (a single fit, the default --repeat 1, said nothing until it was
    done), and as its generations go by. Elsewhere (a batch job's log, ``2>log``), a
    line as each fit ends with the time so far (a fit of 20 repetitions wrote nothing
    there for minutes, a stuck job not told from a running one: a review), and every
    LOG_EVERY_S one on where the fit is. Either way, a note of what the fits may cost
    when that is LONG_FITS_S or more (a CSV of 1500 configurations took hours a fit
    with nothing said: a review), once: from the first time phase's generations after
    its first (which evaluates the initial population too) once they have taken
    ESTIMATE_AFTER_S, else from the first fit's time when it ends. ``later`` fits of the
    same data follow these in the command (``later_what``: which), and are reckoned in;
    ``estimated``: an earlier stage's note reckoned these in already."""

    def __init__(self, label: str, total: int, *, energy: bool, later: int = 0, later_what: str = "",
                 estimated: bool = False) -> None:
        self.label, self.total, self.energy = label, total, energy
        self.later, self.later_what = later, later_what
        self.terminal = is_terminal(sys.stderr)
        self.started = self.shown_at = self.logged_at = time.monotonic()
        self.first_generation_at = self.started  # of the running phase: its generation 1 ended
        self.done = 0
        self.estimated = estimated
        if self.terminal:
            self._show(f"{label} 0/{total}")

    def fit_done(self, done: int, total: int) -> None:
        """fitting.Progress: ``done`` of the ``total`` fits have ended."""
        self.done = done
        elapsed = time.monotonic() - self.started
        if self.terminal:
            self._show(f"{self.label} {done}/{total}", end=done == total)
        else:
            _tell(f"parlschedctl model: {self.label} {done}/{total} done, {elapsed:.0f} s")
        if not self.estimated:
            fits = total - done + self.later
            self._note(elapsed / done * fits, "about", f"{counted(fits, 'fit')} at {duration(elapsed / done)} each, "
                                                       f"as the first took")

    def generation(self, g: Generation) -> None:
        """fitting.OnGeneration: where the running fit is."""
        now = time.monotonic()
        if g.done <= 1:
            self.first_generation_at = now
        elif not self.estimated and g.phase == "time" and now - self.first_generation_at >= ESTIMATE_AFTER_S:
            per_generation = (now - self.first_generation_at) / (g.done - 1)
            fits = self.total - self.done + self.later
            besides = ", the energy phase besides" if self.energy else ""
            self._note(per_generation * g.most * fits, "up to",
                       f"{counted(fits, 'fit')} of up to {g.most} generations of the time phase at "
                       f"{per_generation:.2g} s each{besides}")
        if g.done == 0:
            return
        if self.terminal and now - self.shown_at >= REDRAW_EVERY_S:
            self._show(f"{self.label} {self.done}/{self.total} · {g.phase} phase {g.done}/{g.most} generations")
        elif not self.terminal and now - self.logged_at >= LOG_EVERY_S:
            self.logged_at = now
            _tell(f"parlschedctl model: {self.label} {self.done + 1}/{self.total} running: {g.phase} phase, "
                  f"generation {g.done} of at most {g.most}, {now - self.started:.0f} s")

    def _note(self, left: float, bound: str, reckoning: str) -> None:
        """The note of the cost, when it is long; made once."""
        self.estimated = True
        if left < LONG_FITS_S:
            return
        if _progress["open"]:  # the note on a line of its own, the progress redrawn below it
            _tell("")
            _progress["open"] = False
        then = f", then {self.later_what}," if self.later else ""
        _tell(f"parlschedctl model: note: {self.label}{then} may take {bound} {duration(left)} more: {reckoning}; "
              "--generations caps the generations, and fewer measured configurations, or smaller NSp, make each "
              "cheaper")

    def _show(self, text: str, end: bool = False) -> None:
        self.shown_at = time.monotonic()
        _progress["open"] = True  # before the write: a Ctrl-C landing right after it starts a line of its own
        click.echo(f"\r\033[K{clip(text, terminal_size(sys.stderr.fileno()).columns - 1)}", err=True, nl=end)
        _progress["open"] = not end


def _nrmse(x: float | None) -> str:
    """An NRMSE as the text shows it: n/a where there is none (no energy fitted or
    measured), undefined where it is NaN (``_why_undefined`` says why), and in exponent
    form past validate's column (parameters edited by hand: 300 digits pushed the
    energy column off the table)."""
    return "n/a" if x is None else "undefined" if np.isnan(x) else _fitting(x, 11, ".3f")


def _why_undefined(times: list[float | None], energies: list[float | None]) -> list[str]:
    """The line that says why the NRMSEs of time and of energy shown as undefined are;
    none when every one is defined."""
    which = [what for what, shown in (("runtimes", times), ("energies", energies))
             if any(x is not None and np.isnan(x) for x in shown)]
    if not which:
        return []
    return [f"undefined: NRMSE divides by the spread of the measured {' and '.join(which)} it is scored on, "
            "and they have none (one configuration, or all equal)"]


def _emit(as_json: bool, document: dict[str, Any], text: str) -> None:
    if as_json:
        print_json(json_safe(document))
    else:
        click.echo(text)


@click.group()
def model() -> None:
    """Fit, validate and query the energy-time model of a distributed GA."""


@model.command()
@click.option("--cluster", "cluster_path", required=True, type=FILE, help="Cluster description (YAML).")
@click.option("--data", "data_path", required=True, type=FILE, help="Measurements (CSV).")
@click.option("--method", type=click.Choice(METHODS), default="de", show_default=True,
              help="de: differential evolution (fast); ga: the paper's two-phase GA.")
@click.option("--repeat", type=click.IntRange(min=1, max=MAX_FITS), default=1, show_default=True,
              help="Independent fits; the best is kept (the paper uses 20).")
@click.option("--seed", type=click.IntRange(min=0), default=None,
              help="Seed for reproducible fits (default: one drawn, said on stderr and kept in the params file).")
@click.option("--rounding", type=click.Choice(SUBPOP_SIZES), default="floor", show_default=True,
              help="How N / NSp is rounded to a subpopulation size.")
@click.option("--master-power", type=click.Choice(MASTER_POWER), default=PAPERS_MASTER_POWER, show_default=True,
              help="migration: the paper's eq. 7; whole-run: master and switch powered all the time.")
@click.option("--generations", type=click.IntRange(min=1), default=None,
              help="Generations per phase (default: 100 for ga; 1000 and 300 for de).")
@click.option("--loo", is_flag=True, help="Also leave-one-out errors (one more fit per configuration).")
@click.option("--out", "out_path", type=OUT_FILE, help="Write the parameters (JSON).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@fails_cleanly
def fit(cluster_path: str, data_path: str, method: str, repeat: int, seed: int | None, rounding: str,
        master_power: str, generations: int | None, loo: bool, out_path: str | None, as_json: bool) -> None:
    """Fit the proposed model and the baseline to measured runs."""
    if out_path:
        _not_an_input(out_path, cluster_path, data_path)
        check_writable(out_path)
    cluster, m = load_cluster(cluster_path), load_measurements(data_path)
    check_fittable(cluster, m, data_path)
    notes = fit_notes(cluster, m, data_path)
    for note in notes:
        click.echo(f"parlschedctl model: {note}", err=True)
    energy = m.energy_wh if m.has_energy else None
    drawn = seed is None
    if drawn:  # drawn here, so that the params file (random_state) and the output say how to fit the same again
        seed = secrets.randbelow(2**32)
    est = EnergyTimeModel(cluster, method, repeat, seed, rounding, master_power, generations)
    with_paper = master_power != PAPERS_MASTER_POWER and energy is not None  # a variant beside the paper's, never instead
    stages = [what for what, runs in (("the fit of the paper's eq. 7", with_paper), ("leave-one-out", loo)) if runs]
    shown = FitProgress("fit", repeat, energy=energy is not None, later=repeat * with_paper + len(m.nsp) * loo,
                        later_what=" and ".join(stages))
    est.fit(m.nsp, m.time_s, energy, progress=shown.fit_done, on_generation=shown.generation)
    paper = None
    if with_paper:
        paper = EnergyTimeModel(cluster, method, repeat, seed, rounding, PAPERS_MASTER_POWER, generations)
        shown = FitProgress("fit of the paper's eq. 7", repeat, energy=True, later=len(m.nsp) * loo,
                            later_what="leave-one-out", estimated=shown.estimated)
        paper.fit(m.nsp, m.time_s, energy, progress=shown.fit_done, on_generation=shown.generation)
    base = BaselineModel(cluster, rounding).fit(m.nsp, m.time_s, energy)
    held_out, loo_seconds = None, 0.0
    if loo:
        started = time.monotonic()
        problem = Problem.from_measurements(cluster, m, rounding=rounding, master_power=master_power)
        shown = FitProgress("leave-one-out", len(m.nsp), energy=energy is not None, estimated=shown.estimated)
        held_out = leave_one_out(problem, method, seed, progress=shown.fit_done, on_generation=shown.generation,
                                 **est.settings())
        loo_seconds = time.monotonic() - started
    summary = summarise_fit(est, base, m, data_path, held_out, paper)
    # what stderr says of the data and the fit, for a script too (a review: runtimes in ms fitted, exit 0, and
    # nothing in the JSON or the params file said so)
    poor = summary.poor_fit_notes()
    document = params_document(cluster, est, base, {"fit": summary.to_dict() | {"notes": [*notes, *poor]}})
    if out_path:
        with writing(out_path):
            save_params(out_path, document)
    paper_seconds = None if paper is None else sum(paper.repetition_seconds_)
    _emit(as_json, document, _fit_text(est, summary, out_path, loo_seconds, paper_seconds))
    if drawn:
        click.echo(f"parlschedctl model: seed {seed} drawn; --seed {seed} fits the same again", err=True)
    for note in poor:
        click.echo(f"parlschedctl model: {note}", err=True)


def _fit_text(est: EnergyTimeModel, s: FitSummary, out_path: str | None, loo_seconds: float,
              paper_seconds: float | None) -> str:
    lines = [f"{'parameter':<22} {'value':>14}" + (f" {'RSD %':>8}" if est.repeat > 1 else "")]  # one fit has no RSD
    for name, value in est.parameters().items():
        r = est.rsd_.get(name, float("nan"))
        lines.append(f"{name:<22} {value:>14.6g} {r:>8.1f}" if est.repeat > 1 else f"{name:<22} {value:>14.6g}")

    def pair(d: Nrmse) -> str:
        return f"time {_nrmse(d.time)}, energy {_nrmse(d.energy)}"

    rows = {f"NRMSE best of {est.repeat} ({est.method}{_variant_of(est, ', ')}):": s.best,
            f"NRMSE mean of {est.repeat}:": s.mean}
    if s.paper is not None:
        rows[f"the paper's eq. 7, best of {est.repeat}:"] = s.paper
    rows["baseline (eq. 5) NRMSE:"] = s.baseline
    if s.leave_one_out_nrmse is not None:
        rows["leave-one-out NRMSE:"] = s.leave_one_out_nrmse
    width = max(map(len, rows))
    lines += ["", *(f"{label:<{width}} {pair(d)}" for label, d in rows.items())]
    shown = list(rows.values())
    lines += _why_undefined([d.time for d in shown], [d.energy for d in shown])
    paper = "" if paper_seconds is None else f", the paper's eq. 7 in {paper_seconds:.1f} s more"
    lines.append(f"fitted in {s.fit_seconds:.1f} s{paper}"
                 + (f", leave-one-out in {loo_seconds:.1f} s more" if s.leave_one_out else "")
                 + (f"; wrote {out_path}" if out_path else ""))
    return "\n".join(lines + _variant_line(est))


def _variant_of(est: EnergyTimeModel, before: str = "") -> str:
    """The energy model's name when it is not the paper's (``model fit
    --master-power``), else nothing: its figures were shown as the paper's model's."""
    named = _master_power(est)
    return "" if named in (None, PAPERS_MASTER_POWER) else f"{before}{named} variant of eq. 7"


def _master_power(est: EnergyTimeModel) -> str | None:
    """JSON's ``master_power``: none for a model fitted without energies, which has no
    energy model to name."""
    return None if est.energy_params_ is None else est.master_power


def _variant_line(est: EnergyTimeModel) -> list[str]:
    variant = _variant_of(est)
    return [f"energy model: the {variant}: master and switch charged for the whole run, not the paper's"] if variant else []


def _finite_predictions(fitted: Fitted, ks: np.ndarray, params_path: str,
                        baseline: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The model's predictions at ``ks``; ValueError where its parameters (edited by
    hand) overflow one: n/a, as for an energy never fitted, looked like no answer
    rather than a wrong file, and validate gave a false reason for it. ``baseline``:
    the baseline's too, which validate and plot show (plot drew a figure without the
    model's line, its title saying the runtimes had no spread; numpy's overflow
    warnings were printed)."""
    checked = [("its parameters overflow the predictions", fitted.model, fitted.model.energy_params_ is not None)]
    if baseline:
        p = fitted.baseline.params_
        checked.append(("its baseline's parameters overflow the baseline's predictions", fitted.baseline,
                        bool(np.isfinite(np.concatenate([p.pow, p.pow_idle, [p.overhead_j]])).all())))
    predicted = []
    with np.errstate(over="ignore", invalid="ignore"):
        for said, model, energy_fitted in checked:
            t, e = model.predict(ks)
            overflown = ~np.isfinite(t) | (~np.isfinite(e) if energy_fitted else False)
            if overflown.any():
                raise ValueError(f"{params_path}: {said} at nsp {format_cpulist(ks[overflown].tolist())} (fit again)")
            predicted.append((t, e))
    return predicted[0]


@model.command()
@click.option("--params", "params_path", required=True, type=FILE)
@click.option("--nsp", type=NSP, default=None, help="NSp values (default: the cluster's run.subpopulations).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@fails_cleanly
def predict(params_path: str, nsp: tuple[int, ...] | None, as_json: bool) -> None:
    """Predicted runtime and energy per NSp."""
    fitted = load_params(params_path)
    ks = _candidates(fitted, nsp, params_path)
    t, e = _finite_predictions(fitted, ks, params_path)
    outside = _extrapolated(fitted, ks, params_path)
    # which of the two: the energy may be fitted on fewer NSp than the runtime, and a script choosing by time
    # discarded interpolated runtimes marked extrapolated for their energy (a review). None: not known
    unknown = [None] * len(ks)
    times_out, energies_out = ([x.tolist() for x in (fitted.extrapolated(ks), fitted.extrapolated(ks, energy=True))]
                               if outside is not None else (unknown, unknown))
    # Not rounded: the text rounds what it shows, and JSON is read by programs, which get what the model
    # computed (null where it is not finite: _emit's json_safe; n/a in the text: _cell).
    rows = [{"nsp": int(k), "time_s": a, "energy_wh": b, "extrapolated": x, "time_extrapolated": xt,
             "energy_extrapolated": xe}
            for k, a, b, x, xt, xe in zip(ks, t.tolist(), e.tolist(), outside or unknown, times_out, energies_out,
                                          strict=True)]
    text = "\n".join([f"{'nsp':>4} {'time_s':>10} {'energy_wh':>10}"]
                     + [f"{r['nsp']:>4} {_cell(r['time_s'], 10, '.2f')} {_cell(r['energy_wh'], 10, '.3f')}" for r in rows]
                     + _variant_line(fitted.model))
    _emit(as_json, {"predictions": rows, "master_power": _master_power(fitted.model)}, text)


def _cell(x: float | None, width: int, spec: str, scale: float = 1) -> str:
    """``x * scale`` in a table column ``width`` wide; n/a where there is no number: None
    or not finite (an energy not fitted or not measured, a time that overflows). Checked
    before scaling: a finite error that overflows when scaled shows as inf. A number
    wider than the column in ``spec`` is written in exponent form, which fits: in fixed
    point a hand-edited parameter of 1e308 gave 300 digits, and the columns after it
    went with them."""
    if x is None or not np.isfinite(x):
        return f"{'n/a':>{width}}"
    return f"{_fitting(x * scale, width, spec):>{width}}"


def _fitting(x: float, width: int, spec: str) -> str:
    """``x`` in ``spec``, or in exponent form when that is wider than ``width``."""
    shown = format(x, spec)
    if len(shown) > width:  # decimals: what the column leaves beside a sign, "d." and "e+308"
        sign = spec.startswith("+") or x < 0
        shown = format(x, f"{'+' if spec.startswith('+') else ''}.{max(0, width - 7 - sign)}e")
    return shown


@model.command()
@click.option("--params", "params_path", required=True, type=FILE)
@click.option("--data", "data_path", required=True, type=FILE)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@fails_cleanly
def validate(params_path: str, data_path: str, as_json: bool) -> None:
    """NRMSE of time and energy against measurements, and per-NSp relative errors."""
    fitted, m = load_params(params_path), load_measurements(data_path)
    _finite_predictions(fitted, m.nsp, params_path, baseline=True)
    report = validation.validate(fitted, m, data_path)
    for note in implausible_power(fitted.cluster, m, data_path):
        click.echo(f"parlschedctl model: {note}", err=True)
    outside = _measured_outside(fitted, m, params_path)
    lines = [f"{'model':<16} {'NRMSE time':>11} {'NRMSE energy':>13}"]
    for name, r in report.models.items():
        lines.append(f"{name:<16} {_nrmse(r.nrmse_time):>11} {_nrmse(r.nrmse_energy):>13}")
    undefined = _why_undefined([r.nrmse_time for r in report.models.values()],
                               [r.nrmse_energy for r in report.models.values()])
    lines += undefined
    nsp, error = report.models["proposed"].largest_time_error
    lines.append(f"proposed: largest runtime error {_fitting(error * 100, 9, '+.1f')}% at nsp={nsp}")
    lines += _variant_line(fitted.model)
    # notes: why an NRMSE is null though measured (undefined), which JSON's null alone does not tell from n/a
    _emit(as_json, report.to_dict() | {"extrapolated_nsp": outside, "notes": undefined,
                                       "master_power": _master_power(fitted.model)},
          "\n".join(lines + [""] + _per_nsp_table(report.models)))


def _per_nsp_table(models: dict[str, validation.ModelErrors]) -> list[str]:
    """Relative errors in % per NSp: time for each model, then energy for each."""
    names = [name.removeprefix("baseline_") for name in models]
    width = max(9, *map(len, names))
    row = " ".join(f"{n:>{width}}" for n in names)
    lines = [f"{'':4}  {'time error %':^{len(row)}}   {'energy error %':^{len(row)}}", f"{'nsp':>4}  {row}   {row}"]
    for i, k in enumerate(next(iter(models.values())).nsp):
        times = " ".join(_cell(r.time_rel_error[i], width, "+.1f", 100) for r in models.values())
        energies = " ".join(_cell(r.energy_rel_error[i], width, "+.1f", 100) for r in models.values())
        lines.append(f"{k:>4}  {times}   {energies}")
    return lines


@model.command()
@click.option("--params", "params_path", required=True, type=FILE)
@click.option("--data", "data_path", required=True, type=FILE)
@click.option("--out", "out_path", required=True, type=OUT_FILE, callback=figure_suffix,
              help="Figure to write; its suffix is the format (.svg, .pdf, ...; none: PNG).")
@fails_cleanly
def plot(params_path: str, data_path: str, out_path: str) -> None:
    """Measured vs predicted runtime and energy for both models (the paper's Figure 3)."""
    from parlschedd.energy.plot import figure3  # matplotlib is slow to import; only here

    _not_an_input(out_path, params_path, data_path)
    check_figure(out_path)
    fitted, m = load_params(params_path), load_measurements(data_path)
    check_measured(fitted.cluster.run, m.nsp, data_path)
    outside = _measured_outside(fitted, m, params_path)
    fitted_on = _span(fitted.fitted_nsp) if outside else None
    energy_fitted_on = _span(fitted.energy_fitted_nsp) if outside else None
    proposed = _finite_predictions(fitted, m.nsp, params_path, baseline=True)
    errors = validation.model_errors(*proposed, m)  # on the data plotted, not the fit's
    with writing(out_path):
        figure3(out_path, m, proposed, fitted.baseline.predict(m.nsp),
                title=_plot_title(data_path, errors, _variant_of(fitted.model, ", ")),
                fitted_on=fitted_on, energy_fitted_on=energy_fitted_on)
    click.echo(f"wrote {out_path}")


def _span(nsp: tuple[int, ...] | None) -> tuple[int, int] | None:
    return None if not nsp else (nsp[0], nsp[-1])


def _plot_title(data_path: str, errors: validation.ModelErrors, variant: str = "") -> str:
    """The figure's title: the proposed model's NRMSE of time, and of energy where one
    was scored (energies measured and predicted), each saying why when undefined: a
    title with the runtime's error alone read as the error of both panels."""
    said = [_title_nrmse("time", errors.nrmse_time, "runtimes")]
    if errors.nrmse_energy is not None:
        said.append(_title_nrmse("energy", errors.nrmse_energy, "energies"))
    return f"{Path(data_path).name}: proposed model{variant} (NRMSE {', '.join(said)}) vs baseline"


def _title_nrmse(quantity: str, value: float, values: str) -> str:
    """One NRMSE of the plot's title, "time 0.123", or "time undefined, runtimes
    without spread" (NaN: the measured ``values`` are all equal)."""
    return f"{quantity} {_nrmse(value)}" + (f", {values} without spread" if np.isnan(value) else "")


@model.command()
@click.option("--params", "params_path", required=True, type=FILE)
@click.option("--objective", "goal", type=click.Choice(OBJECTIVES), default="time", show_default=True,
              help="Minimise runtime, energy, or the energy-delay product.")
@click.option("--nsp", type=NSP, default=None, help="Candidates (default: the cluster's run.subpopulations).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@fails_cleanly
def recommend(params_path: str, goal: str, nsp: tuple[int, ...] | None, as_json: bool) -> None:
    """The NSp with the best predicted runtime, energy or energy-delay product."""
    fitted = load_params(params_path)
    ks = _candidates(fitted, nsp, params_path)
    try:
        best = recommendation.recommend(fitted.model, goal, ks)
    except recommendation.NeedsEnergy as exc:
        raise ValueError(f"{params_path}: fitted without energies; only --objective time is possible") from exc
    except recommendation.NoFinitePrediction as exc:
        raise ValueError(f"{params_path}: {exc}: its parameters overflow the predictions (fit again)") from exc
    # none fitted, or it overflows; a hand-edited parameter's prediction in exponent form, not in 300 digits
    energy_text = f", {_fitting(best.energy_wh, 12, '.2f')} Wh" if np.isfinite(best.energy_wh) else ""
    text = f"best nsp for {goal}: {best.nsp} (predicted {_fitting(best.time_s, 12, '.1f')} s{energy_text})"
    if best.near_best:
        said = ", ".join(f"{quantity} NRMSE {_nrmse(value)}" for quantity, value in best.nrmse.items())
        text += (f"\nwithin {recommendation.NEAR_BEST:.0%} of it: nsp {format_cpulist(best.near_best)}; the model "
                 f"cannot tell these apart (its {said} on the runs it was fitted to), so measure them before choosing")
        text = "\n".join([text, *_why_undefined([best.nrmse.get("time")], [best.nrmse.get("energy")])])
    outside = _extrapolated(fitted, ks, params_path, energy=goal != "time")  # energy and edp use both
    extrapolation = {"extrapolated": None, "extrapolated_candidates": None} if outside is None else {
        "extrapolated": outside[ks.tolist().index(best.nsp)],
        "extrapolated_candidates": _nsp_where(ks, outside)}
    nearest = fitted.nearest_fitted(best.nsp, energy=goal != "time")
    if nearest is not None and abs(nearest - best.nsp) > 1 and not extrapolation["extrapolated"]:
        click.echo(f"parlschedctl model: warning: nsp {best.nsp} was not measured in the runs {params_path} was "
                   f"fitted on, the nearest of which is nsp {nearest}: its prediction is interpolated over that "
                   "gap and may be far off; measure it before choosing", err=True)
    if goal != "time":
        text = "\n".join([text, *_variant_line(fitted.model)])
    _emit(as_json, best.to_dict() | extrapolation | {"nearest_fitted_nsp": nearest, "master_power": _master_power(fitted.model)},
          text)


def _tell(line: str) -> None:
    """A line of a model command's on stderr; one that cannot be written (stderr a pipe
    whose reader left, ``|& less`` quit) is lost, not the measurement or the fit."""
    with contextlib.suppress(OSError):
        click.echo(line, err=True)


class RunLines:
    """A line on stderr as each run starts and as it ends, on a terminal or not: the
    command's own output comes in between (a line updated in place ran into it), and a
    measurement of hours logged to a file said nothing of where it was. With RAPL zones
    under ``powercap_root`` (None: none), a run whose energy was not measured says why."""

    def __init__(self, powercap_root: str | None) -> None:
        self.powercap_root = powercap_root

    def started(self, run: Run) -> None:
        repeat = f", {run.repeat} of {run.repeats}" if run.repeats > 1 else ""
        _tell(f"run {run.number}/{run.total} (nsp {run.nsp}{repeat}): {shlex.join(run.cmd)}")

    def ended(self, run: Run, measured: Measured) -> None:
        energy = f", {measured.wh:.4g} Wh" if np.isfinite(measured.wh) else ""
        _tell(f"run {run.number}/{run.total}: {measured.seconds:.3f} s{energy}")
        if self.powercap_root is None or np.isfinite(measured.wh):
            return
        which = f"parlschedctl model: warning: nsp {run.nsp}, run {run.repeat}: the RAPL energy counters under " \
                f"{self.powercap_root}"
        if measured.energy_error is not None:
            _tell(f"{which} could not be read ({measured.energy_error}), so nothing was measured; its energy is "
                  "left empty")
        else:
            _tell(f"{which} did not move, so nothing was measured (a run shorter than their update, or counters "
                  "not updated here); its energy is left empty")


MAX_REPEAT = 1000  # runs per configuration; a mistyped 999999999999 asked numpy for 7 TiB (a traceback)


# Everything from CMD on is CMD's: its own options (--out x{nsp}) must not be taken as ours,
# and an option of ours mistyped before CMD is a usage error, not CMD.
@model.command("measure", context_settings={"allow_interspersed_args": False})
@click.option("--nsp", type=NSP, required=True, help="Configurations to run, e.g. 1-32.")
@click.option("--repeat", type=click.IntRange(min=1, max=MAX_REPEAT), default=1, show_default=True,
              help=f"Runs per configuration (at most {MAX_REPEAT}).")
@click.option("--out", "out_path", required=True, type=OUT_FILE, help="CSV to write.")
@click.option("--powercap-root", type=click.Path(file_okay=False, readable=False),  # unreadable: no zones, as absent
              default=str(POWERCAP_ROOT), show_default=True, help="Where RAPL's powercap zones live.")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@fails_cleanly
def measure_cmd(nsp: tuple[int, ...], repeat: int, out_path: str, powercap_root: str, cmd: tuple[str, ...]) -> None:
    """Run CMD for every NSp ({nsp} in CMD is replaced) and record time and energy."""
    if not any("{nsp}" in a for a in cmd):
        _tell("parlschedctl model: note: CMD has no {nsp}; every configuration runs the same command")
    zones, unread = package_zones(Path(powercap_root))
    why = f" ({'; '.join(f'{name}: {reason}' for name, reason in unread.items())})" if unread else ""
    if not zones:
        _tell(f"parlschedctl model: no readable RAPL zones under {powercap_root}{why}; energy left empty "
              "(time-only fitting still works)")
    elif unread:
        _tell(f"parlschedctl model: warning: RAPL zones not read under {powercap_root}{why}: their packages' "
              "energy is not counted")
    check_writable(out_path)
    # an earlier file is replaced only by a whole measurement: till then the configurations measured go to a
    # file of our own beside it (a FIFO or a device, not regular, is written as it goes, as before)
    progress_path = out_path
    if os.path.isfile(out_path):
        fd, progress_path = tempfile.mkstemp(prefix=f"{os.path.basename(out_path)}.", suffix=".partial",
                                             dir=os.path.dirname(os.path.abspath(out_path)))
        os.close(fd)
    times, energies, kept = [], [], 0  # kept: the configurations in progress_path
    try:
        for t, e in measure(cmd, nsp, repeat, zones, RunLines(powercap_root if zones else None)):
            times.append(t)
            energies.append(e)
            with writing(progress_path):
                write_measurements(progress_path, np.array(nsp[:len(times)]), np.array(times), np.array(energies))
            kept = len(times)
    except (MeasureError, KeyboardInterrupt) as exc:  # Ctrl-C said "Aborted!", not what --out holds
        said = exc if isinstance(exc, MeasureError) else "interrupted"
        if not kept:
            if progress_path != out_path:
                os.unlink(progress_path)
            raise MeasureError(f"{said}; nothing was measured, {out_path} was not written") from exc
        earlier = f" ({out_path} is as it was)" if progress_path != out_path else ""
        raise MeasureError(f"{said}; {progress_path} keeps the {counted(kept, 'configuration')} measured before "
                           f"it{earlier}") from exc
    if progress_path != out_path:  # written as any --out is (through a link, its mode kept), then ours removed
        with writing(out_path):
            write_measurements(out_path, np.array(nsp), np.array(times), np.array(energies))
        os.unlink(progress_path)
    click.echo(f"wrote {out_path}: {counted(len(nsp), 'configuration')} x {repeat}")

