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
from relaxbench.policies.base import Batch, Fidelity, Judgement, Modes, Origin, VerificationPolicy, register_policy
from relaxbench.policies.greedy import greedy_judgement
from relaxbench.policies.rejection import rejection_judgement
from relaxbench.policies.verdict import by_mode
from relaxbench.validation import Integer, Number, Spec

GATE_MIN_THETA = 0.01  # FLy keeps entropy_thre only when it is > 1e-2; below, the gate is off


def top3_entropy(logits: torch.Tensor) -> torch.Tensor:
    """[n] float64: FLy's entropy of each row of raw ``logits`` [n, V], over the 3 largest probabilities of the
    full softmax (not renormalised); NaN for a row with fewer than 3 finite logits (``exp(−inf)·(−inf)``), as the
    reference's ``calculate_topk_entropy``."""
    logits = logits.float()
    top = top_values(logits, 3)
    row_max = top[:, 0]
    total = (logits - row_max.unsqueeze(-1)).exp_().sum(dim=-1, dtype=torch.float64)
    log_p = top.double() - (row_max.double() + total.log()).unsqueeze(-1)  # log-normaliser = max + ln Σ e^(z − max)
    return -(log_p.exp() * log_p).sum(dim=-1)


def window_candidates(matches: torch.Tensor, window: int, ends: torch.Tensor) -> torch.Tensor:
    """[B, K] bool: mismatches followed by ``window − 1`` matches, with ``i + window < end`` (FLy's deferred window;
    ``ends`` [B, K] the end of each position's block: the request's draft count, or its run's end)."""
    width = int(matches.shape[-1])
    counts = torch.nn.functional.pad(matches.long(), (0, window)).cumsum(dim=-1)  # matches in 0..j
    positions = torch.arange(width, device=matches.device)
    following = counts[:, positions + window - 1] - counts[:, positions]  # matches in i+1 .. i+W−1
    return ~matches & (following == window - 1) & (positions + window < ends)


def fly_relax(matches: torch.Tensor, batch: Batch, theta: float, window: int) -> torch.Tensor:
    """[B, K] FLy's relaxation given ``matches``: a window candidate whose top-3 entropy (of the target's raw
    logits) is not below θ (NaN is not below); θ ≤ 0.01 switches the gate off."""
    candidates = window_candidates(matches, window, batch.ends)
    if theta <= GATE_MIN_THETA:
        return candidates
    low = batch.per_position(top3_entropy(batch.target_draft_rows) < theta, False)
    return candidates & ~low


@register_policy
class FLy(VerificationPolicy):
    name = "fly"
    modes = Modes(strict_knobs={"theta": math.inf}, lossy={"sampling"}, greedy_drafts=True,
                  loosening={"theta": (math.inf, 1.0, 0.6, 0.3, 0.1, 0.0), "window": (16, 8, 6, 4, 3, 2, 1)})
    origin = Origin(Fidelity.REFERENCE,
                    "AMD-AGI/FLy@6667ae8 fly/models/FLy.py SPDGenerate.generate_chunks (chain mode)",
                    "FLy: accept a mismatch followed by W-1 matches if the target's top-3 entropy >= theta",
                    revision=2)  # 2: a plain step's top-p ties as vLLM; 1: gate off at theta <= 0.01, NaN, T only

    class Knobs(Spec):
        theta: Number = Field(0.3, ge=0)  # entropy gate θ (nats); ≤ 0.01 gate off; inf = exact match
        window: Integer = Field(6, ge=1)  # W: the mismatch plus W − 1 following matches

    @property
    def strict(self) -> bool:
        return math.isinf(self.knobs.theta) and self.knobs.theta > 0

    def judge(self, batch: Batch) -> Judgement:
        return by_mode(batch, lambda: self.greedy(batch), lambda: self.sampled(batch))

    def greedy(self, batch: Batch) -> Judgement:
        if self.strict:
            return greedy_judgement(batch)
        return greedy_judgement(batch, fly_relax(batch.matches, batch, self.knobs.theta, self.knobs.window))

    def sampled(self, batch: Batch) -> Judgement:
        """Greedy drafts; ``d`` matches when it equals one of two samples from softmax(z / T), drawn in closed form
        (``u < 1 − (1 − p(d))²``); after a rejection ``p`` without ``d``; the bonus from ``p``."""
        p = batch.tempered  # softmax(z / T): the temperature only, as sample_with_temperature
        rows = batch.target.index
        p_d = p[rows[:, :-1], batch.drafts]
        two_sample_hit = 1 - (1 - p_d) ** 2

        def at(n: torch.Tensor) -> torch.Tensor:
            return p[rows.gather(1, n.unsqueeze(-1)).squeeze(-1)]

        def relax(hits: torch.Tensor) -> torch.Tensor:
            return hits | fly_relax(hits, batch, self.knobs.theta, self.knobs.window)

        # no request truncates: p's own rows, so a request with no drafts draws its bonus as the plain step would
        rows_at = batch.p_at if batch.tempered_is_p else at
        return rejection_judgement(batch, two_sample_hit, rows_at, rows_at, point_mass=True, strict_p=p_d,
                                   relax=None if self.strict else relax)
