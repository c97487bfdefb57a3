"""Reading a parsed YAML document with every error named by its key path.

The daemon's config (``parlschedd.config``) and the energy model's cluster description
(``parlschedd.energy.cluster``) are read the same way: a reader walks the document, notes
each problem as (key path, message), such as ``period_s: must be > 0, got 0``, and goes
on with a stand-in value, so that one run names every problem and a user can fix a file
in one go. Each reader subclasses :class:`Collector` with the typed getters its file
needs and raises its subclass of :class:`KeyPathError` at the end.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

import yaml

# YAML 1.2's decimal numbers (its core schema). PyYAML follows YAML 1.1, whose floats need
# a dot, and a sign in an exponent, and so loads 1e-3, 2.1e9 and 706.0e6 as text.
_YAML12_NUMBER = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")


class Octal(int):
    """An integer written in YAML 1.1's octal form (0660), as a file mode is."""


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is an error naming the
    mapping's key path and both lines (PyYAML keeps the last silently, and the error
    then blamed the value not written), an octal integer remembers that it was
    written so (``Octal``), and YAML 1.1's base-60 numbers (``1:30``) are text. Both
    files read with key paths load through it (``load_yaml``), so that they refuse the
    same documents."""

    def construct_document(self, node: yaml.Node) -> Any:
        _refuse_repeated_keys(self, node)
        return super().construct_document(node)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int | str:
        if ":" in node.value:  # YAML 1.1's base 60 (1:30 is 90); YAML 1.2 reads it as text
            return self.construct_scalar(node)
        try:
            value = super().construct_yaml_int(node)
        except ValueError as exc:  # more digits than int() converts (sys.get_int_max_str_digits())
            raise yaml.constructor.ConstructorError(None, None, f"an integer of {len(node.value)} digits; no "
                                                    "number here is that large", node.start_mark) from exc
        return Octal(value) if re.fullmatch(r"[-+]?0[0-7_]+", str(node.value)) else value

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float | str:
        if ":" in node.value:  # base 60, as for integers
            return self.construct_scalar(node)
        return super().construct_yaml_float(node)


UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", UniqueKeyLoader.construct_yaml_int)
UniqueKeyLoader.add_constructor("tag:yaml.org,2002:float", UniqueKeyLoader.construct_yaml_float)


class NestedTooDeeply(yaml.YAMLError):
    """A document of lists or mappings nested hundreds deep, which the parser's
    recursion cannot take: a RecursionError's traceback from a file of 1 KB."""

    problem = "nested too deeply (lists or mappings inside one another hundreds of levels down)"
    problem_mark = None


def load_yaml(text: str) -> Any:
    """``text`` parsed by ``UniqueKeyLoader``; yaml.YAMLError (with ``problem_mark``, the
    line) for a document that is not valid YAML or repeats a key, NestedTooDeeply for
    one nested beyond the parser's recursion."""
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except RecursionError:
        raise NestedTooDeeply() from None


def _refuse_repeated_keys(loader: yaml.SafeLoader, root: yaml.Node) -> None:
    """ConstructorError at the second of two equal keys of one mapping, saying where the
    mapping is (``nodes[0].devices[1]: 'tdp_w' is given twice (first on line 12)``).
    Walked on the composed nodes, before construction, which knows no key paths."""
    seen: set[int] = set()  # a node reached again through an alias (or its own anchor)
    todo: list[tuple[yaml.Node, str]] = [(root, "")]
    while todo:
        node, path = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            todo.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))
        if not isinstance(node, yaml.MappingNode):
            continue
        first: dict[Any, yaml.Mark] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *anchor": the base class merges it,
                todo.append((value_node, path))  # and keys written beside it override
                continue
            key = loader.construct_object(key_node)
            try:
                mark = first.setdefault(key, key_node.start_mark)
            except TypeError:  # an unhashable key: the base class says so
                continue
            if mark is not key_node.start_mark:
                where = f"{path}: " if path else ""
                raise yaml.constructor.ConstructorError(
                    None, None, f"{where}{key!r} is given twice (first on line {mark.line + 1}); keep one",
                    key_node.start_mark)
            todo.append((value_node, f"{path}.{key}" if path else str(key)))


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
        keys under ``path`` ("" the top level) read as absent and the rest of the
        document is still read."""
        if isinstance(value, Mapping):
            return value
        self.fail(path or "(top level)", f"must be a mapping, got {yaml_kind(value)}")
        return {}

    def section(self, value: Any, path: str, known: Collection[str]) -> Mapping[str, Any]:
        """``value`` read as the mapping at ``path`` whose keys are ``known``: ``mapping``
        then ``only_known``, as each section of a file is read."""
        section = self.mapping(value, path)
        self.only_known(section, path, known)
        return section

    def only_known(self, section: Mapping[Any, Any], path: str, known: Collection[str]) -> None:
        """An error for every key of ``section`` (at ``path``, "" the top level) not in
        ``known``: a misspelt key would otherwise be ignored, and its value with it."""
        for key in section:
            if key not in known:
                self.fail(f"{path}.{key}" if path else str(key), f"unknown key; expected one of {', '.join(sorted(known))}")


def yaml_kind(value: Any) -> str:
    """What ``value`` is in YAML's words, not Python's (NoneType, str, dict), for an
    error that wanted another kind of node there."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the text {value[:40]!r}"
    if isinstance(value, Mapping):
        return "a mapping"
    return "a list" if isinstance(value, list) else type(value).__name__


def yaml12_number(value: Any) -> Any:
    """``value``, or the float it is where it is text that YAML 1.2 reads as a number.

    Nobody who writes ``eps: 1e-3`` means text, and YAML 1.2 tools read it as a number;
    both readers pass each real-number field through this, so they accept the same
    numbers. The document is parsed already, so a quoted ``'1e-3'`` is a number too: in a
    field that takes only numbers it can mean nothing else. Other text (``fast``, ``nan``,
    ``1_000``) is left for the field's own error.
    """
    if isinstance(value, str) and _YAML12_NUMBER.fullmatch(value):
        return float(value)
    return value
