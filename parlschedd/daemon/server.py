"""The daemon process: period loop, signals, requests. It composes the engine
(engine.py), the config rules' matches (rules.py), the state file (statefile.py), the
cache of status replies (status_cache.py) and the control socket the requests come
by (control.py), which it tells what a request line means.

A single thread runs everything: a selector waits for socket traffic until the next
period's deadline, then the engine ticks. Deadlines advance by whole periods from the
start, so the loop does not drift; an overrun skips the periods it missed. Requests
never hold a tick back by more than one request: once the deadline has passed, the
clients still waiting are served after the tick (see ``_past_deadline``).
"""

from __future__ import annotations

import errno
import os
import re
import selectors
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np
import structlog

from parlschedd import __version__, config as config_mod
from parlschedd.build import build_id
from parlschedd.config import Config, ConfigError, ConfigUnreadable, ConfigUntrusted
from parlschedd.daemon import notify, protocol
from parlschedd.daemon.control import PARTS_TTL_S, ControlSocket, SocketUnusable
from parlschedd.daemon.engine import Engine, EngineError
from parlschedd.daemon.rules import RuleMatcher
from parlschedd.daemon.statefile import StateDirUnusable, StateFile, by_hand, reattach
from parlschedd.daemon.status_cache import StatusViews
from parlschedd.host import cgroups, heap, procfs
from parlschedd.host.affinity import Pinner
from parlschedd.host.base import CounterSource
from parlschedd.host.errors import HostError
from parlschedd.cpulist import format_cpulist
from parlschedd.host.perf import CounterSet, detect_source, raise_fd_limit
from parlschedd.host.privileges import CAP_SYS_NICE, effective_capabilities, perfmon_capable, user_namespace_map
from parlschedd.hostcheck import (config_file_untrusted, metrics_port_taken, narrowings, one_line, refusals,
                                  state_dir_problem, sweeping_rules)
from parlschedd.topology import NoCpusFound, TopologyError, online_cpus, read_topology
from parlschedd.words import signal_name

log = structlog.get_logger("parlschedd")
# SIGQUIT asks a program to stop as SIGTERM does (its core dump matters less than the
# masks), and SIGXCPU says that RLIMIT_CPU's SIGKILL is near. Every other signal whose
# default action ends a process (signal(7), but for the faults a process raises itself)
# would end it mid-period with every thread pinned: those admins send daemons by habit
# (USR1 to reopen logs, ...), a UPS's SIGPWR, profilers' timers, the real-time ones.
# Python itself ignores SIGPIPE and SIGXFSZ.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGXCPU)
IGNORED_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF, signal.SIGIO,
                   signal.SIGPWR, *((signal.SIGSTKFLT,) if hasattr(signal, "SIGSTKFLT") else ()),
                   *range(signal.SIGRTMIN, signal.SIGRTMAX + 1))
# How often the freed pages inside malloc's heap go back to the kernel (host/heap.py):
# a walk of the heap, a fraction of a millisecond, against its slow creep under churn
HEAP_TRIM_EVERY_S = 60.0


class StartupError(Exception):
    """The daemon cannot start; the message is the one-line reason."""


def host_engine(config: Config, domains: list[list[int]], counters: CounterSet, proc_root: str, sysfs: str,
                cgroup_root: str, **hooks: object) -> Engine:
    """The engine on this host's threads: its Pinner and cpusets read through the
    given /proc, sysfs and cgroup roots."""
    pinner = Pinner(allowed=partial(cgroups.task_cpus, root=cgroup_root, proc_root=proc_root),
                    proc_root=proc_root, sysfs=sysfs)
    return Engine(config, domains, counters, pinner, proc_root=proc_root,
                  allowed=cgroups.CpusetReader(cgroup_root, proc_root), sysfs=sysfs, **hooks)


def _cpus_of(domains: list[list[int]]) -> list[int]:
    """The CPUs of a domain layout, ascending: those the daemon places threads on."""
    return sorted(cpu for domain in domains for cpu in domain)


