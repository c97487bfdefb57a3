"""The unit's exposure score, `systemd-analyze security parlschedd.service` in the
systemd that `make e2e` boots, as bench/results/e2e-security.json.

`make e2e` (as root) runs this once the e2e tests have passed. From an earlier run's
result, on the checkout that ran it (the commit written is this checkout's, ``-dirty``
when its tree has changes):

    .venv/bin/python bench/e2e_security.py build/e2e/result.json

The date is when the probe started, not when this runs; the machine is the host that
booted the container (the container runs on its kernel).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from harness import machine

BENCHMARK = "e2e systemd-analyze security (make e2e, tests/e2e/test_systemd.py)"


def security_record(result: dict, commit: str, host: dict) -> dict:
    """The document for e2e/probe.py's ``result`` (its result.json): the security step's
    score, verdict and text, the systemd and OS they were measured with, the probe's
    start (UTC), ``commit`` and ``host`` (harness.machine()). ValueError when the step
    failed or found no score."""
    sec = result["steps"].get("security")
    if "security" in result.get("errors", {}) or not sec or sec.get("score") is None:
        raise ValueError("no exposure score in this e2e result: its security step failed or found none")
    env = result["steps"].get("environment", {})
    version = env.get("systemd", "").removeprefix("systemd ").split(" ")[0] or "unknown"  # "systemd 252 (252.36-1~deb12u1)"
    where = ", ".join(filter(None, [env.get("os"), "booted in a container by make e2e"]))
    return {
        "benchmark": BENCHMARK,
        "date": dt.datetime.fromtimestamp(result["started"], dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "machine": host,
        "systemd": f"{version} ({where})",
        "score": sec["score"],
        "verdict": sec["verdict"],
        "text": sec["text"],
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("result", type=Path, help="the e2e run's result.json (make e2e: build/e2e/result.json)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "e2e-security.json")
    args = ap.parse_args(argv)
    try:
        host = machine()
        out = security_record(json.loads(args.result.read_text()), host["code"], host)
    except ValueError as e:
        sys.exit(f"e2e_security.py: {args.result}: {e}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}: exposure {out['score']} {out['verdict']}", file=sys.stderr)


if __name__ == "__main__":
    main()
