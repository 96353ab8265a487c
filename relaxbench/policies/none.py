"""The autoregressive baseline as a policy name: the loop runs with no drafter, so every round is k = 0."""

from __future__ import annotations

from relaxbench.policies.base import Batch, Fidelity, Judgement, Modes, Origin, VerificationPolicy, register_policy


@register_policy
class Autoregressive(VerificationPolicy):
    name = "none"
    modes = Modes(lossless=True)
    origin = Origin(Fidelity.BASELINE, "autoregressive decoding",
                    "autoregressive baseline: no drafts, one target forward per token",
                    revision=1)  # top-p ties keep the higher ids (vLLM, transformers)

    def judge(self, batch: Batch) -> Judgement:
        raise AssertionError("the autoregressive baseline never receives drafts")
