"""A valid config against this host: what parlschedd would refuse to start with here,
and what it would only warn of.

``parlschedd.config`` checks what holds on every host (a key's type and range); what
depends on the machine (its CPUs, groups, addresses, cgroups) is checked here, for
``parlschedctl config check``, which must fail where the daemon would, so that
``config check && systemctl restart parlschedd`` does not restart into a refusal it
can foresee (the daemon checks the same things again at its start, in its own words).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from parlschedd.config import Config, split_cgroup
from parlschedd.cpulist import format_cpulist
from parlschedd.host.base import CounterSource
from parlschedd.host.cgroups import cgroup_dir
from parlschedd.host.errors import HostError
from parlschedd.host.perf import detect_source
from parlschedd.host.privileges import group_id
from parlschedd.topology import TopologyError, read_topology


class Finding(NamedTuple):
    """One problem under its key path, as ConfigError lists them."""

    key: str
    message: str


@dataclass
class HostReport:
    """``refused``: the daemon would not start with the config here. ``warnings``: it
    would, but not all of it would be used (CPUs it lacks, cgroups not there yet)."""

    refused: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)


def check_host(cfg: Config) -> HostReport:
    """Check ``cfg`` against this host as the daemon's start does, and more."""
    report = HostReport()
    report.refused += _socket_group(cfg.socket.group)
    report.refused += _socket_path(cfg.socket.path)
    _topology(cfg, report)
    report.refused += _metrics(cfg.metrics)
    report.warnings += _cgroups(cfg)
    report.warnings += _utility(cfg.utility)
    return report


def _socket_group(group: str | None) -> list[Finding]:
    """The daemon looks the socket's group up at start, and stops when there is none."""
    try:
        group_id(group)
    except LookupError as exc:
        return [Finding("socket.group", str(exc))]
    return []


def _socket_path(path: str) -> list[Finding]:
    """Where the daemon cannot make its socket: it makes the socket's own directory
    (/run/parlsched) but not that directory's parents, and replaces a dead daemon's
    socket but no other file. (Its length is the config's own check.) A path this user
    may not look into is not judged: the daemon runs as root."""
    folder = Path(path).parent
    try:
        if folder.exists() and not folder.is_dir():
            problem = f"{folder} is not a directory"
        elif not folder.exists() and not folder.parent.is_dir():
            problem = f"no directory {folder.parent} (parlschedd makes the socket's own directory, {folder}, not its parents)"
        elif os.path.lexists(path) and not stat.S_ISSOCK(os.lstat(path).st_mode):
            problem = f"{path} exists and is not a socket; parlschedd does not replace it"
        else:
            return []
    except PermissionError:
        return []
    return [Finding("socket.path", problem)]


def _topology(cfg: Config, report: HostReport) -> None:
    """CPUs the host lacks: none of ``cpus`` usable, or a domain naming one, stops the
    daemon; some of ``cpus`` missing only narrows what it uses."""
    try:
        topology = read_topology(cpus=cfg.cpus)
        topology.domains(cfg.domains)
    except TopologyError as exc:  # CPUs this host does not have or may not use
        report.refused.append(Finding(*exc.finding()))
        return
    if unusable := topology.unusable(cfg.cpus):
        report.warnings.append(Finding("cpus", f"{format_cpulist(unusable)} not usable on this host (absent, offline, "
                                               f"isolated or not allowed); parlschedd runs on {format_cpulist(topology.usable)}"))


def _metrics(address: str | None) -> list[Finding]:
    """A listen address that does not resolve, or is not this machine's, stops the daemon."""
    if address is None:
        return []
    from parlschedd.daemon.prometheus import cannot_listen  # numpy and prometheus_client: only for a metrics key

    problem = cannot_listen(address)
    return [Finding("metrics", problem)] if problem else []


def _utility(wanted: str) -> list[Finding]:
    """A counter source asked for by name that does not count here (no PMU, perf
    refused): the daemon starts with the next one that does, and says so only in its
    log. Probed as the daemon probes, so only as root, as it runs: another user may be
    refused perf where root is not."""
    if wanted == "auto" or os.geteuid() != 0:
        return []
    skipped: dict[CounterSource, str] = {}
    using = detect_source(wanted, skipped=skipped)
    if using.value.removeprefix("perf:") == wanted:
        return []
    why = "; ".join(f"{source.value}: {reason}" for source, reason in skipped.items())
    return [Finding("utility", f"{wanted} does not count on this host ({why}); parlschedd falls back to {using.value}")]


def _cgroups(cfg: Config) -> list[Finding]:
    """A rule's cgroup that is not there matches nothing until it is (a unit may create
    it later): a warning, never a refusal."""
    found = []
    for i, rule in enumerate(cfg.targets):
        if rule.cgroup is None:
            continue
        controllers, cgroup = split_cgroup(rule.cgroup)
        try:
            where = cgroup_dir(cgroup, controllers)
            missing = "" if where.is_dir() else f"no cgroup {where} on this host (yet)"
        except HostError as exc:
            missing = str(exc)
        if missing:
            found.append(Finding(f"targets[{i}].cgroup", f"{missing}; the rule matches nothing until it exists"))
    return found
