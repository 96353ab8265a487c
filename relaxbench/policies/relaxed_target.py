"""The sampling-mode "relaxed target" family (Xia, Ribar, Balanca, arXiv 2607.08690, their §2 table).

Source: graphcore-research/relaxed-spec-dec-repro, ``vllm_overlay/files/v1/sample/rejection_sampler.py``
(``rejection_sample`` and its ``apply_*_constraint`` / ``*_accept_ratio`` helpers); paper grids from
``scripts/run_paper_grid.py``.

Each rule defines a relaxed target ``π(q, p)`` from the processed target ``p`` and draft ``q`` (after the run's
temperature/top-k/top-p) and runs the shared rejection sampler against it: accept ``x ~ q`` with probability
``min(1, π_accept(x)/q(x))``, else sample ``norm((π_residual − q)+)``; the bonus token comes from ``p`` (the
reference's default ``target_p``). All need the full draft distribution ``q`` (``Need.DRAFT_PROBS``).
``n_relaxed`` counts acceptances that speculative sampling against ``p`` would have rejected with the same uniforms.

Greedy decoding: as the reference, every rule but ``contrastive`` falls back to strict exact match (greedy rows
never reach the relaxed kernel); ``contrastive`` (SCD) raises on greedy rows there and is sampling-only here.

Rule — π — lossless at — paper grid:

* ``mentored``: accept iff ``u ≤ p/((1−α)q)``; residual ``(p−q)+``. Lossless at α = 0; grid α ∈ {0.3, 0.7, 0.95}.
* ``cactus``: ``H_x(x) = γ = min(p + √(2δp(1−p)), 1)``, ``H_x(y) = p(y)(1−γ)/(1−p(x))``; accept with ``γ/q``,
  residual ``(H_x−q)+``. Lossless at δ = 0; grid δ ∈ {0.1, 0.25, 1, 10}.
* ``casc-opt``: ``π = p`` (defer) iff ``max q < max p − α·TV(p, q)``, else ``π = q``. Lossless at α = −inf;
  grid α ∈ {−0.1, 0, 0.05}.
* ``casc-tok``: ``T_α = {v: z(v) ≥ max z + ln(1−α)}`` on raw logits, ``π = q·1[T] + η·p`` with ``η = q(T̄)``.
  Lossless at α < 0 (T empty); grid α ∈ {0, 0.35, 0.8} (α = 0 is *not* strict).
* ``fuzzy``: ``π = q`` iff ``D(p, q) ≤ T`` (JS, or KL(p‖q)), else ``p``. Lossless at T = 0 (q only where q = p);
  grid T ∈ {0.05, 0.2, 0.3}.
* ``ensemble``: ``π = w·p + (1−w)·q``; residual ∝ ``(p−q)+``. Lossless at w = 1; grid w ∈ {0.95, 0.9, 0.8};
  w = 0 accepts every draft.
* ``contrastive``: ``π ∝ exp(((1+β)z_p − βz_q)/T)`` on ``supp(p) ∩ {z_p ≥ max z_p + T·ln α}``. Lossless at β = 0;
  grid β ∈ {0.1, 0.5, 1}.

Defaults are the mildest point of each paper grid. Deviations from the reference, stated: ``casc-tok`` accepts
α < 0 (an empty top set, so ``π = p``: its lossless end; the reference requires 0 ≤ α ≤ 1); ``contrastive``'s
plausibility set is always intersected with the support of ``p`` (the reference's paper runs use exactly that
support, "toppk-gated", and sweep β; α = 0 switches the extra cut off) and its bonus token comes from ``p`` (the
reference draws it from ``π`` with one more drafter pass, which this engine does not run).

Note on ``contrastive``: at equal target and draft temperatures ``π ∝ p^(1+β)·q^(−β)``, and ``π(x) > p(x)`` only
where ``p(x) > q(x)``, where speculative sampling accepts anyway; so with the same uniforms it never accepts a
draft that speculative sampling rejects (``n_relaxed`` stays 0). It relaxes the *target* — the residual and hence
the output distribution — not the acceptance test.
"""

from __future__ import annotations

import math

import torch
from pydantic import model_validator

from relaxbench.ops.rejection import Row, rejection_sample
from relaxbench.policies.base import Block, Need, Verdict, VerificationPolicy, register_policy
from relaxbench.policies.greedy import greedy_verdict
from relaxbench.policies.typical import safe_log
from relaxbench.validation import Number, Spec, Text


