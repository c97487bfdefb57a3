"""The control protocol: one JSON object per line each way (shared/spec/interfaces.md).

``parse_request`` turns one received line into a validated ``Request`` or raises
``ProtocolError`` with the error code the reply carries; it never raises anything
else, whatever the bytes. ``lines`` cuts a reply longer than a line may be into parts.
"""

from __future__ import annotations

import itertools
import json
import socket
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from parlschedd.kinds import is_integer

DEFAULT_SOCKET = "/run/parlsched/parlschedd.sock"  # where the daemon listens and clients ask, unless told
MAX_LINE = 64 * 1024
# A part's text is ASCII JSON (``encode`` escapes the rest), which at most doubles when
# encoded as a string (each quote and backslash gains a backslash); 64 bytes for the envelope.
PART_CHARS = (MAX_LINE - 64) // 2
MAX_INT = 2**31 - 1  # an integer field's largest value (a pid's, a count's)
# command -> {field: (type, required)}
COMMANDS: dict[str, dict[str, tuple[type, bool]]] = {
    "ping": {},
    "attach": {"pid": (int, True), "observe": (bool, False), "threads": (str, False), "descendants": (bool, False)},
    "detach": {"pid": (int, True)},
    "status": {"pid": (int, False)},
    "history": {"pid": (int, True), "last": (int, False)},
    "reload": {},
    "continue": {},  # the next part of a reply sent in parts (``parts``)
}


class ProtocolError(Exception):
    """A refused request, as its error reply carries it: ``code`` is the protocol's
    error code (interfaces.md), the message its text."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Request:
    cmd: str
    args: dict[str, Any]


def parse_request(line: bytes) -> Request:
    if len(line) > MAX_LINE:
        raise ProtocolError("bad_request", f"request line longer than {MAX_LINE} bytes")
    try:
        obj = json.loads(line.decode("utf-8"), object_pairs_hook=_Fields)
    except UnicodeDecodeError:
        raise ProtocolError("bad_request", "request is not valid UTF-8") from None
    except RecursionError:
        raise ProtocolError("bad_request", "request nests too deeply to read") from None
    except ValueError:
        raise ProtocolError("bad_request", "request is not a JSON object on one line") from None
    if not isinstance(obj, dict):
        raise ProtocolError("bad_request", "request must be a JSON object")
    if obj.repeated is not None:  # a value that is an object is refused by its field's own check
        raise ProtocolError("bad_request", f"field {clip(repr(obj.repeated))} given twice")
    cmd = obj.get("cmd")
    if "cmd" not in obj:
        raise ProtocolError("bad_request", f"missing field 'cmd': one of {', '.join(COMMANDS)}")
    if not isinstance(cmd, str) or cmd not in COMMANDS:
        raise ProtocolError("bad_request", f"unknown command {clip(repr(cmd))}; expected one of {', '.join(COMMANDS)}")
    schema = COMMANDS[cmd]
    args: dict[str, Any] = {}
    for key, value in obj.items():
        if key == "cmd":
            continue
        if key not in schema:
            raise ProtocolError("bad_request", f"{cmd}: unknown field {clip(repr(key))}")
        kind, _ = schema[key]
        if value is None and not schema[key][1]:
            continue
        if not (is_integer(value) if kind is int else isinstance(value, kind)):
            raise ProtocolError("bad_request", f"{cmd}: field {key!r} must be {_json_type(kind)}, got {_json_type(type(value))}")
        if kind is int and not 0 < value <= MAX_INT:
            raise ProtocolError("bad_request", f"{cmd}: field {key!r} out of range (1 to {MAX_INT})")
        args[key] = value
    missing = [k for k, (_, required) in schema.items() if required and k not in args]
    if missing:
        raise ProtocolError("bad_request", f"{cmd}: missing field {missing[0]!r}")
    return Request(cmd, args)


class _Fields(dict[str, Any]):
    """A JSON object, and the first key it repeats (None: none): of
    ``{"cmd":"ping","cmd":"reload"}`` json keeps the last, so a request would do what a
    reader of its start does not see."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        self.repeated: str | None = None
        seen: set[str] = set()
        for key, _ in pairs if len(self) < len(pairs) else ():
            if key in seen:
                self.repeated = key
                break
            seen.add(key)


_JSON_TYPES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
               dict: "an object", type(None): "null"}


