"""The learning parameters of both levels (shared/spec/parlsched.md, "Parameters")."""

from __future__ import annotations

from dataclasses import dataclass

from parlschedd.kinds import finite
from parlschedd.learning.normalize import MODES

REWARDS = ("thread", "target")

# Each numeric parameter's range, (low, high, low inclusive; high is inclusive, None: no
# bound): the one table LearningParams and the config's validation both check.
RANGES: dict[str, tuple[float, float | None, bool]] = {
    "eps": (0.0, 1.0, False), "lam": (0.0, 1.0, True), "nu": (0.0, 1.0, False),
    "zeta": (0.0, 1.0, True), "gamma": (0.0, 1.0, False), "eta": (1.0, None, False),
    "decay": (0.0, 1.0, False), "sharpness": (1.0, None, True), "free_prior": (0.0, 1.0, True),
}


def in_range(name: str, value: float) -> bool:
    """Whether ``value`` is in :data:`RANGES`' range for parameter ``name``. Only a
    finite number is: a range without an upper end does not take inf (the config
    refuses it too; eta = inf made the aspiration benchmark inf * 0 = NaN)."""
    lo, hi, lo_inclusive = RANGES[name]
    return (finite(value) and (value >= lo if lo_inclusive else value > lo)
            and (hi is None or value <= hi))


@dataclass(frozen=True)
class LearningParams:
    """Step sizes and constants of the two levels; every one settable from the config.

    eps:    Level 2 step size (reinforcement), in (0, 1].
    lam:    Level 2 perturbation lambda, in [0, 1]; the weight of the uniform mix-in.
    nu:     Level 1 step size of the aspiration level, in (0, 1].
    zeta:   Level 1 probability that a satisfied thread still tries a better reply.
    gamma:  Level 1 better-reply factor, in (0, 1]; smaller demands a clearly better domain.
    eta:    Level 1 benchmark spread, > 1.
    decay:  per-period decay of the running maximum that normalises utilities into
            [0, 1]; 1.0 keeps the all-time maximum.
    normalise: "global" (one maximum over threads) or "thread" (each its own).
    sharpness: exponent p >= 1 applied to the normalised utility (see normalize.py).
    free:   add "free" to each domain's Level 2 actions: the thread's mask is the whole
            domain and the kernel balances it there. Not in the paper: the spec
            ("Experiments") records that rigid pinning loses to the kernel's own
            balancing when resources are plentiful; with this action the automata can
            keep the kernel's placement where it is as good and pin where it is not.
    free_prior: the probability of "free" in a new (or reset) strategy, in [0, 1]; the
            rest is spread uniformly over the domain's cores, so a thread starts as the
            kernel would place it and pins only as pinning earns reward.
    reward: "thread" (each thread is reinforced by its own utility, the paper's
            selfish game) or "target" (every thread of a target that ran in the
            period by the sum of the utilities of its threads measured then: the
            application's throughput; spec, "Measured headroom": the selfish game's
            equilibria are not what is best for work-sharing threads; a thread that
            did not run learns nothing, as with its own reward). Level 2 only: Level 1
            always weighs a domain by the thread's own utility.
    seed:   seed of the random generator; None draws one from the OS.
    """

    eps: float = 0.05
    lam: float = 0.02
    nu: float = 0.1
    zeta: float = 0.05
    gamma: float = 0.9
    eta: float = 1.2
    decay: float = 0.999
    normalise: str = "global"
    sharpness: float = 1.0
    free: bool = False
    free_prior: float = 0.9
    reward: str = "thread"
    seed: int | None = None

    def __post_init__(self) -> None:
        checks = {name: in_range(name, getattr(self, name)) for name in RANGES}
        checks.update(normalise=self.normalise in MODES, reward=self.reward in REWARDS)
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"learning parameters out of range: {', '.join(bad)} (see LearningParams)")
