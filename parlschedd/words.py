"""Words the daemon's messages and the client's output share, so that they read alike."""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """'1 period', '4 periods'."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def n_threads(n: int) -> str:
    """'1 thread', '4 threads'."""
    return counted(n, "thread")
