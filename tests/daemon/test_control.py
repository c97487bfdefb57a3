"""parlschedd/daemon/control.py: the control socket on its own. Its path claimed (its
directory made, a dead daemon's socket cleared, a live one's refused), the listener's
mode and group, each peer's uid and pid from SO_PEERCRED, request lines read up to the
line limit and answered in order a turn at a time, the deadline that holds lines back
until the tick, the bound on what a client may leave unread, the idlest connection
closed when every slot is taken, the rest of a long reply and its time to live, and
the socket made again when its path is removed.

A real ControlSocket on a real Unix socket in tmp_path, served by the test itself
through a real selector (``Served.pump``), as the daemon's loop serves it between
ticks; ``serve`` is a small function of the test's that echoes each line with the
uid it came from. The tests at the end need the whole daemon (its memory bound).
"""

from __future__ import annotations

import contextlib
import gc
import grp
import json
import os
import resource
import selectors
import socket
import stat
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog.testing

from parlschedd.config import SocketConfig
from parlschedd.daemon import control
from parlschedd.daemon.control import MAX_CLIENTS, MAX_LINES_PER_TURN, MAX_PENDING, PARTS_TTL_S, ControlSocket, \
    SocketUnusable
from parlschedd.daemon.protocol import MAX_LINE
from tests.conftest import NOBODY, needs_root



def echo(line: bytes, uid: int, left: Iterator[bytes] | None) -> tuple[bytes, Iterator[bytes] | None]:
    """A reply naming the line and its client's uid; ``more`` is answered from what is
    left of the last reply, ``parts`` leaves two parts for it."""
    if line == b"more":
        part = None if left is None else next(left, None)
        return (part or b'{"left":null}\n'), left
    reply = json.dumps({"line": line.decode(errors="replace"), "uid": uid}).encode() + b"\n"
    if line == b"parts":
        return reply, iter([b'{"part":1}\n', b'{"part":2}\n'])
    if line.startswith(b"big "):  # a reply of that many bytes
        size = int(line.split()[1])
        return b"x" * (size - 1) + b"\n", None
    return reply, None


