"""parlschedd/daemon/target_status.py: a target as ``status`` shows it.

``describe`` called directly on real Targets a real Engine attached to real worker
processes (tests/daemon/workload.py) and ran periods for, checked against the
interfaces contract (a target's pid, name, mode and threads; each thread's tid, name,
cpu, domain, utility, pinned) and against the kernel: /proc's names, each thread's
mask. This machine has one NUMA node: its two CPUs stand in for two domains, one each
([[0], [1]]), as the engine's tests do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from parlschedd.config import Config
from parlschedd.daemon import protocol
from parlschedd.daemon.engine import Engine
from parlschedd.daemon.target_status import describe
from parlschedd.host import procfs
from parlschedd.host.affinity import Pinner
from parlschedd.host.base import CounterSource
from parlschedd.host.perf import CounterSet
from tests.conftest import needs_root

pytestmark = [needs_root, pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")]

DOMAINS = [[0], [1]]
EVERY_CPU = ((0,), (1,))
CONTRACT_TARGET = {"pid", "name", "mode", "threads"}  # interfaces.md, status --json
CONTRACT_THREAD = {"tid", "name", "cpu", "domain", "utility", "pinned"}


@contextlib.contextmanager
def _engine(**learning: object) -> Iterator[Engine]:
    """A real engine on the two stand-in domains, with these learning settings; every
    target detached (masks restored) and every counter closed after."""
    config = dataclasses.replace(Config(), learning=dataclasses.replace(Config().learning, **learning))
    counters = CounterSet(CounterSource.TASK_CLOCK)
    engine = Engine(config, DOMAINS, counters, Pinner())
    try:
        yield engine
    finally:
        engine.detach_all()
        counters.close_all()


def _shown(engine: Engine, target, now: float | None = None, handed_over=None) -> dict:
    """``describe`` as the engine calls it, sent through the protocol's encoder (which
    refuses NaN) and read back as a client does."""
    shown = describe(target, now, rescan_s=engine.config.rescan_s, proc_root=procfs.PROC_ROOT, every_cpu=EVERY_CPU,
                     handed_over=engine.handed_over if handed_over is None else handed_over)
    return json.loads(protocol.encode(shown))


def _periods(engine: Engine, n: int) -> None:
    for _ in range(n):
        time.sleep(0.01)
        engine.tick(time.monotonic())


def test_a_pinned_target_shows_each_thread_where_the_kernel_has_it(workload) -> None:
    w = workload(3)
    with _engine(free=False) as engine:
        target = engine.attach(w.pid, time.monotonic())
        _periods(engine, 5)
        shown = _shown(engine, target)
        masks = {tid: os.sched_getaffinity(tid) for tid in w.all_tids()}  # no period since: where they were shown
        assert CONTRACT_TARGET <= set(shown)
        assert {k: shown[k] for k in ("pid", "name", "mode", "uid", "descendants", "thread_filter", "rule", "cpus")} == {
            "pid": w.pid, "name": procfs.comm(w.pid), "mode": "pin", "uid": 0, "descendants": False,
            "thread_filter": None, "rule": None, "cpus": [0, 1]}
        assert (shown["threads_ignored"], shown["threads_handed_over"], shown["threads_adopted"]) == (0, 0, 4)
        assert shown["migrations"] == target.migrations >= 4, "each thread's first pin at least"
        threads = shown["threads"]
        assert [t["tid"] for t in threads] == sorted(masks), "every thread, in tid order"
        for t in threads:
            assert CONTRACT_THREAD <= set(t)
            assert t["pid"] == w.pid and t["name"] == procfs.comm(t["tid"])
            assert t["pinned"] is True and t["free"] is False
            assert masks[t["tid"]] == {t["cpu"]}, "the CPU shown is the thread's mask"
            assert t["cpu"] in DOMAINS[t["domain"]]
            assert isinstance(t["utility"], float) and t["utility"] >= 0
        assert {t["name"] for t in threads} >= {"worker0", "worker1", "worker2"}
        w.command("stop")  # worker2 exits: dropped, still counted as adopted
        for _ in range(100):
            if len(target.threads) == 3:
                break
            _periods(engine, 1)
        shown = _shown(engine, target)
        assert (len(shown["threads"]), shown["threads_adopted"]) == (3, 4)


# A parent whose child has two threads; it prints the child's pid once that runs both.
PARENT = r"""
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import threading, time; "
                          "threading.Thread(target=time.sleep, args=(60,), daemon=True).start(); "
                          "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print(child.pid, flush=True)
