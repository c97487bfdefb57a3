"""The daemon end to end: a real daemon process, real target processes and threads,
real affinity checked with os.sched_getaffinity, over the real control socket."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog.testing

from parlschedctl import client
from parlschedd.build import build_id
from parlschedd.__main__ import REFUSED
from parlschedd.host import procfs
from parlschedd.config import config_file
from parlschedd.cpulist import format_cpulist
from tests.conftest import (CGROUP_MOUNTS, NOBODY, Daemon, PINNING, all_pinned, as_user, needs_root, own_cgroup,
                            pinned_where_shown, refused_start, start_daemon, tagged_sleeper, target_pids,
                            threads_of, wait_for)
from tests.reliability.helpers import raw_exchange

pytestmark = needs_root
ALL = frozenset(os.sched_getaffinity(0))


def masks(tids):
    return {t: frozenset(os.sched_getaffinity(t)) for t in tids}


def test_attach_pins_and_detach_restores_exact_masks(daemon, workload):
    w = workload(3)
    tids = w.all_tids()
    os.sched_setaffinity(w.tids[0], {max(ALL)})  # one thread starts with a narrowed mask
    before = masks(tids)
    reply = daemon.request("attach", pid=w.pid)
    assert {t["tid"] for t in reply["target"]["threads"]} == set(tids)
    assert wait_for(lambda: pinned_where_shown(daemon, w.pid, len(tids))), "status must say where the thread is pinned"
    assert daemon.request("detach", pid=w.pid) == {"pid": w.pid, "restored": len(tids), "rule": None,
                                                  "mode": "pin", "threads": len(tids), "state_file_error": None}
    assert masks(tids) == before
    assert daemon.request("status")["targets"] == []


def test_relative_socket_and_state_dir_are_named_absolute(tmp_path, workload):
    """Started in some directory with relative --socket and --state-dir, the daemon
    uses them there and its start log names them absolute, so that a client elsewhere
    knows the socket to give; and the config it read (the log did not say which)."""
    (tmp_path / "parlschedd.yaml").write_text(PINNING)
    log = tmp_path / "daemon.log"
    with open(log, "ab") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "parlschedd", "--config", "parlschedd.yaml", "--socket",
                                 "ctl.sock", "--state-dir", "state", "--log-format", "json"],
                                cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=stderr)
    d = Daemon(proc, str(tmp_path / "ctl.sock"), tmp_path / "state", tmp_path / "parlschedd.yaml", log)
    try:
        started = wait_for(lambda: next((json.loads(line) for line in log.read_text().splitlines()
                                         if '"started"' in line), None), timeout=15)
        assert (started["socket"], started["state_dir"]) == (str(tmp_path / "ctl.sock"), str(tmp_path / "state"))
        assert started["config"] == str(tmp_path / "parlschedd.yaml")
        w = workload(2)
        d.request("attach", pid=w.pid)
        assert wait_for(lambda: (tmp_path / "state" / "state.json").is_file())
    finally:
        assert d.stop() == 0


def test_a_thread_named_after_attach_is_managed_within_a_rescan(daemon, kill_after):
    from tests.daemon.test_engine import start_named_late, tell_to_name

    p = kill_after(start_named_late())
    assert [t["name"] for t in daemon.request("attach", pid=p.pid, threads="^worker")["target"]["threads"]] \
        == ["worker1"]
    assert daemon.request("status", pid=p.pid)["targets"][0]["thread_filter"] == "^worker"  # status says it
    tell_to_name(p)
    wait_for(lambda: sorted(t["name"] for t in threads_of(daemon, p.pid).values()) == ["worker0", "worker1"],
             timeout=5)
    assert daemon.request("status", pid=p.pid)["targets"][0]["threads_ignored"] == 1


def test_status_json_fields(daemon, workload):
    w = workload(2)
    daemon.request("attach", pid=w.pid)
    wait_for(lambda: all_pinned(daemon, w.pid))
    time.sleep(0.3)
    reply = daemon.request("status")
    d = reply["daemon"]
    assert reply["targets"][0]["descendants"] is False
    assert {t["pid"] for t in reply["targets"][0]["threads"]} == {w.pid}  # each thread's process
    for key in ("pid", "version", "uptime_s", "counter_source", "period_s", "domain_period_s", "domains", "cpus", "loop"):
        assert key in d
    assert d["counter_source"] in ("perf:instructions", "perf:task-clock", "schedstat")
    assert d["trees_listed"] == "after a birth"  # this /proc has the kernel's loadavg
    assert d["build"] == daemon.request("ping")["build"] == build_id()  # the code of this checkout
    assert d["loop"]["periods"] > 0
    jitter = d["loop"]["jitter_ms"]
    assert 0 <= jitter["p50"] <= jitter["p99"] <= jitter["max"]
    assert reply["targets"][0]["rule"] is None  # attached by a client
    th = reply["targets"][0]["threads"][0]
    assert set(th) >= {"tid", "name", "cpu", "domain", "utility", "pinned"}
    assert any(t["utility"] and t["utility"] > 0 for t in reply["targets"][0]["threads"])


def test_new_threads_are_adopted_and_exiting_threads_dropped_quietly(daemon, workload):
    w = workload(2)
    daemon.request("attach", pid=w.pid)
    wait_for(lambda: all_pinned(daemon, w.pid))
    new = set(w.command("spawn")) - set(w.tids[:-1])
    (tid,) = new
    wait_for(lambda: tid in threads_of(daemon, w.pid) and threads_of(daemon, w.pid)[tid]["pinned"])
    assert len(os.sched_getaffinity(tid)) == 1
    for _ in range(10):  # threads come and go while periods run
        w.command("spawn")
        w.command("stop")
        w.command("stop")
        w.command("spawn")
    wait_for(lambda: set(threads_of(daemon, w.pid)) == set(w.all_tids()))
    errors = [json.loads(l) for l in daemon.log_text().splitlines() if '"level"' in l]
    assert not [e for e in errors if e["level"] in ("error", "warning") and "tid" in e], errors


def test_a_process_that_exits_is_dropped(daemon, workload):
    w = workload(2)
    daemon.request("attach", pid=w.pid)
    w.close()
    wait_for(lambda: daemon.request("status")["targets"] == [])
    assert daemon.proc.poll() is None


def test_observe_mode_never_pins(daemon, workload):
    w = workload(2)
    before = masks(w.all_tids())
    daemon.request("attach", pid=w.pid, observe=True)
    time.sleep(0.5)
    threads = threads_of(daemon, w.pid)
    assert not any(t["pinned"] for t in threads.values())
    assert masks(w.all_tids()) == before
    assert daemon.request("status")["targets"][0]["mode"] == "observe"


def test_threads_regex_selects_threads(daemon, workload):
    w = workload(3)
    daemon.request("attach", pid=w.pid, threads="^worker")
    assert set(threads_of(daemon, w.pid)) == set(w.tids)  # the main thread is not a worker


def test_errors_for_bad_targets(daemon, workload):
    with pytest.raises(client.Refused) as e:
        daemon.request("attach", pid=2**31 - 2)
    assert e.value.code == "no_such_process"
    w = workload(1)
    daemon.request("attach", pid=w.pid)
    with pytest.raises(client.Refused) as e:
        daemon.request("attach", pid=w.pid)
    assert e.value.code == "already_attached" and "detach it and attach it again" in str(e.value)
    with pytest.raises(client.Refused) as e:
        daemon.request("detach", pid=1)
    assert e.value.code == "not_attached"


@pytest.mark.parametrize("payload, fragment", [
    (b"not json\n", "JSON"),
    (b"\xff\xfe\n", "UTF-8"),
    (b"[1, 2]\n", "object"),
    (b'{"cmd": "format_disk"}\n', "unknown command"),
    (b'{}\n', "missing field 'cmd': one of ping, attach"),  # it said "unknown command None"
    (b'{"cmd": "attach"}\n', "missing field"),
    (b'{"cmd": "attach", "pid": -1}\n', "field 'pid' out of range (1 to 2147483647)"),
    (b'{"cmd": "attach", "pid": "1"}\n', "field 'pid' must be an integer, got a string"),
    (b'{"cmd": "attach", "pid": true}\n', "must be an integer, got a boolean"),
    (b'{"cmd": "attach", "pid": null}\n', "must be an integer, got null"),
    (b'{"cmd": "ping", "cmd": "reload"}\n', "field 'cmd' given twice"),
    (b'{"cmd": "attach", "pid": {"a": 1, "a": 2}}\n', "must be an integer, got an object"),  # the field's fault
    (b'{"cmd": "attach", "pid": 1, "rm": 1}\n', "unknown field"),
    (b"[" * 60000 + b"\n", "nests too deeply"),  # it said "not a JSON object on one line"
])
def test_malformed_requests_get_structured_errors(daemon, payload, fragment):
    (reply,) = raw_exchange(daemon.socket, payload)
    assert reply["ok"] is False and reply["error"]["code"] == "bad_request"
    assert fragment in reply["error"]["message"]
    assert daemon.request("ping")["version"]


def test_oversized_line_is_refused_and_the_connection_goes_on(daemon):
    replies = raw_exchange(daemon.socket, b"x" * (200 * 1024) + b'\n{"cmd":"ping"}\n')
    assert replies[0]["error"]["code"] == "bad_request" and "longer" in replies[0]["error"]["message"]
    assert len(replies) == 2 and replies[1]["ok"]
    # several requests on one connection are answered in order
    replies = raw_exchange(daemon.socket, b'{"cmd":"ping"}\n{"cmd":"status"}\n')
    assert [r["ok"] for r in replies] == [True, True] and "daemon" in replies[1]


def test_client_vanishing_mid_reply(daemon, workload):
    w = workload(4)
    daemon.request("attach", pid=w.pid)
    for _ in range(20):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(daemon.socket)
        s.sendall(b'{"cmd":"status"}\n' * 50)
        s.close()
    assert daemon.request("ping")
    assert len(threads_of(daemon, w.pid)) == 5


@pytest.mark.parametrize("config, stop", [("", signal.SIGKILL), ("restore_on_exit: false\n", signal.SIGTERM)],
                         ids=["SIGKILL", "restore_on_exit false"])
def test_pins_left_by_a_stop_are_restored_by_the_next_start(tmp_path, workload, config, stop):
    """A daemon killed, or stopped with restore_on_exit: false, leaves its pins; the
    state file still holds the originals, which the next start puts back before it
    attaches the target again."""
    (tmp_path / "parlschedd.yaml").write_text("period_s: 0.05\n" + config + PINNING)
    d = start_daemon(tmp_path)
    w, before = pinned_workload(d, workload)
    tids = list(before)
    d.stop(stop)
    assert all(len(m) == 1 for m in masks(tids).values()) or len(ALL) == 1, "pins left as they were"
    if stop == signal.SIGTERM:  # the stop says what it left, and where the next start finds it
        said = [r for r in d.log_records() if r["event"].startswith("threads left as placed")]
        assert [r["threads"] for r in said] == [len(tids)] and said[0]["state_file"].endswith("state.json")
    (tmp_path / "parlschedd.yaml").write_text("period_s: 0.05\n" + PINNING)
    d2 = start_daemon(tmp_path)
    try:
        assert w.pid in {t["pid"] for t in d2.request("status")["targets"]}, "target re-adopted"
        wait_for(lambda: all_pinned(d2, w.pid, len(tids)))
    finally:
        assert d2.stop() == 0
    assert masks(tids) == before, "stop restores the masks saved by the first daemon"


def pinned_workload(d: Daemon, workload, threads: int = 3):
    """A workload of ``threads`` workers attached to daemon ``d``, every thread
    pinned: the workload and its threads' masks before (tid -> mask)."""
    w = workload(threads)
    before = masks(w.all_tids())
    d.request("attach", pid=w.pid)
    wait_for(lambda: all_pinned(d, w.pid, len(before)))
    return w, before


def crashed_with_pins(tmp_path, workload, threads: int = 3):
    """A daemon that pinned the threads of a workload of ``threads`` workers, then
    SIGKILLed: the daemon, the workload and the threads' masks before it pinned them
    (each pin still on, one CPU)."""
    d = start_daemon(tmp_path)
    w, before = pinned_workload(d, workload, threads)
    d.stop(signal.SIGKILL)
    assert all(len(m) == 1 for m in masks(before).values())
    return d, w, before


def assert_the_next_start_restores(tmp_path, w, before) -> None:
    """A daemon started on ``tmp_path`` attaches ``w`` again from the state file, and
    its stop gives every thread its mask ``before``."""
    d = start_daemon(tmp_path)
    try:
        wait_for(lambda: all_pinned(d, w.pid, len(before)))
    finally:
        assert d.stop() == 0
    assert masks(before) == before


@pytest.mark.skipif(len(ALL) < 2, reason="a pin must differ from the original mask")
def test_a_start_refused_after_a_crash_puts_the_pins_back(tmp_path, workload):
    """Under systemd a refused start (exit 78, not restarted) ends the unit, and systemd
    removes /run/parlsched with the state file: after a crash, a restart into a config
    broken meanwhile left the dead daemon's pins on for good. The refusal puts the
    original masks back first, and the file keeps the target attached by hand, which
    the start after the fix attaches again."""
    d, w, before = crashed_with_pins(tmp_path, workload)
    good = d.config.read_text()
    d.config.write_text("period_s: fast\n")
    proc = refused_start(d.config, tmp_path / "ctl.sock", tmp_path / "state")
    assert proc.returncode == REFUSED and "invalid config" in proc.stderr, proc.stderr
    assert masks(before) == before, "the refusal left the pins of the crashed run"
    d.config.write_text(good)
    assert_the_next_start_restores(tmp_path, w, before)


