"""Running a real command per configuration, energy from a fake powercap tree."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from parlschedd.energy.measure import (MAX_POLL_S, MIN_POLL_S, MeasureError, Zone, command_for, energy_wh, measure, moved_uj,
                                       poll_interval_s, rapl_zones, run_once)

SLEEP = [sys.executable, "-c", "import sys, time; time.sleep(0.01 * int(sys.argv[1]))", "{nsp}"]


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
    (tmp_path / "intel-rapl:2").mkdir()  # no counter files: skipped
    zones = rapl_zones(root)
    assert [z.energy.parent.name for z in zones] == ["intel-rapl:0", "intel-rapl:1"]


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


def test_run_a_real_command_with_energy(tmp_path):
    zones = rapl_zones(fake_powercap(tmp_path, {"intel-rapl:0": (3_600_000, 10**12)}))
    bump = [sys.executable, "-c",
            f"p = {str(zones[0].energy)!r}; v = int(open(p).read()); open(p, 'w').write(str(v + 7_200_000))"]
    seconds, wh = run_once(bump, 1, zones)
    assert seconds > 0 and wh == pytest.approx(0.002)


def test_measure_times_each_configuration():
    times, energies = (np.array(a) for a in zip(*measure(SLEEP, [1, 20], repeat=2)))
    assert times.shape == (2, 2) and np.all(np.isnan(energies))
    assert times[1].min() > 0.2 > times[0].max() - 0.1  # 0.2 s sleep vs 0.01 s


def test_failures_are_reported():
    assert command_for(["run", "--n={nsp}", "x"], 4) == ["run", "--n=4", "x"]
    with pytest.raises(MeasureError, match="exited 3"):
        run_once([sys.executable, "-c", "raise SystemExit(3)"], 1, ())
    with pytest.raises(MeasureError, match="cannot start"):
        run_once(["/nonexistent/tool"], 1, ())


def stepper(counter, step_uj: int, steps: int, pause_s: float) -> list[str]:
    """A command that adds ``step_uj`` to a fake counter ``steps`` times, ``pause_s``
    apart, wrapping it at its range as RAPL does; each write replaces the file whole, so
    that a read in between never sees it empty."""
    top = int((counter.parent / "max_energy_range_uj").read_text())
    code = (f"import os, time\np = {str(counter)!r}\nfor _ in range({steps}):\n"
            f"    v = (int(open(p).read()) + {step_uj}) % {top}\n"
            "    open(p + '.new', 'w').write(str(v)); os.replace(p + '.new', p)\n"
            f"    time.sleep({pause_s})\n")
    return [sys.executable, "-c", code]


def test_a_counter_that_wraps_many_times_during_a_run_is_counted_whole(tmp_path):
    """Read only before and after, 4.5 ranges came out as 0.5 of one: (b - a) % range
    unwraps once at most, and a package's 262 kJ range wraps every half hour at 150 W."""
    root = fake_powercap(tmp_path, {"intel-rapl:0": (0, 1_000_000), "intel-rapl:1": (10, 10**12)})
    zones = rapl_zones(root)
    bump_other = f"p = {str(zones[1].energy)!r}; open(p, 'w').write('20')"  # the other zone moves, by 10 uJ
    command = stepper(zones[0].energy, 450_000, 10, 0.1)
    command[2] += f"\n{bump_other}\n"
    seconds, wh = run_once(command, 1, zones)
    assert seconds > 0.9 and wh == pytest.approx((4_500_000 + 10) / 3.6e9)


def test_the_poll_interval_lets_no_counter_wrap_between_two_reads():
    """At most MAX_POLL_S, and within it short enough that the smallest range is not
    crossed at a power no package draws."""
    zone = Zone(Path("energy_uj"), 262_143_328_850)  # a real package's range, 262 kJ
    assert poll_interval_s([zone]) == MAX_POLL_S
    small = Zone(Path("energy_uj"), 5_000_000_000)  # 5 kJ
    assert poll_interval_s([zone, small]) < 5_000 / 1_000  # under the time 1 kW takes to cross it
    assert poll_interval_s([Zone(Path("energy_uj"), 1)]) == MIN_POLL_S
    assert poll_interval_s([]) is None  # nothing to read
