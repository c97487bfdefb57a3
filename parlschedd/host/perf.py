"""Per-thread counters: perf_event_open(2) through ctypes, with /proc schedstat fallback.

One counter *group* per thread (``pid = tid, cpu = -1``: follow the thread on any CPU),
read with one ``read(2)`` in ``PERF_FORMAT_GROUP`` layout. Each read's interval is
scaled by its own time_enabled / time_running, which differ when the PMU multiplexes
more events than it has counters (one never on the PMU is scaled with the next:
:func:`scaled_count`). The ABI is include/uapi/linux/perf_event.h; the kernel accepts any attr
size from VER0 up and ignores zero tails, so the VER6 layout below works on every
kernel that matters (VER6 is Linux 5.5; older kernels check the extra bytes are zero).

File descriptors: either perf source costs one fd per thread (a group of one event:
the leader's own times scale it). EMFILE/ENFILE raise
:class:`~parlschedd.host.errors.TooManyFiles` from :meth:`CounterSet.open`, with nothing
leaked; the set never silently switches source, because utilities from different
sources are not comparable. The daemon calls :func:`raise_fd_limit` at start, and a
thread whose counter hits TooManyFiles is not managed (the engine's ``_adopt``).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import math
import os
import platform
import resource
import struct
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from parlschedd.host import procfs
from parlschedd.host.base import CounterSource
from parlschedd.host.errors import HostError, ThreadGone, Unsupported, as_host_error, translated

PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_HW_INSTRUCTIONS = 1
PERF_COUNT_SW_TASK_CLOCK = 1

PERF_FORMAT_TOTAL_TIME_ENABLED = 1 << 0
PERF_FORMAT_TOTAL_TIME_RUNNING = 1 << 1
PERF_FORMAT_ID = 1 << 2
PERF_FORMAT_GROUP = 1 << 3
GROUP_READ_FORMAT = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING

PERF_FLAG_FD_CLOEXEC = 1 << 3
PERF_EVENT_IOC_ENABLE = 0x2400  # _IO('$', 0)
PERF_IOC_FLAG_GROUP = 1 << 0

PERF_ATTR_SIZE_VER6 = 120

# __NR_perf_event_open per architecture (arch/x86/entry/syscalls/syscall_64.tbl,
# include/uapi/asm-generic/unistd.h for arm64).
SYSCALL_NUMBERS: Mapping[str, int] = {"x86_64": 298, "aarch64": 241}

# perf_event_open(2) errnos that mean "this event cannot be counted here".
_PERF_OVERRIDES = {
    errno.ENOENT: Unsupported,  # no such event (no PMU, or the PMU lacks it)
    errno.EOPNOTSUPP: Unsupported,
    errno.EINVAL: Unsupported,  # config not valid for this PMU
    errno.E2BIG: Unsupported,  # attr size unknown to the kernel
}


class PerfEventAttr(ctypes.Structure):
    """``struct perf_event_attr`` up to PERF_ATTR_SIZE_VER6 (120 bytes).

    Field order, widths and the 64-bit flags word follow the uapi header; ctypes lays
    bit fields out from the least significant bit like GCC on little-endian x86_64 and
    arm64, which the layout test checks bit by bit.
    """

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),  # union with sample_freq
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("disabled", ctypes.c_uint64, 1),
        ("inherit", ctypes.c_uint64, 1),
        ("pinned", ctypes.c_uint64, 1),
        ("exclusive", ctypes.c_uint64, 1),
        ("exclude_user", ctypes.c_uint64, 1),
        ("exclude_kernel", ctypes.c_uint64, 1),
        ("exclude_hv", ctypes.c_uint64, 1),
        ("exclude_idle", ctypes.c_uint64, 1),
        ("other_flags", ctypes.c_uint64, 56),  # mmap .. text_poke and __reserved_1
        ("wakeup_events", ctypes.c_uint32),  # union with wakeup_watermark
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),  # union with bp_addr, kprobe_func, uprobe_path
        ("config2", ctypes.c_uint64),  # union with bp_len, kprobe_addr, probe_offset
        ("branch_sample_type", ctypes.c_uint64),
        ("sample_regs_user", ctypes.c_uint64),
        ("sample_stack_user", ctypes.c_uint32),
        ("clockid", ctypes.c_int32),
        ("sample_regs_intr", ctypes.c_uint64),
        ("aux_watermark", ctypes.c_uint32),
        ("sample_max_stack", ctypes.c_uint16),
        ("reserved_2", ctypes.c_uint16),
        ("aux_sample_size", ctypes.c_uint32),
        ("reserved_3", ctypes.c_uint32),
    ]


@dataclass(frozen=True)
class EventSpec:
    """One counter: perf type and config, named as ``perf stat`` names it."""

    name: str
    type: int
    config: int


INSTRUCTIONS = EventSpec("instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS)
TASK_CLOCK = EventSpec("task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK)

# The group opened per thread for each perf source; the first event is the leader and
# the value read() returns.
GROUPS: Mapping[CounterSource, tuple[EventSpec, ...]] = {
    CounterSource.INSTRUCTIONS: (INSTRUCTIONS,),
    CounterSource.TASK_CLOCK: (TASK_CLOCK,),
}

Opener = Callable[[PerfEventAttr, int, int, int, int], int]


def make_attr(event: EventSpec, *, leader: bool) -> PerfEventAttr:
    """The attr for one group member counting a thread in user and kernel mode.

    The leader starts disabled so the whole group is enabled at once; members start
    enabled and follow the leader. ``inherit`` stays 0: group reads are not supported
    on inherited events, and each thread gets its own group anyway. exclude_kernel = 0
    so that time and events in syscalls the thread makes are counted; exclude_hv = 1
    because hypervisor time is not the thread's.
    """
    attr = PerfEventAttr()
    attr.type = event.type
    attr.size = ctypes.sizeof(PerfEventAttr)
    attr.config = event.config
    attr.read_format = GROUP_READ_FORMAT
    attr.disabled = int(leader)
    attr.exclude_hv = 1
    return attr


def syscall_number(machine: str | None = None, pointer_bytes: int | None = None) -> int:
    """__NR_perf_event_open for ``machine`` (default: this one). The machine is the
    kernel's (uname); a 32-bit userland on a 64-bit kernel (an armhf container on
    arm64) has other numbers, where 241 is sched_setaffinity: refused."""
    arch = machine or platform.machine()
    if (pointer_bytes or struct.calcsize("P")) != 8:
        raise Unsupported(f"perf_event_open: a 32-bit process on {arch} is not supported")
    try:
        return SYSCALL_NUMBERS[arch]
    except KeyError:
        raise Unsupported(f"perf_event_open: no syscall number for {arch}") from None


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def perf_event_open(attr: PerfEventAttr, pid: int, cpu: int, group_fd: int, flags: int) -> int:
    """The raw syscall, retried on EINTR (it waits interruptibly while the thread
    execs; a raw syscall gets no PEP 475 retry); raises OSError with the kernel's errno."""
    while True:
        fd = _libc.syscall(
            ctypes.c_long(syscall_number()),
            ctypes.byref(attr),
            ctypes.c_int(pid),
            ctypes.c_int(cpu),
            ctypes.c_int(group_fd),
            ctypes.c_ulong(flags),
        )
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err != errno.EINTR:
            raise OSError(err, os.strerror(err))


