"""What this machine's CPU is and can do, read from ``/proc/cpuinfo`` in one place (the environment record and the
dtype defaults both ask). Outside Linux the file is absent: the model falls back to ``platform`` and the flag set
is empty."""

from __future__ import annotations

import platform
from functools import lru_cache

CPUINFO = "/proc/cpuinfo"
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
    """The CPU's feature flags (``flags`` on x86, ``Features`` on ARM); empty when unknown."""
    info = _cpuinfo()
    return frozenset((info.get("flags") or info.get("Features") or "").split())


def has_bf16_units() -> bool:
    """Whether the CPU computes bf16 natively (AVX512-BF16 or AMX-BF16); without them bf16 is emulated."""
    return bool(cpu_flags() & BF16_FLAGS)
