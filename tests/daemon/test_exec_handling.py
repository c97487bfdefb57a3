"""parlschedd/daemon/exec_handling.py: what an exec from a thread other than the main
one changes, read and carried out on a real process.

Each function is called directly on a bare :class:`Target` (its handle, scheduler and
exit watch are not what these functions read: None) with a real :class:`Pinner`, real
counters (perf task-clock, per thread, or schedstat) and a real process of two threads,
"main" and "other", of which on ``go()`` one execs a program that spins or sleeps (or
sets its own mask), or the other merely ends. What the module relies on is checked on
the kernel too: after an exec from the other thread the main tid is the process's only
one, with the old main thread's start time, the other thread's mask, and a perf counter
opened on it before that no longer moves.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest
import structlog.testing

from parlschedd.daemon.exec_handling import (carried_original, check_exec, count_afresh, exec_went, masks_that_went,
                                             reassign_original, settle_exec, watch_exec)
from parlschedd.daemon.exec_watch import EXEC_RUN_NS
from parlschedd.daemon.target import Target, ThreadState
from parlschedd.host import procfs
from parlschedd.host.affinity import Pinner, get_affinity
from parlschedd.host.base import CounterSource
from parlschedd.host.errors import HostError
from parlschedd.host.perf import CounterSet
from tests.conftest import needs_root, wait_for
from tests.reliability.helpers import tids_of

pytestmark = [needs_root, pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")]

CPU0, CPU1, BOTH = frozenset({0}), frozenset({1}), frozenset({0, 1})
PROC = procfs.PROC_ROOT

# argv: who ("other" or "main" execs; "none": the other thread ends), then what the
# program runs after: "spin", "sleep", or "mask" (sets its mask to every CPU, sleeps).
# Prints the other thread's tid, then waits for a line on stdin; prints "after" once
# the program after (its interpreter's start-up done) runs.
EXECS = r"""
import os, sys, threading, time
who, after = sys.argv[1], sys.argv[2]
AFTER = '''
import os, sys, time
if sys.argv[1] == "mask":
    os.sched_setaffinity(0, range(os.cpu_count()))
print("after", flush=True)
while sys.argv[1] == "spin":
    pass
time.sleep(100)
'''
def run():
    os.execv(sys.executable, [sys.executable, "-c", AFTER, after])
with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
    comm.write("before")
time.sleep(0.05)  # the other thread starts some clock ticks after the main one
go = threading.Event()
def other():
    go.wait()
    if who == "other":
        run()
    elif who == "main":
        time.sleep(100)
t = threading.Thread(target=other, daemon=True)
t.start()
print(t.native_id, flush=True)
sys.stdin.readline()
go.set()
if who == "main":
    run()
