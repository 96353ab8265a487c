"""The sampling-mode "relaxed target" family (Xia, Ribar, Balanca, arXiv 2607.08690, their §2 table).

Reference: graphcore-research/relaxed-spec-dec-repro @ c28353f, ``vllm_overlay/files/v1/sample/rejection_sampler.py``
(last changed in ca3fdd9): ``rejection_sample`` (the greedy rows L2347–2364; the relaxed rows L2374–), the accept
kernel ``rejection_random_sample_kernel`` (L3419–3527) and the recovery kernel (L3555–3645), and per rule the helpers
named below; paper grids from ``scripts/run_paper_grid.py`` (L100–143) and ``vllm_overlay/files/config/speculative.py``.

Each rule defines a relaxed target ``π(q, p)`` from the processed target ``p`` and draft ``q`` (after the run's
temperature/top-k/top-p, ``apply_sampling_constraints`` L677–681) and runs the shared rejection sampler against it:
accept ``x ~ q`` with probability ``min(1, π_accept(x)/q(x))``, else sample ``norm((π_residual − q)+)``; the bonus
token comes from ``p`` (the reference's default ``target_p``). All need the full draft distribution ``q``
(``Need.DRAFT_PROBS``). ``n_relaxed`` counts acceptances that speculative sampling against ``p`` would have rejected
with the same uniforms. Each rule builds ``π`` row by row, only up to the first rejection (``row_target``): the
acceptance reads ``π`` at the draft token, and the full row is built for the rejected position only.

Greedy decoding: as the reference, every rule but ``contrastive`` is exact match (greedy rows never reach the
relaxed kernel, ``rejection_greedy_sample_kernel`` L3361–3414); ``contrastive`` (SCD) raises on greedy rows there
(L2319–2329) and is sampling-only here.

Rule — π — lossless at — paper grid:

* ``mentored`` (``lossy_spec_decode_beta1_accept_ratio`` L1527–1557): accept iff ``u ≤ p/((1−α)q)``; residual
  ``(p−q)+``. Lossless at α = 0; 0 ≤ α < 1; grid α ∈ {0.3, 0.7, 0.95}.
* ``cactus`` (``apply_cactus_constraint`` L2714–2743, ``cactus_accept_ratio`` L1623): ``H_x(x) = γ = min(p +
  √(2δp(1−p)), 1)``, ``H_x(y) = p(y)(1−γ)/(1−p(x))`` (factor 1 when p(x) = 1); accept with ``γ/q``, residual
  ``(H_x−q)+``. Lossless at δ = 0; δ ≥ 0; grid δ ∈ {0.1, 0.25, 1, 10}.
* ``casc-opt`` (``spec_cascade_opt_defer_mask`` L2072–2098): ``π = p`` (defer) iff ``max q < max p − α·TV(p, q)``
  (strict <; TV = Σ(p − q)+), else ``π = q``; maxima from the processed distributions (the reference's default
  gate "processed"). Lossless at α = −inf; grid α ∈ {−0.1, 0, 0.05}.
* ``casc-tok`` (``spec_cascade_tok3_top_mask_from_logits`` L1999–2024, ``apply_spec_cascade_tok3_constraint``
  L2027–2040): ``T_α = {v: z(v) ≥ max z + ln(1−α)}`` on the raw (pre-temperature) logits (the default top set
  "paper"), finite logits only; ``π = q·1[T] + η·p`` with ``η = q(T̄)``. α = 0 is *not* strict: T is the single
  argmax (the first index among tied maxima, L2015–2020); α = 1: every finite token. Lossless at α < 0 (T empty); grid α ∈ {0, 0.35, 0.8}.
* ``fuzzy`` (``fsd_divergence_scores`` L1745–1773, ``rfsd_use_draft_mask`` L1822–1831): ``π = q`` iff
  ``D(p, q) ≤ T`` (non-strict; rFSD), else ``p``; D = JS (the grid's) or KL(p‖q), logs of ``max(·, float32 tiny)``.
  Lossless at T = 0 (q only where q = p); grid T ∈ {0.05, 0.2, 0.3}.
* ``ensemble`` (``static_ensemble_accept_ratio`` L1496–1524): ``π = w·p + (1−w)·q``; accept ratio
  ``(1−w) + w·p/q``; residual ∝ ``(p−q)+`` (L1723–1742). Lossless at w = 1; grid w ∈ {0.95, 0.9, 0.8};
  w = 0 accepts every draft.
* ``contrastive`` (``apply_scd_constraint`` L1347–1417; support ``scd_expert_toppk_gated`` L2574–2575):
  ``π ∝ exp(((1+β)z_p − βz_q)/T)`` on the support of ``p`` (the target's top-k/top-p support), with ``z_p`` the raw
  target logits and ``z_q`` the raw draft logits; optionally cut to ``z_p ≥ max z_p + T·ln α`` (``scd_alpha``,
  L1305–1344). Lossless at β = 0; grid β ∈ {0.1, 0.5, 1}. Sampling only.

Defaults are the mildest point of each paper grid. Deviations from the reference, deliberate:

* the accept test is ``u·q(x) < π(x)`` (strict; the reference's kernel tests ``π/q ≥ u``): they differ only where
  ``u`` equals the ratio exactly, an event of probability 0;
* the recovered token is drawn from the normalised residual by inverse CDF (the reference takes the argmax of
  ``residual / exponential noise``, the same distribution);
* ``casc-tok`` accepts α < 0 (an empty top set, so ``π = p``: its lossless end; the reference requires 0 ≤ α ≤ 1);
* ``contrastive``'s support is ``p > 0`` (the reference's is the finite processed logits: they differ only where a
  finite logit's probability underflows to 0 in float32), the α cut is an option (α = 0 switches it off) and its
  bonus token comes from ``p`` (the reference's paper runs draw it from ``π`` with one more drafter pass,
  ``relaxed_T_qp`` L800–1000, which this engine does not run); a −inf draft logit on the support (a draft vocabulary
  narrower than the target's, padded by the engine) takes the row's smallest finite draft logit (the reference
  raises);
* sums over the vocabulary (TV, η, D) are taken row by row, so at a large vocabulary they round differently from
  batched sums (the verdicts are the same but at exact ties).

Note on ``contrastive``: at equal target and draft temperatures ``π ∝ p^(1+β)·q^(−β)``, and ``π(x) > p(x)`` only
where ``p(x) > q(x)``, where speculative sampling accepts anyway; so with the same uniforms it never accepts a
draft that speculative sampling rejects (``n_relaxed`` stays 0). It relaxes the *target* — the residual and hence
the output distribution — not the acceptance test.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from typing import Literal, NamedTuple

import torch
from pydantic import Field

from relaxbench.ops.rejection import AcceptTest, rejection_sample
from relaxbench.policies.base import Block, Fidelity, Modes, Need, Origin, Verdict, VerificationPolicy, register_policy
from relaxbench.policies.greedy import greedy_verdict
from relaxbench.validation import Number, Spec, Text


class RowTarget(NamedTuple):
    """One draft position's relaxed target: ``π_accept`` at the draft token, and the full ``π_residual`` row (built
    only if the position is the first rejection)."""

    accept: torch.Tensor  # 0-d
    residual: Callable[[], torch.Tensor]  # -> [V]


class RelaxedTarget(VerificationPolicy):
    """Shared shape of the family: greedy decoding is exact match; sampling runs the shared rejection sampler
    against ``row_target``, row by row up to the first rejection."""

    needs = frozenset({Need.DRAFT_PROBS})
    REFERENCE = "graphcore-research/relaxed-spec-dec-repro@c28353f vllm_overlay/files/v1/sample/rejection_sampler.py"

    @abc.abstractmethod
    def row_target(self, block: Block, i: int, token: int) -> RowTarget:
        """The relaxed target of draft position ``i`` (draft ``token``), from ``block.p_rows[i]``,
        ``block.q_rows[i]`` and the logits."""

    def decide(self, block: Block) -> Verdict:
        if block.greedy:
            return greedy_verdict(block)
        tokens = block.draft_tokens.tolist()
        targets: dict[int, RowTarget] = {}

        def target(i: int) -> RowTarget:
            if i not in targets:
                targets[i] = self.row_target(block, i, tokens[i])
            return targets[i]

        def accepts(i: int, scaled_u: torch.Tensor) -> bool:
            return self.accepts(block, i, tokens[i], scaled_u, lambda: target(i))

        p = block.p_rows
        return rejection_sample(block.draft_tokens, block.q_rows, AcceptTest(accepts),
                                lambda n: target(n).residual(), lambda: p[block.k], block.generator, strict_p=p)

    def accepts(self, block: Block, i: int, token: int, scaled_u: torch.Tensor,
                target: Callable[[], RowTarget]) -> bool:
        """``u·q(d) < π_accept(d)`` at position ``i``; a rule may decide without ``target()`` when that is exact."""
        return bool(scaled_u < target().accept)


def fixed(row: torch.Tensor) -> Callable[[], torch.Tensor]:
    return lambda: row


def accepts_p_or_q(block: Block, i: int, token: int, scaled_u: torch.Tensor, target: Callable[[], RowTarget]) -> bool:
    """The acceptance test of a rule whose π is either p or q: when ``u·q(d)`` is below both or neither of ``p(d)``
    and ``q(d)`` the verdict does not depend on which (the comparison is the one the full test would make), so the
    rule's switch (a divergence, a total variation) is computed only where it matters."""
    by_p = bool(scaled_u < block.p_rows[i][token])
    if by_p == bool(scaled_u < block.q_rows[i][token]):
        return by_p
    return bool(scaled_u < target().accept)


