"""sd_notify(3) (parlschedd/daemon/notify.py): the datagrams systemd would get, read
from a real datagram socket named by NOTIFY_SOCKET, a path or an abstract '@' name,
and the watchdog interval systemd's environment asks for.

notify.py sends through systemd-python when it is installed (the dev venv has it),
else writes the datagram itself. Both are checked: the module's own writer by
setting its ``_sd`` to None (the only stand-in here: the machine has the library,
so its absence is what must be made), and in a real daemon by a sitecustomize that
makes ``systemd`` unimportable."""

from __future__ import annotations

import os
import signal
import socket
import time
import uuid
from collections.abc import Iterator

import pytest

from parlschedd.daemon import notify
from tests.conftest import needs_root, start_daemon

WRITERS = ["own writer", "systemd-python"]


@pytest.fixture(params=WRITERS)
def writer(request, monkeypatch) -> str:
    """Which of notify.py's two ways sends: its own datagram writer, or systemd-python."""
    if request.param == "own writer":
        monkeypatch.setattr(notify, "_sd", None)
    elif notify._sd is None:
        pytest.skip("systemd-python is not installed")
    return request.param


def listening(address: str) -> socket.socket:
    """A datagram socket bound at ``address``, as NOTIFY_SOCKET names it ('@': abstract)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + address[1:] if address.startswith("@") else address)
    sock.settimeout(10)
    return sock


@pytest.fixture(params=["path", "abstract"])
def notify_socket(request, tmp_path, monkeypatch) -> Iterator[socket.socket]:
    """A socket NOTIFY_SOCKET names: a file in tmp_path, or an abstract '@' name."""
    address = str(tmp_path / "notify.sock") if request.param == "path" else f"@parlsched-test-{uuid.uuid4().hex}"
    sock = listening(address)
    monkeypatch.setenv("NOTIFY_SOCKET", address)
    yield sock
    sock.close()


def test_notify_sends_the_message_as_one_datagram(writer, notify_socket):
    """The message arrives whole, as one datagram, at a path and at an abstract name
    (whose '@' stands for the leading NUL byte of the address)."""
    assert notify.notify("READY=1\nSTATUS=managing 0 threads")
    assert notify_socket.recv(4096) == b"READY=1\nSTATUS=managing 0 threads"
    assert notify.notify("STOPPING=1")
    assert notify_socket.recv(4096) == b"STOPPING=1"


def test_notify_without_notify_socket_sends_nothing(writer, monkeypatch):
    """Not under systemd (NOTIFY_SOCKET unset): False, and no error."""
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify.notify("READY=1") is False


@pytest.mark.parametrize("usec, pid, expected", [
    ("3000000", None, 1.5),        # half the timeout, in seconds
    ("3000000", "self", 1.5),      # the watchdog is this process's
    ("3000000", "other", None),    # another process's (a child inherited the environment)
    (None, None, None),            # no watchdog asked for
    (None, "self", None),
])
def test_watchdog_interval_is_half_the_timeout_asked_for_this_process(monkeypatch, usec, pid, expected):
    for name, value in (("WATCHDOG_USEC", usec), ("WATCHDOG_PID", pid)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, {"self": str(os.getpid()), "other": str(os.getppid())}.get(value, value))
    assert notify.watchdog_interval() == expected


def datagrams(sock: socket.socket, until: bytes, timeout: float = 10.0) -> list[bytes]:
    """The datagrams received up to and including the first that starts with ``until``,
    which must come within ``timeout`` seconds (WATCHDOG=1 keeps coming meanwhile)."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while not got or not got[-1].startswith(until):
        assert time.monotonic() < deadline, f"no {until!r} in {timeout} s, got {got[-5:]}"
        got.append(sock.recv(4096))
    return got


NO_SYSTEMD_PYTHON = """import os, sys
sys.modules['systemd'] = None  # import systemd fails: notify.py writes itself
open(os.environ['PARLSCHED_TEST_MARK'], 'a').close()  # the test knows this ran in the daemon
"""


