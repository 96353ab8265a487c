"""The per-request sampling of the oracle: ``sample`` as it was (one row at a time, one float64 uniform from the
request's generator per row); the processing functions are relaxbench's own, unchanged."""

from __future__ import annotations

import torch

from relaxbench.ops.reductions import argmax
from relaxbench.ops.sampling import SamplingParams, logits_to_probs, process_logits  # noqa: F401  (re-exported)

SAMPLE_CHUNK = 1024


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
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
    if float(chunks[chunk, index]) <= 0:
        index = int(torch.nonzero(chunks[chunk] > 0).flatten()[-1])
    return chunk * SAMPLE_CHUNK + index


def next_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    if params.greedy:
        return argmax(logits)
    return sample(logits_to_probs(logits, params), generator)
