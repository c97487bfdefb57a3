"""The real engine on a simulated NUMA box (``parlschedd.host.simulated``): real threads of a
process the test starts, found through /proc; simulated CPUs, speeds and counters.

This host has one NUMA node and 2 CPUs, so what the engine does on two domains of four
cores can only be seen through simulated adapters: the machine's CPUs (and so the
kernel's affinity table over them) and a PMU that counts what the sim's game says a
thread does where it is placed. Everything else is the daemon's own code.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from parlschedd.config import Config
from parlschedd.daemon.engine import Engine
from parlschedd.host import procfs
from parlschedd.host.base import Drift
from parlschedd.host.errors import InvalidMask
from parlschedd.learning.scheduler import FREE, TwoLevelScheduler
from parlschedd.sim.background import Background
from parlschedd.sim.game import Machine, Threads
from parlschedd.host.simulated import Clock, SimCounters, SimHost
from parlschedd.sim.simulator import Observation, ParlschedPolicy, Workload, simulate
from tests.conftest import fake_cpus
from tests.reliability.helpers import sleepy, tids_of

PERIOD = 0.1  # T_CPU, seconds of the simulated clock
DOMAIN_EVERY = 5  # T_NUMA / T_CPU: Level 1 every 5 periods, so a few hundred periods show it
THREADS = 8

# The threads join the simulated domain of the real CPU /proc says they ran on (the
# engine's ``_ran_elsewhere``): domain 0 (CPUs 0-3) wherever this host's CPUs are 0-3.
joins_domain_0 = pytest.mark.skipif(not os.sched_getaffinity(0) <= {0, 1, 2, 3},
                                    reason="the real CPUs must be simulated CPUs of domain 0")


def two_by_four(fast: int) -> Machine:
    """2 domains x 4 cores; the cores of domain ``fast`` run 3 times as fast."""
    speeds = np.ones(8)
    speeds[4 * fast: 4 * fast + 4] = 3.0
    return Machine(speeds, np.arange(8) // 4)


def config(seed: int = 0, **learning: object) -> Config:
    """The daemon's defaults (free threads included), seeded, with T_NUMA = 5 T_CPU."""
    params = dataclasses.replace(Config().learning, seed=seed, **learning)
    return dataclasses.replace(Config(), learning=params, period_s=PERIOD, domain_period_s=PERIOD * DOMAIN_EVERY)


@pytest.fixture
def sysfs(tmp_path: Path) -> str:
    """The simulated machine's 8 CPUs, all online, where the engine reads which are."""
    return fake_cpus(tmp_path / "sys", "0-7", "0-7")


@pytest.fixture
def target() -> Iterator[int]:
    """A real process of THREADS sleeping threads (the main one among them): only
    their existence is real to the engine here, their work is the simulated counters'."""
    proc = sleepy(THREADS)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def engine_on(host: SimHost, cfg: Config, sysfs: str) -> Engine:
    return Engine(cfg, host.machine.domains, SimCounters(host), host.pinner(), allowed=host.allowed, sysfs=sysfs)


def domain_share(host: SimHost, tids: list[int], domain: int) -> float:
    """The fraction of ``tids`` whose mask lies in ``domain``."""
    cores = set(np.flatnonzero(host.machine.domain_of_core == domain).tolist())
    return sum(host.get_affinity(t) <= cores for t in tids) / len(tids)


Decisions = list[tuple[list[int], list[int]]]  # per period: each thread's domain and CPU (FREE: the whole domain)


def learn(fast: int, pid: int, sysfs: str, periods: int) -> tuple[Decisions, Decisions, float]:
    """``periods`` periods of the engine on ``two_by_four(fast)``, and as many steps of
    the pure simulator (``simulate``) on the same machine and threads with the same
    seed and stream: each one's (alpha, cpus) per period, and the share of the
    engine's threads on domain 1 at the end."""
    machine, cfg, clock = two_by_four(fast), config(), Clock(100.0)
    host = SimHost(machine, clock)
    policy = ParlschedPolicy(machine, cfg.learning, cfg.domain_every)
    policy.scheduler = TwoLevelScheduler(machine.domains, cfg.learning, cfg.domain_every, stream=1)  # the engine's first
    expected: Decisions = []

    class Recorded:
        def decide(self, obs: Observation) -> np.ndarray:
            out = policy.decide(obs)
            expected.append((policy.scheduler.alpha.tolist(), policy.scheduler.cpus.tolist()))
            return out

    simulate(Recorded(), machine, Workload(Threads(np.ones(THREADS))), Background(machine.n_cores), periods)
    engine = engine_on(host, cfg, sysfs)
    engine.attach(pid, clock.now)
    got: Decisions = []
    try:
        for k in range(periods):  # the first at attach's time: no rate yet, as the simulator's first step
            engine.tick(clock.now if k == 0 else clock.advance(PERIOD))
            s = engine.targets[pid].scheduler
            got.append((s.alpha.tolist(), s.cpus.tolist()))
            for tid, cpu, domain in zip(s.keys.tolist(), s.cpus.tolist(), s.alpha.tolist()):
                want = {cpu} if cpu != FREE else set(machine.domains[domain])
                assert host.get_affinity(tid) == want, "the simulated kernel holds the engine's placement"
        share = domain_share(host, list(engine.targets[pid].threads), 1)
    finally:
        engine.detach_all()
    return expected, got, share


