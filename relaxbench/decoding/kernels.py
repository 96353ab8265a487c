"""Native greedy reductions (``kernels.c``): compiled once per machine, loaded with ctypes, torch as the fallback.

A greedy verification round reads the target's [k+1, V] logits for each row's maximum, first argmax and chunk
maxima, and for a relaxed row its softmax normaliser. torch spreads that over several passes and many small ops
(0.5–1.2 ms a round at V = 152k on two cores, against a 0.5 ms budget); the C kernels read each needed row once.
They are built with the system C compiler (``$CC``, else ``cc``/``gcc``/``clang``) on first use into
``$RELAXBENCH_CACHE/kernels``, keyed by the source, the compiler and the CPU, so a cached build is never loaded on
a CPU it was not built for.

Which implementation runs is the *kernel backend*: ``RELAXBENCH_KERNELS`` = ``auto`` (default: native when it
builds, else torch, saying so in one line on stderr), ``native`` (an error when it cannot build) or ``torch``;
``use_backend`` sets it for a block of code (benchmarks, tests). The torch code in ``sampling.py`` is the
reference: tests hold the native results to it. Inputs the kernels do not take (not float32, not on the CPU, last
dimension strided) and rows holding a NaN always go to torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import torch

from relaxbench.errors import ConfigError

BACKENDS = ("auto", "native", "torch")
SOURCE = Path(__file__).with_name("kernels.c")
LANES = 16  # kernels.c reads rows 4 × 16 floats at a time; chunk widths must be multiples of 64

_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_failure: str | None = None  # why the native kernels could not be built or loaded (once known)
_backend: str | None = None  # set by use_backend; None: RELAXBENCH_KERNELS
_built_path: Path | None = None  # the loaded library


def backend() -> str:
    """The requested backend: ``use_backend``'s, else ``$RELAXBENCH_KERNELS``, else ``auto``."""
    name = _backend or os.environ.get("RELAXBENCH_KERNELS", "auto").strip().lower() or "auto"
    if name not in BACKENDS:
        raise ConfigError(f"RELAXBENCH_KERNELS={name!r} is not one of {', '.join(BACKENDS)}")
    return name


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Run a block with the kernel backend ``name`` (auto | native | torch)."""
    global _backend
    if name not in BACKENDS:
        raise ConfigError(f"kernel backend {name!r} is not one of {', '.join(BACKENDS)}")
    previous, _backend = _backend, name
    try:
        yield
    finally:
        _backend = previous


def active_backend() -> str:
    """What greedy reductions run on now: 'native' or 'torch' (building the kernels if that is still to do)."""
    return "native" if _native() is not None else "torch"


def describe() -> str:
    """One line for run environments and ``relaxbench kernels``: the backend in use and why."""
    if backend() == "torch":
        return "torch (RELAXBENCH_KERNELS=torch)"
    try:
        active = active_backend()
    except ConfigError as exc:
        return f"unavailable: {exc}"
    if active == "native":
        return f"native ({_built_path})"
    return f"torch (native unavailable: {_failure})"


def unavailable_reason() -> str | None:
    """Why the native kernels are not in use (None when they are, or have not been asked for yet)."""
    return _failure


def _native() -> ctypes.CDLL | None:
    name = backend()
    if name == "torch":
        return None
    library = _library if _library is not None or _failure is not None else _load()
    if library is None and name == "native":
        raise ConfigError(f"native kernels unavailable: {_failure} (set RELAXBENCH_KERNELS=torch to use torch)")
    return library


def _load() -> ctypes.CDLL | None:
    global _library, _failure, _built_path
    with _lock:
        if _library is not None or _failure is not None:
            return _library
        try:
            _built_path = build()
            library = ctypes.CDLL(str(_built_path))
        except (OSError, RuntimeError) as exc:
            _failure = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if backend() == "auto":  # one line, once per process
                print(f"relaxbench: native greedy kernels unavailable ({_failure}); the policies use torch "
                      "(slower decisions, same verdicts up to float rounding)", file=sys.stderr)
            return None
        _declare(library)
        _library = library
        return library


def _declare(library: ctypes.CDLL) -> None:
    p, i64, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
    library.rb_row_reductions.restype = i64
    library.rb_row_reductions.argtypes = [p, i64, i64, i64, i64, i64, i64, p, i64, ctypes.c_int, p, p, p, p]
    library.rb_top_values.restype = ctypes.c_int
    library.rb_top_values.argtypes = [p, i64, i64, p, i64, p]
    library.rb_fused_argmax.restype = i64
    library.rb_fused_argmax.argtypes = [p, p, i64, f32, f32, p]
    library.rb_softmax_sums.restype = None
    library.rb_softmax_sums.argtypes = [p, i64, f32, i64, p, p]


def _cpu_identity() -> str:
    """What a ``-march=native`` build depends on: the architecture and the CPU's feature flags."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            flags = next((line for line in info if line.startswith(("flags", "Features"))), "")
    except OSError:
        flags = ""
    return f"{platform.machine()}|{platform.processor()}|{flags.strip()}"


