"""Margin rules: accept a draft when the target's own preference for its top token over the runner-up is slim.

``margin`` — MARS (arXiv 2601.15498), as reference: 5SSjw/MARS @ 8909b41, ``mars/model/utils.py``
``evaluate_posterior``, called from ``EaModel.eagenerate`` with the processor of ``prepare_logits_processor``; the
draft probabilities as ``retrieve_probs``. At temperature ≤ 1e-5 it is exact match, as the authors'. Above, per draft
position in order: the gate ``z2 / (z1 + 1e-10) > θ`` on the processed logits (temperature, then top-p, then top-k);
gate on: accept iff the draft is one of the two top tokens, else draw from the full ``p``; gate off: accept iff
``u ≤ min(1, p(d)/q(d))`` (q untempered, at least 1e-10; 1 without a draft distribution), else draw from ``p`` with
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

import functools
import math

import torch
from pydantic import Field

from relaxbench.ops.reductions import top_values
from tests.oracle.rows import LazyRows, row_chunk
from tests.oracle.sampling import SamplingParams, process_logits, sample
from tests.oracle.base import Block, Fidelity, Modes, Need, Origin, Verdict, VerificationPolicy, register_policy
from tests.oracle.greedy import greedy_verdict
from relaxbench.validation import Flag, Number, Spec

MARS_GREEDY_TEMPERATURE = 1e-5  # eagenerate: temperature <= 1e-5 runs without a logits processor (exact match)
MARS_RATIO_EPSILON = 1e-10  # z2 / (z1 + 1e-10)
MARS_MIN_DRAFT_PROB = 1e-10  # q(d) is clamped to at least this


def mars_gate(processed: torch.Tensor, theta: float, positive_top_only: bool = False) -> tuple[bool, list[int]]:
    """(gate on, the two ``topk`` indices) for one row of processed logits [V]: ``z2 / (z1 + 1e-10) > θ`` in
    double; off with fewer than 2 tokens (and, with ``positive_top_only``, where ``z1 ≤ 0``)."""
    values, indices = torch.topk(processed, min(2, int(processed.shape[-1])))
    if values.shape[0] < 2:
        return False, indices.tolist()
    z1, z2 = values.tolist()
    gate = z2 / (z1 + MARS_RATIO_EPSILON) > theta and not (positive_top_only and z1 <= 0)
    return gate, indices.tolist()


@register_policy
class Margin(VerificationPolicy):
    name = "margin"
    needs = frozenset({Need.DRAFT_PROBS_IF_ANY})
    modes = Modes(strict_knobs={"theta": math.inf}, lossy={"sampling"}, greedy_is_exact=True, greedy_drafts=True)
    origin = Origin(Fidelity.REFERENCE, "5SSjw/MARS@8909b41 mars/model/utils.py evaluate_posterior",
                    "MARS: under sampling accept a top-2 draft when z2/(z1+1e-10) > theta, else rejection sampling; "
                    "temperature 0: exact match",
                    revision=1)

    class Knobs(Spec):
        theta: Number = 0.9  # relaxation_threshold
        positive_top_only: Flag = False  # deviation, off by default: no relaxation where z1 <= 0


    def decide(self, block: Block) -> Verdict:
        if block.greedy or block.sampling.temperature <= MARS_GREEDY_TEMPERATURE:
            return greedy_verdict(block)
        theta, guard = self.knobs.theta, self.knobs.positive_top_only
        chunk = row_chunk(block.target_logits.device, block.k + 1)
        target = LazyRows(block.target_logits, functools.partial(mars_rows, sampling=block.sampling), chunk)
        draft = (LazyRows(block.draft_logits, untempered_log_probs, chunk) if block.draft_logits is not None
                 else None)
        u = torch.rand(block.k, generator=block.generator, dtype=torch.float64, device=block.draft_tokens.device)
        n_relaxed = 0
        for i, token in enumerate(block.draft_tokens.tolist()):  # rows after a rejection are never computed
            z, p = target[i].unbind(0)
            gate, top2 = mars_gate(z, theta, guard)
            p_d = float(p[token])
            q_d = max(float(draft[i][token].exp()), MARS_MIN_DRAFT_PROB) if draft is not None else 1.0
            passes = float(u[i]) <= min(1.0, p_d / q_d)
            if gate:
                if token not in top2:  # the gate rejects: the next token comes from the full p
                    return Verdict(i, int(sample(p, block.generator)), n_relaxed)
                n_relaxed += not passes
            elif not passes:  # the rejected token keeps max(0, p − q) of its mass (0: p < q here)
                residual = p.clone()
                residual[token] = max(0.0, p_d - q_d)
                return Verdict(i, int(sample(residual, block.generator)), n_relaxed)
        return Verdict(block.k, int(sample(target[block.k][1], block.generator)), n_relaxed)


def mars_rows(logits: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
    """[..., 2, V]: MARS's processed logits (temperature, top-p, top-k) and their softmax."""
    processed = process_logits(logits, sampling, top_p_first=True)
    return torch.stack([processed, torch.softmax(processed, dim=-1)], dim=-2)


