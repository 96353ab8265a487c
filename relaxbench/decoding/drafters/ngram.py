"""Prompt-lookup drafters: copy what followed an earlier occurrence of the last n tokens, alone or verified by the
draft LM (FLy's multi-level drafter)."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field, model_validator

from relaxbench.decoding.cache import CachedLM, common_prefix_length
from relaxbench.decoding.drafters.base import Drafter, DrafterInputs, Proposal, register_drafter
from relaxbench.decoding.drafters.model import LMDrafter
from relaxbench.ops.reductions import argmax
from relaxbench.validation import Integer, Spec


def prompt_lookup(context: torch.Tensor, max_ngram: int, min_ngram: int, num_tokens: int) -> torch.Tensor:
    """Prompt-lookup decoding: match the last n tokens (n = max_ngram down to min_ngram) earlier in the context
    and propose what followed the earliest match that has a continuation. Empty when nothing matches."""
    length = int(context.shape[0])
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        suffix = context[length - n:]
        windows = context[: length - 1].unfold(0, n, 1)  # windows that end before the last token
        hits = (windows == suffix).all(dim=1).nonzero().flatten()
        for start in hits.tolist():
            follow = start + n
            if follow < length:
                return context[follow: min(follow + num_tokens, length)]
    return context[:0]


class NgramKnobs(Spec):
    """Prompt-lookup settings: n-gram sizes tried (max_ngram down to min_ngram) and tokens copied per match."""

    max_ngram: Integer = 3
    min_ngram: Integer = Field(1, ge=1)
    num_tokens: Integer = Field(10, ge=1)

    @model_validator(mode="after")
    def _order(self):
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"need min_ngram <= max_ngram, got {self.min_ngram} > {self.max_ngram}")
        return self


@register_drafter
class PromptLookupDrafter(Drafter):
    """Prompt-lookup n-grams (no model, no distribution): copy what followed an earlier occurrence."""

    name = "ngram"
    summary = "prompt-lookup n-grams: copy the continuation of the earliest earlier match of the last n tokens"

    Knobs = NgramKnobs

    def propose(self, context, k, sampling, generator) -> Proposal:
        tokens = prompt_lookup(context, self.knobs.max_ngram, self.knobs.min_ngram, min(k, self.knobs.num_tokens))
        return Proposal(tokens, None, lookups=1)


@register_drafter
class NgramVerifiedByDraftLM(LMDrafter):
    """FLy's multi-level drafter: prompt-lookup n-grams verified greedily by the draft LM, repeated until the
    round has ``k`` drafts (AMD-AGI/FLy ``SPDGenerate.draft_with_ngram``).

    One step: look up an n-gram continuation of the current context (n from ``max_ngram`` down to ``min_ngram``,
    earliest match, ``num_tokens`` tokens); feed it to the draft LM in one forward; keep the longest prefix the LM
    agrees with (its argmax) plus the LM's own next token. Repeat on the extended context until at least ``k``
    tokens exist, then cut to ``k`` (the engine's contract: a proposal has at most ``k`` tokens; the authors also
    cut to ``k``). When no n-gram matches, a step is one plain greedy step of the draft LM (the authors re-feed the
    previous n-gram, whose acceptance then yields the same single LM token).

    Drafts are greedy whatever the run's temperature (the authors verify the n-grams at temperature 0), and they
    are not samples from a distribution, so this drafter provides none: rules that need ``q`` are refused with it.
    """

    name = "ngram+lm"
    needs_draft_model = True
    summary = "FLy's drafter: prompt-lookup n-grams verified greedily by the draft LM until k drafts exist"

    class Knobs(NgramKnobs):  # FLy's defaults: n = 4 down to 1, 6 tokens
        max_ngram: Integer = 4
        num_tokens: Integer = Field(6, ge=1)

    def __init__(self, knobs: Any, inputs: DrafterInputs) -> None:
        super().__init__(knobs, inputs)
        self.lm = CachedLM.configured(inputs.draft.model)
        self.model_name = inputs.draft.name

    def prepare(self, positions: int, k: int) -> None:
        """A step feeds the pending tokens (up to k+1) and an n-gram of ``num_tokens``, reading every guess's
        logits: capture those widths (every-token graphs)."""
        self.lm.reserve(positions)
        if self.lm.graphs and k > 0:
            self.lm.reset()
            self.lm.capture(range(1, k + 2 + self.knobs.num_tokens))

    def propose(self, context, k, sampling, generator) -> Proposal:
        knobs, lm, start = self.knobs, self.lm, int(context.shape[0])
        lm.sync_to(context)
        forwards = []
        while int(context.shape[0]) - start < k:
            guess = prompt_lookup(context, knobs.max_ngram, knobs.min_ngram, knobs.num_tokens)
            n_guess = int(guess.shape[0])
            feed = torch.cat([lm.pending(context), guess])
            logits = lm.run(feed, n_logits=n_guess + 1).logits
            forwards.append(int(feed.shape[0]))
            own = argmax(logits)  # own[j]: the LM's next token after guess[:j]
            agreed = common_prefix_length(guess, own[:n_guess])
            context = torch.cat([context, guess[:agreed], own[agreed: agreed + 1]])
            lm.sync_to(context)  # drops the cache entries of rejected n-gram tokens
        return Proposal(context[start: start + k], None, tuple(forwards), lookups=len(forwards))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model": self.model_name}
