"""FLy (arXiv 2511.22972, ICLR 2026): entropy-gated, window-deferred acceptance of draft mismatches.

Reference: AMD-AGI/FLy @ 6667ae8, ``fly/models/FLy.py`` (last changed in 39ed6f8) — chain mode:
``SPDGenerate.generate_chunks`` (L867–), ``_batch_verification`` (L129–146), ``rej_by_entropy`` (L403–411),
``calculate_topk_entropy`` (L358–371), the gate switch in ``__init__`` (L82–83); defaults from
``fly_config/FLy_Llama3_70b.json`` (``spd_k=15, win_len=6, entropy_thre=0.3``).

Rule, per draft position ``i`` (0-based) of a block of ``k`` drafts:

* ``m_i``: the draft matches the target (greedy: ``d_i = argmax z_i``, L136).
* ``H_i = −Σ_{top-3 j} p_ij ln p_ij`` over the three largest probabilities of the *full* softmax of the raw target
  logits (L358–371: not renormalised; natural log; at most ln 3 ≈ 1.10). The authors take it from the raw logits in
  both modes, so it ignores temperature, top-k and top-p. A row with fewer than 3 finite logits has a −inf among its
  top-3 log-probabilities, and ``exp(−inf)·(−inf)`` is NaN: ``H_i`` is NaN there, as in the reference.
* ``win_i = not m_i and m_{i+1} .. m_{i+W−1} all true and i + W < k`` — the pattern [F, T×(W−1)] matched on the
  original matches (L1097–1115). A second mismatch inside the window rejects the first one; the window never reaches
  past the block, so mismatches in the last ``W`` positions are judged strictly; forgiveness does not cascade.
* ``acc_i = m_i or (win_i and not H_i < θ)`` (L1094–1095, L1121–1122: a window-forgiven mismatch is revoked iff
  ``H_i < θ``, strict): ``H_i == θ`` passes, and a NaN entropy never revokes. The accepted length is the leading run
  of ``acc``; the next token is the target's argmax at the first rejected position (a bonus token when all ``k``
  are accepted).

The gate is on iff ``θ > 0.01`` (L82–83 keep ``entropy_thre`` only above 1e-2; every later use is a truthiness
test): for ``θ ≤ 0.01`` — 0 and negative values included — no mismatch is ever revoked and the window alone decides.
``θ = inf`` rejects every mismatch, so the rule is exactly ``exact`` (an infinite ``entropy_thre``, the strict end we
add: the reference has no knob for it). Loosening: smaller ``θ`` or smaller ``W``.

Sampling (``_batch_verification`` at T > 0, lossy even before the window): drafts are greedy (L1060; the policy asks
the engine for them); the target draws two samples from ``softmax(z_i / T)`` — the temperature only
(``sample_with_temperature``, L42–55), so the run's top-k/top-p do not enter the rule — and ``m_i = d_i ∈ {s1, s2}``;
the correction token is ``s1``. We draw this in closed form through the shared rejection sampler with point-mass
drafts: ``m_i`` is ``u_i < 1 − (1 − p_i(d_i))²`` (the probability that one of two independent samples hits ``d_i``),
and after a rejection ``s1`` follows ``p`` with ``d_i`` removed — the same joint distribution as two independent
samples. The bonus token is one sample from ``softmax(z_k / T)`` (L1082–1083). ``n_relaxed`` counts acceptances the
one-sample test ``u_i < p_i(d_i)`` (strict speculative sampling of a greedy draft) would have rejected, with the same
uniforms.

Deviations, deliberate: the entropy is computed in double from float32 logits (the authors' runs use the model's
dtype, often bf16, which matters only at the θ edge); the two target samples are drawn in closed form (same
distribution, different random numbers); tree mode (``verify_tree_paths``, L729–862, which has no entropy gate) and
``abla_no_window`` are not offered.

Both modes share one relaxation (``fly_relaxation``), computed over the block at once; the entropy is computed only
at window candidates before the first mismatch that is not one (no later position can change the verdict), with
the normaliser summed in double.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from relaxbench.ops.reductions import top_values
from relaxbench.ops.rejection import rejection_sample
from relaxbench.policies.base import Block, Fidelity, Modes, Origin, Verdict, VerificationPolicy, register_policy
from relaxbench.policies.greedy import RelaxRows, accept_relaxed, greedy_verdict
from relaxbench.validation import Integer, Number, Spec

GATE_MIN_THETA = 0.01  # FLy keeps entropy_thre only when it is > 1e-2; below, the gate is off


def top3_entropy(logits: torch.Tensor) -> torch.Tensor:
    """[n] float64: FLy's entropy of each row of raw ``logits`` [n, V], over the 3 largest probabilities of the
    full softmax (not renormalised); NaN for a row with fewer than 3 finite logits (``exp(−inf)·(−inf)``), as the
    reference's ``calculate_topk_entropy``."""
    logits = logits.float()
    top = top_values(logits, 3)
    row_max = top[:, 0]
    total = (logits - row_max.unsqueeze(-1)).exp().sum(dim=-1, dtype=torch.float64)
    log_p = top.double() - (row_max.double() + total.log()).unsqueeze(-1)  # log-normaliser = max + ln Σ e^(z − max)
    return -(log_p.exp() * log_p).sum(dim=-1)


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
    target's raw ``logits`` [k+1, V]) is not below ``θ`` (NaN is not below); ``θ ≤ 0.01`` switches the gate off."""
    candidates = window_candidates(matches, window)

    def relax(rows: torch.Tensor) -> torch.Tensor:
        reachable = candidates[rows].cumprod(dim=0).bool()  # candidates before the first mismatch that is not one
        if theta <= GATE_MIN_THETA or not bool(reachable.any()):
            return reachable
        accept = reachable.clone()
        accept[reachable] = ~(top3_entropy(logits[rows[reachable]]) < theta)
        return accept

    return relax


@register_policy
class FLy(VerificationPolicy):
    name = "fly"
    modes = Modes(strict_knobs={"theta": math.inf}, lossy={"sampling"}, greedy_drafts=True)
    origin = Origin(Fidelity.REFERENCE,
                    "AMD-AGI/FLy@6667ae8 fly/models/FLy.py SPDGenerate.generate_chunks (chain mode)",
                    "FLy: accept a mismatch followed by W-1 matches if the target's top-3 entropy >= theta",
                    revision=1)  # gate off at theta <= 0.01, NaN entropy, temperature-only sampling

    class Knobs(Spec):
        theta: Number = 0.3  # entropy gate θ (nats); inf = exact match
        window: Integer = Field(6, ge=1)  # W: the mismatch plus W − 1 following matches

    def decide(self, block: Block) -> Verdict:
        theta, window = self.knobs.theta, self.knobs.window
        strict = math.isinf(theta) and theta > 0
        if block.greedy:
            if strict:
                return greedy_verdict(block)
            return greedy_verdict(block, fly_relaxation(block.matches, block.target_logits, theta, window))
        p = block.tempered_rows.all()  # softmax(z / T): the temperature only, as sample_with_temperature
        p_d = p[:-1].gather(-1, block.draft_tokens.unsqueeze(-1)).squeeze(-1)
        two_sample_hit = 1 - (1 - p_d) ** 2

        def relax(hits: torch.Tensor) -> torch.Tensor:
            return accept_relaxed(hits, fly_relaxation(hits, block.target_logits, theta, window))

        return rejection_sample(block.draft_tokens, None, two_sample_hit, p[:-1], p[-1], block.generator,
                                strict_p=p_d, relax=None if strict else relax)