@register_policy
class Mentored(RelaxedTarget):
    """Mentored decoding with β = 1 (Tran-Thien 2023; the reference's ``lossy_spec_decode_beta1``)."""

    name = "mentored"
    modes = Modes(strict_knobs={"alpha": 0.0}, greedy_is_exact=True)
    origin = Origin(Fidelity.REFERENCE, RelaxedTarget.REFERENCE,
                    "mentored decoding: accept iff u <= p/((1-alpha) q), residual (p-q)+")

    class Knobs(Spec):
        alpha: Number = Field(0.3, ge=0, lt=1)

    def row_target(self, block, i, token):
        p = block.p_rows[i]
        return RowTarget(p[token] / (1 - self.knobs.alpha), fixed(p))


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
    modes = Modes(strict_knobs={"delta": 0.0}, greedy_is_exact=True)
    origin = Origin(Fidelity.REFERENCE, RelaxedTarget.REFERENCE,
                    "CACTUS: accept with gamma/q, gamma = min(p + sqrt(2 delta p(1-p)), 1); residual (H_x - q)+")

    class Knobs(Spec):
        delta: Number = Field(0.1, ge=0)

    def row_target(self, block, i, token):
        p = block.p_rows[i]
        p_x = p[token]
        gamma = (p_x + torch.sqrt(2 * self.knobs.delta * p_x * (1 - p_x))).clamp(0, 1)
        return RowTarget(gamma, lambda: cactus_row(p, token, gamma))


