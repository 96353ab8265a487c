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
* the entropy is skipped where ``p(d) > ε`` (the floor never exceeds ε; no verdict changes);
* Medusa's ``fast=False`` path is not offered (it raises ``TypeError`` at this commit).

``typical-greedy`` — variant: the paper's rule applied to greedy decoding; not in the authors' code. Accept the argmax
or ``p(d) > min(ε, δ·exp(−H))`` with ``p`` the softmax of the raw logits; next token the argmax; ε = δ = inf is exact
match.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from relaxbench.ops.reductions import argmax
from tests.oracle.base import Block, Fidelity, Modes, Origin, Verdict, VerificationPolicy, register_policy
from tests.oracle.greedy import greedy_verdict
from relaxbench.validation import Number, Spec

MEDUSA_LOG_EPSILON = 1e-5  # inside Medusa's entropy: −Σ p·ln(p + 1e-5)


def medusa_entropy(probs: torch.Tensor) -> torch.Tensor:
    """0-d ``−Σ p·ln(p + 1e-5)`` of one distribution ``probs`` [V] (Medusa's entropy; float32)."""
    return -(probs * torch.add(probs, MEDUSA_LOG_EPSILON).log_()).sum(dim=-1)


def medusa_accepts(probs: torch.Tensor, token: int, epsilon: float, delta: float) -> bool:
    """``p(d) > min(ε, δ·exp(−H))`` on one row ``probs`` [V], as Medusa's float32 tensors compute it; the entropy
    only when ``p(d) ≤ ε`` (the floor never exceeds ε)."""
    p_d = probs[token]
    cap = torch.tensor(epsilon, dtype=probs.dtype, device=probs.device)  # Medusa's ones_like(H) * ε
    if bool(p_d > cap):
        return True
    floor = torch.minimum(cap, torch.exp(-medusa_entropy(probs)) * delta)
    return bool(p_d > floor)


class TypicalKnobs(Spec):
    epsilon: Number = Field(0.09, ge=0)  # Medusa's posterior_threshold (the hard cap of the floor)
    delta: Number = Field(0.3, ge=0)  # Medusa's posterior_alpha (the entropy-scaled factor)


@register_policy
class TypicalAcceptance(VerificationPolicy):
    name = "typical"
    modes = Modes(strict_knobs={"epsilon": math.inf, "delta": math.inf}, lossy={"sampling"}, greedy_is_exact=True,
                  greedy_drafts=True)
    origin = Origin(Fidelity.REFERENCE,
                    "FasterDecoding/Medusa@e2a5d20 medusa/model/utils.py evaluate_posterior (typical, fast=True)",
                    "Medusa typical acceptance (default fast path): p_T(d) > min(epsilon, delta*exp(-H)), next "
                    "token the argmax; temperature 0: exact match",
                    revision=1)
    Knobs = TypicalKnobs

    def decide(self, block: Block) -> Verdict:
        if block.greedy:
            return greedy_verdict(block)
        eps, delta = self.knobs.epsilon, self.knobs.delta
        tokens = block.draft_tokens.tolist()
        rows = block.tempered_rows  # softmax(z / T), row by row up to the first rejection
        n = next((i for i in range(block.k) if not medusa_accepts(rows[i], tokens[i], eps, delta)), block.k)
        n_relaxed = int((block.draft_tokens[:n] != argmax(block.target_logits[:n])).sum()) if n else 0
        return Verdict(n, int(argmax(block.target_logits[n])), n_relaxed)


@register_policy
class TypicalGreedy(VerificationPolicy):
    name = "typical-greedy"
    modes = Modes(supported={"greedy"}, strict_knobs={"epsilon": math.inf, "delta": math.inf})
    origin = Origin(Fidelity.VARIANT, "Medusa's rule applied to greedy decoding; not in the authors' code",
                    "Medusa's floor applied to greedy decoding: accept the argmax or p(d) > min(epsilon, "
                    "delta*exp(-H))")
    Knobs = TypicalKnobs

    def decide(self, block: Block) -> Verdict:
        eps, delta = self.knobs.epsilon, self.knobs.delta
        if math.isinf(eps) and math.isinf(delta):
            return greedy_verdict(block)

        def relax(rows: torch.Tensor) -> torch.Tensor:  # up to the first mismatch the floor rejects
            accept = torch.zeros_like(rows, dtype=torch.bool)
            for j, (row, token) in enumerate(zip(rows.tolist(), block.draft_tokens[rows].tolist(), strict=True)):
                if not medusa_accepts(torch.softmax(block.target_logits[row].float(), dim=-1), token, eps, delta):
                    break
                accept[j] = True
            return accept

        return greedy_verdict(block, relax)
