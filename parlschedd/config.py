"""The daemon's configuration: one frozen dataclass tree, validated at load.

Every key of config/parlschedd.yaml maps onto a field here. ``load`` collects every
error with its key path (``learning.eps: must be in (0, 1], got 2``) instead of stopping
at the first, so ``parlschedctl config check`` can print them all.
"""

from __future__ import annotations

import contextlib
import math
import errno
import ipaddress
import os
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from parlschedd import textfile
from parlschedd.cpulist import MAX_CPUS, format_cpulist, parse_cpulist
from parlschedd.daemon.protocol import DEFAULT_SOCKET
from parlschedd.keypaths import Collector, KeyPathError, Octal, load_yaml, yaml12_number, yaml_kind
from parlschedd.kinds import finite, is_integer, is_number
from parlschedd.words import counted
from parlschedd.learning.normalize import MODES as NORMALISE_MODES
from parlschedd.learning.params import RANGES as LEARNING_RANGES, REWARDS, LearningParams
from parlschedd.patterns import PatternError, compile_pattern
from parlschedd.topology import DOMAIN_MODES

UTILITIES = ("auto", "instructions", "task-clock", "schedstat")
DEFAULT_PATH = Path("/etc/parlsched/parlschedd.yaml")
# sockaddr_un.sun_path (unix(7)) holds 108 bytes with the path's terminating NUL: no
# host binds a longer socket path, so a longer socket.path is the config's error, not
# this host's. Python binds a path of up to this many bytes (108: "AF_UNIX path too
# long", after config check had said ok).
SUN_PATH_MAX = 107
# The shortest period_s: each period costs the daemon its own work (a counter read per
# thread, a learning step, the pins: 8.6 ms at 1024 threads, bench/results/period_profile-8131649.json),
# and a period of 0.1 ms ran 10,000 of them a second. The spec's T_CPU is 0.1 s (the
# paper's text says 0.x s; its original code used 0.025 and 0.2 s).
MIN_PERIOD_S = 0.01
# The longest: an hour. Beyond some 24 days the loop's wait is more than epoll takes
# (OverflowError: the daemon said it was ready, then died), and a period of hours
# places nothing worth the name.
MAX_PERIOD_S = 3600.0
# The most periods of history a target keeps: a day at 0.1 s. Each costs 20 bytes
# and 12 a thread, at most twice over, and 64 more periods may be held in chunks
# (daemon/history.py). Unbounded, a count past 2**63 made every attach fail (the
# history of the time, a deque, could not be made).
MAX_HISTORY_PERIODS = 1_000_000
# The longest T_NUMA and rescan_s: a day and an hour. Longer, Level 1 never ran and the
# rules and cpusets were never looked at again, without a word.
MAX_DOMAIN_PERIOD_S = 86400.0
MAX_RESCAN_S = 3600.0
# The largest config file read: a config of thousands of rules is some hundred KB. A
# file of tens of MB took seconds to parse, inside the daemon's loop at a reload (the
# watchdog kills a loop held 30 s).
MAX_CONFIG_BYTES = 1 << 20


def socket_path_too_long(path: str) -> str | None:
    """Why no host could bind a Unix socket at ``path``, or None; the daemon asks it of
    --socket too."""
    size = len(os.fsencode(path))
    return f"{size} bytes, a Unix socket's path holds at most {SUN_PATH_MAX}" if size > SUN_PATH_MAX else None


class ConfigError(KeyPathError):
    """A config that cannot be used; ``errors`` lists (key path, message) pairs."""