class RelaxedTarget(VerificationPolicy):
    """Shared shape of the family: greedy falls back to exact match; sampling runs the shared rejection sampler
    against ``targets()``."""

    needs = frozenset({Need.DRAFT_PROBS})

    def targets(self, block: Block, p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | Row]:
        """(π_accept [k, V] or [k] at the drafts, π_residual [k, V] or row(n)) for draft rows ``p``, ``q`` [k, V]."""
        raise NotImplementedError

    def decide(self, block: Block) -> Verdict:
        if block.greedy:
            return greedy_verdict(block)
        p_all, q = block.target_probs, block.draft_probs
        p = p_all[:-1]
        pi_accept, pi_residual = self.targets(block, p, q)
        return rejection_sample(block.draft_tokens, q, pi_accept, pi_residual, p_all[-1], block.generator,
                                strict_p=p)


def at_drafts(block: Block, values: torch.Tensor) -> torch.Tensor:
    return values.gather(-1, block.draft_tokens.unsqueeze(-1)).squeeze(-1)


@register_policy
class Mentored(RelaxedTarget):
    """Mentored decoding with β = 1 (Tran-Thien 2023; the reference's ``lossy_spec_decode_beta1``)."""

    name = "mentored"
    strict_knobs = {"alpha": 0.0}
    summary = "mentored decoding: accept iff u <= p/((1-alpha) q), residual (p-q)+ (sampling; greedy: exact)"

    class Knobs(Spec):
        alpha: Number = 0.3

        @model_validator(mode="after")
        def _check(self):
            if not 0 <= self.alpha < 1:
                raise ValueError("alpha must be in [0, 1)")
            return self

    def targets(self, block, p, q):
        return at_drafts(block, p) / (1 - self.knobs.alpha), p


def cactus_row(p_row: torch.Tensor, token: int, gamma: torch.Tensor) -> torch.Tensor:
    """CACTUS's proposal-conditioned target ``H_x``: ``x`` gets ``γ``, the rest of ``p`` shares ``1 − γ``."""
    p_x = p_row[token]
    scale = torch.nan_to_num((1 - gamma) / (1 - p_x), nan=1.0, posinf=1.0, neginf=0.0)
    row = p_row * scale
    row[token] = gamma
    return row.clamp(0, 1)


@register_policy
class Cactus(RelaxedTarget):
    """CACTUS (Hao & Mou, arXiv 2604.04987): boost the drafted token's target mass within a KL-like budget δ."""

    name = "cactus"
    strict_knobs = {"delta": 0.0}
    summary = "CACTUS: accept with gamma/q, gamma = min(p + sqrt(2 delta p(1-p)), 1); residual (H_x - q)+"

    class Knobs(Spec):
        delta: Number = 0.1

        @model_validator(mode="after")
        def _check(self):
            if not self.delta >= 0:
                raise ValueError("delta must be >= 0")
            return self

    def targets(self, block, p, q):
        p_x = at_drafts(block, p)
        gamma = (p_x + torch.sqrt(2 * self.knobs.delta * p_x * (1 - p_x))).clamp(0, 1)
        return gamma, lambda n: cactus_row(p[n], int(block.draft_tokens[n]), gamma[n])


