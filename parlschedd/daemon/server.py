"""The daemon process: control socket, period loop, signals, requests. It composes the
engine (engine.py), the config rules' matches (rules.py), the state file
(statefile.py) and the cache of status replies (status_cache.py).

A single thread runs everything: a selector waits for socket traffic until the next
period's deadline, then the engine ticks. Deadlines advance by whole periods from the
start, so the loop does not drift; an overrun skips the periods it missed. Requests
never hold a tick back by more than one request: once the deadline has passed, the
clients still waiting are served after the tick (see ``_past_deadline``).
"""

from __future__ import annotations

import errno
import os
import selectors
import signal
import socket
import stat
import struct
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np
import structlog

from parlschedd import __version__, config as config_mod
from parlschedd.config import Config, ConfigError, ConfigUnreadable, ConfigUntrusted
from parlschedd.daemon import notify, protocol
from parlschedd.daemon.engine import Engine, EngineError
from parlschedd.daemon.rules import RuleMatcher
from parlschedd.daemon.statefile import StateDirUnusable, StateFile, by_hand, reattach
from parlschedd.daemon.status_cache import StatusViews
from parlschedd.host import cgroups, procfs
from parlschedd.host.affinity import Pinner
from parlschedd.host.base import CounterSource
from parlschedd.cpulist import format_cpulist
from parlschedd.host.perf import CounterSet, detect_source, raise_fd_limit
from parlschedd.host.privileges import CAP_SYS_NICE, effective_capabilities, group_id, perfmon_capable
from parlschedd.hostcheck import (config_file_untrusted, narrowings, one_line, refusals, socket_path_problem,
                                  sweeping_rules)
from parlschedd.topology import NoCpusFound, TopologyError, online_cpus, read_topology

log = structlog.get_logger("parlschedd")
MAX_CLIENTS = 256
MAX_LINES_PER_TURN = 64  # requests of one client handled before others get a turn
ACCEPT_PAUSE_S = 0.1  # after accept() fails (EMFILE), stop listening this long
MAX_PENDING = 4 * 1024 * 1024  # reply bytes a client may leave unread, request bytes it may have waiting
PARTS_TTL_S = 30.0  # the rest of a long reply is dropped when its client is idle this long
# SIGQUIT asks a program to stop as SIGTERM does (its core dump matters less than the
# masks); the signals admins send daemons by habit (USR1 to reopen logs, ...) would
# otherwise end it by their default action, leaving every thread pinned.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
IGNORED_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM)


class StartupError(Exception):
    """The daemon cannot start; the message is the one-line reason."""


@dataclass
class Client:
    """One connection to the control socket: its peer's uid (SO_PEERCRED, which every
    request is judged by) and its buffers, as the single-threaded loop serves it a
    turn at a time."""

    sock: socket.socket
    uid: int
    inbuf: bytearray = field(default_factory=bytearray)
    outbuf: bytearray = field(default_factory=bytearray)
    discarding: bool = False  # inside an over-long line: drop bytes up to its newline
    last_active: float = 0.0
    eof: bool = False  # the peer shut down its side: answer what it sent, then close
    parts: Iterator[bytes] | None = None  # the rest of a long reply (protocol.lines), made when asked for


@dataclass
class LoopStats:
    """The loop's own cost, and the jitter of its period starts over the last
    ``starts.maxlen`` periods (|actual period - T_CPU|)."""

    periods: int = 0
    total_s: float = 0.0
    max_s: float = 0.0
    starts: deque = field(default_factory=lambda: deque(maxlen=1000))

    def add(self, started: float, seconds: float) -> None:
        self.periods += 1
        self.total_s += seconds
        self.max_s = max(self.max_s, seconds)
        self.starts.append(started)

    def as_json(self, period_s: float) -> dict:
        mean = self.total_s / self.periods if self.periods else 0.0
        out = {"periods": self.periods, "mean_ms": round(mean * 1e3, 3), "max_ms": round(self.max_s * 1e3, 3)}
        if len(self.starts) > 2:
            jitter = np.abs(np.diff(np.array(self.starts)) - period_s) * 1e3
            p50, p99 = np.percentile(jitter, [50, 99])
            out["jitter_ms"] = {"p50": round(float(p50), 3), "p99": round(float(p99), 3), "max": round(float(jitter.max()), 3)}
        return out


