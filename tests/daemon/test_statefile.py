"""parlschedd/daemon/statefile.py on its own: what a save writes and a recovery reads
back, what becomes of a state file the daemon cannot use, the state dir's lock, the
threads born while no daemon ran, and the targets attached again.

Real files in the test's own state dir, real processes whose masks are set as a killed
daemon left them, and a real engine (schedstat counters, this host's Pinner); the
daemon's whole start and restart are tests/daemon/test_daemon.py's."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog.testing

from parlschedd.config import Config
from parlschedd.cpulist import format_cpulist
from parlschedd.daemon.engine import Engine
from parlschedd.daemon.statefile import StateDirUnusable, StateFile, _saved_trees, by_hand, reattach, still_running
from parlschedd.host import procfs
from parlschedd.host.affinity import Pinner
from parlschedd.host.base import CounterSource
from parlschedd.host.errors import ThreadGone
from parlschedd.host.perf import CounterSet
from parlschedd.topology import read_topology
from tests.conftest import NOBODY, needs_root, wait_for
from tests.reliability.helpers import exited_pid, masks, sleepy, tids_of

pytestmark = needs_root

ALL = frozenset(os.sched_getaffinity(0))
two_cpus = pytest.mark.skipif(len(ALL) < 2, reason="a pin must differ from the original mask")
PIN = frozenset({max(ALL)})  # a pin the last run left: one CPU alone


@pytest.fixture
def engine() -> Iterator[Engine]:
    """A real engine on this host's domains; after, every target detached, every
    record restored, every counter closed."""
    config = Config()
    counters = CounterSet(CounterSource.SCHEDSTAT)
    e = Engine(config, read_topology("/sys").domains(config.domains), counters, Pinner())
    try:
        yield e
    finally:
        e.detach_all()
        e.pinner.restore_all()
        counters.close_all()


@pytest.fixture
def proc() -> Iterator[subprocess.Popen]:
    """A process of three sleeping threads, killed after."""
    p = sleepy(3)
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def _record(tid: int, original: frozenset[int], current: frozenset[int]) -> dict:
    return {"start_time": procfs.thread_start_time(tid), "original": format_cpulist(original),
            "current": format_cpulist(current)}


def _write(sf: StateFile, threads: dict[int, dict] | None = None, **rest: object) -> dict:
    """A state file of version 1 at ``sf``'s path, as a daemon would have saved it,
    holding ``threads``' records and ``rest``; returns what it holds."""
    state = {"version": 1, "pinner": {"version": 1, "threads": {str(t): r for t, r in (threads or {}).items()}},
             **rest}
    sf.path.parent.mkdir(exist_ok=True)
    sf.path.write_text(json.dumps(state))
    return state


def _aside(sf: StateFile) -> Path:
    [aside] = sf.path.parent.glob("state.json.unusable-*")
    assert re.fullmatch(rf"state\.json\.unusable-\d{{8}}T\d{{6}}-{os.getpid()}", aside.name), aside.name
    return aside


def _events(logs: list[dict], event: str) -> list[dict]:
    return [e for e in logs if e["event"].startswith(event)]


def test_a_save_writes_the_engines_state_in_a_file_of_its_own(tmp_path, engine, proc) -> None:
    """What a save writes: the pinner's records, the targets given, the threads handed
    over and the processes left alone as sorted [id, start time] pairs, the masks this
    run pins to as CPU lists, and when (in start-time ticks) and by whom; in a file only its owner
    may read or write, put there whole (no temporary file left), and no longer dirty."""
    tid = tids_of(proc.pid)[1]
    engine.pinner.adopt(tid, procfs.thread_start_time(tid))
    engine.handed_over.update({9: 2, 3: 1})
    engine.left_alone.update({8: 5, 4: 6})
    sf = StateFile(tmp_path)
    sf.dirty = True
    before = procfs.start_time_now()
    sf.save(engine, [{"pid": 1}])
    saved = json.loads(sf.path.read_text())
    assert before <= saved.pop("saved_at") <= procfs.start_time_now()
    assert saved.pop("daemon") == [os.getpid(), procfs.process_start_time(os.getpid())]  # who wrote it
    assert saved == {"version": 1, "pinner": {"version": 1, "threads": {str(tid): _record(tid, ALL, ALL)}},
                     "targets": [{"pid": 1}], "handed_over": [[3, 1], [9, 2]], "left_alone": [[4, 6], [8, 5]],
                     "placements": sorted(format_cpulist(p) for p in engine.placements),
                     "processes": [], "known_before": [], "left_mains": [], "trees": []}  # of the targets: none here
    assert stat.S_IMODE(sf.path.stat().st_mode) == 0o600 and os.listdir(tmp_path) == ["state.json"]
    assert not sf.dirty


def test_a_save_names_the_processes_of_the_threads_recorded(tmp_path, engine, proc) -> None:
    """Each process with recorded threads, with its start time, those threads and when
    its threads were last known whole (the tick's check): a restart after a crash
    lists it even when they have all ended since."""
    engine.attach(proc.pid, time.monotonic())
    checked = procfs.start_time_now()
    engine.tick(time.monotonic())
    sf = StateFile(tmp_path)
    sf.save(engine)
    recorded = sorted(engine.pinner.records)
    assert recorded and set(recorded) <= set(tids_of(proc.pid))
    saved = json.loads(sf.path.read_text())
    assert saved["processes"] == [[proc.pid, procfs.process_start_time(proc.pid), recorded]]  # as a daemon before read it
    [[pid, known_before]] = saved["known_before"]
    assert pid == proc.pid and checked <= known_before <= procfs.start_time_now()


def test_a_save_notes_the_masks_of_the_main_threads_left_alone(tmp_path, engine, proc) -> None:
    """A main thread a thread filter leaves out: its mask as the listing noted it (an
    exec while no daemon runs is told by a change of it)."""
    os.sched_setaffinity(proc.pid, PIN)
    engine.attach(proc.pid, time.monotonic(), threads="^no-thread-has-this-name$")
    sf = StateFile(tmp_path)
    sf.save(engine)
    assert json.loads(sf.path.read_text())["left_mains"] == [[proc.pid, format_cpulist(PIN)]]


def test_a_save_names_the_processes_of_the_targets_with_descendants(tmp_path, engine, proc) -> None:
    """Every process of a target with descendants, the child it forked as its own:
    the children such processes fork while no daemon runs are given back, not those
    of a target without."""
    forker = subprocess.Popen([sys.executable, "-c", "import os, time; os.fork(); time.sleep(60)"],
                              start_new_session=True)
    try:
        [child] = wait_for(lambda: procfs.descendants(forker.pid))
        engine.attach(forker.pid, time.monotonic(), descendants=True)
        engine.attach(proc.pid, time.monotonic())
        engine.tick(time.monotonic())
        sf = StateFile(tmp_path)
        sf.save(engine)
        assert json.loads(sf.path.read_text())["trees"] == [[forker.pid, None], [child, None]]  # null: root's target
    finally:
        os.killpg(forker.pid, signal.SIGKILL)
        forker.wait()


