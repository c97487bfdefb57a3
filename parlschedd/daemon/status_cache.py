"""The replies to ``status``, encoded at most once per period per view and kept.

What a reply shows is built by the daemon (``Daemon.status``, handed in as ``build``);
this module keeps its bytes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from parlschedd.daemon import protocol

MAX_STATUS_VIEWS = 256  # cached status replies kept in one period (see StatusViews)

Build = Callable[[int, int | None], dict]  # (uid, pid filter) -> the status reply, as JSON


class StatusViews:
    """The encoded replies to ``status`` (their lines, ``protocol.lines``), built at
    most once per period per view.

    status is read far more often than what it shows changes: 50 clients polling a
    daemon that manages 1024 threads ask for the same ~100 KB description about 500
    times a second, while it changes once a period (T_CPU). Building and encoding
    it for every request held the period loop back by hundreds of ms (issue 7).
    So the bytes are kept per view, (uid, pid filter): a non-root uid has views of
    its own and never gets root's, whose targets it may not see. The views are
    dropped at every tick (``new_period``) and (``clear``) whenever what status shows changes between
    ticks: reload, and what the engine reports through the daemon's ``_mark_dirty``:
    a target attached (by hand or by a rule), a thread adopted or dropped, a target
    detached. Views asked for in a period are built again right after the next tick
    (``new_period``); no others are kept, and at most MAX_STATUS_VIEWS. Refusals (an
    unknown pid) are not kept.

    ``daemon.uptime_s`` and ``daemon.loop`` are those of the moment the view was
    built; ``daemon.snapshot_age_ms`` says how long ago that was.
    """

    def __init__(self) -> None:
        self._views: dict[tuple[int, int | None], tuple[float, protocol.Framed]] = {}
        self._asked: set[tuple[int, int | None]] = set()  # views asked this period

    def reply(self, uid: int, pid: int | None, build: Build) -> Iterator[bytes]:
        """The encoded reply to ``status`` from ``uid``, of target ``pid`` or all."""
        built, framed = self._view(uid, pid, build)
        if len(self._asked) < MAX_STATUS_VIEWS:
            self._asked.add((uid, pid))
        return framed.lines(b',"snapshot_age_ms":%.3f' % ((time.monotonic() - built) * 1e3))

    def _view(self, uid: int, pid: int | None, build: Build) -> tuple[float, protocol.Framed]:
        """(built at, the reply around its snapshot_age_ms, ready to send) of a view."""
        cached = self._views.get((uid, pid))
        if cached is None:
            status = build(uid, pid)
            if len(self._views) >= MAX_STATUS_VIEWS:
                self._views.clear()
            # '{"ok":true,"daemon":{...' + age + '},"targets":[...]}\n', encoded once
            head = b'{"ok":true,"daemon":' + protocol.encode(status["daemon"])[:-2]
            tail = b"}," + protocol.encode({"targets": status["targets"]})[1:]
            cached = self._views[(uid, pid)] = (time.monotonic(), protocol.Framed.of(head, tail))
        return cached

    def clear(self) -> None:
        """What status shows changed: every view is built again when next asked for."""
        self._views.clear()

    def new_period(self, build: Build, past_deadline: Callable[[], bool]) -> None:
        """After a tick: drop every view, and build again at once those asked for in
        the period that ended (their clients poll, so they will ask again). Built
        lazily, a view first asked late in a period (clients that poll every T_CPU
        ask just before the next tick) would hold that tick back by the whole build,
        tens of ms for 1024 threads; built now, it is done before anyone waits. It
        stops when ``past_deadline()``: the next tick is due."""
        asked, self._asked = self._asked, set()
        self._views.clear()
        for uid, pid in asked:
            if past_deadline():
                return
            try:
                self._view(uid, pid, build)
            except Exception:  # the pid is gone, or a bug: the daemon answers and logs it when asked
                pass
