"""What the daemon refuses to start with on this host, on real files, sockets and the
real sysfs (a fake one where sysfs shows no CPU at all), and a real daemon saying it in
config check's words before it makes anything."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from parlschedd.__main__ import REFUSED
from parlschedd.config import from_mapping, load
from parlschedd.daemon.prometheus import port_taken
from parlschedd.host import procfs
from parlschedd.hostcheck import (Finding, check_host, config_file_problem, narrowings, one_line, refusals,
                                  socket_path_problem, state_dir_problem, sweeping_rules)
from tests.conftest import CGROUP_MOUNTS, NOBODY, fake_cpus, in_child_as, needs_root, own_cgroup, refused_start, start_daemon, wait_for
from tests.test_topology import fake_sysfs

GROUP_ADVICE = "create it (systemd-sysusers parlsched.sysusers.conf) or set socket.group: null"


def test_a_socket_path_the_daemon_can_use(tmp_path):
    """Its own directory may be missing (the daemon makes it), and a dead daemon's
    socket may be there (the daemon replaces it)."""
    assert socket_path_problem(str(tmp_path / "d.sock")) is None
    assert socket_path_problem(str(tmp_path / "run" / "d.sock")) is None
    dead = tmp_path / "dead.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(dead))
    assert dead.exists() and socket_path_problem(str(dead)) is None


def test_socket_paths_the_daemon_cannot_use(tmp_path):
    (tmp_path / "a-file").write_text("keep me\n")
    long = str(tmp_path / ("s" * 120))
    assert socket_path_problem(long) == f"{len(long)} bytes, a Unix socket's path holds at most 107"
    assert socket_path_problem(str(tmp_path / "a-file")) == f"{tmp_path / 'a-file'} exists and is not a socket; " \
                                                            "parlschedd does not replace it"
    assert socket_path_problem(str(tmp_path / "a-file" / "d.sock")) == f"{tmp_path / 'a-file'} is not a directory"
    assert socket_path_problem(str(tmp_path / "typo" / "run" / "d.sock")) == (
        f"no directory {tmp_path / 'typo'} (parlschedd makes the socket's own directory, {tmp_path / 'typo' / 'run'}, "
        "not its parents)")
    assert not (tmp_path / "typo").exists() and (tmp_path / "a-file").read_text() == "keep me\n"


@needs_root
def test_a_socket_in_a_directory_others_may_write_is_refused(tmp_path):
    """--socket in a user's directory was taken: that user could remove the socket and
    put a listener of their own there (root's parlschedctl then talked to it, sending it
    its requests), and the daemon's chmod and chown by the socket's path would follow a
    link put there meanwhile. Refused as a state dir others may write is, before
    anything is made; a sticky directory of root's (/tmp) is fine."""
    users = _made(tmp_path / "users", 0o755, NOBODY)
    said = socket_path_problem(str(users / "d.sock"))
    assert said == (f"directory {users} on its path: {NOT_ROOTS}: whoever may write "
                    f"there may put a socket of their own in its place and read what clients send; chown root: {users} "
                    "&& chmod go-w " + f"{users}, or choose another socket path")
    config = tmp_path / "cfg.yaml"
    config.write_text("period_s: 0.05\n")
    proc = refused_start(config, users / "d.sock", tmp_path / "state")
    assert (proc.returncode, proc.stderr) == (REFUSED, f"parlschedd: --socket: {said}\n")
    assert list(users.iterdir()) == [] and not (tmp_path / "state").exists()
    assert socket_path_problem(str(_made(tmp_path / "sticky", 0o1777) / "d.sock")) is None


def test_a_socket_dir_inside_the_state_dir_the_daemon_makes_first(tmp_path):
    """--state-dir run and --socket run/sock.d/ctl.sock: the daemon makes run (the state
    dir) before the socket's own directory, so this is no missing parent; its start
    refused it for a while."""
    sock = str(tmp_path / "run" / "sock.d" / "ctl.sock")
    assert socket_path_problem(sock).startswith(f"no directory {tmp_path / 'run'} ")
    assert socket_path_problem(sock, state_dir=str(tmp_path / "run")) is None
    assert socket_path_problem(str(tmp_path / "a" / "run" / "sock.d" / "ctl.sock"),
                               state_dir=str(tmp_path / "a" / "run")).startswith("no directory")  # nor its parents


