"""What one generation leaves behind: output, stop reason, per-round counters and timings.

Counters are the raw ones vLLM V1 keeps (drafts, draft tokens, accepted tokens, accepted per position) plus relaxed
acceptances and emitted tokens; every reported figure is derived from them. ``Counters`` is the one type that holds
their totals and the one place the ratios over them (mean acceptance length, acceptance rate, relaxed fraction,
acceptance by position) are defined: a generation, a stored sample, a cell of a run and an lm-eval run all sum
``Counters`` and read the same properties.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from itertools import zip_longest
from typing import Any


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def _add(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    return tuple(x + y for x, y in zip_longest(a, b, fillvalue=0))


def per_position(drafted: Sequence[int], accepted: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(rounds that accepted draft position i, rounds that drafted it), i = 0 .. the longest draft − 1. A round
    that accepted n drafts accepted positions 0..n−1 (acceptance is a prefix)."""
    width = max(drafted, default=0)
    accepted_at, drafted_at = [0] * width, [0] * width
    for d, a in zip(drafted, accepted):
        for i in range(d):
            drafted_at[i] += 1
            accepted_at[i] += i < a
    return tuple(accepted_at), tuple(drafted_at)


@dataclass(frozen=True)
class Counters:
    """Token and round totals of one or more generations; ``+`` adds them (``sum(items, Counters())``).

    ``emitted`` counts output token ids (bonus and correction tokens included); ``relaxed`` counts accepted drafts
    that strict verification would have rejected."""

    emitted: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    relaxed: int = 0
    accepted_per_position: tuple[int, ...] = ()  # rounds that accepted draft position i
    drafted_per_position: tuple[int, ...] = ()  # rounds that drafted draft position i

    @classmethod
    def of_rounds(cls, drafted: Sequence[int], accepted: Sequence[int], relaxed: Sequence[int],
                  emitted: int) -> Counters:
        """The counters of one generation from its per-round columns and its output length."""
        accepted_at, drafted_at = per_position(drafted, accepted)
        return cls(emitted, len(drafted), sum(drafted), sum(accepted), sum(relaxed), accepted_at, drafted_at)

    def __add__(self, other: Counters) -> Counters:
        return Counters(self.emitted + other.emitted, self.rounds + other.rounds, self.drafted + other.drafted,
                        self.accepted + other.accepted, self.relaxed + other.relaxed,
                        _add(self.accepted_per_position, other.accepted_per_position),
                        _add(self.drafted_per_position, other.drafted_per_position))

    @property
    def mean_acceptance_length(self) -> float | None:
        """Emitted tokens / verification rounds, bonus included (1.0 for the target alone); None without rounds."""
        return _ratio(self.emitted, self.rounds)

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted draft tokens / drafted tokens; None when nothing was drafted."""
        return _ratio(self.accepted, self.drafted)

    @property
    def relaxed_fraction(self) -> float | None:
        """Relaxed acceptances / emitted tokens: the share of the output that strict verification would not have
        let through (per emitted token, so it reads as a share of the text and is comparable across k)."""
        return _ratio(self.relaxed, self.emitted)

    @property
    def drafts(self) -> int:
        """Rounds that drafted at least one token (vLLM's ``num_drafts``)."""
        return self.drafted_per_position[0] if self.drafted_per_position else 0

    @property
    def acceptance_by_position(self) -> tuple[float, ...]:
        """vLLM's per-position acceptance rate (``vllm/v1/spec_decode/metrics.py``: ``num_accepted_tokens_per_pos /
        num_drafts``): rounds that accepted draft position i / rounds with a draft, i.e. P(accepted length > i).
        A round whose draft was shorter than i + 1 (the budget's last rounds, a short n-gram match) counts as not
        accepting position i, as in vLLM."""
        return tuple(a / self.drafts for a in self.accepted_per_position) if self.drafts else ()


@dataclass
class RoundLog:
    """Per-round columns (one entry per verification round).

    Besides the counters and timings, a round records the work it did, so its cost on another device can be
    priced later (``relaxbench.profiles.proxy``): ``extra`` tokens the policy appended to the verify forward (the
    judge's reflection), and the drafter's model forwards (new tokens fed per forward) and n-gram lookups."""

    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    relaxed: list[int] = field(default_factory=list)
    emitted: list[int] = field(default_factory=list)
    t_draft: list[float] = field(default_factory=list)
    t_verify: list[float] = field(default_factory=list)
    t_policy: list[float] = field(default_factory=list)
    extra: list[int] = field(default_factory=list)
    draft_forwards: list[tuple[int, ...]] = field(default_factory=list)
    lookups: list[int] = field(default_factory=list)
    # a span-gated rule's counts inside the thinking span (None in rounds of an ungated rule)
    emitted_in_span: list[int | None] = field(default_factory=list)
    relaxed_in_span: list[int | None] = field(default_factory=list)

    def add(self, drafted: int, accepted: int, relaxed: int, emitted: int,
            t_draft: float, t_verify: float, t_policy: float, extra: int = 0,
            draft_forwards: tuple[int, ...] = (), lookups: int = 0, emitted_in_span: int | None = None,
            relaxed_in_span: int | None = None) -> None:
        self.emitted_in_span.append(emitted_in_span)
        self.relaxed_in_span.append(relaxed_in_span)
        self.drafted.append(drafted)
        self.accepted.append(accepted)
        self.relaxed.append(relaxed)
        self.emitted.append(emitted)
        self.t_draft.append(t_draft)
        self.t_verify.append(t_verify)
        self.t_policy.append(t_policy)
        self.extra.append(extra)
        self.draft_forwards.append(tuple(draft_forwards))
        self.lookups.append(lookups)

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
    forced_tokens: int = 0  # output tokens a thinking budget appended (decoding/budget.py); no round emitted them

    @property
    def n_rounds(self) -> int:
        return len(self.rounds)

    @property
    def n_emitted(self) -> int:
        return len(self.output_ids)

    @property
    def counters(self) -> Counters:
        """This generation's counters (tokens counted from the output ids, less those a thinking budget forced)."""
        r = self.rounds
        return Counters.of_rounds(r.drafted, r.accepted, r.relaxed, self.n_emitted - self.forced_tokens)

    @property
    def tokens_per_second(self) -> float:
        return self.n_emitted / self.time_total if self.time_total > 0 else 0.0

    def to_record(self) -> dict[str, Any]:
        return {
            "prompt_ids": self.prompt_ids,
            "output_ids": self.output_ids,
            "text": self.text,
            "stop_reason": self.stop_reason,
            "rounds": asdict(self.rounds),
            "time_prefill": self.time_prefill,
            "time_total": self.time_total,
            **({"forced_tokens": self.forced_tokens} if self.forced_tokens else {}),
        }
