"""Turning logits into distributions and tokens: temperature, top-k, top-p, and the greedy convention.

Greedy decoding (temperature 0) picks the argmax; rules that read a distribution under greedy decoding see the
softmax of the raw logits (temperature 1). Drafters and policies use the same function, so the ``q`` a policy
reads is the distribution the drafter sampled from.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0

    def __post_init__(self) -> None:
        from relaxbench.errors import ConfigError

        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ConfigError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def logits_to_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Row-wise distribution for ``logits`` [..., V]; greedy → plain softmax (temperature 1, no truncation)."""
    logits = logits.float()
    if params.greedy:
        return torch.softmax(logits, dim=-1)
    logits = logits / params.temperature
    if params.top_k > 0 and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token when the mass strictly before it already reaches top_p (the top token always stays)
        drop_sorted = (torch.cumsum(sorted_probs, dim=-1) - sorted_probs) >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return torch.softmax(logits, dim=-1)


def greedy_argmax(logits: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
    """``logits.argmax(-1)`` exactly (the first index of the maximum), computed faster on CPU.

    torch's CPU argmax is not vectorised: over a 152k vocabulary it takes ~8x as long as ``amax``. Here ``amax``
    runs per chunk, ``argmax`` picks the first chunk holding the maximum, and only that chunk is searched for its
    first maximal index — the same index ``argmax`` returns, ties included. Other devices use ``argmax`` directly.
    """
    vocab = int(logits.shape[-1])
    n_chunks = vocab // chunk
    if logits.device.type != "cpu" or n_chunks < 2:
        return logits.argmax(dim=-1)
    flat = logits.reshape(-1, vocab)
    maxima = flat[:, : n_chunks * chunk].reshape(flat.shape[0], n_chunks, chunk).amax(dim=-1)
    if n_chunks * chunk < vocab:
        maxima = torch.cat([maxima, flat[:, n_chunks * chunk:].amax(dim=-1, keepdim=True)], dim=-1)
    start = maxima.argmax(dim=-1) * chunk
    # the last chunk may be short: clamped indices repeat the final logit *after* its real position
    index = (start.unsqueeze(-1) + torch.arange(chunk, device=logits.device)).clamp_max(vocab - 1)
    return (start + flat.gather(-1, index).argmax(dim=-1)).reshape(logits.shape[:-1])


def top_values(logits: torch.Tensor, n: int, chunk: int = 1024) -> torch.Tensor:
    """``torch.topk(logits, n).values`` exactly (descending, ties repeated), computed faster on CPU.

    The n largest values lie in the n chunks with the largest maxima (a value outside them has n chunk maxima at
    least as large above it), so only those chunks are searched. torch's CPU topk over 152k logits costs ~0.4 ms
    a row; this costs ~0.05 ms. Other devices, and short rows, use ``topk`` directly."""
    vocab = int(logits.shape[-1])
    n_chunks = vocab // chunk
    if logits.device.type != "cpu" or n_chunks < 2 * n:
        return torch.topk(logits, min(n, vocab), dim=-1).values
    flat = logits.reshape(-1, vocab)
    head = flat[:, : n_chunks * chunk].reshape(flat.shape[0], n_chunks, chunk)
    best = torch.topk(head.amax(dim=-1), n, dim=-1).indices  # [R, n] chunks holding the n largest
    candidates = head.gather(1, best.unsqueeze(-1).expand(-1, -1, chunk)).reshape(flat.shape[0], n * chunk)
    candidates = torch.cat([candidates, flat[:, n_chunks * chunk:]], dim=-1)  # the short tail is always searched
    return torch.topk(candidates, n, dim=-1).values.reshape(*logits.shape[:-1], n)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of ``probs`` [..., V] (returns [...])."""
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])


def next_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """The token a plain (non-speculative) decoder would emit from ``logits`` [..., V]."""
    if params.greedy:
        return logits.argmax(dim=-1)
    return sample(logits_to_probs(logits, params), generator)