def test_refusals_under_their_keys_and_the_socket_option(tmp_path):
    """Every refusal at once, in the order the daemon would meet them; the socket path
    the daemon was given by --socket is judged in place of socket.path."""
    cfg = from_mapping({"socket": {"group": "no-such-group-here", "path": str(tmp_path / "typo" / "run" / "d.sock")},
                        "cpus": [4095], "metrics": "192.0.2.1:9177"})
    found = refusals(cfg)
    assert [f.key for f in found] == ["socket.group", "socket.path", "cpus", "metrics"]
    assert found[0].message == f"no group 'no-such-group-here' on this host; {GROUP_ADVICE}"
    assert found[2].message.startswith("no usable CPUs") and "192.0.2.1" in found[3].message
    (tmp_path / "a-file").write_text("")
    by_option = refusals(cfg, socket_path=str(tmp_path / "a-file"))
    assert by_option[1] == Finding("--socket", f"{tmp_path / 'a-file'} exists and is not a socket; "
                                               "parlschedd does not replace it")
    assert refusals(from_mapping({"socket": {"path": str(tmp_path / "d.sock")}})) == []


def test_a_sysfs_without_cpus_is_the_hosts_fault(tmp_path):
    """No key of the config is to blame (a missing or foreign sysfs): said without one."""
    sysfs = tmp_path / "sys"
    fake_cpus(sysfs, possible="0-1", online="")
    found = refusals(from_mapping({"socket": {"path": str(tmp_path / "d.sock")}}), sysfs=str(sysfs))
    assert [f.key for f in found] == ["(host)"]
    assert one_line(found, "/etc/parlsched/parlschedd.yaml") == found[0].message


def test_one_line_names_the_file_for_config_keys_only():
    found = [Finding("socket.group", "no group 'x' on this host"), Finding("--socket", "/x exists and is not a socket")]
    assert one_line(found, "/etc/p.yaml") == "/etc/p.yaml: socket.group: no group 'x' on this host; " \
                                            "--socket: /x exists and is not a socket"


def test_a_layouts_cpus_offline_are_said_per_domain(tmp_path):
    """An explicit layout's CPUs absent or offline are left out (topology.py), and said
    as the config's cpus are: each domain's, and what it keeps."""
    root = fake_sysfs(tmp_path, ["0-3", "4-7"], ["0-7"] * 8, [0] * 8)
    (root / "devices/system/cpu/online").write_text("0-2,4\n")
    cfg = from_mapping({"domains": ["0-3", "4-7", "8-9"]})
    assert narrowings(cfg, sysfs=str(root), cgroup_root=str(tmp_path), proc_root=str(tmp_path)) == [
        Finding("domains[0]", "3 not usable on this host (absent or offline); the domain keeps 0-2"),
        Finding("domains[1]", "5-7 not usable on this host (absent or offline); the domain keeps 4"),
        Finding("domains[2]", "8-9 not usable on this host (absent or offline); the domain is left out")]
    assert narrowings(from_mapping({"domains": "numa"}), sysfs=str(root), cgroup_root=str(tmp_path),
                      proc_root=str(tmp_path)) == []


def test_check_host_adds_what_only_narrows_the_daemon(tmp_path):
    """A missing CPU of several and a rule's cgroup not there yet are warnings, not refusals."""
    cfg = from_mapping({"socket": {"path": str(tmp_path / "d.sock")}, "cpus": [0, 4095],
                        "targets": [{"cgroup": "/no-such-cgroup-here"}]})
    report = check_host(cfg)
    assert report.refused == []
    assert [f.key for f in report.warnings] == ["cpus", "targets[0].cgroup"]
    assert report.warnings[0].message.startswith("4095 not usable on this host")



@needs_root
@pytest.mark.parametrize("mount, prefix", CGROUP_MOUNTS, ids=["v2", "v1 cpuset"])
def test_a_rules_cgroup_written_as_its_sysfs_path_is_told_how_to_write_it(mount, prefix):
    """An administrator copies a cgroup's directory, /sys/fs/cgroup/unified/job or
    /sys/fs/cgroup/cpuset/job, into a rule: the rule looks for that path below the
    hierarchy and matches nothing. The warning said only "no cgroup
    /sys/fs/cgroup/unified/sys/fs/cgroup/unified/job on this host (yet)"; it says
    how to write the cgroup that is there."""
    with own_cgroup(mount) as group:
        report = check_host(from_mapping({"targets": [{"cgroup": str(group)}]}))
        [warning] = report.warnings
        assert warning.key == "targets[0].cgroup"
        assert f"write '{prefix}/{group.name}' (the path below the hierarchy)" in warning.message, warning

