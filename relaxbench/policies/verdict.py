"""A rule's answer for a batch: per position (``Judgement``), then per request (``Verdict``), all on the device.

A rule judges every draft position of every request at once: whether it is accepted (after any look-ahead the rule
does within the block), whether that acceptance is a relaxation (strict verification, with the same uniforms, would
have rejected it), and how the token after the accepted drafts is chosen. ``finish`` turns that into the verdict:
the accepted length is the leading run of acceptances (a cumulative product), the relaxed count the relaxations
inside it, the next token the rule's correction at the first rejection or its bonus after a full accept. Keeping the
per-position judgement separate lets a wrapper (the span gate) choose per position between two rules.

``Verdict.to_host`` is the one synchronisation of a step: every request's counts and token in one copy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from relaxbench.ops.sampling import next_tokens
from relaxbench.policies.batch import Batch

__all__ = ["VERDICT_FIELDS", "Judgement", "Outcome", "Verdict", "by_mode", "finish", "plain_verdict"]

NextToken = Callable[[torch.Tensor], torch.Tensor]  # accepted length n [B] -> the token after it [B]


@dataclass(frozen=True)
class Judgement:
    """Per position of a batch: ``accept`` [B, K] and ``relaxed`` [B, K] (bool; positions past a request's drafts are
    ignored), ``next_token`` (n → the correction at n < k, the bonus at n = k) and, for a span-gated rule,
    ``span`` [B, K + 1] (position inside the relaxed span, for the in-span counts). ``plain_when_empty``: the
    next token of a request with no drafts (n = 0 = k) is already the plain step's — the target's argmax under
    greedy decoding, a draw from the processed ``p`` with the request's draw uniform under sampling — so the
    decision need not compute a plain step beside it."""

    accept: torch.Tensor
    relaxed: torch.Tensor
    next_token: NextToken
    span: torch.Tensor | None = None
    plain_when_empty: bool = False

    def where(self, mask: torch.Tensor, other: Judgement) -> Judgement:
        """This judgement for the requests in ``mask`` [B], ``other`` for the rest (a batch mixing greedy and
        sampled requests judges both ways and keeps each request's)."""
        rows = mask.unsqueeze(-1)
        first, second = self.next_token, other.next_token
        return Judgement(torch.where(rows, self.accept, other.accept), torch.where(rows, self.relaxed, other.relaxed),
                         lambda n: torch.where(mask, first(n), second(n)),
                         plain_when_empty=self.plain_when_empty and other.plain_when_empty)


@dataclass(frozen=True)
class Outcome:
    """One request's verdict on the host: what the loop commits and records."""

    n_accepted: int
    next_token: int
    n_relaxed: int = 0
    # a rule gated to a span of the text (policies/span.py): of the emitted tokens (accepted drafts and the next
    # token) those inside the thinking span, and of the relaxed acceptances those inside it (None: not gated)
    emitted_in_span: int | None = None
    relaxed_in_span: int | None = None
    facts: Mapping[str, int] = field(default_factory=dict)  # the rule's declared per-round facts, by name

    @classmethod
    def from_host(cls, values: list[int], names: tuple[str, ...] = ()) -> Outcome:
        """One request's row of ``Verdict.stacked()`` on the host, by the names its columns have
        (``Verdict.columns()``: ``VERDICT_FIELDS``, then the rule's facts; a span count of −1: not gated)."""
        row = dict(zip(names or VERDICT_FIELDS, values, strict=True))
        return cls(row["accepted"], row["next_token"], row["relaxed"],
                   *(None if row[name] < 0 else row[name] for name in ("emitted_in_span", "relaxed_in_span")),
                   facts={name: value for name, value in row.items() if name not in VERDICT_FIELDS})


# the columns of ``Verdict.stacked()``, in order: the one place their positions are decided (a rule's facts follow)
VERDICT_FIELDS = ("accepted", "next_token", "relaxed", "emitted_in_span", "relaxed_in_span")


@dataclass(frozen=True)
class Verdict:
    """Per request, on the device: ``accepted`` (0..k), ``next_token`` (correction or bonus), ``relaxed`` (accepted
    drafts strict verification would have rejected), for a span-gated rule the in-span counts, and any per-round
    fact the rule reports (``facts``: [B] integers by a name declared in ``decoding/records.ROUND_FIELDS``), which
    both engines record under that name with no other change."""

    accepted: torch.Tensor
    next_token: torch.Tensor
    relaxed: torch.Tensor
    emitted_in_span: torch.Tensor | None = None
    relaxed_in_span: torch.Tensor | None = None
    facts: Mapping[str, torch.Tensor] = field(default_factory=dict)

    @property
    def emitted(self) -> torch.Tensor:
        """[B] tokens the step emits per request: the accepted drafts and the next token."""
        return self.accepted + 1

    def where(self, mask: torch.Tensor, other: Verdict) -> Verdict:
        """This verdict for the requests in ``mask``, ``other`` for the rest (span counts kept when both have them)."""
        def pick(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
            if a is None or b is None:
                return a if b is None else b
            return torch.where(mask, a, b)

        return Verdict(torch.where(mask, self.accepted, other.accepted),
                       torch.where(mask, self.next_token, other.next_token),
                       torch.where(mask, self.relaxed, other.relaxed),
                       pick(self.emitted_in_span, other.emitted_in_span),
                       pick(self.relaxed_in_span, other.relaxed_in_span),
                       {name: pick(self.facts.get(name), other.facts.get(name))
                        for name in dict.fromkeys([*self.facts, *other.facts])})

    def columns(self) -> tuple[str, ...]:
        """The names of ``stacked()``'s columns, in order: ``VERDICT_FIELDS``, then the rule's facts."""
        return VERDICT_FIELDS + tuple(self.facts)

    def stacked(self) -> torch.Tensor:
        """[B, len(columns())] long, the fields by ``columns()`` (a span count of −1: not gated), for one host copy;
        ``Outcome.from_host`` reads a row back by name."""
        missing = torch.full_like(self.accepted, -1)
        values = [getattr(self, name) for name in VERDICT_FIELDS] + [self.facts[name] for name in self.facts]
        return torch.stack([missing if v is None else v.to(self.accepted.dtype) for v in values], dim=-1)

    def to_host(self) -> list[Outcome]:
        """Every request's verdict on the host, in one copy (the step's one synchronisation)."""
        names = self.columns()
        return [Outcome.from_host(row, names) for row in self.stacked().tolist()]


def accepted_prefix(accept: torch.Tensor) -> torch.Tensor:
    """[B, K] bool: the leading run of True of each row (a cumulative minimum, no host round trip)."""
    if accept.shape[-1] == 0:
        return accept
    return accept.to(torch.uint8).cummin(dim=-1).values.bool()


def finish(batch: Batch, judgement: Judgement) -> Verdict:
    """The verdict of a judged batch: the leading run of acceptances, the relaxations inside it, the next token."""
    prefix = accepted_prefix(judgement.accept & batch.valid)
    accepted = prefix.sum(dim=-1)
    relaxed = (prefix & judgement.relaxed).sum(dim=-1)
    next_token = judgement.next_token(accepted)
    if judgement.span is None:
        return Verdict(accepted, next_token, relaxed)
    positions = torch.arange(batch.width + 1, device=batch.device)
    emitted_in = (judgement.span & (positions <= accepted.unsqueeze(-1))).sum(dim=-1)
    relaxed_in = (prefix & judgement.relaxed & judgement.span[:, :-1]).sum(dim=-1)
    return Verdict(accepted, next_token, relaxed, emitted_in, relaxed_in)


def plain_verdict(batch: Batch) -> Verdict:
    """Every request as a plain decoding step at its first position (nothing accepted): the target's argmax under
    greedy decoding, else one token drawn from its processed distribution."""
    zero = torch.zeros(batch.size, dtype=torch.long, device=batch.device)
    if batch.sampling.all_greedy and "target_max" in batch.__dict__:  # already reduced for the rule: reuse it
        return Verdict(zero, batch.target_argmax[:, 0], zero)
    first = batch.target.index[:, 0]
    processed = batch.__dict__.get("p")  # every row already processed for the rule: draw from its rows
    tokens = next_tokens(batch.target.source, first, batch.sampling, batch.draw_u, processed)
    return Verdict(zero, tokens, zero)


def by_mode(batch: Batch, greedy: Callable[[], Judgement], sampled: Callable[[], Judgement]) -> Judgement:
    """``greedy()`` for the greedily decoded requests, ``sampled()`` for the others: only the one needed when the
    batch is all of one mode (host data), both and a per-request choice when it mixes them."""
    if batch.sampling.all_greedy:
        return greedy()
    if not batch.sampling.any_greedy:
        return sampled()
    return greedy().where(batch.sampling.greedy, sampled())
