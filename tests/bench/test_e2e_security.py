"""bench/e2e_security.py: bench/results/e2e-security.json from an e2e run's result.json."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
from e2e_security import BENCHMARK, main, security_record  # noqa: E402

COMMITTED = BENCH / "results" / "e2e-security.json"
TEXT = "\u2717 PrivateUsers=  Service has access to other users  0.2\n\n\u2192 Overall exposure level for parlschedd.service: 1.4 OK :-)\n"
HOST = {"node": "vm", "cpus": 2, "kernel": "6.1.0"}


def result(**security) -> dict:
    """A result.json as e2e/probe.py writes it, its security step as given."""
    return {"started": 1796418000.4, "errors": {},
            "steps": {"environment": {"systemd": "systemd 252 (252.36-1~deb12u1)", "os": "Debian GNU/Linux 12 (bookworm)"},
                      "security": {"rc": 0, "text": TEXT, "score": 1.4, "verdict": "OK", **security}}}


def test_the_record_of_a_run() -> None:
    assert security_record(result(), "abc1234", HOST) == {
        "benchmark": BENCHMARK, "date": "2026-12-04T21:00:00+00:00", "commit": "abc1234", "machine": HOST,
        "systemd": "252 (Debian GNU/Linux 12 (bookworm), booted in a container by make e2e)",
        "score": 1.4, "verdict": "OK", "text": TEXT}


def test_a_result_from_before_the_os_was_recorded() -> None:
    r = result()
    del r["steps"]["environment"]["os"]
    assert security_record(r, "abc1234", HOST)["systemd"] == "252 (booted in a container by make e2e)"


@pytest.mark.parametrize("broken", ["failed", "no score", "missing"])
def test_no_record_without_a_score(broken: str) -> None:
    r = result(score=None, verdict=None) if broken == "no score" else result()
    if broken == "failed":
        r["errors"]["security"] = "Traceback ..."
    if broken == "missing":
        del r["steps"]["security"]
    with pytest.raises(ValueError, match="no exposure score"):
        security_record(r, "abc1234", HOST)


def test_the_file_has_the_committed_files_fields(tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text(json.dumps(result()))
    main([str(tmp_path / "result.json"), "--out", str(tmp_path / "out.json")])
    written = json.loads((tmp_path / "out.json").read_text())
    assert set(json.loads(COMMITTED.read_text())) <= set(written)
    assert written["score"] == 1.4 and written["text"] == TEXT
    assert written["commit"] == written["machine"]["code"]
    assert re.search(r"@[0-9a-f]{7,}(-dirty)?$", written["commit"])  # this checkout's commit, read from git
