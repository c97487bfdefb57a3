"""cgroup parsing on fake v1, v2 and hybrid trees, and a smoke test on this host."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from parlschedd.host import cgroups
from parlschedd.host.cgroups import Membership
from parlschedd.host.errors import HostError, ThreadGone
from tests.conftest import CPUSET, needs_root, own_cgroup


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def v2_tree(root: Path) -> None:
    write(root / "cgroup.controllers", "cpuset cpu io memory pids\n")
    write(root / "cpuset.cpus.effective", "0-7\n")
    write(root / "app.slice" / "cgroup.procs", "10\n11\n")
    write(root / "app.slice" / "cpuset.cpus.effective", "2-3\n")
    write(root / "app.slice" / "inner" / "cgroup.procs", "12\n")


def v1_tree(root: Path) -> None:
    write(root / "cpuset" / "cpuset.cpus", "0-7\n")
    write(root / "cpuset" / "cpuset.effective_cpus", "0-7\n")
    write(root / "cpuset" / "batch" / "cpuset.cpus", "4-5\n")  # a kernel without effective_cpus
    write(root / "cpuset" / "batch" / "cgroup.procs", "30\n31\n")
    write(root / "systemd" / "user.slice" / "cgroup.procs", "40\n")
    write(root / "cpu,cpuacct" / "cgroup.procs", "1\n")
    (root / "cpu").symlink_to("cpu,cpuacct")


def proc_cgroup(proc: Path, task_id: int, text: str) -> None:
    write(proc / str(task_id) / "cgroup", text)


def test_parse_proc_cgroup() -> None:
    text = "12:cpuset:/batch\n1:name=systemd:/user.slice/a:b\n2:cpu,cpuacct:/\n0::/app.slice\n\n"
    assert cgroups.parse_proc_cgroup(text) == [
        Membership(12, ("cpuset",), "/batch"),
        Membership(1, ("name=systemd",), "/user.slice/a:b"),
        Membership(2, ("cpu", "cpuacct"), "/"),
        Membership(0, (), "/app.slice"),
    ]
    assert [m.is_v2 for m in cgroups.parse_proc_cgroup(text)] == [False, False, False, True]


def test_v2_procs_and_inherited_cpuset(tmp_path: Path) -> None:
    v2_tree(tmp_path)
    root = str(tmp_path)
    assert cgroups.cgroup_procs("/app.slice", root=root) == [10, 11, 12], "and the cgroups below"
    assert cgroups.cgroup_procs("/app.slice/inner", root=root) == [12]
    assert cgroups.cgroup_procs("/", root=root) == [10, 11, 12]
    assert cgroups.cgroup_procs("/gone.slice", root=root) == []
    assert cgroups.cpus_file("/app.slice", root=root) == tmp_path / "app.slice" / "cpuset.cpus.effective"
    assert cgroups.cpus_file("/app.slice/inner", root=root) == tmp_path / "app.slice" / "cpuset.cpus.effective"
    assert cgroups.cpus_file("/", root=root) == tmp_path / "cpuset.cpus.effective"


def test_v1_procs_and_cpusets(tmp_path: Path) -> None:
    v1_tree(tmp_path)
    root = str(tmp_path)
    assert cgroups.cgroup_procs("/batch", ("cpuset",), root) == [30, 31]
    assert cgroups.cgroup_procs("/user.slice", ("name=systemd",), root) == [40]
    assert cgroups.cgroup_procs("/", ("cpu", "cpuacct"), root) == [1]
    assert cgroups.cgroup_procs("/", ("cpu",), root) == [1]  # through the symlink
    assert cgroups.cpus_file("/batch", ("cpuset",), root) == tmp_path / "cpuset" / "batch" / "cpuset.cpus"
    assert cgroups.cpus_file("/", ("cpuset",), root) == tmp_path / "cpuset" / "cpuset.effective_cpus"
    with pytest.raises(HostError):
        cgroups.cgroup_procs("/", ("memory",), root)
    with pytest.raises(HostError):
        cgroups.cgroup_procs("/", (), root)  # no v2 hierarchy on a pure v1 host


def test_paths_cannot_escape_the_hierarchy(tmp_path: Path) -> None:
    v2_tree(tmp_path / "cg")
    write(tmp_path / "cgroup.procs", "666\n")  # outside the cgroup root
    root = str(tmp_path / "cg")
    for path in ("../../app.slice", "/../"):  # refused: never the parent (666), nor a cgroup inside of that name
        with pytest.raises(HostError, match="outside"):
            cgroups.cgroup_procs(path, root=root)


def test_task_cpus_on_hybrid_prefers_the_v1_cpuset(tmp_path: Path) -> None:
    root, proc = tmp_path / "cg", tmp_path / "proc"
    v1_tree(root)
    write(root / "unified" / "cgroup.controllers", "\n")
    proc_cgroup(proc, 30, "3:cpuset:/batch\n1:name=systemd:/user.slice\n0::/user.slice\n")
    proc_cgroup(proc, 40, "1:name=systemd:/user.slice\n0::/user.slice\n")
    assert cgroups.task_cpus(30, str(root), str(proc)) == frozenset({4, 5})
    assert cgroups.task_cpus(40, str(root), str(proc)) is None  # v2 without cpuset
    with pytest.raises(ThreadGone):
        cgroups.task_cpus(99, str(root), str(proc))


def test_task_cpus_on_v2(tmp_path: Path) -> None:
    root, proc = tmp_path / "cg", tmp_path / "proc"
    v2_tree(root)
    proc_cgroup(proc, 12, "0::/app.slice/inner\n")
    assert cgroups.task_cpus(12, str(root), str(proc)) == frozenset({2, 3})


@pytest.mark.parametrize("path", ["/../../app.slice", "/..", "/app.slice/../../x"])
def test_a_cgroup_outside_the_daemons_namespace_is_no_cgroup_here(tmp_path: Path, path: str) -> None:
    """A daemon in a private cgroup namespace (a container's, Docker's default on v2)
    sees a process outside it as /../../app.slice: with the .. dropped it was read as
    the namespace's own app.slice, another cgroup's CPUs (2-3, not the process's), or
    as the root's for /.. (every CPU of the container). Its cpuset is unknown here."""
    root, proc = tmp_path / "cg", tmp_path / "proc"
    v2_tree(root)
    proc_cgroup(proc, 50, f"0::{path}\n")
    with pytest.raises(HostError, match="outside the daemon's cgroup namespace"):
        cgroups.task_cpus(50, str(root), str(proc))
    with pytest.raises(HostError, match="outside"):
        cgroups.CpusetReader(str(root), str(proc))(50)
    assert cgroups.cgroup_dir("/app.slice/inner/..", (), str(root)) == root / "app.slice"  # inside: as before


def test_the_cpuset_reader_finds_a_file_once_and_follows_changes(tmp_path: Path) -> None:
    """The daemon reads each target's cpuset every rescan_s: the file is found by a walk
    of the hierarchy once, then only read, until the process moves to another cgroup."""
    root, proc = tmp_path / "cg", tmp_path / "proc"
    v2_tree(root)
    proc_cgroup(proc, 12, "0::/app.slice/inner\n")
    read = cgroups.CpusetReader(str(root), str(proc))
    assert read(12) == cgroups.task_cpus(12, str(root), str(proc)) == frozenset({2, 3})
    write(root / "app.slice" / "cpuset.cpus.effective", "2\n")  # the cpuset narrowed: read again
    (root / "cgroup.controllers").unlink()  # the hierarchy can no longer be walked: the file is not looked for
    assert read(12) == frozenset({2})
    write(root / "cgroup.controllers", "cpuset\n")
    proc_cgroup(proc, 12, "0::/\n")  # moved to the root
    assert read(12) == frozenset(range(8))
    with pytest.raises(ThreadGone):
        read(99)


def test_the_cpuset_reader_looks_again_for_a_nearer_file_and_a_gone_one(tmp_path: Path) -> None:
    """cgroup v2: the controller enabled on a nearer ancestor (systemd's AllowedCPUs=)
    gives a process a nearer file without a move; seen within REFIND_EVERY checks. A
    file gone (the controller left that cgroup) is looked for again at once."""
    root, proc = tmp_path / "cg", tmp_path / "proc"
    v2_tree(root)
    proc_cgroup(proc, 12, "0::/app.slice/inner\n")
    read = cgroups.CpusetReader(str(root), str(proc))
    assert read(12) == frozenset({2, 3})
    write(root / "app.slice" / "inner" / "cpuset.cpus.effective", "3\n")
    assert [read(12) for _ in range(read.REFIND_EVERY + 1)][-1] == frozenset({3})
    (root / "app.slice" / "inner" / "cpuset.cpus.effective").unlink()
    assert read(12) == frozenset({2, 3})


def test_the_cpuset_reader_forgets_processes_gone(tmp_path: Path) -> None:
    """It kept an entry for every process ever attached, exited too, up to KEPT (about
    1 MB); those gone are forgotten when a process it does not know is asked about."""
    root, proc = tmp_path / "cg", tmp_path / "proc"
    v2_tree(root)
    read = cgroups.CpusetReader(str(root), str(proc))
    for pid in (12, 13, 14):
        proc_cgroup(proc, pid, "0::/app.slice/inner\n")
        assert read(pid) == frozenset({2, 3})
    shutil.rmtree(proc / "12")
    shutil.rmtree(proc / "13")
    assert read(14) == frozenset({2, 3}) and len(read._files) == 3  # a known one: no sweep
    proc_cgroup(proc, 15, "0::/app.slice/inner\n")
    assert read(15) == frozenset({2, 3}) and sorted(read._files) == [14, 15]


def test_a_cgroup_path_too_long_for_the_kernel_is_a_host_error(tmp_path: Path) -> None:
    """exists() raised the OSError (ENAMETOOLONG) through the daemon's rescan, for
    every target, while one sat in such a cgroup (a delegated user can make one)."""
    root, proc = tmp_path / "cg", tmp_path / "proc"
    v2_tree(root)
    proc_cgroup(proc, 12, "0::/" + "/".join(["d" * 200] * 25) + "\n")
    with pytest.raises(HostError):
        cgroups.task_cpus(12, str(root), str(proc))
    with pytest.raises(HostError):
        cgroups.CpusetReader(str(root), str(proc))(12)


@pytest.mark.parametrize("name", ["job\rx", "a\x1cUid:b", "c\x0bd\u2028e"], ids=repr)
def test_a_cgroup_named_with_any_character_but_a_newline_is_read(tmp_path: Path, name: str) -> None:
    """The kernel refuses only \\n in a cgroup's name (cgroup_mkdir): a \\r, \\x1c or
    \\v was a line end to str.splitlines(), and every reader of such a cgroup's tasks
    raised ValueError, through the daemon's pins, restores and stop."""
    root, proc = tmp_path / "cg", tmp_path / "proc"
    v2_tree(root)
    write(root / "app.slice" / name / "cpuset.cpus.effective", "3\n")
    proc_cgroup(proc, 12, f"0::/app.slice/{name}\n")
    assert cgroups.memberships(12, str(proc)) == [Membership(0, (), f"/app.slice/{name}")]
    assert cgroups.task_cpus(12, str(root), str(proc)) == frozenset({3})
    assert cgroups.CpusetReader(str(root), str(proc))(12) == frozenset({3})


def test_a_cgroup_whose_name_is_not_utf8_is_its_own_not_its_parent(tmp_path: Path) -> None:
    """Decoded with backslashreplace, b"j\\xffx" named no directory, and its parent's
    wider cpuset was read instead (pins the kernel refuses, a mask recorded as the
    thread's own)."""
    root, proc = tmp_path / "cg", tmp_path / "proc"
    v1_tree(root)
    odd = os.fsencode(root / "cpuset" / "batch") + b"/j\xffx"
    os.mkdir(odd)
    with open(odd + b"/cpuset.cpus", "w") as f:
        f.write("5\n")
    (proc / "30").mkdir(parents=True)
    (proc / "30" / "cgroup").write_bytes(b"4:cpuset:/batch/j\xffx\n")
    assert cgroups.task_cpus(30, str(root), str(proc)) == frozenset({5})
    assert cgroups.CpusetReader(str(root), str(proc))(30) == frozenset({5})


@needs_root
def test_a_real_cpuset_named_with_a_carriage_return_and_a_byte_not_utf8(tmp_path: Path) -> None:
    """The same on this host's cgroup v1 cpuset, with a process of its own in it."""
    if not (CPUSET / "cpuset.cpus").exists():
        pytest.skip("no cgroup v1 cpuset hierarchy")
    with own_cgroup(CPUSET, cpus="0", suffix=" j\rx\x1c" + os.fsdecode(b"\xff")) as group:
        proc = subprocess.Popen(["sleep", "30"])
        try:
            (group / "cgroup.procs").write_text(str(proc.pid))
            assert os.sched_getaffinity(proc.pid) == {0}, "the kernel's view"
            assert cgroups.task_cpus(proc.pid) == frozenset({0})
            assert cgroups.CpusetReader()(proc.pid) == frozenset({0})
        finally:
            proc.kill()
            proc.wait()


def test_smoke_on_this_host() -> None:
    lines = cgroups.memberships(os.getpid())
    assert lines  # a v2 line, v1 lines, or both on hybrid hosts
    allowed = cgroups.task_cpus(os.getpid())
    if allowed is not None:
        assert frozenset(os.sched_getaffinity(0)) <= allowed
    for m in lines:
        if m.is_v2 or "name=systemd" in m.controllers or "cpuset" in m.controllers:
            assert os.getpid() in cgroups.cgroup_procs(m.path, m.controllers)
