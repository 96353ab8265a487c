"""The autoregressive baseline as a policy name: the loop runs with no drafter, so every round is k = 0."""

from __future__ import annotations

from relaxbench.policies.base import Block, Fidelity, Verdict, VerificationPolicy, register_policy


@register_policy
class Autoregressive(VerificationPolicy):
    name = "none"
    lossless = True
    fidelity = Fidelity.BASELINE
    reference = "autoregressive decoding"
    summary = "autoregressive baseline: no drafts, one target forward per token"

    def decide(self, block: Block) -> Verdict:
        raise AssertionError("the autoregressive baseline never receives drafts")
