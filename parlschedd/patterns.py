"""User-given regular expressions (config rules, ``attach --threads``), matched in
linear time.

They run against names and command lines that any local user can choose, so Python's
backtracking ``re`` would let one long cmdline and a pattern such as ``(a+)+$`` stall
the daemon. RE2 has no backtracking (and so no back-references or look-arounds).
"""

from __future__ import annotations

import re
import warnings

import re2

Pattern = re2._Regexp

_QUIET = re2.Options()
_QUIET.log_errors = False  # an error is ours to report: RE2 would also print it on stderr, breaking JSON logs


# Characters in a pattern. Its compile time grows with it (a client's 63 KB pattern
# held the daemon's loop for up to 1.8 s a request; 1024 characters compile in about
# 25 ms at worst), and the texts matched are short: a thread's name is 15 bytes, the
# command line a rule matches is cut at 4096.
MAX_PATTERN = 1024
# RE2's Unicode classes (\pL, \p{Greek}, \PN), which Python's parser does not know; any
# other escaped character, taken as it is
_ESCAPE = re.compile(r"\\(?:([pP])(?:\{[^}]*\}|[A-Za-z])|.)", re.DOTALL)


class PatternError(ValueError):
    """A pattern RE2 cannot compile."""


def compile_pattern(text: str) -> Pattern:
    """Compile with RE2; Python's parser checks the syntax first (compiling never
    backtracks), so a pattern RE2 would read differently, e.g. a duplicate group name
    or an inverted repeat, is refused rather than taken. It sees each of RE2's Unicode
    classes as one character of any kind, which it is to the pattern's shape."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise PatternError("not valid text: it holds a lone surrogate (\\ud800-\\udfff)") from None
    if len(text) > MAX_PATTERN:
        raise PatternError(f"{len(text)} characters long; at most {MAX_PATTERN}")
    try:
        with warnings.catch_warnings():  # "possible nested set" of RE2's [[:alpha:]], on stderr
            warnings.simplefilter("ignore")
            re.compile(_ESCAPE.sub(lambda m: "." if m.group(1) else m.group(0), text))
    except re.error as exc:
        raise PatternError(str(exc)) from None
    except RecursionError:  # Python's parser recurses per group: "(" * 900
        raise PatternError("groups nested too deeply") from None
    except OverflowError:  # a{4294967296}
        raise PatternError("a repeat count too large") from None
    try:
        return re2.compile(text, _QUIET)
    except re2.error as exc:
        message = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise PatternError(f"{message} (patterns are RE2: no back-references or look-arounds)") from None
