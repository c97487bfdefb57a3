"""The engine's per-target arrays (Roster): rows follow their thread when threads join
and leave, so a thread's last counter reading is never paired with another's; and the
engine leaving threads someone else re-pinned to them, on a real process."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
import structlog.testing

from parlschedd.config import Config
from parlschedd.cpulist import parse_cpulist
from parlschedd.daemon import engine as engine_module
from parlschedd.daemon import names as names_module
from parlschedd.daemon.engine import Engine
from parlschedd.daemon.target import Roster, Target, ThreadState
from parlschedd.host.affinity import Pinner, possible_cpus
from parlschedd.host import cgroups, procfs
from parlschedd.host.base import CounterSource
from parlschedd.host.errors import HostError, ThreadGone
from parlschedd.host.perf import CounterSet
from parlschedd.topology import read_topology
from tests.conftest import NOBODY, fake_cpus, needs_root, start_daemon, thread_pidfds, wait_for
from tests.reliability.helpers import NS_LAST_PID, masks, sleepy, spawn_with_pid, tids_of


def test_aligned_carries_rows_over_and_starts_new_threads_from_adoption() -> None:
    threads = {tid: ThreadState(tid, 0, f"t{tid}", first_value=tid * 10.0, first_time=1.0) for tid in (1, 3, 4, 5)}
    old = Roster.aligned(np.array([1, 3, 5]), None, threads)
    old.last[:] = [100.0, 300.0, 500.0]
    old.since[:] = 2.0
    old.cpu[:] = [0, 1, 0]
    old.pinned[:] = [True, True, False]
    old.utility[:] = [1.0, 3.0, np.nan]
    new = Roster.aligned(np.array([3, 4, 5]), old, threads)  # 1 left, 4 joined
    assert new.tids.tolist() == [3, 4, 5]
    assert new.last.tolist() == [300.0, 40.0, 500.0]
    assert new.since.tolist() == [2.0, 1.0, 2.0]
    assert new.cpu.tolist() == [1, -1, 0]
    assert new.pinned.tolist() == [True, False, False]
    assert new.utility[0] == 3.0 and np.isnan(new.utility[1:]).all()
    assert new.domain.tolist() == [-1, -1, -1]


def test_aligned_starts_a_reborn_tid_from_its_adoption() -> None:
    """A tid the kernel gave a new thread: its row is the dead one's, not carried over."""
    threads = {tid: ThreadState(tid, 0, f"t{tid}", first_value=tid * 10.0, first_time=1.0) for tid in (3, 5)}
    old = Roster.aligned(np.array([3, 5]), None, threads)
    old.last[:], old.cpu[:], old.pinned[:] = [300.0, 500.0], [1, 0], [True, True]
    new = Roster.aligned(np.array([3, 5]), old, threads, reborn={5})
    assert new.last.tolist() == [300.0, 50.0] and new.cpu.tolist() == [1, -1] and new.pinned.tolist() == [True, False]


def test_aligned_from_empty_and_to_empty() -> None:
    threads = {7: ThreadState(7, 0, "t", first_value=5.0, first_time=0.5)}
    r = Roster.aligned(np.array([7]), Roster.empty(), threads)
    assert r.last.tolist() == [5.0] and r.cpu.tolist() == [-1]
    assert Roster.aligned(np.empty(0, dtype=np.int64), r, threads).tids.size == 0


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_thread_re_pinned_by_someone_else_is_left_to_them() -> None:
    """A taskset by hand on a pinned thread: ``resync`` hands it over (no longer
    placed, counted as ignored), the periods never write its mask again, and detach
    leaves it as they set it while the others get their originals back. Real
    process, real Pinner, real counters."""
    target = sleepy(4)
    with _pinning_beside(target) as engine:
        engine.attach(target.pid, time.monotonic())
        engine.tick(time.monotonic())
        r = engine.targets[target.pid].current()
        assert r.pinned.all()
        engine.resync(time.monotonic())
        assert r.pinned.all(), "nothing changed: nothing handed over"
        tid, cpu = int(r.tids[0]), int(r.cpu[0])
        other = sorted(os.sched_getaffinity(0) - {cpu})[0]
        os.sched_setaffinity(tid, {other})
        engine.resync(time.monotonic())
        t = engine.targets[target.pid]
        assert tid not in t.threads and tid in t.ignored and tid not in engine.pinner.records
        assert engine.describe(t)["threads_ignored"] == 1 and engine.describe(t)["threads_handed_over"] == 1 and len(t.threads) == len(tids_of(target.pid)) - 1
        for _ in range(20):
            engine.tick(time.monotonic())
        assert masks([tid]) == {tid: frozenset({other})}
        assert len(t.threads) == len(tids_of(target.pid)) - 1, "not adopted again"
        engine.detach(target.pid)
        after = masks(tids_of(target.pid))
        assert after.pop(tid) == {other}
        assert all(m == os.sched_getaffinity(0) for m in after.values())


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_parked_threads_are_placed_once_and_then_left_where_they_are() -> None:
    """40 threads blocked for good (a parked pool) never run: after the first period's
    placement no period moves one. Each drew a placement every period (with the
    default learning, one in six or so moved: 300 parked threads took about 40
    affinity changes a period). Real process, real Pinner, real counters; the clock is
    driven."""
    target = sleepy(40, wake=False)
    try:
        with _released(*_engine()) as engine:
            now = time.monotonic()
            engine.attach(target.pid, now)
            engine.tick(now + 0.1)
            t = engine.targets[target.pid]
            placed = t.migrations
            for k in range(2, 32):
                engine.tick(now + 0.1 * k)
            assert len(t.threads) == 40 and t.migrations == placed
    finally:
        target.kill()
        target.wait()


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_move_never_writes_over_a_mask_someone_else_set() -> None:
    """Between two resyncs a period may move a thread someone just re-pinned: the
    pinner sees the mask is not ours, writes nothing, and the engine hands it over."""
    target = sleepy(2)
    with _pinning_beside(target) as engine:
        engine.attach(target.pid, time.monotonic())
        engine.tick(time.monotonic())
        t = engine.targets[target.pid]
        r = t.current()
        tid = int(r.tids[0])
        mine = frozenset({int(r.cpu[0])})
        elsewhere = frozenset(os.sched_getaffinity(0)) - mine
        os.sched_setaffinity(tid, os.sched_getaffinity(0))  # theirs: all CPUs
        engine._pin(t, r, np.array([0]), np.array([min(elsewhere)]), r.domain, time.monotonic())
        assert masks([tid]) == {tid: frozenset(os.sched_getaffinity(0))}
        assert tid in t.ignored and tid not in engine.pinner.records


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_detach_leaves_a_mask_someone_set_since_the_last_rescan() -> None:
    """A detach (and a stop: the same release) inside rescan_s of someone's new mask
    would write over it: the restore checks, and hands the thread over instead."""
    target = sleepy(2)
    with _pinning_beside(target) as engine:
        engine.attach(target.pid, time.monotonic())
        engine.tick(time.monotonic())
        t = engine.targets[target.pid]
        theirs, ours = t.current().tids.tolist()[:2]
        records, managed = engine.pinner.records, len(t.threads)
        assert len(records[theirs].current) == 1  # pinned
        mask = frozenset(os.sched_getaffinity(0)) - records[theirs].current
        original = records[ours].original
        os.sched_setaffinity(theirs, mask)
        assert engine.detach(target.pid) == managed - 1
        assert masks([theirs, ours]) == {theirs: mask, ours: original}


def _engine(source: CounterSource = CounterSource.TASK_CLOCK, **learning: object) -> tuple[Engine, CounterSet]:
    """A real engine on this host's topology with the learning settings given."""
    config = dataclasses.replace(Config(), learning=dataclasses.replace(Config().learning, **learning))
    counters = CounterSet(source)
    return Engine(config, read_topology("/sys").domains(config.domains), counters, Pinner()), counters


def _free_engine() -> tuple[Engine, CounterSet]:
    """Every thread free (its whole domain) for good: no exploration of cores."""
    return _engine(free=True, free_prior=1.0, lam=0.0)


def _pin_engine(source: CounterSource = CounterSource.TASK_CLOCK) -> tuple[Engine, CounterSet]:
    """Every thread pinned to one core: the paper's scheduler without the free option."""
    return _engine(source, free=False)


@contextlib.contextmanager
def _pinning_beside(proc: subprocess.Popen) -> Iterator[Engine]:
    """A pinning engine beside ``proc``; after, every target detached, every counter
    closed, and ``proc`` killed."""
    try:
        with _released(*_pin_engine()) as engine:
            yield engine
    finally:
        proc.kill()
        proc.wait()


@needs_root
def test_an_attach_that_fails_on_a_bug_leaves_nothing_attached_or_changed(workload, monkeypatch) -> None:
    """Fault injection (a bug in reading a thread's name, as a non-UTF-8 name once
    was): the attach fails whole, every thread keeps its mask, and the pid may be
    attached again once the bug is gone (it stayed half attached, "already_attached")."""
    engine, counters = _pin_engine()
    w = workload(3)
    before = {tid: os.sched_getaffinity(tid) for tid in w.all_tids()}
    real_comm, calls = procfs.comm, []

    def comm_failing_on_the_third_thread(pid: int, root: str = procfs.PROC_ROOT) -> str:
        calls.append(pid)
        if len(calls) == 3:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "injected")
        return real_comm(pid, root)

    monkeypatch.setattr(procfs, "comm", comm_failing_on_the_third_thread)
    with _released(engine, counters):
        with pytest.raises(UnicodeDecodeError):
            engine.attach(w.pid, time.monotonic())
        assert engine.targets == {} and not engine.pinner.records
        assert {tid: os.sched_getaffinity(tid) for tid in w.all_tids()} == before
        monkeypatch.setattr(procfs, "comm", real_comm)
        engine.attach(w.pid, time.monotonic())
        assert set(engine.targets[w.pid].threads) == set(w.all_tids())


@needs_root
def test_a_defect_in_one_targets_release_leaves_no_other_thread_pinned_at_a_stop(workload, monkeypatch) -> None:
    """Fault injection (a ValueError from one thread's restore, as a cgroup name that
    broke the parser raised): detach_all stopped at it, and the daemon's stop with it,
    leaving every later target pinned. Now the others are released, and the pinner's
    restore_all (as the stop runs it after) puts back the rest of the first target."""
    engine, counters = _pin_engine()
    first, second = workload(2), workload(2)
    before = {tid: os.sched_getaffinity(tid) for w in (first, second) for tid in w.all_tids()}
    with _released(engine, counters):
        engine.attach(first.pid, time.monotonic())
        engine.attach(second.pid, time.monotonic())
        _ticks_until(engine, lambda: all(len(os.sched_getaffinity(t)) == 1 for t in before), "every thread pinned")
        bad, real_restore = min(first.all_tids()), engine.pinner.restore

        def restore_failing_on_one_thread(tid: int) -> bool:
            if tid == bad:
                raise ValueError("injected")
            return real_restore(tid)

        monkeypatch.setattr(engine.pinner, "restore", restore_failing_on_one_thread)
        engine.detach_all(keep_hand_overs=True)
        report = engine.pinner.restore_all()
        monkeypatch.undo()
        assert [tid for tid, _ in report.failed] == [bad]
        assert {t: os.sched_getaffinity(t) for t in before if t != bad} == {t: m for t, m in before.items() if t != bad}


def test_a_target_whose_threads_were_known_whole_says_since_when_and_one_whose_listing_failed_does_not(
        workload, monkeypatch) -> None:
    """``known_before`` (the state file's: a recovery counts the births from it) is the
    moment the period's check began, for a target listed or counted in it; a listing
    that failed on a bug leaves it unknown, rather than at an older moment, from which
    ever more threads would count as born while no daemon ran (final review)."""
    engine, counters = _pin_engine()
    w = workload(2)
    with _released(engine, counters):
        target = engine.attach(w.pid, time.monotonic())
        checked = procfs.start_time_now()
        engine.tick(time.monotonic())
        assert checked <= target.known_before <= procfs.start_time_now()

        def failing(*args: object) -> None:
            raise RuntimeError("injected")

        monkeypatch.setattr(engine, "_unchanged", failing)
        engine.tick(time.monotonic())
        assert target.known_before is None


@needs_root
def test_a_thread_born_as_another_exits_is_adopted_the_next_period(workload) -> None:
    """Between two periods one thread exits and another starts: the thread count is
    the same, so only the exit watch makes the engine list the threads again."""
    engine, counters = _pin_engine()
    w = workload(3)
    with _released(engine, counters):
        engine.attach(w.pid, time.monotonic())
        engine.tick(time.monotonic())
        target = engine.targets[w.pid]
        old = set(w.tids)
        w.command("stop")
        born = set(w.command("spawn")) - old
        assert len(born) == 1
        engine.tick(time.monotonic())
        assert born <= set(target.threads)
        # the exited thread goes from /proc a moment after its join
        _ticks_until(engine, lambda: set(target.threads) == set(w.all_tids()), "the exited thread dropped", 100)
        engine.detach(w.pid)


@pytest.fixture
def listings(monkeypatch) -> list[int]:
    """The pids whose task directory the engine lists, in order (a spy on
    ProcessHandle.tids); skips where the kernel has no thread pidfds, since there every
    period lists."""
    from parlschedd.host.procfs import PIDFD_THREAD, ProcessHandle

    try:
        os.close(os.pidfd_open(os.getpid(), PIDFD_THREAD))
    except OSError:
        pytest.skip("kernel before 6.9: every period lists the threads")
    seen: list[int] = []
    tids = ProcessHandle.tids
    monkeypatch.setattr(ProcessHandle, "tids", lambda self: seen.append(self.pid) or tids(self))
    return seen


