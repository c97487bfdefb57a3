"""Byte-level coverage-guided fuzzer (atheris/libFuzzer) for protocol.parse_request.

Property: for any bytes, parse_request returns a Request whose command and fields obey
the schema (and whose args encode back to one JSON line), or raises ProtocolError with
code bad_request and a message; it never raises anything else.

    .venv/bin/python fuzz/fuzz_protocol.py -max_total_time=30 fuzz/corpus/protocol
"""

import sys

import atheris

with atheris.instrument_imports(include=["parlschedd.daemon.protocol"]):
    from parlschedd.daemon import protocol


def test_one_input(data: bytes) -> None:
    try:
        request = protocol.parse_request(data)
    except protocol.ProtocolError as exc:
        if exc.code != "bad_request" or not str(exc):
            raise AssertionError(f"unstructured error {exc.code!r}: {exc!r}") from None
        return
    schema = protocol.COMMANDS[request.cmd]
    for key, value in request.args.items():
        kind, _ = schema[key]
        assert isinstance(value, kind), (key, value)
        if kind is int:
            assert not isinstance(value, bool) and 0 < value < 2**31, (key, value)
    assert all(k in request.args for k, (_, req) in schema.items() if req)
    line = protocol.encode({"ok": True, **request.args})
    assert line.count(b"\n") == 1 and line.endswith(b"\n")


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
