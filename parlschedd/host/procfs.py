"""Small readers of /proc for processes and their threads, with an injectable root.

Paths follow proc(5). A thread's files are read through ``<root>/<tid>/task/<tid>/``:
the kernel resolves ``/proc/<tid>`` for any thread id, not only for thread-group
leaders (it is just not listed by readdir), so a thread can be addressed without its
pid. Fake trees in tests mirror this with a symlink ``<root>/<tid> -> <root>/<pid>``.

Every read goes through :func:`~parlschedd.host.errors.translated`: a missing file means
the task is gone (ENOENT), and so does ESRCH, which /proc returns for a task that exits
while its file is open.

Paths naming a process or thread are plain strings (here and in cgroups.py), never
pathlib's: Python 3.11's PurePath interns every part (sys.intern), so each pid and
tid met was added to the interpreter's table of interned strings and dropped when it
died. Under process churn (a --descendants target forking short-lived children) that
table (0.9 MB in the daemon) was rebuilt every few minutes, the new one allocated
beside the old, and the daemon's heap grew by one such block at a time, left free
between small blocks that stayed.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import time
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from dataclasses import dataclass

from parlschedd.cpulist import parse_cpulist
from parlschedd.host.errors import HostError, ThreadGone, Unsupported, as_host_error, translated

PROC_ROOT = "/proc"


PF_EXITING = 0x00000004  # include/linux/sched.h: the task is in do_exit, not yet a zombie
PF_KTHREAD = 0x00200000  # include/linux/sched.h: the task is a kernel thread
READ_SIZE = 1 << 16  # bytes a read(2) of a /proc file asks for
PID_MAX_LIMIT = 1 << 22  # include/linux/threads.h: no pid or tid is above it on 64-bit kernels


@dataclass(frozen=True)
class Stat:
    """The fields of ``/proc/<id>/stat`` the scheduler needs (proc(5) numbering)."""

    pid: int
    comm: str
    state: str
    ppid: int
    start_time: int  # field 22: clock ticks after boot
    processor: int  # field 39: the CPU it last ran on
    flags: int = 0  # field 9: PF_* (include/linux/sched.h)
    num_threads: int = 1  # field 20: the thread group's threads, an exited leader among them

    @property
    def kernel_thread(self) -> bool:
        return bool(self.flags & PF_KTHREAD)

    @property
    def exited(self) -> bool:
        """A process that has exited and awaits its parent's wait(2): a zombie leader
        alone in its thread group. A leader that ended with pthread_exit(3) is a zombie
        too while its other threads run on (they count in ``num_threads``, it with
        them): that process is alive."""
        return self.state == "Z" and self.num_threads <= 1

    @property
    def exiting(self) -> bool:
        """Its one thread is ending (in do_exit, PF_EXITING) or has ended: the process is
        about to be a zombie, and its pidfd does not poll readable yet. A leader that
        ended with pthread_exit(3) while other threads run on is not."""
        return (bool(self.flags & PF_EXITING) or self.state in ("Z", "X")) and self.num_threads <= 1


@dataclass(frozen=True)
class Schedstat:
    """``/proc/<id>/schedstat`` (Documentation/scheduler/sched-stats.rst)."""

    run_ns: int  # time spent on the CPU
    wait_ns: int  # time spent runnable, waiting for a CPU
    timeslices: int


@dataclass(frozen=True)
class Uids:
    """Real, effective, saved and filesystem uid from the ``Uid:`` line of status."""

    real: int
    effective: int
    saved: int
    fs: int

    @property
    def owner(self) -> int:
        """Whose process this is to place: its uid where real, effective and saved
        agree, else root's (a setuid program, or root's with privileges set aside for a
        while: a user may not manage it, as the kernel lets it not ptrace it)."""
        return self.real if self.real == self.effective == self.saved else 0


def parse_stat(text: str) -> Stat:
    """Parse a stat line. comm sits in parentheses and may itself contain ``)`` and
    spaces, so it ends at the *last* ``)``; the fields after it are space separated."""
    open_at = text.index("(")
    close_at = text.rindex(")")
    rest = text[close_at + 2 :].split()
    # rest[0] is field 3 (state); field n is rest[n - 3].
    return Stat(
        pid=int(text[:open_at]),
        comm=text[open_at + 1 : close_at],
        state=rest[0],
        ppid=int(rest[1]),
        flags=int(rest[6]),
        num_threads=int(rest[17]),
        start_time=int(rest[19]),
        processor=int(rest[36]),
    )


def parse_schedstat(text: str) -> Schedstat:
    """Parse the three numbers of a schedstat file."""
    run_ns, wait_ns, slices = (int(v) for v in text.split()[:3])
    return Schedstat(run_ns, wait_ns, slices)


def status_field(status: str, key: str) -> list[str]:
    """The values of the ``key:`` line of a status file. Lines end at ``\n`` alone: the
    kernel escapes only that (and ``\\``) in the Name line, the first, so a task named
    "\x1cUid:\t0" made a line of str.splitlines() that was read as its owner's."""
    for line in status.split("\n"):
        if line.startswith(key + ":"):
            return line.split()[1:]
    raise ValueError(f"no {key}: line in status")


