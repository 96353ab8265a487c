"""Why did a lossless arm's output differ from the autoregressive baseline's?

Exact match is lossless only if a k-token verify forward and a 1-token forward compute the same logits. In fp32 they
agree in practice; in bf16 a near-tie between the top two logits can flip with the chunk size. This module finds
the first divergence and measures the target's top-2 logit gap there on the baseline's prefix: a gap under the
tolerance is a numerical near-tie; anything else is a real bug. Both are reported, neither counts as relaxation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from relaxbench.decoding.cache import forward, new_cache

# top-2 logit gap under which a flip is attributed to rounding, per dtype (bf16 has 8 mantissa bits: logits near
# 20 are spaced 0.125 apart, so a one-ulp flip is a gap of 0.125; fp16 has 11 bits)
NEAR_TIE_TOLERANCE: dict[torch.dtype, float] = {
    torch.float64: 1e-9,
    torch.float32: 1e-3,
    torch.float16: 0.05,
    torch.bfloat16: 0.25,
}


@dataclass(frozen=True)
class Divergence:
    identical: bool
    position: int | None = None  # first output index where the two differ
    top2_gap: float | None = None  # target's top-1 minus top-2 logit there, on the reference prefix
    tolerance: float | None = None
    near_tie: bool | None = None

    def to_record(self) -> dict[str, object]:
        return {"identical": self.identical, "position": self.position, "top2_gap": self.top2_gap,
                "tolerance": self.tolerance, "near_tie": self.near_tie}


@torch.inference_mode()
def diagnose_divergence(target, prompt_ids: list[int], reference_ids: list[int], other_ids: list[int],
                        tolerance: float | None = None) -> Divergence:
    """Compare ``other_ids`` with ``reference_ids`` (the AR output) and classify the first difference."""
    if other_ids == reference_ids:
        return Divergence(True)
    position = next((i for i, (a, b) in enumerate(zip(reference_ids, other_ids)) if a != b),
                    min(len(reference_ids), len(other_ids)))
    tol = tolerance if tolerance is not None else NEAR_TIE_TOLERANCE.get(target.dtype, 1e-3)
    prefix = torch.tensor(prompt_ids + reference_ids[:position], dtype=torch.long, device=target.device)
    logits = forward(target.model, prefix, new_cache(target.model), n_logits=1).logits[-1]
    top2 = torch.topk(logits, 2).values
    gap = float(top2[0] - top2[1])
    return Divergence(False, position, gap, tol, gap < tol)
