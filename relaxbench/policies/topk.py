"""Lenient top-K: accept ``d_i`` iff it is among the target's K most likely tokens.

Reference: garipovroma/autojudge @ 8a4beb1, ``eval/generation_utils.py`` ``run_spec_dec_top_k`` (L17–): the baseline
accepts a draft that matches the target's argmax or is among ``topk(target_logits, K).indices`` (L87, L105–106),
takes the leading run (L109), and replaces the first rejected draft by the target's argmax (L111–118); greedy
drafts, greedy only.

The knob is ``top`` (K; named so as not to clash with the draft length ``k``). ``K = 1`` is defined as exact match
(the argmax's tie-break decides), so it equals ``exact``. Loosening: larger K. Greedy only — the baseline has no
sampling rule, so sampling is a configuration error. The correction token is the target's argmax.

Deviations, deliberate: membership is by value — ``d`` is in the top K when its raw logit is at least the K-th
largest, so a tie with the K-th counts as in (the reference takes ``torch.topk``'s indices, whose order among exactly
equal logits is unspecified); when all k drafts are accepted the engine emits the target's next token (the bonus),
which the reference's window does not append.
"""

from __future__ import annotations

from pydantic import Field

from relaxbench.ops.reductions import top_values
from relaxbench.policies.base import Block, Fidelity, Modes, Origin, Verdict, VerificationPolicy, register_policy
from relaxbench.policies.greedy import greedy_verdict
from relaxbench.validation import Integer, Spec


@register_policy
class LenientTopK(VerificationPolicy):
    name = "topk"
    modes = Modes(supported={"greedy"}, strict_knobs={"top": 1})
    origin = Origin(Fidelity.REFERENCE, "garipovroma/autojudge@8a4beb1 eval/generation_utils.py run_spec_dec_top_k",
                    "lenient top-K: accept iff the draft is among the target's K most likely tokens")

    class Knobs(Spec):
        top: Integer = Field(2, ge=1)  # K: how many of the target's most likely tokens are acceptable

    def decide(self, block: Block) -> Verdict:
        top = self.knobs.top
        if top == 1:
            return greedy_verdict(block)

        def in_top(rows):  # z_d >= the K-th largest logit of its row
            kth = top_values(block.target_logits[rows], top)[:, -1]
            return block.target_logit_of_drafts(rows) >= kth.float()

        return greedy_verdict(block, in_top)
