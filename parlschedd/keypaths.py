"""Reading a parsed YAML document with every error named by its key path.

The daemon's config (``parlschedd.config``) and the energy model's cluster description
(``parlschedd.energy.cluster``) are read the same way: a reader walks the document, notes
each problem as (key path, message), such as ``period_s: must be > 0, got 0``, and goes
on with a stand-in value, so that one run names every problem and a user can fix a file
in one go. Each reader subclasses :class:`Collector` with the typed getters its file
needs and raises its subclass of :class:`KeyPathError` at the end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class KeyPathError(ValueError):
    """A file that cannot be used; ``errors`` lists (key path, message) pairs."""

    def __init__(self, source: str, errors: list[tuple[str, str]]) -> None:
        self.source, self.errors = source, errors
        super().__init__(f"{source}: " + "; ".join(f"{k}: {m}" for k, m in errors))


class Collector:
    """The errors found so far in one document, each under its key path."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []

    def fail(self, path: str, message: str) -> None:
        self.errors.append((path, message))

    def mapping(self, value: Any, path: str) -> Mapping[str, Any]:
        """``value`` if it is a mapping; else an error and an empty mapping, so that the
        keys under ``path`` read as absent and the rest of the document is still read."""
        if isinstance(value, Mapping):
            return value
        self.fail(path, f"must be a mapping, got {type(value).__name__}")
        return {}
