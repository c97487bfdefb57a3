"""Files the CLI writes (--out): checked before the work that fills them, so that a
long fit or a daemon's history is not computed for a path that cannot be written."""

from __future__ import annotations

import os
from pathlib import Path

import click

# An --out option: what may be written is checked by check_writable, which names the
# file (exit 1). click's own check (readable=True, its default) refused an existing file
# that can be written but not read as a usage error (exit 2), and said nothing of a
# file that cannot be written. A directory is still click's usage error.
OUTPUT = click.Path(dir_okay=False, readable=False)


def check_writable(path: str | os.PathLike[str]) -> None:
    """Raise ValueError naming ``path`` and the reason when it cannot be written."""
    where = Path(path)
    folder = where.parent
    if where.is_dir():
        reason = "is a directory"
    elif not folder.is_dir():
        reason = f"no directory {folder}" if not folder.exists() else f"{folder} is not a directory"
    elif not os.access(folder, os.W_OK | os.X_OK) or (where.exists() and not os.access(where, os.W_OK)):
        reason = "permission denied"
    else:
        return
    raise ValueError(f"{path}: cannot write: {reason}")


def check_figure(path: str | os.PathLike[str]) -> None:
    """``check_writable``, and a suffix naming a format matplotlib writes."""
    from parlschedd.plots import figure_format  # matplotlib is slow to import; only here

    check_writable(path)
    figure_format(path)
