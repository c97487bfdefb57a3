"""parlschedctl/runner.py, its functions called directly: the relay of signals to CMD,
why a CMD could not start, the summary's facts and words (RunEnd), where run --json's
summary line starts in a stdout CMD shares, the figure of a run and why there is none,
waiting for a daemon that went away, and ``run`` itself in this process.

Real processes started by the test, real files and terminals, and a real daemon where
one is asked (tests/conftest.py). test_cli.py shows the same machinery from outside,
through ``parlschedctl run``.
"""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from parlschedctl import client, runner
from parlschedctl.outputs import is_terminal
from parlschedctl.runner import FROM_KEYBOARD, RELAYED, PlotFailed, RunEnd, Watched, _Relay
from tests.conftest import PINNING, needs_root, start_daemon, wait_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def own_signals():
    """The handlers _Relay and run install in this process, put back after the test."""
    saved = {sig: signal.getsignal(sig) for sig in (*RELAYED, *FROM_KEYBOARD)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def ignored_by(pid: int) -> set[int]:
    """The signals process ``pid`` ignores (/proc/PID/status's SigIgn mask)."""
    mask = int(next(line.split()[1] for line in open(f"/proc/{pid}/status") if line.startswith("SigIgn:")), 16)
    return {n for n in range(1, 65) if mask >> (n - 1) & 1}


# -- the relay of signals -------------------------------------------------------------

def test_a_signal_that_comes_before_cmd_is_kept_and_passed_on_once_it_exists(own_signals, kill_after):
    """A signal sent to run between its start and CMD's (installed before the fork)
    is kept, then sent to CMD as soon as it exists; one that comes after is sent at
    once. Two kept are passed on in the order they came."""
    relay = _Relay()
    os.kill(os.getpid(), signal.SIGUSR2)
    os.kill(os.getpid(), signal.SIGUSR1)
    assert relay.pending == [signal.SIGUSR2, signal.SIGUSR1]
    cmd = kill_after(subprocess.Popen(["sleep", "30"]))
    relay.started(cmd)
    assert cmd.wait(timeout=10) == -signal.SIGUSR2 and relay.pending == []
    relay = _Relay()
    later = kill_after(subprocess.Popen(["sleep", "30"]))
    relay.started(later)
    os.kill(os.getpid(), signal.SIGALRM)
    assert later.wait(timeout=10) == -signal.SIGALRM


def test_a_signal_run_was_started_ignoring_stays_ignored_and_cmd_inherits_that(own_signals, kill_after):
    """nohup's SIGHUP: ignored before the relay, it is not relayed, run still ignores
    it and so does CMD; the other relayed signals get the relay."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    relay = _Relay()
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    assert all(signal.getsignal(sig) == relay._on_signal for sig in RELAYED if sig != signal.SIGHUP)
    cmd = kill_after(subprocess.Popen(["sleep", "30"]))
    relay.started(cmd)
    assert signal.SIGHUP in ignored_by(cmd.pid) and signal.SIGTERM not in ignored_by(cmd.pid)


ENDS_ON = {"dies of it": ["sleep", "30"],
           "exits 130 on it": ["sh", "-c", "trap 'exit 130' INT TERM; while :; do sleep 0.01; done"]}


@pytest.mark.parametrize("cmd", ENDS_ON)
@pytest.mark.parametrize("killer", [signal.SIGINT, signal.SIGTERM], ids=["a Ctrl-C", "a kill of the group"])
def test_the_signal_that_ended_cmd_does_not_also_end_runs_wait(own_signals, kill_after, killer, cmd):
    """A signal to run's whole group ends CMD and reaches run too: where run's handler
    ran after the thread that waits for CMD saw the end, it was taken for a second
    signal, after CMD's end: "stopped waiting for the daemon", the summary without
    placements (the review: 4 Ctrl-Cs in 15). The handler is called here as late as it
    ran then: spent; the next one ends the wait. One handled later than SAME_SIGNAL_S
    after the end (the signal went to CMD alone) ends it at once."""
    handler = runner._Relay._on_keyboard if killer in FROM_KEYBOARD else runner._Relay._on_signal
    for late in (False, True):
        relay = _Relay()
        proc = kill_after(subprocess.Popen(ENDS_ON[cmd]))
        relay.started(proc)
        relay.waiting = True
        time.sleep(0.2)  # the shell's trap set
        proc.send_signal(killer)
        assert relay.ended.event.wait(10) and proc.returncode in (-killer, 130)
        if late:
            time.sleep(runner.SAME_SIGNAL_S)
        else:
            handler(relay, killer, None)  # the group's signal, handled just after the end: spent
            assert relay.waiting
        with pytest.raises(runner._StopWaiting):
            handler(relay, killer, None)


# -- why CMD could not start ------------------------------------------------------------

def start_error(program: str) -> OSError:
    with pytest.raises(OSError) as e:
        subprocess.Popen([program])
    return e.value


def test_why_a_command_could_not_start_is_said_in_the_words_of_its_file(tmp_path, monkeypatch):
    """ENOENT of a file that is there: a script's #! interpreter missing (named, also
    when found on the PATH), or an ELF whose loader is missing; EACCES of a directory;
    else the system's words (a file that is not there, one not executable)."""
    script = tmp_path / "job.sh"
    script.write_text("#!/opt/no-such/python3 -u\nprint('hi')\n")
    script.chmod(0o755)
    said = runner._why_not_started(str(script), start_error(str(script)))
    assert said == "its interpreter /opt/no-such/python3 (its #! line) is not found"
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert runner._why_not_started("job.sh", start_error("job.sh")) == said
    true = Path(shutil.which("true")).read_bytes()
    loader = re.search(rb"/lib[^\0]*/ld-[^\0]+\.so[^\0]*", true)
    if loader is None:
        pytest.skip("true(1) here names no ELF loader")
    elf = tmp_path / "prog"  # true(1) with a loader that is not there
    elf.write_bytes(true.replace(loader.group(0), b"/nonexistent"[: len(loader.group(0))].ljust(len(loader.group(0)), b"x")))
    elf.chmod(0o755)
    assert runner._why_not_started(str(elf), start_error(str(elf))) == \
        "a program it needs to start (its #! interpreter or ELF loader) is not found"
    assert runner._why_not_started(str(tmp_path), start_error(str(tmp_path))) == "it is a directory"
    assert runner._why_not_started(str(tmp_path / "none"), start_error(str(tmp_path / "none"))) == \
        "No such file or directory"
    assert runner._why_not_started("no-such-program-xyz", start_error("no-such-program-xyz")) == \
        "No such file or directory"
    plain = tmp_path / "plain"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    assert runner._why_not_started(str(plain), PermissionError(13, "Permission denied")) == "Permission denied"


