"""cgroup membership, member processes and cpusets, for v1, v2 and hybrid hosts.

Mount layout is the systemd one (Documentation/admin-guide/cgroup-v2.rst and
cgroup-v1/): v2 alone at ``<root>``; v1 with one directory per hierarchy under
``<root>`` (``cpuset``, ``cpu,cpuacct`` with ``cpu``/``cpuacct`` symlinks, ``systemd``
for ``name=systemd``); hybrid is v1 plus v2 at ``<root>/unified``. The root is
injectable so tests run on fake trees.

Cgroup paths from the config or from /proc are normalised below the hierarchy's
directory, so ``../`` can never lead a read outside cgroupfs.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from parlschedd.cpulist import parse_cpulist
from parlschedd.host.errors import HostError, translated
from parlschedd.host.procfs import PROC_ROOT

CGROUP_ROOT = "/sys/fs/cgroup"


@dataclass(frozen=True)
class Membership:
    """One line of ``/proc/<id>/cgroup``: ``hierarchy-ID:controller-list:path``.

    The v2 line is ``0::/path`` (empty controller list); a v1 named hierarchy lists
    ``name=<name>`` as its controller.
    """

    hierarchy_id: int
    controllers: tuple[str, ...]
    path: str

    @property
    def is_v2(self) -> bool:
        return self.hierarchy_id == 0 and not self.controllers


def parse_proc_cgroup(text: str) -> list[Membership]:
    """Parse ``/proc/<id>/cgroup``. The path may contain ``:``, so split twice only, and
    any character but a newline (the one cgroup_mkdir refuses), so lines end at ``\n``
    alone: a cgroup named with ``\r`` or ``\x1c``, which str.splitlines() also ends a
    line at, made every reader of its tasks' cpusets raise."""
    result: list[Membership] = []
    for line in text.split("\n"):
        if not line.strip():
            continue
        hid, controllers, path = line.split(":", 2)
        names = tuple(c for c in controllers.split(",") if c)
        result.append(Membership(int(hid), names, path))
    return result


def memberships(task_id: int, proc_root: str = PROC_ROOT) -> list[Membership]:
    """The cgroups of a process or thread: ``/proc/<id>/cgroup`` describes the task the
    id names, so a tid gives that thread's own (v2 threaded, v1 per-task) membership."""
    path = os.path.join(proc_root, str(task_id), "cgroup")
    with translated("read cgroup", tid=task_id):
        return parse_proc_cgroup(os.fsdecode(_read_raw(path)))


def hierarchy_dir(controllers: tuple[str, ...], root: str = CGROUP_ROOT) -> Path:
    """Directory of the hierarchy holding ``controllers``; ``()`` is the v2 hierarchy.

    Raises HostError when no such hierarchy is mounted.
    """
    base = Path(root)
    if not controllers:
        candidates = [base, base / "unified"]
        found = [c for c in candidates if (c / "cgroup.controllers").exists()]
    else:
        names = [",".join(controllers), *controllers]
        found = [base / n.removeprefix("name=") for n in names if (base / n.removeprefix("name=")).is_dir()]
    if not found:
        raise HostError(f"no cgroup hierarchy for {','.join(controllers) or 'v2'} under {root}")
    return found[0]


def cgroup_dir(path: str, controllers: tuple[str, ...] = (), root: str = CGROUP_ROOT) -> Path:
    """Directory of cgroup ``path`` in the hierarchy of ``controllers``, kept below it.
    HostError for a path above the root of the daemon's cgroup namespace, as /proc
    shows a process outside it (``0::/../../system.slice/db.service``,
    cgroup_namespaces(7): a container's daemon): no directory here is its cgroup, and
    with the ``..`` dropped it named another cgroup of the same name inside."""
    below = os.path.normpath(path.lstrip("/") or ".")
    if below == ".." or below.startswith("../"):
        raise HostError(f"cgroup {path} is outside the daemon's cgroup namespace")
    return hierarchy_dir(controllers, root) / os.path.normpath("/" + path).lstrip("/")


def cgroup_procs(path: str, controllers: tuple[str, ...] = (), root: str = CGROUP_ROOT) -> list[int]:
    """Processes in cgroup ``path`` and in the cgroups below it, ascending.

    Below it too: a slice's processes live in its units' cgroups, and cgroup v2 puts
    none in an inner cgroup that has controllers enabled, so a rule on
    ``/system.slice`` or a job's parent cgroup would otherwise match nothing. A cgroup
    that does not exist (yet, or any more: units come and go) has no processes, so
    this returns an empty list rather than failing, and one removed during the walk
    (ENOENT, or ENODEV once its file was opened) is skipped. A v2 threaded cgroup's
    cgroup.procs cannot be read (EOPNOTSUPP): its processes are listed in the domain
    cgroup above it, its thread root, and it is skipped.
    """
    pids: set[int] = set()
    for where, _, files in os.walk(cgroup_dir(path, controllers, root)):
        if "cgroup.procs" not in files:
            continue
        with translated("read cgroup.procs"):
            try:
                text = _read_raw(os.path.join(where, "cgroup.procs")).decode()
            except FileNotFoundError:
                continue  # removed while walking
            except OSError as exc:
                if exc.errno not in (errno.ENODEV, errno.EOPNOTSUPP):
                    raise
                continue  # ENODEV: removed after its file was opened; EOPNOTSUPP: a threaded cgroup, its processes its thread root's
        pids.update(int(v) for v in text.split())
    return sorted(pids)


