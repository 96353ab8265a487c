"""Memory benchmark: the peak resident set size of a real ``relaxbench compare`` run, read from the kernel.

The run is a child process (``python -m relaxbench compare ...``), so its peak RSS is exactly what ``wait4``
reports for it: both models, caches, the policy's tensors, the store and the report. Sandboxed code-execution
children are separate processes and are not counted (they are limited on their own).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

MEMORY_TARGET_GIB = 8.0


@dataclass(frozen=True)
class MemoryRun:
    command: tuple[str, ...]
    exit_code: int
    peak_rss_gib: float
    wall_s: float

    @property
    def holds(self) -> bool:
        return self.exit_code == 0 and self.peak_rss_gib < MEMORY_TARGET_GIB


def compare_command(args: list[str]) -> tuple[str, ...]:
    return (sys.executable, "-m", "relaxbench", "compare", *args)


def peak_rss_of(command: tuple[str, ...], quiet: bool = True) -> MemoryRun:
    """Run ``command`` to completion; return its exit code and peak RSS (``ru_maxrss``, KiB on Linux)."""
    start = time.perf_counter()
    out = subprocess.DEVNULL if quiet else None
    process = subprocess.Popen(command, stdout=out, stderr=subprocess.PIPE if quiet else None, text=True)
    stderr = process.stderr.read() if process.stderr else ""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0 and stderr:
        sys.stderr.write(stderr[-2000:])
    return MemoryRun(command, process.returncode, usage.ru_maxrss / 2**20, time.perf_counter() - start)
