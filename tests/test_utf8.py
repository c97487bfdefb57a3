import pytest

from parlschedd.utf8 import NotUtf8, decode


def test_text_is_decoded_and_a_bom_dropped_only_when_asked():
    assert decode("période\n".encode()) == "période\n"
    assert decode(b"\xef\xbb\xbfnsp\n", bom=True) == "nsp\n" and decode(b"\xef\xbb\xbfnsp\n") == "\ufeffnsp\n"


def test_the_first_byte_that_is_not_utf8_is_named_with_its_line():
    """A file saved as Latin-1: its é (0xe9) on line 3, found by line, not offset."""
    with pytest.raises(NotUtf8) as e:
        decode("a: 1\nb: 2\n# caf".encode() + b"\xe9\n# \xff\n")
    assert (e.value.line, e.value.byte) == (3, 0xE9)
    assert str(e.value) == "not UTF-8 text (byte 0xe9); save the file as UTF-8"