@pytest.mark.skipif(len(ALL) < 2, reason="a pin must differ from the original mask")
@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "writable by all"])
def test_a_start_refused_for_a_read_only_state_dir_puts_the_pins_back(tmp_path, workload, trusted):
    """After a crash, the state dir's file system went read-only: the start is refused
    ("cannot use state dir ...: Read-only file system ... choose another --state-dir")
    and left the dead daemon's pins on, its lock file not being open to write; the
    advice, followed, left them for good (review). Restoring only reads the file: the
    masks are put back, the file is left as it was; not from a dir the start would not
    trust (writable by all), as from a writable one. The read-only mount is real (a bind
    mount of the state dir, remounted read-only)."""
    d, w, before = crashed_with_pins(tmp_path, workload)
    state = tmp_path / "state"
    saved = (state / "state.json").read_bytes()
    pinned = masks(before)
    if not trusted:
        state.chmod(0o777)
    if subprocess.run(["mount", "--bind", str(state), str(state)]).returncode != 0:
        pytest.skip("cannot bind-mount here")
    try:
        assert subprocess.run(["mount", "-o", "remount,bind,ro", str(state), str(state)]).returncode == 0
        proc = refused_start(d.config, tmp_path / "ctl.sock", state)
        assert proc.returncode == REFUSED and ("Read-only file system" if trusted else "writable") in proc.stderr, proc.stderr
        assert masks(before) == (before if trusted else pinned), "the refusal left the pins of the crashed run"
        assert (state / "state.json").read_bytes() == saved
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)


@pytest.mark.skipif(len(ALL) < 2 or shutil.which("setpriv") is None, reason="a pin must differ; needs setpriv(1)")
def test_a_start_refused_without_cap_sys_nice_keeps_the_saved_masks(tmp_path, workload):
    """Refused for lacking CAP_SYS_NICE, a start could not restore other users' threads,
    and its rewrite of the state file dropped their records for good. It leaves the
    file and the pins alone; the next start with the capability restores them."""
    d, w, before = crashed_with_pins(tmp_path, workload)
    saved = (tmp_path / "state" / "state.json").read_text()
    proc = subprocess.run(["setpriv", "--bounding-set=-sys_nice", "--inh-caps=-sys_nice", sys.executable, "-m",
                           "parlschedd", "--config", str(d.config), "--socket", str(tmp_path / "ctl.sock"),
                           "--state-dir", str(tmp_path / "state")], capture_output=True, text=True, timeout=30)
    assert proc.returncode == REFUSED and "CAP_SYS_NICE" in proc.stderr, proc.stderr
    assert (tmp_path / "state" / "state.json").read_text() == saved
    assert_the_next_start_restores(tmp_path, w, before)


def test_a_failure_of_the_put_back_still_refuses_with_the_reason(tmp_path, monkeypatch):
    """Whatever goes wrong in the put-back (here a bug, raised on purpose: the one
    fake) must not take the place of the refusal: a traceback and exit 1, which
    systemd restarts, instead of the reason and 78."""
    from click.testing import CliRunner

    from parlschedd import __main__ as daemon_main
    from parlschedd.daemon import server

    def broken(state_dir: str) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(server, "put_back_after_refusal", broken)
    monkeypatch.setattr(daemon_main, "configure", lambda *args: None)  # the process-wide logging of later tests kept
    config = tmp_path / "bad.yaml"
    config.write_text("period_s: fast\n")
    with structlog.testing.capture_logs() as logs:
        result = CliRunner().invoke(daemon_main.main, ["--config", str(config), "--state-dir", str(tmp_path / "state"),
                                                       "--socket", str(tmp_path / "s.sock")])
    assert result.exit_code == REFUSED and "invalid config" in result.output, result.output
    assert [e["error"] for e in logs if e["event"].endswith("not put back")] == ["RuntimeError: a bug"], logs


def per_cpu_kernel_thread() -> int | None:
    """The tid of ksoftirqd/0, a kernel thread whose mask the kernel never lets
    change (PF_NO_SETAFFINITY: EINVAL for any mask), or None where there is none."""
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if entry.isdigit() and Path(f"/proc/{entry}/comm").read_text().strip() == "ksoftirqd/0":
                return int(entry)
    return None


@pytest.mark.skipif(len(ALL) < 2 or per_cpu_kernel_thread() is None, reason="a pin must differ; needs ksoftirqd/0")
def test_a_put_back_with_a_restore_refused_keeps_the_state_file_as_it_was(tmp_path, workload):
    """A thread the refused start cannot put back keeps its only record: the file is
    not written again without it, while the others get their masks. The refusal is
    real: the state file of the crashed run is given a record of ksoftirqd/0 (pinned
    to CPU 0, as the run would have left it), whose mask the kernel refuses to change."""
    from parlschedd.daemon import server

    _, w, before = crashed_with_pins(tmp_path, workload)
    path = tmp_path / "state" / "state.json"
    state = json.loads(path.read_text())
    kthread = per_cpu_kernel_thread()
    state["pinner"]["threads"][str(kthread)] = {"start_time": procfs.thread_start_time(kthread),
                                                "original": format_cpulist(ALL), "current": "0"}
    path.write_text(json.dumps(state))
    saved = path.read_bytes()
    with structlog.testing.capture_logs() as logs:
        server.put_back_after_refusal(str(tmp_path / "state"))
    assert [e["failed"] for e in logs if e["event"] == "recovered from previous run"] == [1], logs
    assert masks(before) == before, "the others are put back"
    assert path.read_bytes() == saved, "the record of the thread not put back was lost"


@pytest.mark.skipif(len(ALL) < 2, reason="a pin must differ from the original mask")
def test_a_start_refused_beside_a_running_daemon_leaves_its_pins(tmp_path, workload):
    """The refusal's put-back only takes a state dir no daemon holds: a second start
    on a running daemon's state dir, refused for its config, changes none of its pins."""
    d = start_daemon(tmp_path)
    try:
        w = workload(3)
        d.request("attach", pid=w.pid)
        wait_for(lambda: all_pinned(d, w.pid, len(w.all_tids())))
        bad = tmp_path / "bad.yaml"
        bad.write_text("period_s: fast\n")
        proc = refused_start(bad, tmp_path / "other.sock", tmp_path / "state")
        assert proc.returncode == REFUSED, proc.stderr
        assert all(len(m) == 1 for m in masks(w.all_tids()).values()), "pins put back under a running daemon"
        assert all_pinned(d, w.pid, len(w.all_tids()))
    finally:
        assert d.stop() == 0


@pytest.mark.skipif(len(ALL) < 2, reason="a pin must differ from the original mask")
def test_threads_born_while_no_daemon_ran_get_the_targets_own_mask_back(tmp_path, workload):
    """Threads a pinned thread created while the daemon was down (killed, not yet
    started again) inherit its pin. The next start took that pin for their own mask:
    it re-adopted them with it as their original, and they kept our pin for good."""
    _, w, before = crashed_with_pins(tmp_path, workload, threads=2)
    born = sorted(set(w.command("spawn") + w.command("spawn")) - set(before))
    assert len(born) == 2 and all(len(m) == 1 for m in masks(born).values()), "they inherit the main thread's pin"
    d2 = start_daemon(tmp_path)
    try:
        wait_for(lambda: all_pinned(d2, w.pid, len(before) + 2))
        assert d2.request("detach", pid=w.pid)["restored"] == len(before) + 2
        assert masks(w.all_tids()) == {t: ALL for t in w.all_tids()}
        assert [r for r in d2.log_records() if r["event"] == "recovered from previous run"][0]["born_while_down"] == 2
    finally:
        assert d2.stop() == 0


FORKER = """
import os, sys, time
for line in sys.stdin:  # each line: one child forked from the main thread, its pid said
    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
    print(child, flush=True)
"""


@pytest.mark.skipif(len(ALL) < 2, reason="a pin must differ from the original mask")
@pytest.mark.parametrize("descendants", [True, False], ids=["with descendants", "without"])
def test_a_child_process_forked_while_no_daemon_ran_gets_the_targets_own_mask_back(tmp_path, kill_after, descendants):
    """A child a pinned thread forked while the daemon was down inherits its pin. With
    --descendants the next start took that pin for the child's own mask: it adopted it
    with it as the original, and the child kept our pin for good. Without, the child is
    not the target's, as while a daemon runs, and keeps the mask it was born with."""
    parent = kill_after(subprocess.Popen([sys.executable, "-c", FORKER], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True))
    d = start_daemon(tmp_path)
    d.request("attach", pid=parent.pid, descendants=descendants)
    wait_for(lambda: all_pinned(d, parent.pid, 1))
    d.stop(signal.SIGKILL)
    pin = os.sched_getaffinity(parent.pid)
    assert pin != ALL
    parent.stdin.write("fork\n")
    parent.stdin.flush()
    child = int(parent.stdout.readline())
    try:
        assert os.sched_getaffinity(child) == pin, "inherited"
        d2 = start_daemon(tmp_path)
        try:
            wait_for(lambda: all_pinned(d2, parent.pid, 2 if descendants else 1))
            d2.request("detach", pid=parent.pid)
            assert os.sched_getaffinity(parent.pid) == ALL
            assert os.sched_getaffinity(child) == (ALL if descendants else pin)
            recovered = [r for r in d2.log_records() if r["event"] == "recovered from previous run"]
            assert recovered[0]["born_while_down"] == int(descendants)
        finally:
            assert d2.stop() == 0
    finally:
        os.kill(child, signal.SIGKILL)


@pytest.mark.skipif(len(ALL) < 2, reason="a pin must differ from the original mask")
def test_a_thread_pinned_by_its_owner_before_the_crash_keeps_its_mask(tmp_path, workload):
    """A thread the filter left out, pinned by its owner to one CPU (the shape of our
    pins) before the daemon was killed, is not taken for one born while it was down."""
    d = start_daemon(tmp_path)
    w = workload(2)
    d.request("attach", pid=w.pid, threads="^worker0$")
    left_out = [t for t in w.all_tids() if procfs.comm(t) == "worker1"][0]
    os.sched_setaffinity(left_out, {1})
    wait_for(lambda: all_pinned(d, w.pid, 1))  # the state saved: the thread was born before it
    d.stop(signal.SIGKILL)
    d2 = start_daemon(tmp_path)
    try:
        wait_for(lambda: all_pinned(d2, w.pid, 1))
        assert os.sched_getaffinity(left_out) == {1}
    finally:
        assert d2.stop() == 0
    assert os.sched_getaffinity(left_out) == {1}


def test_no_thread_is_pinned_while_the_state_file_cannot_be_written(tmp_path, workload):
    """The original masks go to disk before any pin: while the write fails (a directory
    where state.json goes, which even root cannot replace), the threads stay as they
    are; once it succeeds they are pinned."""
    d = start_daemon(tmp_path)
    w = workload(3)
    tids = w.all_tids()
    before = masks(tids)
    blocker = tmp_path / "state" / "state.json"
    blocker.unlink(missing_ok=True)
    (blocker / "in-the-way").mkdir(parents=True)
    try:
        d.request("attach", pid=w.pid)
        wait_for(lambda: "state file not written" in d.log_text())
        time.sleep(0.3)  # six periods
        assert masks(tids) == before and not any(t["pinned"] for t in threads_of(d, w.pid).values())
        shutil.rmtree(blocker)
        wait_for(lambda: all_pinned(d, w.pid, len(tids)))
        assert masks(tids) != before or len(ALL) == 1
    finally:
        shutil.rmtree(blocker, ignore_errors=True)
        assert d.stop() == 0
    assert masks(tids) == before


@pytest.mark.parametrize("text", [
    '{"version": 1, "pinner": {"version": 1, "thr',
    '[1, 2]',
    '{"version": 7, "pinner": {"version": 7, "threads": {}}, "targets": []}',
    '{"version": 1, "pinner": {"version": 1, "threads": []}, "targets": []}',
    '{"version": 1, "targets": []}',
], ids=["truncated", "not an object", "another version", "threads a list", "no pinner"])
def test_an_unusable_state_file_is_set_aside_and_the_daemon_starts(tmp_path, text):
    """Not a restart loop under systemd, and not overwritten by the first save: the
    masks it may hold stay for an administrator (state.json.unusable-TIME-PID)."""
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "state.json").write_text(text)
    d = start_daemon(tmp_path)
    try:
        d.request("ping")
        [aside] = (tmp_path / "state").glob("state.json.unusable-*")
        assert aside.read_text() == text and "state file unusable, ignoring it" in d.log_text()
    finally:
        assert d.stop() == 0


def test_a_bad_entry_of_the_state_file_costs_only_itself(tmp_path, workload):
    """A thread's unreadable record, or targets that are not a list, are skipped; the
    thread whose record is sound gets its original mask back."""
    w = workload(2)
    tid = w.tids[0]
    os.sched_setaffinity(tid, {min(ALL)})  # as a killed daemon left it
    good = {"start_time": procfs.thread_start_time(tid), "original": format_cpulist(ALL), "current": str(min(ALL))}
    state = {"version": 1, "pinner": {"version": 1, "threads": {str(tid): good, "1": "0-1", "x": good,
                                                          "99999999999999999999": good, "7": {**good, "original": "0-9999999999"}}},
             "targets": {"pid": w.pid}, "handed_over": "none", "placements": ["0", 1]}
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "state.json").write_text(json.dumps(state))
    d = start_daemon(tmp_path)
    try:
        assert os.sched_getaffinity(tid) == ALL
        assert d.request("status")["targets"] == []
        log = d.log_text()
        assert "a thread's saved mask is unreadable, skipped" in log and "none is attached again" in log
        assert "the last run's placements are unreadable, every saved thread is restored" in log
        [aside] = (tmp_path / "state").glob("state.json.unusable-*")  # a copy: the skipped records are not lost
        assert json.loads(aside.read_text()) == state and "state file unusable, part of it ignored" in log
    finally:
        assert d.stop() == 0


