"""The daemon's log (parlschedd/logging.py): a child Python process configures it as
parlschedd does and logs at each level onto a real file as its stderr; the lines are
read back. The journal's stream is the file itself, named in JOURNAL_STREAM by its
device and inode as systemd names a service's stream.

(tests/daemon/test_daemon.py runs a whole daemon on the journal's stream, for its own
events and its refusal; the lost-line and broken-stream cases of the sink are there
too, on a real full disk and a closed pipe.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from parlschedd.logging import LEVELS

ROOT = Path(__file__).resolve().parents[1]

# Every level the daemon's loggers have, as configure() is called by parlschedd's main.
CHILD = """
import sys
import structlog
from parlschedd.logging import configure

configure(sys.argv[1], sys.argv[2])
log = structlog.get_logger()
for level in ("debug", "info", "warning", "error", "critical"):
    getattr(log, level)(level + " event", n=1)
"""

ALL = ("debug", "info", "warning", "error", "critical")
PRIORITY = {"debug": "<7>", "info": "<6>", "warning": "<4>", "error": "<3>", "critical": "<2>"}  # syslog(3)'s


def logged(tmp_path: Path, fmt: str, level: str = "debug", journal: str | None = None, child: str = CHILD) -> str:
    """What the child wrote on its stderr (a file in ``tmp_path``), run with
    ``JOURNAL_STREAM`` unset, or (``journal``) naming its stderr ("ours") or another
    file ("another")."""
    out, other = tmp_path / "stderr.log", tmp_path / "other.log"
    other.write_text("")
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"} | {"PYTHONPATH": str(ROOT)}
    with open(out, "wb") as stderr:
        named = {"ours": os.fstat(stderr.fileno()), "another": os.stat(other)}
        if journal is not None:
            env["JOURNAL_STREAM"] = f"{named[journal].st_dev}:{named[journal].st_ino}"
        done = subprocess.run([sys.executable, "-c", child, fmt, level], stdout=subprocess.DEVNULL, stderr=stderr,
                              env=env, timeout=60)
    text = out.read_text()
    assert done.returncode == 0, text
    return text


def test_json_lines_are_one_object_each_with_level_event_and_a_utc_time(tmp_path):
    lines = logged(tmp_path, "json").splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["level"], r["event"], r["n"]) for r in records] == [(level, f"{level} event", 1) for level in ALL]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", r["timestamp"]) for r in records), records


CONSOLE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z \[(?P<level>\w+) *\] (?P<event>\w+ event) +n=1")


def test_console_lines_are_for_people_uncoloured(tmp_path):
    text = logged(tmp_path, "console")
    assert "\x1b" not in text, "no terminal colour codes in a file or the journal"
    lines = text.splitlines()
    matched = [CONSOLE.fullmatch(line) for line in lines]
    assert all(matched), lines
    assert [(m["level"], m["event"]) for m in matched] == [(level, f"{level} event") for level in ALL]
    assert not any(line.startswith("{") for line in lines)


@pytest.mark.parametrize("level", LEVELS)
def test_the_level_asked_for_and_those_above_it_are_logged(tmp_path, level):
    events = [json.loads(line)["event"] for line in logged(tmp_path, "json", level).splitlines()]
    assert events == [f"{above} event" for above in ALL[ALL.index(level):]]


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_on_the_journals_stream_each_line_starts_with_its_levels_syslog_priority(tmp_path, fmt):
    """journald takes "<N>" off a line of a service's stream and files the line at that
    priority: without it every line was "info" to `journalctl -p err`."""
    prefixed = logged(tmp_path, fmt, journal="ours").splitlines()
    plain = logged(tmp_path, fmt).splitlines()
    assert [line[:3] for line in prefixed] == [PRIORITY[level] for level in ALL]
    if fmt == "json":  # the rest of the line as it is elsewhere (the time aside)
        assert [json.loads(line[3:])["event"] for line in prefixed] == [json.loads(line)["event"] for line in plain]
    else:
        assert all(CONSOLE.fullmatch(line[3:]) for line in prefixed), prefixed


@pytest.mark.parametrize("journal", [None, "another"])
@pytest.mark.parametrize("fmt", ["json", "console"])
def test_off_the_journals_stream_no_line_has_a_prefix(tmp_path, fmt, journal):
    """A daemon started by hand (no JOURNAL_STREAM), or by systemd with its stderr
    redirected elsewhere (JOURNAL_STREAM names the stream it was given, not this file):
    a "<6>" there would be noise to people and break every JSON line."""
    lines = logged(tmp_path, fmt, journal=journal).splitlines()
    assert len(lines) == len(ALL)
    assert not any(line.startswith("<") for line in lines), lines
    if fmt == "json":
        assert [json.loads(line)["level"] for line in lines] == list(ALL)


def test_a_stream_on_another_device_with_the_same_inode_is_not_the_journals(tmp_path):
    """JOURNAL_STREAM names a device and an inode: the inode alone could be another
    file's on another file system."""
    out = tmp_path / "stderr.log"
    child = CHILD.replace("configure(sys.argv[1], sys.argv[2])", """import os
st = os.fstat(2)
os.environ["JOURNAL_STREAM"] = f"{st.st_dev + 1}:{st.st_ino}"
configure(sys.argv[1], sys.argv[2])""")
    lines = logged(tmp_path, "json", child=child).splitlines()
    assert out.exists() and [json.loads(line)["level"] for line in lines] == list(ALL)


FAILED = """
import sys
import structlog
from parlschedd.logging import configure

configure(sys.argv[1], sys.argv[2])
try:
    {}["missing"]
except KeyError:
    structlog.get_logger().exception("period failed for target", pid=1)
"""


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_on_the_journals_stream_every_line_of_a_traceback_carries_the_errors_priority(tmp_path, fmt):
    """journald files each line of the stream on its own: a console traceback's lines
    after the first, without "<3>", were filed as "info", and `journalctl -p err`
    showed the error without where it came from (a JSON record is one line)."""
    lines = logged(tmp_path, fmt, journal="ours", child=FAILED).splitlines()
    assert all(line.startswith("<3>") for line in lines), lines
    if fmt == "json":
        assert len(lines) == 1 and "KeyError: 'missing'" in json.loads(lines[0][3:])["exception"], lines
    else:
        assert (lines[1], lines[-1]) == ("<3>Traceback (most recent call last):", "<3>KeyError: 'missing'"), lines
