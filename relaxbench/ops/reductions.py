"""The exact reductions the policies read from logit rows: argmax and the n largest values.

Plain torch, on purpose. A chunk-maxima variant (one vectorised ``amax`` pass, then only the chunks that can hold
the answer) computes the same results faster on CPU, but no rule needs that speed: every greedy decision stays well
under its 1 % share of a verify round with torch's own ``argmax`` and ``topk`` (the measurement is in
docs/performance.md, "Policy decision"). One readable implementation wins.
"""

from __future__ import annotations

import torch


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """The first index of the maximum of each row of ``logits`` [..., V] (torch's tie-break)."""
    return logits.argmax(dim=-1)


def top_values(logits: torch.Tensor, n: int) -> torch.Tensor:
    """[..., n] the n largest values of each row of ``logits`` [..., V], descending, ties repeated; ``n`` is capped
    at V."""
    return torch.topk(logits, min(n, int(logits.shape[-1])), dim=-1).values
