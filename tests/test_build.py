"""The code's identity (parlschedd/build.py), on package trees made here."""

from __future__ import annotations

from pathlib import Path

from parlschedd.build import PACKAGE, build_id, other_build


def package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_same_sources_are_the_same_build_and_any_change_another(tmp_path):
    files = {"__init__.py": "", "daemon/engine.py": "x = 1\n"}
    a = build_id(package(tmp_path / "a", files))
    assert a is not None and len(a) == 12 and a == build_id(package(tmp_path / "b", files))
    assert build_id(package(tmp_path / "c", {**files, "daemon/engine.py": "x = 2\n"})) != a  # a line changed
    assert build_id(package(tmp_path / "d", {**files, "daemon/new.py": ""})) != a  # a module added
    assert build_id(package(tmp_path / "e", {"__init__.py": "", "daemon/other.py": "x = 1\n"})) != a  # moved
    assert build_id(package(tmp_path / "f", {**files, "daemon/__pycache__/engine.cpython-311.py": "junk"})) == a


def test_code_without_sources_is_told_apart_from_nothing(tmp_path):
    assert build_id(package(tmp_path, {"data.txt": "x"})) is None
    assert not other_build(None) and not other_build(123)  # a daemon too old to say, or a bad field
    assert not other_build(build_id(PACKAGE)) and other_build("0" * 12)