def cpus_file(path: str, controllers: tuple[str, ...] = (), root: str = CGROUP_ROOT) -> Path | None:
    """The file that holds the CPUs cpuset grants cgroup ``path``, None when no cpuset applies.

    v2: ``cpuset.cpus.effective`` exists only where the cpuset controller is enabled,
    and a cgroup without it gets its parent's CPUs, so the nearest ancestor's file is
    used. v1 (``controllers`` naming cpuset): ``cpuset.effective_cpus`` (Linux 4.x),
    else ``cpuset.cpus``.
    """
    top = hierarchy_dir(controllers, root)
    node = cgroup_dir(path, controllers, root)
    names = ("cpuset.effective_cpus", "cpuset.cpus") if controllers else ("cpuset.cpus.effective",)
    while True:
        for name in names:
            if (node / name).exists():
                return node / name
        if node == top:
            return None
        node = node.parent


def _read_cpus(file: Path) -> frozenset[int]:
    """A cpuset file's CPUs. One that vanished (its cgroup removed, the controller
    disabled since the walk found it) is a plain HostError: the thread lives on."""
    with translated(f"read {file.name}", overrides={errno.ENOENT: HostError}):
        return parse_cpulist(_read_raw(file).decode())


def task_cpus(task_id: int, root: str = CGROUP_ROOT, proc_root: str = PROC_ROOT) -> frozenset[int] | None:
    """The CPUs a process or thread may use by its cpuset, or None when unrestricted."""
    found = _task_cpus_file(memberships(task_id, proc_root), root, task_id)
    return None if found is None else _read_cpus(found)


def _task_cpus_file(lines: list[Membership], root: str, tid: int | None = None) -> Path | None:
    """A v1 cpuset hierarchy wins when mounted (on hybrid hosts cpuset is a v1
    controller); otherwise the v2 cgroup decides."""
    with translated("find cpuset", tid=tid):  # a path too long for the kernel: an OSError from exists()
        for m in lines:
            if "cpuset" in m.controllers:
                return cpus_file(m.path, m.controllers, root)
        for m in lines:
            if m.is_v2:
                return cpus_file(m.path, (), root)
        return None


class CpusetReader:
    """:func:`task_cpus` for the daemon's checks of each target every rescan_s: the
    file a process's CPUs come from is looked for again only when its /proc cgroup
    file changes (it moved), when the file is gone, or every ``REFIND_EVERY`` checks
    (cgroup v2: the cpuset controller enabled on a nearer ancestor, as systemd's
    AllowedCPUs= does, gives it a nearer file without a move); the other checks are
    two small reads, not a walk of the hierarchy (42 against 233 us: 5 us of each
    thread's period at 16 threads). Remembers the last ``KEPT`` processes asked about,
    and forgets those gone when asked about one it does not know (an attach): a daemon
    attaching a process per job kept a KB for each exited one (a review)."""

    KEPT = 1024
    REFIND_EVERY = 10

    def __init__(self, root: str = CGROUP_ROOT, proc_root: str = PROC_ROOT) -> None:
        self.root, self.proc_root = root, proc_root
        self._files: dict[int, tuple[bytes, Path | None, int]] = {}  # pid: (/proc cgroup, file, checks left)

    def __call__(self, pid: int) -> frozenset[int] | None:
        with translated("read cgroup", pid=pid):
            raw = _read_raw(f"{self.proc_root}/{pid}/cgroup")
        known = self._files.pop(pid, None)
        if known is None:
            self._files = {p: f for p, f in self._files.items() if os.path.exists(f"{self.proc_root}/{p}")}
        if known is not None and known[0] == raw and known[2] > 0:
            found, left = known[1], known[2] - 1
        else:
            found, left = self._find(raw), self.REFIND_EVERY
        self._files[pid] = (raw, found, left)
        while len(self._files) > self.KEPT:
            del self._files[next(iter(self._files))]
        if found is None:
            return None
        with translated("read cpuset", pid=pid):
            try:
                text = _read_raw(found)
            except FileNotFoundError:  # the controller left that cgroup: look again
                found = self._find(raw)
                self._files[pid] = (raw, found, self.REFIND_EVERY)
                if found is None:
                    return None
                text = _read_raw(found)
        return parse_cpulist(text.decode())

    def _find(self, raw: bytes) -> Path | None:
        return _task_cpus_file(parse_proc_cgroup(os.fsdecode(raw)), self.root)


def _read_raw(path: str | Path) -> bytes:
    """A small kernel file whole, without the text layer (a third of the cost)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
