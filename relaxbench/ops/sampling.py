"""Turning logits into distributions and tokens: temperature, top-k, top-p, and the greedy convention.

Greedy decoding (temperature 0) picks the argmax; rules that read a distribution under greedy decoding see the
softmax of the raw logits (temperature 1). Drafters and policies use the same function, so the ``q`` a policy
reads is the distribution the drafter sampled from.
"""

from __future__ import annotations

import torch

from relaxbench.ops.reductions import argmax
from relaxbench.ops.sampling_params import SamplingParams

__all__ = ["SamplingParams", "logits_to_probs", "next_token", "process_logits", "sample"]


def process_logits(logits: torch.Tensor, params: SamplingParams, top_p_first: bool = False) -> torch.Tensor:
    """Row-wise processed logits for ``logits`` [..., V]: divided by the temperature, then the top-k and top-p cuts
    (removed tokens at -inf), in float32; greedy → the raw logits (temperature 1, no truncation).

    The run's order is top-k, then top-p on what top-k kept (HF ``generate`` and vLLM); ``top_p_first`` applies
    top-p to the full tempered distribution first, then top-k — the order of a ``LogitsProcessorList`` built as
    temperature, top-p, top-k (MARS's ``prepare_logits_processor``)."""
    logits = logits.float()
    if params.greedy:
        return logits
    logits = logits / params.temperature
    steps = (_top_p_cut, _top_k_cut) if top_p_first else (_top_k_cut, _top_p_cut)
    for step in steps:
        logits = step(logits, params)
    return logits


def _top_k_cut(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Keep the tokens whose logit is at least the k-th largest (ties with the k-th stay)."""
    if params.top_k > 0 and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return logits


def _top_p_cut(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Drop a token when the mass strictly before it (most likely first) already reaches top_p; the top token
    always stays."""
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        drop_sorted = (torch.cumsum(sorted_probs, dim=-1) - sorted_probs) >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def logits_to_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Row-wise distribution for ``logits`` [..., V]: the softmax of ``process_logits`` (greedy → plain softmax,
    temperature 1, no truncation)."""
    return torch.softmax(process_logits(logits, params), dim=-1)


SAMPLE_CHUNK = 1024  # vocabulary slice of the two-level inverse-CDF draw


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of ``probs`` [..., V] (unnormalised weights are fine; returns [...]).

    An inverse-CDF draw in two levels — one float64 uniform picks a ``SAMPLE_CHUNK``-wide slice by the float64
    cumulative mass of the slices, then the token inside it — so every token is drawn with its probability to
    float64 precision at any vocabulary size, a token of zero mass never, and one draw costs a cumulative sum
    instead of ``torch.multinomial``'s much slower pass on CPU."""
    flat = probs.reshape(-1, probs.shape[-1])
    tokens = [_draw(row, generator) for row in flat]
    return torch.tensor(tokens, dtype=torch.long, device=probs.device).reshape(probs.shape[:-1])


def _draw(weights: torch.Tensor, generator: torch.Generator | None) -> int:
    vocab = int(weights.shape[0])
    n_chunks = -(-vocab // SAMPLE_CHUNK)
    chunks = torch.nn.functional.pad(weights, (0, n_chunks * SAMPLE_CHUNK - vocab)).view(n_chunks, SAMPLE_CHUNK)
    ends = chunks.sum(dim=-1, dtype=torch.float64).cumsum(0)
    u = torch.rand((), generator=generator, dtype=torch.float64, device=weights.device) * ends[-1]
    chunk = min(int(torch.searchsorted(ends, u.view(1), right=True)), n_chunks - 1)
    rest = u - (ends[chunk - 1] if chunk > 0 else 0.0)
    inside = chunks[chunk].double().cumsum(0)
    index = min(int(torch.searchsorted(inside, rest.view(1), right=True)), SAMPLE_CHUNK - 1)
    if float(chunks[chunk, index]) <= 0:  # float rounding past the slice's last token: its last token of mass
        index = int(torch.nonzero(chunks[chunk] > 0).flatten()[-1])
    return chunk * SAMPLE_CHUNK + index


def next_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """The token a plain (non-speculative) decoder would emit from ``logits`` [..., V]."""
    if params.greedy:
        return argmax(logits)
    return sample(logits_to_probs(logits, params), generator)
