"""The one reading of the files a user names (the daemon's config, a cluster YAML, a
params JSON, a measurements CSV): a regular file (or a pipe, where the caller takes
one), at most ``limit`` bytes, UTF-8
(YAML's encoding, and JSON's) with the line of its first byte that is not.

Read as a path's bytes whole, ``/dev/zero`` given by mistake filled the memory and a
FIFO with no writer held the command up for good; and Python's decoder names a byte
offset, so a file saved as Latin-1 was not found by line. Each loader words these in
its own error type.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple


class NotUtf8(ValueError):
    """``line`` (1-based) holds ``byte``, the first that is not UTF-8."""

    def __init__(self, line: int, byte: int) -> None:
        super().__init__(f"not UTF-8 text (byte 0x{byte:02x}); save the file as UTF-8")
        self.line, self.byte = line, byte


class TooLarge(ValueError):
    """A file of more than ``limit`` bytes: more than any such input needs, so most
    likely another file given by mistake (an image, a log)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"larger than {limit >> 20} MiB" if limit % (1 << 20) == 0 else f"larger than {limit} bytes")
        self.limit = limit


class NotARegularFile(OSError):
    """A device given as a file (or a FIFO where pipes are not taken): refused unread
    (/dev/zero never ends a read). ``strerror`` says so, as an OSError's does."""

    def __init__(self, path: str, pipes: bool) -> None:
        super().__init__(errno.EINVAL, "not a regular file or a pipe (a device)" if pipes else
                         "not a regular file (a FIFO, a socket or a device)", path)


class Read(NamedTuple):
    """What was read: the bytes, and the fstat of the descriptor they came from (a
    symbolic link followed), for a judge of the file as read, not as named later."""

    data: bytes
    stat: os.stat_result


def read(path: str | Path, limit: int, judge: Callable[[os.stat_result], None] | None = None, *,
         pipes: bool = False) -> Read:
    """At most ``limit`` bytes of the regular file ``path`` (or, with ``pipes``, of a
    pipe: ``--data <(ssh host cat m.csv)``, /dev/stdin); OSError (IsADirectoryError,
    NotARegularFile, the open's own) or TooLarge. ``judge`` sees the descriptor's stat
    before a byte is read and raises to refuse the file."""
    # O_NONBLOCK: the open of a FIFO without a writer returns at once instead of waiting for one
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as file:
        st = os.fstat(file.fileno())
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
        if not (stat.S_ISREG(st.st_mode) or pipes and stat.S_ISFIFO(st.st_mode)):
            raise NotARegularFile(str(path), pipes)
        if judge is not None:
            judge(st)
        os.set_blocking(file.fileno(), True)  # a pipe's writer may be slow; one with no writer reads as empty
        data = file.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(limit)
    return Read(data, st)


def decode(data: bytes, *, bom: bool = False) -> str:
    """``data`` as text; NotUtf8 naming the line of its first byte that is not UTF-8.
    ``bom``: a leading byte-order mark is dropped (spreadsheets write one)."""
    try:
        return data.decode("utf-8-sig" if bom else "utf-8")
    except UnicodeDecodeError as exc:
        raise NotUtf8(data[: exc.start].count(b"\n") + 1, data[exc.start]) from None
