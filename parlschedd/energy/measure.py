"""Measuring a user's command per configuration: wall time, and energy from RAPL
(``host/rapl.py``). Without readable zones, or when a counter did not move during a
run, the energy is NaN and only the runtime is recorded, which is enough for a
time-only fit.
"""

from __future__ import annotations

import shlex
import signal
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


STOP_GRACE_S = 2.0  # how long an interrupted command has to end on SIGTERM before SIGKILL


def run_once(template: Sequence[str], nsp: int, zones: Sequence[Zone], run: int = 1) -> tuple[float, float]:
    """Run the command for one configuration: (wall seconds, Wh or NaN). Interrupted
    (Ctrl-C, or SIGTERM, which the CLI turns into a KeyboardInterrupt), it ends the
    command too: SIGTERM reached parlschedctl alone, and the command ran on."""
    cmd = command_for(template, nsp)
    with RaplCounter(zones) as energy:
        started = time.monotonic()
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        except OSError as exc:
            raise MeasureError(f"cannot start {cmd[0]}: {exc.strerror}") from exc
        try:
            returncode = proc.wait()
        except BaseException:
            _end(proc)
            raise
        seconds = time.monotonic() - started
    if returncode != 0:
        how = f"was killed by {signal.Signals(-returncode).name}" if returncode < 0 else f"exited {returncode}"
        raise MeasureError(f"`{shlex.join(cmd)}` {how} (nsp={nsp}, run {run})")
    return seconds, energy.wh


def _end(proc: subprocess.Popen) -> None:
    """SIGTERM to the command, SIGKILL after STOP_GRACE_S or at a second interrupt.
    Its own children are its to end (a terminal's Ctrl-C reaches them all: they are
    in parlschedctl's process group)."""
    try:
        proc.terminate()
        proc.wait(STOP_GRACE_S)
    except BaseException:  # the grace ran out, or another interrupt came: no more waiting
        proc.kill()
        proc.wait()


def measure(template: Sequence[str], nsps: Sequence[int], repeat: int = 1, zones: Sequence[Zone] = (),
            progress: Callable[[int, int], None] | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every configuration ``repeat`` times, yielded as each configuration completes:
    (time_reps, energy_reps), each of shape (repeat,), so that a caller keeps what ran
    when a later run fails."""
    done, total = 0, len(nsps) * repeat
    for nsp in nsps:
        times, energies = np.empty(repeat), np.empty(repeat)
        for r in range(repeat):
            times[r], energies[r] = run_once(template, nsp, zones, r + 1)
            done += 1
            if progress:
                progress(done, total)
        yield times, energies
