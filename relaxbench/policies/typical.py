"""Typical acceptance (Medusa, Cai et al., arXiv 2401.10774) as Medusa's default path runs it, and a greedy variant.

Reference: FasterDecoding/Medusa @ e2a5d20, ``medusa/model/utils.py`` (last changed in 2b89814):
``evaluate_posterior`` (L436–529) with ``sampling='typical'`` and ``fast=True`` — the default there and in
``MedusaModelABC.medusa_generate`` (``medusa/model/medusa_model.py`` L249) — and ``generate_candidates``
(L258–307), which picks the token that follows the accepted drafts.

``typical`` (as reference), for a chain of k drafts, line by line:

* temperature 0 (``evaluate_posterior`` L458–472): exact match, ``d_i == argmax z_i`` on the raw logits; the next
  token is the argmax (L280–281). So the greedy mode is ``exact``.
* temperature T > 0, the fast path, per draft position i in order:
  - ``p_i = softmax(z_i / T)`` over the full vocabulary (L476): the temperature only — Medusa's test applies no
    top-k or top-p, so the run's top-k/top-p do not enter the rule;
  - ``H_i = −Σ_v p_i(v)·ln(p_i(v) + 1e-5)`` (L480–482): the 1e-5 inside the log is Medusa's. It makes ``H`` smaller
    than the entropy by up to about V·1e-5 nats, so the floor below is higher (stricter) than with the exact entropy;
  - accept iff ``p_i(d_i) > min(ε, δ·exp(−H_i))`` (L483–487; a strict >); the accepted length is the leading run of
    acceptances (L488, the cumulative product);
  - the next token is the argmax of the target's raw logits at the first rejected position, or at the bonus
    position when all k drafts are accepted: ``update_inference_inputs`` keeps that row (L586) and
    ``generate_candidates`` takes its argmax when ``fast`` is set (L280–281). No random number is drawn.
  Defaults ε = 0.09 (``posterior_threshold``) and δ = 0.3 (``posterior_alpha``): the values ``medusa_generate``
  passes (``medusa_model.py`` L244–246, L316–342); the signature defaults in ``utils.py`` (0.3 and 0.09) apply only
  to direct calls.
* Drafts: Medusa's candidates are the top-k tree of its heads; a chain's analogue is the drafter's top-1 path, so the
  policy asks the engine for greedy drafts (``greedy_drafts``) and never reads the draft distribution.
* ``n_relaxed`` counts the accepted drafts that are not the target's argmax: the ones Medusa's own temperature-0 rule
  would have rejected (every other token this rule emits is an argmax).

Deviations, deliberate: a chain, not a tree (Medusa's choice among tree paths — the longest, ties by the largest
``Σ log p`` of the accepted tokens, L494–501 — and its padding token 0, L298–303, have no counterpart); float32
from the logits the engine hands over (Medusa computes in the model's dtype, often fp16); the shortcut below, which
changes no verdict. Medusa's other typical path (``fast=False``: sample from the typical set and match,
``get_typical_posterior_mask`` L404–432) is not offered: at this commit it raises ``TypeError`` (L504 passes six
arguments to a five-parameter function, since 0ac14da).

``typical-greedy`` (variant): the paper's rule applied to greedy decoding; not in the authors' code (Medusa's greedy
mode is exact match). Accept ``d_i`` iff it is the target's argmax or ``p_i(d_i) > min(ε, δ·exp(−H_i))``, with ``p_i``
the softmax of the raw logits (temperature 1) and ``H_i`` Medusa's entropy as above; the next token is the argmax.
ε = δ = inf is exactly ``exact``.

Cost: the floor is at most ε, so a draft with ``p(d) > ε`` (compared in float32, as Medusa's threshold tensor holds
ε) is accepted without the entropy; the entropy (one log pass over the vocabulary) is computed only for the other
positions, and only up to the first rejection. Loosening: smaller ε or smaller δ.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from relaxbench.ops.reductions import argmax
from relaxbench.policies.base import Block, Fidelity, Modes, Origin, Verdict, VerificationPolicy, register_policy
from relaxbench.policies.greedy import greedy_verdict
from relaxbench.validation import Number, Spec

MEDUSA_LOG_EPSILON = 1e-5  # inside Medusa's entropy: −Σ p·ln(p + 1e-5)


def medusa_entropy(probs: torch.Tensor) -> torch.Tensor:
    """0-d ``−Σ p·ln(p + 1e-5)`` of one distribution ``probs`` [V] (Medusa's entropy; float32)."""
    return -torch.dot(probs, torch.add(probs, MEDUSA_LOG_EPSILON).log_())


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