class ConfigUnreadable(ConfigError):
    """A config file that cannot be read at all (missing, closed to this user, a
    directory): not an invalid config, which it was called ("invalid config x.yaml:
    (file): No such file or directory"). ``str`` is the one line to print:
    "cannot read config x.yaml: no such file"; ``errors`` holds it under "(file)"."""

    def __init__(self, source: str, error: OSError) -> None:
        reasons = {errno.ENOENT: "no such file", errno.EACCES: "permission denied", errno.EISDIR: "a directory",
                   errno.ENOTDIR: "a path through a file"}
        self.reason = reasons.get(error.errno or 0, error.strerror or str(error))  # a FIFO's: NotARegularFile's
        self.missing = error.errno == errno.ENOENT
        self.not_a_file = isinstance(error, (IsADirectoryError, textfile.NotARegularFile))  # a FIFO, a device
        super().__init__(source, [("(file)", f"cannot read: {self.reason}")])

    def __str__(self) -> str:
        return f"cannot read config {self.source}: {self.reason}"


class ConfigUntrusted(ConfigError):
    """A config file the daemon must not believe (owner, mode, a directory on its path
    others may write): refused unread. ``str`` is the daemon's refusal, as its start
    check words it: "x.yaml: (file): <problem>"."""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(source, [("(file)", problem)])

    def __str__(self) -> str:
        return f"{self.source}: (file): {self.errors[0][1]}"


@dataclass(frozen=True)
class TargetRule:
    """Which processes to manage: a regex on comm or cmdline, and/or a cgroup path."""

    name: str | None = None
    cgroup: str | None = None  # "/path" (v2) or "controllers:/path" (a v1 hierarchy)
    observe: bool = False
    threads: str | None = None  # regex on thread names; None: all threads
    descendants: bool = True


# The daemon's learning defaults, which differ from the spec's starting values
# (LearningParams(); the paper's own were lost, shared/spec/parlsched.md "Parameters").
# Rigid pinning loses to the kernel's own balancing where resources are plentiful, so a
# thread starts free in its domain and pins only where that pays (free; bench/scenarios.py
# on real programs, docs/evaluation.md). Each thread learns from its own utility, against
# its own recent best (normalise: thread, decay 0.99), sharpened (sharpness 5), with a
# larger step (eps 0.3) and little exploration (lambda 0.001), and leaves its domain
# only for a clearly better one (gamma 0.7): with these, 1024 simulated threads stay
# within 1.10 of the makespan bound from the first periods in 5 of 5 seeds (79 of 80
# held-out), where the shared "reward: target" of the earlier defaults never settled;
# on the real programs both sets are within noise of each other (README, "Benchmarks").
DAEMON_LEARNING = LearningParams(eps=0.3, lam=0.001, decay=0.99, normalise="thread", sharpness=5.0,
                                 free=True, gamma=0.7)


@dataclass(frozen=True)
class SocketConfig:
    """The control socket (``socket:``): who may use it is its group and mode."""

    path: str = DEFAULT_SOCKET
    group: str | None = None  # members may use the socket
    mode: int = 0o660


class FileRead(NamedTuple):
    """The file a config was read from, as it was when read (fstat of the descriptor
    read, a symbolic link followed): whether the daemon may believe it is judged on
    what it read (``hostcheck``), not on what the path names by the time it looks."""

    path: str
    stat: os.stat_result


@dataclass(frozen=True)
class Config:
    """The daemon's whole config, one field per key of the file (built-in defaults
    where the file has none); ``from_mapping`` validates it."""

    period_s: float = 0.1
    domain_period_s: float = 4.0
    domains: str | tuple[tuple[int, ...], ...] = "auto"
    cpus: tuple[int, ...] | None = None
    utility: str = "auto"
    learning: LearningParams = DAEMON_LEARNING
    targets: tuple[TargetRule, ...] = ()
    restore_on_exit: bool = True
    socket: SocketConfig = field(default_factory=SocketConfig)
    metrics: str | None = None
    rescan_s: float = 1.0  # how often target rules are re-evaluated
    history_periods: int = 600  # per-target history kept in memory (periods)
    metrics_max_threads: int = 256  # per-thread series beyond this are aggregated
    # where it was read from (None: not from a file); not part of what it says, and no key of the file
    read_from: FileRead | None = field(default=None, compare=False, repr=False, metadata={"key": False})

    @property
    def domain_every(self) -> int:
        """T_NUMA / T_CPU in whole periods."""
        return max(1, round(self.domain_period_s / self.period_s))