def _json_type(kind: type) -> str:
    """A type by its JSON name, as the client wrote it (not Python's NoneType)."""
    return next((name for python, name in _JSON_TYPES.items() if issubclass(kind, python)), kind.__name__)


def ok(**fields: Any) -> bytes:
    return encode({"ok": True, **fields})


def error(code: str, message: str) -> bytes:
    return encode({"ok": False, "error": {"code": code, "message": message}})


def encode(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The reply whose text is ``chunks`` joined (ending in a newline) as lines of at
    most MAX_LINE bytes (interfaces: 64 KiB a line), made as they are taken.

    A reply that fits is one line, as it is. A longer one (``status`` or ``history`` of
    a target of many threads) comes in parts: pieces of its text, each sent as
    ``{"ok":true,"part":"<text>","more":true|false}``; the client asks for each next
    one with ``{"cmd": "continue"}`` and parses the joined texts as the reply. The
    chunks are pulled only as far as the part being made needs, so a long reply is
    neither built nor held whole: the daemon holds what the client has not asked for
    as this generator, and does the work of a part when it is asked for.
    """
    source = iter(chunks)
    buf = bytearray()
    done = False

    def fill(size: int) -> None:
        nonlocal done
        while not done and len(buf) <= size:
            chunk = next(source, None)
            if chunk is None:
                done = True
                if buf.endswith(b"\n"):
                    del buf[-1]
            else:
                buf.extend(chunk)

    fill(MAX_LINE)
    if done and len(buf) < MAX_LINE:
        yield bytes(buf) + b"\n"
        return
    while True:
        fill(PART_CHARS + 1)  # one byte beyond the piece: then there is more (the newline is stripped at the end)
        piece = bytes(buf[:PART_CHARS])
        del buf[:PART_CHARS]
        more = bool(buf) or not done
        yield _part(_escape(piece), more)
        if not more:
            return


def clip(text: str, limit: int = 80) -> str:
    """A value from a request, shortened for the error message that repeats it."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


@dataclass(frozen=True)
class Framed:
    """A reply of fixed text around one short piece that differs for each request
    (status's ``snapshot_age_ms``), made ready to be sent many times: ``lines`` then
    escapes the head and that piece only, not the whole text, which for the status of
    1000 threads asked 500 times a second would be most of the daemon's work. Escaping
    JSON text goes character by character, so the escape of a concatenation is the
    concatenation of the escapes. The parts are shared by every request of the view."""

    head: bytes
    tail: bytes                      # ends with the newline
    first_tail: bytes | None = None  # escaped start of the tail that the first part holds
    rest: tuple[bytes, ...] = ()     # the other parts, ready to send

    MIDDLE_MAX = 64  # bytes of the varying piece the first part leaves room for

    @classmethod
    def of(cls, head: bytes, tail: bytes) -> Framed:
        room = PART_CHARS - len(head) - cls.MIDDLE_MAX
        if len(head) + cls.MIDDLE_MAX + len(tail) <= MAX_LINE or room <= 0:
            return cls(head, tail)  # one line; or a head of thousands of CPUs: cut at each request
        text = tail.rstrip(b"\n")
        pieces = _cut(text[room:], PART_CHARS)
        rest = tuple(_part(_escape(piece), i < len(pieces) - 1) for i, piece in enumerate(pieces))
        return cls(head, tail, _escape(text[:room]), rest)

    def lines(self, middle: bytes) -> Iterator[bytes]:
        """The reply with ``middle`` between head and tail, as lines that fit."""
        if self.first_tail is None or len(middle) > self.MIDDLE_MAX:
            return lines([self.head, middle, self.tail])
        return itertools.chain([_part(_escape(self.head + middle) + self.first_tail, True)], self.rest)


def _cut(text: bytes, size: int) -> list[bytes]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [b""]


def _escape(text: bytes) -> bytes:
    """ASCII JSON text (``encode`` escapes all else) as the inside of a JSON string."""
    return json.dumps(text.decode("ascii"))[1:-1].encode("ascii")


def _part(escaped: bytes, more: bool) -> bytes:
    return b'{"ok":true,"part":"%s","more":%s}\n' % (escaped, b"true" if more else b"false")


def peer(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a connected Unix socket
    (SO_PEERCRED's ``struct ucred``), as it was when it connected or listened: what
    the daemon judges a request by, and the client a listener."""
    pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return pid, uid
