"""Lenient top-K: accept ``d_i`` iff it is among the target's K most likely tokens.

Source: the ``run_spec_dec_top_k`` baseline in ``garipovroma/autojudge`` (``eval/generation_utils.py``), greedy only.
The knob is ``top`` (K; named so as not to clash with the draft length ``k``). Membership is by value: ``d`` is in
the top K when its raw logit is at least the K-th largest (a tie with the K-th counts as in). ``K = 1`` is defined
as exact match (the argmax's tie-break decides), so it equals ``exact``. Loosening: larger K. Greedy only — the
baseline has no sampling rule, so sampling is a configuration error. The correction token is the target's argmax.
"""

from __future__ import annotations

from dataclasses import dataclass

from relaxbench.policies.base import Block, Verdict, VerificationPolicy, greedy_scan, register_policy


@register_policy
class LenientTopK(VerificationPolicy):
    name = "topk"
    modes = frozenset({"greedy"})
    strict_knobs = {"top": 1}
    summary = "lenient top-K: accept iff the draft is among the target's K most likely tokens"

    @dataclass(frozen=True)
    class Knobs:
        top: int = 2  # K: how many of the target's most likely tokens are acceptable

        def __post_init__(self) -> None:
            if self.top < 1:
                raise ValueError("top must be >= 1")

    def decide(self, block: Block) -> Verdict:
        top = self.knobs.top
        if top == 1:
            return greedy_scan(block)
        rows = block.greedy_rows
        return greedy_scan(block, lambda j: rows.draft_logit_at(j) >= rows.top_values_at(j, top)[-1])
