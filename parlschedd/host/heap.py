"""Giving the daemon's freed heap memory back to the kernel (glibc's malloc_trim).

A daemon that runs for weeks under process churn allocates and frees small blocks
every period (counter buffers, numpy arrays of a tree whose thread count keeps
changing). glibc's malloc keeps the pages of freed blocks that lie between live ones
and gives back only a free top of the heap. ``malloc_trim(0)`` returns every whole
free page inside the heap as well (madvise MADV_DONTNEED, glibc 2.8+): once a minute
it keeps the [heap]'s resident size 0.3 to 0.9 MiB lower under churn and at rest,
though not its slow growth under churn, which the history's long-lived blocks made
(bench/results/heap_churn-3690090.json against heap_churn-2004e6e.json; the README's
"Memory under process churn"). Elsewhere (musl) it does not exist and ``trim`` does
nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable


def _find_malloc_trim() -> Callable[[int], int] | None:
    try:
        found = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    found.argtypes = [ctypes.c_size_t]
    found.restype = ctypes.c_int
    return found


_MALLOC_TRIM = _find_malloc_trim()


def trimmable() -> bool:
    """Whether this C library can give free pages inside the heap back."""
    return _MALLOC_TRIM is not None


def trim() -> bool:
    """Give the kernel back the free pages of malloc's heap; malloc_trim's answer: True
    when it released or advised away any (pages given back before count again)."""
    return _MALLOC_TRIM is not None and _MALLOC_TRIM(0) == 1
