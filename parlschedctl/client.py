"""The daemon's control socket from the client side: one request, one reply line."""

from __future__ import annotations

import json
import os
import socket
from typing import Any

DEFAULT_SOCKET = "/run/parlsched/parlschedd.sock"


class Unreachable(Exception):
    """The daemon is not listening on the socket (exit code 3)."""


class Refused(Exception):
    """The daemon answered with an error (exit code 1)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def socket_path(explicit: str | None) -> str:
    return explicit or os.environ.get("PARLSCHED_SOCKET") or DEFAULT_SOCKET


def request(path: str, cmd: str, timeout: float = 10.0, **args: Any) -> dict[str, Any]:
    """Send one request and return the reply's fields; raise Unreachable or Refused."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise Unreachable(f"the daemon is not running (no listener on {path}: {exc.strerror})") from None
        except PermissionError:
            raise Unreachable(f"no permission to use {path} (are you in the parlsched group?)") from None
        except OSError as exc:  # a path through a file, too long for a socket address, ...
            raise Unreachable(f"cannot connect to {path}: {exc.strerror or exc}") from None
        sock.sendall(json.dumps({"cmd": cmd, **args}).encode() + b"\n")
        data = bytearray()
        while not data.endswith(b"\n"):
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise Unreachable("the daemon closed the connection without answering")
            data += chunk
    except socket.timeout:
        raise Unreachable(f"the daemon did not answer within {timeout:g} s") from None
    except (ConnectionResetError, BrokenPipeError):
        raise Unreachable("the daemon closed the connection") from None
    finally:
        sock.close()
    return _reply(path, data)


def _reply(path: str, data: bytes) -> dict[str, Any]:
    """The fields of a reply line; Unreachable when what listens on ``path`` does not
    speak the protocol (a JSON object with a boolean ``ok``)."""
    try:
        reply = json.loads(data)
    except ValueError:
        reply = None
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        raise Unreachable(f"what listens on {path} is not parlschedd (it answered {bytes(data[:60])!r})")
    if not reply.pop("ok"):
        err = reply.get("error")
        err = err if isinstance(err, dict) else {}
        raise Refused(str(err.get("code", "internal")), str(err.get("message", "request failed")))
    return reply
