"""Speculative sampling (Leviathan et al. 2211.17192; Chen et al. 2302.01318): lossless under sampling.

Accept x ~ q with probability min(1, p(x)/q(x)); at a rejection sample norm((p − q)+); the bonus comes from p.
Under greedy decoding p and q are one-hot argmaxes, so the rule reduces to exact match; we run exact match there.
The lossless baseline the sampling-mode rules are measured against (``fidelity``: lossless baseline).
"""

from __future__ import annotations

from relaxbench.policies.base import (Batch, Fidelity, Judgement, Modes, Need, Origin, VerificationPolicy,
                                      register_policy)
from relaxbench.policies.strict import lossless_judgement


@register_policy
class SpeculativeSampling(VerificationPolicy):
    name = "speculative-sampling"
    needs = frozenset({Need.DRAFT_PROBS})
    modes = Modes(lossless=True)
    origin = Origin(Fidelity.BASELINE, "arXiv 2211.17192 (Leviathan et al.), 2302.01318 (Chen et al.)",
                    "accept with min(1, p/q), resample from norm((p-q)+); lossless (greedy: exact match)",
                    revision=1)  # top-p ties keep the higher ids (vLLM, transformers)

    def judge(self, batch: Batch) -> Judgement:
        return lossless_judgement(batch)
