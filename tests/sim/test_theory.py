"""PaRLSched against the paper's theory (Section V), in the simulator.

Small games are checked exhaustively: where the scheduler settles (each thread's most
likely core) should be a pure Nash equilibrium in a large majority of seeded runs, and
every equilibrium must respect Prop 5.2's bound on the makespan.
"""

import numpy as np
import pytest

from parlschedd.learning.params import LearningParams
from parlschedd.learning.scheduler import TwoLevelScheduler
from parlschedd.sim.background import Background
from parlschedd.sim.baselines import KernelBalancer, RandomPinning, RoundRobin
from parlschedd.sim.game import Machine, Threads, is_nash, makespan, optimal_makespan, poa_bound, utilities
from parlschedd.sim.simulator import ParlschedPolicy, Workload, simulate

PARAMS = dict(eps=0.2, lam=0.01)


def settle(machine, threads, background, seed, steps=1000):
    s = TwoLevelScheduler(machine.domains, LearningParams(seed=seed, **PARAMS), domain_every=40)
    keys = np.arange(threads.weights.size)
    u = np.full(keys.size, np.nan)
    for _ in range(steps):
        cpus = s.step(keys, u).cpus
        u = utilities(machine, threads, cpus, background)
    return s.domain_cpus[s.alpha, s.x.argmax(axis=1)]


def small_games(count):
    for seed in range(count):
        rng = np.random.default_rng(seed)
        n, m = int(rng.integers(2, 7)), int(rng.integers(2, 4))
        yield seed, Machine.uniform(m), Threads(rng.uniform(0.5, 3.0, n))


def test_settles_on_a_nash_equilibrium_in_most_small_games():
    results = []
    for seed, machine, threads in small_games(40):
        bg = np.zeros(machine.n_cores)
        settled = settle(machine, threads, bg, seed)
        nash = is_nash(machine, threads, settled, bg)
        results.append(nash)
        if nash:  # Prop 5.2 on every equilibrium found
            bound = poa_bound(machine.n_cores) * optimal_makespan(machine, threads, bg)
            assert makespan(machine, threads, settled, bg) <= bound + 1e-9
    # random placements are equilibria in about a quarter of these games
    assert np.mean(results) >= 0.7, f"only {sum(results)}/40 runs settled on a Nash equilibrium"


def test_every_nash_equilibrium_of_small_games_respects_prop_5_2():
    """Exhaustive over all placements of a few games, independent of the scheduler."""
    import itertools

    for _, machine, threads in small_games(12):
        bg = np.zeros(machine.n_cores)
        opt = optimal_makespan(machine, threads, bg)
        equilibria = 0
        for cpus in itertools.product(range(machine.n_cores), repeat=threads.weights.size):
            cpus = np.array(cpus)
            if is_nash(machine, threads, cpus, bg):
                equilibria += 1
                assert makespan(machine, threads, cpus, bg) <= poa_bound(machine.n_cores) * opt + 1e-9
        assert equilibria > 0  # load balancing games always have a pure one: none found is a broken is_nash


def test_threads_leave_cores_with_background_load():
    machine = Machine.uniform(4)
    threads = Threads(np.ones(4))
    bg = Background(4, "non-uniform", cores=2, load=6.0)
    trace = simulate(ParlschedPolicy(machine, LearningParams(seed=1, **PARAMS), 40), machine,
                     Workload(threads), bg, 600)
    policy = ParlschedPolicy(machine, LearningParams(seed=1, **PARAMS), 40)
    keys, u = np.arange(4), np.full(4, np.nan)
    for k in range(600):
        cpus = policy.scheduler.step(keys, u).cpus
        u = utilities(machine, threads, cpus, bg.at(k))
    on_loaded = np.isin(policy.scheduler.domain_cpus[0, policy.scheduler.x.argmax(axis=1)], [0, 1]).sum()
    assert on_loaded == 0
    assert trace.ratio[-50:].mean() < trace.ratio[:10].mean()


@pytest.mark.parametrize("kind", ["uniform", "non-uniform", "time-varying"])
def test_baselines_run_and_kernel_balancer_is_near_the_bound(kind):
    machine = Machine.uniform(8)
    threads = Threads(np.random.default_rng(0).uniform(1, 2, 32))
    bg = Background(8, kind, cores=2, load=3.0, period=20)
    kernel = simulate(KernelBalancer(machine), machine, Workload(threads), bg, 60)
    assert kernel.ratio.max() < 1.15
    for policy in (RoundRobin(8), RandomPinning(8, np.random.default_rng(0))):
        trace = simulate(policy, machine, Workload(threads), bg, 60)
        assert trace.migrations[1:].sum() == 0  # static pinning never moves after its first placement
        assert (trace.ratio >= 1.0 - 1e-12).all()


def test_weights_that_change_over_time_and_noise():
    machine = Machine.uniform(2)
    heavy = np.array([4.0, 1.0, 1.0])
    wl = Workload(Threads(np.ones(3)), changes=[(50, heavy)])
    assert wl.at(49).weights.tolist() == [1, 1, 1] and wl.at(50).weights.tolist() == heavy.tolist()
    trace = simulate(ParlschedPolicy(machine, LearningParams(seed=2, **PARAMS), 40), machine, wl,
                     Background(2), 400, noise=0.1, rng=np.random.default_rng(2))
    assert trace.bound[0] == 1.5 and trace.bound[-1] == 4.0
    assert np.median(trace.ratio[-100:]) <= 1.25  # the heavy thread ends up (nearly) alone
