"""bench/harness.py: the daemon a benchmark starts runs the code it records."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
from harness import code_root, code_version, start_daemon, stop_daemon  # noqa: E402

from tests.conftest import needs_root  # noqa: E402


@needs_root
def test_the_daemon_runs_the_checkout_the_benchmark_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -m parlschedd`` puts the working directory first: a benchmark run from
    another checkout (an A/B's old worktree, without PYTHONPATH) ran that checkout's
    daemon while machine.code named the one the benchmark imports. Here a working
    directory whose parlschedd only exits 3: the daemon started is the recorded one."""
    other = tmp_path / "other"
    (other / "parlschedd").mkdir(parents=True)
    (other / "parlschedd" / "__init__.py").write_text("")
    (other / "parlschedd" / "__main__.py").write_text("raise SystemExit(3)\n")
    monkeypatch.chdir(other)
    proc, sock = start_daemon(tmp_path, "period_s: 0.1\n")
    try:
        assert os.path.exists(sock)
    finally:
        assert stop_daemon(proc)
    assert code_version().startswith(f"{code_root()}@")
