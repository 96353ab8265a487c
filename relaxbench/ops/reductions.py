"""The exact reductions the policies read from logit rows: the maximum with its first index, and the n largest values.

Plain torch. The argmax is taken with ``max(dim)``, which returns the same first index of the maximum as ``argmax``
(NaN counting as the maximum, as there) with its value besides, and on a CPU costs about a third of ``argmax``'s
reduction: a rule that reads a row's argmax and its maximum pays for one reduction. ``top_values`` runs ``topk`` on
a quarter of each row (see there).
"""

from __future__ import annotations

import torch


def row_max(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """([...] the maximum of each row of ``logits`` [..., V], [...] its first index): torch's ``max(dim)``, whose
    index is ``argmax``'s."""
    values, indices = logits.max(dim=-1)
    return values, indices


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """The first index of the maximum of each row of ``logits`` [..., V] (torch's tie-break)."""
    return row_max(logits)[1]


TOP_GROUPS = 4  # top_values splits a row into this many interleaved groups when V allows


def top_values(logits: torch.Tensor, n: int) -> torch.Tensor:
    """[..., n] the n largest values of each row of ``logits`` [..., V], descending, ties repeated; ``n`` is capped
    at V.

    Exactly ``torch.topk(logits, n).values``, at about half its cost on a CPU: each row is split into
    ``TOP_GROUPS`` interleaved groups (column j of the groups holds ``z[j], z[j + V/4], ...``); the n largest values
    lie in the n columns with the largest maxima (a column outside them holding one of the n largest would make
    every chosen column's maximum at least that value: n values at least as large), so ``topk`` runs on the column
    maxima [..., V/4] and on the 4·n values of the chosen columns instead of on the whole row."""
    vocab = int(logits.shape[-1])
    n = min(n, vocab)
    if vocab % TOP_GROUPS or vocab // TOP_GROUPS < n:
        return torch.topk(logits, n, dim=-1).values
    groups = logits.unflatten(-1, (TOP_GROUPS, vocab // TOP_GROUPS))  # [..., 4, V/4]
    columns = torch.topk(groups.amax(dim=-2), n, dim=-1).indices  # [..., n]
    chosen = groups.gather(-1, columns.unsqueeze(-2).expand(*groups.shape[:-1], n))  # [..., 4, n]
    return torch.topk(chosen.flatten(-2), n, dim=-1).values
