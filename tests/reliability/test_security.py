"""Security of the control socket, the files and the config (issue 7, part 4).

tests/daemon/test_daemon.py::test_non_root_peer_cannot_touch_root_processes covers a
non-root peer against root's processes; this covers two non-root users against each
other, the modes and owners of the socket, state dir and state file, and what config
paths and regexes can make the daemon read or do.
"""

from __future__ import annotations

import contextlib
import grp
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from parlschedctl import client
from parlschedd import config as config_mod
from tests.conftest import PINNING, as_user, in_child_as, needs_root, start_daemon, threads_of, wait_for

pytestmark = needs_root
ALICE, BOB = 65534, 64999  # nobody, and a uid without a passwd entry
ALL = frozenset(os.sched_getaffinity(0))


def sleeper_of(uid: int, *argv: str) -> subprocess.Popen:
    return subprocess.Popen(list(argv) or ["sleep", "60"], user=uid, group=uid, extra_groups=[])


def test_two_unprivileged_users_cannot_touch_each_other(open_dir):
    (open_dir / "parlschedd.yaml").write_text("period_s: 0.05\nsocket: {mode: '0666'}\n" + PINNING)
    d = start_daemon(open_dir)
    a, b = sleeper_of(ALICE), sleeper_of(BOB)
    try:
        assert as_user(ALICE, d.socket, "attach", pid=a.pid)["target"]["uid"] == ALICE
        wait_for(lambda: all(t["pinned"] for t in threads_of(d, a.pid).values()))
        # Bob can neither attach, detach, nor see Alice's process, by pid or in the list
        assert as_user(BOB, d.socket, "detach", pid=a.pid) == {"refused": "permission_denied"}
        assert as_user(BOB, d.socket, "status", pid=a.pid) == {"refused": "permission_denied"}
        assert as_user(BOB, d.socket, "status")["targets"] == []
        assert as_user(BOB, d.socket, "history", pid=a.pid) == {"refused": "permission_denied"}
        assert as_user(ALICE, d.socket, "history", pid=a.pid)["pid"] == a.pid
        assert len(os.sched_getaffinity(a.pid)) == 1 and a.pid in {t["pid"] for t in d.request("status")["targets"]}, \
            "Alice's target still managed"
        # the refusal for an attached-but-foreign pid equals that for a foreign pid never attached
        # (it says whose the process is, as /proc does, not whether the daemon manages it)
        other = sleeper_of(ALICE)
        try:
            assert as_user(BOB, d.socket, "detach", pid=other.pid) == {"refused": "permission_denied"}
        finally:
            other.kill()
            other.wait()
        assert as_user(BOB, d.socket, "detach", pid=2**31 - 2) == {"refused": "not_attached"}
        # Bob may manage his own; Alice does not see it; root sees both
        assert as_user(BOB, d.socket, "attach", pid=b.pid)["target"]["pid"] == b.pid
        assert [t["pid"] for t in as_user(ALICE, d.socket, "status")["targets"]] == [a.pid]
        assert {t["pid"] for t in d.request("status")["targets"]} == {a.pid, b.pid}
        # nor can Bob reach root-owned or kernel processes, or the daemon itself
        for pid in (1, d.proc.pid, os.getpid()):
            assert as_user(BOB, d.socket, "attach", pid=pid) == {"refused": "permission_denied"}
        assert as_user(BOB, d.socket, "reload") == {"refused": "permission_denied"}
        assert as_user(ALICE, d.socket, "detach", pid=a.pid)["restored"] == 1
        assert os.sched_getaffinity(a.pid) == ALL
    finally:
        d.stop()
        for p in (a, b):
            p.kill()
            p.wait()


def test_attach_of_a_foreign_attached_process_does_not_reveal_it(open_dir):
    (open_dir / "parlschedd.yaml").write_text("period_s: 0.05\nsocket: {mode: '0666'}\n" + PINNING)
    d = start_daemon(open_dir)
    a = sleeper_of(ALICE)
    try:
        as_user(ALICE, d.socket, "attach", pid=a.pid)
        assert as_user(BOB, d.socket, "attach", pid=a.pid) == {"refused": "permission_denied"}
    finally:
        d.stop()
        a.kill()
        a.wait()


def test_a_setuid_style_process_counts_as_its_real_uid(open_dir):
    """A process whose real uid is root but effective uid is Alice (as after a setuid
    program's seteuid) belongs to root: Alice may not attach it."""
    (open_dir / "parlschedd.yaml").write_text("period_s: 0.05\nsocket: {mode: '0666'}\n" + PINNING)
    d = start_daemon(open_dir)
    p = subprocess.Popen([sys.executable, "-c", f"import os, time; os.seteuid({ALICE}); print('r', flush=True); time.sleep(60)"],
                         stdout=subprocess.PIPE)
    try:
        p.stdout.readline()
        assert as_user(ALICE, d.socket, "attach", pid=p.pid) == {"refused": "permission_denied"}
    finally:
        d.stop()
        p.kill()
        p.wait()


