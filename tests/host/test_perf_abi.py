"""The perf ABI as bytes: attr layout and group-read parsing.

Nothing here needs a PMU: these are the parts of the hardware-counter path that can be
checked on a machine without one (this one), against include/uapi/linux/perf_event.h.
"""

from __future__ import annotations

import ctypes
import math
import struct

import pytest

from parlschedd.host import perf
from parlschedd.host.errors import Unsupported
from parlschedd.host.perf import (
    GROUP_READ_FORMAT,
    PERF_FORMAT_GROUP,
    PERF_FORMAT_ID,
    PERF_FORMAT_TOTAL_TIME_ENABLED,
    PERF_FORMAT_TOTAL_TIME_RUNNING,
    GroupRead,
    PerfEventAttr,
    group_read_size,
    make_attr,
    parse_group_read,
    scaled_count,
)

UAPI_OFFSETS = {
    "type": 0,
    "size": 4,
    "config": 8,
    "sample_period": 16,
    "sample_type": 24,
    "read_format": 32,
    "wakeup_events": 48,
    "bp_type": 52,
    "config1": 56,
    "config2": 64,
    "branch_sample_type": 72,
    "sample_regs_user": 80,
    "sample_stack_user": 88,
    "clockid": 92,
    "sample_regs_intr": 96,
    "aux_watermark": 104,
    "sample_max_stack": 108,
    "aux_sample_size": 112,
}


def test_size_is_ver6_and_matches_attr_size() -> None:
    attr = make_attr(perf.TASK_CLOCK, leader=True)
    assert ctypes.sizeof(PerfEventAttr) == perf.PERF_ATTR_SIZE_VER6 == 120
    assert attr.size == ctypes.sizeof(attr)


@pytest.mark.parametrize(("name", "offset"), UAPI_OFFSETS.items())
def test_field_offsets(name: str, offset: int) -> None:
    assert getattr(PerfEventAttr, name).offset == offset


@pytest.mark.parametrize(
    ("flag", "bit"),
    [("disabled", 0), ("inherit", 1), ("pinned", 2), ("exclusive", 3), ("exclude_user", 4),
     ("exclude_kernel", 5), ("exclude_hv", 6), ("exclude_idle", 7)],
)
def test_flag_bits_in_the_u64_at_offset_40(flag: str, bit: int) -> None:
    attr = PerfEventAttr()
    setattr(attr, flag, 1)
    raw = bytes(attr)
    (word,) = struct.unpack_from("=Q", raw, 40)
    assert word == 1 << bit
    assert raw[:40] == bytes(40) and raw[48:] == bytes(72)


def test_leader_and_member_attrs() -> None:
    leader = make_attr(perf.INSTRUCTIONS, leader=True)
    member = make_attr(perf.TASK_CLOCK, leader=False)
    assert (leader.type, leader.config) == (perf.PERF_TYPE_HARDWARE, perf.PERF_COUNT_HW_INSTRUCTIONS)
    assert (member.type, member.config) == (perf.PERF_TYPE_SOFTWARE, perf.PERF_COUNT_SW_TASK_CLOCK)
    assert leader.disabled == 1 and member.disabled == 0
    for attr in (leader, member):
        assert attr.inherit == 0 and attr.exclude_kernel == 0 and attr.exclude_user == 0
        assert attr.exclude_hv == 1
        assert attr.read_format == GROUP_READ_FORMAT
        assert attr.sample_period == 0 and attr.sample_type == 0


def test_syscall_numbers() -> None:
    assert perf.syscall_number("x86_64") == 298
    assert perf.syscall_number("aarch64") == 241
    with pytest.raises(Unsupported):
        perf.syscall_number("riscv64")
    with pytest.raises(Unsupported, match="32-bit"):  # an armhf userland on an arm64 kernel: 241 is sched_setaffinity
        perf.syscall_number("aarch64", pointer_bytes=4)


def _words(*values: int) -> bytes:
    return struct.pack(f"={len(values)}Q", *values)


