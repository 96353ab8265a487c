"""Counter-based uniforms: each request's random stream as a pure function of (its seed, its step), for a batch at once.

A serving engine verifies a batch of requests per step; giving each request its own ``torch.Generator`` means one
draw per request, a Python loop over the batch. Here a request's uniforms are a hash of its seed, its step counter and
the uniform's index, computed for the whole batch in a fixed number of integer tensor operations on the device: the
same request at the same step draws the same numbers whatever else is in the batch, on any device.

The hash is Chris Wellons' ``lowbias32`` (two xorshift-multiply rounds, an avalanche-tested 32-bit integer hash),
chained over the key's 32-bit words. Products are taken modulo 2**32 in 16-bit halves so no int64 product overflows.
"""

from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF
GOLDEN = 0x9E3779B9  # 2**32 / φ: separates the key words


def _mul32(x: torch.Tensor, constant: int) -> torch.Tensor:
    """``x · constant mod 2**32`` for ``x`` in [0, 2**32) held in int64, without overflowing int64."""
    low, high = constant & 0xFFFF, constant >> 16
    return (x * low + (((x * high) & 0xFFFF) << 16)) & MASK32


def hash32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 of each element of ``x`` (int64 holding values in [0, 2**32))."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x21F0AAAD)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x735A2D97)
    return x ^ (x >> 15)


def _key(seed: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    h = hash32((seed & MASK32) ^ GOLDEN)
    h = hash32(h ^ ((seed >> 32) & MASK32))
    h = hash32(h ^ (step & MASK32))
    return hash32(h ^ ((step >> 32) & MASK32))


def stream_uniforms(seed: torch.Tensor, step: torch.Tensor, n: int, dtype: torch.dtype = torch.float32,
                    offset: int = 0) -> torch.Tensor:
    """[B, n] uniforms in [0, 1) for requests with ``seed`` [B] at ``step`` [B] (int64): element j is the request's
    uniform number ``offset + j`` of that step. float32 carries 24 random bits, float64 53 (two hashes)."""
    key = _key(seed.long(), step.long()).unsqueeze(-1)
    index = torch.arange(offset, offset + n, device=seed.device, dtype=torch.long)
    word = hash32(key ^ hash32(index * 2 + 1))
    if dtype == torch.float64:
        low = hash32(key ^ hash32(index * 2 + 2))
        bits = (word >> 6) * (1 << 27) + (low >> 5)  # 26 + 27 = 53 bits
        return bits.double() * 2.0 ** -53
    if dtype != torch.float32:
        raise ValueError(f"stream_uniforms draws float32 or float64, not {dtype}")
    return (word >> 8).float() * 2.0 ** -24
