"""Turning logits into distributions and tokens: temperature, top-k, top-p, and the greedy convention.

Greedy decoding (temperature 0) picks the argmax; rules that read a distribution under greedy decoding see the
softmax of the raw logits (temperature 1). Drafters and policies use the same function, so the ``q`` a policy
reads is the distribution the drafter sampled from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

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
    """Keep the tokens whose logit is at least the k-th largest (ties with the k-th stay, as vLLM's
    ``apply_top_k_top_p``/``apply_top_k_only`` and transformers' ``TopKLogitsWarper``: a cut by value). The cuts
    write into ``logits`` (the tempered copy ``process_logits`` made), so a full-vocabulary row is not allocated
    again."""
    if params.top_k > 0 and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill_(logits < kth, float("-inf"))
    return logits


def _top_p_cut(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The top-p cut as vLLM's ``apply_top_k_top_p`` (and transformers' ``TopPLogitsWarper``) make it: a stable
    ascending sort, the cumulative mass from the least likely token, a token dropped while that mass is at most
    ``1 − top_p`` (in float32, ``1 − float32(top_p)``), the most likely token always kept. Among tokens tied at the
    cut the lower ids come first in the ascending order and are dropped first: the higher ids stay, as in the
    engines the references run on (``top_p_drop``)."""
    if params.top_p < 1.0:
        threshold = 1 - torch.tensor(params.top_p, dtype=torch.float32, device=logits.device)
        logits = logits.masked_fill_(top_p_drop(logits, threshold), float("-inf"))
    return logits


def top_p_drop(logits: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """[..., V] bool: the tokens the top-p cut drops, ``threshold`` = 1 − top_p (a float32 scalar or [..., 1]).

    vLLM's ``apply_top_k_top_p_pytorch`` (v1/sample/ops/topk_topp_sampler.py), which the Graphcore reference's
    rejection sampler and vLLM's FLy run their top-p through, and transformers' ``TopPLogitsWarper`` (MARS,
    DIVERSED): ``sort(descending=False)``, ``cumsum(softmax) <= 1 − p``, the last (largest) kept. The sort is
    stable, as the GPU's radix sort these engines run on: exactly tied logits keep their id order."""
    sorted_logits, order = torch.sort(logits, dim=-1, stable=True)
    cumulative = torch.softmax(sorted_logits, dim=-1, out=sorted_logits).cumsum_(dim=-1)  # sort's own copy
    drop_sorted = cumulative <= threshold
    drop_sorted[..., -1] = False
    return torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)


def logits_to_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Row-wise distribution for ``logits`` [..., V]: the softmax of ``process_logits`` (greedy → plain softmax,
    temperature 1, no truncation)."""
    return softmax_of_processed(process_logits(logits, params), logits)


def softmax_of_processed(processed: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """The softmax of ``processed`` (``logits`` after processing) along its rows. When processing made a copy (a
    temperature, a cut, a cast), the softmax is written over that copy: the same values (the kernel reads each
    value before it writes it), and one full-vocabulary tensor fewer to allocate, which at a real vocabulary is
    most of the cost. When processing handed ``logits`` back (greedy), a new tensor: the caller's logits are never
    written."""
    if processed.untyped_storage().data_ptr() == logits.untyped_storage().data_ptr():
        return torch.softmax(processed, dim=-1)
    return torch.softmax(processed, dim=-1, out=processed)


@dataclass(frozen=True)
class BatchSampling:
    """The sampling settings of a batch of requests (or of rows), as device tensors, with the host facts a batched
    rule may branch on without a device synchronisation.

    ``temperature`` [B] (0: greedy), ``top_k`` [B] (0: off), ``top_p`` [B] (1: off). ``uniform`` is the one
    ``SamplingParams`` every request shares, when they do (then processing takes the scalar path, bit for bit what
    one request's processing computes); ``any_greedy``/``all_greedy`` say which decoding modes occur."""

    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    uniform: SamplingParams | None
    any_greedy: bool
    all_greedy: bool

    @classmethod
    def of(cls, params: Sequence[SamplingParams], device: torch.device | str = "cpu") -> BatchSampling:
        """From each request's ``SamplingParams`` (host data: no synchronisation)."""
        params = list(params)
        shared = params[0] if params and all(p == params[0] for p in params) else None
        return cls(torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device),
                   torch.tensor([p.top_k for p in params], dtype=torch.long, device=device),
                   torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device),
                   shared, any(p.greedy for p in params), all(p.greedy for p in params))

    @property
    def greedy(self) -> torch.Tensor:
        """[B] bool: the requests decoded greedily."""
        return self.temperature == 0

    def take(self, index: torch.Tensor) -> BatchSampling:
        """The settings of ``index`` (requests of a group, or the request of each row): same host facts."""
        return replace(self, temperature=self.temperature[index], top_k=self.top_k[index], top_p=self.top_p[index])

    def tempered(self) -> BatchSampling:
        """The temperature alone (no top-k, no top-p): the test distribution of rules whose authors apply only it."""
        uniform = None if self.uniform is None else SamplingParams(self.uniform.temperature)
        return replace(self, top_k=torch.zeros_like(self.top_k), top_p=torch.ones_like(self.top_p), uniform=uniform)


def process_rows(logits: torch.Tensor, settings: BatchSampling, top_p_first: bool = False) -> torch.Tensor:
    """``process_logits`` of every row of ``logits`` [N, V] with that row's settings (``settings`` has N entries):
    the scalar path when every row shares its settings, else per-row temperature, top-k (by the k-th largest value)
    and top-p (by the sorted cumulative mass), in float32. Greedy rows keep their raw logits."""
    if settings.uniform is not None:
        return process_logits(logits, settings.uniform, top_p_first)
    logits = logits.float()
    if settings.all_greedy:
        return logits
    sampled = settings.temperature > 0
    scaled = logits / torch.where(sampled, settings.temperature, torch.ones_like(settings.temperature)).unsqueeze(-1)
    steps = (_top_p_rows, _top_k_rows) if top_p_first else (_top_k_rows, _top_p_rows)
    for step in steps:
        scaled = step(scaled, settings, sampled)
    return scaled


