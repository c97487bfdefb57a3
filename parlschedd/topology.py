"""The machine's CPUs and the domains Level 1 chooses between.

Read from sysfs under an injectable root (tests use fake trees): online CPUs, NUMA
nodes, last-level-cache groups, packages, cores, and the isolated / nohz_full CPUs,
which are left out unless the config names them, because their owners reserved them.
The daemon's own affinity does not narrow them: a service confined to housekeeping CPUs
(systemd's CPUAffinity=, a slice's AllowedCPUs=) still places threads anywhere, and
each target's own cpuset bounds its choices (daemon/cpuset.py). Domains
are groupings of usable CPUs (shared/spec/parlsched.md, "Domains"): ``auto`` takes NUMA
nodes when there are several, else last-level caches, else packages, else one domain;
a grouping of one core each is passed over.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from parlschedd.cpulist import format_cpulist, parse_cpulist

DOMAIN_MODES = ("auto", "numa", "llc", "package")

Groups = tuple[tuple[int, ...], ...]


class TopologyError(ValueError):
    """The topology or a requested domain layout cannot be used; ``key``: the config
    key path to blame (``domains``, ``domains[1]``, ``cpus``)."""

    def __init__(self, message: str, key: str = "domains") -> None:
        super().__init__(message)
        self.key = key

    def of_config(self) -> str:
        """What it says of a config's ``domains`` and ``cpus`` (valid keys that this host
        cannot serve): the daemon's refusal to start and ``config check``'s."""
        return ": ".join(self.finding())

    def finding(self) -> tuple[str, str]:
        """``of_config`` as (key path, message), as config errors are listed."""
        return self.key, str(self)


class NoCpusFound(TopologyError):
    """sysfs shows no online CPU at all: the host's fault (a missing or foreign sysfs),
    not the config's."""

    def of_config(self) -> str:
        """Said as it is: no key of the config is to blame."""
        return str(self)

    def finding(self) -> tuple[str, str]:
        return "(host)", str(self)


@dataclass(frozen=True)
class Topology:
    online: frozenset[int]
    usable: tuple[int, ...]
    numa: Groups
    llc: Groups
    package: Groups
    core: Groups  # SMT siblings
    excluded: frozenset[int]  # isolated or nohz_full, left out of ``usable``
    chosen: frozenset[int] | None = None  # the config's ``cpus``; None: not given

    def domains(self, spec: str | Sequence[Sequence[int]] = "auto") -> list[list[int]]:
        """Domains as lists of usable CPUs, for a mode name or an explicit layout."""
        if not isinstance(spec, str):
            return self._explicit(spec)
        if spec not in DOMAIN_MODES:
            raise TopologyError(f"unknown domains mode {spec!r}; expected one of {', '.join(DOMAIN_MODES)} or a list of CPU lists")
        if spec == "auto":
            for groups in (self.numa, self.llc, self.package):
                domains = self._restrict(groups)
                if len(domains) > 1 and not self._one_core_each(domains):
                    return domains
            return [list(self.usable)]
        return self._restrict(getattr(self, spec)) or [list(self.usable)]

    def unusable(self) -> list[int]:
        """Those of the config's ``cpus`` left out of ``usable`` (absent or offline):
        threads run on the rest."""
        return sorted((self.chosen or frozenset()) - set(self.usable))

    def _one_core_each(self, domains: list[list[int]]) -> bool:
        """Whether every domain is a single core (one CPU, or its SMT siblings), as the
        caches and packages of a guest with a vCPU per socket or of firmware that
        describes no shared cache make them: Level 2 has no core to choose in such a
        domain and Level 1 moves one thread a T_NUMA, so ``auto`` passes them over."""
        core_of = {cpu: i for i, core in enumerate(self.core) for cpu in core}
        return all(len({core_of[cpu] for cpu in domain}) == 1 for domain in domains)

    def _restrict(self, groups: Groups) -> list[list[int]]:
        usable = set(self.usable)
        return [kept for g in groups if (kept := sorted(usable.intersection(g)))]

    def _explicit(self, layout: Sequence[Sequence[int]]) -> list[list[int]]:
        """An explicit layout's domains, each its CPUs online. Those absent or offline
        are left out, as the config's ``cpus`` leaves them (a layout copied from a
        host's node lists outlives SMT turned off or a CPU taken offline; config check
        and the daemon's start say so, ``absent``), and a domain left with none. A CPU
        the rest of the config keeps out (isolated or nohz_full, or outside ``cpus``) is
        refused, online or not: the layout asks for what the config forbids, which a
        CPU coming online would otherwise turn into a refused restart."""
        seen: set[int] = set()
        out = []
        for i, group in enumerate(layout):
            key = f"domains[{i}]"
            cpus = {int(c) for c in group}
            if not cpus:
                raise TopologyError("is empty", key=key)
            if clash := seen.intersection(cpus):
                raise TopologyError(f"repeats CPUs {format_cpulist(clash)} of an earlier domain", key=key)
            seen.update(cpus)
            if barred := self._barred(cpus):
                raise TopologyError(barred, key=key)
            if kept := sorted(cpus & self.online):
                out.append(kept)
        if not out:
            raise TopologyError(f"names no CPU online on this host (online: {format_cpulist(self.online)})")
        return out

    def absent(self, layout: str | Sequence[Sequence[int]]) -> list[tuple[int, list[int]]]:
        """Each domain of an explicit layout that names CPUs absent or offline here, and
        those CPUs, which the daemon leaves out (``_explicit``)."""
        if isinstance(layout, str):
            return []
        return [(i, lost) for i, group in enumerate(layout) if (lost := sorted(set(group) - self.online))]

    def _barred(self, cpus: set[int]) -> str | None:
        """Why CPUs named by a domain are not the daemon's to use, with the fix; None
        when all may be used (online, or not there now). Outside ``cpus`` where it is
        given (which alone opts isolated CPUs in), else isolated or nohz_full."""
        if self.chosen is not None:
            if outside := cpus - self.chosen:
                return (f"names CPUs {format_cpulist(outside)}, outside the config's cpus "
                        f"({format_cpulist(self.chosen)}); add them to cpus, or leave them out here")
        elif reserved := cpus & self.excluded:
            return (f"names CPUs {format_cpulist(reserved)}, isolated or nohz_full on this host: their owners "
                    "reserved them, so only the config's cpus may opt them in; name them in cpus too, or leave them "
                    "out here")
        return None