# -- the summary ----------------------------------------------------------------------

THREADS = [{"tid": 11, "pinned": True, "free": False}, {"tid": 12, "pinned": True, "free": True},
           {"tid": 13, "pinned": False, "free": False}]


def test_run_exits_as_a_shell_would_and_names_the_signal():
    """CMD's own code is run's; a CMD killed by signal N is 128 + N, said by name, a
    real-time one too."""
    assert RunEnd(("x",), False, returncode=3).exit_code == 3
    assert RunEnd(("x",), False, returncode=0).exit_code == 0
    killed = RunEnd(("job",), False, returncode=-signal.SIGKILL, seconds=1.234)
    assert killed.exit_code == 137 and killed.line().startswith("parlschedctl: job was killed by SIGKILL after 1.23 s")
    assert killed.as_json()["signal"] == "SIGKILL" and killed.as_json()["exit_code"] == 137
    assert RunEnd(("x",), False, returncode=-(signal.SIGRTMIN + 3)).as_json()["signal"] == "SIGRTMIN+3"
    assert RunEnd(("x",), False, returncode=5).as_json()["signal"] is None


def test_the_thread_count_is_the_daemons_when_it_adopted_more_than_run_saw():
    """threads_managed: the daemon's count of threads adopted (threads that came and
    went between two polls are in it) or, when it is less, the tids run saw."""
    end = RunEnd(("x",), False, managed={1, 2, 3}, last={"threads_adopted": 7})
    assert end.threads_managed == 7
    end = RunEnd(("x",), False, managed={1, 2, 3}, last={"threads_adopted": 2})
    assert end.threads_managed == 3
    assert RunEnd(("x",), False, managed={1}).threads_managed == 1
    # and those the history shows after the last poll that no poll saw
    end = RunEnd(("x",), False, managed={1, 2, 3}, last={"threads_adopted": 7}, after_last_poll={3, 8, 9})
    assert end.threads_managed == 9


