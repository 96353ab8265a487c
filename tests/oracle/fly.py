"""FLy (arXiv 2511.22972, ICLR 2026): entropy-gated, window-deferred acceptance of draft mismatches.

Reference: AMD-AGI/FLy @ 6667ae8, ``fly/models/FLy.py``, chain mode: ``SPDGenerate.generate_chunks``,
``_batch_verification``, ``rej_by_entropy``, ``calculate_topk_entropy`` and the gate switch in ``__init__``; defaults
from ``fly_config/FLy_Llama3_70b.json`` (k = 15, W = 6, θ = 0.3). The line-by-line mapping to the reference and the
tests is in docs/conformance.md.

A mismatch ``d_i`` followed by ``W − 1`` matches with ``i + W < k`` (on the original matches; no cascading) is
accepted unless the top-3 entropy of the full softmax of the target's raw logits is below θ (strict; NaN with fewer
than 3 finite logits never revokes); for θ ≤ 0.01 the gate is off and the window alone decides; θ = inf is exact match
(our strict end). The accepted length is the leading run; the next token the target's argmax. Sampling: greedy drafts,
``d_i`` matches when it equals one of two samples from ``softmax(z / T)`` (the temperature only), the correction token
is the first sample, the bonus one sample; drawn in closed form through the shared rejection sampler with point-mass
drafts (``u < 1 − (1 − p(d))²``; after a rejection ``p`` without ``d``). ``n_relaxed`` counts acceptances the
one-sample test would have rejected, with the same uniforms.

Deviations (why, in docs/conformance.md):

* the entropy in double from float32 logits (the authors: the model's dtype, often bf16);
* the two target samples drawn in closed form (same distribution, different random numbers);
* no tree mode (``verify_tree_paths``) and no ``abla_no_window``;
* θ = inf as the strict end (the reference has no such knob value).
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from relaxbench.ops.reductions import top_values
from tests.oracle.rejection import rejection_sample
from tests.oracle.base import Block, Fidelity, Modes, Origin, Verdict, VerificationPolicy, register_policy
from tests.oracle.greedy import RelaxRows, accept_relaxed, greedy_verdict
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
