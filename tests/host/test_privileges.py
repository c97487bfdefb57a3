"""Effective capabilities, from a fake /proc/self/status and from the real kernel (a
child dropped to nobody with setpriv(1), with and without ambient capabilities)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import NOBODY

from parlschedd.host.privileges import (
    CAP_PERFMON,
    CAP_SYS_ADMIN,
    CAP_SYS_NICE,
    effective_capabilities,
    perfmon_capable,
    user_namespace_map,
)

needs_setpriv = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                   reason="needs root and setpriv(1) to drop to another uid")


def fake_status(tmp_path, lines: str) -> str:
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "status").write_text(lines)
    return str(tmp_path)


def test_the_effective_set_is_read_from_the_capeff_line(tmp_path):
    root = fake_status(tmp_path, "Name:\tparlschedd\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\n"
                                 "CapEff:\t0000004000800001\nCapBnd:\t000001ffffffffff\n")
    assert effective_capabilities(root) == {0, CAP_SYS_NICE, CAP_PERFMON}


def test_a_status_without_capeff_is_an_error_that_names_the_file(tmp_path):
    root = fake_status(tmp_path, "Name:\tx\n")
    with pytest.raises(ValueError, match="self/status has no CapEff"):
        effective_capabilities(root)


def test_perf_on_other_users_needs_perfmon_or_sys_admin():
    assert perfmon_capable(frozenset({CAP_PERFMON}))
    assert perfmon_capable(frozenset({CAP_SYS_ADMIN}))
    assert not perfmon_capable(frozenset({CAP_SYS_NICE}))


def caps_of_child(*setpriv_args: str) -> list[int]:
    code = "from parlschedd.host.privileges import effective_capabilities as e; print(sorted(e()))"
    out = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *setpriv_args,
                          sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30)
    return json.loads(out.stdout)


@needs_setpriv
def test_the_kernels_view_of_a_process_dropped_to_nobody():
    assert CAP_SYS_NICE in effective_capabilities()  # this test runs as root
    assert caps_of_child() == []
    assert caps_of_child("--inh-caps=+sys_nice", "--ambient-caps=+sys_nice") == [CAP_SYS_NICE]


def test_the_initial_user_namespace_and_another(tmp_path) -> None:
    """The initial namespace maps every uid to itself; in another (here a real one,
    unshare -U -r) CapEff holds every capability, which the kernel honours inside it
    alone: perf counters are not the namespace root's to open (perfmon_capable)."""
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "uid_map").write_text("         0          0 4294967295\n")
    assert user_namespace_map(str(tmp_path)) is None
    (tmp_path / "self" / "uid_map").write_text("         0       1000          1\n")
    assert user_namespace_map(str(tmp_path)) == "0 1000 1"
    assert user_namespace_map(str(tmp_path / "none")) is None  # no user namespaces in this kernel
    assert not perfmon_capable(frozenset({CAP_PERFMON}), initial_namespace=False)
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    code = "from parlschedd.host.privileges import *; print(user_namespace_map(), CAP_SYS_NICE in effective_capabilities())"
    out = subprocess.run(["unshare", "-U", "-r", sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    if out.returncode != 0 and "Operation not permitted" in out.stderr:
        pytest.skip("user namespaces not allowed here")
    assert out.stdout.split() == ["0", str(os.geteuid()), "1", "True"], out.stderr