@pytest.mark.skipif(len(ALL) < 2, reason="needs 2 CPUs: a restore to CPU 0 alone must show")
@pytest.mark.parametrize("owner", [0, NOBODY], ids=["root's, believed", "nobody's, not read"])
def test_a_state_file_not_the_daemons_own_restores_and_reattaches_nothing(tmp_path, workload, owner):
    """A state file naming a root process's main thread with original mask CPU 0 and
    the process as attached by hand. As root's own file (what the daemon writes) it is
    believed: the thread is put on CPU 0 and the process attached again, which shows
    the file would work. As nobody's (forged through a state dir nobody could write)
    the daemon restored and re-attached the same; now it reads nothing of it and sets
    it aside, naming its owner."""
    w = workload(2)
    state = {"version": 1,
             "pinner": {"version": 1, "threads": {str(w.pid): {"start_time": procfs.thread_start_time(w.pid),
                                                               "original": "0", "current": format_cpulist(ALL)}}},
             "targets": [{"pid": w.pid, "start_time": procfs.process_start_time(w.pid), "observe": True}]}
    (tmp_path / "state").mkdir()
    forged = tmp_path / "state" / "state.json"
    forged.write_text(json.dumps(state))
    forged.chmod(0o600)
    os.chown(forged, owner, owner)
    d = start_daemon(tmp_path)
    try:
        attached = [t["pid"] for t in d.request("status")["targets"]]
        if owner == 0:
            assert os.sched_getaffinity(w.pid) == {0} and attached == [w.pid]
            return
        assert os.sched_getaffinity(w.pid) == ALL and attached == []
        [aside] = (tmp_path / "state").glob("state.json.unusable-*")
        assert json.loads(aside.read_text()) == state and aside.stat().st_uid == NOBODY
        [said] = [r for r in d.log_records() if r["event"].startswith("state file unusable")]
        assert said["path"] == str(aside) and said["why"] == ("owned by uid 65534 (nobody), not by root: not written "
                                                              "by this daemon alone, not read"), said
        written = wait_for(lambda: forged.exists() and forged.stat())
        assert (written.st_uid, stat.S_IMODE(written.st_mode)) == (0, 0o600)  # its own, not the forger's
    finally:
        assert d.stop() == 0


@pytest.mark.parametrize("when", ["before the start", "while it runs"])
def test_a_link_at_the_state_files_path_is_neither_read_nor_written_through(tmp_path, workload, when):
    """state.json replaced by a link to a root-only file: the next save wrote the
    daemon's JSON into that file. Now a link found at the start is set aside unread,
    and one put there later is replaced by the next save; the file it leads to is
    untouched either way."""
    victim = tmp_path / "victim"
    victim.write_text("root:only:\n")
    victim.chmod(0o600)
    link = tmp_path / "state" / "state.json"
    if when == "before the start":
        link.parent.mkdir()
        link.symlink_to(victim)
    d = start_daemon(tmp_path)
    try:
        if when == "while it runs":
            wait_for(link.exists)
            link.unlink()
            link.symlink_to(victim)
        else:
            [aside] = link.parent.glob("state.json.unusable-*")
            assert aside.is_symlink() and f"a symbolic link (to {victim}), not followed" in d.log_text()
        w = workload(2)
        d.request("attach", pid=w.pid)  # saved before any pin
        wait_for(lambda: all_pinned(d, w.pid, len(w.all_tids())))
        assert not link.is_symlink() and json.loads(link.read_text())["targets"][0]["pid"] == w.pid
    finally:
        assert d.stop() == 0
    assert victim.read_text() == "root:only:\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600


@pytest.mark.skipif(len(ALL) < 2, reason="needs 2 CPUs")
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["clean restart", "SIGKILL"])
def test_a_thread_set_by_someone_else_stays_theirs_across_a_restart(tmp_path, workload, stop):
    """A taskset on a pinned thread hands it over; the daemon restarts (SIGTERM, as
    systemctl restart; or SIGKILL) and attaches the target again: the thread is still
    theirs (ignored, never moved), where the next daemon used to adopt it with their
    mask as its original and move it. Detach ends that: attached afresh, it is managed."""
    d = start_daemon(tmp_path)
    w = workload(3)
    d.request("attach", pid=w.pid)
    pinned = wait_for(lambda: all_pinned(d, w.pid, len(w.all_tids())))
    theirs = w.tids[0]
    mask = ALL - {pinned[theirs]["cpu"]}  # one CPU, not the one we set
    os.sched_setaffinity(theirs, mask)
    wait_for(lambda: theirs not in threads_of(d, w.pid), timeout=3)  # handed over within rescan_s
    d.stop(stop)
    d2 = start_daemon(tmp_path)
    try:
        wait_for(lambda: all_pinned(d2, w.pid, len(w.all_tids()) - 1))
        time.sleep(0.5)  # ten periods
        target = d2.request("status", pid=w.pid)["targets"][0]
        assert theirs not in {t["tid"] for t in target["threads"]} and target["threads_ignored"] == 1
        assert target["threads_handed_over"] == 1  # kept across the restart, not taken for a filtered thread
        assert os.sched_getaffinity(theirs) == mask
        d2.request("detach", pid=w.pid)
        assert os.sched_getaffinity(theirs) == mask
        d2.request("attach", pid=w.pid)
        wait_for(lambda: all_pinned(d2, w.pid, len(w.all_tids())))
    finally:
        d2.stop()


@pytest.mark.skipif(len(ALL) < 2, reason="needs 2 CPUs")
def test_a_mask_set_while_the_daemon_was_down_is_left_as_set(tmp_path, workload):
    """The state file keeps a thread's masks at adoption, not at each pin. After a
    SIGKILL the next daemon restores a mask the last one could have set (here CPU 1
    alone: it places threads there only) and leaves another (CPU 0, set meanwhile)."""
    config = "period_s: 0.05\ndomain_period_s: 0.5\ncpus: [1]\n" + PINNING
    d = start_daemon(tmp_path, config)
    w = workload(3)
    tids = w.all_tids()
    before = masks(tids)
    d.request("attach", pid=w.pid)
    wait_for(lambda: all_pinned(d, w.pid, len(tids)))
    d.stop(signal.SIGKILL)
    theirs = w.tids[0]
    os.sched_setaffinity(theirs, {0})
    d2 = start_daemon(tmp_path, config)
    try:
        assert '"left_as_set_by_someone_else": 1' in d2.log_text()
        wait_for(lambda: all_pinned(d2, w.pid, len(tids) - 1))
        assert d2.request("status", pid=w.pid)["targets"][0]["threads_handed_over"] == 1
    finally:
        d2.stop()
    assert masks(tids) == {**before, theirs: {0}}


@pytest.mark.skipif(len(ALL) < 2, reason="needs 2 CPUs")
def test_a_restart_on_other_cpus_still_restores_the_last_runs_pins(tmp_path, workload):
    """The state file names the masks its run pinned to: a restart whose config
    places threads elsewhere (``cpus: [0]``) still tells the last run's pin on CPU 1
    from someone else's mask, and restores it (it was kept, pinned for good)."""
    d = start_daemon(tmp_path)
    w = workload(3)
    tids = w.all_tids()
    before = masks(tids)
    d.request("attach", pid=w.pid)
    wait_for(lambda: all_pinned(d, w.pid, len(tids)) and {1} in masks(tids).values())
    d.stop(signal.SIGKILL)
    (tmp_path / "parlschedd.yaml").write_text("period_s: 0.05\ncpus: [0]\n" + PINNING)
    d2 = start_daemon(tmp_path)
    try:
        assert "\"left_as_set_by_someone_else\": 0" in d2.log_text()
        wait_for(lambda: all_pinned(d2, w.pid, len(tids)))
    finally:
        d2.stop()
    assert masks(tids) == before


@pytest.mark.skipif(len(ALL) < 2, reason="needs 2 CPUs")
def test_a_restart_judges_the_last_runs_records_by_its_placements_only(tmp_path, workload):
    """The last run placed on CPU 0 only; CPU 1 alone, set while no daemon ran, is not
    its pin, even though the next run (every CPU) would pin there: left as set."""
    d = start_daemon(tmp_path, "period_s: 0.05\ncpus: [0]\n" + PINNING)
    w = workload(3)
    d.request("attach", pid=w.pid)
    wait_for(lambda: all_pinned(d, w.pid, len(w.all_tids())))
    d.stop(signal.SIGKILL)
    theirs = w.tids[0]
    os.sched_setaffinity(theirs, {1})
    (tmp_path / "parlschedd.yaml").write_text("period_s: 0.05\n" + PINNING)
    d2 = start_daemon(tmp_path)
    try:
        assert '"left_as_set_by_someone_else": 1' in d2.log_text()
    finally:
        d2.stop()
    assert os.sched_getaffinity(theirs) == {1}


def test_sigint_stops_as_sigterm_does_and_restores(daemon, workload):
    w = workload(2)
    tids = w.all_tids()
    before = masks(tids)
    daemon.request("attach", pid=w.pid)
    wait_for(lambda: all_pinned(daemon, w.pid, len(tids)))
    assert daemon.stop(signal.SIGINT) == 0
    assert masks(tids) == before


def test_restart_after_target_exit_touches_nothing(tmp_path, workload):
    """The saved threads are all found gone (none restored, none failed) and the
    target is not attached again."""
    d = start_daemon(tmp_path)
    w = workload(2)
    n = len(w.all_tids())
    d.request("attach", pid=w.pid)
    wait_for(lambda: all_pinned(d, w.pid, n))
    d.stop(signal.SIGKILL)
    w.close()
    log_before = len(d.log_text())
    d2 = start_daemon(tmp_path)
    try:
        assert d2.request("status")["targets"] == []
        lines = [json.loads(line) for line in d2.log_text()[log_before:].splitlines() if line.startswith("{")]
        recovered = next(e for e in lines if e["event"] == "recovered from previous run")
        assert (recovered["restored"], recovered["gone"], recovered["failed"]) == (0, n, 0)
        [skipped] = [e for e in lines if e["event"] == "previous target not re-attached"]
        assert skipped["reason"] == "it has exited"  # said so, not as the errno of a read
        assert skipped["pid"] == w.pid and isinstance(skipped["start_time"], int)  # fields, not a Python dict
        assert "target" not in skipped
    finally:
        d2.stop()


def test_a_reload_logs_the_file_it_read_or_the_built_in_config(daemon, tmp_path):
    """A daemon on the built-in defaults logged its reload with config=None."""
    daemon.request("reload")
    assert [e["config"] for e in daemon.log_records() if e["event"] == "reloaded"] == [str(daemon.config)]
    if config_file(None) is not None:
        pytest.skip(f"{config_file(None)} is on this host: a daemon without --config reads it")
    log = tmp_path / "builtin.log"
    proc = subprocess.Popen([sys.executable, "-m", "parlschedd", "--socket", str(tmp_path / "builtin.sock"),
                             "--state-dir", str(tmp_path / "builtin-state"), "--log-format", "json"],
                            stdout=subprocess.DEVNULL, stderr=open(log, "ab"))
    builtin = Daemon(proc, str(tmp_path / "builtin.sock"), tmp_path / "builtin-state", tmp_path / "none.yaml", log)

    def up() -> bool:
        try:
            return builtin.request("ping") is not None
        except client.Unreachable:
            assert proc.poll() is None, log.read_text()
            return False

    try:
        wait_for(up, timeout=15)
        builtin.request("reload")
        assert [e["config"] for e in builtin.log_records() if e["event"] in ("started", "reloaded")] == \
            ["the built-in config"] * 2
    finally:
        builtin.stop()


def test_invalid_config_on_reload_keeps_the_old_one(daemon):
    period = daemon.request("status")["daemon"]["period_s"]
    daemon.config.write_text("period_s: -3\nlearning: {eps: 7}\n")
    with pytest.raises(client.Refused) as e:
        daemon.request("reload")
    assert e.value.code == "bad_config"
    assert f"{daemon.config}: period_s: must be > 0" in str(e.value) and "learning.eps" in str(e.value)  # what is wrong, where
    failures = lambda: [r for r in daemon.log_records() if r["event"].startswith("reload failed")]  # noqa: E731
    said = len(failures())  # the request's
    daemon.proc.send_signal(signal.SIGHUP)  # each waited for: two SIGHUPs at once may make one reload
    assert "learning.eps" in str(wait_for(lambda: len(f := failures()) == said + 1 and f[-1]))
    assert daemon.request("status")["daemon"]["period_s"] == period
    daemon.config.write_bytes(b"period_s: 0.2\n# caf\xe9\n")  # Latin-1: not YAML's UTF-8
    daemon.proc.send_signal(signal.SIGHUP)
    assert "UTF-8" in str(wait_for(lambda: len(f := failures()) == said + 2 and f[-1]))
    assert daemon.proc.poll() is None
    assert daemon.request("status")["daemon"]["period_s"] == period
    daemon.config.write_text("period_s: 0.07\ndomain_period_s: 0.7\n")
    daemon.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: daemon.request("status")["daemon"]["period_s"] == 0.07)
    daemon.config.unlink()
    with pytest.raises(client.Refused, match=f"the old one stays: cannot read config {daemon.config}: no such file"):
        daemon.request("reload")


def test_a_config_someone_else_may_write_is_not_reloaded(daemon):
    """Its start refuses such a config; a reload (the request, or SIGHUP) keeps the
    old one with the same words, as for an invalid config, until the file is root's
    and no one else's to write again."""
    period = daemon.request("status")["daemon"]["period_s"]
    daemon.config.write_text("period_s: 0.07\ndomain_period_s: 0.7\n")
    daemon.config.chmod(0o666)
    fix = f"chown root: {daemon.config} && chmod go-w {daemon.config}"
    with pytest.raises(client.Refused) as e:
        daemon.request("reload")
    assert e.value.code == "bad_config"
    assert f"{daemon.config}: (file): mode 0666, writable by its group and others: whoever may write the config " \
           f"chooses which processes parlschedd pins; {fix}" in str(e.value)
    daemon.config.chmod(0o644)
    os.chown(daemon.config, NOBODY, NOBODY)
    daemon.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "owned by uid 65534 (nobody), not by root" in daemon.log_text())
    assert daemon.request("status")["daemon"]["period_s"] == period
    *_, said = [r for r in daemon.log_records() if r["event"] == "reload failed, keeping the old config"]
    assert said["errors"] == [f"{daemon.config}: (file): owned by uid 65534 (nobody), not by root: whoever may write "
                              f"the config chooses which processes parlschedd pins; {fix}"]
    os.chown(daemon.config, 0, 0)
    daemon.request("reload")  # a refusal raises
    assert daemon.request("status")["daemon"]["period_s"] == 0.07


