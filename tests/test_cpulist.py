"""The kernel CPU list format."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parlschedd.cpulist import format_cpulist, parse_cpulist


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8,10-11\n", {0, 1, 2, 3, 8, 10, 11}),
        ("5", {5}),
        ("", set()),
        ("\n", set()),
        (" 0 - 1 , 4 ", {0, 1, 4}),
        ("2-2", {2}),
        ("65535", {65535}),  # the last CPU number taken (MAX_CPUS)
        ("00000001", {1}),  # leading zeros: was "above any CPU", by the length of its text
        ("0" * 5000 + "1-02", {1, 2}),  # int() alone refuses 4300 digits
    ],
)
def test_parse(text: str, cpus: set[int]) -> None:
    assert parse_cpulist(text) == frozenset(cpus)


@pytest.mark.parametrize("text", ["3-1", "a", "1,,2", "-1", "0-", "0-7:2/4", "١", "0-999999999999", "65536", "0065536"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpulist(text)


def test_the_stride_form_is_named():
    """The kernel's write-only form ``a-b:u/g`` was "bad CPU number '15:2'"."""
    with pytest.raises(ValueError, match="the stride form '0-15:2' in '0-15:2' is not read here; name the CPUs"):
        parse_cpulist("0-15:2")


def test_a_refusal_says_the_number_not_its_zeros_and_is_clipped():
    """'0000000000000000000070000' was said as '000000000000'; a stride token of 10 KB
    made a line of 10 KB."""
    with pytest.raises(ValueError) as e:
        parse_cpulist("0" * 20 + "70000")
    assert str(e.value).startswith("CPU number '70000' in CPU list '00000000000000000000")
    with pytest.raises(ValueError) as e:
        parse_cpulist("0-1:" + "2" * 10000)
    assert len(str(e.value)) < 200


def test_format_like_the_kernel() -> None:
    assert format_cpulist([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    assert format_cpulist([]) == ""
    assert format_cpulist({4}) == "4"


@given(st.frozensets(st.integers(min_value=0, max_value=300)))
def test_round_trip(cpus: frozenset[int]) -> None:
    assert parse_cpulist(format_cpulist(cpus)) == cpus
