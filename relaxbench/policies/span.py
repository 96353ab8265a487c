"""Relaxing only part of the text: ``relax_in: all | thinking | answer``, for every relaxed rule.

TensorRT-LLM relaxes its MTP acceptance only while the model thinks (``use_relaxed_acceptance_for_thinking``: the
relaxed δ is set when a begin-of-thinking token is accepted and reset to 0 at the end-of-thinking token); users ask
the other engines for the same (SGLang #7702, vLLM #21157). Here any relaxed rule can be gated so: ``SpanGate``
wraps it, and each draft position is verified by the rule where relaxation applies and strictly elsewhere (exact
match under greedy decoding, speculative sampling under sampling: ``strict.lossless_judgement``).

The span: the thinking span runs from an opening tag to the next closing tag (``<think>``/``</think>`` for Qwen3,
as token sequences from the target's tokenizer; a method may name others). It is tracked per sequence across rounds
(``reset`` per sequence; the committed tokens, prompt included, are read once as they grow, through ``observe``), so a
``<think>`` in the prompt (Qwen3-2507's templates) opens it and a later ``</think>`` in the prompt closes it. A rule
that claims TensorRT-LLM's span (``span_opened_by_any_prompt_tag``: ``relaxed-topk-delta``) reads the prompt as
TensorRT-LLM's context phase does (``mtp.py``, ``sample_and_accept_draft_tokens``: the request's δ is set when the
prompt holds at least one begin-of-thinking token, whatever follows it): a prompt holding ``<think>…</think>`` (a
template that closes an empty thinking block) leaves it relaxed from the first generated token, until a generated
``</think>``. A draft token belongs to the span of the text it was proposed after: a
drafted ``</think>`` is still inside (the model is thinking when it proposes it), the drafts after it are outside.

A block that crosses a boundary is split into runs of positions with the same treatment: each position gets its run's
test (the rule's or the strict one, judged for the whole block at once with the same uniforms), a rejection ends the
round with the token of its run's rule, and after a full accept the last run's bonus token is the round's; a rule
that looks ahead sees its run's end as the block's end (``Batch.segment_end``). For rules that judge each position on
its own (every greedy rule, speculative sampling, the relaxed-target rules) the split changes nothing but which
test a position gets; a rule that looks across positions (FLy's window) sees the boundary as the edge of a block.
``relax_in: all`` gates nothing but still splits at the boundaries, so the relaxed fractions inside and outside the
span are counted (``Verdict.emitted_in_span`` / ``relaxed_in_span``) for every gated arm.

Deviations from TensorRT-LLM (``mtpKernels.cu`` ``mtpRelaxedAcceptanceKernel``), deliberate: its δ flips after the
round (the state at the round's start applies to every draft of the round, so drafts after an accepted ``</think>``
are still relaxed and those after ``<think>`` not yet), while here the block is split at the boundary; outside the
span it keeps the top-K test at δ = 0 (ties with the top-1 probability still pass), while here outside is exact;
its begin- and end-of-thinking tokens are single token ids, while here a tag may be several tokens. (The prompt is
read as TensorRT-LLM reads it for the rule that claims its span, above; for every other rule, as the text.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from relaxbench.errors import ConfigError
from relaxbench.policies.base import Batch, Judgement, PolicyEnv, VerificationPolicy
from relaxbench.policies.strict import lossless_judgement

RELAX_IN = ("all", "thinking", "answer")
THINKING_TAGS = ("<think>", "</think>")


class SpanTracker:
    """Whether a sequence is inside the thinking span, read token by token on the host (tags may be several tokens
    long): its state is the flag and the last tokens, which ``span_flags`` continues over a batch's drafts."""

    def __init__(self, open_ids: Sequence[int], close_ids: Sequence[int]) -> None:
        if not open_ids or not close_ids:
            raise ConfigError("a thinking tag encodes to no tokens")
        self.open, self.close = tuple(open_ids), tuple(close_ids)
        self.width = max(len(self.open), len(self.close))
        self.reset()

    def reset(self) -> None:
        self.inside, self.tail = False, ()

    def read_prompt(self, prompt: Sequence[int], opened_by_any_tag: bool = False) -> None:
        """Read the prompt (the first committed tokens of a sequence). ``opened_by_any_tag``: TensorRT-LLM's context
        phase, where any opening tag in the prompt opens the span, a closing tag after it notwithstanding."""
        self.advance(prompt)
        if opened_by_any_tag and not self.inside:
            width, ids = len(self.open), tuple(int(t) for t in prompt)
            self.inside = any(ids[i: i + width] == self.open for i in range(len(ids) - width + 1))

    def advance(self, new: Sequence[int]) -> None:
        """Read committed tokens."""
        for token in new:
            self.tail = (self.tail + (int(token),))[-self.width:]
            if self.tail[-len(self.open):] == self.open:
                self.inside = True
            elif self.tail[-len(self.close):] == self.close:
                self.inside = False


