"""Measuring a user's command per configuration: wall time, and energy from RAPL.

Energy comes from the powercap interface (``<root>/intel-rapl:N/energy_uj``, the
top-level package zones only, so sub-zones such as ``intel-rapl:0:0`` are not counted
twice), with the counter's wrap-around at ``max_energy_range_uj`` handled. The root is
a parameter so tests run on a fake tree. Without readable zones, or when a counter did
not move during a run, the energy is NaN and only the runtime is recorded, which is
enough for a time-only fit.
"""

from __future__ import annotations

import math
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

POWERCAP_ROOT = Path("/sys/class/powercap")
_PACKAGE_ZONE = re.compile(r"^intel-rapl:\d+$")
UJ_PER_WH = 3.6e9


class MeasureError(RuntimeError):
    """A configuration's command could not be run or failed."""


@dataclass(frozen=True)
class Zone:
    energy: Path
    max_range_uj: int


def rapl_zones(root: Path = POWERCAP_ROOT) -> tuple[Zone, ...]:
    """The readable package zones under ``root`` (empty when RAPL is absent or closed)."""
    zones = []
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return ()
    for d in entries:
        if not _PACKAGE_ZONE.match(d.name):
            continue
        try:
            int((d / "energy_uj").read_text())
            max_range = int((d / "max_energy_range_uj").read_text())
        except (OSError, ValueError):
            continue
        zones.append(Zone(d / "energy_uj", max_range))
    return tuple(zones)


def read_uj(zones: Sequence[Zone]) -> list[int]:
    return [int(z.energy.read_text()) for z in zones]


def consumed_wh(zones: Sequence[Zone], before: Sequence[int], after: Sequence[int]) -> float:
    """Energy between two readings, each counter unwrapped once at most; NaN without
    zones or when a zone's counter did not move. A package draws power all the time, so a
    counter that did not move measured nothing (a run shorter than its update interval,
    or a counter that is not updated): that is no energy measured, not 0 Wh, which a fit
    refuses (measurements must be positive)."""
    if not zones:
        return math.nan
    moved = [(b - a) % z.max_range_uj if z.max_range_uj else b - a
             for z, a, b in zip(zones, before, after, strict=True)]
    if 0 in moved:
        return math.nan
    return sum(moved) / UJ_PER_WH


def command_for(template: Sequence[str], nsp: int) -> list[str]:
    """The user's command with every ``{nsp}`` replaced."""
    return [arg.replace("{nsp}", str(nsp)) for arg in template]


def run_once(template: Sequence[str], nsp: int, zones: Sequence[Zone]) -> tuple[float, float]:
    """Run the command for one configuration: (wall seconds, Wh or NaN)."""
    cmd = command_for(template, nsp)
    before = read_uj(zones)
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, check=False)
    except OSError as exc:
        raise MeasureError(f"cannot start {cmd[0]}: {exc.strerror}") from exc
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise MeasureError(f"`{shlex.join(cmd)}` exited {done.returncode} (nsp={nsp})")
    return seconds, consumed_wh(zones, before, read_uj(zones))


def measure(template: Sequence[str], nsps: Sequence[int], repeat: int = 1, zones: Sequence[Zone] = (),
            progress: Callable[[int, int], None] | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every configuration ``repeat`` times, yielded as each configuration completes:
    (time_reps, energy_reps), each of shape (repeat,), so that a caller keeps what ran
    when a later run fails."""
    done, total = 0, len(nsps) * repeat
    for nsp in nsps:
        times, energies = np.empty(repeat), np.empty(repeat)
        for r in range(repeat):
            times[r], energies[r] = run_once(template, nsp, zones)
            done += 1
            if progress:
                progress(done, total)
        yield times, energies
