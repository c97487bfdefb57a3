"""parlschedd/daemon/names.py: thread names re-read RENAMES_PER_ROUND at a time, in
turns in tid order.

A real process of more threads than one round reads (RENAMES_PER_ROUND, as it is),
whose threads rename themselves when told (prctl PR_SET_NAME, as pthread_setname_np
does), attached by a real Engine in observe mode (nothing is pinned); ``rename`` is
called on that Target directly.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

from parlschedd.config import Config
from parlschedd.daemon.engine import Engine
from parlschedd.daemon.names import RENAMES_PER_ROUND, rename
from parlschedd.daemon.target import Target
from parlschedd.host import procfs
from parlschedd.host.affinity import Pinner
from parlschedd.host.base import CounterSource
from parlschedd.host.perf import CounterSet
from tests.conftest import needs_root

pytestmark = needs_root

WORKERS = RENAMES_PER_ROUND + 22  # with the main thread: two rounds, the second wrapping round

# Commands on stdin, each answered with a line once done: "name PREFIX" names every
# thread (the main thread too: the process's comm) PREFIX and its index (main);
# "quit I" ends worker I and answers its tid once the kernel has reaped it.
RENAMING = r"""
import ctypes, os, queue, sys, threading, time
prctl = ctypes.CDLL(None, use_errno=True).prctl
def name(text):
    if prctl(15, text.encode()[:15], 0, 0, 0):  # PR_SET_NAME: the calling thread's
        raise OSError(ctypes.get_errno(), "prctl")
done, tids = threading.Semaphore(0), {}
def worker(i, q):
    tids[i] = threading.get_native_id()
    name(f"t{i}")
    done.release()
    while (prefix := q.get()) is not None:
        name(f"{prefix}{i}")
        done.release()
queues, threads = {}, {}
for i in range(int(sys.argv[1])):
    queues[i] = queue.Queue()
    threads[i] = threading.Thread(target=worker, args=(i, queues[i]), daemon=True)
    threads[i].start()
for _ in queues:
    done.acquire()
print("ready", flush=True)
for line in sys.stdin:
    word, arg = line.split()
    if word == "name":
        for q in queues.values():
            q.put(arg)
        for _ in queues:
            done.acquire()
        name(f"{arg}main")
        print("named", flush=True)
    else:
        i = int(arg)
        queues.pop(i).put(None)
        threads.pop(i).join()
        while os.path.exists(f"/proc/self/task/{tids[i]}"):
            time.sleep(0.001)
        print(tids[i], flush=True)
"""


@contextlib.contextmanager
def _renaming(n: int) -> Iterator[tuple[subprocess.Popen, Target]]:
    """A process of ``n`` threads named t0.. (and its main thread), attached."""
    proc = subprocess.Popen([sys.executable, "-c", RENAMING, str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    counters = CounterSet(CounterSource.SCHEDSTAT)
    engine = Engine(Config(), [[0]], counters, Pinner())
    try:
        assert proc.stdout.readline() == "ready\n"
        yield proc, engine.attach(proc.pid, time.monotonic(), observe=True)
    finally:
        engine.detach_all()
        counters.close_all()
        proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()


def _name_all(proc: subprocess.Popen, prefix: str) -> None:
    proc.stdin.write(f"name {prefix}\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == "named\n"


def _quit(proc: subprocess.Popen, worker: int) -> int:
    """End ``worker``; its tid, gone."""
    proc.stdin.write(f"quit {worker}\n")
    proc.stdin.flush()
    return int(proc.stdout.readline())


def _with(target: Target, prefix: str) -> list[int]:
    """The tids whose name the target knows as ``prefix``'s, in order."""
    return sorted(tid for tid, th in target.threads.items() if th.name.startswith(prefix))


def test_a_round_reads_the_bound_in_tid_order_and_the_rounds_reach_every_thread() -> None:
    with _renaming(WORKERS) as (proc, target):
        tids = sorted(target.threads)
        assert len(tids) == WORKERS + 1 and not _with(target, "r")  # named at adoption, before the renames
        _name_all(proc, "r")
        rename(target, procfs.PROC_ROOT)
        assert _with(target, "r") == tids[:RENAMES_PER_ROUND], "one round: the first RENAMES_PER_ROUND tids"
        rename(target, procfs.PROC_ROOT)
        assert _with(target, "r") == tids, "every name within ceil(threads / RENAMES_PER_ROUND) rounds"
        assert {th.name for th in target.threads.values()} == {"rmain", *(f"r{i}" for i in range(WORKERS))}


def test_the_turns_go_on_where_the_last_round_ended() -> None:
    """Names changed again are all seen within as many rounds again, wherever the
    last round ended (here part way, after wrapping round): no thread waits longer."""
    with _renaming(WORKERS) as (proc, target):
        tids = sorted(target.threads)
        _name_all(proc, "r")
        for _ in range(2):
            rename(target, procfs.PROC_ROOT)
        _name_all(proc, "s")
        rename(target, procfs.PROC_ROOT)
        second = (tids + tids)[2 * RENAMES_PER_ROUND - len(tids):][:RENAMES_PER_ROUND]
        assert _with(target, "s") == sorted(second)
        rename(target, procfs.PROC_ROOT)
        assert _with(target, "s") == tids


def test_a_target_that_exited_keeps_the_names_last_read() -> None:
    """The process and its threads gone (its next period drops it): no error, nothing
    renamed."""
    with _renaming(3) as (proc, target):
        _name_all(proc, "r")
        rename(target, procfs.PROC_ROOT)
        before = {tid: th.name for tid, th in target.threads.items()}
        proc.kill()
        proc.wait()
        rename(target, procfs.PROC_ROOT)
        assert {tid: th.name for tid, th in target.threads.items()} == before


def test_a_thread_that_exited_keeps_its_name_and_the_others_are_read() -> None:
    """A thread the target knows exits before the next listing drops it: the round
    reads the others, and leaves it as it was."""
    with _renaming(3) as (proc, target):
        gone = _quit(proc, 1)
        assert target.threads[gone].name == "t1"
        _name_all(proc, "r")
        rename(target, procfs.PROC_ROOT)
        assert target.threads[gone].name == "t1"
        assert {target.threads[tid].name for tid in _with(target, "r")} == {"rmain", "r0", "r2"}
