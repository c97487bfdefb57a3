"""A real daemon on a real socket in a temporary directory, and real target processes."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from pathlib import Path

import pytest

from parlschedctl import client
from parlschedd.host import procfs

WORKLOAD = Path(__file__).parent / "daemon" / "workload.py"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the daemon must run as root")


def _has_thread_pidfds() -> bool:
    try:
        os.close(os.pidfd_open(os.getpid(), procfs.PIDFD_THREAD))
    except (AttributeError, OSError):
        return False
    return True


# what watches threads for their exit (procfs.ThreadExits) and tells a reaped process from a zombie
thread_pidfds = pytest.mark.skipif(not _has_thread_pidfds(), reason="kernel before 6.9: no thread pidfds")


@dataclass
class Daemon:
    proc: subprocess.Popen
    socket: str
    state_dir: Path
    config: Path
    log: Path

    def request(self, cmd: str, **args):
        return client.request(self.socket, cmd, **args)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def log_text(self) -> str:
        return self.log.read_text()

    def log_records(self) -> list[dict]:
        """The daemon's JSON log lines (--log-format json), parsed; other lines on its
        stderr (a Python warning) are not records."""
        return [json.loads(line) for line in self.log_text().splitlines() if line.startswith("{")]


# The paper's Level 2 (every thread pinned to one core), which most tests check by mask.
PINNING = "learning: {free: false, reward: thread}\n"


_started: list[subprocess.Popen] = []  # every daemon start_daemon started, stopped after its test if still running


@pytest.fixture(autouse=True)
def _no_daemon_outlives_its_test() -> Iterator[None]:
    """A test that fails between its start_daemon and its stop (an assert outside its
    try) left the daemon running for good, pinning, with a socket in a deleted dir:
    stopped here with SIGTERM, which restores what it pinned. (So a daemon started for
    more than one test, by a fixture of a wider scope, would be stopped after the first.)"""
    yield
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def start_daemon(tmp: Path, config_text: str = "period_s: 0.05\ndomain_period_s: 0.5\n" + PINNING,
                 prefix: Sequence[str] = (), run: Path | None = None) -> Daemon:
    """A daemon on a socket in ``tmp`` (its socket and state dir in ``run`` when
    given; its config and log stay in ``tmp``), run through ``prefix`` (such as a
    setpriv(1) command line) when given."""
    config = tmp / "parlschedd.yaml"
    if not config.exists():
        config.write_text(config_text)
    run = run or tmp
    sock = str(run / "ctl.sock")
    log = tmp / "daemon.log"
    proc = subprocess.Popen(
        [*prefix, sys.executable, "-m", "parlschedd", "--config", str(config), "--socket", sock,
         "--state-dir", str(run / "state"), "--log-format", "json", "--log-level", "debug"],
        stdout=subprocess.DEVNULL, stderr=open(log, "ab"),
    )
    _started.append(proc)
    d = Daemon(proc, sock, run / "state", config, log)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited {proc.returncode}: {log.read_text()}")
        try:
            d.request("ping")
            return d
        except client.Unreachable:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("daemon did not come up")


@pytest.fixture
def daemon(tmp_path):
    d = start_daemon(tmp_path)
    yield d
    if d.proc.poll() is None:
        d.stop()


# A daemon whose first tick is 30 s away: what a test sends is served with no period between.
SLOW = "period_s: 30\ndomain_period_s: 30\n" + PINNING


@pytest.fixture
def slow(tmp_path):
    """A daemon whose first tick is 30 s away."""
    d = start_daemon(tmp_path, SLOW)
    yield d
    d.stop()


@pytest.fixture
def open_dir():
    """A temp dir other uids can traverse (pytest's tmp dirs are 0700), for a daemon
    whose socket a test user must reach; under /run, where only root may write, so
    that a daemon run as a test user in it is one the client believes."""
    tmp = Path(tempfile.mkdtemp(prefix="parlsched-open-", dir="/run"))
    tmp.chmod(0o755)
    yield tmp
    shutil.rmtree(tmp, ignore_errors=True)


class Workload:
    def __init__(self, n: int = 3) -> None:
        self.proc = subprocess.Popen([sys.executable, str(WORKLOAD), str(n)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        first = json.loads(self.proc.stdout.readline())
        self.pid, self.tids = first["pid"], first["tids"]

    def command(self, cmd: str) -> list[int]:
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        self.tids = json.loads(self.proc.stdout.readline())["tids"]
        return self.tids

    def all_tids(self) -> list[int]:
        return sorted(int(t) for t in os.listdir(f"/proc/{self.pid}/task"))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def workload():
    made: list[Workload] = []

    def make(n: int = 3) -> Workload:
        w = Workload(n)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()


@pytest.fixture
def kill_after():
    """``kill_after(proc)`` returns ``proc`` (a Popen), killed and reaped when the test
    ends (a process that exited already is only reaped)."""
    procs: list[subprocess.Popen] = []

    def register(proc: subprocess.Popen) -> subprocess.Popen:
        procs.append(proc)
        return proc

    yield register
    for p in procs:
        with p:  # waits, and closes its pipes
            p.kill()


def fake_cpus(sysfs: Path, possible: str, online: str) -> str:
    """A sysfs tree that says which CPUs the kernel could bring online and which are."""
    cpu = sysfs / "devices" / "system" / "cpu"
    cpu.mkdir(parents=True)
    (cpu / "possible").write_text(possible + "\n")
    (cpu / "online").write_text(online + "\n")
    return str(sysfs)


def wait_for(predicate, timeout: float = 5.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)


def target_pids(d: Daemon) -> set[int]:
    """The pids of the daemon's targets, as status lists them."""
    return {t["pid"] for t in d.request("status")["targets"]}


def threads_of(d: Daemon, pid: int) -> dict[int, dict]:
    targets = d.request("status", pid=pid)["targets"]
    return {t["tid"]: t for t in targets[0]["threads"]}


def all_pinned(d: Daemon, pid: int, expect: int | set[int] | None = None) -> dict[int, dict] | None:
    """Status's threads of ``pid`` when every one is pinned and they are ``expect``
    (so many, or these tids), else None."""
    threads = threads_of(d, pid)
    ok = all(t["pinned"] for t in threads.values()) and (
        expect is None or (set(threads) == expect if isinstance(expect, set) else len(threads) == expect))
    return threads if ok else None


def pinned_where_shown(d: Daemon, pid: int, expect: int | set[int]) -> bool:
    """Every thread pinned, on the CPU status shows; compared within one period (a
    period between the status and the check may move a thread: retried by wait_for)."""
    threads = all_pinned(d, pid, expect)
    return bool(threads) and all(os.sched_getaffinity(tid) == {t["cpu"]} for tid, t in threads.items())


def tagged_sleeper(tag: str, pid: int | None = None) -> subprocess.Popen:
    """A process a name rule matches by ``tag``, an argument of its command line,
    returned once /proc shows that command line: Popen returns when the vfork'd child
    releases the parent's memory, inside execve, before the new argv is in place, and
    /proc/PID/cmdline reads empty until it is (9 times in 10 on a loaded machine), so
    a rescan at once could miss the process. With ``pid``: that pid, free again (its
    process reaped), or the test is skipped where it cannot be had."""
    from tests.reliability.helpers import NS_LAST_PID, spawn_with_pid

    argv = [sys.executable, "-c", "import time; time.sleep(60)", tag]
    if pid is None:
        proc = subprocess.Popen(argv)
    elif not os.access(NS_LAST_PID, os.W_OK):
        pytest.skip(f"cannot write {NS_LAST_PID}")
    elif (proc := spawn_with_pid(pid, argv)) is None:
        pytest.skip(f"other processes took pid {pid} first")
    try:
        wait_for(lambda: tag.encode() in Path(f"/proc/{proc.pid}/cmdline").read_bytes())
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


NOBODY = 65534  # the unprivileged user the tests drop to


def read_terminal(controller: int) -> bytes:
    """All a pseudo-terminal's programs wrote, read from its ``controller`` end until the
    last writer is gone (EIO, or EOF), then closed."""
    shown = b""
    while True:
        try:
            chunk = os.read(controller, 1 << 16)
        except OSError:  # EIO: the terminal's other end is closed, all was read
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    return shown


def refused_start(config: Path | str, socket: Path | str, state_dir: Path | str, *options: str) -> subprocess.CompletedProcess:
    """A daemon started in the foreground on these paths (and with ``options``), run
    until it exits (in the tests that call this: it refuses to start), with its output."""
    return subprocess.run([sys.executable, "-m", "parlschedd", "--config", str(config), "--socket", str(socket),
                           "--state-dir", str(state_dir), *options], capture_output=True, text=True, timeout=30)


def in_child_as(uid: int, fn: Callable[[], Any]) -> Any:
    """What ``fn()`` returns (JSON-able) when run in a forked child that dropped to
    ``uid`` (gid the same, no supplementary groups) if it was root."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        try:
            os.close(r)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            os.write(w, json.dumps(fn()).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def as_user(uid: int, socket_path: str, cmd: str, timeout: float = 10.0, **args) -> dict:
    """The request made by a child as ``uid`` (``in_child_as``): {"refused": code} /
    {"unreachable": msg} / the reply."""
    def request() -> dict:
        try:
            return client.request(socket_path, cmd, timeout=timeout, **args)
        except client.Refused as e:
            return {"refused": e.code}
        except client.Unreachable as e:
            return {"unreachable": str(e)}

    return in_child_as(uid, request)


CPUSET = Path("/sys/fs/cgroup/cpuset")
CGROUP_MOUNTS = [  # where own_cgroup makes one, and a rule's prefix for that hierarchy
    ("/sys/fs/cgroup/unified", ""),         # v2 (the unified hierarchy of a hybrid host)
    (str(CPUSET), "cpuset:"),               # a v1 controller hierarchy
]


@contextlib.contextmanager
def own_cgroup(mount: Path | str, cpus: str | None = None, suffix: str = "") -> Iterator[Path]:
    """A cgroup of its own under ``mount`` (a cgroup left behind by another test cannot
    clash), its name ending in ``suffix``, with ``cpus`` (else its parent's) where it is
    a v1 cpuset, which needs its CPUs and memory nodes set; removed at the end, its
    tasks moved back to the root (the test kills its processes first: one leaves its
    cgroup when it is reaped)."""
    mount = Path(mount)
    if not mount.is_dir() or not os.access(mount, os.W_OK):
        pytest.skip(f"{mount} is not mounted, or not writable, on this host")
    group = mount / f"parlsched-test-{uuid.uuid4().hex[:8]}{suffix}"
    group.mkdir()
    try:
        if (group / "cpuset.cpus").exists():
            (group / "cpuset.mems").write_text((mount / "cpuset.mems").read_text())
            (group / "cpuset.cpus").write_text(cpus or (mount / "cpuset.cpus").read_text())
        yield group
    finally:
        members = "tasks" if (group / "tasks").exists() else "cgroup.procs"  # v1 moves threads, v2 processes
        for tid in (group / members).read_text().split():
            with contextlib.suppress(OSError):
                (mount / members).write_text(tid)
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.05)
        else:  # said, not raised: a finally that raised would hide the test's own failure
            warnings.warn(f"cgroup {group} left behind: {(group / members).read_text().split()} still in it", stacklevel=1)


@pytest.fixture
def cpuset():
    """A real cgroup v1 cpuset of CPUs 0-1 for the test's processes, removed after."""
    if not (CPUSET / "cpuset.cpus").exists():
        pytest.skip("no cgroup v1 cpuset hierarchy")
    with own_cgroup(CPUSET, cpus="0-1") as path:
        yield path
