"""An optional Prometheus endpoint (the config's ``metrics: host:port``).

Series are computed at scrape time from the engine's state by a custom collector, so
the period loop pays nothing for them except one histogram observation and the wait for
one scrape a period, which builds them under the loop's lock for every scrape of that
period. Per-thread series are bounded: past ``max_threads`` threads of a target, the
rest are summed into one series with ``tid="other"``.
"""

from __future__ import annotations

import errno
import io
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import psutil
import structlog

from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from parlschedd.host import procfs
from parlschedd.host.errors import HostError

if TYPE_CHECKING:
    from parlschedd.daemon.engine import Engine

log = structlog.get_logger("parlschedd")


class EngineCollector(Collector):
    """The engine's series, computed at scrape time in the HTTP server's thread, under
    ``lock``, which the daemon's loop holds but while it sleeps: a target's arrays are
    realigned by whichever thread asks first after threads came or went, and a scrape
    that did it while a period was adding a thread could leave that period a roster
    without it. Built once a period (``version``: the loop's count of periods, and of
    the times targets or threads came or went), the first scrape's series serve the
    others of that period: several scrapes at once, each building under the lock, held
    the loop back that much longer."""

    def __init__(self, engine: Callable[[], Engine], source: Callable[[], str], max_threads: Callable[[], int],
                 lock: threading.Lock, version: Callable[[], object]) -> None:
        self.engine, self.source, self.max_threads, self.lock, self.version = engine, source, max_threads, lock, version
        self._built = threading.Lock()  # one scrape builds at a time; the others take its series
        self._last: tuple[object, list] | None = None  # (the version they were built at, the families)

    def describe(self) -> Iterator:
        """The families without samples: what a scrape filtered by name (?name[]=)
        looks up; without it, none of these matched any name."""
        yield from self._empty()

    def collect(self) -> Iterator:
        """The engine's series; none, and an error record, when computing them fails
        (a bug): raised, it reached wsgiref, which printed its traceback onto the
        daemon's stderr and answered 500, the process series lost with it."""
        with self._built:
            version = self.version()
            if self._last is None or self._last[0] != version:
                try:
                    with self.lock:  # all made before the first is handed out: a generator left half read would keep it
                        self._last = (version, list(self._families()))
                except Exception:
                    log.error("metrics of the targets could not be computed", exc_info=True)
                    return
            families = self._last[1]
        yield from families

    @staticmethod
    def _empty() -> tuple:
        labels = ["pid", "name", "tid"]
        return (
            GaugeMetricFamily("parlsched_thread_utility", "Utility of a managed thread over the last period (counter units per second)", labels=labels),
            GaugeMetricFamily("parlsched_thread_cpu", "CPU a managed thread is pinned on, or of an observed target (attach --observe) the CPU it last ran on (-1: left free in its domain, or not placed yet)", labels=labels),
            GaugeMetricFamily("parlsched_thread_domain", "Domain (NUMA node or group) of a managed thread, or of an observed target the domain of the CPU it last ran on (-1: not placed yet, or last seen on a CPU of no domain)", labels=labels),
            GaugeMetricFamily("parlsched_thread_pinned", "1 when the thread is pinned by the daemon", labels=labels),
            GaugeMetricFamily("parlsched_target_threads", "Managed threads of a target", labels=["pid", "name"]),
            GaugeMetricFamily("parlsched_target_utility", "Sum of the utilities of a target's threads", labels=["pid", "name"]),
            CounterMetricFamily("parlsched_target_migrations", "Affinity changes made for a target", labels=["pid", "name"]),
            GaugeMetricFamily("parlsched_managed_threads", "Threads managed over all targets"),
            CounterMetricFamily("parlsched_counter_read_errors", "Periods a live thread was not measured: its counter read failed, or its PMU counters were multiplexed out the whole period"),
            InfoMetricFamily("parlsched_counter_source", "Where per-thread utilities come from"),
        )

    def _families(self) -> Iterator:
        engine = self.engine()
        families = self._empty()
        utility, cpu, domain, pinned, threads, target_utility, migrations, managed, errors, info = families
        total = 0
        limit = self.max_threads()
        for t in list(engine.targets.values()):
            pid, name = str(t.pid), t.name
            r = t.current()
            u = r.utility
            total += r.tids.size
            threads.add_metric([pid, name], r.tids.size)
            target_utility.add_metric([pid, name], float(np.nansum(u)))
            migrations.add_metric([pid, name], t.migrations)
            for tid, ut, c, d, p in zip(r.tids[:limit].tolist(), u[:limit].tolist(), r.cpu[:limit].tolist(),
                                        r.domain[:limit].tolist(), r.pinned[:limit].tolist()):
                key = [pid, name, str(tid)]
                utility.add_metric(key, ut)
                cpu.add_metric(key, c)
                domain.add_metric(key, d)
                pinned.add_metric(key, float(p))
            if r.tids.size > limit:
                utility.add_metric([pid, name, "other"], float(np.nansum(u[limit:])))
                pinned.add_metric([pid, name, "other"], float(r.pinned[limit:].sum()))
        managed.add_metric([], total)
        errors.add_metric([], engine.read_errors)
        info.add_metric([], {"source": self.source()})
        yield from families