@joins_domain_0
def test_the_engine_learns_to_move_threads_to_the_faster_domain(target: int, sysfs: str) -> None:
    """Simulated: a 2-domain x 4-core machine (this one has one NUMA node and 2 CPUs)
    whose domain 1 cores run 3 times as fast, and the counters of its PMU. Real: the
    engine, its learning, the target's threads and /proc. The threads start in domain
    0 (where this host's CPUs 0-1 are). The expectation is computed by the pure
    simulator, which drives the same scheduler with the game's utilities directly:
    through the seam the engine makes the very same decisions every period, and after
    600 periods 7 of the 8 threads are on the fast domain (Level 1's exploration,
    zeta, keeps sending one to try the empty domain). With the speeds swapped the same code keeps 7 of 8 on domain 0:
    where they go is learned from the counters, not fixed."""
    periods = 600
    expected, got, share = learn(1, target, sysfs, periods)
    assert got[0][0] == [0] * THREADS, "all start in domain 0"
    assert got == expected
    assert share == np.mean(np.asarray(expected[-1][0]) == 1) == 7 / 8

    swapped_expected, swapped, swapped_share = learn(0, target, sysfs, periods)
    assert swapped == swapped_expected
    assert swapped_share == 1 / 8 and swapped != got


def taskset(host: SimHost, pid: int) -> dict[int, frozenset[int]]:
    """Different masks on the target's threads before attach, as its program set
    them (the first keeps every CPU): the originals to put back."""
    tids = tids_of(pid)
    for tid, mask in zip(tids[1:], [{2, 3}, {5}, {0, 4}, {1, 2, 3, 4, 5, 6, 7}, {6, 7}, {3}, {0, 1, 2, 3}]):
        host.set_affinity(tid, frozenset(mask))
    return {tid: host.get_affinity(tid) for tid in tids}


def moved_about(target: int, sysfs: str, periods: int = 100) -> tuple[SimHost, Engine, dict[int, frozenset[int]]]:
    """The target's threads, each on a mask of its own (their masks before, returned),
    attached to an engine on the 2 x 4 machine and moved about for ``periods``."""
    clock = Clock()
    host = SimHost(two_by_four(1), clock)
    before = taskset(host, target)
    engine = engine_on(host, config(), sysfs)
    engine.attach(target, clock.now)
    for _ in range(periods):
        engine.tick(clock.advance(PERIOD))
    return host, engine, before


def test_detach_restores_each_threads_original_mask(target: int, sysfs: str) -> None:
    """Simulated: the 2 x 4 machine's CPUs (this one has 2: CPU 5 cannot be set on a
    real thread here), so the masks are the simulated kernel's. Each thread had a mask
    of its own before attach; the engine moves them about for 100 periods, and detach
    gives each back exactly the mask it had, as sched_getaffinity would read it."""
    host, engine, before = moved_about(target, sysfs)
    during = {tid: host.get_affinity(tid) for tid in before}
    assert sum(during[t] != before[t] for t in before) >= THREADS - 1, "the engine placed them"
    assert engine.detach(target) == THREADS
    assert {tid: host.get_affinity(tid) for tid in before} == before
    assert not engine.pinner.records


def test_a_restart_restores_the_originals_saved_by_the_last_run(target: int, sysfs: str) -> None:
    """Simulated as above. A daemon killed mid-run leaves its actuator's records (the
    state file); the next one reads them (``from_saved``) and restores every thread
    (``restore_all``) to the mask it had before the first attach."""
    host, engine, before = moved_about(target, sysfs)
    saved = json.loads(json.dumps(engine.pinner.to_json()))  # as the state file has it
    recovered = engine.pinner.from_saved(saved, engine.placements)
    report = recovered.restore_all()
    assert sorted(report.restored) == sorted(before) and not (report.gone or report.failed or report.kept)
    assert {tid: host.get_affinity(tid) for tid in before} == before


