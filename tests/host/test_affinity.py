"""Affinity and the Pinner on real threads (this host has CPUs 0 and 1)."""

from __future__ import annotations

import dataclasses
import gc
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from parlschedd.host import affinity, cgroups, procfs
from parlschedd.host.affinity import LinuxAffinity, Pinner, get_affinity, possible_cpus, set_affinity
from parlschedd.host.base import Drift, PinRecord
from parlschedd.host.errors import AccessDenied, HostError, InvalidMask, Overridden, ThreadGone
from parlschedd.host.state import read_state, write_state

from tests.conftest import fake_cpus, own_cgroup
from tests.reliability.helpers import spawn_with_pid

from .conftest import FakeProc, Worker, fd_count

CPUSET_ROOT = Path(cgroups.CGROUP_ROOT, "cpuset")


@dataclass(frozen=True)
class CpusetDir:
    """A real v1 cpuset made for one test (``own_cgroup``)."""

    path: Path

    def set_cpus(self, cpus: str) -> None:
        (self.path / "cpuset.cpus").write_text(cpus)

    def add(self, tid: int) -> None:
        (self.path / "tasks").write_text(str(tid))


@pytest.fixture
def cpuset() -> Iterator[CpusetDir]:
    """Skipped where there is no writable v1 cpuset hierarchy (this host has one)."""
    with own_cgroup(CPUSET_ROOT) as path:
        yield CpusetDir(path)


def pin(pinner: Pinner, tid: int, cpus: frozenset[int]) -> bool:
    """One move through ``pin_many`` (the daemon moves its threads in batches), its
    HostError raised."""
    outcome = pinner.pin_many([(tid, cpus)])[0]
    if isinstance(outcome, HostError):
        raise outcome
    return outcome


ALL = frozenset(os.sched_getaffinity(0))
pytestmark = pytest.mark.skipif(not {0, 1} <= ALL, reason="needs CPUs 0 and 1")

unrestricted: Callable[[int], frozenset[int] | None] = lambda tid: None  # noqa: E731


def adopted(pinner: Pinner, worker: Worker) -> int:
    pinner.adopt(worker.tid, procfs.thread_start_time(worker.tid))
    return worker.tid


