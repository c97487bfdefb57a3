"""Faults while the daemon works (issue 7, part 2): thread churn, targets exiting, pid
reuse, a shrinking cpuset, a CPU unplugged, perf_event_open failing mid-run, SIGKILL at
random points.

Real daemon, real processes, real affinity syscalls. What is simulated is said where
it is: EACCES from perf_event_open (root cannot be refused it here) is injected at the
syscall seam of an in-process Engine with real threads.
"""

from __future__ import annotations

import errno
import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parlschedctl import client
from parlschedd.config import Config
from parlschedd.cpulist import format_cpulist
from parlschedd.daemon.engine import Engine
from parlschedd.host import procfs
from parlschedd.host.affinity import Pinner
from parlschedd.host.base import CounterSource
from parlschedd.host.perf import CounterSet, perf_event_open
from tests.conftest import PINNING, needs_root, pinned_where_shown, start_daemon, threads_of, wait_for
from tests.reliability.helpers import (NS_LAST_PID, errors_in_log, exited_pid, fd_count, masks, nofile_hard,
                                       sleepy, spawn_with_pid, tids_of)

pytestmark = needs_root
ALL = frozenset(os.sched_getaffinity(0))
two_cpus = pytest.mark.skipif(len(ALL) < 2, reason="needs 2 CPUs")

CHURN = r"""
import sys, threading, time
made = 0
def short():
    time.sleep(0.002)
def keep():
    while True:
        time.sleep(0.05)
for _ in range(3):
    threading.Thread(target=keep, daemon=True).start()
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
print("ready", flush=True)
started = time.monotonic()
end = started + float(sys.argv[1])  # at the latest: until a line on stdin
while not stop.is_set() and time.monotonic() < end:
    ts = [threading.Thread(target=short) for _ in range(10)]
    for t in ts: t.start()
    for t in ts: t.join()
    made += 10
print(made / (time.monotonic() - started), flush=True)
time.sleep(3600)
"""