def put_back_after_refusal(state_dir: str, proc_root: str = procfs.PROC_ROOT, sysfs: str = "/sys",
                           cgroup_root: str = cgroups.CGROUP_ROOT) -> None:
    """Before a refused start exits: put back the masks a crashed run left pinned.
    Under systemd the refusal (exit 78, not restarted) ends the unit, and systemd removes
    /run/parlsched with the state file that holds their originals
    (RuntimeDirectoryPreserve=restart keeps it across restarts only): a crash, then a
    restart into a config broken meanwhile, left those threads pinned for good. The file
    is written again without them, keeping the targets attached by hand for a start after
    the fix where the directory stays. Nothing is done when there is no file, when
    another daemon holds the state dir or it cannot be trusted (``StateFile.lock``), or
    without CAP_SYS_NICE (refused for lacking it: other users' threads would refuse
    their masks); and the file is left as it was when a restore failed, whose record
    would be lost with the rewrite. A state dir on a file system gone read-only (the
    refusal's reason) is read: the masks are put back all the same, the file left as
    it was; its advice, another --state-dir, would leave them pinned for good."""
    if CAP_SYS_NICE not in effective_capabilities(proc_root):
        return
    state = StateFile(state_dir)
    read_only = False
    try:
        if not state.path.is_file():
            return
        try:
            state.lock()
        except StateDirUnusable:
            read_only = bool(os.statvfs(state.path.parent).f_flag & os.ST_RDONLY)
            if not read_only or state_dir_problem(str(state.path.parent), os.geteuid()):  # trusted as lock() trusts
                raise
            state.lock_to_read()
    except (OSError, StateDirUnusable):  # a dir closed to this user, or in use
        return
    try:
        engine = host_engine(Config(), [sorted(online_cpus(sysfs))], CounterSet(CounterSource.SCHEDSTAT, proc_root=proc_root),
                             proc_root, sysfs, cgroup_root)
        saved = state.recover(engine)
        if not state.restores_failed and not read_only:
            state.save(engine, saved)
    finally:
        state.unmake()  # the lock file too, where this made it


