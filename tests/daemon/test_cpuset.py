"""parlschedd/daemon/cpuset.py: a target's cpuset as the CPUs of each domain its
scheduler may place threads on.

Real processes in a real cgroup v1 cpuset each test makes (``cpuset``: CPUs 0-1, the
whole of this machine) and narrows, read through the daemon's reader
(``cgroups.task_cpus``). This machine has one NUMA node: its two CPUs stand in for a
two-domain box, one domain each ([[0], [1]]), as the engine's tests do.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

import pytest
import structlog.testing

from parlschedd.config import Config
from parlschedd.daemon.cpuset import cpuset_domains, follow_cpuset, placed_on, read_cpuset
from parlschedd.daemon.engine import Engine
from parlschedd.daemon.target import Target
from parlschedd.host import cgroups
from parlschedd.host.affinity import Pinner
from parlschedd.host.base import CounterSource
from parlschedd.host.perf import CounterSet
from tests.conftest import needs_root
from tests.reliability.helpers import sleepy

pytestmark = [needs_root, pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")]

TWO = ((0,), (1,))  # this machine's two CPUs as two domains


def test_a_cpuset_of_every_cpu_gives_every_domain_its_cpus(cpuset, kill_after) -> None:
    p = kill_after(sleepy(2))
    (cpuset / "cgroup.procs").write_text(str(p.pid))
    assert read_cpuset(p.pid, cgroups.task_cpus, TWO) == (frozenset({0, 1}), TWO)


def test_a_cpuset_of_one_cpu_leaves_the_other_domain_empty(cpuset, kill_after) -> None:
    """The domain of CPU 0 keeps its index with no CPU in it (a closed domain, not a
    dropped one: the domains' indices are the scheduler's), and that is where the
    target's threads are placed, not every CPU."""
    p = kill_after(sleepy(2))
    (cpuset / "cgroup.procs").write_text(str(p.pid))
    (cpuset / "cpuset.cpus").write_text("1")
    cpuset_read, cpus = read_cpuset(p.pid, cgroups.task_cpus, TWO)
    assert (cpuset_read, cpus) == (frozenset({1}), ((), (1,)))
    assert placed_on(cpus, TWO) == ((), (1,))


def test_without_a_cpuset_of_its_own_a_process_has_every_cpu(kill_after) -> None:
    """In the root cpuset (no restriction: every CPU of this machine) the domains are
    the daemon's own; None, a host without a cpuset hierarchy (not this one), is every
    domain's every CPU as given."""
    p = kill_after(sleepy(1))
    assert "cpuset:/\n" in open(f"/proc/{p.pid}/cgroup").read()  # the root cpuset
    read = read_cpuset(p.pid, cgroups.task_cpus, TWO)
    assert read == (frozenset(os.sched_getaffinity(0)), TWO)
    assert cpuset_domains(None, TWO) == TWO
    assert cpuset_domains(None, ((0, 1),)) == ((0, 1),)


def test_a_domain_keeps_its_cpus_in_order_and_only_the_daemons() -> None:
    """A cpuset wider than the daemon's CPUs gives no domain a CPU it lacks."""
    assert cpuset_domains(frozenset({3, 0, 1, 7}), ((1, 0), (2, 3), (5,))) == ((1, 0), (3,), ())


def test_a_cpuset_with_none_of_the_daemons_cpus_is_placed_on_every_cpu() -> None:
    cpus = cpuset_domains(frozenset({5}), TWO)
    assert cpus == ((), ())
    assert placed_on(cpus, TWO) == TWO


def test_an_exited_process_has_no_cpuset_read() -> None:
    p = sleepy(1)
    p.kill()
    p.wait()  # reaped: its pid names no process
    with structlog.testing.capture_logs() as logs:
        assert read_cpuset(p.pid, cgroups.task_cpus, TWO) is None
    assert [e["event"] for e in logs] == ["cpuset not read"]


@contextlib.contextmanager
def _attached(pid: int, domains: list[list[int]]) -> Iterator[Target]:
    """A real Target of ``pid`` as the engine attaches it (observe mode: nothing is
    pinned), on ``domains``; detached after."""
    counters = CounterSet(CounterSource.SCHEDSTAT)
    engine = Engine(Config(), domains, counters, Pinner())
    try:
        yield engine.attach(pid, time.monotonic(), observe=True)
    finally:
        engine.detach_all()
        counters.close_all()


def test_follow_cpuset_tells_a_change_once_and_keeps_what_it_read(cpuset, kill_after) -> None:
    """The cpuset shrinks to CPU 1 and grows back: each change is True once (and
    logged once), the rescans between are False; the target keeps the cpuset and
    its domains' CPUs as last read."""
    p = kill_after(sleepy(2))
    (cpuset / "cgroup.procs").write_text(str(p.pid))
    with _attached(p.pid, [[0], [1]]) as target:
        assert (target.cpuset, target.cpus) == (frozenset({0, 1}), TWO)
        with structlog.testing.capture_logs() as logs:
            assert follow_cpuset(target, cgroups.task_cpus, TWO) is False
            (cpuset / "cpuset.cpus").write_text("1")
            assert follow_cpuset(target, cgroups.task_cpus, TWO) is True
            assert (target.cpuset, target.cpus) == (frozenset({1}), ((), (1,)))
            assert follow_cpuset(target, cgroups.task_cpus, TWO) is False
            (cpuset / "cpuset.cpus").write_text("0-1")
            assert follow_cpuset(target, cgroups.task_cpus, TWO) is True
            assert (target.cpuset, target.cpus) == (frozenset({0, 1}), TWO)
        assert [e["cpus"] for e in logs if e["event"].startswith("cpuset changed")] == [["", "1"], ["0", "1"]]


def test_a_change_outside_the_daemons_cpus_changes_nothing_but_the_cpuset(cpuset, kill_after) -> None:
    """A daemon that uses CPU 0 alone: a cpuset that loses CPU 1 is no change to the
    target's scheduler, but the cpuset read is kept (its threads' adoptions take it)."""
    p = kill_after(sleepy(2))
    (cpuset / "cgroup.procs").write_text(str(p.pid))
    with _attached(p.pid, [[0]]) as target:
        (cpuset / "cpuset.cpus").write_text("0")
        assert follow_cpuset(target, cgroups.task_cpus, ((0,),)) is False
        assert (target.cpuset, target.cpus) == (frozenset({0}), ((0,),))


def test_a_target_that_exited_has_its_cpuset_unread_and_no_change(kill_after) -> None:
    """Its period drops it; meanwhile the cpuset is unread (None: the pinner reads each
    thread's) and its scheduler's CPUs stay."""
    p = kill_after(sleepy(1))
    with _attached(p.pid, [[0], [1]]) as target:
        assert target.cpuset == frozenset({0, 1})
        p.kill()
        p.wait()
        assert follow_cpuset(target, cgroups.task_cpus, TWO) is False
        assert (target.cpuset, target.cpus) == (None, TWO)