def parse_uids(status: str) -> Uids:
    """The ``Uid:`` line of a status file."""
    real, eff, saved, fs = (int(v) for v in status_field(status, "Uid")[:4])
    return Uids(real, eff, saved, fs)


def process_stat(pid: int, root: str = PROC_ROOT) -> Stat:
    """``/proc/<pid>/stat`` of a process."""
    return parse_stat(_read(os.path.join(root, str(pid), "stat"), pid=pid))


def thread_stat(tid: int, root: str = PROC_ROOT) -> Stat:
    """``/proc/<tid>/task/<tid>/stat``: the thread's own line, not the process totals."""
    return parse_stat(_read(os.path.join(_thread_dir(root, tid), "stat"), tid=tid))


def process_start_time(pid: int, root: str = PROC_ROOT) -> int:
    """Start time of a process in clock ticks after boot (stat field 22)."""
    return process_stat(pid, root).start_time


def thread_start_time(tid: int, root: str = PROC_ROOT) -> int:
    """Start time of a thread in clock ticks after boot (stat field 22)."""
    return thread_stat(tid, root).start_time


def thread_schedstat(tid: int, root: str = PROC_ROOT) -> Schedstat:
    """The thread's schedstat: ns on CPU is a counter that needs neither perf nor a PMU."""
    return parse_schedstat(_read(os.path.join(_thread_dir(root, tid), "schedstat"), tid=tid))


def thread_cpus_allowed(tid: int, root: str = PROC_ROOT) -> frozenset[int]:
    """The thread's affinity mask as it is set (``Cpus_allowed_list`` of its status),
    offline CPUs included: sched_getaffinity(2) gives only those of its CPUs that are
    online."""
    status = _read(os.path.join(_thread_dir(root, tid), "status"), tid=tid)
    try:
        return parse_cpulist(status_field(status, "Cpus_allowed_list")[0])
    except (ValueError, IndexError) as exc:
        raise HostError(f"unreadable Cpus_allowed_list of tid {tid}: {exc}", tid=tid) from None


def comm(pid: int, root: str = PROC_ROOT) -> str:
    """The process name (``/proc/<pid>/comm``, at most 15 bytes), without the one
    newline the kernel ends it with (a name may end with its own)."""
    return _read(os.path.join(root, str(pid), "comm"), pid=pid).removesuffix("\n")


def cmdline(pid: int, root: str = PROC_ROOT, limit: int | None = None, any_thread: bool = False) -> list[str]:
    """The argument vector; empty for kernel threads and zombies. ``limit``: of its
    first that many bytes (a command line can be hundreds of megabytes). ``any_thread``:
    a process whose main thread ended (pthread_exit(3)) while others run on is read
    through one of those: its own file reads empty then (the kernel reads the main
    thread's memory, which that thread let go), and a rule matching its command line
    let it go. A listing more for each kernel thread, so asked for the targets alone."""
    raw = _read(os.path.join(root, str(pid), "cmdline"), pid=pid, limit=limit)
    if not raw and any_thread:
        raw = _cmdline_of_another_thread(pid, root, limit)
    return raw.rstrip("\0").split("\0") if raw else []


def _cmdline_of_another_thread(pid: int, root: str, limit: int | None) -> str:
    """The command line as a thread other than the main one reads it; "" when there is
    none (a kernel thread, a process of one thread)."""
    task = os.path.join(root, str(pid), "task")
    try:
        tids = [name for name in os.listdir(task) if name.isdigit() and name != str(pid)]
    except OSError:
        return ""
    for tid in tids:
        try:
            raw = _read(os.path.join(task, tid, "cmdline"), pid=pid, limit=limit)
        except HostError:
            continue  # that thread ended: the next one
        if raw:
            return raw
    return ""


