"""Request parsing: any bytes in, a Request or a ProtocolError out, nothing else."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parlschedd.daemon.protocol import MAX_LINE, ProtocolError, encode, parse_request


def test_valid_requests():
    r = parse_request(b'{"cmd": "attach", "pid": 12, "observe": true}')
    assert r.cmd == "attach" and r.args == {"pid": 12, "observe": True}
    assert parse_request(b'{"cmd": "status", "pid": null}').args == {}


@pytest.mark.parametrize("line", [b"", b"{", b"null", b'"x"', b'{"cmd": 1}', b'{"cmd": "detach"}',
                                  b'{"cmd": "detach", "pid": 0}', b'{"cmd": "detach", "pid": 1e3}',
                                  b"x" * (MAX_LINE + 1)])
def test_invalid_requests(line):
    with pytest.raises(ProtocolError) as e:
        parse_request(line)
    assert e.value.code == "bad_request"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_arbitrary_bytes_never_crash(data):
    try:
        parse_request(data)
    except ProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["ping", "attach", "detach", "status", "reload", "nope"]),
       st.dictionaries(st.sampled_from(["pid", "observe", "threads", "descendants", "x"]), json_values))
def test_arbitrary_objects_are_parsed_or_refused(cmd, fields):
    line = json.dumps({"cmd": cmd, **fields}).encode()
    try:
        r = parse_request(line)
    except ProtocolError as e:
        assert e.code == "bad_request" and str(e)
    else:
        assert r.cmd == cmd
        encode({"ok": True, **r.args})


def test_encode_is_one_line():
    assert encode({"ok": True, "s": "a\nb"}).count(b"\n") == 1
