"""Words the daemon's messages and the client's output share, so that they read alike."""

from __future__ import annotations

import signal


def counted(n: int, noun: str) -> str:
    """'1 period', '4 periods'."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def n_threads(n: int) -> str:
    """'1 thread', '4 threads'."""
    return counted(n, "thread")


def signal_name(number: int) -> str:
    """SIGKILL, SIGRTMIN+3 (Python names only the first and last real-time signals),
    or "signal 200" for a number no signal has."""
    try:
        return signal.Signals(number).name
    except ValueError:
        rtmin = int(signal.SIGRTMIN)
        return f"SIGRTMIN+{number - rtmin}" if rtmin < number < signal.SIGRTMAX else f"signal {number}"


def duration(seconds: float) -> str:
    """'45 s', '12 min', '2.1 h': a time long enough to plan around, to two figures."""
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 5970:  # up to 99 min: 100 would be three figures
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.2g} h" if seconds < 36000 else f"{seconds / 3600:.0f} h"
