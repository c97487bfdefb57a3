"""Fitting the proposed model: the paper's two-phase GA and a faster default.

Both methods fit in two phases as the paper does: first the time/workload chromosome
c_TW (the paper's eq. 8; the spec's "Fitting") against the measured runtimes with the RMSE of eq. 10, then the energy
chromosome c_E (the paper's eq. 9; the spec's "Fitting") against the measured energies with the RMSE of eq. 11, c_TW
fixed. Phase 2 needs no new run of Algorithm 1: with c_TW fixed, T_ij and T_evo are
fixed and only the powers change.

- ``"ga"``: the paper's GA (Table 1) with DEAP: 120 real-valued individuals, 100
  generations, simulated binary bounded crossover with probability 0.7, polynomial
  bounded mutation with probability 0.01 (per gene), constraints R1-R3 (the paper's eqs. 12-14) by a
  penalty of 1e9. Where the paper is silent: binary tournament selection (its Section 3),
  distribution index eta = 1 for both operators (of 1, 5 and 20 on the shared data, 1
  fits best: the wide spread of children explores the piecewise-linear cost of
  Algorithm 1 better), and the best individual is carried into the next generation.
- ``"de"`` (default): scipy's differential evolution (rand/1/bin with dithered
  mutation in [0.5, 1), which escaped local minima more often than best/1/bin on the
  shared data); budgets in ``DESettings``. Phase 1 searches only the relative speeds
  of the devices (see ``project_time``): the overall scale of W and the overhead
  T_master + T_com are solved exactly for every individual. Phase 2 has the idle powers
  reparametrised as Powidle_ij = r_ij * Pow_ij with r_ij in [0, 1) and Pow_ij at
  least POW_MIN_W, so that R1-R3 are box bounds and no point of the box is ever
  rejected (nor a polish that ends on its face), and ends with a gradient polish (the
  energy phase is smooth; it reaches the optimum of the constrained least squares).

Search boxes: 0 <= W_ij <= 1.5 x the cycles at which one subpopulation on device ij
would take the whole measured runtime of a configuration that uses every device (a
device is given work in all of them, so it cannot be slower without over-predicting);
0 <= T_com, T_master <= the shortest measured runtime per migration; powers in
[0, 1.5 TDP].

Everything here is pure: arrays in, arrays out; seeds make every run reproducible.
Progress is reported through optional callbacks, never printed, and no clock is
read: a caller that times the fits (the estimator) takes them one by one from
``repetitions``, and one that times the generations of a fit (the CLI's estimate of a
long fit's cost) is told of each by ``on_generation``.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
from deap import base, tools
from scipy.optimize import differential_evolution

from parlschedd.energy.cluster import Cluster
from parlschedd.energy.measurements import MIN_ENERGY_ROWS, Measurements, energy_rows
from parlschedd.energy.metrics import fit_distance, nrmse, rmse, rsd
from parlschedd.energy.model import EnergyParams, TimeParams, Timing, energy, timing, waves

METHODS = ("de", "ga")
PENALTY = 1e9
TDP_MARGIN = 1.5
R_MAX = 1.0 - 1e-9  # Powidle < Pow strictly (R1)
POW_MIN_W = 1e-6  # the DE's least power: at Pow = 0, Powidle = r * Pow = Pow and R1 (strict) failed

Cost = Callable[[np.ndarray], np.ndarray]
Progress = Callable[[int, int], None]
Tick = Callable[[int], None]  # generations done, from 0 as the initial population is drawn


@dataclass(frozen=True)
class Generation:
    """Where a fit is: its phase, ``"time"`` (c_TW, Algorithm 1 in every evaluation:
    the costly one) or ``"energy"`` (c_E), and the generations done of at most ``most``
    (differential evolution stops sooner once its population has converged). ``done``
    is 0 as the phase starts, before its initial population is evaluated."""

    phase: str
    done: int
    most: int


OnGeneration = Callable[[Generation], None]


@dataclass(frozen=True)
class Problem:
    """What a fit needs: the cluster, the measured configurations, and model options."""

    cluster: Cluster
    nsp: np.ndarray
    time_s: np.ndarray
    energy_wh: np.ndarray | None = None
    rounding: str = "floor"
    master_power: str = "migration"

    @classmethod
    def from_measurements(cls, cluster: Cluster, m: Measurements, **options: str) -> Problem:
        return cls(cluster, m.nsp, m.time_s, m.energy_wh if m.has_energy else None, **options)

    @property
    def energy_rows(self) -> np.ndarray | None:
        """The configurations the energy phase fits (``energy_wh`` is NaN for the others)."""
        return energy_rows(self.energy_wh)

    def without(self, index: int) -> Problem:
        keep = np.arange(len(self.nsp)) != index
        e = None if self.energy_wh is None else self.energy_wh[keep]
        return replace(self, nsp=self.nsp[keep], time_s=self.time_s[keep], energy_wh=e)


@dataclass(frozen=True)
class GASettings:
    """Table 1 of the paper, plus the operators' distribution index (the paper is silent)."""

    individuals: int = 120
    generations: int = 100
    crossover: float = 0.7
    mutation: float = 0.01
    eta: float = 1.0
    tournament: int = 2