@functools.cache
def _group_struct(n_events: int) -> struct.Struct:
    """The unpacker of a GROUP_READ_FORMAT read: nr, enabled, running, values."""
    return struct.Struct(f"={group_read_size(n_events) // 8}Q")


@functools.cache
def group_read_size(n_events: int, read_format: int = GROUP_READ_FORMAT) -> int:
    """Bytes one group read returns: nr, the optional times, then value (+ id) each."""
    words = 1 + _has(read_format, PERF_FORMAT_TOTAL_TIME_ENABLED)
    words += _has(read_format, PERF_FORMAT_TOTAL_TIME_RUNNING)
    words += n_events * (1 + _has(read_format, PERF_FORMAT_ID))
    return 8 * words


class GroupRead(NamedTuple):
    """One ``PERF_FORMAT_GROUP`` read, raw: the times (None when not in the format) and
    each member's count, leader first."""

    enabled: int | None
    running: int | None
    values: tuple[int, ...]


def parse_group_read(data: bytes, n_events: int, read_format: int = GROUP_READ_FORMAT) -> GroupRead:
    """Layout (perf_event.h, ``struct read_format``): u64 nr; u64 time_enabled and u64
    time_running when requested; then nr times {u64 value; u64 id when PERF_FORMAT_ID}."""
    if not read_format & PERF_FORMAT_GROUP:
        raise ValueError("read_format lacks PERF_FORMAT_GROUP")
    size = group_read_size(n_events, read_format)
    if len(data) < size:
        raise ValueError(f"group read of {len(data)} bytes, expected {size}")
    words = struct.unpack(f"={size // 8}Q", data[:size])
    if words[0] != n_events:
        raise ValueError(f"group has {words[0]} events, expected {n_events}")
    pos = 1
    enabled = running = None
    if read_format & PERF_FORMAT_TOTAL_TIME_ENABLED:
        enabled, pos = words[pos], pos + 1
    if read_format & PERF_FORMAT_TOTAL_TIME_RUNNING:
        running, pos = words[pos], pos + 1
    return GroupRead(enabled, running, tuple(words[pos :: 1 + _has(read_format, PERF_FORMAT_ID)]))