def test_socket_mode_group_and_state_file_modes(open_dir):
    group = grp.getgrnam("daemon")
    (open_dir / "parlschedd.yaml").write_text("period_s: 0.05\nsocket: {mode: '0660', group: daemon}\n")
    d = start_daemon(open_dir)
    w = subprocess.Popen(["sleep", "60"])
    try:
        st = os.stat(d.socket)
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660
        assert (st.st_uid, st.st_gid) == (0, group.gr_gid)
        d.request("attach", pid=w.pid)
        state = d.state_dir / "state.json"
        wait_for(state.exists)
        sst = os.stat(state)
        assert stat.S_IMODE(sst.st_mode) == 0o600 and sst.st_uid == 0
        dst = os.stat(d.state_dir)
        assert dst.st_uid == 0 and not stat.S_IMODE(dst.st_mode) & 0o022, oct(dst.st_mode)
        # no temp files left beside the state file: a write in progress has one for a
        # moment (then renamed over state.json), one left behind stays
        wait_for(lambda: not [p for p in d.state_dir.iterdir() if p.name not in ("state.json", "lock")], timeout=2)
        lock = os.stat(d.state_dir / "lock")  # one daemon per state dir; the lock says which
        assert stat.S_IMODE(lock.st_mode) == 0o600 and lock.st_uid == 0
        assert (d.state_dir / "lock").read_text() == f"{d.proc.pid}\n"
        # a user outside the group cannot even connect; a member of it can
        assert "unreachable" in as_user(ALICE, d.socket, "ping")
        member = group_member_request(d.socket, group.gr_gid)
        assert "version" in member
    finally:
        d.stop()
        w.kill()
        w.wait()


