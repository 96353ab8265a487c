"""DIVERSED (arXiv 2604.07622) as transformers runs it: verification against the mixture ν = w·p + (1 − w)·q.

Reference: huggingface/transformers 5.23.0 (our pinned dependency), ``src/transformers/generation/utils.py``:
``GenerationMixin._assisted_decoding`` (the greedy branch under ``assistant_ensemble_weight``) and
``_speculative_sampling`` (the sampling branch); the knob is ``GenerationConfig.assistant_ensemble_weight``. The
conformance test calls both (tests/test_diversed.py); the mapping is in docs/conformance.md.

* Greedy: the draft at each position is accepted iff it is the argmax of ν = w·softmax(z_p) + (1 − w)·softmax(z_q);
  the next token is the mixture's argmax at the first rejection (the token transformers selects there), the
  target's argmax after a full accept. It can reject a draft that is the target's argmax (the mixture's argmax is
  elsewhere) and accept one that is not; ``n_relaxed`` counts the accepted drafts that are not the target's argmax.
* Sampling: ``u ≤ 1 − w + w·p(d)/q(d)`` (transformers' ratio, in float32, the draft's uniform ``u``); after a
  rejection ``norm((p − q)+)`` (equal to ``norm((ν − q)+)``), or p where that residual has no mass; the bonus from
  p. ``n_relaxed`` counts acceptances speculative sampling would have rejected with the same uniforms.

``ensemble`` (Xia et al.'s static ensemble) has the same sampling rule; under greedy decoding it is exact match.

Deviations (why, in docs/conformance.md):

* w = 1 is accepted as the strict end (transformers takes w in (0, 1), None for lossless decoding: w = 1 gives the
  same verdicts as None);
* the token after a rejection drawn by inverse CDF from the request's uniform (transformers: ``torch.multinomial``
  from the global generator; the same distribution), and the residual's no-mass test at float32's ``tiny`` taken on
  our float32 rows;
* ties in the mixture's argmax broken as ``torch.argmax`` does (the first index), as transformers; p and q cut by
  top-k/top-p as transformers' warpers cut them (ties with the k-th kept; the higher ids kept among tokens tied at
  the top-p cut).
"""

from __future__ import annotations

import torch
from pydantic import Field

from relaxbench.ops.reductions import argmax
from relaxbench.policies.base import (Batch, Fidelity, Judgement, Modes, Need, Origin, VerificationPolicy,
                                      register_policy)
from relaxbench.policies.rejection import draw_after
from relaxbench.policies.verdict import by_mode
from relaxbench.validation import Number, Spec

TINY = torch.finfo(torch.float32).tiny  # transformers: p_prime_sum <= torch.finfo(p_prime.dtype).tiny


@register_policy
class Diversed(VerificationPolicy):
    name = "diversed"
    needs = frozenset({Need.DRAFT_PROBS})
    modes = Modes(strict_knobs={"assistant_ensemble_weight": 1.0},
                  loosening="w mixes p and q: under sampling a lower w only adds acceptances, but under greedy "
                            "decoding the mixture's argmax moves with w, so a draft that is not the drafter's argmax "
                            "can be accepted at one w and rejected at a lower one")
    origin = Origin(Fidelity.REFERENCE,
                    "huggingface/transformers@v5.23.0 src/transformers/generation/utils.py _speculative_sampling, "
                    "_assisted_decoding (assistant_ensemble_weight)",
                    "DIVERSED (transformers): greedy accepts the argmax of w p + (1-w) q; sampling accepts with "
                    "1 - w + w p/q",
                    revision=1)  # top-p ties keep the higher ids (vLLM, transformers)

    class Knobs(Spec):
        assistant_ensemble_weight: Number = Field(0.95, gt=0, le=1)  # w; 1 = lossless (transformers: None)

    def judge(self, batch: Batch) -> Judgement:
        return by_mode(batch, lambda: self.greedy(batch), lambda: self.sampled(batch))

    def greedy(self, batch: Batch) -> Judgement:
        w = self.knobs.assistant_ensemble_weight
        p = torch.softmax(batch.target_draft_rows.float(), dim=-1)  # [T, V]
        q_rows = batch.draft_logit_rows.index_select(0, batch.q_rows_of_pairs())
        q = torch.softmax(q_rows, dim=-1, out=q_rows)  # over the gathered copy
        picked = batch.per_position(argmax(p.mul_(w).add_(q.mul_(1.0 - w))))  # [B, K] the mixture's argmax (in place)
        accept = batch.drafts == picked
        bonus = batch.target_argmax.gather(1, batch.num_drafts.unsqueeze(-1)).squeeze(-1)

        def next_token(n: torch.Tensor) -> torch.Tensor:
            at = picked.gather(1, n.clamp_max(batch.width - 1).unsqueeze(-1)).squeeze(-1)
            return torch.where(n >= batch.num_drafts, bonus, at)

        return Judgement(accept, accept & ~batch.matches, next_token, plain_when_empty=True)  # n = 0 = k: the argmax

    def sampled(self, batch: Batch) -> Judgement:
        w = self.knobs.assistant_ensemble_weight
        p_d, q_d = batch.p_of_drafts, batch.q_of_drafts
        ratio = 1.0 - w + w * (p_d / q_d)
        accept = batch.accept_u <= ratio
        relaxed = accept & ~(batch.accept_u * q_d < p_d)

        def residual(n: torch.Tensor) -> torch.Tensor:
            position = n.clamp_max(batch.width - 1)
            p = batch.p_at(position)
            weights = (p - batch.q_at(position)).clamp_min_(0)
            total = weights.sum(dim=-1, keepdim=True)
            return torch.where(total > TINY, weights / total, p)

        return Judgement(accept, relaxed, draw_after(batch, residual, batch.p_at), plain_when_empty=True)
