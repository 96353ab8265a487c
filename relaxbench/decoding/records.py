"""What one generation leaves behind: output, stop reason, per-round counters and timings.

Counters are the raw ones vLLM V1 keeps (drafts, draft tokens, accepted tokens, accepted per position) plus relaxed
acceptances and emitted tokens; every reported figure is derived from them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RoundLog:
    """Per-round columns (one entry per verification round)."""

    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    relaxed: list[int] = field(default_factory=list)
    emitted: list[int] = field(default_factory=list)
    t_draft: list[float] = field(default_factory=list)
    t_verify: list[float] = field(default_factory=list)
    t_policy: list[float] = field(default_factory=list)

    def add(self, drafted: int, accepted: int, relaxed: int, emitted: int,
            t_draft: float, t_verify: float, t_policy: float) -> None:
        self.drafted.append(drafted)
        self.accepted.append(accepted)
        self.relaxed.append(relaxed)
        self.emitted.append(emitted)
        self.t_draft.append(t_draft)
        self.t_verify.append(t_verify)
        self.t_policy.append(t_policy)

    def __len__(self) -> int:
        return len(self.drafted)


@dataclass
class GenerationResult:
    prompt_ids: list[int]
    output_ids: list[int]
    text: str
    stop_reason: str  # "eos", "stop", "length"
    rounds: RoundLog
    time_prefill: float
    time_total: float

    @property
    def n_rounds(self) -> int:
        return len(self.rounds)

    @property
    def n_emitted(self) -> int:
        return len(self.output_ids)

    @property
    def mean_acceptance_length(self) -> float:
        """Emitted tokens per verification round, bonus included (1.0 for plain decoding)."""
        return self.n_emitted / self.n_rounds if self.n_rounds else 0.0

    @property
    def acceptance_rate(self) -> float:
        drafted = sum(self.rounds.drafted)
        return sum(self.rounds.accepted) / drafted if drafted else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.n_emitted / self.time_total if self.time_total > 0 else 0.0

    def accepted_per_position(self) -> list[int]:
        """How many rounds accepted the draft at position i (0-based), for i < the longest draft."""
        width = max(self.rounds.drafted, default=0)
        counts = [0] * width
        for n in self.rounds.accepted:
            for i in range(n):
                counts[i] += 1
        return counts

    def to_record(self) -> dict[str, Any]:
        return {
            "prompt_ids": self.prompt_ids,
            "output_ids": self.output_ids,
            "text": self.text,
            "stop_reason": self.stop_reason,
            "rounds": asdict(self.rounds),
            "time_prefill": self.time_prefill,
            "time_total": self.time_total,
        }