def test_the_summary_says_what_run_saw_of_cmd_and_no_more():
    """To the end, pinned: the count and the last placements ("at the end" when every
    thread managed is still there, "N left at the end" when not); observed: the count
    alone; detached or the daemon gone: the count and why no more; never attached:
    nothing of threads, and --json's nulls for all it cannot say."""
    last = {"threads": THREADS, "threads_adopted": 3}
    end = RunEnd(("job",), False, returncode=0, seconds=2.0, last=last, managed={11, 12, 13})
    assert end.line() == "parlschedctl: job exited 0 after 2.00 s; managed 3 threads (at the end: 1 on one CPU, " \
                         "1 free in their domain, 1 not placed)"
    end.last = {"threads": THREADS[:2], "threads_adopted": 5}
    assert end.line().endswith("; managed 5 threads (2 left at the end: 1 on one CPU, 1 free in their domain)")
    facts = end.as_json()
    assert (facts["threads_managed"], facts["threads"], facts["on_one_cpu"], facts["free_in_domain"]) == \
        (5, THREADS[:2], 1, 1)
    assert facts["watched"] == "to_the_end" and facts["mode"] == "pin"
    observed = RunEnd(("job",), True, last=last, managed={11, 12, 13})
    assert observed.line().endswith("; observed 3 threads")
    assert observed.as_json()["threads"] is None and observed.as_json()["on_one_cpu"] is None
    assert observed.as_json()["mode"] == "observe"
    for watched in (Watched.DETACHED, Watched.DAEMON_STOPPED):
        cut = RunEnd(("job",), False, last=last, managed={11}, watched=watched)
        assert cut.line().endswith(f"; managed 3 threads ({watched.value})")
        assert cut.as_json()["threads"] is None and cut.as_json()["threads_managed"] == 3
        assert cut.as_json()["watched"] == watched.name.lower()
    never = RunEnd(("job",), False, returncode=1, seconds=0.5, watched=Watched.NEVER_ATTACHED, not_managed="why")
    assert never.line() == "parlschedctl: job exited 1 after 0.50 s"
    assert never.as_json()["threads_managed"] is None and never.as_json()["not_managed"] == "why"
    assert RunEnd(("job",), False, managed={1}).line().endswith("; managed 1 thread (0 left at the end: 0 on one CPU, "
                                                                "0 free in their domain)")


def test_a_figure_of_a_run_longer_than_the_history_says_what_it_shows():
    """_cut: a history whose ring dropped periods (the reply's ``dropped``) says the
    span it keeps; one that dropped none says nothing, whatever its first sample's
    time (a first period can end at any time after the attach)."""
    def history(n: int, first_t: float, dropped: int) -> dict:
        return {"samples": [{"t": first_t + 0.1 * i} for i in range(n)], "capacity": 10, "period_s": 0.1,
                "dropped": dropped}

    assert runner._cut(history(10, 5.0, dropped=40)) == (": the last 1.0 s of the run, all the daemon keeps "
                                                          "(history_periods 10)")
    assert runner._cut(history(10, 0.06, dropped=1)) == (": the last 1.0 s of the run, all the daemon keeps "
                                                          "(history_periods 10)"), "one dropped is enough"
    assert runner._cut(history(10, 5.0, dropped=0)) == "", "the ring holds the run from its first period"
    assert runner._cut(history(9, 0.01, dropped=0)) == ""


# -- where run --json's line starts ---------------------------------------------------

