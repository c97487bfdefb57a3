"""parlschedctl/client.py against a peer that breaks the protocol.

The peer is a real Unix socket served by a thread of this test that answers scripted
lines: a daemon does not misbehave on demand, and the client must not hang or
return half a reply when something else (or a broken daemon) listens there.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable

import pytest

from parlschedctl import client
from tests.conftest import NOBODY, as_user, needs_root


def serve(path: str, answer: Callable[[int], bytes]) -> threading.Thread:
    """Answer the n-th request line on one connection with ``answer(n)``."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def run() -> None:
        conn, _ = listener.accept()
        with conn, listener:
            buf, n = b"", 0
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
                while b"\n" in buf:
                    _, buf = buf.split(b"\n", 1)
                    try:
                        conn.sendall(answer(n))
                    except OSError:
                        return
                    n += 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def part(text: str, more: bool) -> bytes:
    return json.dumps({"ok": True, "part": text, "more": more}).encode() + b"\n"


def test_parts_are_joined_into_the_reply(tmp_path):
    text = json.dumps({"ok": True, "version": "x" * 10})
    pieces = [text[:7], text[7:20], text[20:]]
    serve(str(tmp_path / "s"), lambda n: part(pieces[n], n < 2))
    assert client.request(str(tmp_path / "s"), "ping") == {"version": "x" * 10}


def test_a_peer_that_never_stops_sending_parts_is_cut_off(tmp_path, monkeypatch):
    monkeypatch.setattr(client, "MAX_REPLY", 10_000)
    serve(str(tmp_path / "s"), lambda n: part("x" * 1000, True))
    with pytest.raises(client.Unreachable, match="more than 10000 bytes"):
        client.request(str(tmp_path / "s"), "status", timeout=5)


def test_a_peer_that_breaks_off_a_reply_in_parts_is_not_believed(tmp_path):
    serve(str(tmp_path / "s"), lambda n: part('{"ok":true,', True) if n == 0 else b'{"ok":true,"version":"x"}\n')
    with pytest.raises(client.Unreachable, match="broke off a reply in parts"):
        client.request(str(tmp_path / "s"), "status", timeout=5)


def test_a_refused_continue_is_the_daemons_error(tmp_path):
    serve(str(tmp_path / "s"), lambda n: part('{"ok":true,', True) if n == 0 else
          b'{"ok":false,"error":{"code":"bad_request","message":"continue: no reply"}}\n')
    with pytest.raises(client.Refused, match="continue: no reply"):
        client.request(str(tmp_path / "s"), "status", timeout=5)


def test_a_peer_that_never_answers_times_out(tmp_path):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "s"))
    listener.listen(1)  # connected by the backlog, never accepted: nothing is ever read or sent
    with listener, pytest.raises(client.Unreachable, match="did not answer within 0.3 s"):
        client.request(str(tmp_path / "s"), "ping", timeout=0.3)


def full_queue(path: str) -> tuple[socket.socket, list[socket.socket]]:
    """A listener that accepts nothing, and the connections that fill its queue."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(0)
    queued: list[socket.socket] = []
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(path)
        except BlockingIOError:
            s.close()
            return listener, queued
        queued.append(s)


def test_a_full_listen_queue_is_waited_on_not_a_failure(tmp_path):
    """A burst of clients fills the daemon's listen queue; a client then waits for
    room, up to its timeout, where it failed at once (EAGAIN: exit 3)."""
    listener, queued = full_queue(str(tmp_path / "q"))

    def accept_later() -> None:
        time.sleep(0.3)
        for _ in range(len(queued) + 1):
            listener.accept()[0].close()

    later = threading.Thread(target=accept_later, daemon=True)
    later.start()
    with listener, client.Connection(str(tmp_path / "q"), timeout=5):
        later.join()
    for s in queued:
        s.close()
    listener, queued = full_queue(str(tmp_path / "f"))
    with listener:
        with pytest.raises(client.Unreachable, match="accepted no connection within 0.2 s"):
            client.Connection(str(tmp_path / "f"), timeout=0.2)
        with pytest.raises(client.Unreachable, match="accepted no connection within 0 s"):
            client.Connection(str(tmp_path / "f"), timeout=0)  # no wait at all, never a hang
    for s in queued:
        s.close()


def answers_once(path: str, sent: bytes) -> None:
    """A peer at ``path`` that reads one request, sends ``sent`` and closes."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def run() -> None:
        with listener:
            conn, _ = listener.accept()
        with conn:
            conn.recv(100)
            with contextlib.suppress(OSError):  # the client may stop reading first
                conn.sendall(sent)

    threading.Thread(target=run, daemon=True).start()


