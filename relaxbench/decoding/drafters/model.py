"""Drafters backed by a causal LM with its own KV cache, and the independent draft model."""

from __future__ import annotations

from typing import Any

import torch

from relaxbench.decoding.cache import CachedLM
from relaxbench.decoding.drafters.base import Drafter, DrafterInputs, Proposal, register_drafter
from relaxbench.ops.sampling import SamplingParams, next_token


def draft_autoregressively(lm: CachedLM, context: torch.Tensor, k: int, sampling: SamplingParams,
                           generator: torch.Generator | None, keep_logits: bool,
                           keep_hidden: bool = False) -> Proposal:
    """k steps of plain decoding with ``lm`` on top of its cache (the shared core of every LM drafter).

    ``keep_hidden``: also return the last hidden state at each draft token's own position (the state after
    reading it). Step j reads d_{j-1}, so d_1..d_{k-1} come free; d_k is read by one extra forward, as AutoJudge's
    drafting loop does (``eval/generation_utils.py::run_spec_dec``, window_size + 1 draft forwards). Its cache entry
    is kept when d_k is accepted and rolled back with the others otherwise."""
    lm.sync_to(context)
    feed = lm.pending(context)
    tokens, rows, hidden, forwards = [], [], [], []
    for step in range(k):
        out = lm.run(feed, n_logits=1, want_hidden=keep_hidden)
        forwards.append(int(feed.shape[0]))
        token = next_token(out.logits[-1], sampling, generator)
        tokens.append(token)
        if keep_logits:
            rows.append(out.logits[-1])
        if keep_hidden and step > 0:
            hidden.append(out.hidden[-1])
        feed = token.view(1)
    if keep_hidden and tokens:
        hidden.append(lm.run(feed, n_logits=1, want_hidden=True).hidden[-1])
        forwards.append(1)
    empty = torch.empty(0, dtype=torch.long, device=context.device)
    return Proposal(torch.stack(tokens) if tokens else empty, torch.stack(rows) if keep_logits and rows else None,
                    forwards=tuple(forwards), hidden=torch.stack(hidden) if hidden else None)


class LMDrafter(Drafter):
    """A drafter backed by a causal LM with its own KV cache (``self.lm``): reset and roll back alike."""

    lm: CachedLM

    def reset(self, prompt: torch.Tensor) -> None:
        """New sequence: prefill the drafter's cache with the prompt (all but its last token, as the target), so
        the prefill is timed with the target's and not charged to the first round's draft steps."""
        self.lm.reset()
        if prompt.shape[0] > 1:
            self.lm.run(prompt[:-1].to(self.lm.device), n_logits=0)

    def prepare(self, positions: int, k: int) -> None:
        """Reserve the static cache and capture the forwards of a round: the one-token steps and the pending feed
        after a round (2..k+1 tokens, of which only the last one's logits are read), with the hidden states when the
        policy reads them."""
        self.lm.reserve(positions)
        if self.lm.graphs and k > 0:
            self.lm.reset()
            hidden = self.keep_hidden and self.provides_hidden
            self.lm.capture([1], want_hidden=hidden)
            self.lm.capture(range(2, k + 2), want_hidden=hidden, last_only=True)

    def graph_report(self) -> dict[str, object] | None:
        return self.lm.report.as_dict() if self.lm.graphs else None

    def propose(self, context, k, sampling, generator) -> Proposal:
        return draft_autoregressively(self.lm, context, k, sampling, generator, self.keep_logits,
                                      self.keep_hidden and self.provides_hidden)

    def commit(self, context: torch.Tensor) -> None:
        self.lm.sync_to(context)


@register_drafter
class DraftModelDrafter(LMDrafter):
    """An independent (smaller) draft LM with its own KV cache."""

    name = "model"
    provides_probs = True
    provides_hidden = True
    needs_draft_model = True
    summary = "an independent draft LM with its own KV cache"

    def __init__(self, knobs: Any, inputs: DrafterInputs) -> None:
        super().__init__(knobs, inputs)
        self.lm = CachedLM.configured(inputs.draft.model)
        self.model_name = inputs.draft.name

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model": self.model_name}
