"""User-given regular expressions (config rules, ``attach --threads``), matched in
linear time.

They run against names and command lines that any local user can choose, so Python's
backtracking ``re`` would let one long cmdline and a pattern such as ``(a+)+$`` stall
the daemon. RE2 has no backtracking (and so no back-references or look-arounds).
"""

from __future__ import annotations

import re

import re2

Pattern = re2._Regexp

_QUIET = re2.Options()
_QUIET.log_errors = False  # an error is ours to report: RE2 would also print it on stderr, breaking JSON logs


class PatternError(ValueError):
    """A pattern RE2 cannot compile."""


def compile_pattern(text: str) -> Pattern:
    """Compile with RE2; Python's parser checks the syntax first (compiling never
    backtracks), so a pattern RE2 would read differently, e.g. a duplicate group name
    or an inverted repeat, is refused rather than taken."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise PatternError("not valid text: it holds a lone surrogate (\\ud800-\\udfff)") from None
    try:
        re.compile(text)
    except re.error as exc:
        raise PatternError(str(exc)) from None
    try:
        return re2.compile(text, _QUIET)
    except re2.error as exc:
        message = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise PatternError(f"{message} (patterns are RE2: no back-references or look-arounds)") from None