def test_a_peer_that_closes_without_answering_is_unreachable(tmp_path):
    answers_once(str(tmp_path / "t"), b"")
    with pytest.raises(client.Unreachable, match="^the daemon closed the connection without answering$"):
        client.request(str(tmp_path / "t"), "ping", timeout=5)


@pytest.mark.parametrize("sent, said", [
    (b"x" * 200_000, "is not parlschedd (it sent a line of more than 65536 bytes)"),
    (b'{"ok": true, "version"', "closed the connection in the middle of an answer (22 bytes without an end of line)"),
    (b"[" * 30000 + b"]" * 2 + b"\n", "is not parlschedd (it answered b'[[["),  # a RecursionError's traceback
])
def test_a_peer_whose_answer_is_not_parlschedds_is_said_so(tmp_path, sent, said):
    """200 KB and no newline, then a close, was "the daemon closed the connection
    without answering": it had answered, not as parlschedd does."""
    answers_once(str(tmp_path / "t"), sent)
    with pytest.raises(client.Unreachable) as e:
        client.request(str(tmp_path / "t"), "ping", timeout=5)
    assert f"what listens on {tmp_path / 't'} " in str(e.value) and said in str(e.value)


@needs_root
@pytest.mark.parametrize("mode, gid, closed_dir, said", [
    (0o660, 0, False, "(mode 0660, group root: only root may use it; set socket.group in the daemon's config "
                      "to a group of yours and restart it, or run as root)"),
    (0o640, NOBODY, False, "(mode 0640, group {group}: you are in that group; the daemon's socket.mode must let "
                           "the group write (such as '0660'))"),
    (0o660, 64998, False, "(mode 0660, group 64998: are you in the 64998 group? (usermod -aG 64998 USER, "
                          "then log in again))"),
    (0o666, 0, True, "(a directory above it is closed to you)"),
])
def test_a_socket_the_user_may_not_use_is_said_with_whom_it_lets_in(open_dir, mode, gid, closed_dir, said):
    """A connect refused with EACCES names what the socket's own mode and group allow,
    and what to change: root's group (socket.group null), the user's own group without
    group write, a group the user is not in (a gid with no name is named by number), or
    a directory on the way the user may not search."""
    folder = open_dir / "run"
    folder.mkdir(mode=0o700 if closed_dir else 0o755)
    folder.chmod(0o700 if closed_dir else 0o755)
    path = str(folder / "ctl.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
        listener.listen(1)
        os.chown(path, 0, gid)
        os.chmod(path, mode)
        reply = as_user(NOBODY, path, "ping")
    finally:
        listener.close()
    group = grp.getgrgid(NOBODY).gr_name if gid == NOBODY else None
    assert reply == {"unreachable": f"no permission to use {path} {said.format(group=group)}"}


@needs_root
def test_a_listener_of_another_user_at_the_path_is_sent_nothing():
    """A user who binds the daemon's socket path first (in a directory others may
    write, such as /tmp) got root's requests, and answered what it liked: parlschedd
    is root's, so what listens as another user is refused before anything is sent
    (review: a squatter received root's attach of pid 1)."""
    with tempfile.TemporaryDirectory(dir="/tmp") as where:  # tmp_path's parents are closed to nobody
        os.chmod(where, 0o777)
        _squatted(os.path.join(where, "squat.sock"))
        own = os.path.join(where, "own")  # a directory of nobody's own, made in one others may write
        os.mkdir(own, 0o755)
        os.chown(own, NOBODY, NOBODY)
        _squatted(os.path.join(own, "parlschedd.sock"))


def _squatted(path: str) -> None:
    ready_r, ready_w = os.pipe()
    got_r, got_w = os.pipe()
    child = os.fork()
    if child == 0:  # the squatter, as nobody
        try:
            os.close(ready_r)
            os.close(got_r)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(path)
            listener.listen(1)
            os.write(ready_w, b"x")
            conn, _ = listener.accept()
            conn.settimeout(2)
            try:
                os.write(got_w, conn.recv(100) or b"nothing")
            except OSError:
                os.write(got_w, b"nothing")
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(got_w)
    try:
        assert os.read(ready_r, 1) == b"x"
        with pytest.raises(client.Unreachable, match=f"what listens on {path} runs as uid {NOBODY}, neither root "
                                                     "nor the owner of its directory"):
            client.request(path, "attach", pid=1)
        assert os.read(got_r, 100) == b"nothing"
    finally:
        os.waitpid(child, 0)
        os.close(ready_r)
        os.close(got_r)