@needs_root
def test_a_quiet_period_does_not_list_the_threads(workload, listings) -> None:
    """Where the kernel has thread pidfds, a period in which no thread came or went
    costs no listing of the task directory (the dearest part of a quiet period)."""
    engine, counters = _pin_engine()
    w = workload(3)
    with _released(engine, counters):
        engine.attach(w.pid, time.monotonic())
        engine.tick(time.monotonic())
        listed = len(listings)
        for _ in range(5):
            engine.tick(time.monotonic())
        assert len(listings) == listed
        w.command("spawn")
        engine.tick(time.monotonic())
        assert len(listings) == listed + 1
        assert set(engine.targets[w.pid].threads) == set(w.all_tids())
        engine.detach(w.pid)


@needs_root
def test_threads_the_filter_leaves_out_are_watched_too_and_nothing_leaks(workload, listings) -> None:
    """An ignored thread that exits is forgotten, after which the periods are quiet
    again; detaching releases every fd the target took (counters, pidfds, the watch)."""
    engine, counters = _pin_engine()
    w = workload(3)  # workers named worker0..worker2; the newest, worker2, is stopped first
    gc.collect()  # pipes of earlier tests' processes, closed when collected, would change the count meanwhile
    fds_before = len(os.listdir("/proc/self/fd"))
    with _released(engine, counters):
        target = engine.attach(w.pid, time.monotonic(), threads="worker[01]")
        engine.tick(time.monotonic())
        assert len(target.ignored) == 2  # the main thread and worker2
        shown = engine.describe(target)
        assert (shown["threads_ignored"], shown["threads_handed_over"]) == (2, 0)  # filtered, not handed over
        w.command("stop")
        _ticks_until(engine, lambda: len(target.ignored) == 1, "the stopped ignored thread forgotten", 100)
        assert set(target.threads) | target.ignored == set(w.all_tids())
        listed = len(listings)
        for _ in range(3):
            engine.tick(time.monotonic())
        assert len(listings) == listed, "quiet again once the exit was seen"
        engine.detach(w.pid)
        assert len(os.listdir("/proc/self/fd")) == fds_before


def test_names_are_re_read_a_round_at_a_time(monkeypatch) -> None:
    """Status re-reads thread names at most once per rescan_s and RENAMES_PER_ROUND at
    a time, in turns, so a large target's names cost a bounded slice of a status build
    yet every thread's name is fresh after enough rounds. Observe mode on this test's
    own threads (renamed through /proc/self/task/<tid>/comm), nothing is pinned."""
    import threading

    monkeypatch.setattr(names_module, "RENAMES_PER_ROUND", 2)
    stop = threading.Event()
    workers = [threading.Thread(target=stop.wait) for _ in range(4)]
    for t in workers:
        t.start()
    counters = CounterSet(CounterSource.TASK_CLOCK)
    engine = Engine(Config(), read_topology("/sys").domains(Config().domains), counters, Pinner())
    try:
        target = engine.attach(os.getpid(), 0.0, observe=True)
        mine = [t.native_id for t in workers]
        for i, tid in enumerate(mine):
            with open(f"/proc/self/task/{tid}/comm", "w") as f:
                f.write(f"renamed{i}")
        names = lambda: {tid: target.threads[tid].name for tid in mine}  # noqa: E731
        engine.describe(target, 0.5)  # the first round (the attach read the names, not a round)
        first = sum(n.startswith("renamed") for n in names().values())
        assert first <= 2, "one round re-reads at most RENAMES_PER_ROUND names"
        engine.describe(target, 0.6)
        assert sum(n.startswith("renamed") for n in names().values()) == first, "at most once per rescan_s"
        rounds = -(-len(target.threads) // 2)
        for k in range(rounds):
            engine.describe(target, 2.0 + k * engine.config.rescan_s)
        assert names() == {tid: f"renamed{i}" for i, tid in enumerate(mine)}
        engine.detach(os.getpid())
    finally:
        stop.set()
        for t in workers:
            t.join()
        counters.close_all()


def _drop_on_exit(engine: Engine, proc) -> None:
    """Kill ``proc`` and run periods until the engine has dropped it."""
    proc.kill()
    proc.wait()
    _ticks_until(engine, lambda: proc.pid not in engine.targets, f"target {proc.pid} dropped", 200)


LISTS = " (parlschedctl status lists the targets)"  # what a refusal adds for a pid that is no target


@needs_root
def test_a_target_that_exited_is_named_as_such_only_to_its_owner_and_root(kill_after) -> None:
    engine, counters = _pin_engine()
    owner = 65534  # nobody: the owner is neither root nor the other asker
    proc = kill_after(sleepy(3, user=owner))
    with _released(engine, counters):
        engine.attach(proc.pid, time.monotonic(), uid=0)
        assert engine.targets[proc.pid].uid == owner
        _drop_on_exit(engine, proc)
        told = {uid: str(engine.not_attached(proc.pid, uid)) for uid in (0, owner, owner + 4242)}
        assert "it exited, and parlschedd dropped it (3 threads managed at most)" in told[0] and told[owner] == told[0]
        assert told[owner + 4242] == f"process {proc.pid} is not attached: there is no such process"  # not who was managed


@needs_root
def test_a_user_may_have_so_many_targets_and_root_more(kill_after, monkeypatch) -> None:
    """600 of one user's processes attached took three quarters of the daemon's periods
    (security review): a non-root user has USER_TARGETS at most (2 here); root and
    the rules have no such bound."""
    monkeypatch.setattr(engine_module, "USER_TARGETS", 2)
    procs = [kill_after(sleepy(1, user=NOBODY)) for _ in range(4)]
    engine, counters = _pin_engine()
    with _released(engine, counters):
        for proc in procs[:2]:
            engine.attach(proc.pid, time.monotonic(), uid=NOBODY)
        with pytest.raises(engine_module.EngineError, match=f"uid {NOBODY} has 2 targets attached, the most a user "
                                                            "may: detach one first") as refused:
            engine.attach(procs[2].pid, time.monotonic(), uid=NOBODY)
        assert refused.value.code == "too_many_targets"
        engine.attach(procs[2].pid, time.monotonic(), uid=0)
        engine.attach(procs[3].pid, time.monotonic())  # a rule's
        engine.detach(procs[0].pid, uid=NOBODY)
        engine.attach(procs[0].pid, time.monotonic(), uid=NOBODY)
        assert len(engine.targets) == 4


MIXED_OWNERS = f"""
import ctypes, os, sys, threading, time
for _ in range(2):
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
setresuid = {{"x86_64": 117, "aarch64": 147}}[os.uname().machine]
assert ctypes.CDLL(None, use_errno=True).syscall(setresuid, {NOBODY}, {NOBODY}, {NOBODY}) == 0  # this thread alone
print("ready", flush=True)
time.sleep(60)
"""


@needs_root
@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="setresuid's syscall number")
def test_a_users_target_leaves_out_the_threads_of_another_user_in_its_process(kill_after) -> None:
    """A root process whose main thread alone became nobody's (the raw syscall: libc
    changes every thread) is nobody's to attach, by its main thread; its two root
    threads, which nobody may not set the affinity of, were adopted and pinned too
    (security review). They are left out."""
    proc = kill_after(subprocess.Popen([sys.executable, "-c", MIXED_OWNERS], stdout=subprocess.PIPE, text=True))
    assert proc.stdout.readline() == "ready\n"
    roots = [t for t in tids_of(proc.pid) if t != proc.pid]
    assert len(roots) == 2 and {procfs.process_uids(t).owner for t in roots} == {0}
    before = masks(roots)
    engine, counters = _pin_engine()
    with _released(engine, counters):
        target = engine.attach(proc.pid, time.monotonic(), uid=NOBODY)
        assert set(target.threads) == {proc.pid} and target.ignored == set(roots)
        _ticks(engine, 5)
        assert set(target.threads) == {proc.pid} and masks(roots) == before


def _uids_read_as_told(monkeypatch) -> dict[int, procfs.Uids]:
    """The uids /proc/ID/status is read to have: those put in the returned dict by id,
    the real ones of the others."""
    real, told = procfs.process_uids, {}
    monkeypatch.setattr(procfs, "process_uids", lambda pid, root=procfs.PROC_ROOT: told.get(pid) or real(pid, root))
    return told


@needs_root
def test_a_users_target_whose_process_becomes_roots_is_let_go(kill_after, monkeypatch) -> None:
    """The owner was read at attach alone: a process a user attached that became root's
    (it exec'd a setuid program) stayed that user's target, its threads placed and
    shown to the user, detached by the user. At the next rescan it is detached and
    its threads restored. The change of uid is put into the reading of
    /proc/PID/status (a real one needs a setuid program the test user can run); the
    process, its threads and their masks are real."""
    user = 65534
    proc = kill_after(sleepy(3, user=user))
    now_reads = _uids_read_as_told(monkeypatch)
    engine, counters = _pin_engine()
    with _released(engine, counters):
        before = masks(tids_of(proc.pid))
        engine.attach(proc.pid, time.monotonic(), uid=user)
        _ticks(engine, 3)
        assert masks(tids_of(proc.pid)) != before, "pinned"
        now_reads[proc.pid] = procfs.Uids(real=user, effective=0, saved=0, fs=0)  # a setuid-root program's
        engine.resync(time.monotonic())
        assert proc.pid not in engine.targets and masks(tids_of(proc.pid)) == before


@needs_root
def test_a_thread_of_a_users_target_that_becomes_roots_is_let_go(kill_after, monkeypatch) -> None:
    """A thread's uid was checked when it was adopted alone: one that became root's
    after (setresuid(2) is per thread) stayed pinned and shown to the user for good
    (review). At the next rescan it is restored and let go, then left out; the
    process's other threads stay managed. The change of uid is put into the reading of
    /proc/TID/status, as in the test above; the threads and their masks are real."""
    user = 65534
    proc = kill_after(sleepy(3, user=user))
    now_reads = _uids_read_as_told(monkeypatch)
    engine, counters = _pin_engine()
    with _released(engine, counters):
        tids = tids_of(proc.pid)
        before = masks(tids)
        target = engine.attach(proc.pid, time.monotonic(), uid=user)
        _ticks(engine, 3)
        root_now = max(tids)  # not the main thread
        assert root_now in target.threads and masks([root_now]) != {root_now: before[root_now]}, "pinned"
        now_reads[root_now] = procfs.Uids(real=0, effective=0, saved=0, fs=0)
        engine.resync(time.monotonic())
        assert root_now not in target.threads and masks([root_now]) == {root_now: before[root_now]}
        _ticks(engine, 2)
        assert root_now in target.ignored and set(target.threads) == set(tids) - {root_now}


@needs_root
def test_a_roots_target_whose_process_becomes_a_users_is_that_users(kill_after, monkeypatch) -> None:
    """A process root attached that dropped to a user (setuid(2)): its owner could not
    see or detach it, and was told it was "managed as a descendant of another user's
    target". From the next rescan it is that user's (the uid read faked as above)."""
    user = 65534
    proc = kill_after(sleepy(2))
    now_reads = _uids_read_as_told(monkeypatch)
    engine, counters = _pin_engine()
    with _released(engine, counters):
        engine.attach(proc.pid, time.monotonic(), uid=0)
        now_reads[proc.pid] = procfs.Uids(real=user, effective=user, saved=user, fs=user)
        engine.resync(time.monotonic())
        assert engine.targets[proc.pid].uid == user
        assert engine.detach(proc.pid, uid=user) >= 0 and proc.pid not in engine.targets


@needs_root
def test_an_exit_is_described_by_the_most_threads_managed_not_the_last(workload) -> None:
    """Threads that end one by one before their process are dropped as they go; the
    refusal names the most the target had at once (here the main thread and three
    workers), not the one left at the end ("1 threads" before)."""
    engine, counters = _pin_engine()
    w = workload(3)
    with _released(engine, counters):
        engine.attach(w.pid, time.monotonic())
        assert len(engine.targets[w.pid].threads) == 4
        for left in (2, 1, 0):
            w.command("stop")
            _ticks_until(engine, lambda left=left: len(engine.targets[w.pid].threads) == left + 1,
                         f"{left} workers left", 200)
        _drop_on_exit(engine, w.proc)
        assert "dropped it (4 threads managed at most)" in str(engine.not_attached(w.pid, 0))


@needs_root
def test_an_exit_is_not_described_by_threads_that_never_ran_together(workload) -> None:
    """A thread that ends and another that starts between two periods (a new wave of
    workers, a team made afresh) were counted together: the new one was adopted before
    the one gone was dropped, and a process of never more than 4 threads "dropped it
    (5 threads managed at most)" (8 for a program of waves of 4 workers)."""
    engine, counters = _pin_engine()
    w = workload(3)
    with _released(engine, counters):
        engine.attach(w.pid, time.monotonic())
        assert len(engine.targets[w.pid].threads) == 4
        for _ in range(3):
            w.command("stop")
            # gone from the kernel too (join returns a moment before the task ends): else
            # a listing could see both at once, and 5 would be right; the engine has not
            # listed since, so it still holds the one gone beside the new one
            wait_for(lambda: len(w.all_tids()) == 3)
            w.command("spawn")
            _ticks_until(engine, lambda: set(engine.targets[w.pid].threads) == {w.pid, *w.tids}, "the new worker", 200)
        _drop_on_exit(engine, w.proc)
        assert "dropped it (4 threads managed at most)" in str(engine.not_attached(w.pid, 0))


@needs_root
@pytest.mark.skipif(not os.access(NS_LAST_PID, os.W_OK), reason="ns_last_pid not writable")
def test_a_reused_pid_is_not_described_as_the_target_that_exited(kill_after) -> None:
    """A new process with a dropped target's pid (steered through ns_last_pid) is not
    the one that exited: a refusal about it says only that it is not attached."""
    engine, counters = _pin_engine()
    old = kill_after(sleepy(2))
    with _released(engine, counters):
        engine.attach(old.pid, time.monotonic())
        _drop_on_exit(engine, old)
        assert "it exited" in str(engine.not_attached(old.pid, 0))
        new = spawn_with_pid(old.pid, ["sleep", "60"])
        if new is None:
            pytest.skip("could not steer the next pid (busy machine)")
        kill_after(new)
        assert str(engine.not_attached(old.pid, 0)) == f"process {old.pid} is not attached{LISTS}"


