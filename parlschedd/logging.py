"""structlog set-up: console lines for people, JSON lines for journald and scripts."""

from __future__ import annotations

import errno
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO

import structlog

LEVELS = ("debug", "info", "warning", "error")


# syslog(3) priorities of the levels, for journald's "<N>" line prefix (sd-daemon(3)).
_PRIORITIES = {"debug": 7, "info": 6, "warning": 4, "error": 3, "critical": 2}


def configure(fmt: str = "console", level: str = "info") -> None:
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    if _to_journal(sys.stderr):
        renderer = _prefixed_with_priority(renderer)
    processors = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        renderer,
    ]

    def render(method: str, event: str, **fields: Any) -> str:
        """A line as a logger would write it, for the sink's own notices."""
        line: Any = {"event": event, **fields}
        for processor in processors:
            line = processor(None, method, line)
        return line

    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=_SinkFactory(sys.stderr, render),
        cache_logger_on_first_use=False,
    )


def _to_journal(stream: TextIO) -> bool:
    """Whether ``stream`` is connected to journald: systemd names the stream it gave a
    service in JOURNAL_STREAM (device:inode), and a child's redirected stderr is not it."""
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError):  # no descriptor (a test's capture), or closed
        return False
    return os.environ.get("JOURNAL_STREAM") == f"{st.st_dev}:{st.st_ino}"


def _prefixed_with_priority(renderer: Callable[..., str]) -> Callable[..., str]:
    """``renderer`` whose lines start with their level's syslog priority, "<3>" for an
    error: journald takes the prefix off and files the line at that priority. Without
    it every line of the unit was "info", so `journalctl -p err -u parlschedd` showed
    none of the daemon's errors, nor `systemctl status` them in red. Every line of a
    record that spans several (a console traceback) has it: journald files each line
    on its own."""

    def render(logger: Any, method: str, event_dict: dict) -> str:
        prefix = f"<{_PRIORITIES.get(event_dict.get('level', ''), 6)}>"
        return prefix + renderer(logger, method, event_dict).replace("\n", "\n" + prefix)

    return render


# Write errors that pass: a full disk or quota (freed again), a file at its size limit
# (rotated), a non-blocking pipe whose reader is behind.
_PASSING = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EAGAIN})


class _Sink(structlog.PrintLogger):
    """A PrintLogger whose failed write costs the log, never the daemon: a log line
    raised out of whatever request or shutdown step logged it. A write that fails for
    good (the stream's reader gone: EPIPE; a terminal gone: EIO; the stream closed)
    points the stream's descriptor at /dev/null, so the later lines, Python's own
    writes to stderr and its flush at exit all succeed unseen. A write that fails for
    now (a full disk: ENOSPC) loses its line only: the next line that finds room is
    preceded by a warning of how many were lost, itself on a line of its own (the
    failed write may have left part of a line; when it did not, the warning follows
    a blank line)."""

    def __init__(self, file: TextIO, render: Callable[..., str]) -> None:
        super().__init__(file)
        self._guard = threading.Lock()  # the loop and the metrics threads log: one line and its count at a time
        self._render = render
        self._broken = False  # given up for good
        self._lost = 0  # lines not written since the last that was
        self._why = ""

    def msg(self, message: str) -> None:
        with self._guard:
            self._msg(message)

    def _msg(self, message: str) -> None:
        if self._broken:
            return
        if self._lost:
            notice = self._render("warning", "log lines lost while the log could not be written", lines=self._lost,
                                  error=self._why)
            if not self._write("\n" + notice):
                return  # still no room: this line is lost too
            self._lost = 0
        self._write(message)

    def _write(self, message: str) -> bool:
        try:
            super().msg(message)
        except OSError as exc:
            if exc.errno not in _PASSING:
                self._give_up()
                return False
            self._lost += 1
            self._why = exc.strerror or str(exc)
            return False
        except ValueError:  # the stream was closed
            self._give_up()
            return False
        return True

    def _give_up(self) -> None:
        self._broken = True
        _to_devnull(self._file)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


class _SinkFactory:
    """Gives every logger the one _Sink of its stream, so that it is given up once."""

    def __init__(self, file: TextIO, render: Callable[..., str]) -> None:
        self._sink = _Sink(file, render)

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
