"""parlschedd/daemon/prometheus.py: the metrics endpoint of a real daemon managing
real threads, scraped over a real socket; its collector on a real engine; the
listen address and the refusals and warnings of a listener that cannot serve."""

from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from parlschedd.__main__ import REFUSED
from tests.conftest import PINNING, needs_root, refused_start, start_daemon, threads_of, wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    series = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            series[name] = float(value)
    return series


def of_one_period(d, pid: int, port: int) -> tuple[dict[str, float], dict] | None:
    """A scrape and a ``status`` of target ``pid`` from the same period, or None. The
    daemon ticks and answers requests in one thread, so the two show the same period
    when the target's last history sample is the same before and after both."""
    before = d.request("history", pid=pid, last=1)["samples"][-1]["t"]
    series = scrape(port)
    status = d.request("status", pid=pid)
    after = d.request("history", pid=pid, last=1)["samples"][-1]["t"]
    return (series, status) if before == after else None


def per_tid(series: dict[str, float], name: str) -> dict[str, float]:
    """The values of the per-thread series ``name``, by their tid label ("other" too)."""
    return {re.search(r'tid="(\w+)"', k).group(1): v for k, v in series.items() if k.startswith(name + "{")}


@needs_root
def test_prometheus_endpoint_reports_the_managed_threads(tmp_path, workload):
    """The endpoint's series, bounded to metrics_max_threads threads a target (the
    rest summed as tid="other"), against what status shows of the same period: each
    thread's utility and domain, the other threads' summed utility, the target's
    total; and facts of the host: a domain is one of the daemon's, holding the CPU
    the thread is on."""
    port = free_port()
    (tmp_path / "parlschedd.yaml").write_text(
        f"period_s: 0.05\nmetrics: '127.0.0.1:{port}'\nmetrics_max_threads: 3\n" + PINNING)
    d = start_daemon(tmp_path)
    try:
        w = workload(4)
        d.request("attach", pid=w.pid)
        wait_for(lambda: all(t["pinned"] for t in threads_of(d, w.pid).values()))
        time.sleep(0.5)
        m = scrape(port)
        tids = sorted(threads_of(d, w.pid))
        per_thread = {int(re.search(r'tid="(\d+)"', k).group(1)): v for k, v in m.items()
                      if k.startswith("parlsched_thread_utility{") and 'tid="other"' not in k}
        assert sorted(per_thread) == tids[:3]  # bounded cardinality ...
        assert any('tid="other"' in k for k in m if k.startswith("parlsched_thread_utility"))  # ... the rest summed
        assert m["parlsched_managed_threads"] == 5
        assert m[f'parlsched_target_threads{{name="python",pid="{w.pid}"}}'] == 5
        assert any(v > 0 for v in per_thread.values())
        cpus = [v for k, v in m.items() if k.startswith("parlsched_thread_cpu{")]
        assert cpus and all(v in os.sched_getaffinity(0) for v in cpus)
        assert m[f'parlsched_target_migrations_total{{name="python",pid="{w.pid}"}}'] >= 5
        assert m["parlsched_loop_duration_seconds_count"] > 5
        source = d.request("status")["daemon"]["counter_source"]
        assert m[f'parlsched_counter_source_info{{source="{source}"}}'] == 1
        assert m["process_open_fds"] > 0 and m["process_resident_memory_bytes"] > 10e6
        assert m["parlsched_counter_read_errors_total"] == 0

        m, status = wait_for(lambda: of_one_period(d, w.pid, port), timeout=10)
        shown = {t["tid"]: t for t in status["targets"][0]["threads"]}
        domains = status["daemon"]["domains"]
        assert sorted(shown) == tids
        utility, domain = per_tid(m, "parlsched_thread_utility"), per_tid(m, "parlsched_thread_domain")
        assert sorted(domain) == sorted(map(str, tids[:3]))
        for tid in tids[:3]:
            assert utility[str(tid)] == pytest.approx(shown[tid]["utility"], rel=1e-9)
            assert domain[str(tid)] == shown[tid]["domain"]
            assert shown[tid]["cpu"] in domains[int(domain[str(tid)])], "the domain holds the thread's CPU"
        rest = sum(shown[t]["utility"] for t in tids[3:])
        assert rest > 0, "the workers summed as other run: a sum of 0 would be no check"
        assert utility["other"] == pytest.approx(rest, rel=1e-9)
        assert m[f'parlsched_target_utility{{name="python",pid="{w.pid}"}}'] == \
            pytest.approx(sum(t["utility"] for t in shown.values()), rel=1e-9)
    finally:
        d.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)  # gone with the daemon