@needs_root
def test_only_the_last_gone_kept_exits_are_remembered(monkeypatch, kill_after) -> None:
    """The record of exited targets is bounded (GONE_KEPT, lowered to 2 here so that
    three real processes show the bound): the oldest exit is forgotten first."""
    monkeypatch.setattr(engine_module, "GONE_KEPT", 2)
    engine, counters = _pin_engine()
    procs = [kill_after(sleepy(1)) for _ in range(3)]
    with _released(engine, counters):
        for proc in procs:
            engine.attach(proc.pid, time.monotonic())
            _drop_on_exit(engine, proc)
        told = [str(engine.not_attached(p.pid, 0)) for p in procs]
        assert told[0] == f"process {procs[0].pid} is not attached: there is no such process"
        assert all("it exited" in t for t in told[1:])


# -- nothing left changed: every thread the engine stops managing gets its mask back ---

MIDDLE = r"""
import subprocess, sys
grandchild = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, text=True)
grandchild.stdout.readline()
print(grandchild.pid, flush=True)
sys.stdin.read()  # until the parent closes our stdin or exits
"""

PARENT = r"""
import subprocess, sys
middle = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
print(middle.stdout.readline().strip(), flush=True)
for line in sys.stdin:
    if line.strip() == "end-middle":
        middle.stdin.close()
        middle.wait()
        print("ended", flush=True)
"""


