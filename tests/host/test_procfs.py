"""/proc readers on fake trees and on the real /proc."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from parlschedd.host import procfs
from parlschedd.host.errors import HostError, ThreadGone
from tests.conftest import needs_root, thread_pidfds, wait_for
from parlschedd.host.procfs import Schedstat, Uids

from .conftest import FakeProc, Worker, stat_line

NASTY = "a) b (c"


def test_parse_stat_with_parentheses_and_spaces_in_comm() -> None:
    st = procfs.parse_stat(stat_line(1234, NASTY, ppid=77, start=987654, processor=5))
    assert (st.pid, st.comm, st.state, st.ppid, st.start_time, st.processor) == (1234, NASTY, "S", 77, 987654, 5)
    assert procfs.parse_stat(stat_line(5, ")", start=3)).comm == ")"
    assert not st.kernel_thread
    assert procfs.parse_stat(stat_line(2, "kthreadd", flags=0x00208040)).kernel_thread


def test_a_zombie_leader_with_threads_left_has_not_exited() -> None:
    """Field 20 counts the thread group; a leader that called pthread_exit(3) is 'Z'
    while the others run (the real case: tests/daemon, main thread exited)."""
    assert procfs.parse_stat(stat_line(7, "app", state="Z", threads=1)).exited
    assert not procfs.parse_stat(stat_line(7, "app", state="Z", threads=3)).exited
    assert not procfs.parse_stat(stat_line(7, "app", state="S", threads=1)).exited
    assert procfs.process_stat(os.getpid()).num_threads == len(os.listdir(f"/proc/{os.getpid()}/task"))


def test_a_process_whose_one_thread_is_in_its_exit_is_exiting() -> None:
    """PF_EXITING (field 9) is set from do_exit until the task is reaped: a process of
    one thread with it is about to be a zombie (its pidfd not readable yet); a leader
    that called pthread_exit(3) has it too while its other threads run on."""
    assert procfs.parse_stat(stat_line(7, "false", state="R", flags=0x404044, threads=1)).exiting
    assert procfs.parse_stat(stat_line(7, "false", state="Z", threads=1)).exiting
    assert procfs.parse_stat(stat_line(7, "false", state="X", threads=1)).exiting  # dead, being reaped
    assert not procfs.parse_stat(stat_line(7, "app", state="Z", flags=0x404044, threads=3)).exiting
    assert not procfs.parse_stat(stat_line(7, "app", state="R", flags=0x400040, threads=1)).exiting
    assert not procfs.process_stat(os.getpid()).exiting


def test_real_kernel_and_user_threads_are_told_apart() -> None:
    if procfs.comm(2) != "kthreadd":
        pytest.skip("pid 2 is not kthreadd here (a pid namespace)")
    assert procfs.process_stat(2).kernel_thread
    assert not procfs.process_stat(os.getpid()).kernel_thread


@needs_root
def test_network_interfaces_are_those_of_the_callers_namespace() -> None:
    """/proc/self/net/dev follows the reader's network namespace, as the daemon under
    PrivateNetwork=yes needs (it cannot open the netlink socket if_nameindex uses)."""
    assert procfs.network_interfaces() == [name for _, name in socket.if_nameindex()]
    own = subprocess.run(["unshare", "--net", sys.executable, "-c",
                          "from parlschedd.host import procfs; print(procfs.network_interfaces())"],
                         capture_output=True, text=True, check=True)
    assert own.stdout.strip() == "['lo']", own


def test_fake_tree_threads_and_identity(fake_proc: FakeProc) -> None:
    fake_proc.process(100, "app", start=500, uid=1001)
    fake_proc.thread(100, 101, NASTY, start=510, run_ns=42)
    fake_proc.thread(100, 102, "worker", start=520)
    (fake_proc.root / "100" / "task" / "103").mkdir()  # exited while being listed
    root = str(fake_proc.root)

    assert procfs.list_tids(100, root) == [100, 101, 102, 103]  # listed; its files went with it
    assert [procfs.thread_stat(t, root).comm for t in (100, 101, 102)] == ["app", NASTY, "worker"]
    assert procfs.thread_start_time(101, root) == 510
    assert procfs.process_start_time(100, root) == 500
    assert procfs.thread_schedstat(101, root) == Schedstat(42, 5, 7)
    assert procfs.process_uids(100, root) == Uids(1001, 1001, 1001, 1001)
    assert procfs.comm(100, root) == "app"
    assert procfs.cmdline(100, root) == ["app", "--flag"]
    assert (procfs.thread_group(100, root), procfs.thread_group(102, root)) == (100, 100)
    with pytest.raises(ThreadGone) as info:
        procfs.thread_start_time(103, root)
    assert info.value.tid == 103


def test_a_threads_mask_as_set_offline_cpus_included(fake_proc: FakeProc) -> None:
    """Cpus_allowed_list is the mask as set; sched_getaffinity(2) would give only its
    online CPUs (none, for a thread pinned to a CPU that went offline)."""
    fake_proc.process(100)
    status = fake_proc.root / "100" / "task" / "100" / "status"
    status.write_text("Name:\tapp\nCpus_allowed:\t0a\nCpus_allowed_list:\t1,3\nMems_allowed_list:\t0\n")
    assert procfs.thread_cpus_allowed(100, str(fake_proc.root)) == {1, 3}
    status.write_text("Name:\tapp\n")
    with pytest.raises(HostError, match="Cpus_allowed_list of tid 100"):
        procfs.thread_cpus_allowed(100, str(fake_proc.root))
    assert procfs.thread_cpus_allowed(threading.get_native_id()) == os.sched_getaffinity(0)  # every CPU online here


def test_fake_tree_vanished_process(fake_proc: FakeProc) -> None:
    fake_proc.root.mkdir()
    root = str(fake_proc.root)
    for call in (procfs.list_tids, procfs.process_start_time, procfs.comm, procfs.descendants):
        with pytest.raises(ThreadGone) as info:
            call(4242, root)
        assert info.value.pid == 4242


def test_empty_cmdline_of_a_kernel_thread(fake_proc: FakeProc) -> None:
    fake_proc.process(2, "kthreadd", cmdline="")
    assert procfs.cmdline(2, str(fake_proc.root)) == []


def test_parse_uids_needs_the_uid_line() -> None:
    assert procfs.parse_uids("Uid:\t1\t2\t3\t4\n") == Uids(1, 2, 3, 4)
    with pytest.raises(ValueError):
        procfs.parse_uids("Name:\tx\n")


@pytest.mark.parametrize("uids, owner", [
    ((1001, 1001, 1001, 1001), 1001),
    ((1001, 0, 0, 0), 0),           # a setuid-root program a user started
    ((0, 1001, 0, 1001), 0),        # root's, its privileges set aside for a while
    ((1001, 1001, 0, 1001), 0),     # one that may take root back (saved uid 0)
])
def test_the_owner_is_the_uid_only_where_real_effective_and_saved_agree(uids, owner) -> None:
    """A setuid child's real uid is its user's: --descendants managed it for that user,
    though the kernel lets the user neither ptrace it nor count it with perf."""
    assert Uids(*uids).owner == owner


@pytest.mark.parametrize("children_files", [True, False], ids=["children-files", "ppid-scan"])
def test_children_and_descendants(fake_proc: FakeProc, children_files: bool) -> None:
    tree = {10: 1, 11: 10, 12: 10, 13: 11, 14: 13, 20: 1}
    for pid, ppid in tree.items():
        fake_proc.process(pid, ppid=ppid, children=children_files)
    fake_proc.thread(10, 15, "helper", children=children_files)
    if children_files:
        fake_proc.set_children(10, 10, [11])
        fake_proc.set_children(10, 15, [12])  # a child forked by a non-leader thread
        fake_proc.set_children(11, 11, [13])
        fake_proc.set_children(13, 13, [14])
    root = str(fake_proc.root)
    assert procfs.descendants(10, root) == [11, 12, 13, 14]
    assert procfs.descendants(11, root) == [13, 14] and procfs.descendants(14, root) == []
    assert procfs.descendants(20, root) == []


def test_ancestors_walk_up_to_pid_1_and_stop_where_one_is_gone_or_loops(fake_proc: FakeProc) -> None:
    for pid, ppid in {1: 0, 10: 1, 11: 10, 12: 11, 30: 99, 40: 41, 41: 40}.items():  # 99: gone; 40-41: a loop
        fake_proc.process(pid, ppid=ppid)
    root = str(fake_proc.root)
    assert list(procfs.ancestors(12, root)) == [11, 10, 1]
    assert list(procfs.ancestors(1, root)) == []
    assert list(procfs.ancestors(30, root)) == [99]
    assert list(procfs.ancestors(40, root)) == [41, 40]
    assert next(procfs.ancestors(os.getpid())) == os.getppid()  # the real /proc


def test_real_threads_of_this_process(spawn: Callable[..., Worker]) -> None:
    worker = spawn(busy=False)
    Path(f"/proc/self/task/{worker.tid}/comm").write_text(NASTY)
    tids = procfs.list_tids(os.getpid())
    assert worker.tid in tids and os.getpid() in tids  # not first: tids wrap at pid_max (32768 here)
    assert procfs.thread_stat(worker.tid).comm == NASTY
    assert procfs.thread_start_time(worker.tid) >= procfs.process_start_time(os.getpid())
    assert procfs.process_uids(os.getpid()).real == os.getuid()
    assert (procfs.thread_group(worker.tid), procfs.thread_group(os.getpid())) == (os.getpid(), os.getpid())
    worker.finish()
    with pytest.raises(ThreadGone):
        procfs.thread_start_time(worker.tid)


def test_real_descendants_of_a_process_tree() -> None:
    shell = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 5
        def execed() -> bool:  # a child is listed from fork on, but named "sleep" only after exec
            kids = procfs.descendants(shell.pid)
            return len(kids) == 2 and all(procfs.comm(p) == "sleep" for p in kids)

        while not execed() and time.monotonic() < deadline:
            time.sleep(0.01)
        grandchildren = procfs.descendants(shell.pid)
        assert len(grandchildren) == 2
        assert procfs.cmdline(shell.pid) == ["sh", "-c", "sleep 30 & sleep 30 & wait"]
        assert all(procfs.comm(p) == "sleep" for p in grandchildren)
        assert shell.pid in procfs.descendants(os.getpid())
        assert set(grandchildren) | {shell.pid} <= set(procfs.descendants(os.getpid()))
    finally:
        for pid in procfs.descendants(shell.pid):
            os.kill(pid, 9)
        shell.kill()
        shell.wait()


def test_pidfd_open_real() -> None:
    fd = procfs.pidfd_open(os.getpid())
    assert fd is not None
    os.close(fd)
    child = subprocess.Popen(["true"])
    child.wait()
    with pytest.raises(ThreadGone):
        procfs.pidfd_open(child.pid)


def test_a_thread_id_is_no_process_on_kernels_before_and_after_6_9(monkeypatch) -> None:
    """pidfd_open of a thread that is not its group's leader: ENOENT since Linux 6.9,
    EINVAL before. This machine's kernel gives one; the other is simulated (the only
    fake here: the syscall's answer on an older kernel). Both are ThreadGone, so the
    engine's attach refuses a thread id with its hint instead of an internal error."""
    ready, done = threading.Event(), threading.Event()
    tids: list[int] = []
    worker = threading.Thread(target=lambda: (tids.append(threading.get_native_id()), ready.set(), done.wait(10)))
    worker.start()
    try:
        ready.wait(10)
        with pytest.raises(ThreadGone):
            procfs.pidfd_open(tids[0])  # this kernel's own answer
        real = os.pidfd_open

        def before_6_9(pid: int, flags: int = 0) -> int:
            if pid == tids[0]:
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
            return real(pid, flags)

        monkeypatch.setattr(os, "pidfd_open", before_6_9)
        with pytest.raises(ThreadGone):
            procfs.pidfd_open(tids[0])
        with pytest.raises(ThreadGone):
            procfs.ProcessHandle(tids[0])
    finally:
        done.set()
        worker.join()


