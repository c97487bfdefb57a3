"""The control socket: the listener at its path (claimed at start, made again when the
path is removed under the daemon), the clients connected to it, and the bytes each
way: request lines read up to the line limit, replies written as fast as each client
reads them, the rest of a long reply kept for ``continue`` until its client idles
PARTS_TTL_S, and the idlest connection closed when every slot is taken.

It is apart from the daemon (server.py) because it knows nothing of what a request
means: the daemon hands it ``serve``, which turns one request line into its reply,
and that is all the two share. The daemon's loop is single-threaded: its selector
waits for the socket's traffic until the next tick and passes it here (``dispatch``),
so the socket is served between ticks; ``past_deadline`` says when the tick is due,
and the lines not served by then wait until after it.
"""

from __future__ import annotations

import os
import selectors
import socket
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from parlschedd.config import SocketConfig
from parlschedd.daemon import protocol
from parlschedd.host.privileges import group_id
from parlschedd.hostcheck import socket_path_problem

log = structlog.get_logger("parlschedd")
MAX_CLIENTS = 256
MAX_LINES_PER_TURN = 64  # requests of one client handled before others get a turn
ACCEPT_PAUSE_S = 0.1  # after accept() fails (EMFILE), stop listening this long
MAX_PENDING = 4 * 1024 * 1024  # reply bytes a client may leave unread, request bytes it may have waiting
# those bytes of all clients together: past it, the connection holding the most is closed
# (256 clients at MAX_PENDING each way held 2 GB of the daemon's memory, for good)
MAX_BUFFERED = 64 * 1024 * 1024
PARTS_TTL_S = 30.0  # the rest of a long reply is dropped when its client is idle this long

# (request line, the client's uid, what is left of its last reply) -> (the reply line,
# what is left of this reply, if it is sent in parts)
Serve = Callable[[bytes, int, Iterator[bytes] | None], tuple[bytes, Iterator[bytes] | None]]


class SocketUnusable(Exception):
    """The control socket cannot be made at its path; the message is the one-line reason."""


@dataclass
class Client:
    """One connection to the control socket: its peer's uid (SO_PEERCRED, which every
    request is judged by) and its buffers, as the single-threaded loop serves it a
    turn at a time."""

    sock: socket.socket
    uid: int
    inbuf: bytearray = field(default_factory=bytearray)
    outbuf: bytearray = field(default_factory=bytearray)
    discarding: bool = False  # inside an over-long line: drop bytes up to its newline
    last_active: float = 0.0
    eof: bool = False  # the peer shut down its side: answer what it sent, then close
    parts: Iterator[bytes] | None = None  # the rest of a long reply (protocol.lines), made when asked for