def test_the_jitter_after_a_reload_is_against_the_new_period(daemon):
    """The start times of 0.05 s periods were measured against 0.1 s: 50 ms of
    "jitter" for the next 1000 periods."""
    wait_for(lambda: daemon.request("status")["daemon"]["loop"]["periods"] > 20)
    daemon.config.write_text("period_s: 0.1\ndomain_period_s: 1.0\n")
    daemon.request("reload")
    wait_for(lambda: "jitter_ms" in daemon.request("status")["daemon"]["loop"])
    periods = daemon.request("status")["daemon"]["loop"]["periods"]
    # 10 periods of the new length, waited for (a fixed 0.5 s gave a loaded VM's late ticks 5)
    wait_for(lambda: daemon.request("status")["daemon"]["loop"]["periods"] >= periods + 10)
    assert daemon.request("status")["daemon"]["loop"]["jitter_ms"]["p50"] < 25


def test_a_reload_to_a_shorter_period_or_rescan_takes_effect_at_once(tmp_path, kill_after):
    """period_s 8 reloaded to 0.05 waited out the 8 s deadline before its first short
    period (no counter read, no pin meanwhile), and rescan_s 30 reloaded to 0.1 waited
    out the 30 s before a rule matched anything."""
    from tests.conftest import tagged_sleeper

    d = start_daemon(tmp_path, "period_s: 8\ndomain_period_s: 8\nrescan_s: 30\n")
    try:
        periods = d.request("status")["daemon"]["loop"]["periods"]
        tag = f"parlsched-reload-{os.getpid()}"
        matched = kill_after(tagged_sleeper(tag))
        d.config.write_text(f"period_s: 0.05\ndomain_period_s: 0.5\nrescan_s: 0.1\ntargets:\n  - name: '{tag}'\n")
        d.request("reload")
        wait_for(lambda: d.request("status")["daemon"]["loop"]["periods"] >= periods + 10, timeout=3)
        wait_for(lambda: matched.pid in [t["pid"] for t in d.request("status")["targets"]], timeout=3)
    finally:
        d.stop()


def test_a_reload_to_a_metrics_port_another_program_holds_is_refused_as_config_check(tmp_path):
    """The next start would refuse the port another program listens on: the reload
    that would leave it for that start is refused in config check's words, as one to
    CPUs the host lacks is (it was a warning, and the restart it advised failed)."""
    d = start_daemon(tmp_path, "period_s: 0.05\n")
    try:
        with socket.socket() as other:
            other.bind(("127.0.0.1", 0))
            other.listen()
            port = other.getsockname()[1]
            d.config.write_text(f"period_s: 0.05\nmetrics: '127.0.0.1:{port}'\n")
            with pytest.raises(client.Refused) as e:
                d.request("reload")
        assert e.value.code == "bad_config"
        assert f"metrics: port {port} on 127.0.0.1 is in use by pid {os.getpid()} " in str(e.value), str(e.value)
    finally:
        d.stop()


def test_a_reload_that_changes_the_cpus_is_refused_not_claimed(daemon, workload):
    """Every target's scheduler and pins are built on the running layout: a reload
    with other cpus or domains is refused with the reason and nothing of it applied
    (it said "reloaded" and went on placing threads on the old CPUs)."""
    before = daemon.request("status")["daemon"]
    daemon.config.write_text("period_s: 0.2\ncpus: [0]\n")
    with pytest.raises(client.Refused) as e:
        daemon.request("reload")
    assert e.value.code == "bad_config" and "takes effect at a restart" in str(e.value)
    after = daemon.request("status")["daemon"]
    assert (after["cpus"], after["domains"], after["period_s"]) == (before["cpus"], before["domains"], before["period_s"])


def test_a_reload_of_history_periods_reaches_the_targets_attached(daemon, workload):
    """The config file says a reload applies to the targets already attached: their
    histories kept 600 periods after a reload to 5, and the reply said nothing."""
    w = workload(2)
    daemon.request("attach", pid=w.pid)
    wait_for(lambda: len(daemon.request("history", pid=w.pid)["samples"]) >= 10)
    daemon.config.write_text(daemon.config.read_text() + "history_periods: 5\n")
    daemon.request("reload")
    time.sleep(0.3)  # six periods
    assert len(daemon.request("history", pid=w.pid)["samples"]) == 5


def test_a_reload_to_cpus_the_next_start_would_refuse_says_so(daemon):
    """cpus: [4096], no CPU of this host: the reload advised a restart, which would
    then be refused (exit 78), the daemon down. It is refused in config check's words."""
    daemon.config.write_text("period_s: 0.2\ncpus: [4096]\n")
    with pytest.raises(client.Refused) as e:
        daemon.request("reload")
    assert e.value.code == "bad_config" and "cpus:" in str(e.value), str(e.value)
    assert "takes effect at a restart" not in str(e.value) and "no usable CPU" in str(e.value), str(e.value)
    daemon.config.write_text("period_s: 0.2\ncpus: [0]\ndomains: [[0], [1]]\n")  # a finding of domains[1], not domains
    with pytest.raises(client.Refused) as e:
        daemon.request("reload")
    assert "domains[1]: names CPUs 1, outside the config's cpus (0)" in str(e.value), str(e.value)


def test_schedstat_asked_for_is_no_refusal_to_warn_of(tmp_path):
    d = start_daemon(tmp_path, "period_s: 0.05\nutility: schedstat\n")
    try:
        assert d.request("status")["daemon"]["counter_source"] == "schedstat"
        assert "refused" not in d.log_text()
    finally:
        d.stop()


def test_config_cpus_this_host_lacks_are_left_out_and_said(tmp_path):
    """In config check's words, as is a rule's cgroup that is not there yet."""
    d = start_daemon(tmp_path, "period_s: 0.05\ncpus: [0, 4095]\ntargets: [{cgroup: /parlsched-no-such-cgroup}]\n")
    try:
        assert d.request("status")["daemon"]["cpus"] == [0]
        said = {line["key"]: line["problem"] for line in d.log_records()
                if line["event"] == "config not all usable on this host"}
        assert said["cpus"].startswith("4095 not usable on this host") and said["cpus"].endswith("parlschedd runs on 0")
        assert "/parlsched-no-such-cgroup on this host (yet); the rule matches nothing until" in said["targets[0].cgroup"]
    finally:
        d.stop()


def test_an_explicit_layouts_cpus_this_host_lacks_are_left_out_and_said(tmp_path):
    """A layout naming CPUs absent here (as SMT turned off, or a CPU taken offline,
    leaves a layout copied from the node lists) refused the start; now narrowed as
    ``cpus`` is, in config check's words. The daemon's ``cpus`` are its domains' (they
    were every usable CPU, those the layout leaves out too)."""
    d = start_daemon(tmp_path, "period_s: 0.05\ndomains: [[0, 4094], [4095]]\n")
    try:
        daemon = d.request("status")["daemon"]
        assert (daemon["domains"], daemon["cpus"]) == ([[0]], [0])
        said = {line["key"]: line["problem"] for line in d.log_records()
                if line["event"] == "config not all usable on this host"}
        assert said == {"domains[0]": "4094 not usable on this host (absent or offline); the domain keeps 0",
                        "domains[1]": "4095 not usable on this host (absent or offline); the domain is left out"}
    finally:
        d.stop()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_reload_of_cpus_the_kept_domains_go_beyond_says_why_a_restart_would_fail(tmp_path):
    """A reload that changed cpus alone was told "takes effect at a restart", and the
    restart then refused the domains it kept, whose findings the reload had left out
    as of a key it did not change (review): cpus and domains are judged together."""
    d = start_daemon(tmp_path, "period_s: 0.2\ndomains: [[0], [1]]\n")
    try:
        d.config.write_text("period_s: 0.2\ndomains: [[0], [1]]\ncpus: [0]\n")
        with pytest.raises(client.Refused) as e:
            d.request("reload")
        assert "domains[1]: names CPUs 1, outside the config's cpus (0)" in str(e.value), str(e.value)
        assert "takes effect at a restart" not in str(e.value)
    finally:
        d.stop()


def test_a_reload_that_changes_the_counter_source_is_refused(daemon):
    daemon.config.write_text("period_s: 0.2\nutility: schedstat\n")
    with pytest.raises(client.Refused) as e:
        daemon.request("reload")
    assert e.value.code == "bad_config" and "utility: takes effect at a restart" in str(e.value)
    assert daemon.request("status")["daemon"]["period_s"] == 0.05


def test_a_reload_applies_to_the_targets_already_attached(tmp_path, workload, kill_after):
    """New learning parameters reach the targets attached before the reload (they
    learn afresh: here every thread turns free); a rule's new observe re-attaches
    its target in that mode, restored first. Both were kept from before the reload
    while it said "reloaded"."""
    w = workload(2)
    naptime = f"3600.{os.getpid()}{time.monotonic_ns() % 10**6}"  # a command line no one else has
    ruled = kill_after(subprocess.Popen(["sleep", naptime]))
    base = "period_s: 0.05\ndomain_period_s: 0.5\nrescan_s: 0.2\n"
    rule = f"targets: [{{name: '^sleep {naptime}$'}}]\n"
    d = start_daemon(tmp_path, base + PINNING + rule)
    try:
        before = masks([ruled.pid])
        d.request("attach", pid=w.pid)
        wait_for(lambda: all_pinned(d, w.pid) and ruled.pid in {t["pid"] for t in d.request("status")["targets"]})
        wait_for(lambda: all_pinned(d, ruled.pid))
        shown = lambda pid: d.request("status", pid=pid)["targets"][0]  # noqa: E731
        assert not any(t["free"] for t in shown(w.pid)["threads"])
        d.config.write_text(base + "learning: {free: true, free_prior: 1.0, lambda: 0.0}\n"
                            + rule.replace("$'}]", "$', observe: true}]"))
        d.request("reload")
        wait_for(lambda: all(t["free"] for t in shown(w.pid)["threads"]))
        wait_for(lambda: shown(ruled.pid)["mode"] == "observe")
        assert masks([ruled.pid]) == before and not any(t["pinned"] for t in shown(ruled.pid)["threads"])
        assert "targets_learning_afresh" in d.log_text()
    finally:
        d.stop()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGQUIT])
def test_sigterm_restores_and_removes_the_socket(tmp_path, workload, stop):
    d = start_daemon(tmp_path)
    w = workload(2)
    before = masks(w.all_tids())
    d.request("attach", pid=w.pid)
    wait_for(lambda: all_pinned(d, w.pid))
    assert d.stop(stop) == 0
    assert masks(w.all_tids()) == before
    assert not os.path.exists(d.socket)


def test_signals_sent_to_daemons_by_habit_are_ignored_not_fatal(tmp_path, workload):
    """SIGUSR1 (reopen your logs), SIGUSR2 and SIGALRM end a Python process by
    default: the daemon died with every thread still pinned. They are logged, and the
    daemon goes on managing; so are the others whose default ends a process (SIGPWR,
    SIGVTALRM, SIGIO, a real-time one ended it without a word)."""
    d = start_daemon(tmp_path)
    w = workload(2)
    d.request("attach", pid=w.pid)
    wait_for(lambda: all_pinned(d, w.pid))
    for sig, name in ((signal.SIGUSR1, "SIGUSR1"), (signal.SIGUSR2, "SIGUSR2"), (signal.SIGALRM, "SIGALRM"),
                      (signal.SIGPWR, "SIGPWR"), (signal.SIGVTALRM, "SIGVTALRM"), (signal.SIGPROF, "SIGPROF"),
                      (signal.SIGIO, "SIGIO"), (signal.SIGRTMIN + 3, "SIGRTMIN+3"), (signal.SIGRTMAX, "SIGRTMAX")):
        d.proc.send_signal(sig)
        wait_for(lambda name=name: f'"signal": "{name}"' in d.log_text())
    assert d.proc.poll() is None and all_pinned(d, w.pid)
    assert d.stop() == 0


def test_sigxcpu_stops_the_daemon_cleanly(tmp_path, workload):
    """SIGXCPU (RLIMIT_CPU's soft limit: its SIGKILL comes next) ended the daemon with
    every thread pinned; it stops as SIGTERM stops it, restoring them."""
    d = start_daemon(tmp_path)
    w = workload(2)
    before = masks(w.all_tids())
    d.request("attach", pid=w.pid)
    wait_for(lambda: all_pinned(d, w.pid))
    assert d.stop(signal.SIGXCPU) == 0
    assert masks(w.all_tids()) == before


def test_clean_restart_attaches_hand_attached_targets_again(tmp_path, workload):
    """SIGTERM restores every mask but keeps the hand-attached targets in the state
    file (systemctl restart keeps the state dir); the next daemon attaches them again,
    but not a process that exited, and a target detached before the stop stays
    detached."""
    d = start_daemon(tmp_path)
    kept, gone = workload(2), workload(2)
    before = masks(kept.all_tids())
    for w in (kept, gone):
        d.request("attach", pid=w.pid)
        wait_for(lambda w=w: all_pinned(d, w.pid))
    assert d.stop() == 0
    assert masks(kept.all_tids()) == before, "stop restores"
    gone.close()
    d2 = start_daemon(tmp_path)
    try:
        assert [t["pid"] for t in d2.request("status")["targets"]] == [kept.pid]
        wait_for(lambda: all_pinned(d2, kept.pid))
        assert "re-attached from the last run" in d2.log_text()
        d2.request("detach", pid=kept.pid)
    finally:
        assert d2.stop() == 0
    assert masks(kept.all_tids()) == before
    d3 = start_daemon(tmp_path)
    try:
        assert d3.request("status")["targets"] == [], "a detached target stays detached"
    finally:
        d3.stop()