@needs_root
def test_a_scraper_that_resets_its_connection_is_no_traceback_in_the_json_log(tmp_path):
    """A client that connects to the metrics port and resets the connection (a load
    balancer's TCP check, a scrape cut by its timeout before the request was read)
    printed socketserver's 15-line traceback ("Exception occurred during processing
    of request ... ConnectionResetError") onto the daemon's stderr: lines that are
    not JSON under --log-format json, in the journal as if the daemon had crashed.
    It is a debug line naming the client now, and the endpoint serves on."""
    port = free_port()
    (tmp_path / "parlschedd.yaml").write_text(f"period_s: 0.05\nmetrics: '127.0.0.1:{port}'\n")
    d = start_daemon(tmp_path)
    try:
        for request in (b"", b"GET /metrics HTTP/1.1\r\nHost: x\r\n"):  # nothing, or a request cut short
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(request)
                time.sleep(0.1)  # the server is reading
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close: a reset
        assert scrape(port)["parlsched_managed_threads"] == 0
        went = lambda: [r for r in d.log_records() if r["event"] == "metrics client went away"]  # noqa: E731
        wait_for(lambda: len(went()) == 2)  # said in the request's thread, maybe after the scrape
    finally:
        d.stop()
    lines = d.log_text().splitlines()
    assert [line for line in lines if not line.startswith("{")] == []
    assert "metrics not reachable" not in d.log_text()
    resets = went()
    assert len(resets) == 2 and all(r["level"] == "debug" and r["client"].startswith("127.0.0.1:") for r in resets)


@needs_root
@pytest.mark.parametrize("unit", [True, False], ids=["under a unit", "started by hand"])
def test_a_listener_in_a_network_of_its_own_is_said_to_be_unreachable(tmp_path, monkeypatch, unit):
    """The drop-in that adds AF_INET but keeps the unit's PrivateNetwork=yes: the
    listener binds in a namespace whose loopback no scraper shares, and the daemon
    started as if all were well. It warns now, naming the drop-in that mends it when a
    unit started it (INVOCATION_ID, as systemd sets it), and no unit when none did (a
    container without a network). Here unshare(1) makes the namespace, with its
    loopback up as systemd sets it."""
    if unit:
        monkeypatch.setenv("INVOCATION_ID", "0123456789abcdef0123456789abcdef")
    else:
        monkeypatch.delenv("INVOCATION_ID", raising=False)
    port = free_port()
    (tmp_path / "parlschedd.yaml").write_text(f"period_s: 0.05\nmetrics: '127.0.0.1:{port}'\n")
    d = start_daemon(tmp_path, prefix=["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"])
    d.stop()
    warned = [r for r in d.log_records() if r["event"] == "metrics not reachable"]
    assert len(warned) == 1 and warned[0]["level"] == "warning", d.log_text()
    assert "network has no interface but loopback" in warned[0]["problem"]
    assert ("PrivateNetwork=yes under systemd" in warned[0]["problem"]) is unit
    assert ("PrivateNetwork=no" in warned[0]["problem"]) is unit