@register_policy
class SpecCascadeOpt(RelaxedTarget):
    """Speculative cascades, the [OPT] deferral rule (Narasimhan et al., arXiv 2405.19261)."""

    name = "casc-opt"
    modes = Modes(strict_knobs={"alpha": -math.inf}, greedy_is_exact=True)
    origin = Origin(Fidelity.REFERENCE, RelaxedTarget.REFERENCE,
                    "spec-cascade OPT: pi = q unless max q < max p - alpha*TV(p, q) (then pi = p, strict test)")

    class Knobs(Spec):
        alpha: Number = -0.1


    def defer_to_target(self, p: torch.Tensor, q: torch.Tensor) -> bool:
        """``max q < max p − α·TV(p, q)`` for one row (α = −inf: always, without TV)."""
        if self.knobs.alpha == -math.inf:
            return True
        tv = (p - q).clamp_min(0).sum()
        return bool(q.amax() < p.amax() - self.knobs.alpha * tv)

    def row_target(self, block, i, token):
        p, q = block.p_rows[i], block.q_rows[i]
        pi = p if self.defer_to_target(p, q) else q
        return RowTarget(pi[token], fixed(pi))

    def accepts(self, block, i, token, scaled_u, target):
        return accepts_p_or_q(block, i, token, scaled_u, target)


