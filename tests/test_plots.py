"""parlschedd/plots.py: what the figure counts as a placement change, on a history
written by hand (the daemon's history format: cpu -1 is a free thread)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from parlschedd.host.base import CounterSource
from parlschedd.plots import LEGEND_THREADS, draw_history, placement_changes, plot_history
from parlschedd.units import UNITS, unit_of
from parlschedctl.render import status_table
from tests.conftest import NOBODY, in_child_as


def _sample(t: float, tids: list[int], cpu: list[int], domain: list[int]) -> dict:
    return {"t": t, "tids": tids, "cpu": cpu, "domain": domain, "utility": [0.5e9] * len(tids)}


SAMPLES = [
    _sample(0.1, [10, 11], [-1, -1], [0, 0]),
    _sample(0.2, [10, 11], [0, -1], [0, 0]),          # 10 pinned from free
    _sample(0.3, [10, 11, 12], [1, -1, 0], [0, 0, 0]),  # 10 moved 0 -> 1; 12 joined
    _sample(0.4, [10, 12], [-1, 0], [0, 1]),          # 10 freed; 11 left; 12 changed domain
]


def test_pins_and_frees_are_placement_changes_and_joins_and_leaves_are_not() -> None:
    moves, domain_moved = placement_changes(SAMPLES)
    assert moves.tolist() == [1, 1, 1]
    assert domain_moved.tolist() == [False, False, True]


def test_the_figure_is_written(tmp_path: Path) -> None:
    out = plot_history({"name": "hand", "pid": 1, "period_s": 0.1, "counter_source": "perf:task-clock",
                        "samples": SAMPLES}, tmp_path / "run.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_figure_is_written_where_asked_in_the_format_its_suffix_names(tmp_path: Path) -> None:
    """Without a suffix matplotlib wrote ``run.png`` while the CLI said it wrote ``run``."""
    history = {"name": "hand", "pid": 1, "period_s": 0.1, "counter_source": "perf:task-clock", "samples": SAMPLES}
    bare = plot_history(history, tmp_path / "run")
    assert bare == tmp_path / "run" and bare.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert plot_history(history, tmp_path / "run.svg").read_text().lstrip().startswith("<?xml")


def test_a_figure_is_written_to_a_file_that_may_be_written_but_not_read(open_dir) -> None:
    """PIL opened a PNG given by name for reading too ("w+b"): PermissionError. Run as
    nobody, since root reads every file."""
    history = {"name": "hand", "pid": 1, "period_s": 0.1, "counter_source": "perf:task-clock", "samples": SAMPLES}
    plot_history(history, Path("/dev/null"))  # matplotlib's lazy imports, before the child cannot read them
    open_dir.chmod(0o777)  # the figure replaces the file through a temporary one beside it
    out = open_dir / "run.png"
    out.write_text("")
    out.chmod(0o222)

    def plot() -> str:
        try:
            plot_history(history, out)
        except OSError as exc:
            return str(exc)
        return "written"

    assert in_child_as(NOBODY, plot) == "written"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _many_threads(n: int, **head) -> dict:
    tids = list(range(100, 100 + n))
    return {"name": "hand", "pid": 1, "period_s": 0.1, "counter_source": "perf:task-clock", **head,
            "samples": [_sample(0.1 * k, tids, [-1] * n, [0] * n) for k in range(1, 4)]}


def _legend_and_title(history: dict) -> tuple[list[str], str]:
    fig = draw_history(history)
    try:
        ax = fig.axes[0]
        return [t.get_text() for t in ax.get_legend().get_texts()], ax.get_title()
    finally:
        plt.close(fig)


def test_the_thread_lines_are_labelled_the_first_few_by_tid_and_the_rest_counted() -> None:
    """Each thread's line was drawn without a label: which thread is which could not be told."""
    n = LEGEND_THREADS + 4
    labels, _ = _legend_and_title(_many_threads(n))
    assert labels == ([f"tid {100 + i}" for i in range(LEGEND_THREADS)]
                      + ["and 4 more threads", "whole target (mean per thread)"])
    labels, _ = _legend_and_title(_many_threads(2))
    assert labels == ["tid 100", "tid 101", "whole target (mean per thread)"]
    labels, _ = _legend_and_title(_many_threads(LEGEND_THREADS + 1))
    assert labels[-2] == "and 1 more thread"
    fig = draw_history(_many_threads(n))
    colours = [line.get_color() for line in fig.axes[0].get_lines()[:n]]  # the threads' lines, in tid order
    plt.close(fig)
    assert "silver" not in colours[:LEGEND_THREADS] and colours[LEGEND_THREADS:] == ["silver"] * 4  # not the named ones'


def test_a_figure_of_an_observe_mode_target_says_so_in_its_title() -> None:
    """A figure of `run --observe` looked like one of a pinned run: its placement
    changes are the kernel's, not parlschedd's."""
    _, title = _legend_and_title(_many_threads(2, observe=True))
    assert "observe mode" in title
    _, title = _legend_and_title(_many_threads(2, observe=False))
    assert "observe" not in title
    _, title = _legend_and_title(_many_threads(2))  # a daemon that does not say: not claimed either way
    assert "observe" not in title


def test_the_figure_and_status_read_one_units_table_with_every_counter_source() -> None:
    """The units were two tables, plots.py's UNITS and render.py's UTILITY_UNITS, each
    to be kept in step with CounterSource by hand: one now, parlschedd/units.py."""
    assert set(UNITS) == {source.value for source in CounterSource}
    for source in [*CounterSource, "no-such-source"]:
        unit = unit_of(source)
        history = _many_threads(2, counter_source=source)
        fig = draw_history(history)
        try:
            assert fig.axes[0].get_ylabel() == f"running average speed\n{unit.axis}"
            assert max(fig.axes[0].get_lines()[0].get_ydata()) == 0.5e9 / unit.scale
        finally:
            plt.close(fig)
        daemon = {"version": "x", "pid": 1, "uptime_s": 1.0, "counter_source": str(source), "period_s": 0.1,
                  "domain_period_s": 4.0, "loop": {"mean_ms": 0.5, "max_ms": 1.0}, "domains": [[0, 1]], "cpus": [0, 1]}
        assert f"utility in {unit.per_second};" in status_table({"daemon": daemon, "targets": []})
