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
from relaxbench.policies.base import Batch, Fidelity, Judgement, Modes, Origin, VerificationPolicy, register_policy
from relaxbench.policies.greedy import greedy_judgement
from relaxbench.validation import Integer, Spec


@register_policy
class LenientTopK(VerificationPolicy):
    name = "topk"
    modes = Modes(supported={"greedy"}, strict_knobs={"top": 1}, loosening={"top": (1, 2, 3, 5, 48)})
    origin = Origin(Fidelity.REFERENCE, "garipovroma/autojudge@8a4beb1 eval/generation_utils.py run_spec_dec_top_k",
                    "lenient top-K: accept iff the draft is among the target's K most likely tokens")

    class Knobs(Spec):
        top: Integer = Field(2, ge=1)  # K: how many of the target's most likely tokens are acceptable

    def judge(self, batch: Batch) -> Judgement:
        top = self.knobs.top
        if top == 1:
            return greedy_judgement(batch)
        kth = batch.target.of(top_values(batch.target.source, top)[:, -1])[:, :-1]  # [B, K] the K-th largest
        return greedy_judgement(batch, batch.target_logit_of_drafts >= kth.float())