t.join()
sys.argv[1:] = [after]
exec(AFTER)
"""


class Execs:
    """The process: ``pid`` (its main tid) and ``other``, the tid of its other thread."""

    def __init__(self, who: str, after: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", EXECS, who, after], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.pid = self.proc.pid
        self.other = int(self.proc.stdout.readline())

    def go(self) -> None:
        """The exec (or the other thread's end), returned once the main tid is the
        process's only thread and runs the program after (whose start-up ran the main
        tid some ms of CPU time)."""
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline() == "after\n"
        # the other thread's end: Python's join returns before the kernel has let its thread go (seen in CI)
        wait_for(lambda: tids_of(self.pid) == [self.pid])

    def kill(self) -> None:
        self.proc.kill()
        self.proc.communicate()


@pytest.fixture
def execs() -> Iterator:
    made: list[Execs] = []

    def make(who: str, after: str = "sleep") -> Execs:
        made.append(Execs(who, after))
        return made[-1]

    yield make
    for p in made:
        p.kill()


@pytest.fixture
def task_clock() -> Iterator[CounterSet]:
    with CounterSet(CounterSource.TASK_CLOCK) as counters:
        yield counters


def _target(p: Execs, counters: CounterSet | None = None) -> Target:
    """A bare target of ``p``, whose other thread was known at the last listing; with
    ``counters``: its main thread adopted, counted from now on, in a roster row."""
    target = Target(pid=p.pid, name="execs", uid=0, observe=False, thread_filter=None, descendants=False,
                    handle=None, scheduler=None, exits=None)  # type: ignore[arg-type]
    target.others[p.pid] = {p.other}
    if counters is not None:
        counters.open(p.pid)
        target.threads[p.pid] = ThreadState(p.pid, procfs.thread_start_time(p.pid), "before",
                                            first_value=counters.read(p.pid), first_time=time.monotonic())
        target.stale = True
    return target


def _pinned(p: Execs, main: frozenset[int], other: frozenset[int]) -> Pinner:
    """A real Pinner that adopted both threads (the main one's original CPU 0, the
    other's every CPU) and pinned them to ``main`` and ``other``."""
    os.sched_setaffinity(p.pid, CPU0)
    pinner = Pinner()
    for tid in (p.pid, p.other):
        pinner.adopt(tid, procfs.thread_start_time(tid))
    pinner.pin_many([(p.pid, main), (p.other, other)])
    assert (get_affinity(p.pid), get_affinity(p.other)) == (main, other)
    return pinner


def _run_ns(tid: int) -> int:
    return procfs.thread_schedstat(tid).run_ns


# -- masks_that_went ------------------------------------------------------------------


def test_masks_that_went_are_those_kept_when_dropped_else_the_pinners_records(execs) -> None:
    """A thread dropped since the listing has its masks in ``target.went`` (they win
    over a record still there); one not yet dropped, in the pinner's records; one kept
    as dropped without masks (never adopted) and one unknown to both went with none."""
    p = execs("none")
    pinner = _pinned(p, CPU0, CPU1)
    target = _target(p)
    kept = (CPU1, CPU0)  # not what the record says
    target.went = {p.pid: kept, p.other: None, 1 << 30: None}
    went = masks_that_went(target, {p.pid, p.other, 1 << 30, (1 << 30) + 1}, pinner.records)
    assert went == {p.pid: kept, p.other: (pinner.records[p.other].original, CPU1)}


# -- exec_went --------------------------------------------------------------------------


@pytest.mark.parametrize("who, told", [("other", True), ("main", False), ("none", False)],
                         ids=["exec from the other thread", "exec from the main thread", "the other thread ended"])
def test_exec_went_is_told_only_by_the_mask_the_thread_that_exec_d_carried(execs, who: str, told: bool) -> None:
    """The two threads pinned apart (main CPU 1, other CPU 0), the other goes: after its
    exec the main tid shows CPU 0, our pin of the thread that went, and the masks of
    the threads that went are given; after an exec from main, or the other's mere end,
    main shows its own pin, and there was no such exec."""
    p = execs(who)
    pinner = _pinned(p, CPU1, CPU0)
    target = _target(p)
    p.go()
    expected = {p.other: (pinner.records[p.other].original, CPU0)}
    assert exec_went(target, p.pid, pinner, PROC) == (expected if told else None)
    assert get_affinity(p.pid) == (CPU0 if told else CPU1)


def test_exec_went_waits_for_every_other_thread_to_go_and_a_process_that_exited_gives_none(execs) -> None:
    """Both threads pinned to CPU 1, so that main always shows a mask set on the other:
    while the other thread is still listed nothing went; after its exec the masks are
    given; once the process exited, none, and no error. A process whose other threads
    were not known gives none."""
    p = execs("other")
    pinner = _pinned(p, CPU1, CPU1)
    target = _target(p)
    assert exec_went(target, p.pid, pinner, PROC) is None
    p.go()
    assert exec_went(target, p.pid, pinner, PROC) == {p.other: (pinner.records[p.other].original, CPU1)}
    unlisted = _target(p)
    unlisted.others.clear()
    assert exec_went(unlisted, p.pid, pinner, PROC) is None
    p.kill()
    assert exec_went(target, p.pid, pinner, PROC) is None


# -- carried_original ---------------------------------------------------------------------


def test_carried_original_is_the_original_of_the_thread_with_that_mask_else_the_process_s(execs) -> None:
    """After an exec from the other thread (pinned to CPU 0): the main tid's mask as the
    kernel shows it, and the original of the thread that went with it set. Two that
    went with it and different originals: the target's ``base_original``, or when
    there is none, the mask itself. A mask none that went had: None."""
    p = execs("other")
    os.sched_setaffinity(p.other, CPU0)
    target, pinner = _target(p), Pinner()
    p.go()
    assert carried_original(target, p.pid, {p.other: (BOTH, CPU0)}, pinner) == (CPU0, BOTH)
    twins = {p.other: (BOTH, CPU0), 1 << 30: (CPU1, CPU0)}
    target.base_original = CPU1
    assert carried_original(target, p.pid, twins, pinner) == (CPU0, CPU1)
    target.base_original = None
    assert carried_original(target, p.pid, twins, pinner) == (CPU0, CPU0)
    assert carried_original(target, p.pid, {p.other: (BOTH, CPU1)}, pinner) == (CPU0, None)


# -- watch_exec and check_exec -------------------------------------------------------------


def _settled(target: Target, main: int, counters: CounterSet, timeout: float = 10.0):
    """Calls ``check_exec`` until the watch on ``main`` ends: what it gave then."""
    deadline = time.monotonic() + timeout
    while True:
        went = check_exec(target, main, counters, PROC)
        if main not in target.exec_watches:
            return went
        assert went is None, "a watch that gives its masks ends"
        assert time.monotonic() < deadline, "the watch never settled"
        time.sleep(0.01)


def test_an_exec_from_the_other_thread_leaves_the_main_tid_s_counter_silent_and_check_exec_says_so(
        execs, task_clock: CounterSet) -> None:
    """The counter opened on the main tid before the exec stays with the old main
    thread: after it the main tid (same tid, same start time, the only thread) runs
    and its counter does not move. ``watch_exec`` notes both at the start; once the
    main tid has run EXEC_RUN_NS, ``check_exec`` gives the masks of the threads that
    went, and the watch ends."""
    p = execs("other", "spin")
    target = _target(p, task_clock)
    start = procfs.thread_start_time(p.pid)
    assert procfs.thread_start_time(p.other) != start
    p.go()
    assert procfs.list_tids(p.pid) == [p.pid] and procfs.thread_start_time(p.pid) == start
    went = {p.other: (BOTH, CPU0)}
    before_ns = _run_ns(p.pid)
    watch_exec(target, p.pid, went, task_clock, PROC)
    watch = target.exec_watches[p.pid]
    assert before_ns <= watch.run_ns <= _run_ns(p.pid) and watch.counted == task_clock.read(p.pid)
    assert _settled(target, p.pid, task_clock) is went
    assert _run_ns(p.pid) - watch.run_ns >= EXEC_RUN_NS
    assert task_clock.read(p.pid) == watch.counted, "the counter stayed with the thread that went"


@pytest.mark.parametrize("who", ["main", "none"], ids=["exec from the main thread", "the other thread ended"])
def test_a_main_thread_that_is_still_the_same_is_told_by_its_counter(execs, task_clock: CounterSet, who: str) -> None:
    """An exec from the main thread keeps its counter (the same thread), and so does a
    main thread whose other thread merely ended: it moves as the thread spins, the
    watch ends and no masks are given."""
    p = execs(who, "spin")
    target = _target(p, task_clock)
    p.go()
    watch_exec(target, p.pid, {p.other: (BOTH, CPU0)}, task_clock, PROC)
    counted = target.exec_watches[p.pid].counted
    assert _settled(target, p.pid, task_clock) is None
    assert task_clock.read(p.pid) > counted


def test_a_watch_waits_while_the_main_tid_sleeps_and_ends_when_it_is_no_longer_ours(execs,
                                                                                   task_clock: CounterSet) -> None:
    """A main tid that sleeps after the exec has not run enough to tell: the watch
    stays. One no longer among the target's threads ends its watch, without a
    verdict."""
    p = execs("other", "sleep")
    target = _target(p, task_clock)
    p.go()
    watch_exec(target, p.pid, {p.other: (BOTH, CPU0)}, task_clock, PROC)
    for _ in range(5):
        assert check_exec(target, p.pid, task_clock, PROC) is None and p.pid in target.exec_watches
        time.sleep(0.01)
    del target.threads[p.pid]
    assert check_exec(target, p.pid, task_clock, PROC) is None and not target.exec_watches


def test_a_process_that_exited_ends_its_watch_and_starts_none(execs, task_clock: CounterSet) -> None:
    """The process exits while its main tid is watched: ``check_exec`` ends the watch
    (its counter keeps its last value, its CPU time is gone); ``watch_exec`` begins
    none on it, and neither raises."""
    p = execs("other", "sleep")
    target = _target(p, task_clock)
    p.go()
    watch_exec(target, p.pid, {}, task_clock, PROC)
    p.kill()
    assert check_exec(target, p.pid, task_clock, PROC) is None and not target.exec_watches
    watch_exec(target, p.pid, {}, task_clock, PROC)
    assert not target.exec_watches


def test_schedstat_counters_begin_no_watch(execs) -> None:
    """Schedstat is read by tid: it counts whichever thread the main tid is, and its
    silence cannot tell an exec. No watch, even on a main thread that runs."""
    p = execs("other", "spin")
    with CounterSet(CounterSource.SCHEDSTAT) as counters:
        target = _target(p, counters)
        p.go()
        watch_exec(target, p.pid, {p.other: (BOTH, CPU0)}, counters, PROC)
        assert not target.exec_watches


# -- reassign_original ----------------------------------------------------------------------


def test_reassign_original_gives_the_main_tid_the_original_of_the_thread_it_is_now(execs) -> None:
    """Main (original CPU 0) pinned to CPU 1, the other (original every CPU) to CPU 0,
    which execs: the main tid's record keeps its identity and gets the other's original
    to restore, and its mask now (CPU 0) as the one last set."""
    p = execs("other")
    pinner = _pinned(p, CPU1, CPU0)
    other = pinner.records[p.other]
    start = pinner.records[p.pid].start_time
    assert pinner.records[p.pid].original == CPU0 != other.original
    p.go()
    went = {p.other: (other.original, other.current)}
    assert reassign_original(_target(p), p.pid, went, pinner) == CPU0
    record = pinner.records[p.pid]
    assert (record.start_time, record.original, record.current) == (start, other.original, CPU0)


def test_a_program_that_sets_its_own_mask_is_not_given_one_and_a_gone_thread_raises(execs) -> None:
    """The exec'd program sets its own mask (every CPU), which no thread that went had:
    None, and the main tid's record is left as it was (its own original). Once the
    process is gone: HostError."""
    p = execs("other", "mask")
    pinner = _pinned(p, CPU1, CPU0)
    other = pinner.records[p.other]
    p.go()
    assert get_affinity(p.pid) == BOTH
    went = {p.other: (other.original, other.current)}
    assert reassign_original(_target(p), p.pid, went, pinner) is None
    assert pinner.records[p.pid].original == CPU0
    p.kill()
    with pytest.raises(HostError):
        reassign_original(_target(p), p.pid, went, pinner)


# -- count_afresh ------------------------------------------------------------------------


@pytest.mark.parametrize("mask, whole, cpu, domain", [
    (CPU1, [CPU0, CPU1], 1, 1),
    (BOTH, [BOTH], -1, 0),
    (None, [CPU0, CPU1], -1, -1),
], ids=["pinned to one CPU", "free in its domain", "observed"])
def test_count_afresh_counts_the_thread_the_main_tid_is_now(execs, task_clock: CounterSet, mask, whole, cpu: int,
                                                            domain: int) -> None:
    """After an exec from the other thread, the main tid's counter is silent; counted
    afresh, it moves as the new program spins, its row reads from now, its name is the
    new program's, and its row's CPU and domain are those of the mask it carried (in
    pin mode), or unknown (observe mode: read again). The row said CPU 0, no domain."""
    p = execs("other", "spin")
    target = _target(p, task_clock)
    r = target.current()
    r.cpu[:], r.domain[:] = 0, -1
    p.go()
    silent = task_clock.read(p.pid)
    now = time.monotonic()
    assert count_afresh(target, p.pid, mask, now, task_clock, PROC, whole)
    took_ns = (time.monotonic() - now) * 1e9  # a counter opened in the call counted at most this
    assert target.current() is r
    row = int(np.searchsorted(r.tids, p.pid))
    assert (r.since[row], r.cpu[row], r.domain[row]) == (now, cpu, domain)
    assert target.threads[p.pid].name == procfs.comm(p.pid) != "before"
    assert r.last[row] <= took_ns, "the row reads from the counter opened afresh"
    wait_for(lambda: task_clock.read(p.pid) > r.last[row] + EXEC_RUN_NS)
    assert task_clock.read(p.pid) != silent


def test_a_main_tid_that_cannot_be_counted_afresh_is_said(execs, task_clock: CounterSet) -> None:
    """The process exits before its main tid is counted afresh: False, and a warning."""
    p = execs("other")
    target = _target(p, task_clock)
    p.go()
    p.kill()
    with structlog.testing.capture_logs() as logs:
        assert not count_afresh(target, p.pid, CPU1, time.monotonic(), task_clock, PROC, [CPU0, CPU1])
    assert [e["tid"] for e in logs if e["log_level"] == "warning"] == [p.pid]


# -- settle_exec ------------------------------------------------------------------------


def test_settle_exec_gives_the_main_tid_the_original_of_the_thread_that_exec_d(execs) -> None:
    """At a release, an exec from the other thread (pinned apart) not yet seen by a
    period: the main tid's record gets that thread's original. A main tid with no
    record (never adopted, or released) is left alone."""
    p = execs("other")
    pinner = _pinned(p, CPU1, CPU0)
    other = pinner.records[p.other].original
    p.go()
    dropped = _target(p)  # the other thread's masks kept as it was dropped, main's record gone
    dropped.went = {p.other: (other, CPU0)}
    settle_exec(dropped, p.pid, Pinner(), PROC)  # nothing to settle, nothing raised
    settle_exec(_target(p), p.pid, pinner, PROC)
    assert (pinner.records[p.pid].original, pinner.records[p.pid].current) == (other, CPU0)


def test_settle_exec_leaves_a_main_thread_that_exec_d_itself_with_its_own_original(execs) -> None:
    """Both pinned to CPU 1, the main thread execs itself: main shows CPU 1, a mask last
    set on the thread that went, but also the one we last set on main: nothing carried
    it, and main keeps its own original (CPU 0)."""
    p = execs("main")
    pinner = _pinned(p, CPU1, CPU1)
    p.go()
    settle_exec(_target(p), p.pid, pinner, PROC)
    assert pinner.records[p.pid].original == CPU0
