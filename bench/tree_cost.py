"""Benchmark: what a ``--descendants`` target's process tree costs the daemon, attached
by root and by a user (issue 3, for trees rather than threads).

A real parlschedd (T_CPU = 0.1 s) manages a process with N child processes that only
sleep (a thread each), attached with --descendants by root or by a user (nobody); the
figure is the daemon's CPU time over a window, as a share of one core. Root's tree,
measured in the same run (the arms alternate which goes first), is the baseline: a
user's tree was listed every period (each process's owner read), root's only when a
task was born on the host since the last listing (procfs.birth_mark), so the ratio
user/root is what this measures. The host's forks in each window are recorded: a birth
anywhere makes the next period list every tree.

    sudo .venv/bin/python bench/tree_cost.py [--sizes 100,300] [--rounds 2] [--window 10]

Prints a table and writes bench/results/tree_cost.json.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harness import cpu_seconds, machine, stamp, start_daemon, stop_daemon
from parlschedctl import client

PERIOD_S = 0.1
NOBODY = 65534
SETTLE_S = 3.0  # after the attach: its first listings, and the pins of the first periods

# N children that sleep, as ``uid`` (0: root): forked, so that a user need not be able
# to run this checkout's interpreter
TREE = """
import os, signal, sys
uid = int(sys.argv[2])
if uid:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
for _ in range(int(sys.argv[1])):
    if os.fork() == 0:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the pipe's end is the parent's "ready" alone
        signal.pause()
        os._exit(0)
print("ready", flush=True)
signal.pause()
"""
START_S = 60.0  # for the tree to say it is ready (a fork refused, RLIMIT_NPROC, ends it sooner)


def start_tree(n: int, uid: int) -> subprocess.Popen:
    """The tree, in a process group of its own (killed whole by ``stop_tree``, and here
    when it does not start)."""
    proc = subprocess.Popen([sys.executable, "-c", TREE, str(n), str(uid)], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    ready, _, _ = select.select([proc.stdout], [], [], START_S)
    if not ready or proc.stdout.readline().strip() != "ready":
        stop_tree(proc)
        raise RuntimeError(f"the tree of {n} processes as uid {uid} did not start")
    return proc


def stop_tree(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()


def attach_as(sock: str, pid: int, uid: int) -> None:
    """``attach --descendants pid`` from a process of ``uid``'s (a fork of this one)."""
    child = os.fork()
    if child == 0:
        try:
            if uid:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
            client.request(sock, "attach", pid=pid, descendants=True)
            os._exit(0)
        except BaseException as exc:  # noqa: BLE001 - the child reports and exits, whatever it was
            print(f"attach as uid {uid} failed: {exc}", file=sys.stderr)
            os._exit(1)
    _, status = os.waitpid(child, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"attach as uid {uid} failed")


def host_forks() -> int:
    with open("/proc/stat") as f:
        return int(next(line for line in f if line.startswith("processes")).split()[1])


def measure(daemon: int, window: float) -> tuple[float, float]:
    """The daemon's CPU time over ``window`` as % of one core, and the host's forks a second."""
    t0, c0, f0 = time.monotonic(), cpu_seconds(daemon), host_forks()
    time.sleep(window)
    elapsed = time.monotonic() - t0
    return 100 * (cpu_seconds(daemon) - c0) / elapsed, (host_forks() - f0) / elapsed


def one(sock: str, daemon: int, n: int, who: str, window: float) -> dict:
    uid = NOBODY if who == "user" else 0
    tree = start_tree(n, uid)
    try:
        attach_as(sock, tree.pid, uid)
        time.sleep(SETTLE_S)
        managed = len(client.request(sock, "status", pid=tree.pid)["targets"][0]["threads"])
        cpu, forks = measure(daemon, window)
        client.request(sock, "detach", pid=tree.pid)
    finally:
        stop_tree(tree)
    return {"processes": n, "attached_by": who, "threads_managed": managed, "daemon_cpu_pct": round(cpu, 2),
            "host_forks_per_s": round(forks, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,300", help="child processes in the tree, comma-separated")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--window", type=float, default=10.0, help="seconds of each measurement")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("tree_cost.py: run as root (it starts the daemon and a user's processes)")
    sizes = [int(s) for s in args.sizes.split(",")]
    runs = []
    with tempfile.TemporaryDirectory(prefix="parlsched-tree-") as tmp:
        os.chmod(tmp, 0o755)  # the user's client reaches the socket
        daemon, sock = start_daemon(Path(tmp), f"period_s: {PERIOD_S}\nsocket: {{mode: '0666'}}\n")
        try:
            idle, _ = measure(daemon.pid, args.window)
            for r in range(args.rounds):
                for n in sizes:
                    for who in (("root", "user") if r % 2 == 0 else ("user", "root")):
                        runs.append({"round": r, **one(sock, daemon.pid, n, who, args.window)})
                        print(f"round {r}: {n} processes attached by {who}: daemon {runs[-1]['daemon_cpu_pct']:.1f}% "
                              f"of a core (host forks {runs[-1]['host_forks_per_s']}/s)", file=sys.stderr, flush=True)
        finally:
            stop_daemon(daemon)
    table = []
    print(f"\nparlschedd's CPU with a --descendants tree of sleeping processes (T_CPU {PERIOD_S} s; idle: {idle:.2f}%)\n")
    print("| processes | root's tree, % of a core | a user's tree, % of a core | user / root |")
    print("|---|---|---|---|")
    for n in sizes:
        root = float(np.median([x["daemon_cpu_pct"] for x in runs if x["processes"] == n and x["attached_by"] == "root"]))
        user = float(np.median([x["daemon_cpu_pct"] for x in runs if x["processes"] == n and x["attached_by"] == "user"]))
        table.append({"processes": n, "root_pct": round(root, 2), "user_pct": round(user, 2),
                      "ratio_user_to_root": round(user / root, 2) if root else None})
        print(f"| {n} | {root:.1f} | {user:.1f} | {user / root:.2f} |" if root else f"| {n} | {root:.1f} | {user:.1f} | - |")
    out = Path(__file__).resolve().parent / "results" / "tree_cost.json"
    out.write_text(json.dumps({"benchmark": "tree_cost", "date": stamp(), "machine": machine(), "period_s": PERIOD_S,
                               "window_s": args.window, "idle_pct": round(idle, 2), "table": table, "runs": runs},
                              indent=2) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
