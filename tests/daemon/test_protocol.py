"""Request parsing: any bytes in, a Request or a ProtocolError out, nothing else."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parlschedd.daemon.protocol import MAX_LINE, Framed, ProtocolError, clip, encode, lines, ok, parse_request


def parts(reply: bytes) -> list[bytes]:
    """``lines`` of one whole reply, as a client receives them."""
    return list(lines([reply]))


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


def joined(lines: list[bytes]) -> dict:
    """What a client makes of the parts: each a line of its own, their texts joined."""
    assert all(line.endswith(b"\n") and line.count(b"\n") == 1 and len(line) <= MAX_LINE for line in lines)
    replies = [json.loads(line) for line in lines]
    assert [r["more"] for r in replies] == [True] * (len(lines) - 1) + [False]
    assert all(r["ok"] is True and set(r) == {"ok", "part", "more"} and r["part"] for r in replies)
    return json.loads("".join(r["part"] for r in replies))


def test_a_reply_that_fits_is_sent_as_it_is():
    reply = ok(s="x" * (MAX_LINE - 20))
    assert len(reply) <= MAX_LINE and parts(reply) == [reply]


def test_a_long_reply_is_cut_into_lines_that_fit():
    threads = [{"tid": 1000 + i, "name": f"worker{i}", "cpu": i % 2, "utility": 1.5e9 + i} for i in range(3000)]
    reply = ok(targets=[{"pid": 1, "threads": threads}])
    assert len(reply) > 2 * MAX_LINE
    lines = parts(reply)
    assert len(lines) >= 3 and joined(lines) == json.loads(reply)


def test_text_that_doubles_when_escaped_still_fits():
    """Quotes and backslashes are the worst case: each piece doubles when sent as a
    string. Names may hold them, and non-ASCII, which ``encode`` escapes first."""
    reply = ok(names=['"\\' * 20000, "\u00e9\U0001f600\x00" * 5000])
    lines = parts(reply)
    assert max(len(line) for line in lines) > 0.9 * MAX_LINE, "the case meant: pieces near the limit"
    assert joined(lines) == json.loads(reply)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(), min_size=1, max_size=8), st.integers(1, 3 * MAX_LINE))
def test_any_reply_comes_back_whole(texts, pad):
    reply = ok(texts=texts, pad="p" * pad)
    lines = parts(reply)
    assert (len(lines) == 1 and lines[0] == reply) or joined(lines) == json.loads(reply)


def test_continue_takes_no_fields():
    assert parse_request(b'{"cmd": "continue"}').cmd == "continue"
    with pytest.raises(ProtocolError):
        parse_request(b'{"cmd": "continue", "pid": 3}')


def framed(head_fields: dict, tail_fields: dict) -> tuple[bytes, bytes]:
    """A reply cut around its last field of ``head_fields``, as status is."""
    head = b'{"ok":true,"head":' + encode(head_fields)[:-2]
    return head, b"}," + encode({"tail": tail_fields})[1:]


@pytest.mark.parametrize("threads", [3, 1200, 5000])
@pytest.mark.parametrize("name", ["worker", '"\\\u00e9'])
def test_a_framed_reply_is_the_same_text_with_its_middle(threads, name):
    head, tail = framed({"pid": 1}, {"threads": [{"tid": i, "name": name * 3} for i in range(threads)]})
    ready = Framed.of(head, tail)
    for age in (0.0, 12.345, 123456789.0):
        middle = b',"age":%.3f' % age
        whole = head + middle + tail
        lines = list(ready.lines(middle))
        assert lines == [whole] if len(whole) <= MAX_LINE else joined(lines) == json.loads(whole)
    assert len(ready.rest) == (0 if threads == 3 else len(lines) - 1), "all but the first part made once"


def test_a_framed_reply_with_a_huge_head_or_middle_is_still_cut_to_fit():
    head, tail = framed({"cpus": list(range(9000))}, {"x": "y" * 70000})
    middle = b',"age":"%s"' % (b"m" * 100)
    for h, m in ((head, b',"age":1'), (b'{"ok":true,"head":{"a":1', middle)):
        lines = list(Framed.of(h, tail).lines(m))
        assert joined(lines) == json.loads(h + m + tail)


def test_a_reply_made_of_chunks_is_pulled_only_as_far_as_the_part_asked_for():
    """A history's samples are encoded when their part is asked for, not all first."""
    pulled = []

    def chunks():
        yield b'{"ok":true,"samples":['
        for i in range(1000):
            pulled.append(i)
            yield (b"," if i else b"") + encode({"t": i, "x": "y" * 1000})[:-1]
        yield b"]}\n"

    made = lines(chunks())
    first = next(made)
    assert len(first) <= MAX_LINE and len(pulled) < 70, f"{len(pulled)} samples encoded for one part"
    rest = list(made)
    assert len(pulled) == 1000 and len(rest) > 25
    assert joined([first, *rest]) == json.loads(b"".join(chunks()))


@pytest.mark.parametrize("size", [MAX_LINE - 3, MAX_LINE - 2, MAX_LINE - 1, MAX_LINE, 2 * 32704 + 10])
def test_the_edges_of_a_line(size):
    """A line of MAX_LINE bytes with its newline fits; a byte more does not."""
    reply = ok(s="x" * (size - len(ok(s=""))))
    assert len(reply) == size
    got = parts(reply)
    assert got == [reply] if size <= MAX_LINE else joined(got) == json.loads(reply)


def test_error_messages_clip_what_the_request_sent():
    with pytest.raises(ProtocolError) as e:
        parse_request(json.dumps({"cmd": "\u00e9" * 30000}, ensure_ascii=False).encode())
    assert len(str(e.value)) < 300 and "(30002 characters)" in str(e.value)
    assert clip("short") == "short"