def test_group_read_is_raw() -> None:
    data = _words(2, 4000, 1000, 300, 10)
    assert parse_group_read(data, 2) == GroupRead(4000, 1000, (300, 10))
    assert group_read_size(2) == len(data)


def test_group_read_with_ids() -> None:
    fmt = GROUP_READ_FORMAT | PERF_FORMAT_ID
    data = _words(2, 10, 5, 100, 71, 200, 72)
    assert group_read_size(2, fmt) == len(data)
    assert parse_group_read(data, 2, fmt) == GroupRead(10, 5, (100, 200))


def test_group_read_without_times() -> None:
    assert parse_group_read(_words(2, 3, 4), 2, PERF_FORMAT_GROUP) == GroupRead(None, None, (3, 4))
    fmt = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED
    assert parse_group_read(_words(1, 99, 3), 1, fmt) == GroupRead(99, None, (3,))
    fmt = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_RUNNING
    assert parse_group_read(_words(1, 99, 3), 1, fmt) == GroupRead(None, 99, (3,))


def test_a_count_always_on_the_pmu_is_the_raw_count() -> None:
    state = [0, 0, 0, 0.0]
    assert scaled_count(state, 1000, 1000, 5_000_000) == 5_000_000
    assert scaled_count(state, 3000, 3000, 7_000_000) == 7_000_000


def test_each_interval_is_scaled_by_its_own_times() -> None:
    """The PMU multiplexed the counter a tenth of the time, then all the time: the
    second interval counted 1e8 in full. Scaling the cumulative count by the
    cumulative times made it 1e9 * 10 = 1e10, then 1.1e9 * 11000 / 2000 = 6.05e9: a
    difference of -3.95e9."""
    state = [0, 0, 0, 0.0]
    first = scaled_count(state, 10_000, 1_000, 1_000_000_000)
    assert first == 10_000_000_000  # 1e9 counted in a tenth of the time
    second = scaled_count(state, 11_000, 2_000, 1_100_000_000)
    assert second - first == 100_000_000


def test_an_interval_enabled_but_never_on_the_pmu_is_unknown() -> None:
    state = [0, 0, 0, 0.0]
    assert scaled_count(state, 1000, 1000, 500) == 500
    assert scaled_count(state, 1000, 1000, 500) == 500  # did not run: nothing moved, nothing unknown
    assert math.isnan(scaled_count(state, 2000, 1000, 500))  # ran, not counted
    assert math.isnan(scaled_count(state, 2000, 1000, 500)), "still unknown since the last count"
    assert scaled_count(state, 4000, 2000, 600) == 500 + 100 * 3000 / 1000  # the lost interval scaled in too


def test_the_next_count_makes_up_for_an_interval_never_on_the_pmu() -> None:
    """1 instruction per ns over three 1 s periods, on the PMU all, none, then half of
    the time: the counts are 1e9, 2e9, 3e9. Going on from the unknown interval scaled
    the third by its own times only (2e9, for good); the daemon's rate over the two
    periods since the last count was then half the truth."""
    state = [0, 0, 0, 0.0]
    counts = [scaled_count(state, 1_000_000_000 * k, running, running)
              for k, running in ((1, 1_000_000_000), (2, 1_000_000_000), (3, 1_500_000_000))]
    assert counts[0] == 1e9 and math.isnan(counts[1]) and counts[2] == 3e9


@pytest.mark.parametrize(
    ("data", "n", "fmt"),
    [
        (_words(3, 1, 1, 1, 1), 2, GROUP_READ_FORMAT),  # wrong nr
        (_words(2, 1, 1, 1), 2, GROUP_READ_FORMAT),  # short
        (_words(1, 1, 1), 1, PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING),  # not a group
    ],
)
def test_group_read_rejects(data: bytes, n: int, fmt: int) -> None:
    with pytest.raises(ValueError):
        parse_group_read(data, n, fmt)
