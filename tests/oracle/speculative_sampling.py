"""Speculative sampling (Leviathan et al. 2211.17192; Chen et al. 2302.01318): lossless under sampling.

Accept x ~ q with probability min(1, p(x)/q(x)); at a rejection sample norm((p − q)+); the bonus comes from p.
Under greedy decoding p and q are one-hot argmaxes, so the rule reduces to exact match; we run exact match there.
The lossless baseline the sampling-mode rules are measured against (``fidelity``: lossless baseline). The rows of
p and q are computed as the walk reaches them (``LazyRows``): a round pays for the rows up to its first rejection.
"""

from __future__ import annotations

from tests.oracle.base import Block, Fidelity, Modes, Need, Origin, Verdict, VerificationPolicy, register_policy
from tests.oracle.strict import lossless_verdict


@register_policy
class SpeculativeSampling(VerificationPolicy):
    name = "speculative-sampling"
    needs = frozenset({Need.DRAFT_PROBS})
    modes = Modes(lossless=True)
    origin = Origin(Fidelity.BASELINE, "arXiv 2211.17192 (Leviathan et al.), 2302.01318 (Chen et al.)",
                    "accept with min(1, p/q), resample from norm((p-q)+); lossless (greedy: exact match)")

    def decide(self, block: Block) -> Verdict:
        return lossless_verdict(block)
