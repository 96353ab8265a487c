"""Relaxing only part of the text: ``relax_in: all | thinking | answer``, for every relaxed rule.

TensorRT-LLM relaxes its MTP acceptance only while the model thinks (``use_relaxed_acceptance_for_thinking``: the
relaxed δ is set when a begin-of-thinking token is accepted and reset to 0 at the end-of-thinking token); users ask
the other engines for the same (SGLang #7702, vLLM #21157). Here any relaxed rule can be gated so: ``SpanGate``
wraps it, and each draft position is verified by the rule where relaxation applies and strictly elsewhere (exact
match under greedy decoding, speculative sampling under sampling: ``strict.lossless_verdict``).

The span: the thinking span runs from an opening tag to the next closing tag (``<think>``/``</think>`` for Qwen3,
as token sequences from the target's tokenizer; a method may name others). It is tracked per sequence across rounds
(``reset`` per sequence; the committed context, prompt included, is read once as it grows), so a ``<think>`` in the
prompt (Qwen3-2507's templates) opens it. A draft token belongs to the span of the text it was proposed after: a
drafted ``</think>`` is still inside (the model is thinking when it proposes it), the drafts after it are outside.

A block that crosses a boundary is split into runs of positions with the same treatment, verified in order as
sub-blocks (``Block.sub``): a run's verdict that rejects ends the round with its correction token; a run accepted
whole hands on to the next, and the last run's bonus token is the round's. For rules that judge each position on
its own (every greedy rule, speculative sampling, the relaxed-target rules) the split changes nothing but which
test a position gets; a rule that looks across positions (FLy's window) sees the boundary as the edge of a block.
``relax_in: all`` gates nothing but still splits at the boundaries, so the relaxed fractions inside and outside the
span are counted (``Verdict.emitted_in_span`` / ``relaxed_in_span``) for every gated arm.

Deviations from TensorRT-LLM (``mtpKernels.cu`` ``mtpRelaxedAcceptanceKernel``), deliberate: its δ flips after the
round (the state at the round's start applies to every draft of the round, so drafts after an accepted ``</think>``
are still relaxed and those after ``<think>`` not yet), while here the block is split at the boundary (its context
phase sets the state from the prompt: any ``<think>`` there opens it, as here for ``relaxed-topk-delta``); outside
the span it keeps the top-K test at δ = 0 (ties with the top-1 probability still pass), while here outside is exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from relaxbench.errors import ConfigError
from tests.oracle.rejection import Verdict
from tests.oracle.base import Block, PolicyEnv, VerificationPolicy
from tests.oracle.strict import lossless_verdict

RELAX_IN = ("all", "thinking", "answer")
THINKING_TAGS = ("<think>", "</think>")


class SpanTracker:
    """Whether a sequence is inside the thinking span, read token by token (tags may be several tokens long)."""

    def __init__(self, open_ids: Sequence[int], close_ids: Sequence[int]) -> None:
        if not open_ids or not close_ids:
            raise ConfigError("a thinking tag encodes to no tokens")
        self.open, self.close = tuple(open_ids), tuple(close_ids)
        self.width = max(len(self.open), len(self.close))
        self.reset()

    def reset(self) -> None:
        self.inside, self.tail, self.seen = False, (), 0

    def step(self, inside: bool, tail: tuple[int, ...], token: int) -> tuple[bool, tuple[int, ...]]:
        tail = (tail + (token,))[-self.width:]
        if tail[-len(self.open):] == self.open:
            return True, tail
        if tail[-len(self.close):] == self.close:
            return False, tail
        return inside, tail

    def advance(self, new: Sequence[int]) -> None:
        """Read the committed tokens after the ``seen`` already read."""
        for token in new:
            self.inside, self.tail = self.step(self.inside, self.tail, int(token))
        self.seen += len(new)

    def flags(self, drafts: Sequence[int]) -> list[bool]:
        """For draft positions 0..k: inside the span after the committed context and the drafts before it."""
        inside, tail, out = self.inside, self.tail, [self.inside]
        for token in drafts:
            inside, tail = self.step(inside, tail, int(token))
            out.append(inside)
        return out


def runs(relax: Sequence[bool]) -> list[tuple[int, int, bool]]:
    """Maximal runs ``(start, stop, relax)`` of equal flags."""
    out: list[tuple[int, int, bool]] = []
    for i, flag in enumerate(relax):
        if out and out[-1][2] == flag:
            out[-1] = (out[-1][0], i + 1, flag)
        else:
            out.append((i, i + 1, flag))
    return out


class SpanGate(VerificationPolicy):
    """``inner`` where relaxation applies (``relax_in``), strict elsewhere; not registered (methods build it)."""

    name = "span-gate"

    def __init__(self, inner: VerificationPolicy, relax_in: str, tags: tuple[str, str] = THINKING_TAGS) -> None:
        if relax_in not in RELAX_IN:
            raise ConfigError(f"relax_in must be one of {', '.join(RELAX_IN)}, got {relax_in!r}")
        if inner.modes.lossless:
            raise ConfigError(f"relax_in applies to relaxed rules; {inner.name!r} is lossless")
        super().__init__(inner.knobs)
        self.inner, self.relax_in, self.tags = inner, relax_in, tags
        self.name, self.origin, self.modes, self.needs = inner.name, inner.origin, inner.modes, inner.needs
        self.tracker: SpanTracker | None = None
        # TensorRT-LLM's context phase (mtp.py): the rule that claims its span is relaxed after a prompt that holds
        # a begin-of-thinking token anywhere, a closing tag after it notwithstanding
        self.prompt_opens = inner.name == "relaxed-topk-delta"

    def bind(self, env: PolicyEnv) -> None:
        self.inner.bind(env)
        encode = env.tokenizer.encode
        self.tracker = SpanTracker(encode(self.tags[0], add_special_tokens=False),
                                   encode(self.tags[1], add_special_tokens=False))

    def reset(self) -> None:
        self.inner.reset()
        if self.tracker is not None:
            self.tracker.reset()

    def provenance(self) -> Any:
        return self.inner.provenance()

    def extra_verify_tokens(self, draft_tokens: torch.Tensor) -> torch.Tensor | None:
        return self.inner.extra_verify_tokens(draft_tokens)

    def relaxes(self, inside: bool) -> bool:
        return self.relax_in == "all" or (self.relax_in == "thinking") == inside

    def decide(self, block: Block) -> Verdict:
        if self.tracker is None:
            raise ConfigError("a span-gated rule must be bound to a tokenizer first")
        if block.context is None:
            raise ConfigError("a span-gated rule needs the block's context")
        first_read = self.tracker.seen == 0
        self.tracker.advance(block.context[self.tracker.seen:].tolist())
        if first_read and self.prompt_opens:
            context, tag = block.context.tolist(), list(self.tracker.open)
            if any(context[i: i + len(tag)] == tag for i in range(len(context) - len(tag) + 1)):
                self.tracker.inside = True
        inside = self.tracker.flags(block.draft_tokens.tolist())  # positions 0..k
        accepted = relaxed = relaxed_in = 0
        verdict = Verdict(0, 0)
        for start, stop, in_span in runs(inside[: block.k]):
            part = block if (start, stop) == (0, block.k) else block.sub(start, stop)
            verdict = self.inner.decide(part) if self.relaxes(in_span) else lossless_verdict(part)
            accepted += verdict.n_accepted
            relaxed += verdict.n_relaxed
            relaxed_in += verdict.n_relaxed if in_span else 0
            if verdict.n_accepted < stop - start:
                break
        emitted_in = sum(inside[: accepted + 1])
        return Verdict(accepted, verdict.next_token, relaxed, emitted_in, relaxed_in)


def gate(policy: VerificationPolicy, relax_in: str | None, tags: Sequence[str] | None = None) -> VerificationPolicy:
    """``policy`` gated to ``relax_in`` (None: the rule's own default, ``Modes.relax_in``), or the rule itself when
    nothing is gated (an ungated rule's default, or a lossless rule given no ``relax_in``)."""
    chosen = relax_in if relax_in is not None else policy.modes.relax_in
    if relax_in is None and chosen == "all":
        return policy
    if tags is not None and (len(tags) != 2 or not all(isinstance(t, str) and t for t in tags)):
        raise ConfigError(f"thinking_tags must be two non-empty strings (open, close), got {tags!r}")
    return SpanGate(policy, chosen, tuple(tags) if tags is not None else THINKING_TAGS)