@dataclass(frozen=True)
class DESettings:
    """Budgets per phase. Phase 1 (Algorithm 1 in every evaluation) does better with a
    small population and many generations: 49 x 1000 reached the best basin of the shared
    data in 5 of 8 seeds where 126 x 400 reached it in none, for the same cost."""

    time_individuals: int = 49
    time_generations: int = 1000
    energy_individuals: int = 120
    energy_generations: int = 300
    tol: float = 1e-8

    def with_generations(self, n: int) -> DESettings:
        return replace(self, time_generations=n, energy_generations=n)


@dataclass(frozen=True)
class Fit:
    """One two-phase fit; energy_params is None for time-only data."""

    time_params: TimeParams
    energy_params: EnergyParams | None
    nrmse_time: float
    nrmse_energy: float

    @property
    def vector(self) -> np.ndarray:
        """All fitted parameters in the order of eqs. 8 and 9."""
        parts = [self.time_params.to_vector()]
        if self.energy_params is not None:
            parts.append(self.energy_params.to_vector())
        return np.concatenate(parts)


@dataclass(frozen=True)
class Repeated:
    """Repetitions of a fit, the best chosen as the paper does, and eq. 17's RSD."""

    fits: tuple[Fit, ...]
    best: int
    rsd: np.ndarray


@dataclass(frozen=True)
class LeaveOneOut:
    """Prediction of each configuration by a model fitted on all the others."""

    time_s: np.ndarray
    energy_wh: np.ndarray
    nrmse_time: float
    nrmse_energy: float


# ---- search boxes and constraints -------------------------------------------------

def time_bounds(p: Problem) -> np.ndarray:
    """(D + 2, 2) box for c_TW (see the module docstring)."""
    c, run = p.cluster, p.cluster.run
    w = waves(c, p.nsp, p.rounding)
    all_used = p.nsp >= len(c.devices)
    use = all_used if all_used.any() else np.ones_like(all_used)
    cycles = p.time_s[use, None] * c.frequency_hz / (run.generations * w[use])
    w_hi = TDP_MARGIN * (cycles.min(axis=0) if all_used.any() else cycles.max(axis=0))
    t_hi = p.time_s.min() / run.global_migrations
    return np.column_stack([np.zeros(len(w_hi) + 2), np.concatenate([w_hi, [t_hi, t_hi]])])


def energy_bounds(c: Cluster) -> np.ndarray:
    """(2D + 2, 2) box for c_E as the GA searches it: every power in [0, 1.5 TDP]."""
    tdp = np.concatenate([c.tdp_w, c.tdp_w, [c.master_tdp_w, c.switch_tdp_w]])
    return np.column_stack([np.zeros_like(tdp), TDP_MARGIN * tdp])


def feasible(c: Cluster, e: EnergyParams) -> np.ndarray:
    """R1-R3 (the paper's eqs. 12-14) for every parameter set: shape of the batch, True if all hold."""
    r1 = np.all((e.pow_idle < e.pow) & (e.pow <= TDP_MARGIN * c.tdp_w), axis=-1)
    r2 = e.pow_master <= TDP_MARGIN * c.master_tdp_w
    r3 = e.pow_switch <= TDP_MARGIN * c.switch_tdp_w
    return r1 & r2 & r3


