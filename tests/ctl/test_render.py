"""parlschedctl/render.py: what reaches a person's terminal."""

from __future__ import annotations

from parlschedctl.render import clip, printable, progress_line, status_screen, status_table
from parlschedd import __version__


def _reply(process: str, thread: str) -> dict:
    daemon = {"version": __version__, "pid": 1, "uptime_s": 1.0, "counter_source": "perf:task-clock", "period_s": 0.1,
              "domain_period_s": 4.0, "loop": {"mean_ms": 0.5, "max_ms": 1.0}, "domains": [[0, 1]], "cpus": [0, 1]}
    thread_row = {"tid": 12, "name": thread, "cpu": 1, "domain": 0, "utility": 0.5, "pinned": True}
    return {"daemon": daemon, "targets": [{"pid": 11, "name": process, "mode": "pin", "threads": [thread_row]}]}


def test_names_reach_the_terminal_without_control_characters() -> None:
    """Any user names its threads; root's status and top must not carry an escape
    sequence or a newline that fakes a row onto the terminal."""
    table = status_table(_reply("evil\x1b]0;owned\x07", "\x1b[31mRED\x1b[0m\ntab\there"))
    assert "\x1b" not in table and "\x07" not in table and "\t" not in table
    assert len(table.splitlines()) == 6  # two header lines, a blank, the target, its header, one thread
    assert "11 evil\\x1b]0;owned\\x07 (pin, 1 thread)" in table
    assert "\\x1b[31mRED\\x1b" in table


def test_a_daemon_of_another_version_than_the_one_installed_is_said() -> None:
    """The package upgraded under a running daemon: it runs the old code until it is
    restarted, and status said only its version, which no one compares by eye."""
    reply = _reply("app", "worker")
    assert "warning" not in status_table(reply)
    reply["daemon"]["version"] = "0.0.1"
    assert (f"warning: the daemon runs parlschedd 0.0.1, and {__version__} is installed: restart it (systemctl restart "
            "parlschedd) to run what is installed") in status_table(reply).splitlines()


def test_printable_names_are_left_as_they_are() -> None:
    assert printable("worker-3 é 线程") == "worker-3 é 线程"
    assert printable("a\u200bb") == "a\\u200bb"  # a zero-width space is not printable either


def test_a_free_thread_shows_free_and_the_utility_its_unit() -> None:
    reply = _reply("app", "worker")
    reply["targets"][0]["threads"].append({"tid": 13, "name": "w2", "cpu": None, "domain": 0, "utility": None,
                                           "pinned": True, "free": True})
    reply["targets"][0]["threads"].append({"tid": 14, "name": "w3", "cpu": None, "domain": None, "utility": None,
                                           "pinned": False, "free": False})
    rows = status_table(reply).splitlines()
    assert "ns of CPU per second" in rows[1]
    assert rows[-2].split()[:3] == ["13", "w2", "free"] and rows[-1].split()[:3] == ["14", "w3", "-"]
    # PINNED says to what: "free" next to "yes" read as a contradiction
    assert [row.split()[-1] for row in rows[-3:]] == ["cpu", "domain", "no"]
    assert "pinned: the mask we set holds its cpu, or its domain (cpu free" in rows[1]


def test_threads_not_managed_are_counted_in_the_header() -> None:
    """Left out by the thread filter or to whoever set their mask, they are out of the
    table; the header said "1 threads" of a process that has two."""
    reply = _reply("app", "worker")
    reply["targets"][0]["threads_ignored"] = 1
    assert "11 app (pin, 1 thread, 1 more not managed: 1 left out by the thread filter)" in status_table(reply)
    reply["targets"][0].update(threads_ignored=3, threads_handed_over=1)
    assert "11 app (pin, 1 thread, 3 more not managed: 2 left out by the thread filter, 1 pinned by someone else)" in status_table(reply)
    reply["targets"][0].update(threads_ignored=1, threads_handed_over=1)
    assert "11 app (pin, 1 thread, 1 more not managed: 1 pinned by someone else)" in status_table(reply)
    reply["targets"][0]["threads_ignored"] = 0
    assert "11 app (pin, 1 thread)\n" in status_table(reply) + "\n"
    reply["targets"][0]["rule"] = 0  # attached by the config's first rule, not by a client
    assert "11 app (pin, config rule 0, 1 thread)\n" in status_table(reply) + "\n"