SECCOMP_EPERM_PIDFD_OPEN = """
import ctypes, errno, os, struct, sys
from parlschedd.host import procfs
def ins(code, jt, jf, k):
    return struct.pack("=HBBI", code, jt, jf, k)
# seccomp(2)'s classic BPF: load the syscall number; pidfd_open (434 on x86_64 and
# aarch64 alike): SECCOMP_RET_ERRNO | EPERM; any other: SECCOMP_RET_ALLOW
prog = b"".join([ins(0x20, 0, 0, 0), ins(0x15, 0, 1, 434), ins(0x06, 0, 0, 0x00050000 | errno.EPERM),
                 ins(0x06, 0, 0, 0x7FFF0000)])
buf = ctypes.create_string_buffer(prog)
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.byref(Fprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))), 0, 0) == 0
try:
    os.pidfd_open(os.getpid())
except PermissionError:
    pass
else:
    sys.exit("the filter let pidfd_open through")
with procfs.ProcessHandle(int(sys.argv[1])) as handle:
    print(handle.pidfd, handle.alive(), len(handle.tids()))
"""


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="pidfd_open is 434 on these")
def test_a_seccomp_filter_refusing_pidfd_open_leaves_processes_attachable() -> None:
    """A container's seccomp profile older than pidfd_open answers it EPERM (Docker's
    default before 20.10): that was AccessDenied out of every ProcessHandle, so no
    attach succeeded. A real filter in a child process: no pidfd, the start time then
    tells a reused pid."""
    target = subprocess.Popen(["sleep", "30"])
    try:
        out = subprocess.run([sys.executable, "-c", SECCOMP_EPERM_PIDFD_OPEN, str(target.pid)], capture_output=True,
                             text=True, timeout=30, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    finally:
        target.kill()
        target.wait()
    assert out.returncode == 0 and out.stdout.split() == ["None", "True", "1"], out.stderr


def test_a_name_with_a_carriage_return_is_read_as_the_kernel_has_it() -> None:
    """/proc was read in text mode, whose newlines turned a name's \r into \n, and
    every trailing \n was stripped: thread and name regexes saw another name."""
    ready, done = threading.Event(), threading.Event()
    tids: list[int] = []

    def named() -> None:
        tids.append(threading.get_native_id())
        with open(f"/proc/self/task/{tids[0]}/comm", "w") as f:
            f.write("a\rb\n")
        ready.set()
        done.wait(10)

    worker = threading.Thread(target=named)
    worker.start()
    try:
        ready.wait(10)
        with open(f"/proc/self/task/{tids[0]}/comm", "rb") as f:
            raw = f.read()
        assert raw == b"a\rb\n\n"  # the name as written, and the kernel's newline
        assert procfs.comm(tids[0]) == "a\rb\n"
    finally:
        done.set()
        worker.join()


def test_a_name_cannot_make_a_line_of_the_status_file() -> None:
    """The kernel escapes only \\n (and \\\\) in status's Name line, its first: a task
    named "\\x1cUid:\\t4242..." made a line of str.splitlines() read as its owner's
    uid, and one named "\\x1cTgid:\\t1" a thread of init."""
    forged = "\x1cUid:\t4242\t4242"  # 15 bytes: a comm's most
    code = ("import os, sys, threading, time\n"
            f"open('/proc/self/comm', 'w').write({forged!r})\n"
            "def named():\n"
            "    open(f'/proc/self/task/{threading.get_native_id()}/comm', 'w').write('\\x1cTgid:\\t1')\n"
            "    print(threading.get_native_id(), flush=True)\n"
            "    time.sleep(30)\n"
            "threading.Thread(target=named, daemon=True).start()\n"
            "time.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        tid = int(proc.stdout.readline())
        assert forged.encode() in Path(f"/proc/{proc.pid}/status").read_bytes(), "the name as the kernel shows it"
        assert procfs.process_uids(proc.pid) == procfs.process_uids(os.getpid())
        assert procfs.thread_group(tid) == proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_process_handle_sees_exit_through_the_pidfd() -> None:
    child = subprocess.Popen(["sleep", "30"])
    with procfs.ProcessHandle(child.pid) as handle:
        assert handle.pidfd is not None
        assert handle.alive()
        child.kill()
        child.wait()
        assert not handle.alive()
    assert handle.pidfd is None


def test_a_command_line_is_read_whole_or_to_its_limit() -> None:
    """A read of /proc goes on to the file's end (more than one read(2) here), or stops
    at ``limit`` bytes: a command line can be hundreds of megabytes."""
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "y" * 100_000, "z" * 100_000, "\xe9t\xe9"]
    p = subprocess.Popen(argv)
    try:
        wait_for(lambda: len(procfs.cmdline(p.pid)) == len(argv), timeout=10)  # exec'd: its own command line
        assert procfs.cmdline(p.pid) == argv
        head = len(os.fsencode(sys.executable)) + len(b"\0-c\0im")
        assert procfs.cmdline(p.pid, limit=head) == [sys.executable, "-c", "im"]
        assert procfs.cmdline(p.pid, limit=0) == []
    finally:
        p.kill()
        p.wait()


def test_process_handle_lists_threads_until_the_process_exits() -> None:
    code = "import threading, time\nfor _ in range(3): threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\nprint(flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    child.stdout.readline()
    with procfs.ProcessHandle(child.pid) as handle:
        assert handle.tids() == procfs.list_tids(child.pid) and len(handle.tids()) == 4
        child.kill()
        child.wait()
        with pytest.raises(ThreadGone):
            handle.tids()  # the open directory names the dead process, not a reuse of its pid
    assert handle.task_fd == -1


def test_process_handle_without_pidfd_detects_pid_reuse(fake_proc: FakeProc) -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        fake_proc.process(child.pid, "sleep", start=100)
        handle = procfs.ProcessHandle(child.pid, str(fake_proc.root))
        handle.close()  # as on a kernel without pidfd_open: only the start time decides
        assert handle.alive()
        stat = fake_proc.root / str(child.pid) / "stat"
        stat.write_text(stat_line(child.pid, "other", start=200))  # the pid now names another process
        assert not handle.alive()
        stat.unlink()
        assert not handle.alive()
    finally:
        child.kill()
        child.wait()


def _parked_threads(n: int):
    """n real threads that each exit when their own event is set."""
    import threading

    events = [threading.Event() for _ in range(n)]
    tids: dict[int, int] = {}
    started = threading.Barrier(n + 1)

    def body(i: int) -> None:
        tids[i] = threading.get_native_id()
        started.wait()
        events[i].wait()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    started.wait()
    return threads, events, [tids[i] for i in range(n)]


def _reaped(tid: int) -> None:
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/self/task/{tid}") and time.monotonic() < deadline:
        time.sleep(0.005)  # the kernel reaps the task a moment after join returns


@pytest.mark.parametrize("pidfd", [True, False], ids=["thread-pidfd", "comm-fd"])
def test_thread_handle_proves_identity_until_the_thread_exits(pidfd: bool) -> None:
    from parlschedd.host.errors import ThreadGone
    from parlschedd.host.procfs import ThreadHandle, thread_start_time

    threads, events, (tid,) = _parked_threads(1)
    start = thread_start_time(tid)
    with pytest.raises(ThreadGone):
        ThreadHandle(tid, start + 1, pidfd=pidfd)  # a different start time is another thread
    handle = ThreadHandle(tid, start, pidfd=pidfd)
    if not pidfd:
        assert not handle.is_pidfd
    handle.check()  # alive: no error
    events[0].set()
    threads[0].join()
    _reaped(tid)
    with pytest.raises(ThreadGone):
        handle.check()  # the fd stays bound to the exited thread, whatever reuses the tid
    handle.close()


def test_thread_pidfds_where_the_kernel_has_them() -> None:
    import threading

    from parlschedd.host.procfs import PIDFD_THREAD, ThreadHandle, thread_start_time

    tid = threading.get_native_id()
    try:
        os.close(os.pidfd_open(tid, PIDFD_THREAD))
    except OSError:
        pytest.skip("kernel before 6.9: no thread pidfds, comm fds are used")
    handle = ThreadHandle(tid, thread_start_time(tid))
    assert handle.is_pidfd
    handle.close()


@pytest.mark.parametrize("pidfd", [True, False], ids=["thread-pidfd", "comm-fd"])
def test_exited_reports_exactly_the_threads_gone(pidfd: bool) -> None:
    from parlschedd.host.procfs import ThreadHandle, exited, thread_start_time

    threads, events, tids = _parked_threads(4)
    handles = [ThreadHandle(t, thread_start_time(t), pidfd=pidfd) for t in tids]
    try:
        assert exited(handles) == set()
        for i in (1, 3):
            events[i].set()
            threads[i].join()
            _reaped(tids[i])
        assert exited(handles) == {tids[1], tids[3]}
    finally:
        for e in events:
            e.set()
        for t in threads:
            t.join()
        for h in handles:
            h.close()


def test_thread_count_follows_threads_as_they_start_and_exit(workload) -> None:
    w = workload(3)  # a child of 3 workers and its main thread: no other test's threads
    with procfs.ProcessHandle(w.pid) as handle:
        assert handle.thread_count() == len(handle.tids()) == 4
        w.command("spawn")
        assert handle.thread_count() == 5
        w.command("stop")  # joined in the child; the kernel reaps it a moment later
        wait_for(lambda: handle.thread_count() == 4)
        assert len(handle.tids()) == 4


@thread_pidfds  # before: ThreadExits always asks to list
def test_thread_exits_sees_an_exit_until_the_thread_is_removed() -> None:
    threads, events, tids = _parked_threads(2)
    exits = procfs.ThreadExits()
    for tid in tids:
        exits.add(tid)
    assert not exits.any_exited()
    events[0].set()
    threads[0].join()
    _reaped(tids[0])  # join returns before the kernel is done with the thread
    assert exits.any_exited()
    exits.remove(tids[0])
    assert not exits.any_exited(), "the exited thread is no longer watched"
    exits.remove(tids[0])  # idempotent
    events[1].set()
    threads[1].join()
    _reaped(tids[1])
    assert exits.any_exited()
    exits.close()
    assert exits.any_exited(), "closed: it cannot tell, so the caller lists"


@thread_pidfds
def test_thread_exits_tells_a_reaped_leader_from_a_zombie() -> None:
    """A child that exited holds its pid until it is reaped (its pidfd polls readable
    all the same); once reaped, the pid may be another process's."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    exits = procfs.ThreadExits()
    exits.add(child.pid)
    wait_for(exits.any_exited)
    assert os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT) is not None  # a zombie now
    assert not exits.reaped(child.pid), "a zombie still holds its pid"
    child.wait()
    assert exits.reaped(child.pid)
    assert not exits.reaped(os.getpid()), "not watched"
    exits.close()


def test_thread_exits_asks_to_list_when_a_thread_cannot_be_watched(fake_proc: FakeProc) -> None:
    """Under a fake /proc root (as on a kernel without thread pidfds) nothing can be
    watched: the answer is always "maybe", so the caller lists."""
    exits = procfs.ThreadExits(str(fake_proc.root))
    assert exits.any_exited()
    real = procfs.ThreadExits()
    real.add(2**22 + 12345)  # no such thread (above the largest pid_max): not watchable
    assert real.any_exited()
    real.remove(2**22 + 12345)
    assert not real.any_exited(), "nothing left unwatched"
    real.close()


def test_a_thread_born_anywhere_moves_the_birth_mark() -> None:
    """The real /proc/loadavg: a thread of this process takes a new pid, so the
    mark's last pid moves (the daemon takes an unchanged mark for "nothing born")."""
    before = procfs.birth_mark()
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()
    assert procfs.birth_mark()[1] != before[1]


def test_the_birth_mark_is_read_from_the_roots_loadavg(tmp_path: Path) -> None:
    (tmp_path / "loadavg").write_text("0.52 0.58 0.59 3/467 24193\n")
    assert procfs.birth_mark(str(tmp_path)) == (467, 24193)
    (tmp_path / "loadavg").write_text("0.52 0.58 0.59\n")
    with pytest.raises(ValueError, match="unexpected /proc/loadavg"):
        procfs.birth_mark(str(tmp_path))
    (tmp_path / "loadavg").unlink()
    with pytest.raises(HostError):
        procfs.birth_mark(str(tmp_path))


@pytest.mark.skipif(os.geteuid() != 0, reason="bind-mounts a file")
def test_a_loadavg_mounted_over_procs_own_is_not_trusted(tmp_path: Path) -> None:
    """LXCFS mounts a loadavg of its own over /proc/loadavg in containers, refreshed
    every few seconds: its fields do not move at each birth. Stood in for by the
    kernel's file bind-mounted over a plain one."""
    assert procfs.birth_mark_is_the_kernels()
    (tmp_path / "loadavg").write_text("0.52 0.58 0.59 3/467 24193\n")
    assert procfs.birth_mark_is_the_kernels(str(tmp_path))  # a fake tree's own file
    subprocess.run(["mount", "--bind", "/proc/loadavg", str(tmp_path / "loadavg")], check=True)
    try:
        assert not procfs.birth_mark_is_the_kernels(str(tmp_path))
    finally:
        subprocess.run(["umount", str(tmp_path / "loadavg")], check=True)
    assert not procfs.birth_mark_is_the_kernels(str(tmp_path / "absent"))


@pytest.mark.parametrize("argv, runs", [
    (["/opt/parlsched/venv/bin/parlschedctl", "status"], True),                  # a binary, or as the shell shows it
    (["/opt/parlsched/venv/bin/python3", "/opt/parlsched/venv/bin/parlschedctl", "run", "--", "make"], True),  # its script
    (["python3", "-m", "parlschedctl", "top"], True),
    (["python3", "-u", "-X", "dev", "-W", "ignore", "-m", "parlschedctl"], True),  # the interpreter's options first
    (["python3", "-mparlschedctl"], True),
    (["python3", "-I", "/opt/parlsched/venv/bin/parlschedctl"], True),
    (["python3", "-X", "parlschedctl"], False),                                     # an option's value
    (["python3", "-c", "import parlschedctl", "parlschedctl"], False),
    (["python3", "-u", "-m", "parlschedd"], False),
    (["python3", "-m", "parlschedd"], False),
    (["sh", "-c", "parlschedctl status"], False),                                  # a shell that will run it is not it
    (["/srv/parlschedctl-data/job", "parlschedctl"], False),
    (["grep", "-r", "parlschedctl"], False),
    (["grep", "parlschedctl"], False),
    (["stress-ng", "--cpu", "2"], False),
    ([], False),
])
def test_runs_tells_a_command_of_ours_from_a_command_line_naming_it(argv, runs) -> None:
    assert procfs.runs(argv, "parlschedctl") is runs


def test_a_real_threads_processor_is_a_cpu_it_may_run_on() -> None:
    """Field 39 of this thread's own stat: the CPU it last ran on (the engine's ran_on),
    one of its allowed CPUs; pinned to one, that one."""
    me = threading.get_native_id()
    assert procfs.thread_stat(me).processor in os.sched_getaffinity(0)
    before = os.sched_getaffinity(0)
    cpu = max(before)
    try:
        os.sched_setaffinity(0, {cpu})
        os.sched_yield()
        assert procfs.thread_stat(me).processor == cpu
    finally:
        os.sched_setaffinity(0, before)