def compiler() -> str | None:
    """The C compiler to build with: ``$CC``, else ``cc``/``gcc``/``clang`` on PATH."""
    if os.environ.get("CC"):
        return shutil.which(os.environ["CC"].split()[0]) and os.environ["CC"]
    return next((cc for cc in ("cc", "gcc", "clang") if shutil.which(cc)), None)


def build(cache_dir: Path | None = None) -> Path:
    """Compile ``kernels.c`` into the cache (once per source, compiler and CPU) and return the library's path."""
    from relaxbench.models.zoo import cache_root

    cc = compiler()
    if cc is None:
        if os.environ.get("CC"):
            raise RuntimeError(f"$CC={os.environ['CC']!r} is not an executable")
        raise RuntimeError("no C compiler found (install gcc or clang, or set $CC)")
    source = SOURCE.read_bytes()
    # OpenMP shares rows over threads; -march=native picks the CPU's vector width. Not every compiler/target has
    # both (e.g. Apple clang has no -fopenmp), so fall back step by step: the kernels are correct serially too.
    flag_sets = (["-O3", "-march=native", "-fopenmp"], ["-O3", "-march=native"], ["-O3"])
    key = hashlib.sha256(b"\0".join([source, cc.encode(), _cpu_identity().encode()])).hexdigest()[:16]
    target = (cache_dir or cache_root()) / "kernels" / f"greedy-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    for flags in flag_sets:
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            partial = Path(tmp) / target.name
            command = [*cc.split(), *flags, "-fPIC", "-shared", "-o", str(partial), str(SOURCE), "-lm"]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=120)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise RuntimeError(f"C compiler {cc!r} failed to run: {exc}") from None
            if done.returncode == 0:
                os.replace(partial, target)  # atomic: concurrent builders each install a complete file
                return target
            errors.append((done.stderr or done.stdout).strip().splitlines()[:1])
    detail = next((line[0] for line in errors if line), "no message")
    raise RuntimeError(f"compiling {SOURCE.name} with {cc!r} failed: {detail}")


def _takes(logits: torch.Tensor) -> bool:
    return (logits.dtype == torch.float32 and logits.device.type == "cpu" and logits.dim() >= 1
            and logits.shape[-1] > 0 and logits.numel() > 0 and logits.stride(-1) == 1)


def _rows(logits: torch.Tensor) -> torch.Tensor | None:
    """``logits`` as [R, V] rows with unit stride along V (a view), or None when that needs a copy."""
    if logits.dim() == 2:
        return logits
    try:
        return logits.view(-1, logits.shape[-1])
    except RuntimeError:
        return None


