"""Files replaced whole or not at all.

A reader, or the next run after a crash or Ctrl-C, sees either the old file or the new
one, never half of one: the text goes to a temporary file in the same directory, is
fsync'ed, replaces the old file with rename(2) (atomic within a filesystem), and the
directory is fsync'ed so the rename itself survives a power loss. The daemon's state
file (the original masks of pinned threads) and the CLI's outputs (fitted parameters,
measurements) are written this way.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def replace_text(path: str | os.PathLike[str], text: str, *, mode: int | None = None) -> None:
    """Atomically replace ``path`` with ``text`` (UTF-8). ``mode``: the new file's
    permissions; by default those of a file created by open(2) under the umask."""
    target = Path(path)
    if mode is None:
        mode = 0o666 & ~_umask()
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:  # named by the file asked for, not by the temporary one
        raise OSError(exc.errno, exc.strerror, str(target)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(text)
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


def _umask() -> int:
    """The process's umask. Linux shows it in /proc/self/status (4.7+); os.umask can
    only read it by setting it, which a thread creating a file meanwhile would see."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
