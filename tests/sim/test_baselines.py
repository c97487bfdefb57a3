"""The comparison policies of parlschedd/sim/baselines.py."""

import numpy as np

from parlschedd.sim.baselines import KernelBalancer
from parlschedd.sim.game import Machine, Threads
from parlschedd.sim.simulator import Observation


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
