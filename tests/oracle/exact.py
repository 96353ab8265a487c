"""Greedy exact match: accept d_i iff it is the target's argmax. Lossless under greedy decoding."""

from __future__ import annotations

from tests.oracle.base import Block, Fidelity, Modes, Origin, Verdict, VerificationPolicy, register_policy
from tests.oracle.greedy import greedy_verdict


@register_policy
class ExactMatch(VerificationPolicy):
    name = "exact"
    modes = Modes(supported={"greedy"}, lossless=True)
    origin = Origin(Fidelity.BASELINE, "exact match (standard)",
                    "greedy exact match: accept d_i iff d_i = argmax p_i (lossless)")

    def decide(self, block: Block) -> Verdict:
        return greedy_verdict(block)
