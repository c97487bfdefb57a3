"""A valid config against this host: what parlschedd would refuse to start with here,
and what it would only warn of.

``parlschedd.config`` checks what holds on every host (a key's type and range); what
depends on the machine (its CPUs, groups, addresses, cgroups) is checked here, for
``parlschedctl config check``, which must fail where the daemon would, so that
``config check && systemctl restart parlschedd`` does not restart into a refusal it
can foresee. The daemon's start calls ``refusals`` itself, before it changes anything,
so both say the same in the same words.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from parlschedd.config import Config, socket_path_too_long, split_cgroup
from parlschedd.cpulist import format_cpulist
from parlschedd.daemon.matching import matched
from parlschedd.host.base import CounterSource
from parlschedd.host.cgroups import CGROUP_ROOT, cgroup_dir, hierarchy_dir
from parlschedd.host.errors import HostError
from parlschedd.host.perf import detect_source
from parlschedd.host.privileges import group_id
from parlschedd.host.procfs import PROC_ROOT, comm
from parlschedd.patterns import compile_pattern
from parlschedd.topology import TopologyError, read_topology
from parlschedd.trust import OnPath, fix, trusted_owners, untrusted, untrusted_on_path


class Finding(NamedTuple):
    """One problem under its key path, as ConfigError lists them ("--socket" for the
    daemon's option, "(host)" where no key is to blame)."""

    key: str
    message: str


def one_line(findings: list[Finding], config: str) -> str:
    """``findings`` as the daemon's refusal to start says them: each key path in
    ``config`` (the file's path), the host's fault as it is."""
    where = {"(host)": "", "--socket": "--socket: ", "--state-dir": "--state-dir: "}
    return "; ".join(f"{where.get(key, f'{config}: {key}: ')}{message}" for key, message in findings)


@dataclass
class HostReport:
    """``refused``: the daemon would not start with the config here. ``warnings``: it
    would, but not all of it would be used (CPUs it lacks, cgroups not there yet)."""

    refused: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)


def check_host(cfg: Config) -> HostReport:
    """Check ``cfg`` against this host as the daemon's start does, and more."""
    return HostReport(refusals(cfg), narrowings(cfg) + sweeping_rules(cfg) + _utility(cfg.utility)
                      + metrics_port_taken(cfg.metrics))


def refusals(cfg: Config, socket_path: str | None = None, sysfs: str = "/sys",
             state_dir: str | None = None, euid: int = 0, own_metrics: str | None = None) -> list[Finding]:
    """What stops the daemon from starting with ``cfg`` here: a config file or a state
    dir someone other than root or the daemon's user (``euid``; config check judges for
    a daemon run as root, as it runs) may write, a socket group or path it cannot use
    (``socket_path``: the daemon's --socket, in place of socket.path; ``state_dir``:
    made before the socket), CPUs the host lacks, a metrics address that is not this
    machine's or whose port another program holds (not asked of ``own_metrics``, the
    address a running daemon listens on: a restart frees it, and who holds it is read
    from every process's fds)."""
    found = []
    if problem := config_file_problem(cfg, euid):
        found.append(Finding("(file)", problem))
    if state_dir is not None and (problem := state_dir_problem(state_dir, euid)):
        found.append(Finding("--state-dir", problem))
    try:
        group_id(cfg.socket.group)
    except LookupError as exc:
        found.append(Finding("socket.group", f"{exc}; create it (systemd-sysusers parlsched.sysusers.conf) "
                                             "or set socket.group: null"))
    path = socket_path or cfg.socket.path
    if problem := socket_path_problem(path, state_dir, euid):
        found.append(Finding("socket.path" if path == cfg.socket.path else "--socket", problem))
    try:
        read_topology(sysfs, cpus=cfg.cpus).domains(cfg.domains)
    except TopologyError as exc:  # CPUs this host does not have or may not use
        found.append(Finding(*exc.finding()))
    return found + _metrics(cfg.metrics, held=cfg.metrics != own_metrics)


def config_file_problem(cfg: Config, euid: int = 0) -> str | None:
    """Why a daemon running as ``euid`` must not believe the file ``cfg`` was read from
    (its owner and mode when it was read), or a directory on its path (or a link
    others may replace; as they are now), or None: whoever may write it chooses which
    processes the daemon pins and what it reads. Also a reload's check."""
    return None if cfg.read_from is None else config_file_untrusted(*cfg.read_from, euid=euid)