@pytest.mark.parametrize("entries", [[[200, None], [200, NOBODY]], [[200, NOBODY], [200, None]]])
def test_a_process_in_roots_tree_and_a_users_is_roots_whole(entries) -> None:
    """A process in two targets' trees (a thread of it in each): root's gives back all
    its children, and it was the last entry read that counted (review)."""
    assert _saved_trees({"trees": entries}) == {200: None}
    assert _saved_trees({"trees": [[200, NOBODY], [7, True], ["8", None], [9]]}) == {200: NOBODY}  # the bad skipped


def test_a_state_dir_removed_under_the_daemon_is_made_again_by_the_next_save(tmp_path, engine) -> None:
    sf = StateFile(tmp_path / "state")
    sf.save(engine)
    os.unlink(sf.path)
    os.rmdir(sf.path.parent)
    sf.dirty = True
    sf.save(engine)
    assert json.loads(sf.path.read_text())["targets"] == [] and not sf.dirty


def test_a_save_that_cannot_write_says_so_and_stays_dirty(tmp_path, engine) -> None:
    """A directory where state.json goes, which even root cannot replace: the save
    logs the error, raises nothing, leaves no temporary file, and stays dirty, so the
    next period writes again."""
    sf = StateFile(tmp_path)
    sf.path.mkdir()
    sf.dirty = True
    with structlog.testing.capture_logs() as logs:
        sf.save(engine)
    [said] = _events(logs, "state file not written")
    assert said["path"] == str(sf.path) and sf.dirty and os.listdir(tmp_path) == ["state.json"]
    assert "Is a directory" in sf.error
    with structlog.testing.capture_logs() as logs:  # each period tries again: said once, not every time
        sf.save(engine)
    assert _events(logs, "state file not written") == [] and sf.dirty
    sf.path.rmdir()
    with structlog.testing.capture_logs() as logs:
        sf.save(engine)
    assert _events(logs, "state file written again") and sf.error is None and not sf.dirty


def test_a_stop_whose_save_fails_removes_the_older_file_and_writes_again_in_the_room_freed(tmp_path, engine) -> None:
    """A full disk (a real 1 MiB tmpfs): the older file, which named a target since
    detached, is removed, which frees the room the new one takes."""
    from tests.daemon.test_daemon import fill, small_tmpfs

    with small_tmpfs(tmp_path / "disk") as disk:
        sf = StateFile(disk)
        sf.save(engine, [{"pid": 1234, "observe": False, "threads": None, "descendants": False}] * 200)
        older = sf.path.stat().st_size
        filler = fill(disk)
        try:
            with structlog.testing.capture_logs() as logs:
                sf.save_at_stop(engine, [])
            assert sf.error is None and json.loads(sf.path.read_text())["targets"] == []
            assert older > sf.path.stat().st_size and _events(logs, "state file not written")
        finally:
            filler.unlink()


def test_a_stop_on_a_full_disk_with_threads_left_pinned_keeps_the_older_file(tmp_path, engine, proc) -> None:
    """With restore_on_exit false the threads stay pinned and the older file holds their
    originals: it is not removed to make room (no test saw it removed; its too small a
    file freed too little room, and the originals were lost for good)."""
    from tests.daemon.test_daemon import fill, small_tmpfs

    tid = tids_of(proc.pid)[1]
    engine.pinner.adopt(tid, procfs.thread_start_time(tid))  # a record: what restore_on_exit false keeps
    with small_tmpfs(tmp_path / "disk") as disk:
        sf = StateFile(disk)
        sf.save(engine, [])
        filler = fill(disk)
        try:
            sf.save_at_stop(engine, [{"pid": 1234, "observe": False, "threads": None, "descendants": False}] * 200)
            assert sf.error is not None and str(tid) in json.loads(sf.path.read_text())["pinner"]["threads"]
        finally:
            filler.unlink()


def test_a_saved_process_whose_pid_is_another_process_now_is_left_alone(tmp_path, engine, proc) -> None:
    """After a crash a saved pid may name another process (its start time differs): its
    threads are not the last run's, and none is given the dead process's original as
    one born while no daemon ran (no test saw the start time unchecked)."""
    dead = 4194000  # the recorded thread of the process that had the pid: gone
    assert not os.path.exists(f"/proc/{dead}")
    start = procfs.process_start_time(proc.pid)
    sf = StateFile(tmp_path)
    _write(sf, {dead: {"start_time": 5, "original": format_cpulist(frozenset({min(ALL)})),
                       "current": format_cpulist(PIN)}},
           processes=[[proc.pid, start - 1, [dead]]], saved_at=1,
           placements=sorted({format_cpulist(ALL), *map(str, sorted(ALL))}))
    before = masks(tids_of(proc.pid))
    sf.recover(engine)
    assert masks(tids_of(proc.pid)) == before


def test_no_state_file_recovers_nothing(tmp_path, engine) -> None:
    sf = StateFile(tmp_path)
    assert sf.recover(engine) == [] and os.listdir(tmp_path) == []
    assert not engine.handed_over and not engine.left_alone


@two_cpus
def test_recovery_puts_the_last_runs_pins_back_and_keeps_what_it_kept(tmp_path, engine, proc) -> None:
    """A state file a killed daemon left: the thread it pinned gets its original mask
    back and is no one's record any more (the next attach adopts it afresh); the
    threads it handed over and the processes it left alone are kept while the same
    ones run (same start time), not those whose id names another since; the targets
    attached by hand come back as saved, an entry that is not an object dropped; the
    file stays."""
    pinned, theirs, other = tids_of(proc.pid)
    os.sched_setaffinity(pinned, PIN)
    start = procfs.thread_start_time
    target = {"pid": proc.pid, "start_time": procfs.process_start_time(proc.pid), "observe": True}
    sf = StateFile(tmp_path)
    _write(sf, {pinned: _record(pinned, ALL, PIN)}, targets=[target, "not an object", 7],
           handed_over=[[theirs, start(theirs)], [other, start(other) + 1]],
           left_alone=[[proc.pid, procfs.process_start_time(proc.pid)], [other, 1]])
    assert sf.recover(engine) == [target]
    assert os.sched_getaffinity(pinned) == ALL and not engine.pinner.records
    assert engine.handed_over == {theirs: start(theirs)}
    assert engine.left_alone == {proc.pid: procfs.process_start_time(proc.pid)}
    assert os.listdir(tmp_path) == ["state.json"]


