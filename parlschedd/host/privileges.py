"""The daemon's privileges: its effective capabilities (capabilities(7)).

The daemon needs CAP_SYS_NICE to change the CPU affinity of other users' threads, and
CAP_PERFMON (or CAP_SYS_ADMIN, before Linux 5.8) to open perf counters on them. Root
has both unless a bounding set takes them away, and a service run as an unprivileged
user may be given them with AmbientCapabilities=, so the daemon asks the kernel what it
holds (the CapEff line of /proc/self/status) rather than whether its uid is 0. Who
else may use the daemon is the control socket's group (``group_id``).
"""

from __future__ import annotations

import grp
from pathlib import Path

from parlschedd.host.procfs import PROC_ROOT

CAP_SYS_ADMIN = 21
CAP_SYS_NICE = 23
CAP_PERFMON = 38


def effective_capabilities(proc_root: str = PROC_ROOT) -> frozenset[int]:
    """The capability numbers in this process's effective set."""
    status = Path(proc_root, "self", "status")
    for line in status.read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "CapEff":
            bits = int(value.strip(), 16)
            return frozenset(n for n in range(bits.bit_length()) if bits >> n & 1)
    raise ValueError(f"{status} has no CapEff line")


def perfmon_capable(caps: frozenset[int], initial_namespace: bool = True) -> bool:
    """Whether perf_event_open(2) lets this process count other users' threads (the
    kernel's perfmon_capable(): CAP_PERFMON, or CAP_SYS_ADMIN, in the initial user
    namespace, which the kernel checks them in)."""
    return initial_namespace and (CAP_PERFMON in caps or CAP_SYS_ADMIN in caps)


def user_namespace_map(proc_root: str = PROC_ROOT) -> str | None:
    """None in the initial user namespace, else this namespace's uid_map (one line of
    its ranges). In another (rootless podman, an unprivileged LXD container) CapEff
    holds the namespace's capabilities: the kernel checks CAP_PERFMON in the initial
    namespace, and CAP_SYS_NICE in the namespace of the thread whose affinity is set
    (user_namespaces(7)), so root here pins only the threads of processes in it. The
    initial namespace maps every uid to itself ("0 0 4294967295"); a kernel without
    user namespaces has no uid_map."""
    try:
        text = Path(proc_root, "self", "uid_map").read_text()
    except FileNotFoundError:
        return None
    return None if text.split() == ["0", "0", "4294967295"] else " ".join(text.split())


def group_id(name: str | None) -> int | None:
    """The gid of group ``name`` (None for no group, as an empty name is too);
    LookupError when this host has no such group."""
    if not name:
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise LookupError(f"no group {name!r} on this host") from None
