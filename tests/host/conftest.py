"""Fixtures for the host layer: real busy threads and fake /proc trees."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest


@dataclass
class Worker:
    """A real thread that spins (``busy``) or sleeps until told to stop."""

    busy: bool
    stop: threading.Event = field(default_factory=threading.Event)
    ready: threading.Event = field(default_factory=threading.Event)
    tid: int = 0
    thread: threading.Thread | None = None

    def run(self) -> None:
        self.tid = threading.get_native_id()
        self.ready.set()
        while not self.stop.is_set():
            if not self.busy:
                self.stop.wait(0.01)

    def finish(self) -> None:
        """Stop the thread and wait until the kernel has reaped it: join() returns when
        Python is done with the thread, a little before the OS thread is gone."""
        self.stop.set()
        assert self.thread is not None
        self.thread.join(5)
        task = Path(f"/proc/self/task/{self.tid}")
        deadline = time.monotonic() + 5
        while task.exists() and time.monotonic() < deadline:
            time.sleep(0.001)


@pytest.fixture
def spawn() -> Iterator[Callable[..., Worker]]:
    """Start real threads; every one is stopped and joined at teardown."""
    workers: list[Worker] = []

    def start(busy: bool = True) -> Worker:
        worker = Worker(busy)
        worker.thread = threading.Thread(target=worker.run, daemon=True)
        worker.thread.start()
        assert worker.ready.wait(5)
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.finish()


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def stat_line(pid: int, comm: str, *, ppid: int = 1, start: int = 100, state: str = "S", flags: int = 0,
              threads: int = 1, processor: int = 0) -> str:
    """A /proc/<pid>/stat line of 52 fields (Linux 5.x+); field 22 is ``start``, 39 ``processor``."""
    fields = ["0"] * 50
    fields[0] = state
    fields[1] = str(ppid)
    fields[6] = str(flags)
    fields[17] = str(threads)
    fields[19] = str(start)
    fields[36] = str(processor)
    return f"{pid} ({comm}) {' '.join(fields)}\n"


class FakeProc:
    """A /proc tree in a temporary directory, laid out as the kernel shows it."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def process(self, pid: int, comm: str = "app", *, ppid: int = 1, start: int = 100,
                uid: int = 1000, cmdline: str = "app\0--flag\0", children: bool = True) -> None:
        base = self.root / str(pid)
        base.mkdir(parents=True)
        (base / "stat").write_text(stat_line(pid, comm, ppid=ppid, start=start))
        (base / "comm").write_text(comm + "\n")
        (base / "cmdline").write_text(cmdline)
        (base / "status").write_text(f"Name:\t{comm}\nTgid:\t{pid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t0\t0\t0\t0\n")
        (base / "cgroup").write_text("0::/\n")
        self.thread(pid, pid, comm, start=start, children=children)

    def thread(self, pid: int, tid: int, comm: str, *, start: int = 100, run_ns: int = 0,
               children: bool = True) -> None:
        task = self.root / str(pid) / "task" / str(tid)
        task.mkdir(parents=True)
        (task / "stat").write_text(stat_line(tid, comm, ppid=1, start=start))
        (task / "comm").write_text(comm + "\n")
        (task / "schedstat").write_text(f"{run_ns} 5 7\n")
        if children:
            (task / "children").write_text("")
        if tid != pid:
            (self.root / str(tid)).symlink_to(str(pid))

    def set_children(self, pid: int, tid: int, kids: list[int]) -> None:
        (self.root / str(pid) / "task" / str(tid) / "children").write_text(" ".join(map(str, kids)) + " ")


@pytest.fixture
def fake_proc(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path / "proc")