class RowScan:
    """Greedy reductions (max, first argmax, chunk maxima, the draft's logit) of the rows of one [R, V] logits
    tensor, computed in row order and only as far as asked: a greedy verdict never reads the rows after its first
    rejection. Results live in ctypes arrays, so a verdict reads them as Python numbers without a tensor op;
    ``tensors`` views them as tensors (no copy)."""

    def __init__(self, library: ctypes.CDLL, logits: torch.Tensor, drafts: torch.Tensor | None, chunk: int):
        self.library, self.logits, self.chunk = library, logits, chunk
        self.drafts = None if drafts is None else drafts.to(torch.int64).contiguous()
        self.n_drafts = 0 if drafts is None else int(drafts.shape[0])
        self.rows, self.vocab = int(logits.shape[0]), int(logits.shape[1])
        self.n_chunks = -(-self.vocab // chunk)
        self.row_max = (ctypes.c_float * self.rows)()
        self.argmax = (ctypes.c_int64 * self.rows)()
        self.maxima = (ctypes.c_float * (self.rows * self.n_chunks))()
        self.draft_logit = (ctypes.c_float * max(self.n_drafts, 1))()
        self.done = 0  # rows [0, done) are computed

    def extend(self, stop_at_mismatch: bool) -> bool:
        """Compute rows from ``done`` on: to the end, or (``stop_at_mismatch``) through the first row whose argmax
        differs from its draft. False when the torch path must answer instead (a NaN, a thread not started)."""
        end = self.library.rb_row_reductions(
            self.logits.data_ptr(), self.done, self.rows, self.logits.stride(0), self.vocab, self.chunk,
            torch.get_num_threads(),
            None if self.drafts is None else self.drafts.data_ptr(), self.n_drafts, int(stop_at_mismatch),
            self.row_max, self.argmax, self.maxima, self.draft_logit)
        if end < 0:
            return False
        self.done = int(end)
        return True

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(row max [R], argmax [R], chunk maxima [R, chunks]) as tensors sharing the scan's memory."""
        return (torch.frombuffer(self.row_max, dtype=torch.float32),
                torch.frombuffer(self.argmax, dtype=torch.int64),
                torch.frombuffer(self.maxima, dtype=torch.float32).view(self.rows, self.n_chunks))

    def softmax_sums(self, row: int, row_max: float) -> tuple[float, float]:
        """``row_softmax_sums`` of row ``row`` (the scan has checked the layout already)."""
        return _softmax_sums(self.library, self.logits[row], row_max)

    def top_values(self, row: int, n: int) -> list[float] | None:
        """The n largest values of computed row ``row``, descending, or None (n over 64: torch answers)."""
        out = (ctypes.c_float * n)()
        maxima = ctypes.addressof(self.maxima) + 4 * row * self.n_chunks
        status = self.library.rb_top_values(self.logits[row].data_ptr(), self.vocab, self.chunk, maxima, n, out)
        return list(out) if status == 0 else None


def start_scan(logits: torch.Tensor, drafts: torch.Tensor | None, chunk: int) -> RowScan | None:
    """A ``RowScan`` of ``logits`` [R, V], or None when the torch path must answer (backend, dtype, device,
    layout, an unsupported chunk)."""
    if chunk % (4 * LANES) or not _takes(logits) or logits.dim() != 2:
        return None
    if drafts is not None and (drafts.device.type != "cpu" or drafts.dim() != 1 or drafts.shape[0] >= logits.shape[0]):
        return None
    library = _native()
    return None if library is None else RowScan(library, logits, drafts, chunk)


def row_reductions(logits: torch.Tensor, chunk: int
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(row max [...], first argmax [...], chunk maxima [R, ceil(V/chunk)]) of ``logits`` [..., V] in one read,
    or None when the torch path must answer (backend, dtype, device, layout, a NaN, an unsupported chunk)."""
    rows = _rows(logits) if _takes(logits) else None
    scan = start_scan(rows, None, chunk) if rows is not None else None
    if scan is None or not scan.extend(stop_at_mismatch=False):
        return None
    row_max, argmax, maxima = scan.tensors()
    shape = logits.shape[:-1]
    return row_max.view(shape), argmax.view(shape), maxima


def fused_argmax(x: torch.Tensor, y: torch.Tensor, a: float, b: float) -> int | None:
    """First index of the maximum of ``a·x + b·y`` for two [V] rows, or None when torch must answer."""
    if not (_takes(x) and _takes(y) and x.dim() == 1 and x.shape == y.shape):
        return None
    library = _native()
    if library is None:
        return None
    has_nan = ctypes.c_int32(0)
    index = library.rb_fused_argmax(x.data_ptr(), y.data_ptr(), int(x.shape[0]), a, b, ctypes.byref(has_nan))
    return None if index < 0 or has_nan.value else int(index)


def row_softmax_sums(row: torch.Tensor, row_max: float) -> tuple[float, float] | None:
    """(S, T) of one [V] row with ``s = z − row_max``: ``S = Σ e^s``, ``T = Σ e^s·s`` (in double), or None when
    torch must answer."""
    if not (_takes(row) and row.dim() == 1):
        return None
    library = _native()
    return None if library is None else _softmax_sums(library, row, row_max)


def _softmax_sums(library: ctypes.CDLL, row: torch.Tensor, row_max: float) -> tuple[float, float]:
    total, weighted = ctypes.c_double(), ctypes.c_double()
    library.rb_softmax_sums(row.data_ptr(), int(row.shape[0]), row_max, torch.get_num_threads(),
                            ctypes.byref(total), ctypes.byref(weighted))
    return total.value, weighted.value
