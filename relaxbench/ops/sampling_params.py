"""A run's sampling setting (temperature, top-k, top-p), apart from the torch code that applies it
(``ops.sampling``): task and suite specs carry it, and reading them (``relaxbench list tasks``) needs no torch."""

from __future__ import annotations

import math
from dataclasses import dataclass

from relaxbench.errors import ConfigError


@dataclass(frozen=True)
class SamplingParams:
    """A plain frozen dataclass, not a ``Spec``: stored runs serialise it with ``dataclasses.asdict``."""

    temperature: float = 0.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not 0 <= self.temperature < math.inf:  # NaN fails this too
            raise ConfigError(f"temperature must be >= 0 and finite, got {self.temperature}")
        if self.top_k < 0:
            raise ConfigError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0
