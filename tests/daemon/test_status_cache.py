"""parlschedd/daemon/status_cache.py: ``status`` replies built and encoded at most once
a period per view, (uid, pid filter), and kept.

StatusViews bare, with a real builder: a callable that counts its calls and says in
the reply which call made it, so a reply shows whether it was built again. Replies are
read back as a client reads them (one line, or parts joined), each line checked to fit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

import pytest

from parlschedd.daemon.protocol import MAX_LINE, ProtocolError
from parlschedd.daemon.status_cache import MAX_STATUS_VIEWS, StatusViews


class Builder:
    """``Daemon.status`` as StatusViews is handed it: the reply of a view as JSON.
    Each call is counted and numbered (``daemon.build``); ``threads`` threads a
    target; a pid in ``gone`` is refused, as the daemon refuses an unknown pid."""

    def __init__(self, threads: int = 2) -> None:
        self.calls: list[tuple[int, int | None]] = []
        self.threads = threads
        self.gone: set[int] = set()

    def __call__(self, uid: int, pid: int | None) -> dict:
        if pid in self.gone:
            raise ProtocolError("not_attached", f"process {pid} is not attached")
        self.calls.append((uid, pid))
        return self.shown(uid, pid, len(self.calls))

    def shown(self, uid: int, pid: int | None, build: int) -> dict:
        """What the ``build``-th call made for (uid, pid), without calling."""
        threads = [{"tid": pid or 0, "name": f"worker{i}", "cpu": i % 2} for i in range(self.threads)]
        return {"daemon": {"pid": 1, "build": build, "uptime_s": 1.5},
                "targets": [{"pid": pid, "uid": uid, "threads": threads}]}


def read(lines: Iterable[bytes]) -> dict:
    """The reply as the client reads it: a line, or the texts of its parts joined."""
    lines = list(lines)
    assert all(len(line) <= MAX_LINE and line.endswith(b"\n") for line in lines)
    first = json.loads(lines[0])
    if "part" not in first:
        assert len(lines) == 1
        return first
    parts = [json.loads(line) for line in lines]
    assert [p["more"] for p in parts] == [True] * (len(parts) - 1) + [False]
    return json.loads("".join(p["part"] for p in parts))


def age_and_rest(reply: dict) -> tuple[float, dict]:
    daemon = dict(reply["daemon"])
    return daemon.pop("snapshot_age_ms"), {**reply, "daemon": daemon}


def never() -> bool:
    return False


def test_a_view_asked_again_in_a_period_is_built_once() -> None:
    views, build = StatusViews(), Builder()
    first = read(views.reply(0, None, build))
    time.sleep(0.002)
    second = read(views.reply(0, None, build))
    assert build.calls == [(0, None)]
    age1, rest1 = age_and_rest(first)
    age2, rest2 = age_and_rest(second)
    assert rest1 == rest2 == {"ok": True, **build.shown(0, None, 1)}
    assert age2 >= age1 + 2 >= 2, "the age of the one snapshot, at each request"


def test_each_view_is_its_own() -> None:
    """A non-root uid never gets root's view (nor a pid filter the whole one): each
    (uid, pid) is built from its own call, and each kept."""
    views, build = StatusViews(), Builder()
    asked = [(0, None), (1000, None), (0, 42), (1000, 42)]
    for uid, pid in asked:
        target = read(views.reply(uid, pid, build))["targets"][0]
        assert (target["uid"], target["pid"]) == (uid, pid)
    for uid, pid in reversed(asked):
        target = read(views.reply(uid, pid, build))["targets"][0]
        assert (target["uid"], target["pid"]) == (uid, pid)
    assert build.calls == asked


def test_a_new_period_builds_at_once_the_views_asked_in_the_last_and_only_those() -> None:
    views, build = StatusViews(), Builder()
    read(views.reply(0, None, build))
    read(views.reply(0, 42, build))
    views.new_period(build, never)
    assert sorted(build.calls[2:], key=str) == [(0, 42), (0, None)], "built again at the tick, before anyone asks"
    assert read(views.reply(0, None, build))["daemon"]["build"] in (3, 4)
    assert len(build.calls) == 4, "the next period's requests are served from those"
    views.new_period(build, never)  # (0, 42) was not asked in that period
    assert build.calls[4:] == [(0, None)]
    views.new_period(build, never)  # nothing asked in that period
    assert len(build.calls) == 5
    assert read(views.reply(0, 42, build))["daemon"]["build"] == 6, "built when asked"


def test_a_new_period_past_its_deadline_stops_building() -> None:
    """The next tick is due: what is left is built when asked, not at the tick."""
    views, build = StatusViews(), Builder()
    for pid in (1, 2, 3):
        read(views.reply(0, pid, build))
    views.new_period(build, lambda: len(build.calls) >= 4)
    assert len(build.calls) == 4
    for pid in (1, 2, 3):
        read(views.reply(0, pid, build))
    assert len(build.calls) == 6 and sorted(build.calls[3:]) == [(0, 1), (0, 2), (0, 3)]


def test_clear_builds_every_view_again_when_asked() -> None:
    """What status shows changed between ticks (an attach): the next request shows it."""
    views, build = StatusViews(), Builder(threads=1)
    read(views.reply(0, None, build))
    read(views.reply(7, None, build))
    build.threads = 3
    views.clear()
    assert len(build.calls) == 2, "cleared, not built"
    assert len(read(views.reply(0, None, build))["targets"][0]["threads"]) == 3
    assert len(read(views.reply(7, None, build))["targets"][0]["threads"]) == 3
    assert len(build.calls) == 4


def test_a_refusal_is_not_kept() -> None:
    """A pid not attached is refused at each request (it may be attached by the next),
    and a view whose pid went is skipped at the tick, refused when asked."""
    views, build = StatusViews(), Builder()
    build.gone.add(9)
    for _ in range(2):
        with pytest.raises(ProtocolError):
            views.reply(0, 9, build)
    build.gone.clear()
    assert read(views.reply(0, 9, build))["targets"][0]["pid"] == 9
    build.gone.add(9)
    views.new_period(build, never)  # it went in the period: no raise at the tick
    with pytest.raises(ProtocolError):
        views.reply(0, 9, build)


def test_at_most_max_status_views_are_kept_and_built_at_the_tick() -> None:
    views, build = StatusViews(), Builder(threads=0)
    for pid in range(MAX_STATUS_VIEWS + 1):
        read(views.reply(0, pid, build))
    assert len(build.calls) == MAX_STATUS_VIEWS + 1
    for pid in range(MAX_STATUS_VIEWS + 1):
        read(views.reply(0, pid, build))
    assert len(build.calls) > MAX_STATUS_VIEWS + 1, "not every view was kept"
    before = len(build.calls)
    views.new_period(build, never)
    assert len(build.calls) - before == MAX_STATUS_VIEWS


def test_a_reply_longer_than_a_line_comes_in_parts_of_the_one_build() -> None:
    views, build = StatusViews(), Builder(threads=4000)
    lines = list(views.reply(0, None, build))
    assert len(lines) > 2
    age, rest = age_and_rest(read(lines))
    assert rest == {"ok": True, **build.shown(0, None, 1)} and age >= 0
    assert age_and_rest(read(views.reply(0, None, build)))[1] == rest
    assert len(build.calls) == 1