@pytest.mark.parametrize("mode, before, cmd_wrote, start", [
    ("w", "", "no newline", "\n"),
    ("w", "", "line\n", ""),
    ("w", "", "", ""),
    ("a", "kept\n", "more", "\n"),
    ("a", "kept", "", "\n"),
    ("a", "kept\n", "", ""),
    ("w+", "", "x", "\n"),
], ids=["write-only, mid-line", "write-only, line ended", "write-only, empty", "append, mid-line",
        "append, kept mid-line", "append, kept line ended", "read-write, mid-line"])
def test_the_json_summary_starts_a_line_only_when_cmd_left_one_open(tmp_path, monkeypatch, mode, before, cmd_wrote,
                                                                   start):
    """On a regular file (CMD's stdout and run's), the byte before where the summary
    lands is read back: through /proc/self/fd for a file opened write-only, at the
    end in append mode."""
    out = tmp_path / "out"
    out.write_text(before)
    with open(out, mode) as f:
        os.write(f.fileno(), cmd_wrote.encode())  # CMD writes to the same open file
        monkeypatch.setattr(sys, "stdout", f)
        assert runner._new_line(summary_said=True) == start


def test_the_byte_before_the_write_position_is_where_the_next_write_lands(tmp_path):
    """Not the file's end: a write-only file whose position is moved back is read at
    the position; at its start there is no byte before. In append mode it is the
    end, wherever the position is (another writer appended since)."""
    out = tmp_path / "out"
    out.write_text("ab\ncd")
    fd = os.open(out, os.O_WRONLY)
    try:
        assert runner._byte_before_write(fd) == b""
        os.lseek(fd, 3, os.SEEK_SET)
        assert runner._byte_before_write(fd) == b"\n"
        os.lseek(fd, 0, os.SEEK_END)
        assert runner._byte_before_write(fd) == b"d"
    finally:
        os.close(fd)
    fd = os.open(out, os.O_WRONLY | os.O_APPEND)  # position 0; its next write lands at the end
    try:
        with open(out, "a") as another:  # appended through another open file: the end moved, not fd's position
            another.write("\nef")
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0 and runner._byte_before_write(fd) == b"f"
    finally:
        os.close(fd)


def test_the_json_summary_starts_a_line_on_a_pipe_and_not_without_stdout(monkeypatch):
    """Where nothing can be read back (a pipe): always a new line; with stdout closed
    (sys.stdout None) nothing, for nothing is written."""
    r, w = os.pipe()
    with os.fdopen(w, "w") as pipe:
        monkeypatch.setattr(sys, "stdout", pipe)
        assert runner._new_line(summary_said=True) == "\n"
    os.close(r)
    monkeypatch.setattr(sys, "stdout", None)
    assert runner._new_line(summary_said=True) == ""


def test_on_the_terminal_that_just_showed_the_summary_no_line_is_added():
    """stdout and stderr on one terminal: the summary line on stderr just ended the
    line, so nothing is added; stdout on another terminal than stderr, or no summary
    said, gets a new line. (In a child: this process's stderr is pytest's.)"""
    code = textwrap.dedent("""
        import os, pty, sys
        from parlschedctl import runner
        said = [runner._new_line(summary_said=True), runner._new_line(summary_said=False)]
        main, other = pty.openpty()
        os.dup2(other, 1)
        said.append(runner._new_line(summary_said=True))
        os.write(int(sys.argv[1]), repr(said).encode())
    """)
    main, terminal = pty.openpty()
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", code, str(w)], stdin=subprocess.DEVNULL, stdout=terminal,
                            stderr=terminal, pass_fds=(w,), env={**os.environ, "PYTHONPATH": str(REPO)})
    os.close(terminal)
    os.close(w)
    with os.fdopen(r) as result:
        said = result.read()
    proc.wait(timeout=30)
    os.close(main)
    assert said.strip() == repr(["", "\n", "\n"]), said


# -- saying, and terminals ------------------------------------------------------------

