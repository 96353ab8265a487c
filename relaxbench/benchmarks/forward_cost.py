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
    kernel: str = ""  # "bf16 kernel" for a bf16 model timed without the fp32 wide rows, else empty


@torch.inference_mode()
def measure_forward_costs(loaded, chunks: tuple[int, ...] = (1, 2, 4, 8, 16), context: int = 300,
                          repeats: int = 5, both_kernels: bool = False) -> list[ForwardCost]:
    """Median latency of a forward over ``chunk`` new tokens after a ``context``-token prefill (cache rolled back
    after every run, so each run sees the same cache). With ``both_kernels`` (a model whose wide forwards run in
    fp32: ``relaxbench.decoding.bf16_rows.wide_rows_in_fp32``) each chunk is also timed with bf16's own kernel, the
    two alternating run by run; those costs follow the engine's, marked ``kernel="bf16 kernel"``."""
    clock = Clock(loaded.device)
    vocab = min(loaded.logit_dim, 32000)
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, vocab, (context,), generator=generator).to(loaded.device)
    cache = new_cache(loaded.model)
    forward(loaded.model, prompt, cache, n_logits=1)
    variants = (True, False) if both_kernels else (True,)
    times: dict[tuple[bool, int], list[float]] = {}
    for chunk in chunks:
        tokens = torch.randint(100, vocab, (chunk,), generator=generator).to(loaded.device)
        for fp32_wide_rows in variants:  # warm-up for this shape
            forward(loaded.model, tokens, cache, n_logits=chunk, fp32_wide_rows=fp32_wide_rows)
            rollback(cache, context)
        for _ in range(repeats):
            for fp32_wide_rows in variants:
                start = clock.now()
                forward(loaded.model, tokens, cache, n_logits=chunk, fp32_wide_rows=fp32_wide_rows)
                times.setdefault((fp32_wide_rows, chunk), []).append(clock.now() - start)
                rollback(cache, context)
    dtype = str(loaded.dtype).removeprefix("torch.")
    return [ForwardCost(loaded.name, dtype, context, chunk, 1000 * statistics.median(times[variant, chunk]), repeats,
                        "" if variant else "bf16 kernel") for variant in variants for chunk in chunks]