# The config's key for each LearningParams field where they differ ("lambda" is a
# Python keyword).
_LEARNING_KEYS = {"lam": "lambda"}


def _shown(value: Any) -> str:
    """A value as the user wrote it in YAML (true, null, [0, 1]), strings quoted; a
    boolean with what YAML took for one (``name: no`` was "got false", a value never
    written)."""
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, bool):
        return f"{str(value).lower()} (YAML reads an unquoted yes, no, on, off as true or false: quote text)"
    if isinstance(value, Octal):
        return f"{value} (YAML 1.1 reads a number written with a leading 0 as octal: write it without the 0)"
    try:
        return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()
    except yaml.YAMLError:
        return repr(value)


class _Checker(Collector):
    """The config's typed getters: a bad value is an error, and its default stands in."""

    def number(self, raw: Mapping[str, Any], key: str, path: str, default: float, lo: float,
               hi: float | None = None, lo_inclusive: bool = False) -> float:
        value = yaml12_number(raw.get(key, default))
        if not is_number(value) or isinstance(value, Octal):
            self.fail(path, f"must be a number, got {_shown(value)}")
            return default
        if not finite(value):
            self.fail(path, f"must be a finite number, got {_shown(value)}")
            return default
        below = value < lo if lo_inclusive else value <= lo
        if below or (hi is not None and value > hi):
            rng = (">= " if lo_inclusive else "> ") + f"{lo:g}" + (f" and <= {hi:g}" if hi is not None else "")
            self.fail(path, f"must be {rng}, got {_shown(value)}")
            return default
        return float(value)

    def count(self, raw: Mapping[str, Any], key: str, default: int, hi: int | None = None) -> int:
        value = raw.get(key, default)
        if not is_integer(value) or isinstance(value, Octal) or value < 1 or (hi is not None and value > hi):
            number = yaml12_number(value)  # 1e3, "600": a count is an integer as YAML 1.2 writes one
            whole = isinstance(number, float) and number.is_integer() and 1 <= number <= (hi or number)
            hint = f"; write {int(number)}" if whole else ""
            self.fail(key, f"must be a whole number >= 1{'' if hi is None else f' and <= {hi:,}'}, "
                           f"got {_shown(value)}{hint}")
            return default
        return int(value)

    def boolean(self, raw: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
        value = raw.get(key, default)
        if not isinstance(value, bool):
            self.fail(path, f"must be true or false, got {_shown(value)}")
            return default
        return value

    def choice(self, raw: Mapping[str, Any], key: str, path: str, default: str, options: tuple[str, ...]) -> str:
        value = raw.get(key, default)
        if value not in options:
            self.fail(path, f"must be one of {', '.join(options)}, got {_shown(value)}")
            return default
        return value

    def regex(self, value: Any, path: str) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str):
            self.fail(path, f"must be a regular expression string, got {_shown(value)}")
            return None
        try:
            compile_pattern(value)
        except PatternError as exc:
            self.fail(path, f"invalid regular expression: {exc}")
            return None
        return value

    def cpu_list(self, value: Any, path: str) -> tuple[int, ...] | None:
        """A list of CPU numbers, or a CPU list as the kernel and the daemon write one
        ("0-3,8", which admins write too); else an error under ``path``."""
        if isinstance(value, str):
            return self._cpu_list_text(value, path)
        if isinstance(value, list) and any(isinstance(c, Octal) for c in value):
            self.fail(path, "holds a CPU number written with a leading 0, which YAML 1.1 reads as octal (010 is CPU 8): "
                            "write it without the 0")
            return None
        if not isinstance(value, list) or not value or not all(is_integer(c) and c >= 0 for c in value):
            self.fail(path, f"must be a non-empty list of CPU numbers or a CPU list such as '0-3,8', got {_shown(value)}")
            return None
        if above := [int(c) for c in value if c >= MAX_CPUS]:
            self.fail(path, f"CPU number {above[0]} is above any CPU ({MAX_CPUS})")
            return None
        return tuple(int(c) for c in value)

    def _cpu_list_text(self, text: str, path: str) -> tuple[int, ...] | None:
        try:
            cpus = parse_cpulist(text)
        except ValueError as exc:
            self.fail(path, f"{exc}; write CPU numbers and ranges such as '0-3,8', or a list such as [0, 1, 2, 3, 8]")
            return None
        if not cpus:
            self.fail(path, f"names no CPU, got {_shown(text)}; write CPU numbers and ranges such as '0-3,8'")
            return None
        return tuple(sorted(cpus))

    def section(self, raw: Any, path: str, known: Collection[str]) -> Mapping[str, Any]:
        """``Collector.section``, but an empty section (null) is all defaults: every key
        of the config may be left out."""
        return {} if raw is None else super().section(raw, path, known)


