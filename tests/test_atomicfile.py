"""parlschedd/atomicfile.py: replaced whole or not at all, on real files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from parlschedd.atomicfile import replace_text


def test_replaces_the_file_and_leaves_nothing_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "out.csv"
    path.write_text("old\n")
    replace_text(path, "new,\r\nline\n")
    assert path.read_bytes() == b"new,\r\nline\n"  # written as given: csv's line ends are kept
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_a_write_that_fails_half_way_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    path.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        replace_text(path, "a" * 100_000 + "\ud800")  # a lone surrogate: encoding fails, after the temporary file was made
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_modes_follow_the_umask_unless_given(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        replace_text(tmp_path / "a", "x")
        replace_text(tmp_path / "b", "x", mode=0o600)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "b").stat().st_mode) == 0o600


def test_a_folder_that_cannot_hold_it_is_named_by_the_file_asked_for(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as e:
        replace_text(tmp_path / "no" / "out.json", "x")
    assert e.value.filename == str(tmp_path / "no" / "out.json")