def _read_from(config: Config) -> str:
    """The file ``config`` was read from, absolute, as the start and reload logs name
    it (what was read, not what the path names by now); else the built-in config."""
    return os.path.abspath(config.read_from.path) if config.read_from else "the built-in config"


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
        self.build = build_id()  # the code loaded now, not what an install puts there later
        self._started_with = config  # socket and metrics are set up from it, once
        self.restart_pending: list[str] = []  # keys of the config file that wait for a restart
        self.reload_warnings: list[str] = []  # what the last reload applied but cannot use here (a rule's cgroup not there)
        self.reloaded = False  # a reload applied since the loop last looked
        self.socket_path, self.statefile = socket_path, StateFile(state_dir)
        self.sysfs, self.proc_root, self.cgroup_root = sysfs, proc_root, cgroup_root
        self.started = time.monotonic()
        self.should_exit = False
        self.reload_requested = False
        self.ignored_signals: set[int] = set()
        self.stats = LoopStats()
        self.selector = selectors.DefaultSelector()
        self.control = ControlSocket(socket_path, config.socket, self._state_dir, self.selector, serve=self._handle,
                                     on_connect=self._note_client, past_deadline=self._past_deadline)
        self.rules = RuleMatcher(proc_root, cgroup_root)
        self._deadline = float("inf")  # of the next tick; requests wait for it once passed
        self.status_views = StatusViews()
        self._status_told = ""  # the STATUS= systemd shows in `systemctl status`, as last sent
        self._status_stale = False  # threads or targets came or went since it was sent
        self.changes = 0  # times they did (``_mark_dirty``): with the periods, how new the metrics are
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
        self.cpus = _cpus_of(self.domains)  # an explicit layout's, not all usable
        self.online = topology.online
        self._warn_of(self.config)
        source = self._counter_source(caps)
        self.counters = CounterSet(source, proc_root=self.proc_root)
        self.engine = host_engine(self.config, self.domains, self.counters, self.proc_root, self.sysfs,
                                  self.cgroup_root, on_change=self._mark_dirty, persist=self._persist)
        try:
            self.statefile.lock()
        except StateDirUnusable as exc:
            raise StartupError(str(exc)) from None
        try:
            gid = self.control.group_id()  # all three checked before recover changes any thread
            self.control.claim()
            saved = self.statefile.recover(self.engine)
            self.metrics = self._start_metrics()
            self.control.open(gid)
        except BaseException as exc:  # a refused start leaves no directory or lock file of its own behind
            self.control.unclaim()  # first: its directory may be inside the state dir
            self.statefile.unmake()
            if isinstance(exc, SocketUnusable):
                raise StartupError(str(exc)) from None
            raise
        self._install_signals()
        now = time.monotonic()
        for t in saved:
            reattach(self.engine, t, now, self.proc_root)
        self.rules.rescan(self.engine, self.config.targets, now)
        self.engine.forget_unclaimed_hand_overs()
        self.statefile.save(self.engine)
        log.info("started", version=__version__, build=self.build, config=_read_from(self.config),
                 socket=os.path.abspath(self.socket_path), state_dir=os.path.abspath(self._state_dir),
                 domains=self.domains, counter_source=source.value, period_s=self.config.period_s)
        self._status_told = self._status_text()  # the targets attached again from the last run counted
        notify.notify(f"READY=1\nSTATUS={self._status_told}\nMAINPID={os.getpid()}")

    def _counter_source(self, caps: frozenset[int]) -> CounterSource:
        """The counter source the config asks for, or the next the host gives; said
        when it is not the one asked for, and where the host's namespace or missing
        CAP_PERFMON will leave threads unmanaged."""
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
        if (uid_map := user_namespace_map(self.proc_root)) is not None:
            log.warning("running in a user namespace: its capabilities hold inside it alone, so the kernel refuses "
                        "to set the affinity of threads of processes outside it, and perf counters without "
                        "CAP_PERFMON in the initial namespace; those threads are not managed", uid_map=uid_map)
        if source.value.startswith("perf:") and not perfmon_capable(caps, uid_map is None):
            log.warning("without CAP_PERFMON the kernel refuses perf counters on other users' threads, so those "
                        "are not managed; give the daemon CAP_PERFMON, or set utility: schedstat", using=source.value)
        return source

    def _install_signals(self) -> None:
        """Signals wake the loop's select through a socketpair: stop ones set
        ``should_exit``, SIGHUP asks for a reload, the ignored ones are said once a
        period."""
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

    def handle_exit(self, signum: int, frame: object = None) -> None:
        self.should_exit = True

    def handle_reload(self, signum: int = 0, frame: object = None) -> None:
        self.reload_requested = True

    def handle_ignored(self, signum: int, frame: object = None) -> None:
        self.ignored_signals.add(signum)

    def run(self) -> None:
        with self.awake:
            try:
                self.startup()  # raises before the loop owns anything to undo
            except (TopologyError, HostError) as exc:  # a refused start (exit 78), unlike a failure once running
                raise StartupError(str(exc)) from exc
            try:
                self.main_loop()
            finally:
                self.shutdown()

    def main_loop(self) -> None:
        """Serve the socket until the next period's deadline, then tick; rescan every
        rescan_s, trim the heap every HEAP_TRIM_EVERY_S, reload on SIGHUP, and tell
        systemd's watchdog, until ``should_exit``."""
        period = self.config.period_s
        deadline = time.monotonic() + period
        next_rescan = time.monotonic() + self.config.rescan_s
        next_trim = time.monotonic() + HEAP_TRIM_EVERY_S
        watchdog = notify.watchdog_interval()
        next_watchdog = time.monotonic()
        while not self.should_exit:
            self._deadline = deadline
            # a period longer than the watchdog's half timeout must not keep the pings
            # waiting for it: systemd would kill a daemon that is well
            timeout = max(0.0, (min(deadline, next_watchdog) if watchdog else deadline) - time.monotonic())
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
                self._say_ignored_signals()
            if self.reload_requested:
                self.reload_requested = False
                try:
                    self.reload()
                except Exception as exc:  # a bug in reloading must not stop the daemon SIGHUP was meant to keep
                    log.error("reload failed, keeping the old config", error=f"{type(exc).__name__}: {exc}")
            now = time.monotonic()
            if self.reloaded:  # by SIGHUP or a request: a period of 8 s reloaded to 0.05 s waited out the 8 s
                self.reloaded = False
                deadline = min(deadline, now + self.config.period_s)
                next_rescan = min(next_rescan, now + self.config.rescan_s)
            if watchdog and now >= next_watchdog:
                notify.notify(f"WATCHDOG=1\nSTATUS={self._status_told}")
                next_watchdog = now + watchdog
            if now < deadline:
                continue
            started = time.perf_counter()
            try:
                self.engine.tick(now)
            except Exception as exc:  # out of fds, a bug: log, keep serving
                log.error("period failed", error=f"{type(exc).__name__}: {exc}")
            if now >= next_rescan:  # after the tick: a name rule reads every process's names, and no period waits on it
                next_rescan = now + self.config.rescan_s
                self._rescan(now)
            if now >= next_trim:
                next_trim = now + HEAP_TRIM_EVERY_S
                heap.trim()
            try:
                if self.statefile.dirty:  # what the tick and the rescan changed, before the next tick pins by it
                    self.statefile.save(self.engine)
            except Exception as exc:  # a bug: log, keep serving
                log.error("period failed", error=f"{type(exc).__name__}: {exc}")
            self.control.resume_listening(now)
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
            self.control.drop_stale_parts(now)
            if self._status_stale:
                self._tell_status()

    def _say_ignored_signals(self) -> None:
        """Each signal caught since the last period that neither stops nor reloads the
        daemon: a warning naming it and the ones that do."""
        for signum in sorted(self.ignored_signals):
            log.warning("signal ignored", signal=signal_name(signum),
                        hint="SIGTERM, SIGINT, SIGQUIT or SIGXCPU stop the daemon and restore every thread; "
                             "SIGHUP reloads")
        self.ignored_signals.clear()

    def _rescan(self, now: float) -> None:
        """Every rescan_s: the rules' matches, each target's cpuset, owner, name and
        filter, CPUs come online; then the socket and the state dir's lock."""
        try:
            self.rules.rescan(self.engine, self.config.targets, now)
            self.engine.resync(now)
            self.engine.refilter(now)
            self._notice_new_cpus()
        except Exception as exc:  # /proc unreadable, out of fds: the periods go on
            log.error("rescan failed", error=f"{type(exc).__name__}: {exc}")
        try:  # apart: a rescan failing every time must not keep the daemon unreachable
            self.control.keep()
            self.statefile.keep_lock()
        except Exception as exc:  # a bug: said, and tried again at the next rescan
            log.error("socket and lock check failed", error=f"{type(exc).__name__}: {exc}")

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
        self.statefile.restore_left(self.engine)  # while the records tell this daemon's threads from another's
        if self.config.restore_on_exit:
            restored = self.engine.detach_all(keep_hand_overs=True)
            report = self.engine.pinner.restore_all()
            log.info("restored", threads=restored + len(report.restored), gone=len(report.gone), failed=len(report.failed))
        else:
            log.info("threads left as placed (restore_on_exit: false); the next start restores them from the state "
                     "file", threads=len(self.engine.pinner.records), state_file=str(self.statefile.path))
        self.statefile.save_at_stop(self.engine, hand_attached)
        self.counters.close_all()
        if self.metrics is not None:
            self.metrics.close()
        self.control.close()
        self.selector.close()
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
        pending = self._waiting_for_restart(new)
        judged = {*pending, *fixed}
        if judged & {"domains", "cpus"}:  # each bounds the other: new cpus may refuse the domains kept
            judged |= {"domains", "cpus"}
        refused = [f for f in refusals(new, self.socket_path, self.sysfs, self._state_dir, euid=os.geteuid(),
                                       own_metrics=self._started_with.metrics)
                   if re.split(r"[.\[]", f.key)[0] in judged] if judged else []
        if refused:  # a restart, due one day or advised, would refuse it: config check's words, as at start
            errors = [one_line([finding], self._config_named()) for finding in refused]
            log.error("reload refused, keeping the old config: the next start would refuse it", errors=errors)
            return errors
        if fixed:
            # every target's scheduler and pins are built on the running layout, its counters on the source
            errors = [f"{', '.join(fixed)}: takes effect at a restart (systemctl restart parlschedd), not a reload"]
            log.error("reload refused, keeping the old config", errors=errors)
            return errors
        if new.period_s != self.config.period_s:
            self.stats.starts.clear()  # the jitter is measured against one period, the new one
        self.config = new
        self.engine.config = new
        self.restart_pending = pending
        if self.restart_pending:
            log.warning("applied but for what takes effect at the next restart", keys=self.restart_pending)
        self.reload_warnings = self._warn_of(new)  # as the start says them
        if "metrics" in pending:  # config check's warning: the next start would not listen while it is taken
            for key, message in metrics_port_taken(new.metrics):
                log.warning("metrics port in use", key=key, problem=message)
                self.reload_warnings.append(f"{key}: {message}")
        self.reloaded = True  # the loop brings its deadlines in to a shorter period_s or rescan_s
        self.changes += 1  # the metrics are built again (metrics_max_threads)
        relearning = self.engine.relearn()
        log.info("reloaded", config=_read_from(new), targets_learning_afresh=relearning)
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
        try:  # what a restart would place threads on
            usable = _cpus_of(read_topology(self.sysfs, cpus=self.config.cpus).domains(self.config.domains))
        except TopologyError:  # none of the config's cpus online now: none new to use either
            usable = []
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
        narrowed = narrowings(config, self.sysfs, self.cgroup_root, self.proc_root)
        for event, findings in (("config not all usable on this host", narrowed),
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
                                          lambda: self.config.metrics_max_threads, self.awake,
                                          lambda: (self.stats.periods, self.changes)))
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
        self.changes += 1

    def _persist(self) -> bool:
        """The engine's call before it pins threads it has just adopted: their original
        masks go to the state file first; False when the file could not be written."""
        self.statefile.save(self.engine)
        return not self.statefile.dirty

    # -- the control socket's calls ---------------------------------------------------

    def _dispatch(self, key: selectors.SelectorKey, events: int) -> None:
        if key.data == "wake":
            try:
                while self._wake_r.recv(4096):
                    pass
            except BlockingIOError:
                pass
        else:
            self.control.dispatch(key, events)

    def _note_client(self, pid: int) -> None:
        """A peer connected: while it lives, the config rules never take it for a
        workload."""
        self.rules.note_client(pid, self.engine)

    def _past_deadline(self) -> bool:
        """The next tick is due: requests not yet served wait until after it. Lines left
        in a client's inbuf keep it watched for EVENT_WRITE, so the control socket
        serves them after the tick."""
        return time.monotonic() >= self._deadline

    # -- paths ------------------------------------------------------------------------

    @property
    def _state_dir(self) -> str:
        return str(self.statefile.path.parent)

    def _config_named(self) -> str:
        """The config file the daemon read, as its refusals name it."""
        return str(config_mod.config_file(self.config_path) or "the built-in config")

    # -- requests ---------------------------------------------------------------------

    def _handle(self, line: bytes, uid: int, left: Iterator[bytes] | None) -> tuple[bytes, Iterator[bytes] | None]:
        """The reply line to one request line of a client of ``uid``, and the rest of
        the reply. A reply longer than a line is sent in parts (``protocol.lines``):
        the first now, each next when the client asks with ``continue``, from ``left``
        (the rest of its last reply); any other request drops what is left of it."""
        try:
            request = protocol.parse_request(line)
            if request.cmd == "continue":
                part = None if left is None else next(left, None)
                if part is None:
                    raise protocol.ProtocolError(
                        "bad_request", "continue: no reply is being sent in parts (the rest of one is dropped by any "
                        f"other request, and after {PARTS_TTL_S:g} s idle)")
                return part, left
            if request.cmd == "status":
                replies = self.status_views.reply(uid, request.args.get("pid"), self.status)
            elif request.cmd == "history":
                replies = protocol.lines(self._history(request.args, uid))
            else:
                replies = protocol.lines([protocol.ok(**self._execute(request, uid))])
            first = next(replies)  # a history's first samples are encoded here
        except (protocol.ProtocolError, EngineError) as exc:
            replies = protocol.lines([protocol.error(exc.code, str(exc))])
            first = next(replies)
        except Exception as exc:  # the daemon must survive any request
            log.exception("request failed", error=str(exc))
            replies = protocol.lines([protocol.error("internal", f"internal error: {type(exc).__name__}")])
            first = next(replies)
        return first, replies

    def _history(self, args: dict, uid: int) -> Iterator[bytes]:
        """The text of a ``history`` reply, a sample at a time: a full history of a
        target of 1000 threads is 15-19 MB of JSON and half a second of encoding, so
        each part's samples are encoded when the client asks for that part. The
        samples are those of the moment of the request."""
        shown, exited = self.engine.history_of(args["pid"], uid)
        head = protocol.ok(pid=args["pid"], name=shown.name, observe=shown.observe, exited=exited,
                           period_s=self.config.period_s, counter_source=self.counters.source.value,
                           capacity=shown.history.capacity, started=shown.history.shown_started,
                           dropped=shown.history.dropped)
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
            return {"version": __version__, "build": self.build}
        if request.cmd == "attach":
            # as the rules skip it: pinning its own loop helps no one (others are refused
            # by the engine's ownership check first, which says no more than that)
            if a["pid"] == os.getpid() and uid in (0, os.getuid()):
                raise EngineError("bad_request", f"process {a['pid']} is parlschedd itself")
            target = self.engine.attach(a["pid"], now, observe=a.get("observe", False), threads=a.get("threads"),
                                        descendants=a.get("descendants", False), uid=uid)
            self.engine.left_alone.pop(a["pid"], None)
            self.statefile.save(self.engine)
            # null: written; else why not, and no thread is pinned before its original is on disk
            return {"target": self.engine.describe(target), "state_file_error": self.statefile.error}
        if request.cmd == "detach":
            return self._detach(a["pid"], uid)
        if request.cmd == "reload":
            if uid != 0:
                raise EngineError("permission_denied", "only root may reload the daemon")
            errors = self.reload()
            if errors:
                raise EngineError("bad_config", f"the new config was not applied, the old one stays: {'; '.join(errors)}")
            return {"restart_pending": self.restart_pending, "warnings": self.reload_warnings}
        raise EngineError("bad_request", f"unhandled command {request.cmd}")

    def _detach(self, pid: int, uid: int) -> dict:
        """A client's detach: the rules leave alone a process one of them matches, until
        it exits; the state file says so before any mask is put back."""
        target = self.engine.target_of(pid, uid)
        threads = len(target.threads)
        rule = target.rule
        if rule is None:  # attached by hand, but a rule may match it too
            rule = self.rules.first_matching(self.config.targets, target.pid)
        if rule is not None:  # else the next rescan attaches it again
            self.engine.left_alone[target.pid] = target.handle.start_time
        # written before a mask is put back, the originals still in: a daemon killed inside the
        # detach left a file that attached the target again at the next start
        self.statefile.save(self.engine, [t for t in by_hand(self.engine) if t["pid"] != target.pid])
        detach_unsaved = self.statefile.error is not None
        try:
            restored = self.engine.detach(target.pid, uid=uid)
        except BaseException:  # a bug: what the file holds is what the daemon still does
            if target.pid in self.engine.targets:
                self.engine.left_alone.pop(target.pid, None)
            self.statefile.save(self.engine)
            raise
        if rule is not None:
            log.info("detached by hand: the config rules leave it alone until it exits", pid=target.pid,
                     rule=f"targets[{rule}]")
        self.statefile.save(self.engine)
        # not written, before the detach nor after: a start after a crash attaches it again
        unsaved = self.statefile.error if detach_unsaved else None
        return {"pid": pid, "restored": restored, "rule": rule,  # rule: the one now leaving it alone
                "mode": target.mode, "threads": threads,  # threads: let go
                "state_file_error": unsaved}

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
                "pid": os.getpid(), "version": __version__, "build": self.build,
                "uptime_s": round(time.monotonic() - self.started, 3),
                "counter_source": self.counters.source.value,
                "period_s": self.config.period_s, "domain_period_s": self.config.domain_period_s,
                "domains": self.domains, "cpus": self.cpus, "loop": self.stats.as_json(self.config.period_s),
                "state_file_error": self.statefile.error,  # null: written; else why not (StateFile.error)
                "trees_listed": "after a birth" if self.engine.births_seen else "every period",
            },
            "targets": [self.engine.describe(t, time.monotonic()) for t in targets],
        }