def start_rule_daemon(tmp_path: Path, tag: str, more: str = "") -> Daemon:
    """A daemon whose one rule matches the command lines with ``tag``, rescanned every 0.1 s."""
    (tmp_path / "parlschedd.yaml").write_text(
        f"period_s: 0.05\ndomain_period_s: 0.5\nrescan_s: 0.1\n{more}targets:\n  - name: '{tag}'\n")
    return start_daemon(tmp_path)


@contextlib.contextmanager
def rule_daemon(tmp_path: Path, tag: str) -> Iterator[Daemon]:
    """``start_rule_daemon``, stopped at the end."""
    d = start_rule_daemon(tmp_path, tag)
    try:
        yield d
    finally:
        d.stop()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["clean restart", "SIGKILL"])
def test_a_rule_target_detached_by_hand_stays_detached_until_it_exits(tmp_path, kill_after, stop):
    """detach of a process a rule matches sticks (the next rescan re-attached it, 0.1 s
    after "detached"), across a restart too (the next daemon attached it again); attach
    by hand takes it back."""
    tag = f"parlsched-detach-{os.getpid()}"
    proc = kill_after(tagged_sleeper(tag))
    d = start_rule_daemon(tmp_path, tag)
    try:
        wait_for(lambda: proc.pid in {t["pid"] for t in d.request("status")["targets"]})
        d.request("detach", pid=proc.pid)
        time.sleep(0.5)  # five rescans
        assert proc.pid not in {t["pid"] for t in d.request("status")["targets"]}
    finally:
        d.stop(stop)
    with rule_daemon(tmp_path, tag) as d:
        time.sleep(0.5)
        assert proc.pid not in {t["pid"] for t in d.request("status")["targets"]}
        assert d.request("attach", pid=proc.pid)["target"]["pid"] == proc.pid


def inject_into_pythons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    """Fault injection: ``code`` run by every Python this test starts from now on (its
    sitecustomize), the daemons among them; so a test starts its own Python programs
    first, where the injection is the daemon's alone."""
    where = tmp_path / "inject"
    where.mkdir()
    (where / "sitecustomize.py").write_text(code)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(where), os.environ.get("PYTHONPATH", "")]))


KILLED_IN_A_DETACH = """
import os, signal
from parlschedd.host import affinity
restore = affinity.Pinner.restore
def restore_then_die(self, tid):  # fault injection: SIGKILL after a detach's first restore, before any save
    done = restore(self, tid)
    if os.path.exists(os.environ["PARLSCHED_TEST_DIE"]):
        os.kill(os.getpid(), signal.SIGKILL)
    return done
affinity.Pinner.restore = restore_then_die
"""


@pytest.mark.parametrize("by", ["hand", "rule"])
def test_a_daemon_killed_inside_a_detach_does_not_attach_it_again_at_its_next_start(tmp_path, kill_after, monkeypatch,
                                                                                   by):
    """SIGKILL in a detach once a thread had its mask back and before the state file
    was written: the file still listed the target attached by hand, or not yet the
    rule match as detached by hand, and the next start attached it again (the crash
    recovery review, timed at 1-15 ms). The detach is written first now. Fault
    injection (a sitecustomize in the daemon) lands the SIGKILL in that window."""
    tag = f"parlsched-killed-in-detach-{os.getpid()}"
    proc = kill_after(tagged_sleeper(tag))  # first: the injection is the daemon's alone
    die = tmp_path / "die-in-the-next-restore"
    monkeypatch.setenv("PARLSCHED_TEST_DIE", str(die))
    inject_into_pythons(tmp_path, monkeypatch, KILLED_IN_A_DETACH)
    before = os.sched_getaffinity(proc.pid)
    start = (lambda: start_rule_daemon(tmp_path, tag)) if by == "rule" else (lambda: start_daemon(tmp_path))
    d = start()
    if by == "hand":
        d.request("attach", pid=proc.pid)
    wait_for(lambda: all_pinned(d, proc.pid, 1))
    die.touch()
    with pytest.raises((client.Unreachable, ConnectionError, ValueError)):
        d.request("detach", pid=proc.pid)
    assert d.proc.wait(10) == -signal.SIGKILL
    die.unlink()
    d = start()
    try:
        time.sleep(0.5)  # five rescans of the rule
        assert proc.pid not in target_pids(d) and os.sched_getaffinity(proc.pid) == before
    finally:
        assert d.stop() == 0
    assert os.sched_getaffinity(proc.pid) == before


FAILING_DETACH = """
import os
from parlschedd.daemon import engine
detach = engine.Engine.detach
def failing_detach(self, *args, **kwargs):  # fault injection: a bug in the detach, before it changed anything
    if os.path.exists(os.environ["PARLSCHED_TEST_FAIL"]):
        raise RuntimeError("injected")
    return detach(self, *args, **kwargs)
engine.Engine.detach = failing_detach
"""


@pytest.mark.parametrize("by", ["hand", "rule"])
def test_a_detach_that_fails_leaves_the_state_file_saying_the_target_is_attached(tmp_path, kill_after, monkeypatch,
                                                                                 by):
    """The detach is written to the state file before it restores anything; when it then
    fails on a bug, the target is still attached and pinned, and the file said it was
    not (left alone by the rules, or no longer attached by hand): a crash then would
    have left it unmanaged (review). The file is written again as the daemon stands."""
    tag = f"parlsched-failing-detach-{os.getpid()}"
    proc = kill_after(tagged_sleeper(tag))  # first: the injection is the daemon's alone
    fail = tmp_path / "fail-the-next-detach"
    monkeypatch.setenv("PARLSCHED_TEST_FAIL", str(fail))
    inject_into_pythons(tmp_path, monkeypatch, FAILING_DETACH)
    d = start_rule_daemon(tmp_path, tag) if by == "rule" else start_daemon(tmp_path)
    try:
        if by == "hand":
            d.request("attach", pid=proc.pid)
        wait_for(lambda: all_pinned(d, proc.pid, 1))
        fail.touch()
        with pytest.raises(client.Refused, match="internal"):
            d.request("detach", pid=proc.pid)
        assert proc.pid in target_pids(d)
        state = json.loads((tmp_path / "state" / "state.json").read_text())
        assert [t["pid"] for t in state["targets"]] == ([proc.pid] if by == "hand" else [])
        assert state["left_alone"] == []
    finally:
        assert d.stop() == 0


FULL_AFTER_ONE_WRITE = """
import errno, os
from parlschedd.daemon import statefile
write_state = statefile.write_state
def write_then_fail(path, state):  # fault injection: the disk fills after the next write
    armed = os.environ["PARLSCHED_TEST_FULL"]
    if os.path.exists(armed + ".full"):
        raise OSError(errno.ENOSPC, "No space left on device (injected)")
    write_state(path, state)
    if os.path.exists(armed):
        os.rename(armed, armed + ".full")
statefile.write_state = write_then_fail
"""


def test_a_detach_written_before_the_disk_filled_is_not_said_to_be_undone(tmp_path, kill_after, monkeypatch):
    """The detach is on disk (the first save), the save after the restore failed: the
    reply said a crash would attach the target again, which the file on disk no longer
    does (review). Said only when the detach itself is not on disk; status still says
    the file is not written."""
    proc = kill_after(tagged_sleeper(f"parlsched-full-after-detach-{os.getpid()}"))
    armed = tmp_path / "full-after-the-next-write"
    monkeypatch.setenv("PARLSCHED_TEST_FULL", str(armed))
    inject_into_pythons(tmp_path, monkeypatch, FULL_AFTER_ONE_WRITE)
    d = start_daemon(tmp_path)
    try:
        d.request("attach", pid=proc.pid)
        wait_for(lambda: all_pinned(d, proc.pid, 1))
        armed.touch()
        assert d.request("detach", pid=proc.pid)["state_file_error"] is None
        assert "No space left on device (injected)" in d.request("status")["daemon"]["state_file_error"]
        assert json.loads((tmp_path / "state" / "state.json").read_text())["targets"] == []
    finally:
        Path(f"{armed}.full").unlink(missing_ok=True)
        assert d.stop() == 0


def test_config_rule_adopts_by_name_and_releases_when_gone(tmp_path, workload, kill_after):
    """A rule adopts what it matches and nothing else; a match that exits is dropped,
    and one the rule stops matching (after a reload) is released with its masks back."""
    w = workload(2)
    tag = f"parlsched-test-{os.getpid()}"
    gone, kept = kill_after(tagged_sleeper(tag)), kill_after(tagged_sleeper(tag))
    before = os.sched_getaffinity(kept.pid)
    with rule_daemon(tmp_path, tag) as d:
        wait_for(lambda: target_pids(d) == {gone.pid, kept.pid})
        assert w.pid not in target_pids(d)
        assert {t["rule"] for t in d.request("status")["targets"]} == {0}
        wait_for(lambda: all(t["pinned"] for t in threads_of(d, kept.pid).values()))
        gone.kill()
        gone.wait()
        wait_for(lambda: target_pids(d) == {kept.pid})
        migrations = d.request("status")["targets"][0]["migrations"]
        d.config.write_text(d.config.read_text().replace("targets:\n", "targets:\n  - name: '^no-such-name$'\n"))
        d.request("reload")  # the same rule, second now: the target stays, and says so
        wait_for(lambda: d.request("status")["targets"][0]["rule"] == 1)
        assert d.request("status")["targets"][0]["migrations"] >= migrations, "not detached and attached again"
        d.config.write_text(d.config.read_text().replace(tag, tag + "-no-longer"))
        d.request("reload")
        wait_for(lambda: target_pids(d) == set())
        assert os.sched_getaffinity(kept.pid) == before


NAMED_IN_LATIN1 = """
import threading, time
def run():
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "wb") as comm:
        comm.write(b"bad\\xff")
    time.sleep(60)
threading.Thread(target=run, daemon=True).start()
time.sleep(60)
"""


def test_names_and_command_lines_not_in_utf8_are_managed_and_matched(tmp_path, kill_after):
    """Any user may name a thread, or start a process with arguments, in bytes that are
    not UTF-8: such a process is attached with its names escaped, and it keeps no rule
    from matching (attach half-attached it and every period of it failed; one such
    process anywhere stopped every rule's rescan)."""
    tag = f"parlsched-test-{os.getpid()}"
    latin1 = kill_after(subprocess.Popen([sys.executable, "-c", NAMED_IN_LATIN1, b"caf\xe9"]))
    ruled = kill_after(tagged_sleeper(tag))
    wait_for(lambda: len(os.listdir(f"/proc/{latin1.pid}/task")) == 2)
    d = start_rule_daemon(tmp_path, tag, PINNING)
    try:
        wait_for(lambda: ruled.pid in {t["pid"] for t in d.request("status")["targets"]})
        d.request("attach", pid=latin1.pid)
        wait_for(lambda: len(threads_of(d, latin1.pid)) == 2 and all(t["pinned"] for t in threads_of(d, latin1.pid).values()))
        assert "bad\\xff" in {t["name"] for t in threads_of(d, latin1.pid).values()}
        assert "failed" not in d.log_text()
    finally:
        d.stop()


FAULT = """
import os
if os.environ.get("PARLSCHED_FAULT_PID"):  # fault injection: a bug in adopting one process's threads
    from parlschedd.daemon import engine
    real = engine.Engine._refresh
    def _refresh(self, target, now):
        if target.pid == int(os.environ["PARLSCHED_FAULT_PID"]):
            raise RuntimeError("injected")
        return real(self, target, now)
    engine.Engine._refresh = _refresh
"""


def test_a_rule_match_whose_attach_hits_a_bug_is_left_alone_and_the_rest_attached(tmp_path, monkeypatch, kill_after):
    """Fault injection (a sitecustomize in the daemon): the attach of one matching
    process raises. It is undone and logged once, and the other match is attached;
    retried at each rescan it logged a traceback every rescan_s and held up the rest.
    A restart without the bug (an upgrade) attaches it: only what was detached by hand
    stays left alone across a restart."""
    tag = f"parlsched-fault-{os.getpid()}"
    buggy, fine = kill_after(tagged_sleeper(tag)), kill_after(tagged_sleeper(tag))
    inject_into_pythons(tmp_path, monkeypatch, FAULT)
    monkeypatch.setenv("PARLSCHED_FAULT_PID", str(buggy.pid))
    with rule_daemon(tmp_path, tag) as d:
        wait_for(lambda: fine.pid in {t["pid"] for t in d.request("status")["targets"]})
        time.sleep(0.5)  # five rescans
        assert buggy.pid not in {t["pid"] for t in d.request("status")["targets"]}
        assert d.log_text().count("rule match not attached, left alone while it lives") == 1
        assert d.proc.poll() is None
    monkeypatch.delenv("PARLSCHED_FAULT_PID")
    with rule_daemon(tmp_path, tag) as d:
        wait_for(lambda: buggy.pid in {t["pid"] for t in d.request("status")["targets"]})


REQUEST_FAULT = """
import os
from parlschedd.daemon import engine
real = engine.Engine.detach
def detach(self, pid, *args, **kwargs):  # fault injection: a bug in serving one request
    if pid == int(os.environ["PARLSCHED_FAULT_PID"]):
        raise RuntimeError("injected")
    return real(self, pid, *args, **kwargs)
engine.Engine.detach = detach
"""


def test_a_request_that_hits_a_bug_is_answered_internal_and_the_daemon_goes_on(tmp_path, workload, monkeypatch):
    """Fault injection (a sitecustomize in the daemon): serving detach raises. The
    client gets the structured ``internal`` error (exit 1 from parlschedctl), the
    traceback goes to the log, and the next requests are served."""
    w = workload(2)
    inject_into_pythons(tmp_path, monkeypatch, REQUEST_FAULT)
    monkeypatch.setenv("PARLSCHED_FAULT_PID", str(w.pid))
    d = start_daemon(tmp_path)
    try:
        d.request("attach", pid=w.pid)
        with pytest.raises(client.Refused) as e:
            d.request("detach", pid=w.pid)
        assert e.value.code == "internal" and "RuntimeError" in str(e.value)
        assert "request failed" in d.log_text() and "injected" in d.log_text()
        assert w.pid in {t["pid"] for t in d.request("status")["targets"]}
    finally:
        assert d.stop() == 0