def group_member_request(path: str, gid: int) -> dict:
    import json
    r, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([gid])
            os.setgid(ALICE)
            os.setuid(ALICE)
            try:
                out = client.request(path, "ping")
            except (client.Refused, client.Unreachable) as e:
                out = {"error": str(e)}
            os.write(wfd, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(wfd)
    data = os.fdopen(r, "rb").read()
    os.waitpid(pid, 0)
    return json.loads(data)


def test_default_socket_mode_is_not_world_accessible(open_dir):
    (open_dir / "parlschedd.yaml").write_text("period_s: 0.05\n")
    d = start_daemon(open_dir)
    try:
        assert stat.S_IMODE(os.stat(d.socket).st_mode) == 0o660
        assert "unreachable" in as_user(ALICE, d.socket, "ping")
    finally:
        d.stop()


@pytest.mark.parametrize("cgroup", ["/a/../../etc", "../x", "cpuset:/../../etc", "cpuset:etc", "/jobs/.."])
def test_config_refuses_cgroup_paths_that_leave_the_hierarchy(tmp_path, cgroup):
    f = tmp_path / "c.yaml"
    f.write_text(f"targets:\n  - cgroup: '{cgroup}'\n")
    with pytest.raises(config_mod.ConfigError) as e:
        config_mod.load(f)
    assert any(k == "targets[0].cgroup" for k, _ in e.value.errors)


@pytest.mark.parametrize("cgroup", ["../../../tmp/x:/jobs", "cpuset,..:/x", "name=../../tmp:/x"])
def test_config_refuses_controllers_that_leave_the_cgroup_root(tmp_path, cgroup):
    f = tmp_path / "c.yaml"
    f.write_text(f"targets:\n  - cgroup: '{cgroup}'\n")
    with pytest.raises(config_mod.ConfigError):
        config_mod.load(f)


def test_daemon_never_reads_cgroup_procs_outside_the_cgroup_root(tmp_path):
    """Live: a world-writable dir /tmp/<x>/jobs/cgroup.procs lists a sleeper's pid; a
    rule whose controllers part climbs out of /sys/fs/cgroup points at it."""
    evil = Path(tempfile.mkdtemp(prefix="parlsched-evil-"))
    victim = subprocess.Popen(["sleep", "60"])
    try:
        (evil / "jobs").mkdir()
        (evil / "jobs" / "cgroup.procs").write_text(f"{victim.pid}\n")
        rel = os.path.relpath(evil, "/sys/fs/cgroup")
        (tmp_path / "parlschedd.yaml").write_text(
            f"period_s: 0.05\nrescan_s: 0.1\ntargets:\n  - cgroup: '{rel}:/jobs'\n")
        try:
            d = start_daemon(tmp_path)
        except RuntimeError:
            return  # refused at startup: the fixed behaviour
        try:
            time.sleep(0.5)
            assert victim.pid not in {t["pid"] for t in d.request("status")["targets"]}
        finally:
            d.stop()
    finally:
        victim.kill()
        victim.wait()
        shutil.rmtree(evil)


def test_config_refuses_relative_socket_paths_and_bad_modes(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("socket: {path: 'run/x.sock', mode: '0999', group: 7}\n")
    with pytest.raises(config_mod.ConfigError) as e:
        config_mod.load(f)
    keys = {k for k, _ in e.value.errors}
    assert {"socket.path", "socket.mode", "socket.group"} <= keys


def kill_stalled(d) -> None:
    if d.proc.poll() is None:
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)


def test_catastrophic_name_regex_cannot_stall_the_daemon(tmp_path):
    (tmp_path / "parlschedd.yaml").write_text("period_s: 0.05\nrescan_s: 0.1\ntargets:\n  - name: '(a+)+$'\n")
    d = start_daemon(tmp_path)
    # any user may start a process with this cmdline; 30 a's mean 2^30 backtracking steps
    evil = sleeper_of(ALICE, "sh", "-c", "sleep 60", "a" * 30 + "!")
    try:
        time.sleep(0.5)  # the next rescan meets it
        t0 = time.monotonic()
        d.request("ping", timeout=2)
        assert time.monotonic() - t0 < 1.0
    finally:
        evil.kill()
        evil.wait()
        kill_stalled(d)


def test_catastrophic_threads_regex_from_a_peer_cannot_stall_the_daemon(open_dir):
    (open_dir / "parlschedd.yaml").write_text("period_s: 0.05\nsocket: {mode: '0666'}\n" + PINNING)
    name = open_dir / "aaaaaaaaaaaaaaa"  # comm is the exec'd file's name
    name.symlink_to(shutil.which("sleep"))
    evil = sleeper_of(ALICE, str(name), "60")  # before the daemon: nothing to leak if this fails
    d = start_daemon(open_dir)
    try:
        wait_for(lambda: Path(f"/proc/{evil.pid}/comm").read_text().strip() == name.name)
        pid = os.fork()
        if pid == 0:  # Alice's request, in the background
            try:
                as_user(ALICE, d.socket, "attach", timeout=60, pid=evil.pid, threads="a*" * 20 + "b")
            finally:
                os._exit(0)
        time.sleep(0.3)
        try:
            t0 = time.monotonic()
            d.request("ping", timeout=2)
            assert time.monotonic() - t0 < 1.0
        finally:
            kill_stalled(d)
            os.waitpid(pid, 0)
    finally:
        evil.kill()
        evil.wait()
        kill_stalled(d)


@contextlib.contextmanager
def users_job_under_roots_target(open_dir):
    """A daemon whose socket every user may use, and a root launcher attached with
    --descendants whose child, Alice's job, it pins: (daemon, launcher, job pid)."""
    (open_dir / "parlschedd.yaml").write_text("period_s: 0.05\nsocket: {mode: '0666'}\n" + PINNING)
    d = start_daemon(open_dir)
    launcher = subprocess.Popen(
        [sys.executable, "-c", "import subprocess; p = subprocess.Popen(['sleep', '60'], user=%d, group=%d, "
         "extra_groups=[]); print(p.pid, flush=True); p.wait()" % (ALICE, ALICE)], stdout=subprocess.PIPE, text=True)
    job = int(launcher.stdout.readline())
    try:
        d.request("attach", pid=launcher.pid, descendants=True)
        wait_for(lambda: job in {t["pid"] for t in threads_of(d, launcher.pid).values()})
        yield d, launcher, job
    finally:
        d.stop()
        os.kill(job, signal.SIGKILL)
        launcher.wait()


def test_attach_of_ones_own_process_managed_as_a_descendant_of_roots_target_does_not_name_it(open_dir):
    """A user's own process in the tree of a target root attached with --descendants (a
    batch launcher that starts users' jobs): the user's attach of it said "already
    managed, as a descendant of PID; detach PID first", naming root's target, which
    status and detach hide from that user (not_attached says no more), and telling
    them to do what they may not."""
    with users_job_under_roots_target(open_dir) as (d, launcher, job):

        def attach() -> list:
            try:
                return ["attached", client.request(d.socket, "attach", pid=job)]
            except client.Refused as e:
                return [e.code, str(e)]

        code, said = in_child_as(ALICE, attach)
        assert code == "already_attached" and f"process {job} is already managed" in said, said
        assert str(launcher.pid) not in said.replace(str(job), ""), said
        # root is still told which target manages it
        with pytest.raises(client.Refused, match=f"descendant of {launcher.pid}; detach {launcher.pid} first"):
            d.request("attach", pid=job)


def test_status_and_detach_of_ones_own_process_managed_by_roots_target_say_it_is_managed(open_dir):
    """A user's own process pinned as a descendant of root's --descendants target: its
    owner's status PID and detach PID said "not attached (parlschedctl status lists the
    targets)", though the daemon pins its threads; they say it is managed as a
    descendant of another user's target, naming neither that target nor its owner."""
    with users_job_under_roots_target(open_dir) as (d, launcher, job):

        def ask(cmd: str) -> list:
            try:
                return ["ok", client.request(d.socket, cmd, pid=job)]
            except client.Refused as e:
                return [e.code, str(e)]

        for cmd in ("status", "detach", "history"):
            code, said = in_child_as(ALICE, lambda c=cmd: ask(c))
            assert code == "not_attached" and "managed as a descendant of another user's target" in said, (cmd, said)
            assert str(launcher.pid) not in said.replace(str(job), ""), (cmd, said)
        assert job in {t["pid"] for t in threads_of(d, launcher.pid).values()}, "still managed by root's target"