def network_interfaces(root: str = PROC_ROOT) -> list[str]:
    """The interfaces of the caller's network namespace (``/proc/self/net/dev``): what
    socket.if_nameindex() tells, without the netlink socket that a unit's
    RestrictAddressFamilies= refuses."""
    lines = [line for line in _read(os.path.join(root, "self", "net", "dev")).split("\n")[2:] if line]  # 2 headers
    return [line.split(":", 1)[0].strip() for line in lines]


# The interpreter's options that take the next word as their value (python3 --help).
_PYTHON_VALUED = ("-W", "-X", "--check-hash-based-pycs")


def runs(argv: Sequence[str], program: str) -> bool:
    """Whether command line ``argv`` runs ``program``, a Python command of this
    project: as itself, or run by a Python interpreter as its script (which the kernel
    hands to the interpreter named by the script's first line) or as ``-m program``,
    after the interpreter's own options (``python3 -u -m parlschedd``, ``-X dev``)."""
    if not argv:
        return False
    if os.path.basename(argv[0]) == program:
        return True
    if not os.path.basename(argv[0]).startswith("python"):
        return False
    words = iter(argv[1:])
    for word in words:
        if word == "-m" or word.startswith("-m"):  # -m program, or -mprogram
            return (word[2:] or next(words, None)) == program
        if word.startswith("-c"):  # a command, not a script
            return False
        if word in _PYTHON_VALUED:
            next(words, None)
        elif not word.startswith("-") or word == "-":
            return os.path.basename(word) == program
    return False


def process_uids(pid: int, root: str = PROC_ROOT) -> Uids:
    """The uids of a process, from ``/proc/<pid>/status``."""
    return parse_uids(_read(os.path.join(root, str(pid), "status"), pid=pid))


def owner(pid: int, root: str = PROC_ROOT) -> int | None:
    """Whose the process (or thread: a uid is per thread) is, ``Uids.owner``; None once
    it exited or cannot be read."""
    try:
        return process_uids(pid, root).owner
    except HostError:
        return None


def thread_group(tid: int, root: str = PROC_ROOT) -> int:
    """The pid of the process that ``tid`` is a thread of (``Tgid:``; ``tid`` itself
    for a process's main thread). /proc/<tid> resolves for any thread, listed or not."""
    return int(status_field(_read(os.path.join(root, str(tid), "status"), tid=tid), "Tgid")[0])


def ancestors(pid: int, root: str = PROC_ROOT) -> Iterator[int]:
    """The parent of ``pid``, its parent, ... up to PID 1 (or 0, the parent of a
    process whose parent is outside its pid namespace); the walk ends early where one
    is gone, or at a ppid loop (a fake tree's, never the kernel's)."""
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            pid = process_stat(pid, root).ppid
        except HostError:
            return
        yield pid


def descendants(pid: int, root: str = PROC_ROOT, pruned: Container[int] = ()) -> list[int]:
    """All descendants of ``pid`` (children, grandchildren, ...), ascending; none in
    ``pruned``, nor any below one of those."""
    kids_of = _children_lookup(pid, root)
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        kids = [k for k in kids_of(frontier.pop()) if k not in found and k not in pruned]
        found.update(kids)
        frontier.extend(kids)
    return sorted(found)


