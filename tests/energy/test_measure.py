"""Running a real command per configuration, energy from a fake powercap tree."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from parlschedd.energy.measure import MeasureError, command_for, consumed_wh, measure, rapl_zones, run_once

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
    assert np.isnan(consumed_wh((), [], []))


def test_counter_wrap_around(tmp_path):
    zones = rapl_zones(fake_powercap(tmp_path, {"intel-rapl:0": (0, 1_000_000)}))
    assert consumed_wh(zones, [900_000], [100_000]) == pytest.approx(200_000 / 3.6e9)


def test_a_counter_that_did_not_move_measured_nothing(tmp_path):
    """It gave 0 Wh, which a fit then refused (must be positive)."""
    zones = rapl_zones(fake_powercap(tmp_path, {"intel-rapl:0": (0, 1_000_000), "intel-rapl:1": (0, 1_000_000)}))
    assert np.isnan(consumed_wh(zones, [5, 7], [5, 7])) and np.isnan(consumed_wh(zones, [5, 7], [9, 7]))
    assert consumed_wh(zones, [5, 7], [9, 8]) == pytest.approx(5 / 3.6e9)


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