def config_file_untrusted(path: str, st: os.stat_result, euid: int = 0) -> str | None:
    """``config_file_problem`` of the file at ``path`` as ``st`` (its fstat) shows it:
    the judge ``config.load`` asks before it parses a byte, for the daemon."""
    why = "whoever may write the config chooses which processes parlschedd pins"
    if problem := untrusted(st, trusted_owners(euid)):
        return f"{problem}: {why}; {fix(path, euid)}"
    if on_path := untrusted_on_path(path, trusted_owners(euid)):
        return f"{on_path.said()}: {why}; {_fix(on_path, euid)}"
    return None


def _fix(on_path: OnPath, euid: int) -> str:
    return fix(on_path.path, euid, link=on_path.kind == "link")


def state_dir_problem(path: str, euid: int = 0) -> str | None:
    """Why a daemon running as ``euid`` must not use the state dir at ``path``, or None:
    whoever may write in it forges the original masks the next start puts back on
    threads and the targets it attaches again, or puts a link where the daemon writes.
    A directory on its path (or a link others may replace) that others may write is
    refused the same, whether the state dir is there or not. A state dir not there
    yet is made by the daemon (its own); what is not a directory, or cannot be looked
    at, the daemon's attempt to use it says (``StateFile.lock``)."""
    why = "whoever may write in it chooses the masks parlschedd puts back on threads at its next start"
    if on_path := untrusted_on_path(path, trusted_owners(euid)):
        return f"state dir {path}: {on_path.said()}: {why}; {_fix(on_path, euid)}, or choose another --state-dir"
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or not (problem := untrusted(st, trusted_owners(euid))):
        return None
    return f"state dir {path}: {problem}: {why}; {fix(path, euid)}, or choose another --state-dir"


def socket_path_problem(path: str, state_dir: str | None = None, euid: int = 0) -> str | None:
    """Why the daemon could not make its control socket at ``path``, or None: too long
    for any host; or a directory on its path that someone other than root or the
    daemon's user (``euid``) may write (as the state dir's: they could put a socket of
    their own in its place, which root's parlschedctl would then talk to, or a link
    the daemon's chown would follow); or it would have to make more than the socket's
    own directory (/run/parlsched), not that directory's parents (but for its
    ``state_dir``, made first: a socket dir inside it is fine); or a file other than a
    dead daemon's socket is there, which it does not replace. A path this user may not
    look into is not judged: config check may run as another user than the daemon,
    and the daemon's own attempt to make the socket then says what is wrong."""
    if too_long := socket_path_too_long(path):
        return too_long
    if on_path := untrusted_on_path(path, trusted_owners(euid)):
        return (f"{on_path.said()}: whoever may write there may put a socket of their own in its place and read "
                f"what clients send; {_fix(on_path, euid)}, or choose another socket path")
    folder = Path(path).parent
    try:
        if folder.exists() and not folder.is_dir():
            return f"{folder} is not a directory"
        made_first = state_dir is not None and os.path.abspath(folder.parent) == os.path.abspath(state_dir)
        if not folder.exists() and not folder.parent.is_dir() and not (made_first and folder.parent.parent.is_dir()):
            return f"no directory {folder.parent} (parlschedd makes the socket's own directory, {folder}, not its parents)"
        if os.path.lexists(path) and not stat.S_ISSOCK(os.lstat(path).st_mode):
            return f"{path} exists and is not a socket; parlschedd does not replace it"
    except PermissionError:
        pass
    return None


def narrowings(cfg: Config, sysfs: str = "/sys", cgroup_root: str = CGROUP_ROOT,
               proc_root: str = PROC_ROOT) -> list[Finding]:
    """What the daemon starts without, here: CPUs of ``cpus`` the host lacks, rules'
    cgroups not there yet. Said by config check and logged by the daemon's start."""
    return _cpus(cfg, sysfs) + _cgroups(cfg, cgroup_root, proc_root)


# Names of processes on nearly every Linux host: a rule's name that matches them all
# matches (nearly) everything.
EVERYDAY = ("systemd", "sshd", "bash", "cron", "python3")