def from_mapping(raw: Any, source: str = "<config>") -> Config:
    """Validate a parsed YAML document into a Config; raise ConfigError listing all errors."""
    c = _Checker()
    top = c.section(raw, "", {f.name for f in fields(Config) if f.metadata.get("key", True)})
    valid = len(c.errors)
    period = c.number(top, "period_s", "period_s", 0.1, 0.0, MAX_PERIOD_S)
    if 0 < period < MIN_PERIOD_S:
        c.fail("period_s", f"must be >= {MIN_PERIOD_S:g} s, got {period:g} ({1 / period:,.0f} periods a second): each "
                           "period costs the daemon a counter read per thread, a learning step and the pins (8.6 ms at "
                           "1024 threads), CPU time taken from the threads it places; the paper's T_CPU is 0.1 s")
    domain_period = c.number(top, "domain_period_s", "domain_period_s", 4.0, 0.0, MAX_DOMAIN_PERIOD_S)
    got = f"got {domain_period:g}" + ("" if "domain_period_s" in top else " (its default: not in the file)")
    if len(c.errors) > valid:
        pass  # a default stands in for a bad value: no error about how the two relate
    elif domain_period < period:
        c.fail("domain_period_s", f"must be >= period_s ({period:g}), {got}")
    elif period > 0 and abs(domain_period / period - round(domain_period / period)) > 1e-6 * domain_period / period:
        below = max(1, math.floor(domain_period / period))  # Level 1 runs every so many periods
        c.fail("domain_period_s", f"must be a whole multiple of period_s ({period:g}), {got}; say "
                                  f"{below * period:g} (Level 1 every {counted(below, 'period')}) or "
                                  f"{(below + 1) * period:g} (every {below + 1})")

    domains: str | tuple[tuple[int, ...], ...] = "auto"
    raw_domains = top.get("domains", "auto")
    if isinstance(raw_domains, str) and raw_domains in DOMAIN_MODES:
        domains = raw_domains
    elif isinstance(raw_domains, list) and raw_domains:
        lists = [c.cpu_list(d, f"domains[{i}]") for i, d in enumerate(raw_domains)]
        domains = tuple(d for d in lists if d is not None)
        seen: set[int] = set()
        for i, cpus_of in enumerate(lists):
            if cpus_of is not None and (clash := seen.intersection(cpus_of)):
                c.fail(f"domains[{i}]", f"repeats CPUs {format_cpulist(clash)} of an earlier domain; a CPU belongs to one domain")
            seen.update(cpus_of or ())
    else:
        c.fail("domains", f"must be one of {', '.join(DOMAIN_MODES)} or a list of CPU lists, got {_shown(raw_domains)}")

    cpus = None if top.get("cpus") is None else c.cpu_list(top.get("cpus"), "cpus")
    utility = c.choice(top, "utility", "utility", "auto", UTILITIES)
    learning = _learning(c, top.get("learning"))
    targets = _targets(c, top.get("targets"))
    restore = c.boolean(top, "restore_on_exit", "restore_on_exit", True)
    socket = _socket(c, top.get("socket"))
    metrics = top.get("metrics")
    if metrics is not None and not _listen_address(metrics):
        c.fail("metrics", "must be a listen address host:port with a port of 0-65535 (e.g. 127.0.0.1:9177, or "
                          f"[::1]:9177 for an IPv6 address), got {_shown(metrics)}")
        metrics = None
    rescan = c.number(top, "rescan_s", "rescan_s", 1.0, 0.0, MAX_RESCAN_S)
    history = c.count(top, "history_periods", 600, MAX_HISTORY_PERIODS)
    max_threads = c.count(top, "metrics_max_threads", 256)
    if c.errors:
        raise ConfigError(source, c.errors)
    return Config(period, domain_period, domains, cpus, utility, learning, targets, restore, socket, metrics,
                  rescan, history, max_threads)


