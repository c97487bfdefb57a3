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
    chunks = list(h._chunks)
    assert sum(c.periods for c in chunks) < 100 + history.CHUNK_PERIODS
    assert all(c.rows.itemsize == 4 + 4 + 2 + 2 and c.rows.size == c.t.size * 64 for c in chunks)
    assert h.last(1)[0].as_json()["t"] == pytest.approx(99.9) == h.newest_shown_t
    h.resize(10)
    assert h.periods == 10 and h.dropped == 990, "a smaller history's cut is counted as dropped too"
    assert sum(c.periods for c in h._chunks) < 10 + history.CHUNK_PERIODS
    for k in range(40):  # the chunk being filled, then one more
        h.record(100 + k, np.arange(64), np.random.rand(64), np.zeros(64), np.zeros(64))
    assert h._chunks[-1].t.size == 10, "a chunk of no more periods than are kept"


def test_a_chunk_is_made_once_in_so_many_periods_for_its_first_period_s_threads():
    """Samples kept as numpy arrays of their own, four malloc'd blocks a period kept
    600 periods among the period's short-lived ones, were the lead for the daemon's
    heap growing under churn (bench/results/heap_churn*.json): a chunk of periods is
    made once in CHUNK_PERIODS, for as many rows as its first period's threads in
    each, and made smaller when full at fewer than half those."""
    h = History(capacity=600, started=0.0)
    made = []
    for k in range(5 * history.CHUNK_PERIODS):
        h.record(k * 0.1, np.arange(16), np.ones(16), np.zeros(16), np.zeros(16))
        if h._chunks[-1] not in made:
            made.append(h._chunks[-1])
            assert k % history.CHUNK_PERIODS == 0
        assert h._chunks[-1].rows.size == 16 * history.CHUNK_PERIODS, "no row array grown or made again"
    h.record(999, np.arange(16), np.ones(16), np.zeros(16), np.zeros(16))
    for k in range(history.CHUNK_PERIODS - 1):
        h.record(1000 + k, [1], [1.0], [0], [0])
    assert h._chunks[-1].rows.size == 16 + history.CHUNK_PERIODS - 1, "one thread a period now: made smaller"
    h.record(2000, [1], [1.0], [0], [0])
    assert h._chunks[-1].rows.size == history.CHUNK_PERIODS


def test_a_period_that_is_not_one_value_a_thread_changes_nothing():
    h = History(capacity=2, started=0.0)
    for k in range(4):  # two chunks of two, full: the next period starts a third
        h.record(k, [1, 2], [0.5, np.nan], [0, 1], [0, 0])
    for tids, cpu, error in (([1, 2], [40000, 1], OverflowError), (None, [0, 1], ValueError),
                             ([1, 2], [None, 1], TypeError)):
        with pytest.raises(error):
            h.record(4, tids, [0.5, 0.5], cpu, [0, 0])
        assert h.periods == 2 and h.dropped == 2 and [s.t for s in h.last()] == [2, 3] and h.newest_shown_t == 3
        assert len(h._chunks) == 1 and h._chunks[0].full
    with pytest.raises(ValueError, match=r"history: utility of shape \(1,\), not one value for each of 2 threads"):
        h.record(4, [1, 2], [0.5], [0, 1], [0, 0])
    with pytest.raises(ValueError, match=r"history: cpu of shape \(1, 2\)"):
        h.record(4, [1, 2], [0.5, 0.5], [[0, 1]], [0, 0])
    assert h.periods == 2 and h.dropped == 2 and [s.t for s in h.last()] == [2, 3]


def test_a_period_refused_leaves_the_rows_as_they_were():
    h = History(capacity=600, started=0.0)
    h.record(0, np.arange(4), np.ones(4), np.zeros(4), np.zeros(4))
    size = h._chunks[-1].rows.size
    with pytest.raises(OverflowError):  # a domain past int16, in a list, after 100,000 rows were written
        h.record(1, np.arange(100_000), np.ones(100_000), np.zeros(100_000), [0] * 99_999 + [40_000])
    assert h._chunks[-1].rows.size == size and h.periods == 1


