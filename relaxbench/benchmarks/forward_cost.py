"""Forward-pass cost table: milliseconds for a forward of n tokens on top of a KV cache of a given length.

This is the measurement behind the CPU default dtypes (docs/performance.md): speculative decoding wins only if a
round (k draft steps + one verify pass of k+1 tokens) costs less than the tokens it emits cost autoregressively.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch

from relaxbench.decoding.cache import forward, new_cache, rollback
from relaxbench.timing import Clock


@dataclass(frozen=True)
class ForwardCost:
    model: str
    dtype: str
    context: int
    chunk: int
    median_ms: float
    runs: int


@torch.inference_mode()
def measure_forward_costs(loaded, chunks: tuple[int, ...] = (1, 2, 4, 8, 16), context: int = 300,
                          repeats: int = 5) -> list[ForwardCost]:
    """Median latency of a forward over ``chunk`` new tokens after a ``context``-token prefill (cache rolled back
    after every run, so each run sees the same cache)."""
    clock = Clock(loaded.device)
    vocab = min(loaded.logit_dim, 32000)
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, vocab, (context,), generator=generator).to(loaded.device)
    cache = new_cache(loaded.model)
    forward(loaded.model, prompt, cache, n_logits=1)
    out = []
    for chunk in chunks:
        tokens = torch.randint(100, vocab, (chunk,), generator=generator).to(loaded.device)
        forward(loaded.model, tokens, cache, n_logits=chunk)  # warm-up for this shape
        rollback(cache, context)
        times = []
        for _ in range(repeats):
            start = clock.now()
            forward(loaded.model, tokens, cache, n_logits=chunk)
            times.append(clock.now() - start)
            rollback(cache, context)
        out.append(ForwardCost(loaded.name, str(loaded.dtype).removeprefix("torch."), context, chunk,
                               1000 * statistics.median(times), repeats))
    return out
