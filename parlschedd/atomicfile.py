"""Files replaced whole or not at all.

A reader, or the next run after a crash or Ctrl-C, sees either the old file or the new
one, never half of one: the text goes to a temporary file in the same directory, is
fsync'ed, replaces the old file with rename(2) (atomic within a filesystem), and the
directory is fsync'ed so the rename itself survives a power loss. The daemon's state
file (the original masks of pinned threads) and the CLI's outputs (fitted parameters,
measurements, figures) are written this way.

Only a regular file is replaced: a path through a symbolic link replaces the file it
leads to (the link stays), and a device or a FIFO (``--out /dev/stdout``) is written
to as open(2) would. A file replaced keeps its permissions and, where we may set them,
its owner and group: ``sudo parlschedctl model measure --out my.csv`` leaves the user's
file theirs. A file only its writer's user may write (the daemon's state file:
``replace_own``) is another matter: whatever is at its path, a symbolic link included,
is replaced by a file of that user's, never written through and never given away.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def replace_text(path: str | os.PathLike[str], text: str) -> None:
    """Atomically replace the file at ``path`` with ``text`` (UTF-8, line ends as
    given): ``replace_bytes``."""
    replace_bytes(path, text.encode("utf-8"))


def replace_bytes(path: str | os.PathLike[str], data: bytes | memoryview) -> None:
    """Atomically replace the file at ``path`` with ``data``, with the old file's
    permissions, or for a new file those open(2) gives under the umask. An OSError is
    named by ``path``, whichever file it happened in."""
    target = Path(os.path.realpath(path))
    try:
        old: os.stat_result | None = target.stat()
    except FileNotFoundError:
        old = None
    if old is not None and not stat.S_ISREG(old.st_mode):
        try:
            with open(target, "wb") as out:
                out.write(data)
        except OSError as exc:  # /dev/full: ENOSPC on close, named by nothing
            raise _named(exc, path) from None
        return
    mode = stat.S_IMODE(old.st_mode) if old is not None else 0o666 & ~_umask()
    _replace(target, path, data, mode, old)


def replace_own(path: str | os.PathLike[str], data: bytes | memoryview, *, mode: int) -> None:
    """Atomically replace the name ``path`` itself with a file of ours holding ``data``,
    with ``mode``, whatever is there now. For a file whose writer alone decides what is
    in it (the daemon's state file, which root reads back at the next start): a
    symbolic link someone put at ``path`` would have the write land in the file it
    leads to (root's /etc/shadow), a FIFO or a device would be written to, and a file
    of theirs would lend the new one its owner, so that they could write it again.
    Here the link, or the file, is replaced, not followed; the old file's owner and
    mode are not kept. A directory at ``path`` is not replaced (EISDIR). An OSError is
    named by ``path``."""
    _replace(Path(os.path.abspath(path)), path, data, mode, None)


def _replace(target: Path, path: str | os.PathLike[str], data: bytes | memoryview, mode: int,
             old: os.stat_result | None) -> None:
    """Write ``data`` to a temporary file beside ``target`` (with ``mode``, and
    ``old``'s owner when given and not ours), fsync it, rename it over ``target`` and
    fsync the directory. Errors are named by ``path``, the name asked for."""
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise _named(exc, path) from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            if old is not None and (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
                _keep_owner(out.fileno(), old)
            os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _named(exc, path) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _keep_owner(fd: int, old: os.stat_result) -> None:
    """The old file's owner and group on the new one; only root may give a file away,
    so for anyone else what they may set (their own group) is kept, the rest not."""
    try:
        os.fchown(fd, old.st_uid, old.st_gid)
    except PermissionError:
        try:
            os.fchown(fd, -1, old.st_gid)
        except PermissionError:
            pass


def _named(exc: OSError, path: str | os.PathLike[str]) -> OSError:
    """The error named by the file asked for, not by the temporary one."""
    return type(exc)(exc.errno, exc.strerror, os.fspath(path))


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
