"""The kernel's CPU list format ("0-3,8,10-11"), as in sysfs and cpuset files.

The kernel prints CPU sets with ``%*pbl`` (lib/bitmap-str.c): comma-separated ranges
``a-b`` or single CPUs, ascending, and an empty line for the empty set. Parsing accepts
what the kernel prints plus surrounding whitespace; the stride form ``a-b:u/g`` that
``bitmap_parselist`` also accepts for writes is rejected, since no reader here sees it.
"""

from __future__ import annotations

from collections.abc import Iterable

# Above any kernel's CPU count (NR_CPUS is at most 8192 on x86_64, arm64 and powerpc): a
# number past it is not a CPU, and a range "0-999999999999" would never end.
MAX_CPUS = 1 << 16


def parse_cpulist(text: str) -> frozenset[int]:
    """Parse ``"0-3,8"`` into ``{0, 1, 2, 3, 8}``; raise ValueError on malformed input."""
    cpus: set[int] = set()
    body = text.strip()
    if not body:
        return frozenset()
    for part in body.split(","):
        if ":" in part:
            raise ValueError(f"the stride form {part.strip()[:40]!r} in {text[:40]!r} is not read here; name the "
                             "CPUs (a range such as '0-15', or each CPU: '0,2,4')")
        first, sep, last = part.strip().partition("-")
        lo = _cpu_number(first, text)
        hi = _cpu_number(last, text) if sep else lo
        if hi < lo:
            raise ValueError(f"descending CPU range {part!r} in {text!r}")
        cpus.update(range(lo, hi + 1))
    return frozenset(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """Format CPUs as the kernel does: ascending, consecutive runs folded into ``a-b``."""
    runs: list[str] = []
    ordered = sorted(set(cpus))
    start = 0
    for i, cpu in enumerate(ordered):
        if i + 1 < len(ordered) and ordered[i + 1] == cpu + 1:
            continue
        lo = ordered[start]
        runs.append(str(lo) if lo == cpu else f"{lo}-{cpu}")
        start = i + 1
    return ",".join(runs)


def _cpu_number(token: str, text: str) -> int:
    token = token.strip()
    if not (token.isascii() and token.isdigit()):
        raise ValueError(f"bad CPU number {token!r} in CPU list {text!r}")
    digits = token.lstrip("0") or "0"  # leading zeros are the same CPU, and int() refuses 4300 digits
    if len(digits) > 6 or int(digits) >= MAX_CPUS:
        shown = digits if len(digits) <= 12 else digits[:12] + "..."  # not the zeros before it
        raise ValueError(f"CPU number {shown!r} in CPU list {text[:40]!r} is above any CPU ({MAX_CPUS})")
    return int(digits)