@two_cpus
def test_a_thread_someone_else_set_while_no_daemon_ran_is_left_and_handed_over(tmp_path, engine, proc) -> None:
    """A mask of no shape the last run pinned to (its placements: the other CPU alone)
    was set by someone else after the crash: left as set, and handed over, so that
    the target attached again leaves it too."""
    theirs = tids_of(proc.pid)[1]
    mine = frozenset({min(ALL)})
    sf = StateFile(tmp_path)
    _write(sf, {theirs: _record(theirs, ALL, PIN)}, placements=[format_cpulist(PIN)])
    os.sched_setaffinity(theirs, mine)
    with structlog.testing.capture_logs() as logs:
        sf.recover(engine)
    assert os.sched_getaffinity(theirs) == mine
    assert engine.handed_over == {theirs: procfs.thread_start_time(theirs)}
    [said] = _events(logs, "recovered from previous run")
    assert (said["restored"], said["left_as_set_by_someone_else"]) == (0, 1)


@two_cpus
@pytest.mark.parametrize("placements", [[], [""], "0", [0]], ids=["empty", "an empty CPU list", "a string", "a number"])
def test_placements_it_cannot_read_have_every_saved_thread_restored(tmp_path, engine, proc, placements) -> None:
    """The last run's placements tell its pins from masks someone else set; a list
    that cannot be one (empty: no run pins to nothing) says nothing, and every saved
    thread is restored, as from a file written before placements were kept."""
    tid = tids_of(proc.pid)[1]
    sf = StateFile(tmp_path)
    _write(sf, {tid: _record(tid, ALL, PIN)}, placements=placements)
    os.sched_setaffinity(tid, PIN)
    with structlog.testing.capture_logs() as logs:
        sf.recover(engine)
    assert os.sched_getaffinity(tid) == ALL
    assert _events(logs, "state file: the last run's placements are unreadable, every saved thread is restored")


@two_cpus
@pytest.mark.parametrize("text", [
    '{"version": 1, "pinner": {"version": 1, "thr',
    "\x00\x00\x00\x00",
    "[1, 2]",
    '{"version": 2, "pinner": PINNER}',
    '{"version": 1, "pinner": PINNER, "placements": ["0"], "targets": []',
    '{"version": 1, "x": ' + "[" * 1500 + "]" * 1500 + "}",  # a RecursionError: every start ended in a traceback
], ids=["torn", "zeros", "not an object", "another version", "cut before its end", "nested without end"])
def test_a_file_it_cannot_use_is_set_aside_and_nothing_in_it_done(tmp_path, engine, proc, text) -> None:
    """A torn write, a file of zeros (a crash before the data reached the disk),
    another version's file, one cut at its end: none of it is believed, not even a
    record that reads well (its thread keeps the pin), and the file moves aside whole
    under a name of its own, for an administrator, where the next save cannot
    overwrite it."""
    tid = tids_of(proc.pid)[1]
    os.sched_setaffinity(tid, PIN)
    text = text.replace("PINNER", json.dumps({"version": 1, "threads": {str(tid): _record(tid, ALL, PIN)}}))
    sf = StateFile(tmp_path)
    sf.path.write_text(text)
    with structlog.testing.capture_logs() as logs:
        assert sf.recover(engine) == []
    aside = _aside(sf)
    assert aside.read_text() == text and not sf.path.exists()
    assert os.sched_getaffinity(tid) == PIN and not engine.pinner.records
    [said] = _events(logs, "state file unusable, ignoring it; kept for an administrator")
    assert said["path"] == str(aside) and said["why"]


@two_cpus
def test_a_file_others_may_write_is_read_not_at_all(tmp_path, engine, proc) -> None:
    """A state file group and others may write (whoever could write it chose which
    masks root puts back on which threads): not one record or target of it is used;
    it is set aside as it was, its mode kept, the reason named."""
    tid = tids_of(proc.pid)[1]
    os.sched_setaffinity(tid, PIN)
    sf = StateFile(tmp_path)
    state = _write(sf, {tid: _record(tid, ALL, PIN)},
                   targets=[{"pid": proc.pid, "start_time": procfs.process_start_time(proc.pid)}])
    sf.path.chmod(0o666)
    with structlog.testing.capture_logs() as logs:
        assert sf.recover(engine) == []
    assert os.sched_getaffinity(tid) == PIN
    aside = _aside(sf)
    assert json.loads(aside.read_text()) == state and stat.S_IMODE(aside.stat().st_mode) == 0o666
    [said] = _events(logs, "state file unusable")
    assert said["why"] == "mode 0666, writable by its group and others: not written by this daemon alone, not read"


@two_cpus
def test_a_file_with_unreadable_records_is_copied_aside_and_its_sound_records_used(tmp_path, engine, proc) -> None:
    """Each record is the only saved original of its thread: a file with some that
    cannot be read restores the others, and a copy of it all is kept (the file
    itself is overwritten by the next save)."""
    tid = tids_of(proc.pid)[1]
    os.sched_setaffinity(tid, PIN)
    sf = StateFile(tmp_path)
    state = _write(sf, {tid: _record(tid, ALL, PIN), 0: _record(tid, ALL, PIN)})
    state["pinner"]["threads"]["x"] = "0-1"
    sf.path.write_text(json.dumps(state))
    with structlog.testing.capture_logs() as logs:
        sf.recover(engine)
    assert os.sched_getaffinity(tid) == ALL
    assert json.loads(_aside(sf).read_text()) == state == json.loads(sf.path.read_text())
    assert len(_events(logs, "state file unusable, part of it ignored; kept for an administrator")) == 1


@pytest.mark.parametrize("targets", [{"pid": 1, "start_time": 2}, "1", None], ids=["an object", "a string", "null"])
def test_targets_that_are_not_a_list_attach_nothing_and_say_so(tmp_path, engine, targets) -> None:
    sf = StateFile(tmp_path)
    _write(sf, targets=targets)
    with structlog.testing.capture_logs() as logs:
        assert sf.recover(engine) == []
    assert len(_events(logs, "state file: the targets attached by hand are not a list")) == 1


BORN_CASES = ["saved before the birth", "one ends meanwhile", "saved after the birth", "handed over", "not saved when",
              "no placements said", "its mask is not a pin", "main thread's original first",
              "main thread unsaved, one original", "main thread unsaved, two originals",
              "main thread unsaved, born of it", "main thread handed over"]


