"""Measuring a user's command per configuration: wall time, and energy from RAPL
(``host/rapl.py``). Without readable zones, when a counter did not move during a run,
or when a zone could not be read, the energy is NaN and only the runtime is recorded,
which is enough for a time-only fit.
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np
import psutil

from parlschedd.host.rapl import RaplCounter, Zone


class MeasureError(RuntimeError):
    """A configuration's command could not be run or failed."""


def command_for(template: Sequence[str], nsp: int) -> list[str]:
    """The user's command with every ``{nsp}`` replaced."""
    return [arg.replace("{nsp}", str(nsp)) for arg in template]


STOP_GRACE_S = 2.0  # how long an interrupted command has to end on SIGTERM before SIGKILL


@dataclass(frozen=True)
class Run:
    """One run of a measurement, for its progress lines."""

    number: int  # 1-based, of total
    total: int
    nsp: int
    repeat: int  # 1-based, of repeats
    repeats: int
    cmd: list[str]


class Measured(NamedTuple):
    """One run's figures: its wall time, its energy (NaN: not measured) and, when a
    RAPL zone could not be read during it, why (its time is still good)."""

    seconds: float
    wh: float
    energy_error: str | None = None


class Progress(Protocol):
    """Told of each run as it starts and as it ends, so that a long measurement says
    where it is (the command's own output comes in between)."""

    def started(self, run: Run) -> None: ...

    def ended(self, run: Run, measured: Measured) -> None: ...


def run_once(template: Sequence[str], nsp: int, zones: Sequence[Zone], run: int = 1) -> Measured:
    """Run the command for one configuration and measure it. Interrupted
    (Ctrl-C, or SIGTERM, which the CLI turns into a KeyboardInterrupt), it ends the
    command too: SIGTERM reached parlschedctl alone, and the command ran on."""
    cmd = command_for(template, nsp)
    with RaplCounter(zones) as energy:
        started = time.monotonic()
        came: list[int] = []  # an interrupt raised inside Popen, after the fork, left the command running on
        kept = _hold_interrupts(came.append)
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        except OSError as exc:
            _restore(kept)
            raise MeasureError(f"cannot start {cmd[0]}: {exc.strerror}") from exc
        try:
            _restore(kept)
            if came:
                raise KeyboardInterrupt
            returncode = proc.wait()
        except BaseException:
            _end(proc)
            raise
        seconds = time.monotonic() - started
    if returncode != 0:
        how = f"was killed by {signal.Signals(-returncode).name}" if returncode < 0 else f"exited {returncode}"
        raise MeasureError(f"`{shlex.join(cmd)}` {how} (nsp={nsp}, run {run})")
    return Measured(seconds, energy.wh, energy.error)


def _end(proc: subprocess.Popen) -> None:
    """SIGTERM to the command and every process under it, SIGKILL to those left after
    STOP_GRACE_S or at a second interrupt. Its children are found before any signal (a
    child whose parent ended is no longer under it): a SIGTERM to parlschedctl alone
    left a shell's or a launcher's children running, where a terminal's Ctrl-C reaches
    them all (they are in its process group). One started in the meantime, or that
    left the tree before (a daemon), is missed. A second interrupt only hurries this on:
    raised as an exception, one that came while the tree was listed left it all running."""
    hurry = threading.Event()
    kept = _hold_interrupts(lambda _: hurry.set())
    try:
        procs = _tree(proc)
        for p in procs:
            _signal(p, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        alive = procs
        while alive and not hurry.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)
            alive = [p for p in alive if _running(p, proc)]
        for p in alive:
            _signal(p, signal.SIGKILL)
        if proc.poll() is None:  # not listed (psutil could not read it): killed alone
            proc.kill()
        proc.wait()
    finally:
        _restore(kept)


INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


def _hold_interrupts(told: Callable[[int], object]) -> dict[int, Any]:
    """Ctrl-C and SIGTERM only told to ``told`` (by number) till ``_restore``, not raised
    where they land; returns the handlers they had."""
    return {sig: signal.signal(sig, lambda signum, _: told(signum)) for sig in INTERRUPTS}


def _restore(kept: dict[int, Any]) -> None:
    for sig, handler in kept.items():
        signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set from C


def _running(p: psutil.Process, proc: subprocess.Popen) -> bool:
    """Whether ``p`` still runs: the command reaped by us when it ended, the others
    (not our children) neither gone nor zombies."""
    if p.pid == proc.pid:
        return proc.poll() is None
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _tree(proc: subprocess.Popen) -> list[psutil.Process]:
    """The command first, then the processes under it; none once it was reaped (its
    pid may be another's now)."""
    if proc.returncode is not None:
        return []
    try:
        top = psutil.Process(proc.pid)
        return [top, *top.children(recursive=True)]
    except psutil.Error:
        return []


def _signal(p: psutil.Process, sig: signal.Signals) -> None:
    try:
        p.send_signal(sig)  # psutil checks the process is still the one listed (pid reuse)
    except psutil.Error:
        pass


def measure(template: Sequence[str], nsps: Sequence[int], repeat: int = 1, zones: Sequence[Zone] = (),
            progress: Progress | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every configuration ``repeat`` times, yielded as each configuration completes:
    (time_reps, energy_reps), each of shape (repeat,), so that a caller keeps what ran
    when a later run fails."""
    number, total = 0, len(nsps) * repeat
    for nsp in nsps:
        times, energies = np.empty(repeat), np.empty(repeat)
        for r in range(repeat):
            number += 1
            run = Run(number, total, nsp, r + 1, repeat, command_for(template, nsp))
            if progress:
                progress.started(run)
            measured = run_once(template, nsp, zones, r + 1)
            times[r], energies[r] = measured.seconds, measured.wh
            if progress:
                progress.ended(run, measured)
        yield times, energies