def _listen_address(value: Any) -> bool:
    """host:port, or [IPv6 address]:port as URLs and Prometheus write one; a port of
    0-65535 (``prometheus._host_port`` reads it)."""
    address = re.fullmatch(r"(?:\[([^\]]*)\]|[^\s:\[\]]*):(\d{1,5})", value) if isinstance(value, str) else None
    if address is None or int(address.group(2)) > 65535:
        return False
    if address.group(1) is not None:
        try:
            ipaddress.IPv6Address(address.group(1))
        except ValueError:
            return False
    return True


def _learning(c: _Checker, raw: Any) -> LearningParams:
    names = {_LEARNING_KEYS.get(f.name, f.name): f.name for f in fields(LearningParams)}
    m = c.section(raw, "learning", set(names))
    defaults = DAEMON_LEARNING
    values: dict[str, Any] = {}
    for key, attr in names.items():
        path = f"learning.{key}"
        if attr == "seed":
            seed = m.get("seed")
            if seed is not None and (not is_integer(seed) or isinstance(seed, Octal) or seed < 0):
                c.fail(path, f"must be a non-negative integer or null, got {_shown(seed)}")
                seed = None
            values["seed"] = None if seed is None else int(seed)
        elif attr == "normalise":
            values[attr] = c.choice(m, key, path, defaults.normalise, NORMALISE_MODES)
        elif attr == "reward":
            values[attr] = c.choice(m, key, path, defaults.reward, REWARDS)
        elif attr == "free":
            values[attr] = c.boolean(m, key, path, defaults.free)
        else:
            lo, hi, inclusive = LEARNING_RANGES[attr]
            values[attr] = c.number(m, key, path, getattr(defaults, attr), lo, hi, inclusive)
    return LearningParams(**values)


