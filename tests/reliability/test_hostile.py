"""Hostile input on the live socket of a real daemon (issue 7, part 1).

Every test runs a real parlschedd (tests/conftest.py) managing a real process, throws
something hostile at its socket, then checks that the daemon is up, answers with
structured errors, still manages (pins) its target, and that its fd count and RSS are
back within a margin of their values before. tests/daemon/test_daemon.py already covers
single malformed lines, one oversized line and vanishing clients; this goes further.
"""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from parlschedctl import client
from tests.conftest import needs_root, threads_of, wait_for
from tests.reliability.helpers import fd_count, raw_exchange, rss_mib, sleepy, structured_error, timed_ping

pytestmark = needs_root
FD_MARGIN = 4
RSS_MARGIN_MIB = 24


@pytest.fixture
def managed(daemon):
    """The daemon managing a 4-thread sleeper; yields (daemon, target, fds0, rss0)."""
    target = sleepy(4)
    daemon.request("attach", pid=target.pid)
    wait_for(lambda: all(t["pinned"] for t in threads_of(daemon, target.pid).values()))
    time.sleep(0.2)
    fds0, rss0 = fd_count(daemon.proc.pid), rss_mib(daemon.proc.pid)
    yield daemon, target, fds0, rss0
    target.kill()
    target.wait()


def assert_healthy(d, target, fds0: int, rss0: float) -> None:
    assert d.proc.poll() is None, "daemon died"
    assert timed_ping(d) < 1.0
    periods = d.request("status")["daemon"]["loop"]["periods"]
    threads = threads_of(d, target.pid)
    assert len(threads) == 4 and all(t["pinned"] for t in threads.values()), "still manages its target"
    wait_for(lambda: d.request("status")["daemon"]["loop"]["periods"] > periods + 2, timeout=3)
    wait_for(lambda: fd_count(d.proc.pid) <= fds0 + FD_MARGIN, timeout=3)
    assert rss_mib(d.proc.pid) <= rss0 + RSS_MARGIN_MIB


HOSTILE = {
    # truncated lines: a request cut mid-object, then a newline / then EOF without newline
    "truncated_with_newline": (b'{"cmd": "sta\n', 1),
    "truncated_mid_escape": (b'{"cmd": "ping\\u00\n', 1),
    # invalid UTF-8: overlong '/', lone surrogate, lone continuation byte, inside a string
    "overlong_utf8": (b'{"cmd": "\xc0\xafping"}\n', 1),
    "surrogate_utf8": (b'{"cmd": "\xed\xa0\x80"}\n', 1),
    "continuation_byte": (b'\x80{"cmd":"ping"}\n', 1),
    "nul_bytes": (b'{"cmd":"ping"\x00}\n', 1),
    # deep JSON inside the 64 KiB limit, both as the request and as a field value
    "deep_array": (b"[" * 30000 + b"]" * 30000 + b"\n", 1),
    "deep_field": (b'{"cmd":"status","pid":' + b"[" * 20000 + b"]" * 20000 + b"}\n", 1),
    "deep_objects": (b'{"a":' * 10000 + b"1" + b"}" * 10000 + b"\n", 1),
    # wrong types and ranges
    "pid_float": (b'{"cmd":"detach","pid":1.0}\n', 1),
    "pid_huge": (b'{"cmd":"detach","pid":' + b"9" * 5000 + b"}\n", 1),
    "pid_negative": (b'{"cmd":"detach","pid":-1}\n', 1),
    "pid_nan": (b'{"cmd":"detach","pid":NaN}\n', 1),
    "pid_infinity": (b'{"cmd":"status","pid":-Infinity}\n', 1),
    "pid_list": (b'{"cmd":"detach","pid":[1]}\n', 1),
    "observe_string": (b'{"cmd":"attach","pid":1,"observe":"yes"}\n', 1),
    "threads_int": (b'{"cmd":"attach","pid":1,"threads":5}\n', 1),
    "cmd_object": (b'{"cmd":{"cmd":"ping"}}\n', 1),
    # unknown commands
    "cmd_empty": (b'{"cmd":""}\n', 1),
    "cmd_case": (b'{"cmd":"PING"}\n', 1),
    "cmd_dunder": (b'{"cmd":"__class__"}\n', 1),
    "cmd_nul": (b'{"cmd":"ping\\u0000"}\n', 1),
    "cmd_shell": (b'{"cmd":"status; rm -rf /"}\n', 1),
    # not objects
    "scalar": (b"12\n", 1),
    "string": (b'"ping"\n', 1),
    "empty_line": (b"\n", 1),
}


