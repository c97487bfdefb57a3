"""Figures of a target's run, like the paper's Figures 3-6: the running average speed
of each thread and of the whole target over time, with the moments of CPU changes
(ticks) and domain changes (vertical lines) marked. Headless (Agg)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

UNITS = {"perf:instructions": (1e9, "instructions / s (x1e9)"),
         "perf:task-clock": (1e9, "CPU share (s of CPU per s)"),
         "schedstat": (1e9, "CPU share (s of CPU per s)")}


def running_average(t: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Cumulative mean of the measured values (NaN periods skipped)."""
    ok = np.isfinite(u)
    n = np.cumsum(ok)
    s = np.cumsum(np.where(ok, u, 0.0))
    with np.errstate(invalid="ignore"):
        return np.where(n > 0, s / np.maximum(n, 1), np.nan)


def plot_history(history: dict, out: str | Path, max_threads: int = 32) -> Path:
    """Draw the figure for a ``history`` reply of the daemon into ``out`` (PNG)."""
    samples = history["samples"]
    if not samples:
        raise ValueError("the history is empty: the target has not run a period yet")
    scale, unit = UNITS.get(history.get("counter_source", ""), (1.0, "utility"))
    t = np.array([s["t"] for s in samples])
    tids = sorted({tid for s in samples for tid in s["tids"]})
    col = {tid: i for i, tid in enumerate(tids)}
    util = np.full((len(samples), len(tids)), np.nan)
    cpu = np.full((len(samples), len(tids)), -1)
    dom = np.full((len(samples), len(tids)), -1)
    for k, s in enumerate(samples):
        idx = [col[x] for x in s["tids"]]
        util[k, idx] = [np.nan if u is None else u / scale for u in s["utility"]]
        cpu[k, idx] = s["cpu"]
        dom[k, idx] = s["domain"]

    fig, (ax, ax_cpu) = plt.subplots(2, 1, figsize=(10, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    shown = tids[:max_threads]
    for tid in shown:
        ax.plot(t, running_average(t, util[:, col[tid]]), lw=0.8, alpha=0.7)
    total = np.nanmean(util, axis=1) if util.size else util
    ax.plot(t, running_average(t, total), color="black", lw=2.2, label="whole target (mean per thread)")
    changed_dom = (np.diff(dom, axis=0) != 0) & (dom[1:] >= 0) & (dom[:-1] >= 0)
    for k in np.flatnonzero(changed_dom.any(axis=1)):
        ax.axvline(t[k + 1], color="tab:red", lw=0.8, ls="--")
        ax_cpu.axvline(t[k + 1], color="tab:red", lw=0.8, ls="--")
    changed_cpu = (np.diff(cpu, axis=0) != 0) & (cpu[1:] >= 0) & (cpu[:-1] >= 0)
    moves = changed_cpu.sum(axis=1)
    ax_cpu.bar(t[1:], moves, width=history.get("period_s", 0.1), color="tab:blue")
    ax.set_ylabel(f"running average speed\n{unit}")
    ax.set_title(f"{history.get('name', '')} (pid {history.get('pid', '?')}): {len(tids)} threads"
                 + (f", {len(shown)} drawn" if len(shown) < len(tids) else "")
                 + "; dashed red: domain changes")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    ax_cpu.set_ylabel("CPU changes\nper period")
    ax_cpu.set_xlabel("seconds since attach")
    ax_cpu.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
