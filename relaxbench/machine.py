"""What this machine's CPU is and can do, read from ``/proc/cpuinfo`` in one place (the environment record and the
dtype defaults both ask). Outside Linux the file is absent: the model falls back to ``platform`` and the flag set
is empty.

``RELAXBENCH_CPU_FLAGS`` (comma- or space-separated flags) replaces the flags the CPU reports: with
``ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2`` (the math libraries' own switches) and
``RELAXBENCH_CPU_FLAGS=avx2,fma`` (our dtype defaults) a CPU with bf16 units behaves as an AVX2-only one
throughout, which is how docs/performance.md measures that case. The environment record notes the override.

``others_busy_cpus`` measures how busy *other* processes keep the CPUs (psutil, over a short window), leaving out
relaxbench's own process tree: the load average would count relaxbench's own preparation (a model conversion a
moment before, in this process or its children) as a busy machine.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
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


ISA_SWITCHES = ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "ATEN_CPU_CAPABILITY")


def isa_limits() -> dict[str, str]:
    """The code-path switches of the math libraries (oneDNN, MKL) and of torch's own kernels that are set in the
    environment: with them a CPU runs slower paths than it has, so a record of its timings names them."""
    return {key: os.environ[key] for key in ISA_SWITCHES if key in os.environ}


def has_bf16_units() -> bool:
    """Whether the CPU computes bf16 natively (AVX512-BF16 or AMX-BF16); without them bf16 is emulated."""
    return bool(cpu_flags() & BF16_FLAGS)


# ------------------------------------------------------------------------------------------------ other processes

OTHERS_WINDOW_S = 1.0  # how long the session start watches the other processes
BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")  # psutil's busy CPU-time fields (Linux names)


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds used so far: by the whole machine (every CPU's busy time) and by this process's tree (itself,
    its children it has reaped, and its living descendants)."""

    machine: float
    own: float
    at: float  # time.monotonic() of the sample


def own_tree_cpu_seconds() -> float:
    """CPU seconds of this process, the children it has waited for, and its living descendants (each with the
    children it has waited for)."""
    import psutil

    me = psutil.Process()
    times = me.cpu_times()
    total = times.user + times.system + times.children_user + times.children_system
    for child in me.children(recursive=True):
        try:
            c = child.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        total += c.user + c.system + c.children_user + c.children_system
    return total


def cpu_sample() -> CpuSample:
    import psutil

    machine = psutil.cpu_times()
    return CpuSample(sum(getattr(machine, name, 0.0) for name in BUSY_FIELDS), own_tree_cpu_seconds(),
                     time.monotonic())


def others_between(before: CpuSample, after: CpuSample) -> float:
    """CPUs' worth of busy time the machine spent outside this process tree between two samples (>= 0)."""
    window = after.at - before.at
    if window <= 0:
        return 0.0
    others = (after.machine - before.machine) - (after.own - before.own)
    return max(0.0, others / window)


def others_busy_cpus(window: float = OTHERS_WINDOW_S) -> float | None:
    """How many CPUs other processes kept busy over the next ``window`` seconds (this process tree left out);
    None where psutil cannot read the counters."""
    try:
        before = cpu_sample()
        time.sleep(window)
        return round(others_between(before, cpu_sample()), 2)
    except (OSError, ImportError):
        return None


def available_memory_bytes() -> int | None:
    """The memory the OS could give this process now without swapping (psutil's ``available``); None if unknown."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except (ImportError, OSError, AttributeError):
        return None