@needs_root
def test_a_rule_on_a_threaded_cgroup_is_told_its_thread_root():
    """A rule naming a cgroup v2 threaded cgroup (a process's threads moved there, the
    process in its thread root above) matched nothing, and config check said nothing
    (a review): a threaded cgroup's cgroup.procs cannot be read. It is told to name
    the thread root, two threaded levels up too; a real cgroup v2 hierarchy."""
    with own_cgroup("/sys/fs/cgroup/unified") as group:
        inner = group / "threads"
        inner.mkdir()
        try:
            (inner / "cgroup.type").write_text("threaded")
            deeper = inner / "deeper"
            deeper.mkdir()
            try:
                (deeper / "cgroup.type").write_text("threaded")
                rules = [{"cgroup": f"/{group.name}/threads"}, {"cgroup": f"/{group.name}/threads/deeper"},
                         {"cgroup": f"/{group.name}"}]
                report = check_host(from_mapping({"targets": rules}))
                said = {f.key: f.message for f in report.warnings}
                for i in (0, 1):
                    assert said[f"targets[{i}].cgroup"] == (
                        f"{rules[i]['cgroup']} is a threaded cgroup: a rule matches processes, and they are in its "
                        f"thread root, '/{group.name}'; name that (the rule matches nothing here)"), said
                assert "targets[2].cgroup" not in said, said
            finally:
                deeper.rmdir()
        finally:
            inner.rmdir()


def test_a_v2_only_hosts_sysfs_path_on_a_hybrid_host_is_not_taken_for_a_hierarchy(tmp_path):
    """/sys/fs/cgroup/system.slice/x.service, a cgroup's directory on a v2-only host,
    written in a rule on a hybrid one (a fake tree here): its first part is no
    hierarchy of this host, and the warning told to write 'name=system.slice:/x.service',
    a named v1 hierarchy that does not exist. It is the v2 path below the unified
    hierarchy."""
    from parlschedd.hostcheck import narrowings

    for hierarchy in ("cpuset", "cpu,cpuacct", "systemd", "unified"):
        (tmp_path / hierarchy).mkdir()
    (tmp_path / "unified" / "cgroup.controllers").write_text("")
    cfg = from_mapping({"targets": [{"cgroup": f"{tmp_path}/system.slice/x.service"},
                                    {"cgroup": f"{tmp_path}/cpuset/job"}]})
    said = [f.message for f in narrowings(cfg, cgroup_root=str(tmp_path)) if f.key.startswith("targets")]
    assert "write '/system.slice/x.service' (the path below the hierarchy)" in said[0], said
    assert "name=" not in said[0]
    assert "write 'cpuset:/job' (the path below the hierarchy)" in said[1], said


def test_a_hierarchy_is_named_by_the_controllers_the_given_proc_lists(tmp_path):
    """A v1 hierarchy is named by its controllers as /proc/cgroups lists them, and one
    that names none by 'name=': read from the /proc given (a fake one here, listing
    perf_event alone, so that its cpuset is a named hierarchy), not the host's."""
    from parlschedd.hostcheck import narrowings

    root, proc = tmp_path / "cgroup", tmp_path / "proc"
    for hierarchy in ("perf_event", "cpuset"):
        (root / hierarchy).mkdir(parents=True)
    proc.mkdir()
    (proc / "cgroups").write_text("#subsys_name\thierarchy\tnum_cgroups\tenabled\nperf_event\t3\t1\t1\n")
    cfg = from_mapping({"targets": [{"cgroup": f"{root}/perf_event/job"}, {"cgroup": f"{root}/cpuset/job"}]})
    said = [f.message for f in narrowings(cfg, cgroup_root=str(root), proc_root=str(proc)) if f.key.startswith("targets")]
    assert "write 'perf_event:/job' (the path below the hierarchy)" in said[0], said
    assert "write 'name=cpuset:/job' (the path below the hierarchy)" in said[1], said


def test_a_v1_rule_on_a_v2_only_host_is_told_its_v2_path(tmp_path):
    """A rule written for a v1 host (cpuset:/job) on a v2-only one (a fake tree here),
    where /job is there: the warning said only "no cgroup hierarchy for cpuset", though
    config check names the other hierarchy on a hybrid host."""
    from parlschedd.hostcheck import narrowings

    (tmp_path / "cgroup.controllers").write_text("cpuset cpu\n")
    (tmp_path / "job").mkdir()
    cfg = from_mapping({"targets": [{"cgroup": "cpuset:/job"}, {"cgroup": "cpuset:/nojob"}]})
    said = [f.message for f in narrowings(cfg, cgroup_root=str(tmp_path)) if f.key.startswith("targets")]
    assert "no cgroup hierarchy for cpuset" in said[0] and "it is in another hierarchy: write '/job'" in said[0], said
    assert "another hierarchy" not in said[1], said


