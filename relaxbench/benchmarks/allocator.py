"""The C allocator a CPU benchmark's process runs under: glibc's malloc told to keep the memory it frees.

By default glibc hands a freed block of more than its trim threshold back to the kernel (and serves large requests
with fresh ``mmap`` pages; every block over 32 MiB is one), so the next allocation of that size faults its pages in
again, one fault per 4 KiB. A batched decision makes tens of intermediate tensors of a batch's rows; at a real
vocabulary they are hundreds of megabytes each, and the faults are half of a sampling rule's step, none of it the
rule's arithmetic and none of it paid on a GPU (its caching allocator keeps freed blocks). vLLM's CPU backend preloads tcmalloc into its workers for the same reason. Telling glibc to keep
what it frees makes a CPU benchmark time the rule, not the kernel's page-fault path; it changes where blocks come
from and nothing else: every result is the same.

It is a process setting made through glibc's public ``mallopt``, for benchmarks only (the engines and runs keep the
allocator the user's process has); where the C library is not glibc it does nothing and says so. Its price is
memory: a heap that never shrinks and never maps a large block on its own fragments, so a run whose tensors are
gigabytes each (``bench verify`` at V = 151,936 and B = 256) holds far more than it uses; it is opt-in for that
reason.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["ALLOCATORS", "KEPT", "SYSTEM", "keep_freed_memory", "use"]

KEPT = "kept"  # glibc keeps freed memory
SYSTEM = "system"  # the C library's own defaults (the benchmarks' default)
ALLOCATORS = (KEPT, SYSTEM)

# mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_INT_MAX = 2**31 - 1


def use(choice: str) -> str:
    """Put this process under the allocator ``choice`` (one of ``ALLOCATORS``); returns what is in effect, in words,
    for the benchmark's header."""
    return keep_freed_memory() if choice == KEPT else "the C library's default malloc"


def keep_freed_memory() -> str:
    """Make this process's malloc keep freed memory for reuse: no trimming of the heap's top (the trim threshold at
    its largest) and no ``mmap`` for large blocks (every block from the heap, so a freed one is reused, not unmapped).
    Returns what is in effect, in words, for the benchmark's header."""
    libc = _glibc()
    if libc is None:
        return "the C library's own malloc (not glibc: left as it is)"
    if libc.mallopt(_M_TRIM_THRESHOLD, _INT_MAX) != 1 or libc.mallopt(_M_MMAP_MAX, 0) != 1:
        return "glibc's default malloc (mallopt refused the settings)"
    return "glibc malloc keeping freed memory (no trim, no mmap)"


def _glibc() -> ctypes.CDLL | None:
    """The process's C library when it is glibc (it has ``gnu_get_libc_version`` and ``mallopt``), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    libc.mallopt.restype = ctypes.c_int
    return libc
