"""What the CLI writes: --json's object on stdout, and files (--out), checked before
the work that fills them, so that a long fit or a daemon's history is not computed for
a path that cannot be written."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

class _File(click.Path):
    """A file option, read or written: the loaders name a file they cannot read, and
    check_writable one that cannot be written (exit 1 both). click's own check
    (readable=True, its default) made an unreadable input, or an output that can be
    written but not read, a usage error (exit 2). A directory is still click's usage
    error, and so is an empty path (``"$CFG"`` with CFG unset): ``config check ''`` read
    the working directory ("cannot read config .: a directory")."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "":
            self.fail("an empty path: give a file", param, ctx)
        return super().convert(value, param, ctx)


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal; False where there is none (Python's sys.stderr
    is None when started with descriptor 2 closed, ``2>&-``)."""
    return stream is not None and stream.isatty()


FILE = _File(dir_okay=False, readable=False)


class _OutFile(_File):
    """FILE for a file we write (--out): ``-``, which a reader takes for stdout, is
    refused as a usage error naming the option; it wrote a file named ``-`` and said
    "wrote -". An empty path (``--out "$OUT"`` with OUT unset) made ``model fit`` take
    it for no --out: it fitted, wrote nothing and exited 0."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "-":
            self.fail("'-' is not a file here: give a path", param, ctx)
        return super().convert(value, param, ctx)


OUT_FILE = _OutFile(dir_okay=False, readable=False)


def print_json(value: Any) -> None:
    """--json's output: one JSON object on stdout, for scripts (stderr keeps the messages
    for people); strict JSON, so a NaN is the caller's to turn into null first."""
    click.echo(json.dumps(value, indent=2, allow_nan=False))


class CannotWrite(ValueError):
    """An output file that cannot be written: ``--json``'s error code ``io_error``, as an
    input that cannot be read is, whether found before the work (``check_writable``) or
    while writing (``writing``)."""


def check_writable(path: str | os.PathLike[str]) -> None:
    """Raise CannotWrite naming ``path`` and the reason when it cannot be written. A
    regular file is replaced by one made beside it (atomicfile), so one is made there
    and removed: root passes access(2) on /sys, and a fit of minutes was done before
    its write failed."""
    where = Path(path)
    folder = where.parent
    try:  # is_dir() and exists() raise PermissionError under a directory we may not enter
        if where.is_dir():
            reason = "is a directory"
        elif not folder.is_dir():
            reason = f"no directory {folder}" if not folder.exists() else f"{folder} is not a directory"
        elif not os.access(folder, os.W_OK | os.X_OK) or (where.exists() and not os.access(where, os.W_OK)):
            reason = "permission denied"
        else:
            real = Path(os.path.realpath(where))
            if not real.exists() or real.is_file():  # a device or a FIFO is written as open(2) would
                fd, probe = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".probe")
                os.close(fd)
                os.unlink(probe)
            return
    except OSError as exc:
        reason = _reason(exc)
    raise CannotWrite(f"{path}: cannot write: {reason}")


def check_figure(path: str | os.PathLike[str]) -> None:
    """``check_writable``, and a suffix naming a format matplotlib writes."""
    from parlschedd.plots import figure_format  # matplotlib is slow to import; only here

    check_writable(path)
    figure_format(path)


def figure_suffix(ctx: click.Context, param: click.Parameter, path: str | None) -> str | None:
    """A figure option's click callback: a path whose suffix names no format written
    here (an unknown one, or one whose program is missing) is a usage error, before
    any work, as every command that draws says it. No suffix is a PNG."""
    from parlschedd.plots import figure_format  # matplotlib is slow to import; only here

    if path is not None:
        try:
            figure_format(path)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
    return path


@contextlib.contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[None]:
    """An OSError in the block, which writes ``path``, as CannotWrite saying so as
    ``check_writable`` does: ``PATH: cannot write: File too large``. What fails only when
    written (a full disk, /dev/full, ``ulimit -f``) came out as "cannot write: ..."
    without the file's name."""
    try:
        yield
    except OSError as exc:
        raise CannotWrite(f"{path}: cannot write: {_reason(exc)}") from exc


def _reason(exc: OSError) -> str:
    """Why a write failed, in check_writable's words where it has them: root passes its
    access check on /sys, whose write then fails "Permission denied" (EACCES, EPERM)."""
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or str(exc)
