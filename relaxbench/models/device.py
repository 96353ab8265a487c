"""The run's device and torch's runtime settings, applied once per process by every entry point (the CLI, the
lm-eval model, a cluster worker)."""

from __future__ import annotations

import os

from relaxbench.errors import ConfigError

# accelerate's placement strategies for a target spread over the GPUs (here, not in models.load: a suite checks its
# device_map without importing torch)
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def configure_runtime(device: str | None = "auto", threads: int | None = None) -> str:
    """Quiet third-party logging, set torch's CPU threads, resolve ``auto`` (cuda when torch sees a GPU, else cpu);
    return the device string."""
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if threads:
        torch.set_num_threads(threads)
    device = check_device(device)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return device


def check_device(device: str | None) -> str:
    """``device`` as given (``auto``, ``cpu``, ``cuda``, ``cuda:1`` ...), refused in one line when torch cannot
    parse it or this machine lacks it, before any model loads."""
    import torch

    device = device or "auto"
    if device == "auto":
        return device
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(f"--device {device!r}: not a device torch knows (give cpu, cuda, cuda:1 ... or auto)") \
            from None
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"--device {device}: torch sees no CUDA device here; use --device cpu")
        if parsed.index is not None and parsed.index >= count:
            raise ConfigError(f"--device {device}: this machine has {count} CUDA device(s) (cuda:0..cuda:{count - 1})")
    elif parsed.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"--device {device}: torch sees no MPS device here; use --device cpu")
    elif parsed.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"--device {device}: relaxbench runs on cpu, cuda or mps, not {parsed.type!r}")
    return device
