"""Placement policies to compare PaRLSched with, in the same simulator.

Every policy has ``decide(obs) -> cpus`` (see ``simulator.Observation``). The static ones
and PaRLSched look only at the thread keys and measured utilities; the kernel-like
balancer also reads the runnable load, which the real kernel knows and PaRLSched does not.
"""

from __future__ import annotations

import heapq

import numpy as np
from numpy.typing import NDArray

from parlschedd.arrays import IntArray
from parlschedd.learning.scheduler import FREE
from parlschedd.sim.game import Machine, loads
from parlschedd.sim.simulator import Observation, place_free



class RoundRobin:
    """Static pinning: the k-th thread to join goes to core k mod m, forever."""

    def __init__(self, n_cores: int) -> None:
        self.n_cores = n_cores
        self.cpu: dict[int, int] = {}

    def decide(self, obs: Observation) -> IntArray:
        keys = obs.keys
        for key in keys.tolist():
            self.cpu.setdefault(key, len(self.cpu) % self.n_cores)
        return np.array([self.cpu[k] for k in keys.tolist()], dtype=np.int64)


class RandomPinning:
    """Static pinning to a core drawn uniformly at join."""

    def __init__(self, n_cores: int, rng: np.random.Generator) -> None:
        self.n_cores, self.rng = n_cores, rng
        self.cpu: dict[int, int] = {}

    def decide(self, obs: Observation) -> IntArray:
        keys = obs.keys
        for key in keys.tolist():
            if key not in self.cpu:
                self.cpu[key] = int(self.rng.integers(self.n_cores))
        return np.array([self.cpu[k] for k in keys.tolist()], dtype=np.int64)


class KernelBalancer:
    """An idealised kernel-like balancer: it sees every core's runnable load (threads'
    weights and the background) and migrates freely to equalise it, ignoring where a
    thread's memory lives (NUMA-oblivious).

    Each step it recomputes a longest-processing-time greedy placement and takes it when
    it lowers the makespan by more than ``hysteresis``; otherwise threads stay put.
    """

    def __init__(self, machine: Machine, hysteresis: float = 0.01) -> None:
        self.machine, self.hysteresis = machine, hysteresis
        self.cpus: IntArray = np.empty(0, dtype=np.int64)

    def decide(self, obs: Observation) -> IntArray:
        threads, background, m = obs.threads, obs.background, self.machine
        if self.cpus.size != threads.weights.size:
            self.cpus = np.zeros(threads.weights.size, dtype=np.int64)
        greedy = self._lpt(threads.weights, background)
        now = loads(m, threads, self.cpus, background).max()
        if loads(m, threads, greedy, background).max() < now * (1.0 - self.hysteresis):
            self.cpus = greedy
        return self.cpus

    def _lpt(self, weights: NDArray[np.float64], background: NDArray[np.float64]) -> IntArray:
        speeds = self.machine.speeds
        heap = [(background[j] / speeds[j], j) for j in range(speeds.size)]
        heapq.heapify(heap)
        work = background.astype(np.float64).copy()
        cpus = np.empty(weights.size, dtype=np.int64)
        for i in np.argsort(-weights, kind="stable"):
            _, j = heapq.heappop(heap)
            cpus[i] = j
            work[j] += weights[i]
            heapq.heappush(heap, (work[j] / speeds[j], j))
        return cpus


class HomeDomainBalancer:
    """The kernel-like balancer confined to each thread's home domain, what an
    administrator gets from ``numactl --cpunodebind`` per node or a cpuset per node:
    no remote accesses, no learning, and no way off a domain that background load
    crowds. The balance inside a domain is the one ``place_free`` gives the threads the
    scheduler leaves free, so parlsched's rows with ``free`` are compared with the same
    model of the kernel."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine

    def decide(self, obs: Observation) -> IntArray:
        home = obs.threads.home
        return place_free(self.machine, obs.threads, np.full(home.size, FREE), home, obs.background)

