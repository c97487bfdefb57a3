"""Crash-safe JSON state files.

The daemon keeps the original affinity masks of the threads it pinned in a state file,
so that after SIGKILL a new instance can put them back. A reader must see either the
old or the new file, never half of one: the data goes to a temporary file in the same
directory, is fsync'ed, replaces the old file with rename(2) (atomic within a
filesystem), and the directory is fsync'ed so the rename itself survives a power loss.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def write_state(path: str | os.PathLike[str], data: Mapping[str, Any], *, mode: int = 0o600) -> None:
    """Atomically replace ``path`` with ``data`` as JSON (readable by its owner only)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, sort_keys=True)
            out.flush()
            os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_state(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when there is no state file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"state file {path} does not hold a JSON object")
    return data
