"""parlschedd/daemon/history.py: a target's history ring, bounded, served over the
socket of a real daemon managing a real process's threads, plotted by parlschedctl,
and kept once the target exited; its memory bound on a History alone."""

from __future__ import annotations

import struct
import subprocess
import sys
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parlschedctl import client
from parlschedd.daemon import history
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
    assert h.periods == 100 and h.dropped == 900
    assert h._t.nbytes + h._at.nbytes + h._n.nbytes == 100 * (8 + 8 + 4)
    assert h._rows.itemsize == 4 + 4 + 2 + 2 and h._rows.size <= 4 * 100 * 64
    assert h.last(1)[0].as_json()["t"] == pytest.approx(99.9) == h.newest_shown_t
    h.resize(10)
    assert h.periods == 10 and h.dropped == 990, "a smaller ring's cut is counted as dropped too"
    assert h._t.size == 10 and h._rows.size == 1024, "and gives back what the periods dropped held"


def test_a_period_recorded_allocates_nothing_once_the_rings_are_grown():
    """Samples kept as numpy arrays of their own, four malloc'd blocks a period kept
    600 periods among the period's short-lived ones, grew the daemon's heap under churn
    by some 11 KiB a minute (bench/results/heap_churn*.json): the rings are written in
    place."""
    h = History(capacity=600, started=0.0)
    sizes = np.random.default_rng(0).integers(0, 48, size=3000)
    for k, n in enumerate(sizes[:1200]):
        h.record(k * 0.1, np.arange(n), np.ones(n), np.zeros(n), np.zeros(n))
    arrays = [id(a) for a in (h._t, h._at, h._n, h._rows)]
    for k, n in enumerate(sizes[1200:], start=1200):
        h.record(k * 0.1, np.arange(n), np.ones(n), np.zeros(n), np.zeros(n))
    assert [id(a) for a in (h._t, h._at, h._n, h._rows)] == arrays


@settings(max_examples=1500, deadline=None)
@given(capacity=st.integers(1, 12),
       steps=st.lists(st.one_of(st.integers(0, 10), st.integers(0, 40), st.tuples(st.just("resize"), st.integers(1, 12))), max_size=400))
def test_the_rings_hold_what_a_deque_of_the_samples_would(capacity, steps):
    """The rings against the plainest history: a deque of each period's arrays, with
    periods of 0 to 40 threads and reloads of history_periods in between; the rows'
    ring at most four times the rows held and a period's most (or its first size). It
    starts at 8 rows, not 1024, for its rows to wrap round and the ring to grow."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(history, "FIRST_ROWS", 8)
        h = History(capacity=capacity, started=5.0)
        model = deque(maxlen=capacity)
        rng = np.random.default_rng(len(steps))
        for k, step in enumerate(steps):
            if isinstance(step, tuple):
                h.resize(step[1])
                model = deque(model, maxlen=step[1])
                continue
            tids = rng.integers(1, 2**31 - 1, size=step)
            utility = np.where(rng.random(step) < 0.2, np.nan, rng.random(step))
            cpu, domain = rng.integers(-1, 2**15 - 1, size=step), rng.integers(-1, 64, size=step)
            h.record(5.0 + k * 0.25, tids, utility, cpu, domain)
            model.append((k * 0.25, tids, utility, cpu, domain))
            assert h._rows.size <= max(8, 4 * (h._rows_held() + 40))
            got = h.last()
            assert h.periods == len(model) == len(got) and h.dropped == h.recorded - len(model)
            for sample, (t, tids, utility, cpu, domain) in zip(got, model):
                assert sample.t == t and sample.tids.tolist() == tids.tolist()
                np.testing.assert_array_equal(sample.utility, utility.astype(np.float32))
                assert sample.cpu.tolist() == cpu.tolist() and sample.domain.tolist() == domain.tolist()
            assert [s.t for s in h.last(3)] == [m[0] for m in list(model)[-3:]]
            assert h.newest_shown_t == round(model[-1][0], 4)


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
