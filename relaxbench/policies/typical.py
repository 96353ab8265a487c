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
from dataclasses import dataclass

import torch

from relaxbench.policies.base import Block, Verdict, VerificationPolicy, greedy_scan, register_policy
from relaxbench.policies.rejection import rejection_sample


def safe_log(probs: torch.Tensor) -> torch.Tensor:
    """log p with zeros mapped to a finite value, so 0·log 0 = 0 (5x faster than ``xlogy`` on CPU)."""
    return probs.clamp_min(torch.finfo(probs.dtype).tiny).log()


def typical_floor(entropy: torch.Tensor, epsilon: float, delta: float) -> torch.Tensor:
    """Medusa's acceptance floor ``min(ε, δ·exp(−H))`` for entropies ``H``."""
    return torch.clamp(delta * torch.exp(-entropy), max=epsilon)


def typical_threshold(probs: torch.Tensor, epsilon: float, delta: float) -> torch.Tensor:
    """[n] Medusa's acceptance floor for each row of ``probs`` [n, V]."""
    return typical_floor(-(probs * safe_log(probs)).sum(dim=-1), epsilon, delta)


def typical_accept_greedy(block: Block, j: int, epsilon: float, delta: float) -> bool:
    """``p(d) > min(ε, δ·exp(−H(p)))`` at draft position ``j`` of the raw target softmax, without materialising p:
    with ``s = z − max z``, ``S = Σ e^s``, ``T = Σ e^s·s`` (``softmax_sums``): ``H = ln S − T / S`` and
    ``p(d) = e^{s_d} / S``."""
    rows = block.greedy_rows
    row_max = rows.max_at(j)
    total, weighted = rows.softmax_sums_at(j)
    entropy = math.log(total) - weighted / total
    p_d = math.exp(rows.draft_logit_at(j) - row_max) / total
    return p_d > min(epsilon, delta * math.exp(-entropy))


@register_policy
class TypicalAcceptance(VerificationPolicy):
    name = "typical"
    strict_knobs = {"epsilon": math.inf, "delta": math.inf}
    summary = "Medusa typical acceptance: accept iff p(d) > min(epsilon, delta*exp(-H(p)))"

    @dataclass(frozen=True)
    class Knobs:
        epsilon: float = 0.09  # Medusa's posterior_threshold
        delta: float = 0.3  # Medusa's posterior_alpha

        def __post_init__(self) -> None:
            if not (self.epsilon >= 0 and self.delta >= 0):
                raise ValueError("epsilon and delta must be >= 0")

    def decide(self, block: Block) -> Verdict:
        eps, delta = self.knobs.epsilon, self.knobs.delta
        if block.greedy:
            if math.isinf(eps) and math.isinf(delta):
                return greedy_scan(block)
            return greedy_scan(block, lambda j: typical_accept_greedy(block, j, eps, delta))
        p = block.target_probs
        floor = typical_threshold(p, eps, delta)  # [k+1]
        p_d = p[:-1].gather(-1, block.draft_tokens.unsqueeze(-1)).squeeze(-1)
        accept = (p_d > floor[:-1]).to(p.dtype)  # acceptance probability 1 or 0

        def typical_set(n: int) -> torch.Tensor:  # never empty: the top token always stays
            keep = p[n] >= torch.minimum(floor[n], p[n].max())
            return torch.where(keep, p[n], torch.zeros_like(p[n]))

        return rejection_sample(block.draft_tokens, None, accept, typical_set, typical_set(block.k),
                                block.generator, strict_p=p_d)