# prometheus_client's own server takes every connection in a thread of its own and
# waits on each for good: anyone on the host who could reach the port (no socket group
# is asked) held thousands of idle connections, each a thread and a file descriptor,
# until the daemon had none left for its control socket and /proc. A scrape takes
# milliseconds; a connection past these, or open this long, is closed.
MAX_SCRAPES = 8
SCRAPE_TIMEOUT_S = 10.0  # Prometheus's own default scrape_timeout
# How long a connection past MAX_SCRAPES waits for a slot before it is closed unread: a
# scraper that connects again as soon as it is answered (its answer read before the
# server's thread gives its slot back) is served, not refused; the accept loop, which
# waits, is the endpoint's own thread.
SLOT_WAIT_S = 0.2


class _ByDeadline(socket.SocketIO):
    """A connection's reads, each given what is left of the connection's time: with a
    timeout per read alone, 8 clients that each sent a byte every few seconds held
    every slot for as long as they liked, and no scrape was served."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__(sock, "rb")
        self.deadline = deadline

    def readinto(self, b: memoryview) -> int | None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the request took longer than {SCRAPE_TIMEOUT_S:g} s")
        self._sock.settimeout(left)  # the reply's sendall, after the last read, gets what was left then
        return super().readinto(b)


class _Handler(WSGIRequestHandler):
    timeout = SCRAPE_TIMEOUT_S  # StreamRequestHandler: the connection's socket timeout

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the plain reader made by setup: the one below reads by the deadline
        self.rfile = io.BufferedReader(_ByDeadline(self.connection, time.monotonic() + SCRAPE_TIMEOUT_S))

    def log_message(self, format: str, *args: object) -> None:
        """No line on stderr per request, as prometheus_client's own handler."""


class _Server(ThreadingMixIn, WSGIServer):
    """A thread a scrape, MAX_SCRAPES at once: one more waits SLOT_WAIT_S for a slot,
    then is closed unread."""

    daemon_threads = True

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.slots = threading.BoundedSemaphore(MAX_SCRAPES)
        super().__init__(*args, **kwargs)

    def process_request(self, request: socket.socket, client_address: tuple) -> None:
        if not self.slots.acquire(timeout=SLOT_WAIT_S):
            log.debug("metrics connection refused: as many scrapes in progress as served at once",
                      client=":".join(map(str, client_address[:2])), most=MAX_SCRAPES)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def finish_request(self, request: socket.socket, client_address: tuple) -> None:
        """Serve, then give the slot back before the connection is closed: freed after
        the close, a client that connects again as soon as it sees it (one of 8, each
        with one connection at a time) found no slot and was closed unread."""
        try:
            super().finish_request(request, client_address)
        finally:
            self.slots.release()


def _serve(host: str, port: int, registry: CollectorRegistry) -> WSGIServer:
    """The endpoint's server on ``host`` (an IPv4 or IPv6 address) and ``port``, serving
    from a thread of its own."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    server_class = type("_ServerOfFamily", (_Server,), {"address_family": family})
    server = make_server(host, port, make_wsgi_app(registry), server_class=server_class, handler_class=_Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


class Metrics:
    """The registry, the loop histogram and the HTTP listener."""

    def __init__(self, collector: EngineCollector) -> None:
        self.registry = CollectorRegistry(auto_describe=True)  # ProcessCollector's names for ?name[]= too
        ProcessCollector(registry=self.registry)  # process_resident_memory_bytes, process_open_fds, ...
        self.registry.register(collector)
        self.loop = Histogram("parlsched_loop_duration_seconds", "Time the daemon spends in one period",
                              registry=self.registry,
                              buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5))
        self.server = None

    def listen(self, address: str) -> None:
        host, port = _host_port(address)
        self.server = _serve(host, port, self.registry)
        self.server.handle_error = _request_failed  # a log line, not socketserver's traceback on stderr

    @property
    def port(self) -> int | None:
        return None if self.server is None else self.server.server_address[1]

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


DROP_IN = ("a drop-in (systemctl edit parlschedd) with RestrictAddressFamilies=AF_INET AF_INET6, PrivateNetwork=no "
           "and IPAddressDeny= (docs/systemd.md)")


def unreachable() -> str | None:
    """Why no scraper can reach a listener that was made, or None. Binding succeeds in a
    network namespace of its own (the unit's PrivateNetwork=yes kept by a drop-in that
    only adds the address families), where no interface but loopback exists. (A kept
    IPAddressDeny=any drops the packets unseen: nothing here can tell it.)"""
    try:
        alone = procfs.network_interfaces() == ["lo"]
    except HostError:
        return None  # no /proc/self/net: nothing to tell by
    if not alone:
        return None
    if not under_systemd():  # a container without a network, unshare --net: no unit to mend
        return "this daemon's network has no interface but loopback: only its own namespace reaches the port"
    return ("this daemon's network has no interface but loopback (PrivateNetwork=yes under systemd): "
            f"only its own namespace reaches the port; {DROP_IN} mends it")


def under_systemd() -> bool:
    """Whether a systemd unit started this process (it sets INVOCATION_ID): only then
    can the unit's sandbox be what refused or hid the listener."""
    return bool(os.environ.get("INVOCATION_ID"))


