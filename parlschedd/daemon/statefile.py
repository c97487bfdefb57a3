"""The daemon's state file, ``state.json`` in the state dir: what it keeps (the original
masks of the threads pinned, the targets attached by hand, the threads handed over,
the masks this run pins to), its writing, and the recovery from it at the next start,
after a crash or a restart. The atomic file I/O and the state dir's lock are
:mod:`parlschedd.host.state`'s."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from parlschedd.cpulist import format_cpulist, parse_cpulist
from parlschedd.daemon import protocol
from parlschedd.daemon.engine import Engine, EngineError
from parlschedd.host import procfs
from parlschedd.host.affinity import Pinner
from parlschedd.host.base import PinRecord
from parlschedd.host.errors import HostError, ThreadGone
from parlschedd.host.state import StateDirBusy, StateNotOurs, lock_dir, lock_read_only_dir, read_state, write_state
from parlschedd.hostcheck import state_dir_problem
from parlschedd.kinds import is_integer

log = structlog.get_logger("parlschedd")
STATE_VERSION = 1


class StateDirUnusable(Exception):
    """The state dir cannot be used; the message is the one-line reason, and what to do."""


class StateFile:
    """``state.json`` in ``state_dir``. ``dirty``: what it should hold changed since
    it was last written (set by the daemon when the engine reports a change, cleared
    by a ``save`` that wrote it)."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.path = Path(state_dir) / "state.json"
        self.dirty = False
        self._lock: int | None = None  # the state dir's lock, held while we run
        self._lock_lost = False
        self._left_by: int | None = None  # another daemon that wrote the file while it held the lock (keep_lock)
        self._made: list[Path] = []  # the state dir and its lock file where the first lock made them (unmake)
        self.restores_failed = 0  # of the last recover: threads whose original mask could not be put back
        # why the last save did not write the file (a full disk, a read-only one); None: it did. status shows it:
        # what the file holds then is older than what the daemon did, and a start after a crash would act on it
        self.error: str | None = None
        # who writes the file (pid, start time): a start that finds it alive does not act on it (_other_writer)
        self._writer = [os.getpid(), procfs.process_start_time(os.getpid())]

    def lock(self) -> None:
        """Refuse to start without a state dir to write in, or one another daemon uses:
        the saved masks there are what a restart after SIGKILL restores. Its lock file,
        held until ``unlock``, proves both. StateDirUnusable when it cannot be used."""
        where = self.path.parent
        first, made = self._lock is None, []  # keep_lock takes it again while it holds the first
        try:
            try:
                where.mkdir(mode=0o755)  # itself (/run/parlsched), not a path of missing directories
                made.append(where)
            except FileExistsError:
                if not where.is_dir():
                    raise
            if problem := state_dir_problem(str(where), os.geteuid()):  # made by someone else since the start's check
                raise StateDirUnusable(problem)
            if not os.path.lexists(where / "lock"):
                made.append(where / "lock")
            lock = lock_dir(where)
            if (writer := self._other_writer()) is not None:
                os.close(lock)
                raise StateDirUnusable(f"state dir {where} is in use by parlschedd pid {writer}, which wrote its state "
                                       "file and still runs, though its lock file was removed: two daemons on one "
                                       "state dir would each restore the other's threads; stop that one, or choose "
                                       "another --state-dir")
            self._lock = lock
            if first:
                self._sweep(where)
        except StateDirBusy as exc:
            raise StateDirUnusable(f"{exc}: two daemons on one state dir would each restore the other's threads and "
                                   "overwrite its saved masks; stop that one, or choose another --state-dir") from None
        except FileNotFoundError:
            raise StateDirUnusable(f"cannot use state dir {where}: no directory {where.parent} (the state dir itself is "
                                   "made, not its parents; choose another --state-dir)") from None
        except OSError as exc:
            reason = "it or a parent is not a directory" if isinstance(exc, FileExistsError) else exc.strerror or str(exc)
            raise StateDirUnusable(f"cannot use state dir {where}: {reason} (the original masks of pinned threads "
                                   "are kept there; choose another --state-dir)") from None
        if first:
            self._made = made

    def _sweep(self, where: Path) -> None:
        """Remove the temporary files of saves a SIGKILL cut short (atomicfile's
        ``.state.json.*.tmp``, each a whole state): nothing removed them, and they piled
        up in /run (a review). Ours to remove once the lock is ours: no other daemon
        writes here."""
        for leftover in where.glob(f".{self.path.name}.*.tmp"):
            try:
                leftover.unlink()
            except OSError as exc:
                log.warning("a cut-short save's temporary file not removed", path=str(leftover), error=str(exc))

    def _writer_of_file(self, others_only: bool = False) -> tuple[int, int] | None:
        """Who wrote the state file: (pid, start time) from its ``daemon``, or None for a
        file that cannot be read (``recover`` says why), an older one without it, or,
        ``others_only``, one this daemon wrote."""
        try:
            pid, started = (read_state(self.path) or {}).get("daemon")
        except Exception:  # unreadable, no ``daemon`` (an older file), not a pair
            return None
        if not isinstance(pid, int) or (others_only and [pid, started] == self._writer):
            return None
        return pid, started

    def _other_writer(self) -> int | None:
        """The pid of another daemon that wrote the state file and still runs (its pid
        and start time in the file's ``daemon``), or None: one whose lock file was
        removed (an rm of the lock, not of the dir) holds no lock, and a start that
        took it restored that daemon's pinned threads from its file and attached its
        targets (a review). A file that cannot be read names no one: ``recover`` says why."""
        writer = self._writer_of_file()
        if writer is None or writer[0] == self._writer[0]:
            return None
        pid, started = writer
        try:
            st = procfs.process_stat(pid)
        except HostError:
            return None
        # a zombie (a crashed daemon its parent has not reaped: a hand-run one's shell) holds no lock
        return pid if st.start_time == started and st.state not in ("Z", "X") else None

    def lock_to_read(self) -> None:
        """The state dir's lock where its file system is read-only (``lock`` cannot
        take it: it opens its file to write), for a put-back, which only reads.
        StateDirUnusable when another daemon holds it."""
        try:
            self._lock = lock_read_only_dir(self.path.parent)
        except StateDirBusy as exc:
            raise StateDirUnusable(str(exc)) from None
        except OSError as exc:
            raise StateDirUnusable(f"cannot use state dir {self.path.parent}: {exc.strerror or exc}") from None

    def keep_lock(self) -> bool:
        """Take the state dir's lock again when its file was removed under the daemon
        (an ``rm -rf`` of the run dir): a lock on a removed file keeps no other daemon
        out, and one started now would restore and overwrite this one's threads. The
        state file is written again at the next save. Whether the lock is ours: another
        daemon that has taken the dir since is said once, and its file is not ours to
        write (``save``)."""
        if self._lock is None:
            return True
        where = self.path.parent
        try:
            ours, there = os.fstat(self._lock), os.stat(where / "lock")
            if (ours.st_dev, ours.st_ino) == (there.st_dev, there.st_ino):
                self._lock_lost = False
                return True
        except OSError:  # gone, or a path through a file now: taken again below, or said why not
            pass
        held = self._lock
        try:
            self.lock()  # sets self._lock only when it took the lock
        except StateDirUnusable as exc:
            if not self._lock_lost:
                log.error("the state dir's lock was removed and cannot be taken again; stop this daemon or the "
                          "other one: two on one state dir restore each other's threads", path=str(where), error=str(exc))
                self._lock_lost = True
            self.error = (f"the state dir's lock was removed and cannot be taken again ({exc}); this daemon no longer "
                          "writes its state there, nor pins a thread it has not pinned before")
            return False
        os.close(held)
        self.dirty, self._lock_lost = True, False
        self._left_by = writer[0] if (writer := self._writer_of_file(others_only=True)) else None
        log.warning("state dir removed under the daemon, its lock taken and its state written again", path=str(where))
        return True

    def unmake(self) -> None:
        """Undo the lock of a start that failed after it (another daemon on the socket,
        the metrics port in use): give the lock up and remove what that lock made, the
        lock file and the state dir, which a failed start left behind (as root, in /run).
        What was there before stays. The lock file is removed only while it is the one
        whose lock we hold (no other daemon's), before the lock is given up; the dir only
        when empty (rmdir): a file anyone put there since keeps it."""
        if self._lock is None:
            return
        where = self.path.parent
        try:
            if where / "lock" in self._made:
                ours, there = os.fstat(self._lock), os.lstat(where / "lock")
                if (ours.st_dev, ours.st_ino) == (there.st_dev, there.st_ino):
                    os.unlink(where / "lock")
            if where in self._made:
                os.rmdir(where)
        except OSError as exc:  # what cannot be removed stays: said, never the start's refusal
            log.warning("a failed start left the state dir or its lock file behind", path=str(where), error=str(exc))
        finally:
            os.close(self._lock)
            self._lock, self._made = None, []

    def unlock(self) -> None:
        """Give up the state dir's lock: once the file is final, at the daemon's exit."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None  # not a closed fd number that another file may take

    def save(self, engine: Engine, targets: list[dict] | None = None) -> None:
        """Write the pinner's records, the hand-attached targets (``targets``: the ones
        given, by default those of now), the threads handed over to someone else, the
        rule matches left alone, the masks this run pins to (by which the next run
        judges the records) and the processes of the threads recorded (``processes``)."""
        if not self.restore_left(engine):  # another daemon's file now: written only once the lock is ours again
            return
        state = {"version": STATE_VERSION, "pinner": engine.pinner.to_json(),
                 "processes": processes(engine), "known_before": known_before(engine),
                 "left_mains": left_mains(engine), "trees": trees(engine),
                 "targets": by_hand(engine) if targets is None else targets,
                 "handed_over": sorted([tid, start] for tid, start in engine.handed_over.items()),
                 "left_alone": sorted([pid, start] for pid, start in engine.left_alone.items()),
                 "placements": sorted(format_cpulist(p) for p in engine.placements),
                 "saved_at": procfs.start_time_now(), "daemon": self._writer}
        try:
            self.path.parent.mkdir(exist_ok=True, mode=0o755)  # removed under us (a tmpfiles clean-up): made again
            write_state(self.path, state)
        except OSError as exc:  # kept dirty: written again next period, said once (it was twice a period)
            if str(exc) != self.error:
                log.error("state file not written", path=str(self.path), error=str(exc),
                          retried="each period, said again if it changes")
            self.error = str(exc)
            return
        if self.error is not None:
            log.info("state file written again", path=str(self.path))
            self.error = None
        self.dirty = False

    def save_at_stop(self, engine: Engine, targets: list[dict]) -> None:
        """The last save, at a clean stop. Where it fails (a full disk) once every
        thread has its mask back, the older file is removed, and the save tried again
        in the room that frees: left, that file made the next start attach again a
        target detached since (its detach could not be written) and pin over the masks
        its program had set for itself. Where the second try fails too, the next start
        forgets what only the file kept: the targets attached by hand, the rule
        matches detached by hand, the threads handed over."""
        self.save(engine, targets)
        if self.error is None or engine.pinner.records:  # records: restore_on_exit false, whose originals it holds
            return
        if self._lock_lost:  # the file is another daemon's, which took the lock: its saved masks, not ours
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.error("older state file not removed: the next start acts on it", path=str(self.path), error=str(exc))
            return
        self.save(engine, targets)
        if self.error is not None:
            log.error("state file removed at stop, and not written again: the next start attaches none of the targets "
                      "attached by hand, and the config rules attach again the processes detached from them by hand",
                      path=str(self.path), error=self.error)

    def recover(self, engine: Engine) -> list[dict]:
        """After a crash: put every thread the last run pinned back on its original
        mask, read through the engine's Pinner (its host's cgroup, /proc and sysfs).
        After a crash or a clean stop: return the targets attached by hand, to attach
        again (``reattach``), and keep leaving alone the threads it handed over."""
        try:
            state = read_state(self.path)
        except StateNotOurs as exc:  # nothing in it is believed: set aside whole, none of it restored
            self._set_aside(str(exc))
            return []
        except (OSError, ValueError) as exc:
            self._set_aside(f"unreadable: {exc}")
            return []
        except RecursionError:  # JSON nested 1500 deep: every start ended in a traceback
            self._set_aside("unreadable: nested too deeply to be a state file")
            return []
        if state is None:
            return []
        try:
            _check_version(state)
            placements = _placements(state)
            old = engine.pinner.from_saved(state.get("pinner"), placements=placements)
        except ValueError as exc:
            self._set_aside(str(exc))
            return []
        if len(old.records) < len(state["pinner"]["threads"]):  # some records skipped: keep them all aside
            self._set_aside("thread records unreadable", copy=True)
        records = dict(old.records)  # restore_all forgets them
        report = old.restore_all()
        self.restores_failed = len(report.failed)
        saved = state.get("handed_over", [])  # so that attaching their target again leaves them as their owner set them
        engine.handed_over.update(still_running([*(saved if isinstance(saved, list) else ()),
                                                 *([t, records[t].start_time] for t in report.kept)],
                                                procfs.thread_start_time, "tid", engine.proc_root))
        born = _give_back_born_while_down(old, report.restored, LastRun.of(state, records, placements),
                                          engine.handed_over, engine.proc_root)
        if report.restored or report.gone or report.failed or report.kept or born:
            log.info("recovered from previous run", restored=len(report.restored), gone=len(report.gone),
                     failed=len(report.failed), left_as_set_by_someone_else=len(report.kept), born_while_down=born)
        # the rule matches detached by hand, which the rules do not attach again
        engine.left_alone.update(still_running(state.get("left_alone", []), procfs.process_start_time, "pid",
                                               engine.proc_root))
        targets = state.get("targets", [])
        if not isinstance(targets, list):
            log.error("state file: the targets attached by hand are not a list, none is attached again",
                      targets=protocol.clip(repr(targets)))
            return []
        return [t for t in targets if isinstance(t, dict)]

    def restore_left(self, engine: Engine) -> bool:
        """``keep_lock``, and then the threads of the file another daemon left, if it
        did (``_restore_the_others``): at each save, and at a stop before this daemon
        restores its own threads, while its records still tell which are its own.
        Whether the lock is ours."""
        if not self.keep_lock():
            return False
        if self._left_by is not None:
            self._restore_the_others(engine)
        return True

    def _restore_the_others(self, engine: Engine) -> None:
        """The file another daemon wrote while it held this dir's lock (taken while this
        one's lock file was removed) and before it stopped, found once the lock is ours
        again: the next save wrote over it, and the threads that daemon had pinned (a
        crash left them so) stayed pinned for good (a review). Those this daemon does
        not manage get their original masks back, as that daemon's restart would have
        given them; those it manages, or handed over to whoever set their masks, keep
        what this daemon knows of them (the other's original of such a thread may be
        this daemon's pin). The file is kept aside."""
        pid, self._left_by = self._left_by, None
        try:
            state = read_state(self.path) or {}
            _check_version(state)
            old = engine.pinner.from_saved(state.get("pinner"), placements=_placements(state))
        except Exception as exc:  # unreadable or not ours: only kept aside
            log.error("the state file another daemon left is unreadable, its threads not restored", pid=pid,
                      error=str(exc))
        else:
            for tid in set(old.records).intersection({*engine.pinner.records, *engine.handed_over}):
                old.release(tid)
            report = old.restore_all()
            log.warning("the state file another daemon left: its threads restored", pid=pid,
                        restored=len(report.restored), gone=len(report.gone), failed=len(report.failed),
                        left_as_set_by_someone_else=len(report.kept))
        self._set_aside(f"written by parlschedd pid {pid} while it held this state dir's lock")

    def _set_aside(self, why: str, copy: bool = False) -> None:
        """A state file this daemon cannot use (``copy``: not all of it) is kept under
        another name, one per occurrence, not overwritten by the next save: the
        original masks it may hold stay for an administrator to restore."""
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        aside = self.path.with_name(f"{self.path.name}.unusable-{stamp}-{os.getpid()}")
        try:
            if copy:
                shutil.copy2(self.path, aside, follow_symlinks=False)
            else:
                os.replace(self.path, aside)
        except OSError as exc:
            log.error("state file unusable, ignoring it; it will be overwritten", path=str(self.path), why=why,
                      error=str(exc))
            return
        what = "part of it ignored" if copy else "ignoring it"
        log.error(f"state file unusable, {what}; kept for an administrator", path=str(aside), why=why)


def processes(engine: Engine) -> list[list]:
    """Each process with threads the pinner holds, as [pid, start time, [those tids]]:
    the next run, after a crash, gives back the threads they made while no daemon ran
    even when every one of them has ended since (their successors carry their pins)."""
    by_process: dict[int, list[int]] = {}
    for target in engine.targets.values():
        for tid, th in target.threads.items():
            if tid in engine.pinner.records:
                by_process.setdefault(th.process or target.pid, []).append(tid)
    saved = []
    for pid, tids in sorted(by_process.items()):
        if (start := engine.start_time(pid)) is not None:
            saved.append([pid, start, sorted(tids)])
    return saved


def known_before(engine: Engine) -> list[list[int]]:
    """Each process of a target, as [pid, the target's ``known_before``]: after a
    crash, the threads it made since its target's last listing or count, which the
    file cannot name, are counted as born while no daemon ran. A key of its own: a
    daemon of before it reads ``processes`` as it wrote them."""
    return sorted([pid, target.known_before] for target in engine.targets.values() if target.known_before is not None
                  for pid in target.processes())


def left_mains(engine: Engine) -> list[list]:
    """The main threads left to themselves (a thread filter leaves them out, or someone
    else set their mask), as [pid, their mask when last noted]: after a crash, one
    found with one of our pins instead, every other thread of its process born since,
    is the pinned thread that exec'd while no daemon ran (the kernel gave it the main
    tid and start time), and gets that thread's original back."""
    return sorted([main, format_cpulist(mask)] for target in engine.targets.values()
                  for main, mask in target.ignored_masks.items())


def trees(engine: Engine) -> list[list]:
    """The processes of the targets with descendants, as [pid, the user whose target
    it is, null for root's]: after a crash, the threads of the child processes they
    forked while no daemon ran, born with one of the last run's pins, are given back
    the process's own mask, as the running daemon gives a new descendant's (of a
    user's target, only the children that user owns)."""
    callers = _root_first((pid, target.caller) for target in engine.targets.values() if target.descendants
                          for pid in target.processes())
    return sorted([pid, caller] for pid, caller in callers.items())


def _saved_trees(state: dict) -> dict[int, int | None]:
    """The state's ``trees`` as written (none from a file written before it)."""
    saved = state.get("trees")
    return _root_first((entry[0], entry[1]) for entry in (saved if isinstance(saved, list) else ())
                       if isinstance(entry, list) and len(entry) == 2 and is_integer(entry[0])
                       and (entry[1] is None or is_integer(entry[1])))


def _root_first(pairs: Iterable[tuple[int, int | None]]) -> dict[int, int | None]:
    """Each process's caller (None: root's) of (pid, caller) pairs: a process in root's
    tree and a user's is root's, whose children are all its own."""
    callers: dict[int, int | None] = {}
    for pid, caller in pairs:
        callers[pid] = None if pid in callers and callers[pid] is None else caller
    return callers


def _saved_left_mains(state: dict) -> dict[int, frozenset[int]]:
    """The state's ``left_mains`` as written ({} from a file written before it)."""
    found = {}
    for entry in state.get("left_mains") if isinstance(state.get("left_mains"), list) else ():
        if isinstance(entry, list) and len(entry) == 2 and is_integer(entry[0]) and isinstance(entry[1], str):
            try:
                found[entry[0]] = parse_cpulist(entry[1])
            except ValueError:
                continue
    return found


def _saved_processes(state: dict) -> list[tuple[int, int, list[int]]]:
    """The state's ``processes`` as written; what is not (a file written before it
    kept them, or damaged) is left out: its threads' processes are found from the
    threads restored alone."""
    saved = state.get("processes")
    if not isinstance(saved, list):
        return []
    return [(pid, start, tids) for pid, start, tids in (e for e in saved if isinstance(e, list) and len(e) == 3)
            if is_integer(pid) and is_integer(start) and isinstance(tids, list) and all(map(is_integer, tids))]


def _saved_known_before(state: dict) -> dict[int, int]:
    """The state's ``known_before`` as written ({} from a file written before it)."""
    saved = state.get("known_before")
    if not isinstance(saved, list):
        return {}
    return {pid: ticks for pid, ticks in (e for e in saved if isinstance(e, list) and len(e) == 2)
            if is_integer(pid) and is_integer(ticks)}


@dataclass(frozen=True)
class LastRun:
    """What a state file says of the run that wrote it, by which the threads born while
    no daemon ran are told: its thread ``records``, when it was written (``saved_at``,
    not an int in a file that does not say), the masks it pinned to (``placements``,
    None where the file does not say), the ``processes`` of its records (pid, start
    time, tids), when each process's threads were last known whole (``known_before``),
    the masks of the main threads it left to themselves (``left_mains``) and the
    processes of its targets with descendants (``trees``: pid -> the user whose
    target it is, None for root's)."""

    records: Mapping[int, PinRecord]
    saved_at: object
    placements: frozenset[frozenset[int]] | None
    processes: Sequence[tuple[int, int, list[int]]]
    known_before: Mapping[int, int]
    left_mains: Mapping[int, frozenset[int]]
    trees: Mapping[int, int | None]

    @classmethod
    def of(cls, state: dict, records: Mapping[int, PinRecord],
           placements: frozenset[frozenset[int]] | None) -> LastRun:
        return cls(records, state.get("saved_at"), placements, _saved_processes(state), _saved_known_before(state),
                   _saved_left_mains(state), _saved_trees(state))


Born = tuple[int, int, frozenset[int]]  # a thread born while no daemon ran: tid, start time, the mask it has


def _give_back_born_while_down(pinner: Pinner, restored: Sequence[int], last: LastRun, theirs: dict[int, int],
                               proc_root: str) -> int:
    """Threads created while no daemon ran by a thread the last run had pinned carry
    its pin, and the state file knows nothing of them; adopted with it, they would
    keep it for good. So each process of a thread just ``restored``, and each process
    of ``last.processes`` that still runs, whose recorded threads may all have ended,
    is listed, and its threads born since the state was saved (``last.saved_at``) with
    a mask the last run pinned to (``last.placements``) get the process's own mask
    back: its main thread's original (``last.records``), else the one original all its
    recorded threads share. Left as they are: one with the mask of a thread of its
    process the last run did not manage (born before the save and not recorded: left
    out by a thread filter, or someone else's), which may have made it (on one domain,
    a free thread's mask is every CPU, as an unmanaged thread's is; not one handed over
    to someone else, whose mask may be a pin's); those handed over to someone else
    (``theirs``: tid -> start time). Returns how many were given back: none from a file
    that does not say when it was saved or what it pinned to.

    A process ``last.known_before`` says when its threads were last known whole
    (``Target.known_before``) counts its births from then: one born after its target's
    last listing or count but before the save was not recorded, and with the save's
    time it counted as a thread the last run left alone, its inherited pin keeping every
    thread born while down with that pin from being given back (on 2 CPUs, all).

    A process of a target with descendants (``last.trees``) counts as its own the
    threads of the child processes forked since (and theirs): the running daemon gives
    a thread of a new descendant born with one of its pins the target's own mask.
    Without descendants a child is not the target's, and keeps what it was born with."""
    if not isinstance(last.saved_at, int) or last.placements is None:
        return 0
    given = 0
    recorded_in = _recorded_processes(restored, last, proc_root)
    for pid, recorded in recorded_in.items():
        base = _own_mask(pid, recorded, last.records)
        if base is None:
            continue  # no one mask is the process's own
        born_since = min(last.saved_at, last.known_before.get(pid, last.saved_at))
        born, unmanaged = _born_in(pinner, pid, born_since, last, theirs, proc_root)
        if pid in last.trees:
            born += _born_below(pinner, pid, born_since, last.trees[pid], recorded_in, proc_root)
        for tid, start, mask in born:
            if mask in unmanaged:
                continue
            try:
                pinner.give_back(tid, start, base)
            except (HostError, ValueError):
                continue  # gone, or refused: the re-attach adopts what is left
            given += 1
    return given


def _recorded_processes(restored: Sequence[int], last: LastRun, proc_root: str) -> dict[int, set[int]]:
    """Each process of a thread just ``restored``, and each of ``last.processes`` that
    still runs: {pid: its recorded tids}."""
    recorded_in: dict[int, set[int]] = {}
    for tid in restored:
        try:
            recorded_in.setdefault(procfs.thread_group(tid, proc_root), set()).add(tid)
        except (HostError, ValueError):
            continue  # gone since
    for pid, start, tids in last.processes:
        try:
            if procfs.process_start_time(pid, proc_root) == start:
                recorded_in.setdefault(pid, set()).update(t for t in tids if t in last.records)
        except HostError:
            continue  # exited, its threads with it
    return recorded_in


def _own_mask(pid: int, recorded: set[int], records: Mapping[int, PinRecord]) -> frozenset[int] | None:
    """The process's own mask: its main thread's original, else the one original its
    ``recorded`` threads share; None where they had several."""
    if pid in records:
        return records[pid].original
    shared = {records[t].original for t in recorded}
    return next(iter(shared)) if len(shared) == 1 else None


def _born_in(pinner: Pinner, pid: int, born_since: int, last: LastRun, theirs: dict[int, int],
             proc_root: str) -> tuple[list[Born], set[frozenset[int]]]:
    """The threads of process ``pid`` born since ``born_since`` with one of the last
    run's pins, and the masks of its threads the last run did not manage (which may
    have made them). A main thread the last run left to itself (``last.left_mains``)
    found with one of its pins, every other thread born since, is one that exec'd and
    counts as born (and no longer as someone else's, ``theirs``)."""
    unmanaged: set[frozenset[int]] = set()
    born: list[Born] = []
    carried: tuple[int, frozenset[int]] | None = None  # the main thread's, when it may be one that exec'd
    older = False  # a thread other than main that ran before ``born_since``: no exec since
    for tid in _tids(pid, proc_root):
        try:
            start = procfs.thread_start_time(tid, proc_root)
            if (record := last.records.get(tid)) is not None and record.start_time == start:
                older = older or tid != pid
                continue  # the thread recorded: restored above, or someone else's; not one that took its tid
            mask = pinner.mask_of(tid)
            if start >= born_since:
                if theirs.get(tid) != start and pinner.pinned_by_last_run(tid, mask):
                    born.append((tid, start, mask))
                continue
            older = older or tid != pid
            left = last.left_mains.get(pid)
            if tid == pid and left is not None and mask != left and pinner.pinned_by_last_run(pid, mask):
                carried = (start, mask)
            elif theirs.get(tid) != start:  # one handed over may have our pin's mask: no creator to go by
                unmanaged.add(mask)
        except (HostError, ValueError):
            continue  # gone (its cgroup too, read for a mask that is not a pin's)
    if carried is not None and not older:
        born.append((pid, *carried))
        theirs.pop(pid, None)
    elif carried is not None and theirs.get(pid) != carried[0]:  # set so by someone, not an exec
        unmanaged.add(carried[1])
    return born, unmanaged


def _born_below(pinner: Pinner, pid: int, born_since: int, caller: int | None, recorded: Collection[int],
                proc_root: str) -> list[Born]:
    """The threads with one of the last run's pins of the processes forked below
    ``pid`` since ``born_since``, and below those: each child of ``pid`` or of such a
    process that started since and is not one the last run ``recorded`` (whose own
    listing gives its births); for a target of a user (``caller``: not None), only
    the children that user owns, as the running daemon manages only those."""
    try:
        below = procfs.descendants(pid, proc_root)
    except HostError:
        return []
    stats = []
    for child in below:
        try:
            stats.append(procfs.process_stat(child, proc_root))
        except HostError:
            continue  # exited
    new = {pid}
    born: list[Born] = []
    for stat in sorted(stats, key=lambda st: (st.start_time, st.pid)):  # parents first, where pids wrapped too
        if stat.ppid not in new or stat.start_time < born_since or stat.pid in recorded:
            continue
        new.add(stat.pid)  # the user's own processes below another's are theirs still, as Engine._pids has them
        if caller is not None and procfs.owner(stat.pid, proc_root) != caller:
            continue
        for tid in _tids(stat.pid, proc_root):
            try:
                start, mask = procfs.thread_start_time(tid, proc_root), pinner.mask_of(tid)
                if pinner.pinned_by_last_run(tid, mask):
                    born.append((tid, start, mask))
            except (HostError, ValueError):
                continue  # gone (its cgroup too, read for a mask that is not a pin's)
    return born


def _tids(pid: int, proc_root: str) -> list[int]:
    """The process's threads; none once it exited."""
    try:
        return procfs.list_tids(pid, proc_root)
    except HostError:
        return []


def still_running(saved: object, start_time: Callable[[int, str], int], what: str, proc_root: str) -> dict[int, int]:
    """The ``[id, start time]`` pairs of ``saved`` (a list, as the state file keeps the
    threads handed over and the processes left alone) whose thread or process still
    runs with that start time: {id: start time}. An entry that is not such a pair is
    skipped, not the ones after it; ``what`` names the id in the warning."""
    running = {}
    for entry in saved if isinstance(saved, list) else ():
        if not (isinstance(entry, list) and len(entry) == 2 and all(type(v) is int for v in entry)):
            log.warning(f"state file: not a [{what}, start time] pair, skipped", entry=protocol.clip(repr(entry)))
            continue
        ident, start = entry
        try:
            if start_time(ident, proc_root) == start:
                running[ident] = start
        except (HostError, ValueError):
            pass  # exited since (ValueError: an id no /proc path can name)
    return running


def by_hand(engine: Engine) -> list[dict]:
    """The targets attached by a client (not by a config rule), as the state keeps them."""
    return [{"pid": t.pid, "start_time": t.handle.start_time, "observe": t.observe,
             "threads": t.thread_filter.pattern if t.thread_filter else None,
             "descendants": t.descendants, "uid": t.uid, "caller": t.caller}
            for t in engine.targets.values() if t.rule is None]


def reattach(engine: Engine, saved: dict, now: float, proc_root: str) -> None:
    """Attach again a target the last run attached by hand (``saved``, as ``recover``
    returns it) if its process still runs; else log why not."""
    try:
        pid = int(saved["pid"])
        threads, caller = saved.get("threads"), saved.get("caller")
        if not (threads is None or isinstance(threads, str)) or not (caller is None or is_integer(caller)):
            # a damaged entry: a traceback, as for a bug, said it was one
            raise ValueError(f"a damaged entry: threads {protocol.clip(repr(threads))}, caller "
                             f"{protocol.clip(repr(caller))} (a regex and a uid, or null)")
        if procfs.process_start_time(pid, proc_root) != saved["start_time"]:
            raise ThreadGone(f"process {pid} is another than the one saved")  # that one has exited, its pid reused
        engine.attach(pid, now, observe=bool(saved.get("observe")), threads=threads,
                      descendants=bool(saved.get("descendants")), uid=caller)
        log.info("re-attached from the last run", pid=pid)
    except ThreadGone:  # not the errno of the read that found it gone
        log.info("previous target not re-attached", **_named(saved), reason="it has exited")
    except (KeyError, ValueError, TypeError, HostError, EngineError) as exc:
        log.info("previous target not re-attached", **_named(saved), reason=str(exc))
    except Exception:  # a bug: that target, not the daemon's start
        log.exception("previous target not re-attached", **_named(saved))


def _named(saved: dict) -> dict[str, object]:
    """A saved target as its log lines name it, by pid and start time, as fields: it was
    logged as the state file's whole entry, a Python dict in one field. A value that is
    not a number (a damaged entry, or None where it is missing) is logged as its clipped repr."""
    fields = {"pid": saved.get("pid"), "start_time": saved.get("start_time")}
    return {key: value if isinstance(value, int) else protocol.clip(repr(value)) for key, value in fields.items()}


def _check_version(state: dict) -> None:
    """ValueError unless ``state`` is of the version this daemon reads."""
    if state.get("version") != STATE_VERSION:
        raise ValueError(f"version {protocol.clip(repr(state.get('version')))}, this daemon reads {STATE_VERSION}")


def _placements(state: dict) -> frozenset[frozenset[int]] | None:
    """The masks the run that wrote ``state`` pinned threads to, by which its records
    are judged (not this run's: it may run on other domains or CPUs, and a mask only
    it would set was set by someone else); None (every mask counts as a pin) when the
    file does not say or cannot be read (written before it kept them)."""
    saved = state.get("placements")
    if saved is None:
        return None
    try:
        if not isinstance(saved, list) or not saved or not all(isinstance(p, str) for p in saved):
            raise ValueError(f"not a list of CPU lists: {saved!r:.80}")  # empty: no run pins to nothing
        placements = frozenset(map(parse_cpulist, saved))
        if frozenset() in placements:
            raise ValueError("an empty CPU list")  # no pin is to no CPU
        return placements
    except ValueError as exc:
        log.warning("state file: the last run's placements are unreadable, every saved thread is restored",
                    error=str(exc))
        return None
