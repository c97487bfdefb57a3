"""Crash-safe JSON state files.

The daemon keeps the original affinity masks of the threads it pinned in a state file,
so that after SIGKILL a new instance can put them back. A reader must see either the
old or the new file, never half of one (:mod:`parlschedd.atomicfile`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from parlschedd.atomicfile import replace_own
from parlschedd.trust import untrusted


def write_state(path: str | os.PathLike[str], data: Mapping[str, Any]) -> None:
    """Atomically replace ``path`` with ``data`` as JSON, in a file of our own (readable
    by its owner only): a symbolic link at ``path`` is replaced, not written through,
    and a file someone else left there does not lend the new one its owner
    (``replace_own``)."""
    replace_own(path, json.dumps(data, sort_keys=True).encode("utf-8"), mode=0o600)


class StateNotOurs(Exception):
    """The state file is not one the daemon's own user alone wrote (a symbolic link,
    not a regular file, another user's, writable by others): it is not read, since its
    saved masks would be put on root's threads and its targets attached again."""


def read_state(path: str | os.PathLike[str], euid: int | None = None) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when there is no state file. Read through
    no symbolic link and only from a regular file of ``euid``'s (by default ours) that
    no one else may write, else StateNotOurs: a file someone else could write chooses
    which masks the daemon puts back on which threads."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)  # NONBLOCK: a FIFO
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP and os.path.islink(path):
            raise StateNotOurs(f"a symbolic link (to {os.readlink(path)}), not followed") from None
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateNotOurs("not a regular file")
        if problem := untrusted(st, (os.geteuid() if euid is None else euid,)):
            raise StateNotOurs(f"{problem}: not written by this daemon alone, not read")
        text = f.read().decode("utf-8")
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"state file {path} does not hold a JSON object")
    return data


class StateDirBusy(Exception):
    """Another process holds the state dir's lock; ``pid`` is the one it wrote, if any."""

    def __init__(self, path: Path, pid: int | None) -> None:
        holder = f"pid {pid}" if pid else "another process"
        super().__init__(f"state dir {path.parent} is in use by {holder} (lock file {path})")
        self.pid = pid


def lock_dir(directory: str | os.PathLike[str]) -> int:
    """Take the exclusive lock of ``directory`` (a ``lock`` file in it, flock(2)) and
    write our pid in it; returns the fd, which holds the lock until it is closed or the
    process ends. Two daemons on one state dir would each restore and overwrite the
    other's saved masks, and after a crash save pinned masks as originals.
    StateDirBusy when another process holds it. A symbolic link at its path is not
    followed (ELOOP): the pid would be written into the file it names."""
    path = Path(directory) / "lock"
    try:  # NONBLOCK: a FIFO there would not hold up the start
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    except OSError as exc:  # said as "Too many levels of symbolic links", naming no file
        if exc.errno == errno.ELOOP and os.path.islink(path):
            raise OSError(errno.ELOOP, f"its lock file {path} is a symbolic link, not followed: remove it") from None
        raise
    _take(fd, path)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def lock_read_only_dir(directory: str | os.PathLike[str]) -> int | None:
    """The lock of a state dir on a read-only file system, whose lock file ``lock_dir``
    cannot open to write: a put-back after a crash only reads the state file, and
    flock(2) takes a file open to read. None when there is no lock file (no daemon
    ever ran there, and none can make one now). StateDirBusy when another process
    holds it: a daemon that started before the file system went read-only."""
    path = Path(directory) / "lock"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    _take(fd, path)
    return fd


def _take(fd: int, path: Path) -> None:
    """flock(2) ``fd``, the lock file at ``path``, or close it and raise."""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO's flock said "Invalid argument"
            raise OSError(errno.EINVAL, f"its lock file {path} is not a regular file: remove it")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise StateDirBusy(path, int(text) if text.isdigit() else None) from None
    except BaseException:
        os.close(fd)
        raise
