"""What the benchmarks share: a real daemon in a temporary directory, and a target
process of N threads that mostly sleep."""

from __future__ import annotations

import datetime as dt
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

from parlschedctl import client

IDLE_TARGET = r"""
import sys, threading, time
nap = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05
def idle():
    x = 0
    while True:
        for i in range(200): x += i
        time.sleep(nap)
for _ in range(int(sys.argv[1]) - 1):
    threading.Thread(target=idle, daemon=True).start()
print("ready", flush=True)
time.sleep(86400)
"""


def stamp() -> str:
    """When a result was measured: UTC, to the second (the figures quote the time of day)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def machine() -> dict:
    """What every result records about where it was measured, and with what code."""
    return {"node": socket.gethostname(), "cpus": os.cpu_count(), "kernel": platform.release(), "code": code_version()}


def code_version() -> str:
    """The commit of the parlschedd this interpreter imports, ``-dirty`` when its code
    (not the results an earlier benchmark just wrote) has changes; a run from an older
    checkout (PYTHONPATH=that checkout) says so, and its daemon runs that code too
    (``start_daemon``). Runs as root: git is told the checkout is safe to read whoever
    owns it."""
    where = code_root()
    git = ["git", "-c", f"safe.directory={where}", "-C", str(where)]
    try:
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        changed = subprocess.run([*git, "status", "--porcelain", "--", "parlschedd", "parlschedctl", "bench/*.py"],
                                 capture_output=True, text=True).stdout.strip()
    except OSError:  # no git
        return f"{where}@unknown"
    return f"{where}@{head or 'unknown'}{'-dirty' if changed else ''}"


def code_root() -> Path:
    """The checkout whose parlschedd this interpreter imports."""
    import parlschedd

    return Path(parlschedd.__file__).resolve().parent.parent


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of ``pid`` in ns resolution (schedstat), not the 10 ms
    clock ticks of /proc/<pid>/stat, which at 16 threads are 8 us per thread-period."""
    task = Path(f"/proc/{pid}/task")
    return sum(int((task / t / "schedstat").read_text().split()[0]) for t in os.listdir(task)) / 1e9


def start_daemon(tmp: Path, config: str, log: Path | None = None, nice: int = 0,
                 command: list[str] | None = None) -> tuple[subprocess.Popen, str]:
    """Start parlschedd with ``config`` (YAML text); returns (process, socket path).
    ``nice``: its nice value, set in the child before exec, as systemd's Nice= does;
    ``command``: what runs the daemon (default ``python -m parlschedd``, from the
    checkout this interpreter imports, which ``code_version`` records: ``-m`` put the
    working directory first, so a run from another checkout ran that one's daemon
    under this one's commit), followed by the daemon's own options."""
    (tmp / "cfg.yaml").write_text(config)
    sock = str(tmp / "ctl.sock")
    stderr = open(log, "ab") if log else subprocess.DEVNULL
    renice = (lambda: os.setpriority(os.PRIO_PROCESS, 0, nice)) if nice else None
    proc = subprocess.Popen([*(command or [sys.executable, "-m", "parlschedd"]), "--config", str(tmp / "cfg.yaml"), "--socket", sock,
                             "--state-dir", str(tmp / "state"), "--log-level", "warning"], stderr=stderr,
                            preexec_fn=renice, cwd=code_root())
    for _ in range(600):
        try:
            client.request(sock, "ping")
            return proc, sock
        except client.Unreachable:
            if proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {proc.returncode}") from None
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("daemon did not start")


def stop_daemon(proc: subprocess.Popen, timeout: float = 30.0) -> bool:
    """SIGTERM (the daemon restores every thread), then SIGKILL after ``timeout``;
    True when it stopped by itself."""
    proc.terminate()
    try:
        proc.wait(timeout)
        return True
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return False


def start_idle_target(threads: int, nap: float = 0.05) -> subprocess.Popen:
    """A process of ``threads`` threads (main included) that wake every ``nap`` s."""
    proc = subprocess.Popen([sys.executable, "-c", IDLE_TARGET, str(threads), str(nap)], stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()
    return proc
