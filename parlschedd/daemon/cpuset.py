"""A target's cpuset, as the CPUs of each domain its scheduler may place threads on.

The engine reads the target process's cpuset at attach and every rescan_s
(``follow_cpuset``) and gives the target's scheduler each domain's CPUs in it: a domain
with none of them is closed to the target's threads.
"""

from __future__ import annotations

import structlog

from parlschedd.cpulist import format_cpulist
from parlschedd.daemon.target import DomainCpus, Target
from parlschedd.host.affinity import AllowedCpus
from parlschedd.host.errors import HostError

log = structlog.get_logger("parlschedd.engine")


def read_cpuset(pid: int, allowed: AllowedCpus, every_cpu: DomainCpus) -> tuple[frozenset[int] | None, DomainCpus] | None:
    """(the CPUs process ``pid``'s cpuset allows, None: every CPU; each domain's CPUs
    among them, ``cpuset_domains``), or None when it cannot be read (the process
    exited: its period drops it). Read for the process, not each thread: its threads
    share its cpuset unless someone moves one alone (v1, or v2 threaded cgroups), and
    a pin refused then still credits the period to the core the thread ran on."""
    try:
        cpuset = allowed(pid)
    except (HostError, ValueError) as exc:  # ValueError: a cpuset file that is not a CPU list
        log.debug("cpuset not read", pid=pid, error=str(exc))
        return None
    return cpuset, cpuset_domains(cpuset, every_cpu)


def cpuset_domains(allowed: frozenset[int] | None, every_cpu: DomainCpus) -> DomainCpus:
    """Each domain's CPUs that ``allowed`` holds (None: every CPU, ``every_cpu``), in
    the domains' order (a domain outside it has none): a cpuset bounds what the kernel
    lets a thread run on, so a pin elsewhere fails with EINVAL."""
    if allowed is None:
        return every_cpu
    return tuple(tuple(c for c in d if c in allowed) for d in every_cpu)


def placed_on(cpus: DomainCpus, every_cpu: DomainCpus) -> DomainCpus:
    """The CPUs a target's scheduler places threads on, given its cpuset's in each
    domain: those, or every CPU of every domain when the cpuset has none of ours."""
    return cpus if any(cpus) else every_cpu


def follow_cpuset(target: Target, allowed: AllowedCpus, every_cpu: DomainCpus) -> bool:
    """Read ``target``'s cpuset again (``target.cpuset``; unread: None, and the pinner
    reads each thread's). True when it allows other CPUs of the domains than when the
    target's scheduler was made, which ``target.cpus`` then holds: the target must
    learn afresh on them (domains open or close, and a domain's cores are its
    automata's columns), its threads joining the domains they run in (the engine's
    ``_ran_elsewhere``). Logged once per change; a change outside the daemon's CPUs
    changes nothing."""
    read = read_cpuset(target.pid, allowed, every_cpu)
    target.cpuset = None if read is None else read[0]  # unread: the pinner reads each thread's
    if read is None or read[1] == target.cpus:
        return False
    cpus = read[1]
    log.info("cpuset changed, learning afresh on the CPUs it allows", pid=target.pid,
             cpus=[format_cpulist(d) for d in cpus])
    target.cpus = cpus
    return True
