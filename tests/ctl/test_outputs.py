"""parlschedctl/outputs.py: the checks of a file the CLI is to write (--out, --plot)
made before the work that fills it, --out's refusal of ``-``, a figure's suffix as a
usage error, and a write that fails named with its file.

Real files in tmp_path. The refusals a user without root's access gets are made in a
child process that keeps uid 0 but drops every capability (setpriv), so that files
root owns in tmp_path (0700, as pytest makes it) are still reachable, while root's
override of their modes is gone.
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest

from parlschedctl.outputs import (FILE, OUT_FILE, CannotWrite, check_figure, check_writable, figure_suffix,
                                  print_json, writing)

REPO = Path(__file__).resolve().parents[2]
needs_setpriv = pytest.mark.skipif(shutil.which("setpriv") is None or os.geteuid() != 0,
                                   reason="needs root and setpriv(1) to drop capabilities")


def without_capabilities(code: str) -> str:
    """What ``code`` (Python) prints when run as uid 0 with no capability at all: the
    modes of root's own files then bind it as they bind their owner."""
    r = subprocess.run(["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--", sys.executable, "-c",
                        textwrap.dedent(code)], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def refusal(path: Path | str) -> str:
    with pytest.raises(CannotWrite) as e:
        check_writable(path)
    return str(e.value)


def test_a_file_that_can_be_written_passes_whether_it_exists_or_not(tmp_path):
    """A new file in a directory that is there, and a file that is there, pass; nothing
    is made by the check."""
    check_writable(tmp_path / "new.png")
    assert not (tmp_path / "new.png").exists()
    (tmp_path / "old.png").write_text("x")
    check_writable(str(tmp_path / "old.png"))


def test_what_cannot_be_written_is_named_with_why(tmp_path):
    """A directory, a path in no directory, and one under a file, each named as given
    with its own reason: ``PATH: cannot write: REASON``."""
    assert refusal(tmp_path) == f"{tmp_path}: cannot write: is a directory"
    assert refusal(tmp_path / "nodir" / "x.png") == f"{tmp_path / 'nodir' / 'x.png'}: cannot write: no directory " \
                                                     f"{tmp_path / 'nodir'}"
    (tmp_path / "file").write_text("")
    assert refusal(tmp_path / "file" / "x.png") == f"{tmp_path / 'file' / 'x.png'}: cannot write: {tmp_path / 'file'} " \
                                                   "is not a directory"
    assert issubclass(CannotWrite, ValueError)  # --json's io_error, as an input that cannot be read


@pytest.mark.skipif(os.geteuid() != 0, reason="root passes access(2) on /sys; others are refused by it already")
def test_a_directory_that_access_passes_but_takes_no_file_is_refused_before_the_work(tmp_path):
    """Root passes access(2) on /sys, where no file can be made: fit --out /sys/p.json
    fitted for minutes, then failed to write. A file is made there and removed, as the
    write will make one beside the file; nothing is left where it passes."""
    assert refusal("/sys/p.json") == "/sys/p.json: cannot write: permission denied"
    check_writable(tmp_path / "p.json")
    (tmp_path / "old.json").write_text("{}")
    check_writable(tmp_path / "old.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json"]
    check_writable("/dev/null")  # a device is written as open(2) would, not replaced: nothing made beside it


@needs_setpriv
def test_a_file_or_directory_its_user_may_not_write_is_permission_denied(tmp_path):
    """Without root's override: a directory of mode 0500 refuses a new file in it, a
    file of mode 0400 refuses to be written again, both "permission denied"; a file of
    mode 0600 in a directory of 0700 passes."""
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "kept.png").write_text("")
    (tmp_path / "mine.png").write_text("")
    (tmp_path / "locked.png").write_text("")
    (tmp_path / "locked.png").chmod(0o400)
    ro.chmod(0o500)
    said = without_capabilities(f"""
        import json
        from parlschedctl.outputs import CannotWrite, check_writable
        said = []
        for path in ({str(ro / 'new.png')!r}, {str(tmp_path / 'locked.png')!r}, {str(tmp_path / 'mine.png')!r}):
            try:
                check_writable(path)
                said.append("ok")
            except CannotWrite as exc:
                said.append(str(exc))
        print(json.dumps(said))
    """)
    assert json.loads(said) == [f"{ro / 'new.png'}: cannot write: permission denied",
                                f"{tmp_path / 'locked.png'}: cannot write: permission denied", "ok"]


@needs_setpriv
def test_a_path_under_a_directory_its_user_may_not_enter_is_refused_not_raised(tmp_path):
    """A path under a directory of mode 0 (root's /root, another user's 0700 home): its
    stat fails with EACCES inside the check, which says "permission denied" rather than
    raising PermissionError."""
    shut = tmp_path / "shut"
    shut.mkdir()
    shut.chmod(0)
    said = without_capabilities(f"""
        from parlschedctl.outputs import CannotWrite, check_writable
        try:
            check_writable({str(shut / 'x.png')!r})
        except CannotWrite as exc:
            print("refused:", exc)
    """)
    assert said == f"refused: {shut / 'x.png'}: cannot write: permission denied"


