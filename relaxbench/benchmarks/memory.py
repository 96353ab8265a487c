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


# Linux keeps a process's peak RSS across exec, so a child forked from a large process (a test worker holding
# models) reports the parent's peak; a small launcher forks the command from a fresh, small address space and
# reports the command's own ``ru_maxrss`` (KiB) through a file.
_LAUNCHER = (
    "import os, sys\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.execvp(sys.argv[2], sys.argv[2:])\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "open(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def peak_rss_of(command: tuple[str, ...], quiet: bool = True) -> MemoryRun:
    """Run ``command`` to completion; return its exit code and its own peak RSS (``ru_maxrss``)."""
    import tempfile

    start = time.perf_counter()
    out = subprocess.DEVNULL if quiet else None
    with tempfile.TemporaryDirectory(prefix="relaxbench-rss-") as folder:
        report = os.path.join(folder, "maxrss")
        process = subprocess.Popen((sys.executable, "-c", _LAUNCHER, report, *command), stdout=out,
                                   stderr=subprocess.PIPE if quiet else None, text=True)
        stderr = process.stderr.read() if process.stderr else ""
        process.wait()
        kib = int(open(report).read() or 0) if os.path.exists(report) else 0
    if process.returncode != 0 and stderr:
        sys.stderr.write(stderr[-2000:])
    return MemoryRun(command, process.returncode, kib / 2**20, time.perf_counter() - start)
