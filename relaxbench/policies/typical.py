"""Typical acceptance (Medusa, arXiv 2401.10774; code FasterDecoding/Medusa ``medusa/model/utils.py``:
``evaluate_posterior`` with ``sampling='typical'`` and ``get_typical_one_token``).

Rule, per draft position: accept ``d_i`` iff ``p_i(d_i) > min(ε, δ·exp(−H(p_i)))`` with ``H`` the full entropy of
``p_i`` (natural log) — a draft is kept when it is "typical enough" for the target: an absolute floor ``ε`` in a
flat distribution, a floor relative to ``exp(−H)`` in a peaked one. Defaults ε = 0.09 (``posterior_threshold``),
δ = 0.3 (``posterior_alpha``). Medusa computes ``H`` with ``log(p + 1e-5)``; we use the exact entropy.

* Greedy: ``p`` is the softmax of the raw logits (temperature 1). A draft equal to the target's argmax is always
  accepted, so the rule is a relaxation of exact match (Medusa's own greedy mode is plain exact match); the
  correction token is the argmax. ``ε = δ = inf`` gives exactly ``exact``.
* Sampling: as Medusa — the test runs on the run's processed ``p`` with no randomness of its own; after a
  rejection, and for the bonus token, the next token is sampled from ``p`` restricted to its typical set
  ``{v: p(v) ≥ min(ε, δ·exp(−H))}`` (Medusa's ``get_typical_one_token``), which excludes the rejected draft. It
  goes through the shared rejection sampler with point-mass drafts; ``n_relaxed`` counts acceptances that the
  one-sample lossless test ``u < p(d)`` would have rejected. Lossy at every setting.

Loosening: smaller ``ε`` or smaller ``δ`` (a lower threshold).
"""

from __future__ import annotations

import math

import torch
from pydantic import model_validator

from relaxbench.ops.rejection import rejection_sample
from relaxbench.policies.base import Block, Verdict, VerificationPolicy, register_policy
from relaxbench.policies.greedy import greedy_verdict
from relaxbench.validation import Number, Spec


def safe_log(probs: torch.Tensor) -> torch.Tensor:
    """log p with zeros mapped to a finite value, so 0·log 0 = 0 (cheaper than ``xlogy`` on CPU)."""
    return probs.clamp_min(torch.finfo(probs.dtype).tiny).log()


def typical_floor(entropy: torch.Tensor, epsilon: float, delta: float) -> torch.Tensor:
    """Medusa's acceptance floor ``min(ε, δ·exp(−H))`` for entropies ``H``."""
    return torch.clamp(delta * torch.exp(-entropy), max=epsilon)


def typical_threshold(probs: torch.Tensor, epsilon: float, delta: float) -> torch.Tensor:
    """[n] Medusa's acceptance floor for each row of ``probs`` [n, V]."""
    return typical_floor(-(probs * safe_log(probs)).sum(dim=-1), epsilon, delta)


def typical_accepts_greedy(block: Block, rows: torch.Tensor, epsilon: float, delta: float) -> torch.Tensor:
    """[m] ``p(d) > min(ε, δ·exp(−H(p)))`` at draft positions ``rows`` of the raw target softmax, without
    materialising p: with ``s = z − max z``, ``S = Σ e^s`` and ``T = Σ e^s·s``, ``H = ln S − T / S`` and
    ``p(d) = e^{s_d} / S``. ``s`` is floored at −200, where ``e^s`` is already 0 in float32, so a −inf logit adds
    0 to ``T`` (not 0·(−inf))."""
    logits = block.target_logits[rows].float()
    row_max = logits.amax(dim=-1)
    shifted = (logits - row_max.unsqueeze(-1)).clamp_min_(-200.0)
    weights = shifted.exp()
    total = weights.sum(dim=-1).double()
    weighted = (weights * shifted).sum(dim=-1).double()
    entropy = total.log() - weighted / total
    p_d = (block.target_logit_of_drafts(rows).double() - row_max.double()).exp() / total
    return p_d > typical_floor(entropy, epsilon, delta)


@register_policy
class TypicalAcceptance(VerificationPolicy):
    name = "typical"
    strict_knobs = {"epsilon": math.inf, "delta": math.inf}
    summary = "Medusa typical acceptance: accept iff p(d) > min(epsilon, delta*exp(-H(p)))"

    class Knobs(Spec):
        epsilon: Number = 0.09  # Medusa's posterior_threshold
        delta: Number = 0.3  # Medusa's posterior_alpha

        @model_validator(mode="after")
        def _check(self):
            if not (self.epsilon >= 0 and self.delta >= 0):
                raise ValueError("epsilon and delta must be >= 0")
            return self

    def decide(self, block: Block) -> Verdict:
        eps, delta = self.knobs.epsilon, self.knobs.delta
        if block.greedy:
            if math.isinf(eps) and math.isinf(delta):
                return greedy_verdict(block)
            return greedy_verdict(block, lambda rows: typical_accepts_greedy(block, rows, eps, delta))
        p = block.target_probs
        floor = typical_threshold(p, eps, delta)  # [k+1]
        p_d = p[:-1].gather(-1, block.draft_tokens.unsqueeze(-1)).squeeze(-1)
        accept = (p_d > floor[:-1]).to(p.dtype)  # acceptance probability 1 or 0

        def typical_set(n: int) -> torch.Tensor:  # never empty: the top token always stays
            keep = p[n] >= torch.minimum(floor[n], p[n].max())
            return torch.where(keep, p[n], torch.zeros_like(p[n]))

        return rejection_sample(block.draft_tokens, None, accept, typical_set, typical_set(block.k),
                                block.generator, strict_p=p_d)