class Served:
    """A ControlSocket at ``path`` on a selector the test pumps; what ``serve`` was
    asked (line, uid) and who connected (pid) are kept."""

    def __init__(self, path: Path, state_dir: Path, mode: int = 0o600, group: str | None = None,
                 serve: Callable = echo) -> None:
        self.selector = selectors.DefaultSelector()
        self.asked: list[tuple[bytes, int]] = []
        self.connected: list[int] = []
        self.late = False  # past_deadline's answer
        self.peers: list[socket.socket] = []  # the test's ends, closed with it

        def serving(line: bytes, uid: int, left: Iterator[bytes] | None):
            self.asked.append((line, uid))
            return serve(line, uid, left)

        self.control = ControlSocket(str(path), SocketConfig(path=str(path), group=group, mode=mode), str(state_dir),
                                     self.selector, serving, self.connected.append, lambda: self.late)

    def start(self) -> Served:
        try:
            self.control.claim()
            self.control.open(self.control.group_id())
        except BaseException:
            self.selector.close()
            raise
        return self

    def pump(self, until: Callable[[], object], timeout: float = 5.0) -> None:
        """Serve what the selector finds until ``until()`` holds; an AssertionError when
        it does not in ``timeout``."""
        deadline = time.monotonic() + timeout
        while not until():
            if time.monotonic() > deadline:
                raise AssertionError("condition not met in time")
            for key, events in self.selector.select(0.01):
                self.control.dispatch(key, events)

    def run_for(self, seconds: float) -> None:
        """Serve what the selector finds for ``seconds``."""
        end = time.monotonic() + seconds
        self.pump(lambda: time.monotonic() >= end, timeout=seconds + 1)

    def connect(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.peers.append(s)
        s.connect(self.control.path)
        s.setblocking(False)
        n = len(self.connected)
        self.pump(lambda: len(self.connected) > n)
        return s

    def replies(self, s: socket.socket, n: int) -> list[bytes]:
        """The next ``n`` reply lines on ``s``, pumping while they come."""
        got = bytearray()

        def enough() -> bool:
            try:
                got.extend(s.recv(1 << 20))
            except BlockingIOError:
                pass
            return got.count(b"\n") >= n

        self.pump(enough)
        assert got.count(b"\n") == n and got.endswith(b"\n"), got[-200:]
        return bytes(got).splitlines()

    def close(self) -> None:
        for s in self.peers:
            s.close()
        self.control.close()
        if self.control.listener is not None:  # close() leaves it to the daemon's exit
            self.control.listener.close()
        self.selector.close()


@pytest.fixture
def served(tmp_path):
    s = Served(tmp_path / "run" / "ctl.sock", tmp_path / "state").start()
    yield s
    s.close()


def closed_by_peer(s: socket.socket) -> bool:
    """Whether the other end closed ``s``: EOF (or a reset) once what came is read."""
    s.setblocking(True)
    s.settimeout(5)
    try:
        while s.recv(1 << 20):
            pass
    except ConnectionResetError:
        pass
    return True


def test_claim_makes_the_sockets_directory_and_open_gives_the_socket_its_mode(tmp_path):
    """The socket's own directory is made (0755, not its parents'); the socket has the
    config's mode from its bind on (umask 0177 meanwhile), and the process's umask is
    given back after."""
    path = tmp_path / "run" / "ctl.sock"
    mask = os.umask(0o022)
    try:
        s = Served(path, tmp_path / "state", mode=0o666).start()
        assert os.umask(0o022) == 0o022, "the umask given back"
    finally:
        os.umask(mask)
    try:
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
        assert stat.S_ISSOCK(path.lstat().st_mode) and stat.S_IMODE(path.lstat().st_mode) == 0o666
    finally:
        s.close()
    assert not path.exists(), "close removes its own socket"
    with pytest.raises(SocketUnusable, match=r"no directory .*makes the socket's own directory"):
        Served(tmp_path / "no" / "such" / "ctl.sock", tmp_path / "state").start()
    assert not (tmp_path / "no").exists()


@needs_root
def test_the_socket_gets_its_group(tmp_path):
    """socket.group: the socket's group is that group's, its owner root; a group this
    host lacks is SocketUnusable naming socket.group (a reload cannot apply it)."""
    group = grp.getgrgid(1).gr_name  # daemon, bin: a group every Linux host has
    s = Served(tmp_path / "ctl.sock", tmp_path, mode=0o660, group=group).start()
    try:
        st = os.lstat(s.control.path)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 1, 0o660)
    finally:
        s.close()
    unknown = Served(tmp_path / "ctl.sock", tmp_path, group="no-such-group-xyz")
    with contextlib.closing(unknown.selector), pytest.raises(SocketUnusable,
                                                             match="^socket.group: no group 'no-such-group-xyz'"):
        unknown.control.group_id()


def test_a_dead_daemons_socket_is_cleared_a_live_ones_refused(tmp_path):
    """A socket at the path that no one listens on (a daemon that was killed) is
    removed and made again; one that answers is another daemon's: refused, with its
    pid (SO_PEERCRED of the probe: here this process), and left where it is."""
    path = tmp_path / "ctl.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()
    first = Served(path, tmp_path)
    first.control.claim()
    assert not path.exists(), "the dead one's socket removed"
    first.control.open(None)
    try:
        second = Served(path, tmp_path)
        with contextlib.closing(second.selector), \
                pytest.raises(SocketUnusable, match=rf"^another daemon is listening on {path} \(pid {os.getpid()}\)"):
            second.control.claim()
        assert path.lstat().st_ino == os.stat(path).st_ino and stat.S_ISSOCK(path.lstat().st_mode)
        first.connect().close()  # still the first one's
    finally:
        first.close()


def test_a_file_at_the_path_that_is_no_socket_is_never_replaced(tmp_path):
    path = tmp_path / "ctl.sock"
    path.write_text("mine")
    with pytest.raises(SocketUnusable, match="is not a socket; parlschedd does not replace it"):
        Served(path, tmp_path).start()
    assert path.read_text() == "mine"