class Daemon:
    """The imperative shell around the engine: ``run`` starts it (``startup``), loops
    (``main_loop``) until a stop signal, and restores every thread (``shutdown``)."""

    def __init__(self, config: Config, config_path: str | None, socket_path: str, state_dir: str,
                 sysfs: str = "/sys", proc_root: str = procfs.PROC_ROOT, cgroup_root: str = cgroups.CGROUP_ROOT) -> None:
        self.config, self.config_path = config, config_path
        self._started_with = config  # socket and metrics are set up from it, once
        self.restart_pending: list[str] = []  # keys of the config file that wait for a restart
        self.reload_warnings: list[str] = []  # what the last reload applied but cannot use here (a rule's cgroup not there)
        self.socket_path, self.statefile = socket_path, StateFile(state_dir)
        self.sysfs, self.proc_root, self.cgroup_root = sysfs, proc_root, cgroup_root
        self.started = time.monotonic()
        self.should_exit = False
        self.reload_requested = False
        self.ignored_signals: set[int] = set()
        self._socket_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the socket we bound
        self._socket_trouble_said = False
        self.stats = LoopStats()
        self.clients: dict[int, Client] = {}
        self.selector = selectors.DefaultSelector()
        self.rules = RuleMatcher(proc_root, cgroup_root)
        self._listen_paused_until = 0.0
        self._deadline = float("inf")  # of the next tick; requests wait for it once passed
        self.status_views = StatusViews()
        self._status_told = ""  # the STATUS= systemd shows in `systemctl status`, as last sent
        self._status_stale = False  # threads or targets came or went since it was sent
        # held by the loop but while it waits in select: what another thread (a metrics
        # scrape) reads of the engine is never halfway through a period or a request
        self.awake = threading.Lock()

    # -- lifecycle --------------------------------------------------------------------

    def startup(self) -> None:
        """Check the host as ``config check`` does, choose the counter source, take the
        state dir and the socket, restore what a crashed run left pinned and attach
        again what it kept; StartupError before anything is changed when it cannot."""
        caps = effective_capabilities()
        if CAP_SYS_NICE not in caps:
            raise StartupError("parlschedd needs CAP_SYS_NICE to set the CPU affinity of other users' threads: "
                               "run it as root, or give it the capability (AmbientCapabilities=CAP_SYS_NICE "
                               "CAP_PERFMON in its unit, or setpriv --ambient-caps)")
        if refused := refusals(self.config, self.socket_path, self.sysfs, self._state_dir,  # config check's words
                               euid=os.geteuid()):
            raise StartupError(one_line(refused, self._config_named()))
        raise_fd_limit()
        try:
            topology = read_topology(self.sysfs, cpus=self.config.cpus)
            self.domains = topology.domains(self.config.domains)
        except NoCpusFound:
            raise
        except TopologyError as exc:  # a CPU gone since the check
            raise StartupError(f"{self._config_named()}: {exc.of_config()}") from None
        self.cpus = list(topology.usable)
        self.online = topology.online
        self._warn_of(self.config)
        skipped: dict[CounterSource, str] = {}
        source = detect_source(self.config.utility, proc_root=self.proc_root, sysfs=self.sysfs, skipped=skipped)
        why = "; ".join(f"{s.value}: {reason}" for s, reason in skipped.items())
        if self.config.utility not in ("auto", source.value.removeprefix("perf:")):
            log.warning("counter source unavailable, falling back", wanted=self.config.utility, using=source.value, why=why)
        elif source is CounterSource.SCHEDSTAT and self.config.utility == "auto":
            log.warning("perf counters refused, counting CPU time from schedstat; give the daemon CAP_PERFMON "
                        "(Linux 5.8+; CAP_SYS_ADMIN before) or lower kernel.perf_event_paranoid", why=why)
        elif skipped:
            log.info("counter source", using=source.value, why=why)
        if source.value.startswith("perf:") and not perfmon_capable(caps):
            log.warning("without CAP_PERFMON the kernel refuses perf counters on other users' threads, so those "
                        "are not managed; give the daemon CAP_PERFMON, or set utility: schedstat", using=source.value)
        self.counters = CounterSet(source, proc_root=self.proc_root)
        pinner = Pinner(allowed=partial(cgroups.task_cpus, root=self.cgroup_root, proc_root=self.proc_root),
                        proc_root=self.proc_root, sysfs=self.sysfs)
        self.engine = Engine(self.config, self.domains, self.counters, pinner,
                             proc_root=self.proc_root, on_change=self._mark_dirty, persist=self._persist,
                             allowed=cgroups.CpusetReader(self.cgroup_root, self.proc_root), sysfs=self.sysfs)
        try:
            self.statefile.lock()
        except StateDirUnusable as exc:
            raise StartupError(str(exc)) from None
        try:
            gid = self._socket_gid()  # all three checked before recover changes any thread
            self._claim_socket_path()
            saved = self.statefile.recover(self.engine)
            self.metrics = self._start_metrics()
            self._open_socket(gid)
        except BaseException:  # a refused start leaves no state dir or lock file of its own behind
            self.statefile.unmake()
            raise
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)
        signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        for sig in STOP_SIGNALS:
            signal.signal(sig, self.handle_exit)
        for sig in IGNORED_SIGNALS:
            signal.signal(sig, self.handle_ignored)
        signal.signal(signal.SIGHUP, self.handle_reload)
        now = time.monotonic()
        for t in saved:
            reattach(self.engine, t, now, self.proc_root)
        self.rules.rescan(self.engine, self.config.targets, now)
        self.engine.forget_unclaimed_hand_overs()
        self.statefile.save(self.engine)
        log.info("started", version=__version__, socket=os.path.abspath(self.socket_path),
                 state_dir=os.path.abspath(self._state_dir), domains=self.domains,
                 counter_source=source.value, period_s=self.config.period_s)
        self._status_told = self._status_text()  # the targets attached again from the last run counted
        notify.notify(f"READY=1\nSTATUS={self._status_told}\nMAINPID={os.getpid()}")

    def handle_exit(self, signum: int, frame: object = None) -> None:
        self.should_exit = True

    def handle_reload(self, signum: int = 0, frame: object = None) -> None:
        self.reload_requested = True

    def handle_ignored(self, signum: int, frame: object = None) -> None:
        self.ignored_signals.add(signum)

    def run(self) -> None:
        with self.awake:
            self.startup()  # raises StartupError before the loop owns anything to undo
            try:
                self.main_loop()
            finally:
                self.shutdown()

    def main_loop(self) -> None:
        """Serve the socket until the next period's deadline, then tick; rescan every
        rescan_s, reload on SIGHUP, and tell systemd's watchdog, until ``should_exit``."""
        period = self.config.period_s
        deadline = time.monotonic() + period
        next_rescan = time.monotonic() + self.config.rescan_s
        watchdog = notify.watchdog_interval()
        next_watchdog = time.monotonic()
        while not self.should_exit:
            self._deadline = deadline
            timeout = max(0.0, deadline - time.monotonic())
            self.awake.release()
            try:
                ready = self.selector.select(timeout)
            finally:
                self.awake.acquire()
            for key, events in ready:
                if self._past_deadline():
                    break  # the rest stay ready and are served after the tick
                self._dispatch(key, events)
            if self.ignored_signals:
                for signum in sorted(self.ignored_signals):
                    log.warning("signal ignored", signal=signal.Signals(signum).name,
                                hint="SIGTERM, SIGINT or SIGQUIT stop the daemon and restore every thread; SIGHUP reloads")
                self.ignored_signals.clear()
            if self.reload_requested:
                self.reload_requested = False
                try:
                    self.reload()
                except Exception as exc:  # a bug in reloading must not stop the daemon SIGHUP was meant to keep
                    log.error("reload failed, keeping the old config", error=f"{type(exc).__name__}: {exc}")
            now = time.monotonic()
            if now < deadline:
                continue
            started = time.perf_counter()
            if now >= next_rescan:
                next_rescan = now + self.config.rescan_s
                try:
                    self.rules.rescan(self.engine, self.config.targets, now)
                    self.engine.resync(now)
                    self.engine.refilter(now)
                    self._notice_new_cpus()
                except Exception as exc:  # /proc unreadable, out of fds: the periods go on
                    log.error("rescan failed", error=f"{type(exc).__name__}: {exc}")
                try:  # apart: a rescan failing every time must not keep the daemon unreachable
                    self._keep_socket()
                    self.statefile.keep_lock()
                except Exception as exc:  # a bug: said, and tried again at the next rescan
                    log.error("socket and lock check failed", error=f"{type(exc).__name__}: {exc}")
            try:
                self.engine.tick(now)
                if self.statefile.dirty:
                    self.statefile.save(self.engine)
            except Exception as exc:  # out of fds, a full disk, a bug: log, keep serving
                log.error("period failed", error=f"{type(exc).__name__}: {exc}")
            self._resume_listening(now)
            elapsed = time.perf_counter() - started
            self.stats.add(now, elapsed)
            if self.metrics is not None:
                self.metrics.loop.observe(elapsed)
            period = self.config.period_s
            deadline += period
            if deadline <= time.monotonic():  # overran: skip the missed periods
                deadline = time.monotonic() + period
            self._deadline = deadline
            self.status_views.new_period(self.status, self._past_deadline)
            self._drop_stale_parts(now)
            if self._status_stale:
                self._tell_status()
            if watchdog and now >= next_watchdog:
                notify.notify(f"WATCHDOG=1\nSTATUS={self._status_told}")
                next_watchdog = now + watchdog

    def _status_text(self) -> str:
        threads = sum(len(t.threads) for t in self.engine.targets.values())
        return f"managing {threads} threads in {len(self.engine.targets)} targets"

    def _tell_status(self) -> None:
        """Send systemd the STATUS= line once it changes: sent with the watchdog pings
        alone (every 15 s, none without a watchdog), `systemctl status` said "managing
        0 threads" for that long after an attach, and as many after a detach."""
        self._status_stale = False
        status = self._status_text()
        if status != self._status_told:
            notify.notify(f"STATUS={status}")
            self._status_told = status

    def shutdown(self) -> None:
        """Restore every thread, and keep the list of targets attached by hand in the
        state file, so the next start attaches them again: ``systemctl restart`` keeps
        /run/parlsched (RuntimeDirectoryPreserve=restart) and with it what users
        attached, while ``systemctl stop`` removes it and they are forgotten."""
        notify.notify("STOPPING=1")
        hand_attached = by_hand(self.engine)
        if self.config.restore_on_exit:
            restored = self.engine.detach_all(keep_hand_overs=True)
            report = self.engine.pinner.restore_all()
            log.info("restored", threads=restored + len(report.restored), gone=len(report.gone), failed=len(report.failed))
        else:
            log.info("threads left as placed (restore_on_exit: false); the next start restores them from the state "
                     "file", threads=len(self.engine.pinner.records), state_file=str(self.statefile.path))
        self.statefile.save(self.engine, hand_attached)
        self.counters.close_all()
        if self.metrics is not None:
            self.metrics.close()
        for client in list(self.clients.values()):
            self._close(client)
        self.selector.close()
        if _file_id(self.socket_path) == self._socket_id:  # not another daemon's, made since at this path
            os.unlink(self.socket_path)
        self.statefile.unlock()  # last: the state file is final
        log.info("stopped")

    def reload(self) -> list[str]:
        """Re-read the config; keep the old one when the new one is invalid, and return
        its errors ("key path: message"; empty when it was applied). systemd is told the
        reload started (RELOADING=1) and ended (READY=1)."""
        notify.notify(f"RELOADING=1\nMONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")
        try:
            return self._reload()
        finally:
            notify.notify("READY=1")

    def _reload(self) -> list[str]:
        try:  # a file the start would refuse is refused unread, as the start refuses it
            new = config_mod.load(self.config_path, judge=partial(config_file_untrusted, euid=os.geteuid()))
        except (ConfigUnreadable, ConfigUntrusted) as exc:
            errors = [str(exc)]
            log.error("reload failed, keeping the old config", errors=errors)
            return errors
        except ConfigError as exc:
            errors = [f"{exc.source}: {k}: {m}" for k, m in exc.errors]
            log.error("reload failed, keeping the old config", errors=errors)
            return errors
        fixed = [key for key in ("domains", "cpus", "utility") if getattr(new, key) != getattr(self.config, key)]
        if fixed:
            # every target's scheduler and pins are built on the running layout, its counters on the source
            errors = [f"{', '.join(fixed)}: takes effect at a restart (systemctl restart parlschedd), not a reload"]
            log.error("reload refused, keeping the old config", errors=errors)
            return errors
        pending = self._waiting_for_restart(new)
        refused = [f for f in refusals(new, self.socket_path, self.sysfs, self._state_dir, euid=os.geteuid())
                   if f.key.split(".")[0] in pending] if pending else []
        if refused:  # a restart, due one day, would refuse it: config check's words, as at start
            errors = [one_line([finding], self._config_named()) for finding in refused]
            log.error("reload refused, keeping the old config: the next start would refuse it", errors=errors)
            return errors
        if new.period_s != self.config.period_s:
            self.stats.starts.clear()  # the jitter is measured against one period, the new one
        self.config = new
        self.engine.config = new
        self.restart_pending = pending
        if self.restart_pending:
            log.warning("applied but for what takes effect at the next restart", keys=self.restart_pending)
        self.reload_warnings = self._warn_of(new)  # as the start says them
        relearning = self.engine.relearn()
        log.info("reloaded", config=str(new.read_from.path) if new.read_from else "the built-in config",  # not None
                 targets_learning_afresh=relearning)
        self.rules.rescan(self.engine, self.config.targets, time.monotonic())
        self.status_views.clear()  # period_s and the like, and what the rules attached
        return []

    def _waiting_for_restart(self, new: Config) -> list[str]:
        """The keys of ``new`` that differ from what the daemon set up at start and
        takes only then: the socket (but its path when --socket names it: a restart
        would not use the config's either) and the metrics address."""
        started = self._started_with.socket
        socket = new.socket if self.socket_path == started.path else replace(new.socket, path=started.path)
        return [key for key, changed in (("socket", socket != started), ("metrics", new.metrics != self._started_with.metrics))
                if changed]

    def _notice_new_cpus(self) -> None:
        """Warn of CPUs that came online since start, once per change of the online
        set: the domains, and so every placement, hold the CPUs usable at start (a
        restart reads the topology again). A CPU that goes offline and comes back needs
        nothing: each target's cpuset leaves it out meanwhile (``cpuset.follow_cpuset``)."""
        online = online_cpus(self.sysfs)
        if online == self.online:
            return
        try:
            usable = read_topology(self.sysfs, cpus=self.config.cpus).usable
        except TopologyError:  # none of the config's cpus online now: none new to use either
            usable = ()
        self.online = online
        unused = sorted(set(usable) - set(self.cpus))
        if unused:
            log.warning("CPUs came online after parlschedd started; it places threads only on those it started with, "
                        "restart it to use these (systemctl restart parlschedd)", cpus=format_cpulist(unused),
                        using=format_cpulist(self.cpus))

    def _warn_of(self, config: Config) -> list[str]:
        """Log what ``config`` asks for that this host narrows, or that reaches further
        than may be meant, as config check warns of them; each as 'key: problem'."""
        said = []
        for event, findings in (("config not all usable on this host", narrowings(config, self.sysfs, self.cgroup_root)),
                                ("config rule matches nearly every process", sweeping_rules(config))):
            for key, message in findings:
                log.warning(event, key=key, problem=message)
                said.append(f"{key}: {message}")
        return said

    def _start_metrics(self):
        if self.config.metrics is None:
            return None
        from parlschedd.daemon.prometheus import EngineCollector, Metrics, held_by, refused_listen, unreachable

        metrics = Metrics(EngineCollector(lambda: self.engine, lambda: self.counters.source.value,
                                          lambda: self.config.metrics_max_threads, self.awake))
        try:
            metrics.listen(self.config.metrics)
        except OSError as exc:  # the holder named, as config check names it
            held = f", {held_by(self.config.metrics)}" if exc.errno == errno.EADDRINUSE else ""
            raise StartupError(f"cannot listen for metrics on {self.config.metrics}: {refused_listen(exc)}{held}") from None
        log.info("metrics listening", address=self.config.metrics, port=metrics.port)
        why = unreachable()
        if why:
            log.warning("metrics not reachable", address=self.config.metrics, problem=why)
        return metrics

    # -- the engine's calls -----------------------------------------------------------

    def _mark_dirty(self) -> None:
        """The engine attached, adopted or dropped a target or a thread: state and status
        change (attach and detach included: the engine reports them too)."""
        self.statefile.dirty = self._status_stale = True
        self.status_views.clear()

    def _persist(self) -> bool:
        """The engine's call before it pins threads it has just adopted: their original
        masks go to the state file first; False when the file could not be written."""
        self.statefile.save(self.engine)
        return not self.statefile.dirty

    # -- socket -----------------------------------------------------------------------

    @property
    def _state_dir(self) -> str:
        return str(self.statefile.path.parent)

    def _config_named(self) -> str:
        """The config file the daemon read, as its refusals name it."""
        return str(config_mod.config_file(self.config_path) or "the built-in config")

    def _socket_gid(self) -> int | None:
        try:
            return group_id(self._started_with.socket.group)  # a reload's waits for a restart, as it says
        except LookupError as exc:  # removed since the start's check
            raise StartupError(f"socket.group: {exc}") from None

    def _claim_socket_path(self) -> None:
        """Refuse a socket path that cannot be used (``socket_path_problem``, or another
        daemon's), make its own directory, and clear a dead daemon's socket: at the
        start, and when the socket was removed under the daemon."""
        path = self.socket_path
        if problem := socket_path_problem(path, self._state_dir):  # before any directory is made for it
            raise StartupError(f"cannot use control socket path {path}: {problem}")
        try:
            Path(path).parent.mkdir(exist_ok=True, mode=0o755)
            found = os.lstat(path) if os.path.lexists(path) else None
        except OSError as exc:  # changed since the check
            raise StartupError(f"cannot use control socket path {path}: {exc.strerror or exc}") from None
        if found is not None and not stat.S_ISSOCK(found.st_mode):  # made since the check: never unlinked
            raise StartupError(f"cannot use control socket path {path}: it is not a socket; parlschedd does not "
                               "replace it")
        if found is not None:
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
            except OSError:
                os.unlink(path)  # stale socket of a dead daemon
            else:
                pid, _ = _peer(probe)
                raise StartupError(f"another daemon is listening on {path} (pid {pid}): stop it, or give this "
                                   "one another --socket and --state-dir")
            finally:
                probe.close()

    def _open_socket(self, gid: int | None) -> None:
        path = self.socket_path
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        umask = os.umask(0o177)  # no moment with a wider mode than the config's
        try:
            sock.bind(path)
        except OSError as exc:
            sock.close()
            raise StartupError(f"cannot bind control socket {path}: {exc.strerror or exc}") from None
        finally:
            os.umask(umask)
        try:
            os.chmod(path, self._started_with.socket.mode)
            if gid is not None:
                os.chown(path, 0, gid)
        except OSError as exc:
            sock.close()
            os.unlink(path)  # not left at the path as if it were another daemon's
            raise StartupError(f"cannot give control socket {path} mode {self._started_with.socket.mode:o} and group "
                               f"{self._started_with.socket.group}: {exc.strerror}") from None
        sock.listen(1 << 16)  # the kernel's largest queue (net.core.somaxconn) for a burst; MAX_CLIENTS bounds those served
        sock.setblocking(False)
        self.listener = sock
        self._socket_id = _file_id(path)
        self.selector.register(sock, selectors.EVENT_READ, "accept")

    def _keep_socket(self) -> None:
        """Make the control socket again when its path was removed under the daemon
        (``make clean``, an ``rm -rf`` of the run dir), with the mode and group it
        started with: else clients are told the daemon is not running while it still
        manages their threads. Connections already open stay. A path that leads to
        another file now (another daemon's socket) is left alone; that, or a socket
        that cannot be made again, is said once until it is mended."""
        found = _file_id(self.socket_path)
        if found == self._socket_id:
            self._socket_trouble_said = False
            return
        if found is not None:
            self._say_socket_trouble("the control socket's path leads to another file now; this daemon is reachable "
                                     "only on connections already open: stop it and start it again")
            return
        old = self.listener
        try:
            self._claim_socket_path()  # its directory made again, or why not
            self._open_socket(self._socket_gid())
        except (OSError, StartupError) as exc:
            self._say_socket_trouble("control socket removed, and cannot be made again", error=str(exc))
            return
        if not self._listen_paused_until:  # else it was unregistered already
            self.selector.unregister(old)
        self._listen_paused_until = 0.0
        old.close()
        self._socket_trouble_said = False
        log.warning("control socket removed under the daemon, made again", path=self.socket_path)

    def _say_socket_trouble(self, message: str, **fields: str) -> None:
        if not self._socket_trouble_said:
            log.error(message, path=self.socket_path, **fields)
            self._socket_trouble_said = True

    def _dispatch(self, key: selectors.SelectorKey, events: int) -> None:
        if key.data == "wake":
            try:
                while self._wake_r.recv(4096):
                    pass
            except BlockingIOError:
                pass
        elif key.data == "accept":
            self._accept()
        else:
            client: Client = key.data
            if events & selectors.EVENT_READ:
                self._read(client)
            if events & selectors.EVENT_WRITE and client.sock.fileno() >= 0:
                self._flush(client)

    def _accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            # EMFILE and the like: the listener stays readable, so stop watching it for
            # a moment instead of spinning on it; waiting peers stay in the backlog.
            log.warning("accept failed, pausing the listener", error=str(exc), pause_s=ACCEPT_PAUSE_S)
            self.selector.unregister(self.listener)
            self._listen_paused_until = time.monotonic() + ACCEPT_PAUSE_S
            return
        if len(self.clients) >= MAX_CLIENTS:
            self._evict_idlest()
        sock.setblocking(False)
        pid, uid = _peer(sock)
        self.rules.note_client(pid, self.engine)
        client = Client(sock, uid, last_active=time.monotonic())
        self.clients[sock.fileno()] = client
        self.selector.register(sock, selectors.EVENT_READ, client)

    def _evict_idlest(self) -> None:
        """All slots taken: the connection idle longest makes room, so idle peers can
        never lock others out (the newest connection always gets in)."""
        idlest = min(self.clients.values(), key=lambda c: (bool(c.outbuf), c.last_active))
        log.info("client slots full, closing the idlest connection", uid=idlest.uid)
        self._close(idlest)

    def _resume_listening(self, now: float) -> None:
        if self._listen_paused_until and now >= self._listen_paused_until:
            self._listen_paused_until = 0.0
            self.selector.register(self.listener, selectors.EVENT_READ, "accept")

    def _drop_stale_parts(self, now: float) -> None:
        """What is left of a long reply holds its snapshot (a status view, a history's
        samples) in memory: a client idle for PARTS_TTL_S gives it up."""
        for client in self.clients.values():
            if client.parts is not None and now - client.last_active > PARTS_TTL_S:
                client.parts = None

    def _read(self, client: Client) -> None:
        try:
            data = client.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            client.eof = True
            if client.inbuf and not client.discarding and not client.inbuf.endswith(b"\n"):
                client.inbuf += b"\n"  # the last request, sent without its newline before the shutdown
            if b"\n" not in client.inbuf and not client.outbuf:
                self._close(client)
            else:
                self.selector.modify(client.sock, selectors.EVENT_WRITE, client)
            return
        if len(client.outbuf) > MAX_PENDING or len(client.inbuf) > MAX_PENDING:  # sends, never reads (or waits)
            self._close(client)
            return
        client.inbuf += data
        if client.discarding:
            nl = client.inbuf.find(b"\n")
            if nl < 0:
                client.inbuf.clear()
                return
            del client.inbuf[: nl + 1]
            client.discarding = False
        client.last_active = time.monotonic()
        self._serve_lines(client)
        if len(client.inbuf) > protocol.MAX_LINE and client.inbuf.find(b"\n", 0, protocol.MAX_LINE + 1) < 0:
            client.inbuf.clear()
            client.parts = None  # a request too, if not one to answer
            client.outbuf += protocol.error("bad_request", f"request line longer than {protocol.MAX_LINE} bytes")
            client.discarding = True
        self._flush(client)

    def _serve_lines(self, client: Client) -> None:
        """Answer at most MAX_LINES_PER_TURN complete lines, and none while the client
        has more than MAX_PENDING unread: a pipelined burst is served a turn at a time
        as the client reads, while other clients and the period go on."""
        for _ in range(MAX_LINES_PER_TURN):
            nl = client.inbuf.find(b"\n")
            if nl < 0 or len(client.outbuf) > MAX_PENDING or self._past_deadline():
                return
            line = bytes(client.inbuf[:nl])
            del client.inbuf[: nl + 1]
            client.outbuf += self._handle(line, client)

    def _past_deadline(self) -> bool:
        """The next tick is due: requests not yet served wait until after it. Lines left
        in a client's inbuf keep it watched for EVENT_WRITE, so _flush serves them."""
        return time.monotonic() >= self._deadline

    def _flush(self, client: Client) -> None:
        try:
            sent = client.sock.send(client.outbuf) if client.outbuf else 0
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(client)
            return
        del client.outbuf[:sent]
        if b"\n" in client.inbuf and len(client.outbuf) <= MAX_PENDING:
            self._serve_lines(client)  # the next turn of a pipelined burst
        more = bool(client.outbuf) or b"\n" in client.inbuf
        if client.eof and not more:
            self._close(client)
            return
        want = (0 if client.eof else selectors.EVENT_READ) | (selectors.EVENT_WRITE if more else 0)
        self.selector.modify(client.sock, want, client)

    def _close(self, client: Client) -> None:
        self.clients.pop(client.sock.fileno(), None)
        try:
            self.selector.unregister(client.sock)
        except (KeyError, ValueError):
            pass
        client.sock.close()

    # -- requests ---------------------------------------------------------------------

    def _handle(self, line: bytes, client: Client) -> bytes:
        """The reply line to one request line. A reply longer than a line is sent in
        parts (``protocol.lines``): the first now, each next when the client asks with
        ``continue``; any other request drops what is left of it."""
        left, client.parts = client.parts, None
        try:
            request = protocol.parse_request(line)
            if request.cmd == "continue":
                part = None if left is None else next(left, None)
                if part is None:
                    raise protocol.ProtocolError(
                        "bad_request", "continue: no reply is being sent in parts (the rest of one is dropped by any "
                        f"other request, and after {PARTS_TTL_S:g} s idle)")
                client.parts = left
                return part
            if request.cmd == "status":
                replies = self.status_views.reply(client.uid, request.args.get("pid"), self.status)
            elif request.cmd == "history":
                replies = protocol.lines(self._history(request.args, client.uid))
            else:
                replies = protocol.lines([protocol.ok(**self._execute(request, client.uid))])
            first = next(replies)  # a history's first samples are encoded here
        except (protocol.ProtocolError, EngineError) as exc:
            replies = protocol.lines([protocol.error(exc.code, str(exc))])
            first = next(replies)
        except Exception as exc:  # the daemon must survive any request
            log.exception("request failed", error=str(exc))
            replies = protocol.lines([protocol.error("internal", f"internal error: {type(exc).__name__}")])
            first = next(replies)
        client.parts = replies
        return first

    def _history(self, args: dict, uid: int) -> Iterator[bytes]:
        """The text of a ``history`` reply, a sample at a time: a full history of a
        target of 1000 threads is 15-19 MB of JSON and half a second of encoding, so
        each part's samples are encoded when the client asks for that part. The
        samples are those of the moment of the request."""
        shown, exited = self.engine.history_of(args["pid"], uid)
        head = protocol.ok(pid=args["pid"], name=shown.name, observe=shown.observe, exited=exited,
                           period_s=self.config.period_s, counter_source=self.counters.source.value,
                           capacity=shown.history.samples.maxlen)
        samples = shown.history.last(args.get("last"))

        def text() -> Iterator[bytes]:
            yield head[:-2] + b',"samples":['
            for i, sample in enumerate(samples):
                yield (b"," if i else b"") + protocol.encode(sample.as_json())[:-1]
            yield b"]}\n"
        return text()

    def _execute(self, request: protocol.Request, uid: int) -> dict:
        a = request.args
        now = time.monotonic()
        if request.cmd == "ping":
            return {"version": __version__}
        if request.cmd == "attach":
            # as the rules skip it: pinning its own loop helps no one (others are refused
            # by the engine's ownership check first, which says no more than that)
            if a["pid"] == os.getpid() and uid in (0, os.getuid()):
                raise EngineError("bad_request", f"process {a['pid']} is parlschedd itself")
            target = self.engine.attach(a["pid"], now, observe=a.get("observe", False), threads=a.get("threads"),
                                        descendants=a.get("descendants", False), uid=uid)
            self.engine.left_alone.pop(a["pid"], None)
            self.statefile.save(self.engine)
            return {"target": self.engine.describe(target)}
        if request.cmd == "detach":
            target = self.engine.targets.get(a["pid"])
            threads = 0 if target is None else len(target.threads)
            restored = self.engine.detach(a["pid"], uid=uid)
            rule = None if target is None else target.rule
            if rule is not None:  # else the next rescan attaches it again
                self.engine.left_alone[target.pid] = target.handle.start_time
                log.info("detached by hand: the config rules leave it alone until it exits", pid=target.pid,
                         rule=f"targets[{rule}]")
            self.statefile.save(self.engine)
            return {"pid": a["pid"], "restored": restored, "rule": rule,  # rule: the one now leaving it alone
                    "mode": None if target is None else target.mode, "threads": threads}  # threads: let go
        if request.cmd == "reload":
            if uid != 0:
                raise EngineError("permission_denied", "only root may reload the daemon")
            errors = self.reload()
            if errors:
                raise EngineError("bad_config", f"the new config was not applied, the old one stays: {'; '.join(errors)}")
            return {"restart_pending": self.restart_pending, "warnings": self.reload_warnings}
        raise EngineError("bad_request", f"unhandled command {request.cmd}")

    def status(self, uid: int, pid: int | None = None) -> dict:
        """What ``status`` shows ``uid``: the daemon, and the targets that uid may see
        (root: all), only ``pid``'s when it is given; kept encoded by ``StatusViews``."""
        targets = [t for t in self.engine.targets.values() if uid == 0 or t.uid == uid]
        if pid is not None:
            targets = [t for t in targets if t.pid == pid]
            if not targets:
                raise self.engine.not_attached(pid, uid)
        return {
            "daemon": {
                "pid": os.getpid(), "version": __version__,
                "uptime_s": round(time.monotonic() - self.started, 3),
                "counter_source": self.counters.source.value,
                "period_s": self.config.period_s, "domain_period_s": self.config.domain_period_s,
                "domains": self.domains, "cpus": self.cpus, "loop": self.stats.as_json(self.config.period_s),
            },
            "targets": [self.engine.describe(t, time.monotonic()) for t in targets],
        }


def _peer(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a Unix socket (SO_PEERCRED's
    ``struct ucred``), as it was when it connected."""
    pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return pid, uid


def _file_id(path: str) -> tuple[int, int] | None:
    """(st_dev, st_ino) of what ``path`` names, None when nothing is there."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
