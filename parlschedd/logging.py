"""structlog set-up: console lines for people, JSON lines for journald and scripts."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, TextIO

import structlog

LEVELS = ("debug", "info", "warning", "error")


def configure(fmt: str = "console", level: str = "info") -> None:
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=_SinkFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )


class _Sink(structlog.PrintLogger):
    """A PrintLogger whose failed write costs the log, never the daemon: with its
    stderr a pipe to a ``tee`` that ended (EPIPE), a terminal gone (EIO) or a full
    disk (ENOSPC), a log line raised out of whatever request or shutdown step logged
    it. The first failure points the stream's descriptor at /dev/null, so the later
    lines, Python's own writes to stderr and its flush at exit all succeed unseen."""

    def __init__(self, file: TextIO) -> None:
        super().__init__(file)
        self._broken = False  # given up once

    def msg(self, message: str) -> None:
        if self._broken:
            return
        try:
            super().msg(message)
        except (OSError, ValueError):  # ValueError: the stream was closed
            self._broken = True
            _to_devnull(self._file)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


class _SinkFactory:
    """Gives every logger the one _Sink of its stream, so that it is given up once."""

    def __init__(self, file: TextIO) -> None:
        self._sink = _Sink(file)

    def __call__(self, *args: Any) -> _Sink:
        return self._sink


def _to_devnull(stream: TextIO) -> None:
    """Point ``stream``'s descriptor at /dev/null, dropping what its buffer still holds
    there rather than failing again on the next flush (at exit, Python would turn
    that into exit status 120)."""
    try:
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError):  # no descriptor (a test's capture): the flag alone stops the writes
        return
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)