def _set_group(path: str, gid: int) -> None:
    """Give the socket at ``path`` (root's) group ``gid``, not following a link put
    there: fchownat(AT_SYMLINK_NOFOLLOW) from its directory, the call the unit's
    system call filter allows (lchown(2), which os.chown uses without a dir_fd, it
    does not: the daemon refused to start under systemd)."""
    folder = os.open(os.path.dirname(os.path.abspath(path)), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.chown(os.path.basename(path), 0, gid, dir_fd=folder, follow_symlinks=False)
    finally:
        os.close(folder)


class ControlSocket:
    """The listener at ``path`` with ``settings``' mode and group, and its clients, on
    the daemon's ``selector``. ``serve`` answers a line; ``on_connect`` is told each
    peer's pid as it connects; ``past_deadline`` says the next tick is due."""

    def __init__(self, path: str, settings: SocketConfig, state_dir: str, selector: selectors.BaseSelector,
                 serve: Serve, on_connect: Callable[[int], None], past_deadline: Callable[[], bool]) -> None:
        self.path, self.settings, self.state_dir = path, settings, state_dir
        self.selector = selector
        self.serve, self.on_connect, self.past_deadline = serve, on_connect, past_deadline
        self.clients: dict[int, Client] = {}
        self.listener: socket.socket | None = None
        self._socket_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the socket we bound
        self._made_dir: Path | None = None  # the socket's directory, where claim made it (unclaim)
        self._trouble_said = False
        self._listen_paused_until = 0.0

    # -- the path ---------------------------------------------------------------------

    def group_id(self) -> int | None:
        try:
            return group_id(self.settings.group)  # a reload's waits for a restart, as it says
        except LookupError as exc:  # removed since the start's check
            raise SocketUnusable(f"socket.group: {exc}") from None

    def claim(self) -> None:
        """Refuse a socket path that cannot be used (``socket_path_problem``, or another
        daemon's), make its own directory, and clear a dead daemon's socket: at the
        start, and when the socket was removed under the daemon."""
        path = self.path
        if problem := socket_path_problem(path, self.state_dir, os.geteuid()):  # before any directory is made for it
            raise SocketUnusable(f"cannot use control socket path {path}: {problem}")
        try:
            self._mkdir(Path(path).parent)
            found = os.lstat(path) if os.path.lexists(path) else None
        except OSError as exc:  # changed since the check
            raise SocketUnusable(f"cannot use control socket path {path}: {exc.strerror or exc}") from None
        if found is not None and not stat.S_ISSOCK(found.st_mode):  # made since the check: never unlinked
            raise SocketUnusable(f"cannot use control socket path {path}: it is not a socket; parlschedd does not "
                                 "replace it")
        if found is not None:
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
            except OSError:
                os.unlink(path)  # stale socket of a dead daemon
            else:
                pid, _ = protocol.peer(probe)
                raise SocketUnusable(f"another daemon is listening on {path} (pid {pid}): stop it, or give this "
                                     "one another --socket and --state-dir")
            finally:
                probe.close()

    def _mkdir(self, where: Path) -> None:
        try:
            where.mkdir(mode=0o755)
        except FileExistsError:
            return
        self._made_dir = where

    def unclaim(self) -> None:
        """Undo ``claim`` for a start refused after it (the metrics port in use): the
        socket's directory goes where claim made it (a --socket outside the state dir
        left an empty directory behind), and only while empty (rmdir): a file anyone put
        there since keeps it."""
        where, self._made_dir = self._made_dir, None
        if where is None:
            return
        try:
            os.rmdir(where)
        except OSError as exc:  # what cannot be removed stays: said, never the start's refusal
            log.warning("a failed start left the control socket's directory behind", path=str(where), error=str(exc))

    def open(self, gid: int | None) -> None:
        path = self.path
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        # made with the config's mode (no chmod by its path after: a link put there meanwhile
        # would pass the mode to the file it names), its group then set on the path itself
        umask = os.umask(0o777 & ~self.settings.mode)
        try:
            sock.bind(path)
        except OSError as exc:
            sock.close()
            raise SocketUnusable(f"cannot bind control socket {path}: {exc.strerror or exc}") from None
        finally:
            os.umask(umask)
        try:
            if gid is not None:
                _set_group(path, gid)
        except OSError as exc:
            sock.close()
            os.unlink(path)  # not left at the path as if it were another daemon's
            raise SocketUnusable(f"cannot give control socket {path} mode {self.settings.mode:o} and group "
                                 f"{self.settings.group}: {exc.strerror}") from None
        sock.listen(1 << 16)  # the kernel's largest queue (net.core.somaxconn) for a burst; MAX_CLIENTS bounds those served
        sock.setblocking(False)
        self.listener = sock
        self._socket_id = _file_id(path)
        self.selector.register(sock, selectors.EVENT_READ, "accept")

    def keep(self) -> None:
        """Make the control socket again when its path was removed under the daemon
        (``make clean``, an ``rm -rf`` of the run dir), with the mode and group it
        started with: else clients are told the daemon is not running while it still
        manages their threads. Connections already open stay. A path that leads to
        another file now (another daemon's socket) is left alone; that, or a socket
        that cannot be made again, is said once until it is mended."""
        found = _file_id(self.path)
        if found == self._socket_id:
            self._trouble_said = False
            return
        if found is not None:
            self._say_trouble("the control socket's path leads to another file now; this daemon is reachable "
                              "only on connections already open: stop it and start it again")
            return
        old = self.listener
        try:
            self.claim()  # its directory made again, or why not
            self.open(self.group_id())
        except (OSError, SocketUnusable) as exc:
            self._say_trouble("control socket removed, and cannot be made again", error=str(exc))
            return
        if not self._listen_paused_until:  # else it was unregistered already
            self.selector.unregister(old)
        self._listen_paused_until = 0.0
        old.close()
        self._trouble_said = False
        log.warning("control socket removed under the daemon, made again", path=self.path)

    def _say_trouble(self, message: str, **fields: str) -> None:
        if not self._trouble_said:
            log.error(message, path=self.path, **fields)
            self._trouble_said = True

    def close(self) -> None:
        """At shutdown: close every connection, and remove the socket from its path
        unless it is another daemon's, made since at this path."""
        for client in list(self.clients.values()):
            self._close(client)
        if _file_id(self.path) == self._socket_id:
            os.unlink(self.path)

    # -- the clients ------------------------------------------------------------------

    def dispatch(self, key: selectors.SelectorKey, events: int) -> None:
        """Serve what the selector found ready on the listener or a client."""
        if key.data == "accept":
            self._accept()
            return
        client: Client = key.data
        if client.sock.fileno() < 0:  # closed since the selector found it ready: evicted by an accept before it
            return
        try:
            if events & selectors.EVENT_READ:
                self._read(client)
            if events & selectors.EVENT_WRITE and client.sock.fileno() >= 0:
                self._flush(client)
        except Exception:  # a defect of ours in one connection's bytes must not end the daemon and its pins
            log.exception("control connection failed, closed", uid=client.uid)
            self._close(client)

    def _accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            # EMFILE and the like: the listener stays readable, so stop watching it for
            # a moment instead of spinning on it; waiting peers stay in the backlog.
            log.warning("accept failed, pausing the listener", error=str(exc), pause_s=ACCEPT_PAUSE_S)
            self.selector.unregister(self.listener)
            self._listen_paused_until = time.monotonic() + ACCEPT_PAUSE_S
            return
        if len(self.clients) >= MAX_CLIENTS:
            self._evict_idlest()
        sock.setblocking(False)
        pid, uid = protocol.peer(sock)
        self.on_connect(pid)
        client = Client(sock, uid, last_active=time.monotonic())
        self.clients[sock.fileno()] = client
        self.selector.register(sock, selectors.EVENT_READ, client)

    def _evict_idlest(self) -> None:
        """All slots taken: the connection idle longest makes room, so idle peers can
        never lock others out (the newest connection always gets in)."""
        idlest = min(self.clients.values(), key=lambda c: (bool(c.outbuf), c.last_active))
        log.info("client slots full, closing the idlest connection", uid=idlest.uid)
        self._close(idlest)

    def resume_listening(self, now: float) -> None:
        if self._listen_paused_until and now >= self._listen_paused_until:
            self._listen_paused_until = 0.0
            self.selector.register(self.listener, selectors.EVENT_READ, "accept")

    def drop_stale_parts(self, now: float) -> None:
        """What is left of a long reply holds its snapshot (a status view, a history's
        samples) in memory: a client idle for PARTS_TTL_S gives it up."""
        for client in self.clients.values():
            if client.parts is not None and now - client.last_active > PARTS_TTL_S:
                client.parts = None

    def _read(self, client: Client) -> None:
        try:
            data = client.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            client.eof = True
            if client.inbuf and not client.discarding and not client.inbuf.endswith(b"\n"):
                client.inbuf += b"\n"  # the last request, sent without its newline before the shutdown
            if b"\n" not in client.inbuf and not client.outbuf:
                self._close(client)
            else:
                self.selector.modify(client.sock, selectors.EVENT_WRITE, client)
            return
        if len(client.outbuf) > MAX_PENDING or len(client.inbuf) > MAX_PENDING:  # sends, never reads (or waits)
            self._close(client)
            return
        client.inbuf += data
        if self._closed_for_room(client):
            return
        if client.discarding:
            nl = client.inbuf.find(b"\n")
            if nl < 0:
                client.inbuf.clear()
                return
            del client.inbuf[: nl + 1]
            client.discarding = False
        client.last_active = time.monotonic()
        self._serve_lines(client)
        if len(client.inbuf) > protocol.MAX_LINE and client.inbuf.find(b"\n", 0, protocol.MAX_LINE + 1) < 0:
            client.inbuf.clear()
            client.parts = None  # a request too, if not one to answer
            client.outbuf += _too_long()
            client.discarding = True
        self._flush(client)

    def _serve_lines(self, client: Client) -> None:
        """Answer at most MAX_LINES_PER_TURN complete lines, and none while the client
        has more than MAX_PENDING unread: a pipelined burst is served a turn at a time
        as the client reads, while other clients and the period go on. Each line takes
        what is left of the client's last reply (``serve`` may send its next part) and
        leaves what is left of its own."""
        for _ in range(MAX_LINES_PER_TURN):
            nl = client.inbuf.find(b"\n")
            if nl < 0 or len(client.outbuf) > MAX_PENDING or self.past_deadline():
                return
            line = bytes(client.inbuf[:nl])
            del client.inbuf[: nl + 1]
            left, client.parts = client.parts, None
            if nl > protocol.MAX_LINE:  # its end and newline came in the read that took it over the limit
                client.outbuf += _too_long()
                continue
            reply, client.parts = self.serve(line, client.uid, left)
            client.outbuf += reply

    def _closed_for_room(self, client: Client) -> bool:
        """While the clients' buffers hold more than MAX_BUFFERED together, the
        connection holding the most is closed; True when that was ``client``."""
        total = sum(len(c.inbuf) + len(c.outbuf) for c in self.clients.values())
        if total <= MAX_BUFFERED:
            return False
        by_size = sorted(self.clients.values(), key=lambda c: len(c.inbuf) + len(c.outbuf))
        closed = False
        while total > MAX_BUFFERED:
            hog = by_size.pop()
            held = len(hog.inbuf) + len(hog.outbuf)
            log.warning("control clients hold too much unread, closing the largest", uid=hog.uid, bytes=held,
                        most=MAX_BUFFERED)
            total -= held
            self._close(hog)
            closed = closed or hog is client
        return closed

    def _flush(self, client: Client) -> None:
        try:
            sent = client.sock.send(client.outbuf) if client.outbuf else 0
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(client)
            return
        del client.outbuf[:sent]
        if b"\n" in client.inbuf and len(client.outbuf) <= MAX_PENDING:
            if self._closed_for_room(client):
                return
            self._serve_lines(client)  # the next turn of a pipelined burst
        more = bool(client.outbuf) or b"\n" in client.inbuf
        if client.eof and not more:
            self._close(client)
            return
        want = (0 if client.eof else selectors.EVENT_READ) | (selectors.EVENT_WRITE if more else 0)
        self.selector.modify(client.sock, want, client)

    def _close(self, client: Client) -> None:
        self.clients.pop(client.sock.fileno(), None)
        try:
            self.selector.unregister(client.sock)
        except (KeyError, ValueError):
            pass
        client.sock.close()


def _too_long() -> bytes:
    return protocol.error("bad_request", f"request line longer than {protocol.MAX_LINE} bytes")


def _file_id(path: str) -> tuple[int, int] | None:
    """(st_dev, st_ino) of what ``path`` names, None when nothing is there."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