def violations(c: Cluster, e: EnergyParams) -> list[str]:
    """What of R1-R3 (the paper's eqs. 12-14) one parameter set breaks, each named by its
    parameter: a fit keeps them, a file edited by hand may not. Powidle equal to Pow
    (both 0: a device that draws nothing) passes: only R1's strictness, not a power
    no device has."""
    said = []
    for label, p, idle, tdp in zip(c.device_labels, e.pow.tolist(), e.pow_idle.tolist(), c.tdp_w.tolist(), strict=True):
        if idle > p:
            said.append(f"Powidle[{label}] {idle:g} W above Pow[{label}] {p:g} W (R1)")
        if p > TDP_MARGIN * tdp:
            said.append(f"Pow[{label}] {p:g} W above {TDP_MARGIN:g} x its TDP, {TDP_MARGIN * tdp:g} W (R1)")
    for name, p, tdp, rule in (("Pow_master", float(e.pow_master), c.master_tdp_w, "R2"),
                               ("Pow_switch", float(e.pow_switch), c.switch_tdp_w, "R3")):
        if p > TDP_MARGIN * tdp:
            said.append(f"{name} {p:g} W above {TDP_MARGIN:g} x its TDP, {TDP_MARGIN * tdp:g} W ({rule})")
    return said


def from_ratio(x: np.ndarray) -> np.ndarray:
    """DE genes (Pow, r, Pow_master, Pow_switch) -> c_E with Powidle = r * Pow."""
    d = (x.shape[-1] - 2) // 2
    return np.concatenate([x[..., :d], x[..., :d] * x[..., d:2 * d], x[..., 2 * d:]], axis=-1)


def ratio_bounds(c: Cluster) -> np.ndarray:
    """The DE's box for (Pow, r, Pow_master, Pow_switch): each point of it, faces
    included, keeps R1-R3 once ``from_ratio`` maps it."""
    b = energy_bounds(c)
    d = len(c.devices)
    b[:d, 0] = POW_MIN_W
    b[d:2 * d] = [0.0, R_MAX]
    return b


# ---- costs (eqs. 10 and 11) --------------------------------------------------------

def time_cost(p: Problem) -> Cost:
    """RMSE_T of eq. 10 for a (P, D + 2) population of c_TW."""

    def cost(x: np.ndarray) -> np.ndarray:
        return rmse(timing(p.cluster, TimeParams.from_vector(x), p.nsp, p.rounding).runtime, p.time_s)

    return cost


def energy_cost(p: Problem, tp: TimeParams, t: Timing) -> Cost:
    """RMSE_E of eq. 11 for a (P, 2D + 2) population of c_E; infeasible sets cost 1e9."""

    rows = p.energy_rows
    if rows is None:
        raise ValueError(f"the energy phase needs energies measured for at least {MIN_ENERGY_ROWS} configurations")
    measured = p.energy_wh[rows]

    def cost(x: np.ndarray) -> np.ndarray:
        e = EnergyParams.from_vector(x)
        err = rmse(energy(p.cluster, t, tp, e, p.master_power)[..., rows], measured)
        return np.where(feasible(p.cluster, e), err, PENALTY)

    return cost