def _request_failed(request: object, client_address: tuple) -> None:
    """socketserver's ``handle_error``, called in the request's thread: it printed a
    traceback onto the daemon's stderr, lines that are no log records (not JSON under
    --log-format json), for a client that only reset its connection (a TCP health
    check, a scrape cut by its timeout)."""
    exc = sys.exc_info()[1]
    client = ":".join(map(str, client_address[:2]))
    if isinstance(exc, ConnectionError | TimeoutError):  # reset, broken pipe, silent: the client's doing
        log.debug("metrics client went away", client=client, error=str(exc) or type(exc).__name__)
    else:
        log.error("metrics request failed", client=client, exc_info=True)


def _host_port(address: str) -> tuple[str, int]:
    """The config's ``host:port`` or ``[IPv6 address]:port`` (validated by config.py);
    no host: loopback only."""
    host, _, port = address.rpartition(":")
    if host.startswith("["):
        host = host[1:-1]
    return host or "127.0.0.1", int(port)


class PortTaken(NamedTuple):
    """A port held now: said in ``message``; ``seen``: by a process this user sees
    (not a parlschedd), so that a start would be refused for sure."""

    message: str
    seen: bool


def port_taken(address: str) -> PortTaken | None:
    """Who listens on ``address`` now, when that is not a parlschedd: its start would
    fail to listen there (the running daemon's own listener is no problem, a restart
    frees it). None: free, or a host ``cannot_listen`` names."""
    host, port = _host_port(address)
    if port == 0:
        return None
    try:
        family, kind, proto, _, where = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the listener binds
            probe.bind(where)
        return None
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            return None
    names = listeners(port)
    if names is None:
        return PortTaken(f"port {port} on {host} is in use {_unseen()} (the running parlschedd's own is no problem; "
                         "another's would stop it from starting)"
                         + ("" if os.geteuid() == 0 else ": run config check as root to know"), seen=False)
    if all(name == "parlschedd" for name in names.values()):
        return None
    return PortTaken(f"port {port} on {host} is in use by {_listed(names)}: parlschedd cannot listen there while it "
                     "is; stop it, or choose another port", seen=True)


def listeners(port: int) -> dict[int, str] | None:
    """The processes listening on TCP ``port`` (pid -> name); None when one of them is
    hidden from this user (another user's socket, seen without root)."""
    listening = [c for c in psutil.net_connections("inet")
                 if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]
    if any(c.pid is None for c in listening) or not listening:
        return None
    return {c.pid: _name(c.pid) for c in listening}


def held_by(address: str) -> str:
    """Who holds ``address``'s port, as a refusal to listen there says it."""
    names = listeners(_host_port(address)[1])
    return _unseen() if names is None else f"by {_listed(names)}"


def _unseen() -> str:
    """Who holds a port whose listener ``listeners`` cannot name: another user's
    process, hidden from this one; to root, one /proc does not show (of another PID
    namespace, a container's host; or the kernel's own), which root was told to run
    as root to see."""
    if os.geteuid() == 0:
        return "by a process /proc does not show (another PID namespace's, or the kernel's)"
    return "by a process this user cannot see"


def _listed(names: dict[int, str]) -> str:
    return ", ".join(f"pid {pid} ({name})" for pid, name in sorted(names.items()))


def _name(pid: int) -> str:
    """A process's name as ps shows it, and parlschedd for the daemon run by an
    interpreter too."""
    try:
        process = psutil.Process(pid)
        return "parlschedd" if procfs.runs(process.cmdline(), "parlschedd") else process.name()
    except psutil.Error:
        return "gone"


def cannot_listen(address: str) -> str | None:
    """Why the daemon could not listen on ``address`` on this host, or None: the host
    resolves to an address of this machine (bound with port 0, so a daemon already
    listening on the port is not taken for a problem). Asked by ``config check`` and
    by the daemon's start before it makes anything (``hostcheck.refusals``)."""
    host, _ = _host_port(address)
    try:
        family, kind, proto, _, where = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.bind(where)
    except OSError as exc:  # gaierror: a name that does not resolve; EADDRNOTAVAIL: not this machine's
        return f"cannot listen on {host}: {refused_listen(exc)}"
    return None


def refused_listen(exc: OSError) -> str:
    """Why the metrics listener could not be made, and what to do when no change of the
    config mends it: the unit's RestrictAddressFamilies=AF_UNIX makes every internet
    socket fail with EAFNOSUPPORT, which said alone sends the admin to the config."""
    if exc.errno != errno.EAFNOSUPPORT:
        return exc.strerror or str(exc)
    if not under_systemd():  # config check in a shell, a daemon started by hand: the kernel's own refusal
        return f"{exc.strerror} (a kernel without IPv6, for an IPv6 address?)"
    return (f"{exc.strerror}; under parlschedd.service, whose RestrictAddressFamilies=AF_UNIX refuses it, add "
            f"{DROP_IN}, or set metrics: null")