def sweeping_rules(cfg: Config, proc_root: str = PROC_ROOT, cgroup_root: str = CGROUP_ROOT) -> list[Finding]:
    """A rule that attaches nearly every process on the host: a name that matches
    EVERYDAY alike ('', '.') where it is not narrowed by a cgroup, a cgroup that is
    a whole hierarchy ('/') where it is not narrowed by a name. Valid, and the
    administrator's choice, but rarely what was meant. And one with descendants
    that matches PID 1 now, whose tree is the host's: the daemon never attaches it
    (rules.RuleMatcher, as any process it runs under)."""
    found = []
    descendants = any(rule.descendants for rule in cfg.targets)
    init = _name_of_init(proc_root) if descendants else None
    for i, rule in enumerate(cfg.targets):
        whole = None if rule.cgroup is None or split_cgroup(rule.cgroup)[1].strip("/") else \
            f"cgroup {rule.cgroup!r} is the whole hierarchy"
        broad = None if rule.name is None or not all(compile_pattern(rule.name).search(n) for n in EVERYDAY) else \
            f"name {rule.name!r} matches {', '.join(EVERYDAY[:-1])} and {EVERYDAY[-1]} alike"
        if (rule.cgroup is None or whole) and (rule.name is None or broad):
            why = " and ".join(w for w in (whole, broad) if w)
            found.append(Finding(f"targets[{i}]", f"{why}: the rule attaches nearly every process on the host; narrow "
                                                  "it (a name such as '^myapp$', or a job's cgroup)"))
        elif rule.descendants and init is not None and matched(rule, proc_root, cgroup_root, among={1}):
            found.append(Finding(f"targets[{i}]", f"matches PID 1 ({init}), which every process descends from: with "
                                                  "descendants it would take in the whole host, and parlschedd leaves "
                                                  "it alone; narrow the rule, or set descendants: false"))
    if descendants and init is None:
        found.append(Finding("(host)", "PID 1 is hidden from this user (/proc mounted with hidepid): whether a rule "
                                       "with descendants matches it is not checked; run config check as root"))
    return found


def _name_of_init(proc_root: str) -> str | None:
    """PID 1's name, or None when this user may not see it."""
    try:
        return comm(1, proc_root)
    except HostError:
        return None


def _cpus(cfg: Config, sysfs: str) -> list[Finding]:
    """Some of ``cpus``, or of an explicit layout's ``domains``, missing only narrows
    what the daemon uses (none usable is a refusal)."""
    try:
        topology = read_topology(sysfs, cpus=cfg.cpus)
        topology.domains(cfg.domains)
    except TopologyError:
        return []
    found = []
    if unusable := topology.unusable():
        found.append(Finding("cpus", f"{format_cpulist(unusable)} not usable on this host (absent or offline); "
                                     f"parlschedd runs on {format_cpulist(topology.usable)}"))
    for i, lost in topology.absent(cfg.domains):
        kept = set(cfg.domains[i]) - set(lost)
        found.append(Finding(f"domains[{i}]", f"{format_cpulist(lost)} not usable on this host (absent or offline); "
                                              + (f"the domain keeps {format_cpulist(kept)}" if kept else
                                                 "the domain is left out")))
    return found


def _metrics(address: str | None, held: bool = True) -> list[Finding]:
    """A listen address that does not resolve, or is not this machine's, or (``held``)
    whose port a program other than a parlschedd listens on now, stops the daemon:
    ``config check && systemctl restart`` restarted into that refusal, config check
    warning of it and exiting 0."""
    if address is None:
        return []
    from parlschedd.daemon.prometheus import cannot_listen, port_taken  # numpy and prometheus_client: only for metrics

    problem = cannot_listen(address)
    if problem is None and held and (taken := port_taken(address)) is not None and taken.seen:
        problem = taken.message
    return [Finding("metrics", problem)] if problem else []


def metrics_port_taken(address: str | None) -> list[Finding]:
    """A metrics port held by a process this user cannot see: a warning, not a
    refusal (it may be a parlschedd's, the running one's own; one held by a program
    seen is a refusal, ``_metrics``)."""
    if address is None:
        return []
    from parlschedd.daemon.prometheus import port_taken

    taken = port_taken(address)
    return [Finding("metrics", taken.message)] if taken and not taken.seen else []


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