LOOP_FAULTS = """
from parlschedd.daemon import control, engine, rules, server
def injected(*args, **kwargs):  # fault injection: a bug in every part of the loop's work
    raise RuntimeError("injected")
first_rescan = rules.RuleMatcher.rescan
def rescan(self, *args):  # the start's rescan passes: a bug there stops the start, as it should
    rules.RuleMatcher.rescan = injected
    return first_rescan(self, *args)
engine.Engine.tick = injected
rules.RuleMatcher.rescan = rescan
control.ControlSocket.keep = injected
server.Daemon.reload = injected
"""


def test_bugs_in_the_loops_work_are_logged_and_the_daemon_goes_on(tmp_path, workload, monkeypatch):
    """Fault injection (a sitecustomize in the daemon): the period, the rules' rescan,
    the socket's check and a reload all raise, every time. Each is logged, the daemon
    goes on answering requests, and SIGTERM still stops it cleanly."""
    inject_into_pythons(tmp_path, monkeypatch, LOOP_FAULTS)
    w = workload(2)
    d = start_daemon(tmp_path, "period_s: 0.05\nrescan_s: 0.1\n")
    try:
        d.request("attach", pid=w.pid)
        d.proc.send_signal(signal.SIGHUP)
        said = ("period failed", "rescan failed", "socket and lock check failed", "reload failed, keeping the old config")
        wait_for(lambda: all(f'"{event}"' in d.log_text() for event in said))
        time.sleep(0.3)  # more periods and rescans, all failing
        assert w.pid in {t["pid"] for t in d.request("status")["targets"]}
    finally:
        assert d.stop() == 0
    assert "RuntimeError: injected" in d.log_text()  # what failed, said


def as_nobody(socket_path: str, cmd: str, **args) -> dict:
    return as_user(NOBODY, socket_path, cmd, **args)


def test_non_root_peer_cannot_touch_root_processes(open_dir, workload, kill_after):
    (open_dir / "parlschedd.yaml").write_text("period_s: 0.05\nsocket: {mode: '0666'}\n")
    d = start_daemon(open_dir)
    try:
        root_w = workload(1)
        nobody_w = kill_after(subprocess.Popen(["sleep", "60"], user=NOBODY, group=NOBODY, extra_groups=[]))
        assert as_nobody(d.socket, "attach", pid=root_w.pid) == {"refused": "permission_denied"}
        d.request("attach", pid=root_w.pid)
        assert as_nobody(d.socket, "detach", pid=root_w.pid) == {"refused": "permission_denied"}
        assert as_nobody(d.socket, "status")["targets"] == []
        mine = as_nobody(d.socket, "attach", pid=nobody_w.pid)
        assert mine["target"]["pid"] == nobody_w.pid
        assert [t["pid"] for t in as_nobody(d.socket, "status")["targets"]] == [nobody_w.pid]
        assert as_nobody(d.socket, "reload") == {"refused": "permission_denied"}
        assert {t["pid"] for t in d.request("status")["targets"]} == {root_w.pid, nobody_w.pid}
        assert as_nobody(d.socket, "detach", pid=nobody_w.pid)["restored"] == 1
    finally:
        d.stop()


AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
needs_setpriv = pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv(1) to drop privileges")


