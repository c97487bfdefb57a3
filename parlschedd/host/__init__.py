"""The OS adapter layer: everything the daemon asks of Linux, behind one façade.

The daemon imports from here only; the modules behind it are one concept each:

``errors``   HostError, ThreadGone, AccessDenied, Unsupported, InvalidMask, TooManyFiles
             and ``translated``, the one OSError-to-HostError translator.
``base``     The scheduler's seam: the ``Counters`` and ``Actuator`` protocols (the
             simulator implements them too), ``CounterSource``, ``RestoreReport``.
``perf``     perf_event_open(2) via ctypes: ``CounterSet`` (one counter group per
             thread), ``detect_source``, ``parse_group_read``, ``raise_fd_limit``.
``procfs``   /proc readers with an injectable root: threads, start times, uids,
             cmdline, children/descendants, schedstat, ``ProcessHandle`` (pidfd).
``cgroups``  cgroup v1/v2/hybrid layout, membership, member processes, cpusets.
``affinity`` sched_{get,set}affinity and ``Pinner`` (save, set, restore).
``state``    Atomic JSON state files.
``privileges`` The daemon's effective capabilities (CAP_SYS_NICE, CAP_PERFMON).

Typical use by the daemon::

    raise_fd_limit()
    counters = CounterSet(detect_source(config.utility))
    pinner = Pinner.from_json(old) if (old := read_state(path)) else Pinner()
    for t in list_threads(pid):
        start = thread_start_time(t.tid)
        counters.open(t.tid); pinner.adopt(t.tid, start)
    ...  # each period: counters.read(tid), pinner.pin(tid, {cpu}); write_state(path, pinner.to_json())
    report = pinner.restore_all()

Any per-thread call may raise ThreadGone: drop the thread (close its counter,
``pinner.forget``) and go on. ``HAS_PIDFD`` says whether this host has pidfds;
:func:`detect_source` says which counters work.
"""

from __future__ import annotations

import os

from parlschedd.host.affinity import PinRecord, Pinner, get_affinity, set_affinity
from parlschedd.host.base import Actuator, Counters, CounterSource, RestoreReport
from parlschedd.host.cgroups import (
    Layout,
    Membership,
    cgroup_procs,
    detect_layout,
    effective_cpus,
    memberships,
    task_cpus,
)
from parlschedd.host.errors import (
    AccessDenied,
    HostError,
    InvalidMask,
    ThreadGone,
    TooManyFiles,
    Unsupported,
    translated,
)
from parlschedd.host.perf import CounterSet, detect_source, raise_fd_limit
from parlschedd.host.procfs import (
    ProcessHandle,
    Schedstat,
    ThreadInfo,
    Uids,
    children,
    cmdline,
    comm,
    descendants,
    list_threads,
    pidfd_open,
    process_start_time,
    process_uids,
    thread_schedstat,
    thread_start_time,
)
from parlschedd.host.state import read_state, write_state

HAS_PIDFD = hasattr(os, "pidfd_open")

__all__ = [
    "HAS_PIDFD",
    "AccessDenied",
    "Actuator",
    "CounterSet",
    "CounterSource",
    "Counters",
    "HostError",
    "InvalidMask",
    "Layout",
    "Membership",
    "PinRecord",
    "Pinner",
    "ProcessHandle",
    "RestoreReport",
    "Schedstat",
    "ThreadGone",
    "ThreadInfo",
    "TooManyFiles",
    "Uids",
    "Unsupported",
    "cgroup_procs",
    "children",
    "cmdline",
    "comm",
    "descendants",
    "detect_layout",
    "detect_source",
    "effective_cpus",
    "get_affinity",
    "list_threads",
    "memberships",
    "pidfd_open",
    "process_start_time",
    "process_uids",
    "raise_fd_limit",
    "read_state",
    "set_affinity",
    "task_cpus",
    "thread_schedstat",
    "thread_start_time",
    "translated",
    "write_state",
]
