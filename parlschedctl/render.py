"""Plain-text rendering of daemon replies for people."""

from __future__ import annotations

from typing import Any

from parlschedd.cpulist import format_cpulist
from parlschedd.words import n_threads


def printable(name: str) -> str:
    """A process or thread name as a terminal may show it: any user names its threads,
    so control characters (an escape sequence, a newline that fakes a row) are written
    as escapes, as ps(1) does, never sent to root's terminal as they are."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
                   for c in name)


UTILITY_UNITS = {"perf:instructions": "instructions per second",
                 "perf:task-clock": "ns of CPU per second (1e9: a whole CPU)",
                 "schedstat": "ns of CPU per second (1e9: a whole CPU)"}


def status_table(reply: dict[str, Any]) -> str:
    d = reply["daemon"]
    loop = d["loop"]
    lines = [
        f"parlschedd {d['version']} pid {d['pid']} up {d['uptime_s']:.0f} s, counters {d['counter_source']}, "
        f"period {d['period_s']} s / domain period {d['domain_period_s']} s, loop mean {loop['mean_ms']} ms max {loop['max_ms']} ms",
        f"domains {d['domains']}; utility in {UTILITY_UNITS.get(d['counter_source'], 'the counter source units')};"
        " cpu free: the kernel places the thread in its domain; pinned: its mask is ours (that cpu, or the domain)",
    ]
    if not reply["targets"]:
        lines.append("no targets")
    placed = sorted(c for domain in d["domains"] for c in domain)  # config domains may leave usable CPUs out
    for t in reply["targets"]:
        left = _not_managed(t.get("threads_ignored", 0), t.get("threads_handed_over", 0))
        rule = "" if t.get("rule") is None else f", config rule {t['rule']}"
        cpus = "" if t.get("cpus", placed) == placed else f", cpuset: cpus {format_cpulist(t['cpus'])}"
        lines.append(f"\n{t['pid']} {printable(t['name'])} ({t['mode']}{rule}{cpus}, {n_threads(len(t['threads']))}{left})")
        lines.append(f"  {'TID':>8} {'NAME':<16} {'CPU':>4} {'DOM':>4} {'UTILITY':>12} PINNED")
        for th in t["threads"]:
            util = "-" if th["utility"] is None else f"{th['utility']:.4g}"
            cpu = "free" if th.get("free") else "-" if th["cpu"] is None else th["cpu"]
            dom = "-" if th["domain"] is None else th["domain"]
            lines.append(f"  {th['tid']:>8} {printable(th['name'])[:16]:<16} {cpu:>4} {dom:>4} {util:>12} {'yes' if th['pinned'] else 'no'}")
    return "\n".join(lines)


def _not_managed(ignored: int, handed_over: int) -> str:
    """', N more not managed: ...' for a target's header; '' when every thread is managed."""
    if not ignored:
        return ""
    why = [f"{n} {what}" for n, what in ((ignored - handed_over, "left out by the thread filter"),
                                          (handed_over, "pinned by someone else")) if n]
    return f", {ignored} more not managed: {', '.join(why)}"


def progress_line(target: dict[str, Any], elapsed: float) -> str:
    """One line for a terminal while ``run`` waits: threads, pins, moves, speed."""
    rows = target["threads"]
    utils = [t["utility"] for t in rows if t["utility"] is not None]
    mean = sum(utils) / len(utils) if utils else 0.0
    return (f"{elapsed:6.1f} s  {n_threads(len(rows))} ({placements(rows)}), "
            f"{target.get('migrations', 0)} moves, mean utility {mean:.3g}")


def placements(threads: list[dict[str, Any]]) -> str:
    """How many of ``threads`` we placed on one CPU, and how many free in their domain."""
    one_cpu, free = placement_counts(threads)
    return f"{one_cpu} on one CPU, {free} free in their domain"


def placement_counts(threads: list[dict[str, Any]]) -> tuple[int, int]:
    """(on one CPU, free in their domain) of ``threads`` (both have a mask we set:
    ``pinned``; the rest have their own)."""
    free = sum(bool(t["pinned"] and t.get("free")) for t in threads)
    return sum(t["pinned"] for t in threads) - free, free
