"""Measuring a user's command per configuration: wall time, and energy from RAPL
(``host/rapl.py``). Without readable zones, or when a counter did not move during a
run, the energy is NaN and only the runtime is recorded, which is enough for a
time-only fit.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from parlschedd.host.rapl import RaplCounter, Zone


class MeasureError(RuntimeError):
    """A configuration's command could not be run or failed."""


def command_for(template: Sequence[str], nsp: int) -> list[str]:
    """The user's command with every ``{nsp}`` replaced."""
    return [arg.replace("{nsp}", str(nsp)) for arg in template]


def run_once(template: Sequence[str], nsp: int, zones: Sequence[Zone]) -> tuple[float, float]:
    """Run the command for one configuration: (wall seconds, Wh or NaN)."""
    cmd = command_for(template, nsp)
    with RaplCounter(zones) as energy:
        started = time.monotonic()
        try:
            done = subprocess.run(cmd, stdin=subprocess.DEVNULL, check=False)
        except OSError as exc:
            raise MeasureError(f"cannot start {cmd[0]}: {exc.strerror}") from exc
        seconds = time.monotonic() - started
    if done.returncode != 0:
        raise MeasureError(f"`{shlex.join(cmd)}` exited {done.returncode} (nsp={nsp})")
    return seconds, energy.wh


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