def test_memory_running_out_changes_nothing(monkeypatch):
    """A MemoryError as a full chunk is made smaller, or amid a reload to fewer
    periods, leaves the history as it was: not a period more or less than counted."""
    h = History(capacity=600, started=0.0)
    h.record(0, np.arange(64), np.ones(64), np.zeros(64), np.zeros(64))  # a chunk for 64 threads a period
    for k in range(1, history.CHUNK_PERIODS - 1):
        h.record(k, [1], [1.0], [0], [0])
    copy = history._copy

    def no_memory_to_shrink(rows, keep, size):
        if keep == size:
            raise MemoryError
        return copy(rows, keep, size)
    monkeypatch.setattr(history, "_copy", no_memory_to_shrink)
    with pytest.raises(MemoryError):
        h.record(history.CHUNK_PERIODS - 1, [1], [1.0], [0], [0])
    assert h.periods == h.recorded == history.CHUNK_PERIODS - 1 and h.newest_shown_t == history.CHUNK_PERIODS - 2
    monkeypatch.undo()
    for k in range(history.CHUNK_PERIODS - 1, 300):
        h.record(k, [1], [1.0], [0], [0])
    made = []

    def chunk_then_no_memory(chunk, periods, rows):
        if made:
            raise MemoryError
        made.append(chunk)
        chunk_init(chunk, periods, rows)
    chunk_init = history._Chunk.__init__
    monkeypatch.setattr(history._Chunk, "__init__", chunk_then_no_memory)
    with pytest.raises(MemoryError):
        h.resize(100)
    assert h.periods == 300 and [s.t for s in h.last()] == list(range(300))


@settings(max_examples=1000, deadline=None)
@given(capacity=st.integers(1, 12), chunk=st.integers(1, 5),
       steps=st.lists(st.one_of(st.integers(0, 10), st.integers(0, 40), st.just("snapshot"),
                                st.tuples(st.just("resize"), st.integers(1, 12))), max_size=200))
def test_the_history_holds_what_a_deque_of_the_samples_would(capacity, chunk, steps):
    """The chunks against the plainest history: a deque of each period's arrays, with
    periods of 0 to 40 threads, reloads of history_periods in between, and snapshots
    (``last()``, as a ``history`` request takes) that later periods must leave as they
    were. Chunks of 1 to 5 periods, not 64, for many to come and go; their rows at most
    twice those held, or, in the chunk being filled, its first period's threads in each
    of its periods; a reload to fewer periods keeps no more."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(history, "CHUNK_PERIODS", chunk)
        h, model = History(capacity=capacity, started=5.0), deque(maxlen=capacity)
        snapshots = []
        rng = np.random.default_rng(len(steps))
        for k, step in enumerate(steps):
            if step == "snapshot":
                snapshots.append((h.last(), list(model)))
                continue
            if isinstance(step, tuple):
                fewer = step[1] < h.capacity
                h.resize(step[1])
                model = deque(model, maxlen=step[1])
                assert not fewer or (h._skip == 0 and sum(c.periods for c in h._chunks) == h.periods)
            else:
                tids = rng.integers(1, 2**31 - 1, size=step)
                utility = np.where(rng.random(step) < 0.2, np.nan, rng.random(step))
                cpu, domain = rng.integers(-1, 2**15 - 1, size=step), rng.integers(-1, 2**15 - 1, size=step)
                h.record(5.0 + k * 0.25, tids, utility, cpu, domain)
                model.append((k * 0.25, tids, utility, cpu, domain))
            assert sum(c.periods for c in h._chunks) - h._skip == h.periods == len(model)
            assert h._skip < h._chunks[0].periods if h._chunks else h.periods == 0
            assert all(c.rows.size <= 2 * c.used for c in list(h._chunks)[:-1])
            if h._chunks:
                newest = h._chunks[-1]
                assert newest.rows.size <= max(2 * newest.used, newest.t.size * newest.ends[0])
            assert h.newest_shown_t == (round(model[-1][0], 4) if model else None)
            assert_holds(h.last(), list(model))
            assert_holds(h.last(3), list(model)[-3:])
        assert h.dropped == h.recorded - len(model)
        for got, held in snapshots:
            assert_holds(got, held)


def assert_holds(got, held):
    assert len(got) == len(held)
    for sample, (t, tids, utility, cpu, domain) in zip(got, held):
        assert sample.t == t and sample.tids.tolist() == tids.tolist()
        np.testing.assert_array_equal(sample.utility, utility.astype(np.float32))
        assert sample.cpu.tolist() == cpu.tolist() and sample.domain.tolist() == domain.tolist()
        assert not sample.cpu.flags.writeable, "a view of the history's own memory"


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
