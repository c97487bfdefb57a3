"""parlschedd/daemon/history.py: a target's history ring, bounded, served over the
socket of a real daemon managing a real process's threads, plotted by parlschedctl,
and kept once the target exited; its memory bound on a History alone."""

from __future__ import annotations

import struct
import subprocess
import sys

import numpy as np
import pytest

from parlschedctl import client
from parlschedd.daemon.history import History
from tests.conftest import PINNING, needs_root, start_daemon, threads_of, wait_for


@needs_root
def test_history_is_bounded_and_plot_writes_a_png(tmp_path, workload):
    (tmp_path / "parlschedd.yaml").write_text("period_s: 0.02\ndomain_period_s: 0.2\nhistory_periods: 25\n")
    d = start_daemon(tmp_path)
    try:
        w = workload(3)
        d.request("attach", pid=w.pid)
        full = wait_for(lambda: (h := d.request("history", pid=w.pid)) and len(h["samples"]) == 25 and h)
        # 10 more periods, however long a loaded machine makes them (a fixed 0.3 s sleep
        # counted on 15 of them, and t[0] > 0.3 on the first tick's phase after the attach)
        h = wait_for(lambda: (h := d.request("history", pid=w.pid))["dropped"] >= full["dropped"] + 10 and h)
        assert h["capacity"] == 25 and len(h["samples"]) == 25  # the ring keeps only the last 25
        t = [s["t"] for s in h["samples"]]
        assert t == sorted(t) and t[0] >= full["samples"][10]["t"], "the 10 oldest samples of the full ring dropped"
        assert set(h["samples"][-1]["tids"]) == set(threads_of(d, w.pid))
        assert len(d.request("history", pid=w.pid, last=5)["samples"]) == 5
        out = tmp_path / "run.png"
        r = subprocess.run([sys.executable, "-c", "from parlschedctl.cli import main; main()", "--socket", d.socket,
                            "plot", str(w.pid), "--out", str(out)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        data = out.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
        width, height = struct.unpack(">II", data[16:24])
        assert width > 500 and height > 400
    finally:
        d.stop()


def test_history_memory_is_bounded():
    h = History(capacity=100, started=0.0)
    for k in range(1000):
        h.record(k * 0.1, np.arange(64), np.random.rand(64), np.zeros(64), np.zeros(64))
    assert len(h.samples) == 100 and h.dropped == 900
    held = sum(a.nbytes for s in h.samples for a in (s.tids, s.utility, s.cpu, s.domain))
    assert held == 100 * 64 * (4 + 4 + 2 + 2)
    assert h.last(1)[0].as_json()["t"] == pytest.approx(99.9)
    h.resize(10)
    assert len(h.samples) == 10 and h.dropped == 990, "a smaller ring's cut is counted as dropped too"


@needs_root
def test_the_history_of_a_target_that_exited_is_kept_for_its_plot(tmp_path, open_dir, kill_after):
    """``parlschedctl run -- CMD`` ends when CMD does, and the daemon drops the target:
    its history went with it, so no plot could be drawn of a run once it was over
    ("process N is not attached: it exited"). The last HISTORIES_KEPT exited targets'
    histories are kept: served (marked exited) to root and to the process's owner, not
    to another user, and plotted."""
    from parlschedd.daemon.engine import HISTORIES_KEPT
    from tests.conftest import NOBODY, as_user

    d = start_daemon(tmp_path, "period_s: 0.02\ndomain_period_s: 0.2\nsocket: {mode: '0666'}\n" + PINNING, run=open_dir)
    try:
        runs = [kill_after(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
                for _ in range(HISTORIES_KEPT + 1)]
        for p in runs:
            d.request("attach", pid=p.pid)
        wait_for(lambda: all(len(d.request("history", pid=p.pid)["samples"]) >= 5 for p in runs))
        last = {}
        for p in runs:
            last[p.pid] = d.request("history", pid=p.pid, last=1)["samples"][-1]["t"]
            p.kill()
            p.wait()
        assert wait_for(lambda: not d.request("status")["targets"]), "every target dropped as it exited"
        first, kept = runs[0], runs[1:]
        for p in kept:
            h = d.request("history", pid=p.pid)
            assert h["exited"] is True and h["pid"] == p.pid and h["samples"][-1]["t"] >= last[p.pid]
        assert as_user(NOBODY, d.socket, "history", pid=kept[-1].pid) == {"refused": "not_attached"}
        with pytest.raises(client.Refused, match=r"it exited, and parlschedd dropped it .*; its history is no "
                                                 rf"longer kept \(the last {HISTORIES_KEPT} exited targets' are\)"):
            d.request("history", pid=first.pid)
        out = tmp_path / "run.png"
        r = subprocess.run([sys.executable, "-m", "parlschedctl", "--socket", d.socket, "plot", str(kept[-1].pid),
                            "--out", str(out)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        d.stop()