def scaled_count(state: list[float], enabled: int, running: int, value: int) -> float:
    """The count since the counter opened, estimated interval by interval; ``state`` is
    [enabled, running, value, count] at the last read that gave a count ([0, 0, 0, 0.0]
    at open) and is advanced to this one when it gives one.

    What a multiplexed counter counted between two reads is scaled by the times of that
    interval (perf_event_open(2): the count is of the time it was running, out of the
    time it was enabled). Scaling the whole life's count by the whole life's ratio
    instead makes the difference of two reads wrong, negative even, when the ratio
    changes (another perf user takes counters). NaN when the counter was enabled but
    never on the PMU since that read: the count is unknown, and ``state`` stays, so the
    next read scales the whole enabled span since the last count, as perf's own
    estimate does (moving on dropped the lost interval: the count fell behind for
    good). A thread that did not run moved neither time.
    """
    d_enabled, d_running = enabled - state[0], running - state[1]
    if d_running <= 0:
        return state[3] if d_enabled == 0 else math.nan
    state[3] += (value - state[2]) * d_enabled / d_running
    state[0], state[1], state[2] = enabled, running, value
    return state[3]


def open_group(tid: int, events: tuple[EventSpec, ...], opener: Opener = perf_event_open) -> list[int]:
    """Open and enable a counter group on ``tid``; on any failure close what was opened."""
    fds: list[int] = []
    try:
        with translated(f"perf_event_open {events[0].name}", tid=tid, overrides=_PERF_OVERRIDES):
            for i, event in enumerate(events):
                leader_fd = fds[0] if fds else -1
                fds.append(opener(make_attr(event, leader=i == 0), tid, -1, leader_fd, PERF_FLAG_FD_CLOEXEC))
        with translated("PERF_EVENT_IOC_ENABLE", tid=tid):
            fcntl.ioctl(fds[0], PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds


class CounterSet:
    """The real :class:`~parlschedd.host.base.Counters`: one group (or schedstat) per tid.

    Not thread-safe; the daemon loop owns it. ``opener`` is the syscall seam, replaced
    in tests only where this machine lacks what a call needs (a PMU).
    """

    def __init__(
        self,
        source: CounterSource,
        *,
        proc_root: str = procfs.PROC_ROOT,
        opener: Opener = perf_event_open,
    ) -> None:
        self.source = source
        self._events = GROUPS.get(source, ())
        self._proc_root = proc_root
        self._opener = opener
        self._fds: dict[int, list[int]] = {}
        self._scaled: dict[int, list[float]] = {}  # per tid: scaled_count's state
        # Only PMU events are multiplexed; a software group is always counting, its
        # times equal: no scaling to pay for on each read of each thread.
        self._multiplexed = any(e.type != PERF_TYPE_SOFTWARE for e in self._events)

    def open(self, tid: int) -> None:
        """Start counting ``tid`` (idempotent). Raises ThreadGone, AccessDenied,
        Unsupported or TooManyFiles; nothing stays open after a failure."""
        if tid in self._fds:
            return
        if self._events:
            self._fds[tid] = open_group(tid, self._events, self._opener)
            if self._multiplexed:
                self._scaled[tid] = [0, 0, 0, 0.0]
        else:
            procfs.thread_schedstat(tid, self._proc_root)
            self._fds[tid] = []

    def read(self, tid: int) -> float:
        """The leader's count since ``open``: instructions, or ns of CPU time (NaN: see
        :func:`scaled_count`). Schedstat raises ThreadGone for an exited thread, and
        closes the tid; a perf counter of an exited thread keeps its final value."""
        if not self._events:
            try:
                return float(procfs.thread_schedstat(tid, self._proc_root).run_ns)
            except ThreadGone:
                self.close(tid)
                raise
        raw = self.read_group(tid)
        if not self._multiplexed:
            return float(raw.values[0])
        return scaled_count(self._scaled[tid], raw.enabled, raw.running, raw.values[0])

    def read_many(self, tids: Sequence[int]) -> tuple[np.ndarray, list[int]]:
        """Leader values of many tids at once: (values, gone). A failed read gives NaN;
        tids that no longer exist are listed in ``gone`` (and closed, for schedstat).

        This is the daemon's per-period hot path, so perf groups are read and scaled
        inline (one os.read and one precompiled unpack per thread) rather than through
        ``read``; ``parse_group_read`` documents the layout and the tests compare the
        two.
        """
        values = np.full(len(tids), np.nan)
        gone: list[int] = []
        if not self._events:
            for i, tid in enumerate(tids):
                try:
                    values[i] = self.read(tid)
                except ThreadGone:
                    gone.append(tid)
                except HostError:
                    pass
            return values, gone
        size = group_read_size(len(self._events))
        unpack = _group_struct(len(self._events)).unpack
        fds, scaled, multiplexed, read = self._fds, self._scaled, self._multiplexed, os.read
        for i, tid in enumerate(tids):
            try:
                data = read(fds[tid][0], size)
            except OSError as exc:
                if isinstance(as_host_error(exc, "read perf group", tid=tid), ThreadGone):
                    gone.append(tid)
                continue
            if len(data) == size:
                _, enabled, running, leader = unpack(data)[:4]
                values[i] = scaled_count(scaled[tid], enabled, running, leader) if multiplexed else leader
        return values, gone

    def check_counting(self, tid: int, run_s: float = 0.002) -> None:
        """Raise Unsupported unless ``tid`` (the calling thread) is counted while it
        runs ``run_s`` of CPU time."""
        if not self._events:
            self.read(tid)
            return
        before = self.read_group(tid)
        end = time.thread_time() + run_s
        while time.thread_time() < end:
            pass
        after = self.read_group(tid)
        if after.running <= before.running or after.values[0] <= before.values[0]:
            raise Unsupported(f"{self.source.value} opens but does not count (running {before.running} -> "
                              f"{after.running} ns, count {before.values[0]} -> {after.values[0]})")

    def read_group(self, tid: int) -> GroupRead:
        """The raw read of a perf source's group: every member's count in the order of
        ``GROUPS[source]`` and the group's times."""
        fds = self._fds[tid]
        if not fds:
            raise ValueError(f"{self.source.value} counts no perf group")
        size = group_read_size(len(fds))
        try:
            data = os.read(fds[0], size)
        except OSError as exc:
            raise as_host_error(exc, "read perf group", tid=tid) from exc
        if len(data) != size:
            # perf_read() returns 0 bytes for an event in error state.
            raise HostError(f"perf group of tid {tid} is in error state", tid=tid)
        return parse_group_read(data, len(fds))

    def close(self, tid: int) -> None:
        """Close the tid's fds, members before the leader; unknown tids are ignored."""
        self._scaled.pop(tid, None)
        for fd in reversed(self._fds.pop(tid, [])):
            os.close(fd)

    def close_all(self) -> None:
        """Close every counter."""
        for tid in list(self._fds):
            self.close(tid)

    def __contains__(self, tid: object) -> bool:
        return tid in self._fds

    def __len__(self) -> int:
        return len(self._fds)

    def __enter__(self) -> CounterSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_all()


_FALLBACK_ORDER = (CounterSource.INSTRUCTIONS, CounterSource.TASK_CLOCK, CounterSource.SCHEDSTAT)


def detect_source(
    preferred: str = "auto",
    *,
    proc_root: str = procfs.PROC_ROOT,
    sysfs: str = "/sys",
    opener: Opener = perf_event_open,
    skipped: dict[CounterSource, str] | None = None,
) -> CounterSource:
    """The best source that works, starting from ``preferred``.

    ``preferred`` is "auto" (= "instructions"), "instructions", "task-clock" or
    "schedstat", matching the config's ``utility`` key. Each candidate must count on
    the calling thread while it runs a moment (a VM's vPMU may open an event that never
    counts; every counter may be taken); a source that fails falls through to the next
    (instructions -> task-clock -> schedstat), and why goes into ``skipped`` when
    given, so the caller compares the result with what it asked for and warns.
    Instructions are skipped on hybrid CPUs (:func:`core_pmus`). Raises Unsupported
    when even schedstat is missing.
    """
    names = {"auto": 0, "instructions": 0, "task-clock": 1, "schedstat": 2}
    if preferred not in names:
        raise ValueError(f"unknown counter source {preferred!r}; expected one of {sorted(names)}")
    why = {} if skipped is None else skipped
    tid = threading.get_native_id()
    for source in _FALLBACK_ORDER[names[preferred] :]:
        if source is CounterSource.INSTRUCTIONS and len(pmus := core_pmus(sysfs)) > 1:
            why[source] = (f"a hybrid CPU ({', '.join(pmus)}): one event counts on one core type only, "
                           "so threads on the others would read no instructions")
            continue
        with CounterSet(source, proc_root=proc_root, opener=opener) as probe:
            try:
                probe.open(tid)
                probe.check_counting(tid)
            except HostError as exc:
                why[source] = str(exc) + (" (no such event: no PMU, or the PMU lacks it)"
                                          if exc.errno == errno.ENOENT else "")
                continue
            return source
    raise Unsupported("no counter source works: perf_event_open refused and no schedstat")


def core_pmus(sysfs: str = "/sys") -> list[str]:
    """The CPU PMUs that cover only some CPUs (their ``cpus`` file lists them): two or
    more on a hybrid CPU (Intel's cpu_core and cpu_atom, Arm big.LITTLE), where an
    instructions event opened for a thread counts only while it runs on one PMU's
    cores. One (Arm) or none (x86's ``cpu``) elsewhere."""
    try:
        devices = Path(sysfs, "bus", "event_source", "devices").iterdir()
        return sorted(d.name for d in devices if (d / "cpus").is_file())
    except OSError:
        return []


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit and return it.

    Counters need one fd per managed thread (none with schedstat), and the daemon two thread pidfds
    more (the pinner's identity proof, the engine's exit watch): well above the usual
    soft limit of 1024 for a daemon managing many threads.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def _has(read_format: int, flag: int) -> int:
    return 1 if read_format & flag else 0
