"""Words the daemon's messages and the client's output share, so that they read alike."""

from __future__ import annotations


def n_threads(n: int) -> str:
    """'1 thread', '4 threads'."""
    return f"{n} thread" if n == 1 else f"{n} threads"
