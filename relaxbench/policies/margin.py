"""Margin rules: accept a draft when the target's own preference for its top token over the runner-up is slim.

``margin`` — MARS (arXiv 2601.15498), as reference: 5SSjw/MARS @ 8909b41, ``mars/model/utils.py``
``evaluate_posterior``, called from ``EaModel.eagenerate`` with the processor of ``prepare_logits_processor``; the
draft probabilities as ``retrieve_probs``. At temperature ≤ 1e-5 it is exact match, as the authors'. Above, per draft
position in order: the gate ``z2 / (z1 + 1e-10) > θ`` on the processed logits (temperature, then top-p, then top-k,
as transformers' warpers: top-k by value, top-p keeping the higher ids among tokens tied at its cut);
gate on: accept iff the draft is one of the two top tokens, else draw from the full ``p``; gate off: accept iff
``u ≤ min(1, p(d)/q(d))`` (u float64 as ``random.random()``, on every path; q untempered, at least 1e-10; 1
without a draft distribution), else draw from ``p`` with
the draft's mass reduced to ``max(0, p − q)``; the bonus from ``p``. Drafts are the drafter's top-1 path. The
line-by-line mapping to the reference and the tests is in docs/conformance.md.

Deviations (why, in docs/conformance.md):

* a chain, not a tree (no sibling candidates, deduplication or padding);
* float32 processed logits from the engine's logits;
* the engine's random numbers (the authors': ``random.random()``, ``torch.multinomial``);
* ties for the runner-up broken by ``torch.topk`` on CPU (the authors run on GPU);
* knob ``positive_top_only`` (off by default; not in the authors' code): no gate where ``z1 ≤ 0``.

``margin-greedy`` — variant: the paper's rule applied to greedy decoding; not in the authors' code. Accept the argmax,
or a draft holding the second-largest raw logit (a tie with the third counts) when ``z_(1) > 0`` (our guard) and
``z_(2)/z_(1) > θ``; next token the argmax; ``θ ≥ 1`` is strict.

``margin-first`` — AdaptiveSpec's margin rule (arXiv 2609.02897), as paper (no public code found): only the first
mismatch ``j`` of the block may be promoted, iff ``z_d − z_(1) ≥ ln κ``; every other position is exact match; κ = 0.5
is ours (the paper tunes it); ``κ > 1`` is strict. Greedy only.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from relaxbench.ops.reductions import top_values
from relaxbench.ops.sampling import process_rows, softmax_of_processed
from relaxbench.policies.base import (Batch, Fidelity, Judgement, Modes, Need, Origin, VerificationPolicy,
                                      register_policy)
from relaxbench.policies.greedy import greedy_judgement
from relaxbench.policies.rejection import draw_at
from relaxbench.validation import Flag, Number, Spec

MARS_GREEDY_TEMPERATURE = 1e-5  # eagenerate: temperature <= 1e-5 runs without a logits processor (exact match)
MARS_RATIO_EPSILON = 1e-10  # z2 / (z1 + 1e-10)
MARS_MIN_DRAFT_PROB = 1e-10  # q(d) is clamped to at least this


def mars_gate(top2: torch.Tensor, theta: float, positive_top_only: bool = False) -> torch.Tensor:
    """[N] bool: the gate ``z2 / (z1 + 1e-10) > θ`` of rows whose two largest processed logits are ``top2`` [N, 2]
    (in double, as the authors' Python floats); off with fewer than 2 tokens (and, with ``positive_top_only``,
    where ``z1 ≤ 0``)."""
    if top2.shape[-1] < 2:
        return torch.zeros(top2.shape[:-1], dtype=torch.bool, device=top2.device)
    z1, z2 = top2.double().unbind(-1)
    gate = z2 / (z1 + MARS_RATIO_EPSILON) > theta
    return gate & ~(z1 <= 0) if positive_top_only else gate


@register_policy
class Margin(VerificationPolicy):
    name = "margin"
    needs = frozenset({Need.DRAFT_PROBS_IF_ANY})
    modes = Modes(strict_knobs={"theta": math.inf}, lossy={"sampling"}, greedy_is_exact=True, greedy_drafts=True,
                  loosening="the gate can also reject: a gated draft outside the top 2 is rejected where the "
                            "ratio test alone might accept it")
    origin = Origin(Fidelity.REFERENCE, "5SSjw/MARS@8909b41 mars/model/utils.py evaluate_posterior",
                    "MARS: under sampling accept a top-2 draft when z2/(z1+1e-10) > theta, else rejection sampling; "
                    "temperature 0: exact match",
                    revision=2)  # 2: the loop keeps the float64 uniforms (it rounded them to float32)
    uniform_dtype = torch.float64  # the authors' random.random(), on every path that builds a batch

    class Knobs(Spec):
        theta: Number = 0.9  # relaxation_threshold (any real, as MARS: below 0 the gate never closes)
        positive_top_only: Flag = False  # deviation, off by default: no relaxation where z1 <= 0

    def judge(self, batch: Batch) -> Judgement:
        shared = batch.sampling.uniform
        if batch.sampling.all_greedy or (shared is not None and shared.temperature <= MARS_GREEDY_TEMPERATURE):
            return greedy_judgement(batch)
        sampled = self.sampled(batch)
        if shared is not None:
            return sampled
        return greedy_judgement(batch).where(batch.sampling.temperature <= MARS_GREEDY_TEMPERATURE, sampled)

    def sampled(self, batch: Batch) -> Judgement:
        """Per position: the gate on the processed logits (temperature, top-p, top-k); gated, a top-2 draft is
        accepted and any other rejected; else ``u ≤ min(1, p(d)/q(d))``. At a gated rejection the next token comes
        from the full p; at a ratio rejection from p with the draft's mass reduced to max(0, p − q)."""
        if batch.tempered_is_p:  # a temperature alone: MARS's order of the cuts is moot and p is the batch's own
            # the gate and the top two at the draft positions only (the bonus rows are never tested)
            drafts_processed = process_rows(batch.target_draft_rows, batch.pair_sampling, top_p_first=True)
            p = batch.p  # so a request with no drafts draws its bonus from p as the plain step would
        else:
            processed = process_rows(batch.target.source, batch.row_sampling, top_p_first=True)
            drafts_processed = processed.index_select(0, batch.target_rows_of_pairs())
            p = softmax_of_processed(processed, batch.target.source)  # over the processed copy, read above
        values, indices = torch.topk(drafts_processed, min(2, int(drafts_processed.shape[-1])), dim=-1)
        gate = batch.per_position(mars_gate(values, self.knobs.theta, self.knobs.positive_top_only), False)
        top2 = batch.per_position(indices, -1)  # [B, K, 2]
        in_top2 = (top2 == batch.drafts.unsqueeze(-1)).any(dim=-1)
        rows = batch.target.index
        p_d = p[rows[:, :-1], batch.drafts].double()
        if batch.has_draft_distribution:
            log_q = torch.log_softmax(batch.draft_logit_rows, dim=-1)  # retrieve_probs: untempered, untruncated
            q_d = log_q[batch.q_index, batch.drafts].exp().double().clamp_min(MARS_MIN_DRAFT_PROB)
        else:
            q_d = torch.ones_like(p_d)
        passes = batch.accept_u.double() <= torch.clamp(p_d / q_d, max=1.0)
        accept = torch.where(gate, in_top2, passes)
        full_row = gate | ~batch.valid  # a gated rejection (or the bonus) draws from the full p

        def row_at(n: torch.Tensor) -> torch.Tensor:
            return p.index_select(0, rows.gather(1, n.unsqueeze(-1)).squeeze(-1))

        def next_token(n: torch.Tensor) -> torch.Tensor:
            row = row_at(n)  # p's row at n: the residual's base, and the bonus row where n = k
            at = n.clamp_max(batch.width - 1).unsqueeze(-1)
            reduced = (p_d.gather(1, at) - q_d.gather(1, at)).clamp_min(0).float()
            trimmed = row.scatter(-1, batch.drafts.gather(1, at), reduced)
            return draw_at(batch, n, torch.where(full_row.gather(1, at), row, trimmed), row)

        return Judgement(accept, gate & in_top2 & ~passes, next_token, plain_when_empty=batch.tempered_is_p)