@register_policy
class SpecCascadeToken(RelaxedTarget):
    """Speculative cascades, the token-level rule ("Tok3")."""

    name = "casc-tok"
    modes = Modes(strict_knobs={"alpha": -1.0}, greedy_is_exact=True)
    origin = Origin(Fidelity.REFERENCE, RelaxedTarget.REFERENCE,
                    "spec-cascade Tok3: pi = q on the target's top set T_alpha plus q(outside T)*p; alpha<0: strict",
                    revision=1)  # alpha = 0: the first argmax alone on tied maxima, as the reference

    class Knobs(Spec):
        alpha: Number = Field(0.0, le=1)  # alpha < 0 empties the top set: strict

    def row_target(self, block, i, token):
        p = block.p_rows[i]
        if self.knobs.alpha < 0:  # T_α is empty and η = Σq = 1: π = p (exactly, not up to Σq's rounding)
            return RowTarget(p[token], fixed(p))
        q = block.q_rows[i]
        # p(v) >= (1 − α)·max p, on the raw (pre-temperature) logits as the reference's "paper" top set
        top = self.top_set(block.target_logits[i])
        eta = torch.where(top, torch.zeros_like(q), q).sum()
        accept = torch.where(top[token], q[token], torch.zeros_like(q[token])) + eta * p[token]
        return RowTarget(accept, lambda: torch.where(top, q, torch.zeros_like(q)) + eta * p)

    def top_set(self, logits: torch.Tensor) -> torch.Tensor:
        """[V] bool T_α of one row of raw logits (α ≥ 0), finite logits only."""
        if self.knobs.alpha in (0, 1):
            logits = self.finite_or_masked(logits)
            if self.knobs.alpha == 1:
                return logits > -math.inf
            # the single argmax of the finite logits (first index on ties), as the reference
            top = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)
            top[int(logits.argmax())] = bool(torch.isfinite(logits.amax()))
            return top
        # z >= max z + ln(1 − α) on the raw row: a NaN or +inf maximum makes the bound NaN or +inf, and T empty
        # (as the reference's finite & (z >= bound)); with a finite maximum, -inf logits fail the bound
        logits = logits.float()
        top_value = logits.amax()
        if not bool(torch.isfinite(top_value)):
            return torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)
        return logits >= top_value + math.log1p(-self.knobs.alpha)

    @staticmethod
    def finite_or_masked(logits: torch.Tensor) -> torch.Tensor:
        """The row with NaN and +inf logits set to -inf (outside every top set, as the reference's finite mask);
        the row itself when its maximum is finite, i.e. when the only non-finite logits are -inf (one fast pass)."""
        logits = logits.float()
        if bool(torch.isfinite(logits.amax())):
            return logits
        return logits.masked_fill(~torch.isfinite(logits), -math.inf)

    def accepts(self, block, i, token, scaled_u, target):
        # a draft in T has π(d) = q(d) + η·p(d) ≥ q(d): u·q(d) < q(d) accepts it without η
        if self.knobs.alpha >= 0 and bool(scaled_u < block.q_rows[i][token]) and self.in_top_set(block, i, token):
            return True
        return bool(scaled_u < target().accept)

    def in_top_set(self, block: Block, i: int, token: int) -> bool:
        """Whether ``token`` is in T_α of row ``i`` (as ``top_set``), reading only what decides it."""
        raw = block.target_logits[i].float()
        if not bool(torch.isfinite(raw[token])):
            return False
        if self.knobs.alpha == 1:
            return True
        if self.knobs.alpha == 0:  # the first index of the maximum of the finite logits
            logits = self.finite_or_masked(raw)
            return bool(logits[token] == logits.amax()) and int(logits.argmax()) == token
        top_value = raw.amax()
        return bool(torch.isfinite(top_value)) and bool(raw[token] >= top_value + math.log1p(-self.knobs.alpha))


def safe_log(probs: torch.Tensor) -> torch.Tensor:
    """``log max(p, float32 tiny)``: zeros map to a finite value, so 0·log 0 = 0 (the reference's clamp)."""
    return probs.clamp_min(torch.finfo(probs.dtype).tiny).log_()


