"""parlschedd/patterns.py: user regexes are refused with a reason, never an internal
error, and RE2 says nothing on stderr (the daemon's JSON logs go there)."""

from __future__ import annotations

import pytest

from parlschedd.patterns import PatternError, compile_pattern


@pytest.mark.parametrize("text, reason", [
    ("\ud800", "lone surrogate"),               # valid JSON (\ud800), not encodable text
    ("(?=w)", "no back-references or look-arounds"),
    ("(a", "missing ), unterminated subpattern"),
])
def test_a_pattern_that_cannot_be_compiled_is_refused_quietly(text: str, reason: str, capfd) -> None:
    with pytest.raises(PatternError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        compile_pattern(text)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_a_pattern_matches_in_linear_time() -> None:
    assert compile_pattern(r"^(a+)+$").search("a" * 100_000 + "b") is None