class Tree:
    """parent -> middle -> grandchild (3 sleeping threads); the middle can be made to
    exit (the grandchild leaves the tree, reparented) and so can the parent."""

    def __init__(self) -> None:
        from tests.reliability.helpers import SLEEPY

        self.parent = subprocess.Popen([sys.executable, "-c", PARENT, MIDDLE, SLEEPY, "3"],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.grandchild = int(self.parent.stdout.readline())

    def end_middle(self) -> None:
        self.parent.stdin.write("end-middle\n")
        self.parent.stdin.flush()
        assert self.parent.stdout.readline().strip() == "ended"

    def close(self) -> None:
        for pid in (self.grandchild, self.parent.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.parent.wait()


def _ticks_until(engine: Engine, done, what: str, periods: int = 300) -> None:
    """Periods (ticks 0.01 s apart) until ``done()``; fails after ``periods`` of them."""
    for _ in range(periods):
        engine.tick(time.monotonic())
        if done():
            return
        time.sleep(0.01)
    raise AssertionError(f"not within {periods} periods: {what}")


def _grandchild_pinned(engine: Engine, tree: Tree) -> None:
    target = engine.targets[tree.parent.pid]
    theirs = tids_of(tree.grandchild)
    _ticks_until(engine, lambda: set(theirs) <= set(target.threads)
                 and all(len(m) == 1 for m in masks(theirs).values()), "the grandchild's threads pinned")


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
@pytest.mark.parametrize("how", ["the middle process exits", "the attached process exits"])
def test_a_descendant_that_stops_being_managed_alive_gets_its_masks_back(how: str) -> None:
    """With descendants, a process leaves the target alive when its parent exits (it is
    reparented) or when the attached process itself exits: its threads are restored,
    not forgotten pinned (a review found both left pinned for good)."""
    engine, counters = _pin_engine()
    tree = Tree()
    with contextlib.closing(tree), _released(engine, counters):
        original = masks(tids_of(tree.grandchild))
        engine.attach(tree.parent.pid, time.monotonic(), descendants=True)
        _grandchild_pinned(engine, tree)
        if how == "the middle process exits":
            tree.end_middle()
            target = engine.targets[tree.parent.pid]
            _ticks_until(engine, lambda: not set(original) & set(target.threads), "the grandchild dropped")
        else:
            tree.parent.stdin.close()
            tree.parent.wait()
            _ticks_until(engine, lambda: tree.parent.pid not in engine.targets, "the target dropped")
        assert masks(original) == original
        assert not set(original) & set(engine.pinner.records)


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
@pytest.mark.parametrize("started", ["as saved", "another process"])
def test_a_pid_detached_by_hand_is_left_out_of_a_tree_only_while_it_is_that_process(started: str) -> None:
    """A process detached by hand that a rule matches is left out of every tree with
    descendants (``left_alone``, pid -> start time) while it runs. Its pid taken by
    another process since (a start time that is not the saved one) is that process's:
    a tree adopts it."""
    engine, counters = _pin_engine()
    tree = Tree()
    with contextlib.closing(tree), _released(engine, counters):
        start = procfs.process_start_time(tree.grandchild)
        engine.left_alone[tree.grandchild] = start if started == "as saved" else start - 1
        engine.attach(tree.parent.pid, time.monotonic(), descendants=True)
        target, theirs = engine.targets[tree.parent.pid], set(tids_of(tree.grandchild))
        if started == "as saved":
            _ticks(engine, 10, pause=0.01)
            assert not theirs & set(target.threads)
        else:
            _ticks_until(engine, lambda: theirs <= set(target.threads), "the grandchild's threads adopted")


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_release_leaves_the_pins_of_a_descendant_another_target_manages() -> None:
    """A descendant attached by hand is its own target's (the first to reach a thread
    manages it): a release of the tree's target, which lists its descendants again for
    threads born with its pins, leaves those of the other target as they are, even
    when one is pinned to a core the released target also used."""
    engine, counters = _pin_engine()
    tree = Tree()
    with contextlib.closing(tree), _released(engine, counters):
        engine.attach(tree.grandchild, time.monotonic())
        engine.attach(tree.parent.pid, time.monotonic(), descendants=True)
        theirs = tids_of(tree.grandchild)
        tree_target = engine.targets[tree.parent.pid]

        def sharing_a_core() -> bool:
            mine = {frozenset(rec.current) for tid, rec in engine.pinner.records.items() if tid in tree_target.threads}
            return bool(tree_target.threads) and any(len(m) == 1 and m in mine for m in masks(theirs).values())

        _ticks_until(engine, sharing_a_core, "a grandchild's thread pinned where one of the tree's is")
        assert not set(theirs) & set(tree_target.threads)
        pinned = masks(theirs)
        engine.detach(tree.parent.pid)
        assert masks(theirs) == pinned
        assert {tid: engine.pinner.records[tid].current for tid in theirs} == pinned


def _listings(engine: Engine) -> list[int]:
    """Counts the engine's listings of its targets (``_refresh``) from now on."""
    calls: list[int] = []
    listing = engine._refresh

    def counted(target, now):
        calls.append(target.pid)
        listing(target, now)

    engine._refresh = counted
    return calls


@needs_root
def test_a_quiet_period_of_a_descendants_target_lists_nothing(workload) -> None:
    """With descendants every period listed the whole tree (its directories, each
    thread's children file; in the scenarios' cpu rows the daemon took 0.64% of the
    machine, 0.55% after: bench/results/scenarios-cpu-pin*.json). Now a period lists only when a task was born on the host since the last listing
    (``procfs.birth_mark``), a thread of the target exited, or rescan_s went by. The
    host's pid allocator is shared with every process on it, which a test cannot hold
    still, so the mark is a stand-in here that moves when the test says."""
    w = workload(2)
    engine, counters = _pin_engine()
    mark = [(1, 1)]
    engine._birth_mark = lambda: mark[0]
    with _released(engine, counters):
        target = engine.attach(w.pid, time.monotonic(), descendants=True)
        listings = _listings(engine)
        for _ in range(5):
            engine.tick(time.monotonic())
        assert listings == []
        w.command("spawn")  # born: the mark moves
        mark[0] = (2, 2)
        engine.tick(time.monotonic())
        assert listings == [w.pid] and set(w.all_tids()) <= set(target.threads)
        engine.tick(time.monotonic())
        assert listings == [w.pid]
        w.command("stop")  # an exit: the thread's pidfd tells it, the mark need not
        wait_for(lambda: len(w.all_tids()) == 3)
        engine.tick(time.monotonic())
        assert listings == [w.pid, w.pid] and set(target.threads) == set(w.all_tids())
        engine.tick(time.monotonic() + engine.config.rescan_s)  # a full listing every rescan_s, whatever the mark says
        assert listings == [w.pid, w.pid, w.pid]


@contextlib.contextmanager
def _group_killed(pgid: int) -> Iterator[None]:
    """SIGKILL to the process group after the block: a forked child outlives its parent."""
    try:
        yield
    finally:
        os.killpg(pgid, signal.SIGKILL)


# A process of NOBODY's with a child of its own (forked: NOBODY may not run this
# checkout's interpreter); prints the child's pid.
USER_TREE = f"""
import os, time
os.setgroups([])
os.setresgid({NOBODY}, {NOBODY}, {NOBODY})
os.setresuid({NOBODY}, {NOBODY}, {NOBODY})
child = os.fork()
if child == 0:
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
time.sleep(60)
"""


@needs_root
def test_a_quiet_period_of_a_users_descendants_target_lists_nothing_either(kill_after, monkeypatch) -> None:
    """A non-root caller's tree was listed every period: 300 sleeping processes cost
    the daemon 39.9% of a core, against 4.0% for the same tree of root's
    (bench/results/tree_cost-before.json). It is listed when root's is. A process
    of it that changed owner without a birth (a setuid exec; stood in for by the uids
    /proc is read to have) is let go at the full listing rescan_s brings, as the target's
    own owner is read again then. The birth mark is a stand-in, as in the test above."""
    parent = kill_after(subprocess.Popen([sys.executable, "-c", USER_TREE], stdout=subprocess.PIPE, text=True,
                                         start_new_session=True))
    child = int(parent.stdout.readline())
    engine, counters = _pin_engine()
    engine._birth_mark = lambda: (1, 1)
    with _released(engine, counters), _group_killed(parent.pid):
        target = engine.attach(parent.pid, time.monotonic(), descendants=True, uid=NOBODY)
        assert child in target.threads
        listings = _listings(engine)
        _uids_read_as_told(monkeypatch)[child] = procfs.Uids(0, 0, 0, 0)  # it exec'd a setuid-root program
        for _ in range(5):
            engine.tick(time.monotonic())
        assert listings == [] and child in target.threads
        engine.tick(time.monotonic() + engine.config.rescan_s)
        assert listings == [parent.pid] and child not in target.threads


def test_a_proc_that_does_not_tell_births_lists_trees_every_period(tmp_path) -> None:
    """Where /proc/loadavg is hidden (a unit's ProcSubset=pid) or not the kernel's, no
    period may trust the birth mark, and status says so (a directory without it
    stands for such a /proc); this host's own /proc tells them."""
    config = Config()
    blind = Engine(config, [[0]], CounterSet(CounterSource.TASK_CLOCK), Pinner(), proc_root=str(tmp_path))
    assert not blind.births_seen and blind._birth_mark() is None
    assert Engine(config, [[0]], CounterSet(CounterSource.TASK_CLOCK), Pinner()).births_seen


@needs_root
def test_a_thread_born_in_a_descendants_target_is_adopted_in_the_next_period(workload) -> None:
    """The same with the host's real mark: a thread started between two periods is
    adopted by the second, as for a target without descendants."""
    w = workload(2)
    engine, counters = _pin_engine()
    with _released(engine, counters):
        target = engine.attach(w.pid, time.monotonic(), descendants=True)
        engine.tick(time.monotonic())
        w.command("spawn")
        engine.tick(time.monotonic())
        assert set(target.threads) == set(w.all_tids())


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_descendant_in_a_cpuset_of_its_own_is_judged_by_its_own(cpuset) -> None:
    """The target's cpuset, read once for its process, was taken for every thread's:
    a descendant's thread following a narrower cpuset of its own ({1}) was saved with
    that snapshot as a request, and no longer followed its cpuset after a detach."""
    engine, counters = _pin_engine()
    tree = Tree()
    with contextlib.closing(tree), _released(engine, counters):
        (cpuset / "cpuset.cpus").write_text("1")
        (cpuset / "cgroup.procs").write_text(str(tree.grandchild))
        theirs = tids_of(tree.grandchild)
        engine.attach(tree.parent.pid, time.monotonic(), descendants=True)
        target = engine.targets[tree.parent.pid]
        _ticks_until(engine, lambda: set(theirs) <= set(target.threads), "the grandchild's threads adopted")
        assert {engine.pinner.records[tid].original for tid in theirs} == {possible_cpus()}


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_descendant_that_pinned_itself_to_the_targets_cpuset_keeps_its_own_pin(cpuset) -> None:
    """The attached process runs in a cpuset of {1}; a descendant in the wider root
    cpuset asked for {1} itself. Its mask is its request, not its cpuset followed
    (which would restore every CPU): the target's cpuset is its own process's, and a
    descendant's mask is judged by the descendant's own cpuset."""
    engine, counters = _pin_engine()
    tree = Tree()
    with contextlib.closing(tree), _released(engine, counters):
        (cpuset / "cpuset.cpus").write_text("1")
        for proc in (psutil.Process(tree.parent.pid), *psutil.Process(tree.parent.pid).children()):
            if proc.pid != tree.grandchild:
                (cpuset / "cgroup.procs").write_text(str(proc.pid))
        theirs = tids_of(tree.grandchild)
        for tid in theirs:
            os.sched_setaffinity(tid, {1})
        engine.attach(tree.parent.pid, time.monotonic(), descendants=True)
        target = engine.targets[tree.parent.pid]
        assert target.cpuset == frozenset({1})
        _ticks_until(engine, lambda: set(theirs) <= set(target.threads), "the grandchild's threads adopted")
        assert {engine.pinner.records[tid].original for tid in theirs} == {frozenset({1})}
        engine.detach(tree.parent.pid)
        assert set(masks(theirs).values()) == {frozenset({1})}


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_thread_found_gone_at_its_pin_is_dropped_in_that_period(workload) -> None:
    """A thread whose pin finds it gone (it exited between the period's reads and its
    move: the Pinner's batched check says ThreadGone) is dropped in that period, its
    counter closed and its record let go, not kept as managed until the next listing.
    Fault injection: no thread exits on demand between the two, so the Pinner answers
    ThreadGone for one live worker's moves (and makes none of them)."""
    w = workload(2)
    engine, counters = _pin_engine()
    with _released(engine, counters):
        target = engine.attach(w.pid, time.monotonic())
        victim = max(tid for tid in target.threads if tid != w.pid)
        real, told = engine.pinner.pin_many, []

        def pin_many(moves):
            outcomes = iter(real([m for m in moves if m[0] != victim]))
            told.extend(tid for tid, _ in moves if tid == victim)
            return [ThreadGone(f"tid {tid} (injected)", tid=tid) if tid == victim else next(outcomes) for tid, _ in moves]

        engine.pinner.pin_many = pin_many
        for _ in range(50):
            engine.tick(time.monotonic())
            if told:
                break
            time.sleep(0.01)
        assert told, "the worker was never moved"
        assert victim not in target.threads and victim not in engine.pinner.records


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_no_thread_is_pinned_before_its_original_is_persisted(workload) -> None:
    """The engine asks the daemon to write the originals of the threads it adopted
    before it pins them: a SIGKILL between the pin and the write would leave them
    pinned with no record. While the write fails, they are left as they are."""
    w = workload(2)
    base = masks(w.all_tids())
    seen: list[dict[int, frozenset[int]]] = []  # the masks at each call of the hook
    writable = [False]

    def persist() -> bool:
        seen.append(masks(w.all_tids()))
        return writable[0]

    engine, counters = _pin_engine()
    engine.persist = persist
    with _released(engine, counters):
        engine.attach(w.pid, time.monotonic())
        for _ in range(3):
            engine.tick(time.monotonic())
        assert masks(w.all_tids()) == base and len(seen) == 3  # asked every period, nothing pinned
        writable[0] = True
        engine.tick(time.monotonic())
        assert seen[-1] == base  # the write came before the pins
        assert all(len(m) == 1 for m in masks(w.all_tids()).values())
        born = set(w.command("spawn")) - set(base)
        engine.tick(time.monotonic())
        assert len(seen) == 5 and born <= set(engine.targets[w.pid].threads)  # a new thread: written again
        engine.tick(time.monotonic())
        assert len(seen) == 5  # nothing new: no write
        engine.detach(w.pid)
        assert set(masks(w.all_tids()).values()) == set(base.values())


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
@pytest.mark.parametrize("release", ["detach a period later", "detach", "stop"])
def test_a_thread_born_of_a_free_thread_gets_the_targets_own_mask_back(workload, release) -> None:
    """A free thread's mask is its whole domain, wider than a target run under
    ``taskset -c 0``; a thread it creates inherits that mask, which is ours, so the
    target's own is what detach restores (it restored the domain before). Born after
    the last listing, no period comes to adopt it: the release lists the target again
    (it kept our mask for good, and the next daemon took it for the thread's original)."""
    w = workload(1)
    for tid in w.all_tids():
        os.sched_setaffinity(tid, {0})
    engine, counters = _free_engine()
    with _released(engine, counters):
        engine.attach(w.pid, time.monotonic())
        whole = frozenset(os.sched_getaffinity(0))
        _ticks_until(engine, lambda: set(masks(w.all_tids()).values()) == {whole}, "every thread free")
        born = set(w.command("spawn")) - set(engine.targets[w.pid].threads)
        assert masks(born) == {tid: whole for tid in born}
        if release == "detach a period later":
            engine.tick(time.monotonic())
            assert born <= set(engine.targets[w.pid].threads)
        engine.detach_all(keep_hand_overs=True) if release == "stop" else engine.detach(w.pid)
        assert set(masks(w.all_tids()).values()) == {frozenset({0})}


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_thread_the_filter_leaves_out_does_not_keep_the_mask_it_inherited(workload) -> None:
    """A thread left out by --threads but created by a pinned thread inherits our pin;
    it gets the target's own mask back at once (it kept the pin for good before)."""
    w = workload(1)
    base = frozenset(os.sched_getaffinity(w.pid))
    main = Path(f"/proc/{w.pid}/comm").read_text().strip()
    engine, counters = _pin_engine()
    with _released(engine, counters):
        engine.attach(w.pid, time.monotonic(), threads=f"^({re.escape(main)}|worker0)$")
        _ticks_until(engine, lambda: len(os.sched_getaffinity(w.pid)) == 1, "the main thread pinned")
        born = set(w.command("spawn")) - set(engine.targets[w.pid].threads)  # worker1, left out
        assert len(born) == 1
        engine.tick(time.monotonic())
        assert born <= engine.targets[w.pid].ignored
        assert masks(born) == {tid: base for tid in born}
        assert not born & set(engine.pinner.records)
        engine.detach(w.pid)


@needs_root
@pytest.mark.skipif(not os.access(NS_LAST_PID, os.W_OK), reason="ns_last_pid not writable")
def test_a_tid_reused_inside_the_target_is_adopted_as_the_new_thread(workload) -> None:
    """A worker exits and a new one gets its tid (steered through ns_last_pid) before
    the next period: the count is unchanged and the tid is listed again, so only the
    exit watch tells them apart; the new thread is adopted anew (the old entry, its
    counter and its identity stayed before)."""
    w = workload(2)
    engine, counters = _free_engine()  # free threads are not moved again: no pin stumbles on the new identity
    with _released(engine, counters):
        engine.attach(w.pid, time.monotonic())
        engine.tick(time.monotonic())
        target = engine.targets[w.pid]
        old = w.tids[-1]
        first = target.threads[old]
        w.command("stop")
        for _ in range(20):
            with open(NS_LAST_PID, "w") as f:
                f.write(str(old - 1))
            if old in w.command("spawn"):
                break
            w.command("stop")
        else:
            pytest.skip("could not steer the next tid (busy machine)")
        # adopted anew (its start time may equal the old one's: both count 10 ms clock ticks)
        _ticks_until(engine, lambda: target.threads.get(old, first) is not first, "the new thread adopted")
        assert target.threads[old].start_time == procfs.thread_start_time(old)
        # its first rate spans no time (adopted and read in this tick), not the old
        # thread's row carried on: the new count less the old one's, over the last period
        assert np.isnan(target.roster.utility[np.searchsorted(target.roster.tids, old)])
        # and the scheduler's state is the new thread's: its utility scale starts at 0
        # (the old thread's, kept, was its recent peak)
        assert target.scheduler.scale[target.scheduler.keys == old].tolist() == [0.0]
        engine.tick(time.monotonic())
        assert not target.exits.exited()  # the old watch is gone with the old thread
        engine.detach(w.pid)


REUSER = r"""
import os, signal, sys, threading, time
def child():
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])  # dies of SIGKILL alone
    time.sleep(60)
    os._exit(0)
def fork():
    pid = os.fork()
    if pid == 0:
        child()
    return pid
def fork_named(name):  # born with the name: forked from a thread that has it
    born = []
    def run():
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
            f.write(name)
        born.append(fork())
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return born[0]
for line in sys.stdin:
    word, *args = line.split()
    if word == "reuse":  # end that child, reap it, and fork the next child onto its pid
        os.kill(int(args[0]), signal.SIGKILL)
        os.waitpid(int(args[0]), 0)
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(int(args[0]) - 1))
    print(fork_named(args[0]) if word == "named" else fork(), flush=True)
"""


def _reuser(kill_after: Callable) -> tuple[subprocess.Popen, Callable[[str], int]]:
    """A process that forks a child per line asked ("fork", "named NAME": born with that
    name, "reuse PID": that child killed and reaped, the next forked onto its pid as
    ns_last_pid steers it) and answers the child's pid."""
    parent = kill_after(subprocess.Popen([sys.executable, "-c", REUSER], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True))

    def ask(line: str) -> int:
        parent.stdin.write(line + "\n")
        parent.stdin.flush()
        return int(parent.stdout.readline())

    return parent, ask


@needs_root
@thread_pidfds
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
@pytest.mark.skipif(not os.access(NS_LAST_PID, os.W_OK), reason="ns_last_pid not writable")
def test_a_descendants_pid_reused_by_a_new_child_in_the_tree_is_adopted_as_new(kill_after) -> None:
    """A descendant ends, is reaped, and its parent forks a new child onto its pid (steered
    through ns_last_pid: without it, a wrap of the host's pids within one period) before
    the next listing. A leader's exit seen with its tid listed again was taken for a
    zombie not yet reaped, so the new process's main thread was never adopted: status
    showed the old one, and the pin it was born with (its parent's, ours) was left on it
    at detach, whose identity check refused the stranger (a review). The old one's
    pidfd tells it (reaped, not a zombie), even within one clock tick of the start
    times: it is adopted anew, and detach gives it the original mask."""
    engine, counters = _pin_engine()
    parent, ask = _reuser(kill_after)

    def adopted(pid: int) -> ThreadState:
        _ticks_until(engine, lambda: pid in target.threads, f"the child {pid} adopted")
        return target.threads[pid]

    original = masks([parent.pid])[parent.pid]
    with _released(engine, counters):
        target = engine.attach(parent.pid, time.monotonic(), descendants=True)
        _ticks_until(engine, lambda: len(masks([parent.pid])[parent.pid]) == 1, "the parent pinned")
        child = ask("fork")
        first = adopted(child)
        for _ in range(20):
            new = ask(f"reuse {child}")
            if new == child:
                break
            child = new  # another process took the pid first: once more, with this child
            first = adopted(child)
        else:
            pytest.skip("could not steer the next pid (busy machine)")
        _ticks_until(engine, lambda: target.threads.get(child, first) is not first, "the new child adopted")
        assert target.threads[child].start_time == procfs.thread_start_time(child)
        engine.detach(parent.pid)
        assert masks([parent.pid, child]) == {parent.pid: original, child: original}


@needs_root
@thread_pidfds
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
@pytest.mark.skipif(not os.access(NS_LAST_PID, os.W_OK), reason="ns_last_pid not writable")
def test_a_left_out_descendants_pid_reused_by_a_new_child_in_the_tree_is_adopted_as_new(kill_after) -> None:
    """The same with a child whose main thread the --threads filter left out: its pid,
    taken by a new child the filter takes, was still taken for the left-out zombie (no
    start time is kept for a thread left out), so the new child was never adopted and
    the pin it was born with (its parent's, ours) stayed on it after detach (a review)."""
    engine, counters = _pin_engine()
    parent, ask = _reuser(kill_after)
    original = masks([parent.pid])[parent.pid]
    with _released(engine, counters):
        target = engine.attach(parent.pid, time.monotonic(), descendants=True, threads="^python")
        _ticks_until(engine, lambda: len(masks([parent.pid])[parent.pid]) == 1, "the parent pinned")
        for _ in range(20):
            child = ask("named skipme")
            _ticks_until(engine, lambda child=child: child in target.ignored, f"the child {child} left out")
            new = ask(f"reuse {child}")
            if new == child:
                break
        else:
            pytest.skip("could not steer the next pid (busy machine)")
        assert len(masks([child])[child]) == 1, "born with its parent's pin"
        _ticks_until(engine, lambda: child in target.threads, "the new child adopted")
        engine.detach(parent.pid)
        assert masks([parent.pid, child]) == {parent.pid: original, child: original}


@needs_root
@thread_pidfds
@pytest.mark.skipif(not os.access(NS_LAST_PID, os.W_OK), reason="ns_last_pid not writable")
def test_a_descendant_that_exited_unreaped_is_let_go_and_its_pid_adopted_once_reused(kill_after) -> None:
    """A child that exited and that its parent has not reaped (a zombie) still lists its
    main thread: it was shown as a managed, pinned thread, and given a core every
    period, until its parent's wait(2) (a review). It is let go, watched until reaped
    so that a new process on its pid is adopted as one."""
    with _adopted_child(kill_after) as (engine, target, child, ask):
        os.kill(child, signal.SIGKILL)  # its parent waits on its stdin: no wait(2)
        _ticks_until(engine, lambda: child in target.ignored, "the zombie let go")
        for _ in range(20):
            engine.tick(time.monotonic())
            assert child not in target.threads and child in target.ignored, "the zombie taken again"
            time.sleep(0.01)
        assert procfs.process_stat(child).exited
        new = ask(f"reuse {child}")  # reaped now, and the next child steered onto its pid
        _ticks_until(engine, lambda: new in target.threads and (new == child or child not in target.ignored),
                     "the new child adopted, the old one forgotten")


@contextlib.contextmanager
def _adopted_child(kill_after: Callable) -> Iterator[tuple[Engine, Target, int, Callable[[str], int]]]:
    """A pinning engine attached with descendants to a ``_reuser`` whose first child is
    adopted: (engine, target, child, ask); after, every target detached."""
    engine, counters = _pin_engine()
    parent, ask = _reuser(kill_after)
    with _released(engine, counters):
        target = engine.attach(parent.pid, time.monotonic(), descendants=True)
        child = ask("fork")
        _ticks_until(engine, lambda: child in target.threads, "the child adopted")
        yield engine, target, child, ask


def _zombie(ask: Callable[[str], int]) -> int:
    """A child of ``_reuser``'s killed and not reaped (its parent waits on its stdin)."""
    child = ask("fork")
    os.kill(child, signal.SIGKILL)
    wait_for(lambda: procfs.process_stat(child).exited)
    return child


@needs_root
def test_a_left_out_tid_that_names_another_process_s_thread_is_not_taken_by_the_filter(kill_after) -> None:
    """Every rescan_s a thread the filter left out is adopted once its name matches,
    but only a thread of the target's processes: a left-out tid now another process's
    (reused; here a stranger's tid put among the left out stands for that) is not
    adopted though its name matches."""
    engine, counters = _pin_engine()
    own = kill_after(sleepy(1))
    stranger = kill_after(subprocess.Popen(["sleep", "60"]))
    wait_for(lambda: procfs.comm(stranger.pid) == "sleep")
    with _released(engine, counters):
        target = engine.attach(own.pid, time.monotonic(), threads="^sleep$")
        assert not target.threads and target.ignored == set(tids_of(own.pid))
        target.ignored.add(stranger.pid)
        engine.refilter(time.monotonic())
        assert stranger.pid not in target.threads and stranger.pid not in engine.pinner.records


@needs_root
@thread_pidfds
def test_a_zombie_found_in_the_tree_at_attach_is_left_out(kill_after) -> None:
    """A tree that holds a zombie when attached (a restart's attach again, say): its
    adoption fails (the thread has exited), so it was neither managed nor left out,
    tried again at every listing, and not counted (a review). Left out, as a zombie
    the daemon saw exit is; not taken back by a --threads filter its name matches."""
    engine, counters = _pin_engine()
    parent, ask = _reuser(kill_after)
    child = _zombie(ask)
    with _released(engine, counters):
        target = engine.attach(parent.pid, time.monotonic(), descendants=True, threads="^python")
        for _ in range(10):
            engine.tick(time.monotonic())
            engine.refilter(time.monotonic())
            assert child in target.ignored and child not in target.threads
            time.sleep(0.01)
        assert engine.describe(target)["threads_ignored"] == 1


@needs_root
@thread_pidfds
@pytest.mark.skipif(not os.access(NS_LAST_PID, os.W_OK), reason="ns_last_pid not writable")
def test_a_zombie_let_go_keeps_the_watch_of_its_own_pid(kill_after, monkeypatch) -> None:
    """Reaped and its pid taken by a new child in the tree while the daemon looks
    whether it is a zombie: a watch opened after that named the new child, which then
    stayed left out under the zombie's identity (a review). The zombie's own watch is
    kept, which tells the new child (injected: the reuse made inside that look)."""
    with _adopted_child(kill_after) as (engine, target, child, ask):
        looked, new = procfs.process_stat, []

        def reused_while_looked_at(pid: int, root: str = procfs.PROC_ROOT) -> procfs.Stat:
            stat = looked(pid, root)
            if pid == child and stat.exited and not new:
                new.append(ask(f"reuse {child}"))
            return stat

        monkeypatch.setattr(procfs, "process_stat", reused_while_looked_at)
        os.kill(child, signal.SIGKILL)
        _ticks_until(engine, lambda: bool(new), "the zombie looked at")
        monkeypatch.setattr(procfs, "process_stat", looked)
        if new != [child]:
            pytest.skip("could not steer the next pid (busy machine)")
        _ticks_until(engine, lambda: child in target.threads, "the new child adopted")


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_core_outside_the_cpuset_loses_ground_to_the_core_the_thread_runs_on(workload, cpuset) -> None:
    """A real cgroup v1 cpuset holds the workers alone on CPU 1 (v1 places each task
    on its own), while the process's, which the engine reads, allows both CPUs: the
    learner may draw CPU 0, the kernel refuses those pins and the thread runs on CPU 1,
    and the engine tells the scheduler so. Each period's utility is then credited to
    CPU 1, where it was earned, and CPU 0's probability falls from 1/2 (x0 about
    0.5 * 0.95^k with eps 0.05) for every worker. Credited to the core drawn, the
    refused core earned as much as CPU 1 and the strategies drifted either way: two of
    three workers ended on CPU 0 (x0 = 1.0) in a run before the engine passed this on.
    No worker runs outside the cpuset, and detach restores the masks. Each thread's
    refusal is a warning once, not at each pinned-refused-pinned turn (one thread's
    went on for as long as it lived)."""
    w = workload(3)
    for tid in w.tids:
        (cpuset / "tasks").write_text(str(tid))
    (cpuset / "cpuset.cpus").write_text("1")
    base = masks(w.all_tids())
    assert {base[tid] for tid in w.tids} == {frozenset({1})} and len(base[w.pid]) == 2
    engine, counters = _pin_engine()
    with _released(engine, counters):
        target = engine.attach(w.pid, time.monotonic())
        with structlog.testing.capture_logs() as logs:
            for _ in range(40):
                time.sleep(0.02)
                engine.tick(time.monotonic())
                engine.resync(time.monotonic())
                assert set(masks(w.tids).values()) == {frozenset({1})}
        warned = [e["tid"] for e in logs if e["event"] == "pin refused" and e["log_level"] == "warning"]
        assert warned and len(warned) == len(set(warned)) and set(warned) <= set(w.tids), warned
        s = target.scheduler
        rows = np.searchsorted(s.keys, w.tids)  # the workers: the main thread waits on stdin and earns nothing
        core0 = np.argmax(s.domain_cpus[s.alpha[rows]] == 0, axis=1)  # CPU 0's column in each worker's row
        x0 = s.x[rows, core0]
        assert x0.max() < 0.3, f"CPU 0 kept {x0.round(2).tolist()} of the workers' strategies"
        engine.detach(w.pid)
        assert masks(w.all_tids()) == base


EXECS = """
import os, select, sys, threading, time
def name(n):
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
        comm.write(n)
def run():
    os.execv(sys.executable, [sys.executable, "-c", sys.argv[2] + "\\nwhile True: pass"])
go, named = threading.Event(), threading.Event()
def other():
    name("other")
    named.set()
    while not go.wait(0.01):  # awake every 10 ms: a thread that runs draws its core each period
        pass
    if sys.argv[1] == "other":
        run()
    elif sys.argv[1] == "main":
        time.sleep(100)
name("main")
threading.Thread(target=other, daemon=True).start()
named.wait()  # a thread filter matches it only once it is named
print(threading.get_native_id(), flush=True)
while True:
    while not select.select([sys.stdin], [], [], 0.01)[0]:
        pass
    if sys.stdin.readline().strip() != "rename":
        break
    name("renamed")
    print("renamed", flush=True)
go.set()
if sys.argv[1] == "main":
    run()
time.sleep(100)
"""


WAITER = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', *sys.argv[1:]]); time.sleep(100)"


class Execs:
    """A process of two threads, "main" and "other": on ``go()`` the one ``who`` names
    calls execve into a loop that spins (after ``program``), or with "none" the other
    thread ends. ``child``: it is the child of a process that only waits (``top``),
    sharing its stdin and stdout."""

    def __init__(self, who: str, program: str = "", child: bool = False) -> None:
        argv = [sys.executable, "-c", *([WAITER] if child else []), EXECS, who, program]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.top = self.proc.pid
        self.pid = int(self.proc.stdout.readline())
        self.other = next(t for t in tids_of(self.pid) if t != self.pid)

    def rename_main(self) -> None:
        """The main thread names itself "renamed"."""
        self.proc.stdin.write("rename\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline() == "renamed\n"

    def go(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        wait_for(lambda: self.other not in tids_of(self.pid), timeout=5, interval=0.01)

    def close(self) -> None:
        if self.pid != self.top:
            os.kill(self.pid, signal.SIGKILL)
        self.proc.kill()
        self.proc.communicate()  # reaped, and its pipes closed now rather than when collected


@contextlib.contextmanager
def _exec_case(who: str, program: str = "", *, child: bool = False,
               source: CounterSource = CounterSource.TASK_CLOCK,
               counters: CounterSet | None = None) -> Iterator[tuple[Execs, Engine]]:
    """An :class:`Execs` process and a pinning engine (on ``counters`` when given),
    both cleaned up after: every thread detached, every counter closed, the process
    killed."""
    p = Execs(who, program, child)
    engine, made = _pin_engine(source)
    if counters is not None:
        engine.counters = counters
    try:
        yield p, engine
    finally:
        engine.detach_all()
        engine.counters.close_all()
        made.close_all()
        p.close()


@contextlib.contextmanager
def _released(engine: Engine, counters: CounterSet) -> Iterator[Engine]:
    """The engine, every target detached and every counter closed after."""
    try:
        yield engine
    finally:
        engine.detach_all()
        counters.close_all()


def _ticks(engine: Engine, n: int = 10, pause: float = 0.05) -> None:
    """``n`` periods, each a tick then a rescan (``resync``), ``pause`` seconds apart
    (0: back to back)."""
    for _ in range(n):
        if pause:
            time.sleep(pause)
        engine.tick(time.monotonic())
        engine.resync(time.monotonic())


def _pinned_apart(engine: Engine, p: Execs) -> None:
    """Periods until the two threads are pinned on different CPUs."""
    both = lambda: list(masks([p.pid, p.other]).values())  # noqa: E731
    _ticks_until(engine, lambda: len(set(both())) == 2, "the two threads on different CPUs", 100)
    assert [len(m) for m in both()] == [1, 1]


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
@pytest.mark.parametrize("who, program, after, source", [
    ("other", "", {1}, CounterSource.TASK_CLOCK),
    ("main", "", {0, 1}, CounterSource.TASK_CLOCK),
    ("other", "import os; os.sched_setaffinity(0, {0, 1})", {0, 1}, CounterSource.TASK_CLOCK),
    ("other", "", {1}, CounterSource.SCHEDSTAT),
], ids=["from another thread", "from the main thread", "from another thread, whose program sets its mask",
        "from another thread, schedstat counters"])
def test_an_exec_from_any_thread_leaves_the_main_thread_counted_and_restored(who: str, program: str, after,
                                                                              source: CounterSource) -> None:
    """The thread that is not main has original mask {1}, the main one {0, 1}. One of
    them calls execve, and the new program spins. From the other thread the kernel
    gives it the main tid and start time, and the perf counter opened on the main tid
    stays with the old, gone main thread: the engine counts the main tid afresh (its
    utility is about 1 CPU, where it read 0 before) and detach gives it {1}, the
    original of the thread it is now (it restored {0, 1}; and the mask we had set on
    that thread, seen on the main tid, looked set by someone else: handed over, pinned
    for good). From the main thread itself nothing changes: its counter goes on, {0, 1}
    back. A program that sets its own mask after the exec keeps it: the thread is
    theirs. With schedstat counters (read by tid) only the masks tell."""
    with _exec_case(who, program, source=source) as (p, engine):
        os.sched_setaffinity(p.other, {1})
        target = engine.attach(p.pid, time.monotonic())
        _pinned_apart(engine, p)
        p.go()
        _ticks(engine)
        assert not target.exec_watches
        if program:
            assert not target.threads and target.ignored == {p.pid}  # handed over
        else:
            assert set(target.threads) == {p.pid}
            utility = target.current().utility[0]
            # about 1e9 on a quiet machine; a third of that on a loaded one (a pinned
            # thread shares its CPU), and 0 when the counter stayed with the old thread
            assert utility > 0.1e9, f"the main tid counts {utility:.3g} ns/s while its program spins"
        engine.detach(p.pid)
        assert os.sched_getaffinity(p.pid) == after


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_main_thread_that_exec_d_is_placed_again_only_once_its_new_original_is_written() -> None:
    """An exec from another thread gives the main tid a new original (the other
    thread's, {1}): the state file must hold it before the thread is pinned again, or
    a SIGKILL in between restores the old one. The engine asks for a write once the
    exec is told, and while the write fails the main thread keeps the mask it has."""
    with _exec_case("other", "") as (p, engine):
        os.sched_setaffinity(p.other, {1})
        target = engine.attach(p.pid, time.monotonic())
        _pinned_apart(engine, p)
        asked: list[float] = []

        def persist() -> bool:  # the daemon's write of the state file, failing
            asked.append(time.monotonic())
            return False

        engine.persist = persist
        p.go()
        _ticks_until(engine, lambda: not target.exec_watches and set(target.threads) == {p.pid}, "the exec told")
        held = os.sched_getaffinity(p.pid)
        _ticks(engine, 5)
        assert asked, "the new original was never asked to be written"
        assert os.sched_getaffinity(p.pid) == held and engine.pinner.records[p.pid].original == frozenset({1})
        engine.detach(p.pid)
        assert os.sched_getaffinity(p.pid) == {1}


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
@pytest.mark.parametrize("delay", [0.3, 0.0], ids=["threads started once the exec is told", "threads started at once"])
def test_threads_the_new_program_starts_after_an_exec_get_the_thread_that_exec_d_s_original(delay: float) -> None:
    """Main {0, 1}, the other thread {1} execs, and the new program starts two threads,
    born with our pin (main carries the other's). Main got {1} back at detach, but the
    two threads {0, 1}: the target's own mask as read at attach, the old main's. The
    new program's is {1}, for threads adopted after the exec is told and before."""
    program = f"import threading, time\ntime.sleep({delay})\n" \
              "for _ in range(2): threading.Thread(target=time.sleep, args=(100,), daemon=True).start()"
    with _exec_case("other", program) as (p, engine):
        os.sched_setaffinity(p.other, {1})
        target = engine.attach(p.pid, time.monotonic())
        _pinned_apart(engine, p)
        p.go()
        if not delay:  # the exec and the new threads in one listing: adopted before the exec is told
            wait_for(lambda: len(tids_of(p.pid)) == 3, timeout=5, interval=0.01)
        _ticks_until(engine, lambda: len(target.threads) == 3 and not target.exec_watches, "the new threads adopted")
        engine.detach(p.pid)
        assert set(masks(tids_of(p.pid)).values()) == {frozenset({1})}


def _cpu_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The tids whose CPU the engine reads from /proc (``_running_on``), in order."""
    read: list[int] = []
    running_on = Engine._running_on
    monkeypatch.setattr(Engine, "_running_on", lambda self, tid: (read.append(tid), running_on(self, tid))[1])
    return read


@needs_root
def test_an_observed_main_thread_has_its_cpu_read_again_after_an_exec(monkeypatch: pytest.MonkeyPatch) -> None:
    """In observe mode, an exec from the thread that is not main gives the main tid
    another thread: the CPU last read was the one that went's, and is read again at
    once, not in its turn (here never: no thread of a known CPU is read in turns)."""
    monkeypatch.setattr(engine_module, "OBSERVED_PER_PERIOD", 0)
    read = _cpu_reads(monkeypatch)
    with _exec_case("other") as (p, engine):
        target = engine.attach(p.pid, time.monotonic(), observe=True)
        _ticks(engine, 3)
        read.clear()
        p.go()
        _ticks_until(engine, lambda: not target.exec_watches and p.pid in read, "the main tid's CPU read again")
        assert set(target.threads) == {p.pid}


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
@pytest.mark.parametrize("release", ["detach", "stop"])
def test_an_exec_just_before_a_release_is_told_too(release: str) -> None:
    """An exec from the thread that is not main, then a detach or a stop before the
    next period: the main tid carries our pin of that thread, which the release took
    for someone else's mask (left pinned for good, and saved as handed over)."""
    with _exec_case("other") as (p, engine):
        original = os.sched_getaffinity(p.other)
        engine.attach(p.pid, time.monotonic())
        _pinned_apart(engine, p)
        p.go()
        engine.detach(p.pid) if release == "detach" else engine.detach_all(keep_hand_overs=True)
        assert os.sched_getaffinity(p.pid) == original and not engine.handed_over


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_release_after_threads_merely_ended_gives_main_its_own_original() -> None:
    """The thread that is not main (original CPU 1) ends, no exec, and a detach comes
    before the next period: main shows the mask we set on it, which the ended thread
    had too (one CPU to place on); that is no exec's doing, and main gets its own
    original back (it got the ended thread's, CPU 1)."""
    p = Execs("none")
    learning = dataclasses.replace(Config().learning, free=False)
    counters = CounterSet(CounterSource.SCHEDSTAT)
    engine = Engine(dataclasses.replace(Config(), learning=learning), [[0]], counters, Pinner())
    with contextlib.closing(p), _released(engine, counters):
        os.sched_setaffinity(p.other, {1})
        original = os.sched_getaffinity(p.pid)
        engine.attach(p.pid, time.monotonic())
        _ticks_until(engine, lambda: set(masks([p.pid, p.other]).values()) == {frozenset({0})}, "both on CPU 0")
        p.go()
        engine.detach(p.pid)
        assert os.sched_getaffinity(p.pid) == original


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_an_exec_between_a_periods_listing_and_its_reads_is_told_too() -> None:
    """The exec lands after a period listed the threads and before it read them: the
    thread that went is dropped by the reads (schedstat: its tid is gone) or by a pin,
    not by a listing. Its masks are kept for the next listing, which the drop forces,
    and the main tid ends with that thread's original, all CPUs, not with our pin of
    one CPU."""
    with _exec_case("other", source=CounterSource.SCHEDSTAT) as (p, engine):
        original = os.sched_getaffinity(p.other)
        target = engine.attach(p.pid, time.monotonic())
        _pinned_apart(engine, p)
        now = time.monotonic()
        engine._refresh(target, now)  # one period split: its listing, the exec, its reads and pins
        p.go()
        engine._step(target, now)
        _ticks(engine)
        engine.detach(p.pid)
        assert os.sched_getaffinity(p.pid) == original


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_an_exec_from_a_thread_we_pinned_gives_the_main_tid_its_original_when_main_is_not_ours() -> None:
    """The filter leaves the main thread out and keeps the other, which we pin, and
    which then execs: the main tid is that thread now, with our pin on it. It gets the
    thread's original back at once ({0, 1}), and stays out of our hands."""
    with _exec_case("other") as (p, engine):
        original = os.sched_getaffinity(p.other)
        target = engine.attach(p.pid, time.monotonic(), threads="^other$")
        _ticks(engine, 3)
        assert target.ignored == {p.pid} and len(os.sched_getaffinity(p.other)) == 1
        p.go()
        _ticks(engine)
        assert os.sched_getaffinity(p.pid) == original
        engine.detach(p.pid)
        assert os.sched_getaffinity(p.pid) == original


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
@pytest.mark.parametrize("how", ["handed over", "renamed out of the filter"])
def test_an_exec_from_a_thread_we_pinned_gives_its_original_to_a_main_thread_left_out_since_the_listing(how) -> None:
    """The main thread stops being ours between two listings (the program sets its own
    mask, or renames it out of the filter), then the other thread, pinned, execs: the
    main tid carries our pin. Its mask before was noted at listings alone, and without
    one it kept the pin for good, and so did the new program's threads (review of
    crash recovery, found on a running daemon)."""
    with _exec_case("other") as (p, engine):
        original = os.sched_getaffinity(p.other)
        target = engine.attach(p.pid, time.monotonic(), threads=None if how == "handed over" else "^(main|other)$")
        _pinned_apart(engine, p)
        if how == "handed over":
            os.sched_setaffinity(p.pid, original)
            engine.resync(time.monotonic())
        else:
            p.rename_main()
            engine.refilter(time.monotonic())
        assert p.pid in target.ignored and os.sched_getaffinity(p.pid) == original
        p.go()
        _ticks(engine)
        assert os.sched_getaffinity(p.pid) == original
        engine.detach(p.pid)
        assert os.sched_getaffinity(p.pid) == original


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_while_the_main_thread_is_watched_a_mask_someone_sets_on_it_is_theirs() -> None:
    """The other thread ends and the main one sleeps: whether it exec'd cannot be told
    until the main tid runs, so it is watched and not moved meanwhile. A taskset on it
    then is still seen and left to them: detach does not undo it. (A thread pool that
    ends looks the same.)"""
    with _exec_case("none") as (p, engine):
        target = engine.attach(p.pid, time.monotonic())
        _pinned_apart(engine, p)
        p.go()
        _ticks(engine, 3)
        assert p.pid in target.exec_watches
        pinned = os.sched_getaffinity(p.pid)
        _ticks(engine, 20)  # a sleeping thread's strategy stays uniform: it would move in half the periods
        assert p.pid in target.exec_watches and os.sched_getaffinity(p.pid) == pinned
        theirs = set(os.sched_getaffinity(0)) - pinned
        os.sched_setaffinity(p.pid, theirs)
        _ticks(engine, 3)
        assert p.pid in target.ignored
        engine.detach(p.pid)
        assert os.sched_getaffinity(p.pid) == theirs


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_hand_overs_outlive_a_detach_that_attaches_again_and_only_that(workload) -> None:
    """A rule whose settings changed detaches its target and attaches it again: a thread
    someone else set stays theirs. A detach for good forgets it, and so does a restart
    for a thread no target attached again claims."""
    w = workload(2)
    engine, counters = _pin_engine()
    with _released(engine, counters):
        target = engine.attach(w.pid, time.monotonic(), rule=0)
        _ticks(engine, 3)
        theirs = w.tids[0]
        mask = set(os.sched_getaffinity(0)) - os.sched_getaffinity(theirs)  # one CPU, not ours
        os.sched_setaffinity(theirs, mask)
        engine.resync(time.monotonic())
        assert theirs in target.ignored and theirs in engine.handed_over
        engine.detach(w.pid, again=True)
        target = engine.attach(w.pid, time.monotonic(), rule=0)
        _ticks(engine, 3)
        assert theirs in target.ignored and os.sched_getaffinity(theirs) == mask
        start = engine.handed_over[theirs]
        engine.forget_unclaimed_hand_overs()
        assert engine.handed_over == {theirs: start}  # claimed
        engine.detach(w.pid)
        assert engine.handed_over == {} and os.sched_getaffinity(theirs) == mask
        engine.handed_over[theirs] = start  # as the state file gives it after a restart
        engine.forget_unclaimed_hand_overs()
        assert engine.handed_over == {}


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_threads_that_end_give_no_mask_to_a_main_thread_someone_else_set() -> None:
    """Someone set the main thread to the CPU we pinned the other thread on (so the
    main tid's mask is one we set on a thread that goes), then the other thread ends,
    with no exec: the main thread's mask did not change at that moment, so it is
    still theirs, in the state too."""
    with _exec_case("none") as (p, engine):
        target = engine.attach(p.pid, time.monotonic())
        _pinned_apart(engine, p)
        theirs = os.sched_getaffinity(p.other)
        os.sched_setaffinity(p.pid, theirs)
        engine.resync(time.monotonic())
        assert p.pid in target.ignored and p.pid in engine.handed_over
        p.go()
        _ticks(engine)
        assert os.sched_getaffinity(p.pid) == theirs and p.pid in engine.handed_over


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
@pytest.mark.parametrize("source", [CounterSource.TASK_CLOCK, CounterSource.SCHEDSTAT])
def test_an_exec_from_another_thread_of_a_descendant_is_told_too(source: CounterSource) -> None:
    """The process of two threads is a child of the attached one (``--descendants``):
    its other thread execs, the child's main tid carries our pin, and detach gives it
    its original (all CPUs), where it was handed over with our pin of one CPU."""
    with _exec_case("other", child=True, source=source) as (p, engine):
        original = os.sched_getaffinity(p.other)
        target = engine.attach(p.top, time.monotonic(), descendants=True)
        _pinned_apart(engine, p)
        p.go()
        _ticks(engine)
        assert p.pid in target.threads and p.pid not in target.ignored
        engine.detach(p.top)
        assert os.sched_getaffinity(p.pid) == original


class BrokenMain(CounterSet):
    """perf:task-clock counters whose group for one tid goes into error state, as a
    perf group can (this machine cannot be made to): its reads fail from then on."""

    broken: int | None = None

    def read(self, tid: int) -> float:
        if tid == self.broken:
            raise HostError(f"perf group of tid {tid} is in error state", tid=tid)
        return super().read(tid)


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_watch_whose_counter_fails_ends_and_the_main_thread_is_placed_again() -> None:
    """A watched main thread whose counter fails cannot be told by it: the watch ends,
    and the thread is placed again like any other."""
    counters = BrokenMain(CounterSource.TASK_CLOCK)
    with _exec_case("none", counters=counters) as (p, engine):
        target = engine.attach(p.pid, time.monotonic())
        _pinned_apart(engine, p)
        p.go()
        _ticks(engine, 3)
        assert p.pid in target.exec_watches
        counters.broken = p.pid
        _ticks(engine, 1)
        assert not target.exec_watches and p.pid in target.threads


class FailsOnce(CounterSet):
    """perf:task-clock counters whose read of one tid gives no value for one period, as
    a failed read or a PMU group multiplexed out the whole period does (neither can be
    made to happen here on demand)."""

    failing: int | None = None

    def read_many(self, tids):
        values, gone = super().read_many(tids)
        if self.failing in tids:
            values[list(tids).index(self.failing)] = np.nan
            self.failing = None
        return values, gone


@needs_root
def test_a_period_without_a_reading_does_not_double_the_next_utility(kill_after) -> None:
    """The time since the last reading moved on for every thread, the last value only
    for those read: the period after a failed read divided two periods' count by one
    (1e9 ns/s of a spinning thread came out as 2e9). The reading's time now stays
    with its value. The utility after the failed read is checked by its size: a
    thread runs at most one CPU-second a second (task-clock counts ns), and it is the
    run time the kernel's schedstat gives the thread over those two periods, per
    second of them (the spinner may share its CPU with other work: schedstat, not
    1e9, is what it got)."""
    spinner = kill_after(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
    counters = FailsOnce(CounterSource.TASK_CLOCK)
    engine = Engine(Config(), read_topology("/sys").domains(Config().domains), counters, Pinner())
    with _released(engine, counters):
        target = engine.attach(spinner.pid, time.monotonic(), observe=True)
        times, ran = [], []
        for period in range(3):
            if period == 1:
                counters.failing = spinner.pid
            time.sleep(0.1)
            times.append(time.monotonic())
            engine.tick(times[-1])
            ran.append(procfs.thread_schedstat(spinner.pid).run_ns)  # the kernel's own account
        r = target.current()
        assert engine.read_errors == 1, "the period not measured counted (parlsched_counter_read_errors_total)"
        assert r.since[0] == times[2] and np.isfinite(r.utility[0])
        assert r.utility[0] <= 1.05e9, "more than one CPU-second a second"
        assert r.utility[0] == pytest.approx((ran[2] - ran[0]) / (times[2] - times[0]), rel=0.25)
        counters.failing = spinner.pid
        engine.tick(times[2] + 0.05)
        assert np.isnan(target.current().utility[0]) and target.current().since[0] == times[2], \
            "the last reading's time, kept with its value"
        assert engine.read_errors == 2


@needs_root
def test_an_observed_targets_cpus_are_read_in_turns(workload, monkeypatch: pytest.MonkeyPatch) -> None:
    """In observe mode the CPU each thread ran on is a /proc read of tens of us: all of
    1024 threads' took half a CPU a period. Beyond OBSERVED_PER_PERIOD (2 here) they
    are read in turns, a new thread's at once, and every thread shows a CPU."""
    monkeypatch.setattr(engine_module, "OBSERVED_PER_PERIOD", 2)
    read = _cpu_reads(monkeypatch)
    w = workload(5)
    engine, counters = _engine()
    with _released(engine, counters):
        target = engine.attach(w.pid, time.monotonic(), observe=True)
        engine.tick(time.monotonic())
        assert sorted(read) == w.all_tids()  # all new
        rounds = []
        for _ in range(3):
            read.clear()
            engine.tick(time.monotonic())
            rounds.append(sorted(read))
        assert [len(r) for r in rounds] == [2, 2, 2] and sorted(sum(rounds, [])) == w.all_tids()
        assert all(t["cpu"] in os.sched_getaffinity(0) for t in engine.describe(target)["threads"])
        target.scheduler = engine._scheduler(target.pid, target.cpus)  # afresh, as a cpuset change makes it
        read.clear()
        engine.tick(time.monotonic())
        assert sorted(read) == w.all_tids(), "a scheduler made afresh places every thread by where it runs now"


NAMED_LATE = """
import os, sys, threading, time
def name(text):
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
        comm.write(text)
told = threading.Event()
asked = []
def late():  # named when told, as pthread_setname_np is called after a thread starts
    told.wait()
    if asked:
        os.sched_setaffinity(0, {asked[0]})  # its own binding first, on the CPU given
    name("worker0")
    print("named", flush=True)
    time.sleep(60)
def early():
    name("worker1")
    time.sleep(60)
threading.Thread(target=late, daemon=True).start()
threading.Thread(target=early, daemon=True).start()
while len(os.listdir("/proc/self/task")) < 3 or "worker1" not in [
        open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]:
    time.sleep(0.01)
print("r", flush=True)
asked.extend(int(v) for v in sys.stdin.readline().split()[1:])
told.set()
time.sleep(60)
"""


def start_named_late() -> subprocess.Popen:
    """A process with worker1 named from the start and a thread that names itself
    worker0 when told (``name`` on its stdin; ``name N`` binds it to CPU N first)."""
    p = subprocess.Popen([sys.executable, "-c", NAMED_LATE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "r\n"
    return p


def tell_to_name(p: subprocess.Popen, cpu: int | None = None) -> int:
    p.stdin.write("name" + ("" if cpu is None else f" {cpu}") + "\n")
    p.stdin.flush()
    assert p.stdout.readline() == "named\n"
    return next(tid for tid in tids_of(p.pid) if procfs.comm(tid) == "worker0")


@contextlib.contextmanager
def _named_late_engine() -> Iterator[tuple[subprocess.Popen, Engine]]:
    """A pinning engine beside a NAMED_LATE process, both cleaned up after."""
    p = start_named_late()
    with _pinning_beside(p) as engine:
        yield p, engine


@needs_root
def test_a_thread_named_after_attach_is_adopted_when_its_name_matches() -> None:
    """--threads was matched once, at a thread's first listing: a thread that named
    itself a moment later was left out for good, whatever attach's warning promised."""
    with _named_late_engine() as (p, engine):
        target = engine.attach(p.pid, time.monotonic(), threads="^worker")
        assert len(target.threads) == 1 and len(target.ignored) == 2
        late = tell_to_name(p)
        engine.refilter(time.monotonic())
        assert late in target.threads and target.ignored == {p.pid}
        for _ in range(5):
            engine.tick(time.monotonic())
        assert target.current().pinned.all()
        engine.refilter(time.monotonic())  # the main thread's name still does not match
        assert target.ignored == {p.pid}


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_thread_born_before_its_creator_was_moved_gets_the_targets_own_mask(workload) -> None:
    """A thread the main thread starts inherits its pin, CPU a; the same period moves
    every thread to CPU b before the listing that adopts it. CPU a was no mask of ours
    any more to that listing: the new thread was adopted with it as its original, and
    detach left it pinned to a (a test of the exec case met this under load)."""
    w = workload(1)
    engine, counters = _pin_engine()
    with _released(engine, counters):
        target = engine.attach(w.pid, time.monotonic())
        _ticks_until(engine, lambda: target.current().pinned.all(), "pinned")
        a = next(iter(os.sched_getaffinity(w.pid)))
        born = set(w.command("spawn")) - set(w.tids[:1])
        born = {t for t in born if t not in target.threads}
        assert len(born) == 1 and os.sched_getaffinity(next(iter(born))) == {a}
        r = target.current()
        b = next(c for c in os.sched_getaffinity(0) if c != a)
        engine._pin(target, r, np.arange(r.tids.size), np.full(r.tids.size, b), np.zeros(r.tids.size, dtype=np.int64),
                    time.monotonic())  # the period's moves, before the next listing
        engine.tick(time.monotonic())
        assert born <= set(target.threads)
        engine.detach(w.pid)
        assert masks(born) == {t: frozenset(os.sched_getaffinity(0)) for t in born}


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_thread_renamed_out_of_the_filter_is_restored_and_left_out(workload) -> None:
    """--threads '^worker': a managed worker that renames itself stayed managed (and
    pinned) until detach. Its name re-read every rescan_s no longer matches: it gets its
    original mask back and is left out; named back, it is adopted again."""
    w = workload(2)
    before = masks(w.all_tids())
    engine, counters = _pin_engine()
    with _released(engine, counters):
        target = engine.attach(w.pid, time.monotonic(), threads="^worker")
        _ticks_until(engine, lambda: target.current().pinned.all() and len(target.threads) == 2, "both pinned")
        renamed = w.tids[0]
        w.command(f"rename {renamed} io-helper")
        engine.refilter(time.monotonic())
        assert renamed not in target.threads and renamed in target.ignored
        assert os.sched_getaffinity(renamed) == before[renamed]
        _ticks(engine, 3)
        assert os.sched_getaffinity(renamed) == before[renamed], "moved again after it was left out"
        w.command(f"rename {renamed} worker9")
        engine.refilter(time.monotonic())
        assert renamed in target.threads


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_thread_renamed_out_after_someone_set_its_mask_stays_theirs_and_watched(workload) -> None:
    """Renamed out of the filter after someone else set its mask: it is theirs (kept as
    set) and, as every left-out thread, watched for its exit (it was not: a new
    thread given its tid would never have been told from it)."""
    w = workload(2)
    engine, counters = _pin_engine()
    with _released(engine, counters):
        target = engine.attach(w.pid, time.monotonic(), threads="^worker")
        _ticks_until(engine, lambda: target.current().pinned.all() and len(target.threads) == 2, "both pinned")
        renamed = w.tids[-1]  # the newest worker: the one "stop" ends
        theirs = frozenset(os.sched_getaffinity(0)) - os.sched_getaffinity(renamed)
        os.sched_setaffinity(renamed, theirs)
        w.command(f"rename {renamed} io-helper")
        engine.refilter(time.monotonic())
        assert renamed in target.ignored and renamed in engine.handed_over
        assert os.sched_getaffinity(renamed) == theirs
        w.command("stop")
        wait_for(lambda: renamed in target.exits.exited(), timeout=5)


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_thread_adopted_late_keeps_its_own_mask_as_its_original() -> None:
    """A left-out thread that bound itself to the CPU we gave a managed thread, then
    took a matching name: its binding was taken for our mask inherited at birth, and
    detach undid it."""
    with _named_late_engine() as (p, engine):
        target = engine.attach(p.pid, time.monotonic(), threads="^worker")
        engine.tick(time.monotonic())
        engine.tick(time.monotonic())
        cpu = int(target.current().cpu[0])
        assert cpu >= 0 and target.current().pinned.all()
        late = tell_to_name(p, cpu)
        engine.refilter(time.monotonic())
        assert engine.pinner.records[late].original == {cpu}
        engine.detach(p.pid)
        assert os.sched_getaffinity(late) == {cpu}, "its own binding, kept"


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_free_thread_in_a_narrower_cpuset_is_placed_once(workload, cpuset) -> None:
    """A free thread's mask is its domain; a v1 cpuset of CPU 1 keeps part of it. That
    was taken for the cpuset narrowing at every rescan: logged, pinned again, and
    narrowed again, for as long as the target lived."""
    w = workload(2)
    (cpuset / "cgroup.procs").write_text(str(w.pid))
    (cpuset / "cpuset.cpus").write_text("1")
    engine, counters = _free_engine()
    with _released(engine, counters):
        target = engine.attach(w.pid, time.monotonic())
        with structlog.testing.capture_logs() as logs:
            _ticks(engine, 10, pause=0)
        assert target.current().pinned.all() and (target.current().cpu == -1).all()  # free, in their domain
        assert not [e for e in logs if e["event"].startswith("cpuset narrowed")]
        assert target.migrations == len(target.threads), "each thread placed once"


def test_an_invalid_thread_filter_is_refused_with_re2s_whole_hint() -> None:
    """Clipped at 80 characters, the message lost the end of its own hint."""
    engine = Engine(Config(), [[0]], CounterSet(CounterSource.SCHEDSTAT), Pinner())
    with pytest.raises(engine_module.EngineError) as e:
        engine.attach(os.getpid(), time.monotonic(), threads="(?=x)")
    assert e.value.code == "bad_request"
    assert str(e.value).endswith("(patterns are RE2: no back-references or look-arounds)"), str(e.value)
    with pytest.raises(engine_module.EngineError) as e:  # it said already_attached, or no_such_process, first
        engine.attach(2**22 + 1, time.monotonic(), threads="(")
    assert e.value.code == "bad_request" and "invalid threads regex" in str(e.value), str(e.value)


@needs_root
def test_refilter_reads_a_bounded_share_of_names_each_round(monkeypatch) -> None:
    """A name read is ~100 us with the check of its process: 1000 left-out threads at
    once would hold a 0.1 s period back. They take turns, RENAMES_PER_ROUND a round."""
    monkeypatch.setattr(names_module, "RENAMES_PER_ROUND", 1)
    with _named_late_engine() as (p, engine):
        target = engine.attach(p.pid, time.monotonic(), threads="^worker")
        late = tell_to_name(p)
        engine.refilter(time.monotonic())  # the main thread's turn (the lowest tid)
        assert late not in target.threads
        engine.refilter(time.monotonic())
        assert late in target.threads


@needs_root
def test_with_a_seed_each_target_has_its_own_draws_and_a_rerun_the_same(kill_after) -> None:
    """Two runs of the daemon attach the same program twice, other pids each run (as
    after a reboot): the decisions replay, and the two targets' differ."""
    config = dataclasses.replace(Config(), learning=dataclasses.replace(Config().learning, seed=5))
    draws = []
    for _ in range(2):
        engine = Engine(config, [[0]], CounterSet(CounterSource.SCHEDSTAT), Pinner())
        targets = [kill_after(sleepy(1)), kill_after(sleepy(1))]
        draws.append([engine.attach(p.pid, time.monotonic(), observe=True).scheduler.rng.random() for p in targets])
        engine.detach_all()
    assert draws[0] == draws[1] and draws[0][0] != draws[0][1]


def _two_socket_engine() -> tuple[Engine, CounterSet]:
    """This machine has one NUMA node: its two CPUs stand in for a two-socket box, one
    domain each. Level 1 every 2 periods and eager (zeta 1: every thread wants a better
    reply each time; gamma 1), every thread pinned to a core."""
    learning = dataclasses.replace(Config().learning, free=False, zeta=1.0, gamma=1.0)
    config = dataclasses.replace(Config(), period_s=0.02, domain_period_s=0.04, learning=learning)
    counters = CounterSet(CounterSource.TASK_CLOCK)
    return Engine(config, [[0], [1]], counters, Pinner()), counters


@needs_root
def test_a_rescan_that_fails_for_one_target_goes_on_for_the_others(workload) -> None:
    """One target's cpuset read hitting a bug stopped the rescan for every target (the
    daemon's loop caught it whole): the others' cpusets, drift and filters waited."""
    broken, fine = workload(1), workload(1)
    narrowed = {fine.pid: frozenset({0})}

    def allowed(pid: int) -> frozenset[int] | None:
        if pid == broken.pid and len(engine.targets) == 2:
            raise RuntimeError("a bug")
        return narrowed.get(pid)

    counters = CounterSet(CounterSource.SCHEDSTAT)
    engine = Engine(Config(), [[0], [1]], counters, Pinner(), allowed=lambda pid: allowed(pid))
    with _released(engine, counters):
        engine.attach(broken.pid, time.monotonic())
        target = engine.attach(fine.pid, time.monotonic())
        narrowed[fine.pid] = frozenset({1})
        with structlog.testing.capture_logs() as logs:
            engine.resync(time.monotonic())
        assert target.cpus == ((), (1,))
        assert [e["pid"] for e in logs if e["event"] == "rescan failed for target"] == [broken.pid]


@needs_root
@pytest.mark.parametrize("phase", ["_refresh", "_step"])
def test_a_period_that_fails_for_one_target_goes_on_for_the_others(workload, phase) -> None:
    """A bug in one target's period (its listing of threads, or its counters, learning
    and pins) costs that target's period, never the others' nor the daemon's: the
    other target's threads are still measured and placed, and the failure is logged
    with the target's pid."""
    broken, fine = workload(2), workload(2)
    engine, counters = _two_socket_engine()
    with _released(engine, counters):
        for w in (broken, fine):
            engine.attach(w.pid, time.monotonic())
        real = getattr(engine, phase)

        def failing(target, now):
            if target.pid == broken.pid:
                raise RuntimeError("a bug")
            real(target, now)

        setattr(engine, phase, failing)
        engine._unchanged = lambda target, now: False  # every period lists the threads again
        with structlog.testing.capture_logs() as logs:
            _ticks(engine, 5, pause=0.02)
        failed = [e for e in logs if e["event"] == "period failed for target"]
        again = [e for e in logs if e["event"] == "period failed for target again"]  # the same failure
        assert [e["pid"] for e in failed] == [broken.pid] and failed[0]["exc_info"]
        assert [e["pid"] for e in again] == [broken.pid] * 4
        assert engine.targets[fine.pid].current().pinned.all()
        assert set(engine.targets) == {broken.pid, fine.pid}


@needs_root
def test_attach_reads_a_targets_cpuset_once_not_per_thread(workload, cpuset) -> None:
    """Every thread of a target in a narrowed cpuset has the cpuset as its mask; the
    pinner read the cpuset (two files) for each to tell whether it follows it: 220 us
    a thread, 0.2 s of the loop at the attach of 1000. The engine reads it once."""
    w = workload(8)
    (cpuset / "cpuset.cpus").write_text("1")
    (cpuset / "cgroup.procs").write_text(str(w.pid))
    asked, read = [], []

    def counted(tid: int) -> frozenset[int] | None:
        asked.append(tid)
        return cgroups.task_cpus(tid)

    def engines(pid: int) -> frozenset[int] | None:
        read.append(pid)
        return cgroups.task_cpus(pid)

    counters = CounterSet(CounterSource.TASK_CLOCK)
    engine = Engine(Config(), [[0, 1]], counters, Pinner(allowed=counted), allowed=engines)
    with _released(engine, counters):
        target = engine.attach(w.pid, time.monotonic())
        assert len(target.threads) == 9 and asked == [] and read == [w.pid]
        assert {r.original for r in engine.pinner.records.values()} == {possible_cpus()}  # they follow the cpuset


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_level1_never_moves_a_thread_into_a_domain_outside_the_cpuset(workload, cpuset) -> None:
    """A container bound to one socket: a real cgroup v1 cpuset of CPU 1 holds the
    target in the second of two simulated domains (``_two_socket_engine``). The other
    domain has no CPU the target may use, so it is closed to the target's scheduler:
    never a better reply (an empty domain is one for every thread otherwise). Before,
    Level 1 sent a thread there at its first step, the kernel refused every pin
    (EINVAL), the thread stayed on CPU 1 while the scheduler credited its utility to
    domain 0, and the moves went on at every Level 1 step."""
    w = workload(3)
    (cpuset / "cgroup.procs").write_text(str(w.pid))
    (cpuset / "cpuset.cpus").write_text("1")
    engine, counters = _two_socket_engine()
    with _released(engine, counters):
        target = engine.attach(w.pid, time.monotonic())
        with structlog.testing.capture_logs() as logs:
            _ticks(engine, 30, pause=0.02)  # 15 Level 1 steps
        assert not [e for e in logs if e["event"] == "pin refused"]
        assert (target.scheduler.alpha == 1).all() and (target.current().domain == 1).all()
        assert target.current().pinned.all() and set(masks(w.all_tids()).values()) == {frozenset({1})}


@needs_root
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_cpuset_that_changes_while_attached_is_learned_afresh_once(workload, cpuset) -> None:
    """The same simulated two-socket box (``_two_socket_engine``); the target's real v1
    cpuset first allows both domains, then shrinks to the second, then grows back. At
    the rescan after each change its scheduler starts afresh on what is allowed now,
    logged once, not at every rescan; while only domain 1 is open no thread is moved
    to domain 0 and no pin is refused. When domain 0 opens again, the threads stay in
    domain 1 where they run (dealt out over the domains again, half went to domain 0
    at once) until Level 1 moves them one at a time."""
    w = workload(3)
    (cpuset / "cgroup.procs").write_text(str(w.pid))
    engine, counters = _two_socket_engine()

    with _released(engine, counters):
        target = engine.attach(w.pid, time.monotonic())
        first = target.scheduler
        _ticks(engine, 10, pause=0.02)
        assert target.scheduler is first and target.cpus == ((0,), (1,))
        with structlog.testing.capture_logs() as logs:
            (cpuset / "cpuset.cpus").write_text("1")
            engine.resync(time.monotonic())  # the rescan that follows
            _ticks(engine, 20, pause=0.02)
        assert [e["cpus"] for e in logs if e["event"].startswith("cpuset changed")] == [["", "1"]]
        assert not [e for e in logs if e["event"] == "pin refused"]
        assert target.cpus == ((), (1,)) and (target.current().domain == 1).all()
        assert engine.describe(target)["cpus"] == [1]  # status shows where the cpuset lets it be placed
        with structlog.testing.capture_logs() as logs:
            (cpuset / "cpuset.cpus").write_text("0-1")
            engine.resync(time.monotonic())
            engine.tick(time.monotonic())  # the new scheduler's first period: no Level 1 yet
            assert (target.current().domain == 1).all()
            _ticks(engine, 3, pause=0.02)
        assert [e["cpus"] for e in logs if e["event"].startswith("cpuset changed")] == [["0", "1"]]
        assert target.cpus == ((0,), (1,)) and target.scheduler.n_open == 2
        assert engine.describe(target)["cpus"] == [0, 1]


def test_a_cpuset_with_none_of_the_daemons_cpus_falls_back_to_every_domain(kill_after) -> None:
    """The kernel keeps a cpuset non-empty, but the daemon's CPUs (its config's cpus)
    may miss it: the target's scheduler then uses every domain, as before cpusets were
    read (pins outside the cpuset are refused and credited where the thread ran), with
    a warning once, not at each rescan. The cpuset is injected (this machine's CPUs are
    all the daemon's); observe mode: nothing is pinned."""
    p = kill_after(sleepy(2))
    counters = CounterSet(CounterSource.SCHEDSTAT)
    engine = Engine(Config(), [[0], [1]], counters, Pinner(), allowed=lambda pid: frozenset({5}))
    with _released(engine, counters):
        with structlog.testing.capture_logs() as logs:
            target = engine.attach(p.pid, time.monotonic(), observe=True)
            _ticks(engine, 3, pause=0)
        assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
            "the target's cpuset has none of the daemon's CPUs; its scheduler uses every domain"]
        assert target.cpus == ((), ()) and target.scheduler.n_open == 2
        assert engine.describe(target)["cpus"] == [0, 1]  # what its scheduler uses, not the empty cpuset share


# -- CPU hotplug, on a kernel stood in for: this host has CPUs 0 and 1 and cannot unplug
# one in a fast test (tests/reliability/test_faults.py does, slowly, with what 2 CPUs
# allow). The stand-in has 4 possible CPUs and keeps each thread's mask as set, offline
# CPUs included, as the kernel does where no cpuset narrows it.

class HotplugKernel:
    """sched_setaffinity keeps the mask as set and passes its part in {0, 1} to the
    real syscall; sched_getaffinity gives the online part of the mask as set, /proc
    the whole of it (every possible CPU for a thread never set); the test says which
    mask a new thread inherits (``born``) and which CPUs are online (``online``)."""

    POSSIBLE = frozenset(range(4))

    def __init__(self, sysfs: Path, monkeypatch: pytest.MonkeyPatch, online: str) -> None:
        self._real_set = os.sched_setaffinity
        self.sysfs = fake_cpus(sysfs, "0-3", online)
        self._online = sysfs / "devices" / "system" / "cpu" / "online"
        self.as_set: dict[int, frozenset[int]] = {}
        monkeypatch.setattr(os, "sched_setaffinity", self.set)
        monkeypatch.setattr(os, "sched_getaffinity", lambda tid: self.whole(tid) & self.cpus_online())
        monkeypatch.setattr(procfs, "thread_cpus_allowed", lambda tid, root=procfs.PROC_ROOT: self.whole(tid))

    def online(self, cpus: str) -> None:
        self._online.write_text(cpus + "\n")

    def cpus_online(self) -> frozenset[int]:
        return parse_cpulist(self._online.read_text())

    def whole(self, tid: int) -> frozenset[int]:
        return self.as_set.get(tid, self.POSSIBLE)

    def set(self, tid: int, cpus) -> None:
        cpus = frozenset(cpus)
        if not cpus & self.cpus_online():
            raise OSError(22, "Invalid argument")
        self._real_set(tid, cpus & {0, 1})
        self.as_set[tid] = cpus

    def born(self, tid: int, creator: int) -> None:
        self.as_set[tid] = self.whole(creator)


def _hotplug_engine(kernel: HotplugKernel, domains: list[list[int]], **options: object) -> tuple[Engine, CounterSet]:
    """An engine whose every thread is free (its whole domain) for good, on the
    stand-in kernel's CPUs, as if in the root cpuset (its effective CPUs: those online)."""
    learning = dataclasses.replace(Config().learning, free=True, free_prior=1.0, lam=0.0)
    counters = CounterSet(CounterSource.SCHEDSTAT)
    online = lambda tid: kernel.cpus_online()  # noqa: E731
    engine = Engine(dataclasses.replace(Config(), learning=learning), domains, counters,
                    Pinner(sysfs=kernel.sysfs, allowed=online), allowed=online, sysfs=kernel.sysfs, **options)
    return engine, counters


@needs_root
def test_a_thread_born_while_a_cpu_of_our_mask_is_offline_gets_the_targets_own_back(
        workload, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Free on the domain {1, 3}, a thread reads {1} once CPU 3 is offline; one it
    creates then inherits {1, 3}, ours, and reads {1}: the target's own mask is what
    detach gives it, not ours (it kept {1, 3}: /proc's mask as set was taken for its
    original)."""
    kernel = HotplugKernel(tmp_path / "sys", monkeypatch, "0-1,3")
    w = workload(1)
    engine, counters = _hotplug_engine(kernel, [[1, 3]])
    with _released(engine, counters):
        engine.attach(w.pid, time.monotonic())
        _ticks(engine, 3, pause=0)
        assert {kernel.whole(t) for t in w.all_tids()} == {frozenset({1, 3})}
        kernel.online("0-1")
        born = set(w.command("spawn")) - set(engine.targets[w.pid].threads)
        for tid in born:
            kernel.born(tid, w.pid)  # the main thread spawns
        engine.tick(time.monotonic())
        engine.detach(w.pid)
        assert {kernel.whole(t) for t in w.all_tids()} == {kernel.POSSIBLE}


WORKER_SPAWNS = r"""
import json, queue, sys, threading
spawned = queue.Queue()
def worker():
    while True:
        sys.stdin.readline()
        t = threading.Thread(target=lambda: (spawned.put(threading.get_native_id()), threading.Event().wait()), daemon=True)
        t.start()
        print(json.dumps(spawned.get()), flush=True)
w = threading.Thread(target=worker, daemon=True)
w.start()
print(json.dumps(w.native_id), flush=True)
w.join()
"""


@needs_root
def test_a_programs_own_mask_is_not_ours_while_a_cpu_is_offline(
        kill_after, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A program keeps a worker on {1, 3} while CPU 3 is offline (it reads {1}), and
    nothing is pinned (the originals cannot be saved). The worker's own mask, read
    whole from /proc as its original, differs from the read; it is still not one we
    set, so a thread the worker creates keeps the mask it inherited (it was given the
    target's at detach)."""
    kernel = HotplugKernel(tmp_path / "sys", monkeypatch, "0-1")
    p = kill_after(subprocess.Popen([sys.executable, "-c", WORKER_SPAWNS], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True))
    worker = json.loads(p.stdout.readline())
    os.sched_setaffinity(worker, {1, 3})
    engine, counters = _hotplug_engine(kernel, [[0, 1, 2, 3]], persist=lambda: False)
    with _released(engine, counters):
        engine.attach(p.pid, time.monotonic())
        _ticks(engine, 3, pause=0)
        p.stdin.write("spawn\n")
        p.stdin.flush()
        born = json.loads(p.stdout.readline())
        kernel.born(born, worker)
        engine.tick(time.monotonic())
        assert born in engine.targets[p.pid].threads
        engine.detach(p.pid)
        assert kernel.whole(born) == {1, 3}


@needs_root
def test_a_period_that_fails_alike_every_time_is_logged_with_its_traceback_once(workload, monkeypatch) -> None:
    """Fault injection (a bug in the step of one target): the first failure is logged
    with its traceback, the same one in the next periods at debug level only; a
    period that succeeds in between makes the next failure news again."""
    w = workload(2)
    engine, counters = _pin_engine()
    with _released(engine, counters):
        engine.attach(w.pid, time.monotonic())
        real_step = engine._step

        def broken(target, now):
            raise RuntimeError("a bug")

        monkeypatch.setattr(engine, "_step", broken)
        with structlog.testing.capture_logs() as logs:
            _ticks(engine, 5, pause=0)
            monkeypatch.setattr(engine, "_step", real_step)
            _ticks(engine, 1, pause=0)
            monkeypatch.setattr(engine, "_step", broken)
            _ticks(engine, 2, pause=0)
        said = [(e["event"], e["log_level"], e.get("exc_info")) for e in logs if e["event"].startswith("period failed")]
        assert said == [("period failed for target", "error", True)] + [("period failed for target again", "debug", None)] * 4 \
            + [("period failed for target", "error", True), ("period failed for target again", "debug", None)]


class RefusesOne(CounterSet):
    """perf:task-clock counters that cannot be opened for one tid, for the reason given."""

    refused: int | None = None
    why = ""

    def open(self, tid: int) -> None:
        if tid == self.refused:
            raise HostError(self.why, tid=tid)
        super().open(tid)


@needs_root
def test_a_thread_that_fails_anew_for_another_reason_is_said_again(workload) -> None:
    """A thread not adopted is said once, then at debug level while it fails alike
    each period; one that then fails for another reason is news, not a debug line."""
    w = workload(2)
    counters = RefusesOne(CounterSource.TASK_CLOCK)
    config = dataclasses.replace(Config(), learning=dataclasses.replace(Config().learning, free=False))
    engine = Engine(config, read_topology("/sys").domains(config.domains), counters, Pinner())
    counters.refused = max(set(w.all_tids()) - {w.pid})
    with _released(engine, counters), structlog.testing.capture_logs() as logs:
        counters.why = "first reason"
        engine.attach(w.pid, time.monotonic())
        _ticks(engine, 3, pause=0)
        counters.why = "second reason"
        _ticks(engine, 2, pause=0)
    said = [(e["log_level"], e["error"]) for e in logs if e["event"] == "cannot manage thread"]
    assert said == [("warning", "first reason")] + [("debug", "first reason")] * 3 \
        + [("warning", "second reason"), ("debug", "second reason")], said


@needs_root
def test_the_same_error_raised_elsewhere_is_a_new_failure(workload, monkeypatch) -> None:
    """A period failing with the same message as the last but raised at another place
    is another bug: logged with its traceback, not at debug level."""
    w = workload(2)
    engine, counters = _pin_engine()
    with _released(engine, counters):
        engine.attach(w.pid, time.monotonic())

        def here(target, now):
            raise KeyError(7)

        def there(target, now):
            raise KeyError(7)

        with structlog.testing.capture_logs() as logs:
            monkeypatch.setattr(engine, "_step", here)
            _ticks(engine, 2, pause=0)
            monkeypatch.setattr(engine, "_step", there)
            _ticks(engine, 2, pause=0)
        said = [e["event"] for e in logs if e["event"].startswith("period failed")]
        assert said == ["period failed for target", "period failed for target again"] * 2, said


@needs_root
def test_a_thread_not_managed_is_logged_with_its_target(tmp_path):
    """A thread the daemon could not manage (here: out of file descriptors, its
    RLIMIT_NOFILE lowered by prlimit while a 40-thread process is attached) was logged
    with its tid alone ("out of file descriptors, thread not managed", tid=...): with
    several targets an administrator could not tell whose it was, nor look it up once
    the thread had exited. The line names the target's pid too."""
    from tests.reliability.helpers import fd_count, nofile_hard, sleepy

    d = start_daemon(tmp_path)
    target = sleepy(40)
    pid = d.proc.pid
    hard = nofile_hard(pid)
    try:
        subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={fd_count(pid) + 12}:{hard}"], check=True)
        d.request("attach", pid=target.pid, timeout=10)
        lines = [r for r in d.log_records() if r["event"] == "out of file descriptors, thread not managed"]
        assert lines and all(r["pid"] == target.pid for r in lines), lines
    finally:
        subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={hard}:{hard}"])
        target.kill()
        target.wait()
        d.stop()
