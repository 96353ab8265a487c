"""Proxy time of one generation from its stored per-round records and a cost profile: what it would take on the
profile's device.

    proxy = prefill + Σ over rounds [ target forward of (drafted + 1 + extra) tokens at the round's context
                                      + the drafter's cost of that round ]

The round's context is the target's KV cache before the round: prompt − 1 + the tokens emitted before it. The
drafter's cost is what the round recorded it did: its draft-model forwards (their sizes, priced at the round's
context) and its n-gram lookups; a dedicated head's (EAGLE-3, MTP) forwards are priced with the head's own table
(``Profile.heads``, named by the drafter's label), and its first forward of the generation, which reads the
prompt's target features, as the head's prefill. Prefill is the target's forward over the prompt (but its last
token), plus the draft model's when the drafter uses one. The AR baseline is the same sum with no drafts (1-token
steps).

A request decoded at concurrency B (``batch``: the requests the engine kept in flight; 1 for relaxbench's own loop)
is priced with the profile's batch-B tables: each of its rounds costs one step of B requests, each feeding the
round's tokens at the round's context (the target's and the draft model's forwards alike). Its n-gram lookups cost
what one request's do: the step's B lookups run side by side on the host (vLLM's n-gram proposer runs them in
parallel threads). Prefill stays one request's. A profile not made at batch B cannot price the request
(``Unpriced``): a step of B requests costs neither what one request's forward does nor B times that, and which it
is near depends on whether the step is memory- or compute-bound, the very thing the batch dimension is there to
tell.

This is Xia et al.'s response-length-aware proxy speed (graphcore-research/relaxed-spec-dec-repro,
``analysis/proxy_speed.py``) priced per round instead of per draft length: every round is priced at its own
context and its own verify size, the final partial round and prefill are included, and since AR's time is its own
output's time, an arm that writes longer answers pays for them.

Samples whose per-round work was not recorded (rounds without ``extra``, ``draft_forwards``, ``lookups``: stores
written before them) are priced approximately: no extra verify tokens, one 1-token draft forward per drafted
token, one lookup per round; the result says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from relaxbench.decoding.drafters import DRAFTERS
from relaxbench.decoding.records import GenerationResult
from relaxbench.profiles.spec import ForwardTable, ModelCosts, Profile, batch_text


class Unpriced(Exception):
    """The profile cannot price this arm (a cost it needs is not in the profile)."""


@dataclass(frozen=True)
class Work:
    """What one generation did, as stored: its prompt length and its per-round records."""

    prompt_tokens: int
    drafted: Sequence[int]
    emitted: Sequence[int]
    extra: Sequence[int] | None = None
    draft_forwards: Sequence[Sequence[int]] | None = None
    lookups: Sequence[int] | None = None

    @classmethod
    def of_generation(cls, result: GenerationResult) -> Work:
        r = result.rounds
        return cls(len(result.prompt_ids), r.drafted, r.emitted, r.extra, r.draft_forwards, r.lookups)


@dataclass(frozen=True)
class ProxyTime:
    """Seconds on the profile's device, by part."""

    prefill: float
    verify: float  # the target's forwards after prefill (AR steps or verify passes)
    draft: float  # draft-model (or head) forwards and n-gram lookups
    outside_grid: int = 0  # forwards priced beyond the profile's grid (extended along its last segment)
    approximate: bool = False  # per-round work not recorded (an older store): estimated as the module says

    @property
    def total(self) -> float:
        return self.prefill + self.verify + self.draft

    @property
    def decode(self) -> float:
        return self.verify + self.draft


def uses_draft_model(drafter: str | None) -> bool:
    return drafter is not None and drafter in DRAFTERS.names() and bool(DRAFTERS.get(drafter).needs_draft_model)


def is_costless(drafter: str | None) -> bool:
    """A drafter whose drafting does no work a profile could price (the oracle's replay): priced at zero."""
    return drafter is not None and drafter in DRAFTERS.names() and bool(DRAFTERS.get(drafter).costless)


