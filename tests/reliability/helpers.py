"""Shared helpers of the reliability tests: daemon figures, raw socket exchanges, light targets."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

SLEEPY = r"""
import os, sys, threading, time
if len(sys.argv) > 2:  # drop to that uid first, as a service that root starts does
    os.setgroups([])
    os.setgid(int(sys.argv[2]))
    os.setuid(int(sys.argv[2]))
def idle():
    while True:
        time.sleep(0.1)
for _ in range(int(sys.argv[1]) - 1):
    threading.Thread(target=idle, daemon=True).start()
print("ready", flush=True)
time.sleep(3600)
"""


# sleepy(n, wake=False): threads that block until the process is killed
BLOCKED = r"""
import sys, threading
for _ in range(int(sys.argv[1]) - 1):
    threading.Thread(target=threading.Event().wait, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def nofile_hard(pid: int) -> str:
    """The process's hard limit of open files, as /proc/<pid>/limits writes it."""
    with open(f"/proc/{pid}/limits") as f:
        return next(line.split()[4] for line in f if line.startswith("Max open files"))


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def masks(tids) -> dict[int, frozenset[int]]:
    out = {}
    for t in tids:
        try:
            out[t] = frozenset(os.sched_getaffinity(t))
        except (ProcessLookupError, OSError):
            pass
    return out


def tids_of(pid: int) -> list[int]:
    return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))


def exited_pid() -> int:
    """The pid of a process that ran and was reaped: no process has it (for a while)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def sleepy(n: int, user: int | None = None, *, wake: bool = True) -> subprocess.Popen:
    """A process with n threads that only sleep (cheap to have many), run as ``user``.
    With ``wake=False`` they block until it is killed (BLOCKED, as the caller's user):
    they never wake, so a mask the kernel would only rewrite at a wake-up (a pin to a
    CPU gone offline) stays as it was set."""
    assert wake or user is None, "BLOCKED does not drop to a user"
    proc = subprocess.Popen([sys.executable, "-c", SLEEPY if wake else BLOCKED, str(n),
                             *([] if user is None else [str(user)])], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"


def spawn_with_pid(pid: int, argv: list[str]) -> subprocess.Popen | None:
    """Start argv with exactly ``pid`` by writing ns_last_pid (root); None if another
    process on this shared machine took the pid first. The kernel's last pid is put
    back where it was (or where it has gone since) after: left low, it would hand the
    pids of the tests before to the processes of the tests after sooner."""
    with open(NS_LAST_PID) as f:
        before = int(f.read())
    try:
        for _ in range(20):
            with open(NS_LAST_PID, "w") as f:
                f.write(str(pid - 1))
            p = subprocess.Popen(argv)
            if p.pid == pid:
                return p
            p.kill()
            p.wait()
        return None
    finally:
        with open(NS_LAST_PID) as f:
            now = int(f.read())
        with open(NS_LAST_PID, "w") as f:
            f.write(str(max(before, now)))


def raw_exchange(path: str, payload: bytes, timeout: float = 10.0, chunks: int = 1) -> list[dict]:
    """Send payload (in ``chunks`` pieces), half-close, return every reply line parsed."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        step = max(1, len(payload) // chunks)
        for i in range(0, len(payload), step):
            s.sendall(payload[i:i + step])
        s.shutdown(socket.SHUT_WR)
        data = bytearray()
        while chunk := s.recv(1 << 20):
            data += chunk
    assert not data or data.endswith(b"\n"), data[-100:]
    return [json.loads(line) for line in bytes(data).splitlines()]


def structured_error(reply: dict, code: str = "bad_request") -> bool:
    err = reply.get("error", {})
    return reply.get("ok") is False and err.get("code") == code and isinstance(err.get("message"), str)


def timed_ping(d, timeout: float = 5.0) -> float:
    t0 = time.perf_counter()
    assert d.request("ping", timeout=timeout)["version"]
    return time.perf_counter() - t0


def errors_in_log(d) -> list[dict]:
    """Records at level error or above, and any record carrying a traceback."""
    return [r for r in d.log_records() if r.get("level") in ("error", "critical") or "exception" in r]


