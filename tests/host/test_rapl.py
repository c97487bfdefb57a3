"""RAPL zones and their counters on fake powercap trees (this machine has no RAPL
readable in its VM; the tree's files are written as the kernel's are)."""

from __future__ import annotations

from pathlib import Path

import os
import threading
import time

import numpy as np
import pytest

from parlschedd.host.rapl import (MAX_POLL_S, MIN_POLL_S, RaplCounter, Zone, energy_wh, moved_uj, poll_interval_s,
                                  package_zones, rapl_zones)


def fake_powercap(root, zones):
    """zones: name -> (energy_uj, max_range_uj)."""
    for name, (uj, top) in zones.items():
        d = root / name
        d.mkdir(parents=True)
        (d / "energy_uj").write_text(f"{uj}\n")
        (d / "max_energy_range_uj").write_text(f"{top}\n")
    return root


def test_only_package_zones_are_read(tmp_path):
    root = fake_powercap(tmp_path, {"intel-rapl:0": (5, 100), "intel-rapl:0:0": (1, 100), "intel-rapl:1": (7, 100)})
    (tmp_path / "intel-rapl:2").mkdir()  # no counter files: skipped, and said why
    zones, unread = package_zones(root)
    assert [z.energy.parent.name for z in zones] == ["intel-rapl:0", "intel-rapl:1"] and zones == rapl_zones(root)
    assert unread == {"intel-rapl:2": "No such file or directory"}


def test_the_platform_zone_is_not_a_package_and_zone_numbers_are_hex(tmp_path):
    """psys, a top-level zone on laptops and recent servers, covers the packages: summed
    with them it counted their energy twice; and intel-rapl:a (the kernel names zones
    in hex) was not read."""
    root = fake_powercap(tmp_path, {"intel-rapl:0": (5, 100), "intel-rapl:1": (6, 100), "intel-rapl:a": (7, 100)})
    for name, zone in [("package-0", "intel-rapl:0"), ("psys", "intel-rapl:1"), ("package-10", "intel-rapl:a")]:
        (root / zone / "name").write_text(f"{name}\n")
    assert [z.energy.parent.name for z in rapl_zones(root)] == ["intel-rapl:0", "intel-rapl:a"]


def test_absent_powercap_means_no_zones(tmp_path):
    assert rapl_zones(tmp_path / "none") == ()
    assert np.isnan(energy_wh((), moved_uj((), [], [])))


def test_counter_wrap_around(tmp_path):
    zones = rapl_zones(fake_powercap(tmp_path, {"intel-rapl:0": (0, 1_000_000)}))
    assert energy_wh(zones, moved_uj(zones, [900_000], [100_000])) == pytest.approx(200_000 / 3.6e9)


def test_a_counter_that_did_not_move_measured_nothing(tmp_path):
    """It gave 0 Wh, which a fit then refused (must be positive)."""
    zones = rapl_zones(fake_powercap(tmp_path, {"intel-rapl:0": (0, 1_000_000), "intel-rapl:1": (0, 1_000_000)}))
    wh = lambda before, after: energy_wh(zones, moved_uj(zones, before, after))  # noqa: E731
    assert np.isnan(wh([5, 7], [5, 7])) and np.isnan(wh([5, 7], [9, 7]))
    assert wh([5, 7], [9, 8]) == pytest.approx(5 / 3.6e9)


def test_the_poll_interval_lets_no_counter_wrap_between_two_reads():
    """At most MAX_POLL_S, and within it short enough that the smallest range is not
    crossed at a power no package draws."""
    zone = Zone(Path("energy_uj"), 262_143_328_850)  # a real package's range, 262 kJ
    assert poll_interval_s([zone]) == MAX_POLL_S
    small = Zone(Path("energy_uj"), 5_000_000_000)  # 5 kJ
    assert poll_interval_s([zone, small]) < 5_000 / 1_000  # under the time 1 kW takes to cross it
    assert poll_interval_s([Zone(Path("energy_uj"), 1)]) == MIN_POLL_S
    assert poll_interval_s([]) is None  # nothing to read


def test_a_counter_polled_during_a_block_is_counted_whole_through_many_wraps(tmp_path):
    """RaplCounter reads on entry, every poll_interval_s from a thread, and on exit: a
    zone of a 1 J range moved by 4.5 J during the block (wrapping four times) counts
    4.5 J, where reads before and after alone saw 0.5 J. The kernel's counter is played
    by a thread writing the fake tree's file, each value replacing the file whole."""
    zones = rapl_zones(fake_powercap(tmp_path, {"intel-rapl:0": (0, 1_000_000)}))
    counter = zones[0].energy

    def burn() -> None:
        for _ in range(10):
            value = (int(counter.read_text()) + 450_000) % 1_000_000
            (tmp := counter.with_suffix(".new")).write_text(str(value))
            os.replace(tmp, counter)
            time.sleep(0.1)

    with RaplCounter(zones) as energy:
        writer = threading.Thread(target=burn)
        writer.start()
        writer.join()
    assert energy.wh == pytest.approx(4_500_000 / 3.6e9)



@pytest.mark.parametrize("fault", ["removed", "not a number"])
def test_a_zone_that_fails_while_polled_ends_the_counting_and_says_why(tmp_path, fault):
    """The poll thread's failed read was raised at the block's end, out of a run whose
    time was good: the energy is NaN now, the block ends as it would, and ``error``
    says why. The poll stops at the failure (a fake range of 10 uJ polls every 10 ms)."""
    zones = rapl_zones(fake_powercap(tmp_path, {"intel-rapl:0": (0, 10)}))
    counter = zones[0].energy
    with RaplCounter(zones) as energy:
        assert energy._thread is not None
        counter.unlink() if fault == "removed" else counter.write_text("x\n")
        energy._thread.join(timeout=5)
        assert not energy._thread.is_alive()
    assert np.isnan(energy.wh)
    assert energy.error == (f"{counter}: No such file or directory" if fault == "removed"
                            else "an energy_uj that is not a number of microjoules")