def untempered_log_probs(logits: torch.Tensor) -> torch.Tensor:
    """MARS's ``retrieve_probs`` before the exp: the draft's log-softmax, untempered and untruncated."""
    return torch.log_softmax(logits.float(), dim=-1)


def top2_ratio_accepts(block: Block, rows: torch.Tensor, theta: float) -> torch.Tensor:
    """[m] the greedy variant's relaxation at draft positions ``rows``: the draft holds the second-largest logit (or
    ties it), ``z_(1) > 0`` and ``z_(2)/z_(1) > θ``."""
    z1, z2 = top_values(block.target_logits[rows], 2).double().unbind(-1)
    is_top2 = block.target_logit_of_drafts(rows).double() >= z2
    return is_top2 & (z1 > 0) & (z2 / z1 > theta)


@register_policy
class MarginGreedy(VerificationPolicy):
    name = "margin-greedy"
    modes = Modes(supported={"greedy"}, strict_knobs={"theta": 1.0})
    origin = Origin(Fidelity.VARIANT, "MARS's rule applied to greedy decoding; not in the authors' code",
                    "MARS's ratio applied to greedy decoding: accept a top-2 draft when z2/z1 > theta "
                    "(z1 <= 0: strict)")

    class Knobs(Spec):
        theta: Number = Field(0.9, ge=0)

    def decide(self, block: Block) -> Verdict:
        theta = self.knobs.theta
        if theta >= 1:
            return greedy_verdict(block)
        return greedy_verdict(block, lambda rows: top2_ratio_accepts(block, rows, theta))


@register_policy
class MarginFirst(VerificationPolicy):
    name = "margin-first"
    modes = Modes(supported={"greedy"}, strict_knobs={"kappa": math.inf})
    origin = Origin(Fidelity.PAPER, "arXiv 2609.02897 (AdaptiveSpec)",
                    "AdaptiveSpec: promote the first mismatch of a block iff p(d)/p(top1) >= kappa")

    class Knobs(Spec):
        kappa: Number = Field(0.5, ge=0)

    def decide(self, block: Block) -> Verdict:
        kappa = self.knobs.kappa
        if kappa > 1:
            return greedy_verdict(block)

        def promote_first(rows: torch.Tensor) -> torch.Tensor:  # only the block's first mismatch can pass
            accept = torch.zeros_like(rows, dtype=torch.bool)
            if kappa == 0:
                accept[0] = True
            else:
                first = rows[:1]
                gap = block.target_logit_of_drafts(first).double() - block.target_logits[first].amax(-1).double()
                accept[0] = bool(gap[0] >= math.log(kappa))  # ln p(d)/p(top1) >= ln κ
            return accept

        return greedy_verdict(block, promote_first)
