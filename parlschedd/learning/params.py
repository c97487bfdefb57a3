"""The learning parameters of both levels (shared/spec/parlsched.md, "Parameters")."""

from __future__ import annotations

from dataclasses import dataclass

from parlschedd.learning.normalize import MODES


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
    seed: int | None = None

    def __post_init__(self) -> None:
        checks = {
            "eps": 0.0 < self.eps <= 1.0,
            "lam": 0.0 <= self.lam <= 1.0,
            "nu": 0.0 < self.nu <= 1.0,
            "zeta": 0.0 <= self.zeta <= 1.0,
            "gamma": 0.0 < self.gamma <= 1.0,
            "eta": self.eta > 1.0,
            "decay": 0.0 < self.decay <= 1.0,
            "normalise": self.normalise in MODES,
            "sharpness": self.sharpness >= 1.0,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"learning parameters out of range: {', '.join(bad)} (see LearningParams)")