def test_get_and_set_affinity(spawn: Callable[..., Worker]) -> None:
    worker = spawn(busy=False)
    assert get_affinity(worker.tid) == ALL
    set_affinity(worker.tid, {0})
    assert os.sched_getaffinity(worker.tid) == {0}
    assert os.sched_getaffinity(0) == ALL  # only that thread moved
    with pytest.raises(InvalidMask):
        set_affinity(worker.tid, {1000})  # no such CPU
    worker.finish()
    with pytest.raises(ThreadGone):
        set_affinity(worker.tid, {0})
    with pytest.raises(ThreadGone):
        get_affinity(worker.tid)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_unprivileged_user_cannot_move_a_root_thread() -> None:
    target = os.getpid()
    child = os.fork()
    if child == 0:  # exit code 0: refused as AccessDenied
        try:
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            set_affinity(target, {0})
        except AccessDenied:
            os._exit(0)
        except BaseException:
            os._exit(2)
        os._exit(1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_pin_then_restore_exact_original(spawn: Callable[..., Worker]) -> None:
    worker = spawn(busy=True)
    set_affinity(worker.tid, {0, 1})
    pinner = Pinner()
    tid = adopted(pinner, worker)
    assert pin(pinner, tid, frozenset({0})) is True
    assert os.sched_getaffinity(tid) == {0}
    assert pinner.records[tid] == PinRecord(pinner.records[tid].start_time, frozenset({0, 1}), frozenset({0}),
                                            asked=frozenset({0}))
    pinner.adopt(tid, pinner.records[tid].start_time)  # once per identity: original kept
    assert pinner.records[tid].original == {0, 1}
    assert pinner.restore(tid) is True
    assert os.sched_getaffinity(tid) == {0, 1}
    assert tid not in pinner.records
    assert pinner.restore(tid) is False  # not adopted any more: nothing to do


def test_reassign_keeps_the_identity_and_takes_the_mask_now_as_ours(spawn: Callable[..., Worker]) -> None:
    """After an exec from another thread the main tid names the thread that exec'd,
    carrying the mask we set on it: ``reassign`` gives the record that thread's original
    and takes the mask it has as the one we set, so that the next pin is not refused as
    someone else's, and restore puts the new original back."""
    worker = spawn(busy=False)
    pinner = Pinner(allowed=unrestricted)
    tid = adopted(pinner, worker)
    start = pinner.records[tid].start_time
    pin(pinner, tid, frozenset({0}))
    os.sched_setaffinity(tid, {1})  # the mask the thread that exec'd carried
    pinner.reassign(tid, frozenset({1}))
    assert pinner.records[tid] == PinRecord(start, frozenset({1}), frozenset({1}))
    assert pin(pinner, tid, frozenset({0})) is True  # ours: no Overridden
    assert pinner.restore(tid) is True
    assert os.sched_getaffinity(tid) == {1}
    with pytest.raises(KeyError):
        pinner.reassign(tid, frozenset({1}))


def test_set_original_changes_what_is_restored_and_nothing_else(spawn: Callable[..., Worker]) -> None:
    """The threads a program starts after an exec get another original (the engine's
    _rebase), through ``reassign`` first: it took the mask the thread had then for the
    one we set, so a mask the program set on it since adoption (an OpenMP binding) was
    moved over as ours. ``set_original`` leaves that mask theirs."""
    worker = spawn(busy=False)
    pinner = Pinner(allowed=unrestricted)
    tid = adopted(pinner, worker)
    pin(pinner, tid, frozenset({0}))
    os.sched_setaffinity(tid, {1})  # the program binds the thread
    pinner.set_original(tid, frozenset({0, 1}))
    assert isinstance(pinner.pin_many([(tid, frozenset({1}))])[0], Overridden)  # the next move: refused, theirs
    assert os.sched_getaffinity(tid) == {1}
    other = adopted(pinner, spawn(busy=False))
    pin(pinner, other, frozenset({0}))
    pinner.set_original(other, frozenset({1}))
    assert pinner.restore(other) is True and os.sched_getaffinity(other) == {1}


@pytest.mark.skipif(len(ALL) < 2, reason="an inherited pin must differ from the original")
def test_give_back_puts_the_original_on_a_thread_not_ours_and_keeps_no_record(spawn: Callable[..., Worker]) -> None:
    """A thread born of a pinned one carries our pin (CPU 0 here): given back, it has
    the original and no record; a stale start time (its tid reused) is never written."""
    worker = spawn(busy=False)
    os.sched_setaffinity(worker.tid, {0})
    pinner = Pinner(allowed=unrestricted)
    pinner.give_back(worker.tid, procfs.thread_start_time(worker.tid), ALL)
    assert os.sched_getaffinity(worker.tid) == ALL and worker.tid not in pinner.records
    os.sched_setaffinity(worker.tid, {0})
    with pytest.raises(ThreadGone):
        pinner.give_back(worker.tid, procfs.thread_start_time(worker.tid) - 1, ALL)
    assert os.sched_getaffinity(worker.tid) == {0} and worker.tid not in pinner.records


def test_pin_skips_the_syscall_when_the_mask_is_unchanged(spawn: Callable[..., Worker]) -> None:
    worker = spawn(busy=False)
    pinner = Pinner(allowed=unrestricted)
    tid = adopted(pinner, worker)
    assert pin(pinner, tid, frozenset({1})) is True
    assert pin(pinner, tid, frozenset({1})) is False
    assert pin(pinner, tid, ALL) is True  # back to the original mask is a change too
    os.sched_setaffinity(tid, {0})  # someone else moves it: theirs, no pin writes over it
    assert pin(pinner, tid, ALL) is False
    with pytest.raises(Overridden):
        pin(pinner, tid, frozenset({1}))
    assert os.sched_getaffinity(tid) == {0}


def test_pin_to_cpus_outside_every_cpuset(spawn: Callable[..., Worker]) -> None:
    worker = spawn(busy=False)
    pinner = Pinner()
    tid = adopted(pinner, worker)
    with pytest.raises(InvalidMask):
        pin(pinner, tid, frozenset({1000}))
    assert os.sched_getaffinity(tid) == ALL
    assert pinner.records[tid].current == ALL
    with pytest.raises(KeyError):
        pin(pinner, os.getpid(), frozenset({0}))  # never adopted


def test_the_kernel_drops_cpus_outside_the_cpuset(spawn: Callable[..., Worker]) -> None:
    worker = spawn(busy=False)
    pinner = Pinner()
    tid = adopted(pinner, worker)
    assert pin(pinner, tid, frozenset({0, 1000})) is True  # CPU 1000 is in no cpuset
    assert os.sched_getaffinity(tid) == {0}


def test_pin_inside_a_real_cpuset(spawn: Callable[..., Worker], cpuset: CpusetDir) -> None:
    worker = spawn(busy=False)
    cpuset.set_cpus("1")
    cpuset.add(worker.tid)
    assert cgroups.task_cpus(worker.tid) == frozenset({1})
    pinner = Pinner()
    tid = adopted(pinner, worker)
    assert pinner.records[tid].original == possible_cpus()  # it follows its cpuset: every CPU, narrowed by it
    with pytest.raises(InvalidMask):
        pin(pinner, tid, frozenset({0}))
    assert os.sched_getaffinity(tid) == {1}
    assert pin(pinner, tid, ALL) is True
    assert os.sched_getaffinity(tid) == {1}  # the kernel keeps it inside the cpuset


def test_restore_after_the_cpuset_shrank(spawn: Callable[..., Worker], cpuset: CpusetDir) -> None:
    worker = spawn(busy=False)
    cpuset.set_cpus("0-1")
    cpuset.add(worker.tid)
    os.sched_setaffinity(worker.tid, {0})
    pinner = Pinner()
    tid = adopted(pinner, worker)
    pin(pinner, tid, frozenset({1}))
    cpuset.set_cpus("1")  # the original CPU 0 is no longer allowed
    report = pinner.restore_all()
    assert report.restored == (tid,)
    assert os.sched_getaffinity(tid) == {1}  # widened to the whole cpuset
    if affinity.running_kernel_keeps_asked_mask():  # Linux 6.2+: the mask asked for is kept across cpuset changes
        cpuset.set_cpus("0-1")
        assert os.sched_getaffinity(tid) == {0, 1}, "the original asked for too, back once the cpuset allows it"


def test_a_defect_in_one_threads_restore_leaves_no_other_pinned(spawn: Callable[..., Worker]) -> None:
    """A ValueError from one thread's restore (a cgroup name that broke the parser)
    ended restore_all, and the daemon's stop, with every later thread left pinned. Here
    the fault is injected through the pinner's own ``allowed`` hook, which a thread whose
    mask someone else changed makes it read."""
    first, second = spawn(busy=False), spawn(busy=False)

    def allowed(tid: int) -> frozenset[int] | None:
        if tid == first.tid:
            raise ValueError("not enough values to unpack")
        return None

    pinner = Pinner(allowed=allowed)
    for w in sorted((first, second), key=lambda w: w.tid):
        adopted(pinner, w)
        pin(pinner, w.tid, frozenset({0}))
    os.sched_setaffinity(first.tid, ALL - {0} or ALL)  # not our pin: the pinner asks what the kernel allows
    report = pinner.restore_all()
    assert report.restored == (second.tid,) and os.sched_getaffinity(second.tid) == ALL
    assert [(tid, why.split(":")[0]) for tid, why in report.failed] == [(first.tid, "internal error")]


def test_no_fd_left_behind(spawn: Callable[..., Worker]) -> None:
    workers = [spawn(busy=False) for _ in range(20)]
    start = fd_count()
    pinner = Pinner()
    for w in workers:
        adopted(pinner, w)
        pin(pinner, w.tid, frozenset({0}))
    workers[0].finish()
    with pytest.raises(ThreadGone):
        pin(pinner, workers[0].tid, frozenset({1}))
    assert pinner.restore(workers[1].tid) is True
    report = pinner.restore_all()
    assert len(report.restored) == 18
    assert fd_count() == start


def test_thread_exiting_between_adopt_and_pin(spawn: Callable[..., Worker]) -> None:
    worker = spawn(busy=False)
    pinner = Pinner()
    tid = adopted(pinner, worker)
    worker.finish()
    with pytest.raises(ThreadGone):
        pin(pinner, tid, frozenset({0}))
    assert tid not in pinner.records


def test_adopt_refuses_a_stale_identity(spawn: Callable[..., Worker]) -> None:
    worker = spawn(busy=False)
    pinner = Pinner()
    with pytest.raises(ThreadGone):
        pinner.adopt(worker.tid, procfs.thread_start_time(worker.tid) - 1)
    assert worker.tid not in pinner.records


def test_restart_restores_from_another_pinners_state(spawn: Callable[..., Worker], tmp_path: Path) -> None:
    keep, leave = spawn(busy=False), spawn(busy=False)
    state = tmp_path / "pinner.json"
    first = Pinner()
    for w in (keep, leave):
        adopted(first, w)
        pin(first, w.tid, frozenset({0}))
    write_state(state, first.to_json())
    leave.finish()
    del first  # the daemon was killed; a new one starts

    second = Pinner.from_json(read_state(state) or {})
    assert set(second.records) == {keep.tid, leave.tid}
    report = second.restore_all()
    assert report.restored == (keep.tid,) and report.gone == (leave.tid,) and report.failed == ()
    assert os.sched_getaffinity(keep.tid) == ALL
    assert second.records == {}


def test_restore_after_a_crash_between_pin_and_state_write(spawn: Callable[..., Worker]) -> None:
    worker = spawn(busy=False)
    first = Pinner()
    tid = adopted(first, worker)
    saved = first.to_json()  # written before the pin; the pin never reached the file
    pin(first, tid, frozenset({1}))
    Pinner.from_json(saved, placements=[frozenset({0}), frozenset({1}), ALL]).restore(tid)
    assert os.sched_getaffinity(tid) == ALL


def test_restore_leaves_a_mask_someone_set_since_our_last_pin(spawn: Callable[..., Worker]) -> None:
    """Between two rescans only a move checks the mask: detach and shutdown must not
    write over a mask the program or an administrator set meanwhile."""
    theirs, also_theirs, ours = spawn(busy=False), spawn(busy=False), spawn(busy=False)
    pinner = Pinner(allowed=unrestricted)
    for worker in (theirs, also_theirs, ours):
        pin(pinner, adopted(pinner, worker), frozenset({1}))
    os.sched_setaffinity(theirs.tid, {0})
    os.sched_setaffinity(also_theirs.tid, {0})
    with pytest.raises(Overridden):
        pinner.restore(theirs.tid)
    assert theirs.tid not in pinner.records
    report = pinner.restore_all()
    assert (report.restored, report.kept) == ((ours.tid,), (also_theirs.tid,))
    assert [os.sched_getaffinity(w.tid) for w in (theirs, also_theirs, ours)] == [{0}, {0}, ALL]


def test_a_restart_tells_the_last_runs_pins_by_their_shape(spawn: Callable[..., Worker]) -> None:
    """The state file keeps a thread's mask at adoption, not at each pin: after a
    restart a mask the last run could have set (here CPU 1 alone: it placed threads on
    CPU 1 only) is restored, another (CPU 0, set while no daemon ran) is left alone."""
    pinned, reset = spawn(busy=False), spawn(busy=False)
    first = Pinner(allowed=unrestricted)
    tids = [adopted(first, w) for w in (pinned, reset)]
    saved = first.to_json()
    for tid in tids:
        pin(first, tid, frozenset({1}))
    os.sched_setaffinity(reset.tid, {0})  # an administrator, while the daemon was down
    report = Pinner.from_json(saved, allowed=unrestricted, placements=[frozenset({1})]).restore_all()
    assert (report.restored, report.kept) == ((pinned.tid,), (reset.tid,))
    assert os.sched_getaffinity(pinned.tid) == ALL and os.sched_getaffinity(reset.tid) == {0}


def test_a_reused_tid_is_never_touched(spawn: Callable[..., Worker]) -> None:
    stranger = spawn(busy=False)
    os.sched_setaffinity(stranger.tid, {1})
    start = procfs.thread_start_time(stranger.tid)
    # A state file from before a restart: the same tid, but it named an older thread.
    old = {"version": 1, "threads": {str(stranger.tid): {"start_time": start - 5, "original": "0", "current": "1"}}}
    pinner = Pinner.from_json(old)
    with pytest.raises(ThreadGone):
        pin(pinner, stranger.tid, frozenset({0}))
    pinner = Pinner.from_json(old)
    assert pinner.restore_all().gone == (stranger.tid,)
    assert os.sched_getaffinity(stranger.tid) == {1}


def test_a_tid_reused_after_its_first_move_is_never_touched() -> None:
    """A thread moved once keeps its pidfd (its handle; the start time is checked only
    when that opens). Once it has exited and its tid is another process's, whose mask
    is the one we set, the batched poll tells the move so: ThreadGone, nothing written.
    Without the poll the stranger passed the check that its mask is ours and was
    moved."""
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    old = subprocess.Popen(sleeper)
    try:
        pinner = Pinner()
        pinner.adopt(old.pid, procfs.thread_start_time(old.pid))
        assert pin(pinner, old.pid, frozenset({0}))
    finally:
        old.kill()
        old.wait()
    stranger = spawn_with_pid(old.pid, sleeper)
    if stranger is None:
        pytest.skip("another process took the pid first")
    try:
        os.sched_setaffinity(stranger.pid, {0})  # as we left the one before
        [outcome] = pinner.pin_many([(old.pid, frozenset({1}))])
        assert isinstance(outcome, ThreadGone) and os.sched_getaffinity(stranger.pid) == {0}
    finally:
        stranger.kill()
        stranger.wait()


def test_a_restart_tells_a_domain_pin_cut_by_the_threads_cpuset_as_the_last_runs(
        spawn: Callable[..., Worker]) -> None:
    """The last run placed threads on a domain whole (CPUs 0-1 here); in a cpuset of
    CPU 1 alone the kernel made that pin {1}, which is no placement itself but is one
    cut by the thread's cpuset: restored. (The cpuset is the Pinner's ``allowed``,
    standing in for a cgroup's here.)"""
    worker = spawn(busy=False)
    first = Pinner(allowed=unrestricted)
    tid = adopted(first, worker)
    saved = first.to_json()
    os.sched_setaffinity(tid, {1})  # the domain's pin, as the cpuset left it
    in_cpuset_1 = lambda t: frozenset({1})  # noqa: E731
    assert Pinner.from_json(saved, allowed=in_cpuset_1, placements=[frozenset({0, 1})]).restore_all().restored == (tid,)
    assert os.sched_getaffinity(tid) == ALL


def test_a_thread_adopted_in_a_narrowed_cpuset_follows_it_again_after_restore(
        spawn: Callable[..., Worker], cpuset: CpusetDir) -> None:
    """A thread that never asked for a mask has its cpuset's: restoring that snapshot
    as a request left it on those CPUs when the cpuset grew (the kernel keeps the
    last request), where a thread never adopted gets the new ones. One that asked for
    a mask narrower than its cpuset gets that back (test_restore_after_the_cpuset_shrank)."""
    follows, untouched = spawn(busy=False), spawn(busy=False)
    cpuset.set_cpus("0")
    for w in (follows, untouched):
        cpuset.add(w.tid)
    pinner = Pinner()
    pin(pinner, adopted(pinner, follows), frozenset({0}))
    assert pinner.restore_all().restored == (follows.tid,)
    assert os.sched_getaffinity(follows.tid) == {0}
    cpuset.set_cpus("0-1")
    assert [os.sched_getaffinity(w.tid) for w in (follows, untouched)] == [{0, 1}, {0, 1}]


def test_a_cpuset_given_by_the_caller_that_is_out_of_date_is_checked(
        spawn: Callable[..., Worker], cpuset: CpusetDir) -> None:
    """The engine gives the cpuset it last read (once a rescan); one that changed since
    made a thread following the new cpuset look as if it asked for it."""
    worker = spawn(busy=False)
    cpuset.set_cpus("1")
    cpuset.add(worker.tid)
    pinner = Pinner()
    pinner.adopt(worker.tid, procfs.thread_start_time(worker.tid), cpuset=ALL)  # read before the cpuset shrank
    assert pinner.records[worker.tid].original == possible_cpus()


def test_restore_when_the_original_left_the_cpuset_or_went_offline(spawn: Callable[..., Worker]) -> None:
    """An original of CPUs the thread may not use (CPU 1000 stands for one outside
    its cpuset, or offline where no cpuset applies) is restored with the CPUs it may
    use: never left on our pin."""
    in_cpuset, no_cpuset = spawn(busy=False), spawn(busy=False)
    records = {
        w.tid: PinRecord(procfs.thread_start_time(w.tid), frozenset({1000}), frozenset({0}))
        for w in (in_cpuset, no_cpuset)
    }
    for w in (in_cpuset, no_cpuset):
        os.sched_setaffinity(w.tid, {0})
    report = Pinner(records={in_cpuset.tid: records[in_cpuset.tid]}, allowed=lambda t: ALL).restore_all()
    assert report.restored == (in_cpuset.tid,)
    assert os.sched_getaffinity(in_cpuset.tid) == ALL
    report = Pinner(records={no_cpuset.tid: records[no_cpuset.tid]}, allowed=unrestricted).restore_all()
    assert report.restored == (no_cpuset.tid,)
    assert os.sched_getaffinity(no_cpuset.tid) == ALL  # the CPUs online


def test_state_round_trip() -> None:
    records = {7: PinRecord(123, frozenset({0, 1, 2, 5}), frozenset({2}))}
    data = Pinner(records=records).to_json()
    assert data == {"version": 1, "threads": {"7": {"start_time": 123, "original": "0-2,5", "current": "2"}}}
    assert Pinner.from_json(data).records == {7: PinRecord(123, frozenset({0, 1, 2, 5}), frozenset({2}), recovered=True)}
    with pytest.raises(ValueError):
        Pinner.from_json({"version": 99, "threads": {}})


@pytest.mark.parametrize("data", [None, [], "x", {"threads": {}}, {"version": 1}, {"version": 1, "threads": []}],
                         ids=["null", "list", "string", "no version", "no threads", "threads a list"])
def test_a_state_that_is_not_a_pinner_state_is_refused(data) -> None:
    with pytest.raises(ValueError):
        Pinner.from_json(data)


def test_an_unreadable_record_is_skipped_and_the_others_kept() -> None:
    """Each record is the only saved original of its thread: one bad entry must not
    lose the rest."""
    good = {"start_time": 123, "original": "0-1", "current": "1"}
    bad = {"x": [], "-3": good, "8": [1, 2], "9": {**good, "start_time": "123"}, "10": {**good, "original": 5},
           "11": {**good, "current": "1-0"}, "99999999999999999999": good, "0": good,
           "13": {**good, "original": "0-999999999999"}, "12": good,  # a tid past the kernel's; a range without end
           "14": {**good, "original": ""}, "15": {**good, "current": " "}}  # no CPU: a damaged record (was a restore refused)
    assert Pinner.from_json({"version": 1, "threads": bad}).records == {12: PinRecord(123, frozenset({0, 1}), frozenset({1}),
                                                                                           recovered=True)}


def test_pin_many_gives_one_outcome_per_move(spawn: Callable[..., Worker], cpuset: CpusetDir) -> None:
    """Moved, unchanged, exited and refused threads in one batch; the batch goes on
    past the failures and each outcome is what ``pin`` alone would give."""
    moved, same, gone, fenced = (spawn(busy=False) for _ in range(4))
    pinner = Pinner()
    for w in (moved, same, gone, fenced):
        adopted(pinner, w)
    pin(pinner, same.tid, frozenset({1}))
    cpuset.set_cpus("0")
    cpuset.add(fenced.tid)  # may only use CPU 0 from now on
    gone.finish()
    outcomes = pinner.pin_many([(moved.tid, frozenset({0})), (same.tid, frozenset({1})),
                                (gone.tid, frozenset({0})), (fenced.tid, frozenset({1}))])
    assert outcomes[0] is True and outcomes[1] is False
    assert isinstance(outcomes[2], ThreadGone) and gone.tid not in pinner.records
    assert isinstance(outcomes[3], InvalidMask)
    # with their tracebacks (theirs, or those of the errors they were raised from), each
    # held pin_many's frame and its outcomes: a cycle per failed move that only the
    # collector freed (a soak run counted hundreds waiting)
    for failed in outcomes[2:]:
        assert failed.__traceback__ is None and failed.__cause__ is None and failed.__context__ is None
    assert os.sched_getaffinity(moved.tid) == {0} and os.sched_getaffinity(same.tid) == {1}
    assert pinner.records[fenced.tid].current == {0}, "the cpuset's narrowing, seen before the refused write"
    pinner.restore_all()


def test_a_refused_move_leaves_no_garbage_for_the_collector(spawn: Callable[..., Worker]) -> None:
    """A move the kernel refuses every period (a CPU outside the thread's cpuset) made
    a reference cycle each time, through the tracebacks of its error and of the OSError
    it was raised from, which only the cycle collector freed. With the collector off,
    nothing is left unreachable after five."""
    worker = spawn(busy=False)
    pinner = Pinner(allowed=unrestricted)
    adopted(pinner, worker)
    gc.collect()
    gc.disable()
    try:
        for _ in range(5):
            assert isinstance(pinner.pin_many([(worker.tid, frozenset({4095}))])[0], InvalidMask)
        assert gc.collect() == 0
    finally:
        gc.enable()
    pinner.restore_all()


def test_drifted_tells_the_kernels_narrowing_from_someone_elses_mask(spawn: Callable[..., Worker], cpuset: CpusetDir) -> None:
    """A real cpuset shrinking under a pinned thread (v1 rewrites its mask) is the
    kernel's: its mask becomes the record's current, so the next pin to the lost CPU
    is a real, refused write. A taskset-like change by hand is someone else's: left
    as it is, and a pin refuses to write over it. Each is reported once."""
    fenced, retasked, kept = (spawn(busy=False) for _ in range(3))
    pinner = Pinner()
    for w in (fenced, retasked, kept):
        adopted(pinner, w)
    cpuset.set_cpus("0-1")
    cpuset.add(fenced.tid)
    for w in (fenced, retasked, kept):
        pin(pinner, w.tid, frozenset({0}))
    assert pinner.drifted([fenced.tid, retasked.tid, kept.tid]) == Drift([], [])
    cpuset.set_cpus("1")
    os.sched_setaffinity(retasked.tid, {1})
    assert pinner.drifted([fenced.tid, retasked.tid, kept.tid]) == Drift([fenced.tid], [retasked.tid])
    assert pinner.records[fenced.tid].current == frozenset({1})
    assert pinner.drifted([fenced.tid, kept.tid]) == Drift([], [])
    with pytest.raises(InvalidMask):
        pin(pinner, fenced.tid, frozenset({0}))
    with pytest.raises(Overridden):
        pin(pinner, retasked.tid, frozenset({0, 1}))
    assert os.sched_getaffinity(retasked.tid) == {1}
    pinner.release(retasked.tid)
    assert retasked.tid not in pinner.records
    pinner.restore_all()
    assert os.sched_getaffinity(retasked.tid) == {1}, "released: not restored"


def test_a_mask_its_cpuset_keeps_part_of_is_not_a_drift(spawn: Callable[..., Worker], cpuset: CpusetDir) -> None:
    """A domain's mask on a thread whose cpuset is narrower: the kernel keeps the part
    allowed. That was reported as the cpuset narrowing at every rescan (logged, the
    thread pinned again, narrowed again); it is what the kernel makes of our mask."""
    w = spawn(busy=False)
    pinner = Pinner()
    adopted(pinner, w)
    pin(pinner, w.tid, frozenset({0}))
    cpuset.set_cpus("1")
    cpuset.add(w.tid)  # v1: its mask becomes the cpuset's
    assert pin(pinner, w.tid, frozenset({0, 1})) is True
    assert os.sched_getaffinity(w.tid) == {1}
    assert pinner.drifted([w.tid]) == Drift([], [])
    record = pinner.records[w.tid]
    assert (record.current, record.wanted) == ({1}, {0, 1})
    assert pin(pinner, w.tid, frozenset({0, 1})) is False, "asked for already: nothing to write"
    assert pinner.drifted([w.tid]) == Drift([], [])
    cpuset.set_cpus("0-1")  # the grown cpuset gives back what we asked for
    assert pinner.drifted([w.tid]) == Drift([], []) and os.sched_getaffinity(w.tid) == {0, 1}
    pinner.restore_all()


def test_a_cpuset_that_grows_back_gives_our_mask_back_not_someone_elses(spawn: Callable[..., Worker],
                                                                         cpuset: CpusetDir) -> None:
    """The kernel keeps the last mask we set (Linux 6.2+) and gives a thread what its
    cpuset allows of it each time the cpuset changes. A pin refused meanwhile made the
    mask of a grown cpuset look like someone else's: the thread was handed over for
    good."""
    w = spawn(busy=False)
    pinner = Pinner()
    adopted(pinner, w)
    pin(pinner, w.tid, frozenset({0}))
    cpuset.set_cpus("0-1")
    cpuset.add(w.tid)
    cpuset.set_cpus("1")  # CPU 0 taken away: the thread gets the whole cpuset
    assert pinner.drifted([w.tid]) == Drift([w.tid], [])
    with pytest.raises(InvalidMask):
        pin(pinner, w.tid, frozenset({0}))  # the learner draws the lost CPU again
    cpuset.set_cpus("0-1")
    if os.sched_getaffinity(w.tid) != {0}:
        pytest.skip("a kernel before 6.2 gives the whole cpuset back, not the mask last asked for")
    assert pinner.drifted([w.tid]) == Drift([], []), "our own mask, given back"
    assert pin(pinner, w.tid, frozenset({0})) is False
    pinner.restore_all()


def test_the_first_pin_writes_even_the_mask_the_thread_shows(spawn: Callable[..., Worker], cpuset: CpusetDir) -> None:
    """A thread that never set its mask has no request of its own in the kernel: a
    first pin skipped because the mask drawn was the one it showed left none either,
    and a grown cpuset then gave it the whole cpuset, taken for someone else's mask."""
    w = spawn(busy=False)
    cpuset.set_cpus("0")
    cpuset.add(w.tid)
    pinner = Pinner()
    adopted(pinner, w)
    assert pin(pinner, w.tid, frozenset({0})) is True, "written, though the thread shows {0}"
    assert pin(pinner, w.tid, frozenset({0})) is False
    cpuset.set_cpus("0-1")
    if os.sched_getaffinity(w.tid) != {0}:
        pytest.skip("a kernel before 6.2 gives the whole cpuset, not the mask last asked for")
    assert pinner.drifted([w.tid]) == Drift([], [])
    pinner.restore_all()


@pytest.mark.parametrize(("release", "keeps"), [
    ("6.18.44-fc-v1272", True), ("6.2.0", True), ("6.2-rc1", True), ("10.1", True),
    ("6.1.55-generic", False), ("5.15.0-91-generic", False), ("4.18.0-513.el8.x86_64", False),
    ("", True), ("6", True), ("unknown", True),
])
def test_the_kernel_release_says_whether_a_cpuset_change_keeps_our_mask(release: str, keeps: bool) -> None:
    """Linux 6.2 and later keep it; a release that cannot be read is taken for one."""
    assert affinity.keeps_asked_mask(release) is keeps


def test_the_default_kernel_keeps_the_asked_mask_as_its_release_says(monkeypatch) -> None:
    """LinuxAffinity's ``keeps_asked_mask`` is the running kernel's, read once; one
    given (as for a kernel before 6.2) is kept. The release is faked as one before 6.2
    too (uname, read once): on this host's 6.18 a default of True would pass alone."""
    assert LinuxAffinity().keeps_asked_mask is affinity.keeps_asked_mask(os.uname().release)
    assert LinuxAffinity(keeps_asked_mask=False).keeps_asked_mask is False
    old = os.uname_result(os.uname()[:2] + ("5.15.0-generic",) + os.uname()[3:])
    monkeypatch.setattr(affinity.os, "uname", lambda: old)
    affinity.running_kernel_keeps_asked_mask.cache_clear()
    try:
        assert LinuxAffinity().keeps_asked_mask is False
    finally:
        affinity.running_kernel_keeps_asked_mask.cache_clear()  # read this host's again


def whole_cpuset_after_a_pin(spawn: Callable[..., Worker], cpuset: CpusetDir,
                             keeps_asked_mask: bool) -> tuple[Pinner, int]:
    """A thread pinned to CPU 0 in a cpuset of CPUs 0-1 that now has the whole cpuset,
    as a kernel before 6.2 gives it at any update of the cpuset, by a Pinner on this
    host's kernel said to keep the asked mask or not (``keeps_asked_mask``). This
    host's kernel is later, so that mask is written by hand where the old kernel
    would write it."""
    w = spawn(busy=False)
    cpuset.set_cpus("0-1")
    cpuset.add(w.tid)
    pinner = Pinner(kernel=dataclasses.replace(LinuxAffinity(), keeps_asked_mask=keeps_asked_mask))
    adopted(pinner, w)
    pin(pinner, w.tid, frozenset({0}))
    cpuset.set_cpus("0-1")  # an update, even to the same CPUs
    os.sched_setaffinity(w.tid, {0, 1})
    return pinner, w.tid


def test_before_6_2_a_cpuset_change_that_gives_the_whole_cpuset_is_the_kernels(
        spawn: Callable[..., Worker], cpuset: CpusetDir) -> None:
    """The mask we asked for is still allowed, yet the old kernel gave the whole
    cpuset: that was taken for someone else's mask and the thread handed over for
    good. The old kernel is mocked (its ``keeps_asked_mask``, and the mask it writes)."""
    pinner, tid = whole_cpuset_after_a_pin(spawn, cpuset, keeps_asked_mask=False)
    assert pinner.drifted([tid]) == Drift([tid], []), "narrowed: to be placed again"
    assert pinner.records[tid].current == {0, 1}
    assert pin(pinner, tid, frozenset({0})) is True and os.sched_getaffinity(tid) == {0}
    pinner.restore_all()


def test_from_6_2_the_whole_cpuset_over_a_mask_it_keeps_is_someone_elses(
        spawn: Callable[..., Worker], cpuset: CpusetDir) -> None:
    """The kernel would have kept our CPU 0: the whole cpuset is a taskset over every
    CPU, and the thread is theirs."""
    pinner, tid = whole_cpuset_after_a_pin(spawn, cpuset, keeps_asked_mask=True)
    assert pinner.drifted([tid]) == Drift([], [tid])
    with pytest.raises(Overridden):
        pin(pinner, tid, frozenset({1}))  # a move checks the mask first
    assert os.sched_getaffinity(tid) == {0, 1}
    pinner.release(tid)


# -- CPU hotplug: sched_getaffinity gives a mask's online CPUs only. This host cannot
# unplug CPUs in a fast test (tests/reliability/test_faults.py does it for real, slowly),
# so the syscall's view of an unplugged CPU is stood in for where said.

@dataclass(frozen=True)
class Unplugged(LinuxAffinity):
    """This host's kernel but for sched_getaffinity, whose reads (of a thread some of
    whose CPUs are offline) are ``reads``'."""

    reads: Callable[[int], frozenset[int]] = get_affinity

    def get_affinity(self, tid: int) -> frozenset[int]:
        return self.reads(tid)


def test_the_default_kernel_is_the_syscalls_themselves() -> None:
    """The Pinner's default kernel adds no call to a pin or a drift read (the period's
    cost): its get_affinity and set_affinity are the module's functions. Its sysfs is
    the default's alone: a Pinner given a kernel and a sysfs is refused."""
    kernel = LinuxAffinity()
    assert kernel.get_affinity is get_affinity and kernel.set_affinity is set_affinity
    with pytest.raises(TypeError):
        Pinner(kernel=kernel, sysfs="/sys")


def test_a_mask_of_offline_cpus_alone_is_read_whole(spawn: Callable[..., Worker],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The syscall reads such a mask as empty (stood in for); no one can set an empty
    mask, so it is read from /proc instead, as set."""
    worker = spawn(busy=False)
    set_affinity(worker.tid, {1})
    monkeypatch.setattr(affinity.os, "sched_getaffinity", lambda tid: set())
    assert get_affinity(worker.tid) == {1}


def test_a_domain_unplugged_cpu_by_cpu_stays_ours() -> None:
    """Pinned to the domain {2, 3} (a 4-CPU host stood in for): CPU 3 goes offline and
    the thread reads {2}; then CPU 2 too, and it reads whole, {2, 3}, as we asked: the
    kernel's doing, not someone else's mask, whatever its cpuset allows now."""
    record = PinRecord(start_time=1, original=frozenset({0, 1, 2, 3}), current=frozenset({2}),
                       asked=frozenset({2, 3}))
    pinner = Pinner(allowed=lambda tid: frozenset({0, 1}), records={7: record},
                    kernel=Unplugged(reads=lambda tid: frozenset({2, 3})))
    assert pinner.drifted([7]) == Drift([], [])
    assert pinner.records[7].current == {2, 3}


def test_while_a_cpu_is_offline_the_original_is_the_mask_as_set(tmp_path: Path, fake_proc: FakeProc) -> None:
    """A kernel of 4 possible CPUs with 2 online (SMT off, spare CPU slots; a fake sysfs
    and /proc stand in for it): sched_getaffinity reads {0, 1} from a thread never
    pinned and from one pinned to exactly {0, 1}, and {1} from one pinned to {1, 3}.
    Their masks as set tell them apart and keep the offline CPUs: the first gets every
    possible CPU back at the end, without a walk of the cgroups."""
    fake_proc.process(100)
    status = fake_proc.root / "100" / "task" / "100" / "status"
    walked: list[int] = []

    def cpuset(tid: int) -> frozenset[int] | None:
        walked.append(tid)
        return None

    pinner = Pinner(allowed=cpuset, proc_root=str(fake_proc.root), sysfs=fake_cpus(tmp_path / "sys", "0-3", "0-1"))
    status.write_text("Name:\tapp\nCpus_allowed_list:\t0-3\n")
    assert pinner.original_of(100, frozenset({0, 1}), None) == {0, 1, 2, 3}
    assert walked == []
    status.write_text("Name:\tapp\nCpus_allowed_list:\t0-1\n")
    assert pinner.original_of(100, frozenset({0, 1}), None) == {0, 1}
    assert walked == [100]  # narrower than every CPU: its cpuset says whether it follows it
    status.write_text("Name:\tapp\nCpus_allowed_list:\t1,3\n")
    assert pinner.original_of(100, frozenset({1}), None) == {1, 3}
    status.unlink()
    assert pinner.original_of(100, frozenset({0, 1}), None) == {0, 1}  # gone meanwhile: adopt's identity check says so
    every_online = Pinner(allowed=cpuset, proc_root=str(fake_proc.root), sysfs=fake_cpus(tmp_path / "all", "0-3", "0-3"))
    status.write_text("Name:\tapp\nCpus_allowed_list:\t1,3\n")
    assert every_online.original_of(100, frozenset({1}), None) == {1}  # the read is the whole mask: /proc not read


def test_cpus_going_offline_and_back_change_no_one_elses_mask(fake_proc: FakeProc) -> None:
    """Where no cpuset tells (the syscall's view of an unplugged CPU 1 stood in for,
    /proc faked): a thread pinned to the domain {0, 1} reads {0} while CPU 1 is
    offline, and one adopted while it was offline reads it again when it is back;
    neither is someone else's mask, as /proc shows both as they were set. A mask
    someone sets to just what is online of ours is theirs."""
    fake_proc.process(100)
    fake_proc.thread(100, 101, "worker")

    def as_set(tid: int, cpus: str) -> None:
        (fake_proc.root / "100" / "task" / str(tid) / "status").write_text(f"Name:\tapp\nCpus_allowed_list:\t{cpus}\n")

    pinned = PinRecord(start_time=1, original=frozenset({0, 1, 2, 3}), current=frozenset({0, 1}),
                       asked=frozenset({0, 1}))
    adopted_offline = PinRecord(start_time=1, original=frozenset({0, 1, 2, 3}), current=frozenset({0, 2, 3}))
    reads = {100: frozenset({0}), 101: frozenset({0, 2, 3})}
    pinner = Pinner(allowed=unrestricted, proc_root=str(fake_proc.root), records={100: pinned, 101: adopted_offline},
                    kernel=Unplugged(proc_root=str(fake_proc.root), reads=lambda tid: reads[tid]))
    as_set(100, "0-1")
    as_set(101, "0-3")
    assert pinner.drifted([100, 101]) == Drift([], [])
    reads = {100: frozenset({0, 1}), 101: frozenset({0, 1, 2, 3})}  # CPU 1 is back
    assert pinner.drifted([100, 101]) == Drift([], [])
    reads = {100: frozenset({0}), 101: frozenset({0, 2, 3})}  # offline again, and someone sets 100 to {0}
    as_set(100, "0")
    assert pinner.drifted([100, 101]) == Drift([], [100])
