"""TensorRT-LLM's relaxed acceptance for MTP (DeepSeek-R1's thinking phase), greedy.

Reference: NVIDIA/TensorRT-LLM @ b35ac1b, ``cpp/tensorrt_llm/kernels/speculativeDecoding/mtpKernels.cu``
``mtpRelaxedAcceptanceKernel``, fed by ``tensorrt_llm/_torch/speculative/mtp.py`` (``process_generation_logits``:
``softmax`` of the target's logits; ``topk_kernel``: ``torch.topk`` of those probabilities, ``relaxed_topk`` of
them) and configured by ``MTPDecodingConfig`` (``use_relaxed_acceptance_for_thinking``, ``relaxed_topk``,
``relaxed_delta``, ``begin_thinking_phase_token``, ``end_thinking_phase_token``). Per draft position, in order:
the threshold is p(top-1) − δ; the candidates are the target's top-K tokens by probability, walked from the top,
the walk stopping at a candidate (after the first) whose probability is below the threshold; the draft is accepted
when it is one of the candidates walked; the first rejection ends the round, and the token after the accepted
drafts is the target's top-1 (its ``topKIndices[·][0]``) — a correction at a rejection, the bonus after a full
accept. Modular MAX exposes the same fields.

So a draft is accepted iff it is the top-1, or it is among the top K and p(d) ≥ p(top-1) − δ (probabilities at
temperature 1 of the raw logits, the kernel's input). Knobs: ``topk`` (K) and ``delta`` (δ); defaults K = 10,
δ = 0.6, the DeepSeek-R1 preset MAX ships (``MTPDecodingConfig``'s own defaults, K = 1 and δ = 0, are exact match).
``topk = 1`` is exact match (the strict setting). Where: the thinking span only by default (``Modes.relax_in``), as
TensorRT-LLM relaxes only between its begin- and end-of-thinking tokens; ``relax_in`` of the method changes it,
and ``policies/span.py`` lists how its span handling differs from the kernel's δ flip. The prompt is read as
TensorRT-LLM's context phase reads it (``mtp.py``: δ set when the prompt holds a begin-of-thinking token, whatever
follows it; ``span_opened_by_any_prompt_tag``), so a prompt holding ``<think>…</think>`` starts the generation
relaxed.

Deviations, deliberate: membership in the top K is by value (the draft's probability is at least the K-th largest,
so a tie with the K-th counts as in; ``torch.topk``'s order among exactly equal probabilities is unspecified), and
the top-1 is ``torch.argmax``'s (the first index of the maximum) — both matter only for exactly tied
probabilities; the comparisons are in float32 softmax of the float32 logits (the kernel compares its ``T``
probabilities cast to float). Greedy only: TensorRT-LLM applies the rule in its greedy MTP path.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field, model_validator

from relaxbench.ops.reductions import top_values
from relaxbench.policies.base import Batch, Fidelity, Judgement, Modes, Origin, VerificationPolicy, register_policy
from relaxbench.policies.greedy import greedy_judgement
from relaxbench.validation import Integer, Number, Spec


@register_policy
class RelaxedTopKDelta(VerificationPolicy):
    name = "relaxed-topk-delta"
    # TensorRT-LLM's context phase: a begin-of-thinking token anywhere in the prompt sets the request's δ
    span_opened_by_any_prompt_tag: ClassVar[bool] = True
    modes = Modes(supported={"greedy"}, strict_knobs={"topk": 1}, relax_in="thinking",
                  loosening={"delta": (0.0, 0.05, 0.3, 0.6, 1.0), "topk": (1, 2, 5, 10, 48)})
    origin = Origin(Fidelity.REFERENCE,
                    "NVIDIA/TensorRT-LLM@b35ac1b cpp/tensorrt_llm/kernels/speculativeDecoding/mtpKernels.cu "
                    "mtpRelaxedAcceptanceKernel",
                    "TensorRT-LLM's MTP relaxed acceptance: the draft is in the top K and p(d) >= p(top-1) - delta "
                    "(thinking span only by default)",
                    revision=1)  # a prompt's <think> opens the span whatever follows it, as TensorRT-LLM's context

    class Knobs(Spec):
        topk: Integer = 10  # K: candidates walked from the target's most likely token
        delta: Number = Field(0.6, ge=0)  # δ: how far below the top-1 probability a candidate may be

        @model_validator(mode="after")
        def _check(self):
            if self.topk < 1:
                raise ValueError("topk must be >= 1")
            if not self.delta >= 0:
                raise ValueError("delta must be >= 0")
            return self

    def judge(self, batch: Batch) -> Judgement:
        topk, delta = self.knobs.topk, self.knobs.delta
        if topk == 1:
            return greedy_judgement(batch)
        probs = torch.softmax(batch.target_draft_rows.float(), dim=-1)  # [T, V] the kernel's input: temperature 1
        top = top_values(probs, min(topk, int(probs.shape[-1])))  # [T, topk]
        p_draft = probs.gather(-1, batch.drafts[batch.pairs].unsqueeze(-1)).squeeze(-1)
        return greedy_judgement(batch, batch.per_position(within_top_k_and_delta(p_draft, top, delta), False))


def within_top_k_and_delta(p_draft: torch.Tensor, top: torch.Tensor, delta: float) -> torch.Tensor:
    """The kernel's test on probabilities: ``p(d)`` is at least the K-th largest (``top[..., -1]``; a tie is in)
    and ``p(d) ≥ p(top-1) − δ`` (at equality the draft is accepted, as the kernel's ``>=``)."""
    return (p_draft >= top[..., -1]) & (p_draft >= top[..., 0] - delta)