def read_topology(sysfs: str | os.PathLike[str] = "/sys", cpus: Iterable[int] | None = None) -> Topology:
    """Discover the topology. Usable: every online CPU but the isolated and nohz_full
    ones, or the online ones of the config's ``cpus``, which alone may name those (an
    application reserved them for is what the daemon places there). Not the daemon's
    own affinity: each target's cpuset bounds it (the engine)."""
    base = Path(sysfs) / "devices" / "system"
    online = online_cpus(sysfs)
    if not online:
        raise NoCpusFound(f"no online CPUs found under {base / 'cpu' / 'online'}")
    excluded = _cpulist_file(base / "cpu" / "isolated") | _cpulist_file(base / "cpu" / "nohz_full")
    chosen = None if cpus is None else frozenset(cpus)
    usable = set(online)
    if chosen is None:
        usable -= excluded
    else:
        usable &= chosen
    if not usable:
        raise TopologyError(f"no usable CPUs on this host: online, not isolated and in the config's cpus (online here: "
                            f"{format_cpulist(online)}; set cpus to some of those, or leave it out)", key="cpus")
    return Topology(
        online=online,
        usable=tuple(sorted(usable)),
        numa=_numa_nodes(base / "node", online),
        llc=_groups(base / "cpu", online, _llc_key),
        package=_groups(base / "cpu", online, _package_key),
        core=_groups(base / "cpu", online, _core_key),
        excluded=excluded,
        chosen=chosen,
    )


def online_cpus(sysfs: str | os.PathLike[str] = "/sys") -> frozenset[int]:
    """The CPUs online now: one small read, to notice CPUs plugged in since the
    topology was read."""
    return _cpulist_file(Path(sysfs) / "devices" / "system" / "cpu" / "online")


def _cpulist_file(path: Path) -> frozenset[int]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return frozenset()
    if text.strip() == "(null)":  # nohz_full when the feature is off
        return frozenset()
    return parse_cpulist(text)


def _numa_nodes(node_dir: Path, online: frozenset[int]) -> Groups:
    """The online CPUs of each NUMA node, then those no node lists in a group of their
    own (all of them where sysfs shows no node): left out, they were lost to every
    domain; joined to a node, they would be given a memory locality nothing says they
    have. CPUs without a cache or package key are grouped together the same way."""
    nodes = sorted(node_dir.glob("node[0-9]*"), key=lambda p: int(p.name[4:]))
    groups = [tuple(sorted(_cpulist_file(n / "cpulist") & online)) for n in nodes]
    unlisted = tuple(sorted(online.difference(*groups)))
    return tuple(g for g in [*groups, unlisted] if g)


def _llc_key(cpu_dir: Path) -> frozenset[int] | None:
    """The CPUs sharing this CPU's highest-level data or unified cache."""
    best: tuple[int, frozenset[int]] | None = None
    for index in cpu_dir.glob("cache/index[0-9]*"):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            shared = parse_cpulist((index / "shared_cpu_list").read_text())
        except (FileNotFoundError, ValueError):
            continue
        if kind in ("Unified", "Data") and (best is None or level > best[0]):
            best = (level, shared)
    return None if best is None else best[1]


def _package_key(cpu_dir: Path) -> str | None:
    try:
        return (cpu_dir / "topology" / "physical_package_id").read_text().strip()
    except FileNotFoundError:
        return None


def _core_key(cpu_dir: Path) -> frozenset[int] | str:
    """The CPUs of this CPU's core (its SMT siblings); the CPU alone where sysfs does
    not say, not one core of every CPU that lacks the file."""
    try:
        return parse_cpulist((cpu_dir / "topology" / "thread_siblings_list").read_text())
    except (FileNotFoundError, ValueError):
        return cpu_dir.name


def _groups(cpu_root: Path, online: frozenset[int], key_of: Callable[[Path], Hashable | None]) -> Groups:
    """Partition the online CPUs by a per-CPU key read from sysfs; CPUs without one
    form one group together."""
    groups: dict[Hashable | None, list[int]] = {}
    for cpu in sorted(online):
        groups.setdefault(key_of(cpu_root / f"cpu{cpu}"), []).append(cpu)
    return tuple(sorted(tuple(g) for g in groups.values()))