@register_policy
class SpecCascadeOpt(RelaxedTarget):
    """Speculative cascades, the [OPT] deferral rule (Narasimhan et al., arXiv 2405.19261)."""

    name = "casc-opt"
    strict_knobs = {"alpha": -math.inf}
    summary = "spec-cascade OPT: pi = q unless max q < max p - alpha*TV(p, q) (then pi = p, strict test)"

    class Knobs(Spec):
        alpha: Number = -0.1

        @model_validator(mode="after")
        def _check(self):
            if math.isnan(self.alpha):
                raise ValueError("alpha must be a number")
            return self

    def defer_to_target(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        if self.knobs.alpha == -math.inf:
            return torch.ones(p.shape[0], dtype=torch.bool, device=p.device)
        tv = (p - q).clamp_min(0).sum(dim=-1)
        return q.amax(dim=-1) < p.amax(dim=-1) - self.knobs.alpha * tv

    def targets(self, block, p, q):
        pi = torch.where(self.defer_to_target(p, q).unsqueeze(-1), p, q)
        return pi, pi


@register_policy
class SpecCascadeToken(RelaxedTarget):
    """Speculative cascades, the token-level rule ("Tok3")."""

    name = "casc-tok"
    strict_knobs = {"alpha": -1.0}
    summary = "spec-cascade Tok3: pi = q on the target's top set T_alpha plus q(outside T)*p; alpha<0: strict"

    class Knobs(Spec):
        alpha: Number = 0.0

        @model_validator(mode="after")
        def _check(self):
            if not self.alpha <= 1:
                raise ValueError("alpha must be <= 1 (alpha < 0 empties the top set: strict)")
            return self

    def targets(self, block, p, q):
        if self.knobs.alpha < 0:  # T_α is empty and η = Σq = 1: π = p (exactly, not up to Σq's rounding)
            return p, p
        # p(v) >= (1 − α)·max p, on the raw (pre-temperature) logits as the reference's "paper" top set
        logits = block.target_logits[:-1].float()
        slack = math.log1p(-self.knobs.alpha) if self.knobs.alpha < 1 else -math.inf
        top = torch.isfinite(logits) & (logits >= logits.amax(dim=-1, keepdim=True) + slack)
        eta = torch.where(top, torch.zeros_like(q), q).sum(dim=-1, keepdim=True)
        pi = torch.where(top, q, torch.zeros_like(q)) + eta * p
        return pi, pi


def divergence(p: torch.Tensor, q: torch.Tensor, kind: str) -> torch.Tensor:
    """Row-wise JS(p, q) or KL(p‖q) in nats (0·log 0 = 0; q = 0 under p > 0 counts as the smallest float, as the
    reference does)."""
    log_p = safe_log(p)
    if kind == "kl":
        return (p * (log_p - safe_log(q))).sum(dim=-1)
    log_m = safe_log(0.5 * (p + q))
    return 0.5 * ((p * (log_p - log_m)).sum(dim=-1) + (q * (safe_log(q) - log_m)).sum(dim=-1))


@register_policy
class FuzzySpeculative(RelaxedTarget):
    """Reducible Fuzzy SD (Holsman et al., arXiv 2502.20704): use the draft's distribution where it is close."""

    name = "fuzzy"
    strict_knobs = {"threshold": 0.0}
    summary = "reducible fuzzy SD: pi = q where D(p, q) <= T (JS by default), else p"

    class Knobs(Spec):
        threshold: Number = 0.05
        divergence: Text = "js"

        @model_validator(mode="after")
        def _check(self):
            if self.divergence not in ("js", "kl"):
                raise ValueError("divergence must be 'js' or 'kl'")
            if math.isnan(self.threshold):
                raise ValueError("threshold must be a number")
            return self

    def targets(self, block, p, q):
        use_draft = divergence(p, q, self.knobs.divergence) <= self.knobs.threshold
        pi = torch.where(use_draft.unsqueeze(-1), q, p)
        return pi, pi


@register_policy
class StaticEnsemble(RelaxedTarget):
    """Static ensemble ``w·p + (1−w)·q`` (the DIVERSED paper's baseline); w = 0 is the always-accept baseline."""

    name = "ensemble"
    strict_knobs = {"w": 1.0}
    summary = "static ensemble: pi = w p + (1-w) q, accept ratio (1-w) + w p/q; w=0 always accepts"

    class Knobs(Spec):
        w: Number = 0.95

        @model_validator(mode="after")
        def _check(self):
            if not 0 <= self.w <= 1:
                raise ValueError("w must be in [0, 1]")
            return self

    def targets(self, block, p, q):
        w = self.knobs.w
        return (1 - w) * at_drafts(block, q) + w * at_drafts(block, p), p


@register_policy
class SpeculativeContrastive(RelaxedTarget):
    """Speculative contrastive decoding (SCD): the target contrasted against the draft as an amateur."""

    name = "contrastive"
    modes = frozenset({"sampling"})
    strict_knobs = {"beta": 0.0}
    summary = "speculative contrastive decoding: pi ~ exp(((1+beta) z_p - beta z_q)/T) on p's plausible support"

    class Knobs(Spec):
        beta: Number = 0.1
        alpha: Number = 0.0  # plausibility cut z_p >= max z_p + T ln(alpha); 0 = off

        @model_validator(mode="after")
        def _check(self):
            if not self.beta >= 0:
                raise ValueError("beta must be >= 0")
            if not 0 <= self.alpha <= 1:
                raise ValueError("alpha must be in [0, 1]")
            return self

    def targets(self, block, p, q):
        temperature = block.sampling.temperature
        z_p = block.target_logits[:-1].float()
        z_q = block.draft_logits.float()
        finite = torch.isfinite(z_q)  # a draft vocabulary padded to the target's width has -inf columns
        z_q = torch.where(finite, z_q, z_q.masked_fill(~finite, math.inf).amin(dim=-1, keepdim=True))
        support = p > 0
        if self.knobs.alpha > 0:
            support &= z_p >= z_p.amax(dim=-1, keepdim=True) + temperature * math.log(self.knobs.alpha)
        scores = ((1 + self.knobs.beta) * z_p - self.knobs.beta * z_q) / temperature
        pi = torch.softmax(scores.masked_fill(~support, -math.inf), dim=-1)
        return pi, pi