child.wait()
"""


def test_a_descendants_thread_shows_its_own_process(kill_after) -> None:
    """With descendants, the child's threads are the target's: each thread's "pid"
    says whose it is."""
    parent = kill_after(subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True))
    child = int(parent.stdout.readline())
    try:
        with _engine(free=False) as engine:
            target = engine.attach(parent.pid, time.monotonic(), descendants=True)
            _periods(engine, 2)
            shown = _shown(engine, target)
            assert shown["descendants"] is True
            whose = {t["tid"]: t["pid"] for t in shown["threads"]}
            assert whose == {**{tid: parent.pid for tid in _tids(parent.pid)}, **{tid: child for tid in _tids(child)}}
            assert list(whose.values()).count(child) == 2
    finally:
        os.kill(child, signal.SIGKILL)


def _tids(pid: int) -> list[int]:
    return [int(t) for t in os.listdir(f"/proc/{pid}/task")]


def test_before_its_first_period_a_thread_shows_nothing_measured_or_placed() -> None:
    """Just attached (the attach reply): no CPU, domain or utility yet (None, not -1 or
    NaN, which JSON cannot carry), not pinned."""
    with _engine(free=False) as engine:
        target = engine.attach(os.getpid(), time.monotonic(), observe=True)
        threads = _shown(engine, target)["threads"]
        assert threads and all((t["cpu"], t["domain"], t["utility"], t["pinned"], t["free"]) == (None, None, None, False, False)
                               for t in threads)


def test_a_free_thread_is_pinned_to_its_domain_with_no_cpu_of_its_own(workload) -> None:
    w = workload(2)
    with _engine(free=True, free_prior=1.0, lam=0.0) as engine:  # free for good
        target = engine.attach(w.pid, time.monotonic())
        _periods(engine, 3)
        shown = _shown(engine, target)
        for t in shown["threads"]:
            assert (t["cpu"], t["pinned"], t["free"]) == (None, True, True)
            assert os.sched_getaffinity(t["tid"]) == set(DOMAINS[t["domain"]])


def test_an_observed_target_shows_where_its_threads_ran_and_pins_nothing(workload) -> None:
    """Observe mode: each thread's cpu is the CPU the kernel last ran it on (read each
    period), and its domain that CPU's: the scheduler's domain, which Level 1 may have
    moved elsewhere in its model than where the kernel runs the thread, was shown
    beside it (cpu 1 in domain 0, 1 run in 8); none pinned, every mask as it was."""
    w = workload(2)
    with _engine(free=False) as engine:
        target = engine.attach(w.pid, time.monotonic(), observe=True)
        _periods(engine, 3)
        shown = _shown(engine, target)
        assert shown["mode"] == "observe" and shown["migrations"] == 0
        for t in shown["threads"]:
            assert (t["pinned"], t["free"]) == (False, False)
            assert t["cpu"] in (0, 1) and t["cpu"] in DOMAINS[t["domain"]], t
            assert isinstance(t["utility"], float), "measured all the same"
            assert os.sched_getaffinity(t["tid"]) == os.sched_getaffinity(0)


def test_threads_left_out_are_counted_and_those_handed_over_among_them(workload) -> None:
    """``handed_over`` holds every target's threads someone else re-pinned: only this
    target's left-out threads among them count as its own."""
    w = workload(3)
    with _engine(free=False) as engine:
        target = engine.attach(w.pid, time.monotonic(), threads="worker[01]")
        _periods(engine, 2)
        left_out = sorted(target.ignored)
        shown = _shown(engine, target, handed_over={left_out[0]: 1, 1: 1, target.current().tids[0].item(): 1})
        assert (shown["thread_filter"], shown["threads_ignored"], shown["threads_handed_over"]) == ("worker[01]", 2, 1)
        assert {t["name"] for t in shown["threads"]} == {"worker0", "worker1"}
        assert shown["threads_adopted"] == 2


def test_names_are_re_read_when_shown_in_a_period_not_for_an_attach_reply() -> None:
    """This test's own thread (observe mode: nothing is pinned), renamed through
    /proc/self/task/<tid>/comm after its adoption: describe without ``now`` (the
    attach reply) shows the name read at adoption; with ``now``, the name now."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        with _engine() as engine:
            target = engine.attach(os.getpid(), time.monotonic(), observe=True)
            tid = thread.native_id
            before = target.threads[tid].name
            with open(f"/proc/self/task/{tid}/comm", "w") as comm:
                comm.write("renamed-late")
            name_of = lambda shown: next(t["name"] for t in shown["threads"] if t["tid"] == tid)  # noqa: E731
            assert name_of(_shown(engine, target)) == before
            assert name_of(_shown(engine, target, now=time.monotonic())) == "renamed-late"
    finally:
        stop.set()
        thread.join()
