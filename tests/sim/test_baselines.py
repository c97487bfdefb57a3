"""The comparison policies of parlschedd/sim/baselines.py."""

import numpy as np

from parlschedd.sim.baselines import KernelBalancer, RandomPinning, RoundRobin
from parlschedd.sim.game import Machine, Threads
from parlschedd.sim.simulator import Observation


def _joining(keys: list[int], cores: int = 4) -> Observation:
    """A period in which threads ``keys`` are there (weight 1 each, no background)."""
    n = len(keys)
    return Observation(0, np.array(keys), np.full(n, np.nan), np.zeros(n, dtype=np.int64), Threads(np.ones(n)),
                       np.zeros(cores))


def test_round_robin_deals_threads_to_cores_in_the_order_they_join_and_keeps_them():
    """The k-th thread to join goes to core k mod m, whatever its key; a thread that
    joins later continues the count, and those already placed stay where they are."""
    policy = RoundRobin(4)
    assert policy.decide(_joining([10, 3, 7, 42, 5])).tolist() == [0, 1, 2, 3, 0]
    assert policy.decide(_joining([3, 5, 8, 10])).tolist() == [1, 0, 1, 0]


def test_random_pinning_draws_a_core_per_thread_once():
    """Seeded: the same draws again; 32 threads on 4 cores use every core (each
    missing one has probability 4 * 0.75**32, about 4e-4, and this seed is fixed);
    a thread keeps its core in later periods."""
    keys = list(range(32))
    first = RandomPinning(4, np.random.default_rng(7)).decide(_joining(keys)).tolist()
    policy = RandomPinning(4, np.random.default_rng(7))
    assert policy.decide(_joining(keys)).tolist() == first and set(first) == {0, 1, 2, 3}
    assert policy.decide(_joining(keys[::-1])).tolist() == first[::-1]


def _decide(balancer: KernelBalancer, background: list[float]) -> list[int]:
    """One period of a single thread of weight 1 under the given background."""
    obs = Observation(0, np.array([0]), np.array([np.nan]), np.array([0]), Threads(np.array([1.0])),
                      np.array(background))
    return balancer.decide(obs).tolist()


def test_kernel_balancer_moves_only_when_the_makespan_gain_exceeds_the_hysteresis():
    """Threads stay put unless the greedy placement lowers the makespan by more than the
    hysteresis (a share of the current makespan). One thread of weight 1, two cores of
    speed 1, hysteresis 0.1; by hand:

    - no background: the greedy placement is core 0, where it is: [0];
    - background 0.05 on core 0: 1.05 where it is, 1 on idle core 1; 1 < 0.9 * 1.05 =
      0.945 is false (a 4.8 % gain): it stays on core 0;
    - background 0.2 on core 0: 1.2 where it is, 1 on core 1; 1 < 0.9 * 1.2 = 1.08
      (a 16.7 % gain): it moves to core 1;
    - background 0.05 on core 1: 1.05 where it is, 1 back on core 0, a 4.8 % gain again:
      it stays on core 1 (the greedy placement differs, the thread does not follow it).
    With the default hysteresis 0.01 the 4.8 % gain is enough: 1 < 0.99 * 1.05 = 1.0395.
    """
    balancer = KernelBalancer(Machine.uniform(2), hysteresis=0.1)
    assert _decide(balancer, [0.0, 0.0]) == [0]
    assert _decide(balancer, [0.05, 0.0]) == [0]
    assert _decide(balancer, [0.2, 0.0]) == [1]
    assert _decide(balancer, [0.0, 0.05]) == [1]
    default = KernelBalancer(Machine.uniform(2))
    assert _decide(default, [0.0, 0.0]) == [0]
    assert _decide(default, [0.05, 0.0]) == [1]