def test_a_socket_that_cannot_be_bound_is_said_in_a_line(tmp_path):
    """bind's failure is SocketUnusable with the system's reason, and the listener is
    not left half made: its socket is closed, not left to the garbage collector."""
    s = Served(tmp_path / "gone" / "ctl.sock", tmp_path)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("ignore")
        gc.collect()  # what earlier tests left to the GC is not this test's
        warnings.simplefilter("always")
        with pytest.raises(SocketUnusable, match=r"^cannot bind control socket .*/gone/ctl.sock: No such file or "
                                                 r"directory$"):
            s.control.open(None)
        gc.collect()
    assert s.control.listener is None and not s.selector.get_map()
    s.selector.close()
    assert not [w for w in said if issubclass(w.category, ResourceWarning)], "the socket closed, not left to the GC"


def test_requests_are_answered_in_order_with_their_peers_uid_and_pid(served):
    """Lines pipelined in one send, and a line sent a byte at a time, are each served
    once, whole, in order; ``serve`` is given the uid SO_PEERCRED gives, and
    ``on_connect`` the peer's pid (here the test's own process)."""
    s = served.connect()
    assert served.connected == [os.getpid()]
    s.sendall(b"one\ntwo\nthree\n")
    assert [json.loads(r)["line"] for r in served.replies(s, 3)] == ["one", "two", "three"]
    for byte in b"split line":
        s.sendall(bytes([byte]))
        served.run_for(0.005)
    assert len(served.asked) == 3, "nothing served before its newline"
    s.sendall(b"\n")
    assert json.loads(served.replies(s, 1)[0]) == {"line": "split line", "uid": os.getuid()}
    assert served.asked == [(b"one", os.getuid()), (b"two", os.getuid()), (b"three", os.getuid()),
                            (b"split line", os.getuid())]
    s.close()


@needs_root
def test_a_non_root_peer_is_served_as_its_own_uid(tmp_path):
    """SO_PEERCRED is read at the connection: a child that dropped to nobody before it
    connected is served as nobody, whatever uid the daemon runs as; the pid is the
    child's."""
    served = Served(tmp_path / "run" / "ctl.sock", tmp_path, mode=0o666).start()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        try:
            os.close(r)
            os.chdir(served.control.path.rsplit("/", 1)[0])  # the socket's 0755 directory: tmp_path is 0700
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
                c.settimeout(10)
                c.connect("ctl.sock")
                c.sendall(b"who\n")
                os.write(w, c.recv(1000))
        finally:
            os._exit(0)
    os.close(w)
    try:
        served.pump(lambda: served.asked, timeout=10)
        served.run_for(0.05)
        with os.fdopen(r, "rb") as f:
            said = f.read()
    finally:
        os.waitpid(pid, 0)
        served.close()
    assert served.asked == [(b"who", NOBODY)] and served.connected == [pid]
    assert json.loads(said) == {"line": "who", "uid": NOBODY}


def send_in_background(s: socket.socket, data: bytes) -> threading.Thread:
    """``data`` sent on ``s`` by a thread of its own (more than the socket holds may
    wait for the test's pumping to be read)."""
    def send() -> None:
        s.setblocking(True)
        s.sendall(data)
    sender = threading.Thread(target=send)
    sender.start()
    return sender


REFUSED = {"ok": False, "error": {"code": "bad_request", "message": f"request line longer than {MAX_LINE} bytes"}}


