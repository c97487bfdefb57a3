"""Measured runtimes and energies per NSp, in the CSV format of the shared data.

Columns (shared/data/energy-time/README.md): ``nsp``, repetitions ``time_s_r1..rK`` and
``energy_wh_r1..rK``, their means ``time_s_mean`` and ``energy_wh_mean`` (the model is
fitted to the means; when a mean column is absent or a cell empty it is computed from the
repetitions, and a mean given must be theirs to the rounding of the cells' last digits),
and optionally the baseline's stored predictions ``baseline_time_s`` and
``baseline_energy_wh``. Energy cells may be empty (a machine without RAPL): the energy
of that configuration is then NaN and it is left out of the energy fit, which needs
MIN_ENERGY_ROWS configurations with one (else only time is fitted). Cells are separated
by commas; a header separated by semicolons or tabs (a spreadsheet's export in a
comma-decimal locale) is refused saying so.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from parlschedd import textfile
from parlschedd.atomicfile import replace_text
from parlschedd.energy.cluster import SECTIONS
from parlschedd.words import counted

MIN_ENERGY_ROWS = 2  # an error normalised by the measurements' spread needs two of them
# No run lasts 1e15 s (30 million years) or uses 1e15 Wh (a petawatt-hour), and unit
# mistakes stay far below (runtimes in ns, energies in uJ): a larger cell is mistyped or
# corrupted. Near the largest float it overflowed the fit's and the NRMSE's squares, and
# a fit "succeeded" (exit 0) with NaN parameters, or failed with scipy's words on bounds.
MAX_MEASURED = 1e15

_REPEAT = re.compile(r"^(time_s|energy_wh)_r(\d+)$")
# A measured value as a spreadsheet or printf writes one. float() takes more: '4_28.19'
# (a digit grouping mistyped) as 428.19, other scripts' digits, 'nan' and 'infinity'.
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
MAX_FILE_BYTES = 16 << 20  # read whole before any check: a wrong file given (an image, a log) is refused
_KNOWN = {"nsp", "time_s_mean", "energy_wh_mean", "baseline_time_s", "baseline_energy_wh"}


class MeasurementsError(ValueError):
    """A measurements file that cannot be used, with the file and the line at fault."""

    def __init__(self, source: str, line: int | None, message: str) -> None:
        self.source, self.line = source, line
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class Measurements:
    """One row per configuration, sorted by NSp. Arrays are float; NaN means not measured."""

    nsp: np.ndarray
    time_s: np.ndarray
    energy_wh: np.ndarray
    time_reps: np.ndarray  # (configs, repetitions); may have zero columns
    energy_reps: np.ndarray
    baseline_time_s: np.ndarray | None = None
    baseline_energy_wh: np.ndarray | None = None

    @property
    def has_energy(self) -> bool:
        """Energy measured for enough configurations to fit the energy phase."""
        return energy_rows(self.energy_wh) is not None


def energy_rows(energy_wh: np.ndarray | None) -> np.ndarray | None:
    """The configurations whose energy was measured (not NaN), when there are enough
    of them (MIN_ENERGY_ROWS) to fit or score energy; else None."""
    if energy_wh is None:
        return None
    rows = np.isfinite(energy_wh)
    return rows if np.count_nonzero(rows) >= MIN_ENERGY_ROWS else None


def _cell(value: str | None, column: str, source: str, line: int) -> float:
    text = "" if value is None else value.strip()  # float() strips less: '\x1d3.7' was a bare ValueError
    if text == "":
        return math.nan
    if not _DECIMAL.fullmatch(text):
        raise MeasurementsError(source, line, f"column {column}: not a number: {value!r}")
    x = float(text)
    if math.isnan(x) or x <= 0:
        raise MeasurementsError(source, line, f"column {column}: must be a positive number, got {value!r}")
    if x > MAX_MEASURED:  # inf too: '1e400' was said not to be positive
        raise MeasurementsError(source, line, f"column {column}: {value!r} is more than any run measures (at most "
                                f"{MAX_MEASURED:g}); correct the cell (mistyped, or the file corrupted?)")
    return x


def _count(raw: str) -> int | None:
    """``raw`` as a whole number written in ASCII digits; None for anything else.
    str.isdigit() takes other digits too: '²', which int() then refuses (a message
    without file or line), and '٣', which it reads as 3."""
    if not (raw.isascii() and raw.isdigit()):
        return None
    try:
        return int(raw)
    except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits())
        return None


def _repeat_columns(header: list[str], quantity: str) -> list[str]:
    found = sorted((int(m.group(2)), c) for c in header if (m := _REPEAT.match(c)) and m.group(1) == quantity)
    return [c for _, c in found]


def _mean(stored: float, reps: list[float]) -> float:
    if not math.isnan(stored):
        return stored
    values = [v for v in reps if not math.isnan(v)]
    return float(np.mean(values)) if values else math.nan


def _half_unit(text: str) -> float:
    """Half a unit of the last digit ``text`` (a number _cell took) is written to: how
    far rounding it to that digit may have moved it (``73.17``: 0.005; ``1e3``: 500)."""
    return 0.5 * 10.0 ** Decimal(text.strip()).as_tuple().exponent


def _stored_mean(row: dict[str, str], column: str, reps_columns: list[str], reps: list[float], source: str,
                 line: int) -> float:
    """The mean in ``column`` (``time_s_mean``), or of ``reps`` when it is empty or absent.
    A mean that is not that of the repetitions measured, by more than the rounding of the
    cells' last digits allows, is refused naming the line and column: a hand edit or a
    shifted column, and the fit took it without a word over the repetitions beside it."""
    text = (row.get(column) or "").strip()
    stored = _cell(text, column, source, line)
    measured = [(c, v) for c, v in zip(reps_columns, reps, strict=True) if not math.isnan(v)]
    if math.isnan(stored) or not measured:
        return _mean(stored, reps)
    of_reps = math.fsum(v for _, v in measured) / len(measured)
    rounding = _half_unit(text) + max(_half_unit(row[c]) for c, _ in measured) + 1e-9 * abs(of_reps)
    if abs(stored - of_reps) > rounding:
        named = [c for c, _ in measured]
        said = f"{named[0]}..{named[-1]}" if len(named) == len(reps_columns) > 2 else ", ".join(named)
        raise MeasurementsError(source, line, f"column {column}: {text!r} is not the mean of {said} ({of_reps:.6g}, "
                                f"of {counted(len(named), 'repetition')} measured); correct it, or empty the cell to "
                                "have the mean computed from the repetitions")
    return stored


def parse_measurements(rows: list[dict[str, str]], header: list[str], source: str,
                       lines: Sequence[int]) -> Measurements:
    """Validate CSV rows; ``lines`` are their line numbers in ``source`` for the errors."""
    for separator, named in ((";", "semicolons"), ("\t", "tabs")):
        if any(separator in c for c in header):  # what a spreadsheet exports in a comma-decimal locale
            raise MeasurementsError(source, 1, f"the header is separated by {named}, not commas: save the file as "
                                    "comma-separated values (CSV with ',' between cells and '.' in numbers)")
    if "" in header:
        raise MeasurementsError(source, 1, f"column {header.index('') + 1} has no name (a trailing comma, as "
                                "spreadsheets export?); remove it")
    unknown = [c for c in header if c not in _KNOWN and not _REPEAT.match(c)]
    if unknown:
        hint = ("column names are lower-case" if all(c.lower() in _KNOWN or _REPEAT.match(c.lower()) for c in unknown)
                else "remove them, or rename them to one of those")
        raise MeasurementsError(source, 1, f"unknown column(s) {', '.join(unknown)}; expected nsp, "
                                f"time_s_rN, energy_wh_rN, time_s_mean, energy_wh_mean, baseline_*: {hint}")
    if "nsp" not in header:
        raise MeasurementsError(source, 1, "missing column nsp")
    t_cols, e_cols = _repeat_columns(header, "time_s"), _repeat_columns(header, "energy_wh")
    if "time_s_mean" not in header and not t_cols:
        raise MeasurementsError(source, 1, "no time column: need time_s_mean or time_s_r1..")
    if not rows:
        raise MeasurementsError(source, None, "no data rows")
    nsp, t, e, tr, er, bt, be = [], [], [], [], [], [], []
    seen: dict[int, int] = {}
    for line, row in zip(lines, rows, strict=True):
        if (cells := _cells(row, len(header))) != len(header):  # after the header's checks: theirs say more
            more = " (a decimal comma, such as 293,8? write 293.8; a cell holding a comma is quoted)" \
                if cells > len(header) else ""
            raise MeasurementsError(source, line, f"{cells} cells for {len(header)} columns{more}")
        raw = (row.get("nsp") or "").strip()
        k = _count(raw)
        if k is None or k < 1:
            shown = repr(raw) if len(raw) <= 20 else f"{raw[:20]!r}... ({len(raw)} characters)"
            raise MeasurementsError(source, line, f"column nsp: must be an integer >= 1 in digits 0-9, got {shown}")
        if k in seen:
            raise MeasurementsError(source, line, f"nsp {k} repeats line {seen[k]}: one row per configuration, its "
                                    "runs in time_s_r1, time_s_r2, ... (and energy_wh_r1, ...) of that row")
        seen[k] = line
        times = [_cell(row.get(c), c, source, line) for c in t_cols]
        energies = [_cell(row.get(c), c, source, line) for c in e_cols]
        mean_t = _stored_mean(row, "time_s_mean", t_cols, times, source, line)
        if math.isnan(mean_t):
            raise MeasurementsError(source, line, "no runtime measured for this configuration")
        nsp.append(k)
        t.append(mean_t)
        e.append(_stored_mean(row, "energy_wh_mean", e_cols, energies, source, line))
        tr.append(times)
        er.append(energies)
        bt.append(_cell(row.get("baseline_time_s"), "baseline_time_s", source, line))
        be.append(_cell(row.get("baseline_energy_wh"), "baseline_energy_wh", source, line))
    order = np.argsort(nsp)

    def col(values: list, optional: bool = False) -> np.ndarray | None:
        a = np.array(values, dtype=float)[order]
        return None if optional and np.all(np.isnan(a)) else a

    return Measurements(np.array(nsp)[order], col(t), col(e), col(tr).reshape(len(nsp), len(t_cols)),
                        col(er).reshape(len(nsp), len(e_cols)), col(bt, True), col(be, True))


def load_measurements(path: str | Path) -> Measurements:
    """Read and validate a measurements CSV; errors name the file and line."""
    source = str(path)
    try:
        text = textfile.decode(textfile.read(path, MAX_FILE_BYTES, pipes=True).data, bom=True)  # a BOM, as spreadsheets write
    except OSError as exc:
        raise MeasurementsError(source, None, f"cannot read: {exc.strerror}") from exc  # the CLI's io_error
    except textfile.TooLarge as exc:
        raise MeasurementsError(source, None, f"{exc}, more than any measurements file needs (one row per "
                                "configuration): is it the right file?") from None
    except textfile.NotUtf8 as exc:
        raise MeasurementsError(source, exc.line, f"{exc}: expected a CSV file") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [c.strip() for c in reader.fieldnames or []]
    reader.fieldnames = header
    rows, lines = [], []
    for row in reader:  # skipping blank lines: a row's line is the reader's count where it ends
        rows.append(row)
        lines.append(reader.line_num)
    if not header:
        raise MeasurementsError(source, 1, "empty file: expected a header line")
    if "nsp" not in header and (other := _another_input(text)):
        raise MeasurementsError(source, None, f"not a measurements CSV: {other}; --data takes the CSV of measured "
                                "runs (header nsp,time_s_r1,...)")
    if header[0].startswith("#"):  # before the header's other checks: its text may hold ';' or empty cells
        raise MeasurementsError(source, 1, "the first line is a comment: the header must be the first line "
                                f"(nsp,time_s_r1,...); remove {header[0][:40]!r} or move it to a file beside")
    if repeated := sorted({c for c in header if header.count(c) > 1}):  # DictReader keeps only the last
        raise MeasurementsError(source, 1, f"column(s) {', '.join(repeated)} appear more than once")
    return parse_measurements(rows, header, source, lines)


def _another_input(text: str) -> str | None:
    """Which of the model's other inputs ``text`` looks like, for a file without an
    nsp column given as --data by mistake: said instead of its first line's faults as
    a CSV header (a cluster file was told to "remove '# The heterogeneous cluster of
    the HPMoo' or move it", a parameters file that "{" is an unknown column)."""
    first = next((line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")), "")
    if first.startswith("{"):
        return "it is JSON, as the parameters `model fit --out` writes (given with --params)"
    if re.match(rf"({'|'.join(SECTIONS)})\s*:", first):
        return "it is a cluster description (YAML, given with --cluster)"
    return None


def _cells(row: dict[str | None, Any], columns: int) -> int:
    """The cells of a row as DictReader gave it: a missing one is None, extra ones are a
    list under the key None. A short row is refused as a long one is, not read as empty
    cells: it is most often a file cut off (a copy or a measurement interrupted)."""
    return columns - sum(v is None for v in row.values()) + len(row.get(None, ()))


def write_measurements(path: str | Path, nsp: np.ndarray, time_reps: np.ndarray, energy_reps: np.ndarray) -> None:
    """Write repetitions and their means; NaN energies become empty cells, and an
    energy mean is of the runs that measured one (empty when none did). The file is
    replaced whole, so an interrupted write leaves the previous one."""
    reps = time_reps.shape[1]
    header = (["nsp"] + [f"time_s_r{r + 1}" for r in range(reps)] + [f"energy_wh_r{r + 1}" for r in range(reps)]
              + ["time_s_mean", "energy_wh_mean"])

    def fmt(x: float) -> str:
        return "" if math.isnan(x) else f"{x:.6g}"

    text = io.StringIO()
    w = csv.writer(text)
    w.writerow(header)
    for k, t, e in zip(nsp, time_reps, energy_reps, strict=True):
        e_mean = _mean(math.nan, e.tolist())  # of the runs that measured one, as the reader takes it
        w.writerow([int(k), *map(fmt, t), *map(fmt, e), fmt(float(np.mean(t))), fmt(e_mean)])
    replace_text(path, text.getvalue())
