"""Figures of a target's run, like the paper's Figures 3-6: the running average speed
of each thread and of the whole target over time, with the placement changes per
period (bars: a new CPU, a pin or a free) and domain changes (vertical lines) marked. Headless (Agg)."""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.backend_bases import FigureCanvasBase  # noqa: E402
import numpy as np  # noqa: E402

from parlschedd.atomicfile import replace_bytes  # noqa: E402
from parlschedd.units import unit_of  # noqa: E402
from parlschedd.words import counted  # noqa: E402

LEGEND_THREADS = 8  # the threads named in the legend, by tid; the others drawn are counted
THREADS_DRAWN = 32  # the first threads by tid drawn a line each; the title says how many were left out


def _missing_program(fmt: str) -> str | None:
    """The program matplotlib runs to write ``fmt`` when it is not on the PATH, else
    None: a PGF figure measures its text with TeX (rcParams ``pgf.texsystem``), and
    without it savefig raised RuntimeError after the work was done."""
    if fmt != "pgf":
        return None
    program = str(matplotlib.rcParams["pgf.texsystem"])
    return None if shutil.which(program) else program


def figure_format(path: str | Path) -> str:
    """The format ``path``'s suffix names (PNG without one); ValueError naming the
    formats there are when matplotlib writes no such format here, or the program missing
    for one it writes only with another program's help."""
    fmt = Path(path).suffix[1:].lower() or "png"
    known = FigureCanvasBase.get_supported_filetypes()
    if fmt not in known:
        raise ValueError(f"{path}: cannot write a .{fmt} figure; use one of {_usable(known)}")
    program = _missing_program(fmt)
    if program:
        raise ValueError(f"{path}: cannot write a .{fmt} figure: it needs {program} (matplotlib's pgf.texsystem), "
                         f"which is not on the PATH; install it (a TeX distribution) or use one of {_usable(known)}")
    return fmt


def _usable(known: Iterable[str]) -> str:
    """The formats of ``known`` written without a program missing here, for a refusal."""
    return ", ".join("." + f for f in sorted(known) if not _missing_program(f))


def save_figure(fig: plt.Figure, path: str | Path) -> None:
    """Write ``fig`` to ``path`` exactly (without a suffix, matplotlib would write
    ``path.png`` instead) in :func:`figure_format`, and close it.

    The figure is rendered in memory first, then replaces ``path`` whole
    (atomicfile.replace_bytes): written in place, a write that failed half-way (a full
    disk, ``ulimit -f``) left a truncated image in place of the old one. Nor is ``path``
    given to matplotlib, whose PNG writer (PIL) opened it for reading too, which a file
    that may be written but not read refuses."""
    rendered = io.BytesIO()
    try:
        fig.savefig(rendered, dpi=110, format=figure_format(path))
    except RuntimeError as exc:  # a program it runs failed or is missing (a matplotlibrc with text.usetex)
        raise ValueError(f"{path}: cannot write the figure: {str(exc).strip().splitlines()[0]}") from exc
    finally:
        plt.close(fig)
    replace_bytes(path, rendered.getbuffer())


def running_average(u: np.ndarray) -> np.ndarray:
    """Cumulative mean of the measured values (NaN periods skipped)."""
    ok = np.isfinite(u)
    n = np.cumsum(ok)
    s = np.cumsum(np.where(ok, u, 0.0))
    with np.errstate(invalid="ignore"):
        return np.where(n > 0, s / np.maximum(n, 1), np.nan)


def placement_changes(samples: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """For each period after the first: how many threads changed placement, and
    whether any changed domain. A placement change is a new CPU, including a pin of a
    free thread and a free of a pinned one (the history's cpu -1 is "free"). A thread
    counts only between two periods it is in both, so joining and leaving are not
    changes."""
    tids = sorted({tid for s in samples for tid in s["tids"]})
    col = {tid: i for i, tid in enumerate(tids)}
    shape = (len(samples), len(tids))
    there, cpu, dom = np.zeros(shape, dtype=bool), np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
    for k, s in enumerate(samples):
        idx = [col[x] for x in s["tids"]]
        there[k, idx], cpu[k, idx], dom[k, idx] = True, s["cpu"], s["domain"]
    both = there[1:] & there[:-1]
    moves = ((np.diff(cpu, axis=0) != 0) & both).sum(axis=1)
    domain_moved = ((np.diff(dom, axis=0) != 0) & both).any(axis=1)
    return moves, domain_moved


def plot_history(history: dict, out: str | Path) -> Path:
    """Draw the figure for a ``history`` reply of the daemon into ``out``, in the format
    its suffix names (``figure_format``; PNG without one)."""
    out = Path(out)
    save_figure(draw_history(history), out)
    return out


def draw_history(history: dict) -> plt.Figure:
    """The figure of a ``history`` reply of the daemon, the first THREADS_DRAWN
    threads' lines drawn."""
    samples = history["samples"]
    if not samples:
        raise ValueError("the history is empty: " + ("no period of the target was recorded before it exited"
                                                     if history.get("exited") else "the target has not run a period yet"))
    unit = unit_of(history.get("counter_source"))
    t = np.array([s["t"] for s in samples])
    tids = sorted({tid for s in samples for tid in s["tids"]})
    col = {tid: i for i, tid in enumerate(tids)}
    util = np.full((len(samples), len(tids)), np.nan)
    for k, s in enumerate(samples):
        util[k, [col[x] for x in s["tids"]]] = [np.nan if u is None else u / unit.scale for u in s["utility"]]

    fig, (ax, ax_cpu) = plt.subplots(2, 1, figsize=(10, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    shown = tids[:THREADS_DRAWN]
    # The threads past LEGEND_THREADS in silver (no colour of the cycle the named ones
    # take), one legend entry for them all: a legend of 32 tids hid the figure, and the
    # cycle's 10 colours repeat (the 11th line took the colour the legend gave the 1st)
    for i, tid in enumerate(shown):
        named = i < LEGEND_THREADS
        ax.plot(t, running_average(util[:, col[tid]]), lw=0.8, alpha=0.7, label=f"tid {tid}" if named else "_nolegend_",
                **({} if named else {"color": "silver"}))
    if len(shown) > LEGEND_THREADS:
        ax.plot([], [], lw=0.8, alpha=0.7, color="silver", label="and " + counted(len(shown) - LEGEND_THREADS, "more thread"))
    total = np.nanmean(util, axis=1) if util.size else util
    ax.plot(t, running_average(total), color="black", lw=2.2, label="whole target (mean per thread)")
    moves, domain_moved = placement_changes(samples)
    for k in np.flatnonzero(domain_moved):
        ax.axvline(t[k + 1], color="tab:red", lw=0.8, ls="--")
        ax_cpu.axvline(t[k + 1], color="tab:red", lw=0.8, ls="--")
    ax_cpu.bar(t[1:], moves, width=history.get("period_s", 0.1), color="tab:blue")
    ax.set_ylabel(f"running average speed\n{unit.axis}")
    ax.set_title(f"{history.get('name', '')} (pid {history.get('pid', '?')}): {len(tids)} threads"
                 + (f", {len(shown)} drawn" if len(shown) < len(tids) else "")
                 # the kernel placed them: the changes below are its, not parlschedd's
                 + ("; observe mode, not pinned" if history.get("observe") else "")
                 + "; dashed red: domain changes")
    ax.legend(loc="lower right", fontsize="small")
    ax.grid(alpha=0.3)
    ax_cpu.set_ylabel("placement changes\nper period")
    ax_cpu.set_xlabel("seconds since attach")
    ax_cpu.grid(alpha=0.3)
    fig.tight_layout()
    return fig