def top2_ratio_accepts(batch: Batch, theta: float) -> torch.Tensor:
    """[B, K] the greedy variant's relaxation: the draft holds the second-largest logit (or ties it), ``z_(1) > 0``
    and ``z_(2)/z_(1) > θ``."""
    z1, z2 = batch.target.of(top_values(batch.target.source, 2).double())[:, :-1].unbind(-1)
    is_top2 = batch.target_logit_of_drafts.double() >= z2
    return is_top2 & (z1 > 0) & (z2 / z1 > theta)


@register_policy
class MarginGreedy(VerificationPolicy):
    name = "margin-greedy"
    modes = Modes(supported={"greedy"}, strict_knobs={"theta": 1.0},
                  loosening={"theta": (1.0, 0.95, 0.9, 0.8, 0.5, 0.0)})
    origin = Origin(Fidelity.VARIANT, "MARS's rule applied to greedy decoding; not in the authors' code",
                    "MARS's ratio applied to greedy decoding: accept a top-2 draft when z2/z1 > theta "
                    "(z1 <= 0: strict)")

    class Knobs(Spec):
        theta: Number = Field(0.9, ge=0)

    def judge(self, batch: Batch) -> Judgement:
        theta = self.knobs.theta
        if theta >= 1:
            return greedy_judgement(batch)
        return greedy_judgement(batch, top2_ratio_accepts(batch, theta))


@register_policy
class MarginFirst(VerificationPolicy):
    name = "margin-first"
    modes = Modes(supported={"greedy"}, strict_knobs={"kappa": math.inf},
                  loosening={"kappa": (math.inf, 0.9, 0.5, 0.1, 0.0)})
    origin = Origin(Fidelity.PAPER, "arXiv 2609.02897 (AdaptiveSpec)",
                    "AdaptiveSpec: promote the first mismatch of a block iff p(d)/p(top1) >= kappa")

    class Knobs(Spec):
        kappa: Number = Field(0.5, ge=0)

    def judge(self, batch: Batch) -> Judgement:
        kappa = self.knobs.kappa
        if kappa > 1:
            return greedy_judgement(batch)
        mismatch = ~batch.matches & batch.valid
        first = mismatch & (mismatch.long().cumsum(dim=-1) == 1)  # only the block's first mismatch can pass
        if kappa == 0:
            return greedy_judgement(batch, first)
        top = batch.target.of(batch.target.source.amax(dim=-1).double())[:, :-1]
        gap = batch.target_logit_of_drafts.double() - top  # ln p(d)/p(top1)
        return greedy_judgement(batch, first & (gap >= math.log(kappa)))