def test_hostile_lines_get_structured_errors(managed):
    """Each payload of HOSTILE on its own connection (one daemon for all, to keep the
    suite short); the daemon's health is checked after each."""
    d, target, fds0, rss0 = managed
    for name, (payload, n) in HOSTILE.items():
        replies = raw_exchange(d.socket, payload)
        assert len(replies) == n and all(structured_error(r) for r in replies), (name, replies)
        assert_healthy(d, target, fds0, rss0)


def test_a_threads_pattern_that_is_not_text_is_a_bad_request(managed):
    """A lone surrogate is valid JSON but no text: refused as bad_request, not an
    internal error with a traceback in the log."""
    d, target, fds0, rss0 = managed
    (reply,) = raw_exchange(d.socket, b'{"cmd":"attach","pid":%d,"threads":"\\ud800"}\n' % os.getpid())
    assert structured_error(reply) and "lone surrogate" in reply["error"]["message"]
    assert_healthy(d, target, fds0, rss0)


def test_a_last_line_without_its_newline_is_answered(managed):
    """EOF ends the last line: a request sent without a newline before the shutdown
    (printf '{"cmd":"ping"}' | socat ...) is answered, a truncated one refused (both
    went unanswered before)."""
    d, target, fds0, rss0 = managed
    (refused,) = raw_exchange(d.socket, b'{"cmd": "status", "pi')
    assert structured_error(refused) and refused["error"]["code"] == "bad_request"
    (pong,) = raw_exchange(d.socket, b'{"cmd": "ping"}\n{"cmd": "ping"}')[1:]
    assert pong["ok"]
    # the same request split across many tiny sends is reassembled
    replies = raw_exchange(d.socket, b'{"cmd": "status", "pid": %d}\n' % target.pid, chunks=30)
    assert replies[0]["ok"] and replies[0]["targets"][0]["pid"] == target.pid
    assert_healthy(d, target, fds0, rss0)


def test_huge_lines_are_refused_and_memory_stays_bounded(managed):
    d, target, fds0, rss0 = managed
    # 16 MiB without a newline, then a newline and a ping, several times
    blob = b"A" * (16 * 2**20)
    replies = raw_exchange(d.socket, blob + b'\n{"cmd":"ping"}\n' + blob + b"\n", timeout=30)
    assert len(replies) == 3
    assert structured_error(replies[0]) and "longer" in replies[0]["error"]["message"]
    assert replies[1]["ok"] and structured_error(replies[2])
    # a line just over the limit made of valid JSON
    big = json.dumps({"cmd": "ping", "pad": "x" * (64 * 1024)}).encode() + b"\n"
    (reply,) = raw_exchange(d.socket, big)
    assert structured_error(reply) and "longer" in reply["error"]["message"]
    assert_healthy(d, target, fds0, rss0)


def test_pipelined_garbage_and_pings_are_answered_in_order(managed):
    d, target, fds0, rss0 = managed
    lines = [b'{"cmd":"ping"}', b"\xff", b"[", b'{"cmd":"nope"}', b'{"cmd":"ping"}\r'] * 200
    replies = raw_exchange(d.socket, b"\n".join(lines) + b"\n")
    assert len(replies) == len(lines)
    assert [r["ok"] for r in replies[:5]] == [True, False, False, False, True]
    assert_healthy(d, target, fds0, rss0)


def test_bad_threads_regex_and_bad_targets_are_refused(managed):
    d, target, fds0, rss0 = managed
    other = sleepy(1)
    try:
        for regex in ["(", "[a-", "(?P<x>a)(?P<x>b)", "a{2,1}"]:
            with pytest.raises(client.Refused) as e:
                d.request("attach", pid=other.pid, threads=regex)
            assert e.value.code == "bad_request" and "regex" in str(e.value)
        for pid, code in [(2**31 - 1, "no_such_process"), (target.pid, "already_attached")]:
            with pytest.raises(client.Refused) as e:
                d.request("attach", pid=pid)
            assert e.value.code == code
        assert other.pid not in {t["pid"] for t in d.request("status")["targets"]}
    finally:
        other.kill()
        other.wait()
    assert_healthy(d, target, fds0, rss0)


