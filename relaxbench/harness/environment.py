"""What a run was measured on: recorded with every session, so figures from different machines are never mixed
up silently."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from relaxbench.machine import (OTHERS_WINDOW_S, cpu_flags, cpu_model, flags_override, isa_limits,
                                others_busy_cpus)
from relaxbench.validation import PROJECT_ROOT


def package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def load_average() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def git_revision() -> str | None:
    """HEAD of the source checkout, with '+dirty' when it has uncommitted changes; None outside a checkout."""
    try:
        head = subprocess.run(["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(PROJECT_ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return None


def gpu_driver() -> str | None:
    """The NVIDIA driver version (``nvidia-smi``), or None without one."""
    try:
        found = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = found.stdout.split()
    return lines[0] if found.returncode == 0 and lines else None


def describe_environment(target: Any, draft: Any | None, device: str, argv: list[str] | None = None,
                         executor: str = "in-process") -> dict[str, Any]:
    """Device, dtype per model, threads, library versions, CPU, GPUs and driver, host, git revision, date, command
    line and executor: what tells two sessions' setups apart (a Ray worker records its own)."""
    import torch

    from relaxbench.decoding.bf16_rows import wide_rows_in_fp32
    from relaxbench.decoding.cache import kv_settings

    cuda = device.startswith("cuda")
    env: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["relaxbench", *(sys.argv[1:] if argv is None else argv)]),
        "device": device,
        "target": target.describe(),
        "draft": draft.describe() if draft is not None else None,
        "target_dtype": str(target.dtype).removeprefix("torch."),
        "draft_dtype": str(draft.dtype).removeprefix("torch.") if draft is not None else None,
        "threads": torch.get_num_threads(),
        "cpu_model": cpu_model(),
        "cpu_flags": sorted(cpu_flags()),  # what a -march=native build and the bf16 defaults depend on
        "cpu_flags_override": flags_override(),  # $RELAXBENCH_CPU_FLAGS, when it replaced the CPU's own flags
        "isa_limits": isa_limits(),  # the math libraries' and torch's code-path switches, when set
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # the vector ISA torch's own kernels run
        # the models whose forwards of FP32_ROWS_FROM tokens or more compute their linear layers in fp32
        "fp32_wide_rows": [role for role, loaded in (("target", target), ("draft", draft))
                           if getattr(loaded, "model", None) is not None and wide_rows_in_fp32(loaded.model)],
        "cpu_count": os.cpu_count(),
        "load_average": load_average(),  # 1/5/15-min, at the session's start (relaxbench's own work included)
        # CPUs other processes kept busy over a short window at the session's start (relaxbench's tree left out):
        # what the busy-machine notice judges
        "others_busy_cpus": others_busy_cpus(),
        "others_window_s": OTHERS_WINDOW_S,
        "gpu": torch.cuda.get_device_name(torch.device(device)) if cuda else None,
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "gpu_driver": gpu_driver() if cuda else None,
        "cuda": torch.version.cuda if cuda else None,
        "device_map": getattr(target.model, "hf_device_map", None),  # where each part of the target sits
        # the transformers engine's decode path (--kv-cache, --graphs): speed, not outputs, so not in the run key
        **kv_settings().describe(),
        "executor": executor,
        "pid": os.getpid(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "git_revision": git_revision(),
    }
    for package in ("torch", "transformers", "accelerate", "relaxbench", "datasets", "scipy", "numpy"):
        env[package] = package_version(package)
    env["torch"] = torch.__version__
    return env
