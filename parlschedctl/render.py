"""Plain-text rendering of daemon replies for people."""

from __future__ import annotations

import os
import sys
import unicodedata
from typing import Any, NamedTuple

from parlschedd import __version__
from parlschedd.build import build_id, other_build
from parlschedd.cpulist import format_cpulist
from parlschedd.daemon.protocol import clip as clip_value
from parlschedd.units import unit_of
from parlschedd.words import counted, n_threads


def printable(name: str) -> str:
    """A process or thread name as a terminal may show it: any user names its threads,
    so control characters (an escape sequence, a newline that fakes a row) are written
    as escapes, as ps(1) does, never sent to root's terminal as they are."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
                   for c in name)


def status_table(reply: dict[str, Any]) -> str:
    """A ``status`` reply as text: the daemon's header, then each target and its threads."""
    return "\n".join(row.line for row in _status_rows(reply))


class _Row(NamedTuple):
    """A line of status_table, with the index of the target it belongs to (None: the
    daemon's) and whether it is one of that target's thread rows, so that a cut table
    can say what it left out."""

    line: str
    target: int | None = None
    thread: bool = False


def _status_rows(reply: dict[str, Any]) -> list[_Row]:
    """status_table's lines, as rows."""
    d = reply["daemon"]
    loop = d["loop"]
    rows: list[_Row] = [
        _Row(f"parlschedd {d['version']} pid {d['pid']} up {d['uptime_s']:.0f} s, counters {d['counter_source']}, "
             f"period {d['period_s']} s / domain period {d['domain_period_s']} s, loop mean {loop['mean_ms']} ms max {loop['max_ms']} ms"),
        _Row(f"domains {d['domains']}; utility in {unit_of(d['counter_source']).per_second};"
             " pinned: the mask we set holds its cpu, or its domain (cpu free: the kernel places it there); no: its own mask"),
    ]
    if d["version"] != __version__:
        rows.append(_Row(f"warning: the daemon runs parlschedd {d['version']}, and {__version__} is installed: restart it "
                         "(systemctl restart parlschedd) to run what is installed"))
    elif other_build(d.get("build")):
        rows.append(_Row(f"warning: the daemon runs other code (build {d['build']}) than this parlschedctl's (build "
                         f"{build_id()}): if it was installed since the daemon started, restart it (systemctl restart "
                         "parlschedd) to run it"))
    if d.get("state_file_error"):
        rows.append(_Row(f"warning: the state file could not be written ({d['state_file_error']}): a start after a crash "
                         "would act on an older state (see the daemon's log)"))
    if not reply["targets"]:
        rows.append(_Row("no targets"))
    placed = sorted(c for domain in d["domains"] for c in domain)  # config domains may leave usable CPUs out
    for i, t in enumerate(reply["targets"]):
        left = _not_managed(t.get("threads_ignored", 0), t.get("threads_handed_over", 0))
        rule = "" if t.get("rule") is None else f", config rule {t['rule']}"
        cpus = "" if t.get("cpus", placed) == placed else f", cpuset: cpus {format_cpulist(t['cpus'])}"
        tree = bool(t.get("descendants"))
        processes = f", with descendants: {_n_processes(t['threads'])}" if tree else ""
        matching = "" if t.get("thread_filter") is None else f", threads matching {printable(repr(clip_value(t['thread_filter'])))}"
        rows.append(_Row(""))
        rows.append(_Row(f"{t['pid']} {printable(t['name'])} ({t['mode']}{rule}{cpus}{processes}{matching}, "
                         f"{n_threads(len(t['threads']))}{left})", i))
        pid_column = f"{'PID':>8} " if tree else ""
        rows.append(_Row(f"  {pid_column}{'TID':>8} {'NAME':<16} {'CPU':>4} {'DOM':>4} {'UTILITY':>12} PINNED", i))
        for th in t["threads"]:
            util = "-" if th["utility"] is None else f"{th['utility']:.4g}"
            cpu = "free" if th.get("free") else "-" if th["cpu"] is None else th["cpu"]
            dom = "-" if th["domain"] is None else th["domain"]
            pid = f"{th.get('pid', '-'):>8} " if tree else ""
            rows.append(_Row(f"  {pid}{th['tid']:>8} {pad(printable(th['name']), 16)} {cpu:>4} {dom:>4} {util:>12} "
                             f"{_pinned_to(th)}", i, thread=True))
    return rows


def status_screen(reply: dict[str, Any], rows: int, columns: int) -> list[str]:
    """status_table cut to a terminal of ``rows`` x ``columns`` for top, which redraws
    in place: a frame taller than the terminal scrolled its header away and was never
    seen whole. The header stays; rows that do not fit give way to a last line that
    says how many were left out ("... 680 more threads"), and each line is cut to
    ``columns`` - 1 (a line that fills the last column leaves the cursor waiting to
    wrap, where some terminals erase that column on the next clear-to-end-of-line)."""
    table = _status_rows(reply)
    if len(table) > rows:
        kept, cut = table[:max(rows - 1, 0)], table[max(rows - 1, 0):]
        threads = sum(row.thread for row in cut)
        targets = {row.target for row in cut} - {row.target for row in kept} - {None}  # none of its lines shown
        more = counted(threads, "more thread") if threads else counted(len(cut), "more line")
        also = f" ({counted(len(targets), 'more target')})" if targets else ""
        table = [*kept, _Row(f"... {more}{also}; a taller terminal, or status, shows them")]
    return [clip(row.line, columns - 1) for row in table[:rows]]


