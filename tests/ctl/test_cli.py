"""parlschedctl as a user runs it: a real subprocess against a real daemon."""

from __future__ import annotations

import contextlib
import fcntl
import grp
import importlib
import json
import os
import pty
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
import termios
import threading

import pytest

from parlschedd.host import cgroups, procfs
from parlschedd.host.base import CounterSource
from parlschedd.host.perf import detect_source
from parlschedd import __version__
from parlschedd.build import PACKAGE, build_id
from tests.conftest import NOBODY, PINNING, as_user, in_child_as, needs_root, read_terminal, start_daemon, wait_for
from tests.reliability.helpers import sleepy

CTL = [sys.executable, "-m", "parlschedctl"]  # the installed command's entry point


def ctl(*args: str, socket: str | None = None, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, **kw.pop("env", {})}
    if socket:
        env["PARLSCHED_SOCKET"] = socket
    return subprocess.run([*CTL, *args], capture_output=True, text=True, env=env, timeout=60, **kw)


def test_unreachable_daemon_exits_3(tmp_path):
    r = ctl("status", socket=str(tmp_path / "none.sock"))
    assert r.returncode == 3 and "not running" in r.stderr


@pytest.mark.parametrize("option, value", [("--interval", "nan"), ("--interval", "inf"), ("--interval", "1e300"),
                                           ("--reconnect-timeout", "nan"), ("--reconnect-timeout", "inf")])
def test_top_takes_a_finite_number_of_seconds(tmp_path, option, value):
    """--interval nan passed FloatRange's bounds and ended in a traceback from sleep()
    after the first frame; --reconnect-timeout nan never gave up a lost daemon."""
    r = ctl("top", option, value, socket=str(tmp_path / "none.sock"))
    assert r.returncode == 2 and f"Invalid value for '{option}'" in r.stderr and "Traceback" not in r.stderr


def test_plot_last_beyond_what_the_protocol_carries_is_a_usage_error(tmp_path):
    """--last 99999999999999999999 went to the daemon, whose bad_request exited 1."""
    r = ctl("plot", "1", "--out", str(tmp_path / "p.png"), "--last", str(2**31), socket=str(tmp_path / "none.sock"))
    assert r.returncode == 2 and "Invalid value for '--last'" in r.stderr


