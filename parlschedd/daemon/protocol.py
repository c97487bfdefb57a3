"""The control protocol: one JSON object per line each way (shared/spec/interfaces.md).

``parse_request`` turns one received line into a validated ``Request`` or raises
``ProtocolError`` with the error code the reply carries; it never raises anything
else, whatever the bytes. ``parts`` cuts a reply longer than a line may be into parts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MAX_LINE = 64 * 1024
# A part's text is ASCII JSON (``encode`` escapes the rest), which at most doubles when
# encoded as a string (each quote and backslash gains a backslash); 64 bytes for the envelope.
PART_CHARS = (MAX_LINE - 64) // 2
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
        obj = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        raise ProtocolError("bad_request", "request is not valid UTF-8") from None
    except (ValueError, RecursionError):
        raise ProtocolError("bad_request", "request is not a JSON object on one line") from None
    if not isinstance(obj, dict):
        raise ProtocolError("bad_request", "request must be a JSON object")
    cmd = obj.get("cmd")
    if not isinstance(cmd, str) or cmd not in COMMANDS:
        raise ProtocolError("bad_request", f"unknown command {cmd!r}; expected one of {', '.join(COMMANDS)}")
    schema = COMMANDS[cmd]
    args: dict[str, Any] = {}
    for key, value in obj.items():
        if key == "cmd":
            continue
        if key not in schema:
            raise ProtocolError("bad_request", f"{cmd}: unknown field {key!r}")
        kind, _ = schema[key]
        if value is None and not schema[key][1]:
            continue
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ProtocolError("bad_request", f"{cmd}: field {key!r} must be {kind.__name__}, got {type(value).__name__}")
        if kind is int and not 0 < value < 2**31:
            raise ProtocolError("bad_request", f"{cmd}: field {key!r} out of range")
        args[key] = value
    missing = [k for k, (_, required) in schema.items() if required and k not in args]
    if missing:
        raise ProtocolError("bad_request", f"{cmd}: missing field {missing[0]!r}")
    return Request(cmd, args)


def ok(**fields: Any) -> bytes:
    return encode({"ok": True, **fields})


def error(code: str, message: str) -> bytes:
    return encode({"ok": False, "error": {"code": code, "message": message}})


def encode(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def parts(reply: bytes) -> list[bytes]:
    """``reply`` as lines of at most MAX_LINE bytes (interfaces: 64 KiB a line).

    A reply that fits is its own single part. A longer one (``status`` or ``history``
    of a target of many threads) is cut into pieces of its text, each sent as
    ``{"ok": true, "part": "<text>", "parts_left": n}``; the client asks for each next
    one with ``{"cmd": "continue"}`` and parses the joined texts as the reply. All
    parts come from one snapshot, however long the client takes to ask.
    """
    if len(reply) <= MAX_LINE:
        return [reply]
    text = reply.decode("ascii").rstrip("\n")  # ``encode`` escapes all but ASCII
    pieces = [text[i : i + PART_CHARS] for i in range(0, len(text), PART_CHARS)]
    return [ok(part=piece, parts_left=len(pieces) - 1 - i) for i, piece in enumerate(pieces)]
