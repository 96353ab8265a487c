"""Lenient top-K: accept ``d_i`` iff it is among the target's K most likely tokens.

Reference: garipovroma/autojudge @ 8a4beb1, ``eval/generation_utils.py`` ``run_spec_dec_top_k``: accept a draft that
matches the target's argmax or is among its top K, take the leading run, replace the first rejected draft by the
target's argmax; greedy drafts, greedy only (sampling is a configuration error). The knob is ``top`` (K; named so as
not to clash with the draft length ``k``); ``K = 1`` is exact match. The mapping to the reference and the tests is in
docs/conformance.md.

Deviations (why, in docs/conformance.md):

* membership by value: a tie with the K-th largest logit counts as in (the reference: ``torch.topk``'s indices);
* the bonus token is emitted when all k drafts are accepted (the reference's window does not append it).
"""

from __future__ import annotations

from pydantic import Field

from relaxbench.ops.reductions import top_values
from tests.oracle.base import Block, Fidelity, Modes, Origin, Verdict, VerificationPolicy, register_policy
from tests.oracle.greedy import greedy_verdict
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