def test_output_that_cannot_be_written_is_said_in_a_line(tmp_path):
    """stdout on a full disk (/dev/full): config check --json, and model predict --json,
    whose error object went to the same stdout, ended in tracebacks."""
    from tests.energy.conftest import CLUSTER_YAML, MEASUREMENTS_CSV

    params = tmp_path / "p.json"
    assert ctl("model", "fit", "--cluster", str(CLUSTER_YAML), "--data", str(MEASUREMENTS_CSV), "--generations", "5",
               "--seed", "1", "--out", str(params)).returncode == 0
    good = tmp_path / "good.yaml"
    good.write_text("period_s: 0.1\n")
    good.chmod(0o600)
    with open("/dev/full", "w") as full:
        for args, said in ((["config", "check", str(good), "--json"], "parlschedctl: cannot write the output"),
                           (["config", "check", str(good)], "parlschedctl: cannot write the output"),
                           (["model", "predict", "--params", str(params), "--json"], "parlschedctl model: cannot write the output"),
                           (["model", "predict", "--params", str(params)], "parlschedctl model: cannot write the output")):
            r = subprocess.run([*CTL, *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
            assert (r.returncode, r.stderr) == (1, f"{said}: No space left on device\n"), args


@needs_root
def test_a_refused_socket_names_its_own_group(tmp_path, open_dir):
    """The hint always asked "are you in the parlsched group?", also of a socket whose
    group is root's (socket.group: null), which no group membership opens."""
    d = start_daemon(tmp_path, run=open_dir)
    try:
        said = as_user(NOBODY, d.socket, "ping")["unreachable"]
        assert f"no permission to use {d.socket} (mode 0660, group root: only root may use it; set socket.group" in said
        os.chown(d.socket, 0, grp.getgrnam("daemon").gr_gid)
        said = as_user(NOBODY, d.socket, "ping")["unreachable"]
        assert "(mode 0660, group daemon: are you in the daemon group? (usermod -aG daemon USER" in said, said
        assert "parlsched" not in said.replace(d.socket, "")
    finally:
        d.stop()


@needs_root
def test_a_socket_path_that_is_no_socket_the_user_may_not_write_says_what_it_is(open_dir):
    """PARLSCHED_SOCKET naming a root's file or directory a user may not write (connect
    fails EACCES there, not ECONNREFUSED as for root) said "no permission to use PATH
    (mode 0644, group root: only root may use it; set socket.group ...)", as of the
    daemon's socket; root was told "PATH is a regular file, not a socket"."""
    (open_dir / "a-file").write_text("")
    (open_dir / "a-file").chmod(0o644)
    for path, kind in ((open_dir, "a directory"), (open_dir / "a-file", "a regular file")):
        said = as_user(NOBODY, str(path), "ping")["unreachable"]
        assert said.startswith(f"{path} is {kind}, not a socket; give the daemon's socket"), said


def test_the_default_socket_missing_says_how_to_name_another():
    """make run's daemon listens on ./run/parlschedd.sock: forgetting PARLSCHED_SOCKET
    said only that the daemon was not running."""
    if os.path.exists("/run/parlsched/parlschedd.sock"):
        pytest.skip("a daemon listens on the default socket here")
    env = {k: v for k, v in os.environ.items() if k != "PARLSCHED_SOCKET"}
    r = subprocess.run([*CTL, "status"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 3 and "--socket or PARLSCHED_SOCKET" in r.stderr


def test_the_default_socket_missing_names_the_socket_make_run_listens_on():
    """The hint said "make run: ./run/parlschedd.sock", where make run has listened on
    /run/parlsched-dev/parlschedd.sock since 59575f7: PARLSCHED_SOCKET set as told
    found no daemon either."""
    if os.path.exists("/run/parlsched/parlschedd.sock"):
        pytest.skip("a daemon listens on the default socket here")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(repo, "Makefile")) as makefile:
        rundir = re.search(r"^RUNDIR := (\S+)$", makefile.read(), flags=re.M).group(1)
    env = {k: v for k, v in os.environ.items() if k != "PARLSCHED_SOCKET"}
    r = subprocess.run([*CTL, "status"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 3 and f"(make run: {rundir}/parlschedd.sock)" in r.stderr, r.stderr


def test_a_socket_that_is_no_daemons_exits_3_with_a_message(tmp_path):
    """A path through a file, one too long for a socket address, and a listener that
    is not parlschedd: each a message and exit 3, not a traceback."""
    (tmp_path / "a-file").write_text("")
    for path in (tmp_path / "a-file" / "x.sock", tmp_path / ("x" * 120 + ".sock")):
        r = ctl("status", socket=str(path))
        assert r.returncode == 3 and f"cannot connect to {path}: " in r.stderr and "Traceback" not in r.stderr
    for path, kind in ((tmp_path, "a directory"), (tmp_path / "a-file", "a regular file")):
        r = ctl("status", socket=str(path))
        assert r.returncode == 3 and f"{path} is {kind}, not a socket" in r.stderr  # it said "not running"
    other = tmp_path / "other.sock"
    for answer in (b"hello\n", b"[1]\n", b'{"ok": "yes"}\n'):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(str(other))
            listener.listen(1)
            server = threading.Thread(target=_answer_once, args=(listener, answer))
            server.start()
            r = ctl("status", socket=str(other))
            server.join()
        other.unlink()
        assert r.returncode == 3 and f"what listens on {other} is not parlschedd" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    r = ctl("--socket", "", "status")
    assert r.returncode == 2 and "--socket" in r.stderr


@contextlib.contextmanager
def another_daemon(path: Path, version: str, replies: dict[str, dict], build: str | None = None) -> Iterator[None]:
    """A stand-in for a parlschedd of another version (one cannot be installed here
    beside this one): on each connection, one request line answered from ``replies``
    by its cmd, ping with ``version`` and ``build``."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # closed: the test is over
                return
            with conn:
                cmd = json.loads(conn.makefile().readline())["cmd"]
                reply = {"version": version, "build": build} if cmd == "ping" else replies[cmd]
                conn.sendall(json.dumps({"ok": True, **reply}).encode() + b"\n")

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield
    finally:
        listener.close()


def test_a_reply_of_a_daemon_of_another_version_is_said_so(tmp_path):
    """A daemon not restarted after an upgrade may answer without a field this
    parlschedctl reads: attach ended in a KeyError's traceback (review). It says which
    versions run and what to do; from a daemon of this version such a reply is a bug,
    and its traceback is kept."""
    sock = tmp_path / "old.sock"
    with another_daemon(sock, "0.0.1", {"attach": {}, "status": {"targets": []}}):
        for args in (("attach", "4194303"), ("status",)):
            r = ctl(*args, socket=str(sock))
            assert r.returncode == 1 and r.stderr == (
                f"parlschedctl: the daemon runs parlschedd 0.0.1 and this parlschedctl is {__version__}: its reply "
                "lacks what this one reads; restart it (systemctl restart parlschedd)\n"), r.stderr
    sock.unlink()
    with another_daemon(sock, __version__, {"attach": {}}):
        r = ctl("attach", "4194303", socket=str(sock))
        assert r.returncode == 1 and "KeyError: 'target'" in r.stderr


def test_a_reply_of_other_code_of_this_version_is_said_so(tmp_path):
    """The same for a daemon of this version running other code (an install of newer
    code, version unchanged, that it was not restarted after): it was the traceback
    of a bug."""
    sock = tmp_path / "old.sock"
    with another_daemon(sock, __version__, {"attach": {}}, build="0123456789ab"):
        r = ctl("attach", "4194303", socket=str(sock))
        assert r.returncode == 1 and r.stderr == (
            f"parlschedctl: the daemon runs other code (build 0123456789ab) than this parlschedctl's (build {build_id()}): "
            "its reply lacks what this one reads; restart it (systemctl restart parlschedd)\n"), r.stderr


@needs_root
def test_status_says_the_daemon_runs_other_code_of_this_version(tmp_path):
    """The README says that after a ``make install`` of newer code status tells the
    running daemon's old code apart; it compared version strings alone, 0.1.0 in every
    commit, so it never did. A real daemon started from a copy of the package with one
    line changed (the code of an earlier install) is told apart by its build."""
    old = tmp_path / "old"
    shutil.copytree(PACKAGE, old / "parlschedd", ignore=shutil.ignore_patterns("__pycache__"))
    with open(old / "parlschedd" / "daemon" / "engine.py", "a") as f:
        f.write("# the code of an earlier install\n")
    (tmp_path / "d").mkdir()
    d = start_daemon(tmp_path / "d", prefix=("env", "-C", str(old)))  # python -m finds the package in its cwd first
    same = start_daemon(tmp_path)
    try:
        theirs = build_id(old / "parlschedd")
        assert json.loads(ctl("status", "--json", socket=d.socket).stdout)["daemon"]["build"] == theirs != build_id()
        r = ctl("status", socket=d.socket)
        assert r.returncode == 0 and (f"warning: the daemon runs other code (build {theirs}) than this parlschedctl's "
                                      f"(build {build_id()}): if it was installed since the daemon started, restart "
                                      "it (systemctl restart parlschedd) to run it") in r.stdout, r.stdout
        assert "the daemon runs" not in ctl("status", socket=same.socket).stdout
    finally:
        d.stop()
        same.stop()


def _answer_once(listener: socket.socket, answer: bytes) -> None:
    conn, _ = listener.accept()
    with conn:
        conn.recv(4096)
        conn.sendall(answer)


def test_usage_error_exits_2(tmp_path):
    r = ctl("attach", "notapid")
    assert r.returncode == 2 and "'notapid' is not a valid process id" in r.stderr  # not click's "integer range"
    assert ctl("top", "--interval", "-1").returncode == 2
    assert ctl("attach", "99999999999").returncode == 2  # no kernel hands out such a pid
    assert ctl("attach", "4194304").returncode == 2  # PID_MAX_LIMIT itself: pids stay below it
    assert ctl("attach", "4194303", socket=str(tmp_path / "none.sock")).returncode == 3  # a pid: asks the daemon
    r = ctl("run", "--jsn", "--", "true", socket=str(tmp_path / "none.sock"))
    assert r.returncode == 2 and "No such option '--jsn'" in r.stderr  # not a program named --jsn


@pytest.mark.parametrize("args", [
    ("status", "--json", "--bogus"), ("status", "--bogus", "--json"),  # --json before or after the word in error
    ("attach", "--json", "notapid"), ("attach", "notapid", "--json"),
    ("--json", "status"),  # --json before the command: click's "No such option", still asked for
    ("stauts", "--json"),  # no such command
    ("run", "--plot", "x.nosuchformat", "--json", "--", "true"),
    ("model", "predict", "--json", "--params", "p.json", "--nsp", "5-2"),  # a model command's (parlschedctl/model.py)
    ("model", "fit", "--bogus", "--json"),
])
def test_a_usage_error_under_json_is_a_json_error_on_stdout(tmp_path, args):
    """A usage error printed nothing on stdout, --json or not, where a refusal prints its
    error object: a script reading stdout had nothing to parse. Exit 2 and click's
    message on stderr as before; on stdout one line, the error with code "usage"."""
    r = ctl(*args, socket=str(tmp_path / "none.sock"), cwd=tmp_path)
    assert r.returncode == 2 and "Error: " in r.stderr, (args, r.stderr)
    assert len(r.stdout.splitlines()) == 1, (args, r.stdout)
    error = json.loads(r.stdout)["error"]
    assert error["code"] == "usage" and error["message"] and error["message"] in r.stderr, (args, error)


@pytest.mark.parametrize("args", [
    ("attach", "notapid"),  # no --json: stdout stays empty, as before
    ("status", "--", "--json"),  # after --: an argument, not the option
    ("attach", "--threads", "--json", "notapid"),  # --threads' value
    ("run", "--plot", "x.nosuchformat", "sh", "-c", "echo --json"),  # CMD's
])
def test_a_usage_error_without_json_prints_nothing_on_stdout(tmp_path, args):
    r = ctl(*args, socket=str(tmp_path / "none.sock"), cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "" and "Error: " in r.stderr, (args, r.stdout, r.stderr)


def test_daemon_commands_do_not_load_the_models_libraries(tmp_path):
    """numpy and scipy (the model commands') took most of a second of every status."""
    probe = ("import atexit, sys\n"
             "atexit.register(lambda: print(sorted(m for m in ('numpy', 'scipy', 'matplotlib') if m in sys.modules)))\n"
             "from parlschedctl.cli import main\n"
             f"sys.argv = ['parlschedctl', '--socket', {str(tmp_path / 'none.sock')!r}, 'status']\n"
             "main()\n")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3 and r.stdout.strip() == "[]"
    assert "model" in ctl("--help").stdout and ctl("model", "--help").returncode == 0


def test_python_m_parlschedctl_is_the_cli():
    r = subprocess.run([sys.executable, "-m", "parlschedctl", "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("parlschedctl")


# Loaded by every Python of the test through PYTHONPATH: SIGINT to itself when the CLI
# imports click, as a Ctrl-C pressed while parlschedctl starts lands.
INTERRUPT_AT_CLICK = """
import importlib.abc, os, signal, sys
class Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "click":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Interrupt())
"""


@pytest.mark.parametrize("as_json", [False, True])
def test_a_ctrl_c_while_parlschedctl_loads_is_no_traceback(tmp_path, as_json):
    """A Ctrl-C in the third of a second parlschedctl takes to load printed a
    KeyboardInterrupt traceback of whichever import it fell in (review); it is held
    until the CLI has loaded and said as an interrupt while the model commands load
    is, --json's error object too. The interrupt is sent by the process itself at the
    import of click, with SIGINT's default action (whatever this test inherited)."""
    (tmp_path / "sitecustomize.py").write_text(INTERRUPT_AT_CLICK)
    r = ctl("status", *(["--json"] if as_json else []), socket=str(tmp_path / "none.sock"),
            env={"PYTHONPATH": str(tmp_path)}, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert r.returncode == 1 and r.stderr == "parlschedctl: interrupted\n", r.stderr
    assert (json.loads(r.stdout) if as_json else r.stdout) == \
        ({"error": {"code": "interrupted", "message": "interrupted"}} if as_json else "")


def test_a_ctrl_c_while_parlschedctl_loads_is_ignored_where_sigint_is(tmp_path):
    """Started with SIGINT ignored (a background job of a script), parlschedctl goes on
    as Python's own handler would."""
    (tmp_path / "sitecustomize.py").write_text(INTERRUPT_AT_CLICK)
    r = ctl("status", socket=str(tmp_path / "none.sock"), env={"PYTHONPATH": str(tmp_path)},
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert r.returncode == 3 and "the daemon is not running" in r.stderr, r.stderr


def _has_a_socket(pid: int) -> bool:
    """Whether process ``pid`` has a socket open (parlschedctl: its connection to the daemon)."""
    links = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed since the listing
            links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return any(link.startswith("socket:") for link in links)


@needs_root
@pytest.mark.parametrize("command", ["status", "attach"])
def test_a_ctrl_c_while_waiting_for_the_daemon_is_said_as_interrupted(daemon, kill_after, command):
    """A Ctrl-C while a command waits for the daemon's reply (a daemon stopped, which
    it waits 10 s for) was click's "Aborted!", and --json had nothing on stdout: it is
    said as a Ctrl-C while the code loads is, "interrupted", with the error object (a
    review). The daemon, stopped (SIGSTOP) until the interrupt, may still serve the
    request it finds then: the attach is of a sleeper of the test's own."""
    words = [command] if command == "status" else [command, str(kill_after(sleepy(1)).pid)]
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        proc = subprocess.Popen([*CTL, *words, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PARLSCHED_SOCKET": daemon.socket},
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        wait_for(lambda: _has_a_socket(proc.pid))  # past the import (whose Ctrl-C says the same), in the request
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    assert proc.returncode == 1 and err == "parlschedctl: interrupted\n", err
    assert json.loads(out) == {"error": {"code": "interrupted", "message": "interrupted"}}


def test_config_check(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("period_s: 0.2\n")
    r = ctl("config", "check", str(good))
    assert r.returncode == 0 and "ok" in r.stdout and not r.stderr
    rules = tmp_path / "rules.yaml"  # a cgroup this host has, one it has not (yet), a v1 hierarchy it lacks
    v1_only = not any(m.is_v2 for m in cgroups.memberships(os.getpid()))
    root, absent = ("'cpu:/'", "'cpu:/no-such-unit.service'") if v1_only else ("/", "/no-such-unit.service")
    rules.write_text(f"targets:\n  - cgroup: {root}\n  - cgroup: {absent}\n  - cgroup: 'nosuchctl:/x'\n")
    r = ctl("config", "check", str(rules))
    assert r.returncode == 0 and "ok" in r.stdout
    assert "targets[0].cgroup" not in r.stderr and "targets[1].cgroup: no cgroup" in r.stderr
    assert "targets[0]: cgroup " in r.stderr and "is the whole hierarchy" in r.stderr  # there, and all of it
    assert "targets[2].cgroup: no cgroup hierarchy for nosuchctl" in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("period_s: fast\nlearning:\n  gamma: 3\n")
    r = ctl("config", "check", str(bad))
    assert r.returncode == 1
    assert f"{bad}: period_s: must be a number" in r.stderr and "learning.gamma" in r.stderr
    layout = tmp_path / "layout.yaml"
    layout.write_text("period_s: 0.1\ndomain_period_s: 0.25\ndomains: [[0], [0, 1]]\n")
    r = ctl("config", "check", str(layout))
    assert r.returncode == 1
    assert f"{layout}: domains[1]: repeats CPUs 0 of an earlier domain" in r.stderr
    assert f"{layout}: domain_period_s: must be a whole multiple of period_s (0.1), got 0.25" in r.stderr
    listed = tmp_path / "listed.yaml"
    listed.write_text("cpus: 0-4095\ndomains: ['0']\n")  # CPU lists as the kernel writes them ("0-3,8")
    r = ctl("config", "check", str(listed))
    assert r.returncode == 0 and r.stdout == f"{listed}: ok\n", r.stderr  # CPUs past this host's: a warning
    listed.write_text("cpus: '0-x'\n")
    r = ctl("config", "check", str(listed))
    assert r.returncode == 1 and f"{listed}: cpus: bad CPU number 'x' in CPU list '0-x'" in r.stderr
    some = tmp_path / "some.yaml"
    some.write_text("cpus: [0, 4094, 4095]\n")  # CPU 0 runs, the rest are dropped: said, not silent
    r = ctl("config", "check", str(some))
    assert r.returncode == 0 and "ok" in r.stdout
    assert "warning: cpus: 4094-4095 not usable on this host" in r.stderr and "parlschedd runs on 0\n" in r.stderr
    some.write_text("domains: [[0, 4094], [4095]]\n")  # as cpus: left out, said (it refused the layout)
    r = ctl("config", "check", str(some))
    assert r.returncode == 0 and r.stderr == (
        f"{some}: warning: domains[0]: 4094 not usable on this host (absent or offline); the domain keeps 0\n"
        f"{some}: warning: domains[1]: 4095 not usable on this host (absent or offline); the domain is left out\n"), r.stderr


@needs_root
def test_config_check_warns_of_a_counter_source_this_host_lacks(tmp_path):
    """An explicit ``utility: instructions`` on a host without a PMU: the daemon starts
    on task-clock and says so only in its log; config check said ok."""
    if detect_source("instructions") is CounterSource.INSTRUCTIONS:
        pytest.skip("this host counts instructions (a PMU)")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("utility: instructions\n")
    r = ctl("config", "check", str(cfg))
    assert r.returncode == 0 and "ok" in r.stdout
    assert f"{cfg}: warning: utility: instructions does not count on this host (perf:instructions: " in r.stderr
    assert "parlschedd falls back to perf:task-clock" in r.stderr or "falls back to schedstat" in r.stderr
    cfg.write_text("utility: task-clock\n")
    assert "utility" not in ctl("config", "check", str(cfg)).stderr


REFUSED_HERE = {  # valid configs this host's daemon refuses to start with, and what it says
    "cpus: [4095]\n": "cpus: no usable CPUs on this host: online, not isolated and in the config's cpus (online here: ",
    "cpus: [0]\ndomains: [[0], [1]]\n": "domains[1]: names CPUs 1, outside the config's cpus (0); add them to cpus",
    "domains: [[4094, 4095]]\n": "domains: names no CPU online on this host (online: ",
    "socket: {group: no-such-group-here}\n": "socket.group: no group 'no-such-group-here' on this host",
}


@pytest.mark.parametrize("text", REFUSED_HERE, ids=lambda text: text.strip().replace("\n", "; "))
def test_config_check_fails_for_a_config_the_daemon_refuses_here(tmp_path, text):
    """It said "valid, but parlschedd would not start with it on this host" and exited 0,
    so ``config check && systemctl restart parlschedd`` restarted into the refusal.
    --any-host checks a config meant for another machine: the same said as warnings, exit 0."""
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    r = ctl("config", "check", str(path))
    assert r.returncode == 1 and r.stdout == "", r.stdout
    assert f"{path}: {REFUSED_HERE[text]}" in r.stderr and "parlschedd refuses to start with it here" in r.stderr
    assert "--any-host" in r.stderr
    r = ctl("config", "check", "--any-host", str(path))
    assert r.returncode == 0 and f"{path}: warning: {REFUSED_HERE[text]}" in r.stderr
    assert r.stdout == f"{path}: valid, but parlschedd would not start with it on this host\n"  # not "ok"


def test_config_check_fails_for_a_socket_path_the_daemon_cannot_use(tmp_path):
    """Too long for a Unix socket (the daemon: "147 bytes, a Unix socket's path holds at
    most 107"): invalid on any host. Under a missing directory, or over a file that is
    no socket: refused here. The socket's own directory is made by the daemon: ok."""
    path = tmp_path / "cfg.yaml"
    (tmp_path / "a-file").write_text("")
    refused = {tmp_path / "missing" / "run" / "d.sock": f"no directory {tmp_path / 'missing'} (parlschedd makes",
               tmp_path / "a-file" / "d.sock": f"{tmp_path / 'a-file'} is not a directory",
               tmp_path / "a-file": f"{tmp_path / 'a-file'} exists and is not a socket"}
    for sock, said in refused.items():
        path.write_text(f"socket: {{path: '{sock}'}}\n")
        r = ctl("config", "check", str(path))
        assert r.returncode == 1 and f"{path}: socket.path: {said}" in r.stderr, r.stderr
        assert ctl("config", "check", "--any-host", str(path)).returncode == 0
    path.write_text(f"socket: {{path: '{tmp_path / 'made-by-the-daemon' / 'd.sock'}'}}\n")
    r = ctl("config", "check", str(path))
    assert r.returncode == 0 and r.stdout == f"{path}: ok\n", r.stderr
    long = "/run/" + "s" * 142
    path.write_text(f"socket: {{path: '{long}'}}\n")
    for how in ((), ("--any-host",)):
        r = ctl("config", "check", *how, str(path))
        assert r.returncode == 1 and f"{path}: socket.path: 147 bytes, a Unix socket's path holds at most 107" in r.stderr


def test_config_check_json(tmp_path):
    """A script reads the verdict from stdout: every error, refusal and warning under
    its key path; ``passed`` is the exit code's verdict (a valid file may fail here)."""
    path = tmp_path / "cfg.yaml"
    path.write_text("period_s: fast\nlearning: {gamma: 3}\n")
    r = ctl("config", "check", "--json", str(path))
    assert r.returncode == 1 and json.loads(r.stdout) == {
        "path": str(path), "passed": False, "valid": False, "any_host": False, "refused_here": [], "warnings": [],
        "errors": [{"key": "period_s", "message": "must be a number, got 'fast'"},
                   {"key": "learning.gamma", "message": "must be > 0 and <= 1, got 3"}]}
    path.write_text("cpus: [0, 4095]\nsocket: {group: no-such-group-here}\n")
    for how, code in (((), 1), (("--any-host",), 0)):
        r = ctl("config", "check", "--json", *how, str(path))
        out = json.loads(r.stdout)
        assert r.returncode == code and out["valid"] and out["any_host"] == bool(how) and out["errors"] == []
        assert out["passed"] == (code == 0)
        assert out["refused_here"] == [{"key": "socket.group", "message": "no group 'no-such-group-here' on this host; "
                                        "create it (systemd-sysusers parlsched.sysusers.conf) or set socket.group: null"}]
        assert [w["key"] for w in out["warnings"]] == ["cpus"] and "4095 not usable" in out["warnings"][0]["message"]
    path.write_text("period_s: 0.2\n")
    r = ctl("config", "check", "--json", str(path))
    assert r.returncode == 0 and json.loads(r.stdout) == {"path": str(path), "passed": True, "valid": True,
                                                          "any_host": False, "errors": [], "refused_here": [],
                                                          "warnings": []}


def test_config_check_any_host_still_fails_an_invalid_config(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("period_s: fast\nsocket: {group: no-such-group-here}\n")
    r = ctl("config", "check", "--any-host", str(path))
    assert r.returncode == 1 and f"{path}: period_s: must be a number" in r.stderr and r.stdout == ""


def test_config_check_fails_for_a_metrics_address_the_daemon_cannot_listen_on(tmp_path):
    """Valid host:port, but a name that does not resolve (.invalid never does, RFC 6761)
    or an address not of this machine (192.0.2.0/24, TEST-NET-1): the check said ok and
    the daemon then refused to start. A port another program holds is refused alike
    (tests/test_hostcheck.py: a running daemon holds its own)."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for address, said in [("nosuchhost.invalid:9177", "cannot listen on nosuchhost.invalid: "),
                              ("192.0.2.1:9177", "cannot listen on 192.0.2.1: Cannot assign requested address"),
                              (f"127.0.0.1:{port}", f"port {port} on 127.0.0.1 is in use by pid {os.getpid()} "),
                              (":9177", None)]:
            path = tmp_path / "metrics.yaml"
            path.write_text(f"metrics: '{address}'\n")
            r = ctl("config", "check", str(path))
            if said is None:
                assert r.returncode == 0 and not r.stderr and r.stdout == f"{path}: ok\n", address
            else:
                assert r.returncode == 1 and "would not start with it on this host" in r.stderr
                assert f"{path}: metrics: {said}" in r.stderr and "refuses to start" in r.stderr


@needs_root
def test_attach_status_detach_through_the_cli(daemon, workload):
    w = workload(2)
    r = ctl("--socket", daemon.socket, "attach", str(w.pid))
    assert r.returncode == 0 and f"attached {w.pid}" in r.stdout
    wait_for(lambda: all(t["pinned"] for t in json.loads(ctl("status", "--json", socket=daemon.socket).stdout)["targets"][0]["threads"]))
    table = ctl("status", str(w.pid), socket=daemon.socket).stdout
    assert "TID" in table and str(w.tids[0]) in table
    r = ctl("attach", str(w.pid), socket=daemon.socket)
    assert r.returncode == 1 and "already_attached" in r.stderr
    top = ctl("top", "--iterations", "2", "--interval", "0.05", socket=daemon.socket)
    assert top.returncode == 0 and top.stdout.count("parlschedd") == 2
    r = ctl("detach", str(w.pid), socket=daemon.socket)
    assert r.returncode == 0 and "restored 3 threads" in r.stdout
    assert ctl("reload", socket=daemon.socket).returncode == 0


@needs_root
def test_status_of_a_descendants_target_names_each_threads_process(daemon, kill_after):
    """A target attached with --descendants showed its children's threads as its own,
    with no flag and no pid to tell them apart."""
    tree = kill_after(subprocess.Popen(["bash", "-c", "sleep 30 & wait"], start_new_session=True))
    child = wait_for(lambda: open(f"/proc/{tree.pid}/task/{tree.pid}/children").read().split())[0]
    assert ctl("attach", "--descendants", str(tree.pid), socket=daemon.socket).returncode == 0
    wait_for(lambda: len(json.loads(ctl("status", "--json", socket=daemon.socket).stdout)["targets"][0]["threads"]) == 2)
    target = json.loads(ctl("status", "--json", str(tree.pid), socket=daemon.socket).stdout)["targets"][0]
    assert target["descendants"] is True and sorted(t["pid"] for t in target["threads"]) == sorted([tree.pid, int(child)])
    rows = ctl("status", str(tree.pid), socket=daemon.socket).stdout.splitlines()
    assert f"{tree.pid} bash (pin, with descendants: 2 processes, 2 threads)" in rows
    assert [r.split()[:2] for r in rows if r.split()[:1] == [child]] == [[child, child]]  # PID, then TID
    os.killpg(tree.pid, signal.SIGKILL)  # the sleep too


def test_top_ends_quietly_when_its_reader_leaves(daemon):
    """``parlschedctl top | head`` exited 1 (click's code for EPIPE): a reader that
    stops reading is how a piped live view ends, like Ctrl-C."""
    proc = subprocess.Popen([*CTL, "top", "--interval", "0.02"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PARLSCHED_SOCKET": daemon.socket})
    assert proc.stdout.readline().startswith(b"parlschedd")
    proc.stdout.close()
    assert proc.wait(timeout=30) == 0
    assert proc.stderr.read() == b""


def _reader_left(*args: str, socket: str | None = None, stderr_too: bool = False) -> subprocess.CompletedProcess:
    """parlschedctl ARGS with stdout (and stderr, ``stderr_too``) a pipe whose reader
    left before the first line."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([*CTL, *args], stdout=w, stderr=w if stderr_too else subprocess.PIPE, timeout=60,
                              env={**os.environ, **({"PARLSCHED_SOCKET": socket} if socket else {})})
    finally:
        os.close(w)


def test_a_request_done_whose_output_lost_its_reader_exits_0_and_is_done(daemon, workload, tmp_path):
    """``parlschedctl attach PID | head -0`` exited 1, click's code for EPIPE, with nothing
    said: a script saw an attach that took place as one refused, and the warnings on
    stderr after the output were lost. The request's outcome sets the exit code, as
    top's does; so does config check's verdict; stderr keeps its lines."""
    w = workload(2)
    r = _reader_left("attach", "--json", "--threads", "nomatch", str(w.pid), socket=daemon.socket)
    assert r.returncode == 0 and b"warning: no thread name of" in r.stderr, r.stderr
    assert json.loads(ctl("status", "--json", str(w.pid), socket=daemon.socket).stdout)["targets"][0]["pid"] == w.pid
    for args in (["status"], ["status", "--json"], ["reload"]):
        r = _reader_left(*args, socket=daemon.socket)
        assert (r.returncode, r.stderr) == (0, b""), (args, r.stderr)
    r = _reader_left("detach", str(w.pid), socket=daemon.socket)
    assert r.returncode == 0 and ctl("status", str(w.pid), socket=daemon.socket).returncode == 1  # not_attached
    r = _reader_left("detach", "--json", str(w.pid), socket=daemon.socket)
    assert r.returncode == 1 and b"not_attached" in r.stderr  # refused: still said, still 1
    assert _reader_left("attach", str(w.pid), socket=daemon.socket + ".none").returncode == 3  # not done
    assert _reader_left("status", socket=daemon.socket + ".none", stderr_too=True).returncode == 3  # nowhere to say it
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("period_s: 0.1\n")
    bad.write_text("period_s: fast\n")
    assert [_reader_left("config", "check", str(c), "--json").returncode for c in (good, bad)] == [0, 1]
    assert [_reader_left("config", "check", str(c), stderr_too=True).returncode for c in (good, bad)] == [0, 1]
    checked = _reader_left("config", "check", str(bad))
    assert checked.returncode == 1 and b"period_s: must be a number" in checked.stderr  # stderr's reader stayed


def test_top_with_stdout_closed_ends_quietly(daemon):
    """``top >&-`` (stdout closed: Python's sys.stdout is None) ended in a traceback,
    'NoneType' object has no attribute 'isatty', exit 1. No reader at all ends the
    view as a reader that left does: exit 0, nothing said."""
    r = subprocess.run([*CTL, "top", "--iterations", "2", "--interval", "0.05"], stderr=subprocess.PIPE,
                       env={**os.environ, "PARLSCHED_SOCKET": daemon.socket}, preexec_fn=lambda: os.close(1), timeout=60)
    assert r.returncode == 0 and r.stderr == b"", r.stderr


def test_top_parts_its_frames_with_the_time_when_piped(daemon):
    """``top --iterations 3 > file`` ran the frames together, with nothing to tell one
    from the next or when each was taken."""
    r = ctl("top", "--iterations", "3", "--interval", "0.05", socket=daemon.socket)
    assert r.returncode == 0 and r.stdout.startswith("parlschedd "), r.stderr
    parts = re.split(r"^--- (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d) ---\n", r.stdout, flags=re.M)
    frames, stamps = parts[::2], parts[1::2]
    assert len(frames) == 3 and all(f.startswith("parlschedd ") for f in frames), r.stdout
    assert len(stamps) == 2 and stamps == sorted(stamps) and "\033" not in r.stdout


def test_top_on_a_terminal_redraws_in_place(daemon):
    """On a terminal each refresh cleared the whole screen (ESC[2J) and then drew: it
    flickered. It moves the cursor home, draws over the last frame and clears the rest."""
    main, terminal = pty.openpty()
    try:
        proc = subprocess.Popen([*CTL, "top", "--iterations", "2", "--interval", "0.05"], stdout=terminal,
                                stderr=subprocess.PIPE, env={**os.environ, "PARLSCHED_SOCKET": daemon.socket})
    finally:
        os.close(terminal)
    seen = read_terminal(main)
    assert proc.wait(timeout=30) == 0, proc.stderr.read()
    assert b"\033[2J" not in seen and seen.startswith(b"\033[H"), seen[:200]
    frames = seen.split(b"\033[H")[1:]
    assert len(frames) == 2 and all(f.startswith(b"parlschedd ") and f.endswith(b"\033[J") for f in frames), seen
    assert b"---" not in seen


SLEEPERS = "import sys, threading, time; [threading.Thread(target=time.sleep, args=(60,)).start() for _ in range(int(sys.argv[1]))]"


def _screen(frame: bytes) -> list[str]:
    """The lines one frame of top draws on a terminal (the pty writes each newline as CRLF)."""
    body = frame.replace(b"\r\n", b"\n")
    assert body.endswith(b"\033[J"), frame
    lines = body.removesuffix(b"\033[J").split(b"\033[K\n")
    assert lines.pop() == b"", frame  # every line cleared to its end, none left unterminated
    return [line.decode() for line in lines]


@needs_root
@pytest.mark.timeout(60)
def test_top_on_a_terminal_fits_it_and_follows_a_resize(daemon, kill_after):
    """On an 8 x 60 terminal top wrote 22 lines a frame, some of 180 characters, and
    725 with a target of 700 threads: the terminal scrolled and the header was never
    seen. Each frame fits the terminal's rows but one (the cursor's) and its columns
    but one, says how many threads it left out, and follows the size after a resize."""
    many = kill_after(subprocess.Popen([sys.executable, "-c", SLEEPERS, "30"]))
    wait_for(lambda: len(os.listdir(f"/proc/{many.pid}/task")) == 31)
    total = len(daemon.request("attach", pid=many.pid)["target"]["threads"])
    assert total == 31
    main, terminal = pty.openpty()
    fcntl.ioctl(main, termios.TIOCSWINSZ, struct.pack("HHHH", 8, 60, 0, 0))
    try:
        proc = kill_after(subprocess.Popen([*CTL, "top", "--iterations", "3", "--interval", "1"], stdout=terminal,
                                           stderr=subprocess.PIPE, env={**os.environ, "PARLSCHED_SOCKET": daemon.socket}))
    finally:
        os.close(terminal)
    seen = b""
    while b"\033[J" not in seen:
        seen += os.read(main, 1 << 16)
    fcntl.ioctl(main, termios.TIOCSWINSZ, struct.pack("HHHH", 12, 100, 0, 0))
    seen += read_terminal(main)
    assert proc.wait(timeout=30) == 0, proc.stderr.read()
    frames = seen.split(b"\033[H")
    assert frames[0] == b"" and len(frames) == 4, seen  # the first frame does not clear the screen first
    assert any(f.endswith(b"\033[2J") for f in frames[1:-1]), seen  # after the resize: cleared once, then drawn
    for frame, (rows, columns) in ((frames[1], (8, 60)), (frames[-1], (12, 100))):
        lines = _screen(frame.removesuffix(b"\033[2J"))
        assert len(lines) == rows - 1 and all(len(line) <= columns - 1 for line in lines), lines
        assert lines[0].startswith("parlschedd ") and lines[1].startswith("domains ")
        shown = sum(bool(re.match(r"  +\d+ ", line)) for line in lines)
        assert lines[-1].startswith(f"... {total - shown} more threads"), lines


def _top_that_lost(daemon, kill_after, *options: str) -> subprocess.Popen:
    """``top`` (with ``options``) showing ``daemon``, which is then stopped under it: it has said so."""
    proc = kill_after(subprocess.Popen([*CTL, "top", "--interval", "0.05", *options], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True,
                                       env={**os.environ, "PARLSCHED_SOCKET": daemon.socket}))
    assert proc.stdout.readline().startswith(f"parlschedd {__version__} pid {daemon.proc.pid} ")
    daemon.stop()
    assert proc.stderr.readline().startswith("parlschedctl: lost the daemon (")
    return proc


@pytest.mark.timeout(60)  # a top gone silent would hang the readlines
def test_top_waits_for_a_restarted_daemon(daemon, kill_after, tmp_path):
    """A restart under a running view (systemctl restart) ended top with exit 3; it
    says the daemon is lost once, waits, and shows the new daemon when it is back."""
    proc = _top_that_lost(daemon, kill_after)
    second = start_daemon(tmp_path)
    try:
        while not (line := proc.stdout.readline()).startswith(f"parlschedd {__version__} pid {second.proc.pid} "):
            assert line, "top ended"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert "lost the daemon" not in proc.stderr.read()  # said once, not at each retry
    finally:
        second.stop()


@pytest.mark.timeout(60)
def test_top_iterations_count_the_frames_shown_across_a_restart(daemon, kill_after, tmp_path):
    """``top --iterations 8`` across a daemon restart showed 4 frames: the refreshes
    that found no daemon counted as iterations."""
    proc = _top_that_lost(daemon, kill_after, "--iterations", "8")
    second = start_daemon(tmp_path)
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        second.stop()
    assert proc.returncode == 0, err
    frames = re.findall(r"^parlschedd \S+ pid (\d+) ", out, flags=re.M)
    assert len(frames) == 8 - 1 and frames[-1] == str(second.proc.pid), out  # the first was read by _top_that_lost


@pytest.mark.timeout(60)
def test_top_iterations_give_up_on_a_daemon_that_does_not_come_back(daemon, kill_after):
    """With the frames counted, a daemon that never comes back must still end a
    bounded run: exit 3 after --reconnect-timeout."""
    proc = _top_that_lost(daemon, kill_after, "--iterations", "3", "--reconnect-timeout", "0.5")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3 and "not back within 0.5 s" in err, err


@pytest.mark.timeout(60)
def test_top_gives_up_on_a_hung_daemon_after_its_reconnect_timeout(daemon, kill_after):
    """A daemon that hangs (SIGSTOP) under top: its loss is told by a request's 10 s
    timeout, and then --reconnect-timeout 1 waited another whole request, 10 s, before
    "not back within 1 s" (about 20 s in all, a review). The request made while the
    daemon is lost waits only for what is left of the timeout."""
    proc = kill_after(subprocess.Popen([*CTL, "top", "--interval", "0.05", "--reconnect-timeout", "1"],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       env={**os.environ, "PARLSCHED_SOCKET": daemon.socket}))
    assert proc.stdout.readline().startswith(f"parlschedd {__version__} pid {daemon.proc.pid} ")
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        assert proc.stderr.readline().startswith("parlschedctl: lost the daemon (")  # after the 10 s of one request
        lost = time.monotonic()
        _, err = proc.communicate(timeout=30)
        waited = time.monotonic() - lost
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    assert proc.returncode == 3 and "not back within 1 s" in err, err
    assert waited < 5, f"gave up {waited:.1f} s after the loss was told, not about 1 s"


@pytest.mark.timeout(60)
def test_top_ends_when_its_reader_leaves_while_the_daemon_is_down(daemon, kill_after):
    """``parlschedctl top | head`` with the daemon stopped under it: nothing is written
    while it waits, so no EPIPE told it the reader had left, and it waited for good."""
    proc = _top_that_lost(daemon, kill_after)
    proc.stdout.close()
    assert proc.wait(timeout=10) == 0


def test_top_exits_3_when_there_is_no_daemon_to_show(daemon):
    daemon.stop()
    assert ctl("top", "--iterations", "1", socket=daemon.socket).returncode == 3


@needs_root
def test_attach_detach_reload_and_status_json(daemon, workload):
    """--json prints the daemon's reply for scripts, and on a refusal its error object
    (exit 1, the message on stderr too): only status had --json."""
    w = workload(2)
    r = ctl("attach", "--json", str(w.pid), socket=daemon.socket)
    assert r.returncode == 0, r.stderr
    target = json.loads(r.stdout)["target"]
    assert target["pid"] == w.pid and target["mode"] == "pin" and {t["tid"] for t in target["threads"]} == {w.pid, *w.tids}
    r = ctl("attach", "--json", str(w.pid), socket=daemon.socket)
    assert r.returncode == 1 and "already_attached" in r.stderr
    assert json.loads(r.stdout)["error"]["code"] == "already_attached"
    r = ctl("detach", "--json", str(w.pid), socket=daemon.socket)
    assert r.returncode == 0 and json.loads(r.stdout) == {"pid": w.pid, "restored": 3, "rule": None,
                                                        "mode": "pin", "threads": 3, "state_file_error": None}, r.stdout
    r = ctl("detach", "--json", str(w.pid), socket=daemon.socket)
    assert r.returncode == 1 and json.loads(r.stdout)["error"]["code"] == "not_attached"
    r = ctl("status", "--json", str(w.pid), socket=daemon.socket)
    assert r.returncode == 1 and json.loads(r.stdout)["error"]["code"] == "not_attached"
    r = ctl("reload", "--json", socket=daemon.socket)
    assert r.returncode == 0 and json.loads(r.stdout) == {"restart_pending": [], "warnings": []}
    daemon.config.write_text("period_s: fast\n")
    r = ctl("reload", "--json", socket=daemon.socket)
    error = json.loads(r.stdout)["error"]
    assert r.returncode == 1 and error["code"] == "bad_config" and "period_s: must be a number" in error["message"]
    r = ctl("reload", "--json", socket=daemon.socket + ".none")
    assert r.returncode == 3 and r.stdout == ""  # no daemon, no reply


@needs_root
def test_run_json_summary(daemon, tmp_path):
    """run --json: its summary as one JSON object, the last line on stdout after CMD's
    own output; progress and the summary line stay on stderr."""
    code = ("import threading,time,sys; [threading.Thread(target=time.sleep,args=(1,)).start() for _ in range(3)]; "
            "print('cmd says hi'); time.sleep(1.2); sys.exit(7)")
    r = ctl("run", "--json", "--", sys.executable, "-c", code, socket=daemon.socket)
    assert r.returncode == 7, r.stderr
    said, blank, last = r.stdout.splitlines()  # a pipe: whether CMD ended its line cannot be read back
    assert said == "cmd says hi" and blank == "" and "exited 7" in r.stderr
    out = json.loads(last)
    assert out["command"] == [sys.executable, "-c", code] and out["exit_code"] == 7 and out["signal"] is None
    assert out["seconds"] >= 1.2 and out["mode"] == "pin" and out["watched"] == "to_the_end" and out["not_managed"] is None
    assert out["threads_managed"] == 4 and out["pid"] > 0
    assert out["on_one_cpu"] + out["free_in_domain"] == sum(t["pinned"] for t in out["threads"])
    left = len(out["threads"])
    at_end = "at the end" if left == 4 else f"{left} left at the end"
    assert f"managed 4 threads ({at_end}: {out['on_one_cpu']} on one CPU, {out['free_in_domain']} free" in r.stderr
    r = ctl("run", "--json", "--observe", "--", "sh", "-c", "sleep 0.5; kill -TERM $$", socket=daemon.socket)
    out = json.loads(r.stdout.splitlines()[-1])
    assert r.returncode == 143 and out["exit_code"] == 143 and out["signal"] == "SIGTERM" and out["mode"] == "observe"
    assert out["threads"] is None and out["on_one_cpu"] is None  # observed: no placements said
    r = ctl("run", "--json", "--", str(tmp_path / "no-such-program"), socket=daemon.socket)
    out = json.loads(r.stdout)
    assert r.returncode == 127 and out["exit_code"] == 127 and out["pid"] is None and out["watched"] == "never_attached"
    assert out["not_managed"].startswith("cannot start") and out["threads_managed"] is None


@needs_root
def test_run_json_summary_is_a_line_of_its_own_after_output_that_ends_mid_line(daemon, tmp_path):
    """``run --json -- sh -c 'printf "no newline"'`` wrote ``no newline{"command":...}``
    on one line. In a regular file the summary starts a line only when CMD's output
    did not end one (read back, through /proc when opened write-only, at the end when
    appending); on a pipe, where it cannot be read back, always."""
    env = {**os.environ, "PARLSCHED_SOCKET": daemon.socket}
    out = tmp_path / "out"
    for script, mode, before, cmds in (('printf "no newline"', "w", "", "no newline\n"), ("echo line", "w", "", "line\n"),
                                       ('printf more', "a", "kept\n", "kept\nmore\n"), ("true", "w", "", ""),
                                       ('printf ""', "a", "kept", "kept\n")):
        out.write_text(before)
        with open(out, mode) as stdout:
            r = subprocess.run([*CTL, "run", "--json", "--", "sh", "-c", script], stdout=stdout, stderr=subprocess.PIPE,
                               text=True, env=env, timeout=60)
        text = out.read_text()
        last = text.splitlines()[-1]
        assert r.returncode == 0 and json.loads(last)["exit_code"] == 0, r.stderr
        assert text == f"{cmds}{last}\n", (script, text)
    r = ctl("run", "--json", "--", "sh", "-c", 'printf "no newline"', socket=daemon.socket)
    said, last = r.stdout.splitlines()
    assert said == "no newline" and json.loads(last)["command"] == ["sh", "-c", 'printf "no newline"']


@needs_root
def test_a_reload_says_which_keys_wait_for_a_restart(daemon):
    """The socket and the metrics listener are set up once, at start: a reload that
    changes them applies the rest and says those wait (it said "reloaded" alone)."""
    r = ctl("reload", socket=daemon.socket)
    assert r.returncode == 0 and r.stdout.strip() == "reloaded"
    daemon.config.write_text(f"period_s: 0.07\ndomain_period_s: 0.7\n{PINNING}metrics: 127.0.0.1:0\nsocket: {{mode: '0600'}}\n")
    r = ctl("reload", socket=daemon.socket)
    assert r.returncode == 0 and "socket, metrics: takes effect at the next restart" in r.stdout
    assert daemon.request("status")["daemon"]["period_s"] == 0.07
    assert daemon.request("reload")["restart_pending"] == ["socket", "metrics"]
    assert "takes effect at the next restart" in daemon.log_text()
    daemon.config.write_text(f"period_s: 0.07\ndomain_period_s: 0.7\n{PINNING}socket: {{path: /run/elsewhere.sock}}\n")
    assert daemon.request("reload")["restart_pending"] == []  # --socket names it: a restart would not use that path


@needs_root
def test_a_reload_the_next_start_would_refuse_keeps_the_old_config(daemon):
    """A socket group that does not exist was applied ("restart_pending": ["socket"],
    exit 0) while the next start refuses it: a reload refuses it now, in config
    check's words, and keeps the old config."""
    problem = "socket.group: no group 'no-such-group-xyz'"
    daemon.config.write_text(f"period_s: 0.07\ndomain_period_s: 0.7\n{PINNING}socket: {{group: no-such-group-xyz}}\n")
    r = ctl("reload", socket=daemon.socket)
    assert r.returncode == 1 and f"{daemon.config}: {problem}" in r.stderr, r.stderr
    assert daemon.request("status")["daemon"]["period_s"] == 0.05, "the old config kept whole"
    check = ctl("config", "check", str(daemon.config))
    assert check.returncode == 1 and problem in check.stdout + check.stderr, check


@needs_root
def test_refusals_and_empty_attaches_say_why(daemon, workload, tmp_path):
    w = workload(2)
    thread = w.tids[-1]
    plot = ("--out", str(tmp_path / "plot.png"))  # plot asks for the target's history
    for cmd, *rest in (("attach",), ("detach",), ("status",), ("plot", *plot)):
        r = ctl(cmd, str(thread), *rest, socket=daemon.socket)
        assert r.returncode == 1 and f"{thread} is a thread of process {w.pid}" in r.stderr, (cmd, r.stderr)
    assert ctl("attach", str(w.pid), socket=daemon.socket).returncode == 0
    r = ctl("detach", str(thread), socket=daemon.socket)  # managed, as a thread: not "as a descendant"
    assert r.returncode == 1 and f"{thread} is a thread of process {w.pid}" in r.stderr and "descendant" not in r.stderr
    assert ctl("detach", str(w.pid), socket=daemon.socket).returncode == 0
    r = ctl("attach", str(w.pid), "--threads", "^no-such-name$", socket=daemon.socket)
    assert r.returncode == 0, r.stderr  # attached: a thread of that name may still come
    assert "0 threads" in r.stdout and "no thread name" in r.stderr and "3 left out" in r.stderr
    assert "--threads '^no-such-name$'" in r.stderr  # a short regex in full
    assert ctl("detach", str(w.pid), socket=daemon.socket).returncode == 0
    long = "^(" + "|".join(f"no-such-name-{i}" for i in range(60)) + ")$"  # 953 characters, of 1024 at most
    assert 900 < len(long) <= 1024
    r = ctl("attach", str(w.pid), "--threads", long, socket=daemon.socket)
    assert r.returncode == 0 and "no thread name" in r.stderr, r.stderr
    assert len(r.stderr) < 300 and f"... ({len(repr(long))} characters)" in r.stderr, r.stderr  # clipped, as errors clip
    w.close()
    wait_for(lambda: json.loads(ctl("status", "--json", socket=daemon.socket).stdout)["targets"] == [])
    r = ctl("detach", str(w.pid), socket=daemon.socket)
    assert r.returncode == 1 and "it exited, and parlschedd dropped it" in r.stderr, r.stderr
    r = ctl("plot", str(w.pid), *plot, socket=daemon.socket)  # its history is kept, of periods with no thread
    assert r.returncode == 1 and "no period of the target was recorded before it exited" in r.stderr, r.stderr
    assert not (tmp_path / "plot.png").exists()


def run_in_background(daemon, script: str, *options: str) -> subprocess.Popen:
    """``parlschedctl run OPTIONS -- sh -c SCRIPT`` in its own process group, as a shell job is."""
    env = {**os.environ, "PARLSCHED_SOCKET": daemon.socket}
    proc = subprocess.Popen([*CTL, "run", *options, "--", "sh", "-c", script], stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    wait_for(lambda: json.loads(ctl("status", "--json", socket=daemon.socket).stdout)["targets"])
    return proc


@needs_root
def test_run_waits_for_cmd_when_the_daemon_goes_away(daemon, tmp_path):
    """CMD outlives the daemon by construction: it ends only when the test has read
    run's "lost the daemon" (a fixed sleep raced the test's own start-up under load)."""
    go = tmp_path / "go"
    proc = run_in_background(daemon, f"for i in $(seq 600); do [ -e {go} ] && break; sleep 0.05; done; exit 5")
    daemon.stop()
    said = proc.stderr.readline()  # run's next poll finds the socket gone
    go.touch()
    _, err = proc.communicate(timeout=30)
    assert "lost the daemon" in said, said + err
    assert proc.returncode == 5, err  # CMD's code, not 3: CMD ran to its end
    assert "sh exited 5" in err and "the daemon stopped before the end" in err  # not its last pins


@needs_root
def test_run_follows_cmd_through_a_daemon_restart(tmp_path):
    """systemctl restart parlschedd while run watches CMD: the new daemon attaches CMD
    again (the state dir keeps what clients attached), and run watches it to its end,
    its plot the new daemon's history. It stopped watching at the first lost
    connection and said the daemon stopped before the end."""
    go, figure = tmp_path / "go", tmp_path / "run.png"
    d = start_daemon(tmp_path)
    try:
        proc = run_in_background(d, f"for i in $(seq 600); do [ -e {go} ] && break; sleep 0.05; done; exit 5",
                                 "--plot", str(figure))
        d.stop()
        lost = proc.stderr.readline()
        d = start_daemon(tmp_path)  # the same socket and state dir, as the unit's restart
        back = proc.stderr.readline()
        cmd = d.request("status")["targets"][0]["pid"]
        wait_for(lambda: d.request("history", pid=cmd)["samples"])  # a period to draw, however loaded the host
        go.touch()
        _, err = proc.communicate(timeout=60)
        assert "lost the daemon" in lost and "and for the daemon to come back" in lost, lost + back + err
        assert back == "parlschedctl: the daemon is back and manages sh again\n", back + err
        assert proc.returncode == 5, err
        assert re.search(r"wrote .*run\.png \(\d+ periods\) since the daemon's restart\n", err), err
        assert "sh exited 5" in err and "at the end:" in err and "daemon stopped" not in err, err
        assert figure.exists()
    finally:
        d.stop()


@needs_root
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM],
                         ids=lambda sig: sig.name)
def test_run_passes_signals_on_to_cmd(daemon, sig):
    """A signal sent to run alone (a supervisor, a closed ssh session, kill) reaches CMD,
    and run still waits, reports and exits as CMD did; before, run died and left CMD
    running orphaned, still pinned (SIGUSR1, SIGUSR2 and SIGALRM until now)."""
    proc = run_in_background(daemon, "exec sleep 30")
    target = json.loads(ctl("status", "--json", socket=daemon.socket).stdout)["targets"][0]["pid"]
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig, err
    assert f"sh was killed by {sig.name}" in err
    wait_for(lambda: not os.path.exists(f"/proc/{target}"))


@needs_root
def test_run_names_a_real_time_signal_that_killed_cmd(daemon):
    """Python names only SIGRTMIN and SIGRTMAX: run ended in a traceback and exit 1."""
    r = ctl("run", "--", "sh", "-c", "kill -s RTMIN+3 $$", socket=daemon.socket)
    assert r.returncode == 128 + signal.SIGRTMIN + 3, r.stderr
    assert "sh was killed by SIGRTMIN+3" in r.stderr


@needs_root
def test_run_keeps_cmds_exit_code_when_its_messages_cannot_be_written(daemon):
    """A log that is full or gone (stderr on /dev/full, a closed pipe) lost CMD's exit
    code: the summary's write failed, and run exited 1 as if the daemon refused."""
    with open("/dev/full", "w") as full:
        for cmd in (["sh", "-c", "exit 7"], ["/no/such/program"]):
            r = subprocess.run([*CTL, "run", "--", *cmd], stderr=full, env={**os.environ, "PARLSCHED_SOCKET": daemon.socket},
                               timeout=60)
            assert r.returncode == (7 if cmd[0] == "sh" else 127)


@needs_root
def test_run_says_cmd_was_detached_before_its_end(daemon, tmp_path):
    """A client detached CMD while it ran: the summary gave the placements of the last
    poll before the detach as CMD's end. --plot draws nothing (a detached target's
    history goes with it) and says why: it said "was not managed to its end"."""
    go, figure = tmp_path / "go", tmp_path / "run.png"
    proc = run_in_background(daemon, f"for i in $(seq 600); do [ -e {go} ] && break; sleep 0.05; done; exit 3",
                             "--plot", str(figure))
    target = json.loads(ctl("status", "--json", socket=daemon.socket).stdout)["targets"][0]["pid"]
    assert ctl("detach", str(target), socket=daemon.socket).returncode == 0
    said = proc.stderr.readline()  # run's next poll finds it detached
    go.touch()
    _, err = proc.communicate(timeout=30)
    assert said == "parlschedctl: sh was detached; waiting for it\n", said + err
    assert proc.returncode == 3, err
    assert re.search(r"sh exited 3 after [\d.]+ s; managed \d+ threads? \(detached before the end\)\n", err), err
    assert "parlschedctl: no plot: sh was detached before its end, and its history with it\n" in err and not figure.exists()


@needs_root
def test_run_says_why_the_daemon_let_go_of_cmd_that_became_another_users(open_dir):
    """A user's CMD that execs a setuid program is root's from then on, and the daemon
    lets it go: run said "sh was detached", as if a client had (review); it says the
    daemon's reason. The setuid program is a copy of sleep(1), owned by root, mode 4755."""
    (open_dir / "parlschedd.yaml").write_text("period_s: 0.05\nrescan_s: 0.1\nsocket: {mode: '0666'}\n")
    suid = open_dir / "suid-sleep"
    shutil.copy("/bin/sleep", suid)
    suid.chmod(0o4755)
    from click.testing import CliRunner

    from parlschedctl.cli import cli

    d = start_daemon(open_dir)

    def run() -> list:  # as nobody, who may not read this checkout: in a forked child of this process
        result = CliRunner().invoke(cli, ["--socket", d.socket, "run", "--", "sh", "-c", f"sleep 0.5; exec {suid} 2"])
        return [result.exit_code, result.output]

    try:
        code, output = in_child_as(NOBODY, run)
    finally:
        d.stop()
    assert code == 0, output
    assert output.startswith("parlschedctl: sh was detached (process "), output
    assert "belongs to uid 0, not to you (uid 65534); only its owner or root may manage it); waiting for it\n" in output, output


@needs_root
def test_options_after_cmd_are_cmds(daemon):
    """``run sh -c '...' x --observe``: --observe was taken as run's own, and
    ``run ls -h`` showed run's help; an option before CMD is still run's."""
    r = ctl("run", "sh", "-c", "echo \"[$1]\"", "x", "--observe", socket=daemon.socket)
    assert r.returncode == 0 and r.stdout == "[--observe]\n", r.stderr
    assert "managed" in r.stderr or "not managed" in r.stderr  # run's own summary: not observe's "observed"
    assert "observed" not in r.stderr
    assert ctl("run", "--bogus", socket=daemon.socket).returncode == 2


@needs_root
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGQUIT], ids=lambda sig: sig.name)
def test_the_keyboards_signals_reach_cmd_once(daemon, sig):
    """Ctrl-C and Ctrl-\\ go to the terminal's whole process group, CMD included: run
    passed SIGQUIT on as well, and CMD got it twice (a JVM dumps its threads twice)."""
    code = (f"import signal, sys, time; got = []; signal.signal({int(sig)}, lambda *a: got.append(1)); "
            "print('ready', flush=True); time.sleep(1.5); print(len(got))")
    proc = subprocess.Popen([*CTL, "run", "--", sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PARLSCHED_SOCKET": daemon.socket}, start_new_session=True)
    assert proc.stdout.readline() == "ready\n"
    os.killpg(proc.pid, sig)  # what the terminal does
    out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (0, "1\n"), err


@needs_root
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGQUIT], ids=lambda sig: sig.name)
def test_the_keyboards_signals_reach_a_cmd_in_a_group_of_its_own_once(daemon, sig):
    """A CMD that moves to a process group of its own (timeout, setsid) is out of the
    terminal's reach: run ignored Ctrl-C and Ctrl-\\, and nothing ended it. run passes
    them on to such a CMD alone."""
    code = (f"import os, signal, sys, time; os.setpgid(0, 0); got = []; signal.signal({int(sig)}, lambda *a: got.append(1)); "
            "print('ready', flush=True); time.sleep(1.5); print(len(got))")
    proc = subprocess.Popen([*CTL, "run", "--", sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PARLSCHED_SOCKET": daemon.socket}, start_new_session=True)
    assert proc.stdout.readline() == "ready\n"
    os.killpg(proc.pid, sig)  # what the terminal does: run's group, CMD no longer in it
    out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (0, "1\n"), err


@needs_root
def test_ctrl_c_reaches_the_whole_group_a_cmd_leads(daemon):
    """Passed on to CMD's pid alone, Ctrl-C reached a `setsid` launcher and not the
    worker it waits for (`setsid sh -c 'sleep 8'` ran its 8 s): it goes to the group
    CMD leads, as the terminal sends it. Here the launcher ignores SIGINT, its worker
    does not, and it exits 3 when the worker died of SIGINT."""
    code = ("import os, signal, subprocess, sys; os.setsid(); signal.signal(signal.SIGINT, signal.SIG_IGN); "
            "c = subprocess.Popen(['sleep', '8'], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)); "
            "print('ready', flush=True); sys.exit(3 if c.wait() == -signal.SIGINT else 0)")
    proc = subprocess.Popen([*CTL, "run", "--", sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PARLSCHED_SOCKET": daemon.socket}, start_new_session=True)
    assert proc.stdout.readline() == "ready\n"
    os.killpg(proc.pid, signal.SIGINT)
    asked = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - asked < 5, err
    assert proc.returncode == 3, err


@needs_root
def test_a_ctrl_c_run_was_started_ignoring_stays_ignored(daemon):
    """A shell script's background job starts with SIGINT ignored: run passed Ctrl-C on
    to a CMD in a group of its own all the same (which then handled it)."""
    code = ("import os, signal, time; os.setpgid(0, 0); got = []; signal.signal(signal.SIGINT, lambda *a: got.append(1)); "
            "print('ready', flush=True); time.sleep(1.5); print(len(got))")
    proc = subprocess.Popen([*CTL, "run", "--", sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PARLSCHED_SOCKET": daemon.socket}, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert proc.stdout.readline() == "ready\n"
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (0, "0\n"), err


@needs_root
def test_run_dies_of_sigint_as_cmd_did_so_that_a_shell_loop_stops(daemon):
    """run exited 130 when CMD died of SIGINT: bash stops `for ...; do run -- CMD; done`
    at Ctrl-C only when its child died of the signal (its $? is 130 either way)."""
    code = "import os, signal; signal.signal(signal.SIGINT, signal.SIG_DFL); os.kill(os.getpid(), signal.SIGINT)"
    r = ctl("run", "--json", "--", sys.executable, "-c", code, socket=daemon.socket)
    assert r.returncode == -signal.SIGINT and "was killed by SIGINT" in r.stderr, r.stderr
    assert json.loads(r.stdout.splitlines()[-1])["exit_code"] == 130
    r = ctl("run", "--", sys.executable, "-c", code, socket=daemon.socket,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert r.returncode == 130, "started ignoring SIGINT (a background job): an exit, not a death"


@needs_root
def test_a_hung_daemon_holds_run_neither_past_a_ctrl_c_nor_in_its_time(daemon, tmp_path):
    """CMD's end was seen only between two status requests: a daemon stopped (SIGSTOP,
    a debugger) held run 10 s after CMD's end, Ctrl-C and SIGTERM lost, and "exited 0
    after 11.24 s" of a 2 s CMD. Its end is waited for apart, and a signal after it
    ends run's wait on the daemon."""
    done = tmp_path / "done"
    code = f"import time; time.sleep(1); open({str(done)!r}, 'w').close()"
    proc = subprocess.Popen([*CTL, "run", "--json", "--", sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PARLSCHED_SOCKET": daemon.socket},
                            start_new_session=True)
    try:
        wait_for(lambda: json.loads(ctl("status", "--json", socket=daemon.socket).stdout)["targets"], timeout=10)
        daemon.proc.send_signal(signal.SIGSTOP)
        wait_for(done.exists, timeout=10)
        time.sleep(0.5)  # CMD has ended; run is in a request to the stopped daemon
        os.killpg(proc.pid, signal.SIGINT)
        asked = time.monotonic()
        out, err = proc.communicate(timeout=30)
        waited = time.monotonic() - asked
    finally:
        daemon.proc.send_signal(signal.SIGCONT)
    facts = json.loads(out.splitlines()[-1])
    assert proc.returncode == 0 and "stopped waiting for the daemon" in err, err
    assert waited < 5, f"run ended {waited:.1f} s after Ctrl-C"
    assert 1 <= facts["seconds"] < 5, facts
    assert facts["watched"] == "stopped_waiting" and facts["threads"] is None, "not watched to the end"


@needs_root
def test_a_signal_run_was_started_ignoring_stays_ignored_in_cmd(daemon):
    """Under nohup (SIGHUP ignored), CMD ran with SIGHUP's default action: run's relay
    handler replaced the ignore before the fork, and exec does not keep a handler."""
    sighup = 1 << (signal.SIGHUP - 1)
    r = ctl("run", "--", "grep", "SigIgn", "/proc/self/status", socket=daemon.socket,
            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[1], 16) & sighup


@needs_root
def test_ctrl_c_reaches_cmd_and_run_reports_how_it_ended(daemon):
    proc = run_in_background(daemon, "trap 'exit 5' INT; sleep 30 2>/dev/null & wait")
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 5, err
    assert "sh exited 5" in err and "Aborted" not in err
    subprocess.run(["pkill", "-KILL", "-g", str(proc.pid)])  # the sleep the trap left behind


@needs_root
def test_run_of_a_command_that_exits_at_once_is_never_attached_with_no_thread(daemon):
    """A CMD that ended while the daemon attached it was attached with no thread in 5
    runs of 12 ("managed 0 threads", watched to the end) and refused in the others:
    an attach that finds the process gone is refused, as a zombie's is."""
    for _ in range(10):
        r = ctl("run", "--json", "--", "/bin/false", socket=daemon.socket)
        out = json.loads(r.stdout.splitlines()[-1])
        assert r.returncode == 1 and (out["watched"] == "never_attached" or out["threads_managed"] >= 1), out


@needs_root
def test_run_passes_the_exit_code_and_summarises(daemon):
    code = "import threading,time,sys; [threading.Thread(target=time.sleep,args=(1,)).start() for _ in range(3)]; time.sleep(1.2); sys.exit(7)"
    r = ctl("run", "--", sys.executable, "-c", code, socket=daemon.socket)
    assert r.returncode == 7, r.stderr
    assert "exited 7" in r.stderr and re.search(r"managed 4 threads \((\d left )?at the end: \d on one CPU, 0 free in their domain(, \d not placed)?\)",
                                                r.stderr)
    wait_for(lambda: json.loads(ctl("status", "--json", socket=daemon.socket).stdout)["targets"] == [])


@needs_root
def test_run_of_a_command_that_ends_at_once_says_so(daemon):
    """It said "a zombie its parent has not reaped": the parent being run itself."""
    for _ in range(3):
        r = ctl("run", "--", "true", socket=daemon.socket)
        assert r.returncode == 0 and "zombie" not in r.stderr and "exited 0" in r.stderr
        assert "not managed" not in r.stderr or "not managed: true ended before it could be attached" in r.stderr
        if "not managed" in r.stderr:
            assert "managed 0 threads" not in r.stderr  # never attached: no count of what it managed


@needs_root
def test_run_observe_counts_what_it_observed(daemon):
    code = "import threading,time; [threading.Thread(target=time.sleep,args=(1,)).start() for _ in range(2)]; time.sleep(1.2)"
    r = ctl("run", "--observe", "--", sys.executable, "-c", code, socket=daemon.socket)
    assert r.returncode == 0, r.stderr
    assert re.search(r"exited 0 after [\d.]+ s; observed 3 threads\n", r.stderr), r.stderr  # no pins to count


def until_recorded(condition: str) -> str:
    """A CMD (python -c, the socket its argument) that ends once its own history ``h``
    at the daemon meets ``condition`` (60 s at most): waited for, not slept."""
    return ("import os, sys, time\nfrom parlschedctl import client\nend = time.monotonic() + 60\n"
            "while time.monotonic() < end:\n"
            "    try:\n        h = client.request(sys.argv[1], 'history', pid=os.getpid())\n"
            "    except client.Refused:\n        h = None\n"
            f"    if h is not None and {condition}:\n        break\n"
            "    time.sleep(0.02)\n")


@needs_root
def test_run_plot_of_a_run_longer_than_the_history_says_what_it_drew(tmp_path):
    """run --plot of a job longer than history_periods (60 s by default) said "wrote
    FILE (600 periods)" of a figure of its last minute alone, where the README
    promises the figure of the whole run: the ring had dropped the rest."""
    # 3 s of periods kept: room for a short run's start-up on a loaded machine (0.6 s seen)
    d = start_daemon(tmp_path, "period_s: 0.05\ndomain_period_s: 0.5\nhistory_periods: 60\n" + PINNING)
    try:
        out = tmp_path / "run.png"
        # CMD ends once the daemon's ring dropped some of its periods, however slow a loaded
        # machine makes them (sleep 1.5 counted on 11 periods of its 30 with history_periods 10)
        r = ctl("run", "--plot", str(out), "--", sys.executable, "-c", until_recorded("h['dropped'] > 0"), d.socket,
                socket=d.socket)
        assert r.returncode == 0 and out.exists(), r.stderr
        said = re.search(r"wrote .*", r.stderr).group(0)
        assert re.fullmatch(rf"wrote {out} \(60 periods: the last [\d.]+ s of the run, all the daemon keeps "
                            r"\(history_periods 60\)\)", said), said
        # once 2 periods are recorded (sleep 0.2 had none recorded under one busy loop: "the history is empty")
        short = ctl("run", "--plot", str(out), "--", sys.executable, "-c", until_recorded("len(h['samples']) >= 2"),
                    d.socket, socket=d.socket)
        assert re.search(rf"wrote {out} \(\d+ periods\)\n", short.stderr), short.stderr  # the whole run: said as before
    finally:
        d.stop()


@needs_root
def test_run_of_a_script_whose_interpreter_is_missing_says_so(daemon, tmp_path):
    """A script whose #! names no program (written on another machine) and a directory
    said "cannot start ./job.sh: No such file or directory" of a file that is there,
    and "Permission denied" of the directory, as env(1) does; bash says "required file
    not found". The exit codes stay the shell's, 127 and 126."""
    script = tmp_path / "job.sh"
    script.write_text("#!/opt/no-such/python3 -u\nprint('hi')\n")
    script.chmod(0o755)
    r = ctl("run", "--", str(script), socket=daemon.socket)
    assert r.returncode == 127, r.stderr
    assert f"cannot start {script}: its interpreter /opt/no-such/python3 (its #! line) is not found" in r.stderr, r.stderr
    r = ctl("run", "--", str(tmp_path), socket=daemon.socket)
    assert r.returncode == 126 and f"cannot start {tmp_path}: it is a directory" in r.stderr, r.stderr


@needs_root
def test_run_with_stdout_or_stderr_closed_waits_for_cmd_and_exits_with_its_code(daemon, tmp_path):
    """``run -- CMD 2>&-`` (or ``>&-`` with --json) ended in a traceback nobody saw
    ('NoneType' object has no attribute 'isatty'), exit 1, while CMD ran on unwaited:
    Python has no sys.stderr (sys.stdout) for a closed descriptor. What cannot be said
    is lost, as run's messages on a closed pipe are; CMD's exit code is run's."""
    marker = tmp_path / "done"
    cmd = ["sh", "-c", f"sleep 0.5; touch {marker}; exit 3"]
    for closed, args in ((2, ["run"]), (2, ["run", "--json"]), (1, ["run", "--json"]), (1, ["run"])):
        marker.unlink(missing_ok=True)
        proc = subprocess.run([*CTL, *args, "--", *cmd], env={**os.environ, "PARLSCHED_SOCKET": daemon.socket},
                              stdout=subprocess.DEVNULL if closed == 2 else None,
                              stderr=subprocess.PIPE if closed == 1 else None,
                              pass_fds=(), preexec_fn=lambda fd=closed: os.close(fd), timeout=60)
        assert proc.returncode == 3, (closed, args, proc.returncode, proc.stderr)
        assert marker.exists(), (closed, args)  # run waited for CMD
        if closed == 1:
            assert b"Traceback" not in proc.stderr and b"exited 3" in proc.stderr, proc.stderr


@needs_root
def test_run_of_a_command_that_cannot_start_exits_as_a_shell_would(daemon, tmp_path):
    """127 for a command not found, 126 for one that cannot be run: a script tells
    them from the command's own exit 1, as with sh, env(1) and timeout(1)."""
    missing = ctl("run", "--", str(tmp_path / "no-such-program"), socket=daemon.socket)
    assert missing.returncode == 127 and "cannot start" in missing.stderr
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\nexit 0\n")
    denied = ctl("run", "--", str(script), socket=daemon.socket)
    assert denied.returncode == 126 and "cannot start" in denied.stderr



def live_lines(daemon, code: str, columns: int, options: tuple[str, ...] = (), stdout: str = "file",
               tmp_path: Path | None = None) -> list[str]:
    """The live status lines ``run OPTIONS -- python -c CODE`` wrote to a terminal of
    ``columns`` columns, its stderr and its controlling terminal (run in its foreground,
    as a shell starts it), once CMD ended with 0; its stdout ``stdout``: "file" (in
    ``tmp_path``), "pipe" or "terminal" (that terminal)."""
    main, terminal = pty.openpty()
    fcntl.ioctl(main, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    out = {"pipe": subprocess.PIPE, "terminal": terminal}.get(stdout) or open(tmp_path / "out", "w")
    try:
        proc = subprocess.Popen([*CTL, "run", *options, "--", sys.executable, "-c", code], stdout=out, stderr=terminal,
                                env={**os.environ, "PARLSCHED_SOCKET": daemon.socket}, start_new_session=True,
                                preexec_fn=lambda: fcntl.ioctl(2, termios.TIOCSCTTY, 0))
    finally:
        os.close(terminal)
        if stdout == "file":
            out.close()
    seen = read_terminal(main)
    assert proc.wait(timeout=30) == 0, seen
    return [part.decode() for part in seen.split(b"\r\033[K") if re.match(rb" *\d+\.\d s ", part)]


@needs_root
@pytest.mark.timeout(60)
def test_runs_live_line_does_not_write_over_cmds_output_on_its_terminal(daemon, tmp_path):
    """Redrawn every 0.2 s, the live line erased what CMD wrote to the same terminal (a
    prompt, a REPL's), or a pipe's reader (`| less`, `| tee`): with CMD's stdout on a
    terminal or a pipe it is drawn only when asked for (--live); with its stdout in a
    file, by default."""
    code = "import time; print('Continue? ', end='', flush=True); time.sleep(1.5); print()"
    assert live_lines(daemon, code, columns=80, stdout="terminal") == []
    assert live_lines(daemon, code, columns=80, stdout="pipe") == []
    assert live_lines(daemon, code, columns=80, options=("--live",), stdout="terminal")
    assert live_lines(daemon, code, columns=80, tmp_path=tmp_path)
    assert live_lines(daemon, code, columns=80, options=("--no-live",), tmp_path=tmp_path) == []


def run_on_a_terminal(daemon, script: str, columns: int, term: str = "xterm", options: tuple[str, ...] = (),
                      during=None) -> list[str]:
    """The screen's lines, as a terminal emulator (pyte) shows them, after ``run
    OPTIONS -- sh -c SCRIPT`` on a terminal of ``columns`` columns, CMD's output and
    run's on it; ``during(run's pid)`` is called beside it while it runs."""
    import pyte

    main, terminal = pty.openpty()
    fcntl.ioctl(main, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    try:
        proc = subprocess.Popen([*CTL, "run", *options, "--", "sh", "-c", script], stdout=terminal, stderr=terminal,
                                env={**os.environ, "PARLSCHED_SOCKET": daemon.socket, "TERM": term})
    finally:
        os.close(terminal)
    beside = threading.Thread(target=during, args=(proc.pid,)) if during else None
    if beside:
        beside.start()
    shown = read_terminal(main)
    if beside:
        beside.join()
    assert proc.wait(timeout=30) == 0, shown
    screen = pyte.Screen(columns, 24)
    pyte.ByteStream(screen).feed(shown.replace(b"\n", b"\r\n"))  # the pty's ONLCR, which the emulator leaves out
    lines = [line.rstrip() for line in screen.display]
    return lines[:max(i for i, line in enumerate(lines) if line) + 1]


@needs_root
@pytest.mark.timeout(60)
def test_runs_summary_is_a_line_of_its_own_on_a_terminal(daemon):
    """``run -- printf 'no newline'`` on a terminal showed "no newlineparlschedctl: sh
    exited 0 ...": the summary on stderr ran on after CMD's output on stdout, the same
    terminal. It starts a line of its own, and after output that ended its line, or
    filled it to the margin, no empty line comes before it."""
    for script, first in (("printf 'no newline'", "no newline"), ("echo line", "line"),
                          ("printf '%200s' end", f"{'end':>200}")):  # the last fills the line: the cursor waits at the margin
        for ends in ("; sleep 0.5", ""):  # attached and watched to its end; ended before the attach ("not managed: ...")
            lines = run_on_a_terminal(daemon, script + ends, columns=200)  # wide enough for the summary
            assert lines[0] == first and all(line.startswith("parlschedctl: ") for line in lines[1:]), lines
    # an editor's shell buffer (TERM=dumb) does not wrap: the spaces' carriage return went back over CMD's output
    lines = run_on_a_terminal(daemon, "printf 'no newline'; sleep 0.5", columns=60, term="dumb")
    assert lines[0].startswith("no newlineparlschedctl: sh "), lines


@needs_root
@pytest.mark.timeout(60)
def test_runs_plot_message_is_a_line_of_its_own_after_output_cmd_wrote_once_detached(daemon, tmp_path):
    """run --plot, CMD detached by another client while it runs, then writing without
    a newline: the plot's message ("no plot: sh was detached ...") ran on after it (a
    review of the summary's own line, which held)."""
    def detach_cmd(run: int) -> None:
        cmd = wait_for(lambda: next((p for p in procfs.descendants(run) if procfs.process_stat(p).ppid == run), None))
        wait_for(lambda: any(t["pid"] == cmd for t in daemon.request("status")["targets"]))
        daemon.request("detach", pid=cmd)

    lines = run_on_a_terminal(daemon, "sleep 2; printf 'no newline'; sleep 0.3", columns=200,
                              options=("--plot", str(tmp_path / "run.png")), during=detach_cmd)
    at = lines.index("no newline")
    assert lines[at - 1] == "parlschedctl: sh was detached; waiting for it", lines
    assert lines[at + 1].startswith("parlschedctl: no plot: sh was detached before its end"), lines


@needs_root
@pytest.mark.timeout(60)
def test_runs_live_status_fits_the_terminals_width(daemon, tmp_path):
    """run's one-line status on stderr was ~88 characters for 9 threads and never cut:
    on an 80-column terminal each refresh wrapped and left a stale row behind. It is
    cut to the terminal's columns but one, as top's lines are."""
    code = "import threading,time; [threading.Thread(target=time.sleep,args=(2,)).start() for _ in range(8)]; time.sleep(2)"
    live = live_lines(daemon, code, columns=40, tmp_path=tmp_path)
    assert live and all(len(line) <= 39 for line in live), live
    assert any("threads" in line for line in live), live


@needs_root
@pytest.mark.timeout(60)
def test_runs_live_status_in_observe_mode_says_no_placements(daemon, tmp_path):
    """run --observe's live line on a terminal said "3 threads (0 on one CPU, 0 free in
    their domain, 3 not placed), 0 moves": read as three pins that failed, where observe
    mode places nothing (its summary says only "observed 3 threads")."""
    code = "import threading,time; [threading.Thread(target=time.sleep,args=(1.5,)).start() for _ in range(2)]; time.sleep(1.5)"
    live = live_lines(daemon, code, columns=200, options=("--observe",), tmp_path=tmp_path)
    assert live and any("3 threads observed" in line for line in live), live
    assert not any("placed" in line or "on one CPU" in line or "move" in line for line in live), live


@needs_root
def test_plot_refuses_dash_as_its_out(daemon, workload, tmp_path):
    """``plot PID --out -`` wrote a file named ``-`` and said "wrote -": a reader takes
    ``-`` for stdout. It is a usage error naming --out."""
    w = workload(2)
    assert ctl("attach", str(w.pid), socket=daemon.socket).returncode == 0
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = ctl("plot", str(w.pid), "--out", "-", socket=daemon.socket, cwd=tmp_path,
            env={"PYTHONPATH": repo})  # this checkout's code, not the one installed, run from tmp_path
    assert r.returncode == 2 and "--out" in r.stderr and "'-' is not a file here: give a path" in r.stderr, r.stderr
    assert not (tmp_path / "-").exists()


@needs_root
def test_plot_says_a_figure_it_cannot_write_as_the_other_write_errors(daemon, workload):
    """plot to /sys/x.png (root passes the access check; the write fails) said
    "cannot plot: [Errno 13] Permission denied: '/sys/x.png'", Python's text."""
    w = workload(2)
    assert ctl("attach", str(w.pid), socket=daemon.socket).returncode == 0
    wait_for(lambda: daemon.request("history", pid=w.pid)["samples"])
    r = ctl("plot", str(w.pid), "--out", "/sys/x.png", socket=daemon.socket)
    assert r.returncode == 1 and "/sys/x.png: cannot write: permission denied" in r.stderr, r.stderr
    assert "Errno" not in r.stderr


@needs_root
def test_plot_refuses_an_out_in_no_directory_or_of_no_format_in_a_line(daemon, workload, tmp_path):
    """plot PID --out /no/such/dir/x.png (or x.foo) ended in a traceback
    (parlschedctl.outputs.CannotWrite) where run --plot says it in a line: the check
    made before asking for the history was outside what plot catches. A suffix that
    names no format is a usage error, as for run --plot and model plot."""
    w = workload(2)
    assert ctl("attach", str(w.pid), socket=daemon.socket).returncode == 0
    wait_for(lambda: daemon.request("history", pid=w.pid)["samples"])
    out = tmp_path / "nodir" / "x.png"
    r = ctl("plot", str(w.pid), "--out", str(out), socket=daemon.socket)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"parlschedctl: {out}: cannot write: no directory {tmp_path / 'nodir'}"), r.stderr
    out = tmp_path / "x.foo"
    for command in (["plot", str(w.pid), "--out", str(out)], ["run", "--plot", str(out), "--", "true"]):
        r = ctl(*command, socket=daemon.socket)
        assert r.returncode == 2 and f": {out}: cannot write a .foo figure; use one of ." in r.stderr, r.stderr


@needs_root
def test_the_history_says_whether_its_target_is_observed(daemon, workload):
    """plot marks a figure of an observe-mode target (parlschedd/plots.py), which the
    history did not say."""
    observed, pinned = workload(2), workload(2)
    assert ctl("attach", "--observe", str(observed.pid), socket=daemon.socket).returncode == 0
    assert ctl("attach", str(pinned.pid), socket=daemon.socket).returncode == 0
    assert daemon.request("history", pid=observed.pid)["observe"] is True
    assert daemon.request("history", pid=pinned.pid)["observe"] is False


@needs_root
def test_run_plot_draws_the_run_once_it_ended(daemon, tmp_path):
    """run --plot FILE: the figure of CMD's whole run, drawn after it ended (the daemon
    keeps an exited target's history), said before the summary line, named in the JSON;
    CMD's exit code stays run's. A figure that could not be written is refused before
    CMD starts (a usage error: CMD never ran)."""
    code = ("import threading,time,sys; [threading.Thread(target=time.sleep,args=(1,)).start() for _ in range(3)]; "
            "time.sleep(1.2); sys.exit(5)")
    out = tmp_path / "run.png"
    r = ctl("run", "--json", "--plot", str(out), "--", sys.executable, "-c", code, socket=daemon.socket)
    assert r.returncode == 5, r.stderr
    said = r.stderr.splitlines()
    assert re.fullmatch(rf"parlschedctl: wrote {out} \(\d+ periods\)", said[-2]) and "exited 5" in said[-1]
    assert json.loads(r.stdout.splitlines()[-1])["plot"] == str(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ran = tmp_path / "ran"
    r = ctl("run", "--plot", str(tmp_path / "run.xyz"), "--", "touch", str(ran), socket=daemon.socket)
    assert r.returncode == 2 and "cannot write a .xyz figure" in r.stderr and "--plot" in r.stderr
    assert not ran.exists(), "CMD must not run when its plot cannot be drawn"
    r = ctl("run", "--json", "--", "true", socket=daemon.socket)
    assert json.loads(r.stdout.splitlines()[-1])["plot"] is None


@needs_root
def test_detach_of_an_observed_target_says_it_stopped_observing(daemon, workload):
    """Detaching an observed target said "restored 0 threads", read as a failure:
    observe mode sets no mask, so none is restored. The reply gives the mode and the
    threads let go."""
    w = workload(2)
    assert ctl("attach", "--observe", str(w.pid), socket=daemon.socket).returncode == 0
    wait_for(lambda: len(json.loads(ctl("status", "--json", socket=daemon.socket).stdout)["targets"][0]["threads"]) == 3)
    r = ctl("detach", "--json", str(w.pid), socket=daemon.socket)
    reply = json.loads(r.stdout)
    assert reply["mode"] == "observe" and reply["threads"] == 3 and reply["restored"] == 0
    assert ctl("attach", "--observe", str(w.pid), socket=daemon.socket).returncode == 0
    r = ctl("detach", str(w.pid), socket=daemon.socket)
    assert r.returncode == 0 and r.stdout.strip() == f"detached {w.pid}: stopped observing 3 threads (observe mode set " \
                                                      "no mask: none to restore)", r.stdout
    assert ctl("attach", str(w.pid), socket=daemon.socket).returncode == 0
    wait_for(lambda: all(t["pinned"] for t in json.loads(ctl("status", "--json", socket=daemon.socket).stdout)["targets"][0]["threads"]))
    reply = json.loads(ctl("detach", "--json", str(w.pid), socket=daemon.socket).stdout)
    assert reply["mode"] == "pin" and reply["threads"] == 3 and reply["restored"] == 3


@needs_root
def test_plot_and_run_plot_to_a_directory_the_user_cannot_enter_say_so_in_a_line(tmp_path):
    """plot --out and run --plot with a path under a directory the user may not traverse
    (root's 0700 tmp_path, /root) ended in a traceback, PermissionError from the
    is_dir() of check_writable, before anything was asked of the daemon."""
    from click.testing import CliRunner

    from parlschedctl.cli import cli
    importlib.import_module("parlschedd.plots")  # nobody may not read the library under /root
    out = tmp_path / "x.png"

    def invoke(*args: str) -> list:
        result = CliRunner().invoke(cli, ["--socket", str(tmp_path / "none.sock"), *args])
        return [result.exit_code, result.output, repr(result.exception)]

    for args, want in ((("plot", "1", "--out", str(out)), 1),  # run's --plot is checked as a usage error
                       (("run", "--plot", str(out), "--", "true"), 2)):
        code, output, exc = in_child_as(NOBODY, lambda a=args: invoke(*a))
        assert code == want and f"{out}: cannot write: permission denied" in output, (args, code, output, exc)
        assert "Traceback" not in output and "PermissionError" not in exc, (args, exc)