def pidfd_open(pid: int) -> int | None:
    """A pidfd for ``pid`` (pidfd_open(2), Linux 5.3), or None where the kernel or
    Python lacks it. The fd is close-on-exec; the caller closes it. ThreadGone when
    ``pid`` names no process: ESRCH, ENOENT for a thread that is not a thread-group
    leader since Linux 6.9, and EINVAL for one before 6.9 (with no flags passed,
    EINVAL can mean nothing else), so a thread id is refused alike on every kernel.
    EPERM and EACCES, which pidfd_open itself never returns, are a seccomp filter's
    answer to a call it does not know (a container profile older than the call): no
    pidfd, as on a kernel without one (every attach was refused)."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        with translated("pidfd_open", pid=pid,
                        overrides={errno.EINVAL: ThreadGone, errno.EPERM: Unsupported, errno.EACCES: Unsupported}):
            return int(opener(pid))
    except Unsupported:
        return None


class ProcessHandle:
    """A process identified so that pid reuse cannot fool the daemon.

    The pidfd (when the kernel has one) refers to this very process: it becomes
    readable when the process exits, whatever later happens to the pid number. The
    start time read *after* opening the pidfd covers kernels without pidfds: a new
    process with the same pid has a different start time. The open task directory
    lists the threads each period without a path lookup.
    """

    def __init__(self, pid: int, root: str = PROC_ROOT) -> None:
        self.pid = pid
        self._root = root
        self.task_fd = -1
        self.pidfd = pidfd_open(pid)
        self._poller: select.poll | None = None  # kept: alive() runs in every busy period
        if self.pidfd is not None:
            self._poller = select.poll()
            self._poller.register(self.pidfd, select.POLLIN)
        try:
            with translated("open task directory", pid=pid):
                self.task_fd = os.open(os.path.join(root, str(pid), "task"), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            self.start_time = process_start_time(pid, root)
        except BaseException:
            self.close()
            raise

    def tids(self) -> list[int]:
        """The process's tids, ascending (as :func:`list_tids`); ThreadGone once it
        has exited."""
        with translated("list threads", pid=self.pid):
            tids = sorted(int(name) for name in os.listdir(self.task_fd) if name.isdigit())
        if not tids:
            raise ThreadGone(f"process {self.pid} has exited", pid=self.pid)
        return tids

    def thread_count(self) -> int:
        """How many threads the process has, from one fstat of the open task directory
        instead of a listing: procfs gives it 2 + the number of threads as its link
        count (proc_task_getattr)."""
        with translated("stat task directory", pid=self.pid):
            return os.fstat(self.task_fd).st_nlink - 2

    def alive(self) -> bool:
        """True while the process runs and ``pid`` still names it."""
        if self._poller is not None:
            # the pidfd names this very process: readable once it has exited
            return not self._poller.poll(0)
        try:
            return process_start_time(self.pid, self._root) == self.start_time
        except ThreadGone:
            return False

    def close(self) -> None:
        """Release the fds; idempotent."""
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
            self._poller = None
        if self.task_fd >= 0:
            os.close(self.task_fd)
            self.task_fd = -1

    def __enter__(self) -> ProcessHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


PIDFD_THREAD = os.O_EXCL  # pidfd_open(2) flag, Linux 6.9: a pidfd for one thread


class ThreadHandle:
    """An fd that names one thread for good, so a reused tid is never mistaken for it.

    Where the kernel has thread pidfds (Linux 6.9), the fd is one: it becomes readable
    when that very thread exits, and many are checked with a single poll(2) (see
    :func:`exited`). Elsewhere, and under a fake /proc root, it is an open
    ``/proc/<tid>/task/<tid>/comm``: a /proc fd stays bound to the task it was opened
    for, and reading it fails with ESRCH once that thread has exited, even if the tid
    is reused; ``comm`` is the cheapest such file to re-read (``stat`` formats 52
    fields, about 3x dearer). Either way the fd is opened before the start time is read
    by path and checked alive after, so both name the same live thread.
    """

    def __init__(self, tid: int, start_time: int, root: str = PROC_ROOT, *, pidfd: bool = True) -> None:
        self.tid = tid
        self.fd = -1
        self.is_pidfd = False
        if pidfd and root == PROC_ROOT:
            try:
                self.fd, self.is_pidfd = os.pidfd_open(tid, PIDFD_THREAD), True
            except (AttributeError, OSError):
                pass  # an older kernel (EINVAL) or a gone thread, which the open below reports
        if self.fd < 0:
            with translated("open comm", tid=tid):
                self.fd = os.open(os.path.join(_thread_dir(root, tid), "comm"), os.O_RDONLY | os.O_CLOEXEC)
        try:
            found = thread_start_time(tid, root)
            self.check()
            if found != start_time:
                raise ThreadGone(f"tid {tid} now names another thread", tid=tid)
        except BaseException:
            self.close()
            raise

    def check(self) -> None:
        """ThreadGone once the thread has exited."""
        if exited([self]):
            raise ThreadGone(f"tid {self.tid} has exited", tid=self.tid)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def exited(handles: Iterable[ThreadHandle]) -> set[int]:
    """The tids of ``handles`` whose thread has exited: one poll(2) over the thread
    pidfds, one 1-byte read for each comm fd (the per-period hot path of pinning)."""
    gone: set[int] = set()
    poller, polled = select.poll(), {}
    for h in handles:
        if h.is_pidfd:
            poller.register(h.fd, select.POLLIN)
            polled[h.fd] = h.tid
            continue
        try:
            os.pread(h.fd, 1, 0)
        except OSError as exc:
            error = as_host_error(exc, "read comm", tid=h.tid)
            if not isinstance(error, ThreadGone):
                raise error from exc
            gone.add(h.tid)
    if polled:
        gone.update(polled[fd] for fd, _ in poller.poll(0))
    return gone


class ThreadExits:
    """Whether any thread of a set has exited, in one epoll_wait(2) over their thread
    pidfds (pidfd_open(2) with PIDFD_THREAD, Linux 6.9: readable once that thread
    exits); epoll, not poll, so that the question costs the same for 16 threads or
    1024 (a poll(2) over 1024 pidfds took 0.5 ms).

    With the task directory's link count (:meth:`ProcessHandle.thread_count`) this
    tells the daemon, without listing the directory, that a process has exactly the
    threads it knows: no new one (the count would differ) and no exit hidden by a birth
    in the same period. A thread that cannot be watched (an older kernel, a fake /proc
    root, no fd or epoll watch left) makes :meth:`any_exited` say True for as long as
    it is in the set, so the caller lists as it would without this. Kernel notes: on
    6.9-6.14 a zombie leader's thread pidfd polls readable, so a process whose main
    thread exited before the others is listed every period; nothing is missed.
    """

    def __init__(self, root: str = PROC_ROOT) -> None:
        self._fds: dict[int, int] = {}
        self._unwatched: set[int] = set()
        self._poller: select.epoll | None = None
        if root == PROC_ROOT and hasattr(os, "pidfd_open"):
            try:
                self._poller = select.epoll()
            except OSError:  # EMFILE: watch nothing, the caller lists
                pass

    def add(self, tid: int) -> None:
        """Watch ``tid``; never raises: a thread that cannot be watched is remembered
        as such."""
        fd = -1
        if self._poller is not None:
            try:
                fd = os.pidfd_open(tid, PIDFD_THREAD)
                self._poller.register(fd, select.EPOLLIN)
            except OSError:  # EINVAL before Linux 6.9, ESRCH, EMFILE; ENOSPC: max_user_watches
                if fd >= 0:
                    os.close(fd)
                fd = -1
        if fd < 0:
            self._unwatched.add(tid)
            return
        self._fds[tid] = fd

    def remove(self, tid: int) -> None:
        """Stop watching ``tid``; unknown tids are ignored."""
        self._unwatched.discard(tid)
        fd = self._fds.pop(tid, None)
        if fd is not None:
            os.close(fd)  # the last reference: epoll forgets it by itself

    def any_exited(self) -> bool:
        """True when a watched thread has exited, when some thread is not watched, and
        always where threads cannot be watched at all."""
        return self._poller is None or bool(self._unwatched) or bool(self._poller.poll(0, 1))

    def exited(self) -> set[int]:
        """The watched tids whose thread has exited (the tid may name a new thread by
        now); empty where nothing is watched."""
        if self._poller is None or not self._fds:
            return set()
        ready = {fd for fd, _ in self._poller.poll(0, len(self._fds))}
        return {tid for tid, fd in self._fds.items() if fd in ready}

    def reaped(self, tid: int) -> bool:
        """Whether the watched thread is gone for good, its tid free for a new task: a
        leader that exited is a zombie until its parent reaps it, and holds its pid
        till then. Signal 0 through its pidfd (pidfd_send_signal(2)) reaches a zombie
        and fails with ESRCH once it was reaped, so a new process on the pid is told
        however soon it came (a start time counts clock ticks). False for a tid not
        watched."""
        fd = self._fds.get(tid)
        if fd is None:
            return False
        try:
            signal.pidfd_send_signal(fd, 0)
        except ProcessLookupError:
            return True
        except OSError:  # EPERM: it is there, only not ours to signal
            return False
        return False

    def close(self) -> None:
        """Release every fd; idempotent. A closed watch answers "maybe"."""
        for tid in list(self._fds):
            self.remove(tid)
        self._unwatched.clear()
        if self._poller is not None:
            self._poller.close()
            self._poller = None


def birth_mark(root: str = PROC_ROOT) -> tuple[int, int]:
    """(tasks on the host, the pid allocated last in the reader's pid namespace): the
    last two fields of /proc/loadavg (proc(5)). A process or thread created in that
    namespace or one below it takes a pid there, which moves the second (pids are
    handed out in turn; not a pid asked for with clone3's set_tid, nor after a write
    to ns_last_pid); the first moves when a task shows in /proc and when one is
    released (reaped). ValueError for a malformed file."""
    fields = _read(os.path.join(root, "loadavg")).split()
    if len(fields) != 5 or "/" not in fields[3]:
        raise ValueError(f"unexpected /proc/loadavg: {' '.join(fields)!r}")
    return int(fields[3].split("/")[1]), int(fields[4])


def birth_mark_is_the_kernels(root: str = PROC_ROOT) -> bool:
    """Whether ``root``/loadavg is the proc file system's own, not a file mounted over
    it: LXCFS (LXD, some Kubernetes nodes) serves a container's loadavg refreshed
    every few seconds, whose fields do not move at each birth."""
    try:
        return os.stat(os.path.join(root, "loadavg")).st_dev == os.stat(root).st_dev
    except OSError:
        return False


def start_time_now() -> int:
    """The moment of the call in the unit and origin of a thread's start time (stat
    field 22: clock ticks since boot, sleep included), so a saved one tells threads
    born since from those born before."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def list_tids(pid: int, root: str = PROC_ROOT) -> list[int]:
    """The tids of ``pid``, ascending: one directory listing, for the per-period scan
    (names are read only for threads not seen before). ThreadGone if the process is."""
    with translated("list threads", pid=pid):
        return sorted(int(name) for name in os.listdir(os.path.join(root, str(pid), "task")) if name.isdigit())