def connect_many(path: str, n: int) -> list[socket.socket]:
    """``n`` connections to the daemon that never send anything."""
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        socks.append(s)
    return socks


def test_200_silent_connections(managed):
    d, target, fds0, rss0 = managed
    silent = connect_many(d.socket, 200)
    try:
        wait_for(lambda: fd_count(d.proc.pid) >= fds0 + 200, timeout=5)
        assert timed_ping(d) < 0.5, "a normal client is still answered promptly"
        p0 = d.request("status")["daemon"]["loop"]["periods"]
        # the period loop goes on: 5 ticks of 0.05 s within 1.5 s (a fixed 0.5 s counted on all 5)
        wait_for(lambda: d.request("status")["daemon"]["loop"]["periods"] >= p0 + 5, timeout=1.5)
        assert all(t["pinned"] for t in threads_of(d, target.pid).values())
    finally:
        for s in silent:
            s.close()
    assert_healthy(d, target, fds0, rss0)


def test_beyond_256_connections_the_idlest_make_room(managed):
    """The server caps clients at 256: a new connection beyond that closes the one idle
    longest, so fds stay bounded and the newest peer is always served."""
    d, target, fds0, rss0 = managed
    idle = connect_many(d.socket, 300)
    try:
        time.sleep(0.3)
        assert fd_count(d.proc.pid) <= fds0 + 256 + FD_MARGIN, "the cap bounds the fds"
        assert d.request("ping", timeout=2)["version"]
        assert all(t["pinned"] for t in threads_of(d, target.pid).values())
    finally:
        for s in idle:
            s.close()
    wait_for(lambda: d.request("ping"), timeout=3)
    assert_healthy(d, target, fds0, rss0)


def test_clients_vanishing_mid_reply_with_large_replies(managed):
    d, target, fds0, rss0 = managed
    big = sleepy(300)  # a status reply of ~30 KB
    try:
        d.request("attach", pid=big.pid, timeout=30)
        for i in range(40):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.socket)
            s.sendall(b'{"cmd":"status"}\n' * 20)
            if i % 2:
                s.recv(1000)  # read the start of a reply, then vanish
            s.close()
        # the new target's pidfd, task dir and exit watch (epoll); per thread its counter,
        # the pinner's pidfd and the exit watch's pidfd
        assert_healthy(d, target, fds0 + 3 + 3 * 300, rss0 + 20)
        d.request("detach", pid=big.pid)
    finally:
        big.kill()
        big.wait()
    assert_healthy(d, target, fds0, rss0)


def test_client_that_sends_but_never_reads_is_dropped(managed):
    d, target, fds0, rss0 = managed
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(d.socket)
    s.settimeout(0.5)
    line = b'{"cmd":"status"}\n' * 1000
    sent, dropped = 0, False
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            try:
                s.sendall(line)
                sent += len(line)
            except socket.timeout:
                if d.proc.poll() is not None:
                    break
                continue  # the daemon is not reading us right now; check it still serves others
            except (BrokenPipeError, ConnectionResetError):
                dropped = True
                break
            assert timed_ping(d, timeout=5) < 2.0
    finally:
        s.close()
    assert dropped, f"the daemon kept a client with unread replies after {sent} bytes of requests"
    assert_healthy(d, target, fds0, rss0)


def test_a_burst_of_pipelined_requests_does_not_stall_the_loop(managed):
    d, target, fds0, rss0 = managed
    big = sleepy(256)
    try:
        d.request("attach", pid=big.pid, timeout=30)
        time.sleep(0.3)
        rss1 = rss_mib(d.proc.pid)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(d.socket)
        burst = b'{"cmd":"status"}\n' * (65536 // 17)
        s.sendall(burst)  # fits in the socket buffer: one recv() on the daemon side
        time.sleep(0.05)
        worst = max(timed_ping(d, timeout=60) for _ in range(5))
        peak = rss_mib(d.proc.pid)
        s.close()
        assert worst < 0.5, f"another client waited {worst:.2f} s"
        assert peak < rss1 + 50, f"RSS grew {peak - rss1:.0f} MiB"
    finally:
        big.kill()
        big.wait()
