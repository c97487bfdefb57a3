"""RAPL energy counters, read through the powercap interface.

Energy comes from ``<root>/intel-rapl:N/energy_uj``, the top-level package zones only,
so sub-zones such as ``intel-rapl:0:0`` are not counted twice, nor the platform zone
(``psys``), which the kernel registers at the top level too and which covers the
packages (N is in hex: ``intel-rapl:a`` is the eleventh). A counter wraps to 0 at
``max_energy_range_uj`` (about 262 kJ for a package: every half hour at 150 W), and two
readings tell one wrap from none but not from two, so the counters are read every
``poll_interval_s`` while a block runs, often enough that none can wrap twice between
two reads, and the deltas are summed. The root is a parameter so tests run on a fake
tree. Without readable zones, or when a counter did not move, the energy is NaN.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

POWERCAP_ROOT = Path("/sys/class/powercap")
_PACKAGE_ZONE = re.compile(r"^intel-rapl:[0-9a-f]+$")  # powercap names zones "%s:%x"
PLATFORM_ZONE = "psys"
UJ_PER_WH = 3.6e9
# Reading the counters: no zone may move by a whole range between two reads, at a power
# far above any package's (server CPUs draw up to ~500 W); at most every MAX_POLL_S, as a
# package's range is crossed in minutes, not seconds; at least MIN_POLL_S apart, which
# only a fake tree's tiny range asks for.
MAX_ZONE_W = 1000.0
WRAP_FRACTION = 0.5  # of the smallest range, at MAX_ZONE_W
MAX_POLL_S = 10.0
MIN_POLL_S = 0.01


@dataclass(frozen=True)
class Zone:
    energy: Path
    max_range_uj: int


def rapl_zones(root: Path = POWERCAP_ROOT) -> tuple[Zone, ...]:
    """The readable package zones under ``root`` (empty when RAPL is absent or closed)."""
    return package_zones(root)[0]


def package_zones(root: Path = POWERCAP_ROOT) -> tuple[tuple[Zone, ...], dict[str, str]]:
    """The readable package zones under ``root``, and why each other package zone
    there cannot be read (by name: "Permission denied", energy_uj being root's on
    current kernels): a zone left out silently left its package's energy uncounted."""
    zones, unread = [], {}
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return (), {}
    for d in entries:
        if not _PACKAGE_ZONE.match(d.name) or _zone_name(d) == PLATFORM_ZONE:
            continue
        try:
            int((d / "energy_uj").read_text())
            max_range = int((d / "max_energy_range_uj").read_text())
        except OSError as exc:
            unread[d.name] = exc.strerror or str(exc)
            continue
        except ValueError:
            unread[d.name] = "not a number of microjoules"
            continue
        zones.append(Zone(d / "energy_uj", max_range))
    return tuple(zones), unread


def _zone_name(d: Path) -> str | None:
    try:
        return (d / "name").read_text().strip()
    except OSError:  # unreadable or absent (a fake tree): taken as a package
        return None


def read_uj(zones: Sequence[Zone]) -> list[int]:
    return [int(z.energy.read_text()) for z in zones]


def poll_interval_s(zones: Sequence[Zone]) -> float | None:
    """Seconds between reads of ``zones`` in which none can wrap twice: the time
    MAX_ZONE_W takes to cross WRAP_FRACTION of the smallest range, within
    [MIN_POLL_S, MAX_POLL_S]; None without zones (nothing to read)."""
    if not zones:
        return None
    ranges = [z.max_range_uj for z in zones if z.max_range_uj]
    if not ranges:  # no range: the counters do not wrap, two reads are enough
        return MAX_POLL_S
    crossing_s = WRAP_FRACTION * min(ranges) / 1e6 / MAX_ZONE_W
    return min(MAX_POLL_S, max(MIN_POLL_S, crossing_s))


def moved_uj(zones: Sequence[Zone], before: Sequence[int], after: Sequence[int]) -> list[int]:
    """Each zone's energy between two readings, its counter unwrapped once at most (a
    reading lower than the one before wrapped at max_energy_range_uj)."""
    return [(b - a) % z.max_range_uj if z.max_range_uj else b - a
            for z, a, b in zip(zones, before, after, strict=True)]


def energy_wh(zones: Sequence[Zone], moved: Sequence[int]) -> float:
    """The Wh of each zone's µJ ``moved``; NaN without zones or when a zone's counter
    did not move. A package draws power all the time, so a counter that did not move
    measured nothing (a run shorter than its update interval, or a counter that is not
    updated): that is no energy measured, not 0 Wh, which a fit refuses (measurements
    must be positive)."""
    if not zones or 0 in moved:
        return math.nan
    return sum(moved) / UJ_PER_WH


class RaplCounter:
    """The energy of ``zones`` while a block runs: read on entry, every
    ``poll_interval_s`` by a thread, and on a normal exit, the deltas summed (so that a
    counter that wraps many times in a long run is counted whole). A thread rather than
    a polling wait, which would time the command to the poll's resolution.

    A read that fails (a zone gone, as when the driver is unloaded, or a file that is
    not a number) ends the counting: ``error`` says why and the energy is NaN, nothing
    measured, while the block runs on (its time is still good)."""

    def __init__(self, zones: Sequence[Zone]) -> None:
        self.zones = tuple(zones)
        self.moved = [0] * len(self.zones)
        self.error: str | None = None
        self._last: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self) -> list[int] | None:
        """Every zone's counter; None (``error`` set) when a zone cannot be read."""
        try:
            return read_uj(self.zones)
        except OSError as exc:
            self.error = f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc)
        except ValueError:
            self.error = "an energy_uj that is not a number of microjoules"
        return None

    def _add(self) -> bool:
        """Adds what each zone moved since the last read; False after a failed read."""
        now = self._read()
        if now is None:
            return False
        self.moved = [m + d for m, d in zip(self.moved, moved_uj(self.zones, self._last, now), strict=True)]
        self._last = now
        return True

    def _poll(self, interval: float) -> None:
        while not self._stop.wait(interval) and self._add():
            pass

    def __enter__(self) -> RaplCounter:
        first = self._read()
        interval = poll_interval_s(self.zones)
        if first is not None:
            self._last = first
            if interval is not None:
                self._thread = threading.Thread(target=self._poll, args=(interval,), name="rapl-poll", daemon=True)
                self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if kind is None and self.error is None:
            self._add()

    @property
    def wh(self) -> float:
        """The energy counted (``energy_wh``), once the block is done; NaN after a
        failed read."""
        return math.nan if self.error is not None else energy_wh(self.zones, self.moved)
