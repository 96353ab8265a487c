"""What this machine's CPU is and can do, read from ``/proc/cpuinfo`` in one place (the environment record and the
dtype defaults both ask). Outside Linux the file is absent: the model falls back to ``platform`` and the flag set
is empty.

``RELAXBENCH_CPU_FLAGS`` (comma- or space-separated flags) replaces the flags the CPU reports: with
``ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2`` (the math libraries' own switches) and
``RELAXBENCH_CPU_FLAGS=avx2,fma`` (our dtype defaults) a CPU with bf16 units behaves as an AVX2-only one
throughout, which is how docs/performance.md measures that case. The environment record notes the override.
"""

from __future__ import annotations

import os
import platform
from functools import lru_cache

CPUINFO = "/proc/cpuinfo"
FLAGS_OVERRIDE = "RELAXBENCH_CPU_FLAGS"
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # x86 units that compute bf16 natively


@lru_cache(maxsize=1)
def _cpuinfo() -> dict[str, str]:
    """The first processor's ``key: value`` lines (every processor of a machine reports the same model and flags)."""
    fields: dict[str, str] = {}
    try:
        with open(CPUINFO, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_model() -> str:
    """The CPU's model name (``model name``), else what ``platform`` knows."""
    return _cpuinfo().get("model name") or platform.processor() or platform.machine()


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (``flags`` on x86, ``Features`` on ARM; ``$RELAXBENCH_CPU_FLAGS`` when set); empty
    when unknown."""
    override = os.environ.get(FLAGS_OVERRIDE)
    if override is not None:
        return frozenset(override.replace(",", " ").split())
    info = _cpuinfo()
    return frozenset((info.get("flags") or info.get("Features") or "").split())


def flags_override() -> str | None:
    """The value of ``$RELAXBENCH_CPU_FLAGS`` when it replaces the CPU's own flags."""
    return os.environ.get(FLAGS_OVERRIDE)


def has_bf16_units() -> bool:
    """Whether the CPU computes bf16 natively (AVX512-BF16 or AMX-BF16); without them bf16 is emulated."""
    return bool(cpu_flags() & BF16_FLAGS)
