"""The e2e tests boot a real systemd in a container (e2e/run.sh): root, debootstrap,
systemd-nspawn and minutes of time. They run only with PARLSCHED_E2E=1 (`make e2e`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: end-to-end test in a booted systemd container (make e2e)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("PARLSCHED_E2E") == "1":
        return
    skip = pytest.mark.skip(reason="e2e: set PARLSCHED_E2E=1 or run `make e2e`")
    for item in items:
        if HERE in Path(item.fspath).parents:
            item.add_marker(skip)
