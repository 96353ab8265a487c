"""Greedy exact match: accept d_i iff it is the target's argmax. Lossless under greedy decoding."""

from __future__ import annotations

from relaxbench.policies.base import Block, Fidelity, Verdict, VerificationPolicy, register_policy
from relaxbench.policies.greedy import greedy_verdict


@register_policy
class ExactMatch(VerificationPolicy):
    name = "exact"
    modes = frozenset({"greedy"})
    lossless = True
    fidelity = Fidelity.BASELINE
    reference = "exact match (standard)"
    summary = "greedy exact match: accept d_i iff d_i = argmax p_i (lossless)"

    def decide(self, block: Block) -> Verdict:
        return greedy_verdict(block)
