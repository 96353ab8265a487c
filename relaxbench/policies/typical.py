"""Typical acceptance (Medusa, Cai et al., arXiv 2401.10774) as Medusa's default path runs it, and a greedy variant.

``typical`` — as reference: FasterDecoding/Medusa @ e2a5d20, ``medusa/model/utils.py`` ``evaluate_posterior`` with
``sampling='typical'`` and ``fast=True`` (the default there and in ``MedusaModelABC.medusa_generate``), and
``generate_candidates`` for the token that follows the accepted drafts. At temperature 0 it is exact match. Above,
per draft position: ``p = softmax(z / T)`` (the temperature only), ``H = −Σ p·ln(p + 1e-5)`` (Medusa's epsilon), accept
iff ``p(d) > min(ε, δ·exp(−H))`` (strict); the accepted length is the leading run and the next token the argmax of
the raw logits, with no random number. Defaults ε = 0.09, δ = 0.3 (what ``medusa_generate`` passes). Drafts are the
drafter's top-1 path. The line-by-line mapping to the reference and the tests is in docs/conformance.md.

Deviations (why, in docs/conformance.md):

* a chain, not a tree (no choice among tree paths, no padding token);
* float32 from the engine's logits (Medusa: the model's dtype);
* Medusa's ``fast=False`` path is not offered (it raises ``TypeError`` at this commit).

``typical-greedy`` — variant: the paper's rule applied to greedy decoding; not in the authors' code. Accept the argmax
or ``p(d) > min(ε, δ·exp(−H))`` with ``p`` the softmax of the raw logits; next token the argmax; ε = δ = inf is exact
match.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from relaxbench.ops.sampling import probs_rows
from relaxbench.policies.base import Batch, Fidelity, Judgement, Modes, Origin, VerificationPolicy, register_policy
from relaxbench.policies.greedy import argmax_next, greedy_judgement
from relaxbench.policies.verdict import by_mode
from relaxbench.validation import Number, Spec

MEDUSA_LOG_EPSILON = 1e-5  # inside Medusa's entropy: −Σ p·ln(p + 1e-5)
LADDER = {"epsilon": (math.inf, 0.3, 0.09, 0.02, 0.0), "delta": (math.inf, 1.0, 0.3, 0.05, 0.0)}


def medusa_entropy(probs: torch.Tensor) -> torch.Tensor:
    """[N] ``−Σ p·ln(p + 1e-5)`` of each row of ``probs`` [N, V] (Medusa's entropy; float32)."""
    return -torch.add(probs, MEDUSA_LOG_EPSILON).log_().mul_(probs).sum(dim=-1)  # the same products, in place


def medusa_accepts(batch: Batch, probs: torch.Tensor, epsilon: float, delta: float) -> torch.Tensor:
    """[B, K] ``p(d) > min(ε, δ·exp(−H))`` at every draft position, with ``probs`` [T, V] the distributions of the
    target rows of the real draft positions, in float32 as Medusa's tensors compute it."""
    p_d = probs.gather(-1, batch.drafts[batch.pairs].unsqueeze(-1)).squeeze(-1)
    cap = torch.full((), epsilon, dtype=probs.dtype, device=probs.device)  # Medusa's ones_like(H) * ε (no upload)
    floor = torch.minimum(cap, torch.exp(-medusa_entropy(probs)) * delta)  # [T]
    return batch.per_position(p_d > floor, False)


class TypicalKnobs(Spec):
    epsilon: Number = Field(0.09, ge=0)  # Medusa's posterior_threshold (the hard cap of the floor)
    delta: Number = Field(0.3, ge=0)  # Medusa's posterior_alpha (the entropy-scaled factor)


@register_policy
class TypicalAcceptance(VerificationPolicy):
    name = "typical"
    modes = Modes(strict_knobs={"epsilon": math.inf, "delta": math.inf}, lossy={"sampling"}, greedy_is_exact=True,
                  greedy_drafts=True, loosening=LADDER)
    origin = Origin(Fidelity.REFERENCE,
                    "FasterDecoding/Medusa@e2a5d20 medusa/model/utils.py evaluate_posterior (typical, fast=True)",
                    "Medusa typical acceptance (default fast path): p_T(d) > min(epsilon, delta*exp(-H)), next "
                    "token the argmax; temperature 0: exact match",
                    revision=2)  # 2: a plain step's top-p ties keep the higher ids (vLLM, transformers)
    Knobs = TypicalKnobs
    draws = False  # Medusa's typical acceptance draws no random number: it emits the argmax

    def judge(self, batch: Batch) -> Judgement:
        return by_mode(batch, lambda: greedy_judgement(batch), lambda: self.sampled(batch))

    def sampled(self, batch: Batch) -> Judgement:
        """softmax(z / T) (the temperature only), the floor test at every position, the argmax next."""
        # the T rows of the draft positions only (a row's softmax is its own: the same values as batch.tempered's)
        tempered = probs_rows(batch.target_draft_rows, batch.pair_sampling.tempered())
        accept = medusa_accepts(batch, tempered, self.knobs.epsilon, self.knobs.delta)
        return Judgement(accept, accept & ~batch.matches, argmax_next(batch))


@register_policy
class TypicalGreedy(VerificationPolicy):
    name = "typical-greedy"
    modes = Modes(supported={"greedy"}, strict_knobs={"epsilon": math.inf, "delta": math.inf}, loosening=LADDER)
    origin = Origin(Fidelity.VARIANT, "Medusa's rule applied to greedy decoding; not in the authors' code",
                    "Medusa's floor applied to greedy decoding: accept the argmax or p(d) > min(epsilon, "
                    "delta*exp(-H))")
    Knobs = TypicalKnobs

    def judge(self, batch: Batch) -> Judgement:
        eps, delta = self.knobs.epsilon, self.knobs.delta
        if math.isinf(eps) and math.isinf(delta):
            return greedy_judgement(batch)
        probs = torch.softmax(batch.target_draft_rows.float(), dim=-1)
        return greedy_judgement(batch, medusa_accepts(batch, probs, eps, delta))