def span_flags(tracker: SpanTracker, drafts: torch.Tensor) -> torch.Tensor:
    """[1, K + 1] bool: for draft positions 0..K, inside the span after the committed context and the drafts before
    it (a drafted closing tag is still inside; the drafts after it are outside), on the device."""
    width = tracker.width
    tail = torch.full((1, width), -1, dtype=torch.long, device=drafts.device)
    if tracker.tail:
        tail[0, width - len(tracker.tail):] = torch.tensor(tracker.tail, dtype=torch.long, device=drafts.device)
    sequence = torch.cat([tail, drafts], dim=1)
    k = int(drafts.shape[1])

    def completes(tag: tuple[int, ...]) -> torch.Tensor:  # [1, K]: the tag ends at draft j
        windows = sequence.unfold(1, len(tag), 1)
        hits = (windows == torch.tensor(tag, device=drafts.device)).all(dim=-1)
        start = width - len(tag) + 1
        return hits[:, start: start + k]

    opens, closes = completes(tracker.open), completes(tracker.close)
    event = torch.where(opens, 1, torch.where(closes, -1, 0))  # an opening tag wins, as the tracker reads it
    positions = torch.arange(k, device=drafts.device)
    last = torch.where(event != 0, positions, -1).cummax(dim=1).values
    inside = torch.full((1, 1), tracker.inside, dtype=torch.bool, device=drafts.device)
    after = torch.where(last >= 0, event.gather(1, last.clamp_min(0)) == 1, inside)
    return torch.cat([inside, after], dim=1)


def run_ends(flags: torch.Tensor, num_drafts: torch.Tensor) -> torch.Tensor:
    """[B, K] the end (exclusive) of the run of equal ``flags`` [B, K] each position belongs to, at most the
    request's draft count: a rule that looks ahead sees a span boundary as the edge of its block."""
    k = int(flags.shape[1])
    positions = torch.arange(k, device=flags.device)
    big = torch.full_like(positions, k)
    boundary = torch.cat([torch.zeros_like(flags[:, :1]), flags[:, 1:] != flags[:, :-1]], dim=1)
    starts = torch.where(boundary, positions, big)  # a run starts at j when flag j differs from flag j − 1
    last = torch.full((flags.shape[0], 1), k, dtype=positions.dtype, device=flags.device)
    following = torch.cat([starts[:, 1:], last], dim=1)  # the next start after i
    ends = following.flip(1).cummin(dim=1).values.flip(1)
    return torch.minimum(ends, num_drafts.unsqueeze(-1))


