"""The one greedy verification walk every greedy rule goes through.

A greedy rule accepts draft ``d_i`` when it is the target's argmax (``m_i``) or when the rule's relaxation
accepts the mismatch; the accepted length is the leading run of acceptances and the next token is the target's
argmax at the first rejected position (the bonus token when all ``k`` are accepted). Only the accepted prefix
decides a round, so a relaxation may leave any row after a row it rejects unjudged: ``relax_rows`` may restrict
its work to the rows that can still matter and answer False for the others.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tests.oracle.rejection import Verdict, accepted_prefix_length
from tests.oracle.base import Block

RelaxRows = Callable[[torch.Tensor], torch.Tensor]  # [m] long draft positions (ascending) -> [m] bool


def accept_relaxed(matches: torch.Tensor, relax_rows: RelaxRows | None) -> torch.Tensor:
    """[k] bool: ``matches`` plus the mismatches that ``relax_rows`` accepts, judged all at once."""
    if relax_rows is None:
        return matches
    rows = (~matches).nonzero().flatten()
    if rows.numel() == 0:
        return matches
    accept = matches.clone()
    accept[rows] = relax_rows(rows)
    return accept


def greedy_verdict(block: Block, relax_rows: RelaxRows | None = None) -> Verdict:
    """Verdict of a greedy rule: exact matches plus the mismatches ``relax_rows`` accepts (exact match when
    None); ``n_relaxed`` counts the accepted mismatches."""
    matches = block.matches
    n = accepted_prefix_length(accept_relaxed(matches, relax_rows))
    n_relaxed = int((~matches[:n]).sum()) if n else 0
    return Verdict(n, int(block.target_argmax[n]), n_relaxed)
