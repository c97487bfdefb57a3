"""parlschedd/kinds.py: an integer, a number, a finite one, as read from YAML or JSON;
and that the control protocol, which every parlschedctl command loads, stays without
yaml."""

import subprocess
import sys
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from parlschedd.kinds import finite, is_integer, is_number


@pytest.mark.parametrize("value, integer, number", [
    (3, True, True), (0, True, True), (-2, True, True), (10**400, True, True),
    (np.int64(5), True, True), (2.0, False, True), (float("nan"), False, True),
    (np.float32(1.5), False, True), (Fraction(1, 3), False, True),
    (True, False, False), (False, False, False), (np.bool_(True), False, False), (Decimal("1"), False, False),
    ("3", False, False), (None, False, False), ([1], False, False),
])
def test_an_integer_or_a_number_is_never_a_bool(value: object, integer: bool, number: bool) -> None:
    """YAML's and JSON's true is a bool, which Python counts as the int 1."""
    assert is_integer(value) is integer
    assert is_number(value) is number


@pytest.mark.parametrize("value, expected", [(1.5, True), (10**400, False), (float("inf"), False),
                                             (float("nan"), False), (np.float32("nan"), False), (7, True)])
def test_finite_takes_ints_too_large_for_a_float_as_not_finite(value: object, expected: bool) -> None:
    assert finite(value) is expected


def test_the_cli_s_client_loads_no_yaml() -> None:
    """parlschedctl's client imports the protocol, which checks fields with kinds.py:
    yaml (a config's reader) would be 10 ms more on every command."""
    code = "import sys, parlschedctl.client; print(sorted(m for m in sys.modules if m.split('.')[0] == 'yaml'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
