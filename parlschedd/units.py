"""What a thread's utility counts, per counter source (``status``'s ``counter_source``,
the values of parlschedd.host.base.CounterSource): the one table that ``status``'s
header (parlschedctl/render.py) and the figures' axis (parlschedd/plots.py) read.
No import beyond the standard library: the CLI's status loads it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Unit:
    """A counter source's utility: ``per_second`` the unit of the daemon's raw value
    (status's), ``axis`` that of the value divided by ``scale`` (a figure's)."""

    per_second: str
    scale: float
    axis: str


_CPU_TIME = Unit("ns of CPU per second (1e9: a whole CPU)", 1e9, "CPU share (s of CPU per s)")

UNITS = {"perf:instructions": Unit("instructions per second", 1e9, "instructions / s (x1e9)"),
         "perf:task-clock": _CPU_TIME,
         "schedstat": _CPU_TIME}
UNKNOWN = Unit("the counter source units", 1.0, "utility")  # a source this table does not know: unscaled


def unit_of(source: str | None) -> Unit:
    """The unit of ``source``'s utility; UNKNOWN for one not in UNITS (or none)."""
    return UNITS.get(source or "", UNKNOWN)
