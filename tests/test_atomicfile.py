"""parlschedd/atomicfile.py: replaced whole or not at all, on real files."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from parlschedd.atomicfile import replace_bytes, replace_own, replace_text


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
        replace_text(path, "a" * 100_000 + "\ud800")  # a lone surrogate: encoding fails
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_new_files_mode_follows_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        replace_text(tmp_path / "a", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o640


def test_a_folder_that_cannot_hold_it_is_named_by_the_file_asked_for(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as e:
        replace_text(tmp_path / "no" / "out.json", "x")
    assert e.value.filename == str(tmp_path / "no" / "out.json")


def test_a_replaced_file_keeps_its_mode_and_owner(tmp_path: Path) -> None:
    """A 0600 file came back 0644, and one of another user's came back root's (as
    under sudo parlschedctl model measure --out their.csv)."""
    path = tmp_path / "theirs.csv"
    path.write_text("old")
    path.chmod(0o600)
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
    replace_text(path, "new")
    st = path.stat()
    assert path.read_text() == "new" and stat.S_IMODE(st.st_mode) == 0o600
    if os.geteuid() == 0:
        assert (st.st_uid, st.st_gid) == (65534, 65534)


def test_a_link_leads_to_the_file_replaced_and_stays(tmp_path: Path) -> None:
    (tmp_path / "real.json").write_text("old")
    (tmp_path / "link.json").symlink_to("real.json")
    replace_text(tmp_path / "link.json", "new")
    assert (tmp_path / "link.json").is_symlink() and (tmp_path / "real.json").read_text() == "new"


def test_replace_own_replaces_a_link_and_leaves_the_file_it_led_to(tmp_path: Path) -> None:
    """The daemon's state file: a link someone put at its path led replace_bytes to
    write the state into the file it named (a root-only file, its owner kept)."""
    victim = tmp_path / "victim"
    victim.write_text("root's\n")
    victim.chmod(0o600)
    (tmp_path / "state.json").symlink_to(victim)
    replace_own(tmp_path / "state.json", b"{}", mode=0o600)
    assert victim.read_text() == "root's\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert not (tmp_path / "state.json").is_symlink() and (tmp_path / "state.json").read_bytes() == b"{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "victim"]


def test_replace_own_neither_writes_to_a_fifo_nor_keeps_another_users_file_theirs(tmp_path: Path) -> None:
    """A FIFO at the path would block the writer (or feed a reader); a file of
    another user's would stay theirs, and so writable by them, after each write."""
    os.mkfifo(tmp_path / "fifo")
    replace_own(tmp_path / "fifo", b"x", mode=0o600)  # does not block: no open of the FIFO
    assert stat.S_ISREG((tmp_path / "fifo").lstat().st_mode) and (tmp_path / "fifo").read_bytes() == b"x"
    theirs = tmp_path / "theirs"
    theirs.write_text("old")
    theirs.chmod(0o666)
    if os.geteuid() == 0:
        os.chown(theirs, 65534, 65534)
    replace_own(theirs, b"new", mode=0o600)
    st = theirs.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (os.geteuid(), os.getegid(), 0o600)


def test_replace_own_does_not_replace_a_directory_and_names_the_path(tmp_path: Path) -> None:
    (tmp_path / "state.json" / "inside").mkdir(parents=True)
    with pytest.raises(IsADirectoryError) as e:
        replace_own(tmp_path / "state.json", b"x", mode=0o600)
    assert e.value.filename == str(tmp_path / "state.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]  # no temporary file left


def test_what_is_not_a_regular_file_is_written_to_not_replaced(tmp_path: Path) -> None:
    """--out /dev/null as root replaced the device with a regular file. A FIFO stands
    in for it here: a regression must not cost the test machine its /dev/null."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    replace_text(fifo, "through the pipe")
    reader.join(5)
    assert got == ["through the pipe"] and stat.S_ISFIFO(fifo.stat().st_mode)


@pytest.mark.skipif(not os.access("/dev/full", os.W_OK), reason="no writable /dev/full")
def test_a_device_that_refuses_the_write_is_named() -> None:
    """/dev/full fails on close with ENOSPC, an OSError without a file name: the CLI
    said "cannot write: No space left on device", naming nothing."""
    with pytest.raises(OSError) as e:
        replace_bytes("/dev/full", b"x" * 100_000)
    assert e.value.filename == "/dev/full" and e.value.strerror == "No space left on device"


# replace_bytes in a process whose files may not grow past 4 KiB (RLIMIT_FSIZE): the
# write of the temporary file fails with EFBIG, as a full disk fails it with ENOSPC
WRITE_CUT_SHORT = """
import json, resource, sys
from parlschedd.atomicfile import replace_bytes
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
try:
    replace_bytes(sys.argv[1], b"x" * 100_000)
except OSError as exc:
    print(json.dumps({"errno": exc.errno, "filename": exc.filename}))
"""


def _write_fails(path: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", WRITE_CUT_SHORT, str(path)], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).parents[1])  # this checkout's parlschedd
    return json.loads(done.stdout)


def _replace_fails(path: Path) -> dict:
    """rename(2) onto an immutable file (chattr +i) fails with EPERM; the flag is
    taken off again, so that the test's directory can be removed."""
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
        pytest.skip("cannot make a file immutable here (chattr +i needs CAP_LINUX_IMMUTABLE and ext4, xfs, ...)")
    try:
        replace_text(path, "new")
    except OSError as exc:
        return {"errno": exc.errno, "filename": exc.filename}
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    return {}


@pytest.mark.parametrize("fail, code", [(_write_fails, errno.EFBIG), (_replace_fails, errno.EPERM)],
                         ids=["the write", "the replace"])
def test_a_failed_write_or_replace_leaves_no_temporary_file_and_names_the_file(tmp_path: Path, fail, code) -> None:
    """When writing the temporary file fails (a full disk; here a file size limit) or
    renaming it over the file does (here an immutable file), the old file is kept, the
    temporary file is removed, not left beside it at each failure, and the error is
    named by the file asked for, which the daemon's log and the CLI's message show,
    not by the temporary file (a failed rename) or by nothing (a failed write)."""
    path = tmp_path / "out.json"
    path.write_text("old")
    assert fail(path) == {"errno": code, "filename": str(path)}
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.json"]
