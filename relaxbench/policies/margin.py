"""Margin rules: accept a draft when the target's own preference for its top token over the runner-up is slim.

``margin`` — MARS (arXiv 2601.15498), as reference: 5SSjw/MARS @ 8909b41, ``mars/model/utils.py``
``evaluate_posterior`` (L594–731), called from ``EaModel.eagenerate`` (``mars/model/ea_model.py`` L214–310) with
the processor of ``prepare_logits_processor`` (utils.py L298–318). For a chain of k drafts, line by line:

* temperature ≤ 1e-5 (``eagenerate`` L230–234 sets no logits processor; ``evaluate_posterior`` L622–635): exact
  match on the raw logits, next token the argmax. The authors do not relax at temperature 0, so neither does
  ``margin`` (see ``margin-greedy`` for the paper's rule applied to greedy decoding).
* temperature T > 0, per draft position i in order (L637–723), stopping at the first rejection:
  - ``z = processor(z_i)``, the processed logits (L646–649): divided by T, then top-p, then top-k when the run sets
    them — HF's ``TemperatureLogitsWarper``, ``TopPLogitsWarper``, ``TopKLogitsWarper`` in that order (top-p
    *before* top-k, unlike the run's own order); ``p = softmax(z)`` (L650);
  - ``z1, z2`` and their indices = ``topk(z, 2)`` (L653); ratio ``z2 / (z1 + 1e-10)`` in double (L656);
    the gate is ``ratio > θ`` (L657; strict). No guard for ``z1 ≤ 0``: two negative logits give a ratio above 1
    (the gate is on however wide the gap), and ``z1 < 0`` with ``z2 = −inf`` (cut by top-k/top-p) gives ``+inf``;
    ``z1 > 0 > z2`` or ``z1 = 0`` give a ratio below any θ ≥ 0. With fewer than 2 tokens the gate is off (L670–674);
  - gate on (L688–700): accept iff ``d_i`` is one of the two ``topk`` indices — no random number, no probability
    check (a token cut to p = 0 can be accepted when the ratio is ``+inf``). On a rejection the next token is drawn
    from the full ``p`` of that position (L724–729; the draft itself included);
  - gate off (L701–723): accept iff ``u ≤ min(1, p(d_i)/q(d_i))`` with ``u ~ U[0, 1)`` and ``q(d_i)`` the draft
    model's probability of its token, at least 1e-10 (``retrieve_probs``: the *untempered* softmax of the draft
    logits, without top-k/top-p, ``cnets.py`` L713–720), or 1 when the drafter has no distribution
    (``retrieve_probs is None``). On a rejection ``p(d_i)`` becomes ``max(0, p(d_i) − q(d_i))`` and the next token is
    drawn from ``p`` renormalised (L719–729). (A rejection implies ``p(d_i) < q(d_i)``, so ``d_i`` loses all its mass:
    the residual is ``p`` without ``d_i``, not ``(p − q)+``.)
  - bonus token, all k accepted: drawn from the processed ``p`` of the last row (L724–729).
  Default θ = 0.9 (``relaxation_threshold`` in ``evaluate_posterior`` L599, ``eagenerate`` L224, and the evaluation
  scripts; the "0.87" of the docstring is stale). θ = inf switches the gate off; then the rule is the authors' own
  rejection test, which is lossy too (its residual is not ``(p − q)+``), so the sampling mode has no lossless end.
* Drafts: EAGLE's tree expands the draft head's top-k; a chain's analogue is the drafter's top-1 path, so the policy
  asks the engine for greedy drafts (``greedy_drafts``) and reads their untempered probabilities.
* ``n_relaxed`` counts drafts the gate accepted that the gate-off test would have rejected with the same uniform.

Deviations, deliberate: a chain, not a tree (sibling candidates, their deduplication and the −1 padding, L676–687,
have no counterpart); float32 processed logits from the engine's logits (the authors run the model's dtype) and the
engine's own random numbers (the authors draw ``random.random()`` and ``torch.multinomial``); ties for the runner-up
are broken by ``torch.topk`` as in the reference, but on CPU (the authors run on GPU, whose order among exactly
equal logits may differ). Knob ``positive_top_only`` (off by default; not in the authors' code) switches the gate off
where ``z1 ≤ 0``, where the ratio no longer measures a margin.

``margin-greedy`` — variant: the paper's rule applied to greedy decoding; not in the authors' code. Per position:
accept if ``d_i`` is the argmax; else accept if ``d_i`` holds the second-largest raw logit (``z_d = z_(2)``; a tie
with the third counts as top-2) and ``z_(1) > 0`` and ``z_(2)/z_(1) > θ`` (default 0.9); else reject; next token
the argmax. The ``z_(1) ≤ 0`` guard is ours (the ratio is meaningless there). ``θ ≥ 1`` is strict (exact match).

``margin-first`` — AdaptiveSpec's margin rule (arXiv 2609.02897, "Margins, Not Windows"), as paper (no public code
found). Only the **first** mismatch ``j`` of the block may be promoted: accept ``d_j`` iff ``p(d_j)/p(top1_j) ≥ κ``,
i.e. ``z_d − z_(1) ≥ ln κ`` (computed from logits; no softmax). Every other position is exact match, so the block
goes on past ``j`` only while the drafts keep matching. The paper tunes κ per model and task (its default is
unverified); ours is 0.5. ``κ > 1`` is strict (``inf`` in the YAMLs). AdaptiveSpec's dynamic tree is a drafter
feature and is not part of this rule. Greedy only (the paper defines no sampling rule); ratios and gaps in double.

Loosening: smaller θ (``margin-greedy``; in ``margin``'s sampling mode a smaller θ turns the gate on at more
positions, where it can also *reject* a draft outside the top 2 that the rejection test would have accepted, so
it is not monotone); smaller κ.
"""

from __future__ import annotations

import functools
import math

import torch
from pydantic import Field

from relaxbench.ops.reductions import top_values
from relaxbench.ops.rows import LazyRows, row_chunk
from relaxbench.ops.sampling import SamplingParams, process_logits, sample
from relaxbench.policies.base import Block, Fidelity, Modes, Need, Origin, Verdict, VerificationPolicy, register_policy
from relaxbench.policies.greedy import greedy_verdict
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
