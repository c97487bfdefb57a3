"""Byte-level fuzzer (atheris mutations) against the live socket of a real daemon.

Run by fuzz/run.py, which has it drop to uid nobody (PARLSCHED_FUZZ_UID) after start, against a daemon that fuzz/run.py
started as root; the socket path comes from PARLSCHED_FUZZ_SOCKET. The daemon runs in
another process, so libFuzzer gets no coverage feedback from it: this is mutation of a
seed corpus of valid and invalid requests guided only by the client-side code, not by
the daemon's branches.

Each input: connect, send the bytes (in up to three chunks, as the first byte says),
half-close, read every reply until EOF. Properties: the daemon answers within 5 s,
every reply line is a JSON object with ok true or ok false plus error.code and
error.message strings, and there is at most one reply per request line plus one per
over-long line. Inputs containing a line that parses as a valid attach, detach or
reload are not sent (defence in depth on a shared machine: the peer is nobody, so
attach/detach of other users' processes is refused anyway).
"""

import json
import signal  # noqa: F401  (atheris.Fuzz imports it lazily; the stdlib is unreadable after setuid)
import os
import socket
import sys

try:
    import atheris
except ImportError:  # fuzz/run.py's fallback imports test_one_input only
    atheris = None

from parlschedd.daemon import protocol

SOCKET = os.environ.get("PARLSCHED_FUZZ_SOCKET", "")
SAFE = {"ping", "status", "continue"}


def unsafe(data: bytes) -> bool:
    for line in data.split(b"\n"):
        try:
            request = protocol.parse_request(line)
        except protocol.ProtocolError:
            continue
        if request.cmd not in SAFE:
            return True
    return False


def exchange(chunks: list[bytes]) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(SOCKET)
        for c in chunks:
            s.sendall(c)
        s.shutdown(socket.SHUT_WR)
        out = bytearray()
        while chunk := s.recv(1 << 20):
            out += chunk
    return bytes(out)


def test_one_input(data: bytes) -> None:
    if not data:
        return
    split, body = data[0], data[1:]
    if unsafe(body):
        return
    a, b = (split % 7) * len(body) // 7, (split // 7 % 7) * len(body) // 7
    a, b = sorted((a, b))
    chunks = [body[:a], body[a:b], body[b:]]
    try:
        reply = exchange([c for c in chunks if c])
    except socket.timeout:
        raise AssertionError("daemon did not answer within 5 s") from None
    except (ConnectionResetError, BrokenPipeError):
        return  # the daemon may close on us (not expected below 256 clients)
    lines = reply.split(b"\n")
    assert lines[-1] == b"", f"reply not newline-terminated: {reply[-80:]!r}"
    max_replies = body.count(b"\n") + len(body) // protocol.MAX_LINE + 1
    assert len(lines) - 1 <= max_replies, (len(lines) - 1, max_replies)
    for line in lines[:-1]:
        obj = json.loads(line)
        assert isinstance(obj, dict) and isinstance(obj.get("ok"), bool), line[:200]
        if not obj["ok"]:
            err = obj["error"]
            assert isinstance(err["code"], str) and isinstance(err["message"], str), line[:200]
            assert err["code"] != "internal", f"internal error for input {body[:200]!r}: {err}"


def main() -> None:
    if not SOCKET:
        sys.exit("set PARLSCHED_FUZZ_SOCKET (fuzz/run.py does)")
    uid = os.environ.get("PARLSCHED_FUZZ_UID")
    if uid is not None:  # drop to the unprivileged peer once the interpreter is loaded
        os.setgroups([])
        os.setgid(int(uid))
        os.setuid(int(uid))
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