def _cgroups(cfg: Config, root: str, proc_root: str) -> list[Finding]:
    """A rule's cgroup that is not there matches nothing until it is (a unit may create
    it later): a warning, never a refusal."""
    found = []
    for i, rule in enumerate(cfg.targets):
        if rule.cgroup is None:
            continue
        controllers, cgroup = split_cgroup(rule.cgroup)
        try:
            where = cgroup_dir(cgroup, controllers, root)
            missing = "" if where.is_dir() else f"no cgroup {where} on this host (yet)"
        except HostError as exc:
            missing = str(exc)
        if missing and (meant := _below_hierarchy(cgroup, root, proc_root)):
            missing += f"; write '{meant}' (the path below the hierarchy), not the directory's path"
        elif missing and (meant := _in_another_hierarchy(cgroup, controllers, root, proc_root)):
            missing += f"; it is in another hierarchy: write '{meant}'"
        if missing:
            found.append(Finding(f"targets[{i}].cgroup", f"{missing}; the rule matches nothing until it exists"))
        elif (root_of := _thread_root(where, controllers, root)) is not None:
            found.append(Finding(f"targets[{i}].cgroup", f"{cgroup} is a threaded cgroup: a rule matches processes, and "
                                                         f"they are in its thread root, '{root_of}'; name that "
                                                         "(the rule matches nothing here)"))
    return found


def _thread_root(where: Path, controllers: tuple[str, ...], root: str) -> str | None:
    """The rule's path of the thread root above ``where``, a v2 threaded cgroup, whose
    processes live there (cgroup.procs of a threaded cgroup cannot be read: a rule on
    it matched nothing, and config check said nothing); None for any other cgroup."""
    if controllers:
        return None
    top, node = hierarchy_dir((), root), where
    while node != top and _cgroup_type(node) == "threaded":
        node = node.parent
    return None if node == where else "/" + str(node.relative_to(top)).removeprefix(".")


def _cgroup_type(cgroup: Path) -> str:
    """A v2 cgroup's type (cgroup.type), "" where it cannot be read (the root has none)."""
    try:
        return (cgroup / "cgroup.type").read_text().strip()
    except OSError:
        return ""


def _below_hierarchy(written: str, root: str, proc_root: str) -> str | None:
    """A rule's cgroup written as its directory in cgroupfs (/sys/fs/cgroup/cpuset/job),
    as a rule names it (cpuset:/job; a v2-only host's directory on a hybrid host: its v2
    path), or None when it was not written so or names no hierarchy of this host."""
    top = root.rstrip("/") + "/"
    if not written.startswith(top) or not (parts := Path(written).relative_to(root).parts):
        return None
    if (Path(root) / "cgroup.controllers").exists():  # v2 alone, at the root
        return "/" + "/".join(parts)
    if not (Path(root) / parts[0]).is_dir():  # no hierarchy of this host: a v2-only host's path, copied
        return "/" + "/".join(parts) if (Path(root) / "unified" / "cgroup.controllers").exists() else None
    return _as_rule_names(parts[0], "/" + "/".join(parts[1:]), proc_root)


def _in_another_hierarchy(cgroup: str, controllers: tuple[str, ...], root: str, proc_root: str) -> str | None:
    """How a rule names ``cgroup`` where it is a directory of another hierarchy than
    the one ``controllers`` name (a hybrid host: the v2 one, or a v1 one such as
    cpuset; a v2-only host: the v2 one, for a rule naming controllers), or None when
    it is in none."""
    base, inside = Path(root), cgroup.strip("/")
    if not base.is_dir():
        return None
    if (base / "cgroup.controllers").exists():  # v2 alone: its one hierarchy, of a rule written for v1
        return "/" + inside if controllers and (base / inside).is_dir() else None
    try:
        mine = hierarchy_dir(controllers, root)
    except HostError:
        mine = None
    for hierarchy in sorted(base.iterdir()):  # not through a link: cpu -> cpu,cpuacct is one hierarchy
        if not hierarchy.is_symlink() and hierarchy != mine and (hierarchy / inside).is_dir():
            return _as_rule_names(hierarchy.name, "/" + inside, proc_root)
    return None


def _as_rule_names(hierarchy: str, below: str, proc_root: str) -> str:
    """How a rule names cgroup ``below`` of the hierarchy mounted at directory
    ``hierarchy`` of the cgroup root: 'unified' (v2 on a hybrid host) by its path,
    a v1 one by its controllers ('cpuset:/job'), a named one as 'name=systemd:/job'."""
    if hierarchy == "unified":
        return below
    try:
        with open(os.path.join(proc_root, "cgroups")) as f:  # the v1 controllers; another hierarchy is a named one
            controllers = {line.split()[0] for line in f if not line.startswith("#")}
    except OSError:
        controllers = set()
    return ",".join(c if c in controllers else f"name={c}" for c in hierarchy.split(",")) + ":" + below