def test_thread_churn_at_hundreds_per_second(daemon):
    """A target that starts and ends hundreds of threads a second beside three that
    live on: the daemon answers status throughout, and every answer lists the
    threads that live on (a thread is never dropped for others' exits); after the
    churn it manages exactly the threads left, each pinned on the CPU status shows;
    nothing is logged as an error, detach restores every mask, no fd leaks."""
    seconds = 3.0
    proc = subprocess.Popen([sys.executable, "-c", CHURN, "60"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        fds0 = fd_count(daemon.proc.pid)
        daemon.request("attach", pid=proc.pid)
        during = []  # the tids each status showed while the threads churned
        waits = []  # how long each took to be answered
        # 3 s of churn and 10 statuses at least, however slow a loaded machine makes each (3 s
        # alone held 7 to 9 of them under one busy loop, each waiting up to 0.8 s for a late tick)
        end = time.monotonic() + seconds
        while time.monotonic() < end or len(during) < 10:
            assert not select.select([proc.stdout], [], [], 0)[0], "the churn ended before the test told it"
            asked = time.monotonic()
            during.append(set(threads_of(daemon, proc.pid)))
            waits.append(time.monotonic() - asked)
            time.sleep(0.1)
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        rate = float(proc.stdout.readline())
        assert rate >= 200, f"churn only {rate:.0f} threads/s"
        # main and the three kept (a joined thread may take a moment more to be gone)
        survivors = set(wait_for(lambda: len(tids_of(proc.pid)) == 4 and tids_of(proc.pid), timeout=3))
        assert max(waits) < 3.0, f"status answered throughout the churn, but once only after {max(waits):.1f} s"
        assert all(survivors <= shown for shown in during), "a surviving thread missing from a status"

        wait_for(lambda: pinned_where_shown(daemon, proc.pid, survivors), timeout=3)
        bad = errors_in_log(daemon)
        assert not bad, bad[:3]
        daemon.request("detach", pid=proc.pid)
        assert masks(tids_of(proc.pid)) == {t: ALL for t in tids_of(proc.pid)}
        wait_for(lambda: fd_count(daemon.proc.pid) <= fds0, timeout=3)
    finally:
        proc.kill()
        proc.wait()


def test_targets_exiting_during_periods(daemon):
    """20 targets of 8 threads exit (or are SIGKILLed) at random moments, i.e. at any
    point of a period; each is dropped, nothing leaks, nothing is logged as an error."""
    fds0 = fd_count(daemon.proc.pid)
    rng = random.Random(7)
    procs = []
    code = "import threading, time, sys\n" \
           "[threading.Thread(target=time.sleep, args=(9,), daemon=True).start() for _ in range(7)]\n" \
           "print('r', flush=True); time.sleep(float(sys.argv[1]))"
    for _ in range(20):
        p = subprocess.Popen([sys.executable, "-c", code, f"{rng.uniform(0.05, 1.0):.3f}"], stdout=subprocess.PIPE)
        p.stdout.readline()
        daemon.request("attach", pid=p.pid)
        procs.append(p)
    for p in procs[::3]:
        time.sleep(rng.uniform(0, 0.06))
        p.kill()
    for p in procs:
        p.wait()
    wait_for(lambda: daemon.request("status")["targets"] == [], timeout=5)
    wait_for(lambda: fd_count(daemon.proc.pid) <= fds0, timeout=3)
    assert not errors_in_log(daemon)
    assert sum(r.get("event") == "target dropped" for r in daemon.log_records()) == 20


# -- pid reuse -------------------------------------------------------------------------

def reuse_pid_of(proc: subprocess.Popen, argv: list[str]) -> subprocess.Popen:
    pid = proc.pid
    proc.kill()
    proc.wait()
    new = spawn_with_pid(pid, argv)
    if new is None:
        pytest.skip("could not steer the next pid (busy machine)")
    return new


@pytest.mark.skipif(not os.access(NS_LAST_PID, os.W_OK), reason="ns_last_pid not writable")
@two_cpus
def test_reused_pid_is_not_touched_while_running(daemon):
    """A pinned target exits while the daemon is stopped (SIGSTOP: the exit and the
    reuse fall between two periods); a new process gets the same pid; the daemon must
    neither pin it nor report it."""
    old = subprocess.Popen(["sleep", "60"])
    daemon.request("attach", pid=old.pid)
    wait_for(lambda: all(t["pinned"] for t in threads_of(daemon, old.pid).values()))
    daemon.proc.send_signal(signal.SIGSTOP)
    try:
        new = reuse_pid_of(old, ["sleep", "60"])
    finally:
        daemon.proc.send_signal(signal.SIGCONT)
    try:
        assert os.sched_getaffinity(new.pid) == ALL
        time.sleep(0.5)  # ten periods
        assert os.sched_getaffinity(new.pid) == ALL, "the new process was pinned"
        assert daemon.request("status")["targets"] == []
    finally:
        new.kill()
        new.wait()


@pytest.mark.skipif(not os.access(NS_LAST_PID, os.W_OK), reason="ns_last_pid not writable")
@two_cpus
def test_reused_pid_is_not_touched_across_a_restart(tmp_path):
    """The daemon is SIGKILLed with a target pinned; the target exits and a new process
    on CPU 1 only gets its pid; the restarted daemon must neither restore the old
    target's mask (0-1) on it nor re-attach it."""
    d = start_daemon(tmp_path)
    old = subprocess.Popen(["sleep", "60"])
    d.request("attach", pid=old.pid)
    wait_for(lambda: all(t["pinned"] for t in threads_of(d, old.pid).values()))
    d.stop(signal.SIGKILL)
    new = reuse_pid_of(old, ["taskset", "-c", "1", "sleep", "60"])
    try:
        wait_for(lambda: os.sched_getaffinity(new.pid) == {1})  # taskset has exec'd sleep
        d2 = start_daemon(tmp_path)
        try:
            time.sleep(0.3)
            assert d2.request("status")["targets"] == []
            assert os.sched_getaffinity(new.pid) == {1}
        finally:
            assert d2.stop() == 0
        assert os.sched_getaffinity(new.pid) == {1}
    finally:
        new.kill()
        new.wait()


@two_cpus
def test_a_stop_after_another_daemon_took_the_dir_and_died_leaves_no_thread_pinned(tmp_path):
    """The state dir's lock file removed, another daemon started on the dir, adopted a
    thread this one had pinned (its saved original: this one's pin) and was killed.
    This daemon's stop, before its next look at the lock, restored its own threads
    and only then, taking the lock back, the other's records: its own pin was put
    back on the thread for good (a review). The other's file is taken in first,
    while this daemon's records tell its threads from the other's."""
    d = start_daemon(tmp_path, "period_s: 0.05\nrescan_s: 3600\n" + PINNING)  # no look at the lock till the stop
    target = sleepy(1, wake=False)
    try:
        d.request("attach", pid=target.pid)
        wait_for(lambda: all(t["pinned"] for t in threads_of(d, target.pid).values()))
        shared = max(tids_of(target.pid))
        pinned = format_cpulist(os.sched_getaffinity(shared))
        saved = json.loads((d.state_dir / "state.json").read_text())
        saved["pinner"]["threads"] = {str(shared): {"start_time": procfs.thread_start_time(shared),
                                                    "original": pinned, "current": pinned}}
        saved["daemon"] = [exited_pid(), 1]
        (d.state_dir / "state.json").write_text(json.dumps(saved))  # the other's, as it was killed
        os.unlink(d.state_dir / "lock")
        assert d.stop() == 0
        assert os.sched_getaffinity(shared) == ALL, "this daemon's pin put back after its stop"
        assert [p.name for p in d.state_dir.glob("state.json.unusable-*")], "the other's file kept aside"
    finally:
        target.kill()
        target.wait()


# -- cpusets ---------------------------------------------------------------------------

@two_cpus
def test_cpuset_shrinks_under_pinned_threads(daemon, cpuset):
    """A real cgroup v1 cpuset shrinks from 0-1 to 1 while threads are pinned to 0;
    one thread was pinned to CPU 0 by its owner before attach (original {0}). The daemon
    goes on, keeps every thread inside the cpuset, and detach restores the originals
    as far as the cpuset allows (the thread whose original {0} is gone asks for {0, 1}:
    it runs on {1} now and may use its CPU 0 again when the cpuset grows back, where
    asking for {1} would have kept it off CPU 0 for good), logging it."""
    target = sleepy(6)
    try:
        (cpuset / "cgroup.procs").write_text(str(target.pid))
        tids = tids_of(target.pid)
        os.sched_setaffinity(tids[-1], {0})
        daemon.request("attach", pid=target.pid)
        wait_for(lambda: all(t["pinned"] for t in threads_of(daemon, target.pid).values()))
        # a draw puts all six on CPU 1 one period in 64; sleepers' strategies stay near uniform, so a later one will not
        wait_for(lambda: any(m == {0} for m in masks(tids).values()), timeout=10)
        (cpuset / "cpuset.cpus").write_text("1")
        time.sleep(0.5)  # ten periods of pins against the smaller cpuset
        assert daemon.request("ping")["version"]  # the daemon answers
        assert all(m <= {1} for m in masks(tids).values())
        # a thread whose mask the kernel rewrote is taken back within rescan_s (1 s)
        wait_for(lambda: all(t["cpu"] in (1, None) for t in threads_of(daemon, target.pid).values()), timeout=3)
        assert set(threads_of(daemon, target.pid)) == set(tids)
        daemon.request("detach", pid=target.pid)
        assert masks(tids) == {t: frozenset({1}) for t in tids}
        assert any(r.get("event") == "original mask outside cpuset, widening" for r in daemon.log_records())
        (cpuset / "cpuset.cpus").write_text("0-1")
        assert 0 in masks(tids)[tids[-1]], "its original CPU is usable again"
        assert not errors_in_log(daemon)
    finally:
        target.kill()
        target.wait()


# -- CPU hotplug -------------------------------------------------------------------------

LAST = max(ALL)  # CPU 0 often cannot go offline
ONLINE = Path(f"/sys/devices/system/cpu/cpu{LAST}/online")


@pytest.fixture
def hotplug():
    """The last CPU's online switch, set back to online after the test (unless pytest
    itself is killed). A real hotplug: the kernel takes the CPU out of every cpuset's
    effective CPUs and moves the threads pinned to it elsewhere, other programs' too,
    whose pins to it are lost: so only where asked for (.ci/run asks)."""
    if os.environ.get("PARLSCHED_HOTPLUG") != "1":
        pytest.skip("unplugs a CPU, which undoes other programs' pins to it: set PARLSCHED_HOTPLUG=1")
    if LAST == 0 or not os.access(ONLINE, os.W_OK):
        pytest.skip(f"no writable {ONLINE}")
    if ONLINE.read_text().strip() != "1":
        pytest.skip(f"CPU {LAST} is offline already: left as someone set it")
    yield ONLINE
    for _ in range(50):
        try:
            if ONLINE.read_text().strip() == "1":
                return
            ONLINE.write_text("1")
        except OSError:  # EBUSY while a hotplug operation runs
            time.sleep(0.1)
    raise AssertionError(f"CPU {LAST} left offline: echo 1 > {ONLINE}")


@pytest.mark.slow
@two_cpus
def test_a_cpu_that_goes_offline_and_comes_back(daemon, hotplug):
    """The last CPU goes offline while threads are pinned to it and comes back: the
    daemon goes on, its target learns on the CPUs left (its cpuset's effective CPUs,
    read every rescan_s), then on all of them again and pins threads to the returned
    CPU; detach restores the exact originals, and nothing is logged as an error."""
    # A thread that never wakes keeps its pin to the CPU gone (read as an empty mask). It
    # never runs either, so it draws its core once, when it joins a scheduler (the attach,
    # and the fresh one when the CPU comes back), and keeps it: with n threads on k CPUs,
    # none on the last has odds ((k-1)/k)**n < exp(-n/k) at each of the two waits below
    # (6 threads on 2 CPUs: 1 run in 32, seen in CI). 16 a CPU: below exp(-16).
    target = sleepy(16 * len(ALL), wake=False)
    try:
        tids = tids_of(target.pid)
        before = masks(tids)
        daemon.request("attach", pid=target.pid)
        wait_for(lambda: any(m == {LAST} for m in masks(tids).values()), timeout=10)
        hotplug.write_text("0")
        left = sorted(ALL - {LAST})
        assert daemon.request("ping")["version"]  # the daemon answers
        wait_for(lambda: daemon.request("status", pid=target.pid)["targets"][0]["cpus"] == left, timeout=5)
        wait_for(lambda: all(t["cpu"] in (*left, None) for t in threads_of(daemon, target.pid).values()), timeout=3)
        hotplug.write_text("1")
        wait_for(lambda: daemon.request("status", pid=target.pid)["targets"][0]["cpus"] == sorted(ALL), timeout=5)
        wait_for(lambda: any(m == {LAST} for m in masks(tids).values()), timeout=10)
        assert set(threads_of(daemon, target.pid)) == set(tids)
        daemon.request("detach", pid=target.pid)
        assert masks(tids) == before
        assert not errors_in_log(daemon)
        assert not [r for r in daemon.log_records() if r.get("event", "").startswith("CPUs came online")]
    finally:
        target.kill()
        target.wait()


@pytest.mark.slow
@two_cpus
def test_a_cpu_plugged_in_after_start_is_named_and_left_alone(tmp_path, hotplug):
    """A daemon started while the last CPU is offline places threads on the CPUs it
    started with; when the CPU comes online it says so once, naming it and the
    restart that would use it, and goes on as it was."""
    hotplug.write_text("0")
    d = start_daemon(tmp_path, "period_s: 0.05\nrescan_s: 0.2\n" + PINNING)
    target = sleepy(4, wake=False)
    try:
        tids = tids_of(target.pid)
        as_set = {t: procfs.thread_cpus_allowed(t) for t in tids}  # sched_getaffinity would leave the offline CPU out
        d.request("attach", pid=target.pid)
        hotplug.write_text("1")
        warned = wait_for(lambda: [r for r in d.log_records() if r.get("event", "").startswith("CPUs came online")])
        assert len(warned) == 1 and warned[0]["cpus"] == str(LAST) and "restart" in warned[0]["event"]
        time.sleep(0.5)  # two more rescans: no second warning
        assert len([r for r in d.log_records() if r.get("event", "").startswith("CPUs came online")]) == 1
        assert all(t["cpu"] in (*sorted(ALL - {LAST}), None) for t in threads_of(d, target.pid).values())
        d.request("detach", pid=target.pid)
        assert masks(tids) == as_set
        assert not errors_in_log(d)
    finally:
        target.kill()
        target.wait()
        stopped = d.stop()
    assert stopped == 0  # after the finally: a failure above is not replaced by this one


@pytest.mark.slow
@two_cpus
@pytest.mark.parametrize("named", [True, False], ids=["layout names it", "layout leaves it out"])
def test_an_explicit_layout_with_a_cpu_offline_at_start(tmp_path, hotplug, named):
    """A layout naming the last CPU while it is offline (SMT turned off, a CPU taken
    out) refused the start; now the daemon starts on the rest, says which domain lost
    what, and when the CPU comes online says a restart would use it. A layout that
    does not name it was told the same (a restart would not use it): now nothing."""
    hotplug.write_text("0")
    left = sorted(ALL - {LAST})
    layout = [left, [LAST]] if named else [left]
    d = start_daemon(tmp_path, f"period_s: 0.05\nrescan_s: 0.2\ndomains: {layout}\n")
    try:
        assert d.request("status")["daemon"]["cpus"] == left
        narrowed = {r["key"]: r["problem"] for r in d.log_records() if r["event"] == "config not all usable on this host"}
        assert narrowed == ({"domains[1]": f"{LAST} not usable on this host (absent or offline); the domain is left out"}
                            if named else {})
        hotplug.write_text("1")
        if named:
            warned = wait_for(lambda: [r for r in d.log_records() if r.get("event", "").startswith("CPUs came online")])
            assert warned[0]["cpus"] == str(LAST) and warned[0]["using"] == format_cpulist(left)
        else:
            time.sleep(1)  # five rescans
            assert not [r for r in d.log_records() if r.get("event", "").startswith("CPUs came online")]
        assert not errors_in_log(d)
    finally:
        stopped = d.stop()
    assert stopped == 0


# -- perf_event_open failing -----------------------------------------------------------

def lower_nofile(pid: int, soft: int) -> str:
    hard = nofile_hard(pid)
    subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={soft}:{hard}"], check=True)
    return hard


def test_emfile_mid_run_never_leaves_threads_pinned(daemon):
    """RLIMIT_NOFILE of the running daemon is lowered (prlimit --pid) to a few fds above
    what it holds, then a 40-thread target is attached. Whatever the daemon does next
    no thread is left on a pinned mask."""
    pid = daemon.proc.pid
    target = sleepy(40)
    try:
        hard = lower_nofile(pid, fd_count(pid) + 12)
        try:
            daemon.request("attach", pid=target.pid, timeout=10)
        except (client.Refused, client.Unreachable):
            pass
        time.sleep(0.5)
        if daemon.proc.poll() is None:
            subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={hard}:{hard}"])
            daemon.request("detach", pid=target.pid)
        assert masks(tids_of(target.pid)) == {t: ALL for t in tids_of(target.pid)}
        assert any("out of file descriptors" in r.get("event", "") for r in daemon.log_records())
    finally:
        target.kill()
        target.wait()


def test_emfile_mid_run_daemon_keeps_going(daemon):
    """The same as above, with what a daemon should do: stay up, manage the threads it
    has fds for, log the error, adopt the rest once the limit is raised; detach
    releases every fd."""
    pid = daemon.proc.pid
    target = sleepy(40)
    hard = nofile_hard(pid)
    try:
        fds0 = fd_count(pid)
        lower_nofile(pid, fds0 + 12)
        reply = daemon.request("attach", pid=target.pid, timeout=10)
        managed = len(reply["target"]["threads"])
        assert 0 < managed < 40, managed
        time.sleep(0.3)
        assert daemon.proc.poll() is None
        assert any("out of file descriptors" in r.get("event", "") for r in daemon.log_records())
        subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={hard}:{hard}"], check=True)
        wait_for(lambda: len(threads_of(daemon, target.pid)) == 40, timeout=5)
        assert all(t["pinned"] for t in threads_of(daemon, target.pid).values())
        daemon.request("detach", pid=target.pid)
        assert masks(tids_of(target.pid)) == {t: ALL for t in tids_of(target.pid)}
        wait_for(lambda: fd_count(pid) <= fds0, timeout=3)
    finally:
        if daemon.proc.poll() is None:
            subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={hard}:{hard}"])
        target.kill()
        target.wait()


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_emfile_on_accept_does_not_spin(daemon):
    pid = daemon.proc.pid
    hard = nofile_hard(pid)
    top = max(int(fd) for fd in os.listdir(f"/proc/{pid}/fd"))
    import socket as socketlib
    held = []
    try:
        lower_nofile(pid, top + 1)  # fd numbers above the highest in use are refused
        for _ in range(40):  # these fill the free numbers below it; the rest wait in the backlog
            s = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
            s.connect(daemon.socket)
            held.append(s)
        time.sleep(0.2)
        c0, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(1.0)
        busy = (cpu_seconds(pid) - c0) / (time.monotonic() - t0)
        failures = sum(r.get("event") == "accept failed" for r in daemon.log_records())
        assert busy < 0.3 and failures < 50, (busy, failures)
    finally:
        for s in held:
            s.close()
        subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={hard}:{hard}"])


def test_eacces_from_perf_event_open_mid_run():
    """EACCES cannot be provoked for root here, so it is injected at CounterSet's
    syscall seam (everything else real: an Engine over real threads of a real process,
    the real Pinner and sched_setaffinity). After the first 3 threads the opener
    refuses; the engine keeps going with the threads it has and leaks nothing."""
    from parlschedd.topology import read_topology

    calls = {"n": 0}

    def opener(attr, pid, cpu, group_fd, flags):
        calls["n"] += 1
        if calls["n"] > 3:
            raise OSError(errno.EACCES, "Permission denied (injected)")
        return perf_event_open(attr, pid, cpu, group_fd, flags)

    config = Config()
    domains = read_topology("/sys").domains(config.domains)
    counters = CounterSet(CounterSource.TASK_CLOCK, opener=opener)
    engine = Engine(config, domains, counters, Pinner())
    target = sleepy(6)
    me = os.getpid()
    try:
        fds0 = fd_count(me)
        engine.attach(target.pid, time.monotonic())
        for _ in range(5):
            time.sleep(0.02)
            engine.tick(time.monotonic())
        t = engine.targets[target.pid]
        assert len(t.threads) == 3 and t.current().pinned.all()
        assert engine.detach(target.pid) == 3
        assert masks(tids_of(target.pid)) == {tid: ALL for tid in tids_of(target.pid)}
        assert fd_count(me) == fds0
    finally:
        counters.close_all()
        target.kill()
        target.wait()


# -- threads created by pinned threads ---------------------------------------------------

@two_cpus
def test_thread_created_by_a_pinned_thread_is_restored_to_the_process_mask(daemon, workload):
    w = workload(1)  # workload.py spawns new workers from its main thread
    daemon.request("attach", pid=w.pid)
    wait_for(lambda: all(t["pinned"] for t in threads_of(daemon, w.pid).values()))
    assert len(os.sched_getaffinity(w.pid)) == 1, "main thread pinned"
    new = set(w.command("spawn")) - set(w.tids[:-1])
    wait_for(lambda: len(threads_of(daemon, w.pid)) == 3)
    daemon.request("detach", pid=w.pid)
    assert masks(w.all_tids()) == {t: ALL for t in w.all_tids()}, f"new worker(s) {new} left on one CPU"


# -- SIGKILL at random points ------------------------------------------------------------

@pytest.mark.slow
@two_cpus
def test_sigkill_at_random_points_never_leaves_a_stale_mask(tmp_path, workload):
    """12 cycles: start the daemon, attach, let it run 0-1 s, SIGKILL, restart, stop
    with SIGTERM. After each cycle every thread has its original mask (threads'
    originals differ: {0,1}, {0}, {1}). The clean stop keeps the target attached by
    hand in the state dir, so from the second cycle on the start attaches it again."""
    rng = random.Random(11)
    w = workload(3)
    originals = {}
    for tid, m in zip(w.all_tids(), [ALL, {0}, {1}, ALL]):
        os.sched_setaffinity(tid, m)
        originals[tid] = frozenset(m)
    assert masks(w.all_tids()) == originals
    failures = []
    for cycle in range(12):
        d = start_daemon(tmp_path)
        if w.pid not in {t["pid"] for t in d.request("status")["targets"]}:
            if cycle:
                failures.append((cycle, "not attached again after the clean stop"))
            d.request("attach", pid=w.pid)
        time.sleep(rng.uniform(0, 1.0))
        d.stop(signal.SIGKILL)
        d2 = start_daemon(tmp_path)
        try:
            if w.pid not in {t["pid"] for t in d2.request("status")["targets"]}:
                failures.append((cycle, "not re-adopted"))
        finally:
            assert d2.stop() == 0
        now = masks(originals)
        if now != originals:
            failures.append((cycle, {t: sorted(m) for t, m in now.items() if m != originals[t]}))
    assert not failures, failures
    assert not errors_in_log(d2)


def test_a_failure_each_period_repeats_is_logged_once_not_every_period(daemon, workload):
    """No file descriptor spare at all: a thread that came cannot be adopted, and each
    period tries again and fails the same way. Said once (at error level), then at
    debug level only: it was logged every period, 20 lines a second at period_s 0.05.
    The daemon stays up and adopts the thread once the limit is raised."""
    pid = daemon.proc.pid
    w = workload(3)
    hard = nofile_hard(pid)
    try:
        daemon.request("attach", pid=w.pid, timeout=10)
        # the target's first periods done before no fd is spare: its first period reads where each
        # thread ran (/proc), imports numpy.ma (np.unique's lazy import) and saves the state after
        # the first pins, each needing an fd ("state file not written", "period failed for target"
        # when the limit came first: 1 run in 8 of this test)
        wait_for(lambda: len(daemon.request("history", pid=w.pid)["samples"]) >= 2
                 and len(threads_of(daemon, w.pid)) == 4)
        lower_nofile(pid, fd_count(pid))
        w.command("spawn")
        event = "out of file descriptors, thread not managed"
        # tried again every period, said at debug level: 11 tries waited for (a fixed 1.5 s
        # counted on 11 of its 30 periods, and on the warning within it)
        wait_for(lambda: sum(r["event"] == event and r["level"] == "debug" for r in daemon.log_records()) > 10,
                 timeout=15)
        said = [r for r in daemon.log_records() if r["level"] in ("warning", "error") and r["event"] != "attached"]
        assert [r["event"] for r in said] == [event], said
        subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={hard}:{hard}"], check=True)
        assert wait_for(lambda: len(threads_of(daemon, w.pid)) == 5, timeout=5)
        assert daemon.proc.poll() is None
    finally:
        if daemon.proc.poll() is None:
            subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={hard}:{hard}"])
