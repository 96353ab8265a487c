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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from relaxbench.decoding.sampling import softmax_sums, top_values
from relaxbench.policies.base import (
    Block,
    Verdict,
    VerificationPolicy,
    greedy_scan,
    register_policy,
    relax_mismatches,
)
from relaxbench.policies.rejection import rejection_sample


def top3_entropy(logits: torch.Tensor, top: torch.Tensor | None = None,
                 row_max: torch.Tensor | None = None) -> torch.Tensor:
    """FLy's entropy of each row of raw ``logits`` [n, V]: over the 3 largest probabilities of the full softmax.
    ``top`` ([n, 3], the rows' three largest logits) and ``row_max`` ([n]) may be passed when already known."""
    logits = logits.float()
    top = top_values(logits, 3) if top is None else top
    row_max = top[:, 0] if row_max is None else row_max
    total, _ = softmax_sums(logits, row_max.contiguous())
    log_p = top - (row_max + total.log()).unsqueeze(-1)  # log-normaliser = max + ln Σ e^(z − max)
    return -(log_p.exp() * log_p).sum(dim=-1)


def block_top3_entropy(block: Block) -> Callable[[torch.Tensor], torch.Tensor]:
    """rows -> FLy's entropy of the target at ``rows``, reading the round's shared row reductions."""
    return lambda rows: top3_entropy(block.target_rows(rows), block.target_top_values(3).index_select(0, rows),
                                     block.target_max.index_select(0, rows))


def row_top3_entropy(block: Block, j: int) -> float:
    """``top3_entropy`` of the target row at draft position ``j``, from the round's scan (Python numbers)."""
    rows = block.greedy_rows
    total, _ = rows.softmax_sums_at(j)
    log_normaliser = rows.max_at(j) + math.log(total)
    log_p = [z - log_normaliser for z in rows.top_values_at(j, 3) if z != -math.inf]  # 0·log 0 = 0
    return -sum(math.exp(lp) * lp for lp in log_p)


def fly_relax_greedy(block: Block, theta: float, window: int) -> Callable[[int], bool]:
    """j -> FLy's relaxation of the mismatch at draft position ``j``, for ``greedy_scan``: a window candidate
    (the next ``window − 1`` drafts match and ``j + window < k``) whose top-3 entropy is ``>= theta`` —
    ``fly_accept``'s rule, reading the target rows only through the window."""
    rows = block.greedy_rows

    def relax(j: int) -> bool:
        candidate = j + window < block.k and rows.first_mismatch(j + 1) >= j + window
        if not candidate or theta <= 0:
            return candidate
        return row_top3_entropy(block, j) >= theta

    return relax


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


def fly_accept(matches: torch.Tensor, entropy: Callable[[torch.Tensor], torch.Tensor], theta: float,
               window: int) -> torch.Tensor:
    """acc = m or (window candidate and H ≥ θ), ``entropy(rows)`` giving H at ``rows``. The entropy is computed
    only where it can change the verdict: at candidates up to the first rejected position (H ≥ 0, so θ ≤ 0 never
    needs it)."""
    candidates = window_candidates(matches, window)
    if math.isinf(theta) and theta > 0 or not bool(candidates.any()):
        return matches

    def relax(rows: torch.Tensor) -> torch.Tensor:
        passed = candidates[rows]
        if theta > 0 and bool(passed.any()):
            passed[passed.clone()] = entropy(rows[passed]) >= theta
        return passed

    return relax_mismatches(matches, relax)


@register_policy
class FLy(VerificationPolicy):
    name = "fly"
    greedy_drafts = True
    strict_knobs = {"theta": math.inf}
    summary = "FLy: accept a mismatch followed by W-1 matches if the target's top-3 entropy >= theta"

    @dataclass(frozen=True)
    class Knobs:
        theta: float = 0.3  # entropy gate θ (nats); inf = exact match
        window: int = 6  # W: the mismatch plus W − 1 following matches

        def __post_init__(self) -> None:
            if self.window < 1:
                raise ValueError("window must be >= 1")
            if math.isnan(self.theta):
                raise ValueError("theta must be a number")

    def decide(self, block: Block) -> Verdict:
        theta, window = self.knobs.theta, self.knobs.window
        if block.greedy:
            if math.isinf(theta) and theta > 0:
                return greedy_scan(block)
            return greedy_scan(block, fly_relax_greedy(block, theta, window))
        entropy = block_top3_entropy(block)
        p = block.target_probs
        p_d = p[:-1].gather(-1, block.draft_tokens.unsqueeze(-1)).squeeze(-1)
        two_sample_hit = 1 - (1 - p_d) ** 2
        return rejection_sample(
            block.draft_tokens, None, two_sample_hit, p[:-1], p[-1], block.generator, strict_p=p_d,
            relax=lambda m: fly_accept(m, entropy, theta, window),
        )
