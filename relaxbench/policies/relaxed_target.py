"""The sampling-mode "relaxed target" family (Xia, Ribar, Balanca, arXiv 2607.08690, their §2 table).

Reference: graphcore-research/relaxed-spec-dec-repro @ c28353f, ``vllm_overlay/files/v1/sample/rejection_sampler.py``:
``rejection_sample``, its accept and recovery kernels, and per rule the helpers named on each class. The mapping of
the reference's branches to this code and to the conformance tests is in docs/conformance.md.

Each rule defines a relaxed target ``π(q, p)`` from the processed target ``p`` and draft ``q`` and runs the shared
rejection sampler against it (``p`` and ``q`` processed as the reference's ``apply_sampling_constraints`` does
through vLLM's ``apply_top_k_top_p``: top-k by value, top-p keeping the higher ids among tokens tied at its cut,
``ops.sampling.top_p_drop``): accept ``x ~ q`` with probability ``min(1, π_accept(x)/q(x))``, else sample
``norm((π_residual − q)+)``; the bonus token comes from ``p``. Each rule gives ``π_accept`` at every draft position
(from per-draft row reductions over the T real draft positions: TV, a divergence, η) and ``π_residual`` at one
position per request. Greedy decoding is exact match for every rule but ``contrastive``, which is sampling-only, as
the reference. ``n_relaxed`` counts acceptances that speculative sampling against ``p`` would have rejected with
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
from typing import Literal

import torch
from pydantic import Field

from relaxbench.ops.reductions import row_max
from relaxbench.policies.base import (Batch, Fidelity, Judgement, Modes, Need, Origin, VerificationPolicy,
                                      register_policy)
from relaxbench.policies.greedy import greedy_judgement
from relaxbench.policies.rejection import rejection_judgement
from relaxbench.policies.verdict import by_mode
from relaxbench.validation import Number, Spec

RowsAt = Callable[[torch.Tensor], torch.Tensor]  # positions n [B] -> one row per request [B, V]


class RelaxedTarget(VerificationPolicy):
    """Shared shape of the family: greedy decoding is exact match; sampling runs the shared rejection sampler
    against ``pi_accept`` (every position) and ``pi_residual`` (the first rejection's)."""

    needs = frozenset({Need.DRAFT_PROBS})
    REFERENCE = "graphcore-research/relaxed-spec-dec-repro@c28353f vllm_overlay/files/v1/sample/rejection_sampler.py"

    @abc.abstractmethod
    def relaxed_target(self, batch: Batch) -> tuple[torch.Tensor, RowsAt]:
        """(``π_accept(d)`` [B, K] at every draft position, n → ``π_residual`` [B, V] at position n of each request;
        any valid row where n is the bonus position)."""

    def judge(self, batch: Batch) -> Judgement:
        return by_mode(batch, lambda: greedy_judgement(batch), lambda: self.sampled(batch))

    def sampled(self, batch: Batch) -> Judgement:
        pi_accept, pi_residual = self.relaxed_target(batch)
        return rejection_judgement(batch, pi_accept, pi_residual, batch.p_at, strict_p=batch.p_of_drafts)


def pair_rows(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(p [T, V], q [T, V]) at the T real draft positions: the rows a per-draft reduction reads."""
    return batch.p.index_select(0, batch.target_rows_of_pairs()), batch.q.index_select(0, batch.q_rows_of_pairs())


def at_positions(values: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """[B] ``values`` [B, K] at position ``n`` of each request (clamped into the block)."""
    return values.gather(1, n.clamp_max(values.shape[1] - 1).unsqueeze(-1)).squeeze(-1)


def switch_p_q(batch: Batch, use_q: torch.Tensor) -> tuple[torch.Tensor, RowsAt]:
    """A rule whose π is q where ``use_q`` [T] and p elsewhere: π(d) at every position, and its residual rows."""
    use_q = batch.per_position(use_q, False)
    pi_d = torch.where(use_q, batch.q_of_drafts, batch.p_of_drafts)

    def residual(n: torch.Tensor) -> torch.Tensor:
        return torch.where(at_positions(use_q, n).unsqueeze(-1), batch.q_at(n), batch.p_at(n))

    return pi_d, residual


@register_policy
class Mentored(RelaxedTarget):
    """Mentored decoding with β = 1 (Tran-Thien 2023): ``lossy_spec_decode_beta1_accept_ratio``."""

    name = "mentored"
    modes = Modes(strict_knobs={"alpha": 0.0}, greedy_is_exact=True, loosening={"alpha": (0.0, 0.3, 0.7, 0.95)})
    origin = Origin(Fidelity.REFERENCE, RelaxedTarget.REFERENCE,
                    "mentored decoding: accept iff u <= p/((1-alpha) q), residual (p-q)+",
                    revision=1)  # top-p ties keep the higher ids (vLLM, transformers)

    class Knobs(Spec):
        alpha: Number = Field(0.3, ge=0, lt=1)

    def relaxed_target(self, batch):
        return batch.p_of_drafts / (1 - self.knobs.alpha), batch.p_at


def cactus_rows(p_rows: torch.Tensor, tokens: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """[B, V] CACTUS's proposal-conditioned target ``H_x`` per row: ``x`` (``tokens`` [B]) gets ``γ`` [B], the rest
    of ``p`` shares ``1 − γ``."""
    p_x = p_rows.gather(-1, tokens.unsqueeze(-1))
    scale = torch.nan_to_num((1 - gamma.unsqueeze(-1)) / (1 - p_x), nan=1.0, posinf=1.0, neginf=0.0)
    rows = (p_rows * scale).scatter(-1, tokens.unsqueeze(-1), gamma.unsqueeze(-1))
    return rows.clamp(0, 1)


@register_policy
class Cactus(RelaxedTarget):
    """CACTUS (Hao & Mou, arXiv 2604.04987): boost the drafted token's target mass within a KL-like budget δ
    (``apply_cactus_constraint``, ``cactus_accept_ratio``)."""

    name = "cactus"
    modes = Modes(strict_knobs={"delta": 0.0}, greedy_is_exact=True, loosening={"delta": (0.0, 0.1, 0.25, 1.0, 10.0)})
    origin = Origin(Fidelity.REFERENCE, RelaxedTarget.REFERENCE,
                    "CACTUS: accept with gamma/q, gamma = min(p + sqrt(2 delta p(1-p)), 1); residual (H_x - q)+",
                    revision=1)  # top-p ties keep the higher ids (vLLM, transformers)

    class Knobs(Spec):
        delta: Number = Field(0.1, ge=0)

    def relaxed_target(self, batch):
        p_x = batch.p_of_drafts
        gamma = (p_x + torch.sqrt(2 * self.knobs.delta * p_x * (1 - p_x))).clamp(0, 1)
        return gamma, lambda n: cactus_rows(batch.p_at(n), at_positions(batch.drafts, n), at_positions(gamma, n))


@register_policy
class SpecCascadeOpt(RelaxedTarget):
    """Speculative cascades, the [OPT] deferral rule (Narasimhan et al., arXiv 2405.19261):
    ``spec_cascade_opt_defer_mask``."""

    name = "casc-opt"
    modes = Modes(strict_knobs={"alpha": -math.inf}, greedy_is_exact=True,
                  loosening={"alpha": (-math.inf, -0.1, 0.0, 0.05, 1.0)})
    origin = Origin(Fidelity.REFERENCE, RelaxedTarget.REFERENCE,
                    "spec-cascade OPT: pi = q unless max q < max p - alpha*TV(p, q) (then pi = p, strict test)",
                    revision=1)  # top-p ties keep the higher ids (vLLM, transformers)

    class Knobs(Spec):
        alpha: Number = -0.1

    def uses_q(self, batch: Batch) -> torch.Tensor:
        """[T] not ``max q < max p − α·TV(p, q)`` (α = −inf: never, without TV)."""
        if self.knobs.alpha == -math.inf:
            return torch.zeros(batch.total_drafts, dtype=torch.bool, device=batch.device)
        p, q = pair_rows(batch)
        tv = (p - q).clamp_min_(0).sum(dim=-1)
        return ~(q.amax(dim=-1) < p.amax(dim=-1) - self.knobs.alpha * tv)

    def relaxed_target(self, batch):
        return switch_p_q(batch, self.uses_q(batch))


@register_policy
class SpecCascadeToken(RelaxedTarget):
    """Speculative cascades, the token-level rule ("Tok3"): ``spec_cascade_tok3_top_mask_from_logits``,
    ``apply_spec_cascade_tok3_constraint``. α = 0 is not strict (the single first argmax); α < 0 is."""

    name = "casc-tok"
    modes = Modes(strict_knobs={"alpha": -1.0}, greedy_is_exact=True,
                  loosening="alpha moves the top set T and the mixture weight η together: a larger α can lower "
                            "π(d) for a draft outside T")
    origin = Origin(Fidelity.REFERENCE, RelaxedTarget.REFERENCE,
                    "spec-cascade Tok3: pi = q on the target's top set T_alpha plus q(outside T)*p; alpha<0: strict",
                    revision=2)  # 2: top-p ties keep the higher ids (vLLM); 1: alpha = 0, the first argmax alone

    class Knobs(Spec):
        alpha: Number = Field(0.0, le=1)  # alpha < 0 empties the top set: strict

    def top_set(self, logits: torch.Tensor) -> torch.Tensor:
        """[N, V] T_α of rows of raw logits (α ≥ 0), finite logits only, as a float32 indicator (1 inside, 0
        outside): the rule reads it through products, exact on the probabilities it multiplies, where a bool mask
        would cost a slow mixed-type kernel on a CPU."""
        logits = logits.float()
        if self.knobs.alpha in (0, 1):
            finite = logits.nan_to_num(-math.inf, -math.inf, -math.inf)  # NaN and +inf outside every top set
            if self.knobs.alpha == 1:
                return (finite > -math.inf).float()
            # the single argmax of the finite logits (first index on ties), as the reference
            top_value, top_index = row_max(finite)
            return finite.zero_().scatter_(-1, top_index.unsqueeze(-1),  # the copy reused for the indicator
                                           torch.isfinite(top_value).unsqueeze(-1).float())
        # z >= max z + ln(1 − α) on the raw row: a NaN or +inf maximum makes T empty (as the reference's
        # finite & (z >= bound)); with a finite maximum, -inf logits fail the bound
        top_value = logits.amax(dim=-1, keepdim=True)
        return (torch.isfinite(top_value) & (logits >= top_value + math.log1p(-self.knobs.alpha))).float()

    def parts(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(T_α [N, V] of every target row as an indicator, η [B, K] = q's mass outside T at each draft position)."""
        top = self.top_set(batch.target.source)
        pair_top = top.index_select(0, batch.target_rows_of_pairs())
        q = batch.q.index_select(0, batch.q_rows_of_pairs())
        eta = (1 - pair_top).mul_(q).sum(dim=-1)  # q where outside T, exactly 0 inside (q is finite)
        return top, batch.per_position(eta)

    def relaxed_target(self, batch):
        if self.knobs.alpha < 0:  # T_α is empty and η = Σq = 1: π = p (exactly, not up to Σq's rounding)
            return batch.p_of_drafts, batch.p_at
        top, eta = self.parts(batch)
        in_top = top[batch.target.index[:, :-1], batch.drafts]

        def residual(n: torch.Tensor) -> torch.Tensor:
            row_top = top.index_select(0, batch.target.index.gather(1, n.unsqueeze(-1)).squeeze(-1))
            return batch.q_at(n) * row_top + at_positions(eta, n).unsqueeze(-1) * batch.p_at(n)

        return batch.q_of_drafts * in_top + eta * batch.p_of_drafts, residual


def safe_log(probs: torch.Tensor) -> torch.Tensor:
    """``log max(p, float32 tiny)``: zeros map to a finite value, so 0·log 0 = 0 (the reference's clamp)."""
    return probs.clamp_min(torch.finfo(probs.dtype).tiny).log_()


def divergence(p: torch.Tensor, q: torch.Tensor, kind: str) -> torch.Tensor:
    """JS(p, q) or KL(p‖q) in nats along the last dimension (0·log 0 = 0; q = 0 under p > 0 counts as the smallest
    float, as the reference does)."""
    def plogr(a: torch.Tensor, log_a: torch.Tensor, log_b: torch.Tensor) -> torch.Tensor:  # Σ a·(log a − log b)
        return log_a.sub_(log_b).mul_(a).sum(dim=-1)  # in place on log_a: the same products, no [T, V] allocation

    if kind == "kl":
        return plogr(p, safe_log(p), safe_log(q))
    log_m = (p + q).mul_(0.5).clamp_min_(torch.finfo(p.dtype).tiny).log_()  # safe_log(0.5·(p + q)), in place
    return 0.5 * (plogr(p, safe_log(p), log_m) + plogr(q, safe_log(q), log_m))


@register_policy
class FuzzySpeculative(RelaxedTarget):
    """Reducible Fuzzy SD (Holsman et al., arXiv 2502.20704): use the draft's distribution where it is close
    (``fsd_divergence_scores``, ``rfsd_use_draft_mask``)."""

    name = "fuzzy"
    modes = Modes(strict_knobs={"threshold": 0.0}, greedy_is_exact=True,
                  loosening={"threshold": (0.0, 0.05, 0.2, 0.3, 1.0)})
    origin = Origin(Fidelity.REFERENCE, RelaxedTarget.REFERENCE,
                    "reducible fuzzy SD: pi = q where D(p, q) <= T (JS by default), else p",
                    revision=1)  # top-p ties keep the higher ids (vLLM, transformers)

    class Knobs(Spec):
        threshold: Number = Field(0.05, ge=0)
        divergence: Literal["js", "kl"] = "js"

    def uses_q(self, batch: Batch) -> torch.Tensor:
        p, q = pair_rows(batch)
        return divergence(p, q, self.knobs.divergence) <= self.knobs.threshold

    def relaxed_target(self, batch):
        return switch_p_q(batch, self.uses_q(batch))


@register_policy
class StaticEnsemble(RelaxedTarget):
    """Static ensemble ``w·p + (1−w)·q`` (the DIVERSED paper's baseline; ``static_ensemble_accept_ratio``); w = 0
    is the always-accept baseline. Under greedy decoding exact match, as the reference (transformers' greedy
    DIVERSED, which compares the draft with the mixture's argmax, is the rule ``diversed``)."""

    name = "ensemble"
    modes = Modes(strict_knobs={"w": 1.0}, greedy_is_exact=True, loosening={"w": (1.0, 0.95, 0.9, 0.8, 0.0)})
    origin = Origin(Fidelity.REFERENCE, RelaxedTarget.REFERENCE,
                    "static ensemble: pi = w p + (1-w) q, accept ratio (1-w) + w p/q; w=0 always accepts",
                    revision=1)  # top-p ties keep the higher ids (vLLM, transformers)

    class Knobs(Spec):
        w: Number = Field(0.95, ge=0, le=1)

    def relaxed_target(self, batch):
        w = self.knobs.w
        return (1 - w) * batch.q_of_drafts + w * batch.p_of_drafts, batch.p_at


@register_policy
class SpeculativeContrastive(RelaxedTarget):
    """Speculative contrastive decoding (SCD): the target contrasted against the draft as an amateur
    (``apply_scd_constraint``, ``scd_expert_toppk_gated``). It relaxes the target — the residual and so the output
    distribution — not the acceptance test: with the same uniforms it never accepts what speculative sampling
    rejects."""

    name = "contrastive"
    modes = Modes(supported={"sampling"}, strict_knobs={"beta": 0.0},  # greedy refused: the reference raises there
                  loosening="β relaxes the residual (the output distribution), not the acceptance test")
    origin = Origin(Fidelity.REFERENCE, RelaxedTarget.REFERENCE,
                    "speculative contrastive decoding: pi ~ exp(((1+beta) z_p - beta z_q)/T) on p's plausible support",
                    revision=1)  # top-p ties keep the higher ids (vLLM, transformers)

    class Knobs(Spec):
        beta: Number = Field(0.1, ge=0)
        alpha: Number = Field(0.0, ge=0, le=1)  # plausibility cut z_p >= max z_p + T ln(alpha); 0 = off

    def relaxed_target(self, batch):
        rows = batch.target_rows_of_pairs()
        z_p = batch.target.source.index_select(0, rows).float()  # [T, V]
        z_q = batch.draft_logit_rows.index_select(0, batch.q_rows_of_pairs())
        # a draft vocabulary padded to the target's width has -inf columns: a non-finite z_q takes the row's
        # smallest finite one (raised to it by a maximum: float operations only, no mask)
        lowest = z_q.nan_to_num(math.inf, math.inf, math.inf).amin(dim=-1, keepdim=True)
        z_q = torch.maximum(z_q.nan_to_num_(-math.inf, -math.inf, -math.inf), lowest, out=z_q)
        # log of the support p > 0: 0 on it, -inf off it (p >= 0), added to the scores instead of a masked fill
        log_support = batch.p.index_select(0, rows).sign_().log_()
        shared = batch.sampling.uniform
        if shared is not None:
            temperature = shared.temperature
        else:
            temperature = batch.sampling.temperature[batch.pairs[0]].unsqueeze(-1)
        if self.knobs.alpha > 0:
            implausible = ~(z_p >= z_p.amax(dim=-1, keepdim=True) + temperature * math.log(self.knobs.alpha))
            log_support = log_support.masked_fill_(implausible, -math.inf)
        # ((1 + β)·z_p − β·z_q) / T + log support, in place on the rows gathered above (the same float operations)
        scores = z_p.mul_(1 + self.knobs.beta).sub_(z_q.mul_(self.knobs.beta)).div_(temperature).add_(log_support)
        pi = torch.softmax(scores, dim=-1, out=scores)  # [T, V], over the scores (this rule's own rows)
        pi_d = batch.per_position(pi.gather(-1, batch.drafts[batch.pairs].unsqueeze(-1)).squeeze(-1))
        return pi_d, lambda n: pi.index_select(0, at_positions(batch.pair_of, n))
