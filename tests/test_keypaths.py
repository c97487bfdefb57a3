"""The core both YAML readers share: one error class, errors collected by key path."""

from parlschedd.config import ConfigError
from parlschedd.energy.cluster import ClusterError
from parlschedd.keypaths import Collector, KeyPathError, yaml_kind


def test_both_readers_raise_the_one_error_class():
    """A caller may catch either name, or KeyPathError for both; the text is the same."""
    for error in (ConfigError, ClusterError):
        exc = error("f.yaml", [("a.b", "must be x"), ("c", "is required")])
        assert isinstance(exc, KeyPathError) and isinstance(exc, ValueError)
        assert exc.source == "f.yaml" and exc.errors == [("a.b", "must be x"), ("c", "is required")]
        assert str(exc) == "f.yaml: a.b: must be x; c: is required"


def test_a_value_that_is_not_a_mapping_is_an_error_and_reads_as_empty():
    c = Collector()
    assert c.mapping({"k": 1}, "s") == {"k": 1} and c.errors == []
    assert c.mapping([1], "s") == {}
    assert c.errors == [("s", "must be a mapping, got a list")]


def test_every_unknown_key_is_an_error_naming_its_path_and_the_keys_expected():
    c = Collector()
    c.only_known({"a": 1, "b": 2, "zz": 3}, "s", {"a", "b", "c"})
    c.only_known({"top": 1}, "", {"s"})
    assert c.errors == [("s.zz", "unknown key; expected one of a, b, c"), ("top", "unknown key; expected one of s")]


def test_a_section_is_a_mapping_of_known_keys_and_the_top_level_is_named():
    c = Collector()
    assert c.section({"a": 1, "zz": 2}, "s", {"a"}) == {"a": 1, "zz": 2}
    assert c.section(5, "", {"a"}) == {}
    assert c.errors == [("s.zz", "unknown key; expected one of a"), ("(top level)", "must be a mapping, got the number 5")]


def test_what_a_node_is_is_said_in_yaml_s_words():
    """"got NoneType", "got dict": Python's names for what a user wrote as null or a mapping."""
    said = [yaml_kind(v) for v in (None, True, 3, 2.5, "x" * 50, {"a": 1}, [1])]
    assert said == ["nothing (null)", "true", "the number 3", "the number 2.5", f"the text {'x' * 40!r}", "a mapping",
                    "a list"]