@needs_root
def test_a_metrics_port_another_program_holds_is_a_refusal(tmp_path):
    """config check passed a metrics port another program listened on, and the daemon
    it vouched for refused to start ("Address already in use"); then it warned, naming
    the holder, and still exited 0, so ``config check && systemctl restart`` restarted
    into the refusal. A holder seen is a refusal, one hidden from the user a warning (it
    may be the running parlschedd); a running parlschedd's own listener is neither (a
    restart frees it)."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        report = check_host(from_mapping({"socket": {"path": str(tmp_path / "d.sock")}, "metrics": f"127.0.0.1:{port}"}))
        assert report.warnings == [] and [f.key for f in report.refused] == ["metrics"]
        assert report.refused[0].message == (f"port {port} on 127.0.0.1 is in use by pid {os.getpid()} "
                                             f"({psutil.Process().name()}): parlschedd cannot listen there while it "
                                             "is; stop it, or choose another port")

        # a running daemon's own address is not asked after (a restart frees it; who holds
        # a port is read from every process's fds, at each reload that left a key pending)
        held = from_mapping({"metrics": f"127.0.0.1:{port}", "socket": {"path": str(tmp_path / "d.sock")}})
        assert [f.key for f in refusals(held)] == ["metrics"]
        assert refusals(held, own_metrics=f"127.0.0.1:{port}") == []

        def asked_as_nobody() -> str | None:
            other.close()  # the forked child's copy: the socket is root's, this test's, alone
            taken = port_taken(f"127.0.0.1:{port}")
            return None if taken is None or taken.seen else taken.message

        as_nobody = in_child_as(NOBODY, asked_as_nobody)  # root's socket: its owner is hidden from nobody
        assert as_nobody.startswith(f"port {port} on 127.0.0.1 is in use by a process this user cannot see"), as_nobody
        assert as_nobody.endswith(": run config check as root to know"), as_nobody
        # root in a PID namespace of its own, with its own /proc: this test's socket is of
        # no process it sees (a container's root told to run as root to know)
        inside = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
                                 f"from parlschedd.daemon.prometheus import port_taken; print(*port_taken('127.0.0.1:{port}'))"],
                                capture_output=True, text=True, timeout=60)
        assert inside.stdout == (f"port {port} on 127.0.0.1 is in use by a process /proc does not show (another PID "
                                 "namespace's, or the kernel's) (the running parlschedd's own is no problem; another's "
                                 "would stop it from starting) False\n"), inside.stdout + inside.stderr  # a warning
    d = start_daemon(tmp_path, f"period_s: 0.05\nmetrics: 127.0.0.1:{port}\n")
    try:
        wait_for(lambda: "metrics listening" in d.log_text())
        report = check_host(from_mapping({"socket": {"path": str(tmp_path / "d.sock")}, "metrics": f"127.0.0.1:{port}"}))
        assert report.warnings == [] and report.refused == []
    finally:
        d.stop()


@needs_root
def test_the_daemon_makes_its_state_dir_before_a_socket_dir_inside_it(tmp_path):
    run = tmp_path / "run"
    (tmp_path / "cfg.yaml").write_text("period_s: 0.05\n")
    proc = subprocess.Popen([sys.executable, "-m", "parlschedd", "--config", str(tmp_path / "cfg.yaml"),
                             "--socket", str(run / "sock.d" / "ctl.sock"), "--state-dir", str(run)],
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (run / "sock.d" / "ctl.sock").exists() or proc.poll() is not None, timeout=15)
        assert proc.poll() is None, proc.stderr.read()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@needs_root
@pytest.mark.parametrize("config, said", [
    ("metrics: 192.0.2.1:9177\n", "metrics: cannot listen on 192.0.2.1: Cannot assign requested address"),
    ("cpus: [4095]\nsocket: {group: no-such-group-here}\n",
     f"socket.group: no group 'no-such-group-here' on this host; {GROUP_ADVICE}; {{config}}: cpus: no usable"),
])
def test_the_daemon_refuses_in_config_checks_words_before_it_makes_anything(tmp_path, config, said):
    """The daemon's start and ``config check`` said the same in other words, and could
    drift; a metrics address not this machine's was found only after the state dir
    was made and locked. Now it asks the same function first."""
    path = tmp_path / "cfg.yaml"
    path.write_text(config)
    run = tmp_path / "run"
    proc = refused_start(path, run / "d.sock", run / "state")
    assert proc.returncode == REFUSED and proc.stderr.startswith(f"parlschedd: {path}: "), proc.stderr
    assert said.format(config=path) in proc.stderr and "Traceback" not in proc.stderr
    check = subprocess.run([sys.executable, "-m", "parlschedctl", "config", "check", str(path)],
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 1 and said.split("; {config}")[0] in check.stderr
    assert not run.exists()


def _made(path: Path, mode: int, owner: int = 0, text: str | None = None) -> Path:
    """A directory (or, with ``text``, a file) at ``path`` with this mode and owner."""
    if text is None:
        path.mkdir()
    else:
        path.write_text(text)
    path.chmod(mode)
    os.chown(path, owner, owner)
    return path


NOT_ROOTS = "owned by uid 65534 (nobody), not by root"
CONFIG_WHY = "whoever may write the config chooses which processes parlschedd pins"
STATE_WHY = "whoever may write in it chooses the masks parlschedd puts back on threads at its next start"


@needs_root
@pytest.mark.parametrize("mode, owner, wrong", [
    (0o755, NOBODY, NOT_ROOTS),
    (0o1777, 0, "mode 1777, writable by its group and others"),
    (0o775, 0, "mode 0775, writable by its group"),
    (0o757, NOBODY, f"{NOT_ROOTS}; mode 0757, writable by others"),
])
def test_a_state_dir_someone_else_may_write_is_refused_saying_what_to_do(tmp_path, mode, owner, wrong):
    run = _made(tmp_path / "run", mode, owner)
    said = f"state dir {run}: {wrong}: {STATE_WHY}; chown root: {run} && chmod go-w {run}, or choose another --state-dir"
    assert state_dir_problem(str(run)) == said
    assert refusals(from_mapping({"socket": {"path": str(tmp_path / "d.sock")}}), state_dir=str(run)) == \
        [Finding("--state-dir", said)]
    assert one_line([Finding("--state-dir", said)], "/etc/p.yaml") == f"--state-dir: {said}"


@needs_root
def test_the_advice_names_the_daemons_own_user_and_quotes_the_path(tmp_path):
    """It said chown root: for a daemon run as its own user, which would then find its
    state dir unwritable, and gave a path with a space unquoted."""
    run = _made(tmp_path / "state dir", 0o777, NOBODY)
    said = state_dir_problem(str(run), euid=NOBODY)
    assert said.endswith(f"; chown nobody: '{run}' && chmod go-w '{run}', or choose another --state-dir"), said


@needs_root
def test_a_state_dir_of_root_or_of_the_daemons_own_user_is_used(tmp_path):
    """pytest's own (root's, 0700), one the daemon makes, and for a daemon run as nobody
    with capabilities, nobody's; but not nobody's for root's daemon."""
    assert state_dir_problem(str(tmp_path)) is None
    assert state_dir_problem(str(tmp_path / "not-there-yet")) is None
    own = _made(tmp_path / "own", 0o755, NOBODY)
    assert state_dir_problem(str(own), euid=NOBODY) is None
    assert state_dir_problem(str(own)).startswith(f"state dir {own}: {NOT_ROOTS}: ")
    assert state_dir_problem(str(_made(tmp_path / "shared", 0o1777, NOBODY)), euid=NOBODY) is not None


