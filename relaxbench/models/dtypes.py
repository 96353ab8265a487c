"""Which dtype a model runs in: names, and what ``auto`` means per device, role and model size (from the
forward-cost measurements in docs/performance.md)."""

from __future__ import annotations

import torch

from relaxbench.errors import ConfigError
from relaxbench.machine import has_bf16_units
from relaxbench.registry import did_you_mean

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
    "float64": torch.float64, "fp64": torch.float64,
}

# below this many parameters a target stays in fp32 even on a CPU with bf16 units (bf16's fixed costs dominate a
# small model's forward; measurements in docs/performance.md)
BF16_TARGET_MIN_PARAMS = 300_000_000


def default_dtype(device: str | torch.device, role: str, n_params: int | None = None,
                  bf16_units: bool | None = None) -> torch.dtype:
    """The dtype 'auto' means, per device, role ('target' or 'draft') and model size, chosen from measurements
    (docs/performance.md):

    * CUDA: bf16.
    * CPU with bf16 units (AVX512-BF16 / AMX): a target of ``BF16_TARGET_MIN_PARAMS`` or more in bf16 (a 6- or
      16-token verify pass costs about one 1-token pass, and the 1.5B's 1-token pass is faster than in fp32), a
      smaller target in fp32 (bf16's fixed costs dominate there), and the draft in fp32 (its 1-token steps are
      faster in fp32).
    * CPU without them: the target in fp32 (bf16 is emulated, so a k-token verify costs about k 1-token passes) and
      the draft in bf16 (1-token steps are memory-bound: half the bytes).

    ``bf16_units`` overrides the CPU detection (``relaxbench.machine.has_bf16_units``).
    """
    if torch.device(device).type == "cuda":
        return torch.bfloat16
    if has_bf16_units() if bf16_units is None else bf16_units:
        big = n_params is None or n_params >= BF16_TARGET_MIN_PARAMS
        return torch.bfloat16 if role == "target" and big else torch.float32
    return torch.float32 if role == "target" else torch.bfloat16


def parse_dtype(value: str | torch.dtype, device: str | torch.device = "cpu", role: str = "target",
                n_params: int | None = None) -> torch.dtype:
    """A dtype name, or 'auto' for the per-device, per-role, per-size default (see ``default_dtype``)."""
    if isinstance(value, torch.dtype):
        return value
    if value == "auto":
        return default_dtype(device, role, n_params)
    try:
        return DTYPES[value.lower()]
    except KeyError:
        raise ConfigError(f"unknown dtype {value!r}{did_you_mean(value, list(DTYPES))}") from None


def parameter_count(ref: str, offline: bool) -> int:
    """Exact parameter count of the checkpoint at ``ref``, from its config alone (built on the meta device: no
    weights are read or allocated)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(ref, local_files_only=offline)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())
