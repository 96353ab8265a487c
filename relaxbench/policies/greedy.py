"""The one greedy judgement every greedy rule goes through.

A greedy rule accepts draft ``d_i`` when it is the target's argmax (``m_i``) or when the rule's relaxation accepts the
mismatch; the accepted length is the leading run of acceptances and the next token is the target's argmax at the
first rejected position (the bonus token when all ``k`` are accepted). A rule computes its relaxation for every
position of every request at once (a [B, K] mask); only mismatches read it.
"""

from __future__ import annotations

import torch

from relaxbench.policies.batch import Batch
from relaxbench.policies.verdict import Judgement

__all__ = ["argmax_next", "greedy_judgement"]


def argmax_next(batch: Batch):
    """n → the target's argmax at position n of each request: the greedy correction or bonus token."""
    argmax = batch.target_argmax
    return lambda n: argmax.gather(1, n.unsqueeze(-1)).squeeze(-1)


def greedy_judgement(batch: Batch, relax: torch.Tensor | None = None) -> Judgement:
    """Exact matches plus the mismatches ``relax`` [B, K] accepts (exact match when None); a relaxed position is an
    accepted mismatch; the next token is the target's argmax."""
    matches = batch.matches
    if relax is None:
        return Judgement(matches, torch.zeros_like(matches), argmax_next(batch), plain_when_empty=True)
    relaxed = relax & ~matches
    return Judgement(matches | relaxed, relaxed, argmax_next(batch), plain_when_empty=True)
