"""The sampling-mode "relaxed target" family (Xia, Ribar, Balanca, arXiv 2607.08690, their §2 table).

Reference: graphcore-research/relaxed-spec-dec-repro @ c28353f, ``vllm_overlay/files/v1/sample/rejection_sampler.py``:
``rejection_sample``, its accept and recovery kernels, and per rule the helpers named on each class. The mapping of
the reference's branches to this code and to the conformance tests is in docs/conformance.md.

Each rule defines a relaxed target ``π(q, p)`` from the processed target ``p`` and draft ``q`` and runs the shared
rejection sampler against it: accept ``x ~ q`` with probability ``min(1, π_accept(x)/q(x))``, else sample
``norm((π_residual − q)+)``; the bonus token comes from ``p``. Each rule builds ``π`` row by row, only up to the first
rejection (``row_target``). Greedy decoding is exact match for every rule but ``contrastive``, which is sampling-only,
as the reference. ``n_relaxed`` counts acceptances that speculative sampling against ``p`` would have rejected with
the same uniforms.

Deviations (why, in docs/conformance.md):

* strict accept test ``u·q(x) < π(x)`` (differs only where ``u`` equals the ratio, probability 0);
* the recovered token drawn by inverse CDF (the reference's exponential-noise argmax: the same distribution);
* ``casc-tok`` accepts α < 0 (an empty top set: its lossless end);
* ``contrastive``: support ``p > 0``; the α cut optional; the bonus token from ``p``; a padded −inf draft logit
  takes the row's smallest finite one;
* vocabulary sums (TV, η, D) taken row by row (rounding differs from batched sums only at exact ties).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from typing import Literal, NamedTuple

import torch
from pydantic import Field

from tests.oracle.rejection import AcceptTest, rejection_sample
from tests.oracle.base import Block, Fidelity, Modes, Need, Origin, Verdict, VerificationPolicy, register_policy
from tests.oracle.greedy import greedy_verdict
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
    """Mentored decoding with β = 1 (Tran-Thien 2023): ``lossy_spec_decode_beta1_accept_ratio``."""

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
    """CACTUS (Hao & Mou, arXiv 2604.04987): boost the drafted token's target mass within a KL-like budget δ
    (``apply_cactus_constraint``, ``cactus_accept_ratio``)."""

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
    """Speculative cascades, the [OPT] deferral rule (Narasimhan et al., arXiv 2405.19261):
    ``spec_cascade_opt_defer_mask``."""

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
    """Speculative cascades, the token-level rule ("Tok3"): ``spec_cascade_tok3_top_mask_from_logits``,
    ``apply_spec_cascade_tok3_constraint``. α = 0 is not strict (the single first argmax); α < 0 is."""

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
        return (a * diff).sum(dim=-1)

    if kind == "kl":
        return plogr(p, safe_log(p), safe_log(q))
    log_m = safe_log(0.5 * (p + q))
    return 0.5 * (plogr(p, safe_log(p), log_m) + plogr(q, safe_log(q), log_m))


@register_policy
class FuzzySpeculative(RelaxedTarget):
    """Reducible Fuzzy SD (Holsman et al., arXiv 2502.20704): use the draft's distribution where it is close
    (``fsd_divergence_scores``, ``rfsd_use_draft_mask``)."""

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
    """Static ensemble ``w·p + (1−w)·q`` (the DIVERSED paper's baseline; ``static_ensemble_accept_ratio``); w = 0
    is the always-accept baseline."""

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
    """Speculative contrastive decoding (SCD): the target contrasted against the draft as an amateur
    (``apply_scd_constraint``, ``scd_expert_toppk_gated``). It relaxes the target — the residual and so the output
    distribution — not the acceptance test: with the same uniforms it never accepts what speculative sampling
    rejects."""

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
