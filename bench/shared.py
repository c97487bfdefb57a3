"""Where the read-only shared inputs (shared/data/...) live, for benchmarks and tests.

They sit beside the checkout (``../shared``). A clone made elsewhere for a clean run
(``git clone . /tmp/ci-check``) finds them beside the repository it was cloned from;
``PARLSCHED_SHARED`` names them anywhere else.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def shared_dir(repo: Path = REPO) -> Path:
    """The shared/ folder: $PARLSCHED_SHARED, else beside ``repo``, else beside the local
    repository ``repo`` was cloned from; ``repo``/../shared when none exists, so that
    the error names the place it was looked for first."""
    named = os.environ.get("PARLSCHED_SHARED")
    if named:
        return Path(named)
    beside = repo.parent / "shared"
    if beside.is_dir():
        return beside
    try:
        origin = subprocess.run(["git", "-C", str(repo), "config", "--get", "remote.origin.url"],
                                capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        origin = ""
    if origin and Path(origin).is_dir() and (Path(origin).resolve().parent / "shared").is_dir():
        return Path(origin).resolve().parent / "shared"
    return beside


ENERGY_DATA = shared_dir() / "data" / "energy-time"