@two_cpus
@pytest.mark.parametrize("case", BORN_CASES)
def test_threads_born_while_no_daemon_ran_get_their_processs_own_mask(tmp_path, engine, workload, monkeypatch,
                                                                      case) -> None:
    """A thread a pinned thread made while no daemon ran inherits its pin, and no
    record names it: one born since the save, with a mask of the last run's shape, not
    handed over, gets its process's mask (its main thread's original, else the one
    original its restored threads share). One born before (the file knew of it), one
    someone set, one handed over keep theirs; so do all from a file that does not say
    when it was saved or what its run pinned to, and those of a process whose threads
    had no one original. So does one with the mask of a thread the last run did not
    manage (here the main thread, left out as by a thread filter), which may have made
    it: on one domain every CPU is a free thread's mask too, and such a thread got the
    pinned threads' shared original (a CPU alone) for good. One that ends in the middle
    of it costs only itself (it cost the whole process its give-back)."""
    w = workload(2)
    worker0, worker1 = w.tids
    original = {w.pid: ALL, worker0: ALL, worker1: ALL}
    if case == "main thread's original first":
        original[worker0] = original[worker1] = frozenset({min(ALL)})
    elif case.startswith("main thread unsaved") or case == "main thread handed over":
        del original[w.pid]
        if case.endswith("two originals"):
            original[worker1] = frozenset({min(ALL)})
        elif case.endswith("born of it"):  # their one original, which it got
            original[worker0] = original[worker1] = frozenset({min(ALL)})
    for tid in (w.pid, worker0, worker1):
        os.sched_setaffinity(tid, ALL if case == "main thread unsaved, born of it" else PIN)
    saved_at = procfs.start_time_now()
    time.sleep(0.02)  # two clock ticks: the start time of a thread born now is after it
    [born] = set(w.command("spawn")) - {worker0, worker1}
    assert os.sched_getaffinity(born) == os.sched_getaffinity(w.pid), "inherited from the main thread"
    if case.startswith("main thread unsaved"):  # never pinned: PIN above stood for a pinned worker making it
        os.sched_setaffinity(w.pid, ALL)
    state = {"placements": ["0", "1", format_cpulist(ALL)], "saved_at": saved_at}
    if case == "saved after the birth":
        state["saved_at"] = procfs.start_time_now() + 1
    elif case == "handed over":
        state["handed_over"] = [[born, procfs.thread_start_time(born)]]
    elif case == "main thread handed over":  # its mask, set by someone else, is a pin's: no sign of who made born
        state["handed_over"] = [[w.pid, procfs.thread_start_time(w.pid)]]
    elif case == "not saved when":
        del state["saved_at"]
    elif case == "no placements said":
        del state["placements"]
    elif case == "its mask is not a pin":
        state["placements"] = [format_cpulist(PIN)]
        os.sched_setaffinity(born, ALL - PIN)
    elif case == "one ends meanwhile":
        [ends] = set(w.command("spawn")) - {worker0, worker1, born}
        monkeypatch.setattr(Pinner, "pinned_by_last_run", gone_for(ends, Pinner.pinned_by_last_run))
    sf = StateFile(tmp_path)
    _write(sf, {t: _record(t, o, PIN) for t, o in original.items()}, **state)
    before = os.sched_getaffinity(born)
    with structlog.testing.capture_logs() as logs:
        sf.recover(engine)
    given = case in ("saved before the birth", "one ends meanwhile", "main thread's original first",
                     "main thread unsaved, one original", "main thread handed over")
    assert os.sched_getaffinity(born) == (ALL if given else before)
    if case == "one ends meanwhile":
        assert os.sched_getaffinity(ends) == PIN
    assert masks(original) == original
    assert _events(logs, "recovered from previous run")[0]["born_while_down"] == int(given)
    assert not engine.pinner.records, "given back, not kept as a record of this run"


@two_cpus
@pytest.mark.parametrize("processes_saved", [True, False])
def test_a_thread_born_while_down_of_pinned_threads_that_all_ended_is_given_back(tmp_path, engine, workload,
                                                                                 processes_saved) -> None:
    """Pinned threads that made a successor while no daemon ran, then ended: no thread
    of their process was restored, so it was not listed, and the successor was adopted
    by the next run with the pin as its original, pinned for good. The processes the
    state file names are listed too (a file written before it named them: not)."""
    w = workload(1)
    first = set(w.tids)
    w.command("spawn")
    ended = sorted(set(w.command("spawn")) - first)  # two workers, recorded, then ended
    records = {t: _record(t, ALL, PIN) for t in ended}
    w.command("stop")
    w.command("stop")
    saved_at = procfs.start_time_now()
    time.sleep(0.02)  # two clock ticks: the start time of a thread born now is after it
    os.sched_setaffinity(w.pid, PIN)  # the main thread stands for a pinned thread making it
    [born] = set(w.command("spawn")) - first
    os.sched_setaffinity(w.pid, ALL)
    assert os.sched_getaffinity(born) == PIN
    state = {"placements": ["0", "1", format_cpulist(ALL)], "saved_at": saved_at}
    if processes_saved:
        state["processes"] = [[w.pid, procfs.process_start_time(w.pid), ended]]
    sf = StateFile(tmp_path)
    _write(sf, records, **state)
    with structlog.testing.capture_logs() as logs:
        sf.recover(engine)
    assert os.sched_getaffinity(born) == (ALL if processes_saved else PIN)
    assert _events(logs, "recovered from previous run")[0]["born_while_down"] == int(processes_saved)


@two_cpus
def test_a_thread_born_after_the_last_listing_but_before_the_save_is_given_back_and_holds_back_none(
        tmp_path, engine, workload) -> None:
    """A pinned thread made one thread after its target's last listing and before the
    save (unrecorded: taken for one the last run left alone, its inherited pin made
    every thread born while down with that pin be left pinned), then another while no
    daemon ran. Both get the process's own mask: births count from when the target's
    threads were last known whole (review: 5 of 10 SIGKILLs of a daemon whose target
    made 600 threads a second left up to 232 threads pinned)."""
    w = workload(1)
    [worker] = w.tids
    for tid in (w.pid, worker):
        os.sched_setaffinity(tid, PIN)  # as the last run pinned them
    known_before = procfs.start_time_now()
    time.sleep(0.02)  # two clock ticks
    [before_save] = set(w.command("spawn")) - {worker}
    time.sleep(0.02)
    saved_at = procfs.start_time_now()
    time.sleep(0.02)
    [while_down] = set(w.command("spawn")) - {worker, before_save}
    assert os.sched_getaffinity(before_save) == os.sched_getaffinity(while_down) == PIN
    state = {"placements": ["0", "1", format_cpulist(ALL)], "saved_at": saved_at,
             "processes": [[w.pid, procfs.process_start_time(w.pid), [w.pid, worker]]],
             "known_before": [[w.pid, known_before]]}
    sf = StateFile(tmp_path)
    _write(sf, {t: _record(t, ALL, PIN) for t in (w.pid, worker)}, **state)
    with structlog.testing.capture_logs() as logs:
        sf.recover(engine)
    assert os.sched_getaffinity(before_save) == os.sched_getaffinity(while_down) == ALL
    assert _events(logs, "recovered from previous run")[0]["born_while_down"] == 2


