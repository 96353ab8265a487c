"""Greedy exact match: accept d_i iff it is the target's argmax. Lossless under greedy decoding."""

from __future__ import annotations

from relaxbench.policies.base import Batch, Fidelity, Judgement, Modes, Origin, VerificationPolicy, register_policy
from relaxbench.policies.greedy import greedy_judgement


@register_policy
class ExactMatch(VerificationPolicy):
    name = "exact"
    modes = Modes(supported={"greedy"}, lossless=True)
    origin = Origin(Fidelity.BASELINE, "exact match (standard)",
                    "greedy exact match: accept d_i iff d_i = argmax p_i (lossless)")

    def judge(self, batch: Batch) -> Judgement:
        return greedy_judgement(batch)
