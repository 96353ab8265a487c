"""The run's device and torch's runtime settings, applied once per process by every entry point (the CLI, the
lm-eval model, a cluster worker)."""

from __future__ import annotations

import os

from relaxbench.errors import ConfigError


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
    device = device or "auto"
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("--device cuda but torch sees no CUDA device")
    return device
