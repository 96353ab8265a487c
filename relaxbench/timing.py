"""The one timing helper: a clock that synchronises the device before it reads the time.

On a GPU, kernels run asynchronously; reading ``perf_counter`` without a sync times the launch, not the work.
"""

from __future__ import annotations

import time

import torch


class Clock:
    """``now()`` returns seconds after waiting for queued device work (a no-op on CPU). On CUDA it waits for every
    GPU the process sees: a model spread over several GPUs (``--device-map``) works on all of them."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        cuda = torch.device(device).type == "cuda"
        self._gpus = range(torch.cuda.device_count()) if cuda else range(0)

    def now(self) -> float:
        for gpu in self._gpus:
            torch.cuda.synchronize(gpu)
        return time.perf_counter()