def divergence(p: torch.Tensor, q: torch.Tensor, kind: str) -> torch.Tensor:
    """JS(p, q) or KL(p‖q) in nats along the last dimension (0·log 0 = 0; q = 0 under p > 0 counts as the smallest
    float, as the reference does); on one row each product-sum is one ``dot``."""
    def plogr(a: torch.Tensor, log_a: torch.Tensor, log_b: torch.Tensor) -> torch.Tensor:  # Σ a·(log a − log b)
        diff = log_a.sub_(log_b)
        return torch.dot(a, diff) if a.dim() == 1 else (a * diff).sum(dim=-1)

    if kind == "kl":
        return plogr(p, safe_log(p), safe_log(q))
    log_m = safe_log(0.5 * (p + q))
    return 0.5 * (plogr(p, safe_log(p), log_m) + plogr(q, safe_log(q), log_m))


@register_policy
class FuzzySpeculative(RelaxedTarget):
    """Reducible Fuzzy SD (Holsman et al., arXiv 2502.20704): use the draft's distribution where it is close."""

    name = "fuzzy"
    modes = Modes(strict_knobs={"threshold": 0.0}, greedy_is_exact=True)
    origin = Origin(Fidelity.REFERENCE, RelaxedTarget.REFERENCE,
                    "reducible fuzzy SD: pi = q where D(p, q) <= T (JS by default), else p")

    class Knobs(Spec):
        threshold: Number = 0.05
        divergence: Literal["js", "kl"] = "js"

    def row_target(self, block, i, token):
        p, q = block.p_rows[i], block.q_rows[i]
        pi = q if bool(divergence(p, q, self.knobs.divergence) <= self.knobs.threshold) else p
        return RowTarget(pi[token], fixed(pi))

    def accepts(self, block, i, token, scaled_u, target):
        return accepts_p_or_q(block, i, token, scaled_u, target)


@register_policy
class StaticEnsemble(RelaxedTarget):
    """Static ensemble ``w·p + (1−w)·q`` (the DIVERSED paper's baseline); w = 0 is the always-accept baseline."""

    name = "ensemble"
    modes = Modes(strict_knobs={"w": 1.0}, greedy_is_exact=True)
    origin = Origin(Fidelity.REFERENCE, RelaxedTarget.REFERENCE,
                    "static ensemble: pi = w p + (1-w) q, accept ratio (1-w) + w p/q; w=0 always accepts")

    class Knobs(Spec):
        w: Number = Field(0.95, ge=0, le=1)

    def row_target(self, block, i, token):
        w, p = self.knobs.w, block.p_rows[i]
        return RowTarget((1 - w) * block.q_rows[i][token] + w * p[token], fixed(p))


@register_policy
class SpeculativeContrastive(RelaxedTarget):
    """Speculative contrastive decoding (SCD): the target contrasted against the draft as an amateur."""

    name = "contrastive"
    modes = Modes(supported={"sampling"}, strict_knobs={"beta": 0.0})  # greedy refused: the reference raises there
    origin = Origin(Fidelity.REFERENCE, RelaxedTarget.REFERENCE,
                    "speculative contrastive decoding: pi ~ exp(((1+beta) z_p - beta z_q)/T) on p's plausible support")

    class Knobs(Spec):
        beta: Number = Field(0.1, ge=0)
        alpha: Number = Field(0.0, ge=0, le=1)  # plausibility cut z_p >= max z_p + T ln(alpha); 0 = off

    def row_target(self, block, i, token):
        temperature = block.sampling.temperature
        z_p = block.target_logits[i].float()
        z_q = block.draft_logits[i].float()
        if not bool(torch.isfinite(z_q.amin())):  # a draft vocabulary padded to the target's width has -inf columns
            finite = torch.isfinite(z_q)
            z_q = torch.where(finite, z_q, z_q.masked_fill(~finite, math.inf).amin())
        support = block.p_rows[i] > 0
        if self.knobs.alpha > 0:
            support &= z_p >= z_p.amax() + temperature * math.log(self.knobs.alpha)
        scores = ((1 + self.knobs.beta) * z_p - self.knobs.beta * z_q) / temperature
        pi = torch.softmax(scores.masked_fill(~support, -math.inf), dim=-1)
        return RowTarget(pi[token], fixed(pi))
