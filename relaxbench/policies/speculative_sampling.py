"""Speculative sampling (Leviathan et al. 2211.17192; Chen et al. 2302.01318): lossless under sampling.

Accept x ~ q with probability min(1, p(x)/q(x)); at a rejection sample norm((p − q)+); the bonus comes from p.
Under greedy decoding p and q are one-hot argmaxes, so the rule reduces to exact match; we run exact match there.
"""

from __future__ import annotations

from relaxbench.ops.rejection import rejection_sample
from relaxbench.policies.base import Block, Need, Verdict, VerificationPolicy, register_policy
from relaxbench.policies.greedy import greedy_verdict


@register_policy
class SpeculativeSampling(VerificationPolicy):
    name = "speculative-sampling"
    needs = frozenset({Need.DRAFT_PROBS})
    lossless = True
    summary = "accept with min(1, p/q), resample from norm((p-q)+); lossless (greedy: exact match)"

    def decide(self, block: Block) -> Verdict:
        if block.greedy:
            return greedy_verdict(block)
        p = block.target_probs
        return rejection_sample(block.draft_tokens, block.draft_probs, p[:-1], p[:-1], p[-1], block.generator)
