"""The exact reductions the policies read from logit rows: the maximum with its first index, and the n largest values.

Plain torch. The argmax is taken with ``max(dim)``, which returns the same first index of the maximum as ``argmax``
(NaN counting as the maximum, as there) with its value besides, and on a CPU costs about a third of ``argmax``'s
reduction: a rule that reads a row's argmax and its maximum pays for one reduction. ``top_values`` runs ``topk`` on
a small part of each row (see there).
"""

from __future__ import annotations

import math

import torch


def row_max(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """([...] the maximum of each row of ``logits`` [..., V], [...] its first index): torch's ``max(dim)``, whose
    index is ``argmax``'s."""
    values, indices = logits.max(dim=-1)
    return values, indices


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """The first index of the maximum of each row of ``logits`` [..., V] (torch's tie-break)."""
    return row_max(logits)[1]


MAX_TOP_GROUPS = 16  # top_values splits a row into at most this many interleaved groups


def top_groups(vocab: int, n: int) -> int:
    """How many interleaved groups ``top_values`` splits a row of ``vocab`` values into for its ``n`` largest: the
    divisor of ``vocab`` in 2..16 nearest √(vocab / n), which balances the ``topk`` over the column maxima
    (vocab / groups long) against the one over the chosen columns (groups · n long); 1 (a plain ``topk``) when no
    such divisor leaves n columns. A function of the shape alone, so the operations never depend on the data."""
    target = min(float(MAX_TOP_GROUPS), math.sqrt(vocab / max(n, 1)))
    divisors = [g for g in range(2, MAX_TOP_GROUPS + 1) if vocab % g == 0 and vocab // g >= n]
    return min(divisors, key=lambda g: (abs(g - target), -g)) if divisors else 1


def top_values(logits: torch.Tensor, n: int) -> torch.Tensor:
    """[..., n] the n largest values of each row of ``logits`` [..., V], descending, ties repeated; ``n`` is capped
    at V.

    Exactly ``torch.topk(logits, n).values``, at a fraction of its cost on a CPU: each row is split into G
    interleaved groups (``top_groups``; column j of the groups holds ``z[j], z[j + V/G], ...``); the n largest values
    lie in the n columns with the largest maxima (a column outside them holding one of the n largest would make
    every chosen column's maximum at least that value: n values at least as large), so ``topk`` runs on the column
    maxima [..., V/G] and on the G·n values of the chosen columns instead of on the whole row."""
    vocab = int(logits.shape[-1])
    n = min(n, vocab)
    groups_count = top_groups(vocab, n)
    if groups_count == 1:
        return torch.topk(logits, n, dim=-1).values
    groups = logits.unflatten(-1, (groups_count, vocab // groups_count))  # [..., G, V/G]
    columns = torch.topk(groups.amax(dim=-2), n, dim=-1).indices  # [..., n]
    chosen = groups.gather(-1, columns.unsqueeze(-2).expand(*groups.shape[:-1], n))  # [..., G, n]
    return torch.topk(chosen.flatten(-2), n, dim=-1).values
