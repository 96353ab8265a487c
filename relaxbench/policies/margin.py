"""Margin rules: accept a mismatch when the target's own preference for its top token over the draft is slim.

``margin`` — MARS (arXiv 2601.15498; no public code found). Per position:
accept if ``d_i`` is the target's argmax; else accept if ``d_i`` holds the target's second-largest raw logit
(``z_d = z_(2)``; a tie with the third counts as top-2) and the logit ratio ``z_(2)/z_(1) > θ`` (default 0.9);
else reject. The ratio is of raw logits, so it is not shift-invariant, and it is meaningless when ``z_(1) ≤ 0``
(then ``z_(2)/z_(1) ≥ 1`` however wide the gap): **when ``z_(1) ≤ 0`` the relaxation is refused** and the position
is judged by exact match. With ``z_(1) > 0 ≥ z_(2)`` the ratio is ≤ 0 and fails any ``θ ≥ 0``. ``θ ≥ 1`` is
strict (``z_(2)/z_(1) ≤ 1`` and the test is ``>``). Loosening: smaller ``θ``.

``margin-first`` — AdaptiveSpec's margin rule (arXiv 2609.02897, "Margins, Not Windows"; no public code found).
Only the **first** mismatch ``j`` of the block may be promoted: accept ``d_j`` iff ``p(d_j)/p(top1_j) ≥ κ``, i.e.
``z_d − z_(1) ≥ ln κ`` (computed from logits; no softmax). Every other position is exact match, so the block goes
on past ``j`` only while the drafts keep matching. The paper tunes κ per model and task (its default is
unverified); ours is 0.5. ``κ > 1`` is strict (``inf`` in the YAMLs). AdaptiveSpec's dynamic tree is a drafter
feature and is not part of this rule.

Both are greedy-only: neither paper defines a sampling-mode rule we could follow, so sampling is a configuration
error. Under greedy decoding the correction token is the target's argmax. Ratios and gaps are computed in double
from the float32 logits.
"""

from __future__ import annotations

import math

import torch
from pydantic import model_validator

from relaxbench.ops.reductions import top_values
from relaxbench.policies.base import Block, Verdict, VerificationPolicy, register_policy
from relaxbench.policies.greedy import greedy_verdict
from relaxbench.validation import Number, Spec


def top2_ratio_accepts(block: Block, rows: torch.Tensor, theta: float) -> torch.Tensor:
    """[m] MARS's relaxation at draft positions ``rows``: the draft holds the second-largest logit (or ties it),
    ``z_(1) > 0`` and ``z_(2)/z_(1) > θ``."""
    z1, z2 = top_values(block.target_logits[rows], 2).double().unbind(-1)
    is_top2 = block.target_logit_of_drafts(rows).double() >= z2
    return is_top2 & (z1 > 0) & (z2 / z1 > theta)


@register_policy
class Margin(VerificationPolicy):
    name = "margin"
    modes = frozenset({"greedy"})
    strict_knobs = {"theta": 1.0}
    summary = "MARS: accept a top-2 draft when the raw-logit ratio z2/z1 > theta (z1 <= 0: strict)"

    class Knobs(Spec):
        theta: Number = 0.9

        @model_validator(mode="after")
        def _check(self):
            if not self.theta >= 0:
                raise ValueError("theta must be >= 0")
            return self

    def decide(self, block: Block) -> Verdict:
        theta = self.knobs.theta
        if theta >= 1:
            return greedy_verdict(block)
        return greedy_verdict(block, lambda rows: top2_ratio_accepts(block, rows, theta))


@register_policy
class MarginFirst(VerificationPolicy):
    name = "margin-first"
    modes = frozenset({"greedy"})
    strict_knobs = {"kappa": math.inf}
    summary = "AdaptiveSpec: promote the first mismatch of a block iff p(d)/p(top1) >= kappa"

    class Knobs(Spec):
        kappa: Number = 0.5

        @model_validator(mode="after")
        def _check(self):
            if not self.kappa >= 0:
                raise ValueError("kappa must be >= 0")
            return self

    def decide(self, block: Block) -> Verdict:
        kappa = self.knobs.kappa
        if kappa > 1:
            return greedy_verdict(block)

        def promote_first(rows: torch.Tensor) -> torch.Tensor:  # only the block's first mismatch can pass
            accept = torch.zeros_like(rows, dtype=torch.bool)
            if kappa == 0:
                accept[0] = True
            else:
                first = rows[:1]
                gap = block.target_logit_of_drafts(first).double() - block.target_logits[first].amax(-1).double()
                accept[0] = bool(gap[0] >= math.log(kappa))  # ln p(d)/p(top1) >= ln κ
            return accept

        return greedy_verdict(block, promote_first)