def test_a_target_confined_by_its_cpuset_shows_its_cpus_in_the_header() -> None:
    """A container bound to some CPUs: status said nothing of it, and a target whose
    threads never left CPU 1 looked like a scheduler that never moved them."""
    reply = _reply("app", "worker")
    reply["targets"][0]["cpus"] = [0, 1]
    assert "11 app (pin, 1 thread)\n" in status_table(reply) + "\n"
    reply["targets"][0]["cpus"] = [1]
    assert "11 app (pin, cpuset: cpus 1, 1 thread)\n" in status_table(reply) + "\n"
    reply["daemon"]["domains"] = [[1]]  # the config's domains leave CPU 0 out: no cpuset narrows the target
    assert "11 app (pin, 1 thread)\n" in status_table(reply) + "\n"


def test_a_descendants_target_shows_its_processes_and_each_threads_pid() -> None:
    """``stress-ng --cpu 2`` run through ``run`` showed as "12713 stress-ng (pin, 3
    threads)": three processes, with nothing to tell which thread was whose."""
    reply = _reply("stress-ng", "stress-ng")
    target = reply["targets"][0]
    target["threads"][0]["pid"] = 11
    target["threads"].append({"tid": 14, "pid": 14, "name": "stress-ng-cpu", "cpu": 0, "domain": 0, "utility": 0.9,
                              "pinned": True})
    assert "11 stress-ng (pin, 2 threads)\n" in status_table(reply) + "\n"  # not a descendants target: as before
    assert "PID" not in status_table(reply).splitlines()[-3]
    target["descendants"] = True
    rows = status_table(reply).splitlines()
    assert rows[-4] == "11 stress-ng (pin, with descendants: 2 processes, 2 threads)"
    assert rows[-3].split()[:2] == ["PID", "TID"]
    assert rows[-2].split()[:3] == ["11", "12", "stress-ng"] and rows[-1].split()[:3] == ["14", "14", "stress-ng-cpu"]


def test_a_screen_keeps_the_header_and_counts_what_it_left_out() -> None:
    """top on a terminal: a frame taller or wider than the terminal scrolled its
    header away. Cut, it keeps the header and says what did not fit."""
    reply = _reply("app", "worker")
    reply["targets"][0]["threads"] *= 5
    reply["targets"].append(dict(reply["targets"][0], pid=21))
    table = status_table(reply).splitlines()
    assert status_screen(reply, len(table), 1000) == table  # it fits: as status shows it
    rows = status_screen(reply, 7, 40)
    assert len(rows) == 7 and all(len(row) <= 39 for row in rows) and rows[0].startswith(f"parlschedd {__version__} pid 1")
    assert rows[-1].startswith("... 9 more threads (1 more target); ")
    assert status_screen(reply, 3, 40)[-1].startswith("... 10 more threads (2 more targets)")
    header_kept = len(table) - 5  # the second target's header line shown, not its column header nor threads
    assert status_screen(reply, header_kept, 1000)[-2].startswith("21 app (")
    assert status_screen(reply, header_kept, 1000)[-1].startswith("... 5 more threads; "), "its header shown: not a target more"
    assert clip("ab线程cd", 5) == "ab线" and clip("e\u0301x", 2) == "e\u0301x"  # wide: two columns; combining: none


def test_a_row_with_wide_characters_keeps_the_columns_after_its_name() -> None:
    """Names were padded by characters: four wide ones pushed the rest of the row four
    columns right of the header's."""
    wide, narrow = (status_table(_reply("app", name)).splitlines()[-1] for name in ("線程線程", "ab"))
    assert sum(2 if "\u4e00" <= c <= "\u9fff" else 1 for c in wide) == len(narrow)  # as wide on the screen
    assert "線程線程線程線程" in status_table(_reply("app", "線程線程線程線程線程")), "cut to 16 columns"


def test_a_thread_filter_is_shown_in_its_targets_header() -> None:
    reply = _reply("app", "worker")
    reply["targets"][0]["thread_filter"] = "^worker"
    assert "11 app (pin, threads matching '^worker', 1 thread)" in status_table(reply)
    reply["targets"][0]["thread_filter"] = "x" * 500
    assert "... (500 characters)" in status_table(reply)  # repeated, not in full


def test_progress_line():
    line = progress_line({"threads": [{"utility": 2.0, "pinned": True}, {"utility": None, "pinned": False},
                                      {"utility": 1.0, "pinned": True, "free": True}], "migrations": 7}, 3.25)
    assert line == "   3.2 s  3 threads (1 on one CPU, 1 free in their domain, 1 not placed), 7 moves, mean utility 1.5"
    assert ", 1 move, " in progress_line({"threads": [], "migrations": 1}, 1.0)