@two_cpus
def test_a_thread_born_while_down_with_a_recorded_threads_tid_is_given_back(tmp_path, engine, workload) -> None:
    """A recorded thread ended while no daemon ran and a thread a pinned one made took
    its tid: known by its tid alone, it was taken for the recorded thread (whose
    restore found it gone) and kept the inherited pin for good (review: a tid reused
    while down). The record's start time tells them apart."""
    w = workload(1)
    [worker] = w.tids
    os.sched_setaffinity(w.pid, PIN)  # as the last run pinned it
    saved_at = procfs.start_time_now()
    time.sleep(0.02)  # two clock ticks: the start time of a thread born now is after it
    [born] = set(w.command("spawn")) - {worker}
    assert os.sched_getaffinity(born) == PIN
    records = {t: _record(t, ALL, PIN) for t in (w.pid, worker, born)}
    records[born]["start_time"] = saved_at - 100  # the thread the tid named at the save, ended since
    state = {"placements": ["0", "1", format_cpulist(ALL)], "saved_at": saved_at,
             "processes": [[w.pid, procfs.process_start_time(w.pid), [w.pid, worker, born]]]}
    sf = StateFile(tmp_path)
    _write(sf, records, **state)
    with structlog.testing.capture_logs() as logs:
        sf.recover(engine)
    assert masks([w.pid, worker, born]) == {w.pid: ALL, worker: ALL, born: ALL}
    [told] = _events(logs, "recovered from previous run")
    assert (told["restored"], told["gone"], told["born_while_down"]) == (2, 1, 1)


@two_cpus
@pytest.mark.parametrize("case", ["left out", "handed over", "its other thread ran on", "its mask was not noted",
                                  "its mask is not a pin"])
def test_a_main_thread_left_alone_that_a_pinned_thread_became_by_an_exec_while_down_gets_its_original(
        tmp_path, engine, workload, case) -> None:
    """The last run left the main thread alone (a thread filter, or someone set its
    mask: ``left_mains`` notes the mask it had) and pinned a worker, which exec'd while
    no daemon ran: the main tid is that thread now, with its start time the old main
    thread's and our pin, and the new program's threads inherit it. Taken for the
    main thread the last run left alone, its pin held every one of them pinned for good
    (review of crash recovery). The exec is told by a main thread whose mask changed to
    a pin while every other thread of its process was born since the save (an exec
    ends the others); with one that ran on, the main thread's new mask is someone's."""
    w = workload(1)
    [worker] = w.tids  # stands for the worker that exec'd: recorded, gone by the restart
    if case != "its other thread ran on":
        w.command("stop")
    os.sched_setaffinity(w.pid, PIN)  # the main tid, now the thread that exec'd, with its pin
    saved_at = procfs.start_time_now()
    time.sleep(0.02)  # two clock ticks: the start time of a thread born now is after it
    [born] = set(w.command("spawn")) - {worker}  # a thread of the new program, with the pin
    assert os.sched_getaffinity(born) == PIN
    records = {worker: _record(worker, ALL, PIN) if case == "its other thread ran on"
               else {"start_time": 1, "original": format_cpulist(ALL), "current": format_cpulist(PIN)}}
    state = {"placements": ["0", "1", format_cpulist(ALL)], "saved_at": saved_at,
             "processes": [[w.pid, procfs.process_start_time(w.pid), [worker]]],
             "left_mains": [[w.pid, format_cpulist(ALL)]]}
    if case == "handed over":
        state["handed_over"] = [[w.pid, procfs.thread_start_time(w.pid)]]
    elif case == "its mask was not noted":
        del state["left_mains"]
    elif case == "its mask is not a pin":
        state["placements"] = [format_cpulist(ALL)]
    sf = StateFile(tmp_path)
    _write(sf, records, **state)
    sf.recover(engine)
    exec_told = case in ("left out", "handed over")
    assert masks([w.pid, born]) == ({w.pid: ALL, born: ALL} if exec_told else {w.pid: PIN, born: PIN})
    assert (w.pid in engine.handed_over) == (case == "handed over" and not exec_told)


def gone_for(tid: int, pinned_by_last_run):
    """Pinner.pinned_by_last_run as if ``tid`` ended before its cpuset was read."""
    def pinned(self: Pinner, asked: int, mask: frozenset[int]) -> bool:
        if asked == tid:
            raise ThreadGone(f"read cgroup: no such process {tid}")
        return pinned_by_last_run(self, asked, mask)
    return pinned


FORKS = """
import os, sys, threading, time
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()  # a worker, for a last run to pin
def fork(then):
    child = os.fork()
    if child == 0:
        then()
        time.sleep(60)
        os._exit(0)
    return child
def say(who, pid):  # the child and its parent both write: one write(2) a line, tagged, as they may come in either order
    os.write(1, f"{who} {pid}\\n".encode())
def grandchild():  # with a uid as argument: the grandchild drops to it
    say("grandchild", fork(lambda: len(sys.argv) > 1 and os.setresuid(*[int(sys.argv[1])] * 3)))
for line in sys.stdin:  # each line: the main thread forks a child, and it a grandchild
    say("child", fork(grandchild))
"""


@two_cpus
@pytest.mark.parametrize("case", ["forked since", "the tree's not said", "forked before the save",
                                  "forked by a thread left alone", "another user's tree", "the child ends meanwhile"])