def _targets(c: _Checker, raw: Any) -> tuple[TargetRule, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        c.fail("targets", f"must be a list of rules, got {yaml_kind(raw)}")
        return ()
    rules = []
    known = {f.name for f in fields(TargetRule)}
    for i, item in enumerate(raw):
        path = f"targets[{i}]"
        m = c.section(item, path, known)
        name = c.regex(m.get("name"), f"{path}.name")
        cgroup = m.get("cgroup")
        if cgroup is not None and not _valid_cgroup(cgroup):
            c.fail(f"{path}.cgroup", "must be an absolute cgroup path without '..' (v2), or CONTROLLERS:/path "
                                     f"for a v1 hierarchy (e.g. cpuset:/jobs or name=systemd:/x.slice), got {_shown(cgroup)}")
            cgroup = None
        if (item is None or isinstance(item, Mapping)) and m.get("name") is None and m.get("cgroup") is None:
            c.fail(path, "needs a name regex or a cgroup path")
        rules.append(TargetRule(
            name=name, cgroup=cgroup,
            observe=c.boolean(m, "observe", f"{path}.observe", False),
            threads=c.regex(m.get("threads"), f"{path}.threads"),
            descendants=c.boolean(m, "descendants", f"{path}.descendants", True),
        ))
    return tuple(rules)


_CONTROLLER = re.compile(r"(name=)?[A-Za-z0-9_]+")


def _valid_cgroup(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    controllers, path = split_cgroup(value)
    return (all(_CONTROLLER.fullmatch(c) for c in controllers)
            and path.startswith("/") and ".." not in path.split("/") and "\0" not in path)


def split_cgroup(value: str) -> tuple[tuple[str, ...], str]:
    """``"cpuset,cpu:/jobs"`` -> (("cpuset", "cpu"), "/jobs"); a bare path is v2: ()."""
    head, sep, path = value.partition(":")
    if not sep or head.startswith("/"):
        return (), value
    return tuple(head.split(",")), path


def _socket(c: _Checker, raw: Any) -> SocketConfig:
    m = c.section(raw, "socket", {"path", "group", "mode"})
    path = m.get("path", DEFAULT_SOCKET)
    if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
        nul = isinstance(path, str) and "\0" in path  # no file's path holds one: bind(2) refuses it
        c.fail("socket.path", f"must be an absolute path{' without a NUL byte' if nul else ''}, got {_shown(path)}")
        path = DEFAULT_SOCKET
    elif too_long := socket_path_too_long(path):
        c.fail("socket.path", f"{too_long}; choose a shorter path")
        path = DEFAULT_SOCKET
    group = m.get("group")
    if group is not None and not isinstance(group, str):
        c.fail("socket.group", f"must be a group name, got {_shown(group)}")
        group = None
    raw_mode = m.get("mode", "0660")
    mode = -1  # a bare 660 or 400 is decimal to YAML: no mode anyone meant
    if isinstance(raw_mode, Octal):  # a bare 0660, YAML's octal
        mode = int(raw_mode)
    elif isinstance(raw_mode, str) and raw_mode.isdigit():
        with contextlib.suppress(ValueError):  # '0980': no octal digits
            mode = int(raw_mode, 8)
    if not 0 <= mode <= 0o777:
        shown = f"0{raw_mode:o}" if isinstance(raw_mode, Octal) else _shown(raw_mode)  # its octal, as written
        c.fail("socket.mode", "must be an octal file mode such as '0660' (YAML reads a bare number without "
                              f"a leading 0 as decimal), got {shown}")
        mode = 0o660
    return SocketConfig(path, group, mode)


def config_file(path: str | Path | None) -> Path | None:
    """The file ``load(path)`` reads: ``path``, else the default file when there is one
    (a dangling link there, or one this user may not look at, counts: someone meant a
    config, and reading it says what is wrong); None: the built-in defaults."""
    if path is not None:
        return Path(path)
    try:
        os.lstat(DEFAULT_PATH)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:  # EACCES on /etc/parlsched
        pass
    return DEFAULT_PATH


def load(path: str | Path | None, judge: Callable[[str, os.stat_result], str | None] | None = None) -> Config:
    """Read and validate a YAML file (``config_file``: the default one when ``path`` is
    None); without a file, the built-in defaults. The config keeps the owner and mode
    of the file it was read from (``read_from``). ``judge``: why the file read (its
    path, its fstat) must not be believed, or None; asked before a byte of it is
    parsed, so that a file swapped in (a link to /etc/shadow) is not quoted back in
    the parse errors (the daemon's, ``hostcheck.config_file_untrusted``)."""
    path = config_file(path)
    if path is None:
        return Config()

    def untrusted(st: os.stat_result) -> None:
        if judge is not None and (problem := judge(str(path), st)):
            raise ConfigUntrusted(str(path), problem)

    try:
        data, st = textfile.read(path, MAX_CONFIG_BYTES, untrusted)
        text = textfile.decode(data)
    except OSError as exc:
        raise ConfigUnreadable(str(path), exc) from None
    except textfile.TooLarge as exc:
        raise ConfigError(str(path), [("(file)", f"{exc}, more than any config needs (is it the right file?)")]) from None
    except textfile.NotUtf8 as exc:
        raise ConfigError(str(path), [(f"line {exc.line}", str(exc))]) from None
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(file)"
        raise ConfigError(str(path), [(where, f"not valid YAML: {getattr(exc, 'problem', exc)}")]) from None
    return replace(from_mapping(raw, str(path)), read_from=FileRead(str(path), st))