def _thread_dir(root: str, tid: int) -> str:
    return os.path.join(root, str(tid), "task", str(tid))


def _read(path: str, *, tid: int | None = None, pid: int | None = None, limit: int | None = None) -> str:
    """Read a small /proc file (its first ``limit`` bytes, when given), as UTF-8 with
    any other byte kept as an escape, and no line ends translated (a name's \\r is the
    kernel's). Plain strings and os.read, not pathlib or open(): this runs per thread
    per period in the daemon's hot path, and per process at each rules' rescan, where
    the io stack tripled the cost of a read."""
    chunks, size = [], 0
    with translated(f"read {os.path.basename(path)}", tid=tid, pid=pid):
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            while limit is None or size < limit:  # to the end: a short read is not one (seq_file)
                chunk = os.read(fd, READ_SIZE if limit is None else min(READ_SIZE, limit - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            os.close(fd)
    return b"".join(chunks).decode(errors="backslashreplace")


def _children_lookup(pid: int, root: str) -> Callable[[int], list[int]]:
    """How to find a process's children on this kernel.

    ``/proc/<pid>/task/<tid>/children`` (CONFIG_PROC_CHILDREN) lists each thread's
    children; without it one scan of every process's ppid is taken and reused.
    """
    tids = list_tids(pid, root)
    if tids and os.path.exists(os.path.join(root, str(pid), "task", str(tids[0]), "children")):
        return lambda parent: _children_from_task_files(parent, root)
    by_parent = _children_by_scan(root)
    return lambda parent: by_parent.get(parent, [])


def _children_from_task_files(pid: int, root: str) -> list[int]:
    kids: set[int] = set()
    try:
        tids = list_tids(pid, root)
    except ThreadGone:
        return []
    for tid in tids:
        path = os.path.join(root, str(pid), "task", str(tid), "children")
        try:
            kids.update(int(v) for v in _read(path, tid=tid).split())
        except ThreadGone:
            continue
    return sorted(kids)


def _children_by_scan(root: str) -> dict[int, list[int]]:
    by_parent: dict[int, set[int]] = {}
    for name in os.listdir(root):
        if not name.isdigit():
            continue
        try:
            st = process_stat(int(name), root)
        except ThreadGone:
            continue
        by_parent.setdefault(st.ppid, set()).add(st.pid)
    return {ppid: sorted(kids) for ppid, kids in by_parent.items()}