def project_time(p: Problem, genes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DE's phase-1 genes (W_ij up to a common scale, share q of T_com in the overhead)
    -> (c_TW vectors, RMSE_T), for a (P, D + 1) population.

    Algorithm 1 only compares accumulated times, so scaling every W_ij by s scales T_evo
    by s: the runtime of eq. 4 is NGm * o + s * v with v = NGm * T_evo of the genes' W and
    o = T_master + T_com. The best (o, s) is a two-parameter least-squares problem, solved
    in closed form with 0 <= o <= the box's bound; eq. 4 fixes only the sum o, so
    T_com = q * o and T_master = (1 - q) * o.
    """
    genes = np.atleast_2d(genes)
    w, q = genes[:, :-1], genes[:, -1]
    o_max = p.time_s.min() / p.cluster.run.global_migrations  # time_bounds' bound on T_master, T_com
    zero = np.zeros(len(genes))
    ngm = p.cluster.run.global_migrations
    v = timing(p.cluster, TimeParams(w, zero, zero), p.nsp, p.rounding).runtime
    t = p.time_s
    dv, dt = v - v.mean(axis=1, keepdims=True), t - t.mean()
    var = np.einsum("pk,pk->p", dv, dv)
    slope = np.where(var > 0, dv @ dt / np.where(var > 0, var, 1.0), 0.0)
    o = np.clip((t.mean() - slope * v.mean(axis=1)) / ngm, 0.0, o_max)
    vv = np.einsum("pk,pk->p", v, v)
    scale = np.where(vv > 0, np.maximum(0.0, (t[None, :] - ngm * o[:, None]) * v).sum(axis=1) / np.where(vv > 0, vv, 1.0), 0.0)
    x = np.column_stack([w * scale[:, None], q * o, (1 - q) * o])
    return x, rmse(ngm * o[:, None] + scale[:, None] * v, t)


# ---- optimisers --------------------------------------------------------------------

class _Fitness(base.Fitness):
    weights = (-1.0,)


class _Individual(list):
    def __init__(self, genes):  # noqa: ANN001 - DEAP clones call this with any iterable
        super().__init__(genes)
        self.fitness = _Fitness()


def _evaluate(cost: Cost, individuals: list[_Individual]) -> None:
    """One vectorised cost call for a whole population."""
    for ind, f in zip(individuals, cost(np.array(individuals)), strict=True):
        ind.fitness.values = (float(f),)


def ga_minimize(cost: Cost, bounds: np.ndarray, seed: int, s: GASettings = GASettings(),
                tick: Tick | None = None) -> np.ndarray:
    """The paper's GA (Table 1) with DEAP's operators; returns the best genes. ``tick``
    is told of each generation done.

    DEAP draws from Python's global ``random``; its state is saved, seeded and
    restored so a run is reproducible without disturbing the caller."""
    low, up = bounds[:, 0].tolist(), bounds[:, 1].tolist()
    saved = random.getstate()
    random.seed(seed)
    try:
        pop = [_Individual(random.uniform(lo, hi) for lo, hi in zip(low, up, strict=True))
               for _ in range(s.individuals)]
        _evaluate(cost, pop)
        for generation in range(1, s.generations + 1):
            elite = tools.selBest(pop, 1)[0]
            offspring = [_Individual(ind) for ind in tools.selTournament(pop, len(pop), s.tournament)]
            for a, b in zip(offspring[::2], offspring[1::2], strict=False):
                if random.random() < s.crossover:
                    tools.cxSimulatedBinaryBounded(a, b, s.eta, low, up)
            for ind in offspring:
                tools.mutPolynomialBounded(ind, s.eta, low, up, s.mutation)
            _evaluate(cost, offspring)
            worst = min(range(len(offspring)), key=lambda i: offspring[i].fitness)
            offspring[worst] = elite
            pop = offspring
            if tick:
                tick(generation)
        return np.array(tools.selBest(pop, 1)[0])
    finally:
        random.setstate(saved)


def de_minimize(cost: Cost, bounds: np.ndarray, seed: int, individuals: int, generations: int,
                tol: float = 1e-8, polish: bool = False, tick: Tick | None = None) -> np.ndarray:
    """scipy's differential evolution, vectorised over the population; ``tick`` is told
    of each generation done."""
    n = len(bounds)
    result = differential_evolution(
        lambda x: cost(np.atleast_2d(x.T)) if x.ndim > 1 else cost(x[None])[0],
        bounds, popsize=max(1, -(-individuals // n)), maxiter=generations, tol=tol,
        seed=seed, vectorized=True, updating="deferred", polish=polish, init="sobol",
        strategy="rand1bin", mutation=(0.5, 1.0), callback=_told_each_generation(tick) if tick else None)
    return result.x


def _told_each_generation(tick: Tick) -> Callable[..., None]:
    """scipy's callback that tells ``tick`` of each generation done."""
    done = itertools.count(1)

    def told(*_: object, **__: object) -> None:  # None: a true return would stop the search
        tick(next(done))
    return told


# ---- fits ----------------------------------------------------------------------------

def _seeds(seed: int | None, n: int) -> list[int]:
    return [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(seed).spawn(n)]


def _ticker(on_generation: OnGeneration | None, phase: str, most: int) -> Tick | None:
    """The optimiser's count of generations as ``on_generation``'s of ``phase``, told
    its start (0) at once."""
    if on_generation is None:
        return None
    on_generation(Generation(phase, 0, most))
    return lambda done: on_generation(Generation(phase, done, most))


def fit_once(p: Problem, method: str = "de", seed: int | None = None,
             ga: GASettings = GASettings(), de: DESettings = DESettings(),
             on_generation: OnGeneration | None = None) -> Fit:
    """One two-phase fit (phase 2 only when energies were measured)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    s_time, s_energy = _seeds(seed, 2)
    tb = time_bounds(p)
    if method == "ga":
        x_t = ga_minimize(time_cost(p), tb, s_time, ga, _ticker(on_generation, "time", ga.generations))
    else:
        genes = np.vstack([tb[:-2], [0.0, 1.0]])
        best = de_minimize(lambda g: project_time(p, g)[1], genes, s_time, de.time_individuals,
                           de.time_generations, de.tol, tick=_ticker(on_generation, "time", de.time_generations))
        x_t = project_time(p, best)[0][0]
    tp = TimeParams.from_vector(x_t)
    t = timing(p.cluster, tp, p.nsp, p.rounding)
    ep, nrmse_e = None, float("nan")
    rows = p.energy_rows
    if rows is not None:
        cost = energy_cost(p, tp, t)
        if method == "ga":
            x_e = ga_minimize(cost, energy_bounds(p.cluster), s_energy, ga,
                              _ticker(on_generation, "energy", ga.generations))
        else:
            x_e = from_ratio(de_minimize(lambda x: cost(from_ratio(x)), ratio_bounds(p.cluster), s_energy,
                                         de.energy_individuals, de.energy_generations, de.tol, polish=True,
                                         tick=_ticker(on_generation, "energy", de.energy_generations)))
        ep = EnergyParams.from_vector(x_e)
        nrmse_e = float(nrmse(energy(p.cluster, t, tp, ep, p.master_power)[rows], p.energy_wh[rows]))
    return Fit(tp, ep, float(nrmse(t.runtime, p.time_s)), nrmse_e)


def repetitions(p: Problem, method: str = "de", repeat: int = 1, seed: int | None = None,
                on_generation: OnGeneration | None = None, **settings: GASettings | DESettings) -> Iterator[Fit]:
    """``repeat`` independent fits, each with its own seed drawn from ``seed``, made one
    at a time as they are asked for, so that a caller can report or time each."""
    for s in _seeds(seed, repeat):
        yield fit_once(p, method, s, on_generation=on_generation, **settings)


def best_of(fits: Sequence[Fit]) -> Repeated:
    """The repetitions, the best of them (closest to (0, 0) in (NRMSE_T, NRMSE_E)) and
    the RSD of every parameter over them."""
    distance = fit_distance(np.array([f.nrmse_time for f in fits]), np.array([f.nrmse_energy for f in fits]))
    return Repeated(tuple(fits), int(np.argmin(distance)), rsd(np.array([f.vector for f in fits])))


def fit_repeated(p: Problem, method: str = "de", repeat: int = 1, seed: int | None = None,
                 on_generation: OnGeneration | None = None, **settings: GASettings | DESettings) -> Repeated:
    """``repeat`` independent fits and the best of them."""
    return best_of(list(repetitions(p, method, repeat, seed, on_generation, **settings)))


def predict(p: Problem, f: Fit, nsp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runtime (s) and energy (Wh, NaN without energy parameters) of a fit at ``nsp``."""
    t = timing(p.cluster, f.time_params, np.asarray(nsp), p.rounding)
    if f.energy_params is None:
        return t.runtime, np.full(t.runtime.shape, np.nan)
    return t.runtime, energy(p.cluster, t, f.time_params, f.energy_params, p.master_power)


def leave_one_out(p: Problem, method: str = "de", seed: int | None = None, repeat: int = 1,
                  progress: Progress | None = None, on_generation: OnGeneration | None = None,
                  **settings: GASettings | DESettings) -> LeaveOneOut:
    """For every configuration, fit on the others (best of ``repeat``) and predict it."""
    t_pred, e_pred = np.empty(len(p.nsp)), np.empty(len(p.nsp))
    for k, s in enumerate(_seeds(seed, len(p.nsp))):
        rest = p.without(k)
        fits = fit_repeated(rest, method, repeat, s, on_generation, **settings)
        t_pred[k], e_pred[k] = (a[0] for a in predict(p, fits.fits[fits.best], p.nsp[k:k + 1]))
        if progress:
            progress(k + 1, len(p.nsp))
    rows = p.energy_rows
    e_nrmse = float("nan") if rows is None else float(nrmse(e_pred[rows], p.energy_wh[rows]))
    return LeaveOneOut(t_pred, e_pred, float(nrmse(t_pred, p.time_s)), e_nrmse)
