"""Atomic state files."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from parlschedd.host.state import StateNotOurs, lock_dir, read_state, write_state


def test_round_trip_private_and_no_leftovers(tmp_path: Path) -> None:
    path = tmp_path / "pinner.json"
    write_state(path, {"version": 1, "threads": {"5": {"start_time": 9}}})
    write_state(path, {"version": 1, "threads": {}})
    assert read_state(path) == {"version": 1, "threads": {}}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["pinner.json"]


def test_missing_file_is_no_state(tmp_path: Path) -> None:
    assert read_state(tmp_path / "absent.json") is None


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "pinner.json"
    write_state(path, {"ok": True})
    with pytest.raises(TypeError):
        write_state(path, {"bad": object()})
    assert read_state(path) == {"ok": True}
    assert [p.name for p in tmp_path.iterdir()] == ["pinner.json"]


def test_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    with pytest.raises(ValueError):
        read_state(path)


def test_written_through_no_link_and_always_ours(tmp_path: Path) -> None:
    """A link at the state file's path (put there by whoever could write in the state
    dir) is replaced, not written through to the file it names."""
    victim = tmp_path / "victim"
    victim.write_text("root only\n")
    (tmp_path / "state.json").symlink_to(victim)
    write_state(tmp_path / "state.json", {"version": 1})
    assert victim.read_text() == "root only\n"
    st = (tmp_path / "state.json").lstat()
    assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o600


def test_read_through_no_link_and_from_no_fifo(tmp_path: Path) -> None:
    """A link to a file of ours is not followed (whoever put it there chose what it
    leads to); a FIFO is not waited on."""
    write_state(tmp_path / "real.json", {"version": 1})
    (tmp_path / "state.json").symlink_to(tmp_path / "real.json")
    with pytest.raises(StateNotOurs, match=f"^a symbolic link \\(to {tmp_path / 'real.json'}\\), not followed$"):
        read_state(tmp_path / "state.json")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(StateNotOurs, match="^not a regular file$"):
        read_state(tmp_path / "fifo")


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a file to another user")
def test_read_only_from_our_own_file_that_no_one_else_may_write(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_state(path, {"version": 1})
    os.chown(path, 65534, 65534)
    with pytest.raises(StateNotOurs, match=r"^owned by uid 65534 \(nobody\), not by root: not written by this "
                                           r"daemon alone, not read$"):
        read_state(path)
    assert read_state(path, euid=65534) == {"version": 1}  # a daemon run as nobody reads it
    os.chown(path, 0, 0)
    path.chmod(0o622)
    with pytest.raises(StateNotOurs, match=r"^mode 0622, writable by its group and others: "):
        read_state(path)


def test_the_lock_is_taken_through_no_link(tmp_path: Path) -> None:
    """A link at the lock's path had the daemon truncate the file it names and write
    its pid there."""
    victim = tmp_path / "victim"
    victim.write_text("root only\n")
    (tmp_path / "lock").symlink_to(victim)
    with pytest.raises(OSError) as e:
        lock_dir(tmp_path)
    assert e.value.errno == errno.ELOOP and victim.read_text() == "root only\n"
