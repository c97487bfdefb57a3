"""parlschedctl run -- CMD: start CMD, attach it, follow it (its live line on a terminal,
a daemon restart under it), pass signals sent to run on to it, draw its plot once it
ended, and say how it ended (the summary, --json's object) with its exit code. Also
the drawing of a target's history that run --plot and plot share. cli.py parses run's
options and calls ``run``."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NoReturn

import click

from parlschedctl import client
from parlschedctl.outputs import CannotWrite, is_terminal, writing
from parlschedctl.render import clip, placement_counts, placements, progress_line, terminal_size, unpinned_warning
from parlschedd.words import n_threads, signal_name


# Sent to run alone (a supervisor, a closed ssh session, kill), they are passed on to CMD,
# so that CMD never runs on orphaned, still pinned, with no summary. The keyboard's are
# passed on only to a CMD in a process group of its own (timeout, setsid): Ctrl-C and
# Ctrl-\ reach a CMD in run's group through the terminal, and passing them on would
# send them twice (a JVM would dump its threads twice).
RELAYED = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM)
FROM_KEYBOARD = (signal.SIGINT, signal.SIGQUIT)
HISTORY_AFTER_TIMEOUT_S = 5.0  # the few periods since the last poll, asked for once CMD ended: not worth a long wait
POLL_S = 0.2  # between two status requests while CMD runs
ENDED_WAIT_S = 1.0  # for the thread that waits for CMD to reap it, when the daemon says it is gone
SAME_SIGNAL_S = 0.25  # a signal run handles this soon after CMD's end came with the one that ended it


class _StopWaiting(BaseException):  # noqa: N818 -- not an error: a signal ended run's wait on the daemon
    """A signal to run once CMD has ended: run stops waiting for the daemon (a hung
    one held it 10 s, its Ctrl-C and SIGTERM lost) and says its summary."""


class _Relay:
    """Passes RELAYED signals on to CMD; one that comes before CMD exists is kept and
    passed on as soon as it does (installed before the fork, so none is missed). The
    keyboard's are passed on to CMD's process group when CMD leads one of its own (out
    of the terminal's reach, as a terminal would send them), to no CMD in run's group.
    A signal run was started ignoring (nohup's SIGHUP, a background job's SIGINT) stays
    ignored, and CMD inherits that, as it would without run. Once CMD has ended, a
    signal of either kind ends run's wait on the daemon (``waiting``). Signals go
    through a pidfd where the kernel has them: CMD is reaped by another thread, and a
    pid alone may name another process by then."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.ended: _Ended | None = None
        self.pidfd: int | None = None
        self.waiting = False  # on the daemon, for CMD's summary: what a signal after CMD's end cuts short
        self.pending: list[int] = []
        self.came_with_the_end = False  # a signal handled just after CMD's end was spent (``_stop_waiting``)
        self.ignored = {sig for sig in (*RELAYED, *FROM_KEYBOARD) if signal.getsignal(sig) == signal.SIG_IGN}
        for sig in set(RELAYED) - self.ignored:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.proc is None:
            self.pending.append(signum)
        elif not self._stop_waiting():
            self._send(signum)

    def _on_keyboard(self, signum: int, frame: object) -> None:
        if self.proc is not None and not self._stop_waiting() and _leads_a_group(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signum)

    def _send(self, signum: int) -> None:
        if self.pidfd is None:
            self.proc.send_signal(signum)
            return
        with contextlib.suppress(ProcessLookupError):  # it has ended
            signal.pidfd_send_signal(self.pidfd, signum)

    def _stop_waiting(self) -> bool:
        """False while CMD runs; else raises _StopWaiting while run waits on the daemon,
        True (the signal is spent) after. Not the first signal handled within
        SAME_SIGNAL_S of CMD's end: sent to run's whole group (a Ctrl-C, a kill of the
        group), it ended CMD (died of it, or exited on it) and reached run too, whose
        handler may run after the thread that waits for CMD saw the end (1 time in 4 a
        Ctrl-C said "stopped waiting for the daemon", its summary without the
        placements and its figure). Told by the time, not by CMD's exit status: a
        signal that went to CMD alone leaves run's next one to stop the wait."""
        if self.ended is None or not self.ended.event.is_set():
            return False
        if not self.came_with_the_end and time.monotonic() - self.ended.at < SAME_SIGNAL_S:
            self.came_with_the_end = True
            return True
        if self.waiting:
            self.waiting = False
            raise _StopWaiting
        return True

    def started(self, proc: subprocess.Popen) -> None:
        """CMD is running: the pending signals passed on, its end waited for, and the
        keyboard's signals handled (after the fork: CMD must not inherit a handler
        that a signal before its exec would run in it)."""
        try:
            self.pidfd = os.pidfd_open(proc.pid)  # before the waiter thread: CMD not yet reaped
        except OSError:  # Linux before 5.3
            self.pidfd = None
        self.proc, self.ended = proc, _Ended(proc)
        while self.pending:
            self._send(self.pending.pop(0))
        for sig in set(FROM_KEYBOARD) - self.ignored:
            signal.signal(sig, self._on_keyboard)


def _leads_a_group(pid: int) -> bool:
    """Whether process ``pid`` leads a process group of its own (timeout, setsid), which
    the terminal's signals to run's group do not reach. False when it is gone, or in
    another's group (sent nothing: that group is not CMD's to speak for)."""
    try:
        return os.getpgid(pid) == pid != os.getpgrp()
    except ProcessLookupError:
        return False


class _Ended:
    """CMD's end, waited for by a thread of its own: its time is exact (it was taken
    after run's status request, 0.2 s of polling and, from a hung daemon, a 10 s
    timeout later) and the pause between two polls ends with it."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.event = threading.Event()
        self.at = math.nan
        threading.Thread(target=self._wait, args=(proc,), name="cmd-wait", daemon=True).start()

    def _wait(self, proc: subprocess.Popen) -> None:
        proc.wait()
        self.at = time.monotonic()
        self.event.set()


def _say(text: str, nl: bool = True, err: bool = True) -> None:
    """A message of run's on stderr (its --json summary on stdout), where one that cannot
    be written (a closed pipe, a full disk) is lost rather than turning CMD's exit code
    into run's failure."""
    try:
        click.echo(text, nl=nl, err=err)
    except OSError:
        pass


class Watched(Enum):
    """How far run watched CMD, which is what its summary can say of CMD's threads."""

    TO_THE_END = ""  # attached until CMD ended: the count, and when managed the last placements
    DETACHED = "detached before the end"  # a client detached CMD while it ran: the count and this
    DAEMON_STOPPED = "the daemon stopped before the end"  # it went away (before the attach or after): the same
    STOPPED_WAITING = "run stopped waiting for the daemon"  # a signal after CMD's end cut short a wait on it
    NEVER_ATTACHED = None  # the daemon refused the attach (or CMD could not start): nothing to count


def _live_status(target: dict, elapsed: float) -> str:
    """run's one-line status cut to stderr's terminal columns but one, read at each
    refresh as top does: a longer line wrapped, and each ``\\r`` then redrew only its
    last row, leaving a stale row behind per refresh."""
    return clip(progress_line(target, elapsed), terminal_size(sys.stderr.fileno()).columns - 1)


def run(sock: str, observe: bool, as_json: bool, plot_to: str | None, cmd: tuple[str, ...],
        live: bool | None = None) -> NoReturn:
    """parlschedctl run: CMD started, attached, waited for, summarised; exits with CMD's code.
    The daemon's refusal of the first request, or its absence, is raised (client.Refused,
    client.Unreachable) before CMD starts. ``live``: the live line (--live, --no-live;
    None: ``_draws_live``'s default)."""
    client.request(sock, "ping")
    started = time.monotonic()
    relay = _Relay()
    end = RunEnd(cmd, observe)
    try:
        proc = subprocess.Popen(cmd)
    except OSError as exc:  # the shell's and env(1)'s codes: 127 not found, 126 not runnable
        end.not_managed = f"cannot start {cmd[0] or repr('')}: {_why_not_started(cmd[0], exc)}"
        end.watched = Watched.NEVER_ATTACHED
        end.returncode = 127 if isinstance(exc, FileNotFoundError) or not cmd[0] else 126  # "": no such command
        end.seconds = time.monotonic() - started
        _say(f"parlschedctl: {end.not_managed}")
        _finish(end, as_json, summary=False)
    relay.started(proc)
    end.pid = proc.pid
    line = _LiveLine(_draws_live(live))
    relay.waiting = True
    try:
        polled = _follow(sock, proc, relay.ended, end, started, line)
        if end.watched is Watched.TO_THE_END:  # _follow watched CMD to its end
            end.after_last_poll = _threads_after(sock, proc.pid, end.last, polled, end.period)
        if plot_to is not None:
            relay.ended.event.wait()  # detached, or the daemon gone: CMD may run on
            _plot_run(sock, end, plot_to)
    except _StopWaiting:
        end.watched = Watched.STOPPED_WAITING if end.watched is Watched.TO_THE_END else end.watched
        _say(line.end() + "parlschedctl: stopped waiting for the daemon")
    relay.waiting = False
    relay.ended.event.wait()
    end.returncode, end.seconds = proc.wait(), relay.ended.at - started
    _finish(end, as_json)


def _follow(sock: str, proc: subprocess.Popen, ended: _Ended, end: RunEnd, started: float, line: _LiveLine) -> float:
    """Attach CMD and poll its status until it ends (or is detached, or the daemon
    goes for good), noting in ``end`` what the summary says; when the daemon made
    run's last view of CMD (monotonic time)."""
    polled = time.monotonic()
    try:
        attached = client.request(sock, "attach", pid=proc.pid, observe=end.observe, descendants=True)
        end.last = attached["target"]
        if warning := unpinned_warning(attached):
            _say(line.end() + warning)
        end.managed.update(t["tid"] for t in end.last.get("threads", []))
        while not ended.event.is_set():
            try:
                status = client.request(sock, "status", pid=proc.pid)
                end.last, end.period = status["targets"][0], status["daemon"]["period_s"]
                # the view's own time (the same clock as the daemon's): a tick between the request and
                # the view's making is in the view, and a thread of that tick in no sample read after it
                polled = time.monotonic() - status["daemon"].get("snapshot_age_ms", 0.0) / 1e3
            except client.Refused as exc:
                if not ended.event.wait(ENDED_WAIT_S):  # it runs, and is not attached: a client detached it
                    end.watched = Watched.DETACHED
                    # or it is no longer run's user's (a setuid program), which the daemon lets go
                    why = "" if exc.code == "not_attached" else f" ({exc})"
                    _say(line.end() + f"parlschedctl: {end.cmd[0]} was detached{why}; waiting for it")
                    break
                continue  # it ended, and the daemon dropped it: the loop's end
            except client.Unreachable as exc:  # a restart (systemctl restart) attaches CMD again from its state
                _say(line.end() + f"parlschedctl: lost the daemon ({exc}); waiting for "
                     f"{end.cmd[0]}, and for the daemon to come back")
                if not _back(sock, proc):
                    end.watched = Watched.DAEMON_STOPPED
                    break
                end.restarts += 1
                _say(line.end() + f"parlschedctl: the daemon is back and manages {end.cmd[0]} again")
                continue
            end.managed.update(t["tid"] for t in end.last.get("threads", []))
            if end.last:
                line.draw(end.last, time.monotonic() - started)
            ended.event.wait(POLL_S)
        _say(line.end(), nl=False)
    except client.Refused as exc:
        gone = exc.code == "no_such_process" and ended.event.wait(ENDED_WAIT_S)
        end.not_managed = f"{end.cmd[0]} ended before it could be attached" if gone else str(exc)
        _say(line.end() + f"parlschedctl: not managed: {end.not_managed}")
        end.watched = Watched.NEVER_ATTACHED
    except client.Unreachable as exc:
        end.watched = Watched.DAEMON_STOPPED
        _say(line.end() + f"parlschedctl: lost the daemon ({exc}); waiting for {end.cmd[0]}")
    return polled


def _draws_live(asked: bool | None) -> bool:
    """Whether run draws its live line on stderr: on a terminal only; there as asked
    (--live, --no-live), else when CMD's standard output goes to a file or a device
    (``> out.log``, ``> /dev/null``), not to a terminal nor a pipe: redrawn in place
    every POLL_S, the line wrote over what CMD wrote to its terminal (a prompt, a
    REPL's), and over what a pipe's reader did with it there (``| less``, ``| tee``)."""
    if not is_terminal(sys.stderr):
        return False
    if asked is not None:
        return asked
    if sys.stdout is None:  # closed (>&-): CMD writes nothing there
        return True
    mode = os.fstat(sys.stdout.fileno()).st_mode
    return stat.S_ISREG(mode) or stat.S_ISCHR(mode) and not is_terminal(sys.stdout)


class _LiveLine:
    """run's live status on stderr, drawn only from the foreground of run's controlling
    terminal: a job put in the background, or a run with no controlling terminal
    (setsid), drew over the shell's prompt and what was being typed. ``end`` is what
    to write before another message: the line erased where it is still ours, ended
    where run is no longer in the foreground; where none is drawn, what starts a line of
    its own after CMD's output (_own_line)."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.drawn = False

    def draw(self, target: dict, elapsed: float) -> None:
        if self.on and _in_foreground(sys.stderr):
            _say("\r\033[K" + _live_status(target, elapsed), nl=False)
            self.drawn = True

    def end(self) -> str:
        if not self.drawn:
            return _own_line()
        self.drawn = False
        return "\r\033[K" if _in_foreground(sys.stderr) else "\n"


def _own_line() -> str:
    """What starts a message of run's on a line of its own on stderr's terminal, where
    CMD's output may have left the cursor mid-line (``printf 'no newline'``): the
    summary ran on after it, "no newlineparlschedctl: ...". As zsh's PROMPT_SP: a
    line's width of spaces, then a carriage return; from a line's start they fill it
    and the cursor waits at the margin (the carriage return brings it back to that
    line's start), from anywhere after it they wrap to the next line. "" where stderr
    is no terminal, its width unknown, or TERM=dumb (an editor's shell buffer, which
    does not wrap: the carriage return went back over CMD's output)."""
    if not is_terminal(sys.stderr) or os.environ.get("TERM", "dumb") == "dumb":
        return ""
    try:
        columns = os.get_terminal_size(sys.stderr.fileno()).columns
    except OSError:
        return ""
    return " " * columns + "\r" if columns else ""


def _in_foreground(terminal: Any) -> bool:
    """Whether run is in the foreground process group of ``terminal``, its controlling
    terminal (False for another: where run has no job control, it cannot tell)."""
    try:
        return os.tcgetpgrp(terminal.fileno()) == os.getpgrp()
    except OSError:
        return False


def _threads_after(sock: str, pid: int, seen: dict[str, Any], polled: float, period: float | None) -> set[int]:
    """The tids of CMD's threads in the daemon's history after run's last view of it,
    ``seen`` (the history of an exited target is kept): a thread CMD started after it,
    and that ended with CMD, was in no status run saw. The samples read are those newer
    than the view's newest (its ``history_t``: the same clock, so no wait on the client
    side moves the line), all of them when the history is another than the view's (a
    daemon restarted since, whose history starts at its attach again); only the periods
    since ``polled``, when the view was made, are asked for. An empty set when the
    history cannot be had, or from a daemon whose views do not say their newest sample."""
    if "history_t" not in seen:
        return set()
    last = None if period is None else math.ceil((time.monotonic() - polled) / period) + 2
    try:
        history = client.request(sock, "history", pid=pid, last=last, timeout=HISTORY_AFTER_TIMEOUT_S)
    except (client.Refused, client.Unreachable):
        return set()
    same = history.get("started") == seen.get("history_started")
    newest = seen["history_t"] if same and seen["history_t"] is not None else -math.inf
    return {tid for sample in history["samples"] if sample["t"] > newest for tid in sample["tids"]}


def _back(sock: str, proc: subprocess.Popen) -> bool:
    """Whether a daemon manages ``proc`` again before it ends: the daemon restarted with
    its state dir (systemctl restart keeps it) attaches again what clients attached.
    False when it ended first, or a daemon came back without it (a stop forgets)."""
    while proc.poll() is None:
        try:
            client.request(sock, "status", pid=proc.pid)
            return True
        except client.Unreachable:
            time.sleep(0.5)
        except client.Refused:
            return False
    return False


def _why_not_started(program: str, exc: OSError) -> str:
    """Why exec failed, in words that fit the file: ENOENT of a file that is there
    means its #! interpreter (or, of a binary, its loader) is missing, EACCES of a
    directory that it is one; else the system's words (exec of "" tries each PATH
    directory: EACCES, where the shell and env(1) say "not found")."""
    if not program:
        return "no command has an empty name"
    found = program if "/" in program else shutil.which(program)
    if isinstance(exc, FileNotFoundError) and found and os.path.isfile(found):
        try:
            with open(found, "rb") as f:
                first = f.readline(256)
        except OSError:
            first = b""
        if first.startswith(b"#!") and first[2:].split():
            interpreter = first[2:].split()[0].decode(errors="replace")
            return f"its interpreter {interpreter} (its #! line) is not found"
        return "a program it needs to start (its #! interpreter or ELF loader) is not found"
    if isinstance(exc, PermissionError) and found and os.path.isdir(found):
        return "it is a directory"
    return exc.strerror or str(exc)


def _plot_run(sock: str, end: RunEnd, out: str) -> None:
    """Draw CMD's run into ``out`` (end.plot when written); said either way, before
    the summary, which stays the last line."""
    cmd = end.cmd[0]
    why = {Watched.NEVER_ATTACHED: f"{cmd} was never managed",
           Watched.DETACHED: f"{cmd} was detached before its end, and its history with it",
           Watched.DAEMON_STOPPED: f"the daemon stopped before {cmd}'s end"}.get(end.watched)
    if why is not None:
        _say(_own_line() + f"parlschedctl: no plot: {why}")
        return
    try:
        since = " since the daemon's restart" if end.restarts else ""  # the restarted daemon's history alone
        _say(_own_line() + f"parlschedctl: {draw(sock, end.pid, out)}{since}")
        end.plot = out
    except PlotFailed as exc:
        _say(_own_line() + f"parlschedctl: {exc}")
    except (client.Refused, client.Unreachable) as exc:
        _say(_own_line() + f"parlschedctl: cannot plot: {exc}")


@dataclass
class RunEnd:
    """What run saw of CMD, for its summary: the last line on stderr, and with --json
    one JSON object on stdout."""

    cmd: tuple[str, ...]
    observe: bool
    pid: int | None = None  # None: CMD could not be started
    returncode: int = 0  # Popen's: -N when signal N killed CMD
    seconds: float = 0.0
    watched: Watched = Watched.TO_THE_END
    managed: set[int] = field(default_factory=set)  # every tid managed (observed) at some poll
    last: dict[str, Any] = field(default_factory=dict)  # the target at the last poll
    period: float | None = None  # the daemon's period_s, from its status replies
    not_managed: str | None = None  # why CMD was never attached (or started)
    plot: str | None = None  # the figure --plot wrote
    restarts: int = 0  # daemon restarts CMD was managed through: a history since the last
    after_last_poll: set[int] = field(default_factory=set)  # tids in the daemon's history after the last poll

    @property
    def threads_managed(self) -> int:
        """Every thread managed (observed) during the run: the daemon's count at the last
        poll (a thread that came and went between two polls is in it), else the tids seen,
        and the threads the daemon's history shows were made after the last poll."""
        return max(len(self.managed), self.last.get("threads_adopted", 0)) + len(self.after_last_poll - self.managed)

    @property
    def exit_code(self) -> int:
        """run's own: CMD's, or 128 + N when signal N killed it, as a shell gives it."""
        return self.returncode if self.returncode >= 0 else 128 - self.returncode

    def line(self) -> str:
        """'parlschedctl: CMD exited 3 after 1.20 s; managed 4 threads (at the end: ...)'."""
        how = f"exited {self.returncode}" if self.returncode >= 0 else f"was killed by {signal_name(-self.returncode)}"
        return f"parlschedctl: {self.cmd[0]} {how} after {self.seconds:.2f} s{_run_summary(self)}"

    def as_json(self) -> dict[str, Any]:
        """The summary's facts under status --json's names (pid, mode, threads), each
        null where the summary says nothing of it."""
        attached = self.watched is not Watched.NEVER_ATTACHED
        at_end = self.watched is Watched.TO_THE_END and not self.observe  # the summary gives the last placements
        left = self.last.get("threads", []) if at_end else None
        one_cpu, free = placement_counts(left) if left is not None else (None, None)
        return {"command": list(self.cmd), "pid": self.pid, "exit_code": self.exit_code,
                "signal": signal_name(-self.returncode) if self.returncode < 0 else None,
                "seconds": round(self.seconds, 3), "mode": "observe" if self.observe else "pin",
                "watched": self.watched.name.lower(), "not_managed": self.not_managed,
                "threads_managed": self.threads_managed if attached else None,
                "threads": left, "on_one_cpu": one_cpu, "free_in_domain": free, "plot": self.plot}


def _finish(end: RunEnd, as_json: bool, summary: bool = True) -> NoReturn:
    """Say how CMD ended (stderr; stdout too with --json) and exit with its code."""
    if summary:
        _say(_own_line() + end.line())
    if as_json:  # one line: CMD's output shares stdout, and a script takes the last line
        start = _new_line(summary_said=summary) if end.pid is not None else ""  # a CMD never started wrote nothing
        _say(start + json.dumps(end.as_json(), separators=(",", ":")), err=False)
    if end.returncode == -signal.SIGINT and signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, None):
        _die_of_sigint()
    sys.exit(end.exit_code)


def _die_of_sigint() -> None:
    """End run as CMD ended, by SIGINT: a shell stops a loop (``for ...; do run -- CMD;
    done``) at Ctrl-C only when its child died of SIGINT, not when it exited 130
    (bash's wait and cooperative exit); the shell's $? is 130 either way. Not when run
    was started ignoring SIGINT (a background job): then it exits 130."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, AttributeError):  # AttributeError: a stream closed at start is None
            stream.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def _new_line(summary_said: bool) -> str:
    """What run --json writes before its summary so that the summary is a line of its
    own: CMD writes to the same stdout, and ``printf 'no newline'`` left the summary
    joined to CMD's last line. "\\n" when CMD's output did not end its line; on a regular
    file that is read back (its byte before the write position). Where it cannot be
    (a pipe, a socket), "\\n" always: an empty line after an output that did end its
    line costs less than a summary a script cannot parse. On the terminal the summary
    line on stderr just ended (the same terminal), nothing."""
    if sys.stdout is None:  # started with stdout closed (>&-): the summary is lost, as on a closed pipe
        return ""
    out = sys.stdout.fileno()
    with contextlib.suppress(OSError):
        sys.stdout.flush()
        if os.isatty(out):
            if summary_said and os.isatty(2) and os.path.samestat(os.fstat(out), os.fstat(2)):
                return ""
        elif stat.S_ISREG(os.fstat(out).st_mode):
            return "" if _byte_before_write(out) in (b"", b"\n") else "\n"
    return "\n"


def _byte_before_write(fd: int) -> bytes:
    """The byte before where the next write to regular file ``fd`` lands (at its end
    in append mode), b"" at the file's start. A file opened write-only (``> out``) is
    read through /proc/self/fd, which opens it again for reading; raises OSError."""
    at = os.fstat(fd).st_size if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND else os.lseek(fd, 0, os.SEEK_CUR)
    if at == 0:
        return b""
    try:
        return os.pread(fd, 1, at - 1)
    except OSError as exc:
        if exc.errno != errno.EBADF:
            raise
    reader = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.pread(reader, 1, at - 1)
    finally:
        os.close(reader)


def _run_summary(end: RunEnd) -> str:
    """'; managed 4 threads (at the end ...)' for run's last line; '' when never attached."""
    if end.watched is Watched.NEVER_ATTACHED:
        return ""
    said = f"; {'observed' if end.observe else 'managed'} {n_threads(end.threads_managed)}"
    if end.watched in (Watched.DETACHED, Watched.DAEMON_STOPPED, Watched.STOPPED_WAITING):
        return f"{said} ({end.watched.value})"
    if end.observe:
        return said
    left = end.last.get("threads", [])
    at_end = "at the end" if len(left) == end.threads_managed else f"{len(left)} left at the end"
    return said + f" ({at_end}: {placements(left)})"


class PlotFailed(Exception):
    """A figure not drawn, in the words the user is told."""


def draw(sock: str, pid: int, out: str, last: int | None = None) -> str:
    """Draw the history of target ``pid`` (the last ``last`` periods) into ``out``;
    'wrote OUT (N periods)', else PlotFailed. The history is asked for first:
    matplotlib takes a second to import, and the target may be about to exit."""
    try:
        history = client.request(sock, "history", pid=pid, last=last, timeout=60)
        from parlschedd.plots import plot_history

        with writing(out):
            path = plot_history(history, out)
    except CannotWrite as exc:  # "PATH: cannot write: ...", as the other commands say it
        raise PlotFailed(str(exc)) from None
    except (ValueError, OSError) as exc:
        raise PlotFailed(f"cannot plot: {exc}") from None
    return f"wrote {path} ({len(history['samples'])} periods{_cut(history) if last is None else ''})"


def _cut(history: dict[str, Any]) -> str:
    """': the last 60.0 s of the run, ...' when the daemon's ring (history_periods) has
    dropped the run's first periods, so a figure said to be of the whole run is not."""
    samples, period = history["samples"], history.get("period_s", 0.0)
    if not history.get("dropped"):  # a ring that dropped any holds history_periods >= 1 samples
        return ""
    span = samples[-1]["t"] - samples[0]["t"] + period
    return f": the last {span:.1f} s of the run, all the daemon keeps (history_periods {history['capacity']})"
