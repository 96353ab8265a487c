"""Turning logits into distributions and tokens: temperature, top-k, top-p, and the greedy convention.

Greedy decoding (temperature 0) picks the argmax; rules that read a distribution under greedy decoding see the
softmax of the raw logits (temperature 1). Drafters and policies use the same function, so the ``q`` a policy
reads is the distribution the drafter sampled from.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from relaxbench.decoding import kernels


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


CHUNK = 256  # vocabulary chunk of the two-stage reductions below (measured fastest at V = 152k on CPU)


def chunk_maxima(logits: torch.Tensor, chunk: int = CHUNK) -> torch.Tensor:
    """[R, ceil(V / chunk)] maximum of each ``chunk``-wide slice of every row of ``logits`` [..., V] (the last
    column is the short tail's, when ``chunk`` does not divide V).

    This is the one full pass over the vocabulary that ``greedy_argmax`` and ``top_values`` need; a caller that
    wants both (a verification round) computes it once and hands it to each. ``amax`` is vectorised on CPU where
    ``argmax`` and ``topk`` are not, so each two-stage reduction costs about one ``amax``."""
    vocab = int(logits.shape[-1])
    flat = logits.reshape(-1, vocab)
    head = (vocab // chunk) * chunk
    maxima = flat[:, :head].reshape(flat.shape[0], -1, chunk).amax(dim=-1)
    if head < vocab:
        maxima = torch.cat([maxima, flat[:, head:].amax(dim=-1, keepdim=True)], dim=-1)
    return maxima


@dataclass(frozen=True)
class GreedyReductions:
    """What a greedy round reads from every row of the target's logits, from one pass over them."""

    maxima: torch.Tensor  # [R, ceil(V / chunk)] chunk maxima (``chunk_maxima``)
    argmax: torch.Tensor  # [...] first index of each row's maximum (``greedy_argmax``)
    max: torch.Tensor  # [...] each row's maximum (float32)


def greedy_reductions(logits: torch.Tensor, chunk: int = CHUNK) -> GreedyReductions:
    """Chunk maxima, argmax and maximum of every row of ``logits`` [..., V]: one read by the native kernel
    (``kernels.row_reductions``) where it applies, else the torch reductions below (the reference)."""
    native = kernels.row_reductions(logits, chunk)
    if native is not None:
        row_max, argmax, maxima = native
        return GreedyReductions(maxima, argmax, row_max)
    return torch_greedy_reductions(logits, chunk)


def torch_greedy_reductions(logits: torch.Tensor, chunk: int = CHUNK) -> GreedyReductions:
    """``greedy_reductions`` by torch alone: the reference, and the answer when the native kernels cannot give
    one (no compiler, another device, a NaN)."""
    maxima = chunk_maxima(logits, chunk)
    return GreedyReductions(maxima, greedy_argmax(logits, chunk, maxima),
                            maxima.amax(dim=-1).float().reshape(logits.shape[:-1]))


def mixture_argmax(x: torch.Tensor, y: torch.Tensor, a: float, b: float) -> int:
    """``greedy_argmax`` of ``a·x + b·y`` for two [V] rows (fused logits), without materialising the sum where the
    native kernel applies (it may round the multiply-add as one, torch as two: only a near-exact tie can tell
    them apart)."""
    native = kernels.fused_argmax(x, y, a, b)
    if native is not None:
        return native
    return int(greedy_argmax(torch.add(a * x.float(), y.float(), alpha=b)))


def softmax_sums(logits: torch.Tensor, row_max: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(S, T)`` [n] per row of ``logits`` [n, V] with ``s = z − row_max``: ``S = Σ e^s`` and ``T = Σ e^s·s``.

    The softmax statistics of a row without materialising it: ``ln S + row_max`` is the log-normaliser,
    ``ln S − T / S`` the entropy. One read per row by the native kernel where it applies; else torch, with ``T``
    as one dot product (an e^s·s of 0·(−inf) from a −inf logit counts as 0)."""
    native = [kernels.row_softmax_sums(row, float(m)) for row, m in zip(logits, row_max.tolist())]
    if native and all(pair is not None for pair in native):
        return torch.tensor(native, dtype=torch.float32, device=logits.device).unbind(-1)
    shifted = logits.float() - row_max.float().unsqueeze(-1)
    weights = shifted.exp()
    total = weights.sum(dim=-1)
    weighted = (weights.unsqueeze(-2) @ shifted.unsqueeze(-1)).reshape(-1)
    if bool(weighted.isnan().any()) and not bool(shifted.isnan().any()):  # only from 0·(−inf) terms
        weighted = torch.where(weights > 0, weights * shifted, 0.0).sum(dim=-1)
    return total, weighted


def _split(logits: torch.Tensor, chunk: int, maxima: torch.Tensor | None
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(rows [R, V], head chunks [R, n, chunk] (a view), head maxima [R, n], tail maxima [R] or None)."""
    vocab = int(logits.shape[-1])
    flat = logits.reshape(-1, vocab)
    n_chunks = vocab // chunk
    maxima = chunk_maxima(flat, chunk) if maxima is None else maxima.reshape(flat.shape[0], -1)
    head = flat[:, : n_chunks * chunk].reshape(flat.shape[0], n_chunks, chunk)
    tail = maxima[:, n_chunks] if n_chunks * chunk < vocab else None
    return flat, head, maxima[:, :n_chunks], tail


def _two_stage(logits: torch.Tensor, chunk: int, n: int = 1) -> bool:
    return logits.device.type == "cpu" and int(logits.shape[-1]) // chunk >= 2 * n


def greedy_argmax(logits: torch.Tensor, chunk: int = CHUNK, maxima: torch.Tensor | None = None) -> torch.Tensor:
    """``logits.argmax(-1)`` exactly (the first index of the maximum), computed faster on CPU.

    torch's CPU argmax is not vectorised: over a 152k vocabulary it takes ~8x as long as ``amax``. Here the chunk
    maxima (``maxima``, from ``chunk_maxima`` with the same ``chunk``, or computed here) locate the first chunk
    holding the maximum, and only that chunk is searched for its first maximal index — the same index ``argmax``
    returns, ties included (the tail, after every full chunk, wins only when strictly larger). Other devices use
    ``argmax`` directly. Without ``maxima``, the native kernel answers where it applies (the same index).
    """
    if maxima is None and (native := kernels.row_reductions(logits, chunk)) is not None:
        return native[1]
    if not _two_stage(logits, chunk):
        return logits.argmax(dim=-1)
    flat, head, head_max, tail_max = _split(logits, chunk, maxima)
    best = head_max.argmax(dim=-1)
    window = head.gather(1, best.view(-1, 1, 1).expand(-1, 1, chunk)).squeeze(1)
    index = best * chunk + window.argmax(dim=-1)
    if tail_max is not None:
        in_tail = tail_max > head_max.amax(dim=-1)
        if bool(in_tail.any()):
            start = head.shape[1] * chunk
            index = torch.where(in_tail, start + flat[:, start:].argmax(dim=-1), index)
    return index.reshape(logits.shape[:-1])


def top_values(logits: torch.Tensor, n: int, chunk: int = CHUNK, maxima: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.topk(logits, n).values`` exactly (descending, ties repeated), computed faster on CPU.

    The n largest values lie in the n chunks with the largest maxima or in the short tail (a value outside them
    has n chunk maxima at least as large above it), so only those are searched. torch's CPU topk over 152k logits
    costs ~0.4 ms a row; this costs one ``amax`` pass, or nothing like it when the chunk ``maxima`` are given.
    Other devices, and short rows, use ``topk`` directly."""
    if not _two_stage(logits, chunk, n):
        return torch.topk(logits, min(n, int(logits.shape[-1])), dim=-1).values
    flat, head, head_max, tail_max = _split(logits, chunk, maxima)
    best = torch.topk(head_max, n, dim=-1).indices  # [R, n] the chunks holding the n largest
    candidates = head.gather(1, best.unsqueeze(-1).expand(-1, -1, chunk)).reshape(flat.shape[0], n * chunk)
    if tail_max is not None:
        candidates = torch.cat([candidates, flat[:, head.shape[1] * chunk:]], dim=-1)
    return torch.topk(candidates, n, dim=-1).values.reshape(*logits.shape[:-1], n)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of ``probs`` [..., V] (returns [...])."""
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])


def next_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """The token a plain (non-speculative) decoder would emit from ``logits`` [..., V]."""
    if params.greedy:
        return greedy_argmax(logits)
    return sample(logits_to_probs(logits, params), generator)