def test_a_message_that_cannot_be_written_is_lost_not_raised(monkeypatch, capsys):
    """_say on stderr, or with err=False on stdout; a full disk (/dev/full, a real
    ENOSPC) loses the message rather than turning CMD's exit code into run's failure."""
    runner._say("to stderr")
    runner._say("to stdout", err=False)
    runner._say("no newline", nl=False)
    said = capsys.readouterr()
    assert (said.err, said.out) == ("to stderr\nno newline", "to stdout\n")
    full = open("/dev/full", "w")
    monkeypatch.setattr(sys, "stderr", full)
    runner._say("lost")
    monkeypatch.setattr(sys, "stdout", full)
    runner._say("lost too", err=False)
    monkeypatch.undo()
    with pytest.raises(OSError):  # what _say could not write is still in the buffer, and still cannot be
        full.close()


def test_only_a_terminal_is_a_terminal(tmp_path):
    """Where run draws its live line: a terminal; not a file, a pipe, nor no stream
    at all (stderr closed, ``2>&-``: sys.stderr is None)."""
    main, other = pty.openpty()
    try:
        with open(other, "w", closefd=False) as tty:
            assert is_terminal(tty)
    finally:
        os.close(main)
        os.close(other)
    with open(tmp_path / "f", "w") as f:
        assert not is_terminal(f)
    assert not is_terminal(None)


