"""The identity of the code a process runs: a digest of the parlschedd package's
sources, read once. The version string changes only with a release, so a daemon not
restarted after ``make install`` of newer code of the same version said nothing of
it; the daemon gives the digest of what it loaded at start (status, ping), and
parlschedctl compares it with the code beside it."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


@functools.cache
def build_id(package: Path = PACKAGE) -> str | None:
    """Twelve hex digits of the SHA-256 of every ``.py`` file under ``package`` (path
    and content, in path order); None when none is there to read (the code run from an
    archive), which compares with nothing."""
    digest = hashlib.sha256()
    sources = sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    try:
        for path in sources:
            digest.update(path.relative_to(package).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    except OSError:  # replaced under us (an install running): no identity rather than a wrong one
        return None
    return digest.hexdigest()[:12] if sources else None


def other_build(theirs: object) -> bool:
    """Whether a daemon that says it runs build ``theirs`` runs other code than this
    process's package holds (a daemon too old to say, or code without sources, is not
    told apart)."""
    ours = build_id()
    return isinstance(theirs, str) and ours is not None and theirs != ours