@pytest.mark.parametrize("free", [True, False], ids=["free", "pinned"])
def test_the_actuator_never_pins_outside_the_cpuset(target: int, sysfs: str, free: bool) -> None:
    """Simulated: the 2 x 4 machine and a cpuset of CPUs 0-2 and 5-6 on it (cgroups
    cannot give this host's threads CPUs it lacks). The engine reads the cpuset through
    ``SimHost.allowed`` as it reads cgroups; over 200 periods every mask a thread gets
    is inside it: a core is only ever drawn inside it, and a whole domain asked for a
    free thread is narrowed to it, as the kernel does. A pin with no CPU of it is
    refused and changes nothing; detach restores the originals, inside it too."""
    cpuset = frozenset({0, 1, 2, 5, 6})
    clock = Clock()
    host = SimHost(two_by_four(1), clock, cpuset=cpuset)
    before = {tid: host.get_affinity(tid) for tid in tids_of(target)}
    assert set(before.values()) == {cpuset}
    engine = engine_on(host, config(free=free, free_prior=0.5), sysfs)
    engine.attach(target, clock.now)
    for _ in range(200):
        engine.tick(clock.advance(PERIOD))
    asked = {a for _, a, _ in host.set_log}
    assert all(got <= cpuset and got == a & cpuset for _, a, got in host.set_log)
    assert {a for a in asked if len(a) == 1} <= {frozenset({c}) for c in cpuset}, "no core drawn outside"
    if free:
        assert frozenset({4, 5, 6, 7}) in asked, "a whole domain asked for, narrowed to 5-6"
    tid = next(iter(engine.pinner.records))
    mask = host.get_affinity(tid)
    [outcome] = engine.pinner.pin_many([(tid, frozenset({3, 7}))])
    assert isinstance(outcome, InvalidMask) and host.get_affinity(tid) == mask
    engine.detach(target)
    assert {tid: host.get_affinity(tid) for tid in before} == before


@pytest.mark.parametrize("keeps", [True, False], ids=["linux-6.2+", "before-6.2"])
def test_the_originals_come_back_exactly_after_the_cpuset_shrinks_and_grows(target: int, keeps: bool) -> None:
    """Simulated: the 2 x 4 machine's kernel as of Linux 6.2 (a cpuset change keeps
    each thread's asked mask) and as before (it gives the whole cpuset). The same
    scenario on both: threads with masks of their own are adopted and pinned, the
    cpuset shrinks to domain 0 and grows back to every CPU. The kernels leave the
    threads different masks (6.2+: our pins again; before: the whole cpuset), each
    read as the kernel's by the Pinner (its ``_by_kernel``, by ``keeps_asked_mask``),
    never as someone else's; and restore_all gives every thread exactly its original."""
    host = SimHost(two_by_four(1), Clock(), keeps_asked_mask=keeps)
    before = taskset(host, target)
    tids = list(before)
    pinner = host.pinner()
    for tid in tids:
        pinner.adopt(tid, procfs.thread_start_time(tid))
    pins = [frozenset(p) for p in ({3}, {6}, {4, 5, 6, 7}, {0, 1, 2, 3}, {1}, {5}, {2, 3, 4, 5}, {7})]
    assert pinner.pin_many(list(zip(tids, pins))) == [True] * THREADS

    host.set_cpuset(frozenset({0, 1, 2, 3}))
    none_left = [t for t, p in zip(tids, pins) if not p & {0, 1, 2, 3}]
    whole_given = [t for t, p in zip(tids, pins) if p != {0, 1, 2, 3}]
    assert pinner.drifted(tids) == Drift(none_left if keeps else whole_given, [])

    host.set_cpuset(frozenset(range(8)))  # a cpuset of every CPU, still a cpuset (None: no cpuset applies)
    after = {t: host.get_affinity(t) for t in tids}
    assert after == (dict(zip(tids, pins)) if keeps else dict.fromkeys(tids, frozenset(range(8))))
    report = pinner.restore_all()
    assert sorted(report.restored) == sorted(tids) and not (report.gone or report.failed or report.kept)
    assert {t: host.get_affinity(t) for t in tids} == before
