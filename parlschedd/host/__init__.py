"""The OS adapter layer: everything the daemon asks of Linux, one concept per module.

``errors``   HostError, ThreadGone, AccessDenied, Unsupported, InvalidMask, Overridden,
             TooManyFiles and ``translated``, the one OSError-to-HostError translator.
``base``     The engine's seam: the ``Counters`` and ``Actuator`` protocols,
             ``CounterSource``, ``RestoreReport``, ``PinRecord`` (what an actuator keeps
             of a thread, and the state file saves).
``perf``     perf_event_open(2) via ctypes: ``CounterSet`` (one counter group per
             thread), ``detect_source``, ``parse_group_read``, ``raise_fd_limit``.
``procfs``   /proc readers with an injectable root: threads, start times, uids,
             cmdline, descendants, schedstat, ``ProcessHandle`` (pidfd).
``cgroups``  cgroup v1/v2/hybrid membership, member processes, cpusets.
``affinity`` sched_{get,set}affinity and ``Pinner`` (save, set, restore).
``state``    Atomic JSON state files.
``privileges`` The daemon's effective capabilities (CAP_SYS_NICE, CAP_PERFMON).

Callers import the module they need (``from parlschedd.host import procfs``). Any
per-thread call may raise ThreadGone: the caller drops the thread (closes its counter,
``Pinner.release``) and goes on.
"""
