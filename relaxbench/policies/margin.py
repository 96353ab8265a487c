"""Margin rules: accept a mismatch when the target's own preference for its top token over the draft is slim.

``margin`` — MARS (arXiv 2601.15498; no public code found; rule as POLICIES.md §4 gives it). Per position:
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
error. Under greedy decoding the correction token is the target's argmax.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from relaxbench.policies.base import Block, Verdict, VerificationPolicy, greedy_scan, register_policy


def top2_ratio_relax(block: Block, j: int, theta: float) -> bool:
    """MARS's relaxation of the mismatch at draft position ``j`` (cheap: it reads only the row's top-2 logits,
    from the round's chunk maxima)."""
    z1, z2 = block.greedy_rows.top_values_at(j, 2)
    is_top2 = block.greedy_rows.draft_logit_at(j) >= z2  # the second-largest logit (or tied with it)
    return is_top2 and z1 > 0 and z2 / z1 > theta


@register_policy
class Margin(VerificationPolicy):
    name = "margin"
    modes = frozenset({"greedy"})
    strict_knobs = {"theta": 1.0}
    summary = "MARS: accept a top-2 draft when the raw-logit ratio z2/z1 > theta (z1 <= 0: strict)"

    @dataclass(frozen=True)
    class Knobs:
        theta: float = 0.9

        def __post_init__(self) -> None:
            if not self.theta >= 0:
                raise ValueError("theta must be >= 0")

    def decide(self, block: Block) -> Verdict:
        theta = self.knobs.theta
        if theta >= 1:
            return greedy_scan(block)
        return greedy_scan(block, lambda j: top2_ratio_relax(block, j, theta))


@register_policy
class MarginFirst(VerificationPolicy):
    name = "margin-first"
    modes = frozenset({"greedy"})
    strict_knobs = {"kappa": math.inf}
    summary = "AdaptiveSpec: promote the first mismatch of a block iff p(d)/p(top1) >= kappa"

    @dataclass(frozen=True)
    class Knobs:
        kappa: float = 0.5

        def __post_init__(self) -> None:
            if not self.kappa >= 0:
                raise ValueError("kappa must be >= 0")

    def decide(self, block: Block) -> Verdict:
        kappa = self.knobs.kappa
        if kappa > 1:
            return greedy_scan(block)
        rows = block.greedy_rows
        judged: list[int] = []

        def promote_first(j: int) -> bool:  # greedy_scan's first call is the block's first mismatch
            judged.append(j)
            if len(judged) > 1:
                return False
            gap = rows.draft_logit_at(j) - rows.max_at(j)  # ln p(d)/p(top1)
            return gap >= math.log(kappa) if kappa > 0 else True

        return greedy_scan(block, promote_first)