def _top_k_rows(logits: torch.Tensor, settings: BatchSampling, sampled: torch.Tensor) -> torch.Tensor:
    vocab = int(logits.shape[-1])
    active = sampled & (settings.top_k > 0) & (settings.top_k < vocab)
    ordered = torch.sort(logits, dim=-1, descending=True).values
    kth = ordered.gather(-1, (settings.top_k - 1).clamp(0, vocab - 1).unsqueeze(-1))
    return logits.masked_fill_(active.unsqueeze(-1) & (logits < kth), float("-inf"))


def _top_p_rows(logits: torch.Tensor, settings: BatchSampling, sampled: torch.Tensor) -> torch.Tensor:
    active = sampled & (settings.top_p < 1.0)
    drop = top_p_drop(logits, (1 - settings.top_p).unsqueeze(-1))
    return logits.masked_fill_(drop.logical_and_(active.unsqueeze(-1)), float("-inf"))


def probs_rows(logits: torch.Tensor, settings: BatchSampling, top_p_first: bool = False) -> torch.Tensor:
    """The softmax of ``process_rows``: each row's distribution under its own settings."""
    return softmax_of_processed(process_rows(logits, settings, top_p_first), logits)


SAMPLE_CHUNK = 1024  # vocabulary slice of the two-level inverse-CDF draw


def sample_rows(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One token per row of ``weights`` [B, V] (unnormalised is fine) from the float64 uniforms ``u`` [B] in [0, 1):
    a batched two-level inverse-CDF draw with no host synchronisation.

    One uniform picks a ``SAMPLE_CHUNK``-wide slice by the float64 cumulative mass of the slices, then the token
    inside it, so every token is drawn with its probability to float64 precision at any vocabulary size and a token
    of zero mass never. Where rounding lands past the slice's mass, the token at which the slice's cumulative mass
    reaches its total is taken: its last token of mass, or, when that token's mass is below the total's float64
    rounding (under 1e-16 of it), the last one before it that moves the total."""
    rows, vocab = int(weights.shape[0]), int(weights.shape[-1])
    n_chunks = -(-vocab // SAMPLE_CHUNK)
    chunks = torch.nn.functional.pad(weights, (0, n_chunks * SAMPLE_CHUNK - vocab)).view(rows, n_chunks, SAMPLE_CHUNK)
    ends = chunks.sum(dim=-1, dtype=torch.float64).cumsum(-1)  # [B, n_chunks]
    target = u.to(torch.float64) * ends[:, -1]
    chunk = torch.searchsorted(ends, target.unsqueeze(-1), right=True).squeeze(-1).clamp_max(n_chunks - 1)
    before = ends.gather(1, (chunk - 1).clamp_min(0).unsqueeze(-1)).squeeze(-1)
    rest = target - torch.where(chunk > 0, before, torch.zeros_like(before))
    flat = torch.arange(rows, device=weights.device) * n_chunks + chunk
    picked = chunks.reshape(rows * n_chunks, SAMPLE_CHUNK).index_select(0, flat)  # [B, SAMPLE_CHUNK]
    inside = picked.cumsum(-1, dtype=torch.float64)
    index = torch.searchsorted(inside, rest.unsqueeze(-1), right=True).squeeze(-1).clamp_max(SAMPLE_CHUNK - 1)
    # the slice's last token of mass: the first at which its cumulative mass reaches the slice's total (tokens of
    # zero mass after it add nothing); a binary search, not a pass over the slice
    total = inside[:, -1:].clone(memory_format=torch.contiguous_format)  # a copy at every B: the same ops
    last_with_mass = torch.searchsorted(inside, total).squeeze(-1)
    index = torch.where(picked.gather(1, index.unsqueeze(-1)).squeeze(-1) <= 0, last_with_mass, index)
    return chunk * SAMPLE_CHUNK + index


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of ``probs`` [..., V] (returns [...]), each row drawn with one float64 uniform from
    ``generator`` in row order (``sample_rows``): the drafters' sampling and a request's own random stream."""
    flat = probs.reshape(-1, probs.shape[-1])
    u = torch.stack([torch.rand((), generator=generator, dtype=torch.float64, device=probs.device)
                     for _ in range(flat.shape[0])]) if flat.shape[0] else probs.new_zeros(0, dtype=torch.float64)
    return sample_rows(flat, u).reshape(probs.shape[:-1])


def next_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """The token a plain (non-speculative) decoder would emit from ``logits`` [..., V]."""
    if params.greedy:
        return argmax(logits)
    return sample(logits_to_probs(logits, params), generator)


def next_tokens(logits: torch.Tensor, rows: torch.Tensor, settings: BatchSampling,
                draw_u: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
    """[B] the token a plain (non-speculative) step emits for each request from its row ``rows[b]`` of ``logits``
    [N, V]: the argmax under greedy decoding, else one draw (``draw_u[b]``) from the row's processed distribution
    (``probs`` [N, V]: the rows' distributions when the caller already has them, each row's processing being its
    own)."""
    if settings.all_greedy:
        return argmax(logits.index_select(0, rows))
    weights = probs_rows(logits.index_select(0, rows), settings) if probs is None else probs.index_select(0, rows)
    drawn = sample_rows(weights, draw_u)
    if not settings.any_greedy:
        return drawn
    return torch.where(settings.greedy, argmax(logits.index_select(0, rows)), drawn)