@needs_root
def test_a_config_file_someone_else_may_write_is_refused_as_it_was_read(tmp_path):
    """Its owner and mode when it was read are judged (the daemon judges what it read,
    not what the path names later); root's daemon trusts root's file alone, one run as
    nobody its own too; a config not read from a file is not judged."""
    path = _made(tmp_path / "cfg.yaml", 0o666, NOBODY, text="period_s: 0.05\n")
    cfg = load(path)
    said = f"{NOT_ROOTS}; mode 0666, writable by its group and others: {CONFIG_WHY}; chown root: {path} && chmod go-w {path}"
    assert config_file_problem(cfg) == said
    assert config_file_problem(cfg, euid=NOBODY).startswith("mode 0666, writable by its group and others: ")
    assert refusals(cfg)[0] == Finding("(file)", said)
    assert one_line([Finding("(file)", said)], str(path)) == f"{path}: (file): {said}"
    os.chown(path, 0, 0)
    path.chmod(0o644)
    assert config_file_problem(cfg) == said and config_file_problem(load(path)) is None
    os.chown(path, NOBODY, NOBODY)
    assert config_file_problem(load(path), euid=NOBODY) is None
    assert config_file_problem(from_mapping({})) is None


@needs_root
def test_config_check_says_the_files_mode_beside_its_content_errors(tmp_path):
    """A file others may write, with an error inside: config check named the error
    alone, parlschedd the mode alone (it judges the file before it reads a byte), and
    the admin fixed the file in two rounds."""
    path = tmp_path / "cfg.yaml"
    path.write_text("period_s: 0.1\nperiod_s: 0.2\n")
    path.chmod(0o666)
    check = subprocess.run([sys.executable, "-m", "parlschedctl", "config", "check", str(path)],
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 1, check.stderr
    assert "'period_s' is given twice" in check.stderr, check.stderr
    assert f"{path}: (file): mode 0666, writable by its group and others" in check.stderr, check.stderr
    refused = refused_start(path, tmp_path / "s.sock", tmp_path / "state")
    assert refused.returncode == REFUSED and "mode 0666, writable by its group and others" in refused.stderr


@needs_root
def test_config_check_judges_the_file_for_a_daemon_run_as_root_whoever_runs_it(open_dir):
    """config check may run as another user than the daemon: it judges as for root's
    daemon, so nobody's own file is refused here too, and root's is fine."""
    path = _made(open_dir / "cfg.yaml", 0o644, NOBODY, text="period_s: 0.05\n")

    def refused() -> list[list[str]]:
        return [list(f) for f in check_host(load(path)).refused]

    said = f"{NOT_ROOTS}: {CONFIG_WHY}; chown root: {path} && chmod go-w {path}"
    assert in_child_as(NOBODY, refused) == [["(file)", said]]
    os.chown(path, 0, 0)
    assert in_child_as(NOBODY, refused) == []


@needs_root
@pytest.mark.parametrize("what", ["config", "state dir"])
def test_the_daemon_refuses_a_config_or_state_dir_others_may_write_before_it_makes_anything(tmp_path, what):
    """A config anyone may write passed silently; a state dir anyone may write (here
    holding a forged state file) was used, its forgery believed. Now the start is
    refused in one line, config check's words for the config, and nothing is made
    or read: no socket dir, no lock, the forged file as it was."""
    config = tmp_path / "cfg.yaml"
    config.write_text("period_s: 0.05\n")
    run, state = tmp_path / "run", tmp_path / "run" / "state"
    if what == "config":
        _made(tmp_path / "nobodys.yaml", 0o666, NOBODY, text="period_s: 0.05\n").rename(config)
        said = f"{config}: (file): {NOT_ROOTS}; mode 0666, writable by its group and others: {CONFIG_WHY}; " \
               f"chown root: {config} && chmod go-w {config}"
    else:
        state = _made(tmp_path / "shared", 0o1777)
        (state / "state.json").write_text(json.dumps({"version": 1, "targets": [{"pid": 1}]}))
        said = f"--state-dir: state dir {state}: mode 1777, writable by its group and others: {STATE_WHY}; " \
               f"chown root: {state} && chmod go-w {state}, or choose another --state-dir"
    proc = refused_start(config, run / "d.sock", state)
    assert (proc.returncode, proc.stderr) == (REFUSED, f"parlschedd: {said}\n")
    assert not run.exists()
    if what == "state dir":
        assert [p.name for p in state.iterdir()] == ["state.json"]
        assert json.loads((state / "state.json").read_text()) == {"version": 1, "targets": [{"pid": 1}]}
    check = subprocess.run([sys.executable, "-m", "parlschedctl", "config", "check", str(config)],
                           capture_output=True, text=True, timeout=30)
    if what == "config":
        assert check.returncode == 1 and f"{said}; parlschedd refuses to start with it here\n" in check.stderr
    else:  # --state-dir is the daemon's option, not the config's: config check cannot know it
        assert check.returncode == 0, check.stderr


def _on_path(where: Path, wrong: str, why: str, kind: str = "directory") -> str:
    """What a refusal says of a directory (or a link) on a path the daemon would follow."""
    fixed = f"chown -h root: {where}" if kind == "link" else f"chown root: {where} && chmod go-w {where}"
    return f"{kind} {where} on its path: {wrong}: {why}; {fixed}"


@needs_root
@pytest.mark.parametrize("mode, owner, wrong", [
    (0o755, NOBODY, NOT_ROOTS),
    (0o777, 0, "mode 0777, writable by its group and others"),
])
def test_a_root_config_in_a_directory_someone_else_may_write_is_refused_naming_it(open_dir, mode, owner, wrong):
    """A root-owned 0644 config in a directory nobody owns (or anyone may write) passed:
    nobody could then put a link to /etc/shadow in its place and the daemon read it.
    The directory is named, before the link and after it. (open_dir: nobody can reach
    it, as pytest's 0700 tmp dirs not.)"""
    tmp_path = open_dir
    d = _made(tmp_path / "d", mode, owner)
    path = _made(d / "c.yaml", 0o644, text="period_s: 0.05\n")
    said = _on_path(d, wrong, CONFIG_WHY)
    assert config_file_problem(load(path)) == said
    secret = _made(tmp_path / "secret.yaml", 0o600, text="period_s: 0.04\n")

    def swap() -> None:
        os.replace(os.fspath(_link(d / "new", secret)), d / "c.yaml")

    in_child_as(NOBODY, swap)
    assert (d / "c.yaml").is_symlink() and load(path).period_s == 0.04 and config_file_problem(load(path)) == said


def _link(at: Path, to: Path) -> Path:
    os.symlink(to, at)
    return at


@needs_root
def test_a_config_behind_a_link_into_a_directory_others_may_write_is_refused(tmp_path):
    """The link's own directory is root's; where it leads (a 0777 dir) is judged too."""
    shared = _made(tmp_path / "shared", 0o777)
    _made(shared / "c.yaml", 0o644, text="period_s: 0.05\n")
    root_dir = _made(tmp_path / "etc", 0o755)
    path = _link(root_dir / "c.yaml", shared / "c.yaml")
    said = _on_path(shared, "mode 0777, writable by its group and others", CONFIG_WHY)
    assert config_file_problem(load(path)) == said
    assert refusals(load(path))[0] == Finding("(file)", said)


@needs_root
def test_a_state_dir_link_of_nobodys_in_nobodys_directory_is_refused(open_dir):
    d = _made(open_dir / "d", 0o755, NOBODY)
    root_dir = _made(open_dir / "roots", 0o755)
    in_child_as(NOBODY, lambda: _link(d / "state", root_dir) and None)
    state = d / "state"
    assert os.lstat(state).st_uid == NOBODY
    assert state_dir_problem(str(state)) == f"state dir {state}: {_on_path(d, NOT_ROOTS, STATE_WHY)}, " \
                                            "or choose another --state-dir"


@pytest.fixture
def in_tmp() -> Iterator[Path]:
    """A directory of root's, 0755, in /tmp (root's, 1777), removed after."""
    made = Path(tempfile.mkdtemp(prefix="parlsched-in-tmp-", dir="/tmp"))
    made.chmod(0o755)
    yield made
    shutil.rmtree(made, ignore_errors=True)


@needs_root
def test_under_a_sticky_root_dir_or_root_dirs_a_config_and_state_dir_are_believed(in_tmp, tmp_path):
    """/tmp (root's, 1777) holds them: others cannot replace what they do not own there.
    But a link others own in it is theirs to point elsewhere: refused, naming it."""
    open_dir = in_tmp
    assert os.stat("/tmp").st_mode & 0o1777 == 0o1777 and open_dir.parent == Path("/tmp")
    path = _made(open_dir / "c.yaml", 0o644, text="period_s: 0.05\n")
    assert config_file_problem(load(path)) is None
    assert state_dir_problem(str(_made(open_dir / "state", 0o755))) is None
    assert state_dir_problem(str(open_dir / "not-yet")) is None
    deep = _made(_made(tmp_path / "a", 0o755) / "b", 0o700)
    assert config_file_problem(load(_made(deep / "c.yaml", 0o600, text="period_s: 0.05\n"))) is None
    assert state_dir_problem(str(deep)) is None
    theirs = Path(f"{open_dir}.link")
    try:
        in_child_as(NOBODY, lambda: _link(theirs, path) and None)
        assert config_file_problem(load(theirs)) == _on_path(
            theirs, "owned by uid 65534 (nobody), not by root, in a directory others may write", CONFIG_WHY, "link")
    finally:
        theirs.unlink(missing_ok=True)


@needs_root
def test_a_config_the_daemon_must_not_believe_is_refused_unread(tmp_path):
    """Checked after parsing, a file swapped in through a directory another user owns
    (a link to /etc/shadow) was refused with its parse errors, which quote its lines on
    stderr and in the journal: it is refused before a byte is parsed now."""
    d = _made(tmp_path / "d", 0o755, NOBODY)
    secret = _made(tmp_path / "secret", 0o600, text="root:SECRET-HASH:20228:0:99999:7:::\n")
    config = d / "cfg.yaml"
    config.symlink_to(secret)
    proc = refused_start(config, tmp_path / "run" / "d.sock", tmp_path / "run" / "state")
    assert (proc.returncode, proc.stderr) == (REFUSED, f"parlschedd: {config}: (file): {_on_path(d, NOT_ROOTS, CONFIG_WHY)}\n")
    assert "SECRET" not in proc.stderr


@needs_root
@pytest.mark.parametrize("what", ["config", "state dir"])
def test_the_daemon_refuses_a_config_or_state_dir_in_a_directory_others_own_at_start(tmp_path, what):
    d = _made(tmp_path / "d", 0o755, NOBODY)
    config, run, state = tmp_path / "cfg.yaml", tmp_path / "run", tmp_path / "state"
    config.write_text("period_s: 0.05\n")
    if what == "config":
        config = _made(d / "cfg.yaml", 0o644, text="period_s: 0.05\n")
        said = f"{config}: (file): {_on_path(d, NOT_ROOTS, CONFIG_WHY)}"
    else:
        state = _made(d / "state", 0o755)
        said = f"--state-dir: state dir {state}: {_on_path(d, NOT_ROOTS, STATE_WHY)}, or choose another --state-dir"
    proc = refused_start(config, run / "d.sock", state)
    assert (proc.returncode, proc.stderr) == (REFUSED, f"parlschedd: {said}\n")
    assert not run.exists() and list(d.iterdir()) == [config if what == "config" else state]


@pytest.mark.parametrize("rule, why", [
    ({"name": ""}, "name '' matches systemd, sshd, bash, cron and python3 alike"),
    ({"name": "."}, "name '.' matches systemd, sshd, bash, cron and python3 alike"),
    ({"cgroup": "/"}, "cgroup '/' is the whole hierarchy"),
    ({"cgroup": "cpuset:/", "name": ".*"}, "cgroup 'cpuset:/' is the whole hierarchy and name '.*' matches systemd, "
                                           "sshd, bash, cron and python3 alike"),
])
def test_a_rule_that_matches_nearly_every_process_is_a_warning(rule, why):
    """`name: ''` (or '.') and `cgroup: /` passed config check without a word, and
    the daemon would attach nearly every process on the host, itself excepted."""
    report = check_host(from_mapping({"targets": [{"name": "^myapp$"}, rule]}))
    assert [f.key for f in report.warnings] == ["targets[1]"]
    assert report.warnings[0].message == (f"{why}: the rule attaches nearly every process on the host; narrow it "
                                          "(a name such as '^myapp$', or a job's cgroup)")


def test_a_rule_with_descendants_that_matches_pid_1_is_a_warning():
    """A name found only in PID 1's command line (a container runtime's word) passed
    config check as "ok", and the daemon took in every process on the host (review):
    the daemon now leaves such a match alone, and config check says so; without
    descendants the rule attaches PID 1's own threads alone, no warning."""
    init = re.escape(procfs.comm(1))
    report = check_host(from_mapping({"targets": [{"name": f"^{init}$"}, {"name": f"^{init}$", "descendants": False},
                                                  {"name": "^myapp$"}]}))
    assert report.warnings == [Finding("targets[0]", f"matches PID 1 ({procfs.comm(1)}), which every process descends "
                                                     "from: with descendants it would take in the whole host, and "
                                                     "parlschedd leaves it alone; narrow the rule, or set descendants: "
                                                     "false")]


def test_pid_1_hidden_from_the_user_is_said_not_checked(tmp_path):
    """Under hidepid a user's config check cannot read PID 1: it said "ok" as if the
    rules had been checked against it (review). A /proc without PID 1 stands for it."""
    rules = from_mapping({"targets": [{"name": "^myapp$"}]})
    assert sweeping_rules(rules, proc_root=str(tmp_path)) == [Finding(
        "(host)", "PID 1 is hidden from this user (/proc mounted with hidepid): whether a rule with descendants "
                  "matches it is not checked; run config check as root")]
    assert sweeping_rules(from_mapping({"targets": [{"name": "^myapp$", "descendants": False}]}),
                          proc_root=str(tmp_path)) == []


@pytest.mark.parametrize("rule", [{"name": "^python3$"}, {"cgroup": "/", "name": "^myapp$"},
                                  {"cgroup": "/system.slice", "name": ""}])
def test_a_narrow_rule_is_no_warning(rule):
    assert [f for f in check_host(from_mapping({"targets": [rule]})).warnings if f.key == "targets[0]"] == []


@needs_root
@pytest.mark.parametrize("there, written_prefix, meant_prefix", [(CGROUP_MOUNTS[1][0], "", "cpuset:"),
                                                                  (CGROUP_MOUNTS[0][0], "cpuset:", "")],
                         ids=["v1 cpuset, written as v2", "v2, written as v1 cpuset"])
def test_a_rules_cgroup_in_another_hierarchy_is_told_how_to_write_it(there, written_prefix, meant_prefix):
    """On a hybrid host a job's cgroup may be in the v1 cpuset hierarchy alone, and a
    rule written as a v2 path looks in the unified one (or the other way round): the
    warning said only "no cgroup ... on this host (yet)"."""
    with own_cgroup(there) as group:
        report = check_host(from_mapping({"targets": [{"cgroup": f"{written_prefix}/{group.name}"}]}))
        [warning] = report.warnings
        assert warning.key == "targets[0].cgroup"
        assert f"it is in another hierarchy: write '{meant_prefix}/{group.name}'" in warning.message, warning