@needs_setpriv
def test_without_cap_sys_nice_the_daemon_refuses_to_start_and_says_why(open_dir):
    os.chown(open_dir, NOBODY, NOBODY)
    (open_dir / "parlschedd.yaml").write_text("period_s: 0.05\n")
    proc = subprocess.run([*AS_NOBODY, sys.executable, "-m", "parlschedd", "--config", str(open_dir / "parlschedd.yaml"),
                           "--socket", str(open_dir / "ctl.sock"), "--state-dir", str(open_dir / "state")],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == REFUSED
    assert "needs CAP_SYS_NICE" in proc.stderr and "AmbientCapabilities" in proc.stderr
    assert not (open_dir / "ctl.sock").exists()


@needs_setpriv
def test_an_unprivileged_daemon_with_ambient_capabilities_manages_root_threads(open_dir, workload):
    """The daemon as nobody with only CAP_SYS_NICE and CAP_PERFMON (what a unit with
    User= and AmbientCapabilities= gives it) pins and restores a root process's threads,
    with perf counters on them."""
    os.chown(open_dir, NOBODY, NOBODY)
    caps = "+sys_nice,+perfmon"
    d = start_daemon(open_dir, prefix=[*AS_NOBODY, f"--inh-caps={caps}", f"--ambient-caps={caps}"])
    try:
        assert Path(f"/proc/{d.proc.pid}/status").read_text().count(f"\t{NOBODY}\t") >= 2  # Uid and Gid
        w = workload(2)
        before = masks(w.all_tids())
        d.request("attach", pid=w.pid)
        wait_for(lambda: pinned_where_shown(d, w.pid, len(w.all_tids())))
        assert d.request("status")["daemon"]["counter_source"].startswith("perf:")
        assert "CAP_PERFMON" not in d.log_text()  # no warning: it may count other users' threads
        assert d.request("detach", pid=w.pid)["restored"] == len(before)
        assert masks(w.all_tids()) == before
    finally:
        d.stop()


@needs_setpriv
def test_without_cap_perfmon_the_daemon_counts_with_schedstat_or_says_why_it_cannot(open_dir, workload):
    """With CAP_SYS_NICE alone, perf_event_open on root's threads is refused. Where the
    daemon's own probe is refused too (perf_event_paranoid >= 2 refuses kernel-mode
    counting) it counts with schedstat and manages them; where the probe passes it warns."""
    os.chown(open_dir, NOBODY, NOBODY)
    d = start_daemon(open_dir, prefix=[*AS_NOBODY, "--inh-caps=+sys_nice", "--ambient-caps=+sys_nice"])
    try:
        w = workload(2)
        d.request("attach", pid=w.pid)
        if d.request("status")["daemon"]["counter_source"] == "schedstat":
            wait_for(lambda: all_pinned(d, w.pid, len(w.all_tids())))
            assert "perf counters refused, counting CPU time from schedstat" in d.log_text()  # not in silence
            assert "perf:task-clock: " in d.log_text()  # and why
        else:
            assert "without CAP_PERFMON" in d.log_text()
    finally:
        d.stop()


def test_descendants_present_and_future_are_managed(daemon):
    """--descendants manages the children a process has at attach and those it starts
    later: the tree starts its second child only when told (a line on its stdin),
    after the first is managed, and that child is then adopted and pinned too. The
    tree is a session of its own, killed whole at the end: no orphan left behind."""
    tree = subprocess.Popen(["bash", "-c", "sleep 30 & read -r; sleep 30 & wait"], stdin=subprocess.PIPE,
                            start_new_session=True)
    try:
        first = wait_for(lambda: procfs_children(tree.pid))
        daemon.request("attach", pid=tree.pid, descendants=True)
        wait_for(lambda: all_pinned(daemon, tree.pid, 2))
        assert set(threads_of(daemon, tree.pid)) == {tree.pid, *first}
        target = daemon.request("status", pid=tree.pid)["targets"][0]
        assert target["descendants"] is True  # and each thread says whose it is: the child's is not the tree's
        assert {t["tid"]: t["pid"] for t in target["threads"]} == {tree.pid: tree.pid, first[0]: first[0]}
        tree.stdin.write(b"\n")  # now the second child is born, after the attach
        tree.stdin.flush()
        later = wait_for(lambda: set(procfs_children(tree.pid)) - set(first))
        wait_for(lambda: pinned_where_shown(daemon, tree.pid, 3))
        assert set(threads_of(daemon, tree.pid)) == {tree.pid, *first, *later}
        # a child is adopted between fork and exec as "bash"; its name follows the exec
        wait_for(lambda: sorted(t["name"] for t in threads_of(daemon, tree.pid).values()) == ["bash", "sleep", "sleep"])
    finally:
        os.killpg(tree.pid, signal.SIGKILL)  # bash and every sleep it started
        tree.wait()
        tree.stdin.close()


def test_the_target_name_follows_an_exec(daemon, kill_after):
    proc = kill_after(subprocess.Popen(["bash", "-c", "sleep 0.3; exec sleep 30"]))
    assert daemon.request("attach", pid=proc.pid)["target"]["name"] == "bash"
    wait_for(lambda: daemon.request("status", pid=proc.pid)["targets"][0]["name"] == "sleep", timeout=10)


def test_a_thread_is_managed_by_one_target_only(daemon):
    """A process attached by hand and also a descendant of another target: the first
    target keeps its threads, so no second adoption saves our pin as the original."""
    tree = subprocess.Popen(["bash", "-c", "sleep 30 & wait"])
    try:
        child = wait_for(lambda: procfs_children(tree.pid))[0]
        daemon.request("attach", pid=tree.pid, descendants=True)
        wait_for(lambda: all_pinned(daemon, tree.pid, 2))
        with pytest.raises(client.Refused) as e:
            daemon.request("attach", pid=child)
        assert e.value.code == "already_attached" and f"descendant of {tree.pid}; detach {tree.pid} first" in str(e.value)
        with pytest.raises(client.Refused) as e:
            daemon.request("detach", pid=child)
        assert e.value.code == "not_attached" and f"managed as a descendant of {tree.pid}; detach {tree.pid}" in str(e.value)
        with pytest.raises(client.Refused, match="parlschedd itself"):
            daemon.request("attach", pid=daemon.proc.pid)
        daemon.request("detach", pid=tree.pid)
        assert os.sched_getaffinity(child) == ALL and os.sched_getaffinity(tree.pid) == ALL

        daemon.request("attach", pid=child)  # the other order: the child first
        wait_for(lambda: all_pinned(daemon, child, 1))
        daemon.request("attach", pid=tree.pid, descendants=True)
        wait_for(lambda: all_pinned(daemon, tree.pid, 1))
        time.sleep(0.3)
        assert set(threads_of(daemon, tree.pid)) == {tree.pid}
        daemon.request("detach", pid=child)
        assert os.sched_getaffinity(child) == ALL
        wait_for(lambda: set(threads_of(daemon, tree.pid)) == {tree.pid, child})  # now it is the tree's
        daemon.request("detach", pid=tree.pid)
        assert os.sched_getaffinity(child) == ALL and os.sched_getaffinity(tree.pid) == ALL
    finally:
        subprocess.run(["pkill", "-P", str(tree.pid)])
        tree.kill()
        tree.wait()


def test_zombies_and_kernel_threads_are_refused_with_the_reason(daemon):
    zombie = subprocess.Popen(["true"])
    wait_for(lambda: Path(f"/proc/{zombie.pid}/stat").read_text().split(")")[-1].split()[0] == "Z")
    try:
        with pytest.raises(client.Refused, match="zombie") as e:
            daemon.request("attach", pid=zombie.pid)
        assert e.value.code == "no_such_process"
    finally:
        zombie.wait()
    if Path("/proc/2/comm").read_text().strip() == "kthreadd":
        with pytest.raises(client.Refused, match="kernel thread"):
            daemon.request("attach", pid=2)
    assert daemon.request("status")["targets"] == []


LEADER_EXITS = """
import ctypes, threading, time
for _ in range(2):
    threading.Thread(target=time.sleep, args=(60,)).start()
ctypes.CDLL(None).pthread_exit(None)
"""


def test_a_process_whose_main_thread_exited_before_its_others_is_attached(daemon):
    """A program may end main() with pthread_exit(3) while its workers run on: its
    leader is then a zombie ('Z') as an exited process's is, but the process lives
    (stat's num_threads counts the workers). It was refused as "a zombie"."""
    proc = subprocess.Popen([sys.executable, "-c", LEADER_EXITS])
    try:
        wait_for(lambda: procfs.process_stat(proc.pid).state == "Z" and len(os.listdir(f"/proc/{proc.pid}/task")) == 3)
        workers = [t for t in map(int, os.listdir(f"/proc/{proc.pid}/task")) if t != proc.pid]
        before = masks(workers)
        daemon.request("attach", pid=proc.pid)
        wait_for(lambda: all(threads_of(daemon, proc.pid).get(t, {}).get("pinned") for t in workers))
        daemon.request("detach", pid=proc.pid)
        assert masks(workers) == before
    finally:
        proc.kill()
        proc.wait()


def procfs_children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.parametrize("mount, prefix", CGROUP_MOUNTS, ids=["v2", "v1 cpuset"])
def test_config_rule_adopts_a_cgroup_and_releases_when_it_leaves(tmp_path, mount, prefix):
    """The process sits in a cgroup below the rule's (a unit in a slice): it matches."""
    with own_cgroup(mount) as group, own_cgroup(group) as job:
        proc = subprocess.Popen(["sleep", "60"])
        try:
            (job / "cgroup.procs").write_text(str(proc.pid))
            (tmp_path / "parlschedd.yaml").write_text(
                f"period_s: 0.05\nrescan_s: 0.1\ntargets:\n  - cgroup: '{prefix}/{group.name}'\n")
            d = start_daemon(tmp_path)
            try:
                wait_for(lambda: proc.pid in {t["pid"] for t in d.request("status")["targets"]})
                (Path(mount) / "cgroup.procs").write_text(str(proc.pid))  # moved out: no longer matches
                wait_for(lambda: d.request("status")["targets"] == [])
                assert os.sched_getaffinity(proc.pid) == ALL
                said = [r for r in d.log_records() if r["event"] == "detached" and r["pid"] == proc.pid]
                assert [r["reason"] for r in said] == ["no config rule matches it any more"]  # the log said no why
            finally:
                d.stop()
        finally:
            proc.kill()
            proc.wait()


def test_free_threads_get_their_whole_domain_and_are_restored(tmp_path, workload):
    """learning.free with prior 1 and no exploration: every thread is left to the kernel
    inside its domain (here the one domain of all usable CPUs), even one that came
    with a narrower mask; detach puts that mask back."""
    d = start_daemon(tmp_path, "period_s: 0.05\ndomain_period_s: 0.5\nlearning: {free: true, free_prior: 1.0, lambda: 0.0}\n")
    try:
        w = workload(3)
        tids = w.all_tids()
        os.sched_setaffinity(w.tids[0], {max(ALL)})
        before = masks(tids)
        d.request("attach", pid=w.pid)
        threads = wait_for(lambda: all_pinned(d, w.pid, len(tids)))
        assert all(t["free"] and t["cpu"] is None and t["domain"] == 0 for t in threads.values())
        wait_for(lambda: os.sched_getaffinity(w.tids[0]) == ALL)
        assert all(os.sched_getaffinity(tid) == ALL for tid in tids)
        assert d.request("detach", pid=w.pid)["restored"] == len(tids)
        assert masks(tids) == before
    finally:
        d.stop()


@pytest.mark.skipif(len(ALL) < 2, reason="needs 2 CPUs")
def test_a_target_bound_to_one_domain_is_never_moved_to_another(tmp_path, workload, cpuset):
    """This machine has one NUMA node: the config's domains make its two CPUs two
    sockets, and a real cgroup v1 cpuset of CPU 1 binds the target to the second, as a
    container bound to one node. Level 1 every other period and eager (zeta 1): the
    other domain, empty, is a better reply for every thread, but none of its CPUs is
    the target's, so no thread is moved there and no pin is refused (before, each
    Level 1 step sent a thread there and the kernel refused its pins)."""
    d = start_daemon(tmp_path, "period_s: 0.05\ndomain_period_s: 0.1\ndomains: [[0], [1]]\n"
                     "learning: {free: false, zeta: 1.0, gamma: 1.0}\n")
    try:
        w = workload(3)
        (cpuset / "cgroup.procs").write_text(str(w.pid))
        (cpuset / "cpuset.cpus").write_text("1")
        d.request("attach", pid=w.pid)
        wait_for(lambda: all_pinned(d, w.pid, len(w.all_tids())))
        time.sleep(1.0)  # 10 Level 1 steps
        assert {t["domain"] for t in threads_of(d, w.pid).values()} == {1}
        assert "pin refused" not in d.log_text()
        assert d.request("status", pid=w.pid)["targets"][0]["cpus"] == [1]
    finally:
        d.stop()


def test_a_run_dir_removed_under_the_daemon_is_made_again(tmp_path, workload):
    """``make clean`` (rm -rf run/) while the daemon runs: it went on managing but no
    client could reach it, and with its lock file gone a second daemon started on the
    same state dir and fought it over the threads. Both come back at the next rescan,
    the socket with the mode the daemon started with (a reload's waits for a restart);
    connections already open are kept. While they cannot be made again (a file where
    the run dir was) that is said once, not every rescan."""
    config = "period_s: 0.05\nrescan_s: 0.1\n" + PINNING
    run = tmp_path / "run"
    run.mkdir()
    d = start_daemon(tmp_path, config + "socket: {mode: '0600'}\n", run=run)
    sock = Path(d.socket)
    try:
        w = workload(2)
        before = masks(w.all_tids())
        with socket.socket(socket.AF_UNIX) as kept:
            kept.connect(str(sock))
            d.request("attach", pid=w.pid)
            (tmp_path / "parlschedd.yaml").write_text(config + "socket: {mode: '0666'}\n")
            assert d.request("reload")["restart_pending"] == ["socket"]
            os.rename(run, tmp_path / "removed")  # at once: a rescan amid rmtree would make state/ again under it
            shutil.rmtree(tmp_path / "removed")
            wait_for(lambda: (run / "state" / "lock").exists() and (run / "state" / "state.json").exists() and sock.exists())
            assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
            assert d.request("status", pid=w.pid)["targets"][0]["pid"] == w.pid
            kept.sendall(b'{"cmd": "ping"}\n')
            assert json.loads(kept.makefile().readline())["ok"]
        second = refused_start(tmp_path / "parlschedd.yaml", tmp_path / "second.sock", run / "state")
        assert second.returncode == REFUSED and "is in use by" in second.stderr, second.stderr
        assert "control socket removed under the daemon, made again" in d.log_text()
        said_before = len(d.log_text())
        os.rename(run, tmp_path / "gone")
        run.write_text("not a directory\n")
        time.sleep(0.6)  # six rescans
        assert d.log_text()[said_before:].count("control socket removed, and cannot be made again") == 1
        assert d.log_text()[said_before:].count("the state dir's lock was removed and cannot be taken again") == 1
        run.unlink()
        wait_for(lambda: sock.exists() and (run / "state" / "lock").exists())
        assert d.request("ping")["version"]
    finally:
        assert d.stop() == 0
    assert masks(w.all_tids()) == before and not sock.exists()


def test_a_socket_path_that_is_not_a_socket_is_left_alone(tmp_path):
    """A mistyped --socket naming a file must not delete it: the daemon refuses to start."""
    precious = tmp_path / "parlschedd.yaml.bak"
    precious.write_text("keep me\n")
    (tmp_path / "cfg.yaml").write_text("period_s: 0.05\n")
    proc = refused_start(tmp_path / "cfg.yaml", precious, tmp_path / "state")
    assert proc.returncode == REFUSED
    assert "exists and is not a socket" in proc.stderr
    assert precious.read_text() == "keep me\n"


def test_a_socket_path_too_long_makes_no_directory(tmp_path):
    """The length was found by bind, after the socket's missing parents were made (as
    root, and left behind): checked first now."""
    (tmp_path / "cfg.yaml").write_text("period_s: 0.05\n")
    sock = tmp_path / "made" / ("s" * 120)
    proc = refused_start(tmp_path / "cfg.yaml", sock, tmp_path / "state")
    assert proc.returncode == REFUSED, proc.stderr
    assert f"parlschedd: --socket: {len(str(sock))} bytes, a Unix socket's path holds at most 107\n" == proc.stderr
    assert not (tmp_path / "made").exists()


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_a_daemon_in_a_user_namespace_says_its_capabilities_hold_there_alone(tmp_path):
    """Rootless podman, an unprivileged LXD container: CapEff shows every capability,
    which the kernel honours inside the namespace alone, so the start check passed and
    nothing said why threads of processes outside it were refused. A real namespace
    (unshare -U -r): the daemon starts, and warns with the namespace's uid_map."""
    if subprocess.run(["unshare", "-U", "-r", "true"], capture_output=True).returncode != 0:
        pytest.skip("user namespaces not allowed here")
    d = start_daemon(tmp_path, prefix=["unshare", "-U", "-r"])
    try:
        assert d.request("ping")
    finally:
        assert d.stop() == 0
    said = [r for r in d.log_records() if r["event"].startswith("running in a user namespace")]
    assert [r["uid_map"] for r in said] == [f"0 {os.geteuid()} 1"], d.log_text()


def test_a_refused_start_exits_with_the_status_the_unit_does_not_restart(tmp_path):
    """Under systemd (Restart=on-failure) a start refused for its config exited 1, as a
    crash does: systemd started it again every RestartSec into its start limit, and the
    admin's `systemctl restart` after fixing the file failed with "Start request
    repeated too quickly" until `systemctl reset-failed`. It exits 78 (EX_CONFIG),
    which the unit's RestartPreventExitStatus= names; a crash still exits otherwise."""
    config = tmp_path / "cfg.yaml"
    config.write_text("period_s: fast\n")
    proc = refused_start(config, tmp_path / "d.sock", tmp_path / "state")
    assert proc.returncode == REFUSED == 78 and f"parlschedd: invalid config {config}" in proc.stderr, proc.stderr
    unit = (Path(__file__).resolve().parents[2] / "systemd" / "parlschedd.service").read_text()
    assert re.search(rf"^RestartPreventExitStatus={REFUSED}$", unit, re.M), "the unit restarts a refused start"


def test_a_refused_start_is_a_json_line_under_log_format_json(tmp_path):
    """The unit runs the daemon with --log-format json, and every line it logs is a
    JSON object but the one an admin needs most: a start refused for a bad config was
    the plain "parlschedd: invalid config ..." among them, which a collector that
    parses each line drops. It is the event "refused to start" with the same reason."""
    config = tmp_path / "cfg.yaml"
    config.write_text("period_s: fast\n")
    plain = refused_start(config, tmp_path / "d.sock", tmp_path / "state")
    proc = refused_start(config, tmp_path / "d.sock", tmp_path / "state", "--log-format", "json")
    lines = proc.stderr.splitlines()
    assert proc.returncode == REFUSED and len(lines) == 1, proc.stderr
    record = json.loads(lines[0])
    assert (record["event"], record["level"]) == ("refused to start", "error")
    assert f"parlschedd: {record['error']}\n" == plain.stderr


def test_a_config_for_cpus_this_host_lacks_is_refused_naming_the_file_and_keys(tmp_path):
    """Valid (config check says so, and that it would not start here), but with no CPU
    of its own on this host: the refusal said only "no usable CPUs"."""
    config = tmp_path / "cfg.yaml"
    config.write_text("cpus: [4095]\n")
    proc = refused_start(config, tmp_path / "d.sock", tmp_path / "state")
    assert proc.returncode == REFUSED and f"parlschedd: {config}: cpus: no usable CPUs" in proc.stderr, proc.stderr
    assert "on this host" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("what", ["--socket", "--state-dir"])
def test_a_path_under_missing_directories_makes_none(tmp_path, what):
    """A mistyped --socket or --state-dir made every missing directory of its path, as
    root, and left them behind; only the socket's or the state's own directory
    (/run/parlsched) is made, not its parents."""
    (tmp_path / "cfg.yaml").write_text("period_s: 0.05\n")
    paths = {"--socket": str(tmp_path / "d.sock"), "--state-dir": str(tmp_path / "state")}
    paths[what] = str(tmp_path / "typo" / "run" / "d.sock" if what == "--socket" else tmp_path / "typo" / "run")
    proc = refused_start(tmp_path / "cfg.yaml", paths["--socket"], paths["--state-dir"])
    assert proc.returncode == REFUSED and f"no directory {tmp_path / 'typo'} " in proc.stderr, proc.stderr
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("case", ["state dir under a file", "state dir is a file", "state dir refuses files",
                                  "no such socket group"])
def test_an_unusable_state_dir_or_socket_group_stops_the_start(tmp_path, case):
    """The daemon refuses to start, in one line, rather than run without the state
    file a restart after SIGKILL restores from, or with a socket its group cannot use."""
    (tmp_path / "a-file").write_text("")
    state, config = tmp_path / "state", "period_s: 0.05\n"
    if case == "state dir under a file":
        state = tmp_path / "a-file" / "state"
    elif case == "state dir is a file":
        state = tmp_path / "a-file"
    elif case == "state dir refuses files":
        state = Path("/sys")  # a directory in which even root may not create a file (sysfs)
    else:
        config += "socket: {group: no-such-group-here}\n"
    (tmp_path / "cfg.yaml").write_text(config)
    sock = tmp_path / "d.sock"
    proc = refused_start(tmp_path / "cfg.yaml", sock, state)
    assert proc.returncode == REFUSED
    if case == "no such socket group":
        assert (f"{tmp_path / 'cfg.yaml'}: socket.group: no group 'no-such-group-here' on this host; create it "
                "(systemd-sysusers parlsched.sysusers.conf) or set socket.group: null") in proc.stderr
    elif case == "state dir refuses files":
        assert "cannot use state dir /sys: Permission denied (the original masks" in proc.stderr
    else:
        assert f"cannot use state dir {state}: " in proc.stderr and "not a directory" in proc.stderr.lower()
    assert "Traceback" not in proc.stderr
    assert not sock.exists()


@pytest.mark.parametrize("before", ["nothing", "the state dir", "the state dir and a lock file"])
def test_a_start_refused_for_another_daemons_socket_leaves_nothing_it_made(daemon, tmp_path, before):
    """Refused because another daemon listens on the socket, a start left the state dir
    and lock file it had just made (as root, in /run). What was there before stays, and
    so does the other daemon's own lock."""
    state = tmp_path / "second-state"
    if before != "nothing":
        state.mkdir()
    if before == "the state dir and a lock file":
        (state / "lock").write_text("4242\n")  # a daemon stopped earlier left it
    proc = refused_start(daemon.config, daemon.socket, state)
    assert proc.returncode == REFUSED and (f"another daemon is listening on {daemon.socket} (pid {daemon.proc.pid}): stop it, "
                                     "or give this one another --socket and --state-dir") in proc.stderr, proc.stderr
    if before == "nothing":
        assert not state.exists()
    else:
        assert sorted(os.listdir(state)) == ([] if before == "the state dir" else ["lock"])
    assert (daemon.state_dir / "lock").read_text() == f"{daemon.proc.pid}\n"
    assert daemon.request("ping")["version"]


@pytest.mark.parametrize("sock", ["d.sock", "sock/d.sock", "state/sock/d.sock"],
                         ids=["beside", "in a directory of its own", "inside the state dir"])
def test_a_start_refused_for_a_metrics_port_in_use_leaves_nothing_it_made(tmp_path, sock):
    """Nor the socket's own directory, which the start makes when missing (it was
    left behind, empty). A port another program holds is refused before anything is
    made, in config check's words; one another parlschedd holds (config check's
    check leaves a parlschedd's alone: a restart frees the running one's) when the
    daemon listens, after its socket and state dir are made, which it removes."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (tmp_path / "cfg.yaml").write_text(f"period_s: 0.05\nmetrics: '127.0.0.1:{port}'\n")
        proc = refused_start(tmp_path / "cfg.yaml", tmp_path / sock, tmp_path / "state")
    said = f"metrics: port {port} on 127.0.0.1 is in use by pid {os.getpid()} ("
    assert proc.returncode == REFUSED and said in proc.stderr, proc.stderr  # the holder named, as config check names it
    assert sorted(os.listdir(tmp_path)) == ["cfg.yaml"]  # no state dir, no lock file, no socket
    (tmp_path / "other").mkdir()
    other = start_daemon(tmp_path / "other", "period_s: 0.05\nmetrics: '127.0.0.1:0'\n")
    try:
        port = wait_for(lambda: next((r["port"] for r in other.log_records() if r["event"] == "metrics listening"), None))
        (tmp_path / "cfg.yaml").write_text(f"period_s: 0.05\nmetrics: '127.0.0.1:{port}'\n")
        proc = refused_start(tmp_path / "cfg.yaml", tmp_path / sock, tmp_path / "state")
    finally:
        other.stop()
    said = f"cannot listen for metrics on 127.0.0.1:{port}: Address already in use, by pid {other.proc.pid} (parlschedd)"
    assert proc.returncode == REFUSED and said in proc.stderr, proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["cfg.yaml", "other"]


def test_a_second_daemon_on_the_same_state_dir_is_refused(daemon, workload, tmp_path):
    """Two daemons on one state dir would each restore the other's threads and
    overwrite its saved masks (a review lost every original that way): the second is
    refused in one line naming the first, which keeps its threads and its file."""
    w = workload(2)
    daemon.request("attach", pid=w.pid)
    wait_for(lambda: all(len(c) == 1 for c in masks(w.all_tids()).values()))
    saved = (daemon.state_dir / "state.json").read_text()
    proc = refused_start(daemon.config, tmp_path / "second.sock", daemon.state_dir)
    assert proc.returncode == REFUSED
    assert f"state dir {daemon.state_dir} is in use by pid {daemon.proc.pid}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert (daemon.state_dir / "lock").read_text() == f"{daemon.proc.pid}\n"  # the refused start removed nothing of it
    assert json.loads((daemon.state_dir / "state.json").read_text())["pinner"]["threads"].keys() == \
        json.loads(saved)["pinner"]["threads"].keys()  # the first daemon's originals are all still there
    assert all(len(m) == 1 for m in masks(w.all_tids()).values())  # and its threads pinned (it may move them)
    assert daemon.request("status", pid=w.pid)["targets"][0]["pid"] == w.pid


DROPS_AFTER_FORK = r"""
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # stays root
os.setgroups([])
os.setresgid(65534, 65534, 65534)
os.setresuid(65534, 65534, 65534)
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_non_root_peer_manages_only_the_descendants_it_owns(open_dir, kill_after):
    """--descendants by a non-root client skips a descendant owned by someone else
    (here root's, under a parent that dropped to nobody), which it could not attach
    by itself; before, it pinned it and showed its threads."""
    (open_dir / "parlschedd.yaml").write_text("period_s: 0.05\nsocket: {mode: '0666'}\n" + PINNING)
    d = start_daemon(open_dir)
    parent = kill_after(subprocess.Popen([sys.executable, "-c", DROPS_AFTER_FORK], stdout=subprocess.PIPE, text=True))
    child = None
    try:
        child = int(parent.stdout.readline())
        before = masks([child])
        assert as_nobody(d.socket, "attach", pid=child) == {"refused": "permission_denied"}
        assert as_nobody(d.socket, "attach", pid=parent.pid, descendants=True)["target"]["pid"] == parent.pid
        wait_for(lambda: all_pinned(d, parent.pid))
        time.sleep(0.3)  # several periods, each listing the descendants
        seen = {t["tid"] for t in as_nobody(d.socket, "status")["targets"][0]["threads"]}
        assert child not in seen and parent.pid in seen
        assert masks([child]) == before
    finally:
        d.stop()
        if child is not None:
            os.kill(child, signal.SIGKILL)  # the parent's child, not the test's: init reaps it


def daemon_logging_to(tmp_path: Path, stderr, log: Path, *options: str) -> Daemon:
    """A daemon started with its stderr on ``stderr`` (a pipe, a file), not waited for."""
    config = tmp_path / "parlschedd.yaml"
    config.write_text("period_s: 0.05\ndomain_period_s: 0.5\n" + PINNING)
    sock = str(tmp_path / "ctl.sock")
    proc = subprocess.Popen([sys.executable, "-m", "parlschedd", "--config", str(config), "--socket", sock,
                             "--state-dir", str(tmp_path / "state"), *options], stdout=subprocess.DEVNULL, stderr=stderr)
    return Daemon(proc, sock, tmp_path / "state", config, log)


@needs_root
def test_on_the_journals_stream_each_line_carries_its_level_as_journald_reads_it(tmp_path, monkeypatch):
    """Under the unit, stderr is journald's stream (named in JOURNAL_STREAM) and every
    line was filed as "info": `journalctl -p err -u parlschedd` showed none of the
    daemon's errors (a refused start, a failed reload), `-p warning` none of its
    warnings. Each line starts with its syslog priority, which journald takes off; on
    any other stream the lines stay as they were."""
    log = tmp_path / "journal-stream.log"
    with open(log, "ab") as stderr:
        st = os.fstat(stderr.fileno())
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
        d = daemon_logging_to(tmp_path, stderr, log, "--log-format", "json")
        try:
            assert wait_for(lambda: b'"started"' in log.read_bytes(), timeout=15)
            d.proc.send_signal(signal.SIGUSR1)  # logged as a warning, and ignored
            assert wait_for(lambda: b'"signal ignored"' in log.read_bytes(), timeout=10)
        finally:
            assert d.stop() == 0
        d.config.write_text("period_s: fast\n")
        refused = subprocess.run(d.proc.args, stdout=subprocess.DEVNULL, stderr=stderr, timeout=30)
    assert refused.returncode == REFUSED
    prefixed = {json.loads(line[3:])["event"]: line[:3] for line in log.read_text().splitlines()}
    assert {e: prefixed[e] for e in ("started", "signal ignored", "stopped", "refused to start")} == \
        {"started": "<6>", "signal ignored": "<4>", "stopped": "<6>", "refused to start": "<3>"}, prefixed
    monkeypatch.setenv("JOURNAL_STREAM", "0:0")  # another stream's: a shell's redirect of a daemon started by systemd
    other = subprocess.run(d.proc.args, capture_output=True, text=True, timeout=30)
    assert other.returncode == REFUSED and other.stderr.startswith("{"), other.stderr


def test_a_daemon_whose_stderr_reader_is_gone_serves_and_stops_cleanly(tmp_path, workload):
    """``parlschedd ... 2>&1 | tee log`` whose tee ends: the log writes fail with EPIPE,
    which must cost the log, never the daemon, its answers or its shutdown."""
    d = daemon_logging_to(tmp_path, subprocess.PIPE, tmp_path / "unused.log", "--log-level", "debug")
    proc = d.proc
    try:
        for line in iter(proc.stderr.readline, b""):  # read until up, as tee would
            if b" started " in line:
                break
        assert proc.poll() is None, "the daemon must have started"
        proc.stderr.close()  # the reader goes away
        w = workload(3)
        tids = w.all_tids()
        before = masks(tids)
        reply = d.request("attach", pid=w.pid)  # logs: the write meets a broken pipe
        assert {t["tid"] for t in reply["target"]["threads"]} == set(tids)
        assert wait_for(lambda: all_pinned(d, w.pid, len(tids)))
        assert d.request("ping")
        assert d.stop() == 0
        assert not os.path.exists(d.socket), "the socket must be removed on stop"
        assert masks(tids) == before, "every thread must be restored on stop"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def small_tmpfs(where: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs at ``where``: a disk that fills up and empties again, for real."""
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(where)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Fill ``disk`` to the last byte with one file, returned."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0")
    return filler


def whole_records(log: Path) -> list[dict]:
    """The JSON lines of ``log`` that are whole (a full disk tears the line it filled in)."""
    records = []
    for line in log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            records.append(json.loads(line))
    return records


def test_an_attach_the_state_file_cannot_keep_says_no_thread_is_pinned(tmp_path, workload):
    """The state dir's disk full before an attach: the daemon pins no thread whose
    original mask is not on disk, while attach said "mode pin", exit 0, and nothing
    else; status then showed every thread unpinned, unexplained (a review). attach
    warns on stderr (--json too, whose reply holds state_file_error), as run does; the
    masks stay as they were. The full disk is real (a 1 MiB tmpfs)."""
    with small_tmpfs(tmp_path / "state") as state:
        d = start_daemon(tmp_path)
        filler = fill(state)
        try:
            w = workload(2)
            before = masks(w.all_tids())
            ctl = [sys.executable, "-m", "parlschedctl", "--socket", d.socket]
            attach = subprocess.run([*ctl, "attach", "--json", str(w.pid)], capture_output=True, text=True, timeout=30)
            assert attach.returncode == 0 and "No space left on device" in json.loads(attach.stdout)["state_file_error"]
            assert "it pins none of these threads until it can" in attach.stderr, attach.stderr
            time.sleep(0.3)  # six periods
            assert masks(w.all_tids()) == before
            run = subprocess.run([*ctl, "run", "--", "sleep", "0.3"], capture_output=True, text=True, timeout=30)
            assert run.returncode == 0 and "it pins none of these threads until it can" in run.stderr, run.stderr
        finally:
            filler.unlink()
        d.stop()


@pytest.mark.skipif(len(ALL) < 2, reason="the program's own masks must differ from the originals")
def test_a_detach_a_full_disk_kept_out_of_the_state_file_is_not_undone_by_the_next_start(tmp_path, workload):
    """The state dir's disk filled after an attach: the detach could not be written,
    and nothing said so; the stop's save failed too, so the next start attached the
    detached target again from the old file and pinned over the masks its program had
    set for itself since (review). The detach and status now say the file is not
    written, the log says it once (it was twice a period), and a clean stop that
    restored every thread removes the old file and writes the new one in the room
    that frees. The full disk is real (a 1 MiB tmpfs)."""
    with small_tmpfs(tmp_path / "state") as state:
        d = start_daemon(tmp_path)
        w, before = pinned_workload(d, workload)
        tids = list(before)
        filler = fill(state)
        try:
            ctl = [sys.executable, "-m", "parlschedctl", "--socket", d.socket]
            detach = subprocess.run([*ctl, "detach", "--json", str(w.pid)], capture_output=True, text=True, timeout=30)
            assert "No space left on device" in json.loads(detach.stdout)["state_file_error"], detach
            assert "its next start would act on the state last written" in detach.stderr
            assert "No space left on device" in d.request("status")["daemon"]["state_file_error"]
            status = subprocess.run([*ctl, "status"], capture_output=True, text=True, timeout=30).stdout
            assert "warning: the state file could not be written (" in status
            assert masks(tids) == before
            own = {tid: frozenset({i % 2}) for i, tid in enumerate(tids)}  # the program's own, since
            for tid, mask in own.items():
                os.sched_setaffinity(tid, mask)
            time.sleep(0.3)  # six periods, each trying to write
            assert d.stop() == 0
            assert json.loads((state / "state.json").read_text())["targets"] == [], "the older file, removed, freed room"
            assert [r["event"] for r in whole_records(d.log)].count("state file not written") == 1
        finally:
            filler.unlink()
        d2 = start_daemon(tmp_path)
        try:
            time.sleep(0.3)
            assert w.pid not in target_pids(d2) and masks(tids) == own
            assert d2.request("status")["daemon"]["state_file_error"] is None
        finally:
            assert d2.stop() == 0
        assert masks(tids) == own


def test_a_daemon_whose_log_disk_filled_logs_again_once_it_has_room(tmp_path, workload):
    """``parlschedd 2>>/var/log/parlschedd.log`` on a disk that fills up (ENOSPC) and is
    cleared: the lines meanwhile are lost, but the log goes on afterwards, saying how
    many it lost, and the daemon still stops with 0. Before, the first failed write
    sent the log to /dev/null until the daemon was restarted."""
    disk = small_tmpfs(tmp_path / "logdisk")
    with disk as logs:
        log = logs / "daemon.log"
        with open(log, "ab") as stderr:
            d = daemon_logging_to(tmp_path, stderr, log, "--log-format", "json")
        proc = d.proc
        try:
            assert wait_for(lambda: b'"started' in log.read_bytes(), timeout=15)
            filler = fill(logs)
            w = workload(2)
            for _ in range(200):  # more than a buffer's worth of lines, each failing to be written
                d.request("attach", pid=w.pid)
                d.request("detach", pid=w.pid)
            filler.unlink()
            d.request("attach", pid=w.pid)
            lost = "log lines lost while the log could not be written"
            assert wait_for(lambda: any(r.get("event") == lost for r in whole_records(log)))
            records = whole_records(log)
            at = next(i for i, r in enumerate(records) if r["event"] == lost)
            assert records[at]["lines"] > 100 and "No space left on device" in records[at]["error"]
            assert records[at + 1]["event"] == "attached", "the line that found room again follows the warning"
            torn = [line for line in log.read_text().splitlines() if line and line not in map(json.dumps, records)]
            assert len(torn) <= 1, "at most the line the disk filled in the middle of is torn"
            assert d.stop() == 0
            assert whole_records(log)[-1]["event"] == "stopped"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize("option", ["--socket", "--state-dir", "--config"])
def test_an_empty_path_for_the_socket_or_state_dir_is_a_usage_error(tmp_path, option):
    """--socket '' bound the config's socket (/run/parlsched/parlschedd.sock, making
    /run/parlsched) and --state-dir '' took the working directory, without a word;
    --config '' was "cannot read config .: a directory"."""
    paths = {"--socket": str(tmp_path / "d.sock"), "--state-dir": str(tmp_path / "state"), option: ""}
    words = [word for pair in paths.items() for word in pair]
    r = subprocess.run([sys.executable, "-m", "parlschedd", "--config", str(tmp_path / "none.yaml"), *words],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and f"Invalid value for '{option}': an empty path" in r.stderr
    assert list(tmp_path.iterdir()) == []
