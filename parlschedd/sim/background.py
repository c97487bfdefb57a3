"""Background load the scheduler cannot see or move (the paper's CPU availability).

uniform: nothing else runs. non-uniform: a fixed extra load on the first cores for the
whole run. time-varying: that load switches on and off every ``period`` steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class Background:
    n_cores: int
    kind: str = "uniform"        # uniform | non-uniform | time-varying
    cores: int = 0               # how many of the first cores carry the load
    load: float = 0.0            # weight units of background work on each of them
    period: int = 100            # time-varying: steps on, then steps off

    def __post_init__(self) -> None:
        if self.kind not in ("uniform", "non-uniform", "time-varying"):
            raise ValueError(f"unknown background kind {self.kind!r}")
        if not 0 <= self.cores <= self.n_cores:
            raise ValueError("background cores out of range")
        if self.period < 1:
            raise ValueError(f"background period must be at least 1 step, got {self.period}")

    def at(self, step: int) -> NDArray[np.float64]:
        """Per-core background weight during ``step``."""
        bg = np.zeros(self.n_cores)
        on = self.kind == "non-uniform" or (self.kind == "time-varying" and (step // self.period) % 2 == 0)
        if on:
            bg[: self.cores] = self.load
        return bg