@needs_root
def test_metrics_listen_on_an_ipv6_address_in_brackets(tmp_path):
    """``metrics: '[::1]:PORT'``, an IPv6 listen address as Prometheus and every URL
    write one (docs/systemd.md allows AF_INET6 for the listener), was refused by
    config check and the daemon alike as "must be a listen address host:port": no
    IPv6 address could be given at all. It is served there, and config check says
    ok; a bracketed host that is not an address is still refused."""
    with socket.socket(socket.AF_INET6) as s:
        try:
            s.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback on this host")
        port = s.getsockname()[1]
    (tmp_path / "parlschedd.yaml").write_text(f"period_s: 0.05\nmetrics: '[::1]:{port}'\n")
    check = subprocess.run([sys.executable, "-m", "parlschedctl", "config", "check", str(tmp_path / "parlschedd.yaml")],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and check.stdout.endswith(": ok\n"), check
    d = start_daemon(tmp_path)
    try:
        text = urllib.request.urlopen(f"http://[::1]:{port}/metrics", timeout=5).read().decode()
        assert "parlsched_managed_threads 0.0" in text.splitlines()
        listening = [r for r in d.log_records() if r["event"] == "metrics listening"]
        assert listening[0]["port"] == port
    finally:
        d.stop()
    (tmp_path / "bad.yaml").write_text("metrics: '[localhost]:9177'\n")
    bad = subprocess.run([sys.executable, "-m", "parlschedctl", "config", "check", str(tmp_path / "bad.yaml")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "metrics: must be a listen address" in bad.stdout + bad.stderr, bad

@needs_root
def test_a_scrape_waits_for_the_engine_lock(workload):
    """The collector reads the engine only under the lock the daemon's loop holds
    but while it sleeps: a target's arrays are realigned by whichever thread asks
    first, and a scrape that did it while a period adopted a thread left that period
    a roster without it. Real engine, real threads; the loop's part is the test's."""
    import threading

    from parlschedd.daemon.prometheus import EngineCollector
    from tests.daemon.test_engine import _engine, _released

    w = workload(3)
    lock = threading.Lock()
    with _released(*_engine()) as engine:
        engine.attach(w.pid, time.monotonic())
        collector = EngineCollector(lambda: engine, lambda: "perf:task-clock", lambda: 256, lock, lambda: 0)
        done = threading.Event()
        families: list = []

        def scrape() -> None:
            families.extend(collector.collect())
            done.set()

        with lock:  # the loop in a period
            threading.Thread(target=scrape, daemon=True).start()
            assert not done.wait(0.3), "the scrape must wait for the period to end"
        assert done.wait(5), "and be served once the loop sleeps"
        threads = next(f for f in families if f.name == "parlsched_target_threads")
        assert [s.value for s in threads.samples] == [len(w.all_tids())]


@needs_root
def test_scrapes_while_threads_come_and_go_each_see_one_whole_period(tmp_path):
    """A target whose threads are born and end all the time, scraped back to back:
    each scrape's per-thread series are the target's threads of one period (as many
    as its threads gauge says), and no scrape fails."""
    port = free_port()
    d = start_daemon(tmp_path, f"period_s: 0.01\ndomain_period_s: 0.1\nmetrics: 127.0.0.1:{port}\n" + PINNING)
    churn = subprocess.Popen([sys.executable, "-c",
                              "import threading, time\n"
                              "while True:\n"
                              "    ts = [threading.Thread(target=time.sleep, args=(0.003 * (i % 4),)) for i in range(8)]\n"
                              "    [t.start() for t in ts]; [t.join() for t in ts]\n"])
    try:
        d.request("attach", pid=churn.pid)
        deadline = time.monotonic() + 4
        scrapes = 0
        while time.monotonic() < deadline:
            series = scrape(port)
            of_churn = {k: v for k, v in series.items() if f'pid="{churn.pid}"' in k}
            gauge = next((v for k, v in of_churn.items() if k.startswith("parlsched_target_threads{")), None)
            if gauge is None:
                continue  # not attached yet
            scrapes += 1
            per_thread = [k for k in of_churn if k.startswith("parlsched_thread_utility{")]
            assert len(per_thread) == gauge, (len(per_thread), gauge)
        assert scrapes > 20
        assert "metrics request failed" not in d.log_text()
    finally:
        churn.kill()
        churn.wait()
        d.stop()


@needs_root
def test_a_failing_collector_is_a_log_record_and_the_endpoint_serves_on(workload, monkeypatch, capfd):
    """A bug in the engine's series (here made by a target whose row cannot be read)
    reached wsgiref, which printed its traceback onto the daemon's stderr (no log
    record: not JSON under --log-format json) and answered 500, losing the scrape's
    process series too. It is an error record with the traceback now; the scrape
    serves what does not depend on the engine. Real engine, real threads, a real
    HTTP listener; the bug is the test's."""
    import threading

    import structlog

    from parlschedd.daemon.prometheus import EngineCollector, Metrics
    from parlschedd.daemon.target import Target
    from tests.daemon.test_engine import _engine, _released

    w = workload(2)
    with _released(*_engine()) as engine:
        engine.attach(w.pid, time.monotonic())
        metrics = Metrics(EngineCollector(lambda: engine, lambda: "perf:task-clock", lambda: 256, threading.Lock(),
                                          lambda: 0))
        metrics.listen("127.0.0.1:0")
        try:
            def broken(self):
                raise ZeroDivisionError("the bug")

            monkeypatch.setattr(Target, "current", broken)
            with structlog.testing.capture_logs() as logs:
                series = scrape(metrics.port)
        finally:
            metrics.close()
    assert "parlsched_managed_threads" not in series and series["process_open_fds"] > 0
    failed = [r for r in logs if r["event"] == "metrics of the targets could not be computed"]
    assert len(failed) == 1 and failed[0]["log_level"] == "error" and failed[0]["exc_info"] is True
    assert "Traceback" not in capfd.readouterr().err


# What the unit's RestrictAddressFamilies=AF_UNIX does to the daemon, which the test
# machine has no systemd to do: every internet socket fails with EAFNOSUPPORT.
AF_UNIX_ONLY = """import errno, socket
_init = socket.socket.__init__
def init(self, family=-1, type=-1, proto=-1, fileno=None):
    if family in (socket.AF_INET, socket.AF_INET6) and fileno is None:
        raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
    _init(self, family, type, proto, fileno)
socket.socket.__init__ = init
"""


def test_metrics_refused_by_the_units_address_families_say_which_drop_in_to_add(tmp_path, monkeypatch):
    """`metrics:` set under the unit, without the drop-in docs/systemd.md describes:
    the start was refused with "metrics: cannot listen on 127.0.0.1: Address family
    not supported by protocol", which sends the admin to the config (config check
    says it is ok). The refusal names the drop-in that mends it, when a unit started the
    daemon (INVOCATION_ID); started by hand, the unit is not the cause, and the kernel
    (one without IPv6) is named instead."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(AF_UNIX_ONLY)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(inject), os.environ.get("PYTHONPATH", "")]))
    config = tmp_path / "cfg.yaml"
    config.write_text("metrics: '127.0.0.1:9177'\n")
    monkeypatch.setenv("INVOCATION_ID", "0123456789abcdef0123456789abcdef")
    proc = refused_start(config, tmp_path / "d.sock", tmp_path / "state")
    assert proc.returncode == REFUSED, proc.stderr
    assert "metrics: cannot listen on 127.0.0.1: Address family not supported by protocol; " in proc.stderr
    assert "systemctl edit parlschedd" in proc.stderr and "RestrictAddressFamilies=AF_INET AF_INET6" in proc.stderr
    monkeypatch.delenv("INVOCATION_ID")
    proc = refused_start(config, tmp_path / "d.sock", tmp_path / "state")
    assert proc.returncode == REFUSED, proc.stderr
    assert ("metrics: cannot listen on 127.0.0.1: Address family not supported by protocol (a kernel without IPv6, "
            "for an IPv6 address?)") in proc.stderr and "systemctl edit" not in proc.stderr


@needs_root
def test_idle_connections_to_the_metrics_port_are_bounded(tmp_path):
    """prometheus_client's server gave each connection a thread and waited on it for
    good: any local user (no socket group asked) held thousands of idle connections,
    the daemon ran out of file descriptors and root's parlschedctl got "did not answer
    within 10 s". At most MAX_SCRAPES are served at once, the next closed unread, and
    the daemon's own threads stay bounded; the endpoint serves again once they go."""
    from parlschedd.daemon.prometheus import MAX_SCRAPES

    port = free_port()
    (tmp_path / "parlschedd.yaml").write_text(f"period_s: 0.05\nmetrics: '127.0.0.1:{port}'\n")
    d = start_daemon(tmp_path)
    idle = []
    try:
        threads_before = len(os.listdir(f"/proc/{d.proc.pid}/task"))
        for _ in range(4 * MAX_SCRAPES):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.1\r\n")  # a request never finished
            idle.append(s)
        wait_for(lambda: len(os.listdir(f"/proc/{d.proc.pid}/task")) == threads_before + MAX_SCRAPES)
        time.sleep(0.3)
        assert len(os.listdir(f"/proc/{d.proc.pid}/task")) == threads_before + MAX_SCRAPES
        with pytest.raises((ConnectionError, urllib.error.URLError)):
            scrape(port)
        assert d.request("status")["daemon"]["pid"] == d.proc.pid  # the control socket answers on
        while idle:
            idle.pop().close()
        assert wait_for(lambda: _scrapes(port))
    finally:
        for s in idle:
            s.close()
        d.stop()


def _scrapes(port: int) -> bool:
    try:
        return "parlsched_managed_threads" in scrape(port)
    except (ConnectionError, urllib.error.URLError):
        return False


@needs_root
def test_scrapes_of_one_period_are_built_once_under_the_lock(workload):
    """Several scrapes at once each built every series under the loop's lock, and held
    its periods back by tens of ms at 400 threads. The series are built once a version
    (the loop's periods and the changes of targets and threads) and served to the
    scrapes of that version. Real engine, real threads."""
    import threading

    from parlschedd.daemon.prometheus import EngineCollector
    from tests.daemon.test_engine import _engine, _released

    w = workload(3)
    version = [0]
    with _released(*_engine()) as engine:
        engine.attach(w.pid, time.monotonic())
        collector = EngineCollector(lambda: engine, lambda: "perf:task-clock", lambda: 256, threading.Lock(),
                                    lambda: version[0])
        built = []
        families = collector._families
        collector._families = lambda: (built.append(1), families())[1]
        first, second = list(collector.collect()), list(collector.collect())
        assert len(built) == 1 and first == second
        version[0] += 1
        list(collector.collect())
        assert len(built) == 2


def test_a_connection_past_the_slots_waits_for_one_to_be_given_back():
    """A connection past MAX_SCRAPES was closed unread at once: a scraper that connected
    again as soon as it had its answer (before the server's thread gave the slot back;
    1.4% of 8 such scrapers' connections under load) was refused within the limit.
    Here the 8 slots are held by requests finished 0.1 s later, and one more connection
    meanwhile is served once a slot is free. Real server, real sockets."""
    import http.client

    from prometheus_client import CollectorRegistry

    from parlschedd.daemon.prometheus import MAX_SCRAPES, _serve

    server = _serve("127.0.0.1", 0, CollectorRegistry())
    port = server.server_address[1]
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(MAX_SCRAPES)]
    try:
        for s in held:
            s.sendall(b"GET /metrics HTTP/1.0\r\n")  # its request's end comes later
        time.sleep(0.05)  # all accepted, each in its slot
        extra = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        extra.connect()
        time.sleep(0.02)  # accepted, waiting for a slot (0.2 s at most)
        for s in held:
            s.sendall(b"\r\n")
        extra.request("GET", "/metrics")
        assert extra.getresponse().status == 200
        extra.close()
    finally:
        for s in held:
            s.close()
        server.shutdown()
        server.server_close()


def test_slow_requests_in_every_slot_are_cut_at_the_deadline(monkeypatch):
    """Each read of a connection waited up to 10 s anew: 8 clients that each sent a
    byte of a request's header every 0.1 s held every slot for good, and no scrape was
    served. A connection has SCRAPE_TIMEOUT_S in all (2 s here); after it, the slots are
    free. Real server, real sockets."""
    import threading

    from prometheus_client import CollectorRegistry

    from parlschedd.daemon import prometheus

    monkeypatch.setattr(prometheus, "SCRAPE_TIMEOUT_S", 2.0)
    server = prometheus._serve("127.0.0.1", 0, CollectorRegistry())
    port = server.server_address[1]
    slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(prometheus.MAX_SCRAPES)]
    stop = threading.Event()
    cut: set[int] = set()

    def trickle() -> None:
        while not stop.wait(0.1):
            for i, s in enumerate(slow):
                try:
                    s.sendall(b"a")
                except OSError:  # the server closed it
                    cut.add(i)

    for s in slow:
        s.sendall(b"GET /metrics HTTP/1.0\r\nX-Slow: ")
    trickler = threading.Thread(target=trickle)
    trickler.start()
    try:
        wait_for(lambda: server.slots._value == 0)  # each slow client in its slot (a scrape before would take one)
        assert not _scrapes_any(port)  # refused after SLOT_WAIT_S
        assert wait_for(lambda: _scrapes_any(port), timeout=5)
        assert wait_for(lambda: len(cut) == len(slow))
    finally:
        stop.set()
        trickler.join()
        for s in slow:
            s.close()
        server.shutdown()
        server.server_close()


def _scrapes_any(port: int) -> bool:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        return True
    except (ConnectionError, urllib.error.URLError):
        return False


@needs_root
def test_a_scrape_filtered_by_name_and_the_name_label_after_a_rename(tmp_path, workload):
    """?name[]=parlsched_managed_threads gave nothing (the collector described no
    names), and the name label kept a target's old name until someone asked status."""
    port = free_port()
    d = start_daemon(tmp_path, f"period_s: 0.05\ndomain_period_s: 0.5\nrescan_s: 0.1\nmetrics: 127.0.0.1:{port}\n" + PINNING)
    try:
        w = workload(2)
        d.request("attach", pid=w.pid)
        wait_for(lambda: scrape(port).get("parlsched_managed_threads", 0) >= 3)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics?name[]=parlsched_managed_threads",
                                      timeout=5).read().decode()
        assert [line.split()[0] for line in text.splitlines() if not line.startswith("#")] == ["parlsched_managed_threads"]
        w.command(f"rename {w.pid} renamed-main")
        wait_for(lambda: f'parlsched_target_threads{{name="renamed-main",pid="{w.pid}"}}' in scrape(port))
    finally:
        d.stop()


@needs_root
def test_a_reload_of_metrics_max_threads_is_scraped_at_once(tmp_path, workload):
    """The series built for a period served every scrape of it: a reload that cut
    metrics_max_threads showed only at the next period, an hour later at period_s 3600.
    A daemon whose first period is 30 s away: the cut shows at the next scrape."""
    port = free_port()
    (tmp_path / "parlschedd.yaml").write_text(f"period_s: 30\ndomain_period_s: 30\nmetrics: 127.0.0.1:{port}\n")
    d = start_daemon(tmp_path)
    try:
        w = workload(3)
        d.request("attach", pid=w.pid)
        assert len(per_tid(scrape(port), "parlsched_thread_pinned")) == 4
        d.config.write_text(d.config.read_text() + "metrics_max_threads: 1\n")
        d.request("reload")
        assert set(per_tid(scrape(port), "parlsched_thread_pinned")) == {str(min(w.all_tids())), "other"}
    finally:
        d.stop()