def test_a_figure_is_checked_for_its_path_first_then_for_its_suffix(tmp_path):
    """check_figure: a figure in no directory is CannotWrite whatever its suffix; one
    that can be written with a suffix naming no format is the suffix's ValueError; a
    known suffix, or none (a PNG), passes."""
    with pytest.raises(CannotWrite, match="no directory"):
        check_figure(tmp_path / "nodir" / "x.foo")
    with pytest.raises(ValueError, match=r"cannot write a \.foo figure; use one of .*\.png") as e:
        check_figure(tmp_path / "x.foo")
    assert not isinstance(e.value, CannotWrite)
    check_figure(tmp_path / "x.svg")
    check_figure(tmp_path / "figure")


def test_a_figure_options_suffix_is_a_usage_error_naming_the_option(tmp_path):
    """figure_suffix, the click callback of run --plot and plot --out: a suffix naming
    no format is click's BadParameter (exit 2, the option named); a good one, and no
    option at all, come back as given."""
    option = click.Option(["--plot"])
    ctx = click.Context(click.Command("run"))
    with pytest.raises(click.BadParameter) as e:
        figure_suffix(ctx, option, str(tmp_path / "x.xyz"))
    assert e.value.param is option and "cannot write a .xyz figure" in e.value.format_message()
    assert figure_suffix(ctx, option, str(tmp_path / "x.pdf")) == str(tmp_path / "x.pdf")
    assert figure_suffix(ctx, option, None) is None


def test_out_refuses_dash_and_a_directory_and_takes_a_path(tmp_path):
    """OUT_FILE: ``-`` is a usage error saying to give a path (a reader takes it for
    stdout); a directory is click's usage error; any other path is taken as given, even
    one in no directory (check_writable says that one, in a line)."""
    option = click.Option(["--out"], type=OUT_FILE)
    ctx = click.Context(click.Command("plot"))
    with pytest.raises(click.BadParameter, match="'-' is not a file here: give a path"):
        OUT_FILE.convert("-", option, ctx)
    with pytest.raises(click.BadParameter, match="an empty path: give a file"):  # --out "$OUT", OUT unset
        OUT_FILE.convert("", option, ctx)
    with pytest.raises(click.BadParameter, match="is a directory"):
        OUT_FILE.convert(str(tmp_path), option, ctx)
    assert OUT_FILE.convert(str(tmp_path / "nodir" / "x.png"), option, ctx) == str(tmp_path / "nodir" / "x.png")
    assert FILE.convert("-", None, None) == "-", "an input may be stdin"
    with pytest.raises(click.BadParameter, match="an empty path: give a file"):  # config check "$CFG", CFG unset
        FILE.convert("", None, None)


@needs_setpriv
def test_a_file_option_does_not_check_that_its_file_can_be_read(tmp_path):
    """FILE (readable=False): a file its user may not read is passed on, for the loader
    to name (exit 1), not refused by click as a usage error (exit 2)."""
    secret = tmp_path / "secret.csv"
    secret.write_text("x\n")
    secret.chmod(0)
    said = without_capabilities(f"""
        from parlschedctl.outputs import FILE
        print(FILE.convert({str(secret)!r}, None, None))
    """)
    assert said == str(secret)


def test_json_is_one_indented_object_and_never_nan(capsys):
    """print_json: the object on stdout, indented; NaN (which is not JSON) raises
    rather than being written as a bare NaN a strict parser refuses."""
    print_json({"a": [1, 2], "b": None})
    out = capsys.readouterr()
    assert json.loads(out.out) == {"a": [1, 2], "b": None} and out.err == ""
    assert out.out == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": null\n}\n'
    with pytest.raises(ValueError):
        print_json({"x": math.nan})
    assert capsys.readouterr().out == ""


def test_a_write_that_fails_names_its_file(tmp_path):
    """writing(PATH): an OSError of the write (here /dev/full's ENOSPC, a real one)
    becomes CannotWrite naming PATH with the system's reason, its cause kept; the
    access errors say "permission denied" as check_writable does; what is not an
    OSError goes through as it is."""
    with pytest.raises(CannotWrite) as e:
        with writing("/dev/full"), open("/dev/full", "w") as full:
            full.write("x")
    assert str(e.value) == "/dev/full: cannot write: No space left on device"
    assert isinstance(e.value.__cause__, OSError) and e.value.__cause__.errno == errno.ENOSPC
    with pytest.raises(CannotWrite, match=r"^/sys/x\.png: cannot write: permission denied$"):
        with writing(Path("/sys/x.png")), open("/sys/x.png", "w"):  # root passes access(); sysfs refuses: EACCES
            pass
    # EPERM, which no file here gives on demand, is raised by hand: said as EACCES is
    with pytest.raises(CannotWrite, match=r"^/sys/y\.png: cannot write: permission denied$"):
        with writing("/sys/y.png"):
            raise OSError(errno.EPERM, os.strerror(errno.EPERM), "/sys/y.png")
    with pytest.raises(KeyError):
        with writing(tmp_path / "x"):
            raise KeyError("not a write error")
    with writing(tmp_path / "x"):
        (tmp_path / "x").write_text("ok")
    assert (tmp_path / "x").read_text() == "ok"
