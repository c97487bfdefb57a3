"""Running a real command per configuration, energy from a fake powercap tree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from parlschedd.energy.measure import MeasureError, command_for, measure, run_once
from parlschedd.host.rapl import rapl_zones
from tests.host.test_rapl import fake_powercap

SLEEP = [sys.executable, "-c", "import sys, time; time.sleep(0.01 * int(sys.argv[1]))", "{nsp}"]


def test_run_a_real_command_with_energy(tmp_path):
    zones = rapl_zones(fake_powercap(tmp_path, {"intel-rapl:0": (3_600_000, 10**12)}))
    bump = [sys.executable, "-c",
            f"p = {str(zones[0].energy)!r}; v = int(open(p).read()); open(p, 'w').write(str(v + 7_200_000))"]
    seconds, wh, error = run_once(bump, 1, zones)
    assert seconds > 0 and wh == pytest.approx(0.002) and error is None


def test_measure_times_each_configuration():
    times, energies = (np.array(a) for a in zip(*measure(SLEEP, [1, 100], repeat=2)))
    assert times.shape == (2, 2) and np.all(np.isnan(energies))
    # a 1 s sleep against 0.01 s, each behind an interpreter's start (0.36 to 0.67 s seen
    # on a loaded VM: a gap of 0.2 s was within that spread)
    assert times[1].min() > 1.0 and times[0].min() < times[1].min()


def test_failures_are_reported():
    assert command_for(["run", "--n={nsp}", "x"], 4) == ["run", "--n=4", "x"]
    with pytest.raises(MeasureError, match="exited 3"):
        run_once([sys.executable, "-c", "raise SystemExit(3)"], 1, ())
    with pytest.raises(MeasureError, match="cannot start"):
        run_once(["/nonexistent/tool"], 1, ())
    # "exited -9" before, and no word of the run
    with pytest.raises(MeasureError, match=r"was killed by SIGKILL \(nsp=2, run 3\)"):
        run_once([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], 2, (), 3)


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
    # the other zone moves, by 10 uJ, its file replaced whole (a write in place showed a poll an empty file)
    bump_other = f"import os; p = {str(zones[1].energy)!r}; open(p + '.new', 'w').write('20'); os.replace(p + '.new', p)"
    command = stepper(zones[0].energy, 450_000, 10, 0.1)
    command[2] += f"\n{bump_other}\n"
    seconds, wh, _ = run_once(command, 1, zones)
    assert seconds > 0.9 and wh == pytest.approx((4_500_000 + 10) / 3.6e9)


def test_a_zone_that_cannot_be_read_during_a_run_leaves_its_energy_empty_and_its_time(tmp_path):
    """A zone gone during a run (its driver unloaded) raised out of the run: the run's
    time was lost with the energy, and the whole measurement stopped. The time is
    kept, the energy is NaN, and why is said."""
    zones = rapl_zones(fake_powercap(tmp_path, {"intel-rapl:0": (5, 10**12)}))
    gone = [sys.executable, "-c", f"import os, time; time.sleep(0.2); os.unlink({str(zones[0].energy)!r})"]
    seconds, wh, error = run_once(gone, 1, zones)
    assert seconds >= 0.2 and np.isnan(wh)
    assert error == f"{zones[0].energy}: No such file or directory"
    seconds, wh, error = run_once(SLEEP, 1, zones)  # gone before the run
    assert seconds > 0 and np.isnan(wh) and error == f"{zones[0].energy}: No such file or directory"


def test_an_interrupt_as_the_command_starts_ends_it_too(monkeypatch):
    """Ctrl-C landing inside Popen, after the fork, was raised there: the command ran on
    with no one to end it (a test's pipes held open a minute). Such a moment cannot be
    hit on demand, so Popen here sends the interrupt itself as it returns."""
    started = []

    def interrupted_as_it_returns(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        started.append(proc.pid)
        os.kill(os.getpid(), signal.SIGINT)
        return proc

    real_popen = subprocess.Popen
    monkeypatch.setattr(subprocess, "Popen", interrupted_as_it_returns)
    with pytest.raises(KeyboardInterrupt):
        run_once(["sleep", "60"], 1, ())
    monkeypatch.undo()
    assert not os.path.exists(f"/proc/{started[0]}") or open(f"/proc/{started[0]}/stat").read().split()[2] == "Z"
