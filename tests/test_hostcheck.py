"""What the daemon refuses to start with on this host, on real files, sockets and the
real sysfs (a fake one where sysfs shows no CPU at all), and a real daemon saying it in
config check's words before it makes anything."""

import os
import socket
import subprocess
import sys

import psutil
import pytest

from parlschedd.config import from_mapping
from parlschedd.hostcheck import Finding, check_host, one_line, refusals, socket_path_problem
from tests.conftest import fake_cpus, needs_root, refused_start, start_daemon, wait_for

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
    assert socket_path_problem(long) == f"{len(long)} bytes, a Unix socket's path holds at most 108"
    assert socket_path_problem(str(tmp_path / "a-file")) == f"{tmp_path / 'a-file'} exists and is not a socket; " \
                                                            "parlschedd does not replace it"
    assert socket_path_problem(str(tmp_path / "a-file" / "d.sock")) == f"{tmp_path / 'a-file'} is not a directory"
    assert socket_path_problem(str(tmp_path / "typo" / "run" / "d.sock")) == (
        f"no directory {tmp_path / 'typo'} (parlschedd makes the socket's own directory, {tmp_path / 'typo' / 'run'}, "
        "not its parents)")
    assert not (tmp_path / "typo").exists() and (tmp_path / "a-file").read_text() == "keep me\n"


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
    assert [f.key for f in found] == ["socket.group", "socket.path", "domains, cpus", "metrics"]
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


def test_check_host_adds_what_only_narrows_the_daemon(tmp_path):
    """A missing CPU of several and a rule's cgroup not there yet are warnings, not refusals."""
    cfg = from_mapping({"socket": {"path": str(tmp_path / "d.sock")}, "cpus": [0, 4095],
                        "targets": [{"cgroup": "/no-such-cgroup-here"}]})
    report = check_host(cfg)
    assert report.refused == []
    assert [f.key for f in report.warnings] == ["cpus", "targets[0].cgroup"]
    assert report.warnings[0].message.startswith("4095 not usable on this host")


@needs_root
def test_a_metrics_port_another_program_holds_is_a_warning(tmp_path):
    """config check passed a metrics port another program listened on, and the daemon
    it vouched for refused to start ("Address already in use"). It warns now, naming
    the holder; a running parlschedd's own listener is no warning (a restart frees it)."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        report = check_host(from_mapping({"socket": {"path": str(tmp_path / "d.sock")}, "metrics": f"127.0.0.1:{port}"}))
        assert report.refused == [] and [f.key for f in report.warnings] == ["metrics"]
        assert report.warnings[0].message == (f"port {port} on 127.0.0.1 is in use by pid {os.getpid()} "
                                              f"({psutil.Process().name()}): parlschedd would not start while it is")
    d = start_daemon(tmp_path, f"period_s: 0.05\nmetrics: 127.0.0.1:{port}\n")
    try:
        wait_for(lambda: "metrics listening" in d.log_text())
        report = check_host(from_mapping({"socket": {"path": str(tmp_path / "d.sock")}, "metrics": f"127.0.0.1:{port}"}))
        assert report.warnings == []
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
     f"socket.group: no group 'no-such-group-here' on this host; {GROUP_ADVICE}; {{config}}: domains, cpus: no usable"),
])
def test_the_daemon_refuses_in_config_checks_words_before_it_makes_anything(tmp_path, config, said):
    """The daemon's start and ``config check`` said the same in other words, and could
    drift; a metrics address not this machine's was found only after the state dir
    was made and locked. Now it asks the same function first."""
    path = tmp_path / "cfg.yaml"
    path.write_text(config)
    run = tmp_path / "run"
    proc = refused_start(path, run / "d.sock", run / "state")
    assert proc.returncode == 1 and proc.stderr.startswith(f"parlschedd: {path}: "), proc.stderr
    assert said.format(config=path) in proc.stderr and "Traceback" not in proc.stderr
    check = subprocess.run([sys.executable, "-m", "parlschedctl", "config", "check", str(path)],
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 1 and said.split("; {config}")[0] in check.stderr
    assert not run.exists()
