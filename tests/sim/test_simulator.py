"""The simulator's stand-in for the kernel under free threads (LearningParams.free)."""

import numpy as np

from parlschedd.learning.params import LearningParams
from parlschedd.learning.scheduler import FREE
from parlschedd.sim.background import Background
from parlschedd.sim.baselines import HomeDomainBalancer, KernelBalancer
from parlschedd.sim.game import Machine, Threads
from parlschedd.sim.simulator import Observation, ParlschedPolicy, Workload, place_free, simulate


def test_free_threads_go_heaviest_first_to_the_least_loaded_core_of_their_domain():
    m = Machine.uniform(4, n_domains=2)  # domains {0, 1} and {2, 3}
    threads = Threads(np.array([1.0, 3.0, 2.0, 1.0]))
    cpus = np.array([0, FREE, FREE, FREE])
    domains = np.array([0, 0, 1, 1])
    background = np.array([0.0, 0.0, 0.5, 0.0])
    out = place_free(m, threads, cpus, domains, background)
    assert out.tolist() == [0, 1, 3, 2]  # 3.0 beside nothing on 1; 2.0 on idle 3, then 1.0 on 2 (0.5 < 2.0)


def test_all_free_matches_the_kernel_like_balancer():
    m = Machine.uniform(2)
    w = Workload(Threads(np.ones(4)))
    bg = Background(2, "non-uniform", cores=1, load=1.0)
    free = ParlschedPolicy(m, LearningParams(free=True, free_prior=1.0, lam=0.0, seed=0), 10)
    ours = simulate(free, m, w, bg, 30)
    kernel = simulate(KernelBalancer(m), m, w, bg, 30)
    np.testing.assert_allclose(ours.mean_utility[1:], kernel.mean_utility[1:])


def test_the_home_domain_balancer_keeps_threads_home_and_balances_each_domain():
    m = Machine.uniform(4, n_domains=2, penalty=0.5)  # domains {0, 1} and {2, 3}
    threads = Threads(np.array([3.0, 1.0, 1.0, 1.0, 2.0]), home=np.array([0, 0, 0, 0, 1]))
    background = Background(4, "non-uniform", cores=1, load=1.0)  # on core 0
    out = simulate(HomeDomainBalancer(m), m, Workload(threads), background, 3)
    cpus = HomeDomainBalancer(m).decide(Observation(0, np.arange(5), np.full(5, np.nan), np.zeros(5, dtype=np.int64),
                                                     threads, background.at(0)))
    assert (m.domain_of_core[cpus] == threads.home).all()  # never remote, even with domain 1 idle
    assert cpus.tolist() == [1, 0, 0, 0, 2]  # 3.0 alone, the 1.0s beside the background (a tie goes to core 0)
    assert out.makespan.tolist() == [4.0, 4.0, 4.0]
    assert out.migrations[1:].tolist() == [0, 0]  # the same placement every period
