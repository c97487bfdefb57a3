"""The daemon's control socket from the client side: one request, one reply (a line, or
the parts of a longer one)."""

from __future__ import annotations

import grp
import json
import os
import socket
import stat
import time
from typing import Any

from parlschedd.daemon.protocol import DEFAULT_SOCKET, MAX_LINE, peer


class Unreachable(Exception):
    """The daemon is not listening on the socket (exit code 3)."""


class Refused(Exception):
    """The daemon answered with an error (exit code 1)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def socket_path(explicit: str | None) -> str:
    """The daemon's socket: --socket, else PARLSCHED_SOCKET, else the default."""
    return explicit or os.environ.get("PARLSCHED_SOCKET") or DEFAULT_SOCKET


MAX_REPLY = 1 << 30  # bytes of a reply in parts: far above any daemon's, a bound against a runaway peer
CONNECT_RETRY_S = 0.01  # while the daemon's listen queue is full


def _not_a_socket(path: str) -> str | None:
    """What ``path`` is when it exists and is no socket ("a directory"), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISSOCK(mode):
        return None
    return "a directory" if stat.S_ISDIR(mode) else "a regular file" if stat.S_ISREG(mode) else "not a socket file"


def _who_may_use(path: str) -> str:
    """Whom the socket at ``path`` lets in, for a refused connect: its group, read from
    the socket itself (a hint that named parlsched was wrong where socket.group is
    null and the group is root's)."""
    try:
        st = os.stat(path)
    except OSError:
        return "a directory above it is closed to you"
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    mode = stat.S_IMODE(st.st_mode)
    if st.st_gid == 0:
        return (f"mode {mode:04o}, group {group}: only root may use it; set socket.group in the daemon's config "
                "to a group of yours and restart it, or run as root")
    if st.st_gid in os.getgroups() or st.st_gid == os.getegid():
        return (f"mode {mode:04o}, group {group}: you are in that group; the daemon's socket.mode must let "
                "the group write (such as '0660')")
    return (f"mode {mode:04o}, group {group}: are you in the {group} group? "
            f"(usermod -aG {group} USER, then log in again)")


class Connection:
    """One connection to the daemon, for one request after another. A reply longer
    than a line comes in parts (``{"ok": true, "part": "<text>", "more": bool}``, see
    parlschedd.daemon.protocol.lines); ``request`` asks for the rest with
    ``continue`` and returns the whole reply."""

    def __init__(self, path: str, timeout: float = 10.0) -> None:
        self.path, self.timeout = path, timeout
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self._connect(time.monotonic() + timeout)
        except (FileNotFoundError, ConnectionRefusedError, PermissionError) as exc:
            self.close()
            kind = _not_a_socket(path)  # connect to one fails EACCES when we may not write it
            if kind:
                raise Unreachable(f"{path} is {kind}, not a socket; give the daemon's socket "
                                  "(--socket or PARLSCHED_SOCKET)") from None
            if isinstance(exc, PermissionError):
                raise Unreachable(f"no permission to use {path} ({_who_may_use(path)})") from None
            elsewhere = ("; a daemon on another socket (make run: /run/parlsched-dev/parlschedd.sock) is named with "
                         "--socket or PARLSCHED_SOCKET") if path == DEFAULT_SOCKET else ""
            raise Unreachable(f"the daemon is not running (no listener on {path}: {exc.strerror}){elsewhere}") from None
        except BlockingIOError:
            self.close()
            raise Unreachable(f"the daemon on {path} accepted no connection within {timeout:g} s (busy or hung)") from None
        except OSError as exc:  # a path through a file, too long for a socket address, ...
            self.close()
            raise Unreachable(f"cannot connect to {path}: {exc.strerror or exc}") from None
        if (owner := peer(self.sock)[1]) not in _trusted_uids(path):  # SO_PEERCRED: who listens, not what it says
            self.close()
            raise Unreachable(f"what listens on {path} runs as uid {owner}, neither root nor the owner of its "
                              "directory: not parlschedd, nothing sent (a socket path in a directory others may "
                              "write can be taken; give the daemon's --socket or PARLSCHED_SOCKET)")

    def _connect(self, deadline: float) -> None:
        """Connect, waiting while the daemon's listen queue is full (a burst of clients):
        a Unix socket's connect then fails at once with EAGAIN, and is tried again on
        the same socket until ``deadline``, when the last BlockingIOError stands."""
        while True:
            try:
                return self.sock.connect(self.path)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(CONNECT_RETRY_S)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def request(self, cmd: str, **args: Any) -> dict[str, Any]:
        """Send one request and return the reply's fields; raise Unreachable or Refused."""
        reply = _reply(self.path, self._exchange(json.dumps({"cmd": cmd, **args}).encode() + b"\n"))
        pieces: list[str] = []
        size = 0
        while _is_part(reply):
            pieces.append(reply["part"])
            size += len(reply["part"])
            if not reply["more"]:
                return _reply(self.path, "".join(pieces).encode())
            if size > MAX_REPLY:
                raise Unreachable(f"what listens on {self.path} sent a reply of more than {MAX_REPLY} bytes")
            reply = _reply(self.path, self._exchange(b'{"cmd":"continue"}\n'))
            if not _is_part(reply):
                raise Unreachable(f"what listens on {self.path} broke off a reply in parts ({len(pieces)} sent)")
        return reply

    def _exchange(self, line: bytes) -> bytes:
        data = bytearray()
        try:
            self.sock.sendall(line)
            while not data.endswith(b"\n"):
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    raise Unreachable("the daemon closed the connection without answering" if not data else
                                      f"what listens on {self.path} closed the connection in the middle of an "
                                      f"answer ({len(data)} bytes without an end of line)")
                data += chunk
                if len(data) > MAX_LINE:  # parlschedd's lines are shorter: replies longer go in parts
                    raise Unreachable(f"what listens on {self.path} is not parlschedd (it sent a line of more than "
                                      f"{MAX_LINE} bytes)")
        except socket.timeout:
            raise Unreachable(f"the daemon did not answer within {self.timeout:g} s") from None
        except (ConnectionResetError, BrokenPipeError):
            raise Unreachable("the daemon closed the connection") from None
        return bytes(data)


def request(path: str, cmd: str, timeout: float = 10.0, **args: Any) -> dict[str, Any]:
    """Send one request on a connection of its own; raise Unreachable or Refused."""
    with Connection(path, timeout) as conn:
        return conn.request(cmd, **args)


def _trusted_uids(path: str) -> set[int]:
    """Whose listener at ``path`` may be parlschedd: root, the caller, and the owner of
    the socket's directory where no one else may write it nor any directory above it,
    each of those root's (a daemon run as a user with CAP_SYS_NICE, its socket in its
    state dir). Not the owner of a directory made in /tmp or another directory others
    may write, sticky or not: anyone may have made it before the daemon's start."""
    uids = {0, os.geteuid()}
    where = os.path.dirname(os.path.realpath(path))
    writable = stat.S_IWGRP | stat.S_IWOTH
    try:
        st = os.stat(where)
        up = where
        while up != "/":
            up = os.path.dirname(up)
            above = os.stat(up)
            if above.st_uid != 0 or above.st_mode & writable:
                return uids
    except OSError:
        return uids
    if not st.st_mode & writable:
        uids.add(st.st_uid)
    return uids


def _is_part(reply: dict[str, Any]) -> bool:
    return isinstance(reply.get("part"), str) and isinstance(reply.get("more"), bool)


def _reply(path: str, data: bytes) -> dict[str, Any]:
    """The fields of a reply line; Unreachable when what listens on ``path`` does not
    speak the protocol (a JSON object with a boolean ``ok``)."""
    try:
        reply = json.loads(data)
    except (ValueError, RecursionError):  # RecursionError: [[[...]]] nested past the decoder's depth
        reply = None
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        raise Unreachable(f"what listens on {path} is not parlschedd (it answered {bytes(data[:60])!r})")
    if not reply.pop("ok"):
        err = reply.get("error")
        err = err if isinstance(err, dict) else {}
        raise Refused(str(err.get("code", "internal")), str(err.get("message", "request failed")))
    return reply