class SpanGate(VerificationPolicy):
    """``inner`` where relaxation applies (``relax_in``), strict elsewhere; not registered (methods build it). It
    follows one sequence at a time (``observe``), so it decides batches of one request."""

    name = "span-gate"

    def __init__(self, inner: VerificationPolicy, relax_in: str, tags: tuple[str, str] = THINKING_TAGS) -> None:
        if relax_in not in RELAX_IN:
            raise ConfigError(f"relax_in must be one of {', '.join(RELAX_IN)}, got {relax_in!r}")
        if inner.modes.lossless:
            raise ConfigError(f"relax_in applies to relaxed rules; {inner.name!r} is lossless")
        super().__init__(inner.knobs)
        self.inner, self.relax_in, self.tags = inner, relax_in, tags
        self.name, self.origin, self.modes, self.needs = inner.name, inner.origin, inner.modes, inner.needs
        self.uniform_dtype = inner.uniform_dtype
        self.draws = True  # the strict test outside the span draws
        self.tracker: SpanTracker | None = None
        # TensorRT-LLM's context phase for the rule that claims its span: any opening tag in the prompt opens it
        self.prompt_opens = bool(getattr(inner, "span_opened_by_any_prompt_tag", False))
        self.prompt_read = False

    def bind(self, env: PolicyEnv) -> None:
        self.inner.bind(env)
        encode = env.tokenizer.encode
        self.tracker = SpanTracker(encode(self.tags[0], add_special_tokens=False),
                                   encode(self.tags[1], add_special_tokens=False))

    def reset(self) -> None:
        self.inner.reset()
        self.prompt_read = False
        if self.tracker is not None:
            self.tracker.reset()

    def observe(self, tokens: Sequence[int]) -> None:
        self.inner.observe(tokens)
        if self.tracker is None:
            raise ConfigError("a span-gated rule must be bound to a tokenizer first")
        if self.prompt_read:
            self.tracker.advance(tokens)
        else:  # the first tokens after reset: the prompt
            self.tracker.read_prompt(tokens, self.prompt_opens)
            self.prompt_read = True

    def provenance(self) -> Any:
        return self.inner.provenance()

    def extra_verify_tokens(self, draft_tokens: torch.Tensor) -> torch.Tensor | None:
        return self.inner.extra_verify_tokens(draft_tokens)

    def relaxes(self, inside: torch.Tensor) -> torch.Tensor:
        if self.relax_in == "all":
            return torch.ones_like(inside)
        return inside if self.relax_in == "thinking" else ~inside

    def judge(self, batch: Batch) -> Judgement:
        if self.tracker is None:
            raise ConfigError("a span-gated rule must be bound to a tokenizer first")
        if batch.size != 1:
            raise ConfigError("a span-gated rule follows one sequence: it decides batches of one request")
        flags = span_flags(self.tracker, batch.drafts)  # positions 0..K
        inside = flags[:, :-1]
        relax = self.relaxes(inside)
        inner = self.inner.judge(batch.with_segments(run_ends(inside, batch.num_drafts)))
        strict = lossless_judgement(batch)
        last = (batch.num_drafts - 1).clamp_min(0)

        def next_token(n: torch.Tensor) -> torch.Tensor:  # the rule of the run that ends the round
            at = torch.minimum(n, last).unsqueeze(-1)
            return torch.where(relax.gather(1, at).squeeze(-1), inner.next_token(n), strict.next_token(n))

        return Judgement(torch.where(relax, inner.accept, strict.accept), relax & inner.relaxed, next_token, flags)


def gate(policy: VerificationPolicy, relax_in: str | None, tags: Sequence[str] | None = None) -> VerificationPolicy:
    """``policy`` gated to ``relax_in`` (None: the rule's own default, ``Modes.relax_in``), or the rule itself when
    nothing is gated (an ungated rule's default, or a lossless rule given no ``relax_in``)."""
    chosen = relax_in if relax_in is not None else policy.modes.relax_in
    if relax_in is None and chosen == "all":
        return policy
    if tags is not None and (len(tags) != 2 or not all(isinstance(t, str) and t for t in tags)):
        raise ConfigError(f"thinking_tags must be two non-empty strings (open, close), got {tags!r}")
    return SpanGate(policy, chosen, tuple(tags) if tags is not None else THINKING_TAGS)