def test_child_processes_forked_while_down_get_the_processs_own_mask(tmp_path, engine, monkeypatch, case) -> None:
    """A process of a target with descendants (``trees``): the child a pinned thread
    forked since the save, and the grandchild it forked, inherit the pin and get the
    process's own mask (its main thread's original). Left as they are: those of a file
    that does not name the process as one with descendants (a daemon without
    descendants, or one before ``trees``), those forked before the save (the last run
    knew of them), those forked by a thread the last run left alone (here the main
    thread, pinned by its owner; the last run pinned the worker), whose mask they have,
    and, in a user's target, those another user owns (here the child, root's), as the
    running daemon leaves them (a setuid program's), but not the user's own below
    them (here the grandchild, dropped to the user). A child that ends in the middle of it
    costs only itself: a mask not a pin's is judged by the thread's cpuset, which read
    of a thread gone raised out of the daemon's start (review; here the read is made to
    fail for the child alone)."""
    drop = [str(NOBODY)] if case == "another user's tree" else []
    forks = subprocess.Popen([sys.executable, "-c", FORKS, *drop], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        def fork() -> list[int]:
            forks.stdin.write("fork\n")
            forks.stdin.flush()  # print's line came in two writes, and the child's line between them (1 run in 3)
            said = dict(forks.stdout.readline().split() for _ in range(2))
            return [int(said["child"]), int(said["grandchild"])]

        [worker] = wait_for(lambda: [t for t in tids_of(forks.pid) if t != forks.pid])
        os.sched_setaffinity(forks.pid, PIN)  # the last run's pin, or its owner's
        os.sched_setaffinity(worker, PIN)
        if case == "forked before the save":
            children = fork()
            time.sleep(0.02)  # a tick of its own: one born in the save's tick counts as born since
        saved_at = procfs.start_time_now()
        time.sleep(0.02)  # two clock ticks: the start time of a process forked now is after the save
        if case != "forked before the save":
            children = fork()
        if drop:  # the grandchild dropped to the user (it printed its pid at its fork)
            wait_for(lambda: procfs.process_uids(children[1]).owner == NOBODY)
        assert masks(children) == {c: PIN for c in children}
        recorded = [worker] if case == "forked by a thread left alone" else [forks.pid, worker]
        state = {"placements": ["0", "1", format_cpulist(ALL)], "saved_at": saved_at,
                 "processes": [[forks.pid, procfs.process_start_time(forks.pid), recorded]]}
        if case != "the tree's not said":
            state["trees"] = [[forks.pid, NOBODY if case == "another user's tree" else None]]
        if case == "the child ends meanwhile":
            monkeypatch.setattr(Pinner, "pinned_by_last_run", gone_for(children[0], Pinner.pinned_by_last_run))
        sf = StateFile(tmp_path)
        _write(sf, {t: _record(t, ALL, PIN) for t in recorded}, **state)
        with structlog.testing.capture_logs() as logs:
            sf.recover(engine)
        given = {c for c in children if case == "forked since" or case == "the child ends meanwhile" and c != children[0]
                 or case == "another user's tree" and c == children[1]}
        assert masks(children) == {c: ALL if c in given else PIN for c in children}
        assert _events(logs, "recovered from previous run")[0]["born_while_down"] == len(given)
    finally:
        os.killpg(forks.pid, signal.SIGKILL)
        forks.wait()


def test_only_handed_over_threads_that_still_run_are_kept_after_a_restart() -> None:
    """The state file's [tid, start time] pairs: a thread that still runs with that
    start time is kept; one whose tid now names another thread, or that exited, is not;
    an entry that is not such a pair (JSON also reads Infinity and 1e400) is skipped
    without losing the ones after it, and a value that is not a list is no entry."""
    me = threading.get_native_id()
    start = procfs.thread_start_time(me)
    gone = subprocess.Popen(["true"])
    gone.wait()
    kept = lambda saved: still_running(saved, procfs.thread_start_time, "tid", procfs.PROC_ROOT)  # noqa: E731
    assert kept({"1": 2}) == {} and kept(None) == {}
    saved = json.loads('[[1, 2, 3], [Infinity, 1], [1e400, 1], ["1", 1], [true, 1], null, [-1, 0], [1, -5], '
                       '[%d, 0], [%d, %d]]' % (gone.pid, me, start))  # [1, -5]: a start time no thread has
    assert kept(saved) == {me: start}


def test_by_hand_keeps_the_targets_a_client_attached_not_the_rules(engine, proc, kill_after) -> None:
    ruled = kill_after(sleepy(1))
    engine.attach(proc.pid, time.monotonic(), observe=True, threads="^python")
    engine.attach(ruled.pid, time.monotonic(), observe=True, rule=0)
    assert by_hand(engine) == [{"pid": proc.pid, "start_time": procfs.process_start_time(proc.pid), "observe": True,
                                "threads": "^python", "descendants": False, "uid": os.getuid(), "caller": None}]


def test_reattach_attaches_a_saved_target_as_it_was(engine, proc) -> None:
    """What ``by_hand`` saved is attached again as the client attached it: its mode,
    thread filter and descendants."""
    engine.attach(proc.pid, time.monotonic(), observe=True, threads="^python", descendants=True)
    [saved] = by_hand(engine)
    engine.detach(proc.pid)
    reattach(engine, json.loads(json.dumps(saved)), time.monotonic(), procfs.PROC_ROOT)
    t = engine.targets[proc.pid]
    assert (t.observe, t.thread_filter.pattern, t.descendants, t.rule, t.caller) == (True, "^python", True, None, None)


@needs_root
def test_a_users_target_is_attached_again_as_that_users(engine, kill_after) -> None:
    """A target a user attached comes back after a restart as that user's: the state
    keeps its caller and reattach attaches it for them, so it counts among that user's
    targets and that user may detach it again (as root's, the user could not)."""
    proc = kill_after(sleepy(2, user=NOBODY))
    engine.attach(proc.pid, time.monotonic(), uid=NOBODY)
    [saved] = by_hand(engine)
    assert (saved["uid"], saved["caller"]) == (NOBODY, NOBODY)
    engine.detach(proc.pid)
    reattach(engine, json.loads(json.dumps(saved)), time.monotonic(), procfs.PROC_ROOT)
    assert engine.targets[proc.pid].caller == NOBODY
    engine.detach(proc.pid, uid=NOBODY)  # refused (not_attached) were it root's
    assert proc.pid not in engine.targets


@pytest.mark.parametrize("case", ["exited", "pid now another's", "no start time", "pid not a number",
                                  "a kernel thread", "threads not a regex"])
def test_a_saved_target_not_attached_again_is_said_with_why(engine, proc, case) -> None:
    """Each saved target not attached again is logged by its pid and start time as
    fields (a damaged value as its repr), and why: it exited (its pid free, or now
    another process's), its entry is damaged, or the engine refuses it."""
    start = procfs.process_start_time(proc.pid)
    saved, reason = {
        "exited": ({"pid": exited_pid(), "start_time": start}, "it has exited"),
        "pid now another's": ({"pid": proc.pid, "start_time": start - 1}, "it has exited"),
        "no start time": ({"pid": proc.pid}, "'start_time'"),
        "pid not a number": ({"pid": "x", "start_time": start}, "invalid literal for int() with base 10: 'x'"),
        "a kernel thread": ({"pid": 2, "start_time": procfs.process_start_time(2)}, "is a kernel thread"),
        # an AttributeError's traceback, as for a bug
        "threads not a regex": ({"pid": proc.pid, "start_time": start, "threads": 5}, "a damaged entry: threads 5"),
    }[case]
    with structlog.testing.capture_logs() as logs:
        reattach(engine, saved, time.monotonic(), procfs.PROC_ROOT)
    assert engine.targets == {}
    [said] = _events(logs, "previous target not re-attached")
    shown = {k: v if isinstance(v, int) else repr(v) for k, v in (("pid", saved["pid"]), ("start_time", saved.get("start_time")))}
    assert {k: said[k] for k in shown} == shown and reason in said["reason"]


def test_a_bug_in_an_attach_again_costs_that_target_only(engine, proc, monkeypatch) -> None:
    """Fault injection (no real attach fails on a bug on demand): the exception is
    logged with its traceback, not raised into the daemon's start."""
    def bug(*args: object, **kwargs: object) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(engine, "attach", bug)
    saved = {"pid": proc.pid, "start_time": procfs.process_start_time(proc.pid)}
    with structlog.testing.capture_logs() as logs:
        reattach(engine, saved, time.monotonic(), procfs.PROC_ROOT)
    [said] = _events(logs, "previous target not re-attached")
    assert said["log_level"] == "error" and said["exc_info"] is True and said["pid"] == proc.pid


def test_the_lock_keeps_a_second_daemon_out_until_given_up(tmp_path) -> None:
    """The lock makes the state dir itself, its lock file naming this pid; another
    daemon on that dir is refused, naming the holder, until the lock is given up."""
    first, second = StateFile(tmp_path / "state"), StateFile(tmp_path / "state")
    first.lock()
    assert (tmp_path / "state" / "lock").read_text() == f"{os.getpid()}\n"
    with pytest.raises(StateDirUnusable, match=rf"^state dir {tmp_path / 'state'} is in use by pid {os.getpid()} "):
        second.lock()
    first.unlock()
    second.lock()
    second.unlock()


def test_unlock_given_twice_closes_only_its_own_fd(tmp_path) -> None:
    """Once given up, the lock's fd number is free for the next file opened; a second
    unlock (a shutdown path run twice) leaves that file open."""
    sf = StateFile(tmp_path / "state")
    sf.lock()
    sf.unlock()
    other = os.open(tmp_path / "other", os.O_CREAT | os.O_RDWR)  # takes the lowest free fd: the lock's
    try:
        sf.unlock()
        os.fstat(other)  # EBADF had the second unlock closed it
    finally:
        os.close(other)


@pytest.mark.parametrize("case", ["parent missing", "a file", "others may write it"])
def test_a_state_dir_it_cannot_use_is_refused_in_one_line(tmp_path, case) -> None:
    where = {"parent missing": tmp_path / "no" / "state", "a file": tmp_path / "state",
             "others may write it": tmp_path / "state"}[case]
    said = {"parent missing": f"cannot use state dir {where}: no directory {where.parent} ",
            "a file": f"cannot use state dir {where}: it or a parent is not a directory ",
            "others may write it": f"state dir {where}: mode 0777, writable by its group and others: "}[case]
    if case == "a file":
        where.write_text("")
    elif case == "others may write it":
        where.mkdir()
        where.chmod(0o777)
    made = sorted(tmp_path.rglob("*"))
    with pytest.raises(StateDirUnusable) as refused:
        StateFile(where).lock()
    assert str(refused.value).startswith(said) and "\n" not in str(refused.value)
    assert sorted(tmp_path.rglob("*")) == made, "no lock file made"


@pytest.mark.parametrize("lock", ["a symbolic link", "a FIFO"])
def test_a_lock_file_that_is_no_file_of_ours_is_named(tmp_path, lock) -> None:
    """'cannot use state dir D: Too many levels of symbolic links' (or 'Invalid
    argument' for a FIFO) named no file, and said not what to do."""
    where = tmp_path / "state"
    where.mkdir(mode=0o755)
    if lock == "a FIFO":
        os.mkfifo(where / "lock", 0o600)
    else:
        (where / "lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StateDirUnusable) as refused:
        StateFile(where).lock()
    what = "a symbolic link, not followed" if lock == "a symbolic link" else "not a regular file"
    assert str(refused.value).startswith(f"cannot use state dir {where}: its lock file {where / 'lock'} is {what}: "
                                         "remove it"), str(refused.value)
    assert not (tmp_path / "elsewhere").exists()


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_lock_file_removed_under_the_daemon_is_taken_again(tmp_path) -> None:
    """While its lock file is the one locked, ``keep_lock`` does nothing; removed (an
    rm of the run dir), it is made and locked again, the old fd given up, another
    daemon kept out again, and the state file is due to be written again."""
    sf = StateFile(tmp_path / "state")
    sf.lock()
    fds = _fds()
    sf.keep_lock()
    assert not sf.dirty and _fds() == fds
    os.unlink(tmp_path / "state" / "lock")
    sf.keep_lock()
    assert sf.dirty and _fds() == fds
    assert (tmp_path / "state" / "lock").read_text() == f"{os.getpid()}\n"
    with pytest.raises(StateDirUnusable, match="is in use by pid"):
        StateFile(tmp_path / "state").lock()
    sf.unlock()


def test_a_lock_another_daemon_took_meanwhile_is_said_once(tmp_path) -> None:
    """Lock file removed, and another daemon started on the dir before the rescan:
    said once, not at every rescan; once the other is gone the lock is taken again."""
    sf, other = StateFile(tmp_path), StateFile(tmp_path)
    sf.lock()
    os.unlink(tmp_path / "lock")
    other.lock()
    with structlog.testing.capture_logs() as logs:
        sf.keep_lock()
        sf.keep_lock()
        other.unlock()
        os.unlink(tmp_path / "lock")
        sf.keep_lock()
    assert len(_events(logs, "the state dir's lock was removed and cannot be taken again")) == 1
    assert len(_events(logs, "state dir removed under the daemon, its lock taken")) == 1
    with pytest.raises(StateDirUnusable):
        StateFile(tmp_path).lock()
    sf.unlock()


def test_a_daemon_whose_lock_another_took_does_not_write_its_state_file(tmp_path, engine) -> None:
    """Lock file removed, and another daemon started on the dir before this one looked
    again: this one went on writing the state file every period, over the other's
    saved masks (a review: a process of the other's left pinned after its restart).
    A save first looks whether the lock is still ours: not written, kept dirty, and
    the reason is the state file's error (status shows it; no new thread is pinned
    before its original is on disk); once the lock is ours again, written."""
    sf, other = StateFile(tmp_path), StateFile(tmp_path)
    sf.lock()
    sf.save(engine)
    os.unlink(tmp_path / "lock")
    other.lock()
    (tmp_path / "state.json").write_text("the other daemon's\n")
    sf.dirty = True
    sf.save(engine)
    assert (tmp_path / "state.json").read_text() == "the other daemon's\n" and sf.dirty
    assert sf.error.startswith("the state dir's lock was removed and cannot be taken again (state dir ")
    assert "this daemon no longer writes its state there" in sf.error
    sf.save_at_stop(engine, [])  # a clean stop: its threads restored, its file another's: not removed (a review)
    assert (tmp_path / "state.json").read_text() == "the other daemon's\n"
    other.unlock()
    os.unlink(tmp_path / "lock")
    sf.save(engine)
    assert json.loads((tmp_path / "state.json").read_text())["targets"] == [] and not sf.dirty and sf.error is None
    sf.unlock()


@two_cpus
def test_the_state_file_a_daemon_left_after_taking_the_lock_is_restored_not_written_over(tmp_path, engine,
                                                                                          proc) -> None:
    """Lock file removed, another daemon took the dir, pinned threads and was killed:
    once this daemon had the lock again, its next save wrote over the other's file, and
    the threads that daemon pinned stayed pinned for good (a review). The threads this
    daemon does not manage get the originals the file holds; one it manages keeps its
    own record (the other's original of it may be this daemon's pin); the file is kept
    aside, and this daemon's state written."""
    theirs, shared, _ = tids_of(proc.pid)
    sf = StateFile(tmp_path)
    sf.lock()
    engine.pinner.adopt(shared, procfs.thread_start_time(shared))
    sf.save(engine)
    os.unlink(tmp_path / "lock")
    other = StateFile(tmp_path)
    other.lock()
    for tid in (theirs, shared):
        os.sched_setaffinity(tid, PIN)
    left = _write(other, {theirs: _record(theirs, ALL, PIN), shared: _record(shared, PIN, PIN)},
                  placements=[format_cpulist(PIN)], daemon=[exited_pid(), 1])
    other.unlock()  # killed: its lock given up, its lock file left
    with structlog.testing.capture_logs() as logs:
        sf.save(engine)
    assert os.sched_getaffinity(theirs) == ALL and os.sched_getaffinity(shared) == PIN
    assert json.loads(_aside(sf).read_text()) == left
    saved = json.loads(sf.path.read_text())
    assert saved["daemon"][0] == os.getpid() and list(saved["pinner"]["threads"]) == [str(shared)]
    [said] = _events(logs, "the state file another daemon left: its threads restored")
    assert (said["pid"], said["restored"]) == (left["daemon"][0], 1)
    sf.save(engine)
    assert len(list(tmp_path.glob("state.json.unusable-*"))) == 1, "set aside once"
    sf.unlock()


@two_cpus
def test_the_state_file_a_daemon_left_leaves_a_thread_handed_over_as_its_owner_set_it(tmp_path, engine,
                                                                                     proc) -> None:
    """A thread this daemon pinned, the other daemon adopted (its saved original: this
    one's pin), and a user set since, so that this daemon handed it over: the other's
    record put this daemon's old pin over the user's mask (a review)."""
    shared = tids_of(proc.pid)[1]
    sf = StateFile(tmp_path)
    sf.lock()
    engine.pinner.adopt(shared, procfs.thread_start_time(shared))
    engine.pinner.pin_many([(shared, PIN)])
    sf.save(engine)
    os.unlink(tmp_path / "lock")
    other = StateFile(tmp_path)
    other.lock()
    _write(other, {shared: _record(shared, PIN, PIN)}, placements=sorted(map(format_cpulist, engine.placements)),
           daemon=[exited_pid(), 1])
    other.unlock()
    users = frozenset({min(ALL)})  # a CPU alone: the shape of a pin of the other's
    os.sched_setaffinity(shared, users)
    engine.pinner.release(shared)  # as the engine hands a thread over
    engine.handed_over[shared] = procfs.thread_start_time(shared)
    sf.save(engine)
    sf.unlock()
    assert os.sched_getaffinity(shared) == users


def test_a_start_on_a_state_dir_whose_writer_still_runs_is_refused(tmp_path, engine, kill_after) -> None:
    """Only the lock file removed (not the dir), and another daemon started on the dir:
    it took the lock, read the running daemon's state file, restored that daemon's
    pinned threads and attached its targets (a review). The file says who wrote it; a
    lock while that process still runs (the same start time) is refused, naming it;
    once it has exited (a zombie too), or another process has its pid, the lock is taken."""
    writer = kill_after(sleepy(1))  # the running daemon that wrote the file, as far as the file tells
    sf = StateFile(tmp_path)
    sf.save(engine)
    saved = json.loads(sf.path.read_text())
    saved["daemon"] = [writer.pid, procfs.process_start_time(writer.pid)]
    sf.path.write_text(json.dumps(saved))
    with pytest.raises(StateDirUnusable, match=f"in use by parlschedd pid {writer.pid}, which wrote its state file and "
                                               "still runs, though its lock file was removed"):
        StateFile(tmp_path).lock()
    assert fcntl_free(tmp_path / "lock"), "the refused lock was given up"
    saved["daemon"] = [writer.pid, saved["daemon"][1] + 1]  # its pid, another process's now
    sf.path.write_text(json.dumps(saved))
    other = StateFile(tmp_path)
    other.lock()
    other.unlock()
    saved["daemon"][1] -= 1
    sf.path.write_text(json.dumps(saved))
    writer.kill()
    wait_for(lambda: procfs.process_stat(writer.pid).state == "Z")  # exited, not reaped: a crashed daemon's zombie
    other = StateFile(tmp_path)  # holds no lock: a restart (or a put-back) was refused until it was reaped (a review)
    other.lock()
    other.unlock()
    writer.wait()
    other = StateFile(tmp_path)
    other.lock()
    other.unlock()


def test_a_start_removes_the_temporary_files_of_saves_a_kill_cut_short(tmp_path, engine) -> None:
    """A SIGKILL amid a save leaves its temporary file (a whole state) beside the state
    file: nothing removed them, and they piled up in /run (a review). The start's lock
    removes them, and nothing else."""
    sf = StateFile(tmp_path)
    sf.save(engine)
    cut = [tmp_path / ".state.json.3sqcd3o1.tmp", tmp_path / ".state.json.jb1c9stt.tmp"]
    for path in cut:
        path.write_text(sf.path.read_text())
    (tmp_path / "notes.tmp").write_text("an administrator's\n")
    sf.lock()
    sf.unlock()
    assert sorted(os.listdir(tmp_path)) == ["lock", "notes.tmp", "state.json"]


def fcntl_free(path) -> bool:
    """Whether no process holds the flock of ``path``."""
    import fcntl

    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


@pytest.mark.parametrize("before", ["nothing", "the state dir", "the state dir and a lock file"])
def test_unmake_removes_only_what_the_lock_made(tmp_path, before) -> None:
    where = tmp_path / "state"
    if before != "nothing":
        where.mkdir()
    if before == "the state dir and a lock file":
        (where / "lock").write_text("4242\n")
    sf = StateFile(where)
    sf.lock()
    fds = _fds()
    sf.unmake()
    assert _fds() == fds - 1
    assert os.listdir(tmp_path) == ([] if before == "nothing" else ["state"])
    if before != "nothing":
        assert os.listdir(where) == ([] if before == "the state dir" else ["lock"])
    again = StateFile(where)
    again.lock()  # given up: another may take it
    again.unlock()


def test_unmake_leaves_a_lock_file_that_is_not_ours_any_more(tmp_path) -> None:
    """The lock file replaced since (another daemon's now): it stays, and so does the
    dir that holds it; said, not raised."""
    where = tmp_path / "state"
    sf = StateFile(where)
    sf.lock()
    os.unlink(where / "lock")
    (where / "lock").write_text("4242\n")
    with structlog.testing.capture_logs() as logs:
        sf.unmake()
    assert (where / "lock").read_text() == "4242\n"
    assert len(_events(logs, "a failed start left the state dir or its lock file behind")) == 1