@needs_root
@pytest.mark.parametrize("daemon_writer", WRITERS)
def test_a_daemon_tells_systemd_it_is_ready_alive_reloading_and_stopping(tmp_path, monkeypatch, daemon_writer):
    """A real daemon with NOTIFY_SOCKET and WATCHDOG_USEC set, as systemd starts
    systemd/parlschedd.service (Type=notify, WatchdogSec): READY=1 with its MAINPID
    once it serves, WATCHDOG=1 every half timeout (0.1 s here), RELOADING=1 then
    READY=1 at a SIGHUP, and STOPPING=1 at a SIGTERM; through systemd-python and
    through notify.py's own writer."""
    mark = tmp_path / "systemd-python-blocked"
    if daemon_writer == "own writer":
        inject = tmp_path / "inject"
        inject.mkdir()
        (inject / "sitecustomize.py").write_text(NO_SYSTEMD_PYTHON)
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(inject), os.environ.get("PYTHONPATH", "")]))
        monkeypatch.setenv("PARLSCHED_TEST_MARK", str(mark))
    elif notify._sd is None:  # the daemon runs in this interpreter's environment
        pytest.skip("systemd-python is not installed")
    address = str(tmp_path / "notify.sock")
    with listening(address) as sock:
        monkeypatch.setenv("NOTIFY_SOCKET", address)
        monkeypatch.setenv("WATCHDOG_USEC", "200000")
        monkeypatch.delenv("WATCHDOG_PID", raising=False)
        d = start_daemon(tmp_path)
        try:
            ready = datagrams(sock, b"READY=1")
            assert len(ready) == 1 and f"MAINPID={d.proc.pid}".encode() in ready[0].split(b"\n")
            alive = [sock.recv(4096) for _ in range(3)]
            assert all(m.startswith(b"WATCHDOG=1\nSTATUS=managing 0 threads") for m in alive), alive
            d.proc.send_signal(signal.SIGHUP)
            reload = [m for m in datagrams(sock, b"READY=1") if not m.startswith(b"WATCHDOG=1")]
            assert [m.split(b"\n")[0] for m in reload] == [b"RELOADING=1", b"READY=1"]
            assert d.stop() == 0
            stop = [m for m in datagrams(sock, b"STOPPING=1") if not m.startswith(b"WATCHDOG=1")]
            assert stop == [b"STOPPING=1"]
            assert mark.exists() == (daemon_writer == "own writer"), "the daemon sent through the writer named"
        finally:
            if d.proc.poll() is None:
                d.stop()


@needs_root
def test_the_watchdog_is_told_in_time_whatever_the_period(tmp_path, monkeypatch):
    """A period longer than the watchdog's half timeout (period_s 3 s, pings due every
    0.1 s): the pings waited for each period's end, every 3 s, and under the unit
    (WatchdogSec=30s, period_s above 15 s) systemd would have killed a daemon that
    was well."""
    address = str(tmp_path / "notify.sock")
    with listening(address) as sock:
        monkeypatch.setenv("NOTIFY_SOCKET", address)
        monkeypatch.setenv("WATCHDOG_USEC", "200000")
        monkeypatch.delenv("WATCHDOG_PID", raising=False)
        d = start_daemon(tmp_path, "period_s: 3.0\ndomain_period_s: 6.0\n")
        try:
            datagrams(sock, b"READY=1")
            started = time.monotonic()
            alive = [sock.recv(4096) for _ in range(5)]
            assert all(m.startswith(b"WATCHDOG=1") for m in alive), alive
            assert time.monotonic() - started < 2.0, "five pings, 0.1 s apart, within a period of 3 s"
        finally:
            d.stop()


@needs_root
def test_a_daemon_tells_systemd_what_it_manages_when_that_changes(tmp_path, monkeypatch, workload):
    """`systemctl status parlschedd` shows the daemon's STATUS=. It was sent with the
    watchdog pings alone, every 15 s under the unit (and never without a watchdog), so
    for that long after an attach it said "managing 0 threads", and as long after a
    detach the threads let go. It is sent in the period the count changes."""
    address = str(tmp_path / "notify.sock")
    with listening(address) as sock:
        monkeypatch.setenv("NOTIFY_SOCKET", address)
        monkeypatch.delenv("WATCHDOG_USEC", raising=False)
        d = start_daemon(tmp_path)
        try:
            assert datagrams(sock, b"READY=1")[-1].split(b"\n")[1].startswith(b"STATUS=managing 0 threads")
            w = workload(3)
            d.request("attach", pid=w.pid)
            managing = f"STATUS=managing {len(w.all_tids())} threads in 1 targets".encode()
            assert datagrams(sock, b"STATUS=", timeout=5)[-1] == managing
            d.request("detach", pid=w.pid)
            assert datagrams(sock, b"STATUS=", timeout=5)[-1] == b"STATUS=managing 0 threads in 0 targets"
        finally:
            d.stop()