def test_a_run_in_the_background_of_its_terminal_is_not_in_its_foreground():
    """run -- CMD & drew its live line over the shell's prompt and what was being typed:
    it is drawn only from the foreground process group of run's controlling terminal.
    On another terminal (run started with setsid) it cannot tell: not drawn either. (In
    a child, which makes a pty its controlling terminal.)"""
    code = textwrap.dedent("""
        import fcntl, os, sys, termios
        from parlschedctl import runner
        other_main, other = os.openpty()
        said = [runner._in_foreground(os.fdopen(other, "w"))]  # not a controlling terminal of ours
        main, terminal = os.openpty()
        os.setsid()
        fcntl.ioctl(terminal, termios.TIOCSCTTY, 0)
        tty = os.fdopen(terminal, "w")
        said.append(runner._in_foreground(tty))
        r, w = os.pipe()
        if os.fork() == 0:
            os.setpgid(0, 0)  # a job put in the background: another group than the terminal's
            os.write(w, repr(runner._in_foreground(tty)).encode())
            os._exit(0)
        os.close(w)
        said.append(eval(os.read(r, 100)))
        os.wait()
        print(said)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.stdout.strip() == "[False, True, False]", r.stderr


# -- with a daemon --------------------------------------------------------------------

@needs_root
def test_a_figure_is_drawn_from_the_daemons_history_or_the_failure_said(tmp_path, workload):
    """draw: the history of a target, written to a PNG and said with its periods (and,
    the ring full, that it is the last part of the run, unless ``last`` asked for
    less); a figure that cannot be written is PlotFailed in check_writable's words, a
    suffix of no format PlotFailed "cannot plot: ..."; a pid the daemon does not know
    is its refusal."""
    d = start_daemon(tmp_path, "period_s: 0.05\ndomain_period_s: 0.5\nhistory_periods: 5\n" + PINNING)
    try:
        w = workload(2)
        d.request("attach", pid=w.pid)
        wait_for(lambda: d.request("history", pid=w.pid)["dropped"] > 0)  # the ring full, its start dropped
        out = tmp_path / "w.png"
        said = runner.draw(d.socket, w.pid, str(out))
        assert re.fullmatch(rf"wrote {out} \(5 periods: the last [\d.]+ s of the run, all the daemon keeps "
                            r"\(history_periods 5\)\)", said), said
        assert out.read_bytes()[:4] == b"\x89PNG"
        assert runner.draw(d.socket, w.pid, str(out), last=2) == f"wrote {out} (2 periods)"
        assert runner.draw(d.socket, w.pid, str(out), last=5) == f"wrote {out} (5 periods)", "what was asked for"
        with pytest.raises(PlotFailed, match=r"^/sys/x\.png: cannot write: permission denied$"):
            runner.draw(d.socket, w.pid, "/sys/x.png")
        with pytest.raises(PlotFailed, match=r"^cannot plot: .*cannot write a \.nope figure"):
            runner.draw(d.socket, w.pid, str(tmp_path / "w.nope"))
        with pytest.raises(client.Refused):
            runner.draw(d.socket, 2**22 + 12345, str(out))
    finally:
        d.stop()


@needs_root
def test_no_figure_of_a_run_not_watched_to_its_end_and_why(daemon, tmp_path, capsys):
    """_plot_run draws nothing when CMD was never managed, detached, or outlived the
    daemon, and says which; a figure it cannot draw is said in a line, not raised; one
    drawn is named in the summary (end.plot), "since the daemon's restart" after one."""
    out = tmp_path / "run.png"
    for watched, why in ((Watched.NEVER_ATTACHED, "job was never managed"),
                         (Watched.DETACHED, "job was detached before its end, and its history with it"),
                         (Watched.DAEMON_STOPPED, "the daemon stopped before job's end")):
        end = RunEnd(("job",), False, pid=1, watched=watched)
        runner._plot_run(daemon.socket, end, str(out))
        assert capsys.readouterr().err == f"parlschedctl: no plot: {why}\n" and end.plot is None
    end = RunEnd(("job",), False, pid=2**22 + 12345)
    runner._plot_run(daemon.socket, end, str(out))
    assert capsys.readouterr().err.startswith("parlschedctl: cannot plot: ") and end.plot is None
    gone = subprocess.Popen(["sleep", "0.5"])
    daemon.request("attach", pid=gone.pid)
    gone.wait()
    end = RunEnd(("sleep",), False, pid=gone.pid, restarts=1)
    runner._plot_run(daemon.socket, end, str(out))
    said = capsys.readouterr().err
    assert re.fullmatch(rf"parlschedctl: wrote {out} \(\d+ periods\) since the daemon's restart\n", said), said
    assert end.plot == str(out)
    runner._plot_run(daemon.socket + ".none", RunEnd(("job",), False, pid=1), str(out))
    assert capsys.readouterr().err.startswith("parlschedctl: cannot plot: ")
    end = RunEnd(("sleep",), False, pid=gone.pid)
    runner._plot_run(daemon.socket, end, "/sys/x.png")
    assert capsys.readouterr().err == "parlschedctl: /sys/x.png: cannot write: permission denied\n" and end.plot is None


@needs_root
@pytest.mark.timeout(60)  # a _back that waited on after CMD's end would never return
def test_waiting_for_the_daemon_ends_when_it_manages_cmd_again_or_cmd_ends(tmp_path, kill_after):
    """_back: True as soon as a daemon manages CMD; False when one answers without it
    (a stop forgets) or when CMD ends while no daemon answers."""
    d = start_daemon(tmp_path)
    try:
        cmd = kill_after(subprocess.Popen(["sleep", "30"]))
        assert runner._back(d.socket, cmd) is False, "not attached"
        d.request("attach", pid=cmd.pid)
        assert runner._back(d.socket, cmd) is True
    finally:
        d.stop()
    short = kill_after(subprocess.Popen(["sleep", "0.3"]))
    started = time.monotonic()
    assert runner._back(d.socket, short) is False
    assert short.poll() is not None and time.monotonic() - started >= 0.25, "it waited for CMD's end"


# -- run ------------------------------------------------------------------------------

def test_run_raises_an_absent_daemon_before_cmd_starts(tmp_path, own_signals):
    """No daemon: client.Unreachable, and CMD never ran."""
    ran = tmp_path / "ran"
    with pytest.raises(client.Unreachable):
        runner.run(str(tmp_path / "none.sock"), False, False, None, ("touch", str(ran)))
    assert not ran.exists()


@needs_root
def test_run_of_a_command_that_cannot_start_exits_127_or_126_with_json(daemon, tmp_path, own_signals, capsys):
    """CMD not found: exit 127, said on stderr, and --json's object alone on stdout
    (nothing of CMD's came before it); CMD not runnable: 126."""
    with pytest.raises(SystemExit) as e:
        runner.run(daemon.socket, False, True, None, (str(tmp_path / "none"),))
    said = capsys.readouterr()
    assert e.value.code == 127 and said.err == f"parlschedctl: cannot start {tmp_path / 'none'}: No such file or directory\n"
    facts = json.loads(said.out)
    assert said.out.count("\n") == 1 and facts["pid"] is None and facts["watched"] == "never_attached"
    with pytest.raises(SystemExit) as e:
        runner.run(daemon.socket, False, False, None, (str(tmp_path),))
    assert e.value.code == 126 and "it is a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # exec of "" is EACCES (each PATH directory tried): env(1) says 127
        runner.run(daemon.socket, False, False, None, ("",))
    assert e.value.code == 127 and capsys.readouterr().err == "parlschedctl: cannot start '': no command has an empty name\n"


@needs_root
def test_run_attaches_cmd_with_its_descendants_and_exits_with_its_code(daemon, tmp_path, own_signals, capfd):
    """run: CMD attached with its descendants (a child's thread managed as CMD's), its
    threads counted, its code run's exit; the keyboard's signals are run's to handle
    once CMD is started (passed on only to a CMD in a group of its own), and CMD does
    not inherit them ignored."""
    report = tmp_path / "ignored"
    code = ("import os,subprocess,sys,time; open(sys.argv[1],'w').write(next(l for l in open('/proc/self/status') "
            "if l.startswith('SigIgn'))); c = subprocess.Popen(['sleep','1']); time.sleep(1.2); c.wait(); sys.exit(4)")
    with pytest.raises(SystemExit) as e:
        runner.run(daemon.socket, False, True, None, (sys.executable, "-c", code, str(report)))
    assert e.value.code == 4
    said = capfd.readouterr()  # stdout a file, as run's is: capsys's has no descriptor
    facts = json.loads(said.out.splitlines()[-1])
    assert facts["exit_code"] == 4 and facts["watched"] == "to_the_end" and facts["threads_managed"] >= 2, facts
    assert re.search(r"exited 4 after [\d.]+ s; managed \d+ threads", said.err), said.err
    assert all(getattr(signal.getsignal(sig), "__name__", None) == "_on_keyboard" for sig in FROM_KEYBOARD)
    mask = int(report.read_text().split()[1], 16)
    assert not any(mask >> (sig - 1) & 1 for sig in FROM_KEYBOARD), "CMD started ignoring the keyboard's signals"


@needs_root
def test_run_of_a_cmd_killed_by_a_signal_exits_as_a_shell_says_it(daemon, own_signals, capfd):
    """CMD killed by SIGTERM (its own kill): run exits 143 and its summary names the
    signal, in the line and in --json."""
    with pytest.raises(SystemExit) as e:
        runner.run(daemon.socket, True, True, None, ("sh", "-c", "sleep 0.3; kill -TERM $$"))
    said = capfd.readouterr()
    assert e.value.code == 143 and re.search(r"sh was killed by SIGTERM after [\d.]+ s; observed \d+ threads?\n",
                                             said.err), said.err
    facts = json.loads(said.out.splitlines()[-1])
    assert (facts["signal"], facts["exit_code"], facts["mode"]) == ("SIGTERM", 143, "observe")


@needs_root
def test_threads_cmd_made_after_runs_last_poll_are_counted(daemon, tmp_path):
    """run polls status every 0.2 s: threads CMD starts after the last poll, and that
    end with it, were not in the summary's count. Here deterministically: run (its own
    process, calling ``run``) is stopped while CMD starts 5 threads and exits, then
    continued; the count is the daemon's, whose history has CMD's 6 threads."""
    go = tmp_path / "go"
    cmd = ("import os,sys,threading,time\n"
           "for _ in range(3000):\n"  # bounded: CMD ends by itself if the test fails before go
           "    if os.path.exists(sys.argv[1]): break\n"
           "    time.sleep(0.01)\n"
           "ts = [threading.Thread(target=time.sleep, args=(1.0,)) for _ in range(5)]\n"  # 20 periods: seen under load
           "[t.start() for t in ts]; [t.join() for t in ts]\n")
    code = f"import sys; from parlschedctl.runner import run; run({daemon.socket!r}, False, True, None, tuple(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, sys.executable, "-c", cmd, str(go)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        pid = wait_for(lambda: [t["pid"] for t in daemon.request("status")["targets"]])[0]
        proc.send_signal(signal.SIGSTOP)  # run polls no more
        go.touch()
        wait_for(lambda: not daemon.request("status")["targets"], timeout=10)  # CMD ended (a zombie run cannot reap)
        proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    history = daemon.request("history", pid=pid)
    in_history = {tid for sample in history["samples"] for tid in sample["tids"]}
    assert len(in_history) == 6, history
    facts = json.loads(out.splitlines()[-1])
    assert facts["threads_managed"] == 6, (facts, err)
    assert "managed 6 threads" in err, err


@needs_root
def test_only_the_history_after_runs_last_poll_is_read(daemon, workload):
    """_threads_after: the tids in the samples newer than the view's newest (its
    ``history_t``, on the daemon's clock): all of them for a view of no sample yet,
    or of another history (a daemon restarted since the view: its history starts at
    its attach again), none after a view newer than every sample, a thread started
    since the view among them; the samples before are not read, for their threads are
    in the daemon's count at that view already. A view without history_t (an older
    daemon's) reads none."""
    w = workload(2)
    polled = time.monotonic()
    attached = daemon.request("attach", pid=w.pid)["target"]
    assert attached["history_t"] is None, "no sample yet"
    wait_for(lambda: len(daemon.request("history", pid=w.pid)["samples"]) >= 3)
    started = attached["history_started"]
    assert runner._threads_after(daemon.socket, w.pid, attached, polled, None) == set(w.all_tids())
    assert runner._threads_after(daemon.socket, w.pid, {"history_t": 1e9, "history_started": started}, polled,
                                 0.05) == set()
    assert runner._threads_after(daemon.socket, w.pid, {"history_t": 1e9, "history_started": started - 60}, polled,
                                 0.05) == set(w.all_tids()), "a view of the daemon before a restart"
    assert runner._threads_after(daemon.socket, w.pid, {}, polled, 0.05) == set(), "an older daemon's view"
    polled = time.monotonic()
    view = daemon.request("status", pid=w.pid)["targets"][0]
    samples = daemon.request("history", pid=w.pid)["samples"]
    assert view["history_t"] in {s["t"] for s in samples}, "the time of a sample the view shows"
    new = (set(w.command("spawn")) - set(w.tids)) or {max(w.tids)}
    wait_for(lambda: new <= {t for s in daemon.request("history", pid=w.pid)["samples"] for t in s["tids"]})
    assert new <= runner._threads_after(daemon.socket, w.pid, view, polled, 0.05)
    assert runner._threads_after(daemon.socket + ".none", w.pid, view, polled, 0.05) == set(), "no daemon: none"


@needs_root
def test_threads_that_came_and_went_between_polls_are_counted_once(daemon, own_signals, capfd):
    """Waves of short-lived threads (a thread per task, an OpenMP team made afresh),
    most of them seen at no poll (run said "managed 72 threads" where the daemon had
    managed 150, counting the tids of its polls): the count is the
    daemon's (threads_adopted) and the threads made after the last poll, each once:
    as many as the daemon's history has, not those of the samples before the last
    poll a second time."""
    code = ("import threading,time\n"
            "for _ in range(8):\n"
            "    ts = [threading.Thread(target=time.sleep, args=(0.12,)) for _ in range(3)]\n"
            "    [t.start() for t in ts]; [t.join() for t in ts]; time.sleep(0.05)\n")
    with pytest.raises(SystemExit) as e:
        runner.run(daemon.socket, False, True, None, (sys.executable, "-c", code))
    said = capfd.readouterr()
    assert e.value.code == 0, said.err
    facts = json.loads(said.out.splitlines()[-1])
    history = daemon.request("history", pid=facts["pid"])
    in_history = {tid for sample in history["samples"] for tid in sample["tids"]}
    # most of the 24 (threads of 2.4 periods: a loaded VM's late tick may miss a wave or two)
    assert len(in_history) >= 15, in_history
    assert facts["threads_managed"] == len(in_history), (facts["threads_managed"], len(in_history))
    assert f"managed {len(in_history)} threads" in said.err, said.err
