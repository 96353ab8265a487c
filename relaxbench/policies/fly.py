"""FLy (arXiv 2511.22972, ICLR 2026): entropy-gated, window-deferred acceptance of draft mismatches.

Source: AMD-AGI/FLy, ``fly/models/FLy.py`` — ``SPDGenerate.generate_chunks`` (chain mode), ``rej_by_entropy`` and
``calculate_topk_entropy``; defaults from ``FLy_Llama3_70b.json`` (``spd_k=15, win_len=6, entropy_thre=0.3``).

Rule, per draft position ``i`` (0-based) of a block of ``k`` drafts:

* ``m_i``: the draft matches the target (greedy: ``d_i = argmax p_i``).
* ``H_i = −Σ_{top-3 j} p_ij ln p_ij`` over the three largest probabilities of the *full* softmax of the raw target
  logits (not renormalised; natural log; at most ln 3 ≈ 1.10). The authors take it from the raw logits in both
  modes, so it ignores temperature, top-k and top-p.
* ``win_i = not m_i and m_{i+1} .. m_{i+W−1} all true and i + W < k`` — the pattern [F, T×(W−1)]. A second
  mismatch inside the window rejects the first one; the window never reaches past the block, so mismatches in the
  last ``W`` positions are judged strictly.
* ``acc_i = m_i or (win_i and H_i ≥ θ)``: a mismatch at a near-deterministic position (``H_i < θ``) is always
  rejected; ``H_i == θ`` passes. The accepted length is the leading run of ``acc``; the next token is the target's
  argmax at the first rejected position (a bonus token when all ``k`` are accepted).

``θ = inf`` rejects every mismatch, so the rule is exactly ``exact``; ``θ ≤ 0`` switches the gate off (the authors'
code also switches it off for ``θ ≤ 0.01``; here ``0 < θ ≤ 0.01`` is an ordinary, very loose gate). Loosening:
smaller ``θ`` or smaller ``W``.

Sampling (as the authors' HF code, and lossy even before the window): drafts are greedy (the policy asks the
engine for them); the target "draws two samples" per position and ``m_i = d_i ∈ {s1, s2}``; the correction token
is ``s1``. We draw this in closed form through the shared rejection sampler with point-mass drafts: ``m_i`` is
``u_i < 1 − (1 − p_i(d_i))²`` (the probability that one of two independent samples hits ``d_i``), and after a
rejection ``s1`` follows ``p`` with ``d_i`` removed — the same joint distribution as two Gumbel-max samples. The
bonus token is one sample from ``p_k``. ``p`` is the run's processed distribution (temperature, top-k, top-p);
the authors apply temperature only. ``n_relaxed`` counts acceptances the one-sample test ``u_i < p_i(d_i)`` (strict
speculative sampling of a greedy draft) would have rejected, with the same uniforms.

Both modes share one relaxation (``fly_relaxation``), computed over the block at once; the entropy is computed only
at window candidates before the first mismatch that is not one (no later position can change the verdict), with
the normaliser summed in double.
"""

from __future__ import annotations

import math

import torch
from pydantic import model_validator

from relaxbench.ops.reductions import top_values
from relaxbench.ops.rejection import rejection_sample
from relaxbench.policies.base import Block, Verdict, VerificationPolicy, register_policy
from relaxbench.policies.greedy import RelaxRows, accept_relaxed, greedy_verdict
from relaxbench.validation import Integer, Number, Spec


def top3_entropy(logits: torch.Tensor) -> torch.Tensor:
    """[n] float64: FLy's entropy of each row of raw ``logits`` [n, V], over the 3 largest probabilities of the
    full softmax (not renormalised; 0·log 0 = 0)."""
    logits = logits.float()
    top = top_values(logits, 3)
    row_max = top[:, 0]
    total = (logits - row_max.unsqueeze(-1)).exp().sum(dim=-1, dtype=torch.float64)
    log_p = top.double() - (row_max.double() + total.log()).unsqueeze(-1)  # log-normaliser = max + ln Σ e^(z − max)
    p = log_p.exp()
    return -torch.where(p > 0, p * log_p, 0.0).sum(dim=-1)


def window_candidates(matches: torch.Tensor, window: int) -> torch.Tensor:
    """[k] bool: mismatches followed by ``window − 1`` matches, with ``i + window < k`` (FLy's deferred window)."""
    k = int(matches.shape[0])
    out = torch.zeros_like(matches)
    if k <= window:  # no position satisfies i + W < k
        return out
    spans = matches.unfold(0, window, 1)  # [k − W + 1, W]: spans[i] = m_i .. m_{i+W−1}
    pattern = ~spans[:, 0] & spans[:, 1:].all(dim=1)
    out[: k - window] = pattern[: k - window]
    return out


def fly_relaxation(matches: torch.Tensor, logits: torch.Tensor, theta: float, window: int) -> RelaxRows:
    """rows -> FLy's relaxation of the mismatches at ``rows``: a window candidate whose top-3 entropy (of the
    target's raw ``logits`` [k+1, V]) is ``>= θ``; ``θ ≤ 0`` switches the gate off (H ≥ 0)."""
    candidates = window_candidates(matches, window)

    def relax(rows: torch.Tensor) -> torch.Tensor:
        reachable = candidates[rows].cumprod(dim=0).bool()  # candidates before the first mismatch that is not one
        if theta <= 0 or not bool(reachable.any()):
            return reachable
        accept = reachable.clone()
        accept[reachable] = top3_entropy(logits[rows[reachable]]) >= theta
        return accept

    return relax


@register_policy
class FLy(VerificationPolicy):
    name = "fly"
    greedy_drafts = True
    strict_knobs = {"theta": math.inf}
    summary = "FLy: accept a mismatch followed by W-1 matches if the target's top-3 entropy >= theta"

    class Knobs(Spec):
        theta: Number = 0.3  # entropy gate θ (nats); inf = exact match
        window: Integer = 6  # W: the mismatch plus W − 1 following matches

        @model_validator(mode="after")
        def _check(self):
            if self.window < 1:
                raise ValueError("window must be >= 1")
            if math.isnan(self.theta):
                raise ValueError("theta must be a number")
            return self

    def decide(self, block: Block) -> Verdict:
        theta, window = self.knobs.theta, self.knobs.window
        strict = math.isinf(theta) and theta > 0
        if block.greedy:
            if strict:
                return greedy_verdict(block)
            return greedy_verdict(block, fly_relaxation(block.matches, block.target_logits, theta, window))
        p = block.target_probs
        p_d = p[:-1].gather(-1, block.draft_tokens.unsqueeze(-1)).squeeze(-1)
        two_sample_hit = 1 - (1 - p_d) ** 2

        def relax(hits: torch.Tensor) -> torch.Tensor:
            return accept_relaxed(hits, fly_relaxation(hits, block.target_logits, theta, window))

        return rejection_sample(block.draft_tokens, None, two_sample_hit, p[:-1], p[-1], block.generator,
                                strict_p=p_d, relax=None if strict else relax)
