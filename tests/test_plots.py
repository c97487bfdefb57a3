"""parlschedd/plots.py: what the figure counts as a placement change, on a history
written by hand (the daemon's history format: cpu -1 is a free thread)."""

from __future__ import annotations

from pathlib import Path

from parlschedd.plots import placement_changes, plot_history
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