@pytest.mark.parametrize("size", [MAX_LINE - 1, MAX_LINE, MAX_LINE + 1, MAX_LINE + 1000, 2 * MAX_LINE - 10])
@pytest.mark.parametrize("halves", [False, True], ids=["in one send", "in two halves"])
def test_a_line_over_the_limit_is_refused_however_its_bytes_arrive(served, size, halves):
    """A request line of MAX_LINE bytes (its newline not counted) is served, a byte
    more is a bad_request saying the limit, and the line after it is served, whether
    the line comes in one send or in two, the second with its newline: a line whose
    end and newline came in the read that took it over the limit was served, up to
    twice the limit (the check looked only for a line still without its newline)."""
    s = served.connect()
    line = b"y" * size
    first = send_in_background(s, line[: size // 2] if halves else line + b"\nnext\n")
    served.pump(lambda: not first.is_alive())
    first.join()
    if halves:
        served.run_for(0.01)
        second = send_in_background(s, line[size // 2:] + b"\nnext\n")
        served.pump(lambda: not second.is_alive())
        second.join()
    s.setblocking(False)
    reply, nxt = served.replies(s, 2)
    if size > MAX_LINE:
        assert json.loads(reply) == REFUSED, f"a line of {size} bytes answered: {reply[:60]!r}"
        assert served.asked == [(b"next", os.getuid())]
    else:
        assert json.loads(reply)["line"] == line.decode() and served.asked[0] == (line, os.getuid())
    assert json.loads(nxt)["line"] == "next"
    s.close()


def test_the_rest_of_a_line_over_the_limit_is_dropped_up_to_its_newline(served):
    """The refusal comes as soon as the line is over the limit; what comes of it after,
    in sends of their own, is dropped up to its newline, never served; the line after
    it is."""
    s = served.connect()
    sender = send_in_background(s, b"z" * (MAX_LINE + 1))
    served.pump(lambda: not sender.is_alive())
    sender.join()
    s.setblocking(False)
    assert json.loads(served.replies(s, 1)[0]) == REFUSED
    for _ in range(3):
        s.sendall(b"more of the same line " * 100)
        served.run_for(0.01)
    s.sendall(b"its end\nnext\n")
    assert json.loads(served.replies(s, 1)[0])["line"] == "next"
    assert served.asked == [(b"next", os.getuid())]
    s.close()


def test_a_last_line_without_its_newline_is_answered_before_the_close(served):
    """A client that shuts its side down after a line without a newline gets its
    answer, then the connection ends; one that shuts down with nothing is closed."""
    s = served.connect()
    s.sendall(b"first\nlast")
    s.shutdown(socket.SHUT_WR)
    assert [json.loads(r)["line"] for r in served.replies(s, 2)] == ["first", "last"]
    served.pump(lambda: not served.control.clients)
    assert closed_by_peer(s)
    quiet = served.connect()
    quiet.shutdown(socket.SHUT_WR)
    served.pump(lambda: not served.control.clients)
    assert closed_by_peer(quiet) and len(served.asked) == 2
    s.close()
    quiet.close()


def test_a_pipelined_burst_is_served_a_turn_at_a_time(served):
    """1000 lines in one send: a turn serves at most MAX_LINES_PER_TURN of them (and
    as many again once the replies are sent), so other clients and the tick get in
    between; every line is served, in order, as the turns go on."""
    s = served.connect()
    other = served.connect()
    s.sendall(b"".join(b"%d\n" % i for i in range(1000)))
    ready = served.selector.select(1)
    assert len(ready) == 1
    served.control.dispatch(*ready[0])
    assert 0 < len(served.asked) <= 2 * MAX_LINES_PER_TURN
    other.sendall(b"me too\n")
    served.pump(lambda: (b"me too", os.getuid()) in served.asked)
    assert len(served.asked) < 1000, "the other client was served before the burst's end"
    got = [json.loads(r)["line"] for r in served.replies(s, 1000)]
    assert got == [str(i) for i in range(1000)]
    assert served.replies(other, 1) and len(served.asked) == 1001


def test_lines_past_the_deadline_wait_for_the_tick_and_are_served_after_it(served):
    """While the tick is due (past_deadline), lines received are kept, not served;
    once it passed they are served without the client sending anything more."""
    s = served.connect()
    served.late = True
    s.sendall(b"a\nb\nc\n")
    served.run_for(0.05)
    assert served.asked == [] and served.control.clients[next(iter(served.control.clients))].inbuf == b"a\nb\nc\n"
    served.late = False
    assert [json.loads(r)["line"] for r in served.replies(s, 3)] == ["a", "b", "c"]


def test_a_line_at_the_limit_held_back_by_the_deadline_is_served_after_it(served):
    """A line of MAX_LINE bytes that waits whole, newline and all, for the tick is not
    taken for a line over the limit; it is served after the tick, as the next one is."""
    s = served.connect()
    served.late = True
    line = b"w" * MAX_LINE
    sender = send_in_background(s, line + b"\nnext\n")
    served.pump(lambda: not sender.is_alive())
    sender.join()
    served.run_for(0.02)
    assert served.asked == []
    served.late = False
    s.setblocking(False)
    assert [json.loads(r)["line"] for r in served.replies(s, 2)] == [line.decode(), "next"]


def test_a_client_that_does_not_read_is_served_no_more_and_closed_when_it_sends_on(served):
    """Replies a client leaves unread pile up to MAX_PENDING bytes; beyond, its lines
    wait (none is served); it reads, and they are served. A client with more than
    MAX_PENDING unread that sends on is closed: the daemon's memory is not its own."""
    size = 1 << 20
    s = served.connect()
    s.sendall(b"big %d\n" % size * 10)
    served.pump(lambda: len(served.asked) >= 4)  # then no more are served, however long it is pumped
    served.run_for(0.1)
    answered = len(served.asked)
    assert 4 <= answered < 10, answered  # 4 MiB pending, and what the socket holds
    client = next(iter(served.control.clients.values()))
    assert len(client.outbuf) > MAX_PENDING - size
    assert len(served.replies(s, 10)) == 10 and len(served.asked) == 10
    s.sendall(b"big %d\n" % size * 10)
    served.pump(lambda: len(client.outbuf) > MAX_PENDING)
    s.sendall(b"one more\n")
    served.pump(lambda: not served.control.clients)
    assert (b"one more", os.getuid()) not in served.asked


def test_a_client_gone_mid_reply_is_dropped_quietly(served):
    """A client that closes with a long reply unread: the send fails (EPIPE), and its
    connection is closed, not the daemon's loop."""
    s = served.connect()
    s.sendall(b"big %d\n" % (4 << 20))
    served.pump(lambda: served.asked)
    s.close()
    served.pump(lambda: not served.control.clients)
    other = served.connect()
    other.sendall(b"ping\n")
    assert served.replies(other, 1)


def test_the_rest_of_a_long_reply_is_kept_until_another_request_or_its_ttl(served):
    """``serve`` is given what is left of the client's last reply: kept across
    requests that ask for it, dropped by any other request, by a line over the
    limit, and when the client idles PARTS_TTL_S (drop_stale_parts)."""
    s = served.connect()
    s.sendall(b"parts\nmore\nmore\nmore\n")
    assert served.replies(s, 4)[1:] == [b'{"part":1}', b'{"part":2}', b'{"left":null}']
    s.sendall(b"parts\nother\nmore\n")
    assert served.replies(s, 3)[2] == b'{"left":null}', "another request dropped the rest"
    s.sendall(b"parts\n")
    served.replies(s, 1)
    client = next(iter(served.control.clients.values()))
    served.control.drop_stale_parts(client.last_active + PARTS_TTL_S - 1)
    assert client.parts is not None
    served.control.drop_stale_parts(client.last_active + PARTS_TTL_S + 1)
    assert client.parts is None
    s.sendall(b"more\n")
    assert served.replies(s, 1) == [b'{"left":null}']
    s.sendall(b"parts\n" + b"z" * (MAX_LINE + 1))
    served.replies(s, 2)
    s.sendall(b"\nmore\n")
    assert served.replies(s, 1) == [b'{"left":null}'], "the line over the limit dropped the rest"


def test_when_every_slot_is_taken_the_idlest_connection_makes_room(served):
    """The MAX_CLIENTS+1st connection gets in; the one idle longest is closed for it,
    but one with a reply still unread is passed over for an idle one."""
    clients = [served.connect()]
    try:
        clients[0].sendall(b"big %d\n" % (2 << 20))  # the oldest, with a reply it does not read
        served.pump(lambda: served.asked)
        clients += [served.connect() for _ in range(MAX_CLIENTS - 1)]
        clients[2].sendall(b"busy\n")  # active since: not the idlest any more
        assert served.replies(clients[2], 1)
        newest = served.connect()
        assert len(served.control.clients) == MAX_CLIENTS
        assert closed_by_peer(clients[1]), "the idlest with nothing unread"
        newest.sendall(b"in\n")
        assert json.loads(served.replies(newest, 1)[0])["line"] == "in"
        clients[2].sendall(b"still\n")
        assert served.replies(clients[2], 1)
        assert any(len(c.outbuf) for c in served.control.clients.values()), "the one with unread output stayed"
        newest.close()
    finally:
        for c in clients:
            c.close()


def test_the_clients_together_hold_no_more_than_max_buffered(served, monkeypatch):
    """Each client may leave MAX_PENDING unread each way, and 256 of them held 2 GB of
    the daemon's memory (review). Past MAX_BUFFERED together (1 MB here), the
    connection holding the most is closed, and the others are served on."""
    monkeypatch.setattr(control, "MAX_BUFFERED", 1_000_000)
    hogs = [served.connect(), served.connect()]
    for hog in hogs:  # replies they do not read: most stays in the daemon's buffers
        hog.sendall(b"big 900000\n")
        served.pump(lambda hog=hog: len(served.asked) == hogs.index(hog) + 1)
    held = sorted(len(c.outbuf) for c in served.control.clients.values())
    assert sum(held) > 1_000_000, held
    other = served.connect()
    other.sendall(b"ping\n")
    assert json.loads(served.replies(other, 1)[0])["line"] == "ping"
    assert len(served.control.clients) == 2, "one of the two closed"
    assert sum(len(c.inbuf) + len(c.outbuf) for c in served.control.clients.values()) <= 1_000_000


def test_a_connection_closed_for_a_newer_one_is_not_served_in_the_same_turn(served, monkeypatch):
    """The selector finds the listener and the idlest connection ready at once: the
    accept closes that connection for the newcomer, and its read then came to the
    closed socket, whose ValueError ended the daemon (review: any client allowed on the
    socket could stop it, 256 connections at a time)."""
    monkeypatch.setattr(control, "MAX_CLIENTS", 2)
    first, second = served.connect(), served.connect()
    for n, s in enumerate((first, second), 1):  # an unfinished line each, the first's the older
        s.sendall(b"{")
        served.pump(lambda n=n: sum(c.inbuf == b"{" for c in served.control.clients.values()) == n)
    third = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    served.peers.append(third)
    third.connect(served.control.path)
    third.setblocking(False)
    first.sendall(b"late\n")
    ready: list = []
    deadline = time.monotonic() + 5
    while len(ready) < 2 and time.monotonic() < deadline:
        ready = served.selector.select(0.1)
    assert len(ready) == 2
    ready.sort(key=lambda found: found[0].data != "accept")  # as the daemon's loop meets them: the accept first
    for key, events in ready:
        served.control.dispatch(key, events)
    assert closed_by_peer(first) and not served.asked
    third.sendall(b"in\n")
    assert json.loads(served.replies(third, 1)[0])["line"] == "in"
    second.sendall(b"still\n")
    assert json.loads(served.replies(second, 1)[0])["line"] == "{still"


def test_a_failed_accept_pauses_the_listener_which_resumes_and_accepts(served):
    """accept() failing with EMFILE (every descriptor taken: the limit lowered here to
    the next free one) stops watching the listener for ACCEPT_PAUSE_S rather than
    spinning on it; the peer waits in the backlog and is accepted once it resumes."""
    waiting = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    waiting.connect(served.control.path)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    free = os.open("/dev/null", os.O_RDONLY)  # the descriptor accept() would get
    os.close(free)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (free, hard))
        with structlog.testing.capture_logs() as logs:
            served.run_for(0.05)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert [e["event"] for e in logs] == ["accept failed, pausing the listener"], logs
    assert served.connected == [] and served.control.listener not in [k.fileobj for k in served.selector.get_map().values()]
    served.control.resume_listening(time.monotonic())  # before the pause is over: still paused
    served.run_for(0.02)
    assert served.connected == []
    served.control.resume_listening(time.monotonic() + control.ACCEPT_PAUSE_S)
    served.pump(lambda: served.connected)
    waiting.setblocking(False)
    waiting.sendall(b"late\n")
    assert served.replies(waiting, 1)
    waiting.close()


@needs_root
def test_a_socket_removed_under_the_daemon_is_made_again(tmp_path):
    """keep(): the path removed (its directory too, as an rm -rf of the run dir does),
    the socket is made again with the mode and group it started with, the old listener
    closed; connections open before stay; the next keep, with nothing changed, does
    nothing."""
    served = Served(tmp_path / "run" / "ctl.sock", tmp_path, mode=0o660, group=grp.getgrgid(1).gr_name).start()
    try:
        before = served.connect()
        old = served.control.listener
        path = Path(served.control.path)
        path.unlink()
        path.parent.rmdir()
        with structlog.testing.capture_logs() as logs:
            served.control.keep()
            served.control.keep()
        assert [e["event"] for e in logs] == ["control socket removed under the daemon, made again"]
        st = path.lstat()
        assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o660, 1)
        assert old.fileno() == -1 and served.control.listener is not old
        after = served.connect()
        before.sendall(b"old\n")
        after.sendall(b"new\n")
        assert served.replies(before, 1) and served.replies(after, 1)
    finally:
        served.close()


def test_a_path_that_leads_to_another_file_now_is_left_alone_and_said_once(served):
    """The socket replaced by another file at its path (another daemon's socket): it is
    not touched, said once however often keep() looks, and close() leaves it there."""
    path = Path(served.control.path)
    path.unlink()
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(str(path))
    theirs = path.lstat().st_ino
    try:
        with structlog.testing.capture_logs() as logs:
            for _ in range(3):
                served.control.keep()
        assert [e["event"] for e in logs] == ["the control socket's path leads to another file now; this daemon is "
                                              "reachable only on connections already open: stop it and start it again"]
        served.control.close()
        assert path.lstat().st_ino == theirs
    finally:
        other.close()


def test_a_socket_put_back_at_its_path_is_mended_and_the_next_trouble_said_again(served):
    """The socket moved away and another file put at its path (said), then the socket
    moved back (``mv``): keep() finds its own socket again, and the next time its path
    leads elsewhere that is said again."""
    path = Path(served.control.path)
    aside = path.with_name("aside.sock")
    for _ in range(2):
        path.rename(aside)
        path.write_text("")
        with structlog.testing.capture_logs() as logs:
            served.control.keep()
        assert len(logs) == 1 and logs[0]["event"].startswith("the control socket's path leads to another file now")
        path.unlink()
        aside.rename(path)
        served.control.keep()
    served.connect().close()


def test_a_socket_that_cannot_be_made_again_is_said_once_until_mended(served):
    """The run dir's parent gone too (the socket's directory cannot be made): said once
    as an error, the old listener kept; once the parent is back, it is made again."""
    path = Path(served.control.path)
    path.unlink()
    path.parent.rmdir()
    (path.parent.parent / "run").touch()  # a file where the socket's directory goes
    with structlog.testing.capture_logs() as logs:
        served.control.keep()
        served.control.keep()
    assert [e["event"] for e in logs] == ["control socket removed, and cannot be made again"]
    (path.parent.parent / "run").unlink()
    served.control.keep()
    assert stat.S_ISSOCK(path.lstat().st_mode)
    served.connect().close()
    path.unlink()
    path.parent.rmdir()
    (path.parent.parent / "run").touch()
    with structlog.testing.capture_logs() as logs:
        served.control.keep()
    assert len(logs) == 1, "mended, then broken again: said again"
    (path.parent.parent / "run").unlink()


# -- with the whole daemon (moved from test_server.py) ------------------------------

@needs_root
def test_a_client_that_sends_requests_faster_than_they_are_served_is_closed(slow):
    """It reads its replies, but pipelines tiny requests faster than the daemon serves
    them (64 a turn): what waits is bounded (4 MiB), not the daemon's memory."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(slow.socket)
        replies = bytearray()
        ended: list[str] = []  # how the reading ended: "eof" or "reset" (the daemon closed), "timeout"

        def read() -> None:
            try:
                while chunk := s.recv(1 << 20):
                    replies.extend(chunk)
                ended.append("eof")
            except TimeoutError:
                ended.append("timeout")
            except OSError:
                ended.append("reset")

        reader = threading.Thread(target=read)
        reader.start()
        burst = b'{"cmd":"ping"}\n' * 100_000  # 1.5 MB
        closed = False
        try:
            for _ in range(12):
                s.sendall(burst)
        except OSError:
            closed = True
        if not closed:
            s.shutdown(socket.SHUT_WR)
        reader.join(30)
    assert ended in (["eof"], ["reset"]) and replies.count(b"\n") < 1_200_000, \
        f"not closed by the daemon ({ended}): what waits was not bounded"
    assert slow.request("ping")["version"]
    rss_kb = int(next(line.split()[1] for line in open(f"/proc/{slow.proc.pid}/status") if line.startswith("VmRSS")))
    assert rss_kb < 200 * 1024, f"daemon RSS {rss_kb} kB"
