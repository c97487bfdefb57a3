"""parlschedd/patterns.py: user regexes are refused with a reason, never an internal
error, and RE2 says nothing on stderr (the daemon's JSON logs go there)."""

from __future__ import annotations

import warnings

import pytest

from parlschedd.patterns import PatternError, compile_pattern


@pytest.mark.parametrize("text, reason", [
    ("\ud800", "lone surrogate"),               # valid JSON (\ud800), not encodable text
    ("(?=w)", "no back-references or look-arounds"),
    ("(a", "missing ), unterminated subpattern"),
    ("(" * 500 + ")" * 500, "groups nested too deeply"),  # Python's parser's RecursionError: an internal error
    ("x" * 1025, "1025 characters long; at most 1024"),  # a client's 63 KB pattern held the loop up to 1.8 s
    ("a{4294967296}", "a repeat count too large"),  # Python's OverflowError: an internal error
])
def test_a_pattern_that_cannot_be_compiled_is_refused_quietly(text: str, reason: str, capfd) -> None:
    with pytest.raises(PatternError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        compile_pattern(text)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_a_pattern_matches_in_linear_time() -> None:
    assert compile_pattern(r"^(a+)+$").search("a" * 100_000 + "b") is None


def test_re2s_unicode_classes_are_patterns_python_would_refuse() -> None:
    """The README says patterns are RE2: \\p{L} was refused with Python's "bad escape"."""
    assert compile_pattern(r"^\p{L}+$").search("héllo") and not compile_pattern(r"^\p{L}+$").search("h3")
    assert compile_pattern(r"[\pN\P{Greek}]").search("7")
    assert compile_pattern(r"\\p").search("\\p")  # an escaped backslash, then p: no class
    with pytest.raises(PatternError, match="redefinition of group name"):  # the shape still checked around one
        compile_pattern(r"(?P<a>\pL)(?P<a>x)")


def test_a_posix_class_is_taken_without_a_warning() -> None:
    """RE2 has [[:alpha:]]; Python's parser took it with a FutureWarning, printed on
    stderr, where the daemon's JSON logs go."""
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        assert compile_pattern("^[[:alpha:]]+$").search("abc")
    assert not warned
