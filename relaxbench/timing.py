"""The one timing helper: a clock that synchronises the device before it reads the time.

On a GPU, kernels run asynchronously; reading ``perf_counter`` without a sync times the launch, not the work.
"""

from __future__ import annotations

import time

import torch


class Clock:
    """``now()`` returns seconds after waiting for queued device work (a no-op sync on CPU)."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        device = torch.device(device)
        self._sync = torch.cuda.synchronize if device.type == "cuda" else None

    def now(self) -> float:
        if self._sync is not None:
            self._sync()
        return time.perf_counter()