def _columns(c: str) -> int:
    """The terminal columns a character takes: an East Asian wide one two, a combining
    mark none (printable() keeps both in names), any other one."""
    return 0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1


def clip(line: str, columns: int) -> str:
    """``line`` cut to at most ``columns`` terminal columns."""
    used = 0
    for i, c in enumerate(line):
        if used + _columns(c) > columns:
            return line[:i]
        used += _columns(c)
    return line


def pad(text: str, columns: int) -> str:
    """``text`` cut or padded to exactly ``columns`` terminal columns (a wide character
    cut in half leaves a space): str's own padding counts characters, and a name of
    four wide characters pushed the rest of its row four columns right."""
    cut = clip(text, columns)
    return cut + " " * (columns - sum(map(_columns, cut)))


def _pinned_to(thread: dict[str, Any]) -> str:
    """The PINNED column: what the mask we set holds, "cpu" or "domain" (a free thread),
    or "no". It said "yes" of a free thread too, and "CPU free ... PINNED yes" read as
    a contradiction."""
    if not thread["pinned"]:
        return "no"
    return "domain" if thread.get("free") else "cpu"


def _n_processes(threads: list[dict[str, Any]]) -> str:
    """'3 processes' a descendants target's threads belong to: its header said only
    "3 threads" of a process whose threads were in fact three processes' (a daemon
    before the threads' "pid" field counts as one)."""
    n = len({th.get("pid") for th in threads})
    return f"{n} process" if n == 1 else f"{n} processes"


def _not_managed(ignored: int, handed_over: int) -> str:
    """', N more not managed: ...' for a target's header; '' when every thread is managed."""
    if not ignored:
        return ""
    why = [f"{n} {what}" for n, what in ((ignored - handed_over, "left out by the thread filter"),
                                          (handed_over, "pinned by someone else")) if n]
    return f", {ignored} more not managed: {', '.join(why)}"


def progress_line(target: dict[str, Any], elapsed: float) -> str:
    """One line for a terminal while ``run`` waits: threads, pins, moves, speed (of an
    observed target, which is never placed, only threads and speed)."""
    rows = target["threads"]
    utils = [t["utility"] for t in rows if t["utility"] is not None]
    mean = sum(utils) / len(utils) if utils else 0.0
    if target.get("mode") == "observe":
        return f"{elapsed:6.1f} s  {n_threads(len(rows))} observed, mean utility {mean:.3g}"
    return (f"{elapsed:6.1f} s  {n_threads(len(rows))} ({placements(rows)}), "
            f"{counted(target.get('migrations', 0), 'move')}, mean utility {mean:.3g}")


def placements(threads: list[dict[str, Any]]) -> str:
    """How many of ``threads`` we placed on one CPU, how many free in their domain, and
    how many we have not placed (yet, or a pin the kernel refused), when any: "0 on
    one CPU, 0 free" of a thread managed left a reader asking where it was."""
    one_cpu, free = placement_counts(threads)
    unplaced = len(threads) - one_cpu - free
    return f"{one_cpu} on one CPU, {free} free in their domain" + (f", {unplaced} not placed" if unplaced else "")


def placement_counts(threads: list[dict[str, Any]]) -> tuple[int, int]:
    """(on one CPU, free in their domain) of ``threads`` (both have a mask we set:
    ``pinned``; the rest have their own)."""
    free = sum(bool(t["pinned"] and t.get("free")) for t in threads)
    return sum(t["pinned"] for t in threads) - free, free


def unpinned_warning(reply: dict[str, Any]) -> str | None:
    """What an attach's reply warns of: a daemon whose state file cannot be written pins
    no new thread (an original mask it could lose in a crash is never changed), while
    the target says mode pin; None when there is nothing to say."""
    if not reply.get("state_file_error") or reply["target"]["mode"] != "pin":
        return None
    return (f"parlschedctl: warning: the daemon's state file cannot be written ({reply['state_file_error']}): it "
            "pins none of these threads until it can, a thread's original mask going on disk before its first pin "
            "(see the daemon's log)")


def terminal_size(fd: int | None = None) -> os.terminal_size:
    """The terminal size of ``fd`` (stdout's when None), asked at each frame so that a
    resize is followed at the next; 80 x 24 where the terminal says 0 (a pty nobody sized)."""
    try:
        size = os.get_terminal_size(sys.stdout.fileno() if fd is None else fd)
    except OSError:
        size = os.terminal_size((0, 0))
    return os.terminal_size((size.columns or 80, size.lines or 24))
