"""Turning logits into distributions and tokens: temperature, top-k, top-p, and the greedy convention.

Greedy decoding (temperature 0) picks the argmax; rules that read a distribution under greedy decoding see the
softmax of the raw logits (temperature 1). Drafters and policies use the same function, so the ``q`` a policy
reads is the distribution the drafter sampled from.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from relaxbench.errors import ConfigError
from relaxbench.ops.reductions import argmax


@dataclass(frozen=True)
class SamplingParams:
    """A plain frozen dataclass, not a ``Spec``: stored runs serialise it with ``dataclasses.asdict``."""

    temperature: float = 0.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0

    def __post_init__(self) -> None:
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


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of ``probs`` [..., V] (returns [...])."""
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])


def next_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """The token a plain (non-speculative) decoder would emit from ``logits`` [..., V]."""
    if params.greedy:
        return argmax(logits)
    return sample(logits_to_probs(logits, params), generator)