class _Pricer:
    def __init__(self, profile: Profile, batch: int) -> None:
        self.profile = profile
        self.batch = batch
        self.outside = 0

    def table(self, costs: ModelCosts) -> ForwardTable:
        """The model's forward table at the request's batch size."""
        table = costs.forward_at(self.batch)
        if table is None:
            raise Unpriced(f"profile {self.profile.name!r} has no costs at batch {self.batch} (it has "
                           f"{batch_text(costs.batch_sizes)}; make one with `relaxbench profile --batch "
                           f"{self.batch}`)")
        return table

    def forward(self, table: ForwardTable, n: int, context: int) -> float:
        if not table.covers(n, context):
            self.outside += 1
        return table.at(n, context)

    def prefill(self, costs: ModelCosts, tokens: int) -> float:
        if tokens <= 0:
            return 0.0
        if not costs.prefill.covers(tokens):
            self.outside += 1
        return costs.prefill.at(tokens)

    def lookup(self, context: int) -> float:
        curve = self.profile.ngram_lookup
        if curve is None:
            raise Unpriced(f"profile {self.profile.name!r} has no n-gram lookup cost")
        if not curve.covers(context):
            self.outside += 1
        return curve.at(context)


def uses_head(drafter: str | None) -> bool:
    return drafter is not None and drafter in DRAFTERS.names() and bool(DRAFTERS.get(drafter).uses_head)


def _draft_costs(profile: Profile, drafter: str | None, head: str | None) -> ModelCosts | None:
    """The costs the arm's drafting forwards are priced with: the draft model's, the head's, or None (no model)."""
    if uses_draft_model(drafter):
        if profile.draft is None:
            raise Unpriced(f"profile {profile.name!r} has no draft-model costs")
        return profile.draft
    if uses_head(drafter):
        costs = profile.head(head or str(drafter))
        if costs is None:
            raise Unpriced(f"profile {profile.name!r} has no costs for the draft head {head or drafter!r} (an "
                           "analytic profile prices a head from its checkpoint, which must be at hand; a measured "
                           "profile has no head costs)")
        return costs
    if drafter is not None and drafter != "ngram" and not is_costless(drafter):
        raise Unpriced(f"drafter {drafter!r} runs a model the profile has no costs for")
    return None


def proxy_time(profile: Profile, work: Work, drafter: str | None, batch: int = 1,
               head: str | None = None) -> ProxyTime:
    """The proxy time of one generation decoded at concurrency ``batch`` (see the module docstring); ``drafter`` is
    the arm's drafter kind (None for the AR baseline), ``head`` its label when it drafts with a head
    (``eagle3(head=trained)``). Raises ``Unpriced`` when the profile lacks a cost the arm needs."""
    pricer = _Pricer(profile, batch)
    draft_model = uses_draft_model(drafter)
    draft_costs = _draft_costs(profile, drafter, head)
    target = pricer.table(profile.target)
    draft_table = pricer.table(draft_costs) if draft_costs is not None else None
    rounds = len(work.emitted)
    recorded = work.extra is not None and work.draft_forwards is not None and work.lookups is not None
    extra = work.extra if work.extra is not None else (0,) * rounds
    forwards: Sequence[Sequence[int]]
    lookups: Sequence[int]
    if recorded:
        forwards, lookups = work.draft_forwards, work.lookups  # type: ignore[assignment]
    else:  # an older store: estimated (see the module docstring)
        forwards = [(1,) * d if draft_table is not None else () for d in work.drafted]
        lookups = [1 if drafter in ("ngram", "ngram+lm") else 0 for _ in work.drafted]
    prefill = pricer.prefill(profile.target, work.prompt_tokens - 1)
    if draft_model:
        prefill += pricer.prefill(draft_costs, work.prompt_tokens - 1)  # type: ignore[arg-type]
    head_prefilled = not uses_head(drafter)
    verify = draft = 0.0
    context = work.prompt_tokens - 1
    for r in range(rounds):
        verify += pricer.forward(target, work.drafted[r] + 1 + extra[r], context)
        sizes = tuple(forwards[r])
        if not head_prefilled and sizes:  # the head's first forward reads the prompt's features: its prefill
            prefill += pricer.prefill(draft_costs, sizes[0])  # type: ignore[arg-type]
            sizes, head_prefilled = sizes[1:], True
        for n in sizes:
            draft += pricer.forward(draft_table, n, context)  # type: ignore[arg-type]
        if lookups[r]:
            draft += lookups[r] * pricer.lookup(context + 1)  # over the whole sequence so far
        context += work.emitted[r]
    return ProxyTime(prefill, verify, draft, pricer.outside, approximate=not recorded and drafter is not None)
